//! Inodes and their attributes: `fuse_attr`, `fuse_statx`, the entry that
//! LOOKUP and the creating operations reply, FORGET, GETATTR, SETATTR,
//! STATX and the file system's own STATFS and SYNCFS. Apart from the
//! operations on names and open files, which only embed these.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

abi_structs! {
    /// Attributes of an inode (`struct fuse_attr`).
    pub struct Attr {
        /// Inode number.
        pub ino: u64,
        /// Size in bytes.
        pub size: u64,
        /// Number of 512-byte blocks allocated.
        pub blocks: u64,
        /// Last access, seconds.
        pub atime: u64,
        /// Last modification, seconds.
        pub mtime: u64,
        /// Last status change, seconds.
        pub ctime: u64,
        /// Last access, nanoseconds.
        pub atimensec: u32,
        /// Last modification, nanoseconds.
        pub mtimensec: u32,
        /// Last status change, nanoseconds.
        pub ctimensec: u32,
        /// File type and permission bits.
        pub mode: u32,
        /// Number of hard links.
        pub nlink: u32,
        /// Owner.
        pub uid: u32,
        /// Group.
        pub gid: u32,
        /// Device number of a device node.
        pub rdev: u32,
        /// Preferred I/O block size.
        pub blksize: u32,
        /// `FUSE_ATTR_*` flags, see [`crate::AttrFlags`].
        pub flags: u32,
    }

    /// A timestamp in the statx(2) layout (`struct fuse_sx_time`).
    pub struct SxTime {
        /// Seconds.
        pub tv_sec: i64,
        /// Nanoseconds.
        pub tv_nsec: u32,
        /// Reserved (`__reserved`).
        pub reserved: i32,
    }

    /// Extended attributes in the statx(2) layout (`struct fuse_statx`).
    pub struct Statx {
        /// `STATX_*` mask of the valid fields.
        pub mask: u32,
        /// Preferred I/O block size.
        pub blksize: u32,
        /// `STATX_ATTR_*` attributes.
        pub attributes: u64,
        /// Number of hard links.
        pub nlink: u32,
        /// Owner.
        pub uid: u32,
        /// Group.
        pub gid: u32,
        /// File type and permission bits.
        pub mode: u16,
        /// Spare (`__spare0`).
        pub spare0: [u16; 1],
        /// Inode number.
        pub ino: u64,
        /// Size in bytes.
        pub size: u64,
        /// Number of 512-byte blocks allocated.
        pub blocks: u64,
        /// Which `attributes` bits are supported.
        pub attributes_mask: u64,
        /// Last access.
        pub atime: SxTime,
        /// Creation.
        pub btime: SxTime,
        /// Last status change.
        pub ctime: SxTime,
        /// Last modification.
        pub mtime: SxTime,
        /// Major number of a device node.
        pub rdev_major: u32,
        /// Minor number of a device node.
        pub rdev_minor: u32,
        /// Major number of the containing device.
        pub dev_major: u32,
        /// Minor number of the containing device.
        pub dev_minor: u32,
        /// Spare (`__spare2`).
        pub spare2: [u64; 14],
    }

    /// File system statistics (`struct fuse_kstatfs`).
    pub struct Kstatfs {
        /// Total blocks.
        pub blocks: u64,
        /// Free blocks.
        pub bfree: u64,
        /// Free blocks for unprivileged users.
        pub bavail: u64,
        /// Total inodes.
        pub files: u64,
        /// Free inodes.
        pub ffree: u64,
        /// Block size.
        pub bsize: u32,
        /// Longest file name.
        pub namelen: u32,
        /// Fragment size.
        pub frsize: u32,
        /// Padding.
        pub padding: u32,
        /// Spare.
        pub spare: [u32; 6],
    }

    /// Reply to LOOKUP and the entry creating operations (`struct fuse_entry_out`).
    pub struct EntryOut {
        /// Node id (0 means a negative entry).
        pub nodeid: u64,
        /// Generation: nodeid and generation are unique for the file system's lifetime.
        pub generation: u64,
        /// Name cache timeout, seconds.
        pub entry_valid: u64,
        /// Attribute cache timeout, seconds.
        pub attr_valid: u64,
        /// Name cache timeout, nanoseconds.
        pub entry_valid_nsec: u32,
        /// Attribute cache timeout, nanoseconds.
        pub attr_valid_nsec: u32,
        /// Attributes.
        pub attr: Attr,
    }

    /// FORGET argument (`struct fuse_forget_in`).
    pub struct ForgetIn {
        /// Number of lookups to forget.
        pub nlookup: u64,
    }

    /// One entry of a BATCH_FORGET (`struct fuse_forget_one`).
    pub struct ForgetOne {
        /// Node id.
        pub nodeid: u64,
        /// Number of lookups to forget.
        pub nlookup: u64,
    }

    /// BATCH_FORGET header (`struct fuse_batch_forget_in`), followed by `count` [`ForgetOne`].
    pub struct BatchForgetIn {
        /// Number of entries that follow.
        pub count: u32,
        /// Unused.
        pub dummy: u32,
    }

    /// GETATTR argument (`struct fuse_getattr_in`).
    pub struct GetattrIn {
        /// [`crate::GetattrFlags`].
        pub getattr_flags: u32,
        /// Unused.
        pub dummy: u32,
        /// File handle, valid with `FUSE_GETATTR_FH`.
        pub fh: u64,
    }

    /// Reply to GETATTR and SETATTR (`struct fuse_attr_out`).
    pub struct AttrOut {
        /// Attribute cache timeout, seconds.
        pub attr_valid: u64,
        /// Attribute cache timeout, nanoseconds.
        pub attr_valid_nsec: u32,
        /// Unused.
        pub dummy: u32,
        /// Attributes.
        pub attr: Attr,
    }

    /// STATX argument (`struct fuse_statx_in`).
    pub struct StatxIn {
        /// [`crate::GetattrFlags`].
        pub getattr_flags: u32,
        /// Reserved.
        pub reserved: u32,
        /// File handle, valid with `FUSE_GETATTR_FH`.
        pub fh: u64,
        /// `AT_STATX_*` sync flags.
        pub sx_flags: u32,
        /// `STATX_*` mask of wanted fields.
        pub sx_mask: u32,
    }

    /// Reply to STATX (`struct fuse_statx_out`).
    pub struct StatxOut {
        /// Attribute cache timeout, seconds.
        pub attr_valid: u64,
        /// Attribute cache timeout, nanoseconds.
        pub attr_valid_nsec: u32,
        /// Flags.
        pub flags: u32,
        /// Spare.
        pub spare: [u64; 2],
        /// The attributes.
        pub stat: Statx,
    }

    /// SETATTR argument (`struct fuse_setattr_in`).
    pub struct SetattrIn {
        /// [`crate::SetattrValid`]: which fields are set.
        pub valid: u32,
        /// Padding.
        pub padding: u32,
        /// File handle, with `FATTR_FH`.
        pub fh: u64,
        /// New size, with `FATTR_SIZE`.
        pub size: u64,
        /// Lock owner, with `FATTR_LOCKOWNER`.
        pub lock_owner: u64,
        /// New access time, seconds.
        pub atime: u64,
        /// New modification time, seconds.
        pub mtime: u64,
        /// New status change time, seconds.
        pub ctime: u64,
        /// New access time, nanoseconds.
        pub atimensec: u32,
        /// New modification time, nanoseconds.
        pub mtimensec: u32,
        /// New status change time, nanoseconds.
        pub ctimensec: u32,
        /// New mode.
        pub mode: u32,
        /// Unused.
        pub unused4: u32,
        /// New owner.
        pub uid: u32,
        /// New group.
        pub gid: u32,
        /// Unused.
        pub unused5: u32,
    }

    /// Reply to STATFS (`struct fuse_statfs_out`).
    pub struct StatfsOut {
        /// The statistics.
        pub st: Kstatfs,
    }

    /// SYNCFS argument (`struct fuse_syncfs_in`).
    pub struct SyncfsIn {
        /// Padding.
        pub padding: u64,
    }
}
