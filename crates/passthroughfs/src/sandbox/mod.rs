//! Confinement of the daemon once its mount (or vhost-user socket) is set
//! up and before it serves: what a bug in this program or a dependency
//! could reach is cut down to SOURCE and the system calls serving needs.
//!
//! One concern per file, applied by [`confine`] in this order:
//!
//! - [`rlimits`]: no core dumps (they would hold served data), the
//!   descriptor limit set explicitly (always, whatever the mode);
//! - [`unmounter`]: a small process forked outside the sandbox that
//!   unmounts the host's mount when the daemon stops (inside its own
//!   mount namespace the daemon can't see it);
//! - [`namespace`]: new mount, network and IPC namespaces and a root that
//!   holds only SOURCE and `/proc` (`--sandbox namespace`);
//! - [`capabilities`]: every capability but those serving uses dropped;
//! - [`landlock`]: file access limited to SOURCE (and reading `/proc`),
//!   no TCP, no signals or abstract sockets outside the sandbox;
//! - [`seccomp`]: an allow list of system calls (`--seccomp`).
//!
//! docs/security.md compares each mode with virtiofsd's sandbox.

pub mod capabilities;
#[cfg(feature = "fault-injection")]
pub mod escape;
pub mod landlock;
pub mod namespace;
pub mod rlimits;
pub mod seccomp;
pub mod unmounter;

use crate::Failure;
use std::path::PathBuf;

/// `--sandbox`: where the daemon's view of the file system ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxMode {
    /// New mount, network and IPC namespaces; the root becomes a read-only
    /// tmpfs holding SOURCE (at `/source`) and a `/proc`.
    Namespace,
    /// chroot(2) into SOURCE, no namespaces (for where namespaces are
    /// refused). Refused by this daemon for now (its inodes are reached
    /// through /proc/self/fd paths, which a chroot would resolve inside
    /// SOURCE, where a client controls the names: docs/security.md).
    Chroot,
    /// No namespace and no change of root.
    None,
}

/// `--seccomp`: what a system call outside the allow list does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SeccompMode {
    /// The daemon logs the call's name and exits (status 159).
    Kill,
    /// The kernel logs the call (audit log, `dmesg`) and lets it run.
    Log,
    /// No filter.
    None,
}

/// `--landlock`: whether a Landlock ruleset limits file access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LandlockMode {
    /// File access limited to SOURCE and reading `/proc`; refused if the
    /// kernel lacks Landlock.
    On,
    /// No ruleset.
    Off,
}

/// What [`confine`] applies, and what serving needs kept.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// `--sandbox`.
    pub sandbox: SandboxMode,
    /// `--seccomp`.
    pub seccomp: SeccompMode,
    /// `--landlock`.
    pub landlock: LandlockMode,
    /// `--landlock` was given (not the default): a kernel without
    /// Landlock is then an error rather than a warning.
    pub landlock_asked: bool,
    /// The directory served (as the command named it).
    pub source: PathBuf,
    /// The host's mountpoint, for the unmounter (none over vhost-user or
    /// when a supervisor owns the mount).
    pub mountpoint: Option<PathBuf>,
    /// Whether the mount was made through `fusermount3` (the unmounter
    /// then runs `fusermount3 -u`).
    pub fusermount: bool,
    /// The system calls this mode makes beyond the common ones.
    pub features: seccomp::Features,
    /// The backend holds inodes by file handle (`open_by_handle_at`):
    /// Landlock then leaves file-level rights unhandled (see
    /// [`landlock::restrict`]).
    pub file_handles: bool,
    /// The takeover socket's directory (`--takeover-socket`), opened before
    /// confining: Landlock lets the daemon make and remove its socket
    /// there, and nothing else.
    pub socket_dir: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The nice value of the threads started after confinement (io_uring
    /// ring threads, `--uring-nice`): set on the confining thread while it
    /// still has `CAP_SYS_NICE`, and inherited by every thread it starts.
    pub thread_nice: Option<i32>,
}

/// The daemon once confined: where SOURCE is reached from now on, and the
/// unmounter to ask at stop.
#[derive(Debug)]
pub struct Confined {
    /// SOURCE's path inside the sandbox (`/source` under `namespace`).
    pub source: PathBuf,
    /// The process outside the sandbox that unmounts, if there is one (for
    /// [`fuse_transport_dev::Mount::unmount_through`]).
    pub unmounter: Option<unmounter::Unmounter>,
    /// What was applied, for the start line.
    pub summary: String,
}

/// A confinement that failed part way, with the unmounter if one started:
/// the mount may then be out of the daemon's reach (its own mount
/// namespace hides it, Landlock refuses the unmount), so the caller
/// unmounts through it ([`fuse_transport_dev::Mount::unmount_through`])
/// rather than by path.
#[derive(Debug)]
pub struct NotConfined {
    /// What failed.
    pub failure: Failure,
    /// The process outside the sandbox that can still unmount.
    pub unmounter: Option<unmounter::Unmounter>,
}

impl From<Failure> for NotConfined {
    /// A failure before the unmounter started: the mount is still in reach.
    fn from(failure: Failure) -> NotConfined {
        NotConfined {
            failure,
            unmounter: None,
        }
    }
}

impl From<NotConfined> for Failure {
    fn from(e: NotConfined) -> Failure {
        e.failure
    }
}

impl Confinement {
    /// Whether anything beyond the resource limits is applied.
    pub fn is_none(&self) -> bool {
        self.sandbox == SandboxMode::None
            && self.seccomp == SeccompMode::None
            && self.landlock == LandlockMode::Off
    }
}

/// Number of threads of this process (`/proc/self/task`).
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count())
}

/// Sets the calling thread's nice value, which the threads it starts
/// inherit. Best effort: without `CAP_SYS_NICE` (a user namespace's root)
/// a value below the current one is refused, and the threads keep the
/// current one, which costs speed, not correctness.
fn set_nice(nice: i32) {
    if let Err(e) = fuse_server::sys::set_thread_nice(nice) {
        tracing::debug!(nice, "serving threads keep the inherited nice value: {e}");
    }
}

/// Confines the daemon (see the module's documentation). Call it after the
/// mount or socket is set up and before any other thread exists: a new
/// mount namespace, capability sets and Landlock apply to the calling
/// thread only (the seccomp filter is synchronized to every thread).
pub fn confine(c: &Confinement) -> Result<Confined, NotConfined> {
    rlimits::apply()?;
    if let Some(nice) = c.thread_nice {
        set_nice(nice);
    }
    let mut summary = Vec::new();
    let mut source = c.source.clone();
    let thread_bound = c.sandbox != SandboxMode::None || c.landlock == LandlockMode::On;
    if thread_bound {
        let n = thread_count();
        if n > 1 {
            return Err(NotConfined::from(Failure(format!(
                "cannot confine: {n} threads run already (--sandbox and --landlock apply to \
                 the calling thread only); this mode needs --sandbox none --landlock off"
            ))));
        }
    }
    // Landlock needs the paths as the host names them: opened first.
    let rules = match c.landlock {
        LandlockMode::On => Some(landlock::Rules::open(&c.source, c.socket_dir.clone())?),
        LandlockMode::Off => None,
    };
    // Confined, the daemon can't unmount: in its own namespace it doesn't
    // see the mount, Landlock refuses unmounts, the filter refuses
    // fusermount3's exec.
    let needs_unmounter = c.sandbox != SandboxMode::None
        || c.landlock == LandlockMode::On
        || (c.seccomp != SeccompMode::None && c.fusermount);
    let unmounter = match &c.mountpoint {
        Some(mountpoint) if needs_unmounter => {
            Some(unmounter::Unmounter::spawn(mountpoint, c.fusermount)?)
        }
        _ => None,
    };
    // What the daemon reaches by path after serving starts: connected now.
    if !c.is_none() {
        crate::notify::connect_early();
        crate::logging::connect_syslog();
    }
    match confine_steps(c, rules, &mut summary) {
        Ok(inside) => source = inside.unwrap_or(source),
        // The mount may be out of this process's reach now (another mount
        // namespace, Landlock): the caller unmounts through the unmounter.
        Err(failure) => return Err(NotConfined { failure, unmounter }),
    }
    Ok(Confined {
        source,
        unmounter,
        summary: if summary.is_empty() {
            "none".into()
        } else {
            summary.join(", ")
        },
    })
}

/// The steps after the unmounter started; SOURCE's new path if the root
/// changed.
fn confine_steps(
    c: &Confinement,
    mut rules: Option<landlock::Rules>,
    summary: &mut Vec<&'static str>,
) -> Result<Option<PathBuf>, Failure> {
    let mut source = None;
    match c.sandbox {
        SandboxMode::Namespace => {
            source = Some(namespace::enter(&c.source)?);
            if let Some(rules) = rules.as_mut() {
                rules.add_proc_inside()?;
            }
            summary.push("namespace");
        }
        SandboxMode::Chroot => {
            namespace::chroot(&c.source)?;
            source = Some(PathBuf::from("/"));
            summary.push("chroot");
        }
        SandboxMode::None => {}
    }
    if c.sandbox != SandboxMode::None {
        capabilities::drop_unused()?;
        summary.push("capabilities");
    }
    if let Some(rules) = rules {
        // Inside the namespace SOURCE is a mount's root, so a file reopened
        // by handle is checked as being at SOURCE (see landlock::restrict).
        let file_rights = !c.file_handles || c.sandbox == SandboxMode::Namespace;
        match landlock::restrict(rules, file_rights)? {
            Some(applied) => summary.push(applied),
            None if c.landlock_asked => {
                return Err(Failure(
                    "--landlock on: this kernel has no Landlock (not built in, or not in \
                     its lsm= list); use --landlock off"
                        .into(),
                ))
            }
            None => tracing::warn!(
                "this kernel has no Landlock (not built in, or not in its lsm= list): file \
                 access is not limited by it (the default --landlock on falls back to off)"
            ),
        }
    }
    match c.seccomp {
        SeccompMode::None => {}
        mode => {
            seccomp::install(mode, c.features)?;
            summary.push(if mode == SeccompMode::Kill {
                "seccomp kill"
            } else {
                "seccomp log"
            });
        }
    }
    Ok(source)
}

/// The serving modes, as far as their default confinement goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingMode {
    /// A new mount over /dev/fuse (any `--runtime`).
    Dev,
    /// A new mount over io_uring (`--uring`).
    Uring,
    /// `--takeover-socket` or `--take-over`.
    Takeover,
    /// `--supervise` (the serving process; the supervisor is not confined).
    Supervised,
    /// `--vhost-user`.
    VhostUser,
}

/// The defaults per serving mode: `(sandbox, landlock, seccomp)`, the
/// strongest under which that mode's suites pass (docs/security.md).
/// `--sandbox namespace` needs root in the initial user namespace; where
/// it is the default and that is missing, the default falls back to
/// `none` with a warning.
pub const fn defaults(mode: ServingMode) -> (SandboxMode, LandlockMode, SeccompMode) {
    match mode {
        ServingMode::Dev => (SandboxMode::Namespace, LandlockMode::On, SeccompMode::Kill),
        ServingMode::Uring => (SandboxMode::Namespace, LandlockMode::On, SeccompMode::Kill),
        ServingMode::Takeover => (SandboxMode::Namespace, LandlockMode::On, SeccompMode::Kill),
        ServingMode::Supervised => (SandboxMode::Namespace, LandlockMode::On, SeccompMode::Kill),
        ServingMode::VhostUser => (SandboxMode::Namespace, LandlockMode::On, SeccompMode::Kill),
    }
}

/// Whether this process can build the namespace sandbox around `source`:
/// tried in a child process (fork, [`namespace::enter`], exit), which
/// answers for this machine as it is (root on the host; root of a user
/// namespace that owns its mount namespace; not a container whose
/// filter refuses `unshare`, nor an unprivileged user).
fn can_enter_namespaces(source: &std::path::Path) -> bool {
    // SAFETY: fork in a process with one thread (the sandbox is set up
    // before any thread starts, see `confine`); the child only runs the
    // sandbox's steps and `_exit`s.
    match unsafe { libc::fork() } {
        -1 => false,
        0 => {
            let ok = namespace::enter(source).is_ok();
            // SAFETY: ends the child without running the parent's exit
            // handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        pid => {
            let mut status = 0;
            loop {
                // SAFETY: waits for our own child.
                let r = unsafe { libc::waitpid(pid, &mut status, 0) };
                if r == pid {
                    break libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                }
                if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    break false;
                }
            }
        }
    }
}

impl Confinement {
    /// The confinement `args` ask for (the defaults where not given),
    /// checked against the serving mode: what can't be confined that way
    /// is refused with the reason, before anything is mounted.
    pub fn from_args(args: &crate::cli::Args, source: &std::path::Path) -> Result<Self, Failure> {
        let vhost_user = args.virtio.socket.is_some();
        let takeover = args.takeover_socket.is_some() || args.take_over.is_some();
        let mode = if vhost_user {
            ServingMode::VhostUser
        } else if takeover {
            ServingMode::Takeover
        } else if args.supervise {
            ServingMode::Supervised
        } else if args.uring {
            ServingMode::Uring
        } else {
            ServingMode::Dev
        };
        let (default_sandbox, default_landlock, default_seccomp) = defaults(mode);
        let sandbox = match args.sandbox {
            Some(s) => s,
            None if default_sandbox == SandboxMode::Namespace && !can_enter_namespaces(source) => {
                tracing::warn!(
                    "not confined to namespaces (the default --sandbox namespace needs \
                     CAP_SYS_ADMIN and new mount, network and IPC namespaces, which this \
                     process can't have); Landlock and seccomp still apply; --sandbox none says \
                     so without this warning"
                );
                SandboxMode::None
            }
            None => default_sandbox,
        };
        let seccomp = args.seccomp.unwrap_or(default_seccomp);
        let landlock = args.landlock.unwrap_or(default_landlock);
        if sandbox == SandboxMode::Chroot {
            namespace::chroot(source)?;
        }
        Ok(Confinement {
            sandbox,
            seccomp,
            landlock,
            landlock_asked: args.landlock.is_some(),
            source: source.to_path_buf(),
            mountpoint: None,
            fusermount: false,
            features: seccomp::Features {
                uring: args.uring || args.runtime == crate::Runtime::Uring,
                vhost_user,
                takeover,
            },
            file_handles: !args.fs.no_file_handles,
            socket_dir: None,
            thread_nice: args.uring.then_some(args.uring_nice),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn confinement(argv: &[&str]) -> Result<Confinement, Failure> {
        let mut args = crate::cli::Args::try_parse_from(
            ["passthroughfs"]
                .iter()
                .chain(argv)
                .chain(&["/srv", "/mnt"]),
        )
        .map_err(|e| Failure(e.to_string()))?;
        crate::virtio::settle_args(&mut args)?;
        Confinement::from_args(&args, std::path::Path::new("/srv"))
    }

    #[test]
    fn what_cannot_be_confined_is_refused_with_the_reason() {
        let e = confinement(&["--sandbox", "chroot"]).unwrap_err();
        assert!(e.0.contains("/proc/self/fd"), "{}", e.0);
    }

    #[test]
    fn the_defaults_follow_the_serving_mode() {
        let c = confinement(&["--takeover-socket", "/s"]).unwrap();
        assert_eq!(
            (c.sandbox, c.landlock, c.seccomp),
            defaults(ServingMode::Takeover)
        );
        assert!(c.features.takeover && !c.features.uring);
        let c = confinement(&["--uring"]).unwrap();
        assert_eq!(
            (c.sandbox, c.landlock, c.seccomp),
            defaults(ServingMode::Uring)
        );
        assert!(c.features.uring);
        let c =
            confinement(&["--sandbox", "none", "--seccomp", "log", "--landlock", "off"]).unwrap();
        assert_eq!(
            (c.sandbox, c.landlock, c.seccomp),
            (SandboxMode::None, LandlockMode::Off, SeccompMode::Log)
        );
    }

    #[test]
    fn the_options_have_o_names() {
        let mut args = crate::cli::Args::try_parse_from([
            "passthroughfs",
            "/srv",
            "/mnt",
            "-o",
            "sandbox=none,seccomp=log,landlock=off",
        ])
        .unwrap();
        crate::options::apply(&mut args).unwrap();
        assert_eq!(args.sandbox, Some(SandboxMode::None));
        assert_eq!(args.seccomp, Some(SeccompMode::Log));
        assert_eq!(args.landlock, Some(LandlockMode::Off));
    }
}
