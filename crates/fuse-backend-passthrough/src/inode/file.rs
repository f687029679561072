//! The inode files: how an inode holds on to its backing file (a file
//! handle opened on demand through the descriptor cache, or an `O_PATH`
//! descriptor), and the [`PathFd`] every user reaches it through.
//!
//! Apart from `inode.rs` because it is the one place that knows the two
//! ways (see the module docs there); the store only keeps [`InodeFile`]s.

use super::fd_cache::{CachedFd, FdCache};
use crate::sys::{self, StackPath};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A descriptor for `*at()` calls on an inode, valid while it lives.
pub(crate) enum PathFd<'a> {
    /// The inode's own `O_PATH` descriptor.
    Borrowed(BorrowedFd<'a>),
    /// A descriptor from the cache of inodes in use (opened from the
    /// inode's file handle), kept open while this lives.
    Shared(Arc<CachedFd>),
}

impl AsFd for PathFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            PathFd::Borrowed(fd) => *fd,
            PathFd::Shared(fd) => fd.fd.as_fd(),
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

/// What inodes held by file handle share: the source's mount (the
/// `mount_fd` of `open_by_handle_at`) and the descriptor cache.
struct HandleOpener {
    mount_fd: OwnedFd,
    mnt_id: u64,
    cache: Arc<FdCache>,
    next_id: AtomicU64,
    /// Descriptors opened from file handles so far.
    opens: AtomicU64,
}

impl HandleOpener {
    /// Whether `handle` (of `fd`'s inode) opens that inode through this
    /// opener's mount: the same file system, reached through another
    /// mount.
    fn opens_same(&self, handle: &sys::FileHandle, fd: BorrowedFd<'_>) -> bool {
        let opened = crate::creds::with_fs_caps(|| {
            sys::open_by_handle(self.mount_fd.as_fd(), handle, libc::O_PATH)
        });
        let Ok(opened) = opened else { return false };
        let identity = |fd: BorrowedFd<'_>| {
            sys::statx_fd(fd, libc::STATX_INO)
                .ok()
                .map(|st| (st.stx_ino, st.stx_dev_major, st.stx_dev_minor))
        };
        let theirs = identity(fd);
        theirs.is_some() && theirs == identity(opened.as_fd())
    }
}

/// How inodes hold their backing files: by file handle where the backing
/// file system supports them and the process may open them
/// (`CAP_DAC_READ_SEARCH`), else by `O_PATH` descriptor.
pub(crate) struct InodeFiles {
    opener: Option<Arc<HandleOpener>>,
    /// Why inodes are held by descriptor (`None`: by file handle).
    fallback: Option<String>,
}

impl InodeFiles {
    /// Decides how inodes of the tree whose root is `root` are held:
    /// by file handle if `want_handles` and a probe (`name_to_handle_at`
    /// then `open_by_handle_at` of the root) works, else by descriptor.
    /// Inodes held by handle keep the descriptors of up to `cache_size`
    /// inodes in use (rounded up to a multiple of the cache's shard count).
    pub(crate) fn new(root: BorrowedFd<'_>, want_handles: bool, cache_size: usize) -> Self {
        if !want_handles {
            return Self::fds("file handles turned off in the configuration".into());
        }
        let probe = || -> io::Result<HandleOpener> {
            let (handle, mnt_id) = sys::name_to_handle_fd(root)?;
            // `open_by_handle_at` takes no O_PATH descriptor as mount_fd
            // (EBADF): the root opened for reading.
            let mount_fd = sys::openat(root, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
            let fd = sys::open_by_handle(mount_fd.as_fd(), &handle, libc::O_PATH)?;
            drop(fd);
            let cache = Arc::new(FdCache::new(cache_size));
            let spare: Arc<dyn sys::SpareFds> = cache.clone();
            sys::register_spare_fds(Arc::downgrade(&spare));
            Ok(HandleOpener {
                mount_fd,
                mnt_id,
                cache,
                next_id: AtomicU64::new(1),
                opens: AtomicU64::new(0),
            })
        };
        match probe() {
            Ok(opener) => Self {
                opener: Some(Arc::new(opener)),
                fallback: None,
            },
            Err(e) => {
                let why = match e.raw_os_error() {
                    Some(libc::EOPNOTSUPP) => {
                        "the source's file system does not support file handles".to_owned()
                    }
                    Some(libc::EPERM) => "opening file handles needs CAP_DAC_READ_SEARCH \
                         (in the initial user namespace)"
                        .to_owned(),
                    _ => format!("file handles don't work here: {e}"),
                };
                Self::fds(why)
            }
        }
    }

    fn fds(why: String) -> Self {
        Self {
            opener: None,
            fallback: Some(why),
        }
    }

    /// `None` when inodes are held by file handle, else the reason they
    /// are held by descriptor.
    pub(crate) fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Descriptors held by the cache of inodes in use.
    pub(crate) fn cached_fds(&self) -> usize {
        self.opener.as_ref().map_or(0, |o| o.cache.len())
    }

    /// Descriptors opened from file handles so far (an inode held by
    /// handle whose descriptor wasn't in the cache, used by a request).
    pub(crate) fn handle_opens(&self) -> u64 {
        self.opener
            .as_ref()
            .map_or(0, |o| o.opens.load(Ordering::Relaxed))
    }

    /// The most descriptors the cache of inodes in use holds (0 when
    /// inodes are held by descriptor).
    pub(crate) fn fd_cache_capacity(&self) -> usize {
        self.opener.as_ref().map_or(0, |o| o.cache.capacity())
    }

    /// The way to hold the file of the `O_PATH` descriptor `fd`: its file
    /// handle (with `fd` kept in the cache, as the inode is about to be
    /// used) when it is on the source's mount and has one, else `fd`.
    /// A file held by `handle` (of the source's mount), opened when
    /// first used; `None` without file handles.
    pub(crate) fn held_by_handle(&self, handle: sys::FileHandle) -> Option<InodeFile> {
        let opener = self.opener.as_ref()?;
        let id = opener.next_id.fetch_add(1, Ordering::Relaxed);
        Some(InodeFile(Repr::Handle(HandleFile {
            handle,
            id,
            opener: opener.clone(),
            recent: Mutex::new(std::sync::Weak::new()),
        })))
    }

    /// Whether inodes are held by file handle (see [`InodeFiles::held_by_name`]).
    pub(crate) fn by_handle(&self) -> bool {
        self.opener.is_some()
    }

    /// The file `name` in directory `dir` leads to, which `statx` by name
    /// just found to be inode `ino`, held by its file handle without being
    /// opened: a name seen for the first time then costs two system calls
    /// (the `statx` and `name_to_handle_at`), the descriptor being opened
    /// only if a request needs one. `None` (the caller opens the name)
    /// without file handles, for a name on another mount, one whose
    /// handle doesn't carry its inode number (a layout
    /// [`sys::FileHandle::generation`] doesn't read), or one that leads to
    /// another inode by now.
    ///
    /// The inode number is checked, not the generation: a file removed
    /// and its number given to a new file between the two calls would
    /// pair the old file's attributes with the new file's handle. What
    /// the node answers from then on is the new file's (the handle is),
    /// and the kernel drops a cached inode whose type it sees change.
    pub(crate) fn held_by_name(
        &self,
        dir: BorrowedFd<'_>,
        name: &std::ffi::CStr,
        ino: u64,
    ) -> Option<InodeFile> {
        let opener = self.opener.as_ref()?;
        let (handle, mnt_id) = sys::name_to_handle_at(dir, name).ok()?;
        if mnt_id != opener.mnt_id || handle.generation(ino).is_none() {
            return None;
        }
        self.held_by_handle(handle)
    }

    pub(crate) fn make(&self, fd: OwnedFd) -> InodeFile {
        self.make_checked(fd, false)
    }

    /// [`InodeFiles::make`] for a descriptor another process opened (a
    /// live upgrade's node table): one on another mount of the source's
    /// file system (the old daemon's, in its own mount namespace) is held
    /// by handle too where the handle opens the same inode through the
    /// source's mount, so that the inodes taken over keep no descriptor
    /// each.
    pub(crate) fn make_restored(&self, fd: OwnedFd) -> InodeFile {
        self.make_checked(fd, true)
    }

    fn make_checked(&self, fd: OwnedFd, other_mounts: bool) -> InodeFile {
        let Some(opener) = &self.opener else {
            return InodeFile(Repr::Fd(fd));
        };
        match sys::name_to_handle_fd(fd.as_fd()) {
            Ok((handle, mnt_id))
                if mnt_id == opener.mnt_id
                    || (other_mounts && opener.opens_same(&handle, fd.as_fd())) =>
            {
                let id = opener.next_id.fetch_add(1, Ordering::Relaxed);
                let fd = CachedFd::new(fd);
                let recent = Mutex::new(Arc::downgrade(&fd));
                opener.cache.put(id, fd);
                InodeFile(Repr::Handle(HandleFile {
                    handle,
                    id,
                    opener: opener.clone(),
                    recent,
                }))
            }
            // Another mount below the source, or a file without a handle.
            _ => InodeFile(Repr::Fd(fd)),
        }
    }
}

/// An inode held by file handle.
struct HandleFile {
    handle: sys::FileHandle,
    /// Its key in the descriptor cache.
    id: u64,
    opener: Arc<HandleOpener>,
    /// The descriptor the cache last gave it, not kept open by this: a
    /// request on a hot inode reaches its descriptor here, in the inode's
    /// own memory, without the cache's lock and table; once the cache has
    /// closed it (and no request holds it), it is asked again.
    recent: Mutex<std::sync::Weak<CachedFd>>,
}

impl HandleFile {
    fn path_fd(&self) -> io::Result<Arc<CachedFd>> {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = recent.upgrade() {
            fd.used.store(true, Ordering::Relaxed);
            return Ok(fd);
        }
        if let Some(fd) = self.opener.cache.get(self.id) {
            *recent = Arc::downgrade(&fd);
            return Ok(fd);
        }
        drop(recent);
        // A thread acting as a caller lacks CAP_DAC_READ_SEARCH: open as
        // the daemon (the inode is known already; access checks happen on
        // what the request then does with the descriptor).
        let fd = crate::creds::with_fs_caps(|| {
            sys::open_by_handle(self.opener.mount_fd.as_fd(), &self.handle, libc::O_PATH)
        })?;
        self.opener.opens.fetch_add(1, Ordering::Relaxed);
        let fd = CachedFd::new(fd);
        self.opener.cache.put(self.id, fd.clone());
        *self.recent.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&fd);
        Ok(fd)
    }
}

impl Drop for HandleFile {
    fn drop(&mut self) {
        self.opener.cache.remove(self.id);
    }
}

enum Repr {
    /// An `O_PATH` descriptor.
    Fd(OwnedFd),
    /// A file handle.
    Handle(HandleFile),
}

/// How an inode holds its backing file: an `O_PATH` descriptor, or a file
/// handle (`name_to_handle_at`) opened on demand with `open_by_handle_at`
/// (and cached while the inode is in use), so that a known inode needs no
/// open descriptor. See [`InodeFiles`].
pub(crate) struct InodeFile(Repr);

impl std::fmt::Debug for InodeFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Fd(fd) => f.debug_tuple("InodeFile::Fd").field(fd).finish(),
            Repr::Handle(h) => f.debug_tuple("InodeFile::Handle").field(&h.handle).finish(),
        }
    }
}

impl InodeFile {
    /// Wraps an `O_PATH` descriptor (held as is: the root's).
    pub(crate) fn from_path_fd(fd: OwnedFd) -> Self {
        Self(Repr::Fd(fd))
    }

    /// A descriptor for `*at()` calls and `AT_EMPTY_PATH` calls. For an
    /// inode held by file handle whose file is gone from the backing file
    /// system, `ESTALE`.
    pub(crate) fn path_fd(&self) -> io::Result<PathFd<'_>> {
        match &self.0 {
            Repr::Fd(fd) => Ok(PathFd::Borrowed(fd.as_fd())),
            Repr::Handle(h) => h.path_fd().map(PathFd::Shared),
        }
    }

    /// Whether `other`, made for a file with the same [`InodeKey`](super::InodeKey), holds
    /// the same file as this inode. The key alone doesn't say: a backing
    /// file system may give a removed file's inode number to a new file
    /// while the kernel still holds the old node. Two file handles are
    /// compared (a handle carries the inode's generation); a file held by
    /// descriptor is alive, and two live files never share a key; a file
    /// held by handle compared with one held by descriptor is opened to
    /// see whether it is still alive.
    pub(crate) fn holds_same_file(&self, other: &InodeFile) -> bool {
        match (&self.0, &other.0) {
            (Repr::Handle(a), Repr::Handle(b)) => a.handle == b.handle,
            (Repr::Fd(_), _) => true,
            (Repr::Handle(_), Repr::Fd(_)) => self.is_alive(),
        }
    }

    /// Whether the file still exists on the backing file system (always
    /// for one held by descriptor; for one held by file handle, whether
    /// the handle still opens: `ESTALE` once the inode was freed). Errors
    /// other than `ESTALE` count as alive: they say nothing about identity.
    pub(crate) fn is_alive(&self) -> bool {
        match self.path_fd() {
            Ok(_) => true,
            Err(e) => e.raw_os_error() != Some(libc::ESTALE),
        }
    }

    /// The backing file's generation, where its file handle tells it (0
    /// otherwise). `ino` is the file's inode number.
    /// The file handle it is held by (`None`: held by descriptor).
    pub(crate) fn file_handle(&self) -> Option<&sys::FileHandle> {
        match &self.0 {
            Repr::Handle(h) => Some(&h.handle),
            Repr::Fd(_) => None,
        }
    }

    pub(crate) fn generation(&self, ino: u64) -> u32 {
        match &self.0 {
            Repr::Handle(h) => h.handle.generation(ino).unwrap_or(0),
            Repr::Fd(_) => 0,
        }
    }

    /// Opens the file again with `flags` (never following a symlink in
    /// the backing tree: the `/proc/self/fd` magic link leads to the file
    /// itself). `proc_self_fd` is an `O_PATH` descriptor of `/proc/self/fd`.
    /// Access is checked with the calling thread's credentials.
    pub(crate) fn reopen(&self, proc_self_fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
        let pfd = self.path_fd()?;
        let name = sys::NumName::new(pfd.as_fd().as_raw_fd() as u64);
        sys::openat(proc_self_fd, name.as_cstr(), flags & !libc::O_NOFOLLOW, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd as _;

    fn open_path(path: &std::path::Path) -> OwnedFd {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        assert!(
            fd >= 0,
            "{}: {}",
            path.display(),
            io::Error::last_os_error()
        );
        // SAFETY: just opened, ours alone.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// A descriptor opened through another mount of the source's file
    /// system (as an old daemon in its own mount namespace hands its node
    /// table over) is held by handle when restored, and by itself when
    /// made on the request path (a mount below the source).
    #[test]
    fn a_descriptor_of_another_mount_is_held_by_handle_when_restored_needs_root() {
        test_support::require_root();
        std::thread::spawn(|| {
            test_support::unshare_mount_namespace();
            let dir = tempfile::tempdir().unwrap();
            let (source, other) = (dir.path().join("source"), dir.path().join("other"));
            std::fs::create_dir(&source).unwrap();
            std::fs::create_dir(&other).unwrap();
            std::fs::write(source.join("f"), b"x").unwrap();
            // The same directory through a second mount.
            test_support::bind_mount(&source, &other, false);
            let files = InodeFiles::new(open_path(&source).as_fd(), true, 64);
            if files.fallback.is_some() {
                panic!(
                    "this test needs file handles on {}: {:?}",
                    dir.path().display(),
                    files.fallback
                );
            }
            let through_other = || open_path(&other.join("f"));
            assert!(files.make(through_other()).file_handle().is_none());
            let restored = files.make_restored(through_other());
            assert!(restored.file_handle().is_some());
            // What the handle opens is the file.
            let fd = restored.path_fd().unwrap();
            let st = sys::statx_fd(fd.as_fd(), libc::STATX_INO).unwrap();
            let want = std::fs::metadata(source.join("f")).unwrap();
            assert_eq!(st.stx_ino, std::os::unix::fs::MetadataExt::ino(&want));
        })
        .join()
        .unwrap();
    }
}
