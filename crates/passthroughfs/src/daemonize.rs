//! Going to the background once the mount is usable, the way libfuse
//! daemons do without `-f`: the process forks before it mounts; the parent
//! waits for the child to report and exits with the outcome (0 once the
//! mount is usable, 1 with the child's error otherwise), so `mount(8)`, a
//! script or an fstab line learns whether the mount came up; the child
//! serves in a session of its own, detached from the terminal, with its
//! log in syslog or a `--log-file` (and a warning, while the terminal is
//! still there, when nothing listens on the syslog socket).

use crate::Failure;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// The child's end of the report to the waiting parent (none in the
/// foreground).
#[derive(Debug, Default)]
pub struct Detach {
    report: Option<std::fs::File>,
    /// Ready was reported: standard error is gone, the log is syslog.
    detached: bool,
}

/// What the child writes before its error message.
const ERROR: &[u8] = b"error:";
/// What the child writes once the mount is usable.
const READY: &[u8] = b"ready";

impl Detach {
    /// Staying in the foreground: nothing to report to.
    pub fn foreground() -> Detach {
        Detach::default()
    }

    /// Forks. Returns in the child, which goes on to mount and serve and
    /// must call [`Detach::ready`] or [`Detach::report_failure`]; the parent never
    /// returns: it exits with the child's outcome. Call it before any
    /// other thread exists (only the calling thread goes on in the child).
    pub fn background() -> Result<Detach, Failure> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        // Close-on-exec: fusermount3 (which may stay alive as the
        // auto_unmount watcher) must not hold the write end open.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Failure(format!(
                "cannot go to the background (pipe): {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the caller guarantees no other thread exists, so the child
        // (a copy of this one thread) may go on running Rust code.
        match unsafe { libc::fork() } {
            -1 => Err(Failure(format!(
                "cannot go to the background (fork): {}",
                std::io::Error::last_os_error()
            ))),
            0 => {
                drop(read);
                // A session of its own: no terminal's SIGHUP or Ctrl-C.
                // SAFETY: no preconditions; a fresh child is no group leader.
                unsafe { libc::setsid() };
                Ok(Detach {
                    report: Some(std::fs::File::from(write)),
                    detached: false,
                })
            }
            child => {
                drop(write);
                std::process::exit(wait_for_child(std::fs::File::from(read), child))
            }
        }
    }

    /// Whether this is the background child.
    pub fn is_background(&self) -> bool {
        self.report.is_some() || self.detached
    }

    /// The mount is usable: tells the parent (which exits 0), then leaves
    /// the terminal behind: the working directory becomes `/` (the
    /// daemon must not keep a directory of another mount busy), the log
    /// goes to syslog (unless to a `--log-file`), and standard input,
    /// output and error to `/dev/null`. Without a `--log-file` and with
    /// no syslog daemon listening, it says so first, on the standard
    /// error the command's caller still sees: the log would be lost.
    pub fn ready(&mut self) {
        let Some(mut report) = self.report.take() else {
            return;
        };
        if !crate::logging::logs_to_file() {
            if !crate::logging::syslog_listens() {
                crate::logging::say(&no_syslog_warning());
            }
            crate::logging::log_to_syslog();
        }
        self.detached = true;
        let _ = report.write_all(READY);
        drop(report);
        // SAFETY: chdir with a static NUL-terminated path; open and dup2
        // on descriptors this process owns (0, 1 and 2 are replaced).
        unsafe {
            libc::chdir(c"/".as_ptr());
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                for fd in 0..3 {
                    libc::dup2(null, fd);
                }
                if null > 2 {
                    libc::close(null);
                }
            }
        }
    }

    /// The daemon failed: before it was ready, the waiting parent prints
    /// `message` and exits 1; once detached it goes to the log; in the
    /// foreground to standard error.
    pub fn report_failure(&mut self, message: &str) {
        if let Some(mut report) = self.report.take() {
            let _ = report.write_all(ERROR);
            let _ = report.write_all(message.as_bytes());
        } else if self.detached {
            tracing::error!("{message}");
        } else {
            crate::logging::say(&format!("passthroughfs: error: {message}"));
        }
    }
}

/// What a background daemon says when nothing listens on the syslog
/// socket: its log lines would go nowhere.
pub fn no_syslog_warning() -> String {
    format!(
        "passthroughfs: warning: no syslog daemon listens on {}: the background daemon's log \
         is lost; --log-file PATH keeps it in a file (or -f keeps it on standard error)",
        crate::logging::SYSLOG_SOCKET
    )
}

/// The parent's side: the exit status for what the child reports.
fn wait_for_child(mut report: std::fs::File, child: libc::pid_t) -> i32 {
    let mut got = Vec::new();
    let _ = report.read_to_end(&mut got);
    if got == READY {
        return 0;
    }
    if let Some(message) = got.strip_prefix(ERROR) {
        crate::logging::say(&format!(
            "passthroughfs: error: {}",
            String::from_utf8_lossy(message)
        ));
        return 1;
    }
    // The child is gone without a word (killed, or it crashed).
    let mut status = 0;
    // SAFETY: `child` is our child; `status` is written by waitpid.
    let how = match unsafe { libc::waitpid(child, &mut status, 0) } {
        -1 => "its status is unknown".to_string(),
        _ if libc::WIFSIGNALED(status) => format!("killed by signal {}", libc::WTERMSIG(status)),
        _ => format!("exit status {}", libc::WEXITSTATUS(status)),
    };
    crate::logging::say(&format!(
        "passthroughfs: error: the daemon ended before the mount was usable ({how})"
    ));
    1
}
