//! A file system written the way a fuser user writes one, served over
//! io_uring; one line of `main` switches it to `/dev/fuse`
//! (docs/porting-from-fuser.md has the method-by-method table).
//!
//! ```sh
//! echo Y > /sys/module/fuse/parameters/enable_uring   # as root, once
//! mkdir -p /tmp/notes
//! cargo run -p fusewire-transport-uring --example fuser_style -- /tmp/notes
//! cat /tmp/notes/hello.txt; echo hi > /tmp/notes/new.txt   # in another terminal
//! ```
//!
//! A flat directory of files kept in memory: `hello.txt` at the start,
//! and whatever is created, written, truncated or removed. It serves until
//! Ctrl-C, SIGTERM or an unmount. Each method says what its fuser
//! counterpart looks like: in fuser a method gets a `reply` object and
//! calls `reply.entry(..)` or `reply.error(ENOENT)`; here it returns
//! `Ok(..)` or `Err(..)`, and the transport sends the reply.

use fuse_server::{
    errno, AttrReply, Context, CreateArgs, DirentSink, Entry, FileAttr, FileSystem, FileType,
    OpenArgs, Opened, ReadArgs, Server, SetattrArgs, WriteArgs, ZeroCopyReader, ZeroCopyWriter,
    ROOT_ID,
};
use fuse_transport_dev::MountOptions;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// fuser's examples use `const TTL: Duration`; so do we.
const TTL: Duration = Duration::from_secs(1);

/// The largest file: a write or truncate past it fails with EFBIG, so a
/// client can't make the daemon allocate without bound.
const MAX_FILE_SIZE: u64 = 64 << 20;

/// One file: its attributes and contents.
struct File {
    attr: FileAttr,
    data: Vec<u8>,
}

/// What fuser users keep in `&mut self`: here behind a mutex, since our
/// methods take `&self` and may run on several threads at once.
struct State {
    root: FileAttr,
    /// Files by node id (which is also their inode number).
    files: BTreeMap<u64, File>,
    /// The root directory: names to node ids.
    names: BTreeMap<CString, u64>,
    next_ino: u64,
}

/// The file system (fuser: `struct NotesFs; impl Filesystem for NotesFs`).
pub struct NotesFs {
    state: Mutex<State>,
}

impl NotesFs {
    /// The root directory holding `hello.txt`.
    pub fn new() -> Self {
        let content = b"Hello from a fuser-style file system!\n".to_vec();
        let hello = File {
            attr: FileAttr::new(2, FileType::RegularFile, 0o644).with_size(content.len() as u64),
            data: content,
        };
        let state = State {
            root: FileAttr::new(ROOT_ID, FileType::Directory, 0o755),
            files: BTreeMap::from([(2, hello)]),
            names: BTreeMap::from([(c"hello.txt".to_owned(), 2)]),
            next_ino: 3,
        };
        Self {
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere leaves the maps consistent (every change is one
        // insert or remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for NotesFs {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    fn attr(&self, ino: u64) -> io::Result<FileAttr> {
        match ino {
            ROOT_ID => Ok(self.root),
            _ => self
                .files
                .get(&ino)
                .map(|f| f.attr)
                .ok_or_else(errno::stale),
        }
    }

    fn file(&mut self, ino: u64) -> io::Result<&mut File> {
        if ino == ROOT_ID {
            return Err(errno::is_a_directory());
        }
        self.files.get_mut(&ino).ok_or_else(errno::stale)
    }
}

/// fuser: `reply.entry(&TTL, &attr, 0)`.
fn entry(attr: FileAttr) -> Entry {
    Entry {
        nodeid: attr.ino,
        generation: 0,
        attr: attr.into(),
        attr_timeout: TTL,
        entry_timeout: TTL,
    }
}

/// Sets a file's size (growing with zeros), within [`MAX_FILE_SIZE`].
fn resize(file: &mut File, size: u64) -> io::Result<()> {
    if size > MAX_FILE_SIZE {
        return Err(errno::error(libc::EFBIG));
    }
    file.data.resize(size as usize, 0);
    file.attr = file.attr.with_size(size);
    Ok(())
}

// fuser: `impl Filesystem for NotesFs`. Methods not written here answer
// ENOSYS, as fuser's defaults do; `forget` is left out as most fuser file
// systems leave it out: our node ids live until `unlink`.
impl FileSystem for NotesFs {
    /// fuser: `fn lookup(&mut self, _req: &Request, parent: u64, name: &OsStr, reply: ReplyEntry)`.
    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        let state = self.state();
        if parent != ROOT_ID {
            return Err(errno::not_a_directory());
        }
        // fuser: `reply.error(ENOENT)`.
        let ino = *state.names.get(name).ok_or_else(errno::not_found)?;
        Ok(entry(state.attr(ino)?))
    }

    /// fuser: `fn getattr(&mut self, _req: &Request, ino: u64, fh: Option<u64>, reply: ReplyAttr)`,
    /// answered with `reply.attr(&TTL, &attr)`.
    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: self.state().attr(ino)?.into(),
            timeout: TTL,
        })
    }

    /// fuser: `fn setattr(&mut self, _req, ino, mode, uid, gid, size, atime, mtime, ..., reply: ReplyAttr)`:
    /// the optional values arrive together in `args`.
    fn setattr(&self, _ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        let mut state = self.state();
        let now = SystemTime::now();
        let file = state.file(ino)?;
        if let Some(size) = args.size {
            resize(file, size)?;
            file.attr.mtime = now;
        }
        if let Some(mode) = args.mode {
            file.attr.perm = mode & 0o7777;
        }
        if let Some(uid) = args.uid {
            file.attr.uid = uid;
        }
        if let Some(gid) = args.gid {
            file.attr.gid = gid;
        }
        if let Some(atime) = args.atime {
            file.attr.atime = atime.to_system_time();
        }
        if let Some(mtime) = args.mtime {
            file.attr.mtime = mtime.to_system_time();
        }
        file.attr.ctime = now;
        Ok(AttrReply {
            attr: file.attr.into(),
            timeout: TTL,
        })
    }

    /// fuser: `fn readdir(&mut self, _req, ino, fh, offset: i64, mut reply: ReplyDirectory)`
    /// with `if reply.add(ino, next_offset, kind, name) { break }` and
    /// `reply.ok()`. Here `out.add` returns `false` when the reply is full
    /// (fuser's `add` returns `true`), and `Ok(())` sends it.
    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        if ino != ROOT_ID {
            return Err(errno::not_a_directory());
        }
        let state = self.state();
        // Each entry's cookie (fuser's "offset" of the next entry) is
        // derived from its node id, so a listing resumed after a create or
        // unlink neither repeats nor skips the entries that stayed.
        let dots = [(ROOT_ID, 1, c"."), (ROOT_ID, 2, c"..")];
        let files = state
            .names
            .iter()
            .map(|(name, &ino)| (ino, ino + 1, name.as_c_str()));
        let mut entries: Vec<_> = dots.into_iter().chain(files).collect();
        entries.sort_by_key(|&(_, cookie, _)| cookie);
        for (ino, cookie, name) in entries.into_iter().filter(|e| e.1 > args.offset) {
            let kind = state.attr(ino)?.kind;
            if !out.add(ino, cookie, kind.dirent_type(), name.to_bytes()) {
                break;
            }
        }
        Ok(())
    }

    /// fuser: `fn create(&mut self, _req, parent, name, mode, umask, flags, reply: ReplyCreate)`,
    /// answered with `reply.created(&TTL, &attr, 0, fh, flags)`.
    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        if parent != ROOT_ID {
            return Err(errno::not_a_directory());
        }
        let mut state = self.state();
        if state.names.contains_key(name) {
            return Err(errno::exists());
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        let mut attr = FileAttr::new(ino, FileType::RegularFile, args.mode & !args.umask);
        attr.uid = ctx.uid;
        attr.gid = ctx.gid;
        state.files.insert(
            ino,
            File {
                attr,
                data: Vec::new(),
            },
        );
        state.names.insert(name.to_owned(), ino);
        state.root.mtime = attr.mtime;
        state.root.ctime = attr.mtime;
        Ok((entry(attr), Opened::default()))
    }

    /// fuser: `fn open(&mut self, _req, ino, flags, reply: ReplyOpen)` with
    /// `reply.opened(fh, flags)`: file handle 0, no open-file state.
    fn open(&self, _ctx: &Context, ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        self.state().file(ino)?;
        Ok(Opened::default())
    }

    /// fuser: `fn read(&mut self, _req, ino, fh, offset: i64, size: u32, flags, lock, reply: ReplyData)`
    /// with `reply.data(&bytes)`. Here the bytes go straight into the
    /// reply's memory.
    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        let mut state = self.state();
        let data = &state.file(ino)?.data;
        out.write_all(&data[args.range_in(data.len())])
    }

    /// fuser: `fn write(&mut self, _req, ino, fh, offset: i64, data: &[u8], ..., reply: ReplyWrite)`
    /// with `reply.written(n)`. Here the data is read out of the request
    /// (`data.unconsumed()`), and the count returned.
    fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let mut state = self.state();
        let file = state.file(ino)?;
        let bytes = data.unconsumed();
        let end = args
            .offset
            .checked_add(bytes.len() as u64)
            .ok_or_else(|| errno::error(libc::EFBIG))?;
        if end > file.data.len() as u64 {
            resize(file, end)?;
        }
        file.data[args.offset as usize..end as usize].copy_from_slice(bytes);
        let written = bytes.len();
        data.consume(written);
        let now = SystemTime::now();
        file.attr.mtime = now;
        file.attr.ctime = now;
        Ok(written)
    }

    /// fuser: `fn unlink(&mut self, _req, parent, name, reply: ReplyEmpty)`
    /// with `reply.ok()`; here `Ok(())`.
    fn unlink(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        if parent != ROOT_ID {
            return Err(errno::not_a_directory());
        }
        let mut state = self.state();
        let ino = state.names.remove(name).ok_or_else(errno::not_found)?;
        state.files.remove(&ino);
        let now = SystemTime::now();
        state.root.mtime = now;
        state.root.ctime = now;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fuser_style: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Some(mountpoint) = std::env::args_os().nth(1) else {
        return Err("usage: fuser_style MOUNTPOINT".into());
    };
    let mnt = Path::new(&mountpoint);
    // fuser: `vec![MountOption::FSName("notes".into())]`.
    let options = MountOptions::default().fsname("notes").subtype("notes");
    let server = Server::new(Arc::new(NotesFs::new()));
    // The transport's defaults (`UringConfig` or `SessionConfig`, whichever
    // the next line takes).
    let config = Default::default();
    // fuser: `fuser::mount2(NotesFs::new(), mnt, &options)?`. The one line
    // that picks the transport, io_uring here; for /dev/fuse it reads
    // `let session = fuse_transport_dev::DevSession::mount(server, mnt, &options, config)?;`
    let session = fuse_transport_uring::UringSession::mount(server, mnt, &options, config)?;
    let transport = fuse_server::Session::transport(&session);
    println!("serving {} over {transport}", mnt.display());
    // Until Ctrl-C, SIGTERM or an unmount; unmounts on the way out.
    fuse_transport_dev::serve_until_signal(&session)?;
    Ok(())
}
