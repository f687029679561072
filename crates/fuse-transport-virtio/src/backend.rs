//! The vhost-user-fs device backend: queues, features, and the loop that
//! serves a queue's descriptor chains.

use crate::chain::{Buffers, ChainError, ChainTransaction};
use crate::guest::DataStats;
use fuse_abi::Opcode;
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{Outcome, Server};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryLoadGuard, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

/// `VHOST_USER_F_PROTOCOL_FEATURES`: the feature bit that says the
/// backend speaks vhost-user protocol features.
const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;

/// The length of `virtio_fs_config.tag`.
pub const TAG_LEN: usize = 36;

/// Makes the [`Server`] of each guest session: a new one at every
/// connection and every time the guest's driver starts over (a reboot,
/// a new mount after an unmount), so each session negotiates INIT afresh
/// and starts from an empty node table.
pub type ServerFactory = dyn Fn() -> io::Result<Arc<Server>> + Send + Sync;

/// How the device is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VirtioConfig {
    /// Request queues (the hiprio queue comes on top); each is served by
    /// a thread of its own. The front end (QEMU's
    /// `vhost-user-fs-pci,num-request-queues=N`) decides how many it uses.
    pub request_queues: usize,
    /// The largest queue size accepted (QEMU's `queue-size`, 128 by
    /// default; a 1 MiB WRITE needs 256 pages plus headers, so 1024 lets
    /// the guest send those whole).
    pub max_queue_size: u16,
    /// The file system's tag, offered in the device's configuration space
    /// to front ends that ask the backend for it (QEMU's generic
    /// `vhost-user-device`); `vhost-user-fs-pci` takes its own `tag=`.
    pub tag: Option<String>,
    /// Async handlers: each queue thread runs an `async-io` runtime of
    /// this type and serves the chains it finds on its queue as tasks,
    /// concurrently, with [`Server::handle_async`] (the crate's `async`
    /// feature). `None`: one chain at a time with [`Server::handle`].
    pub runtime: Option<VirtioRuntime>,
}

/// The runtime of the queue threads in async mode
/// ([`VirtioConfig::runtime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtioRuntime {
    /// A current-thread tokio runtime (file IO is blocking syscalls).
    Tokio,
    /// A current-thread tokio runtime whose reactor also drives an
    /// io_uring.
    IoUring,
}

impl Default for VirtioConfig {
    fn default() -> Self {
        Self {
            request_queues: 1,
            max_queue_size: 1024,
            tag: None,
            runtime: None,
        }
    }
}

impl VirtioConfig {
    /// Sets the number of request queues.
    #[must_use]
    pub fn request_queues(mut self, n: usize) -> Self {
        self.request_queues = n;
        self
    }

    /// Sets the largest queue size.
    #[must_use]
    pub fn max_queue_size(mut self, n: u16) -> Self {
        self.max_queue_size = n;
        self
    }

    /// Sets the tag.
    #[must_use]
    pub fn tag(mut self, tag: Option<String>) -> Self {
        self.tag = tag;
        self
    }

    /// Sets the async runtime of the queue threads (`None`: sync).
    #[must_use]
    pub fn runtime(mut self, runtime: Option<VirtioRuntime>) -> Self {
        self.runtime = runtime;
        self
    }

    /// Checks the values: 1 to 63 request queues (the queue masks are
    /// 64-bit), a power-of-two queue size, a tag of 1 to 36 bytes.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=63).contains(&self.request_queues) {
            return Err(format!(
                "{} request queues: 1 to 63 are possible",
                self.request_queues
            ));
        }
        if !self.max_queue_size.is_power_of_two() {
            return Err(format!(
                "queue size {} is not a power of two",
                self.max_queue_size
            ));
        }
        if let Some(tag) = &self.tag {
            if tag.is_empty() || tag.len() > TAG_LEN {
                return Err(format!("tag {tag:?}: 1 to {TAG_LEN} bytes"));
            }
        }
        if self.runtime.is_some() && !cfg!(feature = "async") {
            return Err("an async runtime needs fuse-transport-virtio's `async` feature".into());
        }
        Ok(())
    }
}

/// Counts of how READ and WRITE data moved, for a connection.
#[derive(Debug, Default)]
pub struct DataCounters {
    /// WRITE requests, their bytes, their `pwritev` calls on guest memory,
    /// and the transfers that went through a buffer of the daemon's.
    pub writes: [AtomicU64; 4],
    /// The same for READ (`preadv`).
    pub reads: [AtomicU64; 4],
}

impl DataCounters {
    fn count(&self, write: bool, stats: &DataStats) {
        let c = if write { &self.writes } else { &self.reads };
        for (slot, n) in c
            .iter()
            .zip([1, stats.bytes, stats.calls as u64, stats.bounced as u64])
        {
            slot.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `[requests, bytes, vectored calls, bounced transfers]` of WRITE
    /// (`write`) or READ.
    pub fn get(&self, write: bool) -> [u64; 4] {
        let c = if write { &self.writes } else { &self.reads };
        std::array::from_fn(|i| c[i].load(Ordering::Relaxed))
    }
}

/// The vhost-user-fs backend of one front-end connection.
///
/// Queue 0 is the hiprio queue (FORGET, BATCH_FORGET, INTERRUPT: no
/// replies), queues 1.. carry requests; a worker thread per queue
/// serves its chains one at a time with [`Server::handle`] on that
/// thread, except a request that may wait indefinitely (SETLKW), which
/// gets a thread of its own, so that the holder's unlock, coming through
/// the same queue, is served. No DAX window: the device offers no shared
/// memory region, so the guest's `dax` mount option is refused by its
/// driver.
pub struct VirtioFsBackend {
    config: VirtioConfig,
    factory: Arc<ServerFactory>,
    server: RwLock<Arc<Server>>,
    mem: RwLock<Option<GuestMemoryAtomic<GuestMemoryMmap>>>,
    event_idx: AtomicBool,
    /// Free buffers of each queue (a synchronous queue uses one set; an
    /// async one a set per request in flight).
    buffers: Vec<Mutex<Vec<Buffers>>>,
    data: Arc<DataCounters>,
}

impl VirtioFsBackend {
    /// A backend whose first server comes from `factory`.
    pub fn new(config: VirtioConfig, factory: Arc<ServerFactory>) -> io::Result<Self> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let server = factory()?;
        let queues = config.request_queues + 1;
        Ok(Self {
            config,
            factory,
            server: RwLock::new(server),
            mem: RwLock::new(None),
            event_idx: AtomicBool::new(false),
            buffers: (0..queues).map(|_| Mutex::new(Vec::new())).collect(),
            data: Arc::default(),
        })
    }

    /// The server of the current guest session.
    pub fn server(&self) -> Arc<Server> {
        self.server
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Ends the current guest session: its server tells the file system
    /// (`destroy`) once. The next INIT starts a new one.
    pub fn finish(&self) {
        // Lock waits on threads of their own end (EINTR) rather than wait
        // for a guest that is gone.
        self.server().stop_waits();
        self.server().finish();
        let [w, wb, wc, wx] = self.data.get(true);
        let [r, rb, rc, rx] = self.data.get(false);
        tracing::info!(
            "data path: {w} WRITE ({wb} bytes, {wc} pwritev, {wx} bounced), \
             {r} READ ({rb} bytes, {rc} preadv, {rx} bounced)"
        );
    }

    /// How READ and WRITE data moved on this connection.
    pub fn data_counters(&self) -> &DataCounters {
        &self.data
    }

    /// The guest's driver sent INIT: if the session's server has
    /// negotiated already (the guest rebooted or mounted again), a new
    /// server takes over, so the new session starts clean.
    fn server_for_init(&self) -> io::Result<Arc<Server>> {
        let current = self.server();
        if current.negotiated().is_none() {
            return Ok(current);
        }
        tracing::info!("INIT on an initialized session: the guest started over; new session");
        current.stop_waits();
        current.finish();
        let fresh = (self.factory)()?;
        *self.server.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        Ok(fresh)
    }

    pub(crate) fn memory(&self) -> Option<GuestMemoryLoadGuard<GuestMemoryMmap>> {
        self.mem
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|m| m.memory())
    }

    /// Serves the chains waiting on `vring` (queue `queue`): one at a time
    /// on this thread, or, with a runtime, each as a task on the thread's
    /// runtime; a SETLKW on a thread of its own either way.
    fn serve_queue(&self, queue: usize, vring: &VringRwLock) -> io::Result<()> {
        let Some(mem) = self.memory() else {
            return Ok(());
        };
        match self.config.runtime {
            None => self.serve_queue_sync(queue, vring, &mem),
            #[cfg(feature = "async")]
            Some(kind) => crate::async_queue::serve_queue(self, queue, vring, &mem, kind),
            #[cfg(not(feature = "async"))]
            Some(_) => Err(io::Error::other(
                "an async runtime was asked for, but fuse-transport-virtio was built \
                 without its `async` feature",
            )),
        }
    }

    fn serve_queue_sync(
        &self,
        queue: usize,
        vring: &VringRwLock,
        mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    ) -> io::Result<()> {
        let mut bufs = self.take_buffers(queue)?;
        let result = self.with_notifications(queue, vring, || {
            let mut served = 0usize;
            while let Some(chain) = pop(vring, mem) {
                let head = chain.head_index();
                let used = match self.prepare(queue, &chain, &mut bufs) {
                    Some(p) if p.waits_indefinitely() => {
                        // Its buffers go with it; the queue takes others.
                        let own = std::mem::replace(&mut bufs, self.take_buffers(queue)?);
                        match Waiting::hand_off(queue, vring, mem, head, p, own, None) {
                            None => {
                                served += 1;
                                continue;
                            }
                            Some((p, mut own)) => {
                                let used = fuse_server::block_on(p.serve(&mut own));
                                self.return_buffers(queue, own);
                                used
                            }
                        }
                    }
                    Some(p) => fuse_server::block_on(p.serve(&mut bufs)),
                    None => 0,
                };
                give_back(queue, vring, head, used)?;
                served += 1;
            }
            if served > 0 {
                tracing::trace!(queue, served, "chains served");
            }
            Ok(())
        });
        self.return_buffers(queue, bufs);
        result
    }

    /// Runs `serve` (which serves what is available), with EVENT_IDX
    /// between turning notifications off and on again, until no chain
    /// came meanwhile.
    pub(crate) fn with_notifications(
        &self,
        queue: usize,
        vring: &VringRwLock,
        mut serve: impl FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        loop {
            self.notifications_off(queue, vring)?;
            serve()?;
            if !self.notifications_on(queue, vring)? {
                return Ok(());
            }
        }
    }

    /// With EVENT_IDX, turns queue `queue`'s notifications off while what
    /// is available is served; [`Self::notifications_on`] after.
    pub(crate) fn notifications_off(&self, queue: usize, vring: &VringRwLock) -> io::Result<()> {
        if self.event_idx() {
            vring
                .disable_notification()
                .map_err(|e| vring_error(queue, e))?;
        }
        Ok(())
    }

    /// After serving: with EVENT_IDX, turns the notifications back on and
    /// says whether chains came while they were off (look once more).
    pub(crate) fn notifications_on(&self, queue: usize, vring: &VringRwLock) -> io::Result<bool> {
        if !self.event_idx() {
            return Ok(false);
        }
        vring
            .enable_notification()
            .map_err(|e| vring_error(queue, e))
    }

    pub(crate) fn event_idx(&self) -> bool {
        self.event_idx.load(Ordering::Relaxed)
    }

    /// A set of buffers of queue `queue`'s (made if none is free).
    pub(crate) fn take_buffers(&self, queue: usize) -> io::Result<Buffers> {
        let free = self.buffers[queue]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        match free {
            Some(b) => Ok(b),
            None => Buffers::new(initial_reply_size(&self.server())),
        }
    }

    /// Gives buffers back to queue `queue`'s free list.
    pub(crate) fn return_buffers(&self, queue: usize, bufs: Buffers) {
        self.buffers[queue]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(bufs);
    }

    /// Resolves the chain into `bufs` and picks its server (INIT may start
    /// a new session); `None` when the chain is given back unanswered.
    pub(crate) fn prepare(
        &self,
        queue: usize,
        chain: &virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>,
        bufs: &mut Buffers,
    ) -> Option<Prepared> {
        if let Err(e) = split_chain(chain, bufs) {
            tracing::warn!(queue, "dropping descriptor chain: {e}");
            return None;
        }
        let mut header = [0u8; size_of::<fuse_abi::InHeader>()];
        let opcode = (bufs.readable.copy_out(0, &mut header) == header.len())
            .then(|| u32::from_ne_bytes([header[4], header[5], header[6], header[7]]));
        let is_init = opcode == Some(Opcode::Init as u32);
        let waits = opcode
            .and_then(opcode_info_raw)
            .is_some_and(|i| i.waits_indefinitely());
        let server = if is_init {
            match self.server_for_init() {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("starting a new session failed: {e}");
                    return None;
                }
            }
        } else {
            self.server()
        };
        if let Some(n) = server.negotiated() {
            if let Err(e) = bufs.reserve_reply(n.max_reply_size()) {
                tracing::error!(queue, "reply buffer: {e}");
                return None;
            }
        }
        let max_request = server
            .negotiated()
            .map_or(initial_reply_size(&server), |n| n.max_request_size());
        Some(Prepared {
            queue,
            server,
            max_request,
            data: self.data.clone(),
            waits,
        })
    }
}

/// Pops the next available chain of `vring`.
pub(crate) fn pop(
    vring: &VringRwLock,
    mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
) -> Option<virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>> {
    vring
        .get_mut()
        .get_queue_mut()
        .pop_descriptor_chain(mem.clone())
}

/// Puts chain `head` on the used ring with `used` bytes written, and
/// tells the guest if it wants to know: chains go back as they are
/// answered, so the guest's waiters run while the next is served.
pub(crate) fn give_back(queue: usize, vring: &VringRwLock, head: u16, used: u32) -> io::Result<()> {
    vring
        .add_used(head, used)
        .map_err(|e| io::Error::other(format!("queue {queue}: add_used: {e}")))?;
    if vring
        .needs_notification()
        .map_err(|e| vring_error(queue, e))?
    {
        vring.signal_used_queue()?;
    }
    Ok(())
}

/// An error of queue `queue`'s vring, naming the queue.
fn vring_error(queue: usize, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("queue {queue}: {e}"))
}

/// A chain resolved and matched with its server, ready to be served.
pub(crate) struct Prepared {
    queue: usize,
    server: Arc<Server>,
    max_request: usize,
    data: Arc<DataCounters>,
    /// The request may wait indefinitely (SETLKW).
    waits: bool,
}

impl Prepared {
    /// The request may wait for as long as another process decides
    /// (SETLKW, [`fuse_server::OpcodeInfo::waits_indefinitely`]): it must
    /// not hold its queue, through which the request that ends the wait
    /// (the holder's unlock) comes.
    pub(crate) fn waits_indefinitely(&self) -> bool {
        self.waits
    }

    /// Serves the request in `bufs` (which [`VirtioFsBackend::prepare`]
    /// filled); the used length to report (0 when nothing was written
    /// back). A synchronous file system completes at once.
    pub(crate) async fn serve(self, bufs: &mut Buffers) -> u32 {
        let queue = self.queue;
        let (mut tx, peek) = match ChainTransaction::new(bufs, self.max_request) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(queue, "dropping descriptor chain: {e}");
                return 0;
            }
        };
        match self.server.handle_async(&mut tx).await {
            Ok(Outcome::Destroyed) => tracing::info!("the guest unmounted (DESTROY)"),
            Ok(_) => {}
            Err(e) => tracing::warn!(queue, "request not answered: {e}"),
        }
        if let Some(stats) = tx.data_stats() {
            let write = peek.header.opcode == Opcode::Write as u32;
            self.data.count(write, &stats);
            tracing::debug!(
                target: "fuse_transport_virtio::data",
                unique = peek.header.unique,
                op = if write { "WRITE" } else { "READ" },
                bytes = stats.bytes,
                calls = stats.calls,
                buffers = stats.buffers,
                bounced = stats.bounced,
                "data moved"
            );
        }
        tx.used_len()
    }
}

/// A request that may wait indefinitely (a SETLKW), served on a thread of
/// its own so that its queue goes on serving: the holder's unlock comes
/// through that queue, and served behind the wait it would never come
/// (the guest's waiter and holder would both wait forever, and with them
/// every request after them on the queue). The thread gives the chain
/// back when the request is answered, out of order with the queue's
/// others (which virtio allows). At the end of the session
/// ([`VirtioFsBackend::finish`], a new INIT) the server's `stop_waits`
/// ends such waits with `EINTR`.
pub(crate) struct Waiting {
    queue: usize,
    vring: VringRwLock,
    /// The guest memory the chain's buffers point into, kept mapped.
    mem: Arc<GuestMemoryMmap>,
    head: u16,
    prepared: Prepared,
    bufs: Buffers,
    runtime: Option<VirtioRuntime>,
}

impl Waiting {
    /// Serves chain `head` of queue `queue`, resolved into `bufs`, on a
    /// thread of its own: with [`fuse_server::block_on`] (`runtime`
    /// `None`) or on a runtime of that type of the thread's own. `None`
    /// once handed off; the request and its buffers back if no thread
    /// could start (the caller then serves it as any other).
    pub(crate) fn hand_off(
        queue: usize,
        vring: &VringRwLock,
        mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
        head: u16,
        prepared: Prepared,
        bufs: Buffers,
        runtime: Option<VirtioRuntime>,
    ) -> Option<(Prepared, Buffers)> {
        let waiting = Self {
            queue,
            vring: vring.clone(),
            mem: mem.clone().into_inner(),
            head,
            prepared,
            bufs,
            runtime,
        };
        match waiting.serve_on_own_thread() {
            Ok(()) => None,
            Err(w) => Some((w.prepared, w.bufs)),
        }
    }

    /// Serves it on a new thread; gives it back if no thread could start.
    fn serve_on_own_thread(self) -> Result<(), Box<Self>> {
        let (tx, rx) = std::sync::mpsc::channel::<Waiting>();
        let spawned = std::thread::Builder::new()
            .name(format!("virtio-fs-q{}-wait", self.queue))
            .spawn(move || {
                if let Ok(w) = rx.recv() {
                    w.run();
                }
            });
        match spawned {
            Ok(_) => {
                // The thread holds the receiver until it got this.
                let _ = tx.send(self);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(
                    queue = self.queue,
                    "no thread for a request that may wait ({e}): served on the queue's"
                );
                Err(Box::new(self))
            }
        }
    }

    fn run(self) {
        let Waiting {
            queue,
            vring,
            mem,
            head,
            prepared,
            mut bufs,
            runtime,
        } = self;
        let used = match runtime {
            None => fuse_server::block_on(prepared.serve(&mut bufs)),
            #[cfg(feature = "async")]
            Some(kind) => match crate::async_queue::build_runtime(queue, kind) {
                Ok(rt) => rt.block_on(prepared.serve(&mut bufs)),
                Err(e) => {
                    tracing::error!(queue, "a request that may wait: {e}");
                    0
                }
            },
            // `VirtioConfig::validate` refuses a runtime without the
            // feature.
            #[cfg(not(feature = "async"))]
            Some(_) => 0,
        };
        drop(bufs);
        if let Err(e) = give_back(queue, &vring, head, used) {
            // The front end went away meanwhile.
            tracing::debug!(queue, "giving back a request that waited: {e}");
        }
        drop(mem);
    }
}

/// The reply buffer before INIT settled the sizes: what the server asks
/// for (the kernel may agree to less, never to more).
fn initial_reply_size(server: &Server) -> usize {
    let c = server.init_config();
    (c.max_pages as usize * fuse_server::init::PAGE_SIZE)
        .max(c.max_write as usize)
        .max(fuse_server::init::PAGE_SIZE)
        + fuse_server::init::PAGE_SIZE
}

/// Resolves the chain's buffers into `bufs.readable` and `bufs.writable`.
fn split_chain(
    chain: &virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>,
    bufs: &mut Buffers,
) -> Result<(), ChainError> {
    bufs.readable.clear();
    bufs.writable.clear();
    let mem = chain.memory();
    for desc in chain.clone() {
        if desc.is_write_only() {
            bufs.writable.push(mem, desc.addr(), desc.len())?;
        } else {
            if !bufs.writable.is_empty() {
                return Err(ChainError::Order);
            }
            bufs.readable.push(mem, desc.addr(), desc.len())?;
        }
    }
    Ok(())
}

impl VhostUserBackend for VirtioFsBackend {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        self.config.request_queues + 1
    }

    fn max_queue_size(&self) -> usize {
        self.config.max_queue_size as usize
    }

    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | (1 << VHOST_USER_F_PROTOCOL_FEATURES)
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        let mut f = VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK;
        if self.config.tag.is_some() {
            f |= VhostUserProtocolFeatures::CONFIG;
        }
        f
    }

    fn set_event_idx(&self, enabled: bool) {
        self.event_idx.store(enabled, Ordering::Relaxed);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        // struct virtio_fs_config { u8 tag[36]; le32 num_request_queues; }
        let mut config = [0u8; TAG_LEN + 4];
        if let Some(tag) = &self.config.tag {
            config[..tag.len()].copy_from_slice(tag.as_bytes());
        }
        config[TAG_LEN..].copy_from_slice(&(self.config.request_queues as u32).to_le_bytes());
        let start = (offset as usize).min(config.len());
        let end = start.saturating_add(size as usize).min(config.len());
        config[start..end].to_vec()
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        *self.mem.write().unwrap_or_else(|e| e.into_inner()) = Some(mem);
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        // A thread per queue: thread i serves queue i.
        (0..self.num_queues()).map(|q| 1u64 << q).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        match new_event_consumer_and_notifier(EventFlag::NONBLOCK) {
            Ok(pair) => Some(pair),
            Err(e) => {
                tracing::error!("exit event for a queue thread: {e}");
                None
            }
        }
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[VringRwLock],
        thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            return Err(io::Error::other(format!(
                "queue {thread_id}: unexpected event set {evset:?}"
            )));
        }
        // One queue per thread: the event is the thread's only vring, and
        // the thread's index is the queue's.
        let Some(vring) = vrings.get(device_event as usize) else {
            return Err(io::Error::other(format!(
                "queue {thread_id}: event {device_event} for no vring"
            )));
        };
        self.serve_queue(thread_id, vring)
    }
}
