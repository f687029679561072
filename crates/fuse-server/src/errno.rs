//! Errors a file system answers with, without a dependency on `libc`:
//! the errno values the kernel understands, and `io::Error`s made of them.
//!
//! ```
//! use fuse_server::errno;
//! let e = errno::not_found();
//! assert_eq!(e.raw_os_error(), Some(errno::ENOENT));
//! ```

use std::io;

pub use libc::{
    E2BIG, EACCES, EAGAIN, EBADF, EBUSY, EEXIST, EFBIG, EINTR, EINVAL, EIO, EISDIR, ELOOP, EMFILE,
    EMLINK, ENAMETOOLONG, ENODATA, ENOENT, ENOLCK, ENOMEM, ENOSPC, ENOSYS, ENOTDIR, ENOTEMPTY,
    ENOTSUP, ENOTTY, ENXIO, EOPNOTSUPP, EOVERFLOW, EPERM, ERANGE, EROFS, ESTALE, ETXTBSY, EXDEV,
};

/// An error with errno `code` (the reply carries it; see
/// [`crate::errno_of`]).
pub fn error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// `ENOENT`: no such file or directory.
pub fn not_found() -> io::Error {
    error(ENOENT)
}

/// `ESTALE`: a node id the file system doesn't know (any more).
pub fn stale() -> io::Error {
    error(ESTALE)
}

/// `EEXIST`: the name exists.
pub fn exists() -> io::Error {
    error(EEXIST)
}

/// `ENOTDIR`: not a directory.
pub fn not_a_directory() -> io::Error {
    error(ENOTDIR)
}

/// `EISDIR`: a directory.
pub fn is_a_directory() -> io::Error {
    error(EISDIR)
}

/// `ENOTEMPTY`: the directory isn't empty.
pub fn not_empty() -> io::Error {
    error(ENOTEMPTY)
}

/// `EACCES`: permission denied.
pub fn access_denied() -> io::Error {
    error(EACCES)
}

/// `EPERM`: not allowed (not the owner, ...).
pub fn not_permitted() -> io::Error {
    error(EPERM)
}

/// `EROFS`: the file system is read-only.
pub fn read_only() -> io::Error {
    error(EROFS)
}

/// `EINVAL`: an invalid argument.
pub fn invalid() -> io::Error {
    error(EINVAL)
}

/// `ENOSPC`: no space left.
pub fn no_space() -> io::Error {
    error(ENOSPC)
}

/// `ENODATA`: no such extended attribute.
pub fn no_data() -> io::Error {
    error(ENODATA)
}

/// `ERANGE`: the caller's buffer is too small (xattrs).
pub fn range() -> io::Error {
    error(ERANGE)
}

/// `ENOSYS`: not implemented (see the operation's docs for what the
/// kernel then does).
pub fn not_implemented() -> io::Error {
    error(ENOSYS)
}

/// `EOPNOTSUPP`: not supported.
pub fn not_supported() -> io::Error {
    error(EOPNOTSUPP)
}

/// `EIO`: an I/O error.
pub fn io_error() -> io::Error {
    error(EIO)
}
