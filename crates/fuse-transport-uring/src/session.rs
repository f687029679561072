//! [`UringSession`]: INIT over `/dev/fuse`, then the rings, with the
//! fallback chain pools → per-entry buffers → `/dev/fuse`.

use crate::cmd;
use crate::config::{ThreadLayout, UringConfig, UringMode, UringRuntime};
use crate::queue::{self, Handshake, PoolSlice, QueuePlan, Ring, ThreadPlan};
use crate::stats::{Counters, TransportMemory, UringStats};
use crate::sys::{self, EventFd, Mapping};
use fuse_abi::{InitFlags, Opcode};
use fuse_server::{Negotiated, Notifier, Server, Session};
use fuse_transport_dev::{
    DevSession, Mount, MountError, MountOptions, SessionConfig, SessionError,
};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

/// Errors of starting a [`UringSession`].
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    /// Mounting, INIT or the `/dev/fuse` workers failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The connection agreed to FUSE over io_uring, the rings could not be
    /// set up, and the kernel could not be switched back to `/dev/fuse`
    /// either (the mount would hang; it was given up).
    #[error("setting up FUSE over io_uring: {0}")]
    Setup(String),
    /// The configuration asks for what this build cannot do (an async
    /// runtime without feature `async`); nothing was mounted or answered.
    #[error("unsupported configuration: {0}")]
    Config(String),
}

impl From<MountError> for UringError {
    fn from(e: MountError) -> Self {
        UringError::Session(SessionError::Mount(e))
    }
}

/// What the ring threads share.
pub(crate) struct Shared {
    pub(crate) server: Arc<Server>,
    pub(crate) stop: AtomicBool,
    pub(crate) counters: Counters,
}

/// A mount served over FUSE-over-io_uring: ring threads with an io_uring
/// each, pinned to the CPU of their kernel queue (one queue per possible
/// CPU; by default several synchronous threads per queue, see
/// [`UringConfig::threads_per_queue`]), with `/dev/fuse` kept for what the
/// kernel still sends there.
///
/// Starting it:
/// 1. `FUSE_OVER_IO_URING` is added to the server's INIT wishes (after a
///    check that this process can create io_urings at all), the file system
///    is mounted and INIT is answered over `/dev/fuse`
///    ([`DevSession::from_mount`], which also starts the `/dev/fuse`
///    workers: the kernel sends FORGET, BATCH_FORGET and INTERRUPT there
///    even with the rings in use; notifications go out there too).
/// 2. If the kernel offered `FUSE_HAS_IO_URING_BUFPOOL` and
///    [`UringConfig::bufs_per_queue`] is not 0, one mapping is made for all
///    queues' pools and each queue gets its slice with ADD_QUEUE then
///    ADD_BUFPOOL.
/// 3. The ring threads start (pinned to their queues' CPUs), each registers
///    its entries with REGISTER (pooled entries without a payload buffer,
///    the others with one of `uring_payload_size()` bytes). Queue 0 goes
///    last, once every other queue is registered: the kernel switches the
///    connection to the rings when every queue has an entry, and until then
///    blocks new requests, so a failure before that point can still fall
///    back to `/dev/fuse`.
///
/// Each step that can't be taken is logged once with its reason and falls
/// back: pools → per-entry buffers → `/dev/fuse`; [`UringSession::mode`]
/// and [`UringSession::fallback_reason`] tell where it ended. Serving
/// everything over `/dev/fuse`, the session runs
/// [`UringConfig::fallback_threads`] workers, as a plain `/dev/fuse`
/// session would, instead of [`UringConfig::dev_threads`].
///
/// Ending it: [`Session::stop`] unmounts and makes every thread return;
/// each ring thread hands in the replies it wrote and closes its ring,
/// which cancels its entries waiting in the kernel. An unmount from outside
/// makes the kernel return every entry (ENOTCONN), after which the threads
/// end. [`Session::wait`] joins the threads, then closes the `/dev/fuse`
/// descriptors (aborting what is left of the connection, so no client
/// waits on a served-by-nobody mount) and only then unmaps the buffers.
/// A ring thread that ends abnormally while the session serves (a panic in
/// the transport, an error of its ring; a panicking file system only fails
/// its request with `EIO`) stops the whole session from
/// [`Session::wait`], which then returns the error: its queue would
/// otherwise serve nothing, and every request issued on that CPU would
/// wait forever.
pub struct UringSession {
    /// The `/dev/fuse` side (INIT, interrupts, forgets; everything in the
    /// fallback mode). Shared, so that `stop` reaches it even while `wait`
    /// waits for it.
    dev: Mutex<Option<Arc<DevSession>>>,
    server: Arc<Server>,
    mountpoint: PathBuf,
    shared: Arc<Shared>,
    mode: UringMode,
    fallback_reason: Option<String>,
    handles: Mutex<Vec<JoinHandle<io::Result<()>>>>,
    /// One message per ring thread as it ends: whether it ended abnormally
    /// (a panic in the transport, an error of its ring). See
    /// [`Session::wait`].
    ended: Mutex<Option<mpsc::Receiver<bool>>>,
    ended_tx: mpsc::Sender<bool>,
    wakes: Vec<Arc<EventFd>>,
    layout: Layout,
}

/// Tells [`UringSession::wait`] that a ring thread ended, and how; sent
/// when dropped, so a thread that unwinds from a panic sends it too.
struct ThreadEnd {
    tx: mpsc::Sender<bool>,
    clean: bool,
}

impl Drop for ThreadEnd {
    fn drop(&mut self) {
        let _ = self.tx.send(!self.clean);
    }
}

/// How the rings are laid out (for display).
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    /// Which threads serve which queue (`None` without rings).
    rings: Option<ThreadLayout>,
    pooled_queues: usize,
    /// Async mode: the runtime type's name.
    async_runtime: Option<&'static str>,
    /// The runtime's ring carries the FUSE commands too.
    one_ring: bool,
}

/// Refuses what this build cannot serve.
fn check_config(config: &UringConfig) -> Result<(), UringError> {
    if cfg!(not(feature = "async")) {
        if let Some(runtime) = config.runtime {
            return Err(UringError::Config(format!(
                "UringConfig::runtime ({runtime}) needs feature `async` of fuse-transport-uring"
            )));
        }
    }
    Ok(())
}

impl UringSession {
    /// Mounts `mountpoint` and serves it (see the type's documentation).
    pub fn mount(
        server: Server,
        mountpoint: &Path,
        options: &MountOptions,
        config: UringConfig,
    ) -> Result<Self, UringError> {
        // DevSession::mount: synchronous INIT where the kernel offers it
        // (the rings are set up after INIT either way).
        Self::start(server, config, |server, dev_config| {
            DevSession::mount(server, mountpoint, options, dev_config)
        })
    }

    /// Serves an existing mount whose INIT has not been answered yet.
    pub fn from_mount(
        server: Server,
        mount: Mount,
        config: UringConfig,
    ) -> Result<Self, UringError> {
        Self::start(server, config, |server, dev_config| {
            DevSession::from_mount(server, mount, dev_config)
        })
    }

    /// Asks for FUSE over io_uring in INIT, gets the `/dev/fuse` session
    /// (INIT answered) from `connect`, and starts the rings on it.
    fn start(
        server: Server,
        config: UringConfig,
        connect: impl FnOnce(Server, SessionConfig) -> Result<DevSession, SessionError>,
    ) -> Result<Self, UringError> {
        check_config(&config)?;
        let mut server = server;
        let mut reason = None;
        let want_uring = if !config.enabled {
            reason = Some("io_uring turned off in UringConfig".to_string());
            false
        } else {
            match queue::build_ring(2, false) {
                Ok(_) => true,
                Err(e) => {
                    reason = Some(format!("this process cannot create an io_uring: {e}"));
                    false
                }
            }
        };
        if want_uring {
            let mut init = *server.init_config();
            init.flags |= InitFlags::OVER_IO_URING;
            server = server.with_init_config(init);
        }
        // Known to serve everything over /dev/fuse: all its workers at once.
        let fallback_threads = config.fallback_threads.max(1);
        let dev = connect(
            server,
            SessionConfig::default()
                .threads(if want_uring {
                    config.dev_threads.max(1)
                } else {
                    fallback_threads
                })
                .max_threads(config.dev_max_threads.max(1)),
        )?;
        let server = dev.server().clone();
        let mountpoint = dev.mountpoint().to_path_buf();
        let negotiated = server
            .negotiated()
            .copied()
            .ok_or_else(|| UringError::Setup("the connection ended before INIT".to_string()))?;
        let nr_queues = sys::possible_cpus().map_or(1, |c| c.len());
        let shared = Arc::new(Shared {
            server: server.clone(),
            stop: AtomicBool::new(false),
            counters: Counters::new(nr_queues),
        });
        let (ended_tx, ended_rx) = mpsc::channel();
        let mut session = Self {
            dev: Mutex::new(None),
            server,
            mountpoint,
            shared,
            mode: UringMode::DevFuse,
            fallback_reason: None,
            handles: Mutex::new(Vec::new()),
            ended: Mutex::new(Some(ended_rx)),
            ended_tx,
            wakes: Vec::new(),
            layout: Layout::default(),
        };

        if want_uring {
            if negotiated.over_io_uring() {
                // The DevSession keeps this fd open until its `wait` ends.
                let dev_fd = dev
                    .dev_fd()
                    .map_err(|e| UringError::Setup(format!("the /dev/fuse session ended: {e}")))?
                    .as_raw_fd();
                match session.start_rings(dev_fd, &negotiated, &config) {
                    Ok(()) => {}
                    Err(why) => {
                        tracing::warn!("FUSE over io_uring falls back to /dev/fuse: {why}");
                        if let Err(e) = switch_kernel_to_dev_fuse(dev_fd) {
                            return Err(UringError::Setup(format!(
                                "{why}; and the kernel could not be switched back to /dev/fuse: {e}"
                            )));
                        }
                        reason = Some(why);
                    }
                }
            } else {
                let why = not_offered_reason(&negotiated);
                tracing::warn!("FUSE over io_uring falls back to /dev/fuse: {why}");
                reason = Some(why);
            }
        } else if let Some(why) = &reason {
            tracing::warn!("FUSE over io_uring falls back to /dev/fuse: {why}");
        }
        if !session.mode.uses_uring() {
            session.fallback_reason = Some(reason.unwrap_or_else(|| "unknown".to_string()));
            // The workers serve every request now, not just forgets and
            // interrupts: as many as a plain /dev/fuse session has.
            dev.start_workers(fallback_threads)
                .map_err(|e| UringError::Session(SessionError::Worker(e)))?;
        }
        tracing::info!(
            mountpoint = %session.mountpoint.display(),
            mode = %session.mode,
            "serving"
        );
        *session.dev.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(dev));
        Ok(session)
    }

    /// Pools (if offered), ring threads, handshake. On error the threads
    /// are gone again and the caller falls back to `/dev/fuse`.
    fn start_rings(
        &mut self,
        dev_fd: RawFd,
        negotiated: &Negotiated,
        config: &UringConfig,
    ) -> Result<(), String> {
        let cpus = sys::possible_cpus().map_err(|e| format!("listing possible CPUs: {e}"))?;
        let nr_queues = cpus.len();
        if nr_queues > u16::MAX as usize + 1 {
            return Err(format!("{nr_queues} queues exceed the 16-bit queue id"));
        }
        let kernel_payload = kernel_payload_size(negotiated);
        let entry_payload = self
            .server
            .uring_payload_size()
            .unwrap_or(0)
            .max(kernel_payload);

        // Buffer pools, where offered and wanted.
        let mut pools: Vec<Option<PoolSlice>> = vec![None; nr_queues];
        let bufs = config.bufs_per_queue;
        if bufs == 0 {
            tracing::info!(
                "buffer pools turned off (bufs_per_queue 0): a payload buffer per entry"
            );
        } else if !negotiated
            .kernel
            .flags
            .contains(InitFlags::HAS_IO_URING_BUFPOOL)
        {
            // Normal before Linux 7.3, and nothing the user asked for is
            // lost: information, not a warning.
            let why = "the kernel did not offer FUSE_HAS_IO_URING_BUFPOOL (Linux 7.3+)";
            tracing::info!("{why}: a payload buffer per entry instead of buffer pools");
            self.fallback_reason = Some(why.to_string());
        } else if let Err(why) = self.add_pools(
            dev_fd,
            bufs,
            kernel_payload,
            config.registered_pools,
            config.zero_copy,
            &mut pools,
        ) {
            let pooled = pools.iter().filter(|p| p.is_some()).count();
            tracing::warn!(
                "buffer pools refused ({why}): a payload buffer per entry on {} of {nr_queues} queues",
                nr_queues - pooled
            );
            self.fallback_reason = Some(format!("buffer pools refused: {why}"));
        }
        let pooled_queues = pools.iter().filter(|p| p.is_some()).count();
        let bufs_per_queue = pools
            .iter()
            .flatten()
            .next()
            .map_or(0, |p| p.len / p.buf_size);
        let registered = pools.iter().flatten().any(|p| p.registered);
        let zero_copy = pooled_queues > 0 && pools.iter().flatten().all(|p| p.zero_copy);

        let one_ring = config.one_ring && config.runtime == Some(UringRuntime::IoUring);
        let one_ring = one_ring
            && {
                let pooled = pools.iter().flatten().next().is_some();
                if pooled {
                    // Zero copy: a zero-copy operation waits for its completion
                    // in the ring it runs on, taking every other completion off
                    // it meanwhile, which on a shared ring would be the
                    // runtime's too. Pools without zero copy: served on one ring
                    // they passed three of five VM runs and hung in two (under
                    // load, cause not found yet), so they keep two rings too.
                    tracing::info!(
                    "one ring per queue not used with buffer pools (zero copy needs its own ring; pools on a shared ring are not trusted yet): the FUSE ring and the runtime's ring stay apart"
                );
                }
                !pooled
            };
        let layout = ThreadLayout::new(nr_queues, config);
        let mut plans: Vec<ThreadPlan> = Vec::with_capacity(layout.threads);
        for t in 0..layout.threads {
            let wake = Arc::new(EventFd::new().map_err(|e| format!("creating an eventfd: {e}"))?);
            self.wakes.push(wake.clone());
            plans.push(ThreadPlan {
                queues: Vec::new(),
                cpus: Vec::new(),
                nice: config.nice,
                entries_per_queue: layout.entries_per_thread(t),
                payload_size: entry_payload,
                dev_fd,
                defer_taskrun: config.defer_taskrun,
                wake,
                fault: config.fault,
                #[cfg(feature = "async")]
                runtime: config.runtime.map(Into::into),
                #[cfg(feature = "async")]
                one_ring,
            });
        }
        for (qid, pool) in pools.into_iter().enumerate() {
            for t in layout.threads_of(qid) {
                let plan = &mut plans[t];
                // The kernel picks the queue by the CPU number a request was
                // issued on, so queue q belongs to CPU q.
                if config.pin_threads && cpus.contains(&qid) {
                    plan.cpus.push(qid);
                }
                plan.queues.push(QueuePlan {
                    qid: qid as u16,
                    pool: pool.clone(),
                });
            }
        }
        self.layout = Layout {
            rings: Some(layout),
            pooled_queues,
            async_runtime: config.runtime.map(UringRuntime::as_str),
            one_ring,
        };

        let (report_tx, report_rx) = mpsc::channel();
        // One go per thread serving queue 0 (they all register it last).
        let mut go_txs = Vec::new();
        let mut spawned = 0;
        let mut failure = None;
        for (t, plan) in plans.into_iter().enumerate() {
            let go = if plan.queues.iter().any(|q| q.qid == 0) {
                let (go_tx, go_rx) = mpsc::channel();
                go_txs.push(go_tx);
                Some(go_rx)
            } else {
                None
            };
            let handshake = Handshake {
                report: report_tx.clone(),
                go,
            };
            let shared = self.shared.clone();
            let end = ThreadEnd {
                tx: self.ended_tx.clone(),
                clean: false,
            };
            let spawn = std::thread::Builder::new()
                .name(format!("fuse-uring-{t}"))
                .spawn(move || {
                    // The whole guard moves in (not just the field set
                    // below), so that it drops on this thread.
                    let mut end = end;
                    let result = queue::run(plan, shared, handshake);
                    end.clean = result.is_ok();
                    result
                });
            match spawn {
                Ok(handle) => {
                    self.handles
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(handle);
                    spawned += 1;
                }
                Err(e) => {
                    failure = Some(format!("starting a ring thread: {e}"));
                    break;
                }
            }
        }
        drop(report_tx);
        // Round one: every queue but queue 0 registered.
        collect_reports(&report_rx, spawned, &mut failure);
        // Round two: queue 0, which makes the ring ready. Threads that
        // never started hold no go receiver: their send fails, harmlessly.
        if failure.is_none() {
            let started = go_txs.iter().filter(|go| go.send(true).is_ok()).count();
            collect_reports(&report_rx, started, &mut failure);
        } else {
            for go in &go_txs {
                let _ = go.send(false);
            }
        }
        if let Some(why) = failure {
            self.end_rings();
            self.layout = Layout::default();
            return Err(why);
        }
        self.mode = if pooled_queues == nr_queues {
            UringMode::Pools {
                bufs_per_queue,
                registered,
                zero_copy,
            }
        } else {
            UringMode::PerEntry
        };
        Ok(())
    }

    /// One mapping for every queue's pool; ADD_QUEUE then ADD_BUFPOOL per
    /// queue, before any of its entries registers. Fills `pools` for the
    /// queues that got one (a failure leaves the rest per-entry).
    ///
    /// With `register`, the pools are registered where the kernel takes a
    /// registration of the whole mapping (tried on the setup ring first:
    /// each ring thread registers it again, at [`cmd::POOL_BUF_INDEX`],
    /// before its entries, and a refusal there would end io_uring for the
    /// connection, so only a mapping the kernel took once is registered).
    ///
    /// With `zero_copy`, queues are added with `FUSE_URING_ZERO_COPY`
    /// while the kernel takes it; once it refuses (`EPERM` without
    /// `CAP_SYS_ADMIN`, `EINVAL` from a kernel without the flag), the
    /// queue and the rest are added without, and the reason logged once.
    fn add_pools(
        &mut self,
        dev_fd: RawFd,
        bufs: usize,
        buf_size: usize,
        register: bool,
        zero_copy: bool,
        pools: &mut [Option<PoolSlice>],
    ) -> Result<(), String> {
        // ADD_BUFPOOL takes a 32-bit length.
        let bufs = bufs.min(u32::MAX as usize / buf_size.max(1)).max(1);
        let slice_len = bufs * buf_size;
        let total = slice_len
            .checked_mul(pools.len())
            .ok_or_else(|| "pool size overflows".to_string())?;
        let region = Arc::new(
            Mapping::new(total).map_err(|e| format!("mapping {total} bytes of pools: {e}"))?,
        );
        let mut ring = setup_ring(dev_fd)?;
        let registered = register && {
            match queue::register_pool(&ring, &region) {
                Ok(()) => {
                    // Only a trial: the ring threads register their own.
                    let _ = ring.submitter().unregister_buffers();
                    true
                }
                Err(e) => {
                    let why = format!(
                        "registering the buffer pools ({} bytes) with an io_uring: {e}",
                        region.len()
                    );
                    tracing::info!("{why}; pools stay unregistered");
                    self.fallback_reason = Some(why);
                    false
                }
            }
        };
        let fixed = registered.then_some(cmd::POOL_BUF_INDEX);
        let mut zero_copy = zero_copy;
        if !zero_copy {
            tracing::info!("zero copy turned off (UringConfig::zero_copy)");
        }
        for (qid, slot) in pools.iter_mut().enumerate() {
            let start = qid * slice_len;
            if zero_copy {
                if let Err(e) = run_setup_command(&mut ring, cmd::add_queue(qid as u16, 1, true)) {
                    let why = zero_copy_refused(&e);
                    tracing::info!(
                        "zero copy refused for queue {qid} ({why}): READ and WRITE data is copied"
                    );
                    self.fallback_reason
                        .get_or_insert_with(|| format!("zero copy refused: {why}"));
                    zero_copy = false;
                }
            }
            if !zero_copy {
                run_setup_command(&mut ring, cmd::add_queue(qid as u16, 1, false))
                    .map_err(|e| format!("FUSE_IO_URING_CMD_ADD_QUEUE for queue {qid}: {e}"))?;
            }
            let uaddr = region.as_ptr() as u64 + start as u64;
            let add = cmd::add_bufpool(qid as u16, uaddr, slice_len as u32, 2, fixed);
            run_setup_command(&mut ring, add)
                .map_err(|e| format!("FUSE_IO_URING_CMD_ADD_BUFPOOL for queue {qid}: {e}"))?;
            if qid == 0 {
                // The kernel has the address now: the mapping lives as long
                // as the session (and is counted in its memory).
                self.shared.counters.track(region.clone());
            }
            self.shared
                .counters
                .bufpools_added
                .fetch_add(1, Ordering::Relaxed);
            *slot = Some(PoolSlice {
                region: region.clone(),
                start,
                len: slice_len,
                buf_size,
                registered,
                zero_copy,
            });
        }
        Ok(())
    }

    /// Stops and joins the ring threads (after a failed setup).
    fn end_rings(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for w in &self.wakes {
            w.signal();
        }
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.join();
        }
        // Their ends are no news to `wait`, which may see new ring threads
        // (the next step of the fallback chain) or none.
        if let Some(ended) = self
            .ended
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            while ended.try_recv().is_ok() {}
        }
        // Every ring is closed: nothing can reach the buffers any more.
        self.shared.counters.release_mappings();
        self.wakes.clear();
        self.shared.stop.store(false, Ordering::Release);
    }

    /// Ring threads serving the queues (0 in the fallback mode).
    pub fn ring_threads(&self) -> usize {
        self.layout.rings.map_or(0, |r| r.threads)
    }

    /// Entries registered on each queue, all its threads together (on
    /// queue 0, where threads don't divide evenly; 0 in the fallback mode).
    pub fn entries_per_queue(&self) -> usize {
        self.layout.rings.map_or(0, |r| r.entries_per_queue())
    }

    /// Which way requests are served.
    pub fn mode(&self) -> UringMode {
        self.mode
    }

    /// Why the session took its last fallback step: in
    /// [`UringMode::DevFuse`] why it doesn't use io_uring, in
    /// [`UringMode::PerEntry`] why it has no buffer pools (`None` when
    /// pools were turned off with `bufs_per_queue: 0`), with unregistered
    /// pools why they aren't registered (`None` when turned off with
    /// `registered_pools: false`); `None` with registered pools.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// What went through the rings so far.
    pub fn stats(&self) -> UringStats {
        self.shared
            .counters
            .snapshot(self.mode, self.layout.pooled_queues)
    }

    /// Requests of `opcode` served through the rings (compare with the
    /// server's [`fuse_server::RequestCounters`], which counts both
    /// transports).
    pub fn ring_requests(&self, opcode: Opcode) -> u64 {
        self.shared.counters.opcode(opcode)
    }

    /// The transport's buffer memory: mapped (reserved) and resident bytes
    /// of the entry headers, per-entry payload buffers and buffer pools.
    pub fn memory(&self) -> TransportMemory {
        self.shared.counters.memory()
    }

    /// A notifier for this connection (notifications go out over
    /// `/dev/fuse`); `None` once the session has ended.
    pub fn notifier(&self) -> Option<Notifier> {
        self.dev
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|dev| dev.notifier().ok())
    }

    fn threads_running(&self) -> bool {
        !self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

impl Session for UringSession {
    fn transport(&self) -> String {
        let dev_workers = self
            .dev
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |dev| dev.worker_count());
        let l = self.layout;
        let rings = l.rings.unwrap_or(ThreadLayout::NONE);
        match self.mode {
            UringMode::DevFuse => format!(
                "/dev/fuse, {dev_workers} worker {} (no io_uring: {})",
                if dev_workers == 1 {
                    "thread"
                } else {
                    "threads"
                },
                self.fallback_reason.as_deref().unwrap_or("unknown")
            ),
            mode => format!(
                "io_uring, {} on {}{}, {} per queue{}, {}; /dev/fuse for forgets and interrupts ({})",
                counted(rings.queues(), "queue"),
                counted(rings.threads, "thread"),
                match rings.threads_per_queue() {
                    n if n > 1 => format!(" ({n} per queue)"),
                    _ => String::new(),
                },
                counted(rings.entries_per_queue(), "entry"),
                match l.async_runtime {
                    Some(rt) if l.one_ring => format!(
                        " served concurrently on a {rt} runtime whose ring carries the FUSE commands"
                    ),
                    Some(rt) => format!(" served concurrently on a {rt} runtime"),
                    None => String::new(),
                },
                match mode {
                    UringMode::Pools {
                        bufs_per_queue,
                        registered,
                        zero_copy,
                    } => format!(
                        "{}buffer pools of {bufs_per_queue} buffers per queue{}",
                        if registered { "registered " } else { "" },
                        if zero_copy { ", zero copy" } else { "" }
                    ),
                    _ if l.pooled_queues > 0 => format!(
                        "buffer pools on {} queues, a payload buffer per entry on the others",
                        l.pooled_queues
                    ),
                    _ => "a payload buffer per entry".to_string(),
                },
                counted(dev_workers, "worker"),
            ),
        }
    }

    fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    fn server(&self) -> &Arc<Server> {
        &self.server
    }

    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.server.stop_waits();
        if let Some(dev) = self.dev.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            dev.stop();
        }
        for w in &self.wakes {
            w.signal();
        }
    }

    fn wait(&self) -> io::Result<()> {
        let mut first_error = None;
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|e| e.into_inner()));
        // A ring thread that ends abnormally while the session serves (a
        // panic in the transport, an error of its ring) leaves its queue
        // without entries, and every request issued on that queue's CPU
        // would wait forever: the whole session stops instead, so that
        // clients get an error and the mount goes (fail-stop).
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(ended) = ended {
            for _ in 0..handles.len() {
                match ended.recv() {
                    Ok(true) if !self.shared.stop.load(Ordering::Acquire) => {
                        tracing::error!(
                            "a ring thread ended abnormally while serving: stopping the session \
                             (its queue could serve no request)"
                        );
                        Session::stop(self);
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!("ring thread failed: {e}");
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(io::Error::other("a ring thread panicked"));
                }
            }
        }
        // Every ring is closed now. The /dev/fuse side next; dropping it
        // closes the descriptors, which aborts whatever is left of the
        // connection (a lazily unmounted mount with open files).
        // The ring threads may end before `stop` reached the /dev/fuse side
        // (a stop flag seen early): it stays reachable while we wait for it.
        let dev = self.dev.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(dev) = dev {
            if let Err(e) = dev.wait() {
                first_error.get_or_insert(e);
            }
            drop(dev);
            // The last reference: dropping it closes the descriptors.
            self.dev.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        // No ring and no connection left: the buffers can go.
        self.shared.counters.release_mappings();
        first_error.map_or(Ok(()), Err)
    }

    fn notifier(&self) -> Option<Notifier> {
        UringSession::notifier(self)
    }
}

impl Drop for UringSession {
    fn drop(&mut self) {
        let dev_alive = self.dev.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        if self.threads_running() || dev_alive {
            self.stop();
            if let Err(e) = self.wait() {
                tracing::warn!("session ended with an error: {e}");
            }
        }
    }
}

/// Why the kernel's INIT didn't lead to FUSE over io_uring.
fn not_offered_reason(negotiated: &Negotiated) -> String {
    if negotiated.kernel.flags.contains(InitFlags::OVER_IO_URING) {
        return "the file system's init turned FUSE_OVER_IO_URING off".to_string();
    }
    match sys::uring_module_switch() {
        Some(false) => format!(
            "the kernel did not offer FUSE_OVER_IO_URING: {} is N (echo Y > {0} as root)",
            sys::ENABLE_URING_PARAM
        ),
        None => format!(
            "the kernel did not offer FUSE_OVER_IO_URING (no {}: a kernel without FUSE over io_uring, before 6.14 or built without CONFIG_FUSE_IO_URING)",
            sys::ENABLE_URING_PARAM
        ),
        Some(true) => format!(
            "the kernel did not offer FUSE_OVER_IO_URING (protocol 7.{})",
            negotiated.kernel.minor
        ),
    }
}

/// The kernel's `max_payload_sz` of the ring, as `fuse_uring_create()`
/// computes it from the connection: `max(FUSE_MIN_READ_BUFFER, max_write,
/// max_pages * PAGE_SIZE)`, with `max_pages` as the kernel clamped it
/// (`fs.fuse.max_pages_limit`). Pool buffers have exactly this size.
pub(crate) fn kernel_payload_size(n: &Negotiated) -> usize {
    // The server records `max_pages` as the kernel clamped it.
    n.uring_payload_size()
}

/// A plain ring on the calling thread for one-shot commands.
fn setup_ring(dev_fd: RawFd) -> Result<Ring, String> {
    let ring = queue::build_ring(4, false).map_err(|e| format!("creating an io_uring: {e}"))?;
    ring.submitter()
        .register_files(&[dev_fd])
        .map_err(|e| format!("registering /dev/fuse with an io_uring: {e}"))?;
    Ok(ring)
}

/// Why the kernel refused an ADD_QUEUE with `FUSE_URING_ZERO_COPY`.
fn zero_copy_refused(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) => {
            "the daemon lacks CAP_SYS_ADMIN in the initial user namespace (EPERM)".to_string()
        }
        Some(libc::EINVAL) => {
            "the kernel doesn't know FUSE_URING_ZERO_COPY (EINVAL; Linux 7.3+)".to_string()
        }
        _ => format!("FUSE_IO_URING_CMD_ADD_QUEUE: {e}"),
    }
}

/// Submits one command that completes at once (ADD_QUEUE, ADD_BUFPOOL, a
/// refused REGISTER) and returns its result.
fn run_setup_command(ring: &mut Ring, sqe: io_uring::squeue::Entry128) -> io::Result<i32> {
    let want = sqe.get_user_data();
    // SAFETY: the SQE carries no pointer the kernel dereferences after
    // submission (ADD_BUFPOOL's address is only recorded).
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| io::Error::other("submission queue full"))?;
    let ts = io_uring::types::Timespec::from(std::time::Duration::from_secs(1));
    for _ in 0..10 {
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ETIME)) => continue,
            Err(e) => return Err(e),
        }
        for (user_data, res) in queue::reap(ring) {
            if user_data == want {
                return if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res)
                };
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "the kernel did not answer the command",
    ))
}

/// Makes the kernel give up io_uring for the connection: a REGISTER it
/// must refuse turns `fch->io_uring` off and wakes the requests that wait
/// for the ring to become ready; from then on they go to `/dev/fuse`. A
/// connection where io_uring is already off answers EOPNOTSUPP, fine too.
fn switch_kernel_to_dev_fuse(dev_fd: RawFd) -> Result<(), String> {
    let mut ring = setup_ring(dev_fd)?;
    match run_setup_command(&mut ring, cmd::register_refused_on_purpose(3)) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => Ok(()),
        Err(e) => Err(format!("unexpected answer to the refused REGISTER: {e}")),
        Ok(_) => Err("the kernel took a REGISTER without iovecs".to_string()),
    }
}

/// `n` and `noun`, plural unless `n` is 1 ("1 queue", "2 entries").
/// Waits for `n` setup reports of the ring threads; the first failure (or
/// a thread that ended without reporting) goes to `failure`.
fn collect_reports(
    reports: &mpsc::Receiver<Result<(), String>>,
    n: usize,
    failure: &mut Option<String>,
) {
    for _ in 0..n {
        match reports.recv() {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                failure.get_or_insert(why);
            }
            Err(_) => {
                failure.get_or_insert("a ring thread ended during setup".to_string());
            }
        }
    }
}

fn counted(n: usize, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}
