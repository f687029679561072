//! `passthroughfs`: serves a directory through FUSE at a mountpoint.
//!
//! ```text
//! passthroughfs [OPTIONS] SOURCE MOUNTPOINT
//! ```
//!
//! Stays in the foreground until the file system is unmounted or the
//! process gets SIGINT, SIGTERM or SIGHUP (then it unmounts and exits 0
//! once the requests in progress are answered). Another of these signals
//! while that stop is under way forces the exit: the mount is detached
//! (lazy unmount), requests still in progress fail, and the process dies
//! of that signal (a shell reports 128 + its number: 130 for Ctrl-C).
//! `--runtime tokio|uring` serves the file system through its
//! `AsyncFileSystem` on an `async-io` runtime (a `FuseDevTask`, or with
//! `--uring` a runtime per ring thread); `--thread-pool` then moves
//! requests that may block to the backend's thread pool.
//! SIGUSR1 logs the transport's state (with `--uring`: its mode, the ring
//! buffers' reserved and resident bytes, requests per queue) and the file
//! system's (inodes the kernel knows, their lookup references, open
//! handles, cached descriptors, backing ids) and goes on.
//! Logs to standard error; `RUST_LOG` sets the level (default `info`).

use clap::{Parser, ValueEnum};
use fuse_backend_passthrough::{CachePolicy, PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_dev::{DevSession, FuseDevTask, MountOptions, SessionConfig, TaskConfig};
use fuse_transport_uring::{UringConfig, UringSession};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Cache policy names on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Cache {
    /// No caching: direct I/O, no attribute or name caching.
    Never,
    /// Cache while open; attributes and names for a second.
    Auto,
    /// Keep caches across opens; attributes and names for a day.
    Always,
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

/// What runs the request handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Runtime {
    /// Worker threads (or ring threads), one request at a time each.
    Sync,
    /// A tokio runtime: one task per request; file IO blocks the thread
    /// unless --thread-pool.
    Tokio,
    /// A tokio runtime driving an io_uring: READ and WRITE are io_uring
    /// operations.
    Uring,
}

impl Runtime {
    fn async_type(self) -> Option<async_io::RuntimeType> {
        match self {
            Runtime::Sync => None,
            Runtime::Tokio => Some(async_io::RuntimeType::Tokio),
            Runtime::Uring => Some(async_io::RuntimeType::IoUring),
        }
    }
}

/// What `--help` says about signals (after the options).
const SIGNALS_HELP: &str = "\
Signals:
  SIGINT (Ctrl-C), SIGTERM, SIGHUP  unmount and exit 0 once the requests in
                                    progress are answered
  the same again while unmounting   force the exit: the mount is detached
                                    (lazy unmount), requests still in progress
                                    fail, and the process dies of the signal
                                    (status 130 in a shell for Ctrl-C)
  SIGUSR1                           log the transport's and the file system's
                                    state";

/// Serve the directory SOURCE through FUSE at MOUNTPOINT (in the foreground).
#[derive(Debug, Parser)]
#[command(name = "passthroughfs", version, about, after_help = SIGNALS_HELP)]
struct Args {
    /// The directory to serve.
    source: PathBuf,

    /// Where to mount it.
    mountpoint: PathBuf,

    /// Worker threads to start with (more start when all are busy;
    /// `--runtime sync` over /dev/fuse), or, with `--runtime tokio|uring`
    /// over /dev/fuse, runtime threads, each serving with its own task and
    /// cloned fd.
    #[arg(long, value_name = "N", default_value_t = SessionConfig::default().threads)]
    threads: usize,

    /// Cache policy.
    #[arg(long, value_enum, default_value_t = Cache::Auto)]
    cache: Cache,

    /// Use the kernel's writeback cache.
    #[arg(long)]
    writeback: bool,

    /// Attribute cache timeout in seconds (default: from --cache).
    #[arg(long, value_name = "SECS")]
    attr_timeout: Option<f64>,

    /// Name cache timeout in seconds (default: from --cache).
    #[arg(long, value_name = "SECS")]
    entry_timeout: Option<f64>,

    /// Don't serve extended attributes.
    #[arg(long)]
    no_xattr: bool,

    /// Don't offer READDIRPLUS.
    #[arg(long)]
    no_readdirplus: bool,

    /// Zero-message opens (when the kernel supports them).
    #[arg(long)]
    no_open: bool,

    /// Zero-message directory opens (when the kernel supports them).
    #[arg(long)]
    no_opendir: bool,

    /// Kernel passthrough: the kernel reads and writes open files straight
    /// from the backing files (the default where the kernel offers it and
    /// the daemon has CAP_SYS_ADMIN in the initial user namespace; the
    /// daemon serves READ and WRITE itself elsewhere).
    #[arg(long, overrides_with = "no_passthrough")]
    passthrough: bool,

    /// No kernel passthrough: the daemon serves every READ and WRITE.
    #[arg(long, overrides_with = "passthrough")]
    no_passthrough: bool,

    /// Clear set-user-ID/set-group-ID bits in the daemon (FUSE_HANDLE_KILLPRIV_V2).
    #[arg(long)]
    killpriv_v2: bool,

    /// Let users other than the mounting one use the mount (needs --default-permissions).
    #[arg(long)]
    allow_other: bool,

    /// Let the kernel check permissions from file modes.
    #[arg(long)]
    default_permissions: bool,

    /// Mount read-only.
    #[arg(long)]
    ro: bool,

    /// The mount's source name (default: SOURCE).
    #[arg(long, value_name = "NAME")]
    fsname: Option<String>,

    /// The mount's subtype (type fuse.NAME); an empty NAME mounts as plain
    /// type fuse (what xfstests' FSTYP=fuse expects to find).
    #[arg(long, value_name = "NAME", default_value = "passthroughfs")]
    subtype: String,

    /// Largest read request the kernel sends, in bytes.
    #[arg(long, value_name = "BYTES")]
    max_read: Option<u32>,

    /// Serve over FUSE-over-io_uring when the kernel offers it (falls back
    /// to /dev/fuse, saying why, when it doesn't: then with --threads
    /// workers, as without --uring).
    #[arg(long)]
    uring: bool,

    /// io_uring: payload buffers per queue in the kernel's buffer pool
    /// (Linux 7.3+); 0 gives every ring entry its own payload buffer.
    #[arg(long, value_name = "N", default_value_t = UringConfig::default().bufs_per_queue, requires = "uring")]
    uring_bufs: usize,

    /// io_uring: ring entries per queue (requests a queue serves at once).
    #[arg(long, value_name = "N", default_value_t = UringConfig::default().entries_per_queue, requires = "uring")]
    uring_entries: usize,

    /// io_uring: ring threads serving the kernel's queues (it has one queue
    /// per possible CPU); 0 gives each queue its own thread, pinned to its CPU.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "uring")]
    uring_queues: usize,

    /// What runs the request handlers: worker threads (sync), or one
    /// async-io runtime (over /dev/fuse: one thread serving every request
    /// as a task; with --uring: one per ring thread).
    #[arg(long, value_enum, default_value_t = Runtime::Sync)]
    runtime: Runtime,

    /// The backend's blocking thread pool (needs --runtime tokio or uring):
    /// on tokio, READs that miss the page cache, WRITEs, LOOKUP, OPEN,
    /// CREATE, lock waits and syncs run on pool threads; on any runtime,
    /// O_DIRECT READ and WRITE do.
    #[arg(long)]
    thread_pool: bool,

    /// Largest number of pool threads (default 64).
    #[arg(long, value_name = "N", requires = "thread_pool")]
    pool_threads: Option<usize>,

    /// If MOUNTPOINT is a dead FUSE mount (its daemon exited or was
    /// killed: every access fails with ENOTCONN), unmount it lazily first
    /// instead of refusing to start.
    #[arg(long)]
    unmount_dead: bool,
}

/// A one-line error for the user.
struct Failure(String);

fn seconds(what: &str, secs: Option<f64>) -> Result<Option<Duration>, Failure> {
    match secs {
        None => Ok(None),
        Some(s) if (0.0..1e12).contains(&s) => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(Failure(format!(
            "--{what} must be a number of seconds >= 0, not {s}"
        ))),
    }
}

fn check_source(source: &Path) -> Result<(), Failure> {
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

fn check_mountpoint(mountpoint: &Path, unmount_dead: bool) -> Result<(), Failure> {
    // statfs always asks the daemon (a stat may be answered from the
    // kernel's cache even on a dead mount): a live FUSE mount there is in
    // use, one whose daemon is gone answers ENOTCONN.
    match fuse_transport_dev::is_fuse_mount(mountpoint) {
        Ok(true) => Err(Failure(format!(
            "mountpoint {} is in use: a FUSE file system is already mounted there (unmount it first)",
            mountpoint.display()
        ))),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) && unmount_dead => {
            // Lazily: programs may still hold files of the dead mount.
            fuse_transport_dev::unmount_path(mountpoint, true).map_err(|e| {
                Failure(format!(
                    "cannot unmount the dead FUSE mount at {}: {e}",
                    mountpoint.display()
                ))
            })?;
            tracing::warn!(
                mountpoint = %mountpoint.display(),
                "unmounted a dead FUSE mount (its daemon had exited) lazily"
            );
            check_mountpoint(mountpoint, false)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Err(Failure(format!(
            "{}, or start passthroughfs with --unmount-dead to do that itself",
            fuse_transport_dev::MountError::DeadMount {
                path: mountpoint.to_path_buf(),
            }
        ))),
        // Anything else (missing, not a directory, ...) is reported by the mount.
        _ => Ok(()),
    }
}

fn block_signals() -> libc::sigset_t {
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
fn spawn_signal_thread(
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
fn force_exit(sig: i32, mountpoint: &Path) -> ! {
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
fn log_transport_state(session: &dyn Session, uring: Option<&UringSession>) {
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
        requests_per_queue = ?stats.requests_per_queue,
        "transport state"
    );
}

/// What SIGUSR1 logs of the file system: what the kernel holds of it (1
/// inode and 0 references once it forgot everything), open handles, and
/// the descriptors it keeps (`tests/scale.rs` reads this line).
fn log_fs_state(fs: &PassthroughFs) {
    tracing::info!(
        inodes = fs.inode_count(),
        lookup_refs = fs.lookup_refs(),
        handles = fs.handle_count(),
        cached_fds = fs.cached_fds(),
        backing_ids = fs.live_backing_ids(),
        "file system state"
    );
}

fn run(args: Args) -> Result<(), Failure> {
    if args.allow_other && !args.default_permissions {
        return Err(Failure(
            "--allow-other needs --default-permissions: the daemon serves every user's requests \
             with its own privileges (root's) for lookups, reads and writes, so without the \
             kernel checking file modes any user could read, change or list files that the \
             backing directory's permissions deny them"
                .into(),
        ));
    }
    check_source(&args.source)?;
    check_mountpoint(&args.mountpoint, args.unmount_dead)?;
    match fuse_backend_passthrough::raise_nofile_limit() {
        Ok((from, to)) if from < to => {
            tracing::info!(from, to, "raised the open file limit to the hard limit")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open file limit: {e}"),
    }
    let config = PassthroughConfig {
        cache: args.cache.into(),
        writeback: args.writeback,
        attr_timeout: seconds("attr-timeout", args.attr_timeout)?,
        entry_timeout: seconds("entry-timeout", args.entry_timeout)?,
        xattr: !args.no_xattr,
        readdirplus: !args.no_readdirplus,
        no_open: args.no_open,
        no_opendir: args.no_opendir,
        killpriv_v2: args.killpriv_v2,
        passthrough: !args.no_passthrough,
        ..PassthroughConfig::default()
    };
    let fs = PassthroughFs::new(&args.source, config).map_err(|e| Failure(e.to_string()))?;
    let fs = Arc::new(fs);
    let runtime = args.runtime.async_type();
    if args.thread_pool {
        if runtime.is_none() {
            return Err(Failure(
                "--thread-pool needs --runtime tokio or uring: the pool serves the async path; \
                 synchronous workers already block on threads of their own"
                    .into(),
            ));
        }
        if let Some(n) = args.pool_threads {
            fs.set_async_thread_pool_size(n);
        }
        fs.enable_async_thread_pool(true);
    }
    if !fs.uses_caller_credentials() {
        tracing::warn!("not running as root: files are created with the daemon's owner");
    }
    let options = MountOptions {
        fsname: Some(
            args.fsname
                .unwrap_or_else(|| args.source.to_string_lossy().into_owned()),
        ),
        subtype: (!args.subtype.is_empty()).then_some(args.subtype),
        allow_other: args.allow_other,
        default_permissions: args.default_permissions,
        read_only: args.ro,
        max_read: args.max_read,
        ..MountOptions::default()
    };
    if args.threads == 0 {
        return Err(Failure("--threads must be at least 1".into()));
    }
    let session_config = SessionConfig {
        threads: args.threads,
        max_threads: SessionConfig::default().max_threads.max(args.threads),
        ..SessionConfig::default()
    };

    if args.uring && args.uring_entries == 0 {
        return Err(Failure("--uring-entries must be at least 1".into()));
    }

    let signals = block_signals();
    let server = match runtime {
        None => Server::new(fs.clone()),
        Some(_) => Server::new_async(fs.clone()),
    };
    if let (Some(kind), false) = (runtime, args.uring) {
        return serve_task(
            kind,
            args.threads,
            server,
            fs,
            &args.mountpoint,
            &options,
            signals,
        );
    }
    let mut uring_session = None;
    let session: Arc<dyn Session> = if args.uring {
        let config = UringConfig {
            threads: args.uring_queues,
            entries_per_queue: args.uring_entries,
            bufs_per_queue: args.uring_bufs,
            dev_max_threads: session_config.max_threads,
            // Falling back to /dev/fuse, serve as plain /dev/fuse would.
            fallback_threads: session_config.threads,
            runtime,
            ..UringConfig::default()
        };
        let uring = Arc::new(
            UringSession::mount(server, &args.mountpoint, &options, config)
                .map_err(|e| Failure(e.to_string()))?,
        );
        uring_session = Some(uring.clone());
        uring
    } else {
        Arc::new(
            DevSession::mount(server, &args.mountpoint, &options, session_config)
                .map_err(|e| Failure(e.to_string()))?,
        )
    };
    tracing::info!(
        source = %args.source.display(),
        mountpoint = %session.mountpoint().display(),
        transport = %session.transport(),
        "passthroughfs serving"
    );
    let (logger, stopper) = (session.clone(), session.clone());
    spawn_signal_thread(
        signals,
        session.mountpoint().to_path_buf(),
        move || {
            log_transport_state(logger.as_ref(), uring_session.as_deref());
            log_fs_state(&fs);
        },
        move || stopper.stop(),
    )?;
    let result = session.wait();
    match result {
        Ok(()) => {
            tracing::info!("unmounted; exiting");
            Ok(())
        }
        Err(e) => Err(Failure(format!("serving failed: {e}"))),
    }
}

/// Serves `server` at `mountpoint` with a `FuseDevTask` on a runtime of
/// type `kind` on this thread and a sibling task on each of `threads - 1`
/// more threads (each its own runtime and cloned fd), until unmounted or
/// signalled (a signal stops the tasks, which let the requests they run
/// finish).
fn serve_task(
    kind: async_io::RuntimeType,
    threads: usize,
    server: Server,
    fs: Arc<PassthroughFs>,
    mountpoint: &Path,
    options: &MountOptions,
    signals: libc::sigset_t,
) -> Result<(), Failure> {
    let rt = kind
        .build()
        .map_err(|e| Failure(format!("building the {kind} runtime: {e}")))?;
    rt.block_on(async {
        let task = FuseDevTask::mount(server, mountpoint, options, TaskConfig::default())
            .map_err(|e| Failure(e.to_string()))?;
        let handle = task.handle();
        let mut siblings = Vec::new();
        for i in 1..threads.max(1) {
            let sibling = task
                .sibling()
                .map_err(|e| Failure(format!("cloning /dev/fuse for thread {i}: {e}")))?;
            let thread = std::thread::Builder::new()
                .name(format!("fuse-task-{i}"))
                .spawn(move || -> std::io::Result<()> {
                    let rt = kind.build().map_err(std::io::Error::other)?;
                    rt.block_on(async move {
                        let task = sibling
                            .into_task()
                            .map_err(|e| std::io::Error::other(e.to_string()))?;
                        task.run().await
                    })
                })
                .map_err(|e| Failure(format!("starting runtime thread {i}: {e}")))?;
            siblings.push(thread);
        }
        let transport = format!(
            "/dev/fuse, a task on a {kind} runtime on each of {} threads",
            threads.max(1)
        );
        let logged = transport.clone();
        spawn_signal_thread(
            signals,
            task.mountpoint().to_path_buf(),
            move || {
                tracing::info!(transport = %logged, "transport state");
                log_fs_state(&fs);
            },
            move || handle.stop(),
        )?;
        tracing::info!(
            mountpoint = %task.mountpoint().display(),
            %transport,
            "passthroughfs serving"
        );
        let result = task
            .run()
            .await
            .map_err(|e| Failure(format!("serving failed: {e}")));
        for s in siblings {
            match s.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("a sibling task failed: {e}"),
                Err(_) => tracing::error!("a sibling task's thread panicked"),
            }
        }
        result
    })?;
    tracing::info!("unmounted; exiting");
    Ok(())
}

/// Memory that a large walk used goes back once the kernel forgot its
/// inodes (glibc): one malloc arena for the whole process (worker threads
/// otherwise get arenas of their own, and what they allocated stays
/// resident in each, scattered; small allocations still go through each
/// thread's cache without taking the arena's lock), and a fixed mmap
/// threshold (the dynamic one rises after a large table is freed, and the
/// next large tables then pin the heap).
fn tune_malloc() {
    #[cfg(target_env = "gnu")]
    // SAFETY: called first in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 10);
    }
}

fn main() -> ExitCode {
    tune_malloc();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("passthroughfs: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
