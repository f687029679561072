//! The ring transaction: locating a request in an entry's memory (its
//! header, `op_in`, the payload buffer or pool buffer, a zero-copy part),
//! answering it in place with [`RingTransaction`], and writing the reply
//! header the kernel reads at COMMIT_AND_FETCH.
//!
//! Apart from `queue.rs` because it is everything about one entry's
//! memory, shared by the synchronous loop, the async loop
//! (`async_queue.rs`) and the lock-wait threads (`lock_waits.rs`).

use super::{Entry, QueuePlan, QueueThread, Ring};
use crate::fault::UringFault;
use crate::zero_copy::{Direction, FixedRing, ZeroCopyEntry};
use fuse_abi::uring::{EntFlags, UringEntInOut, UringReqHeader, IN_OUT_HEADER_SZ, OP_IN_OUT_SZ};
use fuse_abi::{InHeader, Opcode, OutHeader, ReadIn, WriteIn};
use fuse_server::io::{ZeroCopyReader, ZeroCopyWriter};
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{RawRequest, Transaction};
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use zerocopy::{FromBytes, IntoBytes};

impl QueueThread {
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
    pub(super) fn answer(&mut self, ring: &mut Ring, index: usize) -> u64 {
        if self.plan.fault == Some(UringFault::PanicInRingThread) {
            panic!("injected panic in a ring thread");
        }
        let (header, ent) = self.request_header(index);
        let e = &self.entries[index];
        let queue = &self.plan.queues[e.queue];
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
            Err(why) => self.refuse_bad_request(index, unique, &why),
        }
        ent.commit_id
    }

    /// The request the kernel put in entry `index`: its `fuse_in_header`
    /// (`None` where the entry's `in_out` area holds none) and the entry's
    /// `ring_ent_in_out`. Only for an entry in user space (between its CQE
    /// and its commit), which is when every caller asks.
    pub(super) fn request_header(&self, index: usize) -> (Option<InHeader>, UringEntInOut) {
        let header = self.entries[index].header;
        // SAFETY: the entry's CQE arrived, so the kernel leaves its header
        // alone until it is committed; the header is 8-byte aligned (page
        // aligned mapping, 512-byte stride).
        let (in_out, ent) = unsafe {
            (
                std::ptr::read(std::ptr::addr_of!((*header).in_out)),
                std::ptr::read(std::ptr::addr_of!((*header).ring_ent_in_out)),
            )
        };
        let in_header = InHeader::read_from_prefix(&in_out).ok().map(|(h, _)| h);
        (in_header, ent)
    }

    /// Answers the request in entry `index` that [`QueueThread::locate`]
    /// refused (`why`) with EIO, counting it and logging it: a warning for
    /// the first on this thread, at debug level after.
    pub(super) fn refuse_bad_request(&mut self, index: usize, unique: u64, why: &str) {
        self.shared
            .counters
            .bad_requests
            .fetch_add(1, Ordering::Relaxed);
        let e = &self.entries[index];
        let qid = self.plan.queues[e.queue].qid;
        if std::mem::replace(&mut self.logged_bad, true) {
            tracing::debug!(qid, unique, "bad ring request: {why}");
        } else {
            tracing::warn!(qid, unique, "bad ring request: {why}");
        }
        write_reply(e.header, unique, -libc::EIO, 0);
    }

    /// Where a request's parts are, checked against the entry's memory.
    pub(super) fn locate(
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
    pub(super) zero_copy: Option<(Direction, usize)>,
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
pub(super) fn write_reply(header: *mut UringReqHeader, unique: u64, error: i32, body_len: usize) {
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
    pub(super) header: *mut UringReqHeader,
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
