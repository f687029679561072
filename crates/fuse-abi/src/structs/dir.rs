//! Operations on names and directories: MKNOD, MKDIR, RENAME, LINK, the
//! xattr operations, ACCESS and the READDIR(PLUS) records. Apart from the
//! open-file operations because they address an inode, not a file handle.

use super::EntryOut;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

abi_structs! {
    /// MKNOD argument (`struct fuse_mknod_in`), followed by the name.
    pub struct MknodIn {
        /// File type and permission bits.
        pub mode: u32,
        /// Device number.
        pub rdev: u32,
        /// The caller's umask.
        pub umask: u32,
        /// Padding.
        pub padding: u32,
    }

    /// MKDIR argument (`struct fuse_mkdir_in`), followed by the name.
    pub struct MkdirIn {
        /// Permission bits.
        pub mode: u32,
        /// The caller's umask.
        pub umask: u32,
    }

    /// RENAME argument (`struct fuse_rename_in`), followed by both names.
    pub struct RenameIn {
        /// Node id of the new parent.
        pub newdir: u64,
    }

    /// RENAME2 argument (`struct fuse_rename2_in`), followed by both names.
    pub struct Rename2In {
        /// Node id of the new parent.
        pub newdir: u64,
        /// [`crate::RenameFlags`].
        pub flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// LINK argument (`struct fuse_link_in`), followed by the new name.
    pub struct LinkIn {
        /// Node id of the existing inode.
        pub oldnodeid: u64,
    }

    /// SETXATTR argument (`struct fuse_setxattr_in`), followed by the name and value.
    ///
    /// Without `FUSE_SETXATTR_EXT` only the first [`crate::COMPAT_SETXATTR_IN_SIZE`]
    /// bytes are sent.
    pub struct SetxattrIn {
        /// Size of the value.
        pub size: u32,
        /// setxattr(2) flags (`XATTR_CREATE`, `XATTR_REPLACE`).
        pub flags: u32,
        /// [`crate::SetxattrFlags`].
        pub setxattr_flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// GETXATTR and LISTXATTR argument (`struct fuse_getxattr_in`).
    pub struct GetxattrIn {
        /// Size of the caller's buffer (0: ask for the size).
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to a size query of GETXATTR or LISTXATTR (`struct fuse_getxattr_out`).
    pub struct GetxattrOut {
        /// Size of the value or list.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// ACCESS argument (`struct fuse_access_in`).
    pub struct AccessIn {
        /// [`crate::AccessMask`].
        pub mask: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Fixed part of a READDIR entry (`struct fuse_dirent`), followed by the
    /// name and padding to 8 bytes.
    pub struct Dirent {
        /// Inode number.
        pub ino: u64,
        /// Cookie of the next entry.
        pub off: u64,
        /// Length of the name.
        pub namelen: u32,
        /// `DT_*` type.
        pub r#type: u32,
    }

    /// Fixed part of a READDIRPLUS entry (`struct fuse_direntplus`).
    pub struct Direntplus {
        /// The entry, as LOOKUP would reply it.
        pub entry_out: EntryOut,
        /// The directory entry.
        pub dirent: Dirent,
    }
}
