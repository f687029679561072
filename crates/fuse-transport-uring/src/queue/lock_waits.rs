//! Lock waits on a ring queue: a request that waits indefinitely (SETLKW)
//! is answered on a thread of its own, the queue gets entries added for
//! the ones such waits hold, and a [`Kicker`] has the kernel issue a
//! request on the queue so that what the kernel queued meanwhile is handed out.
//!
//! Apart from `queue.rs` because it is one concern with its own threads
//! and bookkeeping; the serving loop only calls
//! [`QueueThread::hand_off`] and [`QueueThread::commit_handed_off`].

use super::submit;
use super::transaction::{write_reply, RingTransaction};
use super::{Entry, QueueThread, Ring, ADDED_CHUNK, HEADER_STRIDE, MAX_ADDED_ENTRIES};
use crate::cmd;
use crate::sys::{self, Mapping};
use crate::zero_copy;
use fuse_abi::{NotifyCode, NotifyRetrieveOut, Opcode, OutHeader};
use fuse_server::opcode_table::opcode_info_raw;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zerocopy::IntoBytes;

impl QueueThread {
    /// A request that waits indefinitely (SETLKW: a blocking lock) would
    /// stop this queue for as long as another process holds the lock, and
    /// the unlock that ends the wait may be issued on this queue's CPU. So
    /// it is answered on a thread of its own, in place in its entry, and
    /// committed here once answered ([`QueueThread::commit_handed_off`];
    /// the thread wakes this one). The thread keeps the entry's memory
    /// mapped until it is done, even if this ring is closed meanwhile (a
    /// stop ends lock waits through `Server::stop_waits`). Returns the
    /// wait's node id if the entry was handed off; `None` leaves it to
    /// [`QueueThread::answer`].
    pub(super) fn hand_off(&mut self, index: usize) -> Option<u64> {
        let (header, ent) = self.request_header(index);
        let header = header?;
        let e = &self.entries[index];
        let queue = &self.plan.queues[e.queue];
        if !opcode_info_raw(header.opcode).is_some_and(|i| i.waits_indefinitely()) {
            return None;
        }
        let Ok(view) = self.locate(e, queue, Some(header), &ent) else {
            return None;
        };
        if view.zero_copy.is_some() {
            // Its pages are in this ring's table: served here.
            return None;
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
                Some(header.nodeid)
            }
            Err(err) => {
                tracing::warn!("starting a thread for a lock wait ({err}); it waits on the queue");
                None
            }
        }
    }

    /// Commits the handed-off entries that were answered.
    pub(super) fn commit_handed_off(&mut self, ring: &mut Ring) -> io::Result<()> {
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

    /// Entry `index` now carries a request that waits indefinitely (a lock
    /// wait): the kernel hands a queue's requests only to its registered
    /// entries, and those it holds are not available to any other request
    /// issued on that CPU (the holder's unlock among them). So for every
    /// entry lock waits hold, the queue gets one more: made when needed
    /// (a chunk at a time), registered, and kept (there is no unregister),
    /// up to [`MAX_ADDED_ENTRIES`] per queue. `nodeid` is the wait's file,
    /// which the queue's kick names ([`Kicker`]).
    pub(crate) fn keep_entries_free(
        &mut self,
        ring: &mut Ring,
        index: usize,
        nodeid: u64,
    ) -> io::Result<()> {
        let qi = self.entries[index].queue;
        self.entries[index].long_wait = true;
        self.held_by_waits[qi] += 1;
        self.add_entry_for_waits(ring, qi)?;
        self.kick(ring, qi, nodeid)
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
    /// queue's CPU (the reply to a RETRIEVE of nothing, see [`Kicker`]): it
    /// takes a free entry, and its commit hands out the oldest queued
    /// request. Each lock wait does this once, so each request queued
    /// behind waits gets its turn, and a request served that way commits
    /// and hands out the next.
    fn kick(&mut self, ring: &mut Ring, qi: usize, nodeid: u64) -> io::Result<()> {
        if self.stopping || self.gone {
            return Ok(());
        }
        // The new entries must be in the kernel before the stat is issued,
        // or it would be queued too.
        submit(ring)?;
        let qid = self.plan.queues[qi].qid;
        let (dev_fd, cpus) = (self.plan.dev_fd, &self.plan.cpus);
        self.kicker
            .get_or_insert_with(|| Kicker::new(dev_fd, cpus.clone()))
            .kick(qid, nodeid);
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
}

/// Set in the `notify_unique` of every kick's RETRIEVE, which the kernel
/// makes the `unique` of the NOTIFY_REPLY request it issues: how the ring
/// thread tells its own kicks from a file system's retrieves and answers
/// them itself ([`QueueThread::answer_kick`]). The kernel's own ids count
/// up from 2 in steps of 2 and never get near this bit.
const KICK_BIT: u64 = 1 << 62;

/// The next kick's id. Every kick needs its own: over io_uring the kernel
/// finds the request a commit answers by its `unique` (the entry's commit
/// id), so two replies in flight under one id could be matched with each
/// other's entries. Even (bit 0 marks an INTERRUPT's id), never 0 (the
/// kernel refuses a ring commit whose `unique` is 0), distinct for 2^61
/// kicks.
fn next_kick_unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    KICK_BIT | ((n << 1) & (KICK_BIT - 1))
}

/// Issues one request on a given queue per kick, with no path and no
/// wait: a `FUSE_NOTIFY_RETRIEVE` of zero bytes of the waiting lock's file,
/// written to `/dev/fuse` from the queue's CPU. (A regular file: Linux
/// refuses a RETRIEVE of a directory with EINVAL; the waiter holds it open,
/// so its inode is in the kernel's cache.) The kernel answers a RETRIEVE by
/// issuing a NOTIFY_REPLY request from the writing task, and picks the
/// ring queue by the CPU of the task that issues a request, so the reply
/// lands on that queue, takes a free entry (or queues behind the others)
/// and, once committed, hands out the next queued request. See
/// [`QueueThread::kick`].
///
/// Unlike a `stat` of the mountpoint, this needs neither the mount's path
/// (a daemon in its own mount namespace has none) nor a descriptor of it
/// (which would make an `umount` from outside fail with EBUSY), and the
/// write returns at once: the kernel doesn't wait for the reply's commit.
/// The calling thread moves to the queue's CPU for the write and back.
pub(super) struct Kicker {
    dev_fd: std::os::fd::RawFd,
    /// The ring thread's own CPUs: when it is pinned to exactly the
    /// queue's CPU, no move is needed.
    cpus: Vec<usize>,
}

impl Kicker {
    fn new(dev_fd: std::os::fd::RawFd, cpus: Vec<usize>) -> Self {
        Self { dev_fd, cpus }
    }

    /// Issues one request on queue `qid` (the queue of CPU `qid`), a
    /// RETRIEVE of inode `nodeid`.
    fn kick(&self, qid: u16, nodeid: u64) {
        let cpu = qid as usize;
        let saved = if self.cpus == [cpu] {
            None
        } else {
            match fuse_server::sys::current_affinity() {
                Ok(saved) => Some(saved),
                Err(e) => {
                    tracing::debug!(qid, "kicking a ring queue: reading the affinity: {e}");
                    return;
                }
            }
        };
        if saved.is_some() {
            if let Err(e) = sys::pin_current_thread(&[cpu]) {
                // The request would land on another queue.
                tracing::debug!(qid, "kicking a ring queue: moving to its CPU: {e}");
                return;
            }
        }
        let header = OutHeader {
            len: (size_of::<OutHeader>() + size_of::<NotifyRetrieveOut>()) as u32,
            error: NotifyCode::Retrieve as i32,
            unique: 0,
        };
        let retrieve = NotifyRetrieveOut {
            notify_unique: next_kick_unique(),
            nodeid,
            offset: 0,
            size: 0,
            padding: 0,
        };
        let mut bytes = [0u8; size_of::<OutHeader>() + size_of::<NotifyRetrieveOut>()];
        bytes[..size_of::<OutHeader>()].copy_from_slice(header.as_bytes());
        bytes[size_of::<OutHeader>()..].copy_from_slice(retrieve.as_bytes());
        if let Err(e) = sys::write_dev(self.dev_fd, &bytes) {
            // ENOENT: the kernel forgot the file (its waiter is gone, and
            // its wait's entry came back: that commit hands out what was
            // queued); ENODEV: the connection was aborted.
            tracing::debug!(qid, "kicking a ring queue: {e}");
        }
        if let Some(saved) = saved {
            if let Err(e) = fuse_server::sys::set_affinity(&saved) {
                tracing::warn!("a ring thread stays on CPU {cpu} after a kick: {e}");
            }
        }
    }
}

impl QueueThread {
    /// If entry `index` holds the NOTIFY_REPLY of one of our kicks, answers
    /// it in place (the kernel expects no reply, but the entry goes back
    /// with a header all the same) and returns the commit id; the file
    /// system never sees it.
    pub(crate) fn answer_kick(&self, index: usize) -> Option<u64> {
        let (header, ent) = self.request_header(index);
        let header = header?;
        let e = &self.entries[index];
        if header.opcode != Opcode::NotifyReply as u32 || header.unique & KICK_BIT == 0 {
            return None;
        }
        write_reply(e.header, header.unique, 0, 0);
        tracing::trace!(
            qid = self.plan.queues[e.queue].qid,
            "a kick's request arrived"
        );
        Some(ent.commit_id)
    }
}

/// A [`RingTransaction`] answered on another thread, with the mappings its
/// pointers lead into: they stay mapped while it lives.
struct DetachedTransaction {
    tx: RingTransaction<'static>,
    _memory: Vec<Arc<Mapping>>,
}
