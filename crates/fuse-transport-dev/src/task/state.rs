//! What the first task of a mount and its siblings share ([`TaskState`]:
//! the stop, pause and end bookkeeping) and the [`TaskHandle`] that stops
//! them: apart from the task itself because every task of the mount, and
//! every thread stopping or waiting for them, holds it.

use fuse_server::Server;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::Notify;
// Only the documentation's links name them.
#[cfg(doc)]
use {super::FuseDevTask, fuse_server::Session};

/// Stops a running [`FuseDevTask`] from anywhere.
#[derive(Clone)]
pub struct TaskHandle {
    pub(super) state: Arc<TaskState>,
    pub(super) server: Arc<Server>,
}

pub(super) struct TaskState {
    pub(super) stop: AtomicBool,
    pub(super) wake: Notify,
    /// Tasks of this mount (the first and its siblings) not yet ended;
    /// the last one to end calls `Server::finish`.
    pub(super) tasks: AtomicUsize,
    /// Signalled once INIT is answered, for siblings waiting to start.
    pub(super) init_done: Notify,
    /// Tasks of this mount made so far (the first and its siblings).
    pub(super) started: AtomicUsize,
    /// What [`Session::wait`] waits for, and the first error a task's run
    /// ended with.
    ended: Mutex<Ended>,
    /// Signalled when a task ends or parks.
    pub(super) ended_changed: Condvar,
    /// Paused for a hand-over ([`FuseDevTask::pause`]): the tasks read
    /// nothing and park once their requests are answered.
    pub(super) paused: AtomicBool,
    /// Tasks parked: every request they read answered, reading nothing.
    /// Changed under the `ended` lock.
    pub(super) parked: AtomicUsize,
    /// Wakes parked tasks (the pause ends, or the mount stops).
    pub(super) resume: Notify,
    /// The connection was handed to another process
    /// ([`FuseDevTask::release`]): ending neither unmounts nor tells the
    /// file system (the connection isn't over).
    pub(super) released: AtomicBool,
    /// Requests being served that may wait indefinitely (a blocking
    /// lock): a pause can't wait for them.
    pub(super) long_waits: AtomicUsize,
}

#[derive(Default)]
pub(super) struct Ended {
    /// The first task (the one owning the mount) ran to its end, or was
    /// dropped.
    pub(super) owner: bool,
    pub(super) error: Option<io::Error>,
}

impl TaskState {
    pub(super) fn new() -> Self {
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
    pub(super) fn wake_all(&self) {
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    pub(super) fn lock_ended(&self) -> std::sync::MutexGuard<'_, Ended> {
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
