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

/// Declares [`NAMES`] from errno constants of `libc`.
macro_rules! errno_names {
    ($($name:ident),* $(,)?) => {
        /// Every Linux errno with its name; aliases (`EWOULDBLOCK`,
        /// `EDEADLOCK`, `ENOTSUP`) appear under the name they alias.
        const NAMES: &[(i32, &str)] = &[$((libc::$name, stringify!($name))),*];
    };
}

errno_names! {
    EPERM, ENOENT, ESRCH, EINTR, EIO, ENXIO, E2BIG, ENOEXEC, EBADF, ECHILD, EAGAIN, ENOMEM,
    EACCES, EFAULT, ENOTBLK, EBUSY, EEXIST, EXDEV, ENODEV, ENOTDIR, EISDIR, EINVAL, ENFILE,
    EMFILE, ENOTTY, ETXTBSY, EFBIG, ENOSPC, ESPIPE, EROFS, EMLINK, EPIPE, EDOM, ERANGE, EDEADLK,
    ENAMETOOLONG, ENOLCK, ENOSYS, ENOTEMPTY, ELOOP, ENOMSG, EIDRM, ECHRNG, EL2NSYNC, EL3HLT,
    EL3RST, ELNRNG, EUNATCH, ENOCSI, EL2HLT, EBADE, EBADR, EXFULL, ENOANO, EBADRQC, EBADSLT,
    EBFONT, ENOSTR, ENODATA, ETIME, ENOSR, ENONET, ENOPKG, EREMOTE, ENOLINK, EADV, ESRMNT,
    ECOMM, EPROTO, EMULTIHOP, EDOTDOT, EBADMSG, EOVERFLOW, ENOTUNIQ, EBADFD, EREMCHG, ELIBACC,
    ELIBBAD, ELIBSCN, ELIBMAX, ELIBEXEC, EILSEQ, ERESTART, ESTRPIPE, EUSERS, ENOTSOCK,
    EDESTADDRREQ, EMSGSIZE, EPROTOTYPE, ENOPROTOOPT, EPROTONOSUPPORT, ESOCKTNOSUPPORT,
    EOPNOTSUPP, EPFNOSUPPORT, EAFNOSUPPORT, EADDRINUSE, EADDRNOTAVAIL, ENETDOWN, ENETUNREACH,
    ENETRESET, ECONNABORTED, ECONNRESET, ENOBUFS, EISCONN, ENOTCONN, ESHUTDOWN, ETOOMANYREFS,
    ETIMEDOUT, ECONNREFUSED, EHOSTDOWN, EHOSTUNREACH, EALREADY, EINPROGRESS, ESTALE, EUCLEAN,
    ENOTNAM, ENAVAIL, EISNAM, EREMOTEIO, EDQUOT, ENOMEDIUM, EMEDIUMTYPE, ECANCELED, ENOKEY,
    EKEYEXPIRED, EKEYREVOKED, EKEYREJECTED, EOWNERDEAD, ENOTRECOVERABLE, ERFKILL, EHWPOISON,
}

/// The symbolic name of errno `code` (`ENOENT` for 2), if it has one.
///
/// ```
/// use fuse_server::errno;
/// assert_eq!(errno::name(errno::ENOENT), Some("ENOENT"));
/// assert_eq!(errno::name(4000), None);
/// ```
pub fn name(code: i32) -> Option<&'static str> {
    NAMES
        .iter()
        .find(|&&(n, _)| n == code)
        .map(|&(_, name)| name)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_errno_has_one_name() {
        let mut codes: Vec<i32> = NAMES.iter().map(|&(n, _)| n).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), NAMES.len(), "an errno listed twice");
        // Linux numbers them 1 to 133; 41 and 58 are unused.
        assert_eq!(NAMES.len(), 131);
        assert_eq!(codes.first(), Some(&1));
        assert_eq!(codes.last(), Some(&libc::EHWPOISON));
        assert_eq!(name(ENOENT), Some("ENOENT"));
        assert_eq!(name(ENOTSUP), Some("EOPNOTSUPP"));
        assert_eq!(name(libc::EWOULDBLOCK), Some("EAGAIN"));
        assert_eq!(name(0), None);
        assert_eq!(name(-2), None);
    }
}
