//! The process that unmounts for a confined daemon.
//!
//! Inside its own mount namespace (or root) the daemon can't reach the
//! host's mountpoint, so before confining it forks this helper, which
//! stays outside: at stop the daemon writes one byte, the helper unmounts
//! (`umount2`, lazily if busy; `fusermount3 -u -z` for a mount made
//! through it) and answers with one byte. If the daemon's end closes
//! without a request (it exited on its own after an unmount, or died), the
//! helper exits without touching the mount: a dead mount then stays as
//! without a sandbox (`--unmount-dead` clears it). It unmounts only the
//! mount it was made for (by mount id): asked after the file system was
//! unmounted from outside, it answers `ENOENT` and touches nothing; asked
//! after the kernel aborted the connection (a request timeout), it clears
//! the dead mount.
//!
//! It is forked from a process that may run other threads, so between
//! `fork` and `_exit` it makes only system calls on what was prepared
//! before the fork: no allocation, no lock, no panic.

use crate::Failure;
use fuse_transport_dev::mount_id_at;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The daemon's side of the helper.
#[derive(Debug)]
pub struct Unmounter {
    /// Written to ask for the unmount.
    request: OwnedFd,
    /// Read for the answer.
    answer: OwnedFd,
    pid: libc::pid_t,
}

/// The byte that asks for an unmount (the answer is 0 or an errno).
const UNMOUNT: u8 = b'u';

fn pipe() -> Result<(OwnedFd, OwnedFd), Failure> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Failure(format!(
            "creating the unmounter's pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: two new descriptors of ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Where `fusermount3` is (searched before the fork: `execvp` allocates).
fn find_fusermount() -> Option<CString> {
    let paths = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&paths)
        .map(|d| d.join("fusermount3"))
        .find(|p| p.is_file())
        .and_then(|p| CString::new(p.as_os_str().as_bytes()).ok())
}

impl Unmounter {
    /// Forks the helper for the mount at `mountpoint` (made through
    /// `fusermount3` if `fusermount`).
    pub fn spawn(mountpoint: &Path, fusermount: bool) -> Result<Unmounter, Failure> {
        let path = CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|_| Failure("the mountpoint's path holds a NUL byte".into()))?;
        let fusermount = match fusermount {
            true => Some(find_fusermount().ok_or_else(|| {
                Failure("the unmounter needs fusermount3, which is not in PATH".into())
            })?),
            false => None,
        };
        let argv = fusermount.as_ref().map(|prog| {
            [
                prog.as_ptr(),
                c"-u".as_ptr(),
                c"-z".as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
            ]
        });
        // The mount the helper may unmount: a request finding another
        // mount (or none) on the path is answered ENOENT, untouched.
        let mount_id = mount_id_at(&path);
        let args = arg_area();
        // Its standard streams: not the daemon's (a background daemon's
        // starter waits for them to close, and the tests count the
        // processes that hold them).
        // SAFETY: a static NUL-terminated path.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if null < 0 {
            return Err(Failure(format!(
                "the unmounter: opening /dev/null: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: a new descriptor of ours.
        let null = unsafe { OwnedFd::from_raw_fd(null) };
        let (req_r, req_w) = pipe()?;
        let (ans_r, ans_w) = pipe()?;
        let (keep_a, keep_b, null_fd) = (req_r.as_raw_fd(), ans_w.as_raw_fd(), null.as_raw_fd());
        // SAFETY: the child runs only async-signal-safe system calls on
        // data prepared above, then _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Failure(format!(
                "forking the unmounter: {}",
                std::io::Error::last_os_error()
            )));
        }
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                child(
                    keep_a,
                    keep_b,
                    null_fd,
                    args,
                    &path,
                    mount_id,
                    argv.as_ref().map(|a| a.as_ptr()),
                )
            }
        }
        Ok(Unmounter {
            request: req_w,
            answer: ans_r,
            pid,
        })
    }

    /// Asks the helper to unmount and waits for its answer (the
    /// `umount2` or `fusermount3` error, if any). Once only: the helper
    /// exits after answering.
    pub fn unmount(&mut self) -> std::io::Result<()> {
        if self.pid == 0 {
            return Ok(());
        }
        // SAFETY: writing one byte from a valid buffer to our pipe.
        let n = unsafe { libc::write(self.request.as_raw_fd(), [UNMOUNT].as_ptr().cast(), 1) };
        if n != 1 {
            return Err(std::io::Error::other(format!(
                "the unmounter is gone: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut b = 0u8;
        // SAFETY: reading one byte into `b`.
        let n = unsafe { libc::read(self.answer.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
        // SAFETY: our child; reaped so no zombie stays.
        unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
        self.pid = 0;
        match (n, b) {
            (1, 0) => Ok(()),
            (1, errno) => Err(std::io::Error::from_raw_os_error(errno.into())),
            _ => Err(std::io::Error::other(
                "the unmounter ended without answering",
            )),
        }
    }

    /// [`Unmounter::unmount`] as the mount's way to unmount
    /// ([`fuse_transport_dev::Mount::unmount_through`]).
    pub fn into_unmount_fn(mut self) -> fuse_transport_dev::UnmountFn {
        Box::new(move || self.unmount())
    }
}

/// Where this process's command line is in its memory (`arg_start`,
/// `arg_end` of `/proc/self/stat`), for the helper to write its own name
/// over: `/proc/PID/cmdline` then tells it from the daemon.
fn arg_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command's name (which may hold spaces): state is
    // field 3, arg_start field 48.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let start = fields.get(48 - 3)?.parse().ok()?;
    let end = fields.get(49 - 3)?.parse().ok()?;
    (end > start).then_some((start, end))
}

/// The helper's command line and thread name.
const NAME: &[u8] = b"passthroughfs-unmounter\0";

/// The helper: keeps only its two pipe ends, ignores the signals that
/// stop the daemon (a Ctrl-C reaches the whole process group: the daemon
/// then asks for the unmount), and waits.
///
/// # Safety
///
/// Called in the child right after `fork`; never returns.
unsafe fn child(
    req: i32,
    ans: i32,
    null: i32,
    args: Option<(usize, usize)>,
    path: &CStr,
    mount_id: Option<u64>,
    argv: Option<*const *const libc::c_char>,
) -> ! {
    // SAFETY: plain system calls on our own descriptors and data; the
    // command line area is this process's own (a copy after fork).
    unsafe {
        if let Some((start, end)) = args {
            let area = std::slice::from_raw_parts_mut(start as *mut u8, end - start);
            area.fill(0);
            let n = NAME.len().min(area.len());
            area[..n].copy_from_slice(&NAME[..n]);
        }
        libc::prctl(libc::PR_SET_NAME, NAME.as_ptr());
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        // Holding the daemon's /dev/fuse descriptor would keep a dead
        // daemon's connection alive (clients would hang instead of getting
        // ENOTCONN): everything else is closed.
        let (lo, hi) = if req < ans { (req, ans) } else { (ans, req) };
        if lo > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (lo - 1) as u32, 0u32);
        }
        if hi > lo + 1 {
            libc::syscall(
                libc::SYS_close_range,
                (lo + 1) as u32,
                (hi - 1) as u32,
                0u32,
            );
        }
        libc::syscall(libc::SYS_close_range, (hi + 1) as u32, u32::MAX, 0u32);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut b = 0u8;
        loop {
            let n = libc::read(req, (&mut b as *mut u8).cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n != 1 || b != UNMOUNT {
                libc::_exit(0);
            }
            break;
        }
        // Only the mount this helper was made for: after an unmount from
        // outside (the daemon then asks anyway) the path shows another.
        if let Some(id) = mount_id {
            if mount_id_at(path) != Some(id) {
                let answer = libc::ENOENT as u8;
                libc::write(ans, (&answer as *const u8).cast(), 1);
                libc::_exit(0);
            }
        }
        let errno = match argv {
            None => {
                let mut r = libc::umount2(path.as_ptr(), libc::UMOUNT_NOFOLLOW);
                if r != 0 && *libc::__errno_location() == libc::EBUSY {
                    r = libc::umount2(path.as_ptr(), libc::UMOUNT_NOFOLLOW | libc::MNT_DETACH);
                }
                if r == 0 {
                    0
                } else {
                    *libc::__errno_location()
                }
            }
            Some(argv) => {
                let pid = libc::fork();
                if pid == 0 {
                    libc::execv(*argv, argv);
                    libc::_exit(127);
                }
                let mut status = 0;
                if pid > 0 && libc::waitpid(pid, &mut status, 0) == pid && status == 0 {
                    0
                } else {
                    // fusermount3 said why on standard error.
                    libc::EIO
                }
            }
        };
        libc::write(ans, [errno.clamp(0, 255) as u8].as_ptr().cast(), 1);
        libc::_exit(0);
    }
}
