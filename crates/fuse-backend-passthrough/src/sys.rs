//! Thin safe wrappers around the system calls the passthrough makes.
//!
//! Every raw call is wrapped once here; the rest of the crate uses these
//! functions. Paths are `&CStr` so nothing allocates.

use fuse_server::sys::{cvt, cvt_retry, cvt_size, Decimal};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An error with `errno`.
pub(crate) fn errno(n: i32) -> io::Error {
    io::Error::from_raw_os_error(n)
}

/// The empty path, for `AT_EMPTY_PATH` calls on the fd itself.
pub(crate) const EMPTY: &CStr = c"";

/// A decimal number as a NUL-terminated string on the stack (a file
/// descriptor's name in `/proc/self/fd`, a pid).
pub(crate) struct NumName {
    buf: [u8; 24],
    len: usize,
}

impl NumName {
    pub(crate) fn new(n: u64) -> Self {
        let decimal = Decimal::new(n);
        let digits = decimal.as_bytes();
        let mut buf = [0u8; 24];
        buf[..digits.len()].copy_from_slice(digits);
        Self {
            buf,
            len: digits.len(),
        }
    }

    pub(crate) fn as_cstr(&self) -> &CStr {
        // The buffer holds digits followed by at least one NUL.
        CStr::from_bytes_until_nul(&self.buf[..=self.len]).unwrap_or(c"0")
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A short path built on the stack: `prefix` + number + `suffix`
/// (`/proc/self/fd/N`, `/proc/PID/status`).
pub(crate) struct StackPath {
    buf: [u8; 64],
}

impl StackPath {
    pub(crate) fn new(prefix: &[u8], n: u64, suffix: &[u8]) -> Self {
        let num = NumName::new(n);
        let mut buf = [0u8; 64];
        let parts = [prefix, num.as_bytes(), suffix];
        let mut at = 0;
        for p in parts {
            let take = p.len().min(63 - at);
            buf[at..at + take].copy_from_slice(&p[..take]);
            at += take;
        }
        Self { buf }
    }

    /// `/proc/self/fd/N` for `fd`.
    pub(crate) fn proc_fd(fd: RawFd) -> Self {
        Self::new(b"/proc/self/fd/", fd as u64, b"")
    }

    pub(crate) fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).unwrap_or(c"/")
    }
}

/// Something holding descriptors the process can do without: the cache of
/// descriptors of inodes in use (see `inode/fd_cache.rs`), which gives
/// them back when an open runs out of descriptors.
pub(crate) trait SpareFds: Send + Sync {
    /// Closes the spare descriptors; returns how many were given back.
    fn give_back(&self) -> usize;
}

/// Every live holder of spare descriptors in the process: the descriptor
/// limit is the process's, so running out in one file system is a reason
/// for each of them to give back.
static SPARE_FDS: std::sync::Mutex<Vec<std::sync::Weak<dyn SpareFds>>> =
    std::sync::Mutex::new(Vec::new());

/// Registers `spare` to be asked for descriptors when an open fails with
/// `EMFILE` or `ENFILE`.
pub(crate) fn register_spare_fds(spare: std::sync::Weak<dyn SpareFds>) {
    let mut list = SPARE_FDS.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    list.push(spare);
}

/// Asks every registered holder to give its spare descriptors back;
/// returns how many were.
fn give_back_spare_fds() -> usize {
    let holders: Vec<_> = SPARE_FDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    holders.iter().map(|h| h.give_back()).sum()
}

/// Runs `call` (which opens a descriptor); when the process is out of
/// descriptors, has the spare ones given back and tries once more.
fn with_spare_fds<T>(mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    static LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match call() {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
            let freed = give_back_spare_fds();
            if !LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    freed,
                    "out of file descriptors ({e}): cached descriptors given back; \
                     raise the open file limit (ulimit -n) if this repeats"
                );
            } else {
                tracing::debug!(
                    freed,
                    "out of file descriptors ({e}): cached descriptors given back"
                );
            }
            if freed > 0 {
                call()
            } else {
                Err(e)
            }
        }
        r => r,
    }
}

/// `openat(2)`; `O_CLOEXEC` is always added.
pub(crate) fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: i32,
    mode: u32,
) -> io::Result<OwnedFd> {
    with_spare_fds(|| {
        // SAFETY: `name` is NUL-terminated; the result is a new fd we own.
        let fd = cvt(unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })
}

/// `open(2)` of an absolute path; `O_CLOEXEC` is always added.
pub(crate) fn open(path: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    with_spare_fds(|| {
        // SAFETY: as in `openat`.
        let fd = cvt(unsafe {
            libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint)
        })?;
        // SAFETY: a new fd owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })
}

/// The attributes the passthrough asks `statx(2)` for.
pub(crate) const STATX_WANTED: u32 = libc::STATX_BASIC_STATS | libc::STATX_MNT_ID;

/// `statx(2)`.
pub(crate) fn statx(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: i32,
    mask: u32,
) -> io::Result<libc::statx> {
    let mut st = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `st` is valid for writes of a statx struct; `name` is NUL-terminated.
    cvt(unsafe { libc::statx(dir.as_raw_fd(), name.as_ptr(), flags, mask, st.as_mut_ptr()) })?;
    // SAFETY: zero-initialized, then filled by the kernel.
    Ok(unsafe { st.assume_init() })
}

/// statx of the fd itself (`AT_EMPTY_PATH`), not following a symlink.
pub(crate) fn statx_fd(fd: BorrowedFd<'_>, mask: u32) -> io::Result<libc::statx> {
    statx(
        fd,
        EMPTY,
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        mask,
    )
}

/// `fstatfs(2)` (works on `O_PATH` descriptors).
pub(crate) fn fstatfs(fd: BorrowedFd<'_>) -> io::Result<libc::statfs64> {
    let mut st = std::mem::MaybeUninit::<libc::statfs64>::zeroed();
    // SAFETY: `st` is valid for writes.
    cvt(unsafe { libc::fstatfs64(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: filled by the kernel.
    Ok(unsafe { st.assume_init() })
}

/// The file system id of `fd`'s file system (`f_fsid` of `fstatfs(2)`),
/// as fanotify reports it in its file ids.
pub(crate) fn fsid(fd: BorrowedFd<'_>) -> io::Result<[i32; 2]> {
    let st = fstatfs(fd)?;
    // SAFETY: fsid_t is two ints (`__val`), whatever the libc names them.
    Ok(unsafe { std::mem::transmute::<libc::fsid_t, [i32; 2]>(st.f_fsid) })
}

/// `fanotify_init(2)` of a notification group with `flags` (`FAN_CLOEXEC`
/// added).
pub(crate) fn fanotify_init(flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let fd = cvt(unsafe {
        libc::fanotify_init(
            flags | libc::FAN_CLOEXEC,
            (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint,
        )
    })?;
    // SAFETY: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(2)` of the directory `dir` (an `O_PATH` descriptor will
/// do: it is named as `.` relative to itself).
pub(crate) fn fanotify_mark_dir(
    group: BorrowedFd<'_>,
    flags: libc::c_uint,
    mask: u64,
    dir: BorrowedFd<'_>,
) -> io::Result<()> {
    // SAFETY: valid descriptors and a NUL-terminated path.
    cvt(unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            flags | libc::FAN_MARK_ONLYDIR,
            mask,
            dir.as_raw_fd(),
            c".".as_ptr(),
        )
    })?;
    Ok(())
}

/// `fanotify_mark(2)` of the object at `path` (followed if a symlink:
/// `/proc/self/fd/N` reaches the file of descriptor `N`, `O_PATH` ones
/// included, which `fanotify_mark` doesn't take as its descriptor).
pub(crate) fn fanotify_mark_path(
    group: BorrowedFd<'_>,
    flags: libc::c_uint,
    mask: u64,
    path: &CStr,
) -> io::Result<()> {
    // SAFETY: a valid descriptor and a NUL-terminated path.
    cvt(unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            flags,
            mask,
            libc::AT_FDCWD,
            path.as_ptr(),
        )
    })?;
    Ok(())
}

/// A new `eventfd(2)` (close-on-exec), to wake a thread in `poll`.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
    // SAFETY: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `mkdirat(2)`.
pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `mknodat(2)`.
pub(crate) fn mknodat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    mode: u32,
    dev: libc::dev_t,
) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

/// `symlinkat(2)`.
pub(crate) fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `unlinkat(2)`.
pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat2(2)`.
pub(crate) fn renameat2(
    olddir: BorrowedFd<'_>,
    oldname: &CStr,
    newdir: BorrowedFd<'_>,
    newname: &CStr,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated.
    cvt(unsafe {
        libc::renameat2(
            olddir.as_raw_fd(),
            oldname.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// `linkat(2)` from an absolute path (following it: a `/proc/self/fd`
/// magic link), without `AT_EMPTY_PATH` and so without needing
/// `CAP_DAC_READ_SEARCH`.
pub(crate) fn link_proc(old: &CStr, newdir: BorrowedFd<'_>, newname: &CStr) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            old.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

/// `readlinkat(2)` of the fd itself into `buf`; returns the length.
pub(crate) fn readlink_fd(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    readlinkat(fd, EMPTY, buf)
}

/// `readlinkat(2)` of `name` in `dir` into `buf`; returns the length.
pub(crate) fn readlinkat(dir: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `name` is NUL-terminated; `buf` is valid for writes of its
    // length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    cvt_size(n)
}

/// `fchownat(2)` of the fd itself (`AT_EMPTY_PATH`).
pub(crate) fn fchown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain call on an fd.
    cvt(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// `fchmod(2)` of an open file.
pub(crate) fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: plain call on an fd.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// `chmod(2)` of a path (following it).
pub(crate) fn chmod_path(path: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode) }).map(drop)
}

/// `truncate(2)` of a path (following it).
pub(crate) fn truncate_path(path: &CStr, size: u64) -> io::Result<()> {
    let size = i64::try_from(size).map_err(|_| errno(libc::EINVAL))?;
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::truncate64(path.as_ptr(), size) }).map(drop)
}

/// `ftruncate(2)`.
pub(crate) fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    let size = i64::try_from(size).map_err(|_| errno(libc::EINVAL))?;
    // SAFETY: plain call on an fd.
    cvt(unsafe { libc::ftruncate64(fd.as_raw_fd(), size) }).map(drop)
}

/// `utimensat(2)` of the fd itself (`AT_EMPTY_PATH`).
pub(crate) fn utimens_fd(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: `times` points to two timespecs.
    cvt(unsafe {
        libc::utimensat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// `futimens(3)` of an open file.
pub(crate) fn futimens(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: `times` points to two timespecs.
    cvt(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) }).map(drop)
}

/// `faccessat2(2)` of the fd itself, with the effective (file system) ids.
pub(crate) fn faccess_fd(fd: BorrowedFd<'_>, mode: i32) -> io::Result<()> {
    // SAFETY: raw syscall with valid arguments.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    })
    .map(drop)
}

/// `fsync(2)` or `fdatasync(2)`.
pub(crate) fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> io::Result<()> {
    // SAFETY: plain calls on an fd.
    cvt(unsafe {
        if datasync {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    })
    .map(drop)
}

/// `syncfs(2)`.
pub(crate) fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain call on an fd.
    cvt(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

/// `fallocate(2)`.
pub(crate) fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let offset = i64::try_from(offset).map_err(|_| errno(libc::EINVAL))?;
    let len = i64::try_from(len).map_err(|_| errno(libc::EINVAL))?;
    // SAFETY: plain call on an fd.
    cvt(unsafe { libc::fallocate64(fd.as_raw_fd(), mode, offset, len) }).map(drop)
}

/// `lseek(2)`.
pub(crate) fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> io::Result<u64> {
    // SAFETY: plain call on an fd.
    let r = unsafe { libc::lseek64(fd.as_raw_fd(), offset, whence) };
    cvt(r).map(|r| r as u64)
}

/// `copy_file_range(2)`.
pub(crate) fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
    flags: u32,
) -> io::Result<usize> {
    let mut off_in = i64::try_from(off_in).map_err(|_| errno(libc::EINVAL))?;
    let mut off_out = i64::try_from(off_out).map_err(|_| errno(libc::EINVAL))?;
    // SAFETY: the offsets are valid for writes.
    let n = unsafe {
        libc::copy_file_range(
            fd_in.as_raw_fd(),
            &mut off_in,
            fd_out.as_raw_fd(),
            &mut off_out,
            len,
            flags,
        )
    };
    cvt_size(n)
}

/// `getdents64(2)` into `buf`; returns the bytes filled (0 at the end).
pub(crate) fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = cvt(unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    })?;
    Ok(n as usize)
}

/// `fcntl(2)` with a `struct flock` (the OFD lock commands).
pub(crate) fn fcntl_lock(fd: BorrowedFd<'_>, cmd: i32, fl: &mut libc::flock64) -> io::Result<()> {
    // SAFETY: `fl` is a valid flock struct for the kernel to read and write.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), cmd, fl as *mut libc::flock64) }).map(drop)
}

/// `flock(2)`.
pub(crate) fn flock(fd: BorrowedFd<'_>, op: i32) -> io::Result<()> {
    // SAFETY: plain call on an fd.
    cvt(unsafe { libc::flock(fd.as_raw_fd(), op) }).map(drop)
}

/// `dup(2)` then `close(2)`: releases the process's classic POSIX locks
/// on the file, and reports the errors a close would (NFS-like backends).
pub(crate) fn close_dup(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: dup of a valid fd.
    let dup = cvt(unsafe { libc::dup(fd.as_raw_fd()) })?;
    // SAFETY: `dup` is ours, closed once.
    cvt(unsafe { libc::close(dup) }).map(drop)
}

/// Value of an xattr call: `getxattr`, `listxattr` and friends on a path.
fn xattr_result(n: isize) -> io::Result<usize> {
    cvt_size(n)
}

/// `getxattr(2)` of a path (following it); an empty `buf` asks for the size.
pub(crate) fn getxattr(path: &CStr, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let (ptr, len) = if buf.is_empty() {
        (std::ptr::null_mut(), 0)
    } else {
        (buf.as_mut_ptr().cast(), buf.len())
    };
    // SAFETY: `ptr` is null with length 0 or valid for `len` bytes.
    xattr_result(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), ptr, len) })
}

/// `listxattr(2)` of a path (following it); an empty `buf` asks for the size.
pub(crate) fn listxattr(path: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let (ptr, len) = if buf.is_empty() {
        (std::ptr::null_mut(), 0)
    } else {
        (buf.as_mut_ptr().cast(), buf.len())
    };
    // SAFETY: as in `getxattr`.
    xattr_result(unsafe { libc::listxattr(path.as_ptr(), ptr, len) })
}

/// `setxattr(2)` of a path (following it).
pub(crate) fn setxattr(path: &CStr, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    // SAFETY: `value` is valid for reads of its length.
    cvt(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `removexattr(2)` of a path (following it).
pub(crate) fn removexattr(path: &CStr, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }).map(drop)
}

/// `read(2)` into `buf`, retried on EINTR.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    cvt_retry(|| {
        // SAFETY: `buf` is valid for writes of its length.
        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
    })
    .map(|n| n as usize)
}

/// Device number in the kernel's 32-bit encoding (`new_encode_dev`), as
/// `fuse_attr.rdev` and `fuse_mknod_in.rdev` carry it.
pub(crate) fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// A `dev_t` from the kernel's 32-bit encoding (`new_decode_dev`).
pub(crate) fn decode_dev(rdev: u32) -> libc::dev_t {
    let major = (rdev & 0xfff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

/// The largest file handle the kernel makes (`MAX_HANDLE_SZ`).
pub(crate) const MAX_HANDLE_SZ: usize = 128;

/// A file handle from `name_to_handle_at(2)`: an opaque, persistent
/// reference to an inode that `open_by_handle_at(2)` turns into a
/// descriptor again (or `ESTALE` once the inode is gone). Every inode
/// held by handle keeps one, so a short one (ext4's and xfs's are 8 to 12
/// bytes, tmpfs's 12) is kept in place, 24 bytes in all, and only a
/// longer one on the heap.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FileHandle(HandleRepr);

/// The most bytes a [`FileHandle`] keeps in place.
const INLINE_HANDLE: usize = 18;

#[derive(Clone, PartialEq, Eq)]
enum HandleRepr {
    /// `len` bytes at the start of `bytes` (the rest zero, so that equal
    /// handles compare equal).
    Inline {
        kind: i32,
        len: u8,
        bytes: [u8; INLINE_HANDLE],
    },
    Heap {
        kind: i32,
        bytes: Box<[u8]>,
    },
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("type", &self.kind())
            .field("len", &self.bytes().len())
            .finish()
    }
}

impl FileHandle {
    /// The handle of type `kind` made of `bytes` (`ENOMEM` if a long one
    /// finds no memory).
    pub(crate) fn new(kind: i32, bytes: &[u8]) -> io::Result<Self> {
        if bytes.len() <= INLINE_HANDLE {
            let mut inline = [0; INLINE_HANDLE];
            inline[..bytes.len()].copy_from_slice(bytes);
            return Ok(Self(HandleRepr::Inline {
                kind,
                len: bytes.len() as u8,
                bytes: inline,
            }));
        }
        let mut heap = Vec::new();
        heap.try_reserve_exact(bytes.len())
            .map_err(|_| errno(libc::ENOMEM))?;
        heap.extend_from_slice(bytes);
        Ok(Self(HandleRepr::Heap {
            kind,
            bytes: heap.into_boxed_slice(),
        }))
    }

    /// The handle's type (`handle_type`).
    pub(crate) fn kind(&self) -> i32 {
        match &self.0 {
            HandleRepr::Inline { kind, .. } | HandleRepr::Heap { kind, .. } => *kind,
        }
    }

    /// The handle's bytes (`f_handle`).
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.0 {
            HandleRepr::Inline { len, bytes, .. } => &bytes[..usize::from(*len)],
            HandleRepr::Heap { bytes, .. } => bytes,
        }
    }

    /// The inode generation the handle carries, for the encodings whose
    /// layout is known, checked against the inode number `ino` it must
    /// also carry: `FILEID_INO32_GEN` (type 1) as the generic encoder
    /// writes it (ext2/3/4, xfs with 32-bit inode numbers, ...: the inode
    /// number then the generation, 8 bytes) and as tmpfs writes it (the
    /// generation then the 64-bit inode number, 12 bytes). `None` for any
    /// other file system.
    pub(crate) fn generation(&self, ino: u64) -> Option<u32> {
        match handle_number(self.kind(), self.bytes()) {
            Some((number, generation)) if number == ino => Some(generation),
            _ => None,
        }
    }
}

/// The inode number and generation a handle of type `kind` made of `bytes`
/// carries, in the layouts [`FileHandle::generation`] reads (`None` for
/// any other). Another file system's handle of the same type and length
/// reads as some number too: a hint, to be checked against the handle
/// itself.
pub(crate) fn handle_number(kind: i32, bytes: &[u8]) -> Option<(u64, u32)> {
    const FILEID_INO32_GEN: i32 = 1;
    if kind != FILEID_INO32_GEN {
        return None;
    }
    let word = |i: usize| -> Option<u32> {
        let b = bytes.get(i * 4..i * 4 + 4)?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    match bytes.len() {
        8 => Some((u64::from(word(0)?), word(1)?)),
        12 => Some((u64::from(word(1)?) | u64::from(word(2)?) << 32, word(0)?)),
        _ => None,
    }
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawFileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// `name_to_handle_at(2)` of the descriptor itself (`AT_EMPTY_PATH`):
/// its handle and the id of the mount it is on.
pub(crate) fn name_to_handle_fd(fd: BorrowedFd<'_>) -> io::Result<(FileHandle, u64)> {
    name_to_handle_fd_flags(fd, 0)
}

/// [`name_to_handle_fd`] with more `flags` (`AT_HANDLE_FID`: the handle
/// fanotify reports the file by, which needn't be one to open).
pub(crate) fn name_to_handle_fd_flags(
    fd: BorrowedFd<'_>,
    flags: libc::c_int,
) -> io::Result<(FileHandle, u64)> {
    name_to_handle(fd, EMPTY, libc::AT_EMPTY_PATH | flags)
}

/// `name_to_handle_at(2)` of `name` in directory `dir`, not following a
/// symbolic link or triggering an automount: the handle of what the name
/// leads to now and the id of its mount.
pub(crate) fn name_to_handle_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<(FileHandle, u64)> {
    name_to_handle(dir, name, 0)
}

fn name_to_handle(
    fd: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
) -> io::Result<(FileHandle, u64)> {
    let mut raw = RawFileHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mnt_id: libc::c_int = 0;
    // SAFETY: `raw` is a file_handle with `handle_bytes` bytes of room;
    // `mnt_id` is valid for writes; the path is a C string.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            fd.as_raw_fd(),
            path.as_ptr(),
            &mut raw as *mut RawFileHandle,
            &mut mnt_id as *mut libc::c_int,
            flags,
        )
    })?;
    let len = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((
        FileHandle::new(raw.handle_type, &raw.f_handle[..len])?,
        mnt_id as u32 as u64,
    ))
}

/// `open_by_handle_at(2)`: opens the inode of `handle` on the file system
/// of `mount_fd` with `flags` (`O_CLOEXEC` added). Needs
/// `CAP_DAC_READ_SEARCH`; `ESTALE` once the inode is gone.
pub(crate) fn open_by_handle(
    mount_fd: BorrowedFd<'_>,
    handle: &FileHandle,
    flags: i32,
) -> io::Result<OwnedFd> {
    let bytes = handle.bytes();
    let len = bytes.len().min(MAX_HANDLE_SZ);
    let mut raw = RawFileHandle {
        handle_bytes: len as u32,
        handle_type: handle.kind(),
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..len].copy_from_slice(&bytes[..len]);
    with_spare_fds(|| {
        // SAFETY: `raw` is a valid file_handle of `len` bytes; the result
        // is a new descriptor or an error.
        let fd = cvt(unsafe {
            libc::syscall(
                libc::SYS_open_by_handle_at,
                mount_fd.as_raw_fd(),
                &mut raw as *mut RawFileHandle,
                flags | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: a new descriptor owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    })
}

/// The soft and hard `RLIMIT_NOFILE`.
pub(crate) fn nofile_limits() -> io::Result<(u64, u64)> {
    let mut rl = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is valid for writes.
    cvt(unsafe { libc::getrlimit64(libc::RLIMIT_NOFILE, &mut rl) })?;
    Ok((rl.rlim_cur, rl.rlim_max))
}

/// Raises the soft `RLIMIT_NOFILE` (the open file limit) of the process to
/// its hard limit; returns the (old, new) soft limit. A daemon calls this
/// at start: open files, directories and (without file handles) every
/// known inode each hold a descriptor.
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    let (soft, hard) = nofile_limits()?;
    if soft < hard {
        let rl = libc::rlimit64 {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: `rl` is a valid rlimit.
        cvt(unsafe { libc::setrlimit64(libc::RLIMIT_NOFILE, &rl) })?;
    }
    Ok((soft, hard))
}

/// Gives the allocator's free memory back to the system (`malloc_trim`),
/// after a large structure shrank (a FORGET storm).
pub(crate) fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `preadv2(fd, [buf], offset, RWF_NOWAIT)`: data only if the page cache
/// has it (`EAGAIN` otherwise, `EOPNOTSUPP` where the file system can't
/// tell).
pub(crate) fn preadv2_nowait(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, valid for writes of its length.
    let n = unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, offset as i64, libc::RWF_NOWAIT) };
    cvt_size(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// `FS_IOC_GETVERSION`: the inode generation, as ext4 reports it.
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;

    #[test]
    fn generation_from_an_ext4_file_handle_is_the_inode_generation() {
        let dir = tempfile::Builder::new()
            .prefix("pt-handle-")
            .tempdir_in(std::env::var_os("CARGO_TARGET_TMPDIR").unwrap_or_else(|| "/tmp".into()))
            .unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let st = std::fs::metadata(&path).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: plain data; all-zero is valid.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and out-pointer.
        assert_eq!(unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) }, 0);
        assert_eq!(
            fs.f_type, 0xEF53,
            "this test needs its directory on ext4 (the workspace's target/ or /tmp)"
        );
        let mut generation: libc::c_long = 0;
        // SAFETY: FS_IOC_GETVERSION writes a long through the pointer.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETVERSION, &mut generation) };
        assert_eq!(r, 0, "FS_IOC_GETVERSION: {}", io::Error::last_os_error());
        let (handle, _) = name_to_handle_fd(file.as_fd()).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(handle.generation(st.ino()), Some(generation as u32));
        assert_eq!(
            handle.generation(st.ino() + 1),
            None,
            "the handle names another inode"
        );
    }

    #[test]
    fn generation_of_unknown_handle_layouts_is_unknown() {
        let handle = |kind: i32, words: &[u32]| {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
            FileHandle::new(kind, &bytes).unwrap()
        };
        // The generic 32-bit encoding: inode number, generation.
        assert_eq!(handle(1, &[77, 5]).generation(77), Some(5));
        // tmpfs: generation, then the inode number's low and high halves.
        assert_eq!(handle(1, &[9, 77, 1]).generation(77 | 1 << 32), Some(9));
        assert_eq!(handle(1, &[9, 77, 1]).generation(77), None);
        // btrfs and others: not decoded.
        assert_eq!(handle(0x4d, &[77, 0, 5, 0, 0]).generation(77), None);
        assert_eq!(handle(1, &[77]).generation(77), None);
    }
}
