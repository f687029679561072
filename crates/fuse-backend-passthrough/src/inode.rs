//! The inode store: node ids handed to the kernel, each backed by a file
//! of the source directory, with exact lookup counts.
//!
//! How an inode holds on to its backing file is the business of one small
//! type, [`InodeFile`]: a file handle from `name_to_handle_at(2)` where the
//! backing file system supports them (ext4, xfs, btrfs, tmpfs on recent
//! kernels, ...) and the daemon may open them (`CAP_DAC_READ_SEARCH` in the
//! initial user namespace), else an `O_PATH` descriptor ([`InodeFiles`]
//! decides once, at start, and says why). Every user goes through
//! [`InodeFile::path_fd`] (a descriptor for `*at()` calls, valid while the
//! returned guard lives) and [`InodeFile::reopen`] (a new descriptor opened
//! with given flags). A handle is opened with `open_by_handle_at(2)` on
//! demand and the descriptor kept in a small cache of inodes in use, so a
//! tree of any size can be served within the descriptor limit, and a hot
//! inode costs no extra system call.

mod fd_cache;
mod file;

pub(crate) use fd_cache::default_fd_cache_size;
pub(crate) use file::{InodeFile, InodeFiles};

use crate::crash_table::{CrashTable, NodeRecord, NO_SLOT};
use crate::handle::{Handle, LockCtx};
use crate::sys;
use hashbrown::HashTable;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, RwLock};

/// A hasher for keys that are already unique integers (node ids, handles).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Spread sequential ids over the table (Fibonacci hashing).
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` keyed by unique integers.
pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// What identifies a backing file: device, inode number and mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct InodeKey {
    pub ino: u64,
    pub dev: u64,
    /// Mount id (`STATX_MNT_ID`), 0 if the kernel didn't report one.
    pub mnt_id: u64,
}

impl InodeKey {
    pub(crate) fn from_statx(st: &libc::statx) -> Self {
        Self {
            ino: st.stx_ino,
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            mnt_id: if st.stx_mask & libc::STATX_MNT_ID != 0 {
                st.stx_mnt_id
            } else {
                0
            },
        }
    }
}

/// One node id known to the kernel. Kept small (a walk over a large tree
/// holds one per file the kernel knows; docs/benchmarks.md has the
/// breakdown): what few inodes need is in [`Cold`], allocated on first use.
pub(crate) struct Inode {
    /// Our node id.
    pub nodeid: u64,
    /// Identity of the backing file.
    pub key: InodeKey,
    /// The backing file.
    pub file: InodeFile,
    /// Lookup references the kernel holds.
    refs: AtomicU64,
    /// Open handles, lock contexts and writers: `None` until one is made.
    cold: OnceLock<Box<Cold>>,
    /// The backing file's generation where known (0 otherwise), sent in
    /// entry replies: node ids are never reused, so (node id, generation)
    /// is unique either way.
    pub generation: u32,
    /// The source watch this directory is marked in (its number, 0: none),
    /// so that names answered in it may be cached for long.
    pub watched: AtomicU32,
    /// The source watch this regular file is marked in (its number, 0:
    /// none), so that its attributes may be cached for long.
    pub attrs_watched: AtomicU32,
    /// Its slot in the crash table (`crash_table::NO_SLOT`: none).
    pub crash_slot: AtomicU32,
    /// The store's clock when a request last named this inode (or it was
    /// last offered for pruning): the pruner offers the lowest first.
    used: AtomicU32,
    /// File type bits (`S_IFMT` of the mode, which fits 16 bits); a
    /// file's type never changes.
    ftype: u16,
    /// `writers` (in [`Cold`]) is not 0 (read without its lock).
    pub has_writers: AtomicBool,
}

/// What an inode needs only once the kernel opens it, locks it or writes
/// it: most inodes of a walk never do, and these would be 56 bytes each.
#[derive(Default)]
pub(crate) struct Cold {
    /// The handle READ/WRITE/READDIR use when the kernel sends handle 0
    /// (zero-message opens), opened on first use.
    pub lazy: Mutex<Option<Arc<Handle>>>,
    /// POSIX lock contexts per lock owner: an open file description each,
    /// holding that owner's OFD locks.
    pub locks: Mutex<Vec<(u64, Arc<LockCtx>)>>,
    /// Write handles the daemon holds on this file (see
    /// `PassthroughFs::writer_opened`), changed under this lock.
    pub writers: Mutex<u32>,
}

impl Inode {
    /// What the source watch needs to name this inode the way fanotify
    /// does, without asking the kernel again where it can.
    pub(crate) fn watch_id(&self) -> crate::watch::ObjectId<'_> {
        crate::watch::ObjectId {
            dev: self.key.dev,
            handle: self.file.file_handle(),
        }
    }

    pub(crate) fn new(nodeid: u64, key: InodeKey, file: InodeFile, mode: u32) -> Self {
        // The root's generation stays 0: the kernel made its root inode
        // with 0 and takes an entry for node 1 with another as stale.
        let generation = if nodeid == fuse_abi::ROOT_ID {
            0
        } else {
            file.generation(key.ino)
        };
        Self {
            nodeid,
            key,
            file,
            generation,
            refs: AtomicU64::new(0),
            cold: OnceLock::new(),
            watched: AtomicU32::new(0),
            attrs_watched: AtomicU32::new(0),
            has_writers: AtomicBool::new(false),
            crash_slot: AtomicU32::new(NO_SLOT),
            used: AtomicU32::new(0),
            ftype: (mode & libc::S_IFMT) as u16,
        }
    }

    /// Its open handles, lock contexts and writers, made on first use.
    pub(crate) fn cold(&self) -> &Cold {
        self.cold.get_or_init(Box::default)
    }

    /// Its open handles, lock contexts and writers, if any was ever made
    /// (for readers, which needn't make them).
    pub(crate) fn cold_if_made(&self) -> Option<&Cold> {
        self.cold.get().map(|c| &**c)
    }

    /// File type bits (`S_IFMT` of the mode).
    pub(crate) fn ftype(&self) -> u32 {
        u32::from(self.ftype)
    }

    /// A directory.
    pub(crate) fn is_dir(&self) -> bool {
        self.ftype() == libc::S_IFDIR
    }

    /// A regular file.
    pub(crate) fn is_reg(&self) -> bool {
        self.ftype() == libc::S_IFREG
    }

    /// Lookup references held by the kernel.
    pub(crate) fn refs(&self) -> u64 {
        self.refs.load(Ordering::Acquire)
    }

    /// Marks the inode used at clock `now`: a load, and a store only the
    /// first time in a pruning round, so a hot inode's cache line isn't
    /// written by every request.
    fn touch(&self, now: u32) {
        if self.used.load(Ordering::Relaxed) != now {
            self.used.store(now, Ordering::Relaxed);
        }
    }
}

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
    inode: Arc<Inode>,
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

/// What the store's one lock guards: the backing identities, and the
/// size the tables had at most.
struct Maps {
    /// (inode number, node id) of the newest node of each backing
    /// identity, hashed by inode number ([`ino_hash`]); the rest of the
    /// identity is the node's own ([`InodeStore::key_of`]). 16 bytes a
    /// slot, where a map from [`InodeKey`] would take 32.
    by_key: HashTable<(u64, u64)>,
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
fn ino_hash(ino: u64) -> u64 {
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
    by_id: Box<[RwLock<IdShard>]>,
    /// Inodes in `by_id`, the root included.
    count: AtomicUsize,
    next: AtomicU64,
    root: Arc<Inode>,
    files: InodeFiles,
    /// The crash table, with crash recovery.
    crash: OnceLock<Arc<CrashTable>>,
    /// Advanced by each pruning round: what [`Inode::used`] stamps.
    clock: AtomicU32,
    /// Past this many inodes, new inodes wake the pruner (`usize::MAX`:
    /// none runs).
    prune_at: AtomicUsize,
    /// Offers cold inodes to the kernel (`PassthroughFs::start_pruner`).
    pruner: Mutex<Option<fuse_server::Pruner>>,
}

/// A store that never held this many inodes keeps its memory.
const SHRINK_MIN_PEAK: usize = 64;

type IdShard = HashTable<Arc<Inode>>;

/// The inode of `nodeid` in `shard`.
fn find(shard: &IdShard, nodeid: u64) -> Option<&Arc<Inode>> {
    shard.find(id_hash(nodeid), |i| i.nodeid == nodeid)
}

/// Puts `inode` in `shard` (its node id isn't there).
fn put(shard: &mut IdShard, inode: Arc<Inode>) {
    shard.insert_unique(id_hash(inode.nodeid), inode, |i| id_hash(i.nodeid));
}

/// Takes the inode of `nodeid` out of `shard`.
fn take(shard: &mut IdShard, nodeid: u64) -> Option<Arc<Inode>> {
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

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
    }

    fn shard_index(nodeid: u64) -> usize {
        // Node ids are sequential: the low bits spread them evenly.
        nodeid as usize & (ID_SHARDS - 1)
    }

    fn shard(&self, nodeid: u64) -> std::sync::RwLockReadGuard<'_, IdShard> {
        self.by_id[Self::shard_index(nodeid)]
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn shard_mut(&self, nodeid: u64) -> std::sync::RwLockWriteGuard<'_, IdShard> {
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

    /// `inode`, whose reference was just taken, as a [`Counted`].
    fn counted(&self, inode: Arc<Inode>) -> Counted<'_> {
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
    /// Whether an inode of identity `key` is in the table (alive or not):
    /// a hint only, the table may change right after.
    pub(crate) fn knows_key(&self, key: &InodeKey) -> bool {
        self.id_of_key(&self.read(), key).is_some()
    }

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

    /// After the store shrank to an eighth of its peak (a FORGET storm),
    /// shrinks the tables; returns whether the allocator should give free
    /// memory back to the system too. Called with the identity table's
    /// write lock held and no shard lock.
    fn shrink(&self, maps: &mut Maps) -> bool {
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
    fn handed_to_kernel(&self, inode: &Inode) {
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

    /// FORGET: the kernel drops `n` lookup references on `nodeid`.
    pub(crate) fn kernel_forget(&self, nodeid: u64, n: u64) -> Option<Arc<Inode>> {
        self.kernel_forget_count(nodeid, n);
        self.forget(nodeid, n)
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
            let key = InodeKey {
                ino: r.ino,
                dev: r.dev,
                mnt_id: r.mnt_id,
            };
            let inode = Inode::new(r.nodeid, key, file, r.mode);
            inode.crash_slot.store(r.slot, Ordering::Release);
            self.restore(inode, r.refs, next);
            restored += 1;
        }
        restored
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
#[cfg(test)]
mod tests {
    use super::*;

    /// The per-node cost docs/benchmarks.md accounts for: an inode in its
    /// `Arc` fits a 160-byte allocation (glibc adds 8 bytes and rounds to
    /// 16), its file handle held in place.
    #[test]
    fn an_inode_stays_small() {
        assert!(
            std::mem::size_of::<Inode>() + 2 * std::mem::size_of::<usize>() <= 152,
            "Inode is {} bytes",
            std::mem::size_of::<Inode>()
        );
        assert_eq!(std::mem::size_of::<sys::FileHandle>(), 24);
    }
}
