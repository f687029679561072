//! A ring thread: one io_uring serving one or more of the kernel's queues.
//!
//! ## Entry life cycle
//!
//! Each entry is a [`UringReqHeader`] in the thread's header mapping plus,
//! without a pool, its own payload buffer. It is always in one of two
//! places:
//!
//! - **in the kernel** (`in_kernel`): a REGISTER or COMMIT_AND_FETCH SQE for
//!   it was submitted and its CQE has not arrived. The kernel may write the
//!   entry's header and payload (or its pool buffer) at any time; this
//!   thread doesn't touch them.
//! - **in user space**: its CQE arrived. With result 0 it carries a request,
//!   which this thread answers in place and commits (back into the kernel);
//!   with an error the kernel gave it back for good (connection gone, ring
//!   cancelled) and it stays here.
//!
//! Memory is unmapped only after the ring is closed, and the ring is closed
//! either when every entry is back in user space, or — when stopping while
//! the connection lives on — by dropping it: closing an io_uring cancels its
//! uring commands (`IO_URING_F_CANCEL`, the kernel frees entries waiting for
//! requests) and makes pending completion work run in cancel mode, which
//! never copies to user memory. The kernel only ever copies to or from an
//! entry's memory inside this thread's own `io_uring_enter` calls (issuing
//! a command, or running the ring's deferred completion work), so once the
//! ring is gone nothing can reach the memory any more.
//!
//! ## Synchronous and async handlers
//!
//! This loop is synchronous: it answers each request with
//! [`Server::handle`](fuse_server::Server::handle) before looking at the next CQE, so a queue serves one
//! request at a time. With [`crate::UringConfig::runtime`] (feature
//! `async`) the thread instead runs an `async-io` runtime and serves every
//! request as a task (`async_queue.rs`): everything that needs is per
//! entry, so many entries can be in user space at once. A
//! [`RingTransaction`](transaction::RingTransaction) only points into its own entry (its header and its
//! payload or pool buffer, which the kernel hands to one entry at a time),
//! and the commit is one SQE pushed whenever that entry's task has written
//! its reply. Pool offsets are checked for range and alignment (whole
//! buffers only); the kernel lends a pool buffer to one entry at a time,
//! and a task holds its entry from the CQE to the commit.

#[cfg(feature = "async")]
#[path = "async_queue.rs"]
mod async_queue;
mod lock_waits;
mod ring;
mod transaction;

use lock_waits::Kicker;
pub use ring::{build_ring, submit};
use ring::{build_ring_with_cq, register_table, wait_timeout, MAX_CQ_ENTRIES};
pub(crate) use ring::{reap, reap_into, register_pool, wait};

use crate::cmd;
use crate::fault::UringFault;
use crate::session::Shared;
use crate::sys::{self, EventFd, Mapping};
use crate::zero_copy;
use fuse_abi::uring::UringReqHeader;
use io_uring::{cqueue, squeue, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `user_data` of the wake eventfd's poll. Below
/// `async_io::SharedRing::USER_DATA_LIMIT`, as every `user_data` of the
/// transport's own is (entry indexes), so that it may share a runtime's
/// ring.
const WAKE_USER_DATA: u64 = 1 << 62;

/// Distance between two entries' headers in the header mapping.
const HEADER_STRIDE: usize = 512;
const _: () = assert!(size_of::<UringReqHeader>() <= HEADER_STRIDE);

/// How long a thread whose connection ended waits for its remaining
/// entries before closing the ring anyway (which is also safe).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One queue's slice of the session's pool mapping.
#[derive(Clone)]
pub(crate) struct PoolSlice {
    pub(crate) region: Arc<Mapping>,
    /// Offset of the slice in the region.
    pub(crate) start: usize,
    /// Bytes handed to ADD_BUFPOOL.
    pub(crate) len: usize,
    /// The kernel's buffer size (its `max_payload_sz`).
    pub(crate) buf_size: usize,
    /// The pool is registered: every ring serving its queue registers the
    /// whole region at [`cmd::POOL_BUF_INDEX`] ([`register_pool`]), and
    /// REGISTER and COMMIT_AND_FETCH name it.
    pub(crate) registered: bool,
    /// The queue was added with zero copy (`FUSE_URING_ZERO_COPY`): each
    /// entry names a slot of its ring's buffer table (see `zero_copy.rs`).
    pub(crate) zero_copy: bool,
}

impl PoolSlice {
    fn base(&self) -> *mut u8 {
        // SAFETY: `start + len` lies within the region (checked when the
        // pools were laid out), so the offset stays in the allocation.
        unsafe { self.region.as_ptr().add(self.start) }
    }
}

/// A queue a thread serves.
pub(crate) struct QueuePlan {
    pub(crate) qid: u16,
    pub(crate) pool: Option<PoolSlice>,
}

/// What a ring thread serves and how.
pub(crate) struct ThreadPlan {
    pub(crate) queues: Vec<QueuePlan>,
    /// CPUs to pin to (empty: don't pin).
    pub(crate) cpus: Vec<usize>,
    /// The nice value to set (`UringConfig::nice`).
    pub(crate) nice: Option<i32>,
    pub(crate) entries_per_queue: usize,
    /// Size of a per-entry payload buffer (at least the kernel's
    /// `max_payload_sz`).
    pub(crate) payload_size: usize,
    /// The connection's `/dev/fuse` descriptor (where [`Kicker`] writes).
    pub(crate) dev_fd: RawFd,
    pub(crate) defer_taskrun: bool,
    pub(crate) wake: Arc<EventFd>,
    pub(crate) fault: Option<UringFault>,
    /// Async mode: the runtime the thread serves its entries on.
    #[cfg(feature = "async")]
    pub(crate) runtime: Option<async_io::RuntimeType>,
    /// Async mode on the io_uring runtime: its ring is the thread's only
    /// one and carries the FUSE commands (`UringConfig::one_ring`).
    #[cfg(feature = "async")]
    pub(crate) one_ring: bool,
}

/// Setup handshake with the session: the thread reports once its entries
/// (except queue 0's) are registered; the thread serving queue 0 then waits
/// for a go before registering queue 0's entries, which makes the ring
/// ready (every queue has entries), and reports again.
pub(crate) struct Handshake {
    pub(crate) report: Sender<Result<(), String>>,
    /// Only for the thread serving queue 0.
    pub(crate) go: Option<Receiver<bool>>,
}

struct Entry {
    /// Index into the thread's queues.
    queue: usize,
    header: *mut UringReqHeader,
    /// Per-entry payload buffer (null with a pool).
    payload: *mut u8,
    /// `[headers, payload]` for REGISTER; lives as long as the entry (boxed:
    /// an SQE in the submission queue may point to it while entries are
    /// added).
    iov: [libc::iovec; 2],
    in_kernel: bool,
    /// It carries a request that waits indefinitely (counted in
    /// [`QueueThread::held_by_waits`] until committed).
    long_wait: bool,
}

/// Entries added to a queue when lock waits hold its entries, at most this
/// many per queue, a chunk at a time.
const MAX_ADDED_ENTRIES: usize = 1024;
const ADDED_CHUNK: usize = 8;

impl Entry {
    fn new(
        queue: usize,
        header: *mut UringReqHeader,
        payload: *mut u8,
        payload_len: usize,
    ) -> Box<Self> {
        Box::new(Self {
            queue,
            header,
            payload,
            iov: [
                libc::iovec {
                    iov_base: header.cast(),
                    iov_len: size_of::<UringReqHeader>(),
                },
                libc::iovec {
                    iov_base: payload.cast(),
                    iov_len: payload_len,
                },
            ],
            in_kernel: false,
            long_wait: false,
        })
    }
}

/// An io_uring whose SQEs are 128 bytes (`IORING_SETUP_SQE128`).
pub type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Runs a ring thread: setup, handshake, serving, teardown.
pub(crate) fn run(plan: ThreadPlan, shared: Arc<Shared>, handshake: Handshake) -> io::Result<()> {
    // The entries' memory first, the ring second: locals drop in reverse
    // order, so the ring is closed before the memory can go, even when
    // unwinding from a panicking file system.
    let mut thread = match QueueThread::setup(plan, &shared) {
        Ok(t) => t,
        Err(e) => {
            let _ = handshake
                .report
                .send(Err(format!("allocating ring entries: {e}")));
            return Ok(());
        }
    };
    #[cfg(feature = "async")]
    if thread.plan.one_ring {
        return async_queue::run_one_ring(thread, handshake);
    }
    let mut ring = match thread.create_ring() {
        Ok(r) => r,
        Err(e) => {
            let _ = handshake.report.send(Err(e));
            return Ok(());
        }
    };
    let result = match thread.start(&mut ring, handshake) {
        #[cfg(feature = "async")]
        Ok(true) if thread.plan.runtime.is_some() => {
            let kind = thread.plan.runtime.unwrap_or(async_io::RuntimeType::Tokio);
            async_queue::serve(&mut thread, &mut ring, kind)
        }
        Ok(true) => thread.serve(&mut ring),
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    thread.note_entries_left();
    drop(ring);
    drop(thread);
    result
}

struct QueueThread {
    shared: Arc<Shared>,
    plan: ThreadPlan,
    // Boxed: a REGISTER SQE points to its entry's iovec array, which must
    // not move when entries are added.
    #[allow(clippy::vec_box)]
    entries: Vec<Box<Entry>>,
    /// Per queue: lock waits (requests that wait indefinitely) holding one
    /// of its entries, entries registered on top of the configured number
    /// to keep that many free for other requests, and entries made for that
    /// but not registered yet. See [`QueueThread::keep_entries_free`].
    held_by_waits: Vec<usize>,
    added: Vec<usize>,
    spare: Vec<Vec<usize>>,
    /// The mappings of added entries.
    added_memory: Vec<Arc<Mapping>>,
    logged_added_limit: bool,
    /// Issues the requests that kick a queue whose lock waits took an
    /// entry (see [`QueueThread::kick`]); made on first use.
    kicker: Option<Kicker>,
    /// Entries handed to a thread of their own (a request that waits
    /// indefinitely, see [`QueueThread::hand_off`]): `(index, commit id)`
    /// of those answered and ready to commit.
    handed_off: Arc<std::sync::Mutex<Vec<(usize, u64)>>>,
    /// Entries in the kernel.
    in_flight: usize,
    /// Completions reaped and not handled yet: (user_data, result).
    pending: Vec<(u64, i32)>,
    /// Slots of the ring's buffer table (0: no queue of the thread has
    /// zero copy): entry `i` uses slot [`zero_copy::FIRST_ENTRY_SLOT`]` + i`,
    /// so no entry beyond the table may be added.
    table_slots: usize,
    /// The connection ended (a command completed with ENOTCONN & co).
    gone: bool,
    /// The session asked this thread to stop.
    stopping: bool,
    logged_bad: bool,
    logged_failed: bool,
    // Keep the mappings alive for as long as the entries point into them
    // (the session also tracks them, for accounting).
    _headers: Arc<Mapping>,
    _payloads: Option<Arc<Mapping>>,
}

impl QueueThread {
    fn setup(plan: ThreadPlan, shared: &Arc<Shared>) -> io::Result<Self> {
        if plan.fault == Some(UringFault::FailThreadSetup) {
            return Err(io::Error::other("injected setup failure"));
        }
        if !plan.cpus.is_empty() {
            if let Err(e) = sys::pin_current_thread(&plan.cpus) {
                tracing::debug!(cpus = ?plan.cpus, "not pinning a ring thread: {e}");
            }
        }
        if let Some(nice) = plan.nice {
            if let Err(e) = fuse_server::sys::set_thread_nice(nice) {
                tracing::debug!(nice, "ring thread keeps its nice value: {e}");
            }
        }
        let per_queue = plan.entries_per_queue.max(1);
        let count = per_queue * plan.queues.len();
        // Mapped on the (pinned) ring thread, so first touch places the
        // pages on its NUMA node.
        let headers = Arc::new(Mapping::new(count * HEADER_STRIDE)?);
        shared.counters.track(headers.clone());
        let per_entry = plan.queues.iter().filter(|q| q.pool.is_none()).count() * per_queue;
        let payloads = if per_entry > 0 {
            let len = per_entry
                .checked_mul(plan.payload_size)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
            let p = Arc::new(Mapping::new(len)?);
            shared.counters.track(p.clone());
            Some(p)
        } else {
            None
        };
        let mut entries = Vec::with_capacity(count);
        let mut next_payload = 0usize;
        for (qi, q) in plan.queues.iter().enumerate() {
            for _ in 0..per_queue {
                let i = entries.len();
                // SAFETY: `i < count`: the header lies inside the mapping.
                let header = unsafe { headers.as_ptr().add(i * HEADER_STRIDE) };
                let (payload, payload_len) = match (&q.pool, &payloads) {
                    (None, Some(p)) => {
                        // SAFETY: one buffer per entry of a per-entry queue;
                        // the mapping was sized for all of them.
                        let ptr = unsafe { p.as_ptr().add(next_payload * plan.payload_size) };
                        next_payload += 1;
                        (ptr, plan.payload_size)
                    }
                    // Pooled: REGISTER carries no payload buffer.
                    _ => (std::ptr::null_mut(), 0),
                };
                entries.push(Entry::new(qi, header.cast(), payload, payload_len));
                if plan.fault == Some(UringFault::RefuseRegister) {
                    // Too short for a per-entry queue, not empty for a pooled one.
                    if let Some(e) = entries.last_mut() {
                        e.iov[1] = libc::iovec {
                            iov_base: header.cast(),
                            iov_len: 1,
                        };
                    }
                }
            }
        }
        let nq = plan.queues.len();
        Ok(Self {
            shared: shared.clone(),
            plan,
            entries,
            held_by_waits: vec![0; nq],
            added: vec![0; nq],
            spare: vec![Vec::new(); nq],
            added_memory: Vec::new(),
            logged_added_limit: false,
            kicker: None,
            handed_off: Arc::default(),
            in_flight: 0,
            pending: Vec::new(),
            table_slots: 0,
            gone: false,
            stopping: false,
            logged_bad: false,
            logged_failed: false,
            _headers: headers,
            _payloads: payloads,
        })
    }

    /// Submission and completion queue sizes of the thread's ring.
    fn ring_sizes(&self) -> (u32, u32) {
        // At most one SQE per entry, plus the wake poll.
        let sq = (self.entries.len() + 2).next_power_of_two() as u32;
        // Room in the completion queue for a CQE of every entry the thread
        // may ever have, the entries added for lock waits included: an
        // overflowing completion queue holds CQEs back from the ring
        // thread (and with them the entries, which stay out of reach of
        // the kernel's requests).
        let cq = (self.most_entries().next_power_of_two() as u32).clamp(2 * sq, MAX_CQ_ENTRIES);
        (sq, cq)
    }

    /// The most entries (plus the wake poll) the thread may ever have.
    fn most_entries(&self) -> usize {
        self.plan.queues.len() * (self.plan.entries_per_queue.max(1) + MAX_ADDED_ENTRIES) + 2
    }

    fn create_ring(&mut self) -> Result<Ring, String> {
        let (sq, cq) = self.ring_sizes();
        let ring = build_ring_with_cq(sq, cq, self.plan.defer_taskrun)
            .map_err(|e| format!("creating an io_uring: {e}"))?;
        self.shared.counters.rings.fetch_add(1, Ordering::Relaxed);
        self.register_with(&ring)?;
        Ok(ring)
    }

    /// Registers what the thread's commands name with `ring`: the
    /// `/dev/fuse` descriptor (fixed file 0), the pool or the zero-copy
    /// buffer table.
    fn register_with(&mut self, ring: &Ring) -> Result<(), String> {
        let most = self.most_entries();
        ring.submitter()
            .register_files(&[self.plan.dev_fd])
            .map_err(|e| format!("registering /dev/fuse with an io_uring: {e}"))?;
        // Every queue's pool lies in the one region: registered once.
        let registered = self
            .plan
            .queues
            .iter()
            .filter_map(|q| q.pool.as_ref())
            .find(|p| p.registered);
        let zero_copy = self
            .plan
            .queues
            .iter()
            .any(|q| q.pool.as_ref().is_some_and(|p| p.zero_copy));
        if zero_copy {
            // The pool (or an empty slot) at 0, then an empty slot for
            // every entry the thread may ever have, lock waits' included.
            let slots = (zero_copy::FIRST_ENTRY_SLOT + most).min(zero_copy::MAX_TABLE_SLOTS);
            register_table(ring, registered.map(|p| &*p.region), slots).map_err(|e| {
                format!("registering a buffer table of {slots} slots with an io_uring: {e}")
            })?;
            self.table_slots = slots;
        } else if let Some(pool) = registered {
            register_pool(ring, &pool.region)
                .map_err(|e| format!("registering the buffer pools with an io_uring: {e}"))?;
        }
        Ok(())
    }

    /// The slot of the ring's buffer table entry `index` names in its
    /// REGISTER, if its queue has zero copy.
    fn zero_copy_slot(&self, index: usize) -> Option<u16> {
        let qi = self.entries[index].queue;
        if !self.plan.queues[qi]
            .pool
            .as_ref()
            .is_some_and(|p| p.zero_copy)
        {
            return None;
        }
        let slot = zero_copy::FIRST_ENTRY_SLOT + index;
        // Entries are made only with a slot in the table (`make_entries`).
        (slot < self.table_slots).then_some(slot as u16)
    }

    /// The registered-buffer slot commands of queue `qi` name
    /// (`IORING_URING_CMD_FIXED`), if its pool is registered.
    fn fixed_index(&self, qi: usize) -> Option<u16> {
        self.plan.queues[qi]
            .pool
            .as_ref()
            .filter(|p| p.registered)
            .map(|_| cmd::POOL_BUF_INDEX)
    }

    /// Registers the entries, with the handshake. `Ok(false)`: setup
    /// failed (and was reported) or was called off; the thread ends.
    fn start(&mut self, ring: &mut Ring, handshake: Handshake) -> io::Result<bool> {
        if let Err(e) = self.push(
            ring,
            cmd::poll_readable(self.plan.wake.raw(), WAKE_USER_DATA),
        ) {
            let _ = handshake
                .report
                .send(Err(format!("queueing the wake poll: {e}")));
            return Ok(false);
        }
        let first = self.register_entries(ring, |qid| qid != 0);
        let failed = first.is_err();
        let _ = handshake.report.send(first);
        if failed {
            return Ok(false);
        }
        if let Some(go) = handshake.go {
            // Queue 0 registers last: only then can the ring become ready.
            if !go.recv().unwrap_or(false) {
                return Ok(false);
            }
            let second = self.register_entries(ring, |qid| qid == 0);
            let failed = second.is_err();
            let _ = handshake.report.send(second);
            if failed {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Registers the entries of the queues `pick` selects and checks that
    /// the kernel took them: a REGISTER the kernel takes stays pending
    /// until a request comes, one it refuses completes during the submit.
    fn register_entries(
        &mut self,
        ring: &mut Ring,
        pick: impl Fn(u16) -> bool,
    ) -> Result<(), String> {
        let mut submitted = 0;
        for i in 0..self.entries.len() {
            let qid = self.plan.queues[self.entries[i].queue].qid;
            if !pick(qid) {
                continue;
            }
            let fixed = self.fixed_index(self.entries[i].queue);
            let slot = self.zero_copy_slot(i);
            let sqe = cmd::register(qid, &self.entries[i].iov, i as u64, fixed, slot);
            self.push(ring, sqe)
                .map_err(|e| format!("queueing REGISTER: {e}"))?;
            self.mark_in_kernel(i);
            submitted += 1;
        }
        if submitted == 0 {
            return Ok(());
        }
        submit(ring).map_err(|e| format!("submitting REGISTER: {e}"))?;
        let mut refused = None;
        for (user_data, res) in reap(ring) {
            let Some(e) = self.entries.get_mut(user_data as usize) else {
                // The wake poll, or nonsense: the serving loop sorts it out.
                self.pending.push((user_data, res));
                continue;
            };
            if res < 0 && e.in_kernel {
                self.mark_returned(user_data as usize);
                refused.get_or_insert(-res);
            } else {
                // Already a request (the ring became ready): serve it.
                self.pending.push((user_data, res));
            }
        }
        match refused {
            Some(errno) => Err(format!(
                "the kernel refused FUSE_IO_URING_CMD_REGISTER: {}",
                io::Error::from_raw_os_error(errno)
            )),
            None => Ok(()),
        }
    }

    /// The serving loop: answer requests, commit, wait; until stopped or
    /// the connection is gone and every entry is back.
    fn serve(&mut self, ring: &mut Ring) -> io::Result<()> {
        let mut drain_deadline = None;
        // Two vectors that trade places, so that serving allocates nothing.
        let mut batch = Vec::new();
        loop {
            std::mem::swap(&mut batch, &mut self.pending);
            for &(user_data, res) in &batch {
                self.complete(ring, user_data, res)?;
            }
            batch.clear();
            self.commit_handed_off(ring)?;
            if self.shared.stop.load(Ordering::Acquire) {
                self.stopping = true;
            }
            if self.stopping && !self.gone {
                // Hand in the replies written so far; then closing the ring
                // cancels the entries still waiting in the kernel.
                submit(ring)?;
                return Ok(());
            }
            if self.gone {
                if self.in_flight == 0 {
                    return Ok(());
                }
                let deadline =
                    *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_TIMEOUT);
                if Instant::now() >= deadline {
                    tracing::warn!(
                        entries = self.in_flight,
                        "ring entries not returned after the connection ended; closing the ring"
                    );
                    return Ok(());
                }
                wait_timeout(ring, Duration::from_millis(100))?;
            } else {
                wait(ring)?;
            }
            reap_into(ring, &mut self.pending);
        }
    }

    /// Handles one completion.
    fn complete(&mut self, ring: &mut Ring, user_data: u64, res: i32) -> io::Result<()> {
        let Some(index) = self.take_completion(ring, user_data, res)? else {
            return Ok(());
        };
        if let Some(commit_id) = self.answer_kick(index) {
            return self.commit(ring, index, commit_id);
        }
        if let Some(nodeid) = self.hand_off(index) {
            self.keep_entries_free(ring, index, nodeid)?;
            return Ok(());
        }
        let commit_id = self.answer(ring, index);
        self.commit(ring, index, commit_id)
    }

    /// Hands entry `index` back to the kernel with its reply
    /// (COMMIT_AND_FETCH, answering `commit_id`).
    pub(crate) fn commit(
        &mut self,
        ring: &mut Ring,
        index: usize,
        commit_id: u64,
    ) -> io::Result<()> {
        let e = &mut self.entries[index];
        if std::mem::replace(&mut e.long_wait, false) {
            self.held_by_waits[e.queue] -= 1;
        }
        let queue = e.queue;
        let qid = self.plan.queues[queue].qid;
        let fixed = self.fixed_index(queue);
        self.push(
            ring,
            cmd::commit_and_fetch(qid, commit_id, index as u64, fixed),
        )?;
        self.mark_in_kernel(index);
        Ok(())
    }

    /// Entry `index` was handed to the kernel (REGISTER or COMMIT_AND_FETCH
    /// queued).
    fn mark_in_kernel(&mut self, index: usize) {
        self.entries[index].in_kernel = true;
        self.in_flight += 1;
    }

    /// Logs the entries still in the kernel as the ring closes (closing
    /// cancels them); the serving loop ended without waiting for them.
    fn note_entries_left(&self) {
        if self.in_flight > 0 {
            tracing::debug!(
                entries = self.in_flight,
                "closing a ring with entries in the kernel (they are cancelled)"
            );
        }
    }

    /// Entry `index` came back from the kernel (its CQE).
    fn mark_returned(&mut self, index: usize) {
        self.entries[index].in_kernel = false;
        self.in_flight -= 1;
    }

    /// The bookkeeping of one completion, shared by the synchronous and the
    /// async loop: the wake eventfd (re-armed unless stopping), an entry
    /// back from the kernel (no longer in flight), a command that failed.
    /// Returns the index of the entry if it carries a request to answer.
    pub(crate) fn take_completion(
        &mut self,
        ring: &mut Ring,
        user_data: u64,
        res: i32,
    ) -> io::Result<Option<usize>> {
        if user_data == WAKE_USER_DATA {
            self.plan.wake.drain();
            if self.shared.stop.load(Ordering::Acquire) {
                self.stopping = true;
            } else {
                self.push(
                    ring,
                    cmd::poll_readable(self.plan.wake.raw(), WAKE_USER_DATA),
                )?;
            }
            return Ok(None);
        }
        let index = user_data as usize;
        match self.entries.get(index) {
            Some(e) if e.in_kernel => {
                self.mark_returned(index);
            }
            _ => {
                tracing::warn!(
                    user_data,
                    res,
                    "completion for no entry in the kernel; ignored"
                );
                return Ok(None);
            }
        }
        if res < 0 {
            self.command_failed(index, -res);
            return Ok(None);
        }
        Ok(Some(index))
    }

    /// The kernel gave an entry back with an error: it stays in user space.
    fn command_failed(&mut self, index: usize, errno: i32) {
        match errno {
            // The queue stopped (unmount, abort), the ring or the connection
            // is going away, or io_uring was turned off for the connection.
            libc::ENOTCONN
            | libc::ECONNABORTED
            | libc::ECANCELED
            | libc::ENODEV
            | libc::EOPNOTSUPP => {
                if !self.gone {
                    tracing::debug!(
                        "ring entry returned: {} (connection ending)",
                        io::Error::from_raw_os_error(errno)
                    );
                }
                self.gone = true;
            }
            _ => {
                self.shared
                    .counters
                    .failed_commands
                    .fetch_add(1, Ordering::Relaxed);
                let qid = self.plan.queues[self.entries[index].queue].qid;
                let err = io::Error::from_raw_os_error(errno);
                if std::mem::replace(&mut self.logged_failed, true) {
                    tracing::debug!(qid, "ring command failed: {err}; entry parked");
                } else {
                    tracing::warn!(qid, "ring command failed: {err}; entry parked");
                }
            }
        }
    }

    fn push(&self, ring: &mut Ring, sqe: squeue::Entry128) -> io::Result<()> {
        for _ in 0..3 {
            // SAFETY: the only pointer an SQE carries is REGISTER's iovec
            // array, inside `self.entries`, which outlives the ring; the
            // memory the iovecs describe stays mapped until the ring is
            // closed (see the module docs).
            if unsafe { ring.submission().push(&sqe) }.is_ok() {
                return Ok(());
            }
            submit(ring)?;
        }
        Err(io::Error::other("the io_uring submission queue stays full"))
    }
}
