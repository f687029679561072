//! [`SessionConfig`]: how a [`DevSession`] serves (threads, fd cloning,
//! the wake signal, prefaulting), apart from the session because it is
//! plain settings with their documentation.

// Only the documentation's links name them (`stop` is a `Session` method).
#[cfg(doc)]
use {super::DevSession, fuse_server::Session};

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
