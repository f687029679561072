//! Lookup references: [`Counted`], a reference not yet handed to the
//! kernel, and FORGET, which gives them back and drops an inode at zero.
//!
//! Apart from `store.rs` because it is the bookkeeping of exact lookup
//! counts, on top of the tables rather than part of them.

use super::store::{find, ino_hash, take};
use super::{Inode, InodeStore};
use crate::crash_table::NO_SLOT;
use crate::sys;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One lookup reference on an inode that no reply has handed to the kernel
/// yet: the entry a request is about to answer with. Dropped, it is given
/// back (the request failed after taking it, a READDIRPLUS reply had no
/// room for the entry); [`Counted::hand_over`] leaves it to the kernel,
/// with the reply that carries the entry. So no error path between taking
/// a reference and answering can leak one. (The root's references aren't
/// counted; giving one back is a no-op.)
#[must_use = "a lookup reference is given back when dropped"]
pub(crate) struct Counted<'a> {
    store: &'a InodeStore,
    pub(super) inode: Arc<Inode>,
    handed_over: bool,
}

impl Counted<'_> {
    /// The inode.
    pub(crate) fn inode(&self) -> &Arc<Inode> {
        &self.inode
    }

    /// The reply carrying this inode's entry is being sent: the kernel
    /// holds the reference from now on (and gives it back with FORGET).
    pub(crate) fn hand_over(mut self) -> Arc<Inode> {
        self.handed_over = true;
        self.store.handed_to_kernel(&self.inode);
        self.inode.clone()
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if !self.handed_over {
            self.store.forget(self.inode.nodeid, 1);
        }
    }
}

impl InodeStore {
    /// `inode`, whose reference was just taken, as a [`Counted`].
    pub(super) fn counted(&self, inode: Arc<Inode>) -> Counted<'_> {
        Counted {
            store: self,
            inode,
            handed_over: false,
        }
    }

    /// The root, as an entry to answer with (its references aren't
    /// counted).
    pub(crate) fn root_counted(&self) -> Counted<'_> {
        self.counted(self.root.clone())
    }

    /// Drops `n` lookup references of `nodeid`; the inode goes away when
    /// none are left, and is returned then (to be dropped outside the
    /// store's locks).
    pub(crate) fn forget(&self, nodeid: u64, n: u64) -> Option<Arc<Inode>> {
        if nodeid == fuse_abi::ROOT_ID || n == 0 {
            return None;
        }
        let reached_zero = {
            let shard = self.shard(nodeid);
            let Some(inode) = find(&shard, nodeid) else {
                tracing::warn!(nodeid, "FORGET of an unknown node id");
                return None;
            };
            let mut cur = inode.refs.load(Ordering::Acquire);
            loop {
                let new = match cur.checked_sub(n) {
                    Some(v) => v,
                    None => {
                        tracing::warn!(
                            nodeid,
                            refs = cur,
                            n,
                            "FORGET of more references than held"
                        );
                        0
                    }
                };
                match inode.refs.compare_exchange_weak(
                    cur,
                    new,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break new == 0,
                    Err(actual) => cur = actual,
                }
            }
        };
        if reached_zero {
            let (removed, shrunk) = {
                let mut maps = self.write();
                let mut shard = self.shard_mut(nodeid);
                // A lookup may have taken a new reference meanwhile.
                let removed = match find(&shard, nodeid) {
                    Some(inode) if inode.refs() == 0 => {
                        // Its identity's slot, if it still names this node.
                        let ino = inode.key.ino;
                        if let Ok(slot) = maps
                            .by_key
                            .find_entry(ino_hash(ino), |&(i, id)| i == ino && id == nodeid)
                        {
                            slot.remove();
                        }
                        let removed = take(&mut shard, nodeid);
                        self.count.fetch_sub(1, Ordering::AcqRel);
                        removed
                    }
                    _ => None,
                };
                drop(shard);
                if let (Some(table), Some(inode)) = (self.crash.get(), &removed) {
                    let slot = inode.crash_slot.swap(NO_SLOT, Ordering::AcqRel);
                    if slot != NO_SLOT {
                        table.free_node(slot);
                    }
                }
                let shrunk = removed.is_some() && self.shrink(&mut maps);
                (removed, shrunk)
            };
            if shrunk {
                sys::release_free_memory();
            }
            // Descriptors close and memory is freed outside the lock, when
            // the caller drops it.
            return removed;
        }
        None
    }

    /// FORGET: the kernel drops `n` lookup references on `nodeid`.
    pub(crate) fn kernel_forget(&self, nodeid: u64, n: u64) -> Option<Arc<Inode>> {
        self.kernel_forget_count(nodeid, n);
        self.forget(nodeid, n)
    }

    /// The sum of all lookup references, the root's excluded.
    pub(crate) fn lookup_refs(&self) -> u64 {
        self.by_id
            .iter()
            .map(|shard| {
                shard
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|i| i.nodeid != fuse_abi::ROOT_ID)
                    .map(|i| i.refs())
                    .sum::<u64>()
            })
            .sum()
    }
}
