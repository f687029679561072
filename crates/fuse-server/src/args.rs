//! Typed arguments of the operations, decoded from the kernel's structs.
//!
//! Each struct holds only what the operation means, with optional fields as
//! `Option` instead of "valid" bit masks, so a file system never looks at
//! raw protocol structs.

use fuse_abi::{
    FileLock, FopenFlags, FsyncFlags, IoctlFlags, OpenInFlags, ReadFlags, ReleaseFlags,
    RenameFlags, SetattrValid, SetxattrFlags, WriteFlags,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A time to set with SETATTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The current time (`utimensat` with `UTIME_NOW`).
    Now,
    /// A specific time since the epoch.
    At {
        /// Seconds.
        secs: i64,
        /// Nanoseconds.
        nsecs: u32,
    },
}

impl SetTime {
    /// The time to store: the current time for [`SetTime::Now`]. A time
    /// `SystemTime` can't hold becomes the epoch.
    ///
    /// ```
    /// use fuse_server::SetTime;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// let t = SetTime::At { secs: -1, nsecs: 500_000_000 };
    /// assert_eq!(t.to_system_time(), UNIX_EPOCH - Duration::from_millis(500));
    /// ```
    pub fn to_system_time(self) -> SystemTime {
        match self {
            SetTime::Now => SystemTime::now(),
            SetTime::At { secs, nsecs } => {
                let whole = if secs >= 0 {
                    UNIX_EPOCH.checked_add(Duration::from_secs(secs as u64))
                } else {
                    UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
                };
                whole
                    .and_then(|t| t.checked_add(Duration::from_nanos(nsecs.into())))
                    .unwrap_or(UNIX_EPOCH)
            }
        }
    }
}

/// SETATTR arguments: every field that is `Some` is to be changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetattrArgs {
    /// The raw `valid` mask, for bits this struct doesn't name.
    pub valid: SetattrValid,
    /// File handle of an open file the change is made through (ftruncate, fchmod, ...).
    pub fh: Option<u64>,
    /// New permission bits (and file type bits, which must not change).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
    /// New status change time (seconds, nanoseconds).
    pub ctime: Option<(i64, u32)>,
    /// Lock owner of the caller, with a truncate through a handle.
    pub lock_owner: Option<u64>,
    /// The setuid and setgid bits are to be cleared (`FATTR_KILL_SUIDGID`,
    /// with `FUSE_HANDLE_KILLPRIV_V2`).
    pub kill_suidgid: bool,
}

/// OPEN and OPENDIR arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenArgs {
    /// open(2) flags (`O_RDONLY`, `O_TRUNC`, ...; never `O_CREAT`).
    pub flags: u32,
    /// `FUSE_OPEN_*` flags.
    pub open_flags: OpenInFlags,
}

impl OpenArgs {
    /// The setuid/setgid bits are to be cleared on a truncating open.
    pub fn kill_suidgid(&self) -> bool {
        self.open_flags.contains(OpenInFlags::KILL_SUIDGID)
    }
}

/// CREATE and TMPFILE arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreateArgs {
    /// open(2) flags.
    pub flags: u32,
    /// File type and permission bits (the kernel already applied the umask
    /// unless `FUSE_DONT_MASK` was negotiated).
    pub mode: u32,
    /// The caller's umask.
    pub umask: u32,
    /// `FUSE_OPEN_*` flags.
    pub open_flags: OpenInFlags,
}

/// MKNOD arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MknodArgs {
    /// File type and permission bits.
    pub mode: u32,
    /// Device number of a device node, as the kernel encodes it (12 bits
    /// of major, 20 of minor); for every number it can carry, this is the
    /// `dev_t` that [`crate::FileAttr::rdev`] holds (`u64::from(rdev)`).
    pub rdev: u32,
    /// The caller's umask.
    pub umask: u32,
}

/// MKDIR arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MkdirArgs {
    /// Permission bits.
    pub mode: u32,
    /// The caller's umask.
    pub umask: u32,
}

/// READ, READDIR and READDIRPLUS arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadArgs {
    /// File handle.
    pub fh: u64,
    /// Offset, or the directory cookie to resume after (0: from the start).
    pub offset: u64,
    /// Largest number of bytes to return.
    pub size: u32,
    /// `FUSE_READ_*` flags.
    pub read_flags: ReadFlags,
    /// Lock owner, when the kernel sent one.
    pub lock_owner: Option<u64>,
    /// open(2) flags of the file (`O_DIRECT`, ...).
    pub flags: u32,
}

impl ReadArgs {
    /// The bytes of a `len`-byte file that this READ asks for: `size`
    /// bytes from `offset`, cut at `len` (empty at or past the end), so a
    /// file system that holds its data in memory can answer with
    /// `out.write_all(&data[args.range_in(data.len())])`. Fewer bytes than
    /// asked tell the kernel it reached the end of the file.
    pub fn range_in(&self, len: usize) -> std::ops::Range<usize> {
        let start = usize::try_from(self.offset).map_or(len, |o| o.min(len));
        let end = start.saturating_add(self.size as usize).min(len);
        start..end
    }
}

/// WRITE arguments (the data comes through a [`crate::ZeroCopyReader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteArgs {
    /// File handle.
    pub fh: u64,
    /// Offset.
    pub offset: u64,
    /// Number of bytes of data.
    pub size: u32,
    /// `FUSE_WRITE_*` flags.
    pub write_flags: WriteFlags,
    /// Lock owner, when the kernel sent one.
    pub lock_owner: Option<u64>,
    /// open(2) flags of the file.
    pub flags: u32,
}

impl WriteArgs {
    /// The write comes from the page cache (writeback caching): the handle
    /// may be any handle of the inode, opened for writing.
    pub fn from_cache(&self) -> bool {
        self.write_flags.contains(WriteFlags::CACHE)
    }

    /// The setuid/setgid bits are to be cleared (`FUSE_WRITE_KILL_SUIDGID`).
    pub fn kill_suidgid(&self) -> bool {
        self.write_flags.contains(WriteFlags::KILL_SUIDGID)
    }

    /// The file was opened with `O_APPEND`: without the writeback cache
    /// the data goes at the file's end, wherever `offset` says (see
    /// [`crate::FileSystem::write`]).
    pub fn append(&self) -> bool {
        self.flags & libc::O_APPEND as u32 != 0
    }
}

/// RELEASE and RELEASEDIR arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReleaseArgs {
    /// File handle.
    pub fh: u64,
    /// open(2) flags of the file.
    pub flags: u32,
    /// `FUSE_RELEASE_*` flags.
    pub release_flags: ReleaseFlags,
    /// Lock owner.
    pub lock_owner: u64,
}

/// FLUSH arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushArgs {
    /// File handle.
    pub fh: u64,
    /// Lock owner of the closing caller.
    pub lock_owner: u64,
}

/// FSYNC and FSYNCDIR arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsyncArgs {
    /// File handle.
    pub fh: u64,
    /// `FUSE_FSYNC_*` flags.
    pub fsync_flags: FsyncFlags,
}

impl FsyncArgs {
    /// Only the data needs to reach stable storage (fdatasync).
    pub fn datasync(&self) -> bool {
        self.fsync_flags.contains(FsyncFlags::FDATASYNC)
    }
}

/// SETXATTR arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetxattrArgs<'a> {
    /// Attribute name.
    pub name: &'a std::ffi::CStr,
    /// Attribute value.
    pub value: &'a [u8],
    /// setxattr(2) flags (`XATTR_CREATE`, `XATTR_REPLACE`).
    pub flags: u32,
    /// `FUSE_SETXATTR_*` flags (with `FUSE_SETXATTR_EXT`).
    pub setxattr_flags: SetxattrFlags,
}

impl SetxattrArgs<'_> {
    /// `XATTR_CREATE`: fail with `EEXIST` if the attribute exists.
    pub fn create(&self) -> bool {
        self.flags & libc::XATTR_CREATE as u32 != 0
    }

    /// `XATTR_REPLACE`: fail with `ENODATA` if the attribute doesn't exist.
    pub fn replace(&self) -> bool {
        self.flags & libc::XATTR_REPLACE as u32 != 0
    }
}

/// GETLK, SETLK and SETLKW arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockArgs {
    /// File handle.
    pub fh: u64,
    /// Lock owner.
    pub owner: u64,
    /// The lock range and type.
    pub lock: FileLock,
    /// A BSD flock(2) lock rather than a POSIX lock.
    pub flock: bool,
}

/// FALLOCATE arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FallocateArgs {
    /// File handle.
    pub fh: u64,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub length: u64,
    /// fallocate(2) mode.
    pub mode: u32,
}

/// LSEEK arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LseekArgs {
    /// File handle.
    pub fh: u64,
    /// Offset.
    pub offset: u64,
    /// `SEEK_SET`, `SEEK_CUR`, `SEEK_END`, `SEEK_DATA` or `SEEK_HOLE`.
    pub whence: u32,
}

/// COPY_FILE_RANGE arguments: the wire struct itself, whose fields are
/// all a file system needs (source handle and offset, destination node
/// id, handle and offset, length, `copy_file_range(2)` flags).
pub type CopyFileRangeArgs = fuse_abi::CopyFileRangeIn;

/// IOCTL arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoctlArgs<'a> {
    /// File handle.
    pub fh: u64,
    /// `FUSE_IOCTL_*` flags.
    pub flags: IoctlFlags,
    /// Command.
    pub cmd: u32,
    /// Argument (a pointer in the caller for most commands).
    pub arg: u64,
    /// Input data.
    pub data: &'a [u8],
    /// Largest output the caller accepts.
    pub out_size: u32,
}

/// POLL arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PollArgs {
    /// File handle.
    pub fh: u64,
    /// Kernel handle to pass to [`crate::Notifier::poll_wakeup`].
    pub kh: u64,
    /// The kernel wants a wakeup notification when the file becomes ready.
    pub schedule_notify: bool,
    /// poll(2) events wanted.
    pub events: u32,
}

/// STATX arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatxArgs {
    /// File handle, when the call came through an open file.
    pub fh: Option<u64>,
    /// `AT_STATX_*` sync flags.
    pub sx_flags: u32,
    /// `STATX_*` mask of the wanted fields.
    pub sx_mask: u32,
}

/// RENAME and RENAME2 arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenameArgs<'a> {
    /// Old name, in the directory of the request's node id.
    pub name: &'a std::ffi::CStr,
    /// Node id of the new parent directory.
    pub newdir: u64,
    /// New name.
    pub newname: &'a std::ffi::CStr,
    /// `RENAME_*` flags (0 for plain RENAME).
    pub flags: RenameFlags,
}

/// Cache timeouts of a reply.
pub fn split_timeout(timeout: Duration) -> (u64, u32) {
    (timeout.as_secs(), timeout.subsec_nanos())
}

/// Flags of an open reply that a file system may set, re-exported for convenience.
pub type OpenFlags = FopenFlags;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_in_cuts_the_read_at_the_end_of_the_file() {
        let read = |offset, size| ReadArgs {
            offset,
            size,
            ..ReadArgs::default()
        };
        assert_eq!(read(0, 4).range_in(10), 0..4);
        assert_eq!(read(8, 4).range_in(10), 8..10);
        assert_eq!(read(10, 4).range_in(10), 10..10);
        assert_eq!(read(u64::MAX, u32::MAX).range_in(10), 10..10);
    }
}
