//! The bench daemon (`fuse-bench-daemon`): a passthrough mount of
//! [`PassthroughFs`] served in any mode the workspace has.
//!
//! A mode is a transport (`/dev/fuse` worker threads or FUSE over
//! io_uring), a runtime (plain threads, or a tokio / io_uring runtime from
//! `async-io`, on which the backend is served through its
//! `AsyncFileSystem`) and whether the backend's blocking thread pool is on
//! (`PassthroughFs::enable_async_thread_pool`).
//! [`plan`] turns the command line into a [`Plan`], or says why the mode
//! can't run: every combination whose code does not exist yet is refused
//! with [`PlanError::NotAvailable`] ("not available yet: …") instead of
//! quietly serving in another mode. When a crate gains the missing piece,
//! the combination gets its own [`Plan`] variant and a serving function.
//!
//! When the mount is ready, the daemon prints one [`StartLine`] on standard
//! output (`FUSE-BENCH-DAEMON READY transport=dev runtime=sync …`), stays
//! in the foreground, and unmounts and exits 0 on SIGINT, SIGTERM or
//! SIGHUP (a second one while unmounting forces the exit; SIGUSR1 logs the
//! file system's state), as `passthroughfs` does.
//!
//! The backend's switches ([`FsArgs`]: cache, timeouts, `--passthrough` /
//! `--no-passthrough`, `--no-file-handles`, `--thread-pool`, ...), the
//! runtime names, the mapping to `PassthroughConfig`, `SessionConfig` and
//! `UringConfig`, and the signal handling are `passthroughfs`'s own (its
//! library), so a switch means the same in both daemons. Only here:
//! `--transport dev|uring` (`passthroughfs --uring`), `--threads` as one
//! number for every transport (`passthroughfs` has `--threads` and
//! `--uring-queues`), `--uring-bufs N > 0` failing without kernel buffer
//! pools, `--allow-fallback`, `--max-in-flight`, and an explicit
//! `--passthrough` failing unless INIT turned kernel passthrough on (by
//! default it is on where available, as in `passthroughfs`; `cargo xtask
//! bench` passes `--no-passthrough` to the targets that measure the
//! daemon's data path).

use clap::{Parser, ValueEnum};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig, TaskConfig};
use fuse_transport_uring::{UringConfig, UringMode, UringSession};
use passthroughfs::{FsArgs, Runtime};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Exit status of the daemon when the requested mode is not available yet.
pub const EXIT_NOT_AVAILABLE: u8 = 3;

/// The prefix of the [`StartLine`].
pub const START_PREFIX: &str = "FUSE-BENCH-DAEMON READY";

/// How requests reach the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// `read(2)`/`writev(2)` on `/dev/fuse`.
    Dev,
    /// FUSE over io_uring (`FUSE_OVER_IO_URING`).
    Uring,
}

impl Transport {
    /// The name used on the command line and in the start line.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Dev => "dev",
            Transport::Uring => "uring",
        }
    }
}

/// Serve the directory SOURCE through FUSE at MOUNTPOINT, in the mode the
/// switches choose, for benchmarks.
#[derive(Debug, Clone, Parser)]
#[command(name = "fuse-bench-daemon", version, about)]
pub struct DaemonArgs {
    /// The directory to serve.
    pub source: PathBuf,

    /// Where to mount it.
    pub mountpoint: PathBuf,

    /// How requests reach the daemon.
    #[arg(long, value_enum, default_value_t = Transport::Dev)]
    pub transport: Transport,

    /// What runs the request handlers.
    #[arg(long, value_enum, default_value_t = Runtime::Sync)]
    pub runtime: Runtime,

    /// Serving threads. `dev`/`sync`: worker threads started at mount (more
    /// start when all are busy; default: the number of CPUs, 2 to 8).
    /// `uring` (any runtime): ring threads (0, the default: one per kernel
    /// queue), each with its own runtime in async mode. `dev` with an async
    /// runtime: runtime threads, each running a `FuseDevTask` on its own
    /// cloned fd (default: the number of CPUs, 2 to 8).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// io_uring: payload buffers per queue in the kernel's buffer pool. 0:
    /// a payload buffer per entry. N > 0 requires pools (Linux 7.3; the
    /// daemon fails where the kernel doesn't offer them). Default: pools of
    /// the transport's default size where offered, per-entry buffers
    /// otherwise.
    #[arg(long, value_name = "N")]
    pub uring_bufs: Option<usize>,

    /// io_uring: ring entries registered per queue (default: the
    /// transport's).
    #[arg(long, value_name = "N")]
    pub uring_entries: Option<usize>,

    /// io_uring: keep serving over `/dev/fuse` when io_uring can't be used
    /// (without it the daemon fails instead of measuring the wrong
    /// transport).
    #[arg(long)]
    pub allow_fallback: bool,

    /// `--transport dev` with an async runtime: largest number of requests
    /// handled at once.
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<usize>,

    /// The backend's switches, as in `passthroughfs`.
    #[command(flatten)]
    pub fs: FsArgs,

    /// Let the kernel check permissions from file modes.
    #[arg(long)]
    pub default_permissions: bool,
}

/// How the daemon will serve: one variant per mode whose code exists.
#[derive(Debug, Clone)]
pub enum Plan {
    /// `/dev/fuse` worker threads ([`DevSession`]).
    DevSync(SessionConfig),
    /// FUSE over io_uring ring threads ([`UringSession`]), synchronous
    /// handlers, or (with [`UringConfig::runtime`] set) async handlers on a
    /// runtime per ring thread.
    UringSync {
        /// The transport's configuration.
        config: UringConfig,
        /// Fail unless the kernel gives buffer pools (`--uring-bufs N`, N > 0).
        require_pools: bool,
        /// Serve over `/dev/fuse` if io_uring can't be used.
        allow_fallback: bool,
    },
    /// `/dev/fuse` read by a task on an `async-io` runtime ([`fuse_transport_dev::FuseDevTask`]).
    DevAsync {
        /// Which runtime.
        runtime: async_io::RuntimeType,
        /// The task's configuration.
        config: TaskConfig,
        /// Runtime threads, each with a task (the first and its siblings).
        threads: usize,
    },
}

/// Why a command line can't be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The mode is valid but its code does not exist yet.
    NotAvailable(String),
    /// The switches contradict each other or are out of range.
    Invalid(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NotAvailable(m) => write!(f, "not available yet: {m}"),
            PlanError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PlanError {}

/// Decides how to serve `args`, or why it can't be done.
pub fn plan(args: &DaemonArgs) -> Result<Plan, PlanError> {
    if args.fs.thread_pool && args.runtime == Runtime::Sync {
        // The pool serves the async path (AsyncFileSystem); synchronous
        // workers already block on threads of their own.
        return Err(PlanError::NotAvailable(
            "--thread-pool with --runtime sync: the backend's pool serves the async runtimes \
             (--runtime tokio or uring); synchronous workers already run READ and WRITE on \
             blocking threads of their own"
                .into(),
        ));
    }
    if args.threads == Some(0) && args.transport == Transport::Dev {
        return Err(PlanError::Invalid("--threads must be at least 1".into()));
    }
    let uring_only = [
        ("--uring-bufs", args.uring_bufs.is_some()),
        ("--uring-entries", args.uring_entries.is_some()),
        ("--allow-fallback", args.allow_fallback),
    ];
    if args.transport != Transport::Uring {
        if let Some((name, _)) = uring_only.iter().find(|(_, set)| *set) {
            return Err(PlanError::Invalid(format!(
                "{name} needs --transport uring"
            )));
        }
    }
    if args.fs.passthrough && (args.fs.writeback || args.fs.no_open) {
        return Err(PlanError::Invalid(
            "--passthrough excludes --writeback and --no-open".into(),
        ));
    }
    if (args.runtime == Runtime::Sync || args.transport == Transport::Uring)
        && args.max_in_flight.is_some()
    {
        return Err(PlanError::Invalid(
            "--max-in-flight needs --transport dev with --runtime tokio or uring (over io_uring \
             --uring-entries bounds the requests a queue serves at once)"
                .into(),
        ));
    }
    match (args.transport, args.runtime) {
        (Transport::Dev, Runtime::Sync) => Ok(Plan::DevSync(
            passthroughfs::session_config(args.threads.unwrap_or(default_threads()))
                .map_err(invalid)?,
        )),
        (Transport::Uring, runtime) => {
            let default = UringConfig::default();
            let dev = passthroughfs::session_config(default_threads()).map_err(invalid)?;
            Ok(Plan::UringSync {
                config: passthroughfs::uring_config(
                    args.threads.unwrap_or(default.threads),
                    args.uring_entries.unwrap_or(default.entries_per_queue),
                    args.uring_bufs.unwrap_or(default.bufs_per_queue),
                    runtime,
                    &dev,
                )
                .map_err(invalid)?,
                require_pools: args.uring_bufs.is_some_and(|n| n > 0),
                allow_fallback: args.allow_fallback,
            })
        }
        (Transport::Dev, Runtime::Tokio | Runtime::Uring) => {
            if args.fs.passthrough {
                // FuseDevTask answers INIT inside the task, after the start
                // line, so the daemon can't check that the kernel agreed.
                return Err(PlanError::NotAvailable(format!(
                    "--passthrough with --runtime {}: the daemon can't yet check that \
                     INIT turned it on before it reports ready",
                    args.runtime.as_str()
                )));
            }
            let runtime = args
                .runtime
                .async_type()
                .unwrap_or(async_io::RuntimeType::Tokio);
            let default = TaskConfig::default();
            let max_in_flight = args.max_in_flight.unwrap_or(default.max_in_flight);
            Ok(Plan::DevAsync {
                runtime,
                config: default.max_in_flight(max_in_flight),
                threads: args.threads.unwrap_or(default_threads()),
            })
        }
    }
}

/// `/dev/fuse` worker threads or runtime threads without `--threads`.
fn default_threads() -> usize {
    SessionConfig::default().threads
}

fn invalid(f: passthroughfs::Failure) -> PlanError {
    PlanError::Invalid(f.0)
}

/// The backend's configuration for `args` (`passthroughfs`'s mapping).
pub fn passthrough_config(args: &DaemonArgs) -> Result<PassthroughConfig, PlanError> {
    args.fs.passthrough_config().map_err(invalid)
}

/// The mount options for `args`.
pub fn mount_options(args: &DaemonArgs) -> MountOptions {
    MountOptions::default()
        .fsname(format!("fuse-bench:{}", args.source.display()))
        .subtype("fuse-bench")
        .default_permissions(args.default_permissions)
}

/// The one line the daemon prints on standard output once its mount is
/// ready: [`START_PREFIX`] followed by `key=value` fields (values with
/// spaces in double quotes, `"` and `\` escaped with `\`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartLine {
    /// The fields, in order.
    pub fields: Vec<(String, String)>,
}

impl StartLine {
    /// Adds a field.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Parses a line printed by [`StartLine`]'s `Display`; `None` if it
    /// isn't one.
    pub fn parse(line: &str) -> Option<StartLine> {
        let rest = line.trim_end().strip_prefix(START_PREFIX)?;
        let mut fields = Vec::new();
        let mut chars = rest.chars().peekable();
        loop {
            while chars.next_if(|c| *c == ' ').is_some() {}
            if chars.peek().is_none() {
                return Some(StartLine { fields });
            }
            let mut key = String::new();
            for c in chars.by_ref() {
                if c == '=' {
                    break;
                }
                if c == ' ' {
                    return None;
                }
                key.push(c);
            }
            if key.is_empty() {
                return None;
            }
            let mut value = String::new();
            if chars.next_if_eq(&'"').is_some() {
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => value.push(chars.next()?),
                        c => value.push(c),
                    }
                }
            } else {
                while let Some(c) = chars.next_if(|c| *c != ' ') {
                    value.push(c);
                }
            }
            fields.push((key, value));
        }
    }
}

impl fmt::Display for StartLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(START_PREFIX)?;
        for (k, v) in &self.fields {
            if !v.is_empty() && !v.contains([' ', '"', '\\']) {
                write!(f, " {k}={v}")?;
            } else {
                write!(f, " {k}=\"")?;
                for c in v.chars() {
                    if c == '"' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("\"")?;
            }
        }
        Ok(())
    }
}

/// The fields every start line has, from the command line.
fn base_line(args: &DaemonArgs) -> StartLine {
    StartLine::default()
        .with("transport", args.transport.as_str())
        .with("runtime", args.runtime.as_str())
}

/// Refuses to go on when kernel passthrough was asked for and INIT didn't
/// turn it on: the numbers would be those of the daemon's data path.
fn check_kernel_passthrough(args: &DaemonArgs, fs: &PassthroughFs) -> Result<(), Failure> {
    if !args.fs.passthrough {
        return Ok(());
    }
    let stats = fs.passthrough_stats();
    if stats.active {
        return Ok(());
    }
    Err(Failure {
        message: format!(
            "not available: --passthrough, but the kernel or this process can't use FUSE_PASSTHROUGH ({})",
            stats.reason.as_deref().unwrap_or("no reason given")
        ),
        status: EXIT_NOT_AVAILABLE,
    })
}

fn settings_fields(line: StartLine, args: &DaemonArgs) -> StartLine {
    line.with("pool", if args.fs.thread_pool { "on" } else { "off" })
        .with("cache", args.fs.cache.as_str())
        .with("writeback", if args.fs.writeback { "on" } else { "off" })
        .with(
            "readdirplus",
            if args.fs.no_readdirplus { "off" } else { "on" },
        )
        .with("xattr", if args.fs.no_xattr { "off" } else { "on" })
        .with(
            "kernel_passthrough",
            match (args.fs.passthrough, args.fs.no_passthrough) {
                (true, _) => "on",
                (_, true) => "off",
                // Where the kernel and the daemon's privileges allow it.
                _ => "auto",
            },
        )
        .with("pid", std::process::id())
        .with("mountpoint", args.mountpoint.display())
}

/// A failure of the daemon, with its exit status.
#[derive(Debug)]
pub struct Failure {
    /// The message (one line).
    pub message: String,
    /// The exit status.
    pub status: u8,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            status: 1,
        }
    }
}

impl From<PlanError> for Failure {
    fn from(e: PlanError) -> Self {
        let status = match e {
            PlanError::NotAvailable(_) => EXIT_NOT_AVAILABLE,
            PlanError::Invalid(_) => 2,
        };
        Failure {
            message: e.to_string(),
            status,
        }
    }
}

impl From<passthroughfs::Failure> for Failure {
    fn from(f: passthroughfs::Failure) -> Self {
        Failure::new(f.0)
    }
}

fn announce(line: &StartLine) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // The harness waits for this line; a closed stdout is not our problem.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs the daemon: mounts, prints the start line, serves until unmounted
/// or signalled.
pub fn run(args: DaemonArgs) -> Result<(), Failure> {
    let plan = plan(&args)?;
    let config = passthrough_config(&args)?;
    passthroughfs::check_source(&args.source)?;
    passthroughfs::raise_nofile_limit();
    let signals = passthroughfs::block_signals();
    let fs = Arc::new(
        PassthroughFs::new(&args.source, config)
            .map_err(|e| Failure::new(format!("passthrough: {e}")))?,
    );
    args.fs.apply_thread_pool(&fs, args.runtime)?;
    let options = mount_options(&args);
    match plan {
        Plan::DevSync(config) => {
            let threads = config.threads;
            let session =
                DevSession::mount(Server::new(fs.clone()), &args.mountpoint, &options, config)
                    .map_err(|e| Failure::new(format!("mounting: {e}")))?;
            let session: Arc<dyn Session> = Arc::new(session);
            if let Err(f) = check_kernel_passthrough(&args, &fs) {
                session.stop();
                let _ = session.wait();
                return Err(f);
            }
            let line = base_line(&args)
                .with("threads", threads)
                .with("buffers", "dev-read")
                .with("inodes", inodes(&fs));
            serve_session(session, settings_fields(line, &args), signals, fs)
        }
        Plan::UringSync {
            config,
            require_pools,
            allow_fallback,
        } => {
            let entries = config.entries_per_queue;
            // Async handlers serve the backend through its AsyncFileSystem.
            let server = match config.runtime {
                None => Server::new(fs.clone()),
                Some(_) => Server::new_async(fs.clone()),
            };
            let session = UringSession::mount(server, &args.mountpoint, &options, config)
                .map_err(|e| Failure::new(format!("mounting: {e}")))?;
            let mode = session.mode();
            let refusal = match mode {
                UringMode::DevFuse if !allow_fallback => Some(format!(
                    "io_uring could not be used ({}); refusing to measure /dev/fuse as io_uring \
                     (--allow-fallback serves it anyway)",
                    session.fallback_reason().unwrap_or("no reason given")
                )),
                UringMode::PerEntry if require_pools => Some(
                    "--uring-bufs N > 0 needs kernel buffer pools (FUSE_HAS_IO_URING_BUFPOOL, \
                     Linux 7.3), and this kernel serves a payload buffer per entry; use \
                     --uring-bufs 0"
                        .to_string(),
                ),
                _ => None,
            }
            .or_else(|| {
                check_kernel_passthrough(&args, &fs)
                    .err()
                    .map(|f| f.message)
            });
            if let Some(message) = refusal {
                session.stop();
                if let Err(e) = session.wait() {
                    tracing::warn!("ending the refused session: {e}");
                }
                return Err(Failure {
                    message,
                    status: EXIT_NOT_AVAILABLE,
                });
            }
            let buffers = match mode {
                UringMode::Pools { bufs_per_queue } => format!("pools:{bufs_per_queue}"),
                UringMode::PerEntry => "per-entry".to_string(),
                UringMode::DevFuse => "dev-read".to_string(),
            };
            let stats = session.stats();
            tracing::debug!(?stats, "io_uring session started");
            let session: Arc<dyn Session> = Arc::new(session);
            let line = base_line(&args)
                .with(
                    "threads",
                    match args.threads {
                        Some(n) if n > 0 => n.to_string(),
                        _ => "per-queue".into(),
                    },
                )
                .with("buffers", buffers)
                .with("entries", entries)
                .with("inodes", inodes(&fs))
                .with(
                    "backend",
                    if args.runtime == Runtime::Sync {
                        "sync"
                    } else {
                        "async"
                    },
                )
                .with("uring", if mode.uses_uring() { "on" } else { "fallback" });
            serve_session(session, settings_fields(line, &args), signals, fs)
        }
        Plan::DevAsync {
            runtime,
            config,
            threads,
        } => {
            let line = settings_fields(
                base_line(&args)
                    .with("threads", threads)
                    .with("buffers", "dev-read")
                    .with("inodes", inodes(&fs))
                    .with("max_in_flight", config.max_in_flight)
                    .with("backend", "async"),
                &args,
            );
            let session: Arc<dyn Session> = passthroughfs::start_tasks(
                runtime,
                threads,
                Server::new_async(fs.clone()),
                &args.mountpoint,
                &options,
                config,
            )
            .map_err(|e| Failure::new(format!("mounting: {e}")))?;
            serve_session(session, line, signals, fs)
        }
    }
}

/// How the backend holds inodes (and, the first time, why not by handle
/// when it was asked to).
fn inodes(fs: &PassthroughFs) -> &'static str {
    match fs.file_handle_fallback() {
        None => "handles",
        Some(why) => {
            if fs.config().file_handles {
                tracing::info!("inodes held by O_PATH descriptor: {why}");
            }
            "fds"
        }
    }
}

fn serve_session(
    session: Arc<dyn Session>,
    line: StartLine,
    signals: libc::sigset_t,
    fs: Arc<PassthroughFs>,
) -> Result<(), Failure> {
    tracing::info!(
        mountpoint = %session.mountpoint().display(),
        transport = %session.transport(),
        "serving"
    );
    let line = line.with("detail", session.transport());
    let stopper = session.clone();
    passthroughfs::spawn_signal_thread(
        signals,
        session.mountpoint().to_path_buf(),
        move || passthroughfs::log_fs_state(&fs),
        move || stopper.stop(),
    )?;
    announce(&line);
    session
        .wait()
        .map_err(|e| Failure::new(format!("serving failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_backend_passthrough::CachePolicy;
    use std::time::Duration;

    fn args(extra: &[&str]) -> DaemonArgs {
        let mut argv = vec!["fuse-bench-daemon", "/src", "/mnt"];
        argv.extend_from_slice(extra);
        DaemonArgs::try_parse_from(argv).expect("valid arguments")
    }

    #[test]
    fn default_mode_is_dev_sync() {
        match plan(&args(&[])).unwrap() {
            Plan::DevSync(c) => assert_eq!(c.threads, SessionConfig::default().threads),
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--threads", "5"])).unwrap() {
            Plan::DevSync(c) => {
                assert_eq!(c.threads, 5);
                assert!(c.max_threads >= 5);
            }
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn uring_switches_reach_the_config() {
        match plan(&args(&[
            "--transport",
            "uring",
            "--uring-bufs",
            "0",
            "--uring-entries",
            "16",
            "--threads",
            "1",
        ]))
        .unwrap()
        {
            Plan::UringSync {
                config,
                require_pools,
                allow_fallback,
            } => {
                assert_eq!(config.bufs_per_queue, 0);
                assert_eq!(config.entries_per_queue, 16);
                assert_eq!(config.threads, 1);
                assert!(!require_pools);
                assert!(!allow_fallback);
            }
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--transport", "uring", "--uring-bufs", "8"])).unwrap() {
            Plan::UringSync { require_pools, .. } => assert!(require_pools),
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn missing_modes_are_refused_not_substituted() {
        let e = plan(&args(&["--thread-pool"])).unwrap_err();
        assert!(matches!(e, PlanError::NotAvailable(_)), "{e}");
        assert!(e.to_string().starts_with("not available yet: "), "{e}");
        for rt in ["tokio", "uring"] {
            let e = plan(&args(&["--runtime", rt, "--passthrough"])).unwrap_err();
            assert!(matches!(e, PlanError::NotAvailable(_)), "{e}");
        }
        let f = Failure::from(plan(&args(&["--thread-pool"])).unwrap_err());
        assert_eq!(f.status, EXIT_NOT_AVAILABLE);
    }

    #[test]
    fn thread_pool_and_async_uring_plan() {
        for (rt, want) in [
            ("tokio", async_io::RuntimeType::Tokio),
            ("uring", async_io::RuntimeType::IoUring),
        ] {
            match plan(&args(&[
                "--runtime",
                rt,
                "--thread-pool",
                "--pool-threads",
                "8",
            ]))
            .unwrap()
            {
                Plan::DevAsync { runtime, .. } => assert_eq!(runtime, want),
                other => panic!("unexpected plan {other:?}"),
            }
            match plan(&args(&[
                "--transport",
                "uring",
                "--runtime",
                rt,
                "--thread-pool",
            ]))
            .unwrap()
            {
                Plan::UringSync { config, .. } => assert_eq!(config.runtime, Some(want.into())),
                other => panic!("unexpected plan {other:?}"),
            }
            let e = plan(&args(&[
                "--transport",
                "uring",
                "--runtime",
                rt,
                "--max-in-flight",
                "4",
            ]))
            .unwrap_err();
            assert!(matches!(e, PlanError::Invalid(_)), "{e}");
        }
        match plan(&args(&["--transport", "uring"])).unwrap() {
            Plan::UringSync { config, .. } => assert_eq!(config.runtime, None),
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn async_runtimes_plan() {
        match plan(&args(&["--runtime", "tokio"])).unwrap() {
            Plan::DevAsync { runtime, .. } => assert_eq!(runtime, async_io::RuntimeType::Tokio),
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--runtime", "uring", "--max-in-flight", "7"])).unwrap() {
            Plan::DevAsync {
                runtime,
                config,
                threads,
            } => {
                assert_eq!(runtime, async_io::RuntimeType::IoUring);
                assert_eq!(config.max_in_flight, 7);
                assert_eq!(threads, SessionConfig::default().threads);
            }
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--runtime", "tokio", "--threads", "3"])).unwrap() {
            Plan::DevAsync { threads, .. } => assert_eq!(threads, 3),
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn contradictions_are_invalid() {
        for extra in [
            &["--uring-bufs", "2"][..],
            &["--allow-fallback"][..],
            &["--max-in-flight", "3"][..],
            &["--threads", "0"][..],
            &["--transport", "uring", "--uring-entries", "0"][..],
            &["--passthrough", "--writeback"][..],
        ] {
            let e = plan(&args(extra)).unwrap_err();
            assert!(matches!(e, PlanError::Invalid(_)), "{extra:?}: {e}");
        }
        let a = args(&["--attr-timeout=-1"]);
        assert!(passthrough_config(&a).is_err());
        assert!(DaemonArgs::try_parse_from(["x", "/s", "/m", "--pool-threads", "2"]).is_err());
    }

    #[test]
    fn cache_switches_reach_the_backend() {
        let c = passthrough_config(&args(&[
            "--cache",
            "always",
            "--writeback",
            "--no-readdirplus",
            "--entry-timeout",
            "2.5",
        ]))
        .unwrap();
        assert_eq!(c.cache, CachePolicy::Always);
        assert!(c.writeback);
        assert!(!c.readdirplus);
        assert_eq!(c.entry_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(c.attr_timeout, None);
        assert!(
            c.passthrough,
            "kernel passthrough where available, as in passthroughfs"
        );
        assert!(c.file_handles);
        let c = passthrough_config(&args(&["--no-passthrough", "--no-file-handles"])).unwrap();
        assert!(!c.passthrough);
        assert!(!c.file_handles);
        let c = passthrough_config(&args(&["--passthrough"])).unwrap();
        assert!(c.passthrough);
    }

    #[test]
    fn start_line_round_trips() {
        let line = StartLine::default()
            .with("transport", "uring")
            .with("runtime", "sync")
            .with("buffers", "per-entry")
            .with("detail", "io_uring, 2 queues \"x\" \\ y")
            .with("empty", "");
        let text = line.to_string();
        assert!(text.starts_with("FUSE-BENCH-DAEMON READY transport=uring runtime=sync "));
        let parsed = StartLine::parse(&text).unwrap();
        assert_eq!(parsed, line);
        assert_eq!(parsed.get("buffers"), Some("per-entry"));
        assert_eq!(parsed.get("empty"), Some(""));
        assert_eq!(parsed.get("missing"), None);
        assert!(StartLine::parse("something else").is_none());
        assert!(StartLine::parse("FUSE-BENCH-DAEMON READY key=\"unterminated").is_none());
        assert!(StartLine::parse("FUSE-BENCH-DAEMON READY =x").is_none());
    }
}
