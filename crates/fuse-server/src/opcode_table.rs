//! The opcode table: each opcode's name and the shape of its reply.

use fuse_abi::Opcode;

/// What a reply to an opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyShape {
    /// The kernel expects no reply (FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY).
    None,
    /// Only the header: the operation has no out arguments (UNLINK, FSYNC, ...).
    Empty,
    /// The header and out arguments (a struct, data, or both).
    OutArgs,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// The kernel's name, e.g. `FUSE_LOOKUP`.
    pub name: &'static str,
    /// What the reply carries.
    pub reply: ReplyShape,
}

impl OpcodeInfo {
    /// The reply carries out arguments (a body after the header).
    pub const fn has_out_args(&self) -> bool {
        matches!(self.reply, ReplyShape::OutArgs)
    }

    /// The kernel waits for a reply.
    pub const fn expects_reply(&self) -> bool {
        !matches!(self.reply, ReplyShape::None)
    }

    /// The request may wait for as long as something outside the file
    /// system decides: SETLKW (a blocking `fcntl` lock or `flock`) waits
    /// until another process lets go. A transport must not let such
    /// requests take the threads or queue slots the rest of the mount needs
    /// (the request that ends the wait, an unlock, comes through the same
    /// mount), and a stop ends them ([`crate::Server::stop_waits`]).
    pub const fn waits_indefinitely(&self) -> bool {
        matches!(self.opcode, Opcode::Setlkw)
    }
}

/// The row of `opcode`.
pub const fn opcode_info(opcode: Opcode) -> OpcodeInfo {
    use Opcode::*;
    let reply = match opcode {
        Forget | BatchForget | Interrupt | NotifyReply => ReplyShape::None,
        Unlink | Rmdir | Rename | Rename2 | Release | Releasedir | Fsync | Fsyncdir | Setxattr
        | Removexattr | Flush | Setlk | Setlkw | Access | Fallocate | Destroy | Syncfs
        | Setupmapping | Removemapping => ReplyShape::Empty,
        Lookup
        | Getattr
        | Setattr
        | Readlink
        | Symlink
        | Mknod
        | Mkdir
        | Link
        | Open
        | Read
        | Write
        | Statfs
        | Getxattr
        | Listxattr
        | Init
        | Opendir
        | Readdir
        | Getlk
        | Create
        | Bmap
        | Ioctl
        | Poll
        | Readdirplus
        | Lseek
        | CopyFileRange
        | CopyFileRange64
        | Tmpfile
        | Statx
        | CuseInit
        | CuseInitBswapReserved
        | FuseInitBswapReserved => ReplyShape::OutArgs,
    };
    OpcodeInfo {
        opcode,
        name: opcode.kernel_name(),
        reply,
    }
}

/// The row of a wire opcode, if it is known.
pub fn opcode_info_raw(opcode: u32) -> Option<OpcodeInfo> {
    Opcode::from_u32(opcode).map(opcode_info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_covers_every_opcode() {
        for &op in Opcode::ALL {
            let info = opcode_info(op);
            assert_eq!(info.opcode, op);
            assert_eq!(info.name, op.kernel_name());
        }
        assert!(!opcode_info(Opcode::Forget).expects_reply());
        assert!(!opcode_info(Opcode::Unlink).has_out_args());
        assert!(opcode_info(Opcode::Unlink).expects_reply());
        assert!(opcode_info(Opcode::Read).has_out_args());
        assert_eq!(opcode_info_raw(7), None);
        let waiting: Vec<Opcode> = Opcode::ALL
            .iter()
            .copied()
            .filter(|&op| opcode_info(op).waits_indefinitely())
            .collect();
        assert_eq!(waiting, [Opcode::Setlkw]);
    }
}
