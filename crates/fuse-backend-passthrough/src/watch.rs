//! Watching the source for names changed behind the mount's back, so that
//! the kernel may cache names for long without showing stale ones.
//!
//! A cached name (a dentry) is only asked about again once its entry
//! timeout has passed, so the timeout is how long a file removed or
//! renamed in the source directly stays visible under its old name. A
//! short one costs a LOOKUP per name and timeout: with 1 s, stat over
//! 10,000 files runs at 0.6 of the same with a day (issue 13's
//! measurements in docs/benchmarks.md). So under [`crate::CachePolicy::Auto`]
//! the passthrough watches the directories whose names the kernel caches,
//! with an fanotify group reporting directory entry events by directory
//! file handle and name (`FAN_REPORT_DFID_NAME`), and tells the kernel of
//! every name removed, renamed away or renamed over by another process
//! (`FUSE_NOTIFY_INVAL_ENTRY`). Names answered in a watched directory are
//! then cached for [`WATCHED_ENTRY_TIMEOUT`].
//!
//! - Every change is passed on, the daemon's own included (an unlink or
//!   rename through the mount then costs one notification more, for a
//!   name the kernel has already dropped or moved): telling the daemon's
//!   threads from the other threads of its process needs thread ids that
//!   fanotify hides from an unprivileged listener, and a program that
//!   embeds the passthrough may change the source itself.
//! - A directory is marked before any name in it is answered with the long
//!   timeout (before the name is read), so a change after the read is
//!   reported. Marks are inode marks, removed when the kernel forgets the
//!   directory's node, and all dropped with the group.
//! - A full event queue (`FAN_Q_OVERFLOW`) loses events: the watcher then
//!   bumps the connection's epoch (`FUSE_NOTIFY_INC_EPOCH`, protocol 7.44),
//!   which expires every cached name at once. The watcher runs only where
//!   the kernel has it.
//! - Names created in the source need no notification: the passthrough
//!   answers a missing name with `ENOENT`, which the kernel doesn't cache.
//! - Regular files are watched too where the attribute timeout is left to
//!   the policy ([`crate::PassthroughConfig::attr_timeout`] unset): each
//!   file the kernel is given an entry for gets an inode mark for
//!   `FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE` (an inode mark reports
//!   a change made through any name of the file, a hard link outside the
//!   source included, and a link count change), the group also reports
//!   the changed file's own handle (`FAN_REPORT_FID`), and a change made by
//!   another process is passed on as `FUSE_NOTIFY_INVAL_INODE` (data and
//!   attributes for a write, attributes for the rest). Such files'
//!   attributes are then cached for [`WATCHED_ATTR_TIMEOUT`]. Changes
//!   made by the daemon's own process are not passed on: they are the
//!   kernel's own requests, whose replies or the kernel itself already
//!   updated what it caches (an embedding program that changes the source
//!   itself sets an attribute timeout). Changes of one file are passed on
//!   at most once per [`COALESCE`], so a writer in the source costs a
//!   notification per interval, not per write. While the daemon holds a
//!   write handle on a file, its mark doesn't report writes (its own would
//!   raise an event each) and its attributes keep the short timeout
//!   ([`SourceWatcher::stop_write_events`]). A file changed through a
//!   shared writable mapping in the source raises no event until the
//!   writer closes it (`FAN_CLOSE_WRITE`).
//! - Directories' attributes keep the attribute timeout (1 s): entries
//!   made in them change their times and sizes without an event of theirs.
//! - A privileged daemon (`CAP_SYS_ADMIN` in the initial user namespace)
//!   watches files by one filesystem-wide mark (`FAN_MARK_FILESYSTEM`)
//!   per source file system instead of a mark per file, placed when the
//!   first file there is watched: watching a file is then an entry in
//!   the table the events are looked up in, no system call, and the
//!   attributes read before it need no second read unless the watcher
//!   dropped a change of a file it didn't know meanwhile
//!   ([`SourceWatcher::changed_since`]). A first listing paid a mark and
//!   a `statx` per file, a third of its rate (docs/benchmarks.md). The
//!   group's queue is then unlimited (`FAN_UNLIMITED_QUEUE`): the changes
//!   of every file of the file system come through it, and an overflow
//!   would expire every cached name. The daemon's own writes to a watched
//!   file are kept quiet by an inode ignore mark. The price: every write
//!   to any file of that file system, by any process, makes an event
//!   (about 1 µs of system time per 4 KiB `pwrite` here), which the
//!   watcher reads and drops. Unprivileged, or where the file system
//!   refuses (a btrfs subvolume: `EXDEV`), files get a mark each as
//!   before.

use crate::inode::IdMap;
use crate::sys;
use fuse_server::Notifier;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a name answered in a watched directory may be cached: a day,
/// as under [`crate::CachePolicy::Always`]; the watcher tells the kernel of
/// every change before then.
pub const WATCHED_ENTRY_TIMEOUT: Duration = Duration::from_secs(86400);

/// How long the attributes of a watched regular file may be cached: a day,
/// as under [`crate::CachePolicy::Always`]; the watcher tells the kernel of
/// every change before then.
pub const WATCHED_ATTR_TIMEOUT: Duration = Duration::from_secs(86400);

/// The events a watched directory reports: a name removed, renamed away or
/// renamed over, of files and directories alike.
const MASK: u64 = libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO | libc::FAN_ONDIR;

/// The events a watched regular file reports: its data written or
/// truncated, its attributes (mode, owner, times, link count, extended
/// attributes) changed, or a writer closed it (the one event a change
/// through a shared mapping raises).
const FILE_MASK: u64 = libc::FAN_MODIFY | libc::FAN_ATTRIB | libc::FAN_CLOSE_WRITE;

/// Of the file events, those that may have changed the data.
const DATA_MASK: u64 = libc::FAN_MODIFY | libc::FAN_CLOSE_WRITE;

/// After passing file changes on, the watcher waits this long before it
/// reads events again, so that the events of a busy writer in the source
/// merge in the queue (fanotify merges equal events) into one
/// notification per file and interval.
pub(crate) const COALESCE: Duration = Duration::from_millis(5);

/// What the watcher did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceWatchStats {
    /// Whether the source is watched now (and names cached for
    /// [`WATCHED_ENTRY_TIMEOUT`] in watched directories).
    pub watching: bool,
    /// Directories watched now.
    pub watched_dirs: usize,
    /// Changes made by other processes that were passed on to the kernel
    /// (`FUSE_NOTIFY_INVAL_ENTRY`).
    pub invalidations: u64,
    /// Whether regular files are watched too (their attributes then cached
    /// for [`WATCHED_ATTR_TIMEOUT`]).
    pub watching_files: bool,
    /// Regular files watched now.
    pub watched_files: usize,
    /// File changes made by other processes that were passed on to the
    /// kernel (`FUSE_NOTIFY_INVAL_INODE`).
    pub file_invalidations: u64,
    /// Times the event queue overflowed and every cached name was expired.
    pub overflows: u64,
    /// File systems whose files are watched by one filesystem-wide mark
    /// (`FAN_MARK_FILESYSTEM`) rather than a mark per file.
    pub filesystems_watched: usize,
}

/// How fanotify names a directory: its file system's id and its file
/// handle as `name_to_handle_at(AT_HANDLE_FID)` encodes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Fid {
    fsid: [i32; 2],
    kind: i32,
    bytes: Box<[u8]>,
}

impl Fid {
    /// A 64-bit digest of the id, what [`Marked`] keeps: SipHash with
    /// fixed keys (the same object gets the same digest whenever it is
    /// seen; a collision costs an invalidation too many, see [`Marked`]).
    fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// One event, as far as the watcher cares.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// Events were lost.
    Overflow,
    /// `name` in the directory `dir` changed.
    Name { dir: Fid, name: Vec<u8> },
    /// Another process changed the file `file`: its data too if `data`.
    Changed { file: Fid, data: bool },
}

/// Watched directories or files, both ways. An object is kept by a
/// 64-bit digest of its fanotify id ([`Fid::digest`]), not by the id
/// itself: a file handle is a heap allocation, and a walk over a large tree
/// keeps an entry per file the kernel knows (16 bytes a side here against
/// about 100 with the ids). Objects whose digests collide are each told of
/// the others' changes: an invalidation too many, never one missing.
#[derive(Default)]
struct Marked {
    /// Digest to node id (the first node recorded with it).
    by_fid: IdMap<u64>,
    /// Digest to the other node ids recorded with it (a collision, or one
    /// object held by two nodes): rare, so apart.
    more: IdMap<Vec<u64>>,
    /// Node id to digest.
    by_node: IdMap<u64>,
}

impl Marked {
    /// Records node `nodeid` as the object `fid`.
    fn insert(&mut self, nodeid: u64, fid: &Fid) {
        self.insert_digest(nodeid, fid.digest());
    }

    /// Records node `nodeid` as the object of digest `digest`.
    fn insert_digest(&mut self, nodeid: u64, digest: u64) {
        if let Some(&old) = self.by_node.get(&nodeid) {
            if old == digest {
                return;
            }
            self.remove(nodeid);
        }
        self.by_node.insert(nodeid, digest);
        match self.by_fid.get(&digest) {
            None => {
                self.by_fid.insert(digest, nodeid);
            }
            Some(_) => self.more.entry(digest).or_default().push(nodeid),
        }
    }

    /// Forgets node `nodeid`; whether it was recorded.
    fn remove(&mut self, nodeid: u64) -> bool {
        let Some(digest) = self.by_node.remove(&nodeid) else {
            return false;
        };
        if self.by_fid.get(&digest) == Some(&nodeid) {
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
        } else if let Some(v) = self.more.get_mut(&digest) {
            v.retain(|&n| n != nodeid);
        }
        if self.more.get(&digest).is_some_and(|v| v.is_empty()) {
            self.more.remove(&digest);
        }
        shrink_when_sparse(&mut self.by_node);
        shrink_when_sparse(&mut self.by_fid);
        true
    }

    /// The nodes recorded as the object `fid`, passed to `each`; whether
    /// there was any.
    fn nodes_of(&self, fid: &Fid, mut each: impl FnMut(u64)) -> bool {
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
}

/// Gives memory back once a map holds a quarter of its capacity: a map
/// never shrinks by itself, and a walk of a large tree, once the kernel
/// forgot it, would otherwise keep the tables sized for all of it (tens of
/// bytes per file walked). Halving at a quarter keeps this amortized O(1).
fn shrink_when_sparse<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut HashMap<K, V, S>,
) {
    const SMALL: usize = 1024;
    if map.capacity() > SMALL && map.len() < map.capacity() / 4 {
        map.shrink_to((map.len() * 2).max(SMALL));
    }
}

/// What the watcher's thread shares with the passthrough.
struct Shared {
    dirs: Mutex<Marked>,
    files: Mutex<Marked>,
    invalidations: AtomicU64,
    file_invalidations: AtomicU64,
    overflows: AtomicU64,
    /// File changes of other processes read for a file not in the table
    /// (then dropped), and overflows: counted while the table is locked
    /// for the look-up, so that a file entered in the table after its
    /// attributes were read can tell whether its change went by
    /// meanwhile ([`SourceWatcher::changed_since`]).
    missed: AtomicU64,
}

impl Shared {
    fn dirs(&self) -> MutexGuard<'_, Marked> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn files(&self) -> MutexGuard<'_, Marked> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An fanotify group watching directories of the source, and the thread
/// that passes their changes on to the kernel. Dropping it stops the
/// thread and drops every mark (unless the group lives on in another
/// process: a live upgrade moves it, see [`SourceWatcher::save`]).
pub(crate) struct SourceWatcher {
    group: Arc<OwnedFd>,
    /// The group reports changed files' own handles (`FAN_REPORT_FID`), so
    /// files can be watched.
    watches_files: bool,
    shared: Arc<Shared>,
    /// The thread reading the group, while one does: events queue in the
    /// group meanwhile ([`SourceWatcher::stop_reading`]).
    reader: Mutex<Option<Reader>>,
    /// File system ids by device number, so that marking an object costs
    /// no `fstatfs` once its file system has been seen.
    fsids: Mutex<HashMap<u64, [i32; 2]>>,
    /// The group may place filesystem-wide marks (it was made with
    /// `CAP_SYS_ADMIN`, which they need, and has an unlimited queue).
    privileged: bool,
    /// By device number: whether one filesystem-wide mark reports the
    /// changes of that file system's files (else each file gets a mark of
    /// its own), once a file there was watched.
    filesystems: Mutex<IdMap<bool>>,
    /// Files watched through a filesystem-wide mark, by node id, and
    /// whether an ignore mark keeps their writes quiet.
    through_fs: Mutex<IdMap<Quiet>>,
}

/// The thread that reads a group's events and passes them on; dropping it
/// stops the thread.
struct Reader {
    /// Written to stop the thread.
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// Closed by the thread as it ends.
    ended: std::sync::mpsc::Receiver<()>,
}

/// A source watch as a live upgrade moves it from one process to the next
/// ([`SourceWatcher::save`], [`SourceWatcher::restore`]): the group, whose
/// marks live as long as any process holds it, and what the watcher knows
/// of them.
pub(crate) struct SavedWatch {
    /// A duplicate of the fanotify group's descriptor.
    pub(crate) group: OwnedFd,
    /// The group reports files' own handles.
    pub(crate) watches_files: bool,
    /// The group may place filesystem-wide marks.
    pub(crate) privileged: bool,
    /// Marked directories: node id and the digest of its fanotify id.
    pub(crate) dirs: Vec<(u64, u64)>,
    /// Watched regular files: node id, digest, and how a filesystem-wide
    /// mark watches it (`None`: by a mark of its own).
    pub(crate) files: Vec<(u64, u64, Option<Quiet>)>,
    /// By device number: whether a filesystem-wide mark watches that file
    /// system's files.
    pub(crate) filesystems: Vec<(u64, bool)>,
}

/// Whether the writes of a file watched through a filesystem-wide mark
/// are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quiet {
    /// They are, and have been since it was watched.
    No,
    /// An ignore mark keeps them quiet while the daemon writes it
    /// ([`SourceWatcher::stop_write_events`]).
    Yes,
    /// They are again, but weren't for a while: attributes read before
    /// the ignore mark went may be stale.
    Lifted,
}

impl Quiet {
    /// As a live upgrade's state writes it.
    pub(crate) fn as_text(self) -> &'static str {
        match self {
            Quiet::No => "reported",
            Quiet::Yes => "quiet",
            Quiet::Lifted => "lifted",
        }
    }

    /// Reads [`Quiet::as_text`]'s form.
    pub(crate) fn from_text(text: &str) -> Option<Quiet> {
        match text {
            "reported" => Some(Quiet::No),
            "quiet" => Some(Quiet::Yes),
            "lifted" => Some(Quiet::Lifted),
            _ => None,
        }
    }
}

/// How long stopping a [`SourceWatcher`]'s thread waits for it. A
/// notification can block in the kernel on a directory lock held by a
/// request that nobody answers any more (the session stopped first):
/// such a thread is left behind (it ends when the connection does)
/// rather than hanging the shutdown.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl SourceWatcher {
    /// Starts watching (no directory yet) and passing changes on through
    /// `notifier` while it lives (held weakly: the notifier holds the
    /// connection open); fails where fanotify can't report names by
    /// directory handle (before Linux 5.9, or refused), with the reason.
    /// With `files`, regular files can be watched too
    /// ([`SourceWatcher::watch_file`]) where fanotify reports their handles
    /// as well ([`SourceWatcher::watches_files`] says whether it does).
    pub(crate) fn start(notifier: Weak<Notifier>, files: bool) -> io::Result<Self> {
        let names = libc::FAN_CLASS_NOTIF | libc::FAN_REPORT_DFID_NAME;
        // A privileged daemon asks for no limits: unprivileged, a mark per
        // file the kernel knows, past the per-user limit
        // (`fs.fanotify.max_user_marks`) files keep the short timeout; and
        // a filesystem-wide mark (which needs the same privilege) reports
        // the changes of every file there, whose events must not overflow
        // the queue (that expires every cached name).
        let init = |flags| {
            sys::fanotify_init(flags | libc::FAN_UNLIMITED_MARKS | libc::FAN_UNLIMITED_QUEUE)
                .map(|g| (g, true))
                .or_else(|e| {
                    if e.raw_os_error() == Some(libc::EPERM) {
                        sys::fanotify_init(flags).map(|g| (g, false))
                    } else {
                        Err(e)
                    }
                })
        };
        let with_files = files
            .then(|| init(names | libc::FAN_REPORT_FID))
            .and_then(|r| {
                r.map_err(|e| tracing::info!("source watch: files can't be watched: {e}"))
                    .ok()
            });
        let watches_files = with_files.is_some();
        let (group, privileged) = match with_files {
            Some(group) => group,
            None => init(names)?,
        };
        let watcher = Self::with_group(Arc::new(group), watches_files, privileged);
        watcher.start_reading(notifier)?;
        Ok(watcher)
    }

    /// A watcher of `group`, knowing no mark and reading nothing yet.
    fn with_group(group: Arc<OwnedFd>, watches_files: bool, privileged: bool) -> Self {
        Self {
            group,
            watches_files,
            shared: Arc::new(Shared {
                dirs: Mutex::new(Marked::default()),
                files: Mutex::new(Marked::default()),
                invalidations: AtomicU64::new(0),
                file_invalidations: AtomicU64::new(0),
                overflows: AtomicU64::new(0),
                missed: AtomicU64::new(0),
            }),
            reader: Mutex::new(None),
            fsids: Mutex::new(HashMap::new()),
            privileged,
            filesystems: Mutex::new(IdMap::default()),
            through_fs: Mutex::new(IdMap::default()),
        }
    }

    /// Starts the thread that reads the group's events and passes them on
    /// through `notifier` (held weakly: the notifier holds the connection
    /// open); a thread already reading is stopped first (it passed changes
    /// on through another notifier).
    pub(crate) fn start_reading(&self, notifier: Weak<Notifier>) -> io::Result<()> {
        let mut slot = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        drop(slot.take());
        let stop = sys::eventfd()?;
        let stop_read = stop.try_clone()?;
        let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
        let thread = {
            let group = self.group.clone();
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("source-watch".into())
                .spawn(move || {
                    watch_loop(&group, &stop_read, &shared, &notifier);
                    drop(ended_tx);
                })?
        };
        *slot = Some(Reader {
            stop,
            thread: Some(thread),
            ended,
        });
        Ok(())
    }

    /// Stops the thread that reads the group, keeping the group and its
    /// marks: changes made meanwhile queue in the group until a thread
    /// reads it again, here or in the process a live upgrade moves it to.
    /// (A notification the thread sends may wait for a directory lock that
    /// a client holds until its request is answered: a session pauses only
    /// once this thread is stopped.)
    pub(crate) fn stop_reading(&self) {
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(reader);
    }

    /// The watch as a live upgrade moves it to another process: the group
    /// and what the watcher knows of its marks. Call it with the thread
    /// stopped ([`SourceWatcher::stop_reading`]) and no request served.
    pub(crate) fn save(&self) -> io::Result<SavedWatch> {
        // Copied first: the two tables are never locked together.
        let through_fs: HashMap<u64, Quiet> = self
            .through_fs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&n, &q)| (n, q))
            .collect();
        let mut dirs: Vec<(u64, u64)> = self
            .shared
            .dirs()
            .by_node
            .iter()
            .map(|(&n, &d)| (n, d))
            .collect();
        dirs.sort_unstable();
        let mut files: Vec<(u64, u64, Option<Quiet>)> = self
            .shared
            .files()
            .by_node
            .iter()
            .map(|(&n, &d)| (n, d, through_fs.get(&n).copied()))
            .collect();
        files.sort_unstable_by_key(|&(n, _, _)| n);
        let mut filesystems: Vec<(u64, bool)> = self
            .filesystems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&dev, &marked)| (dev, marked))
            .collect();
        filesystems.sort_unstable();
        Ok(SavedWatch {
            group: self.group.as_fd().try_clone_to_owned()?,
            watches_files: self.watches_files,
            privileged: self.privileged,
            dirs,
            files,
            filesystems,
        })
    }

    /// Takes over a watch another process saved ([`SourceWatcher::save`]),
    /// its marks being for the same node ids here (the caller leaves out
    /// nodes it doesn't have); nothing reads it until
    /// [`SourceWatcher::start_reading`]. Fails on a descriptor that isn't
    /// an fanotify group (asked of `proc_self_fd`, `/proc/self/fd`).
    pub(crate) fn restore(saved: SavedWatch, proc_self_fd: BorrowedFd<'_>) -> io::Result<Self> {
        let name = std::ffi::CString::new(saved.group.as_raw_fd().to_string())
            .map_err(io::Error::other)?;
        let mut buf = [0u8; 64];
        let n = sys::readlinkat(proc_self_fd, &name, &mut buf)?;
        let what = &buf[..n];
        if what != b"anon_inode:[fanotify]" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the source watch's descriptor is {:?}, not an fanotify group",
                    String::from_utf8_lossy(what)
                ),
            ));
        }
        let watcher =
            Self::with_group(Arc::new(saved.group), saved.watches_files, saved.privileged);
        {
            let mut dirs = watcher.shared.dirs();
            for (node, digest) in saved.dirs {
                dirs.insert_digest(node, digest);
            }
        }
        {
            let mut files = watcher.shared.files();
            let mut through_fs = watcher.through_fs.lock().unwrap_or_else(|e| e.into_inner());
            for (node, digest, quiet) in saved.files {
                files.insert_digest(node, digest);
                if let Some(quiet) = quiet {
                    through_fs.insert(node, quiet);
                }
            }
        }
        watcher
            .filesystems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(saved.filesystems);
        Ok(watcher)
    }

    /// Watches the directory of the `O_PATH` descriptor `dir`, node
    /// `nodeid`, whose identity is `id`; nothing if it is watched already.
    pub(crate) fn watch(
        &self,
        nodeid: u64,
        dir: BorrowedFd<'_>,
        id: ObjectId<'_>,
    ) -> io::Result<()> {
        if self.shared.dirs().by_node.contains_key(&nodeid) {
            return Ok(());
        }
        let fid = self.fid_of(dir, id)?;
        sys::fanotify_mark_dir(self.group.as_fd(), libc::FAN_MARK_ADD, MASK, dir)?;
        self.shared.dirs().insert(nodeid, &fid);
        Ok(())
    }

    /// Stops watching the directory of node `nodeid` (the kernel forgot
    /// it), whose `O_PATH` descriptor is `dir` (`None` if it can't be
    /// opened any more: a removed directory, whose mark went with it).
    pub(crate) fn unwatch(&self, nodeid: u64, dir: Option<BorrowedFd<'_>>) {
        if !self.shared.dirs().remove(nodeid) {
            return;
        }
        let Some(dir) = dir else {
            return;
        };
        if let Err(e) = sys::fanotify_mark_dir(self.group.as_fd(), libc::FAN_MARK_REMOVE, MASK, dir)
        {
            // ENOENT: no mark (the directory was removed, which drops it).
            tracing::debug!(nodeid, "removing a source watch: {e}");
        }
    }

    /// Whether regular files can be watched ([`SourceWatcher::watch_file`]).
    pub(crate) fn watches_files(&self) -> bool {
        self.watches_files
    }

    /// Watches the regular file of the `O_PATH` descriptor `file`, node
    /// `nodeid`, whose identity is `id`, for changes of its data and
    /// attributes; nothing if it is watched already. The caller reads the
    /// attributes it answers with after this: a change after the mark is
    /// reported.
    ///
    /// Where the file's file system has a filesystem-wide mark (placed
    /// here on its first file), watching a file is an entry in the table
    /// that the events are looked up in, no system call: a cold listing
    /// then pays nothing per file for the watch (docs/benchmarks.md).
    pub(crate) fn watch_file(
        &self,
        nodeid: u64,
        file: BorrowedFd<'_>,
        id: ObjectId<'_>,
    ) -> io::Result<()> {
        if !self.watches_files {
            return Err(sys::errno(libc::EOPNOTSUPP));
        }
        if self.filesystem_marked(id.dev, file) {
            return self.watch_file_through_fs(nodeid, file, id);
        }
        let known = self.shared.files().by_node.contains_key(&nodeid);
        // A file marked before may have had FAN_MODIFY taken off its mark
        // (`modify_events`): adding the whole mask again restores it.
        let fid = if known {
            None
        } else {
            Some(self.fid_of(file, id)?)
        };
        let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
        sys::fanotify_mark_path(
            self.group.as_fd(),
            libc::FAN_MARK_ADD,
            FILE_MASK,
            path.as_cstr(),
        )?;
        if let Some(fid) = fid {
            self.shared.files().insert(nodeid, &fid);
        }
        Ok(())
    }

    /// Whether a filesystem-wide mark reports the changes of the files of
    /// the file system of device `dev`, on which `file` is: placed now if
    /// this is the first file seen there. Refused without `CAP_SYS_ADMIN`
    /// in the initial user namespace, and for a file system whose objects
    /// fanotify can't name by one file system id (a btrfs subvolume:
    /// `EXDEV`): its files then get a mark each.
    fn filesystem_marked(&self, dev: u64, file: BorrowedFd<'_>) -> bool {
        if !self.privileged {
            return false;
        }
        let mut filesystems = self.filesystems.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&marked) = filesystems.get(&dev) {
            return marked;
        }
        // Under the lock: the mark is in place before any file of this
        // file system is answered with the long timeout.
        let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
        let marked = match sys::fanotify_mark_path(
            self.group.as_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            FILE_MASK,
            path.as_cstr(),
        ) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!(
                    dev,
                    "source watch: a mark per file (no filesystem-wide mark: {e})"
                );
                false
            }
        };
        filesystems.insert(dev, marked);
        marked
    }

    /// [`SourceWatcher::watch_file`] of a file whose file system has a
    /// filesystem-wide mark: recorded in the table, and its writes
    /// reported again if an ignore mark kept them quiet.
    fn watch_file_through_fs(
        &self,
        nodeid: u64,
        file: BorrowedFd<'_>,
        id: ObjectId<'_>,
    ) -> io::Result<()> {
        if !self.shared.files().by_node.contains_key(&nodeid) {
            let fid = self.fid_of(file, id)?;
            self.shared.files().insert(nodeid, &fid);
        }
        let mut through_fs = self.through_fs.lock().unwrap_or_else(|e| e.into_inner());
        let quiet = through_fs.entry(nodeid).or_insert(Quiet::No);
        if *quiet == Quiet::Yes {
            let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
            sys::fanotify_mark_path(
                self.group.as_fd(),
                libc::FAN_MARK_REMOVE | libc::FAN_MARK_IGNORED_MASK,
                libc::FAN_MODIFY,
                path.as_cstr(),
            )?;
            *quiet = Quiet::Lifted;
        }
        Ok(())
    }

    /// A count to take before reading the attributes of a file that
    /// [`SourceWatcher::watch_file`] may then watch for the first time,
    /// for [`SourceWatcher::changed_since`].
    pub(crate) fn changes_seen(&self) -> u64 {
        self.shared.missed.load(Ordering::Acquire)
    }

    /// Whether the file of node `nodeid`, whose attributes were read after
    /// [`SourceWatcher::changes_seen`] said `seen` and which
    /// [`SourceWatcher::watch_file`] watched since, may have changed
    /// between that read and the watch without it being reported: then
    /// its attributes must be read again. With a mark of its own (placed
    /// after the read) it may have; through a filesystem-wide mark (placed
    /// before the read) its change raised an event, which is either read
    /// after the file is in the table (and passed on) or was dropped
    /// before, which this count shows (a change of another file then costs
    /// a read too), unless an ignore mark kept its writes quiet until
    /// this watch.
    pub(crate) fn changed_since(&self, nodeid: u64, seen: u64) -> bool {
        let mut through_fs = self.through_fs.lock().unwrap_or_else(|e| e.into_inner());
        match through_fs.get_mut(&nodeid) {
            Some(Quiet::No) => self.shared.missed.load(Ordering::Acquire) != seen,
            Some(quiet @ Quiet::Lifted) => {
                // The caller reads again now, after the ignore mark went.
                *quiet = Quiet::No;
                true
            }
            Some(Quiet::Yes) | None => true,
        }
    }

    /// Stops the watched file of node `nodeid` (`O_PATH` descriptor
    /// `file`) from reporting writes (`FAN_MODIFY`) while the daemon holds
    /// it open for writing: its own writes would raise an event each
    /// (measured in docs/benchmarks.md). [`SourceWatcher::watch_file`]
    /// restores it. A file watched through a filesystem-wide mark gets an
    /// ignore mark for `FAN_MODIFY` (one that a write doesn't clear).
    pub(crate) fn stop_write_events(&self, nodeid: u64, file: BorrowedFd<'_>) {
        if !self.shared.files().by_node.contains_key(&nodeid) {
            return;
        }
        if let Some(quiet) = self
            .through_fs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&nodeid)
        {
            if *quiet == Quiet::Yes {
                return;
            }
            let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
            match sys::fanotify_mark_path(
                self.group.as_fd(),
                libc::FAN_MARK_ADD
                    | libc::FAN_MARK_IGNORED_MASK
                    | libc::FAN_MARK_IGNORED_SURV_MODIFY,
                libc::FAN_MODIFY,
                path.as_cstr(),
            ) {
                Ok(()) => *quiet = Quiet::Yes,
                Err(e) => tracing::debug!(nodeid, "quieting a file's write events: {e}"),
            }
            return;
        }
        let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
        if let Err(e) = sys::fanotify_mark_path(
            self.group.as_fd(),
            libc::FAN_MARK_REMOVE,
            libc::FAN_MODIFY,
            path.as_cstr(),
        ) {
            tracing::debug!(nodeid, "stopping a file's write events: {e}");
        }
    }

    /// Whether the file of node `nodeid` is watched.
    pub(crate) fn watches_file(&self, nodeid: u64) -> bool {
        self.shared.files().by_node.contains_key(&nodeid)
    }

    /// Stops watching the file of node `nodeid` (the kernel forgot it),
    /// whose `O_PATH` descriptor is `file` (`None` if it can't be opened
    /// any more: a removed file, whose mark went with it).
    pub(crate) fn unwatch_file(&self, nodeid: u64, file: Option<BorrowedFd<'_>>) {
        if !self.shared.files().remove(nodeid) {
            return;
        }
        let through_fs = {
            let mut map = self.through_fs.lock().unwrap_or_else(|e| e.into_inner());
            let quiet = map.remove(&nodeid);
            shrink_when_sparse(&mut map);
            quiet
        };
        let Some(file) = file else {
            return;
        };
        if let Some(quiet) = through_fs {
            // Only an ignore mark is the file's own (it holds the inode).
            if quiet == Quiet::Yes {
                let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
                if let Err(e) = sys::fanotify_mark_path(
                    self.group.as_fd(),
                    libc::FAN_MARK_REMOVE | libc::FAN_MARK_IGNORED_MASK,
                    libc::FAN_MODIFY,
                    path.as_cstr(),
                ) {
                    tracing::debug!(nodeid, "removing a file's ignore mark: {e}");
                }
            }
            return;
        }
        let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
        if let Err(e) = sys::fanotify_mark_path(
            self.group.as_fd(),
            libc::FAN_MARK_REMOVE,
            FILE_MASK,
            path.as_cstr(),
        ) {
            // ENOENT: no mark (the file was removed, which drops it).
            tracing::debug!(nodeid, "removing a file's source watch: {e}");
        }
    }

    /// What it did so far.
    pub(crate) fn stats(&self) -> SourceWatchStats {
        SourceWatchStats {
            watching: true,
            watched_dirs: self.shared.dirs().by_node.len(),
            invalidations: self.shared.invalidations.load(Ordering::Relaxed),
            watching_files: self.watches_files,
            watched_files: self.shared.files().by_node.len(),
            file_invalidations: self.shared.file_invalidations.load(Ordering::Relaxed),
            overflows: self.shared.overflows.load(Ordering::Relaxed),
            filesystems_watched: self
                .filesystems
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .filter(|&&marked| marked)
                .count(),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        let Some(t) = self.thread.take() else {
            return;
        };
        match self.ended.recv_timeout(STOP_WAIT) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
                "source watch: a notification to the kernel is still blocked; \
                 leaving its thread behind"
            ),
            _ => {
                let _ = t.join();
            }
        }
    }
}

/// What the passthrough knows of an object it asks the watcher to mark,
/// so that naming it the way fanotify does costs no system call where
/// the answer is at hand.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjectId<'a> {
    /// The device number of its file system (`st_dev`).
    pub(crate) dev: u64,
    /// The file handle the passthrough holds it by, if it does: one that
    /// `name_to_handle_at` made without flags. On a file system that can
    /// make such handles the kernel encodes an fanotify id
    /// (`AT_HANDLE_FID`) the same way (both go through the file system's
    /// `encode_fh`), so it serves as the object's fanotify id.
    pub(crate) handle: Option<&'a sys::FileHandle>,
}

impl SourceWatcher {
    /// The fanotify id of the object of `fd`, identified by `id`.
    fn fid_of(&self, fd: BorrowedFd<'_>, id: ObjectId<'_>) -> io::Result<Fid> {
        let (kind, bytes) = match id.handle {
            Some(handle) => (handle.kind(), Box::from(handle.bytes())),
            None => {
                let (handle, _) = sys::name_to_handle_fd_flags(fd, libc::AT_HANDLE_FID)
                    .or_else(|_| sys::name_to_handle_fd(fd))?;
                (handle.kind(), handle.bytes().into())
            }
        };
        let known = self
            .fsids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id.dev)
            .copied();
        let fsid = match known {
            Some(fsid) => fsid,
            None => {
                let fsid = sys::fsid(fd)?;
                self.fsids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id.dev, fsid);
                fsid
            }
        };
        Ok(Fid { fsid, kind, bytes })
    }
}

/// Reads events until stopped, passing changes on to the kernel.
fn watch_loop(group: &OwnedFd, stop: &OwnedFd, shared: &Shared, notifier: &Weak<Notifier>) {
    let mut buf = vec![0u8; 64 << 10];
    let mut events = Vec::new();
    // Files changed in this batch: node id -> whether the data changed.
    let mut changed: HashMap<u64, bool> = HashMap::new();
    let own_pid = std::process::id() as i32;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: group.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::warn!("source watch: poll: {}", io::Error::last_os_error());
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        // SAFETY: reading into our buffer.
        let n = unsafe {
            libc::read(
                group.as_fd().as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
                continue;
            }
            tracing::warn!("source watch: reading events: {e}");
            return;
        }
        events.clear();
        let file_events = parse_events(&buf[..n as usize], own_pid, &mut events);
        // Gone with the connection: nothing to tell any more.
        let Some(notifier) = notifier.upgrade() else {
            return;
        };
        for event in events.drain(..) {
            match event {
                Event::Overflow => {
                    shared.overflows.fetch_add(1, Ordering::Relaxed);
                    {
                        let _files = shared.files();
                        shared.missed.fetch_add(1, Ordering::AcqRel);
                    }
                    tracing::warn!(
                        "source watch: events lost (queue full); every cached name expires"
                    );
                    if let Err(e) = notifier.inc_epoch() {
                        tracing::warn!("source watch: expiring cached names: {e}");
                    }
                    // And every watched file's attributes and data.
                    let files: Vec<u64> = shared.files().by_node.keys().copied().collect();
                    changed.extend(files.into_iter().map(|node| (node, true)));
                }
                Event::Changed { file, data } => {
                    let files = shared.files();
                    let known =
                        files.nodes_of(&file, |nodeid| *changed.entry(nodeid).or_default() |= data);
                    if !known {
                        // Counted under the table's lock (see `missed`).
                        shared.missed.fetch_add(1, Ordering::AcqRel);
                    }
                }
                Event::Name { dir, name } => {
                    let mut dirs = Vec::new();
                    shared.dirs().nodes_of(&dir, |nodeid| dirs.push(nodeid));
                    for nodeid in dirs {
                        shared.invalidations.fetch_add(1, Ordering::Relaxed);
                        // ENOENT: the kernel has no such name cached.
                        if let Err(e) = notifier.inval_entry(nodeid, &name, false) {
                            if e.raw_os_error() != Some(libc::ENOENT) {
                                tracing::debug!(nodeid, "source watch: invalidating a name: {e}");
                            }
                        }
                    }
                }
            }
        }
        // The daemon's own writes raise events too (skipped above): a
        // thread woken per write would cost a context switch each.
        let coalesce = file_events;
        for (nodeid, data) in changed.drain() {
            shared.file_invalidations.fetch_add(1, Ordering::Relaxed);
            // Offset 0: the cached data too; -1: only the attributes.
            let offset = if data { 0 } else { -1 };
            // ENOENT: the kernel has no such inode cached any more.
            if let Err(e) = notifier.inval_inode(nodeid, offset, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    tracing::debug!(nodeid, "source watch: invalidating a file: {e}");
                }
            }
        }
        drop(notifier);
        if coalesce {
            std::thread::sleep(COALESCE);
        }
    }
}

/// Reads the events in `buf` (whole events, as `read(2)` returns them)
/// into `out`, skipping any it can't read, and the file changes of process
/// `own_pid`; returns whether there were file changes (skipped or not).
fn parse_events(buf: &[u8], own_pid: i32, out: &mut Vec<Event>) -> bool {
    let mut file_events = false;
    const META: usize = size_of::<libc::fanotify_event_metadata>();
    let mut at = 0;
    while buf.len() - at >= META {
        let ev = &buf[at..];
        let event_len = u32::from_ne_bytes(ev[0..4].try_into().unwrap()) as usize;
        let metadata_len = u16::from_ne_bytes(ev[6..8].try_into().unwrap()) as usize;
        if event_len < META
            || event_len > ev.len()
            || metadata_len < META
            || metadata_len > event_len
        {
            tracing::warn!(
                event_len,
                "source watch: malformed event; rest of the batch skipped"
            );
            return file_events;
        }
        let mask = u64::from_ne_bytes(ev[8..16].try_into().unwrap());
        let fd = i32::from_ne_bytes(ev[16..20].try_into().unwrap());
        let pid = i32::from_ne_bytes(ev[20..24].try_into().unwrap());
        at += event_len;
        if fd >= 0 {
            // Not asked for (no FAN_REPORT_FID group gets one), but never
            // leak it.
            // SAFETY: a descriptor the kernel just gave us.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            out.push(Event::Overflow);
            continue;
        }
        // A name event (on a watched directory) comes with the directory's
        // handle and the name; a file event (on a watched file) with the
        // file's own handle (and its directory's and name, not needed).
        let names = mask & MASK & !libc::FAN_ONDIR != 0;
        let file_event = mask & FILE_MASK != 0 && mask & libc::FAN_ONDIR == 0;
        file_events |= file_event;
        let file = file_event && pid != own_pid;
        let mut info = &ev[metadata_len..event_len];
        while info.len() >= 4 {
            let info_type = info[0];
            let len = u16::from_ne_bytes(info[2..4].try_into().unwrap()) as usize;
            if len < 4 || len > info.len() {
                break;
            }
            match info_type {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME if names => {
                    if let Some(e) = parse_dfid_name(&info[4..len]) {
                        out.push(e);
                    }
                }
                libc::FAN_EVENT_INFO_TYPE_FID if file => {
                    if let Some((file, _)) = parse_fid(&info[4..len]) {
                        out.push(Event::Changed {
                            file,
                            data: mask & DATA_MASK != 0,
                        });
                    }
                }
                _ => {}
            }
            info = &info[len..];
        }
    }
    file_events
}

/// A record's fsid and `struct file_handle` (after the record's header),
/// and what follows them.
fn parse_fid(rec: &[u8]) -> Option<(Fid, &[u8])> {
    let fsid = [
        i32::from_ne_bytes(rec.get(0..4)?.try_into().ok()?),
        i32::from_ne_bytes(rec.get(4..8)?.try_into().ok()?),
    ];
    let handle_bytes = u32::from_ne_bytes(rec.get(8..12)?.try_into().ok()?) as usize;
    let kind = i32::from_ne_bytes(rec.get(12..16)?.try_into().ok()?);
    let end = 16usize.checked_add(handle_bytes)?;
    let bytes = rec.get(16..end)?;
    Some((
        Fid {
            fsid,
            kind,
            bytes: bytes.into(),
        },
        &rec[end..],
    ))
}

/// A `DFID_NAME` record after its header: fsid, `struct file_handle`,
/// then the name, NUL-terminated.
fn parse_dfid_name(rec: &[u8]) -> Option<Event> {
    let (dir, rest) = parse_fid(rec)?;
    let name = &rest[..rest.iter().position(|&b| b == 0)?];
    if name.is_empty() || name == b"." {
        return None;
    }
    Some(Event::Name {
        dir,
        name: name.to_vec(),
    })
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
        m.insert(10, &fid(1));
        m.insert(11, &fid(2));
        // One object held by two nodes: both are told.
        m.insert(12, &fid(1));
        assert_eq!(nodes(&m, &fid(1)), [10, 12]);
        assert_eq!(nodes(&m, &fid(2)), [11]);
        assert!(!m.nodes_of(&fid(3), |_| {}));
        // The first node goes: the second takes its place.
        assert!(m.remove(10));
        assert!(!m.remove(10));
        assert_eq!(nodes(&m, &fid(1)), [12]);
        // A node recorded again as another object moves.
        m.insert(12, &fid(3));
        assert!(!m.nodes_of(&fid(1), |_| {}));
        assert_eq!(nodes(&m, &fid(3)), [12]);
        assert!(m.remove(11) && m.remove(12));
        assert!(m.by_fid.is_empty() && m.by_node.is_empty() && m.more.is_empty());
    }

    /// [`ObjectId::handle`]'s premise: where a file has a plain file
    /// handle, its fanotify id (`AT_HANDLE_FID`) is the same handle.
    #[test]
    fn a_plain_file_handle_is_the_fanotify_id() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        for path in [dir.path().join("f"), dir.path().to_path_buf()] {
            let file = std::fs::File::open(&path).unwrap();
            let (plain, _) = sys::name_to_handle_fd(file.as_fd()).unwrap_or_else(|e| {
                panic!(
                    "{}: no file handle ({e}): TMPDIR must be on a file system with them",
                    path.display()
                )
            });
            let (fid, _) = sys::name_to_handle_fd_flags(file.as_fd(), libc::AT_HANDLE_FID)
                .expect("AT_HANDLE_FID where a plain handle exists");
            assert_eq!(
                (plain.kind(), plain.bytes()),
                (fid.kind(), fid.bytes()),
                "{path:?}"
            );
        }
    }

    /// One event as the kernel lays it out: metadata, then a DFID_NAME
    /// record, padded to 8 bytes.
    fn event(mask: u64, pid: i32, fsid: [i32; 2], handle: &[u8], name: &[u8]) -> Vec<u8> {
        let mut rec = Vec::new();
        rec.extend_from_slice(&fsid[0].to_ne_bytes());
        rec.extend_from_slice(&fsid[1].to_ne_bytes());
        rec.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&1i32.to_ne_bytes());
        rec.extend_from_slice(handle);
        rec.extend_from_slice(name);
        rec.push(0);
        while (rec.len() + 4) % 8 != 0 {
            rec.push(0);
        }
        let mut info = vec![libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 0];
        info.extend_from_slice(&((rec.len() + 4) as u16).to_ne_bytes());
        info.extend_from_slice(&rec);
        let meta = size_of::<libc::fanotify_event_metadata>();
        let mut ev = Vec::new();
        ev.extend_from_slice(&((meta + info.len()) as u32).to_ne_bytes());
        ev.push(libc::FANOTIFY_METADATA_VERSION);
        ev.push(0);
        ev.extend_from_slice(&(meta as u16).to_ne_bytes());
        ev.extend_from_slice(&mask.to_ne_bytes());
        ev.extend_from_slice(&libc::FAN_NOFD.to_ne_bytes());
        ev.extend_from_slice(&pid.to_ne_bytes());
        ev.extend_from_slice(&info);
        ev
    }

    #[test]
    fn names_come_out() {
        let mut buf = event(libc::FAN_DELETE, 42, [1, 2], b"\x0a\x0b\x0c\x0d", b"gone");
        buf.extend(event(libc::FAN_MOVED_TO, 7, [1, 2], b"\x0a\x0b", b"mine"));
        buf.extend(event(
            libc::FAN_MOVED_FROM | libc::FAN_ONDIR,
            0,
            [1, 2],
            b"\x01",
            b"dir",
        ));
        let mut out = Vec::new();
        parse_events(&buf, 0, &mut out);
        let named = |handle: &[u8], name: &[u8]| Event::Name {
            dir: Fid {
                fsid: [1, 2],
                kind: 1,
                bytes: handle.into(),
            },
            name: name.to_vec(),
        };
        assert_eq!(
            out,
            vec![
                named(b"\x0a\x0b\x0c\x0d", b"gone"),
                named(b"\x0a\x0b", b"mine"),
                named(b"\x01", b"dir"),
            ]
        );
    }

    /// A file event as a `FAN_REPORT_DFID_NAME | FAN_REPORT_FID` group
    /// gets it: a DFID_NAME record of the file's directory, then a FID
    /// record of the file.
    fn file_event(mask: u64, pid: i32, dir: &[u8], name: &[u8], file: &[u8]) -> Vec<u8> {
        let mut ev = event(mask, pid, [1, 2], dir, name);
        let mut rec = Vec::new();
        rec.extend_from_slice(&1i32.to_ne_bytes());
        rec.extend_from_slice(&2i32.to_ne_bytes());
        rec.extend_from_slice(&(file.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&1i32.to_ne_bytes());
        rec.extend_from_slice(file);
        while (rec.len() + 4) % 8 != 0 {
            rec.push(0);
        }
        ev.push(libc::FAN_EVENT_INFO_TYPE_FID);
        ev.push(0);
        ev.extend_from_slice(&((rec.len() + 4) as u16).to_ne_bytes());
        ev.extend_from_slice(&rec);
        let len = ev.len() as u32;
        ev[0..4].copy_from_slice(&len.to_ne_bytes());
        ev
    }

    #[test]
    fn file_changes_come_out_by_the_file_not_its_name() {
        let mut buf = file_event(libc::FAN_MODIFY, 42, b"\x0d", b"f", b"\x0f\x0f");
        buf.extend(file_event(libc::FAN_ATTRIB, 42, b"\x0d", b"g", b"\x0a"));
        // The daemon's own change: not passed on.
        buf.extend(file_event(libc::FAN_CLOSE_WRITE, 9, b"\x0d", b"h", b"\x0b"));
        buf.extend(file_event(
            libc::FAN_CLOSE_WRITE,
            43,
            b"\x0d",
            b"h",
            b"\x0b",
        ));
        let mut out = Vec::new();
        parse_events(&buf, 9, &mut out);
        let file = |handle: &[u8], data| Event::Changed {
            file: Fid {
                fsid: [1, 2],
                kind: 1,
                bytes: handle.into(),
            },
            data,
        };
        assert_eq!(
            out,
            vec![
                file(b"\x0f\x0f", true),
                file(b"\x0a", false),
                file(b"\x0b", true)
            ]
        );
    }

    #[test]
    fn overflow_and_garbage() {
        let meta = size_of::<libc::fanotify_event_metadata>();
        let mut ov = vec![0u8; meta];
        ov[0..4].copy_from_slice(&(meta as u32).to_ne_bytes());
        ov[6..8].copy_from_slice(&(meta as u16).to_ne_bytes());
        ov[8..16].copy_from_slice(&libc::FAN_Q_OVERFLOW.to_ne_bytes());
        ov[16..20].copy_from_slice(&libc::FAN_NOFD.to_ne_bytes());
        let mut out = Vec::new();
        parse_events(&ov, 0, &mut out);
        assert_eq!(out, vec![Event::Overflow]);
        // Truncated, zero-length and oversized events end the batch
        // without a panic.
        for bad in [&ov[..10], &[0u8; 24][..], &[0xffu8; 64][..]] {
            out.clear();
            parse_events(bad, 0, &mut out);
            assert!(out.is_empty());
        }
        // A record whose handle runs past its end is dropped.
        let mut ev = event(libc::FAN_DELETE, 3, [0, 0], b"\x01\x02", b"x");
        let at = meta + 4 + 8;
        ev[at..at + 4].copy_from_slice(&1000u32.to_ne_bytes());
        out.clear();
        parse_events(&ev, 0, &mut out);
        assert!(out.is_empty());
    }
}
