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
//!
//! The parts: [`events`] reads fanotify's event records, [`marked`] keeps
//! the tables of watched objects, [`files`] watches regular files,
//! [`reader`] is the thread that passes changes on, and [`saved`] is what
//! a live upgrade carries to the next process.

mod events;
mod files;
mod marked;
mod reader;
mod saved;

pub(crate) use files::{FileWatch, Quiet};
pub(crate) use saved::SavedWatch;

use crate::inode::IdMap;
use crate::sys;
use events::Fid;
use fuse_server::Notifier;
use marked::Marked;
use reader::Reader;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
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
    /// Of those, files watched by inode number: found through the inode
    /// table when they change, with no entry in a table of the watch's
    /// own (a file held by a handle that carries its inode number, on a
    /// file system with a filesystem-wide mark).
    pub watched_by_number: usize,
    /// File changes made by other processes that were passed on to the
    /// kernel (`FUSE_NOTIFY_INVAL_INODE`).
    pub file_invalidations: u64,
    /// Times the event queue overflowed and every cached name was expired.
    pub overflows: u64,
    /// File systems whose files are watched by one filesystem-wide mark
    /// (`FAN_MARK_FILESYSTEM`) rather than a mark per file.
    pub filesystems_watched: usize,
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
    /// Which files the last of those were, changed only under the files
    /// table's lock: a file entered after its read is read again only if
    /// its own change went by, not any file's (the filesystem-wide mark
    /// reports every write on the file system, by anyone).
    recently_missed: Mutex<RecentlyMissed>,
    /// File system ids by device number, so that marking an object costs
    /// no `fstatfs` once its file system has been seen (and an event's
    /// file system id tells the device).
    fsids: Mutex<HashMap<u64, [i32; 2]>>,
    /// Where files watched by inode number are found
    /// ([`SourceWatcher::find_files_with`]).
    file_nodes: OnceLock<Weak<dyn FileNodes>>,
    /// Files watched by inode number: in no table here, their inodes say.
    by_number: AtomicUsize,
}

/// Where the source watch finds the nodes of the files it watches by
/// inode number rather than in a table of its own (the passthrough's
/// inode store, which has every node by inode number already): a walk
/// over a large tree then keeps no watch entry per file. A file is
/// watched so when the handle its inode is held by carries its inode
/// number ([`crate::sys::handle_number`]'s layouts); its [`FileWatch`]
/// says it is.
pub(crate) trait FileNodes: Send + Sync {
    /// Calls `each` with every node held by `handle` on the file system of
    /// device `dev` that is watched by number.
    fn watched_by_number(&self, dev: u64, handle: &sys::FileHandle, each: &mut dyn FnMut(u64));

    /// Calls `each` with every node watched by number, and its identity.
    fn all_watched_by_number(&self, each: &mut dyn FnMut(u64, ObjectId<'_>));
}

/// The digests of the files of the last [`RECENTLY_MISSED`] dropped
/// changes, each with the `missed` count it made.
#[derive(Default)]
struct RecentlyMissed {
    changes: std::collections::VecDeque<(u64, u64)>,
    /// The `missed` count of the last overflow (any file may have changed).
    overflow: u64,
}

/// How many dropped changes [`RecentlyMissed`] keeps: a file is entered
/// in the table microseconds after its attributes were read; more
/// changes of unknown files than this in between cost it a read again.
const RECENTLY_MISSED: usize = 1024;

impl RecentlyMissed {
    /// A change of the file of `digest` (`None`: an overflow, any file)
    /// was dropped, and `missed` is now `count`.
    fn note(&mut self, count: u64, digest: Option<u64>) {
        match digest {
            Some(digest) => {
                if self.changes.len() == RECENTLY_MISSED {
                    self.changes.pop_front();
                }
                self.changes.push_back((count, digest));
            }
            None => self.overflow = count,
        }
    }

    /// Whether a change dropped after `missed` was `seen` (and before it
    /// became `now`) may have been one of the file of `digest`.
    fn may_have_missed(&self, seen: u64, now: u64, digest: u64) -> bool {
        if now == seen {
            return false;
        }
        if self.overflow > seen {
            return true;
        }
        // Changes after `seen` no longer kept: any of them may be its.
        let kept_from = self.changes.front().map_or(now + 1, |&(count, _)| count);
        if kept_from > seen + 1 {
            return true;
        }
        self.changes
            .iter()
            .rev()
            .take_while(|&&(count, _)| count > seen)
            .any(|&(_, d)| d == digest)
    }
}

impl Shared {
    fn dirs(&self) -> MutexGuard<'_, Marked> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn files(&self) -> MutexGuard<'_, Marked> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device number of the file system whose id is `fsid`, among
    /// those seen.
    fn dev_of(&self, fsid: [i32; 2]) -> Option<u64> {
        self.fsids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|&(_, &f)| f == fsid)
            .map(|(&dev, _)| dev)
    }

    /// The nodes of the file of fanotify id `fid` watched by number,
    /// passed to `each`; whether there was any. Call it with the files
    /// table locked (the nodes' [`FileWatch`] changes under it).
    fn nodes_by_number(&self, fid: &Fid, each: &mut dyn FnMut(u64)) -> bool {
        if self.by_number.load(Ordering::Acquire) == 0 {
            return false;
        }
        // A layout without the inode number finds no node there
        // (`FileNodes::watched_by_number` reads the number).
        let Some(dev) = self.dev_of(fid.fsid) else {
            return false;
        };
        let Ok(handle) = sys::FileHandle::new(fid.kind, &fid.bytes) else {
            return false;
        };
        let Some(nodes) = self.file_nodes.get().and_then(Weak::upgrade) else {
            return false;
        };
        let mut found = false;
        nodes.watched_by_number(dev, &handle, &mut |nodeid| {
            found = true;
            each(nodeid);
        });
        found
    }

    /// Every node watched by number, passed to `each` (the files table
    /// locked).
    fn all_by_number(&self, each: &mut dyn FnMut(u64)) {
        if self.by_number.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(nodes) = self.file_nodes.get().and_then(Weak::upgrade) {
            nodes.all_watched_by_number(&mut |nodeid, _| each(nodeid));
        }
    }

    /// Counts a dropped change of the file of `digest` (`None`: an
    /// overflow, any file). Call it with the files table locked.
    fn missed_change(&self, digest: Option<u64>) {
        let count = self.missed.fetch_add(1, Ordering::AcqRel) + 1;
        self.recently_missed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(count, digest);
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
    /// The group may place filesystem-wide marks (it was made with
    /// `CAP_SYS_ADMIN`, which they need, and has an unlimited queue).
    privileged: bool,
    /// By device number: whether one filesystem-wide mark reports the
    /// changes of that file system's files (else each file gets a mark of
    /// its own), once a file there was watched.
    filesystems: Mutex<IdMap<bool>>,
    /// The group was another process's ([`SourceWatcher::adopt`]) and the
    /// nodes it knew are being marked again: a file watched through a
    /// filesystem-wide mark may still have that process's ignore mark,
    /// which is lifted when the file is watched. Cleared once they are
    /// ([`SourceWatcher::adopted_nodes_marked`]): a file seen later was
    /// never that process's.
    adopted: AtomicBool,
}

/// A source watch's fanotify group made ahead of the file system that
/// reads it, so that it can outlive serving processes: a supervisor
/// (`passthroughfs --supervise`) makes one before its first serving
/// process and each inherits it
/// ([`PassthroughFs::inherit_watch_group`](crate::PassthroughFs::inherit_watch_group)).
/// Its marks and the changes queued in it while no process reads then
/// survive a crash, and the next process needs no drop of what the kernel
/// cached on the dead one's word.
#[derive(Debug)]
pub struct SourceWatchGroup {
    fd: OwnedFd,
    files: bool,
    privileged: bool,
}

impl SourceWatchGroup {
    /// Makes a group that reports names by directory handle and, with
    /// `files` where the kernel allows it, changed files by their own
    /// handle; unlimited marks and queue where this process may ask for
    /// them. Fails where fanotify can't report names (before Linux 5.9,
    /// or refused), with the reason.
    pub fn create(files: bool) -> io::Result<Self> {
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
        let files = with_files.is_some();
        let (fd, privileged) = match with_files {
            Some(group) => group,
            None => init(names)?,
        };
        Ok(Self {
            fd,
            files,
            privileged,
        })
    }

    /// A group [`SourceWatchGroup::create`] made (in another process):
    /// its descriptor, whether it reports files, and whether it was made
    /// privileged (unlimited, filesystem-wide marks allowed).
    pub fn from_parts(fd: OwnedFd, files: bool, privileged: bool) -> Self {
        Self {
            fd,
            files,
            privileged,
        }
    }

    /// The group's descriptor (to pass on to a child process).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the group reports changed files by their own handle.
    pub fn watches_files(&self) -> bool {
        self.files
    }

    /// Whether the group was made privileged.
    pub fn privileged(&self) -> bool {
        self.privileged
    }
}

impl SourceWatcher {
    /// Starts watching (no directory yet) and passing changes on through
    /// `notifier` while it lives (held weakly: the notifier holds the
    /// connection open); fails where fanotify can't report names by
    /// directory handle (before Linux 5.9, or refused), with the reason.
    /// With `files`, regular files can be watched too
    /// ([`SourceWatcher::watch_file`]) where fanotify reports their handles
    /// as well ([`SourceWatcher::watches_files`] says whether it does).
    pub(crate) fn start(notifier: Weak<Notifier>, files: bool) -> io::Result<Self> {
        let group = SourceWatchGroup::create(files)?;
        let watcher = Self::with_group(Arc::new(group.fd), group.files, group.privileged);
        watcher.start_reading(notifier)?;
        Ok(watcher)
    }

    /// A watcher of a group made by another process
    /// ([`SourceWatchGroup`]): its marks and the events queued in it are a
    /// dead serving process's. Reads nothing yet: the caller marks again
    /// what it knows (so that the queued events find their nodes), then
    /// [`SourceWatcher::start_reading`].
    pub(crate) fn adopt(group: SourceWatchGroup) -> Self {
        let watcher = Self::with_group(Arc::new(group.fd), group.files, group.privileged);
        watcher.adopted.store(true, Ordering::Release);
        watcher
    }

    /// The nodes known when the group was adopted are marked again
    /// ([`SourceWatcher::adopt`]).
    pub(crate) fn adopted_nodes_marked(&self) {
        self.adopted.store(false, Ordering::Release);
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
                recently_missed: Mutex::new(RecentlyMissed::default()),
                fsids: Mutex::new(HashMap::new()),
                file_nodes: OnceLock::new(),
                by_number: AtomicUsize::new(0),
            }),
            reader: Mutex::new(None),
            privileged,
            filesystems: Mutex::new(IdMap::default()),
            adopted: AtomicBool::new(false),
        }
    }

    /// Lets files held by a handle that carries their inode number be
    /// watched by number, found through `nodes` when they change (see
    /// [`FileNodes`]); without it every file takes an entry in the
    /// watch's own table. Set once.
    pub(crate) fn find_files_with(&self, nodes: Weak<dyn FileNodes>) {
        let _ = self.shared.file_nodes.set(nodes);
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
        self.shared.dirs().insert(nodeid, &fid, true);
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

    /// What it did so far.
    pub(crate) fn stats(&self) -> SourceWatchStats {
        SourceWatchStats {
            watching: true,
            watched_dirs: self.shared.dirs().by_node.len(),
            invalidations: self.shared.invalidations.load(Ordering::Relaxed),
            watching_files: self.watches_files,
            watched_files: self.shared.files().len()
                + self.shared.by_number.load(Ordering::Relaxed),
            watched_by_number: self.shared.by_number.load(Ordering::Relaxed),
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

/// What the passthrough knows of an object it asks the watcher to mark,
/// so that naming it the way fanotify does costs no system call where
/// the answer is at hand.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjectId<'a> {
    /// The device number of its file system (`st_dev`).
    pub(crate) dev: u64,
    /// Its inode number.
    pub(crate) ino: u64,
    /// The file handle the passthrough holds it by, if it does: one that
    /// `name_to_handle_at` made without flags. On a file system that can
    /// make such handles the kernel encodes an fanotify id
    /// (`AT_HANDLE_FID`) the same way (both go through the file system's
    /// `encode_fh`), so it serves as the object's fanotify id.
    pub(crate) handle: Option<&'a sys::FileHandle>,
}

impl SourceWatcher {
    /// The fanotify id of the object identified by `id`, if that can be
    /// told without asking the kernel: it has a file handle, and its file
    /// system's id is known (from [`SourceWatcher::fid_of`] before).
    fn known_fid(&self, id: ObjectId<'_>) -> Option<Fid> {
        let handle = id.handle?;
        let fsid = *self
            .shared
            .fsids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id.dev)?;
        Some(Fid {
            fsid,
            kind: handle.kind(),
            bytes: Box::from(handle.bytes()),
        })
    }

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
            .shared
            .fsids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id.dev)
            .copied();
        let fsid = match known {
            Some(fsid) => fsid,
            None => {
                let fsid = sys::fsid(fd)?;
                self.shared
                    .fsids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id.dev, fsid);
                fsid
            }
        };
        Ok(Fid { fsid, kind, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_dropped_change_of_the_file_itself_counts() {
        let mut recent = RecentlyMissed::default();
        // Nothing dropped since the read.
        assert!(!recent.may_have_missed(0, 0, 7));
        recent.note(1, Some(1));
        recent.note(2, Some(2));
        // Others' changes after the read: not this file's.
        assert!(!recent.may_have_missed(0, 2, 7));
        assert!(recent.may_have_missed(0, 2, 2));
        // Its change before the read doesn't count.
        assert!(!recent.may_have_missed(1, 2, 1));
        // An overflow after the read: any file.
        recent.note(3, None);
        assert!(recent.may_have_missed(2, 3, 7));
        assert!(!recent.may_have_missed(3, 3, 7));
        // Changes after the read that are no longer kept: any file.
        for count in 4..4 + RECENTLY_MISSED as u64 + 1 {
            recent.note(count, Some(1000 + count));
        }
        let now = 4 + RECENTLY_MISSED as u64;
        assert!(recent.may_have_missed(3, now, 7));
        assert!(!recent.may_have_missed(4, now, 7));
        assert!(recent.may_have_missed(4, now, 1000 + now));
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
}
