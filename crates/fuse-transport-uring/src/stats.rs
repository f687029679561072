//! Counters that show what went through the rings, and the transport's
//! memory.

use crate::config::UringMode;
use crate::sys::Mapping;
use fuse_abi::Opcode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A queue's request count, on a cache line of its own: every ring
/// thread bumps its queue's on every request.
#[repr(align(128))]
struct QueueCount(AtomicU64);

/// Live counters, shared by the ring threads.
pub(crate) struct Counters {
    per_queue: Vec<QueueCount>,
    /// Requests served through the rings (sharded by thread, as the
    /// server's count of every request is).
    per_opcode: fuse_server::RequestCounters,
    pub(crate) bufpools_added: AtomicU64,
    pub(crate) pooled_requests: AtomicU64,
    offset_min: AtomicU64,
    offset_max: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) failed_commands: AtomicU64,
    pub(crate) zero_copy_reads: AtomicU64,
    pub(crate) zero_copy_writes: AtomicU64,
    pub(crate) zero_copy_bytes: AtomicU64,
    pub(crate) zero_copy_copied_bytes: AtomicU64,
    pub(crate) rings: AtomicU64,
    pub(crate) runtime_ring_completions: AtomicU64,
    mappings: Mutex<Vec<Arc<Mapping>>>,
}

impl Counters {
    pub(crate) fn new(queues: usize) -> Self {
        Self {
            per_queue: (0..queues).map(|_| QueueCount(AtomicU64::new(0))).collect(),
            per_opcode: fuse_server::RequestCounters::new(),
            bufpools_added: AtomicU64::new(0),
            pooled_requests: AtomicU64::new(0),
            offset_min: AtomicU64::new(u64::MAX),
            offset_max: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            failed_commands: AtomicU64::new(0),
            zero_copy_reads: AtomicU64::new(0),
            zero_copy_writes: AtomicU64::new(0),
            zero_copy_bytes: AtomicU64::new(0),
            zero_copy_copied_bytes: AtomicU64::new(0),
            rings: AtomicU64::new(0),
            runtime_ring_completions: AtomicU64::new(0),
            mappings: Mutex::new(Vec::new()),
        }
    }

    /// One request of `opcode` served through the ring of queue `qid`.
    pub(crate) fn request(&self, qid: usize, opcode: u32) {
        if let Some(c) = self.per_queue.get(qid) {
            c.0.fetch_add(1, Ordering::Relaxed);
        }
        self.per_opcode.bump(opcode);
    }

    /// A request's payload was in the pool at `offset`.
    pub(crate) fn pool_offset(&self, offset: u32) {
        self.pooled_requests.fetch_add(1, Ordering::Relaxed);
        self.offset_min.fetch_min(offset as u64, Ordering::Relaxed);
        self.offset_max.fetch_max(offset as u64, Ordering::Relaxed);
    }

    /// Keeps `mapping` alive as long as the session, and counts it.
    pub(crate) fn track(&self, mapping: Arc<Mapping>) {
        self.mappings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(mapping);
    }

    /// Drops every tracked mapping (once no ring can use them any more).
    pub(crate) fn release_mappings(&self) {
        self.mappings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub(crate) fn memory(&self) -> TransportMemory {
        let maps = self.mappings.lock().unwrap_or_else(|e| e.into_inner());
        let mut mem = TransportMemory::default();
        for m in maps.iter() {
            mem.reserved += m.len();
            match m.resident() {
                Ok(n) => mem.resident += n,
                Err(e) => tracing::debug!("mincore: {e}"),
            }
        }
        mem
    }

    pub(crate) fn snapshot(&self, mode: UringMode, pooled_queues: usize) -> UringStats {
        let min = self.offset_min.load(Ordering::Relaxed);
        let pooled = self.pooled_requests.load(Ordering::Relaxed);
        UringStats {
            mode,
            requests_per_queue: self
                .per_queue
                .iter()
                .map(|c| c.0.load(Ordering::Relaxed))
                .collect(),
            pooled_queues,
            bufpools_added: self.bufpools_added.load(Ordering::Relaxed),
            pooled_requests: pooled,
            pool_offset_min: (pooled > 0).then_some(min as u32),
            pool_offset_max: (pooled > 0).then(|| self.offset_max.load(Ordering::Relaxed) as u32),
            bad_requests: self.bad_requests.load(Ordering::Relaxed),
            failed_commands: self.failed_commands.load(Ordering::Relaxed),
            zero_copy_reads: self.zero_copy_reads.load(Ordering::Relaxed),
            zero_copy_writes: self.zero_copy_writes.load(Ordering::Relaxed),
            zero_copy_bytes: self.zero_copy_bytes.load(Ordering::Relaxed),
            zero_copy_copied_bytes: self.zero_copy_copied_bytes.load(Ordering::Relaxed),
            rings: self.rings.load(Ordering::Relaxed),
            runtime_ring_completions: self.runtime_ring_completions.load(Ordering::Relaxed),
            memory: self.memory(),
        }
    }

    pub(crate) fn opcode(&self, opcode: Opcode) -> u64 {
        self.per_opcode.get(opcode)
    }
}

/// Memory of the transport's ring buffers: entry headers, per-entry
/// payload buffers, the buffer pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportMemory {
    /// Bytes mapped (reserved address space): the sum of the transport's
    /// mappings.
    pub reserved: usize,
    /// Bytes of those mappings resident in memory (`mincore(2)`): what the
    /// buffers actually cost.
    pub resident: usize,
}

/// A snapshot of what went through the rings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UringStats {
    /// The mode the session serves in.
    pub mode: UringMode,
    /// Requests served through the ring, per queue (index = queue id = CPU).
    pub requests_per_queue: Vec<u64>,
    /// Queues that have a buffer pool.
    pub pooled_queues: usize,
    /// ADD_BUFPOOL commands the kernel accepted.
    pub bufpools_added: u64,
    /// Requests whose payload buffer was a pool buffer.
    pub pooled_requests: u64,
    /// Smallest pool offset (`fuse_uring_ent_in_out.offset`) seen.
    pub pool_offset_min: Option<u32>,
    /// Largest pool offset seen.
    pub pool_offset_max: Option<u32>,
    /// Requests answered with an error because the kernel's entry header
    /// didn't make sense (an out-of-range pool offset, a payload larger
    /// than its buffer, inconsistent lengths).
    pub bad_requests: u64,
    /// Ring commands the kernel completed with an error other than the
    /// connection ending.
    pub failed_commands: u64,
    /// READ requests the kernel handed over with zero copy (their pages
    /// registered in the ring's buffer table).
    pub zero_copy_reads: u64,
    /// WRITE requests handed over with zero copy.
    pub zero_copy_writes: u64,
    /// Payload bytes of zero-copy requests moved by fixed-buffer io_uring
    /// operations between the kernel's pages and backing files: never in
    /// the daemon's memory.
    pub zero_copy_bytes: u64,
    /// Payload bytes of zero-copy requests the daemon did copy, through
    /// its bounce buffer: for a file system that computes its data or
    /// reads the request's bytes itself, or a backing file that refused
    /// the pages (`O_DIRECT` alignment). 0 for a file system that names
    /// descriptors.
    pub zero_copy_copied_bytes: u64,
    /// io_urings the ring threads opened: one per thread, two per thread in
    /// async mode on an io_uring runtime with its own ring (the FUSE ring
    /// and the runtime's), one per thread with
    /// [`crate::UringConfig::one_ring`].
    pub rings: u64,
    /// Completions of FUSE uring commands (REGISTER, COMMIT_AND_FETCH) and
    /// of the stop poll that came through an `async-io` runtime's own ring
    /// ([`crate::UringConfig::one_ring`]); 0 in the other modes.
    pub runtime_ring_completions: u64,
    /// The transport's buffer memory.
    pub memory: TransportMemory,
}

impl UringStats {
    /// Requests served through the rings, all queues.
    pub fn ring_requests(&self) -> u64 {
        self.requests_per_queue.iter().sum()
    }
}
