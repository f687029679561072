//! Serving a mount from `/dev/fuse` with worker threads.

use crate::backing::DevBackingFiles;
use crate::dev::{self, DevTransaction};
use crate::mount::{InitAnswer, InitMode, Mount, MountError, MountOptions, SyncInit};
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{AlignedBuf, NotificationSink, Notifier, Outcome, Server, Session};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where a request is read into its buffer: chosen so that the data of a
/// WRITE (after the 40-byte header and the 40-byte `fuse_write_in`) starts
/// on a page boundary, where `O_DIRECT` can write it without a copy.
const REQUEST_OFFSET: usize = AlignedBuf::ALIGN - 80;

/// How a [`DevSession`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionConfig {
    /// Worker threads started at mount, each reading its own cloned fd;
    /// also how many stay once a burst that started more is over (a worker
    /// that finds more than this many idle leaves).
    pub threads: usize,
    /// Largest number of workers: when every worker is busy (a slow
    /// fsync, a read from a slow disk), another one starts, up to this
    /// many (workers in lock waits don't count). `Default` sizes it to the
    /// machine: four per CPU, between 8 and 64. More workers than that
    /// only add threads and buffer memory: on a machine of few CPUs they
    /// take turns on them anyway.
    pub max_threads: usize,
    /// Use `FUSE_DEV_IOC_CLONE` to give each worker its own fd (falls back
    /// to sharing one fd if the kernel refuses).
    pub clone_fd: bool,
    /// The signal that wakes workers blocked in `read(2)` when the session
    /// stops; `SIGRTMIN() + 4` in `Default`.
    ///
    /// A worker waits for the next request in a blocking `read(2)` on
    /// `/dev/fuse`, and nothing but a signal makes that return early, so
    /// [`DevSession::stop`] sends this one to every worker thread
    /// (`pthread_kill`) until they are gone. For it to work, the session
    /// installs a **process-wide** handler that does nothing, without
    /// `SA_RESTART` (so the `read` fails with `EINTR`), when it starts
    /// ([`DevSession::from_mount`]; logged at debug). It stays installed
    /// after the session.
    ///
    /// Change it when the application (or a library in it) already uses
    /// `SIGRTMIN() + 4`. Whatever the number, the application must not
    /// install its own handler for it (a default disposition kills the
    /// process when a worker is woken; `SA_RESTART` makes stops hang until
    /// the next request), block it in the threads that start sessions
    /// (workers inherit the signal mask, and a blocked wake never arrives),
    /// or send it itself. The passthrough backend's lock waits use another
    /// signal (`PassthroughConfig::interrupt_signal`, `SIGRTMIN() + 5`).
    pub wake_signal: i32,
    /// Touch every page of each worker's request buffer when it starts, so
    /// the kernel never has to fault one in while it copies a request
    /// there. A process killed during such a fault makes the kernel end
    /// the request being copied with EIO; supervised sessions
    /// ([`DevSession::supervised`]), whose processes may be killed, turn
    /// it on. Off by default: pages then cost memory only once used.
    pub prefault_buffers: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            threads: cpus.clamp(2, 8),
            max_threads: (4 * cpus).clamp(8, 64),
            clone_fd: true,
            wake_signal: libc::SIGRTMIN() + 4,
            prefault_buffers: false,
        }
    }
}

/// Builder-style setters, one per field: start from [`SessionConfig::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl SessionConfig {
    /// Sets the worker threads started at mount (`threads`).
    #[must_use]
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Sets the largest number of workers (`max_threads`).
    #[must_use]
    pub fn max_threads(mut self, n: usize) -> Self {
        self.max_threads = n;
        self
    }

    /// Sets whether each worker gets its own cloned fd (`clone_fd`).
    #[must_use]
    pub fn clone_fd(mut self, on: bool) -> Self {
        self.clone_fd = on;
        self
    }

    /// Sets whether workers touch their request buffers first
    /// (`prefault_buffers`).
    #[must_use]
    pub fn prefault_buffers(mut self, on: bool) -> Self {
        self.prefault_buffers = on;
        self
    }

    /// Sets the signal that wakes blocked workers on a stop (`wake_signal`;
    /// read that field's documentation before changing it).
    #[must_use]
    pub fn wake_signal(mut self, signal: i32) -> Self {
        self.wake_signal = signal;
        self
    }
}

/// Errors of starting a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Mounting failed.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// The kernel's INIT could not be answered.
    #[error("FUSE INIT failed: {0}")]
    Init(io::Error),
    /// A worker could not be started.
    #[error("starting a worker thread: {0}")]
    Worker(io::Error),
}

struct Shared {
    server: Arc<Server>,
    /// The session's fd; taken (closed) once every worker has ended, so the
    /// kernel drops the connection instead of waiting for replies.
    master: Mutex<Option<Arc<OwnedFd>>>,
    config: SessionConfig,
    stop: AtomicBool,
    /// The connection was handed to another process
    /// ([`DevSession::release`]): ending this session neither unmounts
    /// nor finishes the server (the connection isn't over).
    released: AtomicBool,
    /// Paused for a hand-over ([`DevSession::pause`]): no worker runs, but
    /// the session goes on ([`Session::wait`] keeps waiting).
    paused: AtomicBool,
    /// A worker read ENODEV: the file system was unmounted (by us or from
    /// outside), so there is nothing left to unmount, and whatever is
    /// mounted on the path now belongs to somebody else.
    unmounted: AtomicBool,
    /// Workers alive, and how many of them wait for a request.
    workers: AtomicUsize,
    idle: AtomicUsize,
    /// Workers serving a request that waits indefinitely (a blocking
    /// lock): they don't count against `max_threads`, so no number of lock
    /// waiters can leave the mount without a worker.
    in_long_waits: AtomicUsize,
    /// Thread ids of running workers, for wake signals. A worker removes
    /// itself before it exits, under the lock, so no id is ever stale.
    tids: Mutex<Vec<libc::pthread_t>>,
    handles: Mutex<Vec<JoinHandle<io::Result<()>>>>,
    buffer_sizes: (usize, usize),
    /// When the session started, and when (milliseconds after that) a
    /// worker was last started: workers retire only once none has been
    /// started for [`RETIRE_AFTER`], so a steady load that keeps a few
    /// more workers busy doesn't start and end threads all the time.
    started: Instant,
    last_spawn_ms: AtomicU64,
}

/// How long after the last worker start extra idle workers may leave.
const RETIRE_AFTER: Duration = Duration::from_secs(1);

/// A mount served from `/dev/fuse` by worker threads.
///
/// Each worker reads requests on its own fd (cloned from the session's),
/// into its own page-aligned buffers sized from the negotiated `max_write`,
/// hands them to the [`Server`], and writes each reply with one `writev`.
/// When every worker is busy, another starts (up to
/// [`SessionConfig::max_threads`]); once more than
/// [`SessionConfig::threads`] are idle and none was started for a second,
/// the extra ones leave. An unmount ends every worker (the
/// kernel answers their reads with ENODEV); [`Session::stop`] unmounts and
/// wakes workers blocked in `read(2)`.
pub struct DevSession {
    shared: Arc<Shared>,
    mount: Mutex<Option<Mount>>,
    mountpoint: PathBuf,
}

impl DevSession {
    /// Mounts `mountpoint`, answers the kernel's INIT, and starts the
    /// workers.
    ///
    /// Where the kernel offers synchronous INIT (`FUSE_DEV_IOC_SYNC_INIT`,
    /// Linux 6.18), INIT is answered on a thread of its own while mount(2)
    /// waits for it ([`Mount::new_with_sync_init`]): an INIT the file
    /// system refuses fails this call with a [`SessionError::Mount`]
    /// carrying the refusal's errno, and no mount is left behind. Elsewhere
    /// INIT is answered on this thread after mount(2).
    pub fn mount(
        server: Server,
        mountpoint: &Path,
        options: &MountOptions,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        install_wake_handler(config.wake_signal);
        let (mount, server, master) =
            mount_answering_init(server, mountpoint, options, &config, true)?;
        Self::serve(server, master, mount, config, false)
    }

    /// Serves an existing mount.
    pub fn from_mount(
        server: Server,
        mount: Mount,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        install_wake_handler(config.wake_signal);
        let master = Arc::new(
            mount
                .dev_fd()
                .try_clone_to_owned()
                .map_err(SessionError::Init)?,
        );
        // Backing files (kernel passthrough) are registered on this fd; the
        // registry holds it weakly, so it never outlives the session.
        server.set_backing_files(Arc::new(DevBackingFiles::new(Arc::downgrade(&master))));
        let server = Arc::new(server);
        serve_init(&server, master.as_fd())?;
        Self::serve(server, master, mount, config, false)
    }

    /// Serves a mount whose INIT another server answered during mount(2)
    /// ([`init_during_mount`]), with `negotiated` what it settled
    /// ([`Server::resume`] refuses a server that would have agreed to
    /// something else). The session owns the mount (its unmounter, its
    /// `auto_unmount` watcher) as if it had made it.
    pub fn from_initialized_mount(
        server: Server,
        mount: Mount,
        negotiated: &fuse_server::Negotiated,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        install_wake_handler(config.wake_signal);
        let master = Arc::new(
            mount
                .dev_fd()
                .try_clone_to_owned()
                .map_err(SessionError::Init)?,
        );
        server.set_backing_files(Arc::new(DevBackingFiles::new(Arc::downgrade(&master))));
        server.resume(negotiated).map_err(SessionError::Init)?;
        Self::serve(Arc::new(server), master, mount, config, false)
    }

    /// Serves a connection another session answered INIT on and handed
    /// over (live upgrade, see [`crate::takeover`]): `dev_fd` is its
    /// session descriptor, mounted on `mountpoint`, with `negotiated` what
    /// its INIT settled ([`Server::resume`] refuses a server that would
    /// have agreed to something else). The session owns the mount from
    /// then on, as if it had made it.
    pub fn resume(
        server: Server,
        dev_fd: OwnedFd,
        mountpoint: PathBuf,
        negotiated: &fuse_server::Negotiated,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        Self::resume_inner(server, dev_fd, mountpoint, negotiated, config, false)
    }

    /// [`DevSession::resume`], paused: everything is ready but no worker
    /// reads yet. [`DevSession::unpause`] starts serving;
    /// [`DevSession::release`] gives the connection up untouched (a
    /// hand-over called off at the last step, see
    /// [`crate::takeover::take_over`]).
    pub fn resume_paused(
        server: Server,
        dev_fd: OwnedFd,
        mountpoint: PathBuf,
        negotiated: &fuse_server::Negotiated,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        Self::resume_inner(server, dev_fd, mountpoint, negotiated, config, true)
    }

    fn resume_inner(
        server: Server,
        dev_fd: OwnedFd,
        mountpoint: PathBuf,
        negotiated: &fuse_server::Negotiated,
        config: SessionConfig,
        paused: bool,
    ) -> Result<Self, SessionError> {
        install_wake_handler(config.wake_signal);
        let master = Arc::new(dev_fd.try_clone().map_err(SessionError::Init)?);
        server.set_backing_files(Arc::new(DevBackingFiles::new(Arc::downgrade(&master))));
        server.resume(negotiated).map_err(SessionError::Init)?;
        let mount = Mount::adopt(dev_fd, mountpoint);
        Self::serve(Arc::new(server), master, mount, config, paused)
    }

    /// Starts the workers of a connection whose INIT is done.
    pub(crate) fn serve(
        server: Arc<Server>,
        master: Arc<OwnedFd>,
        mount: Mount,
        config: SessionConfig,
        paused: bool,
    ) -> Result<Self, SessionError> {
        let negotiated = server.negotiated().copied().ok_or_else(|| {
            SessionError::Init(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection ended before INIT",
            ))
        })?;
        let buffer_sizes = (
            REQUEST_OFFSET + negotiated.max_request_size(),
            negotiated.max_reply_size(),
        );
        let mountpoint = mount.mountpoint().to_path_buf();
        let shared = Arc::new(Shared {
            server,
            master: Mutex::new(Some(master)),
            config: config.clone(),
            stop: AtomicBool::new(false),
            released: AtomicBool::new(false),
            paused: AtomicBool::new(paused),
            unmounted: AtomicBool::new(false),
            workers: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            in_long_waits: AtomicUsize::new(0),
            tids: Mutex::new(Vec::new()),
            handles: Mutex::new(Vec::new()),
            buffer_sizes,
            started: Instant::now(),
            last_spawn_ms: AtomicU64::new(0),
        });
        let session = Self {
            shared: shared.clone(),
            mount: Mutex::new(Some(mount)),
            mountpoint,
        };
        if !paused {
            for _ in 0..config.threads.max(1) {
                spawn_worker(&shared).map_err(SessionError::Worker)?;
            }
        }
        tracing::info!(
            mountpoint = %session.mountpoint.display(),
            threads = config.threads,
            max_write = negotiated.max_write,
            "serving over /dev/fuse"
        );
        Ok(session)
    }

    /// A notifier for this connection (writes go to the session's fd).
    /// It holds the fd: while it lives, the connection outlives the
    /// session's end. Fails once the session has ended.
    pub fn notifier(&self) -> io::Result<Notifier> {
        let fd = self.shared.master()?;
        Ok(self
            .shared
            .server
            .notifier(Arc::new(DevNotificationSink(fd))))
    }

    /// The session's `/dev/fuse` descriptor (the connection INIT was
    /// answered on), for a transport that serves the same connection
    /// another way, e.g. FUSE-over-io_uring commands submitted on it.
    /// The session closes its own reference when [`Session::wait`] ends;
    /// fails after that.
    pub fn dev_fd(&self) -> io::Result<Arc<OwnedFd>> {
        self.shared.master()
    }

    /// Workers currently alive.
    pub fn worker_count(&self) -> usize {
        self.shared.workers.load(Ordering::Acquire)
    }

    /// Starts workers until `threads` are alive (none if that many already
    /// are), for a transport that learns only after INIT that this session
    /// serves every request after all: FUSE over io_uring falling back to
    /// `/dev/fuse` started the session with the few workers that serve
    /// forgets and interrupts beside the rings. Does nothing once the
    /// session is stopping; fails if a worker can't be started.
    pub fn start_workers(&self, threads: usize) -> io::Result<()> {
        // Counted once: workers that end meanwhile (a stop) are not replaced.
        let missing = threads.saturating_sub(self.worker_count());
        for _ in 0..missing {
            if self.shared.stop.load(Ordering::Acquire) {
                break;
            }
            spawn_worker(&self.shared)?;
        }
        Ok(())
    }

    /// Stops serving without ending the connection, to hand it over: the
    /// workers finish the request each is serving and end; requests the
    /// kernel queues meanwhile wait for the next reader. Follow with
    /// [`DevSession::release`], or [`DevSession::unpause`] to serve again.
    /// Refused while a request waits for a lock (its worker can't finish
    /// it) and for a mount that can't be handed over
    /// ([`Mount::release`]).
    pub fn pause(&self) -> io::Result<()> {
        can_hand_over(&self.mount)?;
        let waits = self.shared.in_long_waits.load(Ordering::Acquire);
        if waits > 0 {
            return Err(lock_waits_refuse(waits));
        }
        self.shared.paused.store(true, Ordering::Release);
        self.shared.stop.store(true, Ordering::Release);
        let joined = self.join_workers(false);
        self.shared.stop.store(false, Ordering::Release);
        if let Err(e) = joined {
            // Serve on with as many workers as before (a lock wait that
            // began after the check above called the pause off).
            self.unpause()?;
            return Err(e);
        }
        if self.shared.unmounted.load(Ordering::Acquire) {
            self.shared.paused.store(false, Ordering::Release);
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the file system was unmounted",
            ));
        }
        Ok(())
    }

    /// Serves again after [`DevSession::pause`] (the hand-over failed).
    pub fn unpause(&self) -> io::Result<()> {
        let started = self.start_workers(self.shared.config.threads.max(1));
        self.shared.paused.store(false, Ordering::Release);
        started
    }

    /// Gives the paused connection up for another process to serve: its
    /// session descriptor and mountpoint. The mount stays (the connection
    /// lives while the descriptor is open anywhere); this session then
    /// ends without unmounting, and its server is not finished (the file
    /// system's `destroy` doesn't run: the connection isn't over).
    pub fn release(&self) -> io::Result<(OwnedFd, PathBuf)> {
        if self.worker_count() > 0 {
            return Err(io::Error::other("release needs a paused session"));
        }
        let fd = release_mount(&self.mount)?;
        self.shared.released.store(true, Ordering::Release);
        self.shared.paused.store(false, Ordering::Release);
        self.shared
            .master
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        Ok((fd, self.mountpoint.clone()))
    }

    /// The connection was handed to another process
    /// ([`DevSession::release`]).
    pub fn is_released(&self) -> bool {
        self.shared.released.load(Ordering::Acquire)
    }

    /// Joins the workers as they end, waking them while the session
    /// stops (or pauses: both set `stop`); the first error of one. With
    /// `through_pauses`, a pause with every worker gone doesn't end the
    /// wait: the session serves again or is released soon. Without it (a
    /// pause), a request that waits for a lock ends the wait with an error
    /// (its worker can't end until the lock is granted); the workers not
    /// joined yet serve on.
    fn join_workers(&self, through_pauses: bool) -> io::Result<()> {
        let mut first_error = None;
        loop {
            let handle = self
                .shared
                .handles
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            let Some(handle) = handle else {
                if through_pauses && self.shared.paused.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                if self.shared.workers.load(Ordering::Acquire) == 0 {
                    break;
                }
                // A worker is starting another one; its handle arrives soon.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            // While stopping, keep waking workers that went back into read(2)
            // after the previous signal; otherwise just check now and then
            // whether a stop began.
            while !handle.is_finished() {
                let waits = self.shared.in_long_waits.load(Ordering::Acquire);
                if !through_pauses && waits > 0 {
                    self.shared
                        .handles
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(handle);
                    return Err(lock_waits_refuse(waits));
                }
                if self.shared.stop.load(Ordering::Acquire) {
                    self.wake_workers();
                    std::thread::sleep(Duration::from_millis(5));
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(io::Error::other("a worker thread panicked"));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Unmounts (a plain unmount, lazily if the mount is busy). The workers
    /// end once the kernel drops the connection.
    pub fn unmount(&self) -> Result<(), MountError> {
        let mut guard = self.mount.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            // Unmounted already: unmounting the path again could take down
            // a mount made there since (seen: xfstests' mount cycles).
            // The kernel ended the connection: nothing to unmount unless it
            // aborted it and left the (dead) mount (see `connection_ended`).
            Some(mount) if self.shared.unmounted.load(Ordering::Acquire) => {
                mount.connection_ended();
                mount.unmount()
            }
            Some(mount) => mount.unmount(),
            None => Ok(()),
        }
    }

    fn wake_workers(&self) {
        let tids = self.shared.tids.lock().unwrap_or_else(|e| e.into_inner());
        for &tid in tids.iter() {
            // SAFETY: every id in the list belongs to a running worker (see `Shared::tids`).
            unsafe { libc::pthread_kill(tid, self.shared.config.wake_signal) };
        }
    }
}

impl Session for DevSession {
    fn transport(&self) -> String {
        match self.worker_count() {
            1 => "/dev/fuse, 1 worker thread".to_string(),
            n => format!("/dev/fuse, {n} worker threads"),
        }
    }

    fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    fn server(&self) -> &Arc<Server> {
        &self.shared.server
    }

    fn stop(&self) {
        if self.shared.released.load(Ordering::Acquire) {
            // Handed over: another process serves it, and its waits.
            return;
        }
        self.shared.stop.store(true, Ordering::Release);
        // A hand-over in progress loses: the session ends.
        self.shared.paused.store(false, Ordering::Release);
        // Workers waiting for a lock on a client's behalf would never see
        // the stop: the file system ends those waits.
        self.shared.server.stop_waits();
        if let Err(e) = self.unmount() {
            tracing::warn!("unmounting {}: {e}", self.mountpoint.display());
        }
        self.wake_workers();
    }

    fn wait(&self) -> io::Result<()> {
        let joined = self.join_workers(true);
        if self.shared.released.load(Ordering::Acquire) {
            // Another process serves the connection now.
            return joined;
        }
        self.shared.server.finish();
        if let Err(e) = self.unmount() {
            tracing::warn!("unmounting {}: {e}", self.mountpoint.display());
        }
        // Close our fds: if the mount is still busy (lazily unmounted), the
        // kernel now fails its requests instead of waiting for us.
        self.shared
            .master
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.mount.lock().unwrap_or_else(|e| e.into_inner()).take();
        joined
    }

    fn notifier(&self) -> Option<fuse_server::Notifier> {
        DevSession::notifier(self).ok()
    }
}

impl Drop for DevSession {
    fn drop(&mut self) {
        if self.shared.workers.load(Ordering::Acquire) > 0 {
            self.stop();
            if let Err(e) = self.wait() {
                tracing::warn!("session ended with an error: {e}");
            }
        }
    }
}

/// Mounts `mountpoint` with synchronous INIT where the kernel offers it,
/// INIT answered during mount(2) by `server`, which is then dropped: for
/// a program whose serving file system can't exist yet when it mounts (a
/// daemon that mounts, then confines itself, then opens its source).
/// `server` stands in for the serving one: built the same way, so that it
/// answers INIT as that one would. Returns the mount and, if INIT was
/// answered, what it settled, for the serving server to take up with
/// [`DevSession::from_initialized_mount`] or
/// `FuseDevTask::from_initialized_mount`. `None`: a kernel without
/// synchronous INIT, or a mount through `fusermount3`; INIT then waits on
/// the mount's descriptor, for [`DevSession::from_mount`] or
/// `FuseDevTask::from_mount`. An INIT `server` refuses fails the mount
/// ([`MountError::InitRefused`]). `wake_signal` is as in
/// [`SessionConfig::wake_signal`]; its do-nothing handler is installed.
pub fn init_during_mount(
    server: Server,
    mountpoint: &Path,
    options: &MountOptions,
    wake_signal: i32,
) -> Result<(Mount, Option<fuse_server::Negotiated>), SessionError> {
    install_wake_handler(wake_signal);
    let config = SessionConfig::default().wake_signal(wake_signal);
    let (mount, server, _master) =
        mount_answering_init(server, mountpoint, options, &config, false)?;
    Ok((mount, server.negotiated().copied()))
}

/// Mounts with synchronous INIT where the kernel offers it, answering INIT
/// with `server` during mount(2), or on the old path after it on this
/// thread if `answer_pending_here` (else the caller does): the mount, the server
/// (its backing-file registry installed) and the session descriptor the
/// registry holds (weakly: the caller keeps it).
pub(crate) fn mount_answering_init(
    server: Server,
    mountpoint: &Path,
    options: &MountOptions,
    config: &SessionConfig,
    answer_pending_here: bool,
) -> Result<(Mount, Arc<Server>, Arc<OwnedFd>), SessionError> {
    let server = Arc::new(server);
    // The descriptor backing files are registered on (the registry holds
    // it weakly and is set once): made by whoever answers INIT, kept as
    // the session's.
    let kept: Mutex<Option<Arc<OwnedFd>>> = Mutex::new(None);
    let keep = |fd: BorrowedFd<'_>| -> io::Result<Arc<OwnedFd>> {
        let master = Arc::new(fd.try_clone_to_owned()?);
        server.set_backing_files(Arc::new(DevBackingFiles::new(Arc::downgrade(&master))));
        *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(master.clone());
        Ok(master)
    };
    let answer = |fd: BorrowedFd<'_>, stop: &AtomicBool| -> io::Result<InitAnswer> {
        // Registered once a request came: only then is this descriptor a
        // connection (mount(2) may still fail, and fall back to
        // fusermount3's descriptor).
        let mut registered = false;
        let mut on_request = || -> io::Result<()> {
            if !registered {
                keep(fd)?;
                registered = true;
            }
            Ok(())
        };
        serve_init_until(&server, fd, Some((stop, &mut on_request))).map_err(|e| match e {
            SessionError::Init(e) => e,
            other => io::Error::other(other.to_string()),
        })
    };
    let init = SyncInit {
        answer: &answer,
        wake_signal: config.wake_signal,
    };
    let (mount, mode) = Mount::new_with_sync_init(mountpoint, options, &init)?;
    let master = match mode {
        InitMode::Answered => kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                SessionError::Init(io::Error::other("INIT answered on no descriptor"))
            })?,
        InitMode::Pending => {
            let master = keep(mount.dev_fd()).map_err(SessionError::Init)?;
            if answer_pending_here {
                serve_init(&server, master.as_fd())?;
            }
            master
        }
    };
    if mode == InitMode::Answered {
        tracing::debug!(
            mountpoint = %mount.mountpoint().display(),
            "INIT answered during mount(2) (synchronous INIT)"
        );
    }
    Ok((mount, server, master))
}

/// Reads and answers requests on `fd` until INIT is done.
pub(crate) fn serve_init(server: &Server, fd: BorrowedFd<'_>) -> Result<(), SessionError> {
    serve_init_until(server, fd, None).map(drop)
}

/// Called before each request is handled.
type OnRequest<'a> = &'a mut dyn FnMut() -> io::Result<()>;

/// [`serve_init`], returning early (with an error) once `stop` is set and
/// a read is interrupted.
fn serve_init_until(
    server: &Server,
    fd: BorrowedFd<'_>,
    mut stop: Option<(&AtomicBool, OnRequest<'_>)>,
) -> Result<InitAnswer, SessionError> {
    let default = fuse_server::InitConfig::default();
    let size = (default.max_write as usize + 2 * AlignedBuf::ALIGN).max(fuse_abi::MIN_READ_BUFFER);
    let mut request = AlignedBuf::new(size).map_err(SessionError::Init)?;
    let mut reply = AlignedBuf::new(AlignedBuf::ALIGN).map_err(SessionError::Init)?;
    while server.negotiated().is_none() {
        let n = match dev::read_request(fd, &mut request) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::ENOENT)
                ) =>
            {
                if stop
                    .as_ref()
                    .is_some_and(|(s, _)| s.load(Ordering::Acquire))
                {
                    return Err(SessionError::Init(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "mount(2) ended before INIT",
                    )));
                }
                continue;
            }
            Err(e) => return Err(SessionError::Init(e)),
        };
        if let Some((_, on_request)) = stop.as_mut() {
            // Not fatal: mount(2) waits (uninterruptibly) for this answer.
            if let Err(e) = on_request() {
                tracing::warn!("no backing files on this connection: {e}");
            }
        }
        let mut tx = Noting {
            tx: DevTransaction {
                fd,
                request: &request[..n],
                reply: &mut reply,
            },
            error: 0,
        };
        server.handle(&mut tx).map_err(SessionError::Init)?;
        // During mount(2) a refused INIT ends it: the kernel fails the
        // mount, and nothing follows on this descriptor.
        if stop.is_some()
            && request_opcode(&request[..n]) == fuse_abi::Opcode::Init as u32
            && server.negotiated().is_none()
            && tx.error < 0
        {
            return Ok(InitAnswer::Refused(io::Error::from_raw_os_error(-tx.error)));
        }
    }
    Ok(InitAnswer::Accepted)
}

/// A [`DevTransaction`] that notes the error its reply carried.
struct Noting<'a> {
    tx: DevTransaction<'a>,
    error: i32,
}

impl fuse_server::Transaction for Noting<'_> {
    fn request(&self) -> fuse_server::RawRequest<'_> {
        self.tx.request()
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        self.tx.reply_buffer()
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        self.error = error;
        self.tx.send_reply(unique, error, body_len)
    }
}

impl Shared {
    fn master(&self) -> io::Result<Arc<OwnedFd>> {
        let master = self.master.lock().unwrap_or_else(|e| e.into_inner());
        master
            .clone()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the session has ended"))
    }
}

impl Shared {
    /// Milliseconds since the session started.
    fn millis(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

fn spawn_worker(shared: &Arc<Shared>) -> io::Result<()> {
    let master = shared.master()?;
    let fd = if shared.config.clone_fd {
        match dev::clone_fd(master.as_fd()) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!("FUSE_DEV_IOC_CLONE failed ({e}); sharing the session fd");
                master.try_clone()?
            }
        }
    } else {
        master.try_clone()?
    };
    drop(master);
    let mut request = AlignedBuf::new(shared.buffer_sizes.0)?;
    if shared.config.prefault_buffers {
        request.prefault();
    }
    let reply = AlignedBuf::new(shared.buffer_sizes.1)?;
    shared.workers.fetch_add(1, Ordering::AcqRel);
    shared.idle.fetch_add(1, Ordering::AcqRel);
    shared
        .last_spawn_ms
        .store(shared.millis(), Ordering::Release);
    let worker_shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("fuse-dev".into())
        .spawn(move || {
            let shared = worker_shared;
            register_tid(&shared);
            let result = worker_loop(&shared, fd.as_fd(), request, reply);
            unregister_tid(&shared);
            // A retired worker took itself off the idle count already.
            if !matches!(result, Ok(WorkerEnd::Retired)) {
                shared.idle.fetch_sub(1, Ordering::AcqRel);
            }
            shared.workers.fetch_sub(1, Ordering::AcqRel);
            match result {
                Ok(_) => Ok(()),
                Err(e) => {
                    tracing::error!("/dev/fuse worker failed: {e}");
                    Err(e)
                }
            }
        });
    match spawned {
        Ok(handle) => {
            let mut handles = shared.handles.lock().unwrap_or_else(|e| e.into_inner());
            // Workers that retired are joined here, so their stacks go
            // back and the list doesn't grow with every burst.
            let (ended, running): (Vec<_>, Vec<_>) =
                handles.drain(..).partition(|h| h.is_finished());
            *handles = running;
            handles.push(handle);
            drop(handles);
            for h in ended {
                if let Ok(Err(e)) = h.join() {
                    tracing::debug!("a /dev/fuse worker had ended with: {e}");
                }
            }
            Ok(())
        }
        Err(e) => {
            shared.idle.fetch_sub(1, Ordering::AcqRel);
            shared.workers.fetch_sub(1, Ordering::AcqRel);
            Err(e)
        }
    }
}

fn register_tid(shared: &Shared) {
    // SAFETY: pthread_self has no preconditions.
    let tid = unsafe { libc::pthread_self() };
    shared
        .tids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tid);
}

fn unregister_tid(shared: &Shared) {
    // SAFETY: pthread_self has no preconditions.
    let tid = unsafe { libc::pthread_self() };
    let mut tids = shared.tids.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: pthread_equal only compares ids.
    tids.retain(|&t| unsafe { libc::pthread_equal(t, tid) } == 0);
}

/// How a worker ended without an error.
enum WorkerEnd {
    /// The session ended (stop, unmount, DESTROY).
    Done,
    /// More workers were idle than the session keeps: this one left, and
    /// took itself off the idle count.
    Retired,
}

fn worker_loop(
    shared: &Arc<Shared>,
    fd: BorrowedFd<'_>,
    mut request: AlignedBuf,
    mut reply: AlignedBuf,
) -> io::Result<WorkerEnd> {
    // Workers started for a burst (every worker was busy) leave once it
    // is over, down to the number the session starts with: idle workers
    // only hold memory, and a request wakes the one that waited longest,
    // so many idle workers also spread a single client's requests over
    // as many threads.
    let keep = shared.config.threads.max(1);
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return Ok(WorkerEnd::Done);
        }
        let n = match dev::read_request(fd, &mut request[REQUEST_OFFSET..]) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                // EINTR: woken (maybe to stop); ENOENT: the request was
                // interrupted before we read it.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // The connection is gone: unmounted (ENODEV) or aborted.
                Some(libc::ENODEV) => {
                    shared.unmounted.store(true, Ordering::Release);
                    // Nobody can answer a lock wait's caller any more:
                    // end the waits, or a worker blocked in one would
                    // hold the session (seen after the kernel aborted
                    // a connection on a request timeout).
                    shared.server.stop_waits();
                    return Ok(WorkerEnd::Done);
                }
                Some(libc::ECONNABORTED) => {
                    shared.server.stop_waits();
                    return Ok(WorkerEnd::Done);
                }
                _ => return Err(io::Error::new(e.kind(), format!("reading /dev/fuse: {e}"))),
            },
        };
        let opcode = request_opcode(&request[REQUEST_OFFSET..REQUEST_OFFSET + n]);
        let long_wait = opcode_info_raw(opcode).is_some_and(|i| i.waits_indefinitely());
        if long_wait {
            shared.in_long_waits.fetch_add(1, Ordering::AcqRel);
        }
        // Keep one worker waiting for requests: if this was the last idle
        // one, start another (a blocking lock must not stall the mount).
        // FORGETs never block: a FORGET storm starts no threads. Workers in
        // lock waits don't count against the limit.
        if shared.idle.fetch_sub(1, Ordering::AcqRel) == 1
            && !never_blocks(opcode)
            && shared.workers.load(Ordering::Acquire)
                < shared.config.max_threads + shared.in_long_waits.load(Ordering::Acquire)
            && !shared.stop.load(Ordering::Acquire)
        {
            if let Err(e) = spawn_worker(shared) {
                tracing::warn!("could not start another worker: {e}");
            }
        }
        let mut tx = DevTransaction {
            fd,
            request: &request[REQUEST_OFFSET..REQUEST_OFFSET + n],
            reply: &mut reply,
        };
        let outcome = shared.server.handle(&mut tx);
        if long_wait {
            shared.in_long_waits.fetch_sub(1, Ordering::AcqRel);
        }
        shared.idle.fetch_add(1, Ordering::AcqRel);
        if opcode == fuse_abi::Opcode::BatchForget as u32 && n > RELEASE_AFTER {
            // A FORGET storm's batches fill the whole buffer; give its pages
            // back rather than keep them resident for good.
            release_pages(&mut request[REQUEST_OFFSET + RELEASE_AFTER..]);
        }
        match outcome {
            Ok(Outcome::Destroyed) => return Ok(WorkerEnd::Done),
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) => {
                return Ok(WorkerEnd::Done)
            }
            Err(e) => tracing::warn!("writing a reply to /dev/fuse: {e}"),
        }
        // The clock is read only when there are extra idle workers at all.
        let extra_idle = shared.idle.load(Ordering::Acquire) > keep;
        if extra_idle
            && shared
                .millis()
                .saturating_sub(shared.last_spawn_ms.load(Ordering::Acquire))
                >= RETIRE_AFTER.as_millis() as u64
            && shared
                .idle
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |idle| {
                    (idle > keep).then(|| idle - 1)
                })
                .is_ok()
        {
            return Ok(WorkerEnd::Retired);
        }
    }
}

/// A request buffer's pages past this many bytes are given back to the
/// system after a BATCH_FORGET that used them (rare; WRITEs, which use
/// them often, keep them).
const RELEASE_AFTER: usize = 64 << 10;

/// The opcode of a request (0 if it is too short to say).
/// Why a pause is refused while `waits` requests wait for locks.
pub(crate) fn lock_waits_refuse(waits: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("{waits} requests wait for locks; try again once they are answered"),
    )
}

/// Whether a session's mount can be handed over (a pause would be for
/// nothing otherwise): it must still be there, and releasable
/// ([`Mount::can_release`]).
pub(crate) fn can_hand_over(mount: &Mutex<Option<Mount>>) -> io::Result<()> {
    match mount.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        None => Err(io::Error::other("the session has ended")),
        Some(m) if !m.can_release() => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a mount with auto_unmount can't be handed over: its helper would unmount it when \
             this process exits",
        )),
        Some(_) => Ok(()),
    }
}

/// Gives a session's mount up ([`Mount::release`]): its session
/// descriptor. On an error the session keeps it.
pub(crate) fn release_mount(mount: &Mutex<Option<Mount>>) -> io::Result<OwnedFd> {
    let mut mount = mount.lock().unwrap_or_else(|e| e.into_inner());
    let fd = mount
        .as_mut()
        .ok_or_else(|| io::Error::other("the session has ended"))?
        .release()?;
    // Released: dropping it leaves the mount alone.
    mount.take();
    Ok(fd)
}

pub(crate) fn request_opcode(request: &[u8]) -> u32 {
    request
        .get(4..8)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// Requests a worker answers without ever blocking.
pub(crate) fn never_blocks(opcode: u32) -> bool {
    use fuse_abi::Opcode;
    opcode == Opcode::Forget as u32
        || opcode == Opcode::BatchForget as u32
        || opcode == Opcode::Interrupt as u32
}

/// Gives the whole pages of `buf` back to the system (`MADV_DONTNEED`):
/// they read as zeros and take no memory until written again.
fn release_pages(buf: &mut [u8]) {
    let start = buf.as_ptr() as usize;
    let first = start.next_multiple_of(AlignedBuf::ALIGN);
    let end = (start + buf.len()) & !(AlignedBuf::ALIGN - 1);
    if end > first {
        // SAFETY: the range lies inside `buf`, which we borrow mutably; its
        // contents are not needed (the request was handled).
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
    }
}

/// Sends notifications on the session's fd.
pub(crate) struct DevNotificationSink(pub(crate) Arc<OwnedFd>);

impl NotificationSink for DevNotificationSink {
    fn send_notification(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
        dev::write_message(self.0.as_fd(), parts)
    }
}

extern "C" fn wake_handler(_signal: libc::c_int) {}

/// Installs a do-nothing handler for the wake signal, without
/// `SA_RESTART`, so the signal makes a blocked `read(2)` return EINTR
/// (process-wide, see [`SessionConfig::wake_signal`]). Once per signal: a
/// session with another `wake_signal` than an earlier one gets its own.
pub(crate) fn install_wake_handler(signal: i32) {
    static INSTALLED: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if installed.contains(&signal) {
        return;
    }
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe
    // (it does nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = wake_handler as *const () as usize;
        action.sa_flags = 0;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            tracing::warn!(
                signal,
                "installing the worker wake signal handler: {}",
                io::Error::last_os_error()
            );
            return;
        }
    }
    installed.push(signal);
    tracing::debug!(
        signal,
        rtmin_offset = signal - libc::SIGRTMIN(),
        "installed a process-wide do-nothing handler (no SA_RESTART) for the \
         /dev/fuse worker wake signal (SessionConfig::wake_signal)"
    );
}
