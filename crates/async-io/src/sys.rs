//! Thin safe wrappers around the raw syscalls this crate uses.
//!
//! Every wrapper retries on `EINTR` and turns `-1` into [`io::Error::last_os_error`].
//! The few that take raw pointers are `unsafe fn`s with the contract spelled out.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The largest count one read/write syscall transfers (Linux `MAX_RW_COUNT`).
pub(crate) const MAX_RW_COUNT: usize = 0x7fff_f000;

/// The kernel's limit on iovecs per call (`UIO_MAXIOV`, `IOV_MAX`): both `preadv` and
/// `IORING_OP_READV` return `EINVAL` above it.
pub const IOV_MAX: usize = 1024;

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Runs `f` until it fails with something other than `EINTR`.
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `pread(2)` into raw memory.
///
/// # Safety
/// `ptr..ptr+len` must be valid for writes for the duration of the call.
pub(crate) unsafe fn pread_raw(fd: RawFd, ptr: *mut u8, len: usize, off: u64) -> io::Result<usize> {
    let len = len.min(MAX_RW_COUNT);
    retry(|| {
        // SAFETY: the caller guarantees the memory range; the kernel validates the fd.
        cvt_size(unsafe { libc::pread64(fd, ptr.cast(), len, off as libc::off64_t) })
    })
}

/// `pwrite(2)` from raw memory.
///
/// # Safety
/// `ptr..ptr+len` must be valid for reads for the duration of the call.
pub(crate) unsafe fn pwrite_raw(
    fd: RawFd,
    ptr: *const u8,
    len: usize,
    off: u64,
) -> io::Result<usize> {
    let len = len.min(MAX_RW_COUNT);
    retry(|| {
        // SAFETY: the caller guarantees the memory range; the kernel validates the fd.
        cvt_size(unsafe { libc::pwrite64(fd, ptr.cast(), len, off as libc::off64_t) })
    })
}

/// `preadv(2)`.
///
/// # Safety
/// Every iovec must describe memory valid for writes for the duration of the call.
pub(crate) unsafe fn preadv_raw(fd: RawFd, iov: &[libc::iovec], off: u64) -> io::Result<usize> {
    let cnt = iov.len().min(IOV_MAX) as libc::c_int;
    retry(|| {
        // SAFETY: the caller guarantees the iovecs; `cnt` <= iov.len().
        cvt_size(unsafe { libc::preadv64(fd, iov.as_ptr(), cnt, off as libc::off64_t) })
    })
}

/// `pwritev(2)`.
///
/// # Safety
/// Every iovec must describe memory valid for reads for the duration of the call.
pub(crate) unsafe fn pwritev_raw(fd: RawFd, iov: &[libc::iovec], off: u64) -> io::Result<usize> {
    let cnt = iov.len().min(IOV_MAX) as libc::c_int;
    retry(|| {
        // SAFETY: the caller guarantees the iovecs; `cnt` <= iov.len().
        cvt_size(unsafe { libc::pwritev64(fd, iov.as_ptr(), cnt, off as libc::off64_t) })
    })
}

/// Safe `pread(2)` into a slice.
pub(crate) fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, exclusively borrowed slice.
    unsafe { pread_raw(fd.as_raw_fd(), buf.as_mut_ptr(), buf.len(), off) }
}

/// Safe `pwrite(2)` from a slice.
pub(crate) fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], off: u64) -> io::Result<usize> {
    // SAFETY: `buf` is a valid borrowed slice.
    unsafe { pwrite_raw(fd.as_raw_fd(), buf.as_ptr(), buf.len(), off) }
}

/// `copy_file_range(2)` with explicit offsets (the file positions are untouched).
pub(crate) fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
) -> io::Result<usize> {
    let mut oi = off_in as libc::loff_t;
    let mut oo = off_out as libc::loff_t;
    retry(|| {
        // SAFETY: the offsets are valid pointers to locals; the kernel validates the fds.
        cvt_size(unsafe {
            libc::copy_file_range(
                fd_in.as_raw_fd(),
                &mut oi,
                fd_out.as_raw_fd(),
                &mut oo,
                len.min(MAX_RW_COUNT),
                0,
            )
        })
    })
}

/// `fallocate(2)`.
pub(crate) fn fallocate(fd: BorrowedFd<'_>, mode: i32, off: u64, len: u64) -> io::Result<()> {
    retry(|| {
        // SAFETY: plain syscall on a borrowed fd.
        cvt(unsafe {
            libc::fallocate64(
                fd.as_raw_fd(),
                mode,
                off as libc::off64_t,
                len as libc::off64_t,
            )
        })
    })
    .map(drop)
}

/// `ftruncate(2)`.
pub(crate) fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    retry(|| {
        // SAFETY: plain syscall on a borrowed fd.
        cvt(unsafe { libc::ftruncate64(fd.as_raw_fd(), len as libc::off64_t) })
    })
    .map(drop)
}

/// `fsync(2)` or `fdatasync(2)`.
pub(crate) fn fsync(fd: BorrowedFd<'_>, data_only: bool) -> io::Result<()> {
    retry(|| {
        // SAFETY: plain syscall on a borrowed fd.
        cvt(unsafe {
            if data_only {
                libc::fdatasync(fd.as_raw_fd())
            } else {
                libc::fsync(fd.as_raw_fd())
            }
        })
    })
    .map(drop)
}

/// `statx(2)` of an open fd (`AT_EMPTY_PATH`).
pub(crate) fn statx_fd(fd: BorrowedFd<'_>, mask: u32) -> io::Result<libc::statx> {
    // SAFETY: all-zero is a valid `statx` (plain integers).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    retry(|| {
        // SAFETY: the path is a valid empty C string, `st` is a valid out pointer.
        cvt(unsafe {
            libc::statx(
                fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH,
                mask,
                &mut st,
            )
        })
    })?;
    Ok(st)
}

/// The size of a block device (`BLKGETSIZE64`).
pub(crate) fn block_device_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut size: u64 = 0;
    retry(|| {
        // SAFETY: BLKGETSIZE64 writes one u64 to the pointer we pass.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) })
    })?;
    Ok(size)
}

/// `lseek(fd, off, SEEK_DATA/SEEK_HOLE)`; `Ok(None)` for `ENXIO` (no data/hole at or after `off`).
pub(crate) fn lseek_whence(
    fd: BorrowedFd<'_>,
    off: u64,
    whence: libc::c_int,
) -> io::Result<Option<u64>> {
    // SAFETY: plain syscall on a borrowed fd.
    let r = unsafe { libc::lseek64(fd.as_raw_fd(), off as libc::off64_t, whence) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}

/// `fcntl(F_GETFL)`.
pub(crate) fn get_status_flags(fd: BorrowedFd<'_>) -> io::Result<i32> {
    // SAFETY: plain syscall on a borrowed fd.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

/// `openat(AT_FDCWD, path, flags | O_CLOEXEC, mode)`.
pub(crate) fn open(path: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let fd = retry(|| {
        // SAFETY: `path` is a valid C string.
        cvt(unsafe {
            libc::openat(
                libc::AT_FDCWD,
                path.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })
    })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads (and so resets) an eventfd counter. `Ok(None)` when it was zero (`EAGAIN`).
pub(crate) fn eventfd_read(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    let mut v: u64 = 0;
    // SAFETY: `v` is valid for 8 bytes of writes.
    let r = retry(|| unsafe { pread_like_read(fd.as_raw_fd(), &mut v) });
    match r {
        Ok(_) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// # Safety
/// `v` is a valid out pointer (always true for a `&mut u64`).
unsafe fn pread_like_read(fd: RawFd, v: &mut u64) -> io::Result<usize> {
    // SAFETY: `v` is valid for 8 bytes of writes.
    cvt_size(unsafe { libc::read(fd, (v as *mut u64).cast(), 8) })
}
