//! The seam between a transport and the [`Server`](super::Server): the
//! [`Transaction`] a transport implements over its own request and reply
//! memory, the [`Outcome`] of handling one, and the per-opcode
//! [`RequestCounters`] every request bumps.
//!
//! Apart from `server.rs` because these are what a transport sees and
//! counts, not how the server answers.

use crate::io::{ZeroCopyReader, ZeroCopyWriter};
use crate::request::RawRequest;
use fuse_abi::Opcode;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// One request a transport received, with the memory its reply goes into.
///
/// A transport implements this over its own buffers: a `/dev/fuse` read
/// buffer and reply buffer, a ring entry's header and payload, or a pool
/// buffer at the offset the kernel reported. The server reads the request,
/// lets the file system fill [`Transaction::reply_buffer`] (READ data goes
/// straight there), and calls [`Transaction::send_reply`] once.
pub trait Transaction: Send {
    /// The request's bytes.
    fn request(&self) -> RawRequest<'_>;

    /// Memory for the reply body (what follows `fuse_out_header`). It must
    /// hold at least [`Negotiated::max_reply_size`](crate::init::Negotiated::max_reply_size) bytes once INIT is done,
    /// and 4096 before. It may share memory with the request's payload: the
    /// server doesn't read the request once it asked for this.
    fn reply_buffer(&mut self) -> &mut [u8];

    /// Sends the reply: a `fuse_out_header` with `unique`, `error` (0 or a
    /// negative errno) and the length, then the first `body_len` bytes of
    /// [`Transaction::reply_buffer`].
    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()>;

    /// The request is a READ whose data the transport moves itself (FUSE
    /// over io_uring zero copy, see [`crate::io`]): the server answers it
    /// through this writer instead of [`Transaction::reply_buffer`], and
    /// the reply's body length is what was written.
    fn zero_copy_writer(&mut self) -> Option<&mut dyn ZeroCopyWriter> {
        None
    }

    /// The request is a WRITE whose data the transport moves itself: the
    /// server answers it from this reader instead of the request's bytes
    /// (which hold no data then).
    fn zero_copy_reader(&mut self) -> Option<&mut dyn ZeroCopyReader> {
        None
    }

    /// The request came through a queue that moves READ and WRITE data of
    /// files opened with [`fuse_abi::FopenFlags::IO_URING_ZERO_COPY`]
    /// itself. Elsewhere the server takes that flag off an open's reply.
    fn zero_copy_queue(&self) -> bool {
        false
    }
}

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A reply was sent.
    Replied,
    /// The request takes no reply (FORGET, INTERRUPT, ...).
    NoReply,
    /// The request was unreadable and dropped with a log line.
    Dropped,
    /// The reply could not be delivered because the kernel no longer waits
    /// for it (the request was interrupted or the connection aborted).
    ReplyNotDelivered,
    /// DESTROY was answered: the connection is over.
    Destroyed,
}

/// Counts of requests per opcode.
///
/// Every request bumps one, from whichever thread serves it: the counts are
/// kept in shards, a thread's own, each on cache lines of its own, so that
/// threads on different CPUs don't take the same line from each other on
/// every request; reading sums the shards.
pub struct RequestCounters {
    shards: Box<[CounterShard]>,
}

/// How many shards [`RequestCounters`] keeps (threads share them round
/// robin beyond that).
const COUNTER_SHARDS: usize = 8;

/// One thread's counts: 64 opcodes and one slot for every other.
#[repr(align(128))]
struct CounterShard([AtomicU64; 65]);

/// The shard of the calling thread.
fn counter_shard() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % COUNTER_SHARDS;
    }
    SHARD.with(|s| *s)
}

impl Default for RequestCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestCounters {
    /// All counts zero.
    pub fn new() -> Self {
        Self {
            shards: (0..COUNTER_SHARDS)
                .map(|_| CounterShard(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Counts one request with `opcode` (every opcode from 64 up shares
    /// one slot).
    pub fn bump(&self, opcode: u32) {
        let slot = (opcode as usize).min(64);
        self.shards[counter_shard()].0[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests seen with `opcode`.
    pub fn get(&self, opcode: Opcode) -> u64 {
        let slot = opcode as usize;
        if slot >= 64 {
            return 0;
        }
        self.shards
            .iter()
            .map(|s| s.0[slot].load(Ordering::Relaxed))
            .sum()
    }

    /// Every opcode with a non-zero count.
    pub fn snapshot(&self) -> Vec<(Opcode, u64)> {
        Opcode::ALL
            .iter()
            .filter_map(|&op| {
                let n = self.get(op);
                (n > 0).then_some((op, n))
            })
            .collect()
    }
}
