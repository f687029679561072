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
//! inode costs no extra system call. A name seen for the first time is
//! not opened at all: its handle is taken by name
//! ([`InodeFiles::held_by_name`]), so a lookup costs what
//! `passthrough_hp`'s does (a `statx` and a `name_to_handle_at`), and only
//! a request that needs a descriptor opens one.
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
mod file_nodes;
mod prune;
mod refs;
mod store;

pub(crate) use fd_cache::default_fd_cache_size;
pub(crate) use file::{InodeFile, InodeFiles, PathFd};
pub(crate) use refs::Counted;
pub(crate) use store::InodeStore;

use crate::crash_table::NO_SLOT;
use crate::handle::{Handle, LockCtx};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
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

/// What identifies a backing file: device, inode number and mount. 16
/// bytes: the device and the mount id are kept in 32 bits each, which
/// hold every value Linux makes (a device number is 12 bits of major and
/// 20 of minor inside the kernel; `STATX_MNT_ID` and
/// `name_to_handle_at` give the 31-bit mount ids, not the 64-bit unique
/// ones), and an inode is kept in every node (docs/benchmarks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct InodeKey {
    pub ino: u64,
    /// `(major << 20) | minor`, as the kernel keeps a device number.
    dev: u32,
    /// Mount id (`STATX_MNT_ID`), 0 if the kernel didn't report one.
    mnt_id: u32,
}

impl InodeKey {
    /// The identity of inode `ino` on device `dev` (`st_dev`'s encoding),
    /// mount `mnt_id` (0: unknown). A device or mount id Linux can't make
    /// (only from a corrupt record) saturates, which no real file matches.
    pub(crate) fn new(ino: u64, dev: u64, mnt_id: u64) -> Self {
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let dev = if major < 1 << 12 && minor < 1 << 20 {
            (major << 20) | minor
        } else {
            u32::MAX
        };
        Self {
            ino,
            dev,
            mnt_id: u32::try_from(mnt_id).unwrap_or(u32::MAX),
        }
    }

    pub(crate) fn from_statx(st: &libc::statx) -> Self {
        let mnt_id = if st.stx_mask & libc::STATX_MNT_ID != 0 {
            st.stx_mnt_id
        } else {
            0
        };
        Self::new(
            st.stx_ino,
            libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            mnt_id,
        )
    }

    /// The device number, in `st_dev`'s encoding.
    pub(crate) fn dev(&self) -> u64 {
        libc::makedev(self.dev >> 20, self.dev & ((1 << 20) - 1))
    }

    /// The mount id (0: unknown).
    pub(crate) fn mnt_id(&self) -> u64 {
        u64::from(self.mnt_id)
    }

    /// The same device and mount, inode `ino`.
    pub(crate) fn with_ino(self, ino: u64) -> Self {
        Self { ino, ..self }
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
    /// Open handles, lock contexts and writers: null until one is made
    /// (then owned by the inode; a pointer, not a `OnceLock<Box<_>>`,
    /// which takes twice the room).
    cold: AtomicPtr<Cold>,
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
    /// What the source watch knows of this regular file (in the inode's
    /// padding: no table of the watch's own holds it).
    pub file_watch: crate::watch::FileWatch,
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
            dev: self.key.dev(),
            ino: self.key.ino,
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
            cold: AtomicPtr::new(std::ptr::null_mut()),
            watched: AtomicU32::new(0),
            attrs_watched: AtomicU32::new(0),
            has_writers: AtomicBool::new(false),
            file_watch: Default::default(),
            crash_slot: AtomicU32::new(NO_SLOT),
            used: AtomicU32::new(0),
            ftype: (mode & libc::S_IFMT) as u16,
        }
    }

    /// Its open handles, lock contexts and writers, made on first use.
    pub(crate) fn cold(&self) -> &Cold {
        if let Some(cold) = self.cold_if_made() {
            return cold;
        }
        let made = Box::into_raw(Box::<Cold>::default());
        match self.cold.compare_exchange(
            std::ptr::null_mut(),
            made,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `made` is now the inode's, freed only by its drop,
            // which can't run while `&self` lives.
            Ok(_) => unsafe { &*made },
            Err(first) => {
                // SAFETY: `made` came from `Box::into_raw` above and was
                // never shared (another thread's won).
                drop(unsafe { Box::from_raw(made) });
                // SAFETY: as above, for the one that won.
                unsafe { &*first }
            }
        }
    }

    /// Its open handles, lock contexts and writers, if any was ever made
    /// (for readers, which needn't make them).
    pub(crate) fn cold_if_made(&self) -> Option<&Cold> {
        let cold = self.cold.load(Ordering::Acquire);
        // SAFETY: non-null, it is a `Box` the inode owns until its drop,
        // which can't run while `&self` lives.
        (!cold.is_null()).then(|| unsafe { &*cold })
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

impl Drop for Inode {
    fn drop(&mut self) {
        let cold = *self.cold.get_mut();
        if !cold.is_null() {
            // SAFETY: made by `Box::into_raw` in `cold`, owned by this
            // inode alone, and no reference to it outlives `&self`.
            drop(unsafe { Box::from_raw(cold) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    /// The per-node cost docs/benchmarks.md accounts for: an inode in its
    /// `Arc` fits a 144-byte allocation (glibc adds 8 bytes and rounds to
    /// 16), its file handle held in place.
    #[test]
    fn an_inode_stays_small() {
        assert_eq!(std::mem::size_of::<InodeKey>(), 16);
        assert!(
            std::mem::size_of::<Inode>() + 2 * std::mem::size_of::<usize>() <= 136,
            "Inode is {} bytes",
            std::mem::size_of::<Inode>()
        );
        assert_eq!(std::mem::size_of::<sys::FileHandle>(), 24);
    }

    #[test]
    fn an_inode_key_keeps_the_device_and_mount_it_was_given() {
        for (major, minor) in [(0, 0), (8, 1), (259, 3), (4095, (1 << 20) - 1), (0, 47)] {
            let dev = libc::makedev(major, minor);
            let key = InodeKey::new(7, dev, 42);
            assert_eq!((key.ino, key.dev(), key.mnt_id()), (7, dev, 42));
        }
        // What Linux can't make saturates, and matches no real key.
        let odd = InodeKey::new(7, libc::makedev(1 << 12, 0), 1 << 40);
        assert_eq!(odd.mnt_id(), u64::from(u32::MAX));
        assert_ne!(odd, InodeKey::new(7, libc::makedev(0, 0), 0));
        assert_eq!(InodeKey::new(9, 5, 6).with_ino(3), InodeKey::new(3, 5, 6));
    }
}
