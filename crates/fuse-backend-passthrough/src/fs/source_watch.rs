//! The source-watch glue: starting the watch of the source directory
//! (`crate::watch`) once a notifier and the protocol allow it, and the
//! timeouts, marks and unwatching it decides for inodes (long names in
//! watched directories, long attributes of watched files without writers).
//!
//! Apart from `mod.rs` because it is what the passthrough asks of the
//! watch and nothing else; the operations only call
//! [`PassthroughFs::entry_timeout_in`], [`PassthroughFs::attr_timeout_of`]
//! and the writer and forget hooks here.

use super::*;
use crate::inode::PathFd;

impl PassthroughFs {
    /// Starts the source watch if the configuration wants it, a notifier
    /// is set, none runs, and the protocol is known (from the notifier, or
    /// from INIT for a notifier taken before INIT was answered, when
    /// [`FileSystem::init`](fuse_server::FileSystem::init) calls this again) and has
    /// `FUSE_NOTIFY_INC_EPOCH`.
    pub(super) fn start_watch(&self) {
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
        if let Some(group) = lock(&self.inherited_watch).take() {
            drop(slot);
            self.adopt_watch_group(group, &notifier);
            return;
        }
        match SourceWatcher::start(Arc::downgrade(&notifier), self.cfg.file_watch_wanted()) {
            Ok(w) => {
                let files = w.watches_files();
                w.find_files_with(self.file_nodes());
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

    /// The inode store as the watch's way to files it watches by inode
    /// number (`crate::watch::FileNodes`).
    pub(super) fn file_nodes(&self) -> std::sync::Weak<dyn crate::watch::FileNodes> {
        let store: std::sync::Weak<InodeStore> = Arc::downgrade(&self.inodes);
        store
    }

    /// Takes over `group`, a source watch group that a supervisor made
    /// and a dead serving process used (or none yet, for the first one):
    /// the nodes this process knows (taken back from the crash table) are
    /// marked again through the usual paths, which fills the tables the
    /// queued events are looked up in and restores what the dead process
    /// had turned off (write events of files it was writing), then the
    /// group is read: changes made while no process read it are passed
    /// on, and nothing the kernel cached has to be dropped.
    fn adopt_watch_group(&self, group: crate::watch::SourceWatchGroup, notifier: &Arc<Notifier>) {
        let watcher = Arc::new(SourceWatcher::adopt(group));
        watcher.find_files_with(self.file_nodes());
        let files = watcher.watches_files();
        {
            let mut slot = lock(&self.watcher);
            if slot.is_some() {
                return;
            }
            *slot = Some(watcher.clone());
        }
        let epoch = self.next_watch.fetch_add(1, Ordering::Relaxed);
        self.watch_epoch.store(epoch, Ordering::Release);
        let mut marked = 0usize;
        for inode in self.inodes.all() {
            if inode.ftype() == libc::S_IFDIR {
                if self.entry_timeout_in(&inode) == crate::WATCHED_ENTRY_TIMEOUT {
                    marked += 1;
                }
            } else if inode.is_reg() && files {
                if inode.has_writers.load(Ordering::Acquire) {
                    // Watched again once its writers are gone.
                    self.creds.root();
                    if let Ok(fd) = inode.file.path_fd() {
                        watcher.lift_inherited_ignore(fd.as_fd());
                    }
                } else if self.attr_timeout_of(&inode, true) == crate::WATCHED_ATTR_TIMEOUT {
                    marked += 1;
                }
            }
        }
        watcher.adopted_nodes_marked();
        match watcher.start_reading(Arc::downgrade(notifier)) {
            Ok(()) => tracing::info!(
                files,
                marked,
                "watching the source for changes behind the mount's back with the \
                 supervisor's watch group: names cached for {:?} in watched directories",
                crate::WATCHED_ENTRY_TIMEOUT,
            ),
            Err(e) => {
                // Nothing reads the changes: drop what the kernel cached.
                tracing::warn!("reading the supervisor's source watch group: {e}");
                lock(&self.watcher).take();
                self.watch_epoch.store(0, Ordering::Release);
                self.watch_not_taken_over.store(true, Ordering::Release);
            }
        }
    }

    /// Gives the source watch a group made ahead of this file system,
    /// typically by a supervisor before its first serving process
    /// ([`SourceWatchGroup`](crate::SourceWatchGroup)): the watch adopts
    /// it when it starts instead of making its own, and a crash recovery
    /// ([`PassthroughFs::recover`]) then drops nothing the kernel cached.
    /// Call it before `recover` and before a notifier is set.
    pub fn inherit_watch_group(&self, group: crate::watch::SourceWatchGroup) {
        if self.cfg.source_watch_wanted() {
            *lock(&self.inherited_watch) = Some(group);
        }
    }

    /// Stops sending notifications, for a live upgrade: the source watch
    /// stops passing changes on but keeps its marks (the changes queue
    /// until the watch is read again: by the process the upgrade moves it
    /// to, [`PassthroughFs::save_state`], or here again if the upgrade
    /// fails, [`PassthroughFs::set_notifier`]), and the inode table's
    /// pruner stops. Names and attributes the kernel cached on the watch's
    /// word stay covered either way. Call it before the session pauses: a
    /// notification may wait for a directory lock that a client holds
    /// until its request is answered.
    pub fn pause_notifications(&self) {
        // Taken out of the lock first: a LOOKUP takes it (`watch_seen`),
        // and the notification the stop waits for may wait for a LOOKUP.
        let watcher = lock(&self.watcher).clone();
        if let Some(watcher) = watcher {
            watcher.stop_reading();
        }
        self.inodes.set_pruner(None);
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
        if parent.ftype() != libc::S_IFDIR {
            return self.entry_timeout;
        }
        match self.mark_in_watch(epoch, parent, &parent.watched, |w, file| {
            w.watch(parent.nodeid, file()?.as_fd(), parent.watch_id())
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
    /// watcher and a way to the inode's `O_PATH` descriptor, which it asks
    /// for only if it needs one; as the daemon: marking needs read access) and records watch `epoch` in `marked_in` if that
    /// watch still runs. `Ok(false)`: no watch runs, or another one than
    /// `epoch` (set up meanwhile).
    fn mark_in_watch<'i>(
        &self,
        epoch: u32,
        inode: &'i Inode,
        marked_in: &AtomicU32,
        watch: impl FnOnce(&SourceWatcher, &dyn Fn() -> io::Result<PathFd<'i>>) -> io::Result<()>,
    ) -> io::Result<bool> {
        let Some(watcher) = lock(&self.watcher).clone() else {
            return Ok(false);
        };
        self.creds.root();
        // Opened only if the watch needs the descriptor.
        watch(&watcher, &|| inode.file.path_fd())?;
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
        match self.mark_in_watch(epoch, inode, &inode.attrs_watched, |w, file| {
            w.watch_file(inode.nodeid, file, inode.watch_id(), &inode.file_watch)
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
        let mut writers = lock(&inode.cold().writers);
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
                    watcher.stop_write_events(inode.nodeid, fd.as_fd(), &inode.file_watch);
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
        let mut writers = lock(&inode.cold().writers);
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
        let file = inode.is_reg() && inode.file_watch.is_watched();
        if !dir && !file {
            return;
        }
        self.creds.root();
        if dir {
            let fd = inode.file.path_fd().ok();
            watcher.unwatch(inode.nodeid, fd.as_ref().map(|fd| fd.as_fd()));
        }
        if file {
            // Opened only if the file has a mark of its own to remove.
            watcher.unwatch_file(inode.nodeid, inode.watch_id(), &inode.file_watch, || {
                inode.file.path_fd().ok()
            });
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
}
