//! `passthroughfs`: serves a directory through FUSE at a mountpoint.
//!
//! ```text
//! passthroughfs [OPTIONS] SOURCE MOUNTPOINT [-o OPT[,OPT...]]
//! ```
//!
//! Goes to the background once the mount is usable, unless `-f` (or `-d`):
//! the command's exit status says whether the mount came up, and the
//! background daemon logs to syslog (or to `--log-file`). A log line that
//! can't be written (standard error a closed pipe, a full disk) is lost;
//! the mount is not. Started under mount(8)'s helper name
//! (`mount.fuse.passthroughfs`) it takes mount(8)'s helper arguments
//! ([`passthroughfs::mount_helper`]); `-o` takes the mount options of
//! fstab lines and `mount.fuse3` ([`passthroughfs::options`]). With
//! `NOTIFY_SOCKET` set it tells the service manager READY=1 once the mount
//! is usable and STOPPING=1 when it unmounts.
//!
//! Serves until the file system is unmounted or the process gets SIGINT,
//! SIGTERM or SIGHUP (then it unmounts and exits 0 once the requests in
//! progress are answered). Another of these signals while that stop is
//! under way forces the exit: the mount is detached (lazy unmount),
//! requests still in progress fail, and the process dies of that signal (a
//! shell reports 128 + its number: 130 for Ctrl-C). `--runtime
//! tokio|uring` serves the file system through its `AsyncFileSystem` on an
//! `async-io` runtime (a `FuseDevTask`, or with `--uring` a runtime per
//! ring thread); `--thread-pool` then moves requests that may block to the
//! backend's thread pool. SIGUSR1 logs the transport's state (with
//! `--uring`: its mode, the ring buffers' reserved and resident bytes,
//! requests per queue) and the file system's (inodes the kernel knows,
//! their lookup references, open handles, cached descriptors, backing ids)
//! and goes on. `RUST_LOG` sets the log level (default `info`).

mod takeover_socket;

use clap::Parser;
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_dev::supervise::Supervised;
use fuse_transport_dev::takeover::{Pausable, Received};
use fuse_transport_dev::{DevSession, FuseDevTask, MountOptions, SessionConfig, TaskConfig};
use fuse_transport_uring::{UringConfig, UringSession};
use passthroughfs::cli::Args;
use passthroughfs::daemonize::Detach;
use passthroughfs::mount_helper::{helper_args, invoked_as_helper, HelperFlags};
use passthroughfs::{
    block_signals, check_source, log_fs_state, log_transport_state, notify, options,
    session_config, spawn_signal_thread, uring_config, Failure, RingLayout,
};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
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
        // Checked here rather than left to the mount, so that the
        // command reports it before the daemon goes to the background.
        _ => match std::fs::metadata(mountpoint) {
            Ok(m) if !m.is_dir() => Err(Failure(format!(
                "mountpoint {} is not a directory",
                mountpoint.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure(format!(
                "mountpoint {} does not exist",
                mountpoint.display()
            ))),
            // Anything else (no permission, ...) is the mount's to report.
            _ => Ok(()),
        },
    }
}

/// Everything checked and worked out before the daemon forks (so that a
/// bad argument is reported by the command the user ran, before any log
/// line) and mounts.
struct Plan {
    args: Args,
    /// The directory to serve.
    source: PathBuf,
    options: MountOptions,
    fs_config: PassthroughConfig,
    session_config: SessionConfig,
    uring: Option<UringConfig>,
    /// `--sandbox`, `--seccomp`, `--landlock` (docs/security.md).
    confinement: passthroughfs::sandbox::Confinement,
}

impl Plan {
    fn new(mut args: Args, background: bool, supervised: bool) -> Result<Plan, Failure> {
        if args.allow_other && !args.default_permissions {
            // Named as typed: `-o allow_other` (an fstab line) or the switch.
            let (allow_other, default_permissions) = if options::named(&args, "allow_other") {
                ("-o allow_other", "-o default_permissions")
            } else {
                ("--allow-other", "--default-permissions")
            };
            return Err(Failure(format!(
                "{allow_other} needs {default_permissions}: the daemon serves every user's \
                 requests with its own privileges (root's) for lookups, reads and writes, so \
                 without the kernel checking file modes any user could read, change or list \
                 files that the backing directory's permissions deny them"
            )));
        }
        if args.fs.allow_idmap && !args.default_permissions {
            let (allow_idmap, default_permissions) = if options::named(&args, "allow_idmap") {
                ("-o allow_idmap", "-o default_permissions")
            } else {
                ("--allow-idmap", "--default-permissions")
            };
            return Err(Failure(format!(
                "{allow_idmap} needs {default_permissions}: the kernel allows idmapped FUSE \
                 mounts only where it checks permissions itself, and fails INIT otherwise"
            )));
        }
        if (args.takeover_socket.is_some() || args.take_over.is_some()) && args.uring {
            return Err(Failure(
                "--takeover-socket and --take-over work over /dev/fuse only (any --runtime, \
                 with or without --thread-pool): over io_uring the kernel hands requests to \
                 the old daemon's ring entries until its ring closes, and a request they hold \
                 then is neither answered nor resent (a client would hang); see \
                 docs/takeover.md"
                    .into(),
            ));
        }
        if args.supervise {
            if args.uring || args.runtime != passthroughfs::Runtime::Sync {
                return Err(Failure(
                    "--supervise works over /dev/fuse with --runtime sync only, for now (the \
                     request journal follows a request on one thread; the kernel resends only \
                     what /dev/fuse readers held)"
                        .into(),
                ));
            }
            if args.takeover_socket.is_some() || args.take_over.is_some() {
                return Err(Failure(
                    "--supervise can't be combined with --takeover-socket or --take-over yet"
                        .into(),
                ));
            }
        }
        if args.take_over.is_some() && args.auto_unmount {
            return Err(Failure(
                "--take-over can't be combined with --auto-unmount: the mount exists already"
                    .into(),
            ));
        }
        let uring_defaults = UringConfig::default();
        if !args.uring
            && (args.uring_bufs != uring_defaults.bufs_per_queue
                || args.uring_entries != uring_defaults.entries_per_queue
                || args.uring_queues != 0
                || args.uring_threads_per_queue != 0
                || args.uring_unregistered_pools
                || args.uring_no_zero_copy
                || args.uring_one_ring)
        {
            return Err(Failure(
                "--uring-bufs, --uring-entries, --uring-queues, --uring-threads-per-queue, \
                 --uring-unregistered-pools, --uring-no-zero-copy and --uring-one-ring need \
                 --uring (-o io_uring)"
                    .into(),
            ));
        }
        if args.uring_one_ring && args.runtime != passthroughfs::Runtime::Uring {
            return Err(Failure(
                "--uring-one-ring needs --runtime uring: the ring it shares is the io_uring \
                 runtime's"
                    .into(),
            ));
        }
        if args.single_threaded {
            args.threads = 1;
            args.max_threads = Some(1);
        }
        // `-o source=DIR`: SOURCE is the mount's name (as mount(8) passes
        // an fstab line's first field).
        let (mut source, name) = match args.source_dir.clone() {
            Some(dir) => (dir, args.source.to_string_lossy().into_owned()),
            None => (
                args.source.clone(),
                args.source.to_string_lossy().into_owned(),
            ),
        };
        if background {
            // The background daemon's working directory becomes `/`.
            let absolute = |p: &Path| {
                std::path::absolute(p)
                    .map_err(|e| Failure(format!("cannot use {}: {e}", p.display())))
            };
            source = absolute(&source)?;
            args.mountpoint = absolute(&args.mountpoint)?;
        }
        check_source(&source)?;
        // A supervised daemon serves the supervisor's mount.
        if args.take_over.is_none() && !supervised {
            check_mountpoint(&args.mountpoint, args.unmount_dead)?;
        }
        let fs_config = args.fs.passthrough_config()?;
        args.fs.check_thread_pool(args.runtime)?;
        let session_config = session_config(args.threads, args.max_threads)?;
        let uring = if args.uring {
            Some(
                uring_config(
                    RingLayout {
                        threads: args.uring_queues,
                        threads_per_queue: args.uring_threads_per_queue,
                        entries: args.uring_entries,
                    },
                    args.uring_bufs,
                    args.runtime,
                    &session_config,
                )?
                .registered_pools(!args.uring_unregistered_pools)
                .zero_copy(!args.uring_no_zero_copy)
                .one_ring(args.uring_one_ring),
            )
        } else {
            None
        };
        let mut options = MountOptions::default()
            .fsname(args.fsname.clone().unwrap_or(name))
            .allow_other(args.allow_other)
            .default_permissions(args.default_permissions)
            .read_only(args.ro)
            .max_read(args.max_read);
        if !args.subtype.is_empty() {
            options = options.subtype(args.subtype.clone());
        }
        let mut extra = Vec::new();
        for flag in &args.mount_flags {
            options = match flag.as_str() {
                "suid" => options.nosuid(false),
                "nosuid" => options.nosuid(true),
                "dev" => options.nodev(false),
                "nodev" => options.nodev(true),
                _ => {
                    extra.push(flag.clone());
                    options
                }
            };
        }
        if args.auto_unmount {
            extra.push("auto_unmount".into());
        }
        let options = options.extra(extra);
        options.validate().map_err(|e| Failure(e.to_string()))?;
        let confinement = passthroughfs::sandbox::Confinement::from_args(&args, &source)?;
        Ok(Plan {
            args,
            source,
            options,
            fs_config,
            session_config,
            uring,
            confinement,
        })
    }
}

/// Mounts and serves until unmounted or stopped by a signal; `detach` is
/// told once the mount is usable.
fn serve(plan: Plan, detach: &mut Detach, supervised: Option<Supervised>) -> Result<(), Failure> {
    let Plan {
        args,
        source,
        options,
        fs_config,
        session_config,
        uring,
        mut confinement,
    } = plan;
    passthroughfs::raise_nofile_limit();
    // Blocked before the mount: a stop asked for once it exists unmounts.
    let signals = block_signals();
    let restart_signal = supervised.is_some().then(block_restart_signal);
    // A new mount is made here, and the daemon confined, before any
    // thread starts (namespaces, capabilities and Landlock apply to the
    // calling thread only); a connection taken over or supervised comes
    // with threads and gets the seccomp filter only.
    // What INIT settled, if it was answered during mount(2) (synchronous
    // INIT, Linux 6.18): by a stand-in of the serving file system, which
    // can't exist yet (SOURCE is opened inside the sandbox); the serving
    // one takes it up (`Server::resume`) once confined. Over io_uring the
    // session asks for the ring in INIT itself: INIT after the mount.
    let mut negotiated = None;
    let mut mount = match (&args.take_over, &supervised) {
        (None, None) if uring.is_none() => {
            let (mount, settled) = mount_answering_init(
                &args,
                &source,
                &fs_config,
                &options,
                session_config.wake_signal,
            )?;
            negotiated = settled;
            Some(mount)
        }
        (None, None) => Some(
            fuse_transport_dev::Mount::new(&args.mountpoint, &options)
                .map_err(|e| Failure(e.to_string()))?,
        ),
        _ => None,
    };
    if let Some(m) = &mount {
        confinement.mountpoint = Some(m.mountpoint().to_path_buf());
        confinement.fusermount = m.method() == fuse_transport_dev::MountMethod::Fusermount;
    }
    let confined = passthroughfs::sandbox::confine(&confinement)?;
    if let (Some(m), Some(u)) = (&mut mount, confined.unmounter) {
        m.unmount_through(u.into_unmount_fn());
    }
    // SOURCE opened where the sandbox has it: inodes reopened by file
    // handle then resolve under its mount (see sandbox::landlock).
    let fs = PassthroughFs::new(&confined.source, fs_config).map_err(|e| Failure(e.to_string()))?;
    let fs = Arc::new(fs);
    let mut take_mount = move || {
        mount
            .take()
            .ok_or_else(|| Failure("the mount was made already".into()))
    };
    args.fs.apply_thread_pool(&fs, args.runtime)?;
    if !fs.uses_caller_credentials() {
        tracing::warn!("not running as root: files are created with the daemon's owner");
    }

    let runtime = args.runtime.async_type();
    let server = match runtime {
        None => Server::new(fs.clone()),
        Some(_) => Server::new_async(fs.clone()),
    }
    .with_request_log(args.debug);
    let mut uring_session = None;
    let mut dev_session = None;
    // What a takeover pauses and hands over (/dev/fuse sessions).
    let mut pausable: Option<Arc<dyn Pausable>> = None;
    let session: Arc<dyn Session> = match (uring, runtime) {
        (Some(config), _) => {
            let uring = Arc::new(
                UringSession::from_mount(server, take_mount()?, config)
                    .map_err(|e| Failure(e.to_string()))?,
            );
            uring_session = Some(uring.clone());
            uring
        }
        // One runtime thread per --threads, each a task on its own cloned fd.
        (None, Some(kind)) => {
            let task = match &args.take_over {
                Some(socket) => {
                    let threads = args.threads;
                    take_over(socket, &fs, &args.mountpoint, &args, move |r| {
                        passthroughfs::start_tasks_with(
                            kind,
                            threads,
                            TaskConfig::default(),
                            move |config| {
                                FuseDevTask::resume_paused(
                                    server,
                                    r.dev_fd,
                                    r.mountpoint,
                                    &r.negotiated,
                                    config,
                                )
                            },
                        )
                        .map_err(|e| std::io::Error::other(e.0))
                    })?
                }
                None => {
                    let mount = take_mount()?;
                    passthroughfs::start_tasks_with(
                        kind,
                        args.threads,
                        TaskConfig::default(),
                        move |config| match &negotiated {
                            Some(n) => {
                                FuseDevTask::from_initialized_mount(server, mount, n, config)
                            }
                            None => FuseDevTask::from_mount(server, mount, config),
                        },
                    )?
                }
            };
            pausable = Some(task.clone());
            task
        }
        (None, None) => {
            let session = match (&args.take_over, supervised) {
                (_, Some(supervised)) => {
                    fs.recover(supervised.area.fs_region())
                        .map_err(|e| Failure(format!("taking the crash table back: {e}")))?;
                    Arc::new(
                        DevSession::supervised(server, supervised, session_config)
                            .map_err(|e| Failure(e.to_string()))?,
                    )
                }
                (Some(socket), None) => take_over(socket, &fs, &args.mountpoint, &args, |r| {
                    DevSession::resume_paused(
                        server,
                        r.dev_fd,
                        r.mountpoint,
                        &r.negotiated,
                        session_config,
                    )
                    .map(Arc::new)
                    .map_err(|e| std::io::Error::other(e.to_string()))
                })?,
                (None, None) => Arc::new(
                    match &negotiated {
                        Some(n) => DevSession::from_initialized_mount(
                            server,
                            take_mount()?,
                            n,
                            session_config,
                        ),
                        None => DevSession::from_mount(server, take_mount()?, session_config),
                    }
                    .map_err(|e| Failure(e.to_string()))?,
                ),
            };
            dev_session = Some(session.clone());
            pausable = Some(session.clone());
            session
        }
    };
    // Changes no reply carries (set-user-ID cleared by a WRITE) reach the
    // kernel's attribute cache through it.
    fs.set_notifier(session.notifier());
    // After a takeover or a restart: what the kernel cached on a source
    // watch that didn't move here is dropped (nothing otherwise).
    fs.resumed();
    if let (Some(set), Some(dev)) = (restart_signal, &dev_session) {
        spawn_restart_thread(set, dev.clone(), fs.clone())?;
    }
    if let (Some(path), Some(session)) = (&args.takeover_socket, &pausable) {
        spawn_takeover_listener(
            path.clone(),
            session.clone(),
            fs.clone(),
            takeover_timeout(&args)?,
        )?;
    }
    tracing::info!(
        source = %source.display(),
        mountpoint = %session.mountpoint().display(),
        transport = %session.transport(),
        thread_pool = %if args.fs.thread_pool { "on" } else { "off" },
        background = detach.is_background(),
        confinement = %confined.summary,
        "passthroughfs serving"
    );
    detach.ready();
    notify::ready();
    let (logger, stopper) = (session.clone(), session.clone());
    // A supervised daemon asked to stop leaves the mount to its
    // supervisor, which unmounts (with the method it mounted by).
    let supervised_session = dev_session
        .clone()
        .filter(|_| args.supervise)
        .map(|d| (d, fs.clone()));
    let stopping_fs = fs.clone();
    spawn_signal_thread(
        signals,
        session.mountpoint().to_path_buf(),
        {
            let fs = fs.clone();
            move || {
                log_transport_state(logger.as_ref(), uring_session.as_deref());
                log_fs_state(&fs);
            }
        },
        move || {
            notify::stopping();
            if let Some((dev, fs)) = supervised_session {
                match pause_quietly(&fs, &dev).and_then(|()| dev.release()) {
                    Ok(_) => return,
                    Err(e) => tracing::warn!("stopping without the supervisor: {e}"),
                }
            }
            // Notifications stop while the workers still answer: one the
            // source watch sends (INVAL_ENTRY) may wait for a directory
            // lock that a client holds until its request is answered. Sent
            // after the workers stopped, it would wait for ever, holding
            // the connection open: the process could not exit, nor its
            // clients get an answer.
            stopping_fs.pause_notifications();
            stopper.stop()
        },
    )?;
    let result = session.wait();
    fs.set_notifier(None);
    notify::stopping();
    let released = pausable.as_ref().is_some_and(|p| p.is_released());
    if released && args.supervise && RESTART.load(std::sync::atomic::Ordering::Acquire) {
        tracing::info!("gave the connection back to the supervisor for a restart");
        // Nothing of this process must be torn down: the next one
        // continues from the table as it is.
        std::process::exit(fuse_transport_dev::supervise::EXIT_RESTART);
    }
    if released && args.supervise {
        tracing::info!("stopped; the supervisor unmounts");
        return result.map_err(|e| Failure(format!("serving failed: {e}")));
    }
    if released {
        tracing::info!("handed the mount over to the new daemon; exiting");
        return result.map_err(|e| Failure(format!("serving failed: {e}")));
    }
    match result {
        Ok(()) => {
            tracing::info!("unmounted; exiting");
            Ok(())
        }
        Err(e) => Err(Failure(format!("serving failed: {e}"))),
    }
}

/// A restart was asked for (SIGUSR2 under `--supervise`) and the
/// connection given back.
static RESTART: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// SIGUSR2 blocked (in this thread, so in every thread started later), for
/// the restart thread to wait for.
fn block_restart_signal() -> libc::sigset_t {
    // SAFETY: the set is initialized by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR2);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// A supervised daemon's planned restart: on SIGUSR2 (which the supervisor
/// passes on), it finishes the requests in progress, stops reading, gives
/// the connection back and exits with `EXIT_RESTART`; the supervisor
/// starts the next one (the program at its path: a new build installed
/// there is what runs). Refused while a request waits for a lock (it
/// can't be finished): the daemon says so and serves on.
fn spawn_restart_thread(
    set: libc::sigset_t,
    session: Arc<DevSession>,
    fs: Arc<PassthroughFs>,
) -> Result<(), Failure> {
    std::thread::Builder::new()
        .name("restart".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: `set` is a valid signal set; `sig` is written by sigwait.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                continue;
            }
            tracing::info!("restart asked for: finishing the requests in progress");
            match pause_quietly(&fs, &session) {
                Ok(()) => {
                    RESTART.store(true, std::sync::atomic::Ordering::Release);
                    match session.release() {
                        // The main thread's wait returns and exits.
                        Ok(_) => return,
                        Err(e) => {
                            RESTART.store(false, std::sync::atomic::Ordering::Release);
                            tracing::warn!("restart refused: {e}");
                            let _ = session.unpause();
                            fs.set_notifier(session.notifier().ok());
                        }
                    }
                }
                Err(e) => tracing::warn!("restart refused: {e}; serving on"),
            }
        })
        .map_err(|e| Failure(format!("starting the restart thread: {e}")))?;
    Ok(())
}

/// Pauses `session` to give its connection up, the source watch stopped
/// first: a notification it sends (INVAL_ENTRY) may wait for a directory
/// lock that a client holds until its request is answered, which only
/// serving workers do. Serves on, watch and all, if the pause is refused.
fn pause_quietly(fs: &PassthroughFs, session: &DevSession) -> std::io::Result<()> {
    fs.set_notifier(None);
    session.pause().inspect_err(|_| {
        fs.set_notifier(session.notifier().ok());
    })
}

/// Mounts with synchronous INIT where the kernel offers it
/// ([`fuse_transport_dev::init_during_mount`]), INIT answered by a stand-in
/// of the serving file system: one on SOURCE opened here, unconfined, with
/// the same configuration and server kind, so that it answers as the
/// serving one will (which `Server::resume` checks). Quiet but for `-d`'s
/// request line: the serving file system logs what INIT settled when it
/// takes it up. Returns what
/// INIT settled, or `None` where INIT comes after the mount (a kernel
/// without synchronous INIT, a mount through fusermount3). Every thread it
/// starts has ended when it returns: the confinement that follows needs a
/// single-threaded process. `wake_signal` is the sessions' (see
/// `SessionConfig::wake_signal`).
fn mount_answering_init(
    args: &Args,
    source: &std::path::Path,
    fs_config: &fuse_backend_passthrough::PassthroughConfig,
    options: &fuse_transport_dev::MountOptions,
    wake_signal: i32,
) -> Result<(fuse_transport_dev::Mount, Option<fuse_server::Negotiated>), Failure> {
    let quiet = tracing::subscriber::NoSubscriber::default();
    let stand_in = tracing::subscriber::with_default(quiet, || {
        PassthroughFs::new(source, fs_config.clone()).map(Arc::new)
    })
    .map_err(|e| Failure(e.to_string()))?;
    let server = match args.runtime.async_type() {
        None => Server::new(stand_in),
        Some(_) => Server::new_async(stand_in),
    }
    .with_request_log(args.debug);
    // Only -d's line for INIT (the answering thread logs through this).
    let mounted = tracing::dispatcher::with_default(
        &passthroughfs::logging::only_target("fuse_request"),
        || fuse_transport_dev::init_during_mount(server, &args.mountpoint, options, wake_signal),
    );
    mounted.map_err(|e| Failure(e.to_string()))
}

/// Nodes the crash table of `--supervise` has room for (its memfd is
/// sparse: a slot costs memory once used).
const SUPERVISED_NODES: usize = 1 << 20;

/// `--supervise`: mounts, and runs serving processes (this program again,
/// with `argv`, in `cwd`) until one ends with status 0.
fn supervise(
    plan: Plan,
    detach: &mut Detach,
    argv: Vec<OsString>,
    cwd: PathBuf,
) -> Result<(), Failure> {
    use fuse_transport_dev::supervise::{Supervisor, SupervisorExit};
    // Each serving process takes the crash table back by file handle:
    // where there are none (a user namespace, a source without them) every
    // one would fail, so this is said once, before anything is mounted.
    let probe = PassthroughFs::new(&plan.source, plan.fs_config.clone())
        .map_err(|e| Failure(e.to_string()))?;
    if let Some(why) = probe.file_handle_fallback() {
        return Err(Failure(format!(
            "--supervise keeps the nodes by file handle across crashes, and there are none \
             here: {why}; serve without --supervise"
        )));
    }
    drop(probe);
    let mount = fuse_transport_dev::Mount::new(&plan.args.mountpoint, &plan.options)
        .map_err(|e| Failure(e.to_string()))?;
    let supervisor = Supervisor::new(
        mount,
        fuse_backend_passthrough::crash_table_bytes(SUPERVISED_NODES),
    )
    .map_err(|e| Failure(format!("creating the state area: {e}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure(format!("finding this program to run it again: {e}")))?;
    let background = detach.is_background();
    tracing::info!(
        mountpoint = %plan.args.mountpoint.display(),
        "passthroughfs supervising"
    );
    let exit = supervisor
        .run(
            || {
                let mut cmd = std::process::Command::new(&exe);
                cmd.args(argv.iter().skip(1))
                    .current_dir(&cwd)
                    .env_remove("NOTIFY_SOCKET");
                if background {
                    cmd.env(LOG_TO_SYSLOG, "1");
                }
                cmd
            },
            || {
                detach.ready();
                notify::ready();
            },
        )
        .map_err(|e| Failure(format!("supervising: {e}")))?;
    notify::stopping();
    match exit {
        SupervisorExit::Done => {
            tracing::info!("unmounted; exiting");
            Ok(())
        }
        SupervisorExit::GaveUp(why) => Err(Failure(why)),
    }
}

/// Set for a supervised daemon whose supervisor logs to syslog.
const LOG_TO_SYSLOG: &str = "PASSTHROUGHFS_LOG_TO_SYSLOG";

/// Takes over the mount served by the daemon listening on `socket` (live
/// upgrade): its connection, negotiated state and the passthrough's node
/// table and handles, restored into `fs`; `start` readies a paused session
/// on what was received (worker threads or tasks: the old daemon may have
/// served another way).
fn take_over<S: Pausable + ?Sized>(
    socket: &Path,
    fs: &Arc<PassthroughFs>,
    mountpoint: &Path,
    args: &Args,
    start: impl FnOnce(Received) -> std::io::Result<Arc<S>>,
) -> Result<Arc<S>, Failure> {
    let timeout = takeover_timeout(args)?;
    let mountpoint = std::path::absolute(mountpoint)
        .map_err(|e| Failure(format!("{}: {e}", mountpoint.display())))?;
    fuse_transport_dev::takeover::take_over_mount(socket, &mountpoint, fs.as_ref(), timeout, start)
        .map_err(|e| Failure(format!("taking over through {}: {e}", socket.display())))
}

/// `--takeover-timeout`, checked.
fn takeover_timeout(args: &Args) -> Result<std::time::Duration, Failure> {
    if args.takeover_timeout == 0 {
        return Err(Failure(
            "--takeover-timeout must be at least 1 second".into(),
        ));
    }
    Ok(std::time::Duration::from_secs(args.takeover_timeout))
}

/// Serves takeover requests on `path` (`--takeover-socket`): one at a
/// time; the socket file goes while one is answered (the new daemon may
/// bind the same path for the next upgrade) and comes back if it failed.
fn spawn_takeover_listener(
    path: PathBuf,
    session: Arc<dyn Pausable>,
    fs: Arc<PassthroughFs>,
    timeout: std::time::Duration,
) -> Result<(), Failure> {
    use fuse_transport_dev::takeover::offer_mount;
    let mut listener = takeover_socket::bind(&path)
        .map_err(|e| Failure(format!("--takeover-socket {}: {e}", path.display())))?;
    tracing::info!(socket = %path.display(), "listening for a takeover");
    std::thread::Builder::new()
        .name("takeover".into())
        .spawn(move || loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("takeover socket: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            let _ = std::fs::remove_file(&path);
            tracing::info!("a new daemon asks to take over");
            // The source watch stops reading while the workers still
            // answer (see `pause_quietly`); its group and marks move to the
            // new daemon, or it reads again here if the takeover fails.
            fs.pause_notifications();
            let result = offer_mount(session.as_ref(), fs.as_ref(), &stream, timeout);
            match result {
                // Released: the main thread's wait returns and sees it.
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::warn!("takeover failed: {e}"),
            }
            fs.set_notifier(session.notifier());
            match takeover_socket::bind(&path) {
                Ok(l) => listener = l,
                Err(e) => {
                    tracing::error!(
                        "--takeover-socket {}: {e}; no more takeovers",
                        path.display()
                    );
                    return;
                }
            }
        })
        .map_err(|e| Failure(format!("starting the takeover thread: {e}")))?;
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
    #[cfg(feature = "fault-injection")]
    passthroughfs::sandbox::escape::install();
    // Before any thread: it edits the environment.
    let supervised = match Supervised::from_env() {
        Ok(s) => s,
        Err(e) => return usage_error(&format!("supervised start: {e}")),
    };
    let to_syslog = std::env::var_os(LOG_TO_SYSLOG).is_some();
    std::env::remove_var(LOG_TO_SYSLOG);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    let mut helper = HelperFlags::default();
    if argv.first().is_some_and(|a| invoked_as_helper(a)) {
        match helper_args(argv) {
            Ok((daemon_argv, flags)) => (argv, helper) = (daemon_argv, flags),
            Err(Failure(msg)) => return usage_error(&msg),
        }
    }
    let mut args = match Args::try_parse_from(argv.clone()) {
        Ok(args) => args,
        Err(e) => return clap_error(e),
    };
    args.sloppy = helper.sloppy;
    let skipped = match options::apply(&mut args) {
        Ok(skipped) => skipped,
        Err(Failure(msg)) => return usage_error(&msg),
    };
    if let Err(Failure(msg)) = passthroughfs::virtio::settle_args(&mut args) {
        return missing_arguments(&args, &msg);
    }
    let foreground = args.foreground || args.debug || supervised.is_some();
    // Opened before the fork, so that a path that can't be opened is the
    // command's error (and a relative one is the caller's directory's).
    if let Some(path) = &args.log_file {
        if let Err(Failure(msg)) = passthroughfs::logging::log_to_file(path) {
            return usage_error(&msg);
        }
    }
    passthroughfs::logging::init_logging_with(
        "info",
        foreground && !to_syslog && passthroughfs::logging::color_wanted(),
    );
    if to_syslog {
        passthroughfs::logging::log_to_syslog();
    }
    for option in skipped {
        tracing::warn!(%option, "unknown mount option ignored (mount -s)");
    }
    if args.virtio.socket.is_some() {
        return serve_vhost_user(args, foreground, helper.fake);
    }
    let plan = match Plan::new(args, !foreground, supervised.is_some()) {
        Ok(plan) => plan,
        Err(Failure(msg)) => return usage_error(&msg),
    };
    if helper.fake {
        return ExitCode::SUCCESS;
    }
    let mut detach = match detach(foreground) {
        Ok(detach) => detach,
        Err(code) => return code,
    };
    let served = if plan.args.supervise && supervised.is_none() {
        supervise(plan, &mut detach, argv, cwd)
    } else {
        serve(plan, &mut detach, supervised)
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            detach.report_failure(&msg);
            ExitCode::FAILURE
        }
    }
}

/// Stays in the foreground, or goes to the background (call it before any
/// thread exists: the child goes on alone); the usage error's exit code
/// if it can't.
fn detach(foreground: bool) -> Result<Detach, ExitCode> {
    if foreground {
        return Ok(Detach::foreground());
    }
    Detach::background().map_err(|Failure(msg)| usage_error(&msg))
}

/// `--vhost-user`: serves virtual machines instead of a mount (see
/// [`passthroughfs::virtio`]).
fn serve_vhost_user(mut args: Args, foreground: bool, fake: bool) -> ExitCode {
    if let Err(Failure(msg)) = passthroughfs::virtio::check_virtio_args(&args) {
        return usage_error(&msg);
    }
    let mut source = args.source.clone();
    if !foreground {
        // The background daemon's working directory becomes `/`.
        source = absolute_or_as_is(&source);
        args.virtio.socket = args.virtio.socket.as_deref().map(absolute_or_as_is);
    }
    if let Err(Failure(msg)) = check_source(&source) {
        return usage_error(&msg);
    }
    if fake {
        return ExitCode::SUCCESS;
    }
    let mut detach = match detach(foreground) {
        Ok(detach) => detach,
        Err(code) => return code,
    };
    match passthroughfs::virtio::serve_virtio(args, source, &mut detach) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            detach.report_failure(&msg);
            ExitCode::FAILURE
        }
    }
}

/// `p` made absolute (it stays as it is if that fails: it is checked
/// later).
fn absolute_or_as_is(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// An error before the daemon started: said on standard error, status 1.
fn usage_error(msg: &str) -> ExitCode {
    passthroughfs::logging::say(&format!("passthroughfs: error: {msg}"));
    ExitCode::FAILURE
}

/// A missing or doubled positional argument (`msg` says which): the usage
/// line, then the error, with clap's status for usage errors (2). With no
/// arguments at all, the error names what a mount needs.
fn missing_arguments(args: &Args, msg: &str) -> ExitCode {
    use passthroughfs::cli::{USAGE, USAGE_VHOST_USER};
    let vhost_user = args.virtio.socket.is_some();
    let nothing = args.source_arg.is_none()
        && args.mountpoint_arg.is_none()
        && args.virtio.shared_dir.is_none()
        && !vhost_user;
    let msg = if nothing {
        "SOURCE and MOUNTPOINT are missing"
    } else {
        msg
    };
    let usage = if vhost_user { USAGE_VHOST_USER } else { USAGE };
    passthroughfs::logging::say(&format!(
        "Usage: {usage}\npassthroughfs: error: {msg}\n\nFor more information, try '--help'."
    ));
    ExitCode::from(2)
}

/// What clap refused (an unknown flag, a bad value), with the prefix of
/// the daemon's other errors and clap's status; `--help` and `--version`
/// print as clap does. Nothing panics if standard error or output is
/// closed.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // Prints to standard output, ignoring a failure.
        let _ = e.print();
        return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
    }
    let text = if passthroughfs::logging::color_wanted() {
        e.render().ansi().to_string()
    } else {
        e.render().to_string()
    };
    passthroughfs::logging::say(&format!("passthroughfs: {}", text.trim_end()));
    ExitCode::from(e.exit_code().clamp(0, 255) as u8)
}
