//! Serving a mount: [`serve`] mounts (or takes a connection over, or is
//! handed one by its supervisor), confines the daemon, starts the session
//! and waits for it to end; with it the planned restart of a supervised
//! daemon (SIGUSR2 and its thread). Apart from `main` because it is the
//! daemon's longest path and touches every transport.

use crate::plan::Plan;
use crate::takeover_socket::SocketPlace;
use crate::upgrade::{connect_for_takeover, spawn_takeover_listener, take_over, takeover_timeout};
use fuse_backend_passthrough::PassthroughFs;
use fuse_server::{Server, Session};
use fuse_transport_dev::supervise::Supervised;
use fuse_transport_dev::takeover::Pausable;
use fuse_transport_dev::{DevSession, FuseDevTask, TaskConfig};
use fuse_transport_uring::UringSession;
use passthroughfs::cli::Args;
use passthroughfs::daemonize::Detach;
use passthroughfs::{
    block_signals, log_fs_state, log_transport_state, notify, spawn_signal_thread, Failure,
};
use std::sync::Arc;

/// Mounts and serves until unmounted or stopped by a signal; `detach` is
/// told once the mount is usable.
pub(crate) fn serve(
    plan: Plan,
    detach: &mut Detach,
    supervised: Option<Supervised>,
    watch_group: Option<fuse_backend_passthrough::SourceWatchGroup>,
) -> Result<(), Failure> {
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
    // A takeover's paths are reached before confining: the new daemon
    // connects to the old one's socket and has its own unmounter for the
    // mount it takes; the old daemon's socket directory is held open.
    let mut takeover = match &args.take_over {
        Some(socket) => Some(connect_for_takeover(socket, &args.mountpoint)?),
        None => None,
    };
    if let Some((_, mountpoint)) = &takeover {
        confinement.mountpoint = Some(mountpoint.clone());
        // An unprivileged daemon's mount was made through fusermount3.
        // SAFETY: geteuid has no preconditions.
        confinement.fusermount = unsafe { libc::geteuid() } != 0;
    }
    let socket_place = match &args.takeover_socket {
        Some(path) => Some(
            SocketPlace::open(path)
                .map_err(|e| Failure(format!("--takeover-socket {}: {e}", path.display())))?,
        ),
        None => None,
    };
    if let Some(place) = &socket_place {
        let dir = place
            .dir()
            .try_clone_to_owned()
            .map_err(|e| Failure(format!("--takeover-socket: {e}")))?;
        confinement.socket_dir = Some(Arc::new(dir));
    }
    let confined = passthroughfs::sandbox::confine(&confinement)?;
    // The unmounter of a connection taken over goes to its session.
    let mut takeover_unmounter = None;
    match (&mut mount, confined.unmounter) {
        (Some(m), Some(u)) => m.unmount_through(u.into_unmount_fn()),
        (None, Some(u)) => takeover_unmounter = Some(u.into_unmount_fn()),
        _ => {}
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
            let task = match takeover.take() {
                Some(connected) => {
                    let threads = args.threads;
                    take_over(connected, &fs, &args, move |r| {
                        let task = passthroughfs::start_tasks_with(
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
                        .map_err(|e| std::io::Error::other(e.0))?;
                        if let Some(unmount) = takeover_unmounter.take() {
                            task.unmount_through(unmount);
                        }
                        Ok(task)
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
            let session = match (takeover.take(), supervised) {
                (_, Some(supervised)) => {
                    if let Some(group) = watch_group {
                        fs.inherit_watch_group(group);
                    }
                    fs.recover(supervised.area.fs_region())
                        .map_err(|e| Failure(format!("taking the crash table back: {e}")))?;
                    Arc::new(
                        DevSession::supervised(server, supervised, session_config)
                            .map_err(|e| Failure(e.to_string()))?,
                    )
                }
                (Some(connected), None) => take_over(connected, &fs, &args, |r| {
                    let session = DevSession::resume_paused(
                        server,
                        r.dev_fd,
                        r.mountpoint,
                        &r.negotiated,
                        session_config,
                    )
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                    if let Some(unmount) = takeover_unmounter.take() {
                        session.unmount_through(unmount);
                    }
                    Ok(Arc::new(session))
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
    if let (Some(place), Some(session)) = (socket_place, &pausable) {
        spawn_takeover_listener(place, session.clone(), fs.clone(), takeover_timeout(&args)?)?;
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
