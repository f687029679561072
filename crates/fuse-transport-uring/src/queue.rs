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
//! [`Server::handle`] before looking at the next CQE, so a queue serves one
//! request at a time. With [`crate::UringConfig::runtime`] (feature
//! `async`) the thread instead runs an `async-io` runtime and serves every
//! request as a task (`async_queue.rs`): everything that needs is per
//! entry, so many entries can be in user space at once. A
//! [`RingTransaction`] only points into its own entry (its header and its
//! payload or pool buffer, which the kernel hands to one entry at a time),
//! and the commit is one SQE pushed whenever that entry's task has written
//! its reply. Pool offsets are checked for range and alignment (whole
//! buffers only); the kernel lends a pool buffer to one entry at a time,
//! and a task holds its entry from the CQE to the commit.

#[cfg(feature = "async")]
#[path = "async_queue.rs"]
mod async_queue;

use crate::cmd;
use crate::fault::UringFault;
use crate::session::Shared;
use crate::sys::{self, EventFd, Mapping};
use crate::zero_copy::{self, Direction, FixedRing, ZeroCopyEntry};
use fuse_abi::uring::{EntFlags, UringEntInOut, UringReqHeader, IN_OUT_HEADER_SZ, OP_IN_OUT_SZ};
use fuse_abi::{InHeader, Opcode, OutHeader, ReadIn, WriteIn};
use fuse_server::io::{ZeroCopyReader, ZeroCopyWriter};
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{RawRequest, Transaction};
use io_uring::{cqueue, squeue, IoUring};
use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, IntoBytes};

/// `user_data` of the wake eventfd's poll.
const WAKE_USER_DATA: u64 = u64::MAX;

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
    pub(crate) entries_per_queue: usize,
    /// Size of a per-entry payload buffer (at least the kernel's
    /// `max_payload_sz`).
    pub(crate) payload_size: usize,
    pub(crate) dev_fd: RawFd,
    /// The mount's root, where [`Kicker`] issues its requests.
    pub(crate) mountpoint: std::path::PathBuf,
    pub(crate) defer_taskrun: bool,
    pub(crate) wake: Arc<EventFd>,
    pub(crate) fault: Option<UringFault>,
    /// Async mode: the runtime the thread serves its entries on.
    #[cfg(feature = "async")]
    pub(crate) runtime: Option<async_io::RuntimeType>,
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
pub(crate) type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

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
    if thread.in_flight > 0 {
        tracing::debug!(
            entries = thread.in_flight,
            "closing a ring with entries in the kernel (they are cancelled)"
        );
    }
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

    fn create_ring(&mut self) -> Result<Ring, String> {
        // At most one SQE per entry, plus the wake poll.
        let sq = (self.entries.len() + 2).next_power_of_two() as u32;
        // Room in the completion queue for a CQE of every entry the thread
        // may ever have, the entries added for lock waits included: an
        // overflowing completion queue holds CQEs back from the ring
        // thread (and with them the entries, which stay out of reach of
        // the kernel's requests).
        let most =
            self.plan.queues.len() * (self.plan.entries_per_queue.max(1) + MAX_ADDED_ENTRIES) + 2;
        let cq = (most.next_power_of_two() as u32).clamp(2 * sq, MAX_CQ_ENTRIES);
        let ring = build_ring_with_cq(sq, cq, self.plan.defer_taskrun)
            .map_err(|e| format!("creating an io_uring: {e}"))?;
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
            register_table(&ring, registered.map(|p| &*p.region), slots).map_err(|e| {
                format!("registering a buffer table of {slots} slots with an io_uring: {e}")
            })?;
            self.table_slots = slots;
        } else if let Some(pool) = registered {
            register_pool(&ring, &pool.region)
                .map_err(|e| format!("registering the buffer pools with an io_uring: {e}"))?;
        }
        Ok(ring)
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
        if self.hand_off(index) {
            self.keep_entries_free(ring, index)?;
            return Ok(());
        }
        let commit_id = self.answer(ring, index);
        self.commit(ring, index, commit_id)
    }

    /// A request that waits indefinitely (SETLKW: a blocking lock) would
    /// stop this queue for as long as another process holds the lock, and
    /// the unlock that ends the wait may be issued on this queue's CPU. So
    /// it is answered on a thread of its own, in place in its entry, and
    /// committed here once answered ([`QueueThread::commit_handed_off`];
    /// the thread wakes this one). The thread keeps the entry's memory
    /// mapped until it is done, even if this ring is closed meanwhile (a
    /// stop ends lock waits through `Server::stop_waits`). Returns whether
    /// the entry was handed off; `false` leaves it to [`QueueThread::answer`].
    fn hand_off(&mut self, index: usize) -> bool {
        let e = &self.entries[index];
        let queue = &self.plan.queues[e.queue];
        // SAFETY: as in `answer`: the entry is in user space, its header
        // aligned and ours alone.
        let (in_out, ent) = unsafe {
            (
                std::ptr::read(std::ptr::addr_of!((*e.header).in_out)),
                std::ptr::read(std::ptr::addr_of!((*e.header).ring_ent_in_out)),
            )
        };
        let Some(header) = InHeader::read_from_prefix(&in_out).ok().map(|(h, _)| h) else {
            return false;
        };
        if !opcode_info_raw(header.opcode).is_some_and(|i| i.waits_indefinitely()) {
            return false;
        }
        let Ok(view) = self.locate(e, queue, Some(header), &ent) else {
            return false;
        };
        if view.zero_copy.is_some() {
            // Its pages are in this ring's table: served here.
            return false;
        }
        let mut memory = vec![self._headers.clone()];
        memory.extend(self._payloads.clone());
        memory.extend(queue.pool.as_ref().map(|p| p.region.clone()));
        memory.extend(self.added_memory.iter().cloned());
        let detached = DetachedTransaction {
            // SAFETY: no zero-copy part (checked above).
            tx: unsafe { self.transaction(index, &view, std::ptr::null()) },
            _memory: memory,
        };
        let server = self.shared.server.clone();
        let done = self.handed_off.clone();
        let wake = self.plan.wake.clone();
        let (unique, commit_id) = (header.unique, ent.commit_id);
        let spawned = std::thread::Builder::new()
            .name("fuse-uring-wait".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let mut detached = detached;
                let tx = &mut detached.tx;
                let result =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.handle(tx)));
                if !tx.replied {
                    write_reply(tx.header, unique, -libc::EIO, 0);
                }
                if let Ok(Err(err)) = result {
                    tracing::debug!(unique, "handling a ring request: {err}");
                }
                done.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((index, commit_id));
                wake.signal();
            });
        match spawned {
            Ok(_) => {
                self.shared
                    .counters
                    .request(queue.qid as usize, header.opcode);
                true
            }
            Err(err) => {
                tracing::warn!("starting a thread for a lock wait ({err}); it waits on the queue");
                false
            }
        }
    }

    /// Commits the handed-off entries that were answered.
    fn commit_handed_off(&mut self, ring: &mut Ring) -> io::Result<()> {
        let done = std::mem::take(&mut *self.handed_off.lock().unwrap_or_else(|e| e.into_inner()));
        for (index, commit_id) in done {
            if self.stopping || self.gone {
                // The ring goes away (or the connection has): nothing to
                // hand the reply to.
                continue;
            }
            self.commit(ring, index, commit_id)?;
        }
        Ok(())
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

    /// Entry `index` came back from the kernel (its CQE).
    fn mark_returned(&mut self, index: usize) {
        self.entries[index].in_kernel = false;
        self.in_flight -= 1;
    }

    /// Entry `index` now carries a request that waits indefinitely (a lock
    /// wait): the kernel hands a queue's requests only to its registered
    /// entries, and those it holds are not available to any other request
    /// issued on that CPU (the holder's unlock among them). So for every
    /// entry lock waits hold, the queue gets one more: made when needed
    /// (a chunk at a time), registered, and kept (there is no unregister),
    /// up to [`MAX_ADDED_ENTRIES`] per queue.
    pub(crate) fn keep_entries_free(&mut self, ring: &mut Ring, index: usize) -> io::Result<()> {
        let qi = self.entries[index].queue;
        self.entries[index].long_wait = true;
        self.held_by_waits[qi] += 1;
        self.add_entry_for_waits(ring, qi)?;
        self.kick(ring, qi)
    }

    /// Registers one more entry on queue `qi` if its lock waits hold more
    /// entries than were added for them.
    fn add_entry_for_waits(&mut self, ring: &mut Ring, qi: usize) -> io::Result<()> {
        if self.stopping || self.gone || self.held_by_waits[qi] <= self.added[qi] {
            return Ok(());
        }
        if self.added[qi] >= MAX_ADDED_ENTRIES {
            if !std::mem::replace(&mut self.logged_added_limit, true) {
                tracing::warn!(
                    qid = self.plan.queues[qi].qid,
                    waits = self.held_by_waits[qi],
                    "lock waits hold {MAX_ADDED_ENTRIES} added ring entries of a queue; \
                     further requests from its CPU wait for an entry"
                );
            }
            return Ok(());
        }
        if self.spare[qi].is_empty() {
            if let Err(e) = self.make_entries(qi) {
                tracing::warn!("adding ring entries for lock waits: {e}");
                return Ok(());
            }
        }
        let Some(new) = self.spare[qi].pop() else {
            return Ok(());
        };
        let qid = self.plan.queues[qi].qid;
        let sqe = cmd::register(
            qid,
            &self.entries[new].iov,
            new as u64,
            self.fixed_index(qi),
            self.zero_copy_slot(new),
        );
        self.push(ring, sqe)?;
        self.mark_in_kernel(new);
        self.added[qi] += 1;
        tracing::debug!(
            qid,
            added = self.added[qi],
            "ring entry added: lock waits hold entries"
        );
        Ok(())
    }

    /// After a lock wait took an entry of queue `qi`: requests the kernel
    /// queued while the queue had no free entry stay queued even once
    /// entries were added (REGISTER makes an entry available but hands it
    /// no queued request; only a commit on the queue or a new request does),
    /// and one of them may be what ends the waits (the holder's unlock, its
    /// FLUSH or RELEASE). Whether the kernel queued any, the daemon can't
    /// see (an entry it already pushed back may not have reached the kernel
    /// yet). So the queue gets a new request of our own, issued on the
    /// queue's CPU (a forced stat of the mount's root, see [`Kicker`]): it
    /// takes a free entry and hands out the oldest queued request first.
    /// Each lock wait does this once, so each request queued behind waits
    /// gets its turn, and a request served that way commits and hands out
    /// the next.
    fn kick(&mut self, ring: &mut Ring, qi: usize) -> io::Result<()> {
        if self.stopping || self.gone {
            return Ok(());
        }
        // The new entries must be in the kernel before the stat is issued,
        // or it would be queued too.
        submit(ring)?;
        let qid = self.plan.queues[qi].qid;
        self.kicker
            .get_or_insert_with(|| Kicker::new(self.plan.mountpoint.clone()))
            .kick(qid);
        Ok(())
    }

    /// Makes [`ADDED_CHUNK`] unregistered entries for queue `qi`, with
    /// memory of their own.
    fn make_entries(&mut self, qi: usize) -> io::Result<()> {
        if self.table_slots > 0
            && zero_copy::FIRST_ENTRY_SLOT + self.entries.len() + ADDED_CHUNK > self.table_slots
        {
            // A zero-copy entry without a slot of the ring's table would
            // fail its requests' reads and writes.
            return Err(io::Error::other(format!(
                "the ring's buffer table ({} slots) has no slot for more entries",
                self.table_slots
            )));
        }
        let headers = Arc::new(Mapping::new(ADDED_CHUNK * HEADER_STRIDE)?);
        self.shared.counters.track(headers.clone());
        let payloads = if self.plan.queues[qi].pool.is_none() {
            let len = ADDED_CHUNK
                .checked_mul(self.plan.payload_size)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
            let p = Arc::new(Mapping::new(len)?);
            self.shared.counters.track(p.clone());
            Some(p)
        } else {
            None
        };
        for i in 0..ADDED_CHUNK {
            // SAFETY: `i < ADDED_CHUNK`: inside the header mapping.
            let header = unsafe { headers.as_ptr().add(i * HEADER_STRIDE) };
            let (payload, len) = match &payloads {
                // SAFETY: one buffer per entry; the mapping was sized for them.
                Some(p) => (
                    unsafe { p.as_ptr().add(i * self.plan.payload_size) },
                    self.plan.payload_size,
                ),
                None => (std::ptr::null_mut(), 0),
            };
            self.spare[qi].push(self.entries.len());
            self.entries
                .push(Entry::new(qi, header.cast(), payload, len));
        }
        self.added_memory.push(headers);
        self.added_memory.extend(payloads);
        Ok(())
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

    /// The transaction of the request in entry `index`, located at `view`;
    /// `fixed`: the ring its zero-copy operations run on (null when the
    /// view has no zero-copy part).
    ///
    /// # Safety
    ///
    /// The entry must be in user space until the transaction is dropped,
    /// and `fixed` valid (and used on this thread only) until then.
    pub(crate) unsafe fn transaction(
        &self,
        index: usize,
        view: &View,
        fixed: *const FixedRing,
    ) -> RingTransaction<'static> {
        let e = &self.entries[index];
        let queue = &self.plan.queues[e.queue];
        let zero_copy_queue = queue.pool.as_ref().is_some_and(|p| p.zero_copy);
        let zero_copy = view.zero_copy.map(|(direction, size)| {
            let slot = self.zero_copy_slot(index);
            if slot.is_none() {
                tracing::error!(index, "a zero-copy request in an entry without a slot; EIO");
            }
            let counters = &self.shared.counters;
            match direction {
                Direction::Read => &counters.zero_copy_reads,
                Direction::Write => &counters.zero_copy_writes,
            }
            .fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller's contract; the counters live in `shared`,
            // which outlives the ring thread's transactions.
            unsafe { ZeroCopyEntry::new(fixed, counters as *const _, slot, direction, size) }
        });
        RingTransaction {
            header: e.header,
            op_len: view.op_len,
            data: view.data,
            payload_len: view.payload_len,
            capacity: view.capacity,
            replied: false,
            zero_copy,
            zero_copy_queue,
            _entry: PhantomData,
        }
    }

    /// Answers the request in entry `index`, writing the reply into the
    /// entry; returns the commit id to hand it in with.
    fn answer(&mut self, ring: &mut Ring, index: usize) -> u64 {
        let e = &self.entries[index];
        let queue = &self.plan.queues[e.queue];
        // SAFETY: the entry's CQE arrived, so the kernel leaves its header
        // alone until it is committed; the header is 8-byte aligned (page
        // aligned mapping, 512-byte stride).
        let (in_out, ent) = unsafe {
            (
                std::ptr::read(std::ptr::addr_of!((*e.header).in_out)),
                std::ptr::read(std::ptr::addr_of!((*e.header).ring_ent_in_out)),
            )
        };
        let header = InHeader::read_from_prefix(&in_out).ok().map(|(h, _)| h);
        let unique = header.map_or(ent.commit_id, |h| h.unique);
        match self.locate(e, queue, header, &ent) {
            Ok(view) => {
                // The ring is lent to the transaction's zero-copy
                // operations while the file system runs; completions of
                // other entries that arrive meanwhile go to `pending`.
                // SAFETY: `ring` isn't used otherwise until `fixed` goes.
                let fixed =
                    unsafe { FixedRing::new(ring as *mut Ring, std::mem::take(&mut self.pending)) };
                // SAFETY: the entry is in user space until its commit, and
                // `fixed` outlives `tx`, on this thread.
                let mut tx = unsafe { self.transaction(index, &view, &fixed) };
                // A panicking file system method must not take the queue
                // down: every later request issued on its CPU would hang.
                let server = &self.shared.server;
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    server.handle(&mut tx)
                }));
                let replied = tx.replied;
                drop(tx);
                self.pending = fixed.into_others();
                let e = &self.entries[index];
                let queue = &self.plan.queues[e.queue];
                self.shared
                    .counters
                    .request(queue.qid as usize, view.opcode);
                if !replied {
                    // No reply (an unreadable request, an opcode that takes
                    // none, a panic): the entry must go back all the same.
                    write_reply(e.header, unique, -libc::EIO, 0);
                }
                match result {
                    Ok(Ok(_)) => {}
                    Ok(Err(err)) => tracing::debug!(unique, "handling a ring request: {err}"),
                    Err(_) => tracing::error!(
                        unique,
                        opcode = view.opcode,
                        "the file system panicked; the request gets EIO"
                    ),
                }
            }
            Err(why) => {
                self.shared
                    .counters
                    .bad_requests
                    .fetch_add(1, Ordering::Relaxed);
                if std::mem::replace(&mut self.logged_bad, true) {
                    tracing::debug!(qid = queue.qid, unique, "bad ring request: {why}");
                } else {
                    tracing::warn!(qid = queue.qid, unique, "bad ring request: {why}");
                }
                write_reply(e.header, unique, -libc::EIO, 0);
            }
        }
        ent.commit_id
    }

    /// Where a request's parts are, checked against the entry's memory.
    fn locate(
        &self,
        e: &Entry,
        queue: &QueuePlan,
        header: Option<InHeader>,
        ent: &UringEntInOut,
    ) -> Result<View, String> {
        let h = header.ok_or("the entry's in_out area holds no fuse_in_header")?;
        let payload_len = ent.payload_sz as usize;
        let op_len = op_in_len(h.len, payload_len)?;
        let zero_copy = if EntFlags::from_bits_retain(ent.flags).contains(EntFlags::ZERO_COPY) {
            if !queue.pool.as_ref().is_some_and(|p| p.zero_copy) {
                return Err("zero-copy request on a queue that didn't ask for zero copy".into());
            }
            // SAFETY: the entry is in user space; `op_in` is 128 bytes.
            let op_in = unsafe { std::ptr::read(std::ptr::addr_of!((*e.header).op_in)) };
            Some(zero_copy_request(h.opcode, &op_in[..op_len], payload_len)?)
        } else {
            None
        };
        let (data, capacity) = match &queue.pool {
            // A zero-copy READ has no pool buffer: offset 0 is some other
            // entry's buffer (its data goes to the registered pages, its
            // reply has no body in the pool).
            _ if matches!(zero_copy, Some((Direction::Read, _))) => {
                (std::ptr::NonNull::<u8>::dangling().as_ptr(), 0)
            }
            None => (e.payload, self.plan.payload_size),
            Some(pool) => {
                match pool_buffer(h.opcode, payload_len, ent.offset, pool.len, pool.buf_size)? {
                    None => (std::ptr::NonNull::<u8>::dangling().as_ptr(), 0),
                    Some(offset) => {
                        self.shared.counters.pool_offset(ent.offset);
                        // SAFETY: `pool_buffer` checked `offset + buf_size <= len`.
                        (unsafe { pool.base().add(offset) }, pool.buf_size)
                    }
                }
            }
        };
        if payload_len > capacity {
            return Err(format!(
                "payload of {payload_len} bytes in a {capacity}-byte buffer"
            ));
        }
        Ok(View {
            data,
            capacity,
            payload_len,
            op_len,
            opcode: h.opcode,
            zero_copy,
        })
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

/// Length of a request's `op_in` part: `in_header.len` counts the header,
/// the first argument (in `op_in`) and the payload.
fn op_in_len(header_len: u32, payload_len: usize) -> Result<usize, String> {
    (header_len as usize)
        .checked_sub(size_of::<InHeader>() + payload_len)
        .filter(|&n| n <= OP_IN_OUT_SZ)
        .ok_or_else(|| {
            format!(
                "request length {header_len} doesn't fit a header, an op_in of at most {OP_IN_OUT_SZ} bytes and {payload_len} payload bytes"
            )
        })
}

/// The offset of a pooled request's buffer in its queue's pool, or `None`
/// when the request has none: the kernel takes a pool buffer only for a
/// request with payload or out arguments, and otherwise reports offset 0,
/// which would be some other entry's buffer. An offset that isn't a whole
/// buffer inside the pool is an error, never a pointer.
fn pool_buffer(
    opcode: u32,
    payload_len: usize,
    offset: u32,
    pool_len: usize,
    buf_size: usize,
) -> Result<Option<usize>, String> {
    let needs_buffer = payload_len > 0 || opcode_info_raw(opcode).is_some_and(|i| i.has_out_args());
    if !needs_buffer {
        return Ok(None);
    }
    let offset = offset as usize;
    let fits = buf_size > 0
        && offset % buf_size == 0
        && offset
            .checked_add(buf_size)
            .is_some_and(|end| end <= pool_len);
    if !fits {
        return Err(format!(
            "pool offset {offset} is not a buffer of the queue's pool ({pool_len} bytes, {buf_size}-byte buffers)"
        ));
    }
    Ok(Some(offset))
}

/// Where a request lies in an entry's memory.
pub(crate) struct View {
    data: *mut u8,
    capacity: usize,
    payload_len: usize,
    op_len: usize,
    pub(crate) opcode: u32,
    /// A zero-copy request: its direction and byte count (the length of
    /// the pages the kernel registered).
    zero_copy: Option<(Direction, usize)>,
}

/// The direction and byte count of a request the kernel handed over with
/// zero copy: only READ and WRITE qualify (`can_zero_copy_req`), a READ
/// with no payload in the entry, a WRITE whose `payload_sz` is its size
/// (its bytes are in the registered pages, not in the pool buffer).
fn zero_copy_request(
    opcode: u32,
    op_in: &[u8],
    payload_len: usize,
) -> Result<(Direction, usize), String> {
    match Opcode::from_u32(opcode) {
        Some(Opcode::Read) => {
            let (read, _) = ReadIn::read_from_prefix(op_in)
                .map_err(|_| "zero-copy READ without a fuse_read_in")?;
            if payload_len != 0 {
                return Err(format!("zero-copy READ with {payload_len} payload bytes"));
            }
            Ok((Direction::Read, read.size as usize))
        }
        Some(Opcode::Write) => {
            let (write, _) = WriteIn::read_from_prefix(op_in)
                .map_err(|_| "zero-copy WRITE without a fuse_write_in")?;
            if write.size as usize != payload_len {
                return Err(format!(
                    "zero-copy WRITE of {} bytes with payload_sz {payload_len}",
                    write.size
                ));
            }
            Ok((Direction::Write, payload_len))
        }
        _ => Err(format!("zero-copy request with opcode {opcode}")),
    }
}

/// Writes a reply's `fuse_out_header` into the entry's `in_out` area and
/// the body length into `ring_ent_in_out.payload_sz`: what the kernel reads
/// at COMMIT_AND_FETCH (the body itself is already in the payload buffer).
fn write_reply(header: *mut UringReqHeader, unique: u64, error: i32, body_len: usize) {
    let out = OutHeader {
        len: (size_of::<OutHeader>() + body_len) as u32,
        error,
        unique,
    };
    // SAFETY: the entry is in user space (between its CQE and its commit),
    // so only this thread accesses its header; both writes stay inside the
    // header (`in_out` is 128 bytes, `payload_sz` a field).
    unsafe {
        let dst = std::ptr::addr_of_mut!((*header).in_out).cast::<u8>();
        std::ptr::copy_nonoverlapping(out.as_bytes().as_ptr(), dst, size_of::<OutHeader>());
        std::ptr::addr_of_mut!((*header).ring_ent_in_out.payload_sz).write(body_len as u32);
    }
}

const _: () = assert!(size_of::<OutHeader>() <= IN_OUT_HEADER_SZ);
const _: () = assert!(size_of::<InHeader>() <= IN_OUT_HEADER_SZ);

/// A request in a ring entry, answered in place.
///
/// The header comes from the entry's `in_out` area, the opcode's fixed
/// argument from `op_in`, the rest from the payload buffer (the entry's own
/// or its pool buffer), where the reply body goes too.
pub(crate) struct RingTransaction<'a> {
    header: *mut UringReqHeader,
    op_len: usize,
    data: *mut u8,
    payload_len: usize,
    capacity: usize,
    pub(crate) replied: bool,
    /// A READ or WRITE the kernel handed over with zero copy.
    zero_copy: Option<ZeroCopyEntry>,
    /// The entry's queue has zero copy.
    zero_copy_queue: bool,
    _entry: PhantomData<&'a mut UringReqHeader>,
}

// SAFETY: the transaction only points into its own entry's header and
// buffer, which it uses exclusively for its lifetime.
unsafe impl Send for RingTransaction<'_> {}

impl Transaction for RingTransaction<'_> {
    fn request(&self) -> RawRequest<'_> {
        // SAFETY: the entry is in user space for the transaction's lifetime;
        // the views are shared and `&self` keeps `reply_buffer`/`send_reply`
        // (which take `&mut self`) from running while they live. `op_len`
        // and `payload_len` were checked against the areas' sizes.
        unsafe {
            let in_out = &*std::ptr::addr_of!((*self.header).in_out);
            let op_in = &*std::ptr::addr_of!((*self.header).op_in);
            RawRequest {
                header: &in_out[..size_of::<InHeader>()],
                op_header: Some(&op_in[..self.op_len]),
                payload: std::slice::from_raw_parts(self.data, self.payload_len),
            }
        }
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        // SAFETY: `data` has `capacity` bytes of this entry's buffer (or is
        // dangling with capacity 0); `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.capacity) }
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        let (error, body_len) = match &self.zero_copy {
            // The data went where told but a bounce copy failed: the
            // request fails rather than return what isn't there.
            Some(zc) if error == 0 && zc.failed().is_some() => {
                (-zc.failed().unwrap_or(libc::EIO), 0)
            }
            // The body of a zero-copy READ is in the registered pages:
            // its length is what was moved there.
            Some(zc) if zc.direction() == Direction::Read => (
                error,
                if error == 0 {
                    body_len.min(zc.done())
                } else {
                    0
                },
            ),
            _ if error == 0 => (0, body_len.min(self.capacity)),
            _ => (error, 0),
        };
        write_reply(self.header, unique, error, body_len);
        self.replied = true;
        Ok(())
    }

    fn zero_copy_writer(&mut self) -> Option<&mut dyn ZeroCopyWriter> {
        match &mut self.zero_copy {
            Some(zc) if zc.direction() == Direction::Read => Some(zc),
            _ => None,
        }
    }

    fn zero_copy_reader(&mut self) -> Option<&mut dyn ZeroCopyReader> {
        match &mut self.zero_copy {
            Some(zc) if zc.direction() == Direction::Write => Some(zc),
            _ => None,
        }
    }

    fn zero_copy_queue(&self) -> bool {
        self.zero_copy_queue
    }
}

/// Issues one request on a given queue per kick: a
/// `statx(AT_STATX_FORCE_SYNC)` of the mount's root (always a GETATTR or
/// STATX to the daemon) from the queue's CPU, since the kernel picks the
/// queue by the CPU a request is issued on. See
/// [`QueueThread::kick`].
///
/// Each kick runs on a short-lived thread of its own: a kick's request may
/// itself be queued behind others until later commits hand it out, and
/// the kicks after it must not wait for it.
struct Kicker {
    mountpoint: Arc<std::path::Path>,
    running: Arc<AtomicUsize>,
}

/// Kicks waiting for their answer at most; more are dropped (each lock wait
/// that takes an entry kicks again).
const MAX_RUNNING_KICKS: usize = 256;

impl Kicker {
    fn new(mountpoint: std::path::PathBuf) -> Self {
        Self {
            mountpoint: mountpoint.into(),
            running: Arc::default(),
        }
    }

    /// Issues one request on queue `qid`, on a thread of its own.
    fn kick(&self, qid: u16) {
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_RUNNING_KICKS {
            self.running.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(
                qid,
                "kicking a ring queue: {MAX_RUNNING_KICKS} kicks running"
            );
            return;
        }
        let mountpoint = self.mountpoint.clone();
        let running = self.running.clone();
        let spawned = std::thread::Builder::new()
            .name("fuse-uring-kick".into())
            .stack_size(64 << 10)
            .spawn(move || {
                if let Err(e) = sys::pin_current_thread(&[qid as usize]) {
                    tracing::debug!(qid, "kicking a ring queue: pinning: {e}");
                }
                match sys::open_path(&mountpoint) {
                    Ok(root) => {
                        if let Err(e) = sys::statx_force_sync(&root) {
                            tracing::debug!(qid, "kicking a ring queue: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("kicking ring queues: opening {}: {e}", mountpoint.display())
                    }
                }
                running.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.running.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(qid, "kicking a ring queue: starting a thread: {e}");
        }
    }
}

/// A [`RingTransaction`] answered on another thread, with the mappings its
/// pointers lead into: they stay mapped while it lives.
struct DetachedTransaction {
    tx: RingTransaction<'static>,
    _memory: Vec<Arc<Mapping>>,
}

/// Registers a sparse buffer table of `slots` slots with `ring`: the pool
/// mapping `pool` (if registered) at [`cmd::POOL_BUF_INDEX`], every other
/// slot empty (`{NULL, 0}`), for the kernel to register zero-copy
/// requests' pages in.
fn register_table(ring: &Ring, pool: Option<&Mapping>, slots: usize) -> io::Result<()> {
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iovs = vec![empty; slots.max(1)];
    if let Some(pool) = pool {
        iovs[cmd::POOL_BUF_INDEX as usize] = libc::iovec {
            iov_base: pool.as_ptr().cast(),
            iov_len: pool.len(),
        };
    }
    // SAFETY: as in `register_pool`; the empty slots name no memory.
    unsafe { ring.submitter().register_buffers(&iovs) }
}

/// Registers the pool mapping `region` as slot [`cmd::POOL_BUF_INDEX`] of
/// `ring`'s buffer table (the ring's only registered buffer).
pub(crate) fn register_pool(ring: &Ring, region: &Mapping) -> io::Result<()> {
    let iov = libc::iovec {
        iov_base: region.as_ptr().cast(),
        iov_len: region.len(),
    };
    // SAFETY: the region is mapped for as long as the session lives, and
    // the ring threads' rings are closed before it goes (`run`), as is the
    // setup ring (which unregisters it at once).
    unsafe { ring.submitter().register_buffers(&[iov]) }
}

/// Creates a ring with 128-byte SQEs, trying the cheaper task-run modes
/// first.
pub(crate) fn build_ring(entries: u32, defer_taskrun: bool) -> io::Result<Ring> {
    build_ring_with_cq(entries, entries.saturating_mul(2), defer_taskrun)
}

/// The kernel's largest completion queue (`IORING_MAX_CQ_ENTRIES`).
const MAX_CQ_ENTRIES: u32 = 2 * 32768;

/// [`build_ring`] with a completion queue of `cq` entries.
fn build_ring_with_cq(entries: u32, cq: u32, defer_taskrun: bool) -> io::Result<Ring> {
    if defer_taskrun {
        match IoUring::builder()
            .dontfork()
            .setup_cqsize(cq)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
        {
            Ok(ring) => return Ok(ring),
            Err(e) => tracing::debug!("io_uring without DEFER_TASKRUN: {e}"),
        }
    }
    match IoUring::builder()
        .dontfork()
        .setup_cqsize(cq)
        .setup_coop_taskrun()
        .build(entries)
    {
        Ok(ring) => Ok(ring),
        Err(e) => {
            tracing::debug!("io_uring without COOP_TASKRUN: {e}");
            IoUring::builder()
                .dontfork()
                .setup_cqsize(cq)
                .build(entries)
        }
    }
}

/// Submits what is queued (EINTR retried).
pub(crate) fn submit(ring: &mut Ring) -> io::Result<()> {
    loop {
        match ring.submit() {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            // The completion queue is full: the caller reaps first.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
            Err(e) => return Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
        }
    }
}

/// Submits and waits for at least one completion.
pub(crate) fn wait(ring: &mut Ring) -> io::Result<()> {
    match ring.submit_and_wait(1) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            // Out of kernel memory for the moment: try again shortly.
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
    }
}

fn wait_timeout(ring: &mut Ring, timeout: Duration) -> io::Result<()> {
    let ts = io_uring::types::Timespec::from(timeout);
    let args = io_uring::types::SubmitArgs::new().timespec(&ts);
    match ring.submitter().submit_with_args(1, &args) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINTR | libc::EBUSY | libc::ETIME)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
    }
}

/// Takes every completion off the queue.
pub(crate) fn reap(ring: &mut Ring) -> Vec<(u64, i32)> {
    let mut out = Vec::new();
    reap_into(ring, &mut out);
    out
}

/// Appends the completions waiting in `ring` to `out` (the serving loops
/// keep one vector, so that reaping allocates nothing once it has grown).
pub(crate) fn reap_into(ring: &mut Ring, out: &mut Vec<(u64, i32)>) {
    out.extend(ring.completion().map(|c| (c.user_data(), c.result())));
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_abi::Opcode;

    const BUF: usize = 1 << 20;

    #[test]
    fn pool_offsets_are_checked() {
        let write = Opcode::Write as u32;
        assert_eq!(pool_buffer(write, 4096, 0, 4 * BUF, BUF), Ok(Some(0)));
        assert_eq!(
            pool_buffer(write, 4096, 3 * BUF as u32, 4 * BUF, BUF),
            Ok(Some(3 * BUF))
        );
        // Past the end, straddling the end, not a buffer boundary.
        assert!(pool_buffer(write, 1, 4 * BUF as u32, 4 * BUF, BUF).is_err());
        assert!(pool_buffer(write, 1, u32::MAX, 4 * BUF, BUF).is_err());
        assert!(pool_buffer(write, 1, 4096, 4 * BUF, BUF).is_err());
        assert!(pool_buffer(write, 1, 0, BUF - 1, BUF).is_err());
    }

    #[test]
    fn no_payload_and_no_out_arguments_means_no_buffer() {
        // FLUSH, RELEASE, FSYNC: nothing in, nothing out; offset 0 is not
        // theirs (another entry may hold buffer 0).
        for op in [Opcode::Flush, Opcode::Release, Opcode::Fsync, Opcode::Setlk] {
            assert_eq!(
                pool_buffer(op as u32, 0, 0, 4 * BUF, BUF),
                Ok(None),
                "{op:?}"
            );
            // Even a nonsense offset is harmless then.
            assert_eq!(pool_buffer(op as u32, 0, u32::MAX, 4 * BUF, BUF), Ok(None));
        }
        // GETATTR has out arguments, READ too: a buffer even without payload.
        assert_eq!(
            pool_buffer(Opcode::Getattr as u32, 0, BUF as u32, 4 * BUF, BUF),
            Ok(Some(BUF))
        );
        assert_eq!(
            pool_buffer(Opcode::Read as u32, 0, 0, 4 * BUF, BUF),
            Ok(Some(0))
        );
        // UNLINK has no out arguments but a name in the payload.
        assert_eq!(
            pool_buffer(Opcode::Unlink as u32, 6, 2 * BUF as u32, 4 * BUF, BUF),
            Ok(Some(2 * BUF))
        );
        // An unknown opcode with no payload gets no buffer (and ENOSYS).
        assert_eq!(pool_buffer(9999, 0, 0, 4 * BUF, BUF), Ok(None));
    }

    #[test]
    fn op_in_length_follows_the_header() {
        // WRITE: 40-byte header, 40-byte fuse_write_in, 4096 data bytes.
        assert_eq!(op_in_len(40 + 40 + 4096, 4096), Ok(40));
        // LOOKUP: empty first argument, the name in the payload.
        assert_eq!(op_in_len(40 + 6, 6), Ok(0));
        assert!(op_in_len(40 + 129, 0).is_err());
        assert!(op_in_len(40, 10).is_err());
        assert!(op_in_len(0, 0).is_err());
    }
}
