//! Keeping the node table bounded: [`Pruner`] offers a file system's cold
//! nodes to the kernel with `FUSE_NOTIFY_PRUNE` (protocol 7.45, Linux
//! 6.18+) once it holds more than a limit, from a thread of its own.
//!
//! A FUSE file system must keep every node the kernel has looked up until
//! the kernel forgets it (FORGET), and the kernel forgets a node only when
//! it evicts the inode, which it does under memory pressure or never. So a
//! walk over a large tree leaves one node per file in the server. With
//! NOTIFY_PRUNE the server names nodes it would like to drop; the kernel
//! then, for each one it has cached, drops the dentries nobody uses and,
//! if that leaves the inode unused, evicts it and sends FORGET as usual.
//!
//! # The contract
//!
//! - Pruning is a request, not a removal. A node the kernel still uses (a
//!   file open, a directory that is a working directory or holds cached
//!   children, a name a request is resolving) is kept by the kernel and
//!   stays valid: the file system must go on serving it, and drops it
//!   only on its FORGET, exactly as without pruning.
//! - A pruned node whose name is used again is looked up again (LOOKUP),
//!   and the file system answers with a new node for the same file, as
//!   for any file the kernel had forgotten.
//! - The kernel ignores node ids it doesn't know; offering the same node
//!   twice or a node already forgotten is harmless. The root is never
//!   dropped.
//! - Nothing waits for the kernel: FORGETs arrive later, on the usual
//!   request path, and the count goes down then.

use crate::Notifier;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

/// The lowest protocol minor version with `FUSE_NOTIFY_PRUNE`.
pub const PRUNE_MINOR: u32 = 45;

/// Node ids per NOTIFY_PRUNE message: the kernel reads them in batches
/// of 512, each under its superblock lock.
pub const PRUNE_BATCH: usize = 512;

/// What a [`Pruner`] asks of the file system whose nodes it bounds.
pub trait PruneSource: Send + Sync {
    /// Nodes held now, the root included.
    fn node_count(&self) -> usize;

    /// Up to `max` node ids worth offering to the kernel, coldest first:
    /// never the root, preferably nodes nothing is using (the kernel keeps
    /// those anyway). A node returned should not be returned again before
    /// the others (the caller offers it now; if the kernel keeps it, it is
    /// in use).
    fn cold_nodes(&self, max: usize) -> Vec<u64>;
}

/// What a [`Pruner`] did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneStats {
    /// The node limit.
    pub limit: usize,
    /// Rounds run (each offers the nodes above the low mark).
    pub rounds: u64,
    /// Node ids offered to the kernel, in all.
    pub offered: u64,
    /// Why pruning is off (the kernel lacks NOTIFY_PRUNE, the connection
    /// is gone), `None` while it works.
    pub off: Option<String>,
}

#[derive(Default)]
struct Wake {
    pending: bool,
    stop: bool,
}

struct Inner {
    limit: usize,
    /// Where a round brings the count back to: an eighth below the limit,
    /// so that a walk triggers a round every eighth of the limit, not
    /// every node.
    low: usize,
    source: Weak<dyn PruneSource>,
    notifier: Weak<Notifier>,
    wake: Mutex<Wake>,
    cv: Condvar,
    rounds: AtomicU64,
    offered: AtomicU64,
    off: AtomicBool,
    off_reason: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bounds a file system's nodes: when [`Pruner::node_added`] sees more
/// than the limit, a thread of the pruner asks the [`PruneSource`] for the
/// coldest nodes down to an eighth below the limit and offers them to the
/// kernel with NOTIFY_PRUNE, [`PRUNE_BATCH`] per message. The nodes go
/// when their FORGET arrives (see the module's contract).
///
/// On a connection older than protocol 7.45 the pruner says so once in
/// the log and stops; the file system then keeps every node, as without
/// one. Dropping the pruner stops its thread.
pub struct Pruner {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
    thread_id: Option<ThreadId>,
}

impl std::fmt::Debug for Pruner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pruner")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Pruner {
    /// Starts a pruner keeping `source` at `limit` nodes (at least 2: the
    /// root and one more), offering through `notifier`. Both are held
    /// weakly: the pruner stops when either is gone.
    pub fn start(
        limit: usize,
        source: Weak<dyn PruneSource>,
        notifier: Weak<Notifier>,
    ) -> io::Result<Self> {
        let limit = limit.max(2);
        let inner = Arc::new(Inner {
            limit,
            low: (limit - limit / 8).max(1),
            source,
            notifier,
            wake: Mutex::default(),
            cv: Condvar::new(),
            rounds: AtomicU64::new(0),
            offered: AtomicU64::new(0),
            off: AtomicBool::new(false),
            off_reason: Mutex::new(None),
        });
        let worker = inner.clone();
        let thread = std::thread::Builder::new()
            .name("fuse-prune".into())
            .spawn(move || worker.run())?;
        let thread_id = Some(thread.thread().id());
        Ok(Self {
            inner,
            thread: Some(thread),
            thread_id,
        })
    }

    /// The node limit.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// The file system holds `count` nodes after adding one: past the
    /// limit, wakes the pruner's thread. Cheap (a comparison) below it;
    /// never blocks on the kernel.
    pub fn node_added(&self, count: usize) {
        if count <= self.inner.limit || self.inner.off.load(Ordering::Relaxed) {
            return;
        }
        let mut wake = lock(&self.inner.wake);
        if !wake.pending {
            wake.pending = true;
            self.inner.cv.notify_one();
        }
    }

    /// What the pruner did so far.
    pub fn stats(&self) -> PruneStats {
        PruneStats {
            limit: self.inner.limit,
            rounds: self.inner.rounds.load(Ordering::Acquire),
            offered: self.inner.offered.load(Ordering::Acquire),
            off: lock(&self.inner.off_reason).clone(),
        }
    }
}

impl Drop for Pruner {
    fn drop(&mut self) {
        lock(&self.inner.wake).stop = true;
        self.inner.cv.notify_one();
        // The thread may hold the last reference to its owner for a moment
        // and so drop the pruner itself: it can't wait for itself.
        if let Some(t) = self.thread.take() {
            if Some(std::thread::current().id()) != self.thread_id {
                let _ = t.join();
            }
        }
    }
}

/// How long a round waits before the count is read again, so that the
/// FORGETs of the nodes just offered come in first (otherwise the same
/// excess would be offered twice): the least time between two rounds.
const SETTLE: Duration = Duration::from_millis(20);

/// The longest wait between rounds while the table stays above the limit
/// without shrinking (every node offered is in use): such a table is
/// scanned again every few seconds, not at every node added.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Inner {
    fn run(&self) {
        // Still above the limit after the last round: the next one runs
        // after this long, nudged or not.
        let mut retry: Option<Duration> = None;
        loop {
            {
                let mut wake = lock(&self.wake);
                while retry.is_none() && !wake.pending && !wake.stop {
                    wake = self.cv.wait(wake).unwrap_or_else(|e| e.into_inner());
                }
                if wake.stop {
                    return;
                }
                wake.pending = false;
            }
            let before = match self.round() {
                Round::Stop => return,
                Round::Nothing => {
                    retry = None;
                    continue;
                }
                Round::Offered(before) => before,
            };
            let delay = retry.unwrap_or(SETTLE);
            {
                let wake = lock(&self.wake);
                let (wake, _) = self
                    .cv
                    .wait_timeout_while(wake, delay, |w| !w.stop)
                    .unwrap_or_else(|e| e.into_inner());
                if wake.stop {
                    return;
                }
            }
            let Some(source) = self.source.upgrade() else {
                return;
            };
            let now = source.node_count();
            retry = if now <= self.limit {
                None
            } else if now < before {
                // The kernel dropped some: more may go now (a directory
                // whose children went).
                Some(SETTLE)
            } else {
                Some((delay * 2).min(MAX_BACKOFF))
            };
        }
    }

    fn turn_off(&self, why: String) {
        tracing::info!(
            "node table not bounded: {why}; nodes are kept until the kernel forgets them"
        );
        *lock(&self.off_reason) = Some(why);
        self.off.store(true, Ordering::Release);
    }

    /// One round.
    fn round(&self) -> Round {
        let Some(notifier) = self.notifier.upgrade() else {
            return Round::Stop;
        };
        match notifier.protocol_minor() {
            // INIT not answered yet: the next node added wakes us again.
            None => return Round::Nothing,
            Some(minor) if minor < PRUNE_MINOR => {
                self.turn_off(format!(
                    "the kernel speaks FUSE protocol 7.{minor}, NOTIFY_PRUNE needs 7.{PRUNE_MINOR} \
                     (Linux 6.18+)"
                ));
                return Round::Stop;
            }
            Some(_) => {}
        }
        let Some(source) = self.source.upgrade() else {
            return Round::Stop;
        };
        let count = source.node_count();
        if count <= self.limit {
            return Round::Nothing;
        }
        let ids = source.cold_nodes(count - self.low);
        drop(source);
        self.rounds.fetch_add(1, Ordering::AcqRel);
        for batch in ids.chunks(PRUNE_BATCH) {
            match notifier.prune(batch) {
                Ok(()) => {
                    self.offered.fetch_add(batch.len() as u64, Ordering::AcqRel);
                }
                Err(e) => {
                    let gone = matches!(
                        e.raw_os_error(),
                        Some(libc::ENODEV | libc::ENOTCONN | libc::EBADF)
                    );
                    if e.kind() == io::ErrorKind::Unsupported
                        || e.raw_os_error() == Some(libc::EINVAL)
                        || gone
                    {
                        // EINVAL: a kernel that reports 7.45 without the
                        // notification (it checks the code first).
                        self.turn_off(format!("NOTIFY_PRUNE failed: {e}"));
                        return Round::Stop;
                    }
                    tracing::debug!("NOTIFY_PRUNE of {} nodes failed: {e}", batch.len());
                }
            }
        }
        tracing::debug!(
            count,
            offered = ids.len(),
            limit = self.limit,
            "offered cold nodes to the kernel"
        );
        Round::Offered(count)
    }
}

/// What a round did.
enum Round {
    /// Pruning is off, or its owner or connection gone: the thread ends.
    Stop,
    /// Nothing to offer (at or below the limit, INIT not answered yet).
    Nothing,
    /// Offered the nodes above the low mark of this many.
    Offered(usize),
}

/// The `n` coldest of `candidates` (last-use stamp, node id), coldest
/// first: a helper for [`PruneSource::cold_nodes`], in time linear in the
/// candidates (no full sort).
pub fn coldest(mut candidates: Vec<(u32, u64)>, n: usize) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    if n < candidates.len() {
        candidates.select_nth_unstable(n - 1);
        candidates.truncate(n);
    }
    candidates.sort_unstable();
    candidates.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::{negotiate, InitConfig, InitOutcome, KernelInit};
    use crate::NotificationSink;
    use fuse_abi::InitFlags;
    use std::io::IoSlice;

    #[test]
    fn coldest_picks_the_lowest_stamps_in_order() {
        let c = vec![(5, 50), (1, 10), (3, 30), (2, 20), (4, 40)];
        assert_eq!(coldest(c.clone(), 2), vec![10, 20]);
        assert_eq!(coldest(c.clone(), 9), vec![10, 20, 30, 40, 50]);
        assert!(coldest(c, 0).is_empty());
    }

    struct Table(Mutex<Vec<u64>>);

    impl PruneSource for Table {
        fn node_count(&self) -> usize {
            lock(&self.0).len() + 1
        }
        fn cold_nodes(&self, max: usize) -> Vec<u64> {
            lock(&self.0).iter().take(max).copied().collect()
        }
    }

    /// A kernel that forgets every node offered.
    struct Kernel {
        table: Arc<Table>,
        messages: Mutex<usize>,
        cv: Condvar,
    }

    impl NotificationSink for Kernel {
        fn send_notification(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
            let bytes: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            let ids: Vec<u64> = bytes[32..]
                .chunks(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            assert!(ids.len() <= PRUNE_BATCH);
            lock(&self.table.0).retain(|id| !ids.contains(id));
            *lock(&self.messages) += 1;
            self.cv.notify_all();
            Ok(())
        }
    }

    fn notifier(minor: u32, sink: Arc<Kernel>) -> Arc<Notifier> {
        let k = KernelInit {
            major: 7,
            minor,
            max_readahead: 0,
            flags: InitFlags::INIT_EXT,
            max_pages_limit: 256,
        };
        let InitOutcome::Agreed { negotiated, .. } = negotiate(&k, &InitConfig::default()) else {
            panic!("INIT refused")
        };
        Arc::new(Notifier::new(sink, Some(negotiated)))
    }

    /// A table of `nodes` nodes past the root, a kernel of protocol
    /// 7.`minor` serving it, and a pruner keeping the table at `limit`,
    /// told of the table's size (the notifier is returned to keep it alive).
    fn started(
        minor: u32,
        nodes: u64,
        limit: usize,
    ) -> (Arc<Table>, Arc<Kernel>, Arc<Notifier>, Pruner) {
        let table = Arc::new(Table(Mutex::new((2..2 + nodes).collect())));
        let kernel = Arc::new(Kernel {
            table: table.clone(),
            messages: Mutex::new(0),
            cv: Condvar::new(),
        });
        let n = notifier(minor, kernel.clone());
        let source: Arc<dyn PruneSource> = table.clone();
        let p = Pruner::start(limit, Arc::downgrade(&source), Arc::downgrade(&n)).unwrap();
        p.node_added(table.node_count());
        (table, kernel, n, p)
    }

    #[test]
    fn a_table_past_the_limit_is_brought_below_it_in_batches() {
        let (table, kernel, _n, p) = started(45, 2000, 1000);
        let mut messages = lock(&kernel.messages);
        while *messages < 3 {
            messages = kernel.cv.wait(messages).unwrap();
        }
        drop(messages);
        // 2001 nodes down to the low mark (1000 - 125): 1126 offered, in
        // three messages.
        assert_eq!(table.node_count(), 875);
        drop(p);
    }

    #[test]
    fn an_old_kernel_turns_pruning_off_and_sends_nothing() {
        let (table, kernel, _n, p) = started(44, 20, 10);
        let inner = p.inner.clone();
        // A guard against a hang, not a timing: the round is immediate.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !inner.off.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < deadline, "pruner never ran");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(p);
        assert_eq!(*lock(&kernel.messages), 0);
        assert_eq!(table.node_count(), 21);
        let why = lock(&inner.off_reason).clone().unwrap();
        assert!(why.contains("7.44"), "{why}");
    }
}
