//! Building the SQEs of FUSE-over-io_uring commands.
//!
//! Every command is an `IORING_OP_URING_CMD` on the connection's
//! `/dev/fuse` descriptor (registered as fixed file 0 of each ring) with a
//! [`UringCmdReq`] in the SQE's 80-byte command area. REGISTER also passes
//! an array of two iovecs (entry headers, payload) in `sqe->addr` with
//! `sqe->len == 2`; the kernel rejects any other count.

use fuse_abi::uring::{CmdFlags, UringBufpool, UringCmd, UringCmdArg, UringCmdReq};
use io_uring::{opcode, squeue, types};
use zerocopy::IntoBytes;

/// The `/dev/fuse` descriptor as fixed file 0 of every ring.
pub const DEV_FIXED: types::Fixed = types::Fixed(0);

/// Number of iovecs of a REGISTER command (`FUSE_URING_IOV_SEGS`).
pub const REGISTER_IOVECS: u32 = 2;

/// Byte offset of `len` in `struct io_uring_sqe` (uapi `io_uring.h`:
/// opcode, flags, ioprio, fd, off, addr, then `__u32 len`).
const SQE_LEN_OFFSET: usize = 24;

/// Byte offset of `uring_cmd_flags` (the union after `len`).
const SQE_CMD_FLAGS_OFFSET: usize = 28;

/// Byte offset of `buf_index` (`__u16`, after `user_data`).
const SQE_BUF_INDEX_OFFSET: usize = 40;

/// `IORING_URING_CMD_FIXED`: the command names a registered buffer by
/// `sqe->buf_index`.
const IORING_URING_CMD_FIXED: u32 = 1 << 0;

/// The slot of a ring's registered buffer table that holds the buffer
/// pools (the whole pool mapping, every queue's pool in it).
pub const POOL_BUF_INDEX: u16 = 0;

const _: () = assert!(size_of::<squeue::Entry128>() == 128);
const _: () = assert!(size_of::<UringCmdReq>() <= 80);

/// Sets `sqe->len`, which the crate's `UringCmd80` builder leaves 0.
fn set_len(entry: &mut squeue::Entry128, len: u32) {
    // SAFETY: `Entry128` is `#[repr(C)]` over the kernel's 64-byte
    // `io_uring_sqe` followed by 64 more bytes (asserted 128 above), so it
    // may be viewed as bytes; every bit pattern is valid for both types.
    let bytes = unsafe { &mut *(entry as *mut squeue::Entry128).cast::<[u8; 128]>() };
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
}

/// Sets `IORING_URING_CMD_FIXED` and `sqe->buf_index = index`: a command
/// on a queue whose pool is registered (ADD_BUFPOOL, and then every
/// REGISTER and COMMIT_AND_FETCH of the queue, which the kernel refuses
/// without them: `fuse_uring_cmd_index_ok`).
fn set_fixed(entry: &mut squeue::Entry128, index: u16) {
    // SAFETY: as in `set_len`.
    let bytes = unsafe { &mut *(entry as *mut squeue::Entry128).cast::<[u8; 128]>() };
    bytes[SQE_CMD_FLAGS_OFFSET..SQE_CMD_FLAGS_OFFSET + 4]
        .copy_from_slice(&IORING_URING_CMD_FIXED.to_ne_bytes());
    bytes[SQE_BUF_INDEX_OFFSET..SQE_BUF_INDEX_OFFSET + 2].copy_from_slice(&index.to_ne_bytes());
}

/// The SQE of command `op`; `fixed`: the queue's registered pool slot
/// ([`set_fixed`]).
fn command(
    op: UringCmd,
    req: &UringCmdReq,
    addr: Option<u64>,
    len: u32,
    user_data: u64,
    fixed: Option<u16>,
) -> squeue::Entry128 {
    let mut area = [0u8; 80];
    area[..size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
    let mut entry = opcode::UringCmd80::new(DEV_FIXED, op as u32)
        .cmd(area)
        .addr(addr)
        .build()
        .user_data(user_data);
    if len != 0 {
        set_len(&mut entry, len);
    }
    if let Some(index) = fixed {
        set_fixed(&mut entry, index);
    }
    entry
}

/// REGISTER: hands the kernel an entry's iovecs (`[headers, payload]`;
/// with a buffer pool the payload iovec is `{NULL, 0}`).
///
/// The iovec array must stay valid until the SQE is submitted (the kernel
/// imports it during `io_uring_enter`); the memory it points to must stay
/// valid until the kernel has given the entry back.
///
/// `fixed`: the queue's pool is registered at that slot of the ring's
/// buffer table. `zero_copy_slot`: the queue has zero copy, and the
/// kernel registers a zero-copy request's pages at that (empty) slot of
/// the ring's buffer table (`ent_zero_copy_buf_index`); `None` leaves the
/// field 0, as a queue without zero copy requires.
pub fn register(
    qid: u16,
    iovecs: *const [libc::iovec; 2],
    user_data: u64,
    fixed: Option<u16>,
    zero_copy_slot: Option<u16>,
) -> squeue::Entry128 {
    let req = UringCmdReq {
        qid,
        arg: zero_copy_slot.map_or_else(UringCmdArg::default, |slot| {
            UringCmdArg::from_ent_zero_copy_buf_index(slot)
        }),
        ..UringCmdReq::default()
    };
    command(
        UringCmd::Register,
        &req,
        Some(iovecs as u64),
        REGISTER_IOVECS,
        user_data,
        fixed,
    )
}

/// A REGISTER the kernel must refuse (`sqe->len` 0): a refused REGISTER
/// turns io_uring off for the connection (`fch->io_uring = 0`) and wakes
/// the requests blocked waiting for the ring to become ready, which then
/// go to `/dev/fuse`.
pub fn register_refused_on_purpose(user_data: u64) -> squeue::Entry128 {
    command(
        UringCmd::Register,
        &UringCmdReq::default(),
        None,
        0,
        user_data,
        None,
    )
}

/// COMMIT_AND_FETCH: commits the reply written in the entry (identified by
/// `commit_id`) and makes the entry wait for the next request.
/// `fixed` as for [`register`].
pub fn commit_and_fetch(
    qid: u16,
    commit_id: u64,
    user_data: u64,
    fixed: Option<u16>,
) -> squeue::Entry128 {
    let req = UringCmdReq {
        qid,
        commit_id,
        ..UringCmdReq::default()
    };
    command(UringCmd::CommitAndFetch, &req, None, 0, user_data, fixed)
}

/// ADD_QUEUE (7.46): creates queue `qid` so that a pool can be added before
/// any entry registers; with `zero_copy`, a queue whose READ and WRITE of
/// files opened with `FOPEN_IO_URING_ZERO_COPY` come as registered pages
/// (`FUSE_URING_ZERO_COPY`: the kernel wants `CAP_SYS_ADMIN`, else `EPERM`).
pub fn add_queue(qid: u16, user_data: u64, zero_copy: bool) -> squeue::Entry128 {
    let req = UringCmdReq {
        qid,
        flags: if zero_copy {
            CmdFlags::ZERO_COPY.bits()
        } else {
            0
        },
        ..UringCmdReq::default()
    };
    command(UringCmd::AddQueue, &req, None, 0, user_data, None)
}

/// ADD_BUFPOOL (7.46): gives queue `qid` the pool at `uaddr`, `len` bytes
/// (cut by the kernel into `len / max_payload_sz` buffers). With `fixed`,
/// the pool is registered: every ring serving the queue has the pool's
/// memory, from the same addresses, at that slot of its buffer table, and
/// the kernel imports payloads through it instead of pinning user pages
/// per request.
pub fn add_bufpool(
    qid: u16,
    uaddr: u64,
    len: u32,
    user_data: u64,
    fixed: Option<u16>,
) -> squeue::Entry128 {
    let req = UringCmdReq {
        qid,
        arg: UringCmdArg::from_bufpool(UringBufpool {
            uaddr,
            len,
            reserved: 0,
        }),
        ..UringCmdReq::default()
    };
    command(UringCmd::AddBufpool, &req, None, 0, user_data, fixed)
}

/// A one-shot poll for readability of `fd` (the thread's wake eventfd).
pub fn poll_readable(fd: std::os::fd::RawFd, user_data: u64) -> squeue::Entry128 {
    opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
        .build()
        .user_data(user_data)
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_pool_commands_carry_fixed_and_the_index() {
        let iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        for e in [
            register(1, &iov, 2, Some(7), None),
            commit_and_fetch(1, 3, 4, Some(7)),
            add_bufpool(1, 0x1000, 4096, 5, Some(7)),
        ] {
            let b = bytes(&e);
            assert_eq!(u32::from_ne_bytes(b[28..32].try_into().unwrap()), 1);
            assert_eq!(u16::from_ne_bytes(b[40..42].try_into().unwrap()), 7);
            // The rest of the SQE as without: the opcode, fixed file 0.
            assert_eq!(b[0], io_uring::opcode::UringCmd80::CODE);
            assert_eq!(b[1] & 1, 1);
        }
    }

    fn bytes(entry: &squeue::Entry128) -> [u8; 128] {
        // SAFETY: as in `set_len`: a repr(C) 128-byte value viewed as bytes.
        unsafe { *(entry as *const squeue::Entry128).cast::<[u8; 128]>() }
    }

    #[test]
    fn register_sqe_layout() {
        let iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let e = register(3, &iov, 0x55, None, None);
        let b = bytes(&e);
        assert_eq!(b[0], io_uring::opcode::UringCmd80::CODE);
        // fd: fixed file 0 with IOSQE_FIXED_FILE.
        assert_eq!(b[1] & 1, 1);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), 0);
        // cmd_op in the `off` union.
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 1);
        assert_eq!(
            u64::from_ne_bytes(b[16..24].try_into().unwrap()),
            &iov as *const _ as u64
        );
        assert_eq!(u32::from_ne_bytes(b[24..28].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(b[32..40].try_into().unwrap()), 0x55);
        // fuse_uring_cmd_req at sqe->cmd (offset 48): qid at +16.
        assert_eq!(u16::from_ne_bytes(b[64..66].try_into().unwrap()), 3);
    }

    #[test]
    fn commit_and_bufpool_sqe_layout() {
        let b = bytes(&commit_and_fetch(1, 0xabcdef, 9, None));
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(u32::from_ne_bytes(b[24..28].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(b[56..64].try_into().unwrap()), 0xabcdef);
        assert_eq!(u16::from_ne_bytes(b[64..66].try_into().unwrap()), 1);

        let b = bytes(&add_bufpool(2, 0x7000_0000, 4 << 20, 1, None));
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 4);
        assert_eq!(u64::from_ne_bytes(b[48..56].try_into().unwrap()), 0);
        assert_eq!(u16::from_ne_bytes(b[64..66].try_into().unwrap()), 2);
        // The union at cmd + 24: uaddr, len, reserved.
        assert_eq!(
            u64::from_ne_bytes(b[72..80].try_into().unwrap()),
            0x7000_0000
        );
        assert_eq!(u32::from_ne_bytes(b[80..84].try_into().unwrap()), 4 << 20);
        assert_eq!(u32::from_ne_bytes(b[84..88].try_into().unwrap()), 0);

        // No FIXED unless asked for: flags and buf_index 0.
        assert_eq!(u32::from_ne_bytes(b[28..32].try_into().unwrap()), 0);
        assert_eq!(u16::from_ne_bytes(b[40..42].try_into().unwrap()), 0);

        let b = bytes(&add_queue(5, 1, false));
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 3);
        assert_eq!(u64::from_ne_bytes(b[48..56].try_into().unwrap()), 0);
        assert_eq!(u16::from_ne_bytes(b[64..66].try_into().unwrap()), 5);
        // FUSE_URING_ZERO_COPY in cmd_req.flags (cmd + 0).
        let b = bytes(&add_queue(5, 1, true));
        assert_eq!(u64::from_ne_bytes(b[48..56].try_into().unwrap()), 1);
    }

    #[test]
    fn zero_copy_register_names_its_slot_and_nothing_else() {
        let iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        // ent_zero_copy_buf_index at cmd + 24 (SQE byte 72), u16.
        let b = bytes(&register(3, &iov, 1, Some(0), Some(17)));
        assert_eq!(u16::from_ne_bytes(b[72..74].try_into().unwrap()), 17);
        assert_eq!(&b[74..88], &[0u8; 14]);
        // Without zero copy the union stays zero: a non-zero index on a
        // queue without zero copy ends io_uring for the connection.
        let b = bytes(&register(3, &iov, 1, Some(0), None));
        assert_eq!(&b[72..88], &[0u8; 16]);
    }
}
