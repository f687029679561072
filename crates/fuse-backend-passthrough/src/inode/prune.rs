//! The store as the pruner sees it: the pruner it runs, and the coldest
//! inodes it offers to the kernel.
//!
//! Apart from `store.rs` because pruning is optional and reads the
//! tables only through this view.

use super::store::find;
use super::InodeStore;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl InodeStore {
    /// Runs `pruner` for this store from now on (`None`: stops the one
    /// running). The old one is stopped outside the store's locks.
    pub(crate) fn set_pruner(&self, pruner: Option<fuse_server::Pruner>) {
        let limit = pruner.as_ref().map_or(usize::MAX, |p| p.limit());
        let old = {
            let mut slot = self.pruner.lock().unwrap_or_else(|e| e.into_inner());
            self.prune_at.store(limit, Ordering::Relaxed);
            std::mem::replace(&mut *slot, pruner)
        };
        drop(old);
    }

    /// What the running pruner did so far (`None`: none runs).
    pub(crate) fn prune_stats(&self) -> Option<fuse_server::PruneStats> {
        self.pruner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|p| p.stats())
    }
}

/// The pruner's view of the store: the least recently named inodes first,
/// skipping the root, inodes a request holds right now and files with
/// write handles (the kernel keeps what is in use anyway). An inode
/// offered is stamped as used, so one the kernel keeps (open, a working
/// directory, a directory with cached children) goes to the back of the
/// queue instead of being offered every round.
impl fuse_server::PruneSource for InodeStore {
    fn node_count(&self) -> usize {
        self.len()
    }

    fn cold_nodes(&self, max: usize) -> Vec<u64> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let mut candidates = Vec::with_capacity(self.len());
        for shard in self.by_id.iter() {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            candidates.extend(
                shard
                    .iter()
                    .filter(|i| {
                        i.nodeid != fuse_abi::ROOT_ID
                            && Arc::strong_count(i) == 1
                            && !i.has_writers.load(Ordering::Relaxed)
                    })
                    // Ages, not stamps, so that the clock may wrap.
                    .map(|i| {
                        let age = now.wrapping_sub(i.used.load(Ordering::Relaxed));
                        (u32::MAX - age, i.nodeid)
                    }),
            );
        }
        let ids = fuse_server::prune::coldest(candidates, max);
        for &id in &ids {
            if let Some(inode) = find(&self.shard(id), id) {
                inode.used.store(now, Ordering::Relaxed);
            }
        }
        ids
    }
}
