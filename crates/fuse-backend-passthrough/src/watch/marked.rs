//! The tables of watched directories and files, from node id to fanotify
//! object and back. Apart because they are plain bookkeeping, with no
//! system call, shared by the passthrough's threads and the reading one.

use super::events::Fid;
use crate::inode::IdMap;
use std::collections::HashMap;

/// Watched directories or files: from fanotify object to node, and back
/// where the caller can't work the object out again when the node goes.
/// An object is kept by a 64-bit digest of its fanotify id
/// ([`Fid::digest`]), not by the id itself: a file handle is a heap
/// allocation, and a walk over a large tree keeps an entry per file the
/// kernel knows (16 bytes here against about 100 with the ids). Objects
/// whose digests collide are each told of the others' changes: an
/// invalidation too many, never one missing.
///
/// A regular file held by its file handle needs no way back: its digest is
/// made again from that handle when it is unwatched, so such a file costs
/// one slot here (docs/benchmarks.md, "Where an inode's bytes go").
#[derive(Default)]
pub(super) struct Marked {
    /// Digest to node id (the first node recorded with it).
    by_fid: IdMap<u64>,
    /// Digest to the other node ids recorded with it (a collision, or one
    /// object held by two nodes): rare, so apart.
    more: IdMap<Vec<u64>>,
    /// Node id to digest, for the nodes recorded with `remember`.
    pub(super) by_node: IdMap<u64>,
    /// Nodes recorded.
    len: usize,
}

impl Marked {
    /// Records node `nodeid` as the object `fid`, and the way back from
    /// the node if `remember`; false if it was recorded so already.
    pub(super) fn insert(&mut self, nodeid: u64, fid: &Fid, remember: bool) -> bool {
        self.insert_digest(nodeid, fid.digest(), remember)
    }

    /// Records node `nodeid` as the object of digest `digest`, and the way
    /// back from the node if `remember` (a node remembered as another
    /// object moves); false if it was recorded so already.
    pub(super) fn insert_digest(&mut self, nodeid: u64, digest: u64, remember: bool) -> bool {
        if let Some(&old) = self.by_node.get(&nodeid) {
            if old == digest {
                return false;
            }
            self.remove(nodeid);
        }
        if self.holds(nodeid, digest) {
            return false;
        }
        if remember {
            self.by_node.insert(nodeid, digest);
        }
        match self.by_fid.get(&digest) {
            None => {
                self.by_fid.insert(digest, nodeid);
            }
            Some(_) => self.more.entry(digest).or_default().push(nodeid),
        }
        self.len += 1;
        true
    }

    /// Whether node `nodeid` is recorded as the object of digest `digest`.
    fn holds(&self, nodeid: u64, digest: u64) -> bool {
        self.by_fid.get(&digest) == Some(&nodeid)
            || self.more.get(&digest).is_some_and(|v| v.contains(&nodeid))
    }

    /// Forgets node `nodeid`, recorded with `remember`; whether it was
    /// recorded.
    pub(super) fn remove(&mut self, nodeid: u64) -> bool {
        match self.by_node.remove(&nodeid) {
            Some(digest) => self.remove_digest(nodeid, digest),
            None => false,
        }
    }

    /// Forgets node `nodeid` as the object of digest `digest`; whether it
    /// was recorded so.
    pub(super) fn remove_digest(&mut self, nodeid: u64, digest: u64) -> bool {
        if self.by_node.get(&nodeid) == Some(&digest) {
            self.by_node.remove(&nodeid);
        }
        let found = if self.by_fid.get(&digest) == Some(&nodeid) {
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
            true
        } else if let Some(v) = self.more.get_mut(&digest) {
            let before = v.len();
            v.retain(|&n| n != nodeid);
            before != v.len()
        } else {
            false
        };
        if self.more.get(&digest).is_some_and(|v| v.is_empty()) {
            self.more.remove(&digest);
        }
        if found {
            self.len -= 1;
        }
        shrink_when_sparse(&mut self.by_node);
        shrink_when_sparse(&mut self.by_fid);
        found
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

    /// Every node recorded, with its digest.
    pub(super) fn all(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let firsts = self.by_fid.iter().map(|(&d, &n)| (n, d));
        let more = self
            .more
            .iter()
            .flat_map(|(&d, nodes)| nodes.iter().map(move |&n| (n, d)));
        firsts.chain(more)
    }

    /// How many nodes are recorded.
    pub(super) fn len(&self) -> usize {
        self.len
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
        assert!(m.insert(10, &fid(1), true));
        assert!(m.insert(11, &fid(2), true));
        // One object held by two nodes: both are told.
        assert!(m.insert(12, &fid(1), true));
        assert!(!m.insert(12, &fid(1), true), "recorded already");
        assert_eq!(m.len(), 3);
        assert_eq!(nodes(&m, &fid(1)), [10, 12]);
        assert_eq!(nodes(&m, &fid(2)), [11]);
        assert!(!m.nodes_of(&fid(3), |_| {}));
        // The first node goes: the second takes its place.
        assert!(m.remove(10));
        assert!(!m.remove(10));
        assert_eq!(nodes(&m, &fid(1)), [12]);
        // A node recorded again as another object moves.
        m.insert(12, &fid(3), true);
        assert!(!m.nodes_of(&fid(1), |_| {}));
        assert_eq!(nodes(&m, &fid(3)), [12]);
        assert!(m.remove(11) && m.remove(12));
        assert!(m.by_fid.is_empty() && m.by_node.is_empty() && m.more.is_empty());
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn nodes_recorded_without_the_way_back_go_by_their_digest() {
        let mut m = Marked::default();
        assert!(m.insert(20, &fid(1), false));
        assert!(m.insert(21, &fid(1), false));
        assert!(!m.insert(21, &fid(1), false), "recorded already");
        assert!(m.by_node.is_empty(), "no way back kept");
        let mut all: Vec<(u64, u64)> = m.all().collect();
        all.sort();
        assert_eq!(all, [(20, fid(1).digest()), (21, fid(1).digest())]);
        assert!(!m.remove(20), "not remembered: found by digest only");
        assert!(m.remove_digest(20, fid(1).digest()));
        assert!(!m.remove_digest(20, fid(1).digest()));
        assert_eq!(nodes(&m, &fid(1)), [21]);
        assert!(m.remove_digest(21, fid(1).digest()));
        assert!(m.by_fid.is_empty() && m.more.is_empty());
        assert_eq!(m.len(), 0);
    }
}
