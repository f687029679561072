//! The `passthroughfs` daemon as a library: its command line (the clap
//! argument types), the mapping from arguments to [`PassthroughConfig`],
//! [`SessionConfig`] and [`UringConfig`], and the signal and serving
//! helpers of the binary (`src/main.rs` and its modules). The bench daemon
//! (`crates/bench`) builds its command line from the same [`FsArgs`] and
//! serves through the same helpers, so a switch means the same in both.
//!
//! Every transport is served as an `Arc<dyn Session>`: a `DevSession`, a
//! `UringSession`, or a `FuseDevTask` on runtime threads of its own
//! ([`start_tasks`]).

use clap::{Args, ValueEnum};

pub mod cli;
pub mod daemonize;
pub mod logging;
pub mod mount_helper;
pub mod notify;
pub mod options;
pub mod sandbox;
pub mod virtio;

use fuse_backend_passthrough::{
    CachePolicy, KillPrivV2, PassthroughConfig, PassthroughFs, ZeroCopyPolicy,
};
use fuse_server::{Server, Session};
use fuse_transport_dev::{FuseDevTask, MountOptions, SessionConfig, SessionError, TaskConfig};
use fuse_transport_uring::{UringConfig, UringRuntime, UringSession};
pub use logging::init_logging;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A one-line error for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// Cache policy names on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Cache {
    /// No caching: direct I/O, no attribute or name caching.
    Never,
    /// Keep cached data and listings until the file changes; attributes and names for a second.
    Auto,
    /// Keep caches across opens; attributes and names for a day.
    Always,
}

impl Cache {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Cache::Never => "never",
            Cache::Auto => "auto",
            Cache::Always => "always",
        }
    }
}

impl From<Cache> for CachePolicy {
    fn from(c: Cache) -> Self {
        match c {
            Cache::Never => CachePolicy::Never,
            Cache::Auto => CachePolicy::Auto,
            Cache::Always => CachePolicy::Always,
        }
    }
}

/// Zero copy policy names on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ZeroCopy {
    /// Never ask for zero copy.
    Never,
    /// Files on backing file systems with RWF_NOWAIT, and buffered opens elsewhere.
    Auto,
    /// Every file the daemon serves.
    Always,
}

impl From<ZeroCopy> for ZeroCopyPolicy {
    fn from(z: ZeroCopy) -> Self {
        match z {
            ZeroCopy::Never => ZeroCopyPolicy::Never,
            ZeroCopy::Auto => ZeroCopyPolicy::Auto,
            ZeroCopy::Always => ZeroCopyPolicy::Always,
        }
    }
}

/// What runs the request handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Runtime {
    /// Worker threads (or ring threads), one request at a time each.
    Sync,
    /// A tokio runtime: one task per request; file IO blocks the thread
    /// unless --thread-pool.
    Tokio,
    /// A tokio runtime driving an io_uring: O_DIRECT READ and WRITE and
    /// READs that miss the page cache are io_uring operations.
    Uring,
}

impl Runtime {
    /// The `async-io` runtime (`None` for the synchronous one).
    pub fn async_type(self) -> Option<async_io::RuntimeType> {
        match self {
            Runtime::Sync => None,
            Runtime::Tokio => Some(async_io::RuntimeType::Tokio),
            Runtime::Uring => Some(async_io::RuntimeType::IoUring),
        }
    }

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Sync => "sync",
            Runtime::Tokio => "tokio",
            Runtime::Uring => "uring",
        }
    }
}

/// The switches of the backend ([`PassthroughConfig`] and its thread
/// pool), flattened into the daemon's and the bench daemon's command lines.
#[derive(Debug, Clone, Args)]
pub struct FsArgs {
    /// Cache policy.
    #[arg(long, value_enum, default_value_t = Cache::Auto)]
    pub cache: Cache,

    /// Which files ask for zero copy over io_uring (Linux 7.3 with
    /// CAP_SYS_ADMIN; elsewhere nothing changes): auto takes files on
    /// backing file systems whose io_uring reads and writes complete
    /// inline (RWF_NOWAIT: ext4, xfs, btrfs) and buffered opens elsewhere
    /// (tmpfs), where small O_DIRECT requests would cost more than a copy.
    #[arg(long, value_enum, default_value_t = ZeroCopy::Auto)]
    pub zero_copy: ZeroCopy,

    /// Use the kernel's writeback cache.
    #[arg(long)]
    pub writeback: bool,

    /// Attribute cache timeout in seconds (default: from --cache; with
    /// --cache auto, a day for regular files watched for changes made in
    /// the source directly, else 1 s).
    #[arg(long, value_name = "SECS")]
    pub attr_timeout: Option<f64>,

    /// Name cache timeout in seconds (default: from --cache; with
    /// --cache auto, a day in directories watched for changes made in the
    /// source directly, else 1 s).
    #[arg(long, value_name = "SECS")]
    pub entry_timeout: Option<f64>,

    /// Don't watch the source for names and files changed behind the
    /// mount's back (--cache auto then caches names and attributes for 1 s).
    #[arg(long)]
    pub no_watch_source: bool,

    /// Don't serve extended attributes.
    #[arg(long)]
    pub no_xattr: bool,

    /// Don't offer READDIRPLUS.
    #[arg(long)]
    pub no_readdirplus: bool,

    /// Zero-message opens (when the kernel supports them).
    #[arg(long)]
    pub no_open: bool,

    /// Zero-message directory opens (when the kernel supports them).
    #[arg(long)]
    pub no_opendir: bool,

    /// Kernel passthrough: the kernel reads and writes open files straight
    /// from the backing files (the default where the kernel offers it and
    /// the daemon has CAP_SYS_ADMIN in the initial user namespace; the
    /// daemon serves READ and WRITE itself elsewhere).
    #[arg(long, overrides_with = "no_passthrough")]
    pub passthrough: bool,

    /// No kernel passthrough: the daemon serves every READ and WRITE.
    #[arg(long, overrides_with = "passthrough")]
    pub no_passthrough: bool,

    /// Hold inodes as O_PATH descriptors instead of file handles
    /// (`name_to_handle_at`), which the backend uses by default where it
    /// can.
    #[arg(long)]
    pub no_file_handles: bool,

    /// Clear set-user-ID/set-group-ID bits in the daemon
    /// (FUSE_HANDLE_KILLPRIV_V2) even under kernel passthrough. The default
    /// does so only when kernel passthrough is off: without it the kernel
    /// asks the daemon for security.capability before every write.
    #[arg(long, overrides_with = "no_killpriv_v2")]
    pub killpriv_v2: bool,

    /// Never FUSE_HANDLE_KILLPRIV_V2: the kernel clears the bits, at a
    /// GETXATTR request per write.
    #[arg(long, overrides_with = "killpriv_v2")]
    pub no_killpriv_v2: bool,

    /// The backend's blocking thread pool (needs --runtime tokio or uring):
    /// on tokio, READs that miss the page cache, WRITEs, LOOKUP, OPEN,
    /// CREATE, lock waits and syncs run on pool threads; on any runtime,
    /// O_DIRECT READ and WRITE do.
    #[arg(long)]
    pub thread_pool: bool,

    /// Largest number of pool threads (default 64).
    #[arg(long, value_name = "N", requires = "thread_pool")]
    pub pool_threads: Option<usize>,

    /// Have the kernel abort the connection when a request stays
    /// unanswered this many seconds (FUSE_REQUEST_TIMEOUT, Linux 6.14+;
    /// the kernel checks every few seconds, and its
    /// /proc/sys/fs/fuse/*_request_timeout limits apply): clients then get
    /// ECONNABORTED, later ENOTCONN, instead of hanging behind a stuck
    /// daemon, and the daemon unmounts the dead mount and exits. The kernel
    /// can't tell a long lock wait (flock, F_SETLKW) from a hung daemon: a
    /// wait that long ends the connection too. Default: no timeout.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u16).range(1..))]
    pub request_timeout: Option<u16>,

    /// Let the mount be idmapped (FUSE_ALLOW_IDMAP, Linux 6.12+):
    /// mount_setattr(MOUNT_ATTR_IDMAP) may then map its ids into a user
    /// namespace, as container runtimes do with volumes. Needs
    /// --default-permissions (the kernel checks permissions; it fails INIT
    /// without it). Files created through an idmapped mount are owned in
    /// SOURCE by the creator's ids mapped through the mount's idmapping;
    /// other requests come without caller ids and are served with the
    /// daemon's.
    #[arg(long)]
    pub allow_idmap: bool,
    /// The most inodes the daemon keeps (0: no limit). Past it, the least
    /// recently used are offered to the kernel (FUSE_NOTIFY_PRUNE, Linux
    /// 6.18+), which drops those nothing uses and forgets them, so a walk
    /// over any tree (a backup, an indexer) leaves a bounded table; files
    /// in use stay. Default: as many as fit in 1/64 of RAM at 512 bytes
    /// each, at least 16384 (and at most 3/4 of the open file limit with
    /// --no-file-handles, where each inode holds a descriptor). On an
    /// older kernel every inode is kept until the kernel forgets it.
    #[arg(long, value_name = "N")]
    pub max_nodes: Option<usize>,
    /// Threads that look up the names of one READDIRPLUS reply (a
    /// listing's, about 200 names): the serving thread and helpers, each
    /// taking a share, so a first `ls -l` or `find` of a large directory
    /// uses more than one CPU. 1: the serving thread alone. Default: the
    /// CPUs the daemon may use, at most 4.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub listing_threads: Option<u16>,
}

impl FsArgs {
    /// The backend's configuration.
    pub fn passthrough_config(&self) -> Result<PassthroughConfig, Failure> {
        Ok(PassthroughConfig::default()
            .cache(self.cache.into())
            .writeback(self.writeback)
            .attr_timeout(seconds("attr-timeout", self.attr_timeout)?)
            .entry_timeout(seconds("entry-timeout", self.entry_timeout)?)
            .watch_source(!self.no_watch_source)
            .request_timeout(self.request_timeout)
            .allow_idmap(self.allow_idmap)
            .max_nodes(self.max_nodes)
            .listing_threads(self.listing_threads.map(usize::from))
            .xattr(!self.no_xattr)
            .readdirplus(!self.no_readdirplus)
            .no_open(self.no_open)
            .no_opendir(self.no_opendir)
            .killpriv_v2(if self.killpriv_v2 {
                KillPrivV2::On
            } else if self.no_killpriv_v2 {
                KillPrivV2::Off
            } else {
                KillPrivV2::Auto
            })
            .passthrough(!self.no_passthrough)
            .file_handles(!self.no_file_handles)
            .zero_copy(self.zero_copy.into()))
    }

    /// Fails if the thread pool is asked for without an async `runtime`
    /// (it serves the async path only).
    pub fn check_thread_pool(&self, runtime: Runtime) -> Result<(), Failure> {
        if self.thread_pool && runtime == Runtime::Sync {
            return Err(Failure(
                "--thread-pool needs --runtime tokio or uring: the pool serves the async path; \
                 synchronous workers already block on threads of their own"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Turns on the backend's thread pool if asked for ([`FsArgs::check_thread_pool`]
    /// says when it can't be).
    pub fn apply_thread_pool(
        &self,
        fs: &Arc<PassthroughFs>,
        runtime: Runtime,
    ) -> Result<(), Failure> {
        self.check_thread_pool(runtime)?;
        if !self.thread_pool {
            return Ok(());
        }
        if let Some(n) = self.pool_threads {
            fs.set_async_thread_pool_size(n);
        }
        fs.enable_async_thread_pool(true);
        Ok(())
    }
}

/// A timeout switch in seconds.
pub fn seconds(what: &str, secs: Option<f64>) -> Result<Option<Duration>, Failure> {
    match secs {
        None => Ok(None),
        Some(s) if (0.0..1e12).contains(&s) => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(Failure(format!(
            "--{what} must be a number of seconds >= 0, not {s}"
        ))),
    }
}

/// `/dev/fuse` worker threads: `threads` to start with, more (up to
/// `max_threads`, by default the session's default maximum or `threads`)
/// when all are busy.
pub fn session_config(
    threads: usize,
    max_threads: Option<usize>,
) -> Result<SessionConfig, Failure> {
    if threads == 0 {
        return Err(Failure("--threads must be at least 1".into()));
    }
    let default = SessionConfig::default();
    let max_threads = match max_threads {
        Some(max) if max < threads => {
            return Err(Failure(format!(
                "--max-threads {max} is below --threads {threads}"
            )))
        }
        Some(max) => max,
        None => default.max_threads.max(threads),
    };
    Ok(default.threads(threads).max_threads(max_threads))
}

/// How many ring threads serve the kernel's queues, and with how many
/// entries ([`UringConfig`]'s `threads`, `threads_per_queue` and
/// `entries_per_queue`; 0 leaves each to the transport's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingLayout {
    /// Ring threads in all (`--uring-queues`).
    pub threads: usize,
    /// Ring threads per queue (`--uring-threads-per-queue`).
    pub threads_per_queue: usize,
    /// Entries per queue (`--uring-entries`).
    pub entries: usize,
}

/// FUSE over io_uring: ring threads and entries as `layout` says, `bufs`
/// pool buffers per queue, handlers on `runtime`; falling back to
/// `/dev/fuse`, it serves as `dev` would.
pub fn uring_config(
    layout: RingLayout,
    bufs: usize,
    runtime: Runtime,
    dev: &SessionConfig,
) -> Result<UringConfig, Failure> {
    Ok(UringConfig::default()
        .threads(layout.threads)
        .threads_per_queue(layout.threads_per_queue)
        .entries_per_queue(layout.entries)
        .bufs_per_queue(bufs)
        .dev_max_threads(dev.max_threads)
        .fallback_threads(dev.threads)
        .runtime(runtime.async_type().map(UringRuntime::from)))
}

/// Fails unless `source` is a directory.
pub fn check_source(source: &Path) -> Result<(), Failure> {
    match std::fs::metadata(source) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Failure(format!(
            "source {} is not a directory",
            source.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure(format!(
            "source {} does not exist",
            source.display()
        ))),
        Err(e) => Err(Failure(format!(
            "cannot use source {}: {e}",
            source.display()
        ))),
    }
}

/// Raises the open file limit to the hard limit (the passthrough may hold
/// a descriptor per inode the kernel knows), logging what it did.
pub fn raise_nofile_limit() {
    match fuse_backend_passthrough::raise_nofile_limit() {
        Ok((from, to)) if from < to => {
            tracing::info!(from, to, "raised the open file limit to the hard limit")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open file limit: {e}"),
    }
}

/// Serves `server` at `mountpoint` with a [`FuseDevTask`] on a runtime of
/// type `kind` on a thread of its own and a sibling task on each of
/// `threads - 1` more threads (each its own runtime and cloned fd).
/// Returns once every task runs; the task is the session (stop it, wait
/// for it) and `config.runtime_name` is set to `kind`'s name.
pub fn start_tasks(
    kind: async_io::RuntimeType,
    threads: usize,
    server: Server,
    mountpoint: &Path,
    options: &MountOptions,
    config: TaskConfig,
) -> Result<Arc<FuseDevTask>, Failure> {
    let (mountpoint, options) = (mountpoint.to_path_buf(), options.clone());
    start_tasks_with(kind, threads, config, move |config| {
        FuseDevTask::mount(server, &mountpoint, &options, config)
    })
}

/// [`start_tasks`] for a first task that `make` makes (on runtime thread 0,
/// within its runtime) from the configuration: a mount, or a connection
/// taken over ([`FuseDevTask::resume_paused`]).
pub fn start_tasks_with(
    kind: async_io::RuntimeType,
    threads: usize,
    config: TaskConfig,
    make: impl FnOnce(TaskConfig) -> Result<FuseDevTask, SessionError> + Send + 'static,
) -> Result<Arc<FuseDevTask>, Failure> {
    let config = config.runtime_name(kind.to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    spawn_runtime_thread(kind, 0, tx, move |tx| async move {
        match make(config) {
            Ok(task) => {
                let task = Arc::new(task);
                let _ = tx.send(Ok(task.clone()));
                // The error is wait()'s too.
                let _ = task.run_shared().await;
            }
            Err(e) => {
                let _ = tx.send(Err(Failure(e.to_string())));
            }
        }
    })?;
    let task = rx
        .recv()
        .map_err(|_| Failure("runtime thread 0 ended before mounting".into()))??;
    let stop = |f: Failure| {
        if task.is_paused() {
            // A connection taken over and not yet served: the daemon that
            // handed it over serves on once this one gives up.
            let _ = task.release();
        } else {
            task.stop();
            let _ = task.unmount();
        }
        f
    };
    for i in 1..threads.max(1) {
        let sibling = task
            .sibling()
            .map_err(|e| stop(Failure(format!("cloning /dev/fuse for thread {i}: {e}"))))?;
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_runtime_thread(kind, i, tx, move |tx| async move {
            match sibling.into_task() {
                Ok(task) => {
                    let _ = tx.send(Ok(()));
                    if let Err(e) = task.run().await {
                        tracing::warn!("a sibling task failed: {e}");
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(Failure(format!("task for thread {i}: {e}"))));
                }
            }
        })
        .map_err(stop)?;
        rx.recv()
            .map_err(|_| Failure(format!("runtime thread {i} ended before serving")))
            .and_then(|r| r)
            .map_err(stop)?;
    }
    Ok(task)
}

/// Starts runtime thread `i` of [`start_tasks_with`] (`fuse-task-{i}`):
/// it builds a `kind` runtime and runs `serve` on it, which reports
/// through `tx`; a runtime that can't be built is reported there instead.
fn spawn_runtime_thread<T, F>(
    kind: async_io::RuntimeType,
    i: usize,
    tx: std::sync::mpsc::Sender<Result<T, Failure>>,
    serve: impl FnOnce(std::sync::mpsc::Sender<Result<T, Failure>>) -> F + Send + 'static,
) -> Result<(), Failure>
where
    T: Send + 'static,
    F: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(format!("fuse-task-{i}"))
        .spawn(move || match kind.build() {
            Ok(rt) => rt.block_on(serve(tx)),
            Err(e) => {
                let _ = tx.send(Err(Failure(format!("building the {kind} runtime: {e}"))));
            }
        })
        .map(drop)
        .map_err(|e| Failure(format!("starting runtime thread {i}: {e}")))
}

/// Blocks SIGINT, SIGTERM, SIGHUP and SIGUSR1 in this thread (call it
/// before any other thread starts: every thread started later inherits the
/// mask, so only the signal thread of [`spawn_signal_thread`] gets them).
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: the set is initialized by sigemptyset before use; blocking
    // signals in this (the only) thread is inherited by every thread
    // started later.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is a valid signal set; `sig` is written by sigwait.
    while unsafe { libc::sigwait(set, &mut sig) } != 0 {}
    sig
}

/// Starts the "signals" thread: SIGUSR1 runs `log_state`; the first
/// SIGINT, SIGTERM or SIGHUP logs "unmounting on signal" and runs `stop` on
/// a thread of its own (a stop that never ends, held up by a request that
/// never finishes, must not keep this thread from the next signal); another
/// one while that stop is under way forces the exit ([`force_exit`]).
pub fn spawn_signal_thread(
    signals: libc::sigset_t,
    mountpoint: PathBuf,
    log_state: impl Fn() + Send + 'static,
    stop: impl FnOnce() + Send + 'static,
) -> Result<(), Failure> {
    // Shared with the thread that runs it, so that it can still run here if
    // that thread can't be started.
    let stop = Arc::new(std::sync::Mutex::new(Some(stop)));
    fn run_stop<F: FnOnce()>(stop: &std::sync::Mutex<Option<F>>) {
        let taken = stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(stop) = taken {
            stop();
        }
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut stopping = false;
            loop {
                let sig = wait_for_signal(&signals);
                if sig == libc::SIGUSR1 {
                    log_state();
                    continue;
                }
                if stopping {
                    force_exit(sig, &mountpoint);
                }
                stopping = true;
                tracing::info!(signal = sig, "unmounting on signal");
                let shared = stop.clone();
                let spawned = std::thread::Builder::new()
                    .name("stopping".into())
                    .spawn(move || run_stop(&shared));
                if let Err(e) = spawned {
                    // Stopping here: a second signal can't force the exit then.
                    tracing::warn!("no thread for the stop ({e}); stopping on the signal thread");
                    run_stop(&stop);
                }
            }
        })
        .map(drop)
        .map_err(|e| Failure(format!("starting the signal thread: {e}")))
}

/// A second SIGINT, SIGTERM or SIGHUP while the stop is under way: the user
/// wants out now, without waiting for requests in progress (one of them may
/// be what holds the stop up). The mount is detached (a lazy unmount, if
/// the topmost mount at `mountpoint` is still a FUSE one: the stop may have
/// detached ours already, and a plain mount under it is not ours), so the
/// mountpoint is free at once and programs still using the file system
/// get errors once this process is gone. Then the process dies of `sig`
/// itself (a shell reports 128 + its number: 130 for Ctrl-C): a fatal
/// signal gives every thread a pending SIGKILL, so none of them, not even
/// the one that closes the process's files (a close on a stuck backing
/// file system waits for it, killably), can hold the exit up the way the
/// stop was held up; `_exit` would not.
pub fn force_exit(sig: i32, mountpoint: &Path) -> ! {
    tracing::warn!(
        signal = sig,
        mountpoint = %mountpoint.display(),
        "signal while unmounting: forcing the exit (lazy unmount; requests in progress fail)"
    );
    if topmost_mount_is_fuse(mountpoint) {
        if let Err(e) = fuse_transport_dev::unmount_path(mountpoint, true) {
            tracing::warn!("unmounting {} lazily: {e}", mountpoint.display());
        }
    }
    // SAFETY: the set is initialized by sigemptyset; resetting a signal that
    // has no handler to its default action and sending it to ourselves have
    // no other preconditions. The signal is unblocked in this thread only
    // (every thread blocks it), so the kernel delivers it here, and its
    // default action ends the process before kill returns to user space.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        // Not reached; should it be, no destructor runs either.
        libc::_exit(128 + sig)
    }
}

/// Whether the topmost mount at `mountpoint` (canonical) is a FUSE file
/// system, from `/proc/self/mountinfo` (asking the file system itself, with
/// stat or statfs, could wait for the daemon that is being stopped).
fn topmost_mount_is_fuse(mountpoint: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    // mountinfo escapes these characters as octal.
    let mut want = String::new();
    for c in mountpoint.to_string_lossy().chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => want.push_str(&format!("\\{:03o}", c as u32)),
            c => want.push(c),
        }
    }
    // Later lines are mounted on top of earlier ones.
    info.lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .and_then(|l| l.split(" - ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .is_some_and(|fstype| fstype == "fuse" || fstype.starts_with("fuse."))
}

/// What SIGUSR1 logs: the transport and, over io_uring, its memory and
/// counters (`docs/fuse-uring-performance.md` reads `reserved`).
pub fn log_transport_state(session: &dyn Session, uring: Option<&UringSession>) {
    let Some(uring) = uring else {
        tracing::info!(transport = %session.transport(), "transport state");
        return;
    };
    let stats = uring.stats();
    tracing::info!(
        mode = %stats.mode,
        reserved = stats.memory.reserved,
        resident = stats.memory.resident,
        ring_requests = stats.ring_requests(),
        pooled_requests = stats.pooled_requests,
        zero_copy_requests = stats.zero_copy_reads + stats.zero_copy_writes,
        zero_copy_bytes = stats.zero_copy_bytes,
        zero_copy_copied_bytes = stats.zero_copy_copied_bytes,
        requests_per_queue = ?stats.requests_per_queue,
        "transport state"
    );
}

/// Bytes the allocator has handed out and not had back (glibc's
/// `mallinfo2`: the main arena's and the threads' arenas' chunks in use,
/// and mmapped ones), 0 where it can't tell.
fn heap_in_use() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes nothing and returns plain integers.
        let mi = unsafe { libc::mallinfo2() };
        (mi.uordblks + mi.hblkhd) as u64
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// What SIGUSR1 logs of the file system: what the kernel holds of it (1
/// inode and 0 references once it forgot everything), open handles, the
/// descriptors it keeps and the heap in use (`tests/scale.rs` reads this
/// line; `benches/walk-bounded.sh` divides the heap by the inodes).
pub fn log_fs_state(fs: &PassthroughFs) {
    tracing::info!(
        inodes = fs.inode_count(),
        heap_bytes = heap_in_use(),
        lookup_refs = fs.lookup_refs(),
        handles = fs.handle_count(),
        cached_fds = fs.cached_fds(),
        backing_ids = fs.live_backing_ids(),
        max_nodes = fs.max_nodes().unwrap_or(0),
        pruned_offered = fs.prune_stats().map_or(0, |p| p.offered),
        "file system state"
    );
}
