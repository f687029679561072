//! Serving a mount from `/dev/fuse` with worker threads.
//!
//! This file holds [`DevSession`] (its shared state, its `Session` impl)
//! and the small helpers the crate's other files use. The rest lives in
//! submodules along the session's seams: `config` ([`SessionConfig`]),
//! `init` (answering INIT during or after mount(2)), `worker` (the worker
//! threads and their wake signal) and `handover` (the hand-over steps
//! `FuseDevTask` shares).

mod config;
mod handover;
mod init;
mod worker;

pub use config::SessionConfig;
pub(crate) use handover::{can_hand_over, lock_waits_refuse, release_mount};
pub use init::init_during_mount;
pub(crate) use init::{keep_as_master, mount_answering_init, serve_init};
pub(crate) use worker::install_wake_handler;
use worker::spawn_worker;

use crate::dev;
use crate::mount::{Mount, MountError, MountOptions};
use fuse_server::{AlignedBuf, NotificationSink, Notifier, Server, Session};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where a request is read into its buffer: chosen so that the data of a
/// WRITE (after the 40-byte header and the 40-byte `fuse_write_in`) starts
/// on a page boundary, where `O_DIRECT` can write it without a copy.
const REQUEST_OFFSET: usize = AlignedBuf::ALIGN - 80;

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
        let fd = mount.dev_fd().try_clone_to_owned();
        let master = keep_as_master(&server, fd.map_err(SessionError::Init)?);
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
        let fd = mount.dev_fd().try_clone_to_owned();
        let master = keep_as_master(&server, fd.map_err(SessionError::Init)?);
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
        let master = keep_as_master(&server, dev_fd.try_clone().map_err(SessionError::Init)?);
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

    /// Has the session's unmount go through `unmount` from now on (see
    /// [`Mount::unmount_through`](crate::Mount::unmount_through)): for a
    /// daemon serving a connection it took over or resumed, confined where
    /// it can't reach the mountpoint itself.
    pub fn unmount_through(&self, unmount: crate::UnmountFn) {
        let mut guard = self.mount.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mount) = guard.as_mut() {
            mount.unmount_through(unmount);
        }
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

/// The opcode of a request (0 if it is too short to say).
pub(crate) fn request_opcode(request: &[u8]) -> u32 {
    request
        .get(4..8)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// Sends notifications on the session's fd.
pub(crate) struct DevNotificationSink(pub(crate) Arc<OwnedFd>);

impl NotificationSink for DevNotificationSink {
    fn send_notification(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
        dev::write_message(self.0.as_fd(), parts)
    }
}
