//! The store's tables: every inode the kernel knows, by node id (in
//! shards) and by backing identity, with the lookups and inserts a
//! request makes and the shrinking after a FORGET storm.
//!
//! Apart from `inode.rs` because it is the one place that knows the
//! tables' layout and lock order; lookup references (`refs.rs`), the
//! crash table (`crash.rs`) and the pruner (`prune.rs`) go through it.

use super::{Counted, Inode, InodeFile, InodeFiles, InodeKey};
use crate::crash_table::{CrashTable, NO_SLOT};
use crate::sys;
use hashbrown::HashTable;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, RwLock};

/// What the store's one lock guards: the backing identities, and the
/// size the tables had at most.
pub(super) struct Maps {
    /// (inode number, node id) of the newest node of each backing
    /// identity, hashed by inode number ([`ino_hash`]); the rest of the
    /// identity is the node's own ([`InodeStore::key_of`]). 16 bytes a
    /// slot, where a map from [`InodeKey`] would take 32.
    pub(super) by_key: HashTable<(u64, u64)>,
    /// The most inodes held since memory was last given back.
    peak: usize,
}

/// The hash of a node id in the id table (Fibonacci hashing: node ids are
/// sequential; the table takes its slot from the low bits and a tag from
/// the top ones).
fn id_hash(nodeid: u64) -> u64 {
    nodeid.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The hash of a backing identity in the identity table: of its inode
/// number alone (device and mount are nearly always the source's).
pub(super) fn ino_hash(ino: u64) -> u64 {
    ino.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Shards of the node id table (a power of two): a request looks its
/// inode up under one shard's read lock, so threads serving different
/// inodes share no lock word (a single `RwLock`'s reader count is one
/// cache line every request writes to).
const ID_SHARDS: usize = 16;

/// All inodes the kernel knows, by node id and by backing identity.
///
/// A request finds its inode by node id under a read lock of one shard
/// of the id table and takes an `Arc` of it; new inodes and forgets that
/// reach zero take the identity table's write lock, then the shard's
/// (always in that order). READ and WRITE with a handle never touch the
/// store.
pub(crate) struct InodeStore {
    maps: RwLock<Maps>,
    /// Inodes by node id ([`id_hash`]), in shards: 8 bytes a slot.
    pub(super) by_id: Box<[RwLock<IdShard>]>,
    /// Inodes in `by_id`, the root included.
    pub(super) count: AtomicUsize,
    next: AtomicU64,
    pub(super) root: Arc<Inode>,
    pub(super) files: InodeFiles,
    /// The crash table, with crash recovery.
    pub(super) crash: OnceLock<Arc<CrashTable>>,
    /// Advanced by each pruning round: what [`Inode::used`] stamps.
    pub(super) clock: AtomicU32,
    /// Past this many inodes, new inodes wake the pruner (`usize::MAX`:
    /// none runs).
    pub(super) prune_at: AtomicUsize,
    /// Offers cold inodes to the kernel (`PassthroughFs::start_pruner`).
    pub(super) pruner: Mutex<Option<fuse_server::Pruner>>,
}

/// A store that never held this many inodes keeps its memory.
const SHRINK_MIN_PEAK: usize = 64;

type IdShard = HashTable<Arc<Inode>>;

/// The inode of `nodeid` in `shard`.
pub(super) fn find(shard: &IdShard, nodeid: u64) -> Option<&Arc<Inode>> {
    shard.find(id_hash(nodeid), |i| i.nodeid == nodeid)
}

/// Puts `inode` in `shard` (its node id isn't there).
fn put(shard: &mut IdShard, inode: Arc<Inode>) {
    shard.insert_unique(id_hash(inode.nodeid), inode, |i| id_hash(i.nodeid));
}

/// Takes the inode of `nodeid` out of `shard`.
pub(super) fn take(shard: &mut IdShard, nodeid: u64) -> Option<Arc<Inode>> {
    let entry = shard
        .find_entry(id_hash(nodeid), |i| i.nodeid == nodeid)
        .ok()?;
    Some(entry.remove().0)
}

impl InodeStore {
    /// A store holding the root inode (node id 1); new inodes hold their
    /// files as `files` says.
    pub(crate) fn new(root: Inode, files: InodeFiles) -> Self {
        let root = Arc::new(root);
        let mut by_key = HashTable::new();
        by_key.insert_unique(
            ino_hash(root.key.ino),
            (root.key.ino, fuse_abi::ROOT_ID),
            |&(ino, _)| ino_hash(ino),
        );
        let store = Self {
            maps: RwLock::new(Maps { by_key, peak: 1 }),
            by_id: (0..ID_SHARDS).map(|_| RwLock::default()).collect(),
            count: AtomicUsize::new(1),
            next: AtomicU64::new(fuse_abi::ROOT_ID + 1),
            root,
            files,
            crash: OnceLock::new(),
            clock: AtomicU32::new(0),
            prune_at: AtomicUsize::new(usize::MAX),
            pruner: Mutex::new(None),
        };
        put(&mut store.shard_mut(fuse_abi::ROOT_ID), store.root.clone());
        store
    }

    /// The backing identity of node `id` (called with no shard lock held).
    fn key_of(&self, id: u64) -> Option<InodeKey> {
        if id == fuse_abi::ROOT_ID {
            return Some(self.root.key);
        }
        find(&self.shard(id), id).map(|i| i.key)
    }

    /// The node id `maps` gives for backing identity `key` (with no shard
    /// lock held).
    fn id_of_key(&self, maps: &Maps, key: &InodeKey) -> Option<u64> {
        maps.by_key
            .find(ino_hash(key.ino), |&(ino, id)| {
                ino == key.ino && self.key_of(id) == Some(*key)
            })
            .map(|&(_, id)| id)
    }

    /// Makes node `id` the one `maps` gives for backing identity `key`;
    /// returns the one it gave before, if another (with no shard lock
    /// held).
    fn set_key(&self, maps: &mut Maps, key: &InodeKey, id: u64) -> Option<u64> {
        let slot = maps.by_key.find_mut(ino_hash(key.ino), |&(ino, other)| {
            ino == key.ino && other != id && self.key_of(other) == Some(*key)
        });
        match slot {
            Some(slot) => Some(std::mem::replace(&mut slot.1, id)),
            None => {
                maps.by_key
                    .insert_unique(ino_hash(key.ino), (key.ino, id), |&(ino, _)| ino_hash(ino));
                None
            }
        }
    }

    /// How new inodes hold their files.
    pub(crate) fn files(&self) -> &InodeFiles {
        &self.files
    }

    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
    }

    fn shard_index(nodeid: u64) -> usize {
        // Node ids are sequential: the low bits spread them evenly.
        nodeid as usize & (ID_SHARDS - 1)
    }

    pub(super) fn shard(&self, nodeid: u64) -> std::sync::RwLockReadGuard<'_, IdShard> {
        self.by_id[Self::shard_index(nodeid)]
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn shard_mut(&self, nodeid: u64) -> std::sync::RwLockWriteGuard<'_, IdShard> {
        self.by_id[Self::shard_index(nodeid)]
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The root inode.
    pub(crate) fn root(&self) -> &Arc<Inode> {
        &self.root
    }

    /// The inode of `nodeid`; `ESTALE` if the kernel names one we don't know.
    pub(crate) fn get(&self, nodeid: u64) -> io::Result<Arc<Inode>> {
        if nodeid == fuse_abi::ROOT_ID {
            return Ok(self.root.clone());
        }
        let inode = find(&self.shard(nodeid), nodeid)
            .cloned()
            .ok_or_else(|| sys::errno(libc::ESTALE))?;
        inode.touch(self.now());
        Ok(inode)
    }

    fn now(&self) -> u32 {
        self.clock.load(Ordering::Relaxed)
    }

    /// The inode of `nodeid` with one more lookup reference (none for the
    /// root); `ESTALE` if the kernel names one we don't know.
    pub(crate) fn get_and_ref(&self, nodeid: u64) -> io::Result<Counted<'_>> {
        if nodeid == fuse_abi::ROOT_ID {
            return Ok(self.counted(self.root.clone()));
        }
        let shard = self.shard(nodeid);
        let inode = find(&shard, nodeid).ok_or_else(|| sys::errno(libc::ESTALE))?;
        // Taken under the shard's lock: a forget removes an inode only
        // under its write lock, after seeing no references left.
        inode.refs.fetch_add(1, Ordering::AcqRel);
        inode.touch(self.now());
        Ok(self.counted(inode.clone()))
    }

    /// Whether an inode of identity `key` is in the table (alive or not):
    /// a hint only, the table may change right after.
    pub(crate) fn knows_key(&self, key: &InodeKey) -> bool {
        self.id_of_key(&self.read(), key).is_some()
    }

    /// The inode known for the live file with backing identity `key` (a
    /// file that exists now, found by name or held open by the caller),
    /// with one more lookup reference (none for the root, whose references
    /// aren't counted); `None` if no node holds that file.
    ///
    /// A key alone doesn't prove identity: the backing file system may
    /// have given a removed file's inode number to this file while the
    /// kernel still holds the old node. A node whose file is still alive
    /// (held by descriptor, in the cache of inodes in use, or opened from
    /// its handle now) holds this file, since two live files never share a
    /// key; a node whose handle is stale holds a removed one and doesn't
    /// count. So a hot inode costs nothing more; a cold one an
    /// `open_by_handle_at`, whose descriptor the next request then uses.
    pub(crate) fn get_live_by_key_and_ref(&self, key: &InodeKey) -> Option<Counted<'_>> {
        let counted = {
            let maps = self.read();
            let id = self.id_of_key(&maps, key)?;
            let shard = self.shard(id);
            let inode = find(&shard, id)?.clone();
            if id != fuse_abi::ROOT_ID {
                inode.refs.fetch_add(1, Ordering::AcqRel);
            }
            inode.touch(self.now());
            drop(shard);
            drop(maps);
            self.counted(inode)
        };
        if counted.inode.file.is_alive() {
            return Some(counted);
        }
        tracing::debug!(
            nodeid = counted.inode.nodeid,
            ino = key.ino,
            "inode number reused by a new file while the kernel holds the old node"
        );
        // Dropped: the reference just taken goes back.
        None
    }

    /// Every inode but the root, by node id.
    pub(crate) fn all(&self) -> Vec<Arc<Inode>> {
        let mut all: Vec<Arc<Inode>> = self
            .by_id
            .iter()
            .flat_map(|s| {
                s.read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|i| i.nodeid != fuse_abi::ROOT_ID)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|i| i.nodeid);
        all
    }

    /// The node id the next new inode gets.
    pub(crate) fn next_id(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// Puts back an inode of an earlier process (live upgrade), with the
    /// lookup references the kernel holds on it; later node ids start at
    /// `next` at least. Inodes come in node id order, so a key held by
    /// several (a reused inode number) names the newest, as before.
    pub(crate) fn restore(&self, inode: Inode, refs: u64, next: u64) {
        let mut maps = self.write();
        let id = inode.nodeid;
        let key = inode.key;
        inode.refs.store(refs, Ordering::Release);
        put(&mut self.shard_mut(id), Arc::new(inode));
        let count = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        self.set_key(&mut maps, &key, id);
        maps.peak = maps.peak.max(count);
        self.next.fetch_max(next.max(id + 1), Ordering::AcqRel);
    }

    /// The inode for the file `file` with identity `key` and mode `mode`,
    /// with one more lookup reference: the node that holds that file
    /// already ([`InodeFile::holds_same_file`]), or a new one. A node for
    /// another file with the same key (a reused inode number) stays known
    /// under its node id until the kernel forgets it, but names now reach
    /// the new one.
    pub(crate) fn insert_and_ref(&self, key: InodeKey, file: InodeFile, mode: u32) -> Counted<'_> {
        let mut maps = self.write();
        let known = self.id_of_key(&maps, &key).and_then(|id| {
            let shard = self.shard(id);
            let inode = find(&shard, id)?;
            if !inode.file.holds_same_file(&file) {
                return None;
            }
            if inode.nodeid != fuse_abi::ROOT_ID {
                inode.refs.fetch_add(1, Ordering::AcqRel);
            }
            inode.touch(self.now());
            Some(inode.clone())
        });
        if let Some(inode) = known {
            drop(maps);
            // `file` (another descriptor or handle of the same file) is
            // dropped here, outside the lock.
            return self.counted(inode);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let inode = Arc::new(Inode::new(id, key, file, mode));
        inode.refs.store(1, Ordering::Release);
        inode.used.store(self.now(), Ordering::Relaxed);
        if let (Some(table), Some(handle)) = (self.crash.get(), inode.file.file_handle()) {
            // Before the node can be found: every reference handed over
            // is counted in its slot.
            inode
                .crash_slot
                .store(table.add_node(&inode, handle), Ordering::Release);
        }
        put(&mut self.shard_mut(id), inode.clone());
        let count = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(stale) = self.set_key(&mut maps, &key, id) {
            tracing::debug!(
                old = stale,
                new = id,
                ino = key.ino,
                "inode number reused by a new file while the kernel holds the old node"
            );
        }
        maps.peak = maps.peak.max(count);
        drop(maps);
        if count > self.prune_at.load(Ordering::Relaxed) {
            if let Some(p) = &*self.pruner.lock().unwrap_or_else(|e| e.into_inner()) {
                p.node_added(count);
            }
        }
        self.counted(inode)
    }

    /// After the store shrank to an eighth of its peak (a FORGET storm),
    /// shrinks the tables; returns whether the allocator should give free
    /// memory back to the system too. Called with the identity table's
    /// write lock held and no shard lock.
    pub(super) fn shrink(&self, maps: &mut Maps) -> bool {
        let len = self.count.load(Ordering::Acquire);
        if maps.peak < SHRINK_MIN_PEAK || len > maps.peak / 8 {
            return false;
        }
        tracing::debug!(inodes = len, peak = maps.peak, "inode store shrank");
        maps.peak = len.max(1);
        for shard in self.by_id.iter() {
            shard
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .shrink_to_fit(|i| id_hash(i.nodeid));
        }
        maps.by_key.shrink_to_fit(|&(ino, _)| ino_hash(ino));
        true
    }

    /// Inodes in the store, the root included.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Drops every inode but the root (the connection ended).
    pub(crate) fn clear(&self) {
        if let Some(table) = self.crash.get() {
            for inode in self.all() {
                let slot = inode.crash_slot.swap(NO_SLOT, Ordering::AcqRel);
                if slot != NO_SLOT {
                    table.free_node(slot);
                }
            }
        }
        let old: Vec<IdShard> = {
            let mut maps = self.write();
            let old = self
                .by_id
                .iter()
                .map(|shard| std::mem::take(&mut *shard.write().unwrap_or_else(|e| e.into_inner())))
                .collect();
            put(&mut self.shard_mut(fuse_abi::ROOT_ID), self.root.clone());
            self.count.store(1, Ordering::Release);
            maps.by_key.clear();
            let ino = self.root.key.ino;
            maps.by_key
                .insert_unique(ino_hash(ino), (ino, fuse_abi::ROOT_ID), |&(ino, _)| {
                    ino_hash(ino)
                });
            self.shrink(&mut maps);
            old
        };
        drop(old);
        sys::release_free_memory();
        if let Some(cold) = self.root.cold_if_made() {
            *cold.lazy.lock().unwrap_or_else(|e| e.into_inner()) = None;
            cold.locks.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}
