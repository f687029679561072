//! An in-memory file system: regular files, directories, symlinks, hard
//! links, device nodes, FIFOs, sockets and extended attributes, all gone
//! when it is unmounted.
//!
//! ```sh
//! mkdir -p /tmp/mem
//! cargo run -p fusewire-transport-dev --example memfs -- /tmp/mem
//! ```
//!
//! It serves until Ctrl-C (or SIGTERM), or until someone unmounts it. The
//! root directory belongs to the mountpoint's owner. It is mounted with
//! `default_permissions`, so the kernel checks permissions from the modes
//! and owners below before a request reaches us, and with `allow_other`,
//! so every user may use it (as a normal user, mounting through
//! `fusermount3`, that takes `user_allow_other` in `/etc/fuse.conf`:
//! without it `fusermount3` refuses the mount).
//! POSIX conformance: `cargo xtask test --only pjdfstest` runs pjdfstest
//! against it (docs/testing.md).
//!
//! How it is built: one `Mutex` around the whole state (simple and
//! correct; a file system that must scale would lock per node), nodes in
//! a map from node id to [`Node`], and each directory a map from name to
//! node id. The rules that matter are the kernel's:
//!
//! - **Lookup counts.** Every [`Entry`] we hand the kernel is a reference
//!   it holds on the node until it sends FORGET. A node whose last name
//!   is removed stays until then (an open file of it keeps working), and
//!   goes when both its link count and its lookup count are 0.
//! - **Node ids are never reused**, so the generation can always be 0.
//! - **Times.** Whatever changes a node sets its ctime; whatever changes
//!   a file's data or a directory's names also sets its mtime.
//! - **Readdir cookies** must let a listing resume exactly where it
//!   stopped, even while names are added and removed: each name gets the
//!   next number of its directory when it is added, and listings go in
//!   that order.
//! - **Holes.** A file's data is kept in pages, and a page nobody wrote
//!   takes no memory: a file may be far bigger than what it holds.

use fuse_server::{
    errno, AttrReply, Context, DirentSink, Entry, FallocateArgs, FileAttr, FileSystem, FileType,
    Kstatfs, MkdirArgs, MknodArgs, ReadArgs, RenameArgs, RenameFlags, Server, SetattrArgs,
    SetxattrArgs, WriteArgs, XattrReply, ZeroCopyReader, ZeroCopyWriter, ROOT_ID,
};
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig, SessionError};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// How long the kernel may cache names and attributes. Every change goes
/// through the kernel, which drops what it cached of the nodes a change
/// touches, so this could be longer; it bounds how long a mistake here
/// would stay visible.
const TTL: Duration = Duration::from_secs(1);

/// The longest name (`NAME_MAX`); longer ones are `ENAMETOOLONG`.
const NAME_MAX: usize = 255;

/// Bytes of file data the file system holds at most, in whole pages
/// (`ENOSPC` beyond); holes don't count.
pub const CAPACITY: u64 = 1 << 30;

/// The unit file data is kept in, and the block size statfs reports.
const PAGE: u64 = 4096;

/// Nodes the file system holds at most (`ENOSPC` beyond).
pub const MAX_NODES: u64 = 1 << 20;

/// The set-group-ID bit: on a directory, new nodes in it get its group
/// (and new directories the bit too).
const S_ISGID: u32 = 0o2000;

/// The cookies of `.` and `..`; names get 3 and up.
const FIRST_COOKIE: u64 = 3;

/// An in-memory file system (see the module docs).
pub struct MemFs {
    state: Mutex<State>,
}

/// Everything, behind one lock.
struct State {
    nodes: HashMap<u64, Node>,
    /// The next node id to hand out; ids are never reused.
    next_id: u64,
    /// Bytes of file data held (whole pages), against [`CAPACITY`].
    used: u64,
}

/// A file, directory, symlink or special file.
struct Node {
    /// Its attributes, as stat(2) shows them.
    attr: FileAttr,
    /// References the kernel holds (entries handed out, minus forgets).
    lookups: u64,
    contents: Contents,
    /// Extended attributes: name to value.
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// What a node holds, by its type.
enum Contents {
    File(FileData),
    Dir(Dir),
    Symlink(Vec<u8>),
    /// A device node, FIFO or socket: the kernel handles their use; we
    /// only keep their attributes (the device number is in `attr.rdev`).
    Special,
}

/// A regular file's contents: its size, and the pages written so far. A
/// page never written (a hole) takes no memory and reads as zeros.
#[derive(Default)]
struct FileData {
    size: u64,
    /// Page index (offset / PAGE) to the page's bytes.
    pages: BTreeMap<u64, Box<[u8; PAGE as usize]>>,
}

impl FileData {
    /// Copies the bytes from `offset` into `buf`, as many as fit and the
    /// file has; returns how many.
    fn read(&self, offset: u64, buf: &mut [u8]) -> usize {
        let end = self.size.min(offset.saturating_add(buf.len() as u64));
        if offset >= end {
            return 0; // at or past the end of the file
        }
        let buf = &mut buf[..(end - offset) as usize];
        buf.fill(0); // the holes
        for (&index, page) in self.pages.range(offset / PAGE..=(end - 1) / PAGE) {
            let page_start = index * PAGE;
            let (from, to) = (offset.max(page_start), end.min(page_start + PAGE));
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&page[(from - page_start) as usize..(to - page_start) as usize]);
        }
        buf.len()
    }

    /// Makes sure the pages holding `offset..end` exist, `used` counting
    /// the new ones; changes nothing if they don't fit in [`CAPACITY`].
    fn allocate(&mut self, offset: u64, end: u64, used: &mut u64) -> io::Result<()> {
        if offset >= end {
            return Ok(());
        }
        let range = offset / PAGE..=(end - 1) / PAGE;
        let missing = range
            .clone()
            .filter(|i| !self.pages.contains_key(i))
            .count() as u64;
        if *used + missing * PAGE > CAPACITY {
            return Err(errno::no_space());
        }
        for index in range {
            self.pages
                .entry(index)
                .or_insert_with(|| Box::new([0; PAGE as usize]));
        }
        *used += missing * PAGE;
        Ok(())
    }

    /// Writes `data` at `offset`, growing the file if it ends past it.
    fn write(&mut self, offset: u64, data: &[u8], used: &mut u64) -> io::Result<()> {
        if data.is_empty() {
            return Ok(()); // not even a size change
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| errno::error(errno::EFBIG))?;
        self.allocate(offset, end, used)?;
        for (&index, page) in self.pages.range_mut(offset / PAGE..end.div_ceil(PAGE)) {
            let page_start = index * PAGE;
            let (from, to) = (offset.max(page_start), end.min(page_start + PAGE));
            page[(from - page_start) as usize..(to - page_start) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// Sets the size: growing adds a hole, shrinking frees the pages past
    /// the new end.
    fn truncate(&mut self, size: u64, used: &mut u64) {
        if size < self.size {
            let dropped = self.pages.split_off(&size.div_ceil(PAGE));
            *used -= dropped.len() as u64 * PAGE;
            // What is left of the last page past the end must read as
            // zeros if the file grows again.
            if let Some(page) = self.pages.get_mut(&(size / PAGE)) {
                page[(size % PAGE) as usize..].fill(0);
            }
        }
        self.size = size;
    }

    /// The memory held, as stat(2) counts it: 512-byte blocks.
    fn blocks(&self) -> u64 {
        self.pages.len() as u64 * (PAGE / 512)
    }
}

/// A directory's names.
struct Dir {
    /// The parent directory's node id (the root's is itself), for `..`.
    parent: u64,
    /// Name to node id and cookie.
    names: HashMap<Vec<u8>, DirEntry>,
    /// Cookie to name: the listing order.
    order: BTreeMap<u64, Vec<u8>>,
    next_cookie: u64,
}

#[derive(Clone, Copy)]
struct DirEntry {
    ino: u64,
    cookie: u64,
}

impl Dir {
    fn new(parent: u64) -> Self {
        Self {
            parent,
            names: HashMap::new(),
            order: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }

    fn get(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).map(|e| e.ino)
    }

    fn insert(&mut self, name: &[u8], ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.names.insert(name.to_vec(), DirEntry { ino, cookie });
        self.order.insert(cookie, name.to_vec());
    }

    fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let entry = self.names.remove(name)?;
        self.order.remove(&entry.cookie);
        Some(entry.ino)
    }

    /// Points an existing name at another node, keeping its place.
    fn replace(&mut self, name: &[u8], ino: u64) {
        if let Some(entry) = self.names.get_mut(name) {
            entry.ino = ino;
        }
    }
}

impl MemFs {
    /// An empty file system whose root directory (`rwxr-xr-x`) belongs to
    /// `uid` and `gid`.
    pub fn new(uid: u32, gid: u32) -> Self {
        let mut attr = FileAttr::new(ROOT_ID, FileType::Directory, 0o755);
        attr.uid = uid;
        attr.gid = gid;
        let root = Node {
            attr,
            lookups: 0, // the kernel never counts or forgets the root
            contents: Contents::Dir(Dir::new(ROOT_ID)),
            xattrs: BTreeMap::new(),
        };
        let state = State {
            nodes: HashMap::from([(ROOT_ID, root)]),
            next_id: ROOT_ID + 1,
            used: 0,
        };
        Self {
            state: Mutex::new(state),
        }
    }

    /// Nodes alive: those with a name, and those the kernel still holds.
    pub fn node_count(&self) -> usize {
        self.state().nodes.len()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in another request must not take the file system down.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A name from the kernel, checked against [`NAME_MAX`].
fn checked(name: &CStr) -> io::Result<&[u8]> {
    let name = name.to_bytes();
    if name.len() > NAME_MAX {
        return Err(errno::error(errno::ENAMETOOLONG));
    }
    Ok(name)
}

/// A file's size and blocks in its attributes, after they changed.
fn sync_size(attr: &mut FileAttr, data: &FileData) {
    attr.size = data.size;
    attr.blocks = data.blocks();
}

impl State {
    fn node(&self, ino: u64) -> io::Result<&Node> {
        // The kernel only names nodes it holds, which we keep; anything
        // else is a node id from before a restart.
        self.nodes.get(&ino).ok_or_else(errno::stale)
    }

    fn node_mut(&mut self, ino: u64) -> io::Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or_else(errno::stale)
    }

    fn dir(&self, ino: u64) -> io::Result<&Dir> {
        match &self.node(ino)?.contents {
            Contents::Dir(dir) => Ok(dir),
            _ => Err(errno::not_a_directory()),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> io::Result<&mut Dir> {
        match &mut self.node_mut(ino)?.contents {
            Contents::Dir(dir) => Ok(dir),
            _ => Err(errno::not_a_directory()),
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        self.dir(ino).is_ok()
    }

    /// The node `name` in the directory `parent` names.
    fn child(&self, parent: u64, name: &[u8]) -> io::Result<u64> {
        self.dir(parent)?.get(name).ok_or_else(errno::not_found)
    }

    /// An entry for the kernel: one more lookup reference on `ino`.
    fn entry(&mut self, ino: u64) -> io::Result<Entry> {
        let node = self.node_mut(ino)?;
        node.lookups += 1;
        Ok(Entry {
            nodeid: ino,
            generation: 0, // node ids are never reused
            attr: node.attr.into(),
            attr_timeout: TTL,
            entry_timeout: TTL,
        })
    }

    fn attr_reply(&self, ino: u64) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: self.node(ino)?.attr.into(),
            timeout: TTL,
        })
    }

    /// A directory's names changed: its mtime and ctime are now.
    fn touch_dir(&mut self, ino: u64, now: SystemTime) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.attr.mtime = now;
            node.attr.ctime = now;
        }
    }

    /// Creates `name` in `parent`, owned by the caller, and hands the
    /// kernel its entry.
    fn create(
        &mut self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        kind: FileType,
        perm: u32,
        contents: Contents,
    ) -> io::Result<Entry> {
        let name = checked(name)?;
        if self.dir(parent)?.get(name).is_some() {
            return Err(errno::exists());
        }
        if self.nodes.len() as u64 >= MAX_NODES {
            return Err(errno::no_space());
        }
        let now = SystemTime::now();
        let parent_attr = self.node(parent)?.attr;
        let mut attr = FileAttr::new(self.next_id, kind, perm);
        attr.uid = ctx.uid;
        attr.gid = ctx.gid;
        // BSD semantics in a set-group-ID directory.
        if parent_attr.perm & S_ISGID != 0 {
            attr.gid = parent_attr.gid;
            if kind == FileType::Directory {
                attr.perm |= S_ISGID;
            }
        }
        if let Contents::Symlink(target) = &contents {
            attr = attr.with_size(target.len() as u64);
        }
        attr.atime = now;
        attr.mtime = now;
        attr.ctime = now;
        let ino = self.next_id;
        self.next_id += 1;
        let node = Node {
            attr,
            lookups: 0,
            contents,
            xattrs: BTreeMap::new(),
        };
        self.nodes.insert(ino, node);
        self.dir_mut(parent)?.insert(name, ino);
        if kind == FileType::Directory {
            // The new directory's `..` is a link to the parent.
            self.node_mut(parent)?.attr.nlink += 1;
        }
        self.touch_dir(parent, now);
        self.entry(ino)
    }

    /// One name of `ino` is gone (unlink, rmdir, or replaced by a rename).
    fn drop_link(&mut self, ino: u64, now: SystemTime) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.attr.ctime = now;
        node.attr.nlink = match node.contents {
            // A directory's only name is gone, and with it its `.`.
            Contents::Dir(_) => 0,
            _ => node.attr.nlink.saturating_sub(1),
        };
        self.remove_if_unused(ino);
    }

    /// Frees a node nobody can reach any more: no name, no reference.
    fn remove_if_unused(&mut self, ino: u64) {
        let unused = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.attr.nlink == 0 && n.lookups == 0 && ino != ROOT_ID);
        if unused {
            if let Some(Node {
                contents: Contents::File(data),
                ..
            }) = self.nodes.remove(&ino)
            {
                self.used -= data.pages.len() as u64 * PAGE;
            }
        }
    }

    /// Whether `ino` is `dir` or below it (a directory can't move there).
    fn is_at_or_below(&self, mut ino: u64, dir: u64) -> bool {
        loop {
            if ino == dir {
                return true;
            }
            match self.dir(ino) {
                Ok(d) if d.parent != ino => ino = d.parent,
                _ => return false, // the root, or not a directory
            }
        }
    }

    /// Renames `name` in `parent` to `newname` in `newdir`, replacing
    /// what `newname` names, if anything (RENAME_NOREPLACE: refusing to).
    fn rename(
        &mut self,
        parent: u64,
        name: &[u8],
        newdir: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> io::Result<()> {
        let ino = self.child(parent, name)?;
        let target = self.dir(newdir)?.get(newname);
        if target == Some(ino) {
            return Ok(()); // two names of one file: nothing to do (POSIX)
        }
        let moving_dir = self.is_dir(ino);
        if moving_dir && self.is_at_or_below(newdir, ino) {
            return Err(errno::invalid());
        }
        if let Some(target) = target {
            if noreplace {
                return Err(errno::exists());
            }
            match (moving_dir, self.dir(target)) {
                (true, Err(_)) => return Err(errno::not_a_directory()),
                (false, Ok(_)) => return Err(errno::is_a_directory()),
                (true, Ok(d)) if !d.names.is_empty() => return Err(errno::not_empty()),
                _ => {}
            }
        }
        let now = SystemTime::now();
        if let Some(target) = target {
            self.dir_mut(newdir)?.remove(newname);
            if moving_dir {
                // The replaced directory's `..` link to newdir is gone.
                self.node_mut(newdir)?.attr.nlink -= 1;
            }
            self.drop_link(target, now);
        }
        self.dir_mut(parent)?.remove(name);
        self.dir_mut(newdir)?.insert(newname, ino);
        if moving_dir && parent != newdir {
            self.dir_mut(ino)?.parent = newdir;
            self.node_mut(parent)?.attr.nlink -= 1;
            self.node_mut(newdir)?.attr.nlink += 1;
        }
        self.node_mut(ino)?.attr.ctime = now;
        self.touch_dir(parent, now);
        self.touch_dir(newdir, now);
        Ok(())
    }

    /// RENAME_EXCHANGE: `name` and `newname` swap their nodes.
    fn exchange(
        &mut self,
        parent: u64,
        name: &[u8],
        newdir: u64,
        newname: &[u8],
    ) -> io::Result<()> {
        let a = self.child(parent, name)?;
        let b = self.child(newdir, newname)?;
        if a == b {
            return Ok(());
        }
        let (a_dir, b_dir) = (self.is_dir(a), self.is_dir(b));
        if (a_dir && self.is_at_or_below(newdir, a)) || (b_dir && self.is_at_or_below(parent, b)) {
            return Err(errno::invalid());
        }
        self.dir_mut(parent)?.replace(name, b);
        self.dir_mut(newdir)?.replace(newname, a);
        if parent != newdir {
            // A directory that changes parents takes its `..` link along.
            for (ino, is_dir, from, to) in [(a, a_dir, parent, newdir), (b, b_dir, newdir, parent)]
            {
                if is_dir {
                    self.dir_mut(ino)?.parent = to;
                    self.node_mut(from)?.attr.nlink -= 1;
                    self.node_mut(to)?.attr.nlink += 1;
                }
            }
        }
        let now = SystemTime::now();
        for ino in [a, b] {
            self.node_mut(ino)?.attr.ctime = now;
        }
        self.touch_dir(parent, now);
        self.touch_dir(newdir, now);
        Ok(())
    }
}

/// The answer to GETXATTR and LISTXATTR: the size when asked with size 0,
/// `ERANGE` when `value` doesn't fit `size`.
fn xattr_reply(value: Vec<u8>, size: u32) -> io::Result<XattrReply> {
    let len = u32::try_from(value.len()).map_err(|_| errno::range())?;
    if size == 0 {
        Ok(XattrReply::Size(len))
    } else if len > size {
        Err(errno::range())
    } else {
        Ok(XattrReply::Data(value))
    }
}

// Operations left to their defaults, and why that is right here:
// - `open`, `opendir`, `release`, `releasedir`, `create`: this file system
//   keeps nothing per open file. ENOSYS to OPEN and OPENDIR makes the
//   kernel stop sending them (and RELEASE), every request then comes with
//   handle 0; ENOSYS to CREATE makes the kernel create files with MKNOD.
// - `access`: not sent with `default_permissions`.
// - `flush`, `fsync`, `fsyncdir`, `syncfs`: there is nothing to write back,
//   and ENOSYS makes the kernel stop asking and succeed.
// - `getlk`, `setlk`: the kernel keeps locks itself unless INIT asks for
//   `FUSE_POSIX_LOCKS`.
impl FileSystem for MemFs {
    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        let mut state = self.state();
        let ino = state.child(parent, checked(name)?)?;
        state.entry(ino)
    }

    fn forget(&self, _ctx: &Context, ino: u64, nlookup: u64) {
        let mut state = self.state();
        if let Some(node) = state.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(nlookup);
            state.remove_if_unused(ino);
        }
    }

    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        self.state().attr_reply(ino)
    }

    /// chmod, chown, truncate and utimes. The kernel checked that the
    /// caller may, and already cleared set-user-ID and set-group-ID where
    /// a change must (a chown, a write by someone else): it sends the mode
    /// it wants.
    fn setattr(&self, _ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        let now = SystemTime::now();
        let mut state = self.state();
        let State { nodes, used, .. } = &mut *state;
        let node = nodes.get_mut(&ino).ok_or_else(errno::stale)?;
        if let Some(size) = args.size {
            let Contents::File(data) = &mut node.contents else {
                return Err(errno::invalid());
            };
            if size != data.size {
                data.truncate(size, used);
                sync_size(&mut node.attr, data);
                node.attr.mtime = now;
            }
        }
        let attr = &mut node.attr;
        if let Some(mode) = args.mode {
            attr.perm = mode & 0o7777; // the type bits can't change
        }
        if let Some(uid) = args.uid {
            attr.uid = uid;
        }
        if let Some(gid) = args.gid {
            attr.gid = gid;
        }
        if let Some(atime) = args.atime {
            attr.atime = atime.to_system_time();
        }
        if let Some(mtime) = args.mtime {
            attr.mtime = mtime.to_system_time();
        }
        attr.ctime = now;
        state.attr_reply(ino)
    }

    fn readlink(&self, _ctx: &Context, ino: u64) -> io::Result<Vec<u8>> {
        match &self.state().node(ino)?.contents {
            Contents::Symlink(target) => Ok(target.clone()),
            _ => Err(errno::invalid()),
        }
    }

    fn symlink(&self, ctx: &Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        let target = target.to_bytes().to_vec();
        // A symlink's permissions are always rwxrwxrwx (and never checked).
        self.state().create(
            ctx,
            parent,
            name,
            FileType::Symlink,
            0o777,
            Contents::Symlink(target),
        )
    }

    /// Regular files (the kernel sends CREATE here, see above), device
    /// nodes, FIFOs and sockets. The mode's permissions are already
    /// masked with the caller's umask.
    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MknodArgs,
    ) -> io::Result<Entry> {
        let kind = FileType::from_mode(args.mode).ok_or_else(errno::invalid)?;
        let contents = match kind {
            FileType::RegularFile => Contents::File(FileData::default()),
            FileType::Directory | FileType::Symlink => return Err(errno::invalid()),
            _ => Contents::Special,
        };
        let mut state = self.state();
        let entry = state.create(ctx, parent, name, kind, args.mode & 0o7777, contents)?;
        // The device number, for stat(2) to show (the kernel opens device
        // nodes itself; a `nodev` mount, the default, refuses to).
        let node = state.node_mut(entry.nodeid)?;
        node.attr.rdev = u64::from(args.rdev);
        Ok(Entry {
            attr: node.attr.into(),
            ..entry
        })
    }

    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        let contents = Contents::Dir(Dir::new(parent));
        self.state().create(
            ctx,
            parent,
            name,
            FileType::Directory,
            args.mode & 0o7777,
            contents,
        )
    }

    fn unlink(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        let mut state = self.state();
        let name = checked(name)?;
        let ino = state.child(parent, name)?;
        if state.is_dir(ino) {
            return Err(errno::is_a_directory());
        }
        let now = SystemTime::now();
        state.dir_mut(parent)?.remove(name);
        state.touch_dir(parent, now);
        state.drop_link(ino, now);
        Ok(())
    }

    fn rmdir(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        let mut state = self.state();
        let name = checked(name)?;
        let ino = state.child(parent, name)?;
        if !state.dir(ino)?.names.is_empty() {
            return Err(errno::not_empty());
        }
        let now = SystemTime::now();
        state.dir_mut(parent)?.remove(name);
        state.node_mut(parent)?.attr.nlink -= 1; // the removed `..`
        state.touch_dir(parent, now);
        state.drop_link(ino, now);
        Ok(())
    }

    fn rename(&self, _ctx: &Context, parent: u64, args: &RenameArgs<'_>) -> io::Result<()> {
        let (name, newname) = (checked(args.name)?, checked(args.newname)?);
        let mut state = self.state();
        if args.flags == RenameFlags::EXCHANGE {
            state.exchange(parent, name, args.newdir, newname)
        } else if args.flags.difference(RenameFlags::NOREPLACE).is_empty() {
            let noreplace = args.flags.contains(RenameFlags::NOREPLACE);
            state.rename(parent, name, args.newdir, newname, noreplace)
        } else {
            // RENAME_WHITEOUT (for overlayfs), or flags together that
            // don't go together.
            Err(errno::invalid())
        }
    }

    fn link(&self, _ctx: &Context, ino: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        let mut state = self.state();
        let newname = checked(newname)?;
        if state.is_dir(ino) {
            return Err(errno::not_permitted());
        }
        if state.dir(newparent)?.get(newname).is_some() {
            return Err(errno::exists());
        }
        let now = SystemTime::now();
        state.dir_mut(newparent)?.insert(newname, ino);
        state.touch_dir(newparent, now);
        let node = state.node_mut(ino)?;
        node.attr.nlink += 1;
        node.attr.ctime = now;
        state.entry(ino)
    }

    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        let state = self.state();
        let data = match &state.node(ino)?.contents {
            Contents::File(data) => data,
            Contents::Dir(_) => return Err(errno::is_a_directory()),
            _ => return Err(errno::invalid()),
        };
        // Straight into the reply's memory: `spare` is what is left of it.
        let len = (args.size as usize).min(out.available());
        let n = data.read(args.offset, &mut out.spare()[..len]);
        out.commit(n);
        // Like a `noatime` mount, reads don't update the access time.
        Ok(())
    }

    /// The data comes straight out of the request's memory (`data`).
    fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let now = SystemTime::now();
        let mut state = self.state();
        let State { nodes, used, .. } = &mut *state;
        let node = nodes.get_mut(&ino).ok_or_else(errno::stale)?;
        let Contents::File(file) = &mut node.contents else {
            return Err(errno::invalid());
        };
        // Without the writeback cache, appending is ours to do: the
        // kernel's offset is only the end it knew of.
        let offset = if args.append() && !args.from_cache() {
            file.size
        } else {
            args.offset
        };
        let bytes = data.unconsumed();
        file.write(offset, bytes, used)?;
        let written = bytes.len();
        data.consume(written);
        sync_size(&mut node.attr, file);
        node.attr.mtime = now;
        node.attr.ctime = now;
        Ok(written)
    }

    fn statfs(&self, _ctx: &Context, _ino: u64) -> io::Result<Kstatfs> {
        let state = self.state();
        let free_blocks = (CAPACITY - state.used) / PAGE;
        Ok(Kstatfs {
            blocks: CAPACITY / PAGE,
            bfree: free_blocks,
            bavail: free_blocks,
            files: MAX_NODES,
            ffree: MAX_NODES.saturating_sub(state.nodes.len() as u64),
            bsize: PAGE as u32,
            namelen: NAME_MAX as u32,
            frsize: PAGE as u32,
            ..Kstatfs::default()
        })
    }

    /// The kernel already checked the caller may (a `trusted.` name needs
    /// root, a `user.` one write access to a file or directory).
    fn setxattr(&self, _ctx: &Context, ino: u64, args: &SetxattrArgs<'_>) -> io::Result<()> {
        let mut state = self.state();
        let node = state.node_mut(ino)?;
        let name = args.name.to_bytes();
        let exists = node.xattrs.contains_key(name);
        if args.create() && exists {
            return Err(errno::exists());
        }
        if args.replace() && !exists {
            return Err(errno::no_data());
        }
        node.xattrs.insert(name.to_vec(), args.value.to_vec());
        node.attr.ctime = SystemTime::now();
        Ok(())
    }

    fn getxattr(&self, _ctx: &Context, ino: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        let state = self.state();
        let value = state.node(ino)?.xattrs.get(name.to_bytes());
        xattr_reply(value.ok_or_else(errno::no_data)?.clone(), size)
    }

    fn listxattr(&self, _ctx: &Context, ino: u64, size: u32) -> io::Result<XattrReply> {
        let state = self.state();
        let mut list = Vec::new();
        for name in state.node(ino)?.xattrs.keys() {
            list.extend_from_slice(name);
            list.push(0); // each name ends with a NUL
        }
        xattr_reply(list, size)
    }

    fn removexattr(&self, _ctx: &Context, ino: u64, name: &CStr) -> io::Result<()> {
        let mut state = self.state();
        let node = state.node_mut(ino)?;
        node.xattrs
            .remove(name.to_bytes())
            .ok_or_else(errno::no_data)?;
        node.attr.ctime = SystemTime::now();
        Ok(())
    }

    /// `.` and `..`, then the names in the order they were added, each
    /// with its own cookie, resuming after the cookie `args.offset`.
    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        let state = self.state();
        let dir = state.dir(ino)?;
        let dots = [(1, ino, b".".as_slice()), (2, dir.parent, b"..".as_slice())];
        for (cookie, ino, name) in dots {
            if cookie > args.offset
                && !out.add(ino, cookie, FileType::Directory.dirent_type(), name)
            {
                return Ok(());
            }
        }
        for (&cookie, name) in dir
            .order
            .range(args.offset.max(FIRST_COOKIE - 1).saturating_add(1)..)
        {
            let child = dir.names[name].ino;
            let kind = state.node(child)?.attr.kind;
            if !out.add(child, cookie, kind.dirent_type(), name) {
                break; // the reply is full; the kernel asks again from here
            }
        }
        Ok(())
    }

    /// posix_fallocate(3): makes sure the pages of `offset..offset +
    /// length` exist (so writing there can't fail for want of space), and
    /// the file at least that long. Other modes (punching holes, ...) are
    /// `EOPNOTSUPP`.
    fn fallocate(&self, _ctx: &Context, ino: u64, args: &FallocateArgs) -> io::Result<()> {
        if args.mode != 0 {
            return Err(errno::not_supported());
        }
        let now = SystemTime::now();
        let mut state = self.state();
        let State { nodes, used, .. } = &mut *state;
        let node = nodes.get_mut(&ino).ok_or_else(errno::stale)?;
        let Contents::File(file) = &mut node.contents else {
            return Err(errno::invalid());
        };
        let end = args
            .offset
            .checked_add(args.length)
            .ok_or_else(|| errno::error(errno::EFBIG))?;
        file.allocate(args.offset, end, used)?;
        if end > file.size {
            file.size = end;
            node.attr.mtime = now;
        }
        sync_size(&mut node.attr, file);
        node.attr.ctime = now;
        Ok(())
    }
}

/// Mounts `fs` at `mountpoint` and starts serving it.
pub fn mount(fs: Arc<MemFs>, mountpoint: &Path) -> Result<DevSession, SessionError> {
    let options = MountOptions::default()
        .fsname("memfs")
        .subtype("memfs")
        // The kernel checks permissions from our modes and owners.
        .default_permissions(true)
        // Other users may use the mount (pjdfstest switches users).
        .allow_other(true);
    DevSession::mount(
        Server::new(fs),
        mountpoint,
        &options,
        SessionConfig::default(),
    )
}

fn main() -> std::process::ExitCode {
    // Errors in words (returning them from main would print their Debug form).
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memfs: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What `--help` prints.
pub const HELP: &str = "\
usage: memfs MOUNTPOINT

Mounts an in-memory file system (files, directories, links, special
files, extended attributes) at MOUNTPOINT and serves it in the foreground
until Ctrl-C (SIGINT), SIGTERM or SIGHUP, or until it is unmounted
(umount MOUNTPOINT as root, fusermount3 -u MOUNTPOINT otherwise); what it
held is gone then.

A signal that the process was started with ignored stays ignored: started
from a script as `memfs MOUNTPOINT &` (a non-interactive shell starts
background jobs with SIGINT ignored), Ctrl-C and kill -INT don't stop it;
use kill (SIGTERM) or umount.";

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Some(mountpoint) = std::env::args_os().nth(1) else {
        return Err("usage: memfs MOUNTPOINT (memfs --help says more)".into());
    };
    if mountpoint == "--help" || mountpoint == "-h" {
        println!("{HELP}");
        return Ok(());
    }
    let mountpoint = Path::new(&mountpoint);
    // The root directory belongs to whoever owns the mountpoint.
    let owner =
        std::fs::metadata(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let fs = Arc::new(MemFs::new(owner.uid(), owner.gid()));
    let session = mount(fs, mountpoint)?;
    println!("memfs serving at {}", mountpoint.display());
    fuse_transport_dev::serve_until_signal(&session)?;
    Ok(())
}
