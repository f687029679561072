//! The passthrough's part of a live upgrade: its node table and open
//! handles written down for a new process ([`PassthroughFs::save_state`])
//! and taken back there ([`PassthroughFs::restore_state`]).
//!
//! Everything that is an open file moves as a descriptor (`SCM_RIGHTS`,
//! by `fuse_transport_dev::takeover`): each inode's `O_PATH` descriptor,
//! each handle's open file, each zero-message handle, and each lock
//! owner's open file description, so the new process holds the very same
//! open files: file offsets, `O_APPEND`, and the locks taken through them
//! (the passthrough keeps POSIX locks as OFD locks on a description per
//! owner, `flock` locks on the handle's description) survive as they are.
//! The source watch moves too: its fanotify group (whose marks live while
//! any process holds it) and which node each mark is for. The old process
//! stops reading it before it pauses
//! ([`PassthroughFs::pause_notifications`]); changes made meanwhile queue
//! in the group, and the new process reads them once it serves. So the
//! names and attributes the kernel cached on the watch's word stay
//! covered, and nothing the kernel cached is dropped. (Dropping them, as
//! version 1 had the new process do with an INC_EPOCH, makes the kernel
//! unhash each cached dentry at its next use: a directory that is some
//! process's working directory looks deleted until the LOOKUP that
//! follows finds it again, and a `getcwd` in that window fails with
//! ENOENT.) A new process that doesn't watch the same way, or a state
//! without a watch from a process that may have had one (version 1),
//! still drops them: an INC_EPOCH and an attribute INVAL_INODE per known
//! node ([`PassthroughFs::resumed`]).
//!
//! What doesn't move: a directory handle's buffered entries (the next
//! READDIR seeks to its cookie, as after an LSEEK), and counters.
//!
//! Kernel passthrough's backing ids belong to the connection, not the
//! process: they move as numbers, with which inode each belongs to and
//! how many opens count on it, and the new process owns (and closes) them
//! from then on. The old process can't close them any more once it gave
//! the connection up.
//!
//! ## The state text (version 2; version 1, without the watch, is read too)
//!
//! ```text
//! passthrough-state 2
//! root <ino> <dev>
//! next <next node id> <next handle number>
//! inode <node id> <ino> <dev> <mnt id> <mode> <lookup refs> <fd index>
//! handle <fh> <node id> <open flags> <file|dir> <fd index>
//! lazy <node id> <open flags> <fd index>
//! lock <node id> <owner> <pid> <fh,fh,...|-> <fd index>
//! passthrough <node id> <backing id, 0: served by the daemon> <opens>
//! passthrough-handle <fh> <node id>
//! watch <reports files: 0|1> <filesystem-wide marks allowed: 0|1> <fd index>
//! watch-filesystem <device> <filesystem-wide mark: 0|1>
//! watched-dir <node id> <digest>
//! watched-file <node id> <attributes cached long: 0|1> <digest> <own-mark|reported|quiet|lifted>
//! ```
//!
//! A digest is the watcher's 64-bit digest of the object's fanotify id;
//! a watched file's last word says whether it has a mark of its own or
//! how the filesystem-wide mark reports its writes.
//!
//! Numbers are decimal; an fd index is a position in the descriptors sent
//! with the state. Inodes come in node id order.

use super::*;
use crate::handle::LockCtx;
use crate::watch::{Quiet, SavedWatch};

/// The version of [`PassthroughFs::save_state`]'s text.
pub const PASSTHROUGH_STATE_VERSION: u32 = 2;

impl PassthroughFs {
    /// The file system's state for a new process to continue the same
    /// connection, and the descriptors it refers to (see the module
    /// docs). Call it while no request is being served (the session is
    /// paused); fails, changing nothing, where the state can't move.
    pub fn save_state(&self) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
        let mut text = format!("passthrough-state {PASSTHROUGH_STATE_VERSION}\n");
        let mut fds: Vec<OwnedFd> = Vec::new();
        let mut add_fd = |fd: BorrowedFd<'_>| -> io::Result<usize> {
            fds.push(fd.try_clone_to_owned()?);
            Ok(fds.len() - 1)
        };
        let root = self.inodes.root();
        text.push_str(&format!("root {} {}\n", root.key.ino, root.key.dev()));
        text.push_str(&format!(
            "next {} {}\n",
            self.inodes.next_id(),
            self.handles.next_fh()
        ));
        let inodes = self.inodes.all();
        let handles = self.handles.all();
        let mut skipped = 0usize;
        for inode in &inodes {
            // A file that can't be opened by handle any more (deleted
            // while the kernel holds its node) goes by one of its open
            // files; without one it is left behind, and requests for it
            // get ESTALE, as they would from this process.
            let at = match inode.file.path_fd() {
                Ok(pfd) => add_fd(pfd.as_fd())?,
                Err(e) => {
                    let open = handles
                        .iter()
                        .find(|(_, h)| h.nodeid == inode.nodeid)
                        .map(|(_, h)| h.clone())
                        .or_else(|| inode.cold_if_made().and_then(|c| lock(&c.lazy).clone()));
                    match open {
                        Some(h) => add_fd(h.fd())?,
                        None => {
                            tracing::debug!(nodeid = inode.nodeid, "not handed over: {e}");
                            skipped += 1;
                            continue;
                        }
                    }
                }
            };
            text.push_str(&format!(
                "inode {} {} {} {} {} {} {at}\n",
                inode.nodeid,
                inode.key.ino,
                inode.key.dev(),
                inode.key.mnt_id(),
                inode.ftype(),
                inode.refs(),
            ));
        }
        if skipped > 0 {
            tracing::info!(
                skipped,
                "nodes of files gone from the source are not handed over"
            );
        }
        for (fh, h) in handles {
            let at = add_fd(h.fd())?;
            let kind = if h.dir.is_some() { "dir" } else { "file" };
            text.push_str(&format!(
                "handle {fh} {} {} {kind} {at}\n",
                h.nodeid, h.flags
            ));
        }
        for inode in inodes.iter().chain(std::iter::once(root)) {
            let Some(cold) = inode.cold_if_made() else {
                continue;
            };
            if let Some(h) = lock(&cold.lazy).as_ref() {
                let at = add_fd(h.fd())?;
                text.push_str(&format!("lazy {} {} {at}\n", inode.nodeid, h.flags));
            }
            for (owner, ctx) in lock(&cold.locks).iter() {
                let at = add_fd(ctx.fd.as_fd())?;
                let fhs = lock(&ctx.fhs);
                let fhs = if fhs.is_empty() {
                    "-".to_string()
                } else {
                    fhs.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
                };
                text.push_str(&format!(
                    "lock {} {owner} {} {fhs} {at}\n",
                    inode.nodeid,
                    ctx.pid.load(Ordering::Relaxed)
                ));
            }
        }
        let (pt_inodes, pt_handles) = self.pt.save();
        for (nodeid, backing_id, opens) in pt_inodes {
            text.push_str(&format!("passthrough {nodeid} {backing_id} {opens}\n"));
        }
        for (fh, nodeid) in pt_handles {
            text.push_str(&format!("passthrough-handle {fh} {nodeid}\n"));
        }
        if let Some(watcher) = lock(&self.watcher).clone() {
            let epoch = self.watch_epoch.load(Ordering::Acquire);
            let saved = watcher.save()?;
            let at = add_fd(saved.group.as_fd())?;
            text.push_str(&format!(
                "watch {} {} {at}\n",
                u8::from(saved.watches_files),
                u8::from(saved.privileged)
            ));
            for (dev, marked) in saved.filesystems {
                text.push_str(&format!("watch-filesystem {dev} {}\n", u8::from(marked)));
            }
            for (nodeid, digest) in saved.dirs {
                text.push_str(&format!("watched-dir {nodeid} {digest}\n"));
            }
            for (nodeid, digest, _) in saved.files {
                let inode = self.inodes.get(nodeid).ok();
                let long = inode.as_ref().is_some_and(|i| {
                    epoch != 0 && i.attrs_watched.load(Ordering::Acquire) == epoch
                });
                let quiet = inode.and_then(|i| i.file_watch.quiet());
                let how = quiet.map_or("own-mark", Quiet::as_text);
                text.push_str(&format!(
                    "watched-file {nodeid} {} {digest} {how}\n",
                    u8::from(long)
                ));
            }
        }
        Ok((text.into_bytes(), fds))
    }

    /// Takes back the state of [`PassthroughFs::save_state`] from an
    /// earlier process serving the same source, on a passthrough made
    /// with [`PassthroughFs::new`] that has served nothing yet. Fails
    /// with the reason on a state it can't read, for another source, or
    /// whose files are not what it says (the source changed under it).
    pub fn restore_state(&self, state: &[u8], fds: Vec<OwnedFd>) -> io::Result<()> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        if !self.inodes.all().is_empty() || self.handles.len() > 0 {
            return Err(io::Error::other(
                "restore_state needs a passthrough that has served nothing",
            ));
        }
        let text = std::str::from_utf8(state).map_err(|_| bad("the state is not text".into()))?;
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default();
        let version = match header.strip_prefix("passthrough-state ") {
            Some("1") => 1,
            Some(v) if v == PASSTHROUGH_STATE_VERSION.to_string() => PASSTHROUGH_STATE_VERSION,
            _ => {
                return Err(bad(format!(
                    "passthrough state {header:?}, this build reads versions 1 to \
                     {PASSTHROUGH_STATE_VERSION}"
                )))
            }
        };
        // The source watch, as the old process saved it.
        let mut watch: Option<SavedWatch> = None;
        // Watched files' "attributes cached long" words, by node.
        let mut long_attrs: Vec<u64> = Vec::new();
        let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
        let mut take = |at: &str| -> io::Result<OwnedFd> {
            let i: usize = at
                .parse()
                .map_err(|_| bad(format!("bad fd index {at:?}")))?;
            fds.get_mut(i)
                .and_then(Option::take)
                .ok_or_else(|| bad(format!("fd index {i} missing or used twice")))
        };
        let num = |w: Option<&str>, line: &str| -> io::Result<u64> {
            w.and_then(|w| w.parse().ok())
                .ok_or_else(|| bad(format!("bad line {line:?}")))
        };
        let (mut next_id, mut next_fh) = (0, 0);
        // Handles by number, to count writers and bind lock contexts.
        let mut restored_handles = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let mut w = line.split(' ');
            match w.next() {
                Some("root") => {
                    let (ino, dev) = (num(w.next(), line)?, num(w.next(), line)?);
                    let root = self.inodes.root();
                    if (ino, dev) != (root.key.ino, root.key.dev()) {
                        return Err(bad(format!(
                            "the state is of another source (root inode {ino} on device {dev}, \
                             this one serves {} on {})",
                            root.key.ino,
                            root.key.dev()
                        )));
                    }
                }
                Some("next") => {
                    next_id = num(w.next(), line)?;
                    next_fh = num(w.next(), line)?;
                }
                Some("inode") => {
                    let nodeid = num(w.next(), line)?;
                    let key = InodeKey::new(
                        num(w.next(), line)?,
                        num(w.next(), line)?,
                        num(w.next(), line)?,
                    );
                    let mode = num(w.next(), line)? as u32;
                    let refs = num(w.next(), line)?;
                    let fd = take(w.next().unwrap_or_default())?;
                    let st = sys::statx_fd(fd.as_fd(), libc::STATX_INO)
                        .map_err(|e| bad(format!("inode {nodeid}: {e}")))?;
                    if st.stx_ino != key.ino {
                        return Err(bad(format!(
                            "inode {nodeid}: its descriptor is inode {}, the state says {}",
                            st.stx_ino, key.ino
                        )));
                    }
                    if nodeid <= fuse_abi::ROOT_ID {
                        return Err(bad(format!("bad node id in {line:?}")));
                    }
                    let file = self.inodes.files().make_restored(fd);
                    self.inodes
                        .restore(Inode::new(nodeid, key, file, mode), refs, next_id);
                }
                Some("handle") => {
                    let fh = num(w.next(), line)?;
                    let nodeid = num(w.next(), line)?;
                    let flags = num(w.next(), line)? as i32;
                    let kind = w.next().unwrap_or_default();
                    let fd = take(w.next().unwrap_or_default())?;
                    let inode = self
                        .inodes
                        .get(nodeid)
                        .map_err(|_| bad(format!("handle {fh} of unknown node {nodeid}")))?;
                    let handle = match kind {
                        "file" => Handle::file(fd, nodeid, flags),
                        "dir" => {
                            let h = Handle::dir(fd, nodeid, flags);
                            if let Some(d) = &h.dir {
                                // Its buffer stayed behind: seek next time.
                                lock(d).invalidate();
                            }
                            h
                        }
                        _ => return Err(bad(format!("bad handle kind in {line:?}"))),
                    };
                    self.handles.restore(fh, handle, next_fh)?;
                    if kind == "file" && flags & libc::O_ACCMODE != libc::O_RDONLY {
                        let mut writers = lock(&inode.cold().writers);
                        *writers += 1;
                        inode.has_writers.store(true, Ordering::Release);
                    }
                    restored_handles.push(fh);
                }
                Some("lazy") => {
                    let nodeid = num(w.next(), line)?;
                    let flags = num(w.next(), line)? as i32;
                    let fd = take(w.next().unwrap_or_default())?;
                    let inode = self
                        .inodes
                        .get(nodeid)
                        .map_err(|_| bad(format!("lazy handle of unknown node {nodeid}")))?;
                    *lock(&inode.cold().lazy) = Some(Arc::new(Handle::file(fd, nodeid, flags)));
                    if flags & libc::O_ACCMODE != libc::O_RDONLY {
                        *lock(&inode.cold().writers) += 1;
                        inode.has_writers.store(true, Ordering::Release);
                    }
                }
                Some("lock") => {
                    let nodeid = num(w.next(), line)?;
                    let owner = num(w.next(), line)?;
                    let pid = num(w.next(), line)? as u32;
                    let fhs = match w.next().unwrap_or_default() {
                        "-" => Vec::new(),
                        list => list
                            .split(',')
                            .map(|f| f.parse::<u64>())
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|_| bad(format!("bad handle list in {line:?}")))?,
                    };
                    let fd = take(w.next().unwrap_or_default())?;
                    let inode = self
                        .inodes
                        .get(nodeid)
                        .map_err(|_| bad(format!("lock of unknown node {nodeid}")))?;
                    let ctx = LockCtx {
                        fd,
                        pid: std::sync::atomic::AtomicU32::new(pid),
                        fhs: Mutex::new(fhs),
                    };
                    lock(&inode.cold().locks).push((owner, Arc::new(ctx)));
                }
                Some("passthrough") => {
                    let nodeid = num(w.next(), line)?;
                    let backing_id = i32::try_from(num(w.next(), line)?)
                        .map_err(|_| bad(format!("bad backing id in {line:?}")))?;
                    let opens = num(w.next(), line)?;
                    self.pt.restore_inode(nodeid, backing_id, opens);
                }
                Some("passthrough-handle") => {
                    let fh = num(w.next(), line)?;
                    let nodeid = num(w.next(), line)?;
                    self.pt.restore_handle(fh, nodeid);
                }
                Some("watch") if version >= 2 => {
                    let watches_files = num(w.next(), line)? != 0;
                    let privileged = num(w.next(), line)? != 0;
                    let group = take(w.next().unwrap_or_default())?;
                    watch = Some(SavedWatch {
                        group,
                        watches_files,
                        privileged,
                        dirs: Vec::new(),
                        files: Vec::new(),
                        filesystems: Vec::new(),
                    });
                }
                Some(kind @ ("watch-filesystem" | "watched-dir" | "watched-file"))
                    if version >= 2 =>
                {
                    let saved = watch
                        .as_mut()
                        .ok_or_else(|| bad(format!("{line:?} before the watch line")))?;
                    let first = num(w.next(), line)?;
                    match kind {
                        "watch-filesystem" => {
                            saved.filesystems.push((first, num(w.next(), line)? != 0));
                        }
                        "watched-dir" => saved.dirs.push((first, num(w.next(), line)?)),
                        _ => {
                            let long = num(w.next(), line)? != 0;
                            let digest = num(w.next(), line)?;
                            let quiet =
                                match w.next().unwrap_or_default() {
                                    "own-mark" => None,
                                    how => Some(Quiet::from_text(how).ok_or_else(|| {
                                        bad(format!("bad watched file in {line:?}"))
                                    })?),
                                };
                            saved.files.push((first, digest, quiet));
                            if long {
                                long_attrs.push(first);
                            }
                        }
                    }
                }
                _ => return Err(bad(format!("unknown line {line:?}"))),
            }
        }
        let watching = self.adopt_watch(version, watch, &long_attrs)?;
        tracing::info!(
            inodes = self.inodes.all().len(),
            handles = restored_handles.len(),
            source_watch = if watching {
                "taken over"
            } else {
                "not taken over"
            },
            "passthrough state taken over"
        );
        Ok(())
    }

    /// Takes the previous process's source watch over (the group and its
    /// marked nodes, known here by now) where this one watches the same
    /// way, so that what the kernel cached on its word stays covered;
    /// otherwise [`PassthroughFs::resumed`] is to drop that. Files in
    /// `long_attrs` had their attributes cached for long. Whether the
    /// watch was taken over.
    fn adopt_watch(
        &self,
        version: u32,
        watch: Option<SavedWatch>,
        long_attrs: &[u64],
    ) -> io::Result<bool> {
        let Some(mut saved) = watch else {
            // Version 1 says nothing of a watch the old process may have
            // had; version 2 had none.
            self.watch_not_taken_over
                .store(version < 2, Ordering::Release);
            return Ok(false);
        };
        let same_way =
            self.cfg.source_watch_wanted() && self.cfg.file_watch_wanted() == saved.watches_files;
        if !same_way {
            tracing::info!(
                "the previous process watched the source otherwise: names and attributes \
                 the kernel cached on its word are dropped"
            );
            self.watch_not_taken_over.store(true, Ordering::Release);
            return Ok(false);
        }
        // Marks of nodes not handed over (files gone from the source)
        // stay in the group, for nobody: their events find no node.
        saved
            .dirs
            .retain(|(node, _)| self.inodes.get(*node).is_ok());
        saved
            .files
            .retain(|(node, _, _)| self.inodes.get(*node).is_ok());
        let dirs: Vec<u64> = saved.dirs.iter().map(|(node, _)| *node).collect();
        for &(node, _, quiet) in &saved.files {
            if let Ok(inode) = self.inodes.get(node) {
                inode.file_watch.restore(quiet);
            }
        }
        let watcher = SourceWatcher::restore(saved, self.proc_self_fd.as_fd())?;
        watcher.find_files_with(self.file_nodes());
        let epoch = self.next_watch.fetch_add(1, Ordering::Relaxed);
        for node in dirs {
            if let Ok(inode) = self.inodes.get(node) {
                inode.watched.store(epoch, Ordering::Release);
            }
        }
        for &node in long_attrs {
            if let Ok(inode) = self.inodes.get(node) {
                // A file with a write handle keeps the short timeout (its
                // writes aren't reported meanwhile), as it had.
                if !inode.has_writers.load(Ordering::Acquire) {
                    inode.attrs_watched.store(epoch, Ordering::Release);
                }
            }
        }
        *lock(&self.watcher) = Some(Arc::new(watcher));
        self.watch_epoch.store(epoch, Ordering::Release);
        self.watch_not_taken_over.store(false, Ordering::Release);
        Ok(true)
    }

    /// After a takeover or a crash recovery ([`PassthroughFs::recover`]),
    /// once the new session can send notifications
    /// ([`PassthroughFs::set_notifier`]): where the old process's source
    /// watch wasn't taken over (see the module docs; a crashed or
    /// restarted process's never is), the kernel may hold names and
    /// attributes for a day on its word, which nothing watched since, so
    /// they are dropped (`INC_EPOCH` where the kernel has it, and an
    /// attribute `INVAL_INODE` per known node). Nothing
    /// to do when the watch was taken over, or on a fresh start.
    pub fn resumed(&self) {
        if self.watch_not_taken_over.swap(false, Ordering::AcqRel) {
            self.expire_kernel_caches();
        }
    }

    /// Has the kernel drop the names and attributes it cached
    /// (`INC_EPOCH` where the kernel has it, and an attribute
    /// `INVAL_INODE` per known node): every cached name is looked up again
    /// at its next use.
    pub(super) fn expire_kernel_caches(&self) {
        let Some(n) = lock(&self.notifier).clone() else {
            return;
        };
        if self.kernel_minor.load(Ordering::Relaxed) >= 44 {
            if let Err(e) = n.inc_epoch() {
                tracing::debug!("INC_EPOCH after the takeover: {e}");
            }
        }
        for inode in self.inodes.all() {
            if let Err(e) = n.inval_inode(inode.nodeid, -1, 0) {
                tracing::debug!(nodeid = inode.nodeid, "INVAL_INODE after the takeover: {e}");
            }
        }
    }
}

/// The passthrough's state in a live upgrade: its inherent
/// [`PassthroughFs::save_state`], [`PassthroughFs::restore_state`] and
/// [`PassthroughFs::resumed`].
impl fuse_server::takeover::LiveState for PassthroughFs {
    fn save_state(&self) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
        PassthroughFs::save_state(self)
    }

    fn restore_state(&self, state: &[u8], fds: Vec<OwnedFd>) -> io::Result<()> {
        PassthroughFs::restore_state(self, state, fds)
    }

    fn resumed(&self) {
        PassthroughFs::resumed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PassthroughConfig;

    fn fresh(dir: &Path) -> PassthroughFs {
        PassthroughFs::new(dir, PassthroughConfig::default()).unwrap()
    }

    /// The first lines of a state of `fs`'s source, before any watch line.
    fn header(fs: &PassthroughFs, version: u32) -> String {
        let root = fs.inodes.root();
        format!(
            "passthrough-state {version}\nroot {} {}\nnext 2 1\n",
            root.key.ino,
            root.key.dev()
        )
    }

    #[test]
    fn a_state_without_a_watch_restores_and_says_whether_caches_must_go() {
        let dir = tempfile::tempdir().unwrap();
        let old = fresh(dir.path());
        let (state, fds) = old.save_state().unwrap();
        let text = String::from_utf8(state.clone()).unwrap();
        assert!(text.starts_with("passthrough-state 2\n"), "{text}");
        assert!(!text.contains("watch"), "no notifier, no watch: {text}");
        let new = fresh(dir.path());
        new.restore_state(&state, fds).unwrap();
        // Version 2 without a watch: the old process had none.
        assert!(!new.watch_not_taken_over.load(Ordering::Acquire));
        // Version 1 says nothing of a watch: the caches go.
        let v1 = fresh(dir.path());
        v1.restore_state(header(&v1, 1).as_bytes(), Vec::new())
            .unwrap();
        assert!(v1.watch_not_taken_over.load(Ordering::Acquire));
    }

    #[test]
    fn bad_watch_lines_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::open(dir.path()).unwrap();
        let fs = fresh(dir.path());
        let files = u8::from(fs.cfg.file_watch_wanted());
        let cases: [(String, Vec<OwnedFd>, &str); 5] = [
            (
                format!("{}watched-dir 5 7\n", header(&fs, 2)),
                Vec::new(),
                "before the watch line",
            ),
            (
                format!("{}watch {files} 0 0\n", header(&fs, 2)),
                vec![file.try_clone().unwrap().into()],
                "not an fanotify group",
            ),
            (
                format!("{}watch {files} 0 0\n", header(&fs, 2)),
                Vec::new(),
                "fd index 0 missing",
            ),
            (
                format!("{}watch 1 0 0\nwatched-file 5 1 9 loud\n", header(&fs, 2)),
                vec![file.try_clone().unwrap().into()],
                "bad watched file",
            ),
            (
                format!("{}watch 1 0 0\n", header(&fs, 3)),
                Vec::new(),
                "reads versions 1 to 2",
            ),
        ];
        for (state, fds, why) in cases {
            let fs = fresh(dir.path());
            let err = fs.restore_state(state.as_bytes(), fds).unwrap_err();
            assert!(err.to_string().contains(why), "{state:?}: {err}");
        }
        // A version-1 state has no watch lines.
        let err = fs
            .restore_state(
                format!("{}watch {files} 0 0\n", header(&fs, 1)).as_bytes(),
                vec![file.into()],
            )
            .unwrap_err();
        assert!(err.to_string().contains("unknown line"), "{err}");
    }
}
