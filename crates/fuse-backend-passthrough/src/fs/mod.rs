//! [`PassthroughFs`]: the [`FileSystem`](fuse_server::FileSystem) implementation.

use crate::config::{CachePolicy, KillPrivV2, PassthroughConfig, ZeroCopyPolicy};
use crate::creds::Creds;
use crate::handle::{Handle, HandleTable, LockCtx};
use crate::inode::{Counted, Inode, InodeFile, InodeFiles, InodeKey, InodeStore};
use crate::locks::{LockOp, Waits};
use crate::passthrough::{self, Passthrough, PassthroughStats};
use crate::sys::{self, errno, NumName, STATX_WANTED};
use crate::watch::{SourceWatchStats, SourceWatcher};
use fuse_abi::{AccessMask, Attr, FileLock, FopenFlags, InitFlags, Kstatfs, ReleaseFlags, ROOT_ID};
use fuse_server::{
    AttrReply, BackingFiles, Context, CopyFileRangeArgs, CreateArgs, DirentPlusSink, DirentSink,
    Entry, FallocateArgs, FlushArgs, FsyncArgs, InitConfig, KernelInit, LockArgs, LseekArgs,
    MkdirArgs, MknodArgs, Notifier, OpenArgs, Opened, ReadArgs, ReleaseArgs, RenameArgs, SetTime,
    SetattrArgs, SetxattrArgs, StatxArgs, StatxReply, WriteArgs, XattrReply, ZeroCopyReader,
    ZeroCopyWriter,
};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

// The `AsyncFileSystem` implementation and its thread pool switch, and the
// operations by concern: child modules, so they share this one's private
// helpers and fields.
#[cfg(feature = "async")]
mod async_fs;
mod attr;
pub(crate) mod crash;
mod dir;
mod file;
mod filesystem;
mod listing;
mod locking;
mod lookup;
mod prune;
mod source_watch;
mod takeover;
mod xattr;

pub use attr::attr_from_statx;
use attr::*;
#[cfg(feature = "async")]
use file::*;
use lookup::*;

/// Errors of creating a [`PassthroughFs`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PassthroughError {
    /// The source directory could not be opened.
    #[error("cannot open source directory {}: {source}", path.display())]
    Source {
        /// The source as given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `/proc/self/fd` could not be opened (is /proc mounted?).
    #[error("cannot open /proc/self/fd (is /proc mounted?): {0}")]
    Proc(io::Error),
}

/// What INIT agreed on, as far as the passthrough cares.
#[derive(Debug, Default)]
struct Agreed {
    writeback: AtomicBool,
    no_open: AtomicBool,
    no_opendir: AtomicBool,
    killpriv_v2: AtomicBool,
}

/// A directory of the local file system served through FUSE.
///
/// Every request is answered by the corresponding system call on the
/// backing directory: `*at()` calls relative to `O_PATH` descriptors of
/// the inodes the kernel knows, never following a symlink of the backing
/// tree on a request's behalf. Operations that create or change files run
/// with the caller's credentials (see [`PassthroughConfig::caller_credentials`]).
///
/// The READ and WRITE path takes no global lock (open handles live in a
/// sharded table) and moves data between the backing file and the
/// transport's memory with one copy (`pread`/`pwrite` straight into or out
/// of the transport's buffers).
pub struct PassthroughFs {
    cfg: PassthroughConfig,
    source: PathBuf,
    proc_self_fd: OwnedFd,
    /// Shared with its pruner's thread.
    inodes: Arc<InodeStore>,
    handles: HandleTable,
    creds: Creds,
    agreed: Agreed,
    /// Threads in lock waits, for INTERRUPT and stop.
    waits: Arc<Waits>,
    attr_timeout: Duration,
    entry_timeout: Duration,
    /// Kernel passthrough: backing ids per inode.
    pt: Passthrough,
    /// Async serving: the thread pool switch and the pool.
    #[cfg(feature = "async")]
    asyncs: async_fs::AsyncServing,
    /// Tells the kernel about attribute changes no reply carries.
    notifier: Mutex<Option<Arc<Notifier>>>,
    /// Watches the source for names changed behind the mount's back
    /// ([`PassthroughConfig::watch_source`]).
    watcher: Mutex<Option<Arc<SourceWatcher>>>,
    /// The number of the running source watch (0: none): a directory
    /// whose [`Inode::watched`] holds it is marked in that watch.
    watch_epoch: AtomicU32,
    /// The number the next source watch gets.
    next_watch: AtomicU32,
    /// A live upgrade's state came without the previous process's source
    /// watch, which may have had the kernel cache names and attributes for
    /// long: [`PassthroughFs::resumed`] drops them.
    watch_not_taken_over: AtomicBool,
    /// A source watch group made by a supervisor, for the watch to adopt
    /// when it starts ([`PassthroughFs::inherit_watch_group`]).
    inherited_watch: Mutex<Option<crate::watch::SourceWatchGroup>>,
    /// The protocol minor version the kernel offered at INIT (0: none
    /// yet), for a notifier taken before INIT was answered.
    kernel_minor: AtomicU32,
    /// Per backing file system (device number): whether it supports
    /// `RWF_NOWAIT`, probed on the first file opened there (see
    /// [`ZeroCopyPolicy::Auto`]).
    nowait_devices: Mutex<std::collections::HashMap<u64, bool>>,
    /// The CPUs the process may use, for listing helpers started by a
    /// pinned thread (`None`: unknown, helpers keep what they inherit).
    listing_cpus: Option<libc::cpu_set_t>,
    /// The listing helpers, made on first use.
    listing_pool: listing::ListingPool,
}

impl std::fmt::Debug for PassthroughFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassthroughFs")
            .field("source", &self.source)
            .field("config", &self.cfg)
            .field("inodes", &self.inodes.len())
            .field("handles", &self.handles.len())
            .finish()
    }
}

/// Set in [`Inode::attrs_watched`] with a watch's number: marking the file
/// failed in that watch (not tried again).
const MARK_FAILED: u32 = 1 << 31;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PassthroughFs {
    /// Serves the directory `source` with `config`.
    pub fn new(
        source: impl AsRef<Path>,
        config: PassthroughConfig,
    ) -> Result<Self, PassthroughError> {
        let source = source.as_ref().to_path_buf();
        let src_err = |e: io::Error| PassthroughError::Source {
            path: source.clone(),
            source: e,
        };
        let c = CString::new(source.as_os_str().as_bytes())
            .map_err(|_| src_err(errno(libc::EINVAL)))?;
        let fd = sys::open(&c, libc::O_PATH | libc::O_DIRECTORY, 0).map_err(src_err)?;
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED).map_err(src_err)?;
        let key = InodeKey::from_statx(&st);
        let cache_size = config
            .fd_cache_size
            .unwrap_or_else(crate::inode::default_fd_cache_size);
        let files = InodeFiles::new(fd.as_fd(), config.file_handles, cache_size);
        let mut config = prune::resolve_max_nodes(config, files.fallback_reason().is_some());
        config.listing_threads = Some(
            config
                .listing_threads
                .unwrap_or_else(crate::config::default_listing_threads)
                .max(1),
        );
        let fd_limit = sys::nofile_limits().map_or(0, |(soft, _)| soft);
        match files.fallback_reason() {
            None => tracing::info!(
                source = %source.display(),
                fd_limit,
                cached = files.fd_cache_capacity(),
                "inodes held by file handle: any number of inodes, descriptors of up to \
                 {} in use kept open",
                files.fd_cache_capacity()
            ),
            Some(why) => tracing::info!(
                source = %source.display(),
                fd_limit,
                "inodes held by O_PATH descriptor (one per known inode, so the open file \
                 limit of {fd_limit} bounds the inodes the kernel may know at once): {why}"
            ),
        }
        let root = Inode::new(
            ROOT_ID,
            key,
            InodeFile::from_path_fd(fd),
            st.stx_mode as u32,
        );
        let proc_self_fd = sys::open(c"/proc/self/fd", libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(PassthroughError::Proc)?;
        let passthrough = config.passthrough;
        let interrupt_signal = config
            .interrupt_signal
            .unwrap_or_else(|| libc::SIGRTMIN() + 5);
        Ok(Self {
            attr_timeout: config.attr_timeout_in_force(),
            entry_timeout: config.entry_timeout_in_force(),
            creds: Creds::new(config.caller_credentials),
            cfg: config,
            source,
            proc_self_fd,
            inodes: Arc::new(InodeStore::new(root, files)),
            handles: HandleTable::new(),
            agreed: Agreed::default(),
            waits: Arc::new(Waits::new(interrupt_signal)),
            pt: Passthrough::new(passthrough),
            #[cfg(feature = "async")]
            asyncs: async_fs::AsyncServing::new(),
            notifier: Mutex::new(None),
            watcher: Mutex::new(None),
            watch_epoch: AtomicU32::new(0),
            next_watch: AtomicU32::new(1),
            watch_not_taken_over: AtomicBool::new(false),
            inherited_watch: Mutex::new(None),
            kernel_minor: AtomicU32::new(0),
            nowait_devices: Mutex::default(),
            listing_cpus: fuse_server::sys::current_affinity().ok(),
            listing_pool: Default::default(),
        })
    }

    /// Gives the passthrough a way to tell the kernel that attributes it
    /// cached changed behind its back (`None` takes it away). One case
    /// needs it: with `FUSE_HANDLE_KILLPRIV_V2` ([`KillPrivV2`]) a WRITE by
    /// a user without `CAP_FSETID` makes the daemon clear set-user-ID, and
    /// a WRITE reply carries no attributes, so without a notification the
    /// kernel shows the old mode until the attribute timeout. Set it once
    /// the session is up (`DevSession::notifier`, `UringSession::notifier`)
    /// and take it away when the session ends: it holds the connection's
    /// descriptor.
    ///
    /// The notifier also starts the source watch where the configuration
    /// asks for it ([`PassthroughConfig::watch_source`]); `None` stops it.
    /// A watch kept from before (paused with
    /// [`PassthroughFs::pause_notifications`], or taken over with
    /// [`PassthroughFs::restore_state`]) goes on with its marks, passing
    /// the changes queued meanwhile on through the new notifier.
    pub fn set_notifier(&self, notifier: Option<Notifier>) {
        let notifier = notifier.map(Arc::new);
        let had = std::mem::replace(&mut *lock(&self.notifier), notifier.clone());
        drop(had);
        let kept = lock(&self.watcher).clone();
        let mut expire = false;
        if let (Some(notifier), Some(watcher)) = (notifier, kept) {
            match watcher.start_reading(Arc::downgrade(&notifier)) {
                Ok(()) => {
                    self.start_pruner(true);
                    return;
                }
                Err(e) => {
                    // A new watch starts below; what the kernel cached on
                    // this one's word is dropped after it.
                    tracing::warn!("source watch: starting its thread again: {e}");
                    expire = true;
                }
            }
        }
        self.watch_epoch.store(0, Ordering::Release);
        let old = lock(&self.watcher).take();
        drop(old);
        self.start_watch();
        self.start_pruner(true);
        if expire {
            self.expire_kernel_caches();
        }
    }

    /// The options in force.
    pub fn config(&self) -> &PassthroughConfig {
        &self.cfg
    }

    /// The source directory.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Inodes known to the kernel, the root included (1 when the kernel
    /// holds no lookup reference).
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// The sum of the lookup references the kernel holds, the root's
    /// excluded: 0 once the kernel forgot everything.
    pub fn lookup_refs(&self) -> u64 {
        self.inodes.lookup_refs()
    }

    /// Open file and directory handles.
    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }

    /// Whether inodes are held by file handle (`name_to_handle_at`), so a
    /// known inode needs no open descriptor; see
    /// [`PassthroughConfig::file_handles`].
    pub fn uses_file_handles(&self) -> bool {
        self.inodes.files().fallback_reason().is_none()
    }

    /// Why inodes are held by `O_PATH` descriptor instead of file handle
    /// (`None` when they are held by file handle).
    pub fn file_handle_fallback(&self) -> Option<&str> {
        self.inodes.files().fallback_reason()
    }

    /// Descriptors held by the cache of inodes in use (file handle mode;
    /// at most a fixed number, whatever the number of inodes).
    pub fn cached_fds(&self) -> usize {
        self.inodes.files().cached_fds()
    }

    /// Descriptors opened from file handles so far (file handle mode): an
    /// inode is held by its handle and opened when a request first needs
    /// a descriptor of it, or again once the cache closed it. A first
    /// listing with a stat of each name opens none.
    pub fn handle_opens(&self) -> u64 {
        self.inodes.files().handle_opens()
    }

    /// Whether operations run with the callers' credentials (enabled in
    /// the config and the process runs as root).
    pub fn uses_caller_credentials(&self) -> bool {
        self.creds.enabled()
    }

    /// What kernel passthrough did so far: whether it is on, backing ids
    /// registered now ([`PassthroughStats::live_backing_ids`], 0 once every
    /// file is closed), opens passed through and opens served by the
    /// daemon, and why it is off or fell back.
    pub fn passthrough_stats(&self) -> PassthroughStats {
        self.pt.stats()
    }

    /// Backing ids registered with the kernel now: one per inode with
    /// files open in passthrough mode.
    pub fn live_backing_ids(&self) -> u64 {
        self.pt.stats().live_backing_ids
    }

    fn proc_fd(&self) -> BorrowedFd<'_> {
        self.proc_self_fd.as_fd()
    }

    fn writeback(&self) -> bool {
        self.agreed.writeback.load(Ordering::Relaxed)
    }

    fn no_open(&self) -> bool {
        self.agreed.no_open.load(Ordering::Relaxed)
    }

    fn killpriv_v2(&self) -> bool {
        self.agreed.killpriv_v2.load(Ordering::Relaxed)
    }

    /// The backing open flags for a request's open flags.
    fn backing_open_flags(&self, flags: u32) -> (i32, bool) {
        let mut f = flags as i32 & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        let mut promoted = false;
        if self.writeback() {
            // The kernel reads to fill partial pages, from any handle.
            if f & libc::O_ACCMODE == libc::O_WRONLY {
                f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
                promoted = true;
            }
            // The kernel knows the size and appends itself.
            f &= !libc::O_APPEND;
        }
        (f, promoted)
    }

    /// The open flags of a file or directory served by the daemon (a
    /// passthrough open carries its own: see `file_opened`).
    ///
    /// `Auto` keeps the page cache and the directory listing across opens
    /// like `Always`: the kernel drops them itself once fresh attributes
    /// show another mtime or size (`FUSE_AUTO_INVAL_DATA` for data, the
    /// directory's mtime for a cached listing), so a change made in the
    /// source directly is seen once the attribute timeout has passed.
    /// With kernel passthrough in force, the few files the daemon serves
    /// itself drop their cache at open, as passthrough writes bypass it.
    fn fopen_flags(&self, dir: bool) -> FopenFlags {
        match (self.cfg.cache, dir) {
            (CachePolicy::Never, false) => {
                FopenFlags::DIRECT_IO | FopenFlags::PARALLEL_DIRECT_WRITES
            }
            (CachePolicy::Never, true) => FopenFlags::empty(),
            (CachePolicy::Auto, false) if self.pt.active() => FopenFlags::empty(),
            (CachePolicy::Auto | CachePolicy::Always, false) => FopenFlags::KEEP_CACHE,
            (CachePolicy::Auto | CachePolicy::Always, true) => {
                FopenFlags::KEEP_CACHE | FopenFlags::CACHE_DIR
            }
        }
    }

    /// INIT: whether to ask for `FUSE_PASSTHROUGH` (then also sets the
    /// stack depth), saying why not when it was wanted.
    fn passthrough_init(&self, kernel: &KernelInit, config: &mut InitConfig) -> InitFlags {
        if !self.pt.wanted() {
            return InitFlags::empty();
        }
        let why = if !kernel.flags.contains(InitFlags::PASSTHROUGH) {
            format!(
                "the kernel does not offer FUSE_PASSTHROUGH (Linux 6.9+ with \
                 CONFIG_FUSE_PASSTHROUGH; this one speaks protocol 7.{})",
                kernel.minor
            )
        } else if self.cfg.writeback && kernel.flags.contains(InitFlags::WRITEBACK_CACHE) {
            "the writeback cache is on, and the kernel does not combine it with passthrough"
                .to_string()
        } else if self.cfg.no_open && kernel.flags.contains(InitFlags::NO_OPEN_SUPPORT) {
            "zero-message opens are on: without OPEN no reply can carry a backing id".to_string()
        } else if self.pt.can_ask() {
            config.max_stack_depth = self
                .inodes
                .root()
                .file
                .path_fd()
                .map_or(1, |root| passthrough::stack_depth_for(root.as_fd()));
            return InitFlags::PASSTHROUGH;
        } else {
            self.pt.stats().reason.unwrap_or_default()
        };
        tracing::info!("kernel passthrough off: {why}");
        self.pt.set_reason(why);
        InitFlags::empty()
    }

    /// The handle a request names: `fh`, or with handle 0 (zero-message
    /// opens) the inode's own, opened on first use.
    fn handle(&self, ino: u64, fh: u64) -> io::Result<Arc<Handle>> {
        if fh != 0 {
            let h = self.handles.get(fh).ok_or_else(|| errno(libc::EBADF))?;
            if h.nodeid != ino {
                tracing::debug!(
                    fh,
                    ino,
                    opened_for = h.nodeid,
                    "handle used for another node id"
                );
            }
            return Ok(h);
        }
        let inode = self.inodes.get(ino)?;
        self.lazy_handle(&inode)
    }

    fn lazy_handle(&self, inode: &Inode) -> io::Result<Arc<Handle>> {
        if !inode.is_reg() && !inode.is_dir() {
            // Never open a device, FIFO or socket on the kernel's behalf.
            return Err(errno(libc::EBADF));
        }
        let mut slot = lock(&inode.cold().lazy);
        if let Some(h) = &*slot {
            return Ok(h.clone());
        }
        let h = if inode.is_dir() {
            let pfd = inode.file.path_fd()?;
            let flags = libc::O_RDONLY | libc::O_DIRECTORY;
            let fd = sys::openat(pfd.as_fd(), c".", flags, 0)?;
            Handle::dir(fd, inode.nodeid, flags)
        } else {
            let mut flags = libc::O_RDWR;
            let fd = match inode.file.reopen(self.proc_fd(), flags) {
                Ok(fd) => fd,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EACCES | libc::EROFS | libc::ETXTBSY | libc::EPERM)
                    ) =>
                {
                    flags = libc::O_RDONLY;
                    inode.file.reopen(self.proc_fd(), flags)?
                }
                Err(e) => return Err(e),
            };
            if flags & libc::O_ACCMODE != libc::O_RDONLY {
                // Never released: the file keeps short attributes.
                self.writer_opened(inode, true);
            }
            Handle::file(fd, inode.nodeid, flags)
        };
        let h = Arc::new(h);
        *slot = Some(h.clone());
        Ok(h)
    }

    fn statfs_of(fd: BorrowedFd<'_>) -> io::Result<Kstatfs> {
        let st = sys::fstatfs(fd)?;
        Ok(Kstatfs {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: st.f_namelen as u32,
            frsize: st.f_frsize as u32,
            padding: 0,
            spare: [0; 6],
        })
    }

    /// A buffer of `size` bytes for a reply, or ENOMEM. Sizes that come
    /// from a request are capped by the caller first: a request can't make
    /// the daemon allocate more than a reply can carry.
    fn reply_buf(size: usize) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(size)
            .map_err(|_| errno(libc::ENOMEM))?;
        buf.resize(size, 0);
        Ok(buf)
    }
}
