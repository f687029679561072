//! The tables of watched directories and files, from node id to fanotify
//! object and back. Apart because they are plain bookkeeping, with no
//! system call, shared by the passthrough's threads and the reading one.

use super::events::Fid;
use crate::inode::IdMap;
use std::collections::HashMap;

/// Watched directories or files, both ways. An object is kept by a
/// 64-bit digest of its fanotify id ([`Fid::digest`]), not by the id
/// itself: a file handle is a heap allocation, and a walk over a large tree
/// keeps an entry per file the kernel knows (16 bytes a side here against
/// about 100 with the ids). Objects whose digests collide are each told of
/// the others' changes: an invalidation too many, never one missing.
#[derive(Default)]
pub(super) struct Marked {
    /// Digest to node id (the first node recorded with it).
    by_fid: IdMap<u64>,
    /// Digest to the other node ids recorded with it (a collision, or one
    /// object held by two nodes): rare, so apart.
    more: IdMap<Vec<u64>>,
    /// Node id to digest.
    pub(super) by_node: IdMap<u64>,
}

impl Marked {
    /// Records node `nodeid` as the object `fid`.
    pub(super) fn insert(&mut self, nodeid: u64, fid: &Fid) {
        self.insert_digest(nodeid, fid.digest());
    }

    /// Records node `nodeid` as the object of digest `digest`.
    pub(super) fn insert_digest(&mut self, nodeid: u64, digest: u64) {
        if let Some(&old) = self.by_node.get(&nodeid) {
            if old == digest {
                return;
            }
            self.remove(nodeid);
        }
        self.by_node.insert(nodeid, digest);
        match self.by_fid.get(&digest) {
            None => {
                self.by_fid.insert(digest, nodeid);
            }
            Some(_) => self.more.entry(digest).or_default().push(nodeid),
        }
    }

    /// Forgets node `nodeid`; whether it was recorded.
    pub(super) fn remove(&mut self, nodeid: u64) -> bool {
        let Some(digest) = self.by_node.remove(&nodeid) else {
            return false;
        };
        if self.by_fid.get(&digest) == Some(&nodeid) {
            // Another node with this digest takes its place.
            let next = self.more.get_mut(&digest).and_then(|v| v.pop());
            match next {
                Some(other) => {
                    self.by_fid.insert(digest, other);
                }
                None => {
                    self.by_fid.remove(&digest);
                }
            }
        } else if let Some(v) = self.more.get_mut(&digest) {
            v.retain(|&n| n != nodeid);
        }
        if self.more.get(&digest).is_some_and(|v| v.is_empty()) {
            self.more.remove(&digest);
        }
        shrink_when_sparse(&mut self.by_node);
        shrink_when_sparse(&mut self.by_fid);
        true
    }

    /// The nodes recorded as the object `fid`, passed to `each`; whether
    /// there was any.
    pub(super) fn nodes_of(&self, fid: &Fid, mut each: impl FnMut(u64)) -> bool {
        let digest = fid.digest();
        let Some(&first) = self.by_fid.get(&digest) else {
            return false;
        };
        each(first);
        for &n in self.more.get(&digest).into_iter().flatten() {
            each(n);
        }
        true
    }
}

/// Gives memory back once a map holds a quarter of its capacity: a map
/// never shrinks by itself, and a walk of a large tree, once the kernel
/// forgot it, would otherwise keep the tables sized for all of it (tens of
/// bytes per file walked). Halving at a quarter keeps this amortized O(1).
pub(super) fn shrink_when_sparse<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut HashMap<K, V, S>,
) {
    const SMALL: usize = 1024;
    if map.capacity() > SMALL && map.len() < map.capacity() / 4 {
        map.shrink_to((map.len() * 2).max(SMALL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(n: u8) -> Fid {
        Fid {
            fsid: [1, 2],
            kind: 1,
            bytes: Box::new([n; 8]),
        }
    }

    fn nodes(m: &Marked, f: &Fid) -> Vec<u64> {
        let mut v = Vec::new();
        m.nodes_of(f, |n| v.push(n));
        v.sort();
        v
    }

    #[test]
    fn marked_objects_find_every_node_that_holds_them() {
        let mut m = Marked::default();
        m.insert(10, &fid(1));
        m.insert(11, &fid(2));
        // One object held by two nodes: both are told.
        m.insert(12, &fid(1));
        assert_eq!(nodes(&m, &fid(1)), [10, 12]);
        assert_eq!(nodes(&m, &fid(2)), [11]);
        assert!(!m.nodes_of(&fid(3), |_| {}));
        // The first node goes: the second takes its place.
        assert!(m.remove(10));
        assert!(!m.remove(10));
        assert_eq!(nodes(&m, &fid(1)), [12]);
        // A node recorded again as another object moves.
        m.insert(12, &fid(3));
        assert!(!m.nodes_of(&fid(1), |_| {}));
        assert_eq!(nodes(&m, &fid(3)), [12]);
        assert!(m.remove(11) && m.remove(12));
        assert!(m.by_fid.is_empty() && m.by_node.is_empty() && m.more.is_empty());
    }
}
