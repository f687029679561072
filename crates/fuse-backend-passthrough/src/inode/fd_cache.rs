//! The descriptor cache: the `O_PATH` descriptors of inodes held by file
//! handle that are in use, at most a capacity of them, evicted by CLOCK.
//!
//! Apart from `inode.rs` because it knows nothing of inodes: it keeps
//! descriptors by id for [`InodeFiles`](super::InodeFiles), and gives
//! some back when the process runs out ([`sys::SpareFds`]).

use super::IdMap;
use crate::sys;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A descriptor in the [`FdCache`], with its CLOCK bit: whether it was
/// used since the hand last passed. The bit is in the descriptor's own
/// allocation, so that an inode that reaches its descriptor directly
/// (`HandleFile::path_fd`, in `file.rs`) marks it used without the
/// cache's lock.
pub(crate) struct CachedFd {
    pub(super) fd: OwnedFd,
    pub(super) used: AtomicBool,
}

impl CachedFd {
    pub(super) fn new(fd: OwnedFd) -> Arc<CachedFd> {
        Arc::new(CachedFd {
            fd,
            used: AtomicBool::new(false),
        })
    }
}

/// The descriptors of inodes held by file handle that are in use: the
/// working set (a directory being listed or looked up in, a file being
/// opened or stat'ed) keeps a descriptor, so a request on a hot inode pays
/// no `open_by_handle_at`. It holds at most its capacity in descriptors,
/// whatever the number of inodes; past it, the least recently used are
/// closed first (the CLOCK approximation: an entry used since the hand
/// last passed gets another round). Sharded by id, so threads serving
/// different inodes rarely meet on one lock.
pub(super) struct FdCache {
    shards: Box<[Mutex<Shard>]>,
    capacity: usize,
}

/// One shard of the [`FdCache`].
#[derive(Default)]
struct Shard {
    /// Each cached inode's descriptor.
    fds: IdMap<Arc<CachedFd>>,
    /// The CLOCK: ids in the order they were cached. Removed ids stay
    /// until the hand reaches them (or a compaction drops them).
    clock: std::collections::VecDeque<u64>,
    /// The most descriptors this shard holds.
    capacity: usize,
}

impl Shard {
    /// Makes room for one more descriptor: evicts entries not used since
    /// the hand last passed, returning them to be closed outside the lock.
    fn make_room(&mut self, evicted: &mut Vec<Arc<CachedFd>>) {
        while self.fds.len() >= self.capacity {
            let Some(id) = self.clock.pop_front() else {
                return;
            };
            match self.fds.get(&id) {
                // Removed meanwhile: the hand just drops it.
                None => {}
                Some(fd) if fd.used.swap(false, Ordering::Relaxed) => {
                    self.clock.push_back(id);
                }
                Some(_) => {
                    if let Some(fd) = self.fds.remove(&id) {
                        evicted.push(fd);
                    }
                }
            }
        }
    }

    /// Drops ids of removed entries from the clock once they outnumber
    /// the live ones, so that the clock's size stays bounded.
    fn compact(&mut self) {
        if self.clock.len() > 2 * self.fds.len() + 64 {
            let fds = &self.fds;
            let mut seen = IdMap::default();
            self.clock
                .retain(|id| fds.contains_key(id) && seen.insert(*id, ()).is_none());
        }
    }
}

/// Most [`FdCache`] shards (a power of two); a smaller cache has fewer,
/// so that a cache of one holds exactly one descriptor.
const FD_CACHE_SHARDS: usize = 16;

impl FdCache {
    /// A cache of at most `capacity` descriptors (at least 1; rounded up
    /// to a multiple of its shard count).
    pub(super) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let shards = if capacity >= FD_CACHE_SHARDS {
            FD_CACHE_SHARDS
        } else {
            1 << (usize::BITS - 1 - capacity.leading_zeros())
        };
        let per_shard = capacity.div_ceil(shards);
        Self {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        capacity: per_shard,
                        ..Shard::default()
                    })
                })
                .collect(),
            capacity: per_shard * shards,
        }
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, Shard> {
        let i = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as usize & (self.shards.len() - 1);
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn get(&self, id: u64) -> Option<Arc<CachedFd>> {
        let shard = self.shard(id);
        let fd = shard.fds.get(&id)?;
        fd.used.store(true, Ordering::Relaxed);
        Some(fd.clone())
    }

    pub(super) fn put(&self, id: u64, fd: Arc<CachedFd>) {
        // Descriptors replaced or evicted close here, outside the shard's
        // lock (or later, when their last user is done).
        let mut closing = Vec::new();
        {
            let mut shard = self.shard(id);
            if let Some(old) = shard.fds.get_mut(&id) {
                fd.used.store(true, Ordering::Relaxed);
                closing.push(std::mem::replace(old, fd));
                return;
            }
            shard.make_room(&mut closing);
            shard.fds.insert(id, fd);
            shard.clock.push_back(id);
            shard.compact();
        }
        drop(closing);
    }

    pub(super) fn remove(&self, id: u64) {
        let old = self.shard(id).fds.remove(&id);
        drop(old);
    }

    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).fds.len())
            .sum()
    }

    /// The number of descriptors it holds at most.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }
}

impl sys::SpareFds for FdCache {
    /// Empties the cache. A descriptor still in use by a request closes
    /// when that request is done with it.
    fn give_back(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut shard = s.lock().unwrap_or_else(|e| e.into_inner());
                shard.clock.clear();
                std::mem::take(&mut shard.fds).len()
            })
            .sum()
    }
}

/// The size of the cache of inodes in use when the configuration leaves it
/// open: three quarters of the open file limit in force (the rest is for
/// open files, directories, locks and the transport), within bounds.
pub(crate) fn default_fd_cache_size() -> usize {
    let soft = sys::nofile_limits().map_or(1024, |(soft, _)| soft);
    (soft / 4 * 3).clamp(16, 1 << 20) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some_fd() -> Arc<CachedFd> {
        CachedFd::new(OwnedFd::from(std::fs::File::open("/").unwrap()))
    }

    #[test]
    fn a_cache_of_one_holds_one() {
        let cache = FdCache::new(1);
        assert_eq!(cache.capacity(), 1);
        cache.put(1, some_fd());
        cache.put(2, some_fd());
        assert!(cache.get(1).is_none());
        assert!(cache.get(2).is_some());
        assert_eq!(FdCache::new(5).capacity(), 8); // 4 shards of 2
    }

    #[test]
    fn a_working_set_within_capacity_stays_cached() {
        let cache = FdCache::new(64);
        assert_eq!(cache.capacity(), 64);
        let ids: Vec<u64> = (1..=40).collect();
        for &id in &ids {
            cache.put(id, some_fd());
        }
        // Sequential ids spread evenly over the shards (Fibonacci
        // hashing): none of them is full.
        for _ in 0..3 {
            for &id in &ids {
                assert!(cache.get(id).is_some(), "id {id} was evicted");
            }
        }
        assert_eq!(cache.len(), 40);
    }

    #[test]
    fn past_capacity_the_least_recently_used_go_first() {
        let cache = FdCache::new(FD_CACHE_SHARDS); // one per shard
        let mut kept = 0;
        for id in 1..=1000 {
            cache.put(id, some_fd());
            assert!(cache.len() <= cache.capacity());
        }
        for id in 1..=1000 {
            kept += cache.get(id).is_some() as usize;
        }
        assert_eq!(kept, cache.len());
        assert!(kept <= FD_CACHE_SHARDS);
        // A used entry survives one pass of the hand; a new one in the
        // same shard replaces the unused ones first.
        let mut shard = Shard {
            capacity: 2,
            ..Shard::default()
        };
        let mut closed = Vec::new();
        for id in [1, 2] {
            shard.fds.insert(id, some_fd());
            shard.clock.push_back(id);
        }
        shard.fds[&1].used.store(true, Ordering::Relaxed);
        shard.make_room(&mut closed);
        assert_eq!(closed.len(), 1);
        assert!(shard.fds.contains_key(&1) && !shard.fds.contains_key(&2));
    }

    #[test]
    fn removed_ids_leave_the_clock_bounded() {
        let cache = FdCache::new(1024);
        for round in 0..100u64 {
            for id in 0..50 {
                cache.put(round * 50 + id, some_fd());
            }
            for id in 0..50 {
                cache.remove(round * 50 + id);
            }
        }
        assert_eq!(cache.len(), 0);
        for s in cache.shards.iter() {
            let s = s.lock().unwrap();
            assert!(s.clock.len() <= 2 * s.fds.len() + 64 + 1);
        }
        assert_eq!(sys::SpareFds::give_back(&cache), 0);
    }
}
