//! The bench daemon (`fuse-bench-daemon`): a passthrough mount of
//! [`PassthroughFs`] served in any mode the workspace has.
//!
//! A mode is a transport (`/dev/fuse` worker threads or FUSE over
//! io_uring), a runtime (plain threads, or a tokio / io_uring runtime from
//! `async-io`, on which the backend is served through its
//! `AsyncFileSystem`) and whether the backend's blocking thread pool is on
//! (`PassthroughFs::enable_async_thread_pool`).
//! [`plan()`] turns the command line into a [`Plan`], or says why the mode
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

mod plan;
mod start_line;

pub use plan::{mount_options, passthrough_config, plan, Plan, PlanError, Transport};
pub use start_line::{StartLine, START_PREFIX};

use clap::Parser;
use fuse_backend_passthrough::PassthroughFs;
use fuse_server::{Server, Session};
use fuse_transport_dev::DevSession;
use fuse_transport_uring::{UringMode, UringSession};
use passthroughfs::{FsArgs, Runtime};
use start_line::{announce, base_line, settings_fields};
use std::path::PathBuf;
use std::sync::Arc;

/// Exit status of the daemon when the requested mode is not available yet.
pub const EXIT_NOT_AVAILABLE: u8 = 3;

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
    /// `uring` (any runtime): ring threads in all (0, the default: the
    /// transport's threads per kernel queue, sized to the machine; one per
    /// queue in async mode), each with its own runtime in async mode. `dev`
    /// with an async runtime: runtime threads, each running a `FuseDevTask` on its own
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

    /// io_uring with `--runtime uring`: one ring per queue, the runtime's,
    /// carrying both the FUSE commands and the file IO
    /// (`UringConfig::one_ring`).
    #[arg(long)]
    pub uring_one_ring: bool,

    /// io_uring: leave the ring threads free to run on any CPU instead of
    /// pinning them to their queue's (`UringConfig::pin_threads`).
    #[arg(long)]
    pub uring_unpinned: bool,

    /// io_uring: the nice value of the ring threads (default: the
    /// transport's, `UringConfig::nice`).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub uring_nice: Option<i32>,

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
                UringMode::Pools {
                    bufs_per_queue,
                    registered,
                    zero_copy,
                } => format!(
                    "{}{}pools:{bufs_per_queue}",
                    if zero_copy { "zero-copy-" } else { "" },
                    if registered { "registered-" } else { "" }
                ),
                UringMode::PerEntry => "per-entry".to_string(),
                UringMode::DevFuse => "dev-read".to_string(),
            };
            let (threads, entries) = (session.ring_threads(), session.entries_per_queue());
            let stats = session.stats();
            tracing::debug!(?stats, "io_uring session started");
            let session: Arc<dyn Session> = Arc::new(session);
            let line = base_line(&args)
                .with("threads", threads)
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
    fs.set_notifier(session.notifier());
    let logged = fs.clone();
    passthroughfs::spawn_signal_thread(
        signals,
        session.mountpoint().to_path_buf(),
        move || passthroughfs::log_fs_state(&logged),
        move || stopper.stop(),
    )?;
    announce(&line);
    let result = session.wait();
    fs.set_notifier(None);
    result.map_err(|e| Failure::new(format!("serving failed: {e}")))
}
