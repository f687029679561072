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
//!
//! This file holds the task and its sibling (their construction, the
//! `Session` impl) and the descriptor helpers. The rest lives in
//! submodules along the task's seams: `config` ([`TaskConfig`]), `state`
//! (what the tasks of a mount share, and [`TaskHandle`]), `serve` (the
//! reading and dispatch loop) and `pause` (pausing and handing over).

mod config;
mod pause;
mod serve;
mod state;

pub use config::TaskConfig;
pub use state::TaskHandle;
use state::TaskState;

use crate::backing::DevBackingFiles;
use crate::dev;
use crate::mount::{Mount, MountOptions};
use crate::session::SessionError;
use fuse_server::{Server, Session};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;

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
        let fd = register_clone(master.as_fd())?;
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
        let fd = register_clone(mount.dev_fd())?;
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
        let fd = register_clone(mount.dev_fd())?;
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
        let fd = register_clone(dev_fd.as_fd())?;
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

/// The task's own descriptor of the connection `dev_fd` is on, registered
/// ([`register`]): a clone with its own request queue
/// (`FUSE_DEV_IOC_CLONE`) where the kernel makes one, else a duplicate.
fn register_clone(dev_fd: BorrowedFd<'_>) -> Result<Arc<AsyncFd<OwnedFd>>, SessionError> {
    let fd = dev::clone_fd(dev_fd)
        .or_else(|_| dev_fd.try_clone_to_owned())
        .map_err(SessionError::Init)?;
    register(fd)
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
