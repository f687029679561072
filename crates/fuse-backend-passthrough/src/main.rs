//! `passthroughfs`: serves a directory through FUSE at a mountpoint.
//!
//! ```text
//! passthroughfs [OPTIONS] SOURCE MOUNTPOINT
//! ```
//!
//! Stays in the foreground until the file system is unmounted or the
//! process gets SIGINT, SIGTERM or SIGHUP (then it unmounts and exits 0).
//! Logs to standard error; `RUST_LOG` sets the level (default `info`).

use clap::{Parser, ValueEnum};
use fuse_backend_passthrough::{CachePolicy, PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
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

/// Serve the directory SOURCE through FUSE at MOUNTPOINT (in the foreground).
#[derive(Debug, Parser)]
#[command(name = "passthroughfs", version, about)]
struct Args {
    /// The directory to serve.
    source: PathBuf,

    /// Where to mount it.
    mountpoint: PathBuf,

    /// Worker threads to start with (more start when all are busy).
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

    /// The mount's subtype (type fuse.NAME).
    #[arg(long, value_name = "NAME", default_value = "passthroughfs")]
    subtype: String,

    /// Largest read request the kernel sends, in bytes.
    #[arg(long, value_name = "BYTES")]
    max_read: Option<u32>,

    /// Serve over FUSE-over-io_uring when the kernel offers it (falls back
    /// to /dev/fuse, saying why, when it doesn't).
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

fn check_mountpoint(mountpoint: &Path) -> Result<(), Failure> {
    // statfs always asks the daemon (a stat may be answered from the
    // kernel's cache even on a dead mount): a live FUSE mount there is in
    // use, one whose daemon is gone answers ENOTCONN.
    match fuse_transport_dev::is_fuse_mount(mountpoint) {
        Ok(true) => Err(Failure(format!(
            "mountpoint {} is in use: a FUSE file system is already mounted there (unmount it first)",
            mountpoint.display()
        ))),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Err(Failure(
            fuse_transport_dev::MountError::DeadMount {
                path: mountpoint.to_path_buf(),
            }
            .to_string(),
        )),
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
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
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
    check_mountpoint(&args.mountpoint)?;
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
        ..PassthroughConfig::default()
    };
    let fs = PassthroughFs::new(&args.source, config).map_err(|e| Failure(e.to_string()))?;
    let fs = Arc::new(fs);
    if !fs.uses_caller_credentials() {
        tracing::warn!("not running as root: files are created with the daemon's owner");
    }
    let options = MountOptions {
        fsname: Some(
            args.fsname
                .unwrap_or_else(|| args.source.to_string_lossy().into_owned()),
        ),
        subtype: Some(args.subtype),
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
    let server = Server::new(fs.clone());
    let session: Arc<dyn Session> = if args.uring {
        let config = UringConfig {
            threads: args.uring_queues,
            entries_per_queue: args.uring_entries,
            bufs_per_queue: args.uring_bufs,
            dev_max_threads: session_config.max_threads,
            ..UringConfig::default()
        };
        Arc::new(
            UringSession::mount(server, &args.mountpoint, &options, config)
                .map_err(|e| Failure(e.to_string()))?,
        )
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
    let stopper = session.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let sig = wait_for_signal(&signals);
            tracing::info!(signal = sig, "unmounting on signal");
            stopper.stop();
        })
        .map_err(|e| Failure(format!("starting the signal thread: {e}")))?;
    let result = session.wait();
    match result {
        Ok(()) => {
            tracing::info!("unmounted; exiting");
            Ok(())
        }
        Err(e) => Err(Failure(format!("serving failed: {e}"))),
    }
}

fn main() -> ExitCode {
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
