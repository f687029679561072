//! Raw syscalls, each wrapped once.

use fuse_server::sys::{cvt, cvt_retry};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn path_cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

pub(super) fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub(super) fn getegid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// open(2) with `O_CLOEXEC` added.
pub(super) fn open_cloexec(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid NUL-terminated string.
    let fd = cvt_retry(|| unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn mount(
    source: &CStr,
    target: &Path,
    fstype: &CStr,
    flags: libc::c_ulong,
    data: &CStr,
) -> io::Result<()> {
    let target = path_cstring(target)?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive
    // the call; FUSE's mount data is a string.
    let ret = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    cvt(ret).map(drop)
}

pub(super) fn umount2(target: &Path, flags: libc::c_int) -> io::Result<()> {
    let target = path_cstring(target)?;
    // SAFETY: `target` is a valid NUL-terminated string.
    cvt(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

pub(super) fn statfs_is_fuse(path: &Path) -> io::Result<bool> {
    let path = path_cstring(path)?;
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `buf` is writable and large
    // enough for a struct statfs.
    cvt_retry(|| unsafe { libc::statfs(path.as_ptr(), buf.as_mut_ptr()) })?;
    // SAFETY: statfs succeeded, so it filled in the whole struct.
    let buf = unsafe { buf.assume_init() };
    Ok(buf.f_type == libc::FUSE_SUPER_MAGIC)
}

/// A connected pair of Unix stream sockets, both `O_CLOEXEC`.
pub(super) fn socketpair_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: socketpair succeeded and returned two new descriptors that
    // nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `F_DUPFD_CLOEXEC`: a duplicate numbered at least `min`.
pub(super) fn dup_cloexec_min(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: `fd` is a valid open descriptor for the call's duration.
    let new = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: fcntl returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Sets or clears `FD_CLOEXEC`. Async-signal-safe (used between fork and
/// exec): it only calls fcntl(2) and builds errors without allocating.
pub(super) fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD only read and write the descriptor's flags;
    // an invalid `fd` gives EBADF.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    let flags = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags) }).map(drop)
}

/// Receives one descriptor sent with `SCM_RIGHTS` (made `O_CLOEXEC`).
/// `Ok(None)` means the peer closed the socket without sending one.
pub(super) fn recv_fd(sock: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: byte.len(),
    };
    // Room for a few descriptors, aligned for cmsghdr.
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data for which all-zero bytes are valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let received = cvt_retry(|| {
        // SAFETY: `msg` points at `iov` and `control`, which are live and
        // writable for the lengths given.
        unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) }
    })?;

    let mut fds = Vec::new();
    // SAFETY: `msg` was filled in by recvmsg; CMSG_FIRSTHDR/CMSG_NXTHDR
    // stay within msg_control/msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points at a header inside `control`.
        let header = unsafe { std::ptr::read_unaligned(cmsg) };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN only computes a length.
            let data_len =
                (header.cmsg_len as usize).saturating_sub(unsafe { libc::CMSG_LEN(0) } as usize);
            let count = data_len / std::mem::size_of::<RawFd>();
            // SAFETY: the data of this header lies inside `control`.
            let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<RawFd>();
            for i in 0..count {
                // SAFETY: `i < count` keeps the read inside this header's
                // data; it may be unaligned.
                let fd = unsafe { std::ptr::read_unaligned(data.add(i)) };
                // SAFETY: the kernel installed this descriptor for us just
                // now; nothing else owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }

    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("control message truncated"));
    }
    if fds.len() > 1 {
        tracing::debug!(count = fds.len(), "closing extra received descriptors");
    }
    let fd = fds.into_iter().next();
    if fd.is_none() && received > 0 {
        return Err(io::Error::other("a message arrived without a descriptor"));
    }
    Ok(fd)
}

/// `FUSE_DEV_IOC_SYNC_INIT` on a `/dev/fuse` descriptor not yet mounted:
/// the kernel then sends INIT while mount(2) runs and mount(2) returns
/// only once it is answered. Kernels before 6.18 refuse it with `ENOTTY`.
pub(super) fn sync_init(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: the ioctl takes no argument.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), fuse_abi::ioctl::DEV_IOC_SYNC_INIT as _) };
    cvt(ret).map(drop)
}

/// This thread's id.
pub(super) fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Sends `signal` to thread `tid` of this process.
pub(super) fn tgkill(tid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: tgkill has no memory arguments; `tid` is a thread of this
    // process that the caller knows is still running.
    let ret = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, signal) };
    cvt(ret as libc::c_int).map(drop)
}
