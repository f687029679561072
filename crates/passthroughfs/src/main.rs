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

use clap::Parser;
use fuse_backend_passthrough::PassthroughFs;
use fuse_server::{Server, Session};
use fuse_transport_dev::{DevSession, MountOptions, TaskConfig};
use fuse_transport_uring::UringSession;
use passthroughfs::cli::Args;
use passthroughfs::{
    block_signals, check_source, log_fs_state, log_transport_state, session_config,
    spawn_signal_thread, uring_config, Failure,
};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

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
    passthroughfs::raise_nofile_limit();
    let config = args.fs.passthrough_config()?;
    let fs = PassthroughFs::new(&args.source, config).map_err(|e| Failure(e.to_string()))?;
    let fs = Arc::new(fs);
    args.fs.apply_thread_pool(&fs, args.runtime)?;
    if !fs.uses_caller_credentials() {
        tracing::warn!("not running as root: files are created with the daemon's owner");
    }
    let mut options = MountOptions::default()
        .fsname(
            args.fsname
                .unwrap_or_else(|| args.source.to_string_lossy().into_owned()),
        )
        .allow_other(args.allow_other)
        .default_permissions(args.default_permissions)
        .read_only(args.ro)
        .max_read(args.max_read);
    if !args.subtype.is_empty() {
        options = options.subtype(args.subtype);
    }
    let session_config = session_config(args.threads)?;
    let uring = if args.uring {
        Some(uring_config(
            args.uring_queues,
            args.uring_entries,
            args.uring_bufs,
            args.runtime,
            &session_config,
        )?)
    } else {
        None
    };

    let signals = block_signals();
    let runtime = args.runtime.async_type();
    let server = match runtime {
        None => Server::new(fs.clone()),
        Some(_) => Server::new_async(fs.clone()),
    };
    let mut uring_session = None;
    let session: Arc<dyn Session> = match (uring, runtime) {
        (Some(config), _) => {
            let uring = Arc::new(
                UringSession::mount(server, &args.mountpoint, &options, config)
                    .map_err(|e| Failure(e.to_string()))?,
            );
            uring_session = Some(uring.clone());
            uring
        }
        // One runtime thread per --threads, each a task on its own cloned fd.
        (None, Some(kind)) => passthroughfs::start_tasks(
            kind,
            args.threads,
            server,
            &args.mountpoint,
            &options,
            TaskConfig::default(),
        )?,
        (None, None) => Arc::new(
            DevSession::mount(server, &args.mountpoint, &options, session_config)
                .map_err(|e| Failure(e.to_string()))?,
        ),
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
    passthroughfs::init_logging("info");
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("passthroughfs: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
