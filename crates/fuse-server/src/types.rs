//! What a file system returns: entries, attributes, handles, and the
//! request context it is called with.

use fuse_abi::{Attr, FopenFlags, Statx};
use std::time::Duration;

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Context {
    /// The request's id.
    pub unique: u64,
    /// The node id the request is about.
    pub nodeid: u64,
    /// The caller's effective (file system) uid.
    pub uid: u32,
    /// The caller's effective (file system) gid.
    pub gid: u32,
    /// The caller's thread id (0 for requests the kernel makes on its own).
    pub pid: u32,
}

impl Context {
    /// The context of the request whose header is `header`.
    pub(crate) fn of_request(header: &fuse_abi::InHeader) -> Self {
        Self {
            unique: header.unique,
            nodeid: header.nodeid,
            uid: header.uid,
            gid: header.gid,
            pid: header.pid,
        }
    }
}

/// A directory entry handed to the kernel (LOOKUP, CREATE, MKNOD, MKDIR,
/// SYMLINK, LINK, READDIRPLUS).
///
/// Every `Entry` with a non-zero `nodeid` that reaches the kernel adds one
/// lookup reference the kernel later drops with FORGET; a file system
/// returning one from `lookup` must count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// Node id (0: a negative entry, cached for `entry_timeout`).
    pub nodeid: u64,
    /// Generation of the node id.
    pub generation: u64,
    /// Attributes.
    pub attr: Attr,
    /// How long the kernel may cache the attributes.
    pub attr_timeout: Duration,
    /// How long the kernel may cache the name.
    pub entry_timeout: Duration,
}

impl Entry {
    /// A negative entry: the name does not exist, and the kernel may cache
    /// that for `timeout`.
    pub fn negative(timeout: Duration) -> Self {
        Self {
            entry_timeout: timeout,
            ..Self::default()
        }
    }

    /// The wire form.
    pub fn to_entry_out(&self) -> fuse_abi::EntryOut {
        fuse_abi::EntryOut {
            nodeid: self.nodeid,
            generation: self.generation,
            entry_valid: self.entry_timeout.as_secs(),
            attr_valid: self.attr_timeout.as_secs(),
            entry_valid_nsec: self.entry_timeout.subsec_nanos(),
            attr_valid_nsec: self.attr_timeout.subsec_nanos(),
            attr: self.attr,
        }
    }
}

/// Attributes with their cache timeout (GETATTR, SETATTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrReply {
    /// Attributes.
    pub attr: Attr,
    /// How long the kernel may cache them.
    pub timeout: Duration,
}

/// Extended attributes with their cache timeout (STATX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatxReply {
    /// Attributes.
    pub statx: Statx,
    /// How long the kernel may cache them.
    pub timeout: Duration,
}

/// An open file or directory (OPEN, OPENDIR, CREATE, TMPFILE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Opened {
    /// The file handle the kernel passes back in later requests.
    pub fh: u64,
    /// `FOPEN_*` flags.
    pub flags: FopenFlags,
    /// Backing file id with [`FopenFlags::PASSTHROUGH`].
    pub backing_id: i32,
}

impl Opened {
    /// The wire form.
    pub fn to_open_out(&self) -> fuse_abi::OpenOut {
        fuse_abi::OpenOut {
            fh: self.fh,
            open_flags: self.flags.bits(),
            backing_id: self.backing_id,
        }
    }
}

/// Reply to GETXATTR and LISTXATTR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XattrReply {
    /// The size of the value or list (the caller asked with size 0).
    Size(u32),
    /// The value, or the list of NUL-terminated names.
    Data(Vec<u8>),
}

/// Reply to IOCTL (restricted ioctls only: no retry).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IoctlReply {
    /// The ioctl's return value.
    pub result: i32,
    /// Output data (at most the request's `out_size`).
    pub data: Vec<u8>,
}

/// Converts a `stat` result to the protocol's attributes.
pub fn attr_from_stat(st: &libc::stat64) -> Attr {
    Attr {
        ino: st.st_ino,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: st.st_atime as u64,
        mtime: st.st_mtime as u64,
        ctime: st.st_ctime as u64,
        atimensec: st.st_atime_nsec as u32,
        mtimensec: st.st_mtime_nsec as u32,
        ctimensec: st.st_ctime_nsec as u32,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// Converts a statx(2) result to the protocol's extended attributes (the
/// layouts are bit-for-bit the same).
pub fn statx_from_libc(sx: &libc::statx) -> Statx {
    let t = |ts: &libc::statx_timestamp| fuse_abi::SxTime {
        tv_sec: ts.tv_sec,
        tv_nsec: ts.tv_nsec,
        reserved: 0,
    };
    Statx {
        mask: sx.stx_mask,
        blksize: sx.stx_blksize,
        attributes: sx.stx_attributes,
        nlink: sx.stx_nlink,
        uid: sx.stx_uid,
        gid: sx.stx_gid,
        mode: sx.stx_mode,
        spare0: [0],
        ino: sx.stx_ino,
        size: sx.stx_size,
        blocks: sx.stx_blocks,
        attributes_mask: sx.stx_attributes_mask,
        atime: t(&sx.stx_atime),
        btime: t(&sx.stx_btime),
        ctime: t(&sx.stx_ctime),
        mtime: t(&sx.stx_mtime),
        rdev_major: sx.stx_rdev_major,
        rdev_minor: sx.stx_rdev_minor,
        dev_major: sx.stx_dev_major,
        dev_minor: sx.stx_dev_minor,
        spare2: [0; 14],
    }
}
