//! Request opcodes, notification codes and extension types.

/// Declares a `u32` enum with a fallible conversion from the wire value.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $(#[$vmeta])* $variant = $value ),* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The value for a wire number, if it is known.
            pub const fn from_u32(value: u32) -> Option<Self> {
                match value {
                    $( $value => Some($name::$variant), )*
                    _ => None,
                }
            }
        }

        impl TryFrom<u32> for $name {
            type Error = u32;
            /// Converts a wire number, handing back an unknown one.
            fn try_from(value: u32) -> Result<Self, u32> {
                Self::from_u32(value).ok_or(value)
            }
        }

        impl From<$name> for u32 {
            fn from(value: $name) -> u32 {
                value as u32
            }
        }
    };
}

wire_enum! {
    /// A request opcode (`enum fuse_opcode`).
    pub enum Opcode {
        /// Look up a name in a directory.
        Lookup = 1,
        /// Drop lookup references (no reply).
        Forget = 2,
        /// Get attributes.
        Getattr = 3,
        /// Set attributes.
        Setattr = 4,
        /// Read a symlink.
        Readlink = 5,
        /// Create a symlink.
        Symlink = 6,
        /// Create a node.
        Mknod = 8,
        /// Create a directory.
        Mkdir = 9,
        /// Remove a file.
        Unlink = 10,
        /// Remove a directory.
        Rmdir = 11,
        /// Rename.
        Rename = 12,
        /// Create a hard link.
        Link = 13,
        /// Open a file.
        Open = 14,
        /// Read data.
        Read = 15,
        /// Write data.
        Write = 16,
        /// File system statistics.
        Statfs = 17,
        /// Release an open file.
        Release = 18,
        /// Sync a file.
        Fsync = 20,
        /// Set an extended attribute.
        Setxattr = 21,
        /// Get an extended attribute.
        Getxattr = 22,
        /// List extended attributes.
        Listxattr = 23,
        /// Remove an extended attribute.
        Removexattr = 24,
        /// Flush on close.
        Flush = 25,
        /// Initialize the connection.
        Init = 26,
        /// Open a directory.
        Opendir = 27,
        /// Read directory entries.
        Readdir = 28,
        /// Release an open directory.
        Releasedir = 29,
        /// Sync a directory.
        Fsyncdir = 30,
        /// Test for a POSIX lock.
        Getlk = 31,
        /// Take or release a POSIX lock.
        Setlk = 32,
        /// Take a POSIX lock, waiting.
        Setlkw = 33,
        /// Check access.
        Access = 34,
        /// Create and open a file.
        Create = 35,
        /// Interrupt a request (no reply).
        Interrupt = 36,
        /// Map a block (block device backed file systems).
        Bmap = 37,
        /// Connection is shutting down.
        Destroy = 38,
        /// ioctl(2).
        Ioctl = 39,
        /// poll(2).
        Poll = 40,
        /// Reply to a RETRIEVE notification (no reply).
        NotifyReply = 41,
        /// Drop many lookup references (no reply).
        BatchForget = 42,
        /// fallocate(2).
        Fallocate = 43,
        /// Read directory entries with attributes.
        Readdirplus = 44,
        /// Rename with flags.
        Rename2 = 45,
        /// lseek(2) with SEEK_DATA / SEEK_HOLE.
        Lseek = 46,
        /// copy_file_range(2) (32-bit result).
        CopyFileRange = 47,
        /// DAX: set up a mapping.
        Setupmapping = 48,
        /// DAX: remove mappings.
        Removemapping = 49,
        /// Sync the file system.
        Syncfs = 50,
        /// Create an unnamed temporary file.
        Tmpfile = 51,
        /// statx(2).
        Statx = 52,
        /// copy_file_range(2) with a 64-bit result.
        CopyFileRange64 = 53,
        /// CUSE: initialize a character device.
        CuseInit = 4096,
        /// Reserved: CUSE_INIT in the wrong byte order.
        CuseInitBswapReserved = 1048576,
        /// Reserved: FUSE_INIT in the wrong byte order.
        FuseInitBswapReserved = 436207616,
    }
}

impl Opcode {
    /// The kernel's name of the opcode, e.g. `"FUSE_LOOKUP"`.
    pub const fn kernel_name(self) -> &'static str {
        match self {
            Opcode::Lookup => "FUSE_LOOKUP",
            Opcode::Forget => "FUSE_FORGET",
            Opcode::Getattr => "FUSE_GETATTR",
            Opcode::Setattr => "FUSE_SETATTR",
            Opcode::Readlink => "FUSE_READLINK",
            Opcode::Symlink => "FUSE_SYMLINK",
            Opcode::Mknod => "FUSE_MKNOD",
            Opcode::Mkdir => "FUSE_MKDIR",
            Opcode::Unlink => "FUSE_UNLINK",
            Opcode::Rmdir => "FUSE_RMDIR",
            Opcode::Rename => "FUSE_RENAME",
            Opcode::Link => "FUSE_LINK",
            Opcode::Open => "FUSE_OPEN",
            Opcode::Read => "FUSE_READ",
            Opcode::Write => "FUSE_WRITE",
            Opcode::Statfs => "FUSE_STATFS",
            Opcode::Release => "FUSE_RELEASE",
            Opcode::Fsync => "FUSE_FSYNC",
            Opcode::Setxattr => "FUSE_SETXATTR",
            Opcode::Getxattr => "FUSE_GETXATTR",
            Opcode::Listxattr => "FUSE_LISTXATTR",
            Opcode::Removexattr => "FUSE_REMOVEXATTR",
            Opcode::Flush => "FUSE_FLUSH",
            Opcode::Init => "FUSE_INIT",
            Opcode::Opendir => "FUSE_OPENDIR",
            Opcode::Readdir => "FUSE_READDIR",
            Opcode::Releasedir => "FUSE_RELEASEDIR",
            Opcode::Fsyncdir => "FUSE_FSYNCDIR",
            Opcode::Getlk => "FUSE_GETLK",
            Opcode::Setlk => "FUSE_SETLK",
            Opcode::Setlkw => "FUSE_SETLKW",
            Opcode::Access => "FUSE_ACCESS",
            Opcode::Create => "FUSE_CREATE",
            Opcode::Interrupt => "FUSE_INTERRUPT",
            Opcode::Bmap => "FUSE_BMAP",
            Opcode::Destroy => "FUSE_DESTROY",
            Opcode::Ioctl => "FUSE_IOCTL",
            Opcode::Poll => "FUSE_POLL",
            Opcode::NotifyReply => "FUSE_NOTIFY_REPLY",
            Opcode::BatchForget => "FUSE_BATCH_FORGET",
            Opcode::Fallocate => "FUSE_FALLOCATE",
            Opcode::Readdirplus => "FUSE_READDIRPLUS",
            Opcode::Rename2 => "FUSE_RENAME2",
            Opcode::Lseek => "FUSE_LSEEK",
            Opcode::CopyFileRange => "FUSE_COPY_FILE_RANGE",
            Opcode::Setupmapping => "FUSE_SETUPMAPPING",
            Opcode::Removemapping => "FUSE_REMOVEMAPPING",
            Opcode::Syncfs => "FUSE_SYNCFS",
            Opcode::Tmpfile => "FUSE_TMPFILE",
            Opcode::Statx => "FUSE_STATX",
            Opcode::CopyFileRange64 => "FUSE_COPY_FILE_RANGE_64",
            Opcode::CuseInit => "CUSE_INIT",
            Opcode::CuseInitBswapReserved => "CUSE_INIT_BSWAP_RESERVED",
            Opcode::FuseInitBswapReserved => "FUSE_INIT_BSWAP_RESERVED",
        }
    }
}

wire_enum! {
    /// A notification code, sent in `fuse_out_header.error` with `unique` 0
    /// (`enum fuse_notify_code`).
    pub enum NotifyCode {
        /// A polled file is ready.
        Poll = 1,
        /// Invalidate an inode's attributes and cached data.
        InvalInode = 2,
        /// Invalidate a directory entry.
        InvalEntry = 3,
        /// Store data in the page cache.
        Store = 4,
        /// Retrieve data from the page cache.
        Retrieve = 5,
        /// A directory entry was deleted.
        Delete = 6,
        /// Resend all pending requests.
        Resend = 7,
        /// Increment the connection epoch (invalidates all dentries).
        IncEpoch = 8,
        /// Drop unused inodes from the cache.
        Prune = 9,
    }
}

wire_enum! {
    /// A request extension type (`enum fuse_ext_type`).
    pub enum ExtType {
        /// Largest security context count; types 0..=31 are secctx headers.
        MaxNrSecctx = 31,
        /// Supplementary groups ([`crate::SuppGroups`]).
        Groups = 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_convert_both_ways() {
        assert_eq!(Opcode::ALL.len(), 54);
        for &op in Opcode::ALL {
            assert_eq!(Opcode::try_from(op as u32), Ok(op));
            assert!(op.kernel_name().starts_with("FUSE_") || op.kernel_name().starts_with("CUSE_"));
        }
        assert_eq!(Opcode::try_from(7), Err(7));
        assert_eq!(Opcode::try_from(19), Err(19));
        assert_eq!(Opcode::try_from(54), Err(54));
        assert_eq!(Opcode::CopyFileRange64 as u32, 53);
        assert_eq!(NotifyCode::Prune as u32, 9);
        assert_eq!(ExtType::Groups as u32, 32);
    }
}
