//! Lock waits on a ring queue: a request that waits indefinitely (SETLKW)
//! is answered on a thread of its own, the queue gets entries added for
//! the ones such waits hold, and a [`Kicker`] issues a request on the
//! queue so that what the kernel queued meanwhile is handed out.
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
use fuse_abi::InHeader;
use fuse_server::opcode_table::opcode_info_raw;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use zerocopy::FromBytes;

impl QueueThread {
    /// A request that waits indefinitely (SETLKW: a blocking lock) would
    /// stop this queue for as long as another process holds the lock, and
    /// the unlock that ends the wait may be issued on this queue's CPU. So
    /// it is answered on a thread of its own, in place in its entry, and
    /// committed here once answered ([`QueueThread::commit_handed_off`];
    /// the thread wakes this one). The thread keeps the entry's memory
    /// mapped until it is done, even if this ring is closed meanwhile (a
    /// stop ends lock waits through `Server::stop_waits`). Returns whether
    /// the entry was handed off; `false` leaves it to [`QueueThread::answer`].
    pub(super) fn hand_off(&mut self, index: usize) -> bool {
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
pub(super) struct Kicker {
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
