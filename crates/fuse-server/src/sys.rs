//! The workspace's system-call plumbing, in one place: a libc return
//! value made an [`io::Result`], `EINTR` retried, positioned I/O, and the
//! do-nothing signal handler that interrupts a blocking call.
//!
//! It lives here, low in the graph, because every crate that makes raw
//! system calls (the transports, the backend, the daemon, the bench)
//! already depends on `fuse-server`; `fuse-abi` does no I/O and `async-io`
//! depends on no crate of the workspace (docs/architecture.md).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A system call's return type, whose `-1` means "failed, see `errno`".
pub trait SyscallReturn: Copy + PartialEq {
    /// The failure value, `-1`.
    const FAILED: Self;
}

impl SyscallReturn for i32 {
    const FAILED: Self = -1;
}

impl SyscallReturn for i64 {
    const FAILED: Self = -1;
}

impl SyscallReturn for isize {
    const FAILED: Self = -1;
}

/// `ret`, or the calling thread's `errno` as an error where `ret` is `-1`.
///
/// Call it right after the system call: anything in between may change
/// `errno`.
#[inline]
pub fn cvt<T: SyscallReturn>(ret: T) -> io::Result<T> {
    if ret == T::FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A byte count returned by `read(2)`-like calls, or their `errno`.
#[inline]
pub fn cvt_size(ret: isize) -> io::Result<usize> {
    // A count is never negative: the only negative return is -1.
    cvt(ret).map(|n| n as usize)
}

/// Runs `f` again for as long as it fails with `EINTR` (a signal handler
/// ran before the call did anything).
#[inline]
pub fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Makes the system call `call` until it doesn't fail with `EINTR`:
/// [`cvt`] and [`retry`] together, the common case.
#[inline]
pub fn cvt_retry<T: SyscallReturn>(mut call: impl FnMut() -> T) -> io::Result<T> {
    retry(|| cvt(call()))
}

/// Sets the calling thread's nice value (`setpriority(2)` on its thread
/// id: Linux keeps the value per thread, and threads started afterwards
/// inherit it). Going below the current value needs `CAP_SYS_NICE` or a
/// `RLIMIT_NICE` that allows it.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) }).map(drop)
}

/// The calling thread's CPU affinity (`sched_getaffinity(2)`).
pub fn current_affinity() -> io::Result<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the set is live and sized.
    cvt(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) })?;
    Ok(set)
}

/// Sets the calling thread's CPU affinity to `set` (one read by
/// [`current_affinity`]).
pub fn set_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: pid 0 is the calling thread; the set is live and sized.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) })
        .map(drop)
}

extern "C" fn do_nothing(_signal: libc::c_int) {}

/// Installs, process-wide, a handler for `signal` that does nothing,
/// without `SA_RESTART`: sent to a thread, the signal then makes the
/// blocking system call it is in return `EINTR` (a transport's wake
/// signal, the backend's lock wait interrupt).
pub fn install_interrupting_handler(signal: i32) -> io::Result<()> {
    // SAFETY: an all-zero sigaction is valid, and the fields that matter
    // are set before the call; the handler does nothing, so it is
    // async-signal-safe.
    cvt(unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = do_nothing as *const () as usize;
        action.sa_flags = 0;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut())
    })
    .map(drop)
}

/// A number's decimal digits, on the stack: for names such as
/// `/proc/self/fd/N` built without allocating, and for the messages of a
/// signal handler (making one is async-signal-safe).
#[derive(Debug, Clone, Copy)]
pub struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    /// The digits of `n` (`u64::MAX` has 20).
    pub const fn new(mut n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return Self { digits, start };
            }
        }
    }

    /// The digits, most significant first, without a sign or a NUL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// `offset` as the `off_t` a positioned call takes; `EINVAL` past
/// `i64::MAX` (where the kernel would refuse it too).
fn off_t(offset: u64) -> io::Result<i64> {
    i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `pread(2)`, retried on `EINTR`.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let offset = off_t(offset)?;
    cvt_retry(|| {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        unsafe { libc::pread64(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) }
    })
    .map(|n| n as usize)
}

/// `pwrite(2)`, retried on `EINTR`.
pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
    let offset = off_t(offset)?;
    cvt_retry(|| {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        unsafe { libc::pwrite64(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), offset) }
    })
    .map(|n| n as usize)
}

/// `preadv(2)` (`write` false) or `pwritev(2)` (`write` true) of `iov` at
/// `offset`, retried on `EINTR`.
///
/// # Safety
///
/// Each iovec must point at memory valid for its length (for writes by the
/// kernel where `write` is false) for the duration of the call.
pub unsafe fn pvectored(
    fd: BorrowedFd<'_>,
    iov: &[libc::iovec],
    offset: u64,
    write: bool,
) -> io::Result<usize> {
    let offset = off_t(offset)?;
    let count = libc::c_int::try_from(iov.len()).unwrap_or(libc::c_int::MAX);
    cvt_retry(|| {
        // SAFETY: the caller vouches for the iovecs' memory; `count` is at
        // most their number.
        unsafe {
            if write {
                libc::pwritev(fd.as_raw_fd(), iov.as_ptr(), count, offset)
            } else {
                libc::preadv(fd.as_raw_fd(), iov.as_ptr(), count, offset)
            }
        }
    })
    .map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn cvt_turns_minus_one_into_errno() {
        // SAFETY: closing a descriptor that can't be open fails with EBADF.
        let err = cvt(unsafe { libc::close(-1) }).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        assert_eq!(cvt(0i32).unwrap(), 0);
        assert_eq!(cvt_size(7).unwrap(), 7);
    }

    #[test]
    fn decimal_digits() {
        assert_eq!(Decimal::new(0).as_bytes(), b"0");
        assert_eq!(Decimal::new(407).as_bytes(), b"407");
        assert_eq!(Decimal::new(u64::MAX).as_bytes(), b"18446744073709551615");
    }

    #[test]
    fn retry_repeats_only_eintr() {
        let mut calls = 0;
        let r: io::Result<()> = retry(|| {
            calls += 1;
            if calls < 3 {
                Err(io::Error::from_raw_os_error(libc::EINTR))
            } else {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
        });
        assert_eq!(calls, 3);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn positioned_io_round_trips() {
        let file = tempfile_in_tmp();
        assert_eq!(pwrite(file.as_fd(), b"abcdef", 10).unwrap(), 6);
        let mut buf = [0u8; 4];
        assert_eq!(pread(file.as_fd(), &mut buf, 12).unwrap(), 4);
        assert_eq!(&buf, b"cdef");
        let mut a = [0u8; 2];
        let mut b = [0u8; 3];
        let iov = [
            libc::iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            },
        ];
        // SAFETY: both iovecs point at live local buffers of their length.
        let n = unsafe { pvectored(file.as_fd(), &iov, 10, false) }.unwrap();
        assert_eq!((n, &a, &b), (5, b"ab", b"cde"));
        let err = pread(file.as_fd(), &mut buf, u64::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    /// An anonymous file (`O_TMPFILE` in /tmp).
    fn tempfile_in_tmp() -> std::fs::File {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open("/tmp")
            .expect("an O_TMPFILE file in /tmp")
    }
}
