//! Crash recovery over `/dev/fuse`: a supervisor process that holds the
//! connection while serving processes come and go.
//!
//! The supervisor mounts, creates the [`StateArea`] and starts a serving
//! process (a command of the caller's, usually the same program) that
//! inherits both descriptors, named in the environment
//! ([`Supervised::from_env`]). The supervisor never reads the device: it
//! only keeps the connection open. When the serving process dies without
//! being asked to (a crash, `kill -9`), the mount stays, requests queue in
//! the kernel, and the supervisor starts another serving process, which
//! takes the same connection over ([`DevSession::supervised`]): it resumes
//! what INIT settled (kept in the area), restores the file system's table
//! (the file system's own business, in the area's file system region),
//! sends `FUSE_NOTIFY_RESEND` so that the kernel queues again the requests
//! the dead process had read and not answered, and serves. The request
//! journal in the area says what to do with those (see
//! `fuse_server::recovery`).
//!
//! A serving process reads the supervisor's own descriptor, never a clone
//! (`FUSE_DEV_IOC_CLONE`): closing a clone (which a dying process does)
//! ends the requests read through it with `ECONNABORTED`, whereas the
//! supervisor's open descriptor keeps them waiting for the resend.
//!
//! Exits: a serving process that ends with status 0 was done (the file
//! system was unmounted, or it was asked to stop); the supervisor then
//! unmounts (if still mounted) and returns 0. One that was killed or failed
//! is replaced; one that fails [`Supervisor::max_start_failures`] times in
//! a row before serving makes the supervisor unmount and give up. One that
//! ends with [`EXIT_RESTART`] is replaced too (a planned restart). SIGTERM,
//! SIGINT and SIGHUP to the supervisor are passed to the serving process
//! (which stops; see above), SIGUSR1 and SIGUSR2 (which asks it to restart)
//! too.

use crate::mount::Mount;
use crate::session::{DevNotificationSink, DevSession, SessionConfig, SessionError};
use fuse_server::recovery::StateArea;
use fuse_server::Server;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment variable naming a serving process's inherited
/// descriptors: `<device fd>,<state area fd>`.
pub const ENV_FDS: &str = "FUSE_SUPERVISED_FDS";
/// The environment variable with the mountpoint.
pub const ENV_MOUNTPOINT: &str = "FUSE_SUPERVISED_MOUNTPOINT";
/// The exit status of a serving process that gave the connection back
/// without unmounting (after [`DevSession::pause`] and
/// [`DevSession::release`]: every request it read was answered) and asks
/// for a successor: a planned restart, e.g. to run a build newly installed
/// at the program's path. The supervisor asks for one with SIGUSR2.
pub const EXIT_RESTART: i32 = 75;

/// What a serving process inherits from its supervisor.
#[derive(Debug)]
pub struct Supervised {
    /// The connection's `/dev/fuse` descriptor (the supervisor's).
    pub dev_fd: OwnedFd,
    /// The state area.
    pub area: StateArea,
    /// Where the file system is mounted.
    pub mountpoint: PathBuf,
}

impl Supervised {
    /// The descriptors a supervisor passed this process, if it was started
    /// by one ([`ENV_FDS`], [`ENV_MOUNTPOINT`]). Takes the variables out of
    /// the environment (programs this one starts don't inherit them) and
    /// marks the descriptors close-on-exec. Call it early in `main`,
    /// before other threads exist. Fails, with the reason, on variables
    /// that don't name a device and a state area.
    pub fn from_env() -> io::Result<Option<Supervised>> {
        let Some(fds) = std::env::var_os(ENV_FDS) else {
            return Ok(None);
        };
        let mountpoint = std::env::var_os(ENV_MOUNTPOINT).map(PathBuf::from);
        std::env::remove_var(ENV_FDS);
        std::env::remove_var(ENV_MOUNTPOINT);
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let fds = fds.to_string_lossy().into_owned();
        let mountpoint =
            mountpoint.ok_or_else(|| bad(format!("{ENV_FDS} without {ENV_MOUNTPOINT}")))?;
        let parsed: Vec<RawFd> = fds
            .split(',')
            .map(|f| f.parse::<RawFd>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad(format!("{ENV_FDS}={fds:?}: not two descriptor numbers")))?;
        let [dev, area] = parsed[..] else {
            return Err(bad(format!(
                "{ENV_FDS}={fds:?}: not two descriptor numbers"
            )));
        };
        let take = |fd: RawFd| {
            take_inherited_fd(fd)
                .map_err(|e| bad(format!("{ENV_FDS}: descriptor {fd} is not open ({e})")))
        };
        let dev_fd = take(dev)?;
        let area = StateArea::open(take(area)?)?;
        Ok(Some(Supervised {
            dev_fd,
            area,
            mountpoint,
        }))
    }
}

/// Takes descriptor `fd`, which a supervisor left open for this process
/// (named in the environment, inherited across `exec`): checks it is open
/// and not one of the standard three, and makes it close-on-exec so that
/// the programs this process runs don't inherit it in turn. Call it once
/// per descriptor, before other threads run (the number must not have been
/// reused).
pub fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: a plain fcntl; fails on a descriptor that isn't open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: inherited for this process alone and taken once (above).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl DevSession {
    /// Serves the connection of a supervisor (crash recovery; see
    /// [`crate::supervise`]). The first serving process answers INIT and
    /// writes down what it settled; a later one resumes it
    /// ([`Server::resume`]), asks the kernel to resend what the dead one
    /// had read (`FUSE_NOTIFY_RESEND`, before reading anything), and
    /// serves. The server keeps its request journal in the area; the file
    /// system must have taken its own table back already. Workers read
    /// the supervisor's descriptor (no clones, whatever `config` says).
    /// The session owns the mount as if it had made it, except that
    /// [`Session::stop`](fuse_server::Session::stop) of a supervised
    /// session should rather be [`DevSession::pause`] then
    /// [`DevSession::release`]: the supervisor unmounts.
    pub fn supervised(
        server: Server,
        supervised: Supervised,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        let Supervised {
            dev_fd,
            area,
            mountpoint,
        } = supervised;
        // No clones (see the module documentation), and no page fault
        // while the kernel copies a request in: a process killed then
        // would make the kernel fail that request with EIO.
        let config = config.clone_fd(false).prefault_buffers(true);
        crate::session::install_wake_handler(config.wake_signal);
        let master = crate::session::keep_as_master(
            &server,
            dev_fd.try_clone().map_err(SessionError::Init)?,
        );
        server.set_request_journal(area.journal());
        match area.negotiated().map_err(SessionError::Init)? {
            Some(negotiated) => {
                server.resume(&negotiated).map_err(SessionError::Init)?;
                let notifier = server.notifier(Arc::new(DevNotificationSink(master.clone())));
                match notifier.resend() {
                    Ok(()) => tracing::info!(
                        "took over from a serving process that ended; the kernel resends what it held"
                    ),
                    Err(e) => tracing::error!(
                        "FUSE_NOTIFY_RESEND failed ({e}): requests the ended process had read \
                         wait until their callers give up"
                    ),
                }
            }
            None => {
                crate::session::serve_init(&server, master.as_fd())?;
                let negotiated = server.negotiated().ok_or_else(|| {
                    SessionError::Init(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "connection ended before INIT",
                    ))
                })?;
                area.set_negotiated(negotiated)
                    .map_err(SessionError::Init)?;
            }
        }
        let mount = Mount::adopt(dev_fd, mountpoint);
        let session = Self::serve(Arc::new(server), master, mount, config, false)?;
        area.set_serving(std::process::id());
        Ok(session)
    }
}

/// Mounts kept alive across serving processes; see the module
/// documentation.
pub struct Supervisor {
    mount: Mount,
    area: StateArea,
    max_start_failures: u32,
}

/// How a supervisor's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisorExit {
    /// The serving process ended with status 0 (unmounted, or asked to
    /// stop); the file system is unmounted.
    Done,
    /// Serving processes kept failing before they served; unmounted.
    GaveUp(String),
}

impl Supervisor {
    /// Supervises `mount` with a new state area whose file system region
    /// has `fs_bytes` (sparse: pages cost memory once written).
    pub fn new(mount: Mount, fs_bytes: usize) -> io::Result<Supervisor> {
        Ok(Supervisor {
            mount,
            area: StateArea::create(fs_bytes)?,
            max_start_failures: 5,
        })
    }

    /// Gives up after `n` serving processes in a row end before serving
    /// (default 5).
    pub fn max_start_failures(mut self, n: u32) -> Self {
        self.max_start_failures = n.max(1);
        self
    }

    /// The state area (to look at; the serving processes write it).
    pub fn area(&self) -> &StateArea {
        &self.area
    }

    /// Starts serving processes, one at a time, each from `command()`
    /// (with [`ENV_FDS`] and [`ENV_MOUNTPOINT`] added), until one ends
    /// with status 0 or they keep failing; then unmounts. `ready` runs
    /// once, when the first one serves. Handles SIGTERM, SIGINT, SIGHUP,
    /// SIGUSR1 and SIGUSR2 (passed on to the serving process) and SIGCHLD by
    /// blocking them in the calling thread: call it from the only thread.
    pub fn run(
        mut self,
        mut command: impl FnMut() -> Command,
        ready: impl FnOnce(),
    ) -> io::Result<SupervisorExit> {
        let mut ready = Some(ready);
        let signals = block_supervisor_signals();
        let dev = inheritable(self.mount.dev_fd())?;
        let area = inheritable(self.area.fd())?;
        let mountpoint = self.mount.mountpoint().to_path_buf();
        let mut start_failures = 0;
        let mut stopping = false;
        let mut serving_since: Option<Instant> = None;
        // Killed serving processes not reaped yet (a thread of theirs may
        // wait in the kernel for something only the next one can answer).
        let mut lingering: Vec<Child> = Vec::new();
        let outcome = loop {
            let mut cmd = command();
            cmd.env(ENV_FDS, format!("{},{}", dev.as_raw_fd(), area.as_raw_fd()))
                .env(ENV_MOUNTPOINT, &mountpoint);
            let mut child: Child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    break SupervisorExit::GaveUp(format!("starting the serving process: {e}"));
                }
            };
            let pid = child.id();
            tracing::info!(pid, "serving process started");
            let mut dead_since: Option<Instant> = None;
            let status = loop {
                lingering.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
                if let Some(status) = child.try_wait()? {
                    break Some(status);
                }
                // Its main thread is gone but the process isn't: a thread
                // is stuck in the kernel, typically a notification
                // (INVAL_ENTRY) waiting for a directory lock that a
                // client holds while it waits for a reply only the next
                // serving process can give. Don't wait for it.
                if main_thread_dead(pid) {
                    let since = *dead_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_millis(200) {
                        tracing::warn!(
                            pid,
                            "the serving process died, one of its threads is stuck in the kernel"
                        );
                        break None;
                    }
                }
                let served = self.area.serving() == pid;
                if served && serving_since.is_none() {
                    serving_since = Some(Instant::now());
                    start_failures = 0;
                    if let Some(ready) = ready.take() {
                        ready();
                    }
                }
                // A main thread dying sends no SIGCHLD while a thread lives on:
                // look every 100 ms.
                let wait = if served && dead_since.is_none() {
                    100
                } else {
                    10
                };
                match wait_signal(&signals, Duration::from_millis(wait)) {
                    Some(sig @ (libc::SIGUSR1 | libc::SIGUSR2)) => kill(pid, sig),
                    Some(sig @ (libc::SIGTERM | libc::SIGINT | libc::SIGHUP)) => {
                        tracing::info!(signal = sig, "stopping the serving process");
                        stopping = true;
                        kill(pid, libc::SIGTERM);
                    }
                    _ => {}
                }
            };
            let served = serving_since.take().is_some() || self.area.serving() == pid;
            let Some(status) = status else {
                lingering.push(child);
                if stopping {
                    break SupervisorExit::Done;
                }
                if !served {
                    start_failures += 1;
                    if start_failures >= self.max_start_failures {
                        break SupervisorExit::GaveUp(format!(
                            "{start_failures} serving processes in a row ended before serving"
                        ));
                    }
                }
                tracing::warn!(pid, "the serving process died; starting another");
                continue;
            };
            if status.success() {
                break SupervisorExit::Done;
            }
            if status.code() == Some(EXIT_RESTART) && !stopping {
                tracing::info!(
                    pid,
                    "the serving process gave the connection back; starting the next"
                );
                continue;
            }
            if stopping {
                tracing::warn!(pid, %status, "the serving process failed while stopping");
                break SupervisorExit::Done;
            }
            if !served {
                start_failures += 1;
                if start_failures >= self.max_start_failures {
                    break SupervisorExit::GaveUp(format!(
                        "{start_failures} serving processes in a row ended before serving \
                         (the last: {status})"
                    ));
                }
            }
            match status.signal() {
                Some(sig) => tracing::warn!(
                    pid,
                    signal = sig,
                    "the serving process was killed; starting another"
                ),
                None => {
                    tracing::warn!(pid, %status, "the serving process failed; starting another")
                }
            }
        };
        if let SupervisorExit::GaveUp(why) = &outcome {
            tracing::error!("giving up: {why}");
        }
        if let Err(e) = self.mount.unmount() {
            tracing::warn!("unmounting: {e}");
        }
        Ok(outcome)
    }
}

/// Whether the main thread of process `pid` has exited (a zombie leader)
/// while the process lives on in another thread.
fn main_thread_dead(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and
    // may contain anything.
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .is_some_and(|state| state == 'Z')
}

/// A duplicate of `fd` that child processes inherit.
fn inheritable(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD makes a new descriptor (without close-on-exec).
    let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, 3) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn block_supervisor_signals() -> libc::sigset_t {
    // SAFETY: the set is initialized by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGCHLD,
        ] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timeout; no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

fn kill(pid: u32, sig: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: a plain kill of our own child.
            unsafe { libc::kill(pid, sig) };
        }
    }
}
