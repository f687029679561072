//! The protocol's data structures, field for field as in `fuse.h`.
//!
//! All structs are `#[repr(C)]` and derive the zerocopy traits, so a request
//! buffer can be read with `T::read_from_prefix(bytes)` and a reply struct
//! written with `value.as_bytes()`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Declares protocol structs with the derives every one of them needs.
macro_rules! abi_structs {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }
    )*};
}

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

    /// A POSIX lock range (`struct fuse_file_lock`).
    pub struct FileLock {
        /// First byte.
        pub start: u64,
        /// Last byte (inclusive; `OFFSET_MAX` for "to the end").
        pub end: u64,
        /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
        pub r#type: u32,
        /// Thread group id of the lock holder.
        pub pid: u32,
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

    /// OPEN and OPENDIR argument (`struct fuse_open_in`).
    pub struct OpenIn {
        /// open(2) flags.
        pub flags: u32,
        /// [`crate::OpenInFlags`].
        pub open_flags: u32,
    }

    /// CREATE argument (`struct fuse_create_in`), followed by the name.
    pub struct CreateIn {
        /// open(2) flags.
        pub flags: u32,
        /// File type and permission bits.
        pub mode: u32,
        /// The caller's umask.
        pub umask: u32,
        /// [`crate::OpenInFlags`].
        pub open_flags: u32,
    }

    /// Reply to OPEN, OPENDIR and (after the entry) CREATE (`struct fuse_open_out`).
    pub struct OpenOut {
        /// File handle.
        pub fh: u64,
        /// [`crate::FopenFlags`].
        pub open_flags: u32,
        /// Backing file id for `FOPEN_PASSTHROUGH`.
        pub backing_id: i32,
    }

    /// RELEASE and RELEASEDIR argument (`struct fuse_release_in`).
    pub struct ReleaseIn {
        /// File handle.
        pub fh: u64,
        /// open(2) flags of the file.
        pub flags: u32,
        /// [`crate::ReleaseFlags`].
        pub release_flags: u32,
        /// Lock owner.
        pub lock_owner: u64,
    }

    /// FLUSH argument (`struct fuse_flush_in`).
    pub struct FlushIn {
        /// File handle.
        pub fh: u64,
        /// Unused.
        pub unused: u32,
        /// Padding.
        pub padding: u32,
        /// Lock owner.
        pub lock_owner: u64,
    }

    /// READ, READDIR and READDIRPLUS argument (`struct fuse_read_in`).
    pub struct ReadIn {
        /// File handle.
        pub fh: u64,
        /// Offset (a directory cookie for READDIR).
        pub offset: u64,
        /// Number of bytes wanted.
        pub size: u32,
        /// [`crate::ReadFlags`].
        pub read_flags: u32,
        /// Lock owner, with `FUSE_READ_LOCKOWNER`.
        pub lock_owner: u64,
        /// open(2) flags of the file.
        pub flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// WRITE argument (`struct fuse_write_in`), followed by the data.
    pub struct WriteIn {
        /// File handle.
        pub fh: u64,
        /// Offset.
        pub offset: u64,
        /// Number of bytes of data that follow.
        pub size: u32,
        /// [`crate::WriteFlags`].
        pub write_flags: u32,
        /// Lock owner, with `FUSE_WRITE_LOCKOWNER`.
        pub lock_owner: u64,
        /// open(2) flags of the file.
        pub flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to WRITE (`struct fuse_write_out`).
    pub struct WriteOut {
        /// Bytes written.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to STATFS (`struct fuse_statfs_out`).
    pub struct StatfsOut {
        /// The statistics.
        pub st: Kstatfs,
    }

    /// FSYNC and FSYNCDIR argument (`struct fuse_fsync_in`).
    pub struct FsyncIn {
        /// File handle.
        pub fh: u64,
        /// [`crate::FsyncFlags`].
        pub fsync_flags: u32,
        /// Padding.
        pub padding: u32,
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

    /// GETLK, SETLK and SETLKW argument (`struct fuse_lk_in`).
    pub struct LkIn {
        /// File handle.
        pub fh: u64,
        /// Lock owner.
        pub owner: u64,
        /// The lock.
        pub lk: FileLock,
        /// [`crate::LkFlags`].
        pub lk_flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to GETLK (`struct fuse_lk_out`).
    pub struct LkOut {
        /// The conflicting lock, or `F_UNLCK`.
        pub lk: FileLock,
    }

    /// ACCESS argument (`struct fuse_access_in`).
    pub struct AccessIn {
        /// [`crate::AccessMask`].
        pub mask: u32,
        /// Padding.
        pub padding: u32,
    }

    /// INIT request (`struct fuse_init_in`).
    pub struct InitIn {
        /// Kernel's major version.
        pub major: u32,
        /// Kernel's minor version.
        pub minor: u32,
        /// Largest readahead the kernel will do.
        pub max_readahead: u32,
        /// Low half of the offered [`crate::InitFlags`].
        pub flags: u32,
        /// High half of the offered [`crate::InitFlags`] (with `FUSE_INIT_EXT`).
        pub flags2: u32,
        /// Unused.
        pub unused: [u32; 11],
    }

    /// INIT reply (`struct fuse_init_out`).
    pub struct InitOut {
        /// Server's major version.
        pub major: u32,
        /// Server's minor version.
        pub minor: u32,
        /// Largest readahead.
        pub max_readahead: u32,
        /// Low half of the accepted [`crate::InitFlags`].
        pub flags: u32,
        /// Largest number of background requests.
        pub max_background: u16,
        /// Number of background requests at which the kernel marks the connection congested.
        pub congestion_threshold: u16,
        /// Largest WRITE payload.
        pub max_write: u32,
        /// Timestamp granularity in nanoseconds.
        pub time_gran: u32,
        /// Largest number of pages of one request, with `FUSE_MAX_PAGES`.
        pub max_pages: u16,
        /// log2 of the DAX mapping alignment, with `FUSE_MAP_ALIGNMENT`.
        pub map_alignment: u16,
        /// High half of the accepted [`crate::InitFlags`].
        pub flags2: u32,
        /// Largest stacking depth of passthrough backing files, with `FUSE_PASSTHROUGH`.
        pub max_stack_depth: u32,
        /// Request timeout in seconds, with `FUSE_REQUEST_TIMEOUT`.
        pub request_timeout: u16,
        /// Unused.
        pub unused: [u16; 11],
    }

    /// CUSE_INIT request (`struct cuse_init_in`).
    pub struct CuseInitIn {
        /// Kernel's major version.
        pub major: u32,
        /// Kernel's minor version.
        pub minor: u32,
        /// Unused.
        pub unused: u32,
        /// [`crate::CuseInitFlags`].
        pub flags: u32,
    }

    /// CUSE_INIT reply (`struct cuse_init_out`), followed by the device info.
    pub struct CuseInitOut {
        /// Server's major version.
        pub major: u32,
        /// Server's minor version.
        pub minor: u32,
        /// Unused.
        pub unused: u32,
        /// [`crate::CuseInitFlags`].
        pub flags: u32,
        /// Largest read.
        pub max_read: u32,
        /// Largest write.
        pub max_write: u32,
        /// Character device major number.
        pub dev_major: u32,
        /// Character device minor number.
        pub dev_minor: u32,
        /// Spare.
        pub spare: [u32; 10],
    }

    /// INTERRUPT argument (`struct fuse_interrupt_in`).
    pub struct InterruptIn {
        /// `unique` of the request to interrupt.
        pub unique: u64,
    }

    /// BMAP argument (`struct fuse_bmap_in`).
    pub struct BmapIn {
        /// Block in the file.
        pub block: u64,
        /// Block size.
        pub blocksize: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to BMAP (`struct fuse_bmap_out`).
    pub struct BmapOut {
        /// Block on the device.
        pub block: u64,
    }

    /// IOCTL argument (`struct fuse_ioctl_in`), followed by `in_size` bytes.
    pub struct IoctlIn {
        /// File handle.
        pub fh: u64,
        /// [`crate::IoctlFlags`].
        pub flags: u32,
        /// ioctl command.
        pub cmd: u32,
        /// ioctl argument.
        pub arg: u64,
        /// Bytes of input data.
        pub in_size: u32,
        /// Largest output.
        pub out_size: u32,
    }

    /// An iovec of a retried unrestricted ioctl (`struct fuse_ioctl_iovec`).
    pub struct IoctlIovec {
        /// Address in the caller.
        pub base: u64,
        /// Length.
        pub len: u64,
    }

    /// Reply to IOCTL (`struct fuse_ioctl_out`).
    pub struct IoctlOut {
        /// Return value of the ioctl.
        pub result: i32,
        /// [`crate::IoctlFlags`] (`FUSE_IOCTL_RETRY`).
        pub flags: u32,
        /// Number of input iovecs that follow, on retry.
        pub in_iovs: u32,
        /// Number of output iovecs that follow, on retry.
        pub out_iovs: u32,
    }

    /// POLL argument (`struct fuse_poll_in`).
    pub struct PollIn {
        /// File handle.
        pub fh: u64,
        /// Kernel handle for a later poll notification.
        pub kh: u64,
        /// [`crate::PollFlags`].
        pub flags: u32,
        /// poll(2) events wanted.
        pub events: u32,
    }

    /// Reply to POLL (`struct fuse_poll_out`).
    pub struct PollOut {
        /// poll(2) events ready.
        pub revents: u32,
        /// Padding.
        pub padding: u32,
    }

    /// POLL notification (`struct fuse_notify_poll_wakeup_out`).
    pub struct NotifyPollWakeupOut {
        /// Kernel handle from the POLL request.
        pub kh: u64,
    }

    /// FALLOCATE argument (`struct fuse_fallocate_in`).
    pub struct FallocateIn {
        /// File handle.
        pub fh: u64,
        /// Offset.
        pub offset: u64,
        /// Length.
        pub length: u64,
        /// fallocate(2) mode.
        pub mode: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Header of every request (`struct fuse_in_header`).
    pub struct InHeader {
        /// Total length of the request, this header included.
        pub len: u32,
        /// [`crate::Opcode`].
        pub opcode: u32,
        /// Request id, echoed in the reply.
        pub unique: u64,
        /// Node id the request is about.
        pub nodeid: u64,
        /// Caller's effective uid.
        pub uid: u32,
        /// Caller's effective gid.
        pub gid: u32,
        /// Caller's thread id.
        pub pid: u32,
        /// Length of the extensions at the end of the request, in 8-byte units.
        pub total_extlen: u16,
        /// Padding.
        pub padding: u16,
    }

    /// Header of every reply and notification (`struct fuse_out_header`).
    pub struct OutHeader {
        /// Total length of the reply, this header included.
        pub len: u32,
        /// 0 or a negative errno; a notification code for notifications.
        pub error: i32,
        /// `unique` of the request (0 for notifications).
        pub unique: u64,
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

    /// INVAL_INODE notification (`struct fuse_notify_inval_inode_out`).
    pub struct NotifyInvalInodeOut {
        /// Node id.
        pub ino: u64,
        /// First byte of the data to invalidate (negative: attributes only).
        pub off: i64,
        /// Length (0 or less: to the end).
        pub len: i64,
    }

    /// INVAL_ENTRY notification (`struct fuse_notify_inval_entry_out`), followed by the name.
    pub struct NotifyInvalEntryOut {
        /// Node id of the parent.
        pub parent: u64,
        /// Length of the name.
        pub namelen: u32,
        /// [`crate::NotifyInvalEntryFlags`].
        pub flags: u32,
    }

    /// DELETE notification (`struct fuse_notify_delete_out`), followed by the name.
    pub struct NotifyDeleteOut {
        /// Node id of the parent.
        pub parent: u64,
        /// Node id of the deleted child.
        pub child: u64,
        /// Length of the name.
        pub namelen: u32,
        /// Padding.
        pub padding: u32,
    }

    /// STORE notification (`struct fuse_notify_store_out`), followed by the data.
    pub struct NotifyStoreOut {
        /// Node id.
        pub nodeid: u64,
        /// Offset.
        pub offset: u64,
        /// Bytes of data that follow.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// RETRIEVE notification (`struct fuse_notify_retrieve_out`).
    pub struct NotifyRetrieveOut {
        /// Id echoed in the kernel's NOTIFY_REPLY.
        pub notify_unique: u64,
        /// Node id.
        pub nodeid: u64,
        /// Offset.
        pub offset: u64,
        /// Bytes wanted.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// The kernel's NOTIFY_REPLY to a RETRIEVE (`struct fuse_notify_retrieve_in`),
    /// followed by the data. Same size as [`WriteIn`].
    pub struct NotifyRetrieveIn {
        /// Unused.
        pub dummy1: u64,
        /// Offset.
        pub offset: u64,
        /// Bytes of data that follow.
        pub size: u32,
        /// Unused.
        pub dummy2: u32,
        /// Unused.
        pub dummy3: u64,
        /// Unused.
        pub dummy4: u64,
    }

    /// PRUNE notification (`struct fuse_notify_prune_out`), followed by `count` node ids.
    pub struct NotifyPruneOut {
        /// Number of node ids that follow.
        pub count: u32,
        /// Padding.
        pub padding: u32,
        /// Spare.
        pub spare: u64,
    }

    /// Argument of `FUSE_DEV_IOC_BACKING_OPEN` (`struct fuse_backing_map`).
    pub struct BackingMap {
        /// The backing file's descriptor.
        pub fd: i32,
        /// Flags (none defined).
        pub flags: u32,
        /// Padding.
        pub padding: u64,
    }

    /// LSEEK argument (`struct fuse_lseek_in`).
    pub struct LseekIn {
        /// File handle.
        pub fh: u64,
        /// Offset.
        pub offset: u64,
        /// `SEEK_*` whence.
        pub whence: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to LSEEK (`struct fuse_lseek_out`).
    pub struct LseekOut {
        /// The resulting offset.
        pub offset: u64,
    }

    /// COPY_FILE_RANGE and COPY_FILE_RANGE_64 argument (`struct fuse_copy_file_range_in`).
    pub struct CopyFileRangeIn {
        /// Source file handle.
        pub fh_in: u64,
        /// Source offset.
        pub off_in: u64,
        /// Node id of the destination.
        pub nodeid_out: u64,
        /// Destination file handle.
        pub fh_out: u64,
        /// Destination offset.
        pub off_out: u64,
        /// Bytes to copy.
        pub len: u64,
        /// copy_file_range(2) flags.
        pub flags: u64,
    }

    /// Reply to COPY_FILE_RANGE_64 (`struct fuse_copy_file_range_out`).
    pub struct CopyFileRangeOut {
        /// Bytes copied.
        pub bytes_copied: u64,
    }

    /// SETUPMAPPING argument (`struct fuse_setupmapping_in`), DAX only.
    pub struct SetupmappingIn {
        /// An open file handle.
        pub fh: u64,
        /// Offset in the file.
        pub foffset: u64,
        /// Length of the mapping.
        pub len: u64,
        /// [`crate::SetupmappingFlags`].
        pub flags: u64,
        /// Offset in the DAX window.
        pub moffset: u64,
    }

    /// REMOVEMAPPING header (`struct fuse_removemapping_in`), followed by
    /// `count` [`RemovemappingOne`].
    pub struct RemovemappingIn {
        /// Number of entries that follow.
        pub count: u32,
    }

    /// One range of a REMOVEMAPPING (`struct fuse_removemapping_one`).
    pub struct RemovemappingOne {
        /// Offset in the DAX window.
        pub moffset: u64,
        /// Length.
        pub len: u64,
    }

    /// SYNCFS argument (`struct fuse_syncfs_in`).
    pub struct SyncfsIn {
        /// Padding.
        pub padding: u64,
    }

    /// One security context (`struct fuse_secctx`), followed by its name and value.
    pub struct Secctx {
        /// Size of the context value.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Security context extension header (`struct fuse_secctx_header`).
    pub struct SecctxHeader {
        /// Total size of all contexts, this header included.
        pub size: u32,
        /// Number of contexts.
        pub nr_secctx: u32,
    }

    /// Header of a request extension (`struct fuse_ext_header`).
    pub struct ExtHeader {
        /// Size of the extension, this header included.
        pub size: u32,
        /// Extension type ([`crate::EXT_GROUPS`], or a secctx count up to
        /// [`crate::MAX_NR_SECCTX`]).
        pub r#type: u32,
    }

    /// Supplementary groups extension (`struct fuse_supp_groups`), followed by
    /// `nr_groups` group ids.
    pub struct SuppGroups {
        /// Number of group ids that follow.
        pub nr_groups: u32,
    }
}
