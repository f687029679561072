//! [`FuseDevTask`]: serving `/dev/fuse` as a task on the application's own
//! tokio runtime (feature `tokio`).
//!
//! The task registers a non-blocking `/dev/fuse` fd with the runtime's
//! reactor, reads requests when the fd is readable, and runs each request's
//! [`Server::handle_async`] as its own task, so a file system whose
//! operations wait (an async backend, a thread pool) serves many requests at
//! once on one thread. Request tasks are local tasks (the file system's
//! futures need not be `Send`), so [`FuseDevTask::run`] must run inside a
//! tokio [`LocalSet`](tokio::task::LocalSet): `async-io`'s runtimes (tokio
//! or io_uring, a current-thread runtime whose reactor also drives an
//! io_uring) provide one, and on a plain tokio runtime
//! `LocalSet::new().run_until(task.run())` does. To serve one mount on
//! several threads, give every other thread a [`FuseDevTask::sibling`]:
//! each reads its own cloned fd, all stop together, and the last one to
//! end tells the file system the connection is over.
//!
//! A `FuseDevTask` is a [`Session`] like the other transports' sessions:
//! share it (`Arc<FuseDevTask>`), run it with [`FuseDevTask::run_shared`]
//! on its runtime's thread, and [`Session::stop`] and [`Session::wait`] it
//! from any other thread (`wait` blocks until the task and its siblings
//! have ended, so it must not be called on a thread that runs one of them).
//!
//! For a live upgrade ([`crate::takeover`]) the task and its siblings can
//! be paused ([`FuseDevTask::pause`]: every request read is answered and
//! nothing more is read), served again ([`FuseDevTask::unpause`]) or given
//! up to another process ([`FuseDevTask::release`]); a new process serves
//! the connection it received with [`FuseDevTask::resume_paused`].

use crate::backing::DevBackingFiles;
use crate::dev::{self, DevTransaction};
use crate::mount::{Mount, MountOptions};
use crate::session::{
    can_hand_over, lock_waits_refuse, release_mount, request_opcode, SessionError,
};
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{AlignedBuf, Outcome, Server, Session};
use std::io::{self};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::sync::{Notify, Semaphore};

/// Offset of the request in its buffer; see the `/dev/fuse` session.
const REQUEST_OFFSET: usize = AlignedBuf::ALIGN - 80;

/// How a [`FuseDevTask`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskConfig {
    /// Largest number of requests handled at once (each holds a request
    /// and a reply buffer).
    pub max_in_flight: usize,
    /// The runtime's name in [`Session::transport`] (`"tokio"` by default;
    /// the task runs on whatever runtime it was created in).
    pub runtime_name: String,
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            runtime_name: "tokio".into(),
        }
    }
}

/// Builder-style setters, one per field: start from [`TaskConfig::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl TaskConfig {
    /// Sets the largest number of requests handled at once (`max_in_flight`).
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Sets the runtime's name reported by the session (`runtime_name`).
    #[must_use]
    pub fn runtime_name(mut self, name: impl Into<String>) -> Self {
        self.runtime_name = name.into();
        self
    }
}

/// Stops a running [`FuseDevTask`] from anywhere.
#[derive(Clone)]
pub struct TaskHandle {
    state: Arc<TaskState>,
    server: Arc<Server>,
}

struct TaskState {
    stop: AtomicBool,
    wake: Notify,
    /// Tasks of this mount (the first and its siblings) not yet ended;
    /// the last one to end calls `Server::finish`.
    tasks: AtomicUsize,
    /// Signalled once INIT is answered, for siblings waiting to start.
    init_done: Notify,
    /// Tasks of this mount made so far (the first and its siblings).
    started: AtomicUsize,
    /// What [`Session::wait`] waits for, and the first error a task's run
    /// ended with.
    ended: Mutex<Ended>,
    /// Signalled when a task ends or parks.
    ended_changed: Condvar,
    /// Paused for a hand-over ([`FuseDevTask::pause`]): the tasks read
    /// nothing and park once their requests are answered.
    paused: AtomicBool,
    /// Tasks parked: every request they read answered, reading nothing.
    /// Changed under the `ended` lock.
    parked: AtomicUsize,
    /// Wakes parked tasks (the pause ends, or the mount stops).
    resume: Notify,
    /// The connection was handed to another process
    /// ([`FuseDevTask::release`]): ending neither unmounts nor tells the
    /// file system (the connection isn't over).
    released: AtomicBool,
    /// Requests being served that may wait indefinitely (a blocking
    /// lock): a pause can't wait for them.
    long_waits: AtomicUsize,
}

#[derive(Default)]
struct Ended {
    /// The first task (the one owning the mount) ran to its end, or was
    /// dropped.
    owner: bool,
    error: Option<io::Error>,
}

impl TaskState {
    fn new() -> Self {
        TaskState {
            stop: AtomicBool::new(false),
            wake: Notify::new(),
            tasks: AtomicUsize::new(1),
            init_done: Notify::new(),
            started: AtomicUsize::new(1),
            ended: Mutex::new(Ended::default()),
            ended_changed: Condvar::new(),
            paused: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            resume: Notify::new(),
            released: AtomicBool::new(false),
            long_waits: AtomicUsize::new(0),
        }
    }

    /// Wakes every task from its wait for a request (to see a stop or a
    /// pause). `notify_one` keeps a wake-up for a task that is about to
    /// wait; callers that must reach every task call this again until
    /// they see the effect (a task may start waiting just after).
    fn wake_all(&self) {
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    fn lock_ended(&self) -> std::sync::MutexGuard<'_, Ended> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl TaskHandle {
    /// Asks the task to stop: it reads no new request, lets the requests it
    /// already runs finish, and returns. Requests waiting for a lock are
    /// ended with `EINTR` ([`Server::stop_waits`]), so none of them keeps
    /// the task running. Requests the kernel sent but the task hadn't read
    /// are left to the kernel (they fail once the connection goes away).
    pub fn stop(&self) {
        self.state.stop.store(true, Ordering::Release);
        self.server.stop_waits();
        self.state.wake_all();
        // Parked tasks (a pause) end too.
        self.state.resume.notify_waiters();
    }

    /// Whether [`TaskHandle::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.state.stop.load(Ordering::Acquire)
    }
}

/// A mount served by a task on the caller's tokio runtime.
pub struct FuseDevTask {
    server: Arc<Server>,
    mount: Mutex<Option<Mount>>,
    mountpoint: PathBuf,
    fd: Arc<AsyncFd<OwnedFd>>,
    config: TaskConfig,
    state: Arc<TaskState>,
    /// A sibling: it doesn't own the mount and doesn't answer INIT.
    sibling: bool,
    /// Still counted in `TaskState::tasks` (until `run` ends or the task
    /// is dropped unrun).
    counted: AtomicBool,
    /// `run` was called.
    running: AtomicBool,
    /// With synchronous INIT: the descriptor the backing-file registry was
    /// set up on (it holds it weakly), kept as long as the task.
    backing_fd: Option<Arc<OwnedFd>>,
}

/// A second (third, ...) task for the mount of a [`FuseDevTask`], not yet
/// bound to a runtime: move it to another thread and make it a task there
/// with [`FuseDevSibling::into_task`]. It owns a cloned `/dev/fuse` fd
/// (`FUSE_DEV_IOC_CLONE`), so requests go to whichever task is reading.
pub struct FuseDevSibling {
    fd: OwnedFd,
    server: Arc<Server>,
    mountpoint: PathBuf,
    config: TaskConfig,
    state: Arc<TaskState>,
}

impl FuseDevSibling {
    /// The task, registered with the current thread's tokio runtime (call
    /// it inside the runtime that will run it). It waits for INIT, which
    /// the first task answers, and then serves like it; the first task's
    /// [`TaskHandle`] stops it too.
    pub fn into_task(self) -> Result<FuseDevTask, SessionError> {
        let fd = register(self.fd)?;
        self.state.tasks.fetch_add(1, Ordering::AcqRel);
        self.state.started.fetch_add(1, Ordering::AcqRel);
        Ok(FuseDevTask {
            server: self.server,
            mount: Mutex::new(None),
            mountpoint: self.mountpoint,
            fd,
            config: self.config,
            state: self.state,
            sibling: true,
            counted: AtomicBool::new(true),
            running: AtomicBool::new(false),
            backing_fd: None,
        })
    }
}

impl FuseDevTask {
    /// Mounts `mountpoint`. Must be called within a tokio runtime (the fd
    /// is registered with its reactor).
    ///
    /// Where the kernel offers synchronous INIT (`FUSE_DEV_IOC_SYNC_INIT`,
    /// Linux 6.18), INIT is answered during mount(2), on a thread of its
    /// own ([`crate::Mount::new_with_sync_init`]): this call blocks until
    /// then, and an INIT the file system refuses fails it. If mount(2)
    /// fails first, that thread's blocking read is interrupted with
    /// [`crate::SessionConfig`]'s default wake signal, whose do-nothing
    /// handler this installs (as a [`crate::DevSession`] does). Elsewhere
    /// the task answers INIT when it runs.
    pub fn mount(
        server: Server,
        mountpoint: &Path,
        options: &MountOptions,
        config: TaskConfig,
    ) -> Result<Self, SessionError> {
        let session_config = crate::SessionConfig::default();
        crate::session::install_wake_handler(session_config.wake_signal);
        let (mount, server, master) = crate::session::mount_answering_init(
            server,
            mountpoint,
            options,
            &session_config,
            false,
        )?;
        let fd = dev::clone_fd(master.as_fd())
            .or_else(|_| master.try_clone())
            .map_err(SessionError::Init)?;
        let fd = register(fd)?;
        let mut task = Self::owner_shared(server, fd, mount, config);
        task.backing_fd = Some(master);
        Ok(task)
    }

    /// Serves an existing mount.
    pub fn from_mount(
        server: Server,
        mount: Mount,
        config: TaskConfig,
    ) -> Result<Self, SessionError> {
        let fd = dev::clone_fd(mount.dev_fd())
            .or_else(|_| mount.dev_fd().try_clone_to_owned())
            .map_err(SessionError::Init)?;
        let fd = register(fd)?;
        use_for_backing_files(&server, &fd);
        Ok(Self::owner(server, fd, mount, config))
    }

    /// Serves a mount whose INIT another server answered during mount(2)
    /// ([`crate::init_during_mount`]), with `negotiated` what it settled
    /// ([`Server::resume`] refuses a server that would have agreed to
    /// something else). The task owns the mount as if it had made it.
    pub fn from_initialized_mount(
        server: Server,
        mount: Mount,
        negotiated: &fuse_server::Negotiated,
        config: TaskConfig,
    ) -> Result<Self, SessionError> {
        let fd = dev::clone_fd(mount.dev_fd())
            .or_else(|_| mount.dev_fd().try_clone_to_owned())
            .map_err(SessionError::Init)?;
        let fd = register(fd)?;
        use_for_backing_files(&server, &fd);
        server.resume(negotiated).map_err(SessionError::Init)?;
        Ok(Self::owner(server, fd, mount, config))
    }

    /// Serves a connection another process answered INIT on and handed
    /// over (live upgrade, see [`crate::takeover`]), paused: the task reads
    /// nothing until [`FuseDevTask::unpause`], and [`FuseDevTask::release`]
    /// gives the connection up untouched (the hand-over was called off).
    /// `dev_fd` is the connection's session descriptor, mounted on
    /// `mountpoint`; `negotiated` what its INIT settled
    /// ([`Server::resume`] refuses a server that would have agreed to
    /// something else). The task owns the mount from then on, as if it had
    /// made it. Run it (and its siblings) as usual; must be called within
    /// a tokio runtime.
    pub fn resume_paused(
        server: Server,
        dev_fd: OwnedFd,
        mountpoint: PathBuf,
        negotiated: &fuse_server::Negotiated,
        config: TaskConfig,
    ) -> Result<Self, SessionError> {
        let fd = dev::clone_fd(dev_fd.as_fd())
            .or_else(|_| dev_fd.try_clone())
            .map_err(SessionError::Init)?;
        let fd = register(fd)?;
        // Before resuming: the file system decides there whether it can
        // use kernel passthrough.
        use_for_backing_files(&server, &fd);
        // Everything that can fail comes before adopting the mount: an
        // adopted mount unmounts when dropped, and the old daemon still
        // serves it.
        server.resume(negotiated).map_err(SessionError::Init)?;
        let task = Self::owner(server, fd, Mount::adopt(dev_fd, mountpoint), config);
        task.state.paused.store(true, Ordering::Release);
        Ok(task)
    }

    /// The first task of a mount, reading `fd` (registered).
    fn owner(server: Server, fd: Arc<AsyncFd<OwnedFd>>, mount: Mount, config: TaskConfig) -> Self {
        Self::owner_shared(Arc::new(server), fd, mount, config)
    }

    fn owner_shared(
        server: Arc<Server>,
        fd: Arc<AsyncFd<OwnedFd>>,
        mount: Mount,
        config: TaskConfig,
    ) -> Self {
        Self {
            server,
            mountpoint: mount.mountpoint().to_path_buf(),
            mount: Mutex::new(Some(mount)),
            fd,
            config,
            state: Arc::new(TaskState::new()),
            sibling: false,
            counted: AtomicBool::new(true),
            running: AtomicBool::new(false),
            backing_fd: None,
        }
    }

    /// Stops serving without ending the connection, to hand it over: every
    /// task (the siblings too) answers the requests it has read and parks;
    /// requests the kernel queues meanwhile wait for the next reader.
    /// Returns once all are parked. Follow with [`FuseDevTask::release`],
    /// or [`FuseDevTask::unpause`] to serve again. Refused on a sibling,
    /// while a request waits for a lock (it can't be answered in time; the
    /// pause is called off if one turns up meanwhile), and for a mount that
    /// can't be handed over ([`Mount::release`]). Never call it on a thread
    /// that runs one of the tasks: it waits for them.
    pub fn pause(&self) -> io::Result<()> {
        if self.sibling {
            return Err(io::Error::other("pause the first task, not a sibling"));
        }
        can_hand_over(&self.mount)?;
        let state = &self.state;
        let lock_waits = || {
            let waits = state.long_waits.load(Ordering::SeqCst);
            (waits > 0).then(|| lock_waits_refuse(waits))
        };
        if let Some(e) = lock_waits() {
            return Err(e);
        }
        state.paused.store(true, Ordering::SeqCst);
        match self.wait_parked(lock_waits) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.unpause()?;
                Err(e)
            }
        }
    }

    /// Waits until every task is parked, waking them to see the pause;
    /// fails if the mount stops meanwhile, or with what `give_up` says.
    fn wait_parked(&self, give_up: impl Fn() -> Option<io::Error>) -> io::Result<()> {
        let state = &self.state;
        let mut ended = state.lock_ended();
        loop {
            if state.stop.load(Ordering::Acquire) {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the session is ending",
                ));
            }
            if state.parked.load(Ordering::Acquire) == state.tasks.load(Ordering::Acquire) {
                return Ok(());
            }
            if let Some(e) = give_up() {
                return Err(e);
            }
            state.wake_all();
            ended = state
                .ended_changed
                .wait_timeout(ended, std::time::Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Serves again after [`FuseDevTask::pause`] (the hand-over failed), or
    /// starts serving a connection taken over with
    /// [`FuseDevTask::resume_paused`].
    pub fn unpause(&self) -> io::Result<()> {
        self.state.paused.store(false, Ordering::SeqCst);
        self.state.resume.notify_waiters();
        Ok(())
    }

    /// Gives the paused connection up for another process to serve: the
    /// mount's session descriptor. The mount stays (the connection lives
    /// while the descriptor is open anywhere); the tasks then end without
    /// unmounting, and the file system is not told the connection ended
    /// (its `destroy` doesn't run: the connection isn't over).
    pub fn release(&self) -> io::Result<OwnedFd> {
        let state = &self.state;
        if !state.paused.load(Ordering::Acquire) {
            return Err(io::Error::other("release needs a paused session"));
        }
        // Tasks of a session resumed paused may still be on their way to
        // parking.
        self.wait_parked(|| None)?;
        let fd = release_mount(&self.mount)?;
        state.released.store(true, Ordering::Release);
        state.stop.store(true, Ordering::Release);
        state.paused.store(false, Ordering::Release);
        state.resume.notify_waiters();
        Ok(fd)
    }

    /// A duplicate of the mount's session descriptor (the connection INIT
    /// was answered on); fails once the task gave the mount up or ended.
    pub fn connection_fd(&self) -> io::Result<OwnedFd> {
        match self
            .mount
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(mount) => mount.dev_fd().try_clone_to_owned(),
            None => Err(io::Error::other("the session has ended")),
        }
    }

    /// Paused ([`FuseDevTask::pause`], or resumed paused and not yet
    /// served).
    pub fn is_paused(&self) -> bool {
        self.state.paused.load(Ordering::Acquire)
    }

    /// The connection was handed to another process
    /// ([`FuseDevTask::release`]).
    pub fn is_released(&self) -> bool {
        self.state.released.load(Ordering::Acquire)
    }

    /// Another task for this mount, to run on another thread (each thread
    /// its own runtime): it reads a cloned `/dev/fuse` fd, so the kernel
    /// hands each request to whichever task is reading. Threads then share
    /// the load the way the worker threads of a `DevSession` do, and the
    /// scheduler can wake the one nearest the requesting CPU. The mount
    /// stays with this task; [`TaskHandle::stop`] stops all of them.
    pub fn sibling(&self) -> io::Result<FuseDevSibling> {
        let fd = dev::clone_fd(self.fd.get_ref().as_fd())?;
        Ok(FuseDevSibling {
            fd,
            server: self.server.clone(),
            mountpoint: self.mountpoint.clone(),
            config: self.config.clone(),
            state: self.state.clone(),
        })
    }

    /// A handle that stops the task.
    pub fn handle(&self) -> TaskHandle {
        TaskHandle {
            state: self.state.clone(),
            server: self.server.clone(),
        }
    }

    /// The protocol engine.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts (lazily if busy); the task then sees the connection end.
    pub fn unmount(&self) -> Result<(), crate::MountError> {
        match self
            .mount
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            Some(mount) => mount.unmount(),
            None => Ok(()),
        }
    }

    /// Serves until the mount goes away or the task is stopped, then
    /// waits for the requests in flight and unmounts.
    pub async fn run(self) -> io::Result<()> {
        self.run_ref().await
    }

    /// [`FuseDevTask::run`] for a task shared as a [`Session`]: the same,
    /// while other threads hold the task to stop it and wait for it.
    pub async fn run_shared(self: Arc<Self>) -> io::Result<()> {
        self.run_ref().await
    }

    async fn run_ref(&self) -> io::Result<()> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(io::Error::other("FuseDevTask::run called twice"));
        }
        let limit = Arc::new(Semaphore::new(self.config.max_in_flight.max(1)));
        let pool: Arc<Mutex<Vec<(AlignedBuf, AlignedBuf)>>> = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        let result = self.serve(&limit, &pool, &mut tasks).await;
        while let Some(joined) = tasks.join_next().await {
            if let Err(e) = joined {
                tracing::error!("a request task failed: {e}");
            }
        }
        // This task's reading ends the mount's: its siblings see the
        // connection go away (or the shared stop flag) and end too.
        self.state.stop.store(true, Ordering::Release);
        self.state.wake.notify_waiters();
        self.end_task(!self.state.released.load(Ordering::Acquire));
        if let Err(e) = self.unmount() {
            tracing::warn!("unmounting {}: {e}", self.mountpoint.display());
        }
        if let Err(e) = &result {
            self.state
                .lock_ended()
                .error
                .get_or_insert_with(|| io::Error::new(e.kind(), e.to_string()));
        }
        self.ended();
        result
    }

    /// This task no longer serves. When `finished` (its `run` ended, so
    /// the connection is over or stopped), the last of the mount's tasks
    /// to end tells the file system.
    fn end_task(&self, finished: bool) {
        if self.counted.swap(false, Ordering::AcqRel) {
            // Under the lock `Session::wait` checks the count with, so that
            // it can't see the last task gone before the file system was
            // told.
            let _ended = self.state.lock_ended();
            let last = self.state.tasks.fetch_sub(1, Ordering::AcqRel) == 1;
            if last && finished {
                self.server.finish();
            }
        }
        self.state.ended_changed.notify_all();
    }

    /// Tells [`Session::wait`] that this task is over (and, for the first
    /// task, that its mount is unmounted).
    fn ended(&self) {
        if !self.sibling {
            self.state.lock_ended().owner = true;
        }
        self.state.ended_changed.notify_all();
    }

    async fn serve(
        &self,
        limit: &Arc<Semaphore>,
        pool: &Arc<Mutex<Vec<(AlignedBuf, AlignedBuf)>>>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> io::Result<()> {
        if !self.serve_init().await? {
            return Ok(());
        }
        loop {
            if self.state.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            if self.state.paused.load(Ordering::SeqCst) {
                self.park(tasks).await;
                continue;
            }
            let permit = tokio::select! {
                permit = limit.clone().acquire_owned() => permit.map_err(io::Error::other)?,
                _ = self.state.wake.notified() => continue,
            };
            let (mut request, reply) = match pool.lock().unwrap_or_else(|e| e.into_inner()).pop() {
                Some(bufs) => bufs,
                None => self.new_buffers()?,
            };
            let n = tokio::select! {
                n = read_async(&self.fd, &mut request[REQUEST_OFFSET..]) => n,
                _ = self.state.wake.notified() => {
                    pool.lock().unwrap_or_else(|e| e.into_inner()).push((request, reply));
                    continue;
                }
            };
            let n = match n {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR | libc::ENOENT) => {
                        pool.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((request, reply));
                        continue;
                    }
                    Some(libc::ENODEV | libc::ECONNABORTED) => {
                        // Nobody can answer a lock wait's caller any
                        // more: end the waits, or the request tasks
                        // joined below would never finish.
                        self.server.stop_waits();
                        if let Some(mount) = self
                            .mount
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .as_mut()
                        {
                            // The unmount at the end then touches only a
                            // mount the kernel aborted, and says so.
                            mount.connection_ended();
                        }
                        return Ok(());
                    }
                    _ => return Err(io::Error::new(e.kind(), format!("reading /dev/fuse: {e}"))),
                },
            };
            // Counted before the pause flag is looked at again, so that a
            // pause sees either the lock wait or this task not parked.
            let opcode = request_opcode(&request[REQUEST_OFFSET..REQUEST_OFFSET + n]);
            let long_wait = opcode_info_raw(opcode).is_some_and(|i| i.waits_indefinitely());
            if long_wait {
                self.state.long_waits.fetch_add(1, Ordering::SeqCst);
            }
            let server = self.server.clone();
            let fd = self.fd.clone();
            let pool = pool.clone();
            let handle = self.handle();
            let state = self.state.clone();
            tasks.spawn_local(async move {
                let mut reply = reply;
                let mut tx = DevTransaction {
                    fd: fd.get_ref().as_fd(),
                    request: &request[REQUEST_OFFSET..REQUEST_OFFSET + n],
                    reply: &mut reply,
                };
                match server.handle_async(&mut tx).await {
                    Ok(Outcome::Destroyed) => handle.stop(),
                    Ok(_) => {}
                    Err(e)
                        if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) =>
                    {
                        handle.stop()
                    }
                    Err(e) => tracing::warn!("writing a reply to /dev/fuse: {e}"),
                }
                if long_wait {
                    state.long_waits.fetch_sub(1, Ordering::SeqCst);
                }
                pool.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((request, reply));
                drop(permit);
            });
            // Reap finished request tasks so the set doesn't grow.
            while let Some(done) = tasks.try_join_next() {
                if let Err(e) = done {
                    tracing::error!("a request task failed: {e}");
                }
            }
        }
    }

    /// Paused for a hand-over: answers the requests this task read, then
    /// waits until the pause ends (served again, released, or stopped).
    /// If the pause is called off before every request is answered, it
    /// returns at once and the rest are answered while serving.
    async fn park(&self, tasks: &mut tokio::task::JoinSet<()>) {
        let state = &self.state;
        let mut parked = false;
        loop {
            let resumed = state.resume.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !state.paused.load(Ordering::SeqCst) || state.stop.load(Ordering::Acquire) {
                break;
            }
            if parked {
                resumed.await;
                continue;
            }
            tokio::select! {
                joined = tasks.join_next() => match joined {
                    Some(Err(e)) => tracing::error!("a request task failed: {e}"),
                    Some(Ok(())) => {}
                    None => {
                        let _ended = state.lock_ended();
                        state.parked.fetch_add(1, Ordering::AcqRel);
                        parked = true;
                        state.ended_changed.notify_all();
                    }
                },
                _ = resumed => {}
            }
        }
        if parked {
            let _ended = state.lock_ended();
            state.parked.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Answers requests inline until INIT is done, so every buffer of the
    /// main loop is sized from the negotiated limits. Returns false if the
    /// task was stopped or the connection ended first.
    async fn serve_init(&self) -> io::Result<bool> {
        if self.sibling {
            return Ok(self.wait_for_init().await);
        }
        let d = fuse_server::InitConfig::default();
        let mut request =
            AlignedBuf::new(REQUEST_OFFSET + d.max_write as usize + 2 * AlignedBuf::ALIGN)?;
        let mut reply = AlignedBuf::new(AlignedBuf::ALIGN)?;
        while self.server.negotiated().is_none() {
            let n = tokio::select! {
                n = read_async(&self.fd, &mut request[REQUEST_OFFSET..]) => n,
                _ = self.state.wake.notified() => return Ok(false),
            };
            let n = match n {
                Ok(n) => n,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) => {
                    return Ok(false)
                }
                Err(e) => return Err(e),
            };
            let mut tx = DevTransaction {
                fd: self.fd.get_ref().as_fd(),
                request: &request[REQUEST_OFFSET..REQUEST_OFFSET + n],
                reply: &mut reply,
            };
            self.server.handle_async(&mut tx).await?;
        }
        self.state.init_done.notify_waiters();
        Ok(true)
    }

    /// A sibling reads nothing before INIT is answered (by the first task),
    /// so its buffers are sized from the negotiated limits. False if the
    /// mount stopped first.
    async fn wait_for_init(&self) -> bool {
        loop {
            let init = self.state.init_done.notified();
            let stop = self.state.wake.notified();
            tokio::pin!(init, stop);
            init.as_mut().enable();
            stop.as_mut().enable();
            if self.state.stop.load(Ordering::Acquire) {
                return false;
            }
            if self.server.negotiated().is_some() {
                return true;
            }
            tokio::select! {
                _ = init => {}
                _ = stop => {}
            }
        }
    }

    fn new_buffers(&self) -> io::Result<(AlignedBuf, AlignedBuf)> {
        let n = self
            .server
            .negotiated()
            .ok_or_else(|| io::Error::other("serving before INIT"))?;
        Ok((
            AlignedBuf::new(REQUEST_OFFSET + n.max_request_size())?,
            AlignedBuf::new(n.max_reply_size())?,
        ))
    }
}

/// Backing files (kernel passthrough) go through the task's fd, held
/// weakly so that they never keep the connection alive.
fn use_for_backing_files(server: &Server, fd: &Arc<AsyncFd<OwnedFd>>) {
    server.set_backing_files(Arc::new(DevBackingFiles::new(Arc::downgrade(fd))));
}

/// `/dev/fuse` polls as an error once the connection is gone: wait for
/// that too, or an unmounted task would never wake.
const READ_OR_ERROR: tokio::io::Interest =
    tokio::io::Interest::READABLE.add(tokio::io::Interest::ERROR);

async fn read_async(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let mut guard = fd.ready(READ_OR_ERROR).await?;
        match guard.try_io(|inner| dev::read_request(inner.get_ref().as_fd(), buf)) {
            Ok(result) => return result,
            Err(_would_block) => continue,
        }
    }
}

/// Makes `fd` non-blocking and registers it with the current runtime's
/// reactor.
fn register(fd: OwnedFd) -> Result<Arc<AsyncFd<OwnedFd>>, SessionError> {
    set_nonblocking(fd.as_fd()).map_err(SessionError::Init)?;
    // SAFETY: `fd` is an `OwnedFd` the AsyncFd owns from now on; nothing
    // replaces or closes it while it is registered.
    let fd = unsafe { AsyncFd::register_with_interest(fd, READ_OR_ERROR) }
        .map_err(|e| SessionError::Init(e.into()))?;
    Ok(Arc::new(fd))
}

impl Drop for FuseDevTask {
    fn drop(&mut self) {
        // Dropped unrun, or `run`'s future dropped midway (a takeover: the
        // connection may live on for another daemon): it no longer counts,
        // and the file system is not told anything.
        self.end_task(false);
        self.ended();
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a valid fd.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Session for FuseDevTask {
    fn transport(&self) -> String {
        format!(
            "/dev/fuse, a task on a {} runtime on each of {} threads",
            self.config.runtime_name,
            self.state.started.load(Ordering::Acquire)
        )
    }

    fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// [`TaskHandle::stop`]: the tasks end once the requests they run are
    /// answered, and the first one unmounts.
    fn stop(&self) {
        self.handle().stop();
    }

    /// Blocks until the first task and every sibling made from it have
    /// ended (their `run` returned, or they were dropped), then returns
    /// the first error a run ended with (once). Never call it on a thread
    /// that runs one of the tasks; it waits forever for a task nobody runs.
    fn wait(&self) -> io::Result<()> {
        let mut ended = self.state.lock_ended();
        while !(ended.owner && self.state.tasks.load(Ordering::Acquire) == 0) {
            // Timed, as a safety net: every change notifies.
            ended = self
                .state
                .ended_changed
                .wait_timeout(ended, std::time::Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        match ended.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes go to a duplicate of the task's descriptor (the same
    /// connection); `None` if it can't be duplicated.
    fn notifier(&self) -> Option<fuse_server::Notifier> {
        let fd = self.fd.get_ref().try_clone().ok()?;
        Some(
            self.server
                .notifier(Arc::new(crate::session::DevNotificationSink(Arc::new(fd)))),
        )
    }
}
