//! `auto_unmount` for a mount made with `mount(2)`: a watcher process,
//! forked at mount time, that unmounts the file system if the daemon dies
//! without unmounting it (SIGKILL, a crash), as `fusermount3 -o
//! auto_unmount` does for unprivileged daemons.
//!
//! The daemon keeps the write end of a pipe; the watcher blocks reading the
//! other end. A daemon that unmounts says so (one byte) before it closes
//! its end, and the watcher exits. If the end closes without that byte the
//! daemon is gone: the watcher checks that the topmost mount at the
//! mountpoint is still this one (by mount id: another file system may have
//! been mounted there since), aborts the FUSE connection (so that processes
//! waiting on it get errors at once instead of waiting for the kernel to
//! tear down what the daemon left, such as its io_uring queues) and
//! detaches the mount (`MNT_DETACH`).
//!
//! Unlike fusermount3, the watcher does not ask the mount whether its
//! daemon is gone (fusermount3 opens the mountpoint and expects
//! `ENOTCONN`, which a connection kept alive by io_uring queues that the
//! kernel has yet to tear down does not give): the pipe says so.
//!
//! The watcher is forked from a process that may run other threads, so
//! between `fork` and `_exit` it makes only system calls on what was
//! prepared before the fork: no allocation, no lock, no panic.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What the daemon writes before closing its end after a clean unmount.
const UNMOUNTED: u8 = b'u';

/// The daemon's side of a running watcher.
#[derive(Debug)]
pub(super) struct UnmountWatcher {
    /// The write end; closing it without [`UNMOUNTED`] makes the watcher
    /// unmount.
    pipe: Option<OwnedFd>,
    pid: libc::pid_t,
}

/// The mount's identity, read before the fork.
struct Identity {
    mount_id: u64,
    /// `/sys/fs/fuse/connections/N/abort` of its connection.
    abort: CString,
}

/// Reads the mount id and connection of the mount at `path` without
/// asking its daemon (`AT_STATX_DONT_SYNC`: it may not have answered INIT
/// yet).
fn identity(path: &CString) -> io::Result<Identity> {
    // SAFETY: an all-zero statx is a valid output buffer.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    if statx_mount(path, &mut stx) != 0 {
        return Err(io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel reports no mount id (statx STATX_MNT_ID)",
        ));
    }
    // fusectl names a connection by the kernel's dev_t of the super block:
    // major << 20 | minor.
    let conn = (u64::from(stx.stx_dev_major) << 20) | u64::from(stx.stx_dev_minor);
    Ok(Identity {
        mount_id: stx.stx_mnt_id,
        abort: CString::new(format!("/sys/fs/fuse/connections/{conn}/abort"))
            .expect("no NUL in a number"),
    })
}

/// `statx` of the topmost mount at `path` for its mount id, from the
/// kernel's cache (a dead daemon can't answer): one system call, so the
/// watcher may make it after the fork too.
fn statx_mount(path: &CString, stx: &mut libc::statx) -> libc::c_int {
    // SAFETY: `path` is NUL-terminated; `stx` is a valid output buffer.
    unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_DONT_SYNC | libc::AT_NO_AUTOMOUNT,
            libc::STATX_MNT_ID,
            stx,
        )
    }
}

impl UnmountWatcher {
    /// Forks the watcher for the FUSE mount just made at `mountpoint`
    /// (canonical).
    pub(super) fn spawn(mountpoint: &Path) -> io::Result<UnmountWatcher> {
        let path = CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let id = identity(&path)?;
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors. Close-on-exec: no
        // program the daemon starts may keep the write end open.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just created and are owned here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child runs only `watch`, which makes system calls on
        // memory prepared before the fork and ends in `_exit`.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => watch(read.as_raw_fd(), &path, &id),
            pid => Ok(UnmountWatcher {
                pipe: Some(write),
                pid,
            }),
        }
    }

    /// The daemon unmounted: the watcher exits without doing anything, and
    /// is reaped.
    pub(super) fn unmounted(&mut self) {
        let Some(pipe) = self.pipe.take() else {
            return;
        };
        // SAFETY: writing one byte from a local to a descriptor we own.
        unsafe { libc::write(pipe.as_raw_fd(), [UNMOUNTED].as_ptr().cast(), 1) };
        drop(pipe);
        self.reap();
    }

    /// Reaps the watcher if it has exited already (never blocks).
    fn reap_if_done(&mut self) {
        let mut status = 0;
        // SAFETY: our own child; WNOHANG never blocks.
        unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
    }

    fn reap(&mut self) {
        let mut status = 0;
        // Nothing to do if it fails: the child is gone either way.
        // SAFETY: our own child; it exits right after reading the pipe.
        let _ = fuse_server::sys::cvt_retry(|| unsafe { libc::waitpid(self.pid, &mut status, 0) });
    }
}

impl Drop for UnmountWatcher {
    /// Still mounted (the unmount failed, or the mount is dropped without
    /// one): closing the pipe leaves the watcher to detach the mount.
    fn drop(&mut self) {
        if self.pipe.take().is_some() {
            // The watcher goes on alone; init reaps it if we exit first.
            self.reap_if_done();
        }
    }
}

/// The watcher: only system calls from here on (see the module's docs).
fn watch(pipe: libc::c_int, path: &CString, id: &Identity) -> ! {
    // SAFETY: every call below takes descriptors this process owns and
    // NUL-terminated strings or local buffers prepared before the fork.
    unsafe {
        // Keep nothing of the daemon's open: above all not its /dev/fuse
        // descriptors, which would keep the connection alive.
        libc::dup2(pipe, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
        }
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        // Out of the daemon's session: a Ctrl-C at its terminal is for it;
        // and deaf to every signal but SIGKILL (a service manager's SIGTERM
        // to the whole group is for the daemon, which unmounts and says so).
        libc::setsid();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        // Named for what it is in ps and pgrep (not a second daemon).
        libc::prctl(libc::PR_SET_NAME, c"fuse-unmounter".as_ptr());
        let mut byte = 0u8;
        let n = loop {
            let n = libc::read(0, (&mut byte as *mut u8).cast(), 1);
            if n >= 0 || *libc::__errno_location() != libc::EINTR {
                break n;
            }
        };
        if n == 1 && byte == UNMOUNTED {
            libc::_exit(0);
        }
        // The daemon is gone. Is its mount still the topmost one there?
        let mut stx: libc::statx = std::mem::zeroed();
        if statx_mount(path, &mut stx) != 0 || stx.stx_mnt_id != id.mount_id {
            libc::_exit(0);
        }
        let abort = libc::open(id.abort.as_ptr(), libc::O_WRONLY);
        if abort >= 0 {
            libc::write(abort, c"1".as_ptr().cast(), 1);
            libc::close(abort);
        }
        libc::umount2(path.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW);
        libc::_exit(0)
    }
}
