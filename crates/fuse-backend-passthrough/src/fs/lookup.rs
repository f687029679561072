//! Inodes and names: LOOKUP and FORGET, making, removing, renaming and
//! linking entries, and the lookup references their replies hand over.

use super::crash::resent_after_start;
use super::*;

/// An entry about to be answered, with the lookup reference its reply
/// hands to the kernel ([`Counted`]): given back if dropped instead.
pub(super) struct CountedEntry<'a> {
    pub(super) counted: Counted<'a>,
    pub(super) entry: Entry,
}

impl CountedEntry<'_> {
    /// The reply carrying the entry is being sent.
    pub(super) fn hand_over(self) -> Entry {
        self.counted.hand_over();
        self.entry
    }
}

/// Rejects names the kernel never sends in a request that names an
/// entry to make, remove or rename: empty, with a `/`, or `.` and `..`
/// (the kernel resolves those itself; LOOKUP handles them apart).
pub(super) fn check_name(name: &CStr) -> io::Result<()> {
    let b = name.to_bytes();
    if b.is_empty() || b.contains(&b'/') || is_dot_or_dotdot(b) {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

pub(super) fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// A removal or rename that finds its name gone on a resend the first
/// attempt had started: that attempt did it.
fn done_if_gone(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && resent_after_start() => Ok(()),
        r => r,
    }
}

impl PassthroughFs {
    /// The reply of CREATE and TMPFILE for the new file's open descriptor
    /// `fd`, whose writer the caller counted before making the entry
    /// ([`PassthroughFs::created_writer`]). With zero-message opens the
    /// kernel never releases handles, so none is made: the descriptor
    /// becomes the inode's shared one (handle 0).
    pub(super) fn created_handle(
        &self,
        created: CountedEntry<'_>,
        fd: OwnedFd,
        flags: i32,
    ) -> io::Result<(Entry, Opened)> {
        let inode = created.counted.inode();
        let writer = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if self.no_open() {
            let mut slot = lock(&inode.cold().lazy);
            if slot.is_none() {
                *slot = Some(Arc::new(Handle::file(fd, inode.nodeid, flags)));
            } else if writer {
                // Not this handle: the one in the slot counted itself.
                self.writer_closed(inode.nodeid);
            }
            drop(slot);
            let zero_copy = self.zero_copy_wanted(inode, None, flags);
            return Ok((created.hand_over(), self.file_opened(0, 0, zero_copy)));
        }
        // Backing ids are registered with the daemon's credentials.
        self.creds.root();
        let opened = self.open_file(inode, fd, flags, Some(created.entry.attr.mode), true)?;
        Ok((created.hand_over(), opened))
    }

    /// Counts the writer of a file CREATE or TMPFILE opened with `flags`,
    /// before its entry is made (so the entry carries the attribute
    /// timeout of a file being written, and the file isn't marked only to
    /// have its write events taken off again).
    pub(super) fn created_writer(&self, counted: &Counted<'_>, flags: i32) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.writer_opened(counted.inode(), false);
        }
    }

    /// The entry of `counted`'s inode with attributes `st`, still holding
    /// its lookup reference, its name cached for `entry_timeout`
    /// ([`PassthroughFs::entry_timeout_in`] of its directory), its
    /// attributes for [`PassthroughFs::attr_timeout_of`] (a regular file
    /// the source watch marks here for the first time is read again
    /// after the mark, so a change between `st` and the mark isn't lost).
    pub(super) fn entry<'a>(
        &self,
        counted: Counted<'a>,
        st: &libc::statx,
        entry_timeout: Duration,
    ) -> CountedEntry<'a> {
        self.entry_seen(counted, st, entry_timeout, None)
    }

    /// What the source watch had seen ([`SourceWatcher::changes_seen`]),
    /// taken before reading attributes for [`PassthroughFs::entry_seen`];
    /// `None` without a watch.
    pub(super) fn watch_seen(&self) -> Option<u64> {
        if self.watch_epoch.load(Ordering::Acquire) == 0 {
            return None;
        }
        lock(&self.watcher).as_ref().map(|w| w.changes_seen())
    }

    /// [`PassthroughFs::entry`] of attributes `st` read after the source
    /// watch had seen `seen` ([`PassthroughFs::watch_seen`]): a file that
    /// the watch's filesystem-wide mark covered since before that read
    /// isn't read again unless a change may have gone by unreported
    /// ([`SourceWatcher::changed_since`]), which saves the first listing
    /// a `statx` per file.
    pub(super) fn entry_seen<'a>(
        &self,
        counted: Counted<'a>,
        st: &libc::statx,
        entry_timeout: Duration,
        seen: Option<u64>,
    ) -> CountedEntry<'a> {
        let inode = counted.inode();
        let was_watched = inode.attrs_watched.load(Ordering::Acquire);
        let attr_timeout = self.attr_timeout_of(inode, true);
        let newly_marked = attr_timeout == crate::WATCHED_ATTR_TIMEOUT
            && inode.attrs_watched.load(Ordering::Acquire) != was_watched;
        let read_again = newly_marked
            && match (seen, lock(&self.watcher).as_ref()) {
                (Some(seen), Some(w)) => w.changed_since(&inode.file_watch, inode.watch_id(), seen),
                _ => true,
            };
        let fresh = read_again
            .then(|| {
                let pfd = inode.file.path_fd().ok()?;
                sys::statx_fd(pfd.as_fd(), STATX_WANTED).ok()
            })
            .flatten();
        let entry = Entry {
            nodeid: inode.nodeid,
            generation: u64::from(inode.generation),
            attr: attr_from_statx(fresh.as_ref().unwrap_or(st)),
            attr_timeout,
            entry_timeout,
        };
        CountedEntry { counted, entry }
    }

    /// Looks up `name` in `parent`: the entry, with the lookup reference
    /// its reply will hand over.
    pub(super) fn lookup_in(&self, parent: &Inode, name: &CStr) -> io::Result<CountedEntry<'_>> {
        let b = name.to_bytes();
        if is_dot_or_dotdot(b) {
            return self.lookup_dot(parent, b == b"..");
        }
        check_name(name)?;
        #[cfg(feature = "fault-injection")]
        if let Some(e) = crate::fault::on_lookup(name) {
            return Err(e);
        }
        // Before the name is read: a change after it is then reported.
        let timeout = self.entry_timeout_in(parent);
        let pfd = parent.file.path_fd()?;
        let seen = self.watch_seen();
        let st = sys::statx(
            pfd.as_fd(),
            name,
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            STATX_WANTED,
        )?;
        let key = InodeKey::from_statx(&st);
        if let Some(counted) = self.inodes.get_live_by_key_and_ref(&key) {
            return Ok(self.entry_seen(counted, &st, timeout, seen));
        }
        // A new name: held by its file handle, nothing opened (hp's two
        // system calls), where the handle names the inode `st` is of.
        let files = self.inodes.files();
        if let Some(file) = files.held_by_name(pfd.as_fd(), name, st.stx_ino) {
            let counted = self.inodes.insert_and_ref(key, file, st.stx_mode as u32);
            return Ok(self.entry_seen(counted, &st, timeout, seen));
        }
        let fd = sys::openat(pfd.as_fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let seen = self.watch_seen();
        // Identify what was opened (the name may have changed meanwhile).
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        Ok(self.entry_seen(self.insert_inode(fd, &st), &st, timeout, seen))
    }

    /// Looks up `name`, listed in `parent` with inode number `listed_ino`
    /// (READDIRPLUS): as [`PassthroughFs::lookup_in`], but a name whose
    /// inode the table doesn't know is opened at once, without the
    /// `statx` by name that finds a known inode without opening it: the
    /// first listing of a directory then costs one system call less per
    /// entry. The listed inode number is a hint only (a mount point lists
    /// the number of the directory under it; the name may change
    /// meanwhile): what is opened is identified by its own attributes.
    pub(super) fn lookup_listed(
        &self,
        parent: &Inode,
        name: &CStr,
        listed_ino: u64,
    ) -> io::Result<CountedEntry<'_>> {
        let hint = parent.key.with_ino(listed_ino);
        // With file handles a new name costs `lookup_in` two system calls
        // and opens nothing.
        if is_dot_or_dotdot(name.to_bytes())
            || self.inodes.files().by_handle()
            || self.inodes.knows_key(&hint)
        {
            return self.lookup_in(parent, name);
        }
        check_name(name)?;
        // Before the name is read: a change after it is then reported.
        let timeout = self.entry_timeout_in(parent);
        let pfd = parent.file.path_fd()?;
        let fd = sys::openat(pfd.as_fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let seen = self.watch_seen();
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        // A known inode after all is found in the table (`fd` is dropped).
        Ok(self.entry_seen(self.insert_inode(fd, &st), &st, timeout, seen))
    }

    /// The inode of the `O_PATH` descriptor `fd` (with attributes `st`),
    /// with one more lookup reference.
    pub(super) fn insert_inode(&self, fd: OwnedFd, st: &libc::statx) -> Counted<'_> {
        let key = InodeKey::from_statx(st);
        let mode = st.stx_mode as u32;
        // Made outside the store's lock; dropped if the inode is known.
        let file = self.inodes.files().make(fd);
        self.inodes.insert_and_ref(key, file, mode)
    }

    /// The inode of an open (non-`O_PATH`) descriptor, with one more lookup
    /// reference; a new inode gets an `O_PATH` descriptor of the same file.
    pub(super) fn inode_of_open_fd(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
    ) -> io::Result<Counted<'_>> {
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

    pub(super) fn lookup_dot(&self, parent: &Inode, dotdot: bool) -> io::Result<CountedEntry<'_>> {
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
        Ok(self.entry(target, &st, self.entry_timeout))
    }
}

impl PassthroughFs {
    pub(super) fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        self.creds.root();
        let parent = self.inodes.get(parent)?;
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    pub(super) fn batch_forget(&self, _ctx: &Context, items: fuse_server::request::ForgetList<'_>) {
        for item in items.iter() {
            self.inodes.kernel_forget_count(item.nodeid, item.nlookup);
        }
        for item in items.iter() {
            if let Some(gone) = self.inodes.forget(item.nodeid, item.nlookup) {
                self.forgotten(gone);
            }
        }
    }

    pub(super) fn forget(&self, _ctx: &Context, ino: u64, nlookup: u64) {
        if let Some(gone) = self.inodes.kernel_forget(ino, nlookup) {
            self.forgotten(gone);
        }
    }

    pub(super) fn readlink(&self, _ctx: &Context, ino: u64) -> io::Result<Vec<u8>> {
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

    pub(super) fn symlink(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        target: &CStr,
    ) -> io::Result<Entry> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.creator(ctx)?;
        let pfd = parent.file.path_fd()?;
        match sys::symlinkat(target, pfd.as_fd(), name) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && resent_after_start() => {}
            r => r?,
        }
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    pub(super) fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MknodArgs,
    ) -> io::Result<Entry> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.creator(ctx)?;
        let pfd = parent.file.path_fd()?;
        let made = if args.mode & libc::S_IFMT == libc::S_IFDIR {
            sys::mkdirat(pfd.as_fd(), name, args.mode & 0o7777)
        } else {
            sys::mknodat(pfd.as_fd(), name, args.mode, sys::decode_dev(args.rdev))
        };
        match made {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && resent_after_start() => {}
            r => r?,
        }
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    pub(super) fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.creator(ctx)?;
        let pfd = parent.file.path_fd()?;
        match sys::mkdirat(pfd.as_fd(), name, args.mode & 0o7777) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && resent_after_start() => {}
            r => r?,
        }
        self.lookup_in(&parent, name).map(CountedEntry::hand_over)
    }

    pub(super) fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        done_if_gone(sys::unlinkat(pfd.as_fd(), name, 0))
    }

    pub(super) fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        check_name(name)?;
        let parent = self.inodes.get(parent)?;
        self.creds.caller(ctx)?;
        let pfd = parent.file.path_fd()?;
        done_if_gone(sys::unlinkat(pfd.as_fd(), name, libc::AT_REMOVEDIR))
    }

    pub(super) fn rename(
        &self,
        ctx: &Context,
        parent: u64,
        args: &RenameArgs<'_>,
    ) -> io::Result<()> {
        check_name(args.name)?;
        check_name(args.newname)?;
        let old = self.inodes.get(parent)?;
        let new = self.inodes.get(args.newdir)?;
        self.creds.caller(ctx)?;
        let ofd = old.file.path_fd()?;
        let nfd = new.file.path_fd()?;
        done_if_gone(sys::renameat2(
            ofd.as_fd(),
            args.name,
            nfd.as_fd(),
            args.newname,
            args.flags.bits(),
        ))
    }

    pub(super) fn link(
        &self,
        ctx: &Context,
        ino: u64,
        newparent: u64,
        newname: &CStr,
    ) -> io::Result<Entry> {
        check_name(newname)?;
        let inode = self.inodes.get(ino)?;
        let parent = self.inodes.get(newparent)?;
        self.creds.caller(ctx)?;
        let src = inode.file.path_fd()?;
        let dir = parent.file.path_fd()?;
        match sys::link_proc(src.proc_path().as_cstr(), dir.as_fd(), newname) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && resent_after_start() => {
                // Made by the first attempt if it is the same file.
                let found = self.lookup_in(&parent, newname)?;
                if found.counted.inode().nodeid != inode.nodeid {
                    return Err(e);
                }
                return Ok(found.hand_over());
            }
            r => r?,
        }
        self.lookup_in(&parent, newname)
            .map(CountedEntry::hand_over)
    }

    pub(super) fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        check_name(name)?;
        self.close_resent_handle(ctx);
        let parent = self.inodes.get(parent)?;
        let timeout = self.entry_timeout_in(&parent);
        self.creds.creator(ctx)?;
        let pfd = parent.file.path_fd()?;
        let (mut flags, _) = self.backing_open_flags(args.flags);
        if self.no_open() {
            // The descriptor becomes the inode's shared one: read-write.
            flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        // A resend the first attempt had started may have made the file:
        // the kernel still holds the directory locked, so it is ours.
        let excl = if resent_after_start() {
            0
        } else {
            args.flags as i32 & libc::O_EXCL
        };
        let flags = flags | libc::O_CREAT | excl | libc::O_NOFOLLOW;
        let fd = sys::openat(pfd.as_fd(), name, flags, args.mode & 0o7777)?;
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        let counted = self.inode_of_open_fd(fd.as_fd(), &st)?;
        self.created_writer(&counted, flags);
        let created = self.entry(counted, &st, timeout);
        let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        self.created_handle(created, fd, flags)
    }

    pub(super) fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        let parent = self.inodes.get(parent)?;
        self.creds.creator(ctx)?;
        let pfd = parent.file.path_fd()?;
        let (flags, _) = self.backing_open_flags(args.flags);
        let mut flags = flags & !(libc::O_TMPFILE | libc::O_DIRECTORY | libc::O_TRUNC);
        if flags & libc::O_ACCMODE == libc::O_RDONLY || self.no_open() {
            flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        let flags = flags | libc::O_TMPFILE | (args.flags as i32 & libc::O_EXCL);
        let fd = sys::openat(pfd.as_fd(), c".", flags, args.mode & 0o7777)?;
        let st = sys::statx_fd(fd.as_fd(), STATX_WANTED)?;
        let counted = self.inode_of_open_fd(fd.as_fd(), &st)?;
        self.created_writer(&counted, flags);
        // A tmpfile has no name to cache.
        let created = self.entry(counted, &st, self.entry_timeout);
        let flags = flags & !(libc::O_TMPFILE | libc::O_EXCL);
        self.created_handle(created, fd, flags)
    }
}
