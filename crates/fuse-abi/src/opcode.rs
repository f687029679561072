//! Request opcodes, notification codes and extension types.

/// Declares a `u32` enum with a fallible conversion from the wire value.
///
/// With `=> "NAME"` after each value, also the kernel's name of each
/// (`kernel_name`), so a value and its name are written on one line.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr => $kname:literal ),* $(,)?
        }
    ) => {
        wire_enum! {
            $(#[$meta])*
            pub enum $name { $( $(#[$vmeta])* $variant = $value ),* }
        }

        impl $name {
            /// The kernel's name of the value, e.g. `"FUSE_LOOKUP"`.
            pub const fn kernel_name(self) -> &'static str {
                match self {
                    $( $name::$variant => $kname, )*
                }
            }
        }
    };
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
        Lookup = 1 => "FUSE_LOOKUP",
        /// Drop lookup references (no reply).
        Forget = 2 => "FUSE_FORGET",
        /// Get attributes.
        Getattr = 3 => "FUSE_GETATTR",
        /// Set attributes.
        Setattr = 4 => "FUSE_SETATTR",
        /// Read a symlink.
        Readlink = 5 => "FUSE_READLINK",
        /// Create a symlink.
        Symlink = 6 => "FUSE_SYMLINK",
        /// Create a node.
        Mknod = 8 => "FUSE_MKNOD",
        /// Create a directory.
        Mkdir = 9 => "FUSE_MKDIR",
        /// Remove a file.
        Unlink = 10 => "FUSE_UNLINK",
        /// Remove a directory.
        Rmdir = 11 => "FUSE_RMDIR",
        /// Rename.
        Rename = 12 => "FUSE_RENAME",
        /// Create a hard link.
        Link = 13 => "FUSE_LINK",
        /// Open a file.
        Open = 14 => "FUSE_OPEN",
        /// Read data.
        Read = 15 => "FUSE_READ",
        /// Write data.
        Write = 16 => "FUSE_WRITE",
        /// File system statistics.
        Statfs = 17 => "FUSE_STATFS",
        /// Release an open file.
        Release = 18 => "FUSE_RELEASE",
        /// Sync a file.
        Fsync = 20 => "FUSE_FSYNC",
        /// Set an extended attribute.
        Setxattr = 21 => "FUSE_SETXATTR",
        /// Get an extended attribute.
        Getxattr = 22 => "FUSE_GETXATTR",
        /// List extended attributes.
        Listxattr = 23 => "FUSE_LISTXATTR",
        /// Remove an extended attribute.
        Removexattr = 24 => "FUSE_REMOVEXATTR",
        /// Flush on close.
        Flush = 25 => "FUSE_FLUSH",
        /// Initialize the connection.
        Init = 26 => "FUSE_INIT",
        /// Open a directory.
        Opendir = 27 => "FUSE_OPENDIR",
        /// Read directory entries.
        Readdir = 28 => "FUSE_READDIR",
        /// Release an open directory.
        Releasedir = 29 => "FUSE_RELEASEDIR",
        /// Sync a directory.
        Fsyncdir = 30 => "FUSE_FSYNCDIR",
        /// Test for a POSIX lock.
        Getlk = 31 => "FUSE_GETLK",
        /// Take or release a POSIX lock.
        Setlk = 32 => "FUSE_SETLK",
        /// Take a POSIX lock, waiting.
        Setlkw = 33 => "FUSE_SETLKW",
        /// Check access.
        Access = 34 => "FUSE_ACCESS",
        /// Create and open a file.
        Create = 35 => "FUSE_CREATE",
        /// Interrupt a request (no reply).
        Interrupt = 36 => "FUSE_INTERRUPT",
        /// Map a block (block device backed file systems).
        Bmap = 37 => "FUSE_BMAP",
        /// Connection is shutting down.
        Destroy = 38 => "FUSE_DESTROY",
        /// ioctl(2).
        Ioctl = 39 => "FUSE_IOCTL",
        /// poll(2).
        Poll = 40 => "FUSE_POLL",
        /// Reply to a RETRIEVE notification (no reply).
        NotifyReply = 41 => "FUSE_NOTIFY_REPLY",
        /// Drop many lookup references (no reply).
        BatchForget = 42 => "FUSE_BATCH_FORGET",
        /// fallocate(2).
        Fallocate = 43 => "FUSE_FALLOCATE",
        /// Read directory entries with attributes.
        Readdirplus = 44 => "FUSE_READDIRPLUS",
        /// Rename with flags.
        Rename2 = 45 => "FUSE_RENAME2",
        /// lseek(2) with SEEK_DATA / SEEK_HOLE.
        Lseek = 46 => "FUSE_LSEEK",
        /// copy_file_range(2) (32-bit result).
        CopyFileRange = 47 => "FUSE_COPY_FILE_RANGE",
        /// DAX: set up a mapping.
        Setupmapping = 48 => "FUSE_SETUPMAPPING",
        /// DAX: remove mappings.
        Removemapping = 49 => "FUSE_REMOVEMAPPING",
        /// Sync the file system.
        Syncfs = 50 => "FUSE_SYNCFS",
        /// Create an unnamed temporary file.
        Tmpfile = 51 => "FUSE_TMPFILE",
        /// statx(2).
        Statx = 52 => "FUSE_STATX",
        /// copy_file_range(2) with a 64-bit result.
        CopyFileRange64 = 53 => "FUSE_COPY_FILE_RANGE_64",
        /// CUSE: initialize a character device.
        CuseInit = 4096 => "CUSE_INIT",
        /// Reserved: CUSE_INIT in the wrong byte order.
        CuseInitBswapReserved = 1048576 => "CUSE_INIT_BSWAP_RESERVED",
        /// Reserved: FUSE_INIT in the wrong byte order.
        FuseInitBswapReserved = 436207616 => "FUSE_INIT_BSWAP_RESERVED",
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
