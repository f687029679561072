//! [`PassthroughFs`]: the [`FileSystem`] implementation.

use crate::config::{CachePolicy, PassthroughConfig};
use crate::creds::Creds;
use crate::handle::{Handle, HandleTable, LockCtx};
use crate::inode::{Counted, Inode, InodeFile, InodeFiles, InodeKey, InodeStore};
use crate::locks::{LockOp, Waits};
use crate::passthrough::{self, Passthrough, PassthroughStats};
use crate::sys::{self, errno, NumName, STATX_WANTED};
use fuse_abi::{AccessMask, Attr, FileLock, FopenFlags, InitFlags, Kstatfs, ReleaseFlags, ROOT_ID};
use fuse_server::{
    AttrReply, BackingFiles, Context, CopyFileRangeArgs, CreateArgs, DirentPlusSink, DirentSink,
    Entry, FallocateArgs, FileSystem, FlushArgs, FsyncArgs, InitConfig, KernelInit, LockArgs,
    LseekArgs, MkdirArgs, MknodArgs, OpenArgs, Opened, ReadArgs, ReleaseArgs, RenameArgs, SetTime,
    SetattrArgs, SetxattrArgs, StatxArgs, StatxReply, WriteArgs, XattrReply, ZeroCopyReader,
    ZeroCopyWriter,
};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

// The `AsyncFileSystem` implementation and its thread pool switch: a child
// module, so it shares this one's private helpers.
#[cfg(feature = "async")]
#[path = "async_fs.rs"]
mod async_fs;

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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An entry about to be answered, with the lookup reference its reply
/// hands to the kernel ([`Counted`]): given back if dropped instead.
struct CountedEntry<'a> {
    counted: Counted<'a>,
    entry: Entry,
}

impl CountedEntry<'_> {
    /// The reply carrying the entry is being sent.
    fn hand_over(self) -> Entry {
        self.counted.hand_over();
        self.entry
    }
}

/// Converts a statx(2) result to the protocol's attributes.
pub fn attr_from_statx(st: &libc::statx) -> Attr {
    Attr {
        ino: st.stx_ino,
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: st.stx_atime.tv_sec as u64,
        mtime: st.stx_mtime.tv_sec as u64,
        ctime: st.stx_ctime.tv_sec as u64,
        atimensec: st.stx_atime.tv_nsec,
        mtimensec: st.stx_mtime.tv_nsec,
        ctimensec: st.stx_ctime.tv_nsec,
        mode: st.stx_mode as u32,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        rdev: sys::encode_dev(st.stx_rdev_major, st.stx_rdev_minor),
        blksize: st.stx_blksize,
        flags: 0,
    }
}

/// The largest xattr value and name list Linux has (`XATTR_SIZE_MAX`,
/// `XATTR_LIST_MAX`): a GETXATTR or LISTXATTR asking for more needs no
/// bigger buffer (the kernel caps callers' sizes there too).
const XATTR_SIZE_MAX: usize = 65536;

/// Rejects names the kernel never sends in a request that names an
/// entry to make, remove or rename: empty, with a `/`, or `.` and `..`
/// (the kernel resolves those itself; LOOKUP handles them apart).
fn check_name(name: &CStr) -> io::Result<()> {
    let b = name.to_bytes();
    if b.is_empty() || b.contains(&b'/') || is_dot_or_dotdot(b) {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// What a READDIR or READDIRPLUS whose reply holds `stored` entries
/// answers for the listing's result `r`: an error before the first entry
/// is the answer; one after it ends the reply, which carries its entries.
/// (The stream stands right after them, so the next request meets the
/// error again. Answering the error would lose them: the stream moved
/// past them, and the references of READDIRPLUS entries would leak.)
fn listing_result(r: io::Result<()>, stored: usize) -> io::Result<()> {
    match r {
        Err(e) if stored == 0 => Err(e),
        _ => Ok(()),
    }
}

/// A `struct flock` for a protocol lock.
fn to_flock(lk: &FileLock) -> io::Result<libc::flock64> {
    let start = i64::try_from(lk.start).map_err(|_| errno(libc::EINVAL))?;
    let len = if lk.end >= i64::MAX as u64 {
        0
    } else if lk.end < lk.start {
        return Err(errno(libc::EINVAL));
    } else {
        (lk.end - lk.start + 1) as i64
    };
    let l_type = match lk.r#type as i32 {
        libc::F_RDLCK => libc::F_RDLCK,
        libc::F_WRLCK => libc::F_WRLCK,
        libc::F_UNLCK => libc::F_UNLCK,
        _ => return Err(errno(libc::EINVAL)),
    };
    // SAFETY: flock64 is plain data; all-zero is valid.
    let mut fl: libc::flock64 = unsafe { std::mem::zeroed() };
    fl.l_type = l_type as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    fl.l_pid = 0;
    Ok(fl)
}

/// A protocol lock from a `struct flock`.
fn from_flock(fl: &libc::flock64, pid: u32) -> FileLock {
    let start = fl.l_start.max(0) as u64;
    let end = if fl.l_len <= 0 {
        i64::MAX as u64
    } else {
        start.saturating_add(fl.l_len as u64 - 1)
    };
    FileLock {
        start,
        end,
        r#type: fl.l_type as u32,
        pid,
    }
}

/// The mode without set-user-ID, and without set-group-ID if the group
/// may execute (as the VFS clears them on write, truncate and chown).
impl PassthroughFs {
    /// A SETATTR whose mode only clears the set-user-ID bit (and
    /// set-group-ID with group execute), sent for a caller who doesn't own
    /// the file: the kernel's kill-priv on write or truncate (without
    /// `HANDLE_KILLPRIV_V2`), which the VFS does with its own authority. On
    /// a truncate the new size comes in the same SETATTR.
    fn is_kernel_priv_kill(
        &self,
        ctx: &Context,
        pfd: &impl AsFd,
        args: &SetattrArgs,
        mode: u32,
    ) -> io::Result<bool> {
        let mode_and_size_only = args.uid.is_none()
            && args.gid.is_none()
            && args.atime.is_none()
            && args.mtime.is_none();
        if !mode_and_size_only || ctx.uid == 0 {
            return Ok(false);
        }
        let st = sys::statx_fd(pfd.as_fd(), libc::STATX_MODE | libc::STATX_UID)?;
        let current = st.stx_mode as u32 & 0o7777;
        Ok(st.stx_uid != ctx.uid
            && current != mode & 0o7777
            && killed_mode(current) == mode & 0o7777)
    }
}

/// Reads up to `size` bytes at `offset` from `fd` straight into the reply
/// (`pread` on this thread), until the file ends. An error after some bytes
/// returns those; the error comes with the next READ.
fn read_into_reply(
    fd: BorrowedFd<'_>,
    mut offset: u64,
    size: usize,
    out: &mut dyn ZeroCopyWriter,
) -> io::Result<()> {
    let mut left = size;
    let mut done = 0usize;
    while left > 0 {
        match out.write_from_file(fd, offset, left) {
            Ok(0) => break,
            Ok(n) => {
                offset += n as u64;
                left = left.saturating_sub(n);
                done += n;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn killed_mode(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        m &= !libc::S_ISGID;
    }
    m
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
            attr_timeout: config.attr_timeout(),
            entry_timeout: config.entry_timeout(),
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
        })
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

    /// The reply to an open of a regular file with handle `fh` and backing
    /// id `backing_id` (0: served by the daemon). A passthrough open
    /// carries only `FOPEN_PASSTHROUGH`: the kernel refuses it next to
    /// `FOPEN_KEEP_CACHE` (the user's open fails), and `FOPEN_DIRECT_IO`
    /// would send READ and WRITE to the daemon again; passthrough I/O
    /// bypasses FUSE's page cache anyway.
    fn file_opened(&self, fh: u64, backing_id: i32) -> Opened {
        if backing_id > 0 {
            Opened {
                fh,
                flags: FopenFlags::PASSTHROUGH,
                backing_id,
            }
        } else {
            Opened {
                fh,
                flags: self.fopen_flags(false),
                backing_id: 0,
            }
        }
    }

    /// Inserts the handle of the regular file `inode` opened as `fd` and
    /// answers the open, passed through when possible. `mode`: the file's
    /// mode if known (else it is read when a backing id would be made).
    /// Runs with the daemon's credentials (backing ids record them).
    fn open_file(
        &self,
        inode: &Inode,
        fd: OwnedFd,
        flags: i32,
        mode: Option<u32>,
    ) -> io::Result<Opened> {
        let ticket = self.pt.open(inode.nodeid, fd.as_fd(), || {
            // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves clearing
            // set-user-ID on write to the daemon's WRITE, which passthrough
            // never sends: such files are served by the daemon. (Without
            // it the kernel clears the bits itself, passthrough or not.)
            if !self.killpriv_v2() {
                return false;
            }
            let mode = mode.or_else(|| {
                sys::statx_fd(fd.as_fd(), libc::STATX_MODE)
                    .ok()
                    .map(|st| st.stx_mode as u32)
            });
            // Unknown: let the daemon serve it.
            mode.is_none_or(passthrough::privileged_mode)
        });
        match self.handles.insert(Handle::file(fd, inode.nodeid, flags)) {
            Ok(fh) => {
                let backing_id = ticket.as_ref().map_or(0, |t| t.backing_id);
                if let Some(t) = ticket {
                    self.pt.bind(t, fh);
                }
                Ok(self.file_opened(fh, backing_id))
            }
            Err(e) => {
                if let Some(t) = ticket {
                    self.pt.abandon(t);
                }
                Err(e)
            }
        }
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

    /// The reply of CREATE and TMPFILE for the new file's open descriptor
    /// `fd`. With zero-message opens the kernel never releases handles, so
    /// none is made: the descriptor becomes the inode's shared one (handle 0).
    fn created_handle(
        &self,
        created: CountedEntry<'_>,
        fd: OwnedFd,
        flags: i32,
    ) -> io::Result<(Entry, Opened)> {
        let inode = created.counted.inode();
        if self.no_open() {
            let mut slot = lock(&inode.lazy);
            if slot.is_none() {
                *slot = Some(Arc::new(Handle::file(fd, inode.nodeid, flags)));
            }
            drop(slot);
            return Ok((created.hand_over(), self.file_opened(0, 0)));
        }
        // Backing ids are registered with the daemon's credentials.
        self.creds.root();
        let opened = self.open_file(inode, fd, flags, Some(created.entry.attr.mode))?;
        Ok((created.hand_over(), opened))
    }

    fn killpriv_v2(&self) -> bool {
        self.agreed.killpriv_v2.load(Ordering::Relaxed)
    }

    /// The entry of `counted`'s inode with attributes `st`, still holding
    /// its lookup reference.
    fn entry<'a>(&self, counted: Counted<'a>, st: &libc::statx) -> CountedEntry<'a> {
        let inode = counted.inode();
        let entry = Entry {
            nodeid: inode.nodeid,
            generation: inode.generation,
            attr: attr_from_statx(st),
            attr_timeout: self.attr_timeout,
            entry_timeout: self.entry_timeout,
        };
        CountedEntry { counted, entry }
    }

    /// Looks up `name` in `parent`: the entry, with the lookup reference
    /// its reply will hand over.
    fn lookup_in(&self, parent: &Inode, name: &CStr) -> io::Result<CountedEntry<'_>> {
        let b = name.to_bytes();
        if is_dot_or_dotdot(b) {
            return self.lookup_dot(parent, b == b"..");
        }
        check_name(name)?;
        let pfd = parent.file.path_fd()?;
        let st = sys::statx(
            pfd.as_fd(),
            name,
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            STATX_WANTED,
        )?;
        if let Some(counted) = self
            .inodes
            .get_live_by_key_and_ref(&InodeKey::from_statx(&st))
        {
            return Ok(self.entry(counted, &st));
        }
        let fd = sys::openat(pfd.as_fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        // Identify what was opened (the name may have changed meanwhile).
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        Ok(self.entry(self.insert_inode(fd, &st), &st))
    }

    /// The inode of the `O_PATH` descriptor `fd` (with attributes `st`),
    /// with one more lookup reference.
    fn insert_inode(&self, fd: OwnedFd, st: &libc::statx) -> Counted<'_> {
        let key = InodeKey::from_statx(st);
        let mode = st.stx_mode as u32;
        // Made outside the store's lock; dropped if the inode is known.
        let file = self.inodes.files().make(fd);
        self.inodes.insert_and_ref(key, file, mode)
    }

    /// The inode of an open (non-`O_PATH`) descriptor, with one more lookup
    /// reference; a new inode gets an `O_PATH` descriptor of the same file.
    fn inode_of_open_fd(&self, fd: BorrowedFd<'_>, st: &libc::statx) -> io::Result<Counted<'_>> {
        if let Some(counted) = self
            .inodes
            .get_live_by_key_and_ref(&InodeKey::from_statx(st))
        {
            return Ok(counted);
        }
        let name = NumName::new(std::os::fd::AsRawFd::as_raw_fd(&fd) as u64);
        let path_fd = sys::openat(self.proc_fd(), name.as_cstr(), libc::O_PATH, 0)?;
        Ok(self.insert_inode(path_fd, st))
    }

    fn lookup_dot(&self, parent: &Inode, dotdot: bool) -> io::Result<CountedEntry<'_>> {
        let root = self.inodes.root();
        let target = if parent.nodeid == ROOT_ID {
            // Never leave the shared tree: the root's parent is itself.
            self.inodes.root_counted()
        } else if !dotdot {
            self.inodes.get_and_ref(parent.nodeid)?
        } else {
            let pfd = parent.file.path_fd()?;
            let fd = sys::openat(
                pfd.as_fd(),
                c"..",
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY,
                0,
            )?;
            let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
            if InodeKey::from_statx(&st) == root.key {
                self.inodes.root_counted()
            } else {
                self.insert_inode(fd, &st)
            }
        };
        let pfd = target.inode().file.path_fd()?;
        let st = sys::statx_fd(pfd.as_fd(), STATX_WANTED)?;
        drop(pfd);
        Ok(self.entry(target, &st))
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

    fn fopen_flags(&self, dir: bool) -> FopenFlags {
        match (self.cfg.cache, dir) {
            (CachePolicy::Never, false) => {
                FopenFlags::DIRECT_IO | FopenFlags::PARALLEL_DIRECT_WRITES
            }
            (CachePolicy::Always, false) => FopenFlags::KEEP_CACHE,
            (CachePolicy::Always, true) => FopenFlags::KEEP_CACHE | FopenFlags::CACHE_DIR,
            _ => FopenFlags::empty(),
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
            Handle::file(fd, inode.nodeid, flags)
        };
        let h = Arc::new(h);
        *slot = Some(h.clone());
        Ok(h)
    }

    /// Clears set-user-ID and set-group-ID (if group-executable) of an open file.
    fn kill_suidgid_fd(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let st = sys::statx_fd(fd, libc::STATX_MODE)?;
        let mode = st.stx_mode as u32 & 0o7777;
        let new = killed_mode(mode);
        if new != mode {
            self.creds.root();
            sys::fchmod(fd, new)?;
        }
        Ok(())
    }

    /// Writes all of `data` to `fd` at `offset`, stopping at a short count.
    fn write_from(
        fd: BorrowedFd<'_>,
        mut offset: u64,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let left = data.remaining();
            if left == 0 {
                return Ok(total);
            }
            match data.read_to_file(fd, offset, left) {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    total += n;
                    offset += n as u64;
                    if n < left {
                        return Ok(total);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) if total > 0 => return Ok(total),
                Err(e) => return Err(e),
            }
        }
    }

    /// The lock context of `owner` on `inode`, made if needed: an open
    /// file description of its own that holds the owner's OFD locks.
    fn lock_ctx(&self, inode: &Inode, owner: u64) -> io::Result<Arc<LockCtx>> {
        let mut locks = lock(&inode.locks);
        if let Some((_, ctx)) = locks.iter().find(|(o, _)| *o == owner) {
            return Ok(ctx.clone());
        }
        let fd = if inode.is_dir() {
            inode
                .file
                .reopen(self.proc_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?
        } else if inode.is_reg() {
            match inode.file.reopen(self.proc_fd(), libc::O_RDWR) {
                Ok(fd) => fd,
                Err(_) => inode.file.reopen(self.proc_fd(), libc::O_RDONLY)?,
            }
        } else {
            return Err(errno(libc::EINVAL));
        };
        locks.try_reserve(1).map_err(|_| errno(libc::ENOMEM))?;
        let ctx = Arc::new(LockCtx {
            fd,
            pid: Default::default(),
        });
        locks.push((owner, ctx.clone()));
        Ok(ctx)
    }

    /// The lock a SETLK or SETLKW asks for, on what it is taken: the
    /// request's open file for `flock`, the owner's lock context for POSIX
    /// locks. `None`: an unlock by an owner without a context, which holds
    /// nothing to release.
    pub(crate) fn lock_op(&self, ino: u64, args: &LockArgs) -> io::Result<Option<LockOp>> {
        if args.flock {
            let op = match args.lock.r#type as i32 {
                libc::F_RDLCK => libc::LOCK_SH,
                libc::F_WRLCK => libc::LOCK_EX,
                libc::F_UNLCK => libc::LOCK_UN,
                _ => return Err(errno(libc::EINVAL)),
            };
            let handle = self.handle(ino, args.fh)?;
            return Ok(Some(LockOp::Flock { handle, op }));
        }
        let inode = self.inodes.get(ino)?;
        let lock = to_flock(&args.lock)?;
        let ctx = if lock.l_type as i32 == libc::F_UNLCK {
            let Some(ctx) = self.find_lock_ctx(&inode, args.owner) else {
                return Ok(None);
            };
            ctx
        } else {
            let ctx = self.lock_ctx(&inode, args.owner)?;
            ctx.pid.store(args.lock.pid, Ordering::Relaxed);
            ctx
        };
        Ok(Some(LockOp::Posix { ctx, lock }))
    }

    /// The lock waits of this file system.
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
    pub(crate) fn waits(&self) -> &Arc<Waits> {
        &self.waits
    }

    fn find_lock_ctx(&self, inode: &Inode, owner: u64) -> Option<Arc<LockCtx>> {
        lock(&inode.locks)
            .iter()
            .find(|(o, _)| *o == owner)
            .map(|(_, c)| c.clone())
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

    fn xattr_enabled(&self) -> io::Result<()> {
        if self.cfg.xattr {
            Ok(())
        } else {
            Err(errno(libc::ENOSYS))
        }
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

impl FileSystem for PassthroughFs {
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        // No FUSE_ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC in OPEN
        // and checks write access for the truncation (ETXTBSY for a file
        // being executed) only after the open, so a refused open(O_RDONLY |
        // O_TRUNC) of a running executable emptied it. Without it, O_TRUNC
        // of an existing file is a SETATTR after the kernel's checks.
        let mut want = InitFlags::POSIX_LOCKS | InitFlags::FLOCK_LOCKS;
        if self.cfg.readdirplus {
            want |= InitFlags::DO_READDIRPLUS | InitFlags::READDIRPLUS_AUTO;
        }
        if self.cfg.writeback {
            want |= InitFlags::WRITEBACK_CACHE;
        }
        if self.cfg.killpriv_v2 {
            want |= InitFlags::HANDLE_KILLPRIV_V2;
        }
        if self.cfg.xattr {
            want |= InitFlags::SETXATTR_EXT;
        }
        match self.cfg.cache {
            CachePolicy::Never => want |= InitFlags::DIRECT_IO_ALLOW_MMAP,
            CachePolicy::Auto | CachePolicy::Always => want |= InitFlags::CACHE_SYMLINKS,
        }
        if self.cfg.no_open {
            want |= InitFlags::NO_OPEN_SUPPORT;
        }
        if self.cfg.no_opendir {
            want |= InitFlags::NO_OPENDIR_SUPPORT;
        }
        want |= self.passthrough_init(kernel, config);
        config.flags |= want;
        let got = config.flags & kernel.flags;
        let passthrough =
            got.contains(InitFlags::PASSTHROUGH) && !got.contains(InitFlags::WRITEBACK_CACHE);
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
        self.creds.root();
        let parent = self.inodes.get(parent)?;
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    fn forget(&self, _ctx: &Context, ino: u64, nlookup: u64) {
        self.inodes.forget(ino, nlookup);
    }

    fn getattr(&self, _ctx: &Context, ino: u64, fh: Option<u64>) -> io::Result<AttrReply> {
        self.creds.root();
        let st = match fh {
            Some(fh) if fh != 0 => {
                let h = self.handles.get(fh).ok_or_else(|| errno(libc::EBADF))?;
                sys::statx_fd(h.fd(), libc::STATX_BASIC_STATS)?
            }
            _ => {
                let inode = self.inodes.get(ino)?;
                let pfd = inode.file.path_fd()?;
                sys::statx_fd(pfd.as_fd(), libc::STATX_BASIC_STATS)?
            }
        };
        Ok(AttrReply {
            attr: attr_from_statx(&st),
            timeout: self.attr_timeout,
        })
    }

    fn setattr(&self, ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let h = match args.fh {
            Some(fh) if fh != 0 => self.handles.get(fh),
            // Zero-message opens: the caller's open file is the inode's.
            Some(_) if self.no_open() => self.lazy_handle(&inode).ok(),
            _ => None,
        };
        let pfd = inode.file.path_fd()?;
        if args.uid.is_some() || args.gid.is_some() {
            sys::fchown_fd(
                pfd.as_fd(),
                args.uid.unwrap_or(u32::MAX),
                args.gid.unwrap_or(u32::MAX),
            )?;
        }
        let chmod = |mode: u32| match &h {
            Some(h) => sys::fchmod(h.fd(), mode & 0o7777),
            None => sys::chmod_path(pfd.proc_path().as_cstr(), mode & 0o7777),
        };
        // The kernel clears set-id bits when someone other than the owner
        // writes or truncates: that chmod is the VFS's, not the caller's
        // (which would fail with EPERM). It runs with the daemon's
        // authority, after the truncation the caller may or may not do.
        let kernel_kill = match args.mode {
            Some(mode) => self.is_kernel_priv_kill(ctx, &pfd, args, mode)?,
            None => false,
        };
        if let Some(mode) = args.mode.filter(|_| !kernel_kill) {
            chmod(mode)?;
        }
        if let Some(size) = args.size {
            match &h {
                Some(h) if h.flags & libc::O_ACCMODE != libc::O_RDONLY => {
                    sys::ftruncate(h.fd(), size)?
                }
                _ => sys::truncate_path(pfd.proc_path().as_cstr(), size)?,
            }
        }
        if let Some(mode) = args.mode.filter(|_| kernel_kill) {
            self.creds.root();
            chmod(mode)?;
        }
        if args.atime.is_some() || args.mtime.is_some() {
            let ts = |t: Option<SetTime>| match t {
                None => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(SetTime::Now) => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(SetTime::At { secs, nsecs }) => libc::timespec {
                    tv_sec: secs,
                    tv_nsec: nsecs as i64,
                },
            };
            let times = [ts(args.atime), ts(args.mtime)];
            if self.writeback() {
                // With the writeback cache the kernel keeps the times and
                // flushes them as any writer (it checked the caller).
                self.creds.root();
            }
            match &h {
                Some(h) => sys::futimens(h.fd(), &times)?,
                None => sys::utimens_fd(pfd.as_fd(), &times)?,
            }
        }
        if args.kill_suidgid && args.mode.is_none() && self.killpriv_v2() && inode.is_reg() {
            let st = sys::statx_fd(pfd.as_fd(), libc::STATX_MODE)?;
            let mode = st.stx_mode as u32 & 0o7777;
            if killed_mode(mode) != mode {
                self.creds.root();
                sys::chmod_path(pfd.proc_path().as_cstr(), killed_mode(mode))?;
            }
        }
        let st = match &h {
            Some(h) => sys::statx_fd(h.fd(), libc::STATX_BASIC_STATS)?,
            None => sys::statx_fd(pfd.as_fd(), libc::STATX_BASIC_STATS)?,
        };
        Ok(AttrReply {
            attr: attr_from_statx(&st),
            timeout: self.attr_timeout,
        })
    }

    fn readlink(&self, _ctx: &Context, ino: u64) -> io::Result<Vec<u8>> {
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        let mut buf = Self::reply_buf(libc::PATH_MAX as usize + 1)?;
        let n = sys::readlink_fd(pfd.as_fd(), &mut buf)?;
        if n > libc::PATH_MAX as usize {
            return Err(errno(libc::ENAMETOOLONG));
        }
        buf.truncate(n);
        Ok(buf)
    }

    fn symlink(&self, ctx: &Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        sys::symlinkat(target, pfd.as_fd(), name)?;
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MknodArgs,
    ) -> io::Result<Entry> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        if args.mode & libc::S_IFMT == libc::S_IFDIR {
            sys::mkdirat(pfd.as_fd(), name, args.mode & 0o7777)?;
        } else {
            sys::mknodat(pfd.as_fd(), name, args.mode, sys::decode_dev(args.rdev))?;
        }
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        sys::mkdirat(pfd.as_fd(), name, args.mode & 0o7777)?;
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        sys::unlinkat(pfd.as_fd(), name, 0)
    }

    fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        sys::unlinkat(pfd.as_fd(), name, libc::AT_REMOVEDIR)
    }

    fn rename(&self, ctx: &Context, parent: u64, args: &RenameArgs<'_>) -> io::Result<()> {
        check_name(args.name)?;
        check_name(args.newname)?;
        let old = self.inodes.get(parent)?;
        let new = self.inodes.get(args.newdir)?;
        self.creds.caller(ctx)?;
        let ofd = old.file.path_fd()?;
        let nfd = new.file.path_fd()?;
        sys::renameat2(
            ofd.as_fd(),
            args.name,
            nfd.as_fd(),
            args.newname,
            args.flags.bits(),
        )
    }

    fn link(&self, ctx: &Context, ino: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        check_name(newname)?;
        let inode = self.inodes.get(ino)?;
        let parent = self.inodes.get(newparent)?;
        self.creds.caller(ctx)?;
        let src = inode.file.path_fd()?;
        let dir = parent.file.path_fd()?;
        sys::link_proc(src.proc_path().as_cstr(), dir.as_fd(), newname)?;
        self.lookup_in(&parent, newname)
            .map(CountedEntry::hand_over)
    }

    fn open(&self, ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        if self.no_open() {
            return Err(errno(libc::ENOSYS));
        }
        let inode = self.inodes.get(ino)?;
        if !inode.is_reg() {
            return Err(errno(if inode.is_dir() {
                libc::EISDIR
            } else {
                libc::EINVAL
            }));
        }
        self.creds.caller(ctx)?;
        let (flags, promoted) = self.backing_open_flags(args.flags);
        let fd = match inode.file.reopen(self.proc_fd(), flags) {
            Err(e) if promoted && e.raw_os_error() == Some(libc::EACCES) => {
                // Write-only for the caller (the kernel checked that); the
                // writeback cache needs to read too.
                self.creds.root();
                inode.file.reopen(self.proc_fd(), flags)?
            }
            r => r?,
        };
        if args.kill_suidgid() && self.killpriv_v2() {
            self.kill_suidgid_fd(fd.as_fd())?;
        }
        // Backing ids are registered with the daemon's credentials.
        self.creds.root();
        self.open_file(&inode, fd, flags, None)
    }

    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        read_into_reply(h.fd(), args.offset, args.size as usize, out)
    }

    fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        let n = match Self::write_from(h.fd(), args.offset, data) {
            // A page cache write through a handle opened with O_DIRECT may
            // be unaligned (the tail of the file): write it buffered.
            Err(e)
                if e.raw_os_error() == Some(libc::EINVAL)
                    && h.flags & libc::O_DIRECT != 0
                    && args.from_cache() =>
            {
                let inode = self.inodes.get(ino)?;
                let fd = inode.file.reopen(self.proc_fd(), libc::O_WRONLY)?;
                Self::write_from(fd.as_fd(), args.offset, data)?
            }
            r => r?,
        };
        if args.kill_suidgid() && self.killpriv_v2() {
            self.kill_suidgid_fd(h.fd())?;
        }
        Ok(n)
    }

    fn statfs(&self, _ctx: &Context, ino: u64) -> io::Result<Kstatfs> {
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        Self::statfs_of(pfd.as_fd())
    }

    fn release(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        if args.fh == 0 {
            return Ok(());
        }
        let h = self
            .handles
            .remove(args.fh)
            .ok_or_else(|| errno(libc::EBADF))?;
        // The last release of a passthrough inode closes its backing id.
        self.pt.release(args.fh);
        if args.release_flags.contains(ReleaseFlags::FLOCK_UNLOCK) {
            // The descriptor may live on while a request still uses it.
            let _ = sys::flock(h.fd(), libc::LOCK_UN);
        }
        Ok(())
    }

    fn fsync(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        sys::fsync(h.fd(), args.datasync())
    }

    fn setxattr(&self, ctx: &Context, ino: u64, args: &SetxattrArgs<'_>) -> io::Result<()> {
        self.xattr_enabled()?;
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        sys::setxattr(
            pfd.proc_path().as_cstr(),
            args.name,
            args.value,
            args.flags as i32,
        )
    }

    fn getxattr(&self, _ctx: &Context, ino: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        self.xattr_enabled()?;
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        let path = pfd.proc_path();
        if size == 0 {
            let n = sys::getxattr(path.as_cstr(), name, &mut [])?;
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = Self::reply_buf((size as usize).min(XATTR_SIZE_MAX))?;
        let n = sys::getxattr(path.as_cstr(), name, &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    fn listxattr(&self, _ctx: &Context, ino: u64, size: u32) -> io::Result<XattrReply> {
        self.xattr_enabled()?;
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        let path = pfd.proc_path();
        if size == 0 {
            let n = sys::listxattr(path.as_cstr(), &mut [])?;
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = Self::reply_buf((size as usize).min(XATTR_SIZE_MAX))?;
        let n = sys::listxattr(path.as_cstr(), &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    fn removexattr(&self, ctx: &Context, ino: u64, name: &CStr) -> io::Result<()> {
        self.xattr_enabled()?;
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        sys::removexattr(pfd.proc_path().as_cstr(), name)
    }

    fn flush(&self, _ctx: &Context, ino: u64, args: &FlushArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        // A close releases the closing process's POSIX locks on the file:
        // drop the owner's lock context (its descriptor holds them).
        if let Ok(inode) = self.inodes.get(ino) {
            let ctx = {
                let mut locks = lock(&inode.locks);
                locks
                    .iter()
                    .position(|(o, _)| *o == args.lock_owner)
                    .map(|i| locks.swap_remove(i))
            };
            drop(ctx);
        }
        sys::close_dup(h.fd())
    }

    fn opendir(&self, ctx: &Context, ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        if self.agreed.no_opendir.load(Ordering::Relaxed) {
            return Err(errno(libc::ENOSYS));
        }
        let inode = self.inodes.get(ino)?;
        if !inode.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let fd = sys::openat(pfd.as_fd(), c".", flags, 0)?;
        let fh = self.handles.insert(Handle::dir(fd, ino, flags))?;
        Ok(Opened {
            fh,
            flags: self.fopen_flags(true),
            backing_id: 0,
        })
    }

    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        let stream = h.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        if self.cfg.no_readdir || args.size == 0 {
            // Listings are off, or the reply has no room: touch nothing.
            return Ok(());
        }
        let mut stream = lock(stream);
        let r = stream.read(h.fd(), args.offset, |e| {
            Ok(out.add(e.ino, e.off, e.dtype as u32, e.name))
        });
        listing_result(r, out.count())
    }

    fn readdirplus(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        let stream = h.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        // Names are looked up in the directory being listed: the handle's.
        let parent = self.inodes.get(h.nodeid)?;
        if self.cfg.no_readdir || args.size == 0 {
            // Listings are off, or the reply has no room: touch nothing.
            return Ok(());
        }
        let mut stream = lock(stream);
        let r = stream.read(h.fd(), args.offset, |e| {
            if is_dot_or_dotdot(e.name) {
                // No lookup (as libfuse does): a node id of 0 tells the
                // kernel to make no dentry of it.
                let entry = Entry {
                    attr: Attr {
                        ino: e.ino,
                        mode: (e.dtype as u32) << 12,
                        ..Attr::default()
                    },
                    ..Entry::default()
                };
                return Ok(out.add(&entry, e.off, e.dtype as u32, e.name));
            }
            match self.lookup_in(&parent, e.cname) {
                Ok(found) => {
                    if out.add(&found.entry, e.off, e.dtype as u32, e.name) {
                        found.hand_over();
                        Ok(true)
                    } else {
                        // No room: the kernel never gets this entry, and
                        // `found` gives its reference back.
                        Ok(false)
                    }
                }
                // Removed since it was listed: skip it.
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(true),
                Err(err) if out.count() == 0 => Err(err),
                Err(_) => Ok(false),
            }
        });
        listing_result(r, out.count())
    }

    fn releasedir(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        if args.fh == 0 {
            return Ok(());
        }
        self.handles
            .remove(args.fh)
            .map(drop)
            .ok_or_else(|| errno(libc::EBADF))
    }

    fn fsyncdir(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        sys::fsync(h.fd(), args.datasync())
    }

    fn getlk(&self, _ctx: &Context, ino: u64, args: &LockArgs) -> io::Result<FileLock> {
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let ctx = self.lock_ctx(&inode, args.owner)?;
        let mut fl = to_flock(&args.lock)?;
        sys::fcntl_lock(ctx.fd.as_fd(), libc::F_OFD_GETLK, &mut fl)?;
        if fl.l_type as i32 == libc::F_UNLCK {
            return Ok(FileLock {
                r#type: libc::F_UNLCK as u32,
                ..args.lock
            });
        }
        // Whose lock is it? The owner that does not see a conflict in
        // that range holds it alone.
        let conflict = from_flock(&fl, 0);
        let mut pid = 0;
        let others: Vec<Arc<LockCtx>> = lock(&inode.locks)
            .iter()
            .filter(|(o, _)| *o != args.owner)
            .map(|(_, c)| c.clone())
            .collect();
        for other in &others {
            let mut probe = to_flock(&FileLock {
                r#type: libc::F_WRLCK as u32,
                ..conflict
            })?;
            if sys::fcntl_lock(other.fd.as_fd(), libc::F_OFD_GETLK, &mut probe).is_ok()
                && probe.l_type as i32 == libc::F_UNLCK
            {
                pid = other.pid.load(Ordering::Relaxed);
                break;
            }
        }
        if pid == 0 {
            if let Some(first) = others.first() {
                pid = first.pid.load(Ordering::Relaxed);
            }
        }
        Ok(FileLock { pid, ..conflict })
    }

    fn setlk(&self, ctx: &Context, ino: u64, args: &LockArgs, sleep: bool) -> io::Result<()> {
        self.creds.root();
        let Some(op) = self.lock_op(ino, args)? else {
            return Ok(());
        };
        if sleep && !op.is_unlock() {
            self.waits.wait(ctx.unique, &op)
        } else if op.try_now()? {
            Ok(())
        } else {
            Err(errno(libc::EAGAIN))
        }
    }

    fn access(&self, ctx: &Context, ino: u64, mask: AccessMask) -> io::Result<()> {
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        sys::faccess_fd(pfd.as_fd(), (mask.bits() & 7) as i32)
    }

    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        let (mut flags, _) = self.backing_open_flags(args.flags);
        if self.no_open() {
            // The descriptor becomes the inode's shared one: read-write.
            flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        let flags = flags | libc::O_CREAT | (args.flags as i32 & libc::O_EXCL) | libc::O_NOFOLLOW;
        let fd = sys::openat(pfd.as_fd(), name, flags, args.mode & 0o7777)?;
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        let created = self.entry(self.inode_of_open_fd(fd.as_fd(), &st)?, &st);
        let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        self.created_handle(created, fd, flags)
    }

    fn interrupt(&self, _ctx: &Context, unique: u64) {
        self.waits.interrupt(unique);
    }

    fn stop_waits(&self) {
        self.waits.stop();
    }

    fn fallocate(&self, _ctx: &Context, ino: u64, args: &FallocateArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        sys::fallocate(h.fd(), args.mode as i32, args.offset, args.length)
    }

    fn lseek(&self, _ctx: &Context, ino: u64, args: &LseekArgs) -> io::Result<u64> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        let offset = i64::try_from(args.offset).map_err(|_| errno(libc::EINVAL))?;
        let Some(stream) = &h.dir else {
            return sys::lseek(h.fd(), offset, args.whence as i32);
        };
        // A directory's descriptor moves under its stream: what the stream
        // buffered and the cookie it stands at are stale after this.
        let mut stream = lock(stream);
        stream.invalidate();
        sys::lseek(h.fd(), offset, args.whence as i32)
    }

    fn copy_file_range(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &CopyFileRangeArgs,
    ) -> io::Result<u64> {
        self.creds.root();
        let hin = self.handle(ino, args.fh_in)?;
        let hout = self.handle(args.nodeid_out, args.fh_out)?;
        let flags = u32::try_from(args.flags).map_err(|_| errno(libc::EINVAL))?;
        let len = usize::try_from(args.len).unwrap_or(usize::MAX);
        let n = sys::copy_file_range(hin.fd(), args.off_in, hout.fd(), args.off_out, len, flags)?;
        Ok(n as u64)
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
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        let (flags, _) = self.backing_open_flags(args.flags);
        let mut flags = flags & !(libc::O_TMPFILE | libc::O_DIRECTORY | libc::O_TRUNC);
        if flags & libc::O_ACCMODE == libc::O_RDONLY || self.no_open() {
            flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        let flags = flags | libc::O_TMPFILE | (args.flags as i32 & libc::O_EXCL);
        let fd = sys::openat(pfd.as_fd(), c".", flags, args.mode & 0o7777)?;
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        let created = self.entry(self.inode_of_open_fd(fd.as_fd(), &st)?, &st);
        let flags = flags & !(libc::O_TMPFILE | libc::O_EXCL);
        self.created_handle(created, fd, flags)
    }

    fn statx(&self, _ctx: &Context, ino: u64, args: &StatxArgs) -> io::Result<StatxReply> {
        self.creds.root();
        let flags = libc::AT_EMPTY_PATH
            | libc::AT_SYMLINK_NOFOLLOW
            | (args.sx_flags as i32 & libc::AT_STATX_SYNC_TYPE);
        let st = match args.fh {
            Some(fh) if fh != 0 => {
                let h = self.handles.get(fh).ok_or_else(|| errno(libc::EBADF))?;
                sys::statx(h.fd(), sys::EMPTY, flags, args.sx_mask)?
            }
            _ => {
                let inode = self.inodes.get(ino)?;
                let pfd = inode.file.path_fd()?;
                sys::statx(pfd.as_fd(), sys::EMPTY, flags, args.sx_mask)?
            }
        };
        Ok(StatxReply {
            statx: fuse_server::statx_from_libc(&st),
            timeout: self.attr_timeout,
        })
    }
}
