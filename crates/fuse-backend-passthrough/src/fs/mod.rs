//! [`PassthroughFs`]: the [`FileSystem`] implementation.

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
    Entry, FallocateArgs, FileSystem, FlushArgs, FsyncArgs, InitConfig, KernelInit, LockArgs,
    LseekArgs, MkdirArgs, MknodArgs, Notifier, OpenArgs, Opened, ReadArgs, ReleaseArgs, RenameArgs,
    SetTime, SetattrArgs, SetxattrArgs, StatxArgs, StatxReply, WriteArgs, XattrReply,
    ZeroCopyReader, ZeroCopyWriter,
};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
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
mod locking;
mod lookup;
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
    inodes: InodeStore,
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
    watch_epoch: AtomicU64,
    /// The number the next source watch gets.
    next_watch: AtomicU64,
    /// The protocol minor version the kernel offered at INIT (0: none
    /// yet), for a notifier taken before INIT was answered.
    kernel_minor: AtomicU32,
    /// Per backing file system (device number): whether it supports
    /// `RWF_NOWAIT`, probed on the first file opened there (see
    /// [`ZeroCopyPolicy::Auto`]).
    nowait_devices: Mutex<std::collections::HashMap<u64, bool>>,
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
const MARK_FAILED: u64 = 1 << 63;

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
            inodes: InodeStore::new(root, files),
            handles: HandleTable::new(),
            agreed: Agreed::default(),
            waits: Arc::new(Waits::new(interrupt_signal)),
            pt: Passthrough::new(passthrough),
            #[cfg(feature = "async")]
            asyncs: async_fs::AsyncServing::new(),
            notifier: Mutex::new(None),
            watcher: Mutex::new(None),
            watch_epoch: AtomicU64::new(0),
            next_watch: AtomicU64::new(1),
            kernel_minor: AtomicU32::new(0),
            nowait_devices: Mutex::default(),
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
    pub fn set_notifier(&self, notifier: Option<Notifier>) {
        let notifier = notifier.map(Arc::new);
        let had = std::mem::replace(&mut *lock(&self.notifier), notifier);
        drop(had);
        self.watch_epoch.store(0, Ordering::Release);
        let old = lock(&self.watcher).take();
        drop(old);
        self.start_watch();
    }

    /// Starts the source watch if the configuration wants it, a notifier
    /// is set, none runs, and the protocol is known (from the notifier, or
    /// from INIT for a notifier taken before INIT was answered, when
    /// [`FileSystem::init`] calls this again) and has
    /// `FUSE_NOTIFY_INC_EPOCH`.
    fn start_watch(&self) {
        if !self.cfg.source_watch_wanted() {
            return;
        }
        let Some(notifier) = lock(&self.notifier).clone() else {
            return;
        };
        let kernel_minor = self.kernel_minor.load(Ordering::Acquire);
        let minor = notifier
            .protocol_minor()
            .or((kernel_minor != 0).then_some(kernel_minor));
        let Some(minor) = minor else {
            // INIT not answered yet: `init` comes back here.
            return;
        };
        if minor < 44 {
            tracing::info!(
                minor,
                "names cached for {:?}: watching the source needs FUSE_NOTIFY_INC_EPOCH \
                 (protocol 7.44)",
                self.entry_timeout
            );
            return;
        }
        let mut slot = lock(&self.watcher);
        if slot.is_some() {
            return;
        }
        match SourceWatcher::start(Arc::downgrade(&notifier), self.cfg.file_watch_wanted()) {
            Ok(w) => {
                let files = w.watches_files();
                *slot = Some(Arc::new(w));
                let epoch = self.next_watch.fetch_add(1, Ordering::Relaxed);
                self.watch_epoch.store(epoch, Ordering::Release);
                tracing::info!(
                    files,
                    "watching the source for changes behind the mount's back: \
                     names cached for {:?} in watched directories, attributes of \
                     watched files for {:?}",
                    crate::WATCHED_ENTRY_TIMEOUT,
                    if files {
                        crate::WATCHED_ATTR_TIMEOUT
                    } else {
                        self.attr_timeout
                    }
                );
            }
            Err(e) => tracing::info!(
                "names cached for {:?}: the source can't be watched: {e}",
                self.entry_timeout
            ),
        }
    }

    /// How long a name answered in `parent` may be cached: long if the
    /// source watch marks `parent` (it is marked here, before the caller
    /// reads the name, so any later change is reported), else the
    /// configured entry timeout.
    pub(super) fn entry_timeout_in(&self, parent: &Inode) -> Duration {
        let epoch = self.watch_epoch.load(Ordering::Acquire);
        if epoch == 0 {
            return self.entry_timeout;
        }
        if parent.watched.load(Ordering::Acquire) == epoch {
            return crate::WATCHED_ENTRY_TIMEOUT;
        }
        if parent.ftype != libc::S_IFDIR {
            return self.entry_timeout;
        }
        match self.mark_in_watch(epoch, parent, &parent.watched, |w, fd| {
            w.watch(parent.nodeid, fd, parent.watch_id())
        }) {
            Ok(true) => crate::WATCHED_ENTRY_TIMEOUT,
            Ok(false) => self.entry_timeout,
            Err(e) => {
                tracing::debug!(nodeid = parent.nodeid, "watching a directory: {e}");
                self.entry_timeout
            }
        }
    }

    /// Marks `inode` in the running source watch (`watch` given the
    /// watcher and the inode's `O_PATH` descriptor; as the daemon: marking
    /// needs read access) and records watch `epoch` in `marked_in` if that
    /// watch still runs. `Ok(false)`: no watch runs, or another one than
    /// `epoch` (set up meanwhile).
    fn mark_in_watch(
        &self,
        epoch: u64,
        inode: &Inode,
        marked_in: &AtomicU64,
        watch: impl FnOnce(&SourceWatcher, BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<bool> {
        let Some(watcher) = lock(&self.watcher).clone() else {
            return Ok(false);
        };
        self.creds.root();
        let fd = inode.file.path_fd()?;
        watch(&watcher, fd.as_fd())?;
        if self.watch_epoch.load(Ordering::Acquire) != epoch {
            return Ok(false);
        }
        marked_in.store(epoch, Ordering::Release);
        Ok(true)
    }

    /// How long the attributes of `inode` may be cached, as found now: long
    /// for a regular file the source watch marks (marked here if it isn't
    /// yet, when `mark`) while the daemon holds no write handle on it,
    /// else the configured attribute timeout. The caller reads the
    /// attributes it answers with after this (so a change after the mark
    /// is reported).
    pub(super) fn attr_timeout_of(&self, inode: &Inode, mark: bool) -> Duration {
        let epoch = self.watch_epoch.load(Ordering::Acquire);
        if epoch == 0 || !inode.is_reg() || inode.has_writers.load(Ordering::Acquire) {
            return self.attr_timeout;
        }
        let state = inode.attrs_watched.load(Ordering::Acquire);
        if state == epoch {
            return crate::WATCHED_ATTR_TIMEOUT;
        }
        if !mark || state == epoch | MARK_FAILED {
            return self.attr_timeout;
        }
        // (A watch that can't watch files refuses with EOPNOTSUPP.)
        match self.mark_in_watch(epoch, inode, &inode.attrs_watched, |w, fd| {
            w.watch_file(inode.nodeid, fd, inode.watch_id())
        }) {
            Ok(true) => crate::WATCHED_ATTR_TIMEOUT,
            Ok(false) => self.attr_timeout,
            Err(e) => {
                tracing::debug!(nodeid = inode.nodeid, "watching a file: {e}");
                // Not tried again in this watch.
                inode
                    .attrs_watched
                    .store(epoch | MARK_FAILED, Ordering::Release);
                self.attr_timeout
            }
        }
    }

    /// How long the attributes of node `ino` may be cached, for a reply to
    /// a request that found them through an open handle (the inode isn't
    /// at hand): as [`PassthroughFs::attr_timeout_of`].
    pub(super) fn attr_timeout_of_node(&self, ino: u64) -> Duration {
        if self.watch_epoch.load(Ordering::Acquire) == 0 {
            return self.attr_timeout;
        }
        match self.inodes.get(ino) {
            Ok(inode) => self.attr_timeout_of(&inode, true),
            Err(_) => self.attr_timeout,
        }
    }

    /// The daemon opened a write handle on `inode` (a regular file). Its
    /// own writes would raise an fanotify event each, which cost a third
    /// of the buffered write rate (docs/benchmarks.md), so while it holds
    /// one the file's mark doesn't report writes and its attributes keep
    /// the configured timeout; once the last one is released, the next
    /// reply marks it again ([`PassthroughFs::attr_timeout_of`]). If the
    /// kernel knows the node already (`known`), attributes it cached for
    /// long are expired, since another process's writes aren't reported
    /// meanwhile (a reply racing with that is discarded by the kernel,
    /// whose attribute version the notification bumps).
    pub(super) fn writer_opened(&self, inode: &Inode, known: bool) {
        if !inode.is_reg() {
            return;
        }
        let mut writers = lock(&inode.writers);
        *writers += 1;
        if *writers > 1 {
            return;
        }
        inode.has_writers.store(true, Ordering::Release);
        let epoch = self.watch_epoch.load(Ordering::Acquire);
        let state = inode.attrs_watched.load(Ordering::Acquire);
        if epoch == 0 || state & !MARK_FAILED != epoch {
            return;
        }
        inode.attrs_watched.store(0, Ordering::Release);
        if state == epoch {
            if let Some(watcher) = lock(&self.watcher).clone() {
                self.creds.root();
                if let Ok(fd) = inode.file.path_fd() {
                    watcher.stop_write_events(inode.nodeid, fd.as_fd());
                }
            }
        }
        drop(writers);
        if known && state == epoch {
            if let Some(notifier) = lock(&self.notifier).clone() {
                // ENOENT: the kernel dropped the inode meanwhile.
                let _ = notifier.inval_inode(inode.nodeid, -1, 0);
            }
        }
    }

    /// A write handle of node `nodeid` that [`PassthroughFs::writer_opened`]
    /// counted was released.
    pub(super) fn writer_closed(&self, nodeid: u64) {
        let Ok(inode) = self.inodes.get(nodeid) else {
            return;
        };
        if !inode.is_reg() {
            return;
        }
        let mut writers = lock(&inode.writers);
        *writers = writers.saturating_sub(1);
        if *writers == 0 {
            inode.has_writers.store(false, Ordering::Release);
        }
    }

    /// The node `inode` went away: its directory or file is no longer
    /// watched.
    pub(super) fn forgotten(&self, inode: Arc<Inode>) {
        let dir_epoch = inode.watched.load(Ordering::Acquire);
        if dir_epoch == 0 && !inode.is_reg() {
            return;
        }
        let Some(watcher) = lock(&self.watcher).clone() else {
            return;
        };
        let epoch = self.watch_epoch.load(Ordering::Acquire);
        // A file stays in the watch's table while a write handle has
        // taken its long attributes away: ask the table.
        let dir = dir_epoch == epoch;
        let file = inode.is_reg() && watcher.watches_file(inode.nodeid);
        if !dir && !file {
            return;
        }
        self.creds.root();
        let fd = inode.file.path_fd().ok();
        let fd = fd.as_ref().map(|fd| fd.as_fd());
        if dir {
            watcher.unwatch(inode.nodeid, fd);
        }
        if file {
            watcher.unwatch_file(inode.nodeid, fd);
        }
    }

    /// What the source watch did so far ([`PassthroughConfig::watch_source`];
    /// all zero when it doesn't run).
    pub fn source_watch_stats(&self) -> SourceWatchStats {
        lock(&self.watcher)
            .as_ref()
            .map(|w| w.stats())
            .unwrap_or_default()
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
        let mut slot = lock(&inode.lazy);
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

// The operations live in the child modules by concern (`lookup`, `attr`,
// `file`, `dir`, `xattr`, `locking`); their trait methods forward to the
// inherent methods of the same name there.
impl FileSystem for PassthroughFs {
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        self.kernel_minor.store(kernel.minor, Ordering::Release);
        self.start_watch();
        // No FUSE_ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC in OPEN
        // and checks write access for the truncation (ETXTBSY for a file
        // being executed) only after the open, so a refused open(O_RDONLY |
        // O_TRUNC) of a running executable emptied it. Without it, O_TRUNC
        // of an existing file is a SETATTR after the kernel's checks.
        let mut want = InitFlags::POSIX_LOCKS | InitFlags::FLOCK_LOCKS;
        if self.cfg.readdirplus_offered() {
            want |= InitFlags::DO_READDIRPLUS | InitFlags::READDIRPLUS_AUTO;
        }
        if self.cfg.writeback {
            want |= InitFlags::WRITEBACK_CACHE;
        }
        if self.cfg.xattr {
            want |= InitFlags::SETXATTR_EXT;
        }
        match self.cfg.cache {
            CachePolicy::Never => want |= InitFlags::DIRECT_IO_ALLOW_MMAP,
            // AUTO_INVAL_DATA: cached data goes when the attributes show
            // the file changed, so it may be kept across opens.
            CachePolicy::Auto | CachePolicy::Always => {
                want |= InitFlags::CACHE_SYMLINKS | InitFlags::AUTO_INVAL_DATA
            }
        }
        if self.cfg.no_open {
            want |= InitFlags::NO_OPEN_SUPPORT;
        }
        if self.cfg.no_opendir {
            want |= InitFlags::NO_OPENDIR_SUPPORT;
        }
        want |= self.passthrough_init(kernel, config);
        if let Some(seconds) = self.cfg.request_timeout {
            if kernel.flags.contains(InitFlags::REQUEST_TIMEOUT) {
                want |= InitFlags::REQUEST_TIMEOUT;
                config.request_timeout = seconds;
            } else {
                tracing::warn!(
                    "the kernel offers no request timeout (FUSE_REQUEST_TIMEOUT, Linux 6.14+): \
                     requests are not timed out"
                );
            }
        }
        if self.cfg.allow_idmap {
            if kernel.flags.contains(InitFlags::ALLOW_IDMAP) {
                want |= InitFlags::ALLOW_IDMAP;
            } else {
                tracing::warn!(
                    "the kernel offers no idmapped mounts (FUSE_ALLOW_IDMAP, Linux 6.12+): \
                     mount_setattr(MOUNT_ATTR_IDMAP) on this mount will fail"
                );
            }
        }
        self.creds.set_idmap(
            want.contains(InitFlags::ALLOW_IDMAP) && kernel.flags.contains(InitFlags::ALLOW_IDMAP),
        );
        let agreed = (config.flags | want) & kernel.flags;
        let passthrough =
            agreed.contains(InitFlags::PASSTHROUGH) && !agreed.contains(InitFlags::WRITEBACK_CACHE);
        let killpriv_v2 = match self.cfg.killpriv_v2 {
            KillPrivV2::On => true,
            KillPrivV2::Off => false,
            // Exact only where the daemon sees every write.
            KillPrivV2::Auto => !passthrough,
        };
        if killpriv_v2 {
            want |= InitFlags::HANDLE_KILLPRIV_V2;
        }
        config.flags |= want;
        let got = config.flags & kernel.flags;
        self.pt.set_active(passthrough);
        if passthrough {
            tracing::info!(
                max_stack_depth = config.max_stack_depth,
                "kernel passthrough on: the kernel reads and writes open files' backing files"
            );
        }
        self.agreed
            .writeback
            .store(got.contains(InitFlags::WRITEBACK_CACHE), Ordering::Relaxed);
        self.agreed.killpriv_v2.store(
            got.contains(InitFlags::HANDLE_KILLPRIV_V2),
            Ordering::Relaxed,
        );
        self.agreed
            .no_open
            .store(got.contains(InitFlags::NO_OPEN_SUPPORT), Ordering::Relaxed);
        self.agreed.no_opendir.store(
            got.contains(InitFlags::NO_OPENDIR_SUPPORT),
            Ordering::Relaxed,
        );
        if self.cfg.writeback && !self.writeback() {
            tracing::warn!("the kernel does not offer the writeback cache");
        }
        if (self.cfg.no_open && !got.contains(InitFlags::NO_OPEN_SUPPORT))
            || (self.cfg.no_opendir && !got.contains(InitFlags::NO_OPENDIR_SUPPORT))
        {
            tracing::warn!("the kernel does not offer zero-message opens; opening normally");
        }
        tracing::debug!(
            flags = format_args!("{:#x}", got.bits()),
            caller_credentials = self.creds.enabled(),
            "passthrough INIT"
        );
        Ok(())
    }

    fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {
        self.pt.attach(files);
    }

    fn destroy(&self) {
        if self.pt.wanted() {
            let s = self.pt.stats();
            tracing::info!(
                passthrough_opens = s.passthrough_opens,
                daemon_opens = s.fallback_opens,
                backing_ids = s.registered,
                "kernel passthrough at unmount"
            );
        }
        // Backing ids first, while the connection can still close them.
        self.pt.clear();
        self.handles.clear();
        self.inodes.clear();
    }

    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        PassthroughFs::lookup(self, _ctx, parent, name)
    }

    fn forget(&self, _ctx: &Context, ino: u64, nlookup: u64) {
        PassthroughFs::forget(self, _ctx, ino, nlookup)
    }

    fn batch_forget(&self, ctx: &Context, items: fuse_server::request::ForgetList<'_>) {
        PassthroughFs::batch_forget(self, ctx, items)
    }

    fn getattr(&self, _ctx: &Context, ino: u64, fh: Option<u64>) -> io::Result<AttrReply> {
        PassthroughFs::getattr(self, _ctx, ino, fh)
    }

    fn setattr(&self, ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        PassthroughFs::setattr(self, ctx, ino, args)
    }

    fn readlink(&self, _ctx: &Context, ino: u64) -> io::Result<Vec<u8>> {
        PassthroughFs::readlink(self, _ctx, ino)
    }

    fn symlink(&self, ctx: &Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        PassthroughFs::symlink(self, ctx, parent, name, target)
    }

    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MknodArgs,
    ) -> io::Result<Entry> {
        PassthroughFs::mknod(self, ctx, parent, name, args)
    }

    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        PassthroughFs::mkdir(self, ctx, parent, name, args)
    }

    fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::unlink(self, ctx, parent, name)
    }

    fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::rmdir(self, ctx, parent, name)
    }

    fn rename(&self, ctx: &Context, parent: u64, args: &RenameArgs<'_>) -> io::Result<()> {
        PassthroughFs::rename(self, ctx, parent, args)
    }

    fn link(&self, ctx: &Context, ino: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        PassthroughFs::link(self, ctx, ino, newparent, newname)
    }

    fn open(&self, ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        PassthroughFs::open(self, ctx, ino, args)
    }

    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        PassthroughFs::read(self, _ctx, ino, args, out)
    }

    fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        PassthroughFs::write(self, _ctx, ino, args, data)
    }

    fn statfs(&self, _ctx: &Context, ino: u64) -> io::Result<Kstatfs> {
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        Self::statfs_of(pfd.as_fd())
    }

    fn release(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        PassthroughFs::release(self, _ctx, _ino, args)
    }

    fn fsync(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        PassthroughFs::fsync(self, _ctx, ino, args)
    }

    fn setxattr(&self, ctx: &Context, ino: u64, args: &SetxattrArgs<'_>) -> io::Result<()> {
        PassthroughFs::setxattr(self, ctx, ino, args)
    }

    fn getxattr(&self, _ctx: &Context, ino: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        PassthroughFs::getxattr(self, _ctx, ino, name, size)
    }

    fn listxattr(&self, _ctx: &Context, ino: u64, size: u32) -> io::Result<XattrReply> {
        PassthroughFs::listxattr(self, _ctx, ino, size)
    }

    fn removexattr(&self, ctx: &Context, ino: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::removexattr(self, ctx, ino, name)
    }

    fn flush(&self, _ctx: &Context, ino: u64, args: &FlushArgs) -> io::Result<()> {
        PassthroughFs::flush(self, _ctx, ino, args)
    }

    fn opendir(&self, ctx: &Context, ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        PassthroughFs::opendir(self, ctx, ino, _args)
    }

    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        PassthroughFs::readdir(self, _ctx, ino, args, out)
    }

    fn readdirplus(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        PassthroughFs::readdirplus(self, _ctx, ino, args, out)
    }

    fn releasedir(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        PassthroughFs::releasedir(self, _ctx, _ino, args)
    }

    fn fsyncdir(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        PassthroughFs::fsyncdir(self, _ctx, ino, args)
    }

    fn getlk(&self, _ctx: &Context, ino: u64, args: &LockArgs) -> io::Result<FileLock> {
        PassthroughFs::getlk(self, _ctx, ino, args)
    }

    fn setlk(&self, ctx: &Context, ino: u64, args: &LockArgs, sleep: bool) -> io::Result<()> {
        PassthroughFs::setlk(self, ctx, ino, args, sleep)
    }

    fn access(&self, ctx: &Context, ino: u64, mask: AccessMask) -> io::Result<()> {
        PassthroughFs::access(self, ctx, ino, mask)
    }

    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        PassthroughFs::create(self, ctx, parent, name, args)
    }

    fn interrupt(&self, _ctx: &Context, unique: u64) {
        self.waits.interrupt(unique);
    }

    fn stop_waits(&self) {
        self.waits.stop();
    }

    fn fallocate(&self, _ctx: &Context, ino: u64, args: &FallocateArgs) -> io::Result<()> {
        PassthroughFs::fallocate(self, _ctx, ino, args)
    }

    fn lseek(&self, _ctx: &Context, ino: u64, args: &LseekArgs) -> io::Result<u64> {
        PassthroughFs::lseek(self, _ctx, ino, args)
    }

    fn copy_file_range(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &CopyFileRangeArgs,
    ) -> io::Result<u64> {
        PassthroughFs::copy_file_range(self, _ctx, ino, args)
    }

    fn syncfs(&self, _ctx: &Context, ino: u64) -> io::Result<()> {
        self.creds.root();
        let inode = match self.inodes.get(ino) {
            Ok(i) if i.is_dir() || i.is_reg() => i,
            _ => self.inodes.root().clone(),
        };
        let flags = if inode.is_dir() {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else {
            libc::O_RDONLY | libc::O_NONBLOCK
        };
        let fd = inode.file.reopen(self.proc_fd(), flags)?;
        sys::syncfs(fd.as_fd())
    }

    fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        PassthroughFs::tmpfile(self, ctx, parent, args)
    }

    fn statx(&self, _ctx: &Context, ino: u64, args: &StatxArgs) -> io::Result<StatxReply> {
        PassthroughFs::statx(self, _ctx, ino, args)
    }
}
