//! Every flag family of the protocol as a [`bitflags`](mod@bitflags) type.
//!
//! The kernel may send bits that this crate does not know (a newer kernel);
//! use `from_bits_retain` to keep them, as the types are all declared with
//! `const _ = !0` so that unknown bits survive a round trip.

use bitflags::bitflags;

bitflags! {
    /// INIT request and reply flags, both halves: bits 0-31 travel in
    /// `flags`, bits 32-63 in `flags2` (`FUSE_ASYNC_READ` ... `FUSE_HAS_IO_URING_BUFPOOL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct InitFlags: u64 {
        /// Asynchronous read requests.
        const ASYNC_READ = 1 << 0;
        /// Remote locking for POSIX file locks.
        const POSIX_LOCKS = 1 << 1;
        /// Kernel sends file handle for fstat, etc. (not supported).
        const FILE_OPS = 1 << 2;
        /// The file system handles the O_TRUNC open flag.
        const ATOMIC_O_TRUNC = 1 << 3;
        /// The file system handles lookups of "." and "..".
        const EXPORT_SUPPORT = 1 << 4;
        /// The file system can handle writes larger than 4 KiB.
        const BIG_WRITES = 1 << 5;
        /// Don't apply the umask to the mode of created files.
        const DONT_MASK = 1 << 6;
        /// Kernel supports splice write on the device.
        const SPLICE_WRITE = 1 << 7;
        /// Kernel supports splice move on the device.
        const SPLICE_MOVE = 1 << 8;
        /// Kernel supports splice read on the device.
        const SPLICE_READ = 1 << 9;
        /// Remote locking for BSD style file locks.
        const FLOCK_LOCKS = 1 << 10;
        /// Kernel supports ioctl on directories.
        const HAS_IOCTL_DIR = 1 << 11;
        /// Automatically invalidate cached pages.
        const AUTO_INVAL_DATA = 1 << 12;
        /// Do READDIRPLUS (READDIR and LOOKUP in one).
        const DO_READDIRPLUS = 1 << 13;
        /// Adaptive readdirplus.
        const READDIRPLUS_AUTO = 1 << 14;
        /// Asynchronous direct I/O submission.
        const ASYNC_DIO = 1 << 15;
        /// Use writeback cache for buffered writes.
        const WRITEBACK_CACHE = 1 << 16;
        /// Kernel supports zero-message opens.
        const NO_OPEN_SUPPORT = 1 << 17;
        /// Allow parallel lookups and readdir.
        const PARALLEL_DIROPS = 1 << 18;
        /// The file system kills suid/sgid/caps on write/chown/truncate.
        const HANDLE_KILLPRIV = 1 << 19;
        /// The file system supports POSIX ACLs.
        const POSIX_ACL = 1 << 20;
        /// Reading the device after an abort returns ECONNABORTED.
        const ABORT_ERROR = 1 << 21;
        /// `init_out.max_pages` holds the largest number of pages of a request.
        const MAX_PAGES = 1 << 22;
        /// Cache READLINK replies.
        const CACHE_SYMLINKS = 1 << 23;
        /// Kernel supports zero-message opendir.
        const NO_OPENDIR_SUPPORT = 1 << 24;
        /// Only invalidate cached pages on explicit request.
        const EXPLICIT_INVAL_DATA = 1 << 25;
        /// `init_out.map_alignment` holds log2 of the DAX mapping alignment.
        const MAP_ALIGNMENT = 1 << 26;
        /// Kernel supports auto-mounting directory submounts.
        const SUBMOUNTS = 1 << 27;
        /// The file system kills suid/sgid/caps the way the VFS does.
        const HANDLE_KILLPRIV_V2 = 1 << 28;
        /// The server takes the extended `fuse_setxattr_in`.
        const SETXATTR_EXT = 1 << 29;
        /// Extended `fuse_init_in` (the `flags2` half is valid).
        const INIT_EXT = 1 << 30;
        /// Reserved, do not use.
        const INIT_RESERVED = 1 << 31;
        /// Add a security context to create, mkdir, symlink and mknod.
        const SECURITY_CTX = 1 << 32;
        /// Per-inode DAX.
        const HAS_INODE_DAX = 1 << 33;
        /// Add the supplementary group matching the parent to create, mkdir, symlink and mknod.
        const CREATE_SUPP_GROUP = 1 << 34;
        /// Kernel supports expiry-only entry invalidation.
        const HAS_EXPIRE_ONLY = 1 << 35;
        /// Allow shared mmap in FOPEN_DIRECT_IO mode (alias `DIRECT_IO_RELAX`).
        const DIRECT_IO_ALLOW_MMAP = 1 << 36;
        /// Kernel passthrough of READ/WRITE to a backing file.
        const PASSTHROUGH = 1 << 37;
        /// Explicitly disable export support.
        const NO_EXPORT_SUPPORT = 1 << 38;
        /// Kernel can resend pending requests; the top bit of `unique` marks them.
        const HAS_RESEND = 1 << 39;
        /// Allow id-mapped mounts.
        const ALLOW_IDMAP = 1 << 40;
        /// FUSE over io_uring.
        const OVER_IO_URING = 1 << 41;
        /// Kernel times out requests after `init_out.request_timeout` seconds.
        const REQUEST_TIMEOUT = 1 << 42;
        /// Kernel supports io_uring buffer pools (ADD_QUEUE, ADD_BUFPOOL).
        const HAS_IO_URING_BUFPOOL = 1 << 43;
        const _ = !0;
    }
}

impl InitFlags {
    /// Obsolete alias of [`InitFlags::DIRECT_IO_ALLOW_MMAP`] (`FUSE_DIRECT_IO_RELAX`).
    pub const DIRECT_IO_RELAX: Self = Self::DIRECT_IO_ALLOW_MMAP;

    /// Joins the `flags` and `flags2` halves of an INIT message.
    pub const fn from_halves(flags: u32, flags2: u32) -> Self {
        Self::from_bits_retain(flags as u64 | ((flags2 as u64) << 32))
    }

    /// The low half, for `flags`.
    pub const fn low(self) -> u32 {
        self.bits() as u32
    }

    /// The high half, for `flags2`.
    pub const fn high(self) -> u32 {
        (self.bits() >> 32) as u32
    }
}

bitflags! {
    /// Flags of an OPEN/OPENDIR/CREATE reply (`FOPEN_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct FopenFlags: u32 {
        /// Bypass the page cache for this open file.
        const DIRECT_IO = 1 << 0;
        /// Don't invalidate the data cache on open.
        const KEEP_CACHE = 1 << 1;
        /// The file is not seekable.
        const NONSEEKABLE = 1 << 2;
        /// Allow caching this directory.
        const CACHE_DIR = 1 << 3;
        /// The file is stream-like (no file position at all).
        const STREAM = 1 << 4;
        /// Don't flush the data cache on close (unless writeback caching).
        const NOFLUSH = 1 << 5;
        /// Allow concurrent direct writes on the same inode.
        const PARALLEL_DIRECT_WRITES = 1 << 6;
        /// Kernel passthrough of READ/WRITE to `backing_id`.
        const PASSTHROUGH = 1 << 7;
        /// Use io_uring zero copy for reads and writes of this file.
        const IO_URING_ZERO_COPY = 1 << 8;
        const _ = !0;
    }
}

bitflags! {
    /// Which fields of `fuse_setattr_in` are set (`FATTR_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SetattrValid: u32 {
        /// `mode`.
        const MODE = 1 << 0;
        /// `uid`.
        const UID = 1 << 1;
        /// `gid`.
        const GID = 1 << 2;
        /// `size`.
        const SIZE = 1 << 3;
        /// `atime`.
        const ATIME = 1 << 4;
        /// `mtime`.
        const MTIME = 1 << 5;
        /// `fh`.
        const FH = 1 << 6;
        /// Set atime to now.
        const ATIME_NOW = 1 << 7;
        /// Set mtime to now.
        const MTIME_NOW = 1 << 8;
        /// `lock_owner`.
        const LOCKOWNER = 1 << 9;
        /// `ctime`.
        const CTIME = 1 << 10;
        /// Kill suid and sgid.
        const KILL_SUIDGID = 1 << 11;
        const _ = !0;
    }
}

bitflags! {
    /// RELEASE flags (`FUSE_RELEASE_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ReleaseFlags: u32 {
        /// Flush before release.
        const FLUSH = 1 << 0;
        /// Release BSD locks of the owner.
        const FLOCK_UNLOCK = 1 << 1;
        const _ = !0;
    }
}

bitflags! {
    /// GETATTR and STATX flags (`FUSE_GETATTR_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct GetattrFlags: u32 {
        /// `fh` is valid.
        const FH = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// Lock flags (`FUSE_LK_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct LkFlags: u32 {
        /// A BSD (flock) lock rather than a POSIX lock.
        const FLOCK = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// WRITE flags (`FUSE_WRITE_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WriteFlags: u32 {
        /// Delayed write from the page cache; the file handle is guessed.
        const CACHE = 1 << 0;
        /// `lock_owner` is valid.
        const LOCKOWNER = 1 << 1;
        /// Kill suid and sgid (alias `KILL_PRIV`).
        const KILL_SUIDGID = 1 << 2;
        const _ = !0;
    }
}

impl WriteFlags {
    /// Obsolete alias of [`WriteFlags::KILL_SUIDGID`] (`FUSE_WRITE_KILL_PRIV`).
    pub const KILL_PRIV: Self = Self::KILL_SUIDGID;
}

bitflags! {
    /// READ flags (`FUSE_READ_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ReadFlags: u32 {
        /// `lock_owner` is valid.
        const LOCKOWNER = 1 << 1;
        const _ = !0;
    }
}

bitflags! {
    /// IOCTL flags (`FUSE_IOCTL_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct IoctlFlags: u32 {
        /// 32-bit compat ioctl on a 64-bit machine.
        const COMPAT = 1 << 0;
        /// Not restricted to well-formed ioctls; retry allowed.
        const UNRESTRICTED = 1 << 1;
        /// Retry with new iovecs.
        const RETRY = 1 << 2;
        /// 32-bit ioctl.
        const BIT32 = 1 << 3;
        /// The file is a directory.
        const DIR = 1 << 4;
        /// x32 compat ioctl on a 64-bit machine.
        const COMPAT_X32 = 1 << 5;
        const _ = !0;
    }
}

bitflags! {
    /// POLL flags (`FUSE_POLL_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct PollFlags: u32 {
        /// The kernel wants a poll notification.
        const SCHEDULE_NOTIFY = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// FSYNC flags (`FUSE_FSYNC_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct FsyncFlags: u32 {
        /// Sync data only, not metadata.
        const FDATASYNC = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// `fuse_attr.flags` (`FUSE_ATTR_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AttrFlags: u32 {
        /// The object is a submount root.
        const SUBMOUNT = 1 << 0;
        /// Enable DAX for this file in per-inode DAX mode.
        const DAX = 1 << 1;
        const _ = !0;
    }
}

bitflags! {
    /// `open_flags` of OPEN and CREATE requests (`FUSE_OPEN_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct OpenInFlags: u32 {
        /// Kill suid and sgid if executable.
        const KILL_SUIDGID = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// `setxattr_flags` (`FUSE_SETXATTR_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SetxattrFlags: u32 {
        /// Clear SGID when system.posix_acl_access is set.
        const ACL_KILL_SGID = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// Flags of the INVAL_ENTRY notification.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct NotifyInvalEntryFlags: u32 {
        /// Only expire the entry, don't drop it (`FUSE_EXPIRE_ONLY`).
        const EXPIRE_ONLY = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// CUSE INIT flags (`CUSE_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CuseInitFlags: u32 {
        /// Use unrestricted ioctl.
        const UNRESTRICTED_IOCTL = 1 << 0;
        const _ = !0;
    }
}

bitflags! {
    /// SETUPMAPPING flags (`FUSE_SETUPMAPPING_FLAG_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SetupmappingFlags: u64 {
        /// Map for writing.
        const WRITE = 1 << 0;
        /// Map for reading.
        const READ = 1 << 1;
        const _ = !0;
    }
}

bitflags! {
    /// ACCESS request mask: access(2)'s `R_OK`, `W_OK`, `X_OK` (0 is `F_OK`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessMask: u32 {
        /// Execute or search (`X_OK`).
        const EXECUTE = 1;
        /// Write (`W_OK`).
        const WRITE = 2;
        /// Read (`R_OK`).
        const READ = 4;
        const _ = !0;
    }
}

bitflags! {
    /// RENAME2 flags: renameat2(2)'s `RENAME_*`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct RenameFlags: u32 {
        /// Fail if the target exists (`RENAME_NOREPLACE`).
        const NOREPLACE = 1 << 0;
        /// Exchange source and target atomically (`RENAME_EXCHANGE`).
        const EXCHANGE = 1 << 1;
        /// Leave a whiteout at the source (`RENAME_WHITEOUT`).
        const WHITEOUT = 1 << 2;
        const _ = !0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_flags_split_into_halves() {
        let f = InitFlags::ASYNC_READ | InitFlags::OVER_IO_URING | InitFlags::HAS_IO_URING_BUFPOOL;
        assert_eq!(f.low(), 1);
        assert_eq!(f.high(), (1 << 9) | (1 << 11));
        assert_eq!(InitFlags::from_halves(f.low(), f.high()), f);
        assert_eq!(InitFlags::HAS_IO_URING_BUFPOOL.bits(), 1 << 43);
        assert_eq!(InitFlags::DIRECT_IO_RELAX, InitFlags::DIRECT_IO_ALLOW_MMAP);
    }

    #[test]
    fn unknown_bits_survive() {
        let f = InitFlags::from_bits_retain(1 << 60);
        assert_eq!(f.bits(), 1 << 60);
        assert_eq!(FopenFlags::from_bits_retain(1 << 20).bits(), 1 << 20);
    }

    #[test]
    fn flag_values_match_the_header() {
        assert_eq!(FopenFlags::PASSTHROUGH.bits(), 1 << 7);
        assert_eq!(FopenFlags::IO_URING_ZERO_COPY.bits(), 1 << 8);
        assert_eq!(SetattrValid::KILL_SUIDGID.bits(), 1 << 11);
        assert_eq!(WriteFlags::KILL_PRIV, WriteFlags::KILL_SUIDGID);
        assert_eq!(ReadFlags::LOCKOWNER.bits(), 2);
        assert_eq!(IoctlFlags::COMPAT_X32.bits(), 32);
        assert_eq!(RenameFlags::WHITEOUT.bits(), 4);
    }
}
