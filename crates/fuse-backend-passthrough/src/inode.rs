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
//!
//! This file holds what an inode is ([`Inode`], its identity
//! [`InodeKey`]); the rest is apart, one seam a file: `file.rs` and
//! `fd_cache.rs` (the backing file and the descriptor cache), `store.rs`
//! (the tables by node id and by identity), `refs.rs` (lookup references:
//! [`Counted`] and FORGET), `crash.rs` (the crash table's part) and
//! `prune.rs` (what the pruner sees).

mod crash;
mod fd_cache;
mod file;
mod prune;
mod refs;
mod store;

pub(crate) use fd_cache::default_fd_cache_size;
pub(crate) use file::{InodeFile, InodeFiles};
pub(crate) use refs::Counted;
pub(crate) use store::InodeStore;

use crate::crash_table::NO_SLOT;
use crate::handle::{Handle, LockCtx};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

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
