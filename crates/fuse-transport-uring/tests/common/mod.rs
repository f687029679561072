//! A small in-memory file system for the ring tests, and helpers.
//!
//! Files live in memory; every READ and WRITE goes through the transport
//! (opens don't keep the page cache, so data read back after a reopen comes
//! from the file system, not the kernel's cache).

#![allow(dead_code)]

use fuse_abi::{Attr, FopenFlags, Kstatfs, ROOT_ID};
use fuse_server::*;
use fuse_transport_uring::{UringConfig, UringSession};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

enum Kind {
    Dir(BTreeMap<Vec<u8>, u64>),
    File(Arc<RwLock<Vec<u8>>>),
}

struct Node {
    kind: Kind,
    mode: u32,
}

/// The in-memory file system.
pub struct MemFs {
    nodes: Mutex<HashMap<u64, Node>>,
    next: AtomicU64,
    /// Opens ask for zero copy (`FOPEN_IO_URING_ZERO_COPY`): a file system
    /// that computes its data, answered through the transport's bounce
    /// buffer on a zero-copy queue.
    pub zero_copy: bool,
}

impl Default for MemFs {
    fn default() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_ID,
            Node {
                kind: Kind::Dir(BTreeMap::new()),
                mode: libc::S_IFDIR | 0o755,
            },
        );
        Self {
            nodes: Mutex::new(nodes),
            next: AtomicU64::new(ROOT_ID + 1),
            zero_copy: false,
        }
    }
}

fn errno(n: i32) -> io::Error {
    io::Error::from_raw_os_error(n)
}

const TTL: Duration = Duration::from_secs(1);

/// Looking this name up makes the file system panic.
pub const PANIC_NAME: &str = "panic-now";

impl MemFs {
    fn attr_of(&self, ino: u64, node: &Node) -> Attr {
        let (size, nlink) = match &node.kind {
            Kind::Dir(_) => (0, 2),
            Kind::File(data) => (
                data.read().unwrap_or_else(|e| e.into_inner()).len() as u64,
                1,
            ),
        };
        Attr {
            ino,
            size,
            blocks: size.div_ceil(512),
            mode: node.mode,
            nlink,
            blksize: 4096,
            ..Attr::default()
        }
    }

    fn attr(&self, ino: u64) -> io::Result<Attr> {
        let nodes = self.nodes.lock().unwrap();
        let node = nodes.get(&ino).ok_or_else(|| errno(libc::ENOENT))?;
        Ok(self.attr_of(ino, node))
    }

    fn file(&self, ino: u64) -> io::Result<Arc<RwLock<Vec<u8>>>> {
        match self.nodes.lock().unwrap().get(&ino).map(|n| &n.kind) {
            Some(Kind::File(data)) => Ok(data.clone()),
            Some(Kind::Dir(_)) => Err(errno(libc::EISDIR)),
            None => Err(errno(libc::ENOENT)),
        }
    }

    fn entry(&self, ino: u64) -> io::Result<Entry> {
        Ok(Entry {
            nodeid: ino,
            generation: 1,
            attr: self.attr(ino)?,
            attr_timeout: TTL,
            entry_timeout: TTL,
        })
    }

    /// Adds `name` in `parent`, a node of `kind` with the permissions of
    /// `mode`.
    fn add(&self, parent: u64, name: &CStr, kind: Kind, mode: u32) -> io::Result<u64> {
        let file_type = match kind {
            Kind::Dir(_) => libc::S_IFDIR,
            Kind::File(_) => libc::S_IFREG,
        };
        let mode = file_type | (mode & 0o7777);
        let mut nodes = self.nodes.lock().unwrap();
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        match nodes.get_mut(&parent).map(|n| &mut n.kind) {
            Some(Kind::Dir(children)) => {
                if children.contains_key(name.to_bytes()) {
                    return Err(errno(libc::EEXIST));
                }
                children.insert(name.to_bytes().to_vec(), ino);
            }
            Some(Kind::File(_)) => return Err(errno(libc::ENOTDIR)),
            None => return Err(errno(libc::ENOENT)),
        }
        nodes.insert(ino, Node { kind, mode });
        Ok(ino)
    }
}

impl FileSystem for MemFs {
    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        if name.to_bytes() == PANIC_NAME.as_bytes() {
            panic!("the test file system panics on looking up {PANIC_NAME}");
        }
        let ino = match self.nodes.lock().unwrap().get(&parent).map(|n| &n.kind) {
            Some(Kind::Dir(children)) => *children
                .get(name.to_bytes())
                .ok_or_else(|| errno(libc::ENOENT))?,
            Some(Kind::File(_)) => return Err(errno(libc::ENOTDIR)),
            None => return Err(errno(libc::ENOENT)),
        };
        self.entry(ino)
    }

    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(ino)?,
            timeout: TTL,
        })
    }

    fn setattr(&self, _ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        if let Some(size) = args.size {
            let data = self.file(ino)?;
            data.write().unwrap().resize(size as usize, 0);
        }
        if let Some(mode) = args.mode {
            if let Some(node) = self.nodes.lock().unwrap().get_mut(&ino) {
                node.mode = (node.mode & libc::S_IFMT) | (mode & 0o7777);
            }
        }
        Ok(AttrReply {
            attr: self.attr(ino)?,
            timeout: TTL,
        })
    }

    fn mkdir(
        &self,
        _ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        let ino = self.add(parent, name, Kind::Dir(BTreeMap::new()), args.mode)?;
        self.entry(ino)
    }

    fn create(
        &self,
        _ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        let ino = self.add(parent, name, Kind::File(Arc::default()), args.mode)?;
        Ok((
            self.entry(ino)?,
            Opened {
                fh: ino,
                flags: FopenFlags::empty(),
                backing_id: 0,
            },
        ))
    }

    fn unlink(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        let mut nodes = self.nodes.lock().unwrap();
        let ino = match nodes.get_mut(&parent).map(|n| &mut n.kind) {
            Some(Kind::Dir(children)) => children
                .remove(name.to_bytes())
                .ok_or_else(|| errno(libc::ENOENT))?,
            _ => return Err(errno(libc::ENOTDIR)),
        };
        nodes.remove(&ino);
        Ok(())
    }

    fn open(&self, _ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        let data = self.file(ino)?;
        if args.flags & libc::O_TRUNC as u32 != 0 {
            data.write().unwrap().clear();
        }
        // No KEEP_CACHE: the kernel drops the file's page cache at open, so
        // reads after a reopen are READ requests.
        Ok(Opened {
            fh: ino,
            flags: if self.zero_copy {
                FopenFlags::IO_URING_ZERO_COPY
            } else {
                FopenFlags::empty()
            },
            backing_id: 0,
        })
    }

    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        let data = self.file(ino)?;
        let data = data.read().unwrap();
        out.write_all(&data[args.range_in(data.len())])
    }

    fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        input: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let file = self.file(ino)?;
        let mut data = file.write().unwrap();
        let bytes = input.unconsumed();
        let n = bytes.len();
        let start = args.offset as usize;
        if data.len() < start + n {
            data.resize(start + n, 0);
        }
        data[start..start + n].copy_from_slice(bytes);
        input.consume(n);
        Ok(n)
    }

    fn flush(&self, _ctx: &Context, _ino: u64, _args: &FlushArgs) -> io::Result<()> {
        Ok(())
    }

    fn release(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }

    fn fsync(&self, _ctx: &Context, _ino: u64, _args: &FsyncArgs) -> io::Result<()> {
        Ok(())
    }

    fn statfs(&self, _ctx: &Context, _ino: u64) -> io::Result<Kstatfs> {
        Ok(Kstatfs {
            blocks: 1 << 20,
            bfree: 1 << 19,
            bavail: 1 << 19,
            files: 1 << 16,
            ffree: 1 << 15,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
            ..Kstatfs::default()
        })
    }

    fn opendir(&self, _ctx: &Context, _ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        Ok(Opened::default())
    }

    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        let nodes = self.nodes.lock().unwrap();
        let Some(Kind::Dir(children)) = nodes.get(&ino).map(|n| &n.kind) else {
            return Err(errno(libc::ENOTDIR));
        };
        let mut all: Vec<(u64, u32, Vec<u8>)> = vec![
            (ino, libc::DT_DIR as u32, b".".to_vec()),
            (ROOT_ID, libc::DT_DIR as u32, b"..".to_vec()),
        ];
        for (name, &child) in children {
            let dtype = match nodes.get(&child).map(|n| &n.kind) {
                Some(Kind::Dir(_)) => libc::DT_DIR,
                _ => libc::DT_REG,
            };
            all.push((child, dtype as u32, name.clone()));
        }
        for (i, (child, dtype, name)) in all.iter().enumerate().skip(args.offset as usize) {
            if !out.add(*child, i as u64 + 1, *dtype, name) {
                break;
            }
        }
        Ok(())
    }

    fn releasedir(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }
}

/// Fails the test unless it runs as root with FUSE over io_uring switched
/// on: a host without it must not pass these tests by falling back.
pub fn require_root_and_uring() {
    test_support::require_root();
    test_support::require_uring();
}

/// A mounted [`MemFs`] served by a [`UringSession`].
pub struct Mounted {
    pub session: UringSession,
    pub mnt: PathBuf,
    _dir: tempfile::TempDir,
}

/// Logs to the test's output, filtered by `RUST_LOG` (default: warnings).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

pub fn mount(config: UringConfig) -> Mounted {
    mount_fs(MemFs::default(), config)
}

/// [`mount`] of a given [`MemFs`].
pub fn mount_fs(fs: MemFs, config: UringConfig) -> Mounted {
    init_logging();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::new(Arc::new(fs));
    let session = UringSession::mount(
        server,
        dir.path(),
        &fuse_transport_dev::MountOptions::default(),
        config,
    )
    .expect("mounting through the io_uring transport");
    let mnt = fuse_server::Session::mountpoint(&session).to_path_buf();
    Mounted {
        session,
        mnt,
        _dir: dir,
    }
}

/// Deterministic content of file `seed`, `len` bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes `len` bytes to `path` in `chunk`-sized writes, then reopens it
/// and reads it back in `chunk`-sized reads (and once more from an offset),
/// checking every byte.
pub fn write_and_verify(path: &Path, seed: u64, len: usize, chunk: usize) -> io::Result<()> {
    let data = pattern(seed, len);
    {
        let mut f = std::fs::File::create(path)?;
        for part in data.chunks(chunk) {
            f.write_all(part)?;
        }
        f.sync_all()?;
    }
    let mut f = std::fs::File::open(path)?;
    let mut back = Vec::with_capacity(len);
    let mut buf = vec![0u8; chunk];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    if back != data {
        let at = back.iter().zip(&data).position(|(a, b)| a != b);
        return Err(io::Error::other(format!(
            "{}: content differs (read {} of {len} bytes, first difference at {at:?})",
            path.display(),
            back.len()
        )));
    }
    let mid = len / 3;
    f.seek(SeekFrom::Start(mid as u64))?;
    let mut part = vec![0u8; (len - mid).min(100_000)];
    f.read_exact(&mut part)?;
    if part != data[mid..mid + part.len()] {
        return Err(io::Error::other("content differs after a seek"));
    }
    Ok(())
}

/// Runs `write_and_verify` on `threads` files at once, `rounds` times each.
pub fn parallel_write_and_verify(mnt: &Path, threads: usize, len: usize, rounds: usize) {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let mnt = mnt.to_path_buf();
            std::thread::spawn(move || {
                for r in 0..rounds {
                    let path = mnt.join(format!("file-{t}"));
                    // Odd chunk sizes too: not every request is a full page run.
                    let chunk = if r % 2 == 0 { 1 << 20 } else { 300_001 };
                    write_and_verify(&path, (t * 1000 + r) as u64, len, chunk)
                        .unwrap_or_else(|e| panic!("writer {t}, round {r}: {e}"));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a writer thread failed");
    }
}

/// Runs `f` on another thread and fails if it takes longer than `limit`
/// (a hang in teardown must fail the test, not stall the suite).
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        dump_stuck_state();
        panic!("{what} did not finish within {limit:?}")
    })
}

/// Prints where this process's threads wait in the kernel and the FUSE
/// connections' waiting counts, to diagnose a hang.
pub fn dump_stuck_state() {
    dump_tasks("self");
    if let Ok(conns) = std::fs::read_dir("/sys/fs/fuse/connections") {
        for c in conns.flatten() {
            let waiting = std::fs::read_to_string(c.path().join("waiting")).unwrap_or_default();
            eprintln!(
                "fuse connection {}: waiting {}",
                c.file_name().to_string_lossy(),
                waiting.trim()
            );
        }
    }
}

/// Prints where the threads of process `pid` wait in the kernel.
pub fn dump_tasks(pid: &str) {
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let p = t.path();
            let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            let stack = std::fs::read_to_string(p.join("stack")).unwrap_or_default();
            let wchan = std::fs::read_to_string(p.join("wchan")).unwrap_or_default();
            eprintln!(
                "{pid} task {} {}: wchan {wchan}\n{stack}",
                t.file_name().to_string_lossy(),
                name.trim()
            );
        }
    }
}

/// From every CPU, so that every queue meets it: a LOOKUP of
/// [`PANIC_NAME`] (the file system panics) fails with EIO, and the queue
/// then goes on serving a write and its read-back.
pub fn every_queue_survives_a_panic(mnt: &Path) {
    for cpu in online_cpus() {
        let mnt = mnt.to_path_buf();
        std::thread::spawn(move || {
            pin_to(cpu);
            let err = std::fs::metadata(mnt.join(PANIC_NAME)).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
            let after = mnt.join(format!("after-{cpu}"));
            write_and_verify(&after, cpu as u64, 1 << 20, 65536).unwrap();
        })
        .join()
        .unwrap();
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it for
    // cpu < 1024; sched_setaffinity reads the live set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "pinning to CPU {cpu}: {}",
            io::Error::last_os_error()
        );
    }
}

/// The online CPUs.
pub fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// How a writer of [`start_writers`] ended: the bytes it wrote (every read
/// back checked) and the error that stopped it. A writer stops only on an
/// error.
#[derive(Debug)]
pub struct WriterEnd {
    /// Bytes written before the error.
    pub written: u64,
    /// What stopped it.
    pub error: io::Error,
}

/// Writers on their own files under `mnt`, each opened before this returns
/// and used until an operation on it fails: a 1 MiB write after another
/// (cycling through 16 MiB), every fourth followed by a read of its first
/// 4 KiB, which must match (a mismatch ends the writer with an error that
/// names it). The files are opened with `O_DIRECT`, so every write and read
/// is a request to the file system, not the page cache. Returns once every
/// writer has completed `rounds` writes, so the writers are known to be
/// running.
pub fn start_writers(mnt: &Path, n: usize, rounds: u64) -> Vec<std::thread::JoinHandle<WriterEnd>> {
    const MIB: usize = 1 << 20;
    let progress: Vec<_> = (0..n).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let writers = (0..n)
        .map(|t| {
            let path = mnt.join(format!("busy-{t}"));
            let f = test_support::open_direct(&path);
            let progress = progress[t].clone();
            std::thread::spawn(move || {
                use std::os::unix::fs::FileExt;
                let chunk = pattern(t as u64, MIB);
                let mut written = 0u64;
                let mut buf = vec![0u8; 4096];
                for i in 0u64.. {
                    let at = (i % 16) * MIB as u64;
                    if let Err(error) = f.write_all_at(&chunk, at) {
                        return WriterEnd { written, error };
                    }
                    written += MIB as u64;
                    progress.store(i + 1, Ordering::Relaxed);
                    if i % 4 == 3 {
                        if let Err(error) = f.read_exact_at(&mut buf, at) {
                            return WriterEnd { written, error };
                        }
                        if buf[..] != chunk[..buf.len()] {
                            let error = io::Error::other(format!(
                                "writer {t}: read back other bytes than it wrote at {at}"
                            ));
                            return WriterEnd { written, error };
                        }
                    }
                }
                unreachable!("a writer ends only on an error")
            })
        })
        .collect::<Vec<_>>();
    let started = std::time::Instant::now();
    while progress.iter().any(|p| p.load(Ordering::Relaxed) < rounds) {
        if let Some(w) = writers.iter().position(|w| w.is_finished()) {
            let end = writers.into_iter().nth(w).unwrap().join();
            panic!("writer {w} ended before the mount went away: {end:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the writers did not get going"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    writers
}

/// Whether `e` says that the connection to the file system is gone (its
/// session stopped, its daemon died): `ENOTCONN` (unmounted),
/// `ECONNABORTED` (the connection ended) or `ECANCELED` (a request queued
/// on a ring that the kernel tore down; seen on 6.18).
pub fn connection_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ECONNABORTED) | Some(libc::ECANCELED)
    )
}

/// Joins writers of [`start_writers`] once the mount went away under them
/// (within `limit`: a writer that hangs fails the test), and checks that
/// each was still writing when it did and then stopped because the
/// connection was gone, not because of bad data or another error.
pub fn writers_stopped_by_the_end_of_the_connection(
    writers: Vec<std::thread::JoinHandle<WriterEnd>>,
    limit: Duration,
) {
    let ends = within(limit, "writers to notice", move || {
        writers
            .into_iter()
            .map(|w| w.join().expect("writer panicked"))
            .collect::<Vec<_>>()
    });
    eprintln!("writers: {ends:?}");
    for (t, end) in ends.iter().enumerate() {
        assert!(
            connection_gone(&end.error),
            "writer {t} stopped after {} bytes with {}, not because the connection was gone",
            end.written,
            end.error
        );
    }
}

/// Fails unless every writer of [`start_writers`] is still running: none
/// ended (with an error) while the mount was there.
pub fn assert_all_writing(writers: &[std::thread::JoinHandle<WriterEnd>]) {
    for (t, w) in writers.iter().enumerate() {
        assert!(
            !w.is_finished(),
            "writer {t} stopped before the mount went away"
        );
    }
}

/// Four writers whose files under `mnt` are opened before a lazy unmount
/// (`umount -l`) and used after it: each writes 4 MiB (pattern `seed + t`)
/// in 1 MiB pieces, the last three after the unmount, then reads it all
/// back. Files opened before the unmount keep the connection, so every
/// write and read must work; a writer that fails panics the caller.
pub fn writers_across_a_lazy_unmount(mnt: &Path, seed: u64) {
    use std::os::unix::fs::FileExt;
    const MIB: usize = 1 << 20;
    let files: Vec<_> = (0..4)
        .map(|t| test_support::create_rw(&mnt.join(format!("lazy-{t}"))))
        .collect();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let writers: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(t, f)| {
            let go_rx = go_rx.clone();
            std::thread::spawn(move || {
                let data = pattern(seed + t as u64, 4 * MIB);
                for (i, part) in data.chunks(MIB).enumerate() {
                    if i == 1 {
                        // Wait until the unmount happened.
                        let _ = go_rx.lock().unwrap().recv();
                    }
                    f.write_all_at(part, (i * MIB) as u64).unwrap();
                }
                let mut back = vec![0u8; data.len()];
                f.read_exact_at(&mut back, 0).unwrap();
                assert!(back == data, "writer {t}: content differs");
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    fuse_transport_dev::unmount_path(mnt, true).expect("umount -l");
    drop(go_tx);
    for w in writers {
        w.join().expect("a writer failed after the lazy unmount");
    }
}
