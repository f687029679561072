//! The crash table's part of the store (crash recovery): each lookup
//! reference handed to the kernel counted in the node's slot, FORGETs
//! counted back, and the nodes of a crashed process put back.
//!
//! Apart from `store.rs` because only crash recovery needs it; without a
//! crash table each of these is a no-op.

use super::{Inode, InodeKey, InodeStore};
use crate::crash_table::{CrashTable, NodeRecord, NO_SLOT};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl InodeStore {
    /// Whether a crash table is kept (crash recovery).
    pub(crate) fn keeps_crash_table(&self) -> bool {
        self.crash.get().is_some()
    }

    /// Keeps the node table in `table` from now on (crash recovery).
    /// Set once, before serving.
    pub(crate) fn set_crash_table(&self, table: Arc<CrashTable>) -> bool {
        self.crash.set(table).is_ok()
    }

    /// A reply handed one lookup reference on `inode` to the kernel.
    pub(super) fn handed_to_kernel(&self, inode: &Inode) {
        let Some(table) = self.crash.get() else {
            return;
        };
        let slot = inode.crash_slot.load(Ordering::Acquire);
        if slot != NO_SLOT {
            // Counted first, journaled second. A crash between the two
            // leaves the reference counted and not journaled: the resend
            // runs again and counts it twice, so the node outlives the
            // kernel's FORGET (kept until the unmount). The other order
            // gave back, on the resend, a reference never counted: one of
            // the kernel's was lost, and a later FORGET found fewer
            // references than it dropped, or no node at all.
            table.refs(slot).fetch_add(1, Ordering::AcqRel);
            #[cfg(feature = "fault-injection")]
            crate::fault::on_hand_over(inode.nodeid, inode.key.ino);
            fuse_server::recovery::handed(inode.nodeid);
        }
    }

    /// The crash table's part of a FORGET: `n` fewer references counted
    /// for `nodeid`. A BATCH_FORGET counts all its entries first (memory
    /// writes only), so that a crash while the inodes go (closing
    /// descriptors) leaves no count behind.
    pub(crate) fn kernel_forget_count(&self, nodeid: u64, n: u64) {
        if let Some(table) = self.crash.get() {
            if let Ok(inode) = self.get(nodeid) {
                let slot = inode.crash_slot.load(Ordering::Acquire);
                if slot != NO_SLOT {
                    let refs = table.refs(slot);
                    let _ = refs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                        Some(r.saturating_sub(n))
                    });
                }
            }
        }
    }

    /// Puts back the nodes a crashed process's table kept: each with its
    /// file handle (opened when first used: a file gone meanwhile answers
    /// ESTALE, and its FORGET still finds it), its lookup count and its
    /// slot.
    pub(crate) fn restore_crashed(&self, records: Vec<NodeRecord>) -> usize {
        let mut restored = 0;
        let next = records.iter().map(|r| r.nodeid + 1).max().unwrap_or(0);
        let Some(table) = self.crash.get() else {
            return 0;
        };
        for r in records {
            // No reference left with the kernel: forgotten, or made and
            // never handed over before the crash.
            if r.nodeid <= fuse_abi::ROOT_ID || r.refs == 0 {
                table.free_node(r.slot);
                continue;
            }
            let Some(file) = self.files.held_by_handle(r.handle) else {
                table.free_node(r.slot);
                continue;
            };
            let key = InodeKey::new(r.ino, r.dev, r.mnt_id);
            let inode = Inode::new(r.nodeid, key, file, r.mode);
            inode.crash_slot.store(r.slot, Ordering::Release);
            self.restore(inode, r.refs, next);
            restored += 1;
        }
        restored
    }
}
