//! Watching regular files: a mark per file, or one filesystem-wide mark
//! per file system for a privileged daemon, and the ignore marks that keep
//! the daemon's own writes quiet. Apart from the directories' watch in
//! the parent module because files have these two ways of being marked
//! and the bookkeeping between them ([`Quiet`], [`FileWatch`]).

use super::{ObjectId, SourceWatcher, FILE_MASK};
use crate::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU8, Ordering};

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

/// What the source watch knows of one regular file, kept in its inode
/// (one byte) rather than in tables of the watch's own: a walk over a
/// large tree holds this for every file the kernel knows. Changed only
/// under the watch's file table lock.
#[derive(Debug, Default)]
pub(crate) struct FileWatch(AtomicU8);

impl FileWatch {
    /// In the watch's table of files: its changes are passed on.
    const WATCHED: u8 = 1;
    /// Watched through a filesystem-wide mark (else by a mark of its own).
    const THROUGH_FS: u8 = 2;
    /// With [`FileWatch::THROUGH_FS`]: an ignore mark keeps its writes
    /// quiet ([`Quiet::Yes`]).
    const QUIET: u8 = 4;
    /// With [`FileWatch::THROUGH_FS`]: its writes were quiet for a while
    /// ([`Quiet::Lifted`]).
    const LIFTED: u8 = 8;
    /// With [`FileWatch::THROUGH_FS`]: watched by inode number, found
    /// through [`FileNodes`](super::FileNodes), not in the table.
    const BY_NUMBER: u8 = 16;

    fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, bits: u8) {
        self.0.store(bits, Ordering::Release);
    }

    /// Whether the file is watched (in the watch's table, or by number).
    pub(crate) fn is_watched(&self) -> bool {
        self.get() & Self::WATCHED != 0
    }

    /// Whether the file is watched by inode number (see
    /// [`FileNodes`](super::FileNodes)).
    pub(crate) fn by_number(&self) -> bool {
        let bits = self.get();
        bits & Self::WATCHED != 0 && bits & Self::BY_NUMBER != 0
    }

    /// How a filesystem-wide mark watches it (`None`: it isn't watched,
    /// or by a mark of its own).
    pub(crate) fn quiet(&self) -> Option<Quiet> {
        let bits = self.get();
        if bits & Self::WATCHED == 0 || bits & Self::THROUGH_FS == 0 {
            return None;
        }
        Some(if bits & Self::QUIET != 0 {
            Quiet::Yes
        } else if bits & Self::LIFTED != 0 {
            Quiet::Lifted
        } else {
            Quiet::No
        })
    }

    /// The state of a file watched through a filesystem-wide mark as
    /// `quiet` says, or by a mark of its own (`None`).
    fn watched(quiet: Option<Quiet>) -> u8 {
        Self::WATCHED
            | match quiet {
                None => 0,
                Some(Quiet::No) => Self::THROUGH_FS,
                Some(Quiet::Yes) => Self::THROUGH_FS | Self::QUIET,
                Some(Quiet::Lifted) => Self::THROUGH_FS | Self::LIFTED,
            }
    }

    /// Sets how a file watched through a filesystem-wide mark is quiet,
    /// keeping whether it is watched by number.
    fn set_quiet(&self, quiet: Quiet) {
        let number = self.get() & Self::BY_NUMBER;
        self.set(Self::watched(Some(quiet)) | number);
    }

    /// Sets the state a live upgrade's previous process recorded for a
    /// file in the table it hands over ([`SourceWatcher::restore`]).
    pub(crate) fn restore(&self, quiet: Option<Quiet>) {
        self.set(Self::watched(quiet));
    }
}

impl SourceWatcher {
    /// Whether regular files can be watched ([`SourceWatcher::watch_file`]).
    pub(crate) fn watches_files(&self) -> bool {
        self.watches_files
    }

    /// Watches the regular file of the `O_PATH` descriptor `file`, node
    /// `nodeid`, whose identity is `id` and whose watch state is `state`,
    /// for changes of its data and attributes; nothing if it is watched
    /// already. The caller reads the attributes it answers with after
    /// this: a change after the mark is reported.
    ///
    /// Where the file's file system has a filesystem-wide mark (placed
    /// here on its first file), watching a file is an entry in the table
    /// that the events are looked up in, no system call: a cold listing
    /// then pays nothing per file for the watch (docs/benchmarks.md).
    ///
    /// `file` gives the file's `O_PATH` descriptor, asked for only where
    /// one is needed (a file held by handle on a file system whose mark
    /// and id are known needs none: its first lookup opens nothing).
    pub(crate) fn watch_file<D: AsFd>(
        &self,
        nodeid: u64,
        file: impl Fn() -> io::Result<D>,
        id: ObjectId<'_>,
        state: &FileWatch,
    ) -> io::Result<()> {
        if !self.watches_files {
            return Err(sys::errno(libc::EOPNOTSUPP));
        }
        if self.filesystem_marked(id.dev, &file)? {
            return self.watch_file_through_fs(nodeid, &file, id, state);
        }
        let file = file()?;
        let file = file.as_fd();
        let known = state.is_watched();
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
            let mut files = self.shared.files();
            if !state.is_watched() {
                files.insert(nodeid, &fid, id.handle.is_none());
                state.set(FileWatch::watched(None));
            }
        }
        Ok(())
    }

    /// Whether a filesystem-wide mark reports the changes of the files of
    /// the file system of device `dev`, on which `file` is: placed now if
    /// this is the first file seen there. Refused without `CAP_SYS_ADMIN`
    /// in the initial user namespace, and for a file system whose objects
    /// fanotify can't name by one file system id (a btrfs subvolume:
    /// `EXDEV`): its files then get a mark each.
    fn filesystem_marked<D: AsFd>(
        &self,
        dev: u64,
        file: impl Fn() -> io::Result<D>,
    ) -> io::Result<bool> {
        if !self.privileged {
            return Ok(false);
        }
        let mut filesystems = self.filesystems.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&marked) = filesystems.get(&dev) {
            return Ok(marked);
        }
        // Under the lock: the mark is in place before any file of this
        // file system is answered with the long timeout.
        let file = file()?;
        let path = crate::sys::StackPath::proc_fd(file.as_fd().as_raw_fd());
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
        Ok(marked)
    }

    /// [`SourceWatcher::watch_file`] of a file whose file system has a
    /// filesystem-wide mark: recorded in the table, and its writes
    /// reported again if an ignore mark kept them quiet.
    fn watch_file_through_fs<D: AsFd>(
        &self,
        nodeid: u64,
        file: impl Fn() -> io::Result<D>,
        id: ObjectId<'_>,
        state: &FileWatch,
    ) -> io::Result<()> {
        let fid = if state.is_watched() {
            None
        } else if let Some(fid) = self.known_fid(id) {
            Some(fid)
        } else {
            Some(self.fid_of(file()?.as_fd(), id)?)
        };
        // A file whose handle carries its inode number is found through
        // the inode store when it changes: no entry here.
        let by_number = self.shared.file_nodes.get().is_some()
            && id.handle.is_some_and(|h| h.generation(id.ino).is_some());
        let mut files = self.shared.files();
        if let Some(fid) = fid {
            if !state.is_watched() {
                if by_number {
                    self.shared.by_number.fetch_add(1, Ordering::AcqRel);
                } else {
                    files.insert(nodeid, &fid, id.handle.is_none());
                }
                // In an adopted group the dead process may have left an
                // ignore mark on a file it was writing: lifted as one of
                // ours would be (there may be none there: ENOENT).
                let first = if self.adopted.load(Ordering::Acquire) {
                    Quiet::Yes
                } else {
                    Quiet::No
                };
                let number = if by_number { FileWatch::BY_NUMBER } else { 0 };
                state.set(FileWatch::watched(Some(first)) | number);
            }
        }
        if state.quiet() == Some(Quiet::Yes) {
            match file().and_then(|file| self.remove_ignore_mark(file.as_fd())) {
                Ok(()) => {}
                Err(e)
                    if self.adopted.load(Ordering::Acquire)
                        && e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            state.set_quiet(Quiet::Lifted);
        }
        drop(files);
        Ok(())
    }

    /// Lifts an ignore mark that the process whose group this watch
    /// adopted may have left on the regular file `file` (it was writing
    /// it), for a file not watched now (the daemon holds it open for
    /// writing): once it is watched again its writes must be reported.
    pub(crate) fn lift_inherited_ignore(&self, file: BorrowedFd<'_>) {
        if let Err(e) = self.remove_ignore_mark(file) {
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!("lifting an adopted ignore mark: {e}");
            }
        }
    }

    /// Removes the write-ignore mark of the regular file `file` (ENOENT
    /// where it has no mark of its own).
    fn remove_ignore_mark(&self, file: BorrowedFd<'_>) -> io::Result<()> {
        let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
        sys::fanotify_mark_path(
            self.group.as_fd(),
            libc::FAN_MARK_REMOVE | libc::FAN_MARK_IGNORED_MASK,
            libc::FAN_MODIFY,
            path.as_cstr(),
        )
    }

    /// A count to take before reading the attributes of a file that
    /// [`SourceWatcher::watch_file`] may then watch for the first time,
    /// for [`SourceWatcher::changed_since`].
    pub(crate) fn changes_seen(&self) -> u64 {
        self.shared.missed.load(Ordering::Acquire)
    }

    /// Whether the file whose watch state is `state`, whose attributes
    /// were read after [`SourceWatcher::changes_seen`] said `seen` and
    /// which [`SourceWatcher::watch_file`] watched since, may have changed
    /// between that read and the watch without it being reported: then
    /// its attributes must be read again. With a mark of its own (placed
    /// after the read) it may have; through a filesystem-wide mark (placed
    /// before the read) its change raised an event, which is either read
    /// after the file is in the table (and passed on) or was dropped
    /// before, which this count shows (a change of another file then costs
    /// a read too), unless an ignore mark kept its writes quiet until
    /// this watch.
    ///
    /// `id` identifies the file: one held by file handle is read again only
    /// if a change of that file was dropped (kept for the last
    /// [`RECENTLY_MISSED`](super::RECENTLY_MISSED) dropped changes), any
    /// other on any dropped change.
    pub(crate) fn changed_since(&self, state: &FileWatch, id: ObjectId<'_>, seen: u64) -> bool {
        let _files = self.shared.files();
        match state.quiet() {
            Some(Quiet::No) => {
                let now = self.shared.missed.load(Ordering::Acquire);
                if now == seen {
                    return false;
                }
                let Some(fid) = self.known_fid(id) else {
                    return true;
                };
                self.shared
                    .recently_missed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .may_have_missed(seen, now, fid.digest())
            }
            Some(Quiet::Lifted) => {
                // The caller reads again now, after the ignore mark went.
                state.set_quiet(Quiet::No);
                true
            }
            Some(Quiet::Yes) | None => true,
        }
    }

    /// Stops the watched file whose `O_PATH` descriptor is `file` and
    /// whose watch state is `state` (node `nodeid`, for the log) from
    /// reporting writes (`FAN_MODIFY`) while the daemon holds it open for
    /// writing: its own writes would raise an event each (measured in
    /// docs/benchmarks.md). [`SourceWatcher::watch_file`] restores it. A
    /// file watched through a filesystem-wide mark gets an ignore mark
    /// for `FAN_MODIFY` (one that a write doesn't clear).
    pub(crate) fn stop_write_events(&self, nodeid: u64, file: BorrowedFd<'_>, state: &FileWatch) {
        let _files = self.shared.files();
        match state.quiet() {
            _ if !state.is_watched() => {}
            Some(Quiet::Yes) => {}
            Some(_) => {
                let path = crate::sys::StackPath::proc_fd(file.as_raw_fd());
                match sys::fanotify_mark_path(
                    self.group.as_fd(),
                    libc::FAN_MARK_ADD
                        | libc::FAN_MARK_IGNORED_MASK
                        | libc::FAN_MARK_IGNORED_SURV_MODIFY,
                    libc::FAN_MODIFY,
                    path.as_cstr(),
                ) {
                    Ok(()) => state.set_quiet(Quiet::Yes),
                    Err(e) => tracing::debug!(nodeid, "quieting a file's write events: {e}"),
                }
            }
            None => {
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
        }
    }

    /// Stops watching the file of node `nodeid` (the kernel forgot it),
    /// whose identity is `id`, whose watch state is `state` and whose
    /// `O_PATH` descriptor is `file` (`None` if it can't be opened any
    /// more: a removed file, whose mark went with it).
    pub(crate) fn unwatch_file<D: AsFd>(
        &self,
        nodeid: u64,
        id: ObjectId<'_>,
        state: &FileWatch,
        file: impl FnOnce() -> Option<D>,
    ) {
        let quiet = {
            let mut files = self.shared.files();
            if !state.is_watched() {
                return;
            }
            let quiet = state.quiet();
            let by_number = state.by_number();
            state.set(0);
            // A file held by its handle was recorded without the way back:
            // its digest is made again from that handle.
            let removed = if by_number {
                let _ =
                    self.shared
                        .by_number
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                true
            } else {
                files.remove(nodeid)
                    || self
                        .known_fid(id)
                        .is_some_and(|fid| files.remove_digest(nodeid, fid.digest()))
            };
            if !removed {
                tracing::debug!(
                    nodeid,
                    "source watch: an unwatched file wasn't in the table"
                );
            }
            quiet
        };
        // Through the filesystem-wide mark with no ignore mark: nothing of
        // the file's own to remove, no descriptor to open.
        if matches!(quiet, Some(Quiet::No | Quiet::Lifted)) {
            return;
        }
        let Some(file) = file() else {
            return;
        };
        let file = file.as_fd();
        if let Some(quiet) = quiet {
            // Only an ignore mark is the file's own (it holds the inode).
            if quiet == Quiet::Yes {
                if let Err(e) = self.remove_ignore_mark(file) {
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
}
