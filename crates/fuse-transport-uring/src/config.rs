//! How a [`crate::UringSession`] serves, and which way it ended up serving.

use crate::fault::UringFault;
use std::fmt;

/// How a [`crate::UringSession`] serves.
///
/// Start from [`UringConfig::default`] and change it with the setters (the
/// struct is `#[non_exhaustive]`: it may gain fields, so it has no struct
/// literal outside this crate):
///
/// ```
/// use fuse_transport_uring::UringConfig;
/// // one payload buffer per entry, no pools
/// let config = UringConfig::default().bufs_per_queue(0);
/// # let _ = config;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UringConfig {
    /// Ring threads, each with its own io_uring. The kernel has one queue
    /// per possible CPU (a request goes to the queue of the CPU it was
    /// issued on) and starts using the rings only once every queue has
    /// entries, so every queue is always served; with fewer threads than
    /// queues a thread serves several queues (queue `q` by thread
    /// `q % threads`). 0 (the default): one thread per queue.
    pub threads: usize,
    /// Entries registered per queue: how many requests of one queue can be
    /// in user space at once. Default 8.
    pub entries_per_queue: usize,
    /// Payload buffers per queue in the kernel's buffer pool (Linux 7.3,
    /// `FUSE_HAS_IO_URING_BUFPOOL`). 0 turns pools off: every entry then
    /// has its own payload buffer of `Server::uring_payload_size()` bytes.
    /// Fewer buffers than entries is the point of pools: requests without
    /// payload don't hold one, and requests with payload wait in the kernel
    /// for a free buffer. Default 4.
    ///
    /// Memory mapped per queue: with pools `bufs_per_queue` payload buffers
    /// plus 512 bytes of header per entry (pooled entries have no buffer of
    /// their own; replies are written into the pool buffer); without,
    /// `entries_per_queue` payload buffers plus the headers. A payload
    /// buffer is `max(8192, max_write, max_pages * 4096)` bytes (1 MiB with
    /// the server's defaults). Pages cost memory once touched;
    /// [`crate::UringSession::memory`] reports both.
    pub bufs_per_queue: usize,
    /// Pin each ring thread to the CPU of its queue (or the CPUs of its
    /// queues), so it runs where its requests come from. Default `true`.
    pub pin_threads: bool,
    /// Create rings with `IORING_SETUP_SINGLE_ISSUER |
    /// IORING_SETUP_DEFER_TASKRUN` (the kernel's completion work runs only
    /// when the ring thread waits for completions, never interrupting a
    /// file system handler); falls back to `IORING_SETUP_COOP_TASKRUN`, then
    /// to no flags, where the kernel lacks them. Default `true`.
    pub defer_taskrun: bool,
    /// `/dev/fuse` worker threads started after INIT. The kernel keeps
    /// sending FORGET, BATCH_FORGET and INTERRUPT there even with the rings
    /// in use, so at least one always runs (0 counts as 1); more start when
    /// all are busy, up to [`UringConfig::dev_max_threads`]. Default 1.
    pub dev_threads: usize,
    /// `/dev/fuse` worker threads in all in the fallback mode
    /// ([`UringMode::DevFuse`]), where they serve every request: as many as
    /// a plain `/dev/fuse` session starts with, not the
    /// [`UringConfig::dev_threads`] meant for the few requests beside the
    /// rings (0 counts as 1). Default `SessionConfig::default().threads` of
    /// `fuse-transport-dev`.
    pub fallback_threads: usize,
    /// Largest number of `/dev/fuse` worker threads. Default 64.
    pub dev_max_threads: usize,
    /// Ask for FUSE over io_uring at all. `false` serves over `/dev/fuse`
    /// only (mode [`UringMode::DevFuse`]). Default `true`.
    pub enabled: bool,
    /// Fault injection for the transport's own tests (set only through
    /// the hidden setter of feature `fault-injection`); `None` in any real
    /// use. Private, so the struct's public shape doesn't depend on it.
    pub(crate) fault: Option<UringFault>,
    /// Async handlers (feature `async`): each ring thread runs an
    /// `async-io` runtime of this type and serves every request of its
    /// queues as a task calling `Server::handle_async`, so a queue's
    /// entries are served concurrently (up to
    /// [`UringConfig::entries_per_queue`] at once) and a request that waits
    /// (an io_uring read of a backing file, a thread pool job) doesn't hold
    /// the others up. `None` (the default): the synchronous loop, one
    /// request at a time per thread, with `Server::handle`.
    ///
    /// The field exists whatever the features, so that the struct has one
    /// shape; built without `async`, a session asked for a runtime is
    /// refused ([`crate::UringError::Config`]) rather than quietly served
    /// the synchronous way.
    pub runtime: Option<UringRuntime>,
}

/// The runtime of the ring threads in async mode ([`UringConfig::runtime`]).
///
/// The same choice as `async_io::RuntimeType` (the two convert into each
/// other with feature `async`), defined here so that the configuration
/// needs no `async-io` without that feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UringRuntime {
    /// A current-thread tokio runtime (file IO is blocking syscalls).
    Tokio,
    /// A current-thread tokio runtime whose reactor also drives a
    /// per-thread io_uring for file IO.
    IoUring,
}

impl UringRuntime {
    /// The runtime's name, as `async_io::RuntimeType` spells it (`"tokio"`,
    /// `"uring"`).
    pub fn as_str(self) -> &'static str {
        match self {
            UringRuntime::Tokio => "tokio",
            UringRuntime::IoUring => "uring",
        }
    }
}

impl fmt::Display for UringRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(feature = "async")]
impl From<async_io::RuntimeType> for UringRuntime {
    fn from(runtime: async_io::RuntimeType) -> Self {
        match runtime {
            async_io::RuntimeType::Tokio => UringRuntime::Tokio,
            async_io::RuntimeType::IoUring => UringRuntime::IoUring,
        }
    }
}

#[cfg(feature = "async")]
impl From<UringRuntime> for async_io::RuntimeType {
    fn from(runtime: UringRuntime) -> Self {
        match runtime {
            UringRuntime::Tokio => async_io::RuntimeType::Tokio,
            UringRuntime::IoUring => async_io::RuntimeType::IoUring,
        }
    }
}

impl Default for UringConfig {
    fn default() -> Self {
        Self {
            threads: 0,
            entries_per_queue: 8,
            bufs_per_queue: 4,
            pin_threads: true,
            defer_taskrun: true,
            dev_threads: 1,
            fallback_threads: fuse_transport_dev::SessionConfig::default().threads,
            dev_max_threads: 64,
            enabled: true,
            fault: None,
            runtime: None,
        }
    }
}

/// Builder-style setters, one per field: start from [`UringConfig::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl UringConfig {
    /// Sets the number of ring threads (`threads`; 0: one per queue).
    #[must_use]
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Sets the ring entries registered per queue (`entries_per_queue`).
    #[must_use]
    pub fn entries_per_queue(mut self, n: usize) -> Self {
        self.entries_per_queue = n;
        self
    }

    /// Sets the payload buffers per queue in the kernel's pool
    /// (`bufs_per_queue`; 0 turns pools off).
    #[must_use]
    pub fn bufs_per_queue(mut self, n: usize) -> Self {
        self.bufs_per_queue = n;
        self
    }

    /// Sets whether ring threads are pinned to their queues' CPUs
    /// (`pin_threads`).
    #[must_use]
    pub fn pin_threads(mut self, on: bool) -> Self {
        self.pin_threads = on;
        self
    }

    /// Sets whether rings ask for `IORING_SETUP_DEFER_TASKRUN`
    /// (`defer_taskrun`).
    #[must_use]
    pub fn defer_taskrun(mut self, on: bool) -> Self {
        self.defer_taskrun = on;
        self
    }

    /// Sets the `/dev/fuse` worker threads beside the rings (`dev_threads`).
    #[must_use]
    pub fn dev_threads(mut self, n: usize) -> Self {
        self.dev_threads = n;
        self
    }

    /// Sets the `/dev/fuse` worker threads of the fallback mode
    /// (`fallback_threads`).
    #[must_use]
    pub fn fallback_threads(mut self, n: usize) -> Self {
        self.fallback_threads = n;
        self
    }

    /// Sets the largest number of `/dev/fuse` worker threads
    /// (`dev_max_threads`).
    #[must_use]
    pub fn dev_max_threads(mut self, n: usize) -> Self {
        self.dev_max_threads = n;
        self
    }

    /// Sets whether to ask for FUSE over io_uring at all (`enabled`).
    #[must_use]
    pub fn enabled(mut self, on: bool) -> Self {
        self.enabled = on;
        self
    }

    /// Sets the fault to inject (the transport's own tests only; feature
    /// `fault-injection`, not part of the supported API).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    #[must_use]
    pub fn fault(mut self, fault: impl Into<Option<UringFault>>) -> Self {
        self.fault = fault.into();
        self
    }

    /// Sets the runtime of the ring threads (`runtime`; `None`: the
    /// synchronous loop). Needs feature `async` to serve: without it, a
    /// session with a runtime set is refused.
    #[must_use]
    pub fn runtime(mut self, runtime: impl Into<Option<UringRuntime>>) -> Self {
        self.runtime = runtime.into();
        self
    }
}

/// Which way a session serves requests, after the fallback chain
/// (pools → per-entry buffers → `/dev/fuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UringMode {
    /// io_uring with a kernel buffer pool on every queue.
    Pools {
        /// Payload buffers per queue.
        bufs_per_queue: usize,
    },
    /// io_uring with one payload buffer per entry (kernels without pools,
    /// pools turned off, or refused by the kernel).
    PerEntry,
    /// Everything over `/dev/fuse`: the kernel didn't offer io_uring (module
    /// switch off, old kernel), io_uring is unavailable, or the kernel
    /// refused to register the ring entries.
    DevFuse,
}

impl UringMode {
    /// Requests go through io_uring.
    pub fn uses_uring(&self) -> bool {
        !matches!(self, UringMode::DevFuse)
    }
}

impl fmt::Display for UringMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UringMode::Pools { bufs_per_queue } => {
                write!(f, "io_uring with buffer pools ({bufs_per_queue} per queue)")
            }
            UringMode::PerEntry => f.write_str("io_uring with a payload buffer per entry"),
            UringMode::DevFuse => f.write_str("/dev/fuse"),
        }
    }
}

#[cfg(all(test, feature = "async"))]
mod tests {
    use super::UringRuntime;

    #[test]
    fn uring_runtime_matches_async_io_runtime_type() {
        for rt in async_io::RuntimeType::ALL {
            let ours = UringRuntime::from(rt);
            assert_eq!(ours.as_str(), rt.as_str());
            assert_eq!(async_io::RuntimeType::from(ours), rt);
        }
    }
}
