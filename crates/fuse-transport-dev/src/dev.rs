//! `/dev/fuse` file descriptor operations, each raw syscall wrapped once.

use fuse_server::sys::{cvt_retry, cvt_size};
use std::ffi::CStr;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const DEV_FUSE: &CStr = c"/dev/fuse";

/// Opens a new `/dev/fuse` fd attached to the session of `master`
/// (`FUSE_DEV_IOC_CLONE`), so a worker thread reads and replies on its own
/// fd and the kernel keeps per-fd request queues apart.
pub fn clone_fd(master: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let raw = unsafe { libc::open(DEV_FUSE.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let master_fd: u32 = master.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads a u32 from its argument.
    unsafe { ioctl_reading(fd.as_fd(), fuse_abi::ioctl::DEV_IOC_CLONE, &master_fd) }?;
    Ok(fd)
}

/// `ioctl(fd, request, arg)` for a `FUSE_DEV_IOC_*` request that reads
/// its argument: the non-negative result, or the error.
///
/// # Safety
///
/// `request` must read no more than a `T` through its argument, and write
/// nothing through it.
pub(crate) unsafe fn ioctl_reading<T>(
    fd: BorrowedFd<'_>,
    request: u32,
    arg: &T,
) -> io::Result<i32> {
    // SAFETY: `arg` is valid for reads of a `T` during the call, and the
    // request reads no more (the caller's contract).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *const T) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Reads one request into `buf` (`read(2)`). EINTR is returned to the
/// caller, which checks its stop flag.
pub fn read_request(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    cvt_size(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// Writes one reply or notification made of `parts` in one `writev(2)`;
/// the kernel takes a message only whole, in one write.
pub fn write_message(fd: BorrowedFd<'_>, parts: &[IoSlice<'_>]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let n = cvt_retry(|| {
        // SAFETY: `IoSlice` is ABI-compatible with `iovec`; the slices are live.
        unsafe { libc::writev(fd.as_raw_fd(), parts.as_ptr().cast(), parts.len() as i32) }
    })?;
    if n as usize != total {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short write to /dev/fuse",
        ));
    }
    Ok(())
}

/// One request read from `/dev/fuse`, and the reply buffer it is answered
/// in: the [`fuse_server::Transaction`] of the worker threads and of
/// `FuseDevTask`, and of a program that reads `/dev/fuse` itself. Replies
/// are written at once with one `writev` (a write to `/dev/fuse` never
/// blocks).
pub struct DevTransaction<'a> {
    /// The descriptor the request was read from (replies go back there).
    pub fd: BorrowedFd<'a>,
    /// The request's bytes.
    pub request: &'a [u8],
    /// Where the reply body is written.
    pub reply: &'a mut [u8],
}

impl fuse_server::Transaction for DevTransaction<'_> {
    fn request(&self) -> fuse_server::RawRequest<'_> {
        fuse_server::RawRequest::contiguous(self.request)
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        self.reply
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        let body_len = if error == 0 {
            body_len.min(self.reply.len())
        } else {
            0
        };
        let header = fuse_abi::OutHeader {
            len: (size_of::<fuse_abi::OutHeader>() + body_len) as u32,
            error,
            unique,
        };
        let parts = [
            IoSlice::new(zerocopy::IntoBytes::as_bytes(&header)),
            IoSlice::new(&self.reply[..body_len]),
        ];
        let count = if body_len == 0 { 1 } else { 2 };
        write_message(self.fd, &parts[..count])
    }
}
