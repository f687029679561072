//! The inode store: node ids handed to the kernel, each backed by a file
//! of the source directory, with exact lookup counts.
//!
//! How an inode holds on to its backing file is the business of one small
//! type, [`InodeFile`]: today an `O_PATH` descriptor. Every user goes
//! through [`InodeFile::path_fd`] (a descriptor for `*at()` calls, valid
//! while the returned guard lives) and [`InodeFile::reopen`] (a new
//! descriptor opened with given flags), so `InodeFile` can later hold a
//! file handle from `name_to_handle_at(2)` instead and open it with
//! `open_by_handle_at(2)` on demand, without an fd per known inode.

use crate::handle::{Handle, LockCtx};
use crate::sys::{self, StackPath};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// A descriptor for `*at()` calls on an inode, valid while it lives.
pub(crate) enum PathFd<'a> {
    /// The inode's own `O_PATH` descriptor.
    Borrowed(BorrowedFd<'a>),
    /// A descriptor opened for this use (a file handle opened with
    /// `open_by_handle_at`), closed on drop.
    #[allow(dead_code)]
    Owned(OwnedFd),
}

impl AsFd for PathFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            PathFd::Borrowed(fd) => *fd,
            PathFd::Owned(fd) => fd.as_fd(),
        }
    }
}

impl PathFd<'_> {
    /// `/proc/self/fd/N` of this descriptor: a path that reaches the
    /// file itself, for path-only calls (xattrs, chmod, truncate, link).
    pub(crate) fn proc_path(&self) -> StackPath {
        StackPath::proc_fd(self.as_fd().as_raw_fd())
    }
}

/// How an inode holds its backing file: an `O_PATH` descriptor.
#[derive(Debug)]
pub(crate) struct InodeFile {
    fd: OwnedFd,
}

impl InodeFile {
    /// Wraps an `O_PATH` descriptor.
    pub(crate) fn from_path_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }

    /// A descriptor for `*at()` calls and `AT_EMPTY_PATH` calls.
    pub(crate) fn path_fd(&self) -> io::Result<PathFd<'_>> {
        Ok(PathFd::Borrowed(self.fd.as_fd()))
    }

    /// Opens the file again with `flags` (never following a symlink in
    /// the backing tree: the `/proc/self/fd` magic link leads to the file
    /// itself). `proc_self_fd` is an `O_PATH` descriptor of `/proc/self/fd`.
    pub(crate) fn reopen(&self, proc_self_fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
        let name = sys::NumName::new(self.fd.as_raw_fd() as u64);
        sys::openat(proc_self_fd, name.as_cstr(), flags & !libc::O_NOFOLLOW, 0)
    }
}

/// One node id known to the kernel.
pub(crate) struct Inode {
    /// Our node id.
    pub nodeid: u64,
    /// Identity of the backing file.
    pub key: InodeKey,
    /// The backing file.
    pub file: InodeFile,
    /// File type bits (`S_IFMT` of the mode); a file's type never changes.
    pub ftype: u32,
    /// Lookup references the kernel holds.
    refs: AtomicU64,
    /// The handle READ/WRITE/READDIR use when the kernel sends handle 0
    /// (zero-message opens), opened on first use.
    pub lazy: Mutex<Option<Arc<Handle>>>,
    /// POSIX lock contexts per lock owner: an open file description each,
    /// holding that owner's OFD locks.
    pub locks: Mutex<Vec<(u64, Arc<LockCtx>)>>,
}

impl Inode {
    pub(crate) fn new(nodeid: u64, key: InodeKey, file: InodeFile, mode: u32) -> Self {
        Self {
            nodeid,
            key,
            file,
            ftype: mode & libc::S_IFMT,
            refs: AtomicU64::new(0),
            lazy: Mutex::new(None),
            locks: Mutex::new(Vec::new()),
        }
    }

    /// A directory.
    pub(crate) fn is_dir(&self) -> bool {
        self.ftype == libc::S_IFDIR
    }

    /// A regular file.
    pub(crate) fn is_reg(&self) -> bool {
        self.ftype == libc::S_IFREG
    }

    /// Lookup references held by the kernel.
    pub(crate) fn refs(&self) -> u64 {
        self.refs.load(Ordering::Acquire)
    }
}

struct Maps {
    by_id: IdMap<Arc<Inode>>,
    by_key: HashMap<InodeKey, u64>,
}

/// All inodes the kernel knows, by node id and by backing identity.
///
/// Lookups and most operations take the read lock and an `Arc` of the
/// inode; only new inodes and forgets that reach zero take the write lock.
/// READ and WRITE with a handle never touch the store.
pub(crate) struct InodeStore {
    maps: RwLock<Maps>,
    next: AtomicU64,
    root: Arc<Inode>,
}

impl InodeStore {
    /// A store holding the root inode (node id 1).
    pub(crate) fn new(root: Inode) -> Self {
        let root = Arc::new(root);
        let mut by_id = IdMap::default();
        by_id.insert(fuse_abi::ROOT_ID, root.clone());
        let mut by_key = HashMap::new();
        by_key.insert(root.key, fuse_abi::ROOT_ID);
        Self {
            maps: RwLock::new(Maps { by_id, by_key }),
            next: AtomicU64::new(fuse_abi::ROOT_ID + 1),
            root,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
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
        self.read()
            .by_id
            .get(&nodeid)
            .cloned()
            .ok_or_else(|| sys::errno(libc::ESTALE))
    }

    /// The inode with backing identity `key`, with one more lookup
    /// reference (none for the root, whose references aren't counted).
    pub(crate) fn get_by_key_and_ref(&self, key: &InodeKey) -> Option<Arc<Inode>> {
        let maps = self.read();
        let id = *maps.by_key.get(key)?;
        let inode = maps.by_id.get(&id)?.clone();
        if id != fuse_abi::ROOT_ID {
            inode.refs.fetch_add(1, Ordering::AcqRel);
        }
        Some(inode)
    }

    /// The inode for `key` with one more lookup reference: an existing one,
    /// or a new one made by `make` from a fresh node id.
    pub(crate) fn insert_and_ref(
        &self,
        key: InodeKey,
        make: impl FnOnce(u64) -> Inode,
    ) -> Arc<Inode> {
        let mut maps = self.write();
        if let Some(&id) = maps.by_key.get(&key) {
            if let Some(inode) = maps.by_id.get(&id) {
                if id != fuse_abi::ROOT_ID {
                    inode.refs.fetch_add(1, Ordering::AcqRel);
                }
                return inode.clone();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let inode = Arc::new(make(id));
        inode.refs.store(1, Ordering::Release);
        maps.by_id.insert(id, inode.clone());
        maps.by_key.insert(key, id);
        inode
    }

    /// Drops `n` lookup references of `nodeid`; the inode goes away when
    /// none are left.
    pub(crate) fn forget(&self, nodeid: u64, n: u64) {
        if nodeid == fuse_abi::ROOT_ID || n == 0 {
            return;
        }
        let reached_zero = {
            let maps = self.read();
            let Some(inode) = maps.by_id.get(&nodeid) else {
                tracing::warn!(nodeid, "FORGET of an unknown node id");
                return;
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
            let removed = {
                let mut maps = self.write();
                // A lookup may have taken a new reference meanwhile.
                match maps.by_id.get(&nodeid) {
                    Some(inode) if inode.refs() == 0 => {
                        let key = inode.key;
                        if maps.by_key.get(&key) == Some(&nodeid) {
                            maps.by_key.remove(&key);
                        }
                        maps.by_id.remove(&nodeid)
                    }
                    _ => None,
                }
            };
            // Close descriptors outside the lock.
            drop(removed);
        }
    }

    /// Inodes in the store, the root included.
    pub(crate) fn len(&self) -> usize {
        self.read().by_id.len()
    }

    /// The sum of all lookup references, the root's excluded.
    pub(crate) fn lookup_refs(&self) -> u64 {
        self.read()
            .by_id
            .values()
            .filter(|i| i.nodeid != fuse_abi::ROOT_ID)
            .map(|i| i.refs())
            .sum()
    }

    /// Drops every inode but the root (the connection ended).
    pub(crate) fn clear(&self) {
        let old = {
            let mut maps = self.write();
            let by_id = std::mem::take(&mut maps.by_id);
            maps.by_key.clear();
            maps.by_id.insert(fuse_abi::ROOT_ID, self.root.clone());
            maps.by_key.insert(self.root.key, fuse_abi::ROOT_ID);
            by_id
        };
        drop(old);
        *self.root.lazy.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.root
            .locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
