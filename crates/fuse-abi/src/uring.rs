//! FUSE over io_uring (protocol 7.42 and later; buffer pools since 7.46).
//!
//! A server that negotiated [`crate::InitFlags::OVER_IO_URING`] submits
//! `IORING_OP_URING_CMD` SQEs (128-byte SQEs, `cmd_op` one of [`UringCmd`])
//! on a `/dev/fuse` file descriptor. The SQE's 80-byte command area holds a
//! [`UringCmdReq`]. Each ring entry owns a [`UringReqHeader`] (request and
//! reply headers) and, without buffer pools, a payload buffer; with pools
//! (7.46, [`crate::InitFlags::HAS_IO_URING_BUFPOOL`]) a queue is created with
//! [`UringCmd::AddQueue`], given one pool with [`UringCmd::AddBufpool`], and
//! each request's payload lives in the pool at
//! [`UringEntInOut::offset`].

use bitflags::bitflags;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of the in/out header area of a ring entry (`FUSE_URING_IN_OUT_HEADER_SZ`).
pub const IN_OUT_HEADER_SZ: usize = 128;

/// Size of the per-opcode header area of a ring entry (`FUSE_URING_OP_IN_OUT_SZ`).
pub const OP_IN_OUT_SZ: usize = 128;

bitflags! {
    /// `fuse_uring_ent_in_out.flags` (`FUSE_URING_ENT_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct EntFlags: u64 {
        /// The entry's payload is zero-copied (`FUSE_URING_ENT_ZERO_COPY`).
        const ZERO_COPY = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// `fuse_uring_cmd_req.flags` of ADD_QUEUE (`FUSE_URING_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CmdFlags: u64 {
        /// Zero-copy queue; only with buffer pools on privileged servers
        /// (`FUSE_URING_ZERO_COPY`).
        const ZERO_COPY = 1 << 0;
        const _ = !0;
    }
}

/// Per-entry state the kernel and server exchange (`struct fuse_uring_ent_in_out`).
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct UringEntInOut {
    /// [`EntFlags`].
    pub flags: u64,
    /// Commit id to use in the reply to this request (see [`UringCmdReq::commit_id`]).
    pub commit_id: u64,
    /// Size of the payload: of the request from the kernel, of the reply from the server.
    pub payload_sz: u32,
    /// Offset of this request's payload in the queue's buffer pool (7.46).
    pub offset: u32,
    /// Reserved.
    pub reserved: u64,
}

/// The header block of a ring entry (`struct fuse_uring_req_header`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UringReqHeader {
    /// A `fuse_in_header` from the kernel, or the `fuse_out_header` of the reply.
    pub in_out: [u8; IN_OUT_HEADER_SZ],
    /// The opcode's fixed request header (the first argument), if it has one.
    pub op_in: [u8; OP_IN_OUT_SZ],
    /// Entry state.
    pub ring_ent_in_out: UringEntInOut,
}

impl Default for UringReqHeader {
    fn default() -> Self {
        Self {
            in_out: [0; IN_OUT_HEADER_SZ],
            op_in: [0; OP_IN_OUT_SZ],
            ring_ent_in_out: UringEntInOut::default(),
        }
    }
}

wire_enum! {
    /// A FUSE io_uring command (`enum fuse_uring_cmd`), the SQE's `cmd_op`.
    pub enum UringCmd {
        /// Invalid.
        Invalid = 0 => "FUSE_IO_URING_CMD_INVALID",
        /// Register an entry's buffers and fetch a request.
        Register = 1 => "FUSE_IO_URING_CMD_REGISTER",
        /// Commit a reply and fetch the next request.
        CommitAndFetch = 2 => "FUSE_IO_URING_CMD_COMMIT_AND_FETCH",
        /// Add a queue (7.46).
        AddQueue = 3 => "FUSE_IO_URING_CMD_ADD_QUEUE",
        /// Add a buffer pool to a queue (7.46).
        AddBufpool = 4 => "FUSE_IO_URING_CMD_ADD_BUFPOOL",
    }
}

/// The `bufpool` member of [`UringCmdReq`]'s union.
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct UringBufpool {
    /// Base address of the pool.
    pub uaddr: u64,
    /// Length of the pool in bytes.
    pub len: u32,
    /// Reserved.
    pub reserved: u32,
}

/// The anonymous union at the end of `struct fuse_uring_cmd_req`: either a
/// [`UringBufpool`] (ADD_BUFPOOL) or `ent_zero_copy_buf_index` (REGISTER on a
/// zero-copy queue). Kept as its 16 bytes with typed accessors, so that every
/// byte is initialized whichever member was written.
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct UringCmdArg {
    /// The raw bytes of the union.
    pub bytes: [u8; 16],
}

impl UringCmdArg {
    /// The union holding `bufpool`.
    pub fn from_bufpool(bufpool: UringBufpool) -> Self {
        let mut arg = Self::default();
        arg.bytes.copy_from_slice(bufpool.as_bytes());
        arg
    }

    /// The union holding `ent_zero_copy_buf_index`.
    pub fn from_ent_zero_copy_buf_index(index: u16) -> Self {
        let mut arg = Self::default();
        arg.bytes[..2].copy_from_slice(&index.to_ne_bytes());
        arg
    }

    /// The union read as `bufpool`.
    pub fn bufpool(&self) -> UringBufpool {
        UringBufpool::read_from_bytes(&self.bytes).unwrap_or_default()
    }

    /// The union read as `ent_zero_copy_buf_index`.
    pub fn ent_zero_copy_buf_index(&self) -> u16 {
        u16::from_ne_bytes([self.bytes[0], self.bytes[1]])
    }
}

/// The command in the SQE's 80-byte command area (`struct fuse_uring_cmd_req`).
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct UringCmdReq {
    /// [`CmdFlags`] (ADD_QUEUE).
    pub flags: u64,
    /// Entry identifier for commits (from [`UringEntInOut::commit_id`]).
    pub commit_id: u64,
    /// Queue index.
    pub qid: u16,
    /// Padding.
    pub padding: [u8; 6],
    /// The union (`bufpool` / `ent_zero_copy_buf_index`).
    pub arg: UringCmdArg,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn union_accessors_round_trip() {
        let pool = UringBufpool {
            uaddr: 0x1234_5678_9abc,
            len: 4 << 20,
            reserved: 0,
        };
        let arg = UringCmdArg::from_bufpool(pool);
        assert_eq!(arg.bufpool(), pool);
        let arg = UringCmdArg::from_ent_zero_copy_buf_index(77);
        assert_eq!(arg.ent_zero_copy_buf_index(), 77);
        assert_eq!(&arg.bytes[2..], &[0u8; 14]);
    }

    #[test]
    fn header_layout() {
        assert_eq!(size_of::<UringReqHeader>(), 288);
        assert_eq!(offset_of!(UringReqHeader, ring_ent_in_out), 256);
        assert_eq!(size_of::<UringCmdReq>(), 40);
        assert_eq!(offset_of!(UringCmdReq, arg), 24);
        assert_eq!(UringCmd::from_u32(4), Some(UringCmd::AddBufpool));
        assert_eq!(UringCmd::AddQueue as u32, 3);
        assert_eq!(
            UringCmd::CommitAndFetch.kernel_name(),
            "FUSE_IO_URING_CMD_COMMIT_AND_FETCH"
        );
    }
}
