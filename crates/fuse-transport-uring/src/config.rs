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
    /// `q % threads`); with more, thread `t` serves queue `t % queues`
    /// (so each queue has several) and a queue's
    /// [`UringConfig::entries_per_queue`] are split among its threads. 0
    /// (the default): [`UringConfig::threads_per_queue`] threads for every
    /// queue.
    pub threads: usize,
    /// Ring threads per queue when [`UringConfig::threads`] is 0. A
    /// synchronous ring thread answers one request at a time, so one
    /// thread per queue serialises every request issued on that queue's
    /// CPU (16 reads in flight from one process are served one after the
    /// other); each further thread registers entries of its own on the
    /// same queue, and the kernel hands a request to the entry that came
    /// back last, which is an idle thread's. 0 (the default): sized to the
    /// machine, see [`default_threads_per_queue`]. Async mode
    /// ([`UringConfig::runtime`]) serves a queue's entries concurrently on
    /// one thread and takes 1 for 0.
    pub threads_per_queue: usize,
    /// Entries registered per queue: how many requests of one queue can be
    /// in user space at once, split among the queue's threads (at least
    /// one each). 0 (the default): one per thread for synchronous ring
    /// threads (a second entry on a busy thread would only make a request
    /// wait for it while another thread of the queue is idle: the kernel
    /// hands a request to the entry that came back last, whichever thread
    /// it belongs to), 16 per thread in async mode
    /// ([`UringConfig::runtime`]), where one thread serves its entries
    /// concurrently.
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
    /// Register the buffer pools with every ring (ADD_BUFPOOL with
    /// `IORING_URING_CMD_FIXED`, Linux 7.3): the kernel then copies
    /// payloads through pages pinned once, at registration, instead of
    /// looking up and pinning the pool's user pages for every request. The
    /// pool memory stays pinned (locked memory, counted against
    /// `RLIMIT_MEMLOCK` once per ring without `CAP_IPC_LOCK`); where the
    /// registration is refused, pools stay unregistered (logged, and said
    /// by [`crate::UringSession::fallback_reason`]). Default `true`.
    pub registered_pools: bool,
    /// Zero copy (Linux 7.3, `FUSE_URING_ZERO_COPY`): queues whose READ
    /// and WRITE of files opened with `FOPEN_IO_URING_ZERO_COPY` come as
    /// the request's own pages, registered in the ring's buffer table, and
    /// are moved to and from backing files by fixed-buffer io_uring
    /// operations (`fuse_server::io`: a file system that answers through
    /// `write_from_file` / `read_to_file` gets it by setting that open
    /// flag). Needs pools and `CAP_SYS_ADMIN` in the initial user
    /// namespace; where the kernel refuses it, the queues are added
    /// without (logged, and said by
    /// [`crate::UringSession::fallback_reason`]). Default `true`.
    pub zero_copy: bool,
    /// Pin each ring thread to the CPU of its queue (or the CPUs of its
    /// queues), so it runs where its requests come from. Default `true`.
    pub pin_threads: bool,
    /// The nice value each ring thread sets itself (`setpriority(2)`) as it
    /// starts; `None` leaves the one it inherits. A ring thread and the
    /// process whose requests it serves take turns on one CPU (pinned, the
    /// kernel's queue for that CPU): with a weight above the client's, the
    /// thread preempts it as the request comes and hands the reply back
    /// before the client has gone to sleep, so the client stays on its CPU.
    /// At the same weight the scheduler often lets the client sleep first
    /// and wakes it on the other, idle CPU: a migration and a wake-up of a
    /// halted CPU per such request (docs/benchmarks.md, "Ring threads
    /// above their clients"). A value below the inherited one needs
    /// `CAP_SYS_NICE` or a `RLIMIT_NICE` that allows it; where refused, the
    /// thread keeps its nice (logged at debug). Default `Some(-5)`.
    pub nice: Option<i32>,
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
    /// With the io_uring runtime ([`UringRuntime::IoUring`]): one io_uring
    /// per ring thread carries both the FUSE commands and the file IO the
    /// file system submits through `async-io`, instead of a FUSE ring plus
    /// the runtime's own ring joined by an eventfd. A request whose file
    /// IO goes to the ring then costs no second ring's round trip: its
    /// reply is committed from the serving loop that reaped the IO's
    /// completion. Queues with buffer pools (Linux 7.3) keep two rings,
    /// logged: zero copy's fixed-buffer operations wait in the ring they
    /// run on, and pools on a shared ring hung in a VM test under load (not
    /// understood yet). Ignored without a runtime or with the tokio one.
    /// Default `false`.
    pub one_ring: bool,
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

/// The nice value of ring threads by default ([`UringConfig::nice`]): above
/// a client's weight (three times nice 0's), below what would let a busy
/// file system starve other work.
pub const DEFAULT_RING_NICE: i32 = -5;

impl Default for UringConfig {
    fn default() -> Self {
        Self {
            threads: 0,
            threads_per_queue: 0,
            entries_per_queue: 0,
            bufs_per_queue: 4,
            registered_pools: true,
            zero_copy: true,
            pin_threads: true,
            nice: Some(DEFAULT_RING_NICE),
            defer_taskrun: true,
            dev_threads: 1,
            fallback_threads: fuse_transport_dev::SessionConfig::default().threads,
            dev_max_threads: 64,
            enabled: true,
            fault: None,
            runtime: None,
            one_ring: false,
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

    /// Sets the ring threads per queue (`threads_per_queue`; 0: sized to
    /// the machine), used when `threads` is 0.
    #[must_use]
    pub fn threads_per_queue(mut self, n: usize) -> Self {
        self.threads_per_queue = n;
        self
    }

    /// Sets the ring entries registered per queue (`entries_per_queue`; 0:
    /// one per synchronous ring thread, 8 per async one).
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

    /// Sets whether buffer pools are registered with the rings
    /// ([`UringConfig::registered_pools`]).
    #[must_use]
    pub fn registered_pools(mut self, on: bool) -> Self {
        self.registered_pools = on;
        self
    }

    /// Sets whether queues ask for zero copy ([`UringConfig::zero_copy`]).
    #[must_use]
    pub fn zero_copy(mut self, on: bool) -> Self {
        self.zero_copy = on;
        self
    }

    /// Sets whether ring threads are pinned to their queues' CPUs
    /// (`pin_threads`).
    #[must_use]
    pub fn pin_threads(mut self, on: bool) -> Self {
        self.pin_threads = on;
        self
    }

    /// Sets the nice value of ring threads (`nice`; `None`: inherited).
    #[must_use]
    pub fn nice(mut self, nice: Option<i32>) -> Self {
        self.nice = nice;
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

    /// Sets [`UringConfig::one_ring`]: the io_uring runtime's ring carries
    /// the FUSE commands too.
    #[must_use]
    pub fn one_ring(mut self, on: bool) -> Self {
        self.one_ring = on;
        self
    }
}

/// Synchronous ring threads per queue that [`UringConfig::threads_per_queue`]
/// 0 stands for, on a machine with `queues` kernel queues (one per possible
/// CPU): 4 on machines of up to 4 CPUs, 2 on larger ones (16 ring
/// threads on 4 or 8 CPUs, twice the CPUs beyond).
///
/// Why: a ring thread blocked in a file system call (an `O_DIRECT` read
/// waiting for the disk) holds up every later request of its queue; with
/// several threads per queue the kernel hands the next request to an idle
/// one. Measured on 2 CPUs (fio, 4 KiB `O_DIRECT` random reads with 16 in
/// flight from one process, all on one queue): about 12k IOPS with one
/// thread per queue, about 33k with four, no gain from eight, and depth 1
/// unchanged. Large machines spread their clients over more queues, so
/// fewer threads per queue suffice there.
pub fn default_threads_per_queue(queues: usize) -> usize {
    (16 / queues.max(1)).clamp(2, 4)
}

/// Entries per async ring thread that [`UringConfig::entries_per_queue`]
/// 0 stands for. 16, because all of one process's requests land on the
/// queue of the CPU it runs on: with 8, a client with 16 `O_DIRECT` reads
/// in flight kept about 5 at the disk, with 16 about 9.5, as many as the
/// same reads issued natively (docs/benchmarks.md). Payload buffers are
/// touched only when used, so the RSS barely moves.
pub const DEFAULT_ASYNC_ENTRIES: usize = 16;

/// Which ring threads serve which queue, with how many entries each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadLayout {
    /// Ring threads in all.
    pub(crate) threads: usize,
    queues: usize,
    /// Entries asked for per queue; `None`: a fixed number per thread.
    entries_per_queue: Option<usize>,
    /// Entries per thread when `entries_per_queue` is `None`.
    auto_entries_per_thread: usize,
}

impl ThreadLayout {
    /// No threads, no queues (a session without rings).
    pub(crate) const NONE: Self = Self {
        threads: 0,
        queues: 0,
        entries_per_queue: None,
        auto_entries_per_thread: 0,
    };

    /// Kernel queues laid out.
    pub(crate) fn queues(&self) -> usize {
        self.queues
    }

    /// The layout `config` asks for on `queues` queues (at least one).
    pub(crate) fn new(queues: usize, config: &UringConfig) -> Self {
        let queues = queues.max(1);
        let async_mode = config.runtime.is_some();
        let per_queue = match config.threads_per_queue {
            0 if async_mode => 1,
            0 => default_threads_per_queue(queues),
            n => n,
        };
        let threads = match config.threads {
            0 => queues.saturating_mul(per_queue),
            n => n,
        };
        Self {
            threads,
            queues,
            entries_per_queue: (config.entries_per_queue > 0).then_some(config.entries_per_queue),
            auto_entries_per_thread: if async_mode { DEFAULT_ASYNC_ENTRIES } else { 1 },
        }
    }

    /// The threads serving queue `qid`.
    pub(crate) fn threads_of(&self, qid: usize) -> impl Iterator<Item = usize> {
        if self.threads == 0 {
            return (0..0).step_by(1);
        }
        // Fewer threads than queues: one thread; more: every `queues`th.
        let (first, end, step) = if self.threads <= self.queues {
            let t = qid % self.threads;
            (t, t + 1, 1)
        } else {
            (qid, self.threads, self.queues)
        };
        (first..end).step_by(step)
    }

    /// Entries thread `t` registers on each of its queues: a queue's
    /// entries split among its threads (rounded up, at least one each).
    pub(crate) fn entries_per_thread(&self, t: usize) -> usize {
        let Some(per_queue) = self.entries_per_queue else {
            return self.auto_entries_per_thread;
        };
        if self.threads <= self.queues {
            return per_queue;
        }
        let sharing = self.threads_of(t % self.queues).count();
        per_queue.div_ceil(sharing).max(1)
    }

    /// Entries registered on queue 0 (for display; other queues have as
    /// many, or one thread's share fewer where the threads don't divide
    /// evenly).
    pub(crate) fn entries_per_queue(&self) -> usize {
        self.threads_of(0).map(|t| self.entries_per_thread(t)).sum()
    }

    /// Ring threads serving queue 0 (for display).
    pub(crate) fn threads_per_queue(&self) -> usize {
        self.threads_of(0).count()
    }
}

/// Which way a session serves requests, after the fallback chain (zero
/// copy → registered pools → pools → per-entry buffers → `/dev/fuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UringMode {
    /// io_uring with a kernel buffer pool on every queue.
    Pools {
        /// Payload buffers per queue.
        bufs_per_queue: usize,
        /// The pools are registered with the rings
        /// ([`UringConfig::registered_pools`]).
        registered: bool,
        /// Every queue has zero copy ([`UringConfig::zero_copy`]).
        zero_copy: bool,
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
            UringMode::Pools {
                bufs_per_queue,
                registered,
                zero_copy,
            } => {
                let registered = if *registered { "registered " } else { "" };
                let zero_copy = if *zero_copy { " and zero copy" } else { "" };
                write!(
                    f,
                    "io_uring with {registered}buffer pools ({bufs_per_queue} per queue){zero_copy}"
                )
            }
            UringMode::PerEntry => f.write_str("io_uring with a payload buffer per entry"),
            UringMode::DevFuse => f.write_str("/dev/fuse"),
        }
    }
}

#[cfg(test)]
mod layout_tests {
    use super::{ThreadLayout, UringConfig};

    fn layout(queues: usize, threads: usize, entries: usize) -> ThreadLayout {
        let config = UringConfig::default()
            .threads(threads)
            .threads_per_queue(1)
            .entries_per_queue(entries);
        ThreadLayout::new(queues, &config)
    }

    fn served(l: &ThreadLayout, queues: usize) -> Vec<Vec<usize>> {
        (0..queues).map(|q| l.threads_of(q).collect()).collect()
    }

    #[test]
    fn fewer_threads_than_queues_share_queues_round_robin() {
        let l = layout(4, 3, 8);
        assert_eq!(served(&l, 4), vec![vec![0], vec![1], vec![2], vec![0]]);
        assert_eq!(l.entries_per_thread(0), 8);
        assert_eq!(l.entries_per_queue(), 8);
    }

    #[test]
    fn one_thread_per_queue_by_default_count() {
        let l = layout(2, 0, 8);
        assert_eq!(l.threads, 2);
        assert_eq!(served(&l, 2), vec![vec![0], vec![1]]);
        assert_eq!(l.threads_per_queue(), 1);
    }

    #[test]
    fn more_threads_than_queues_split_each_queues_entries() {
        let l = layout(2, 8, 8);
        assert_eq!(served(&l, 2), vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        assert_eq!(l.entries_per_thread(3), 2);
        assert_eq!(l.entries_per_queue(), 8);
        assert_eq!(l.threads_per_queue(), 4);
        // Uneven: queue 0 gets threads 0, 2, 4; queue 1 threads 1, 3.
        let l = layout(2, 5, 4);
        assert_eq!(served(&l, 2), vec![vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(l.entries_per_thread(0), 2);
        assert_eq!(l.entries_per_thread(1), 2);
        // Never fewer than one entry per thread.
        let l = layout(1, 4, 1);
        assert_eq!(l.entries_per_thread(2), 1);
        assert_eq!(l.entries_per_queue(), 4);
    }

    #[test]
    fn entries_default_to_one_per_sync_thread() {
        let config = UringConfig::default().threads_per_queue(4);
        let l = ThreadLayout::new(2, &config);
        assert_eq!(l.threads, 8);
        assert_eq!(l.entries_per_thread(5), 1);
        assert_eq!(l.entries_per_queue(), 4);
        let l = ThreadLayout::new(4, &UringConfig::default().threads(2));
        assert_eq!(l.entries_per_thread(1), 1);
    }

    #[test]
    fn async_threads_default_to_one_per_queue_with_eight_entries() {
        let config = UringConfig::default().runtime(super::UringRuntime::Tokio);
        let l = ThreadLayout::new(2, &config);
        assert_eq!(l.threads, 2);
        assert_eq!(l.entries_per_thread(0), super::DEFAULT_ASYNC_ENTRIES);
    }

    #[test]
    fn default_threads_per_queue_follows_the_machine() {
        assert_eq!(super::default_threads_per_queue(1), 4);
        assert_eq!(super::default_threads_per_queue(2), 4);
        assert_eq!(super::default_threads_per_queue(4), 4);
        assert_eq!(super::default_threads_per_queue(8), 2);
        assert_eq!(super::default_threads_per_queue(64), 2);
        assert_eq!(super::default_threads_per_queue(0), 4);
    }

    #[test]
    fn no_rings_lay_out_nothing() {
        let l = ThreadLayout::NONE;
        assert_eq!(l.threads_of(0).count(), 0);
        assert_eq!(l.entries_per_queue(), 0);
        assert_eq!(l.threads_per_queue(), 0);
    }

    #[test]
    fn threads_per_queue_multiplies_the_queues() {
        let config = UringConfig::default().threads_per_queue(3);
        let l = ThreadLayout::new(2, &config);
        assert_eq!(l.threads, 6);
        assert_eq!(l.threads_per_queue(), 3);
    }
}

#[cfg(all(test, feature = "async"))]
mod tests {
    use super::UringRuntime;

    #[test]
    fn one_ring_is_opt_in_and_keeps_the_async_layout() {
        assert!(!super::UringConfig::default().one_ring);
        let config = super::UringConfig::default()
            .runtime(super::UringRuntime::IoUring)
            .one_ring(true);
        assert!(config.one_ring);
        // Still one ring thread per queue, serving its entries as tasks.
        let l = super::ThreadLayout::new(4, &config);
        assert_eq!(l.threads, 4);
        assert_eq!(l.entries_per_thread(0), super::DEFAULT_ASYNC_ENTRIES);
    }

    #[test]
    fn uring_runtime_matches_async_io_runtime_type() {
        for rt in async_io::RuntimeType::ALL {
            let ours = UringRuntime::from(rt);
            assert_eq!(ours.as_str(), rt.as_str());
            assert_eq!(async_io::RuntimeType::from(ours), rt);
        }
    }
}
