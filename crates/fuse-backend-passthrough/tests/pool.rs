//! The async serving path's thread pool, against a slow file system
//! underneath: a second FUSE mount (a tiny file system served by
//! `DevSession` in this process) is the SOURCE of the passthrough, and
//! some of its operations wait at gates the test opens. The passthrough is
//! served by a `FuseDevTask` on one tokio thread.
//!
//! - with the pool, reading another file through the mount while a READ
//!   waits below returns at once; without it, it waits for that READ;
//! - LSEEK of a file whose READ waits on the pool doesn't wait for it;
//! - zero-message opens: the handle opened for the inline try is the one
//!   the pool uses (one open below);
//! - requests dropped while their jobs are queued or running (the serving
//!   task dropped, as a takeover would): queued jobs never run, running
//!   LOOKUP, OPEN and CREATE give back their lookup reference and handle.
//!
//! Needs root (CI runs as root); fails with the reason otherwise.

mod async_support;

use async_io::RuntimeType;
use async_support::*;
use fuse_abi::{Attr, FopenFlags, ROOT_ID};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::*;
use fuse_transport_dev::{DevSession, FuseDevTask, SessionConfig, TaskConfig};
use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// How long a gate holds an operation at most (so that a broken test
/// fails instead of hanging).
const GATE_LIMIT: Duration = Duration::from_secs(20);

/// Operations wait here until the test opens the gate.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, usize)>,
    cond: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut s = self.state.lock().unwrap();
        s.1 += 1;
        let deadline = Instant::now() + GATE_LIMIT;
        while !s.0 && Instant::now() < deadline {
            s = self
                .cond
                .wait_timeout(s, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        s.1 -= 1;
    }

    fn open(&self) {
        self.state.lock().unwrap().0 = true;
        self.cond.notify_all();
    }

    fn is_open(&self) -> bool {
        self.state.lock().unwrap().0
    }

    fn waiting(&self) -> usize {
        self.state.lock().unwrap().1
    }
}

const FAST: u64 = 2;
const SLOW: u64 = 3;
const GATED_DIR: u64 = 4;
const HELD: u64 = 5;
const SLOW_OPEN: u64 = 6;
const NEW_DIR: u64 = 7;
const LEN: usize = 256 * 1024;

/// The slow file system underneath: `fast` and `slow` (READ waits at
/// `read_gate`), `gated/held` (LOOKUP waits at `lookup_gate`), `slowopen`
/// (OPEN waits at `open_gate`), and `newdir`, whose CREATE waits at
/// `create_gate` (a creation locks its directory in the kernel: apart, so
/// that it holds up nothing else).
#[derive(Default)]
struct SlowFs {
    read_gate: Gate,
    lookup_gate: Gate,
    open_gate: Gate,
    create_gate: Gate,
    created: Mutex<HashMap<Vec<u8>, u64>>,
    next: AtomicU64,
    lookups: Mutex<HashMap<u64, u64>>,
    opens: Mutex<HashMap<u64, u64>>,
    reads: Mutex<HashMap<u64, u64>>,
}

fn content(ino: u64) -> Vec<u8> {
    pattern(LEN, ino)
}

impl SlowFs {
    fn attr(&self, ino: u64) -> io::Result<Attr> {
        let (mode, size) = match ino {
            ROOT_ID | GATED_DIR | NEW_DIR => (libc::S_IFDIR | 0o755, 0),
            FAST | SLOW | HELD | SLOW_OPEN => (libc::S_IFREG | 0o644, LEN as u64),
            n if n >= 100 && n < self.next.load(Ordering::SeqCst) + 100 => {
                (libc::S_IFREG | 0o644, 0)
            }
            _ => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        Ok(Attr {
            ino,
            mode,
            size,
            nlink: 1,
            blksize: 4096,
            blocks: size / 512,
            ..Attr::default()
        })
    }

    fn entry(&self, ino: u64) -> io::Result<Entry> {
        Ok(Entry {
            nodeid: ino,
            generation: 1,
            attr: self.attr(ino)?,
            attr_timeout: Duration::from_secs(60),
            entry_timeout: Duration::from_secs(60),
        })
    }

    fn count(map: &Mutex<HashMap<u64, u64>>, ino: u64) -> u64 {
        map.lock().unwrap().get(&ino).copied().unwrap_or(0)
    }
}

impl FileSystem for SlowFs {
    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        let ino = match (parent, name.to_bytes()) {
            (ROOT_ID, b"fast") => FAST,
            (ROOT_ID, b"slow") => SLOW,
            (ROOT_ID, b"gated") => GATED_DIR,
            (ROOT_ID, b"slowopen") => SLOW_OPEN,
            (ROOT_ID, b"newdir") => NEW_DIR,
            (GATED_DIR, b"held") => {
                self.lookup_gate.wait();
                HELD
            }
            (NEW_DIR, n) => *self
                .created
                .lock()
                .unwrap()
                .get(n)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?,
            _ => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        *self.lookups.lock().unwrap().entry(ino).or_default() += 1;
        self.entry(ino)
    }

    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(ino)?,
            timeout: Duration::from_secs(60),
        })
    }

    fn open(&self, _ctx: &Context, ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        if ino == SLOW_OPEN {
            self.open_gate.wait();
        }
        *self.opens.lock().unwrap().entry(ino).or_default() += 1;
        Ok(Opened {
            fh: ino,
            flags: FopenFlags::empty(),
            backing_id: 0,
        })
    }

    fn create(
        &self,
        _ctx: &Context,
        parent: u64,
        name: &CStr,
        _args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        if parent != NEW_DIR {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        self.create_gate.wait();
        let ino = 100 + self.next.fetch_add(1, Ordering::SeqCst);
        self.created
            .lock()
            .unwrap()
            .insert(name.to_bytes().to_vec(), ino);
        Ok((
            self.entry(ino)?,
            Opened {
                fh: ino,
                flags: FopenFlags::empty(),
                backing_id: 0,
            },
        ))
    }

    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        *self.reads.lock().unwrap().entry(ino).or_default() += 1;
        if ino == SLOW {
            self.read_gate.wait();
        }
        if ino >= 100 {
            return Ok(());
        }
        let data = content(ino);
        out.write_all(&data[args.range_in(LEN)])
    }

    fn release(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }

    fn flush(&self, _ctx: &Context, _ino: u64, _args: &FlushArgs) -> io::Result<()> {
        Ok(())
    }

    fn opendir(&self, _ctx: &Context, _ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        Ok(Opened::default())
    }

    fn releasedir(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }

    fn statfs(&self, _ctx: &Context, _ino: u64) -> io::Result<fuse_abi::Kstatfs> {
        Ok(fuse_abi::Kstatfs {
            bsize: 4096,
            namelen: 255,
            ..Default::default()
        })
    }
}

/// The slow file system mounted by a `DevSession`.
struct Lower {
    fs: Arc<SlowFs>,
    session: Option<DevSession>,
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl Lower {
    fn new() -> Self {
        require_root();
        let dir = test_support::tmp_dir("pt-pool-");
        let mnt = dir.path().join("lower");
        std::fs::create_dir(&mnt).unwrap();
        let fs = Arc::new(SlowFs::default());
        let session = DevSession::mount(
            Server::new(fs.clone()),
            &mnt,
            &options("lower"),
            SessionConfig::default().threads(4),
        )
        .expect("mounting the slow file system");
        Self {
            fs,
            session: Some(session),
            mnt,
            _dir: dir,
        }
    }

    /// Opens every gate (so nothing below waits any more).
    fn open_gates(&self) {
        for g in [
            &self.fs.read_gate,
            &self.fs.lookup_gate,
            &self.fs.open_gate,
            &self.fs.create_gate,
        ] {
            g.open();
        }
    }

    /// The passthrough of this mount, served by a `FuseDevTask` on tokio.
    fn upper(&self, pool: bool, config: PassthroughConfig) -> AsyncMount {
        let dir = test_support::tmp_dir("pt-pool-up-");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        AsyncMount::over(
            Mode::new(RuntimeType::Tokio, pool, 1),
            config,
            dir,
            self.mnt.clone(),
            mnt,
        )
    }
}

impl Drop for Lower {
    fn drop(&mut self) {
        self.open_gates();
        if let Some(s) = self.session.take() {
            fuse_server::Session::stop(&s);
            let _ = fuse_server::Session::wait(&s);
        }
    }
}

/// The upper passthrough's config: no caching, inodes by descriptor (the
/// slow file system has no file handles).
fn config() -> PassthroughConfig {
    uncached().file_handles(false)
}

/// Starts reading `slow` through the mount on a thread; returns once the
/// READ waits below.
fn start_slow_read(lower: &Lower, upper: &AsyncMount) -> std::thread::JoinHandle<Vec<u8>> {
    let path = upper.m("slow");
    let reader = std::thread::spawn(move || {
        let f = File::open(path).unwrap();
        let mut buf = vec![0u8; 4096];
        f.read_exact_at(&mut buf, 0).unwrap();
        buf
    });
    assert!(
        wait_until(Duration::from_secs(10), || lower.fs.read_gate.waiting() > 0),
        "the READ of `slow` never reached the file system below"
    );
    reader
}

/// Reads `fast` through the mount on a thread; returns its handle.
fn read_fast(upper: &AsyncMount) -> std::thread::JoinHandle<(Vec<u8>, Duration)> {
    let path = upper.m("fast");
    std::thread::spawn(move || {
        let start = Instant::now();
        let data = std::fs::read(path).unwrap();
        (data, start.elapsed())
    })
}

#[test]
fn with_the_pool_a_read_waiting_below_does_not_stall_other_reads() {
    let lower = Lower::new();
    let upper = lower.upper(true, config());
    let slow = start_slow_read(&lower, &upper);
    let fast = read_fast(&upper);
    assert!(
        wait_until(Duration::from_secs(10), || fast.is_finished()),
        "reading `fast` waited for the READ of `slow` below"
    );
    assert!(!lower.fs.read_gate.is_open() && lower.fs.read_gate.waiting() > 0);
    let (data, took) = fast.join().unwrap();
    assert_eq!(data, content(FAST));
    println!("pool on: reading `fast` while a READ of `slow` waits below took {took:?}");
    lower.fs.read_gate.open();
    assert_eq!(slow.join().unwrap(), content(SLOW)[..4096]);
    let s = upper.fs.async_thread_pool_stats();
    assert!(s.pool_reads >= 2 && s.nowait_misses >= 2, "{s:?}");
}

#[test]
fn without_the_pool_a_read_waiting_below_stalls_the_serving_thread() {
    let lower = Lower::new();
    let upper = lower.upper(false, config());
    let slow = start_slow_read(&lower, &upper);
    let fast = read_fast(&upper);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !fast.is_finished(),
        "reading `fast` finished while the only serving thread waited in a READ below"
    );
    let opened = Instant::now();
    lower.fs.read_gate.open();
    assert_eq!(slow.join().unwrap(), content(SLOW)[..4096]);
    let (data, took) = fast.join().unwrap();
    assert_eq!(data, content(FAST));
    println!(
        "pool off: reading `fast` took {took:?}, {:?} of it after the READ below was let go",
        opened.elapsed()
    );
    assert_eq!(upper.fs.async_thread_pool_stats().queued, 0);
}

#[test]
fn lseek_does_not_wait_for_a_pooled_read_of_the_same_file() {
    let lower = Lower::new();
    let upper = lower.upper(true, config());
    let f = Arc::new(File::open(upper.m("slow")).unwrap());
    let reader = {
        let f = f.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            f.read_exact_at(&mut buf, 0).unwrap();
            buf
        })
    };
    assert!(wait_until(Duration::from_secs(10), || lower
        .fs
        .read_gate
        .waiting()
        > 0));
    let seeker = {
        let f = f.clone();
        std::thread::spawn(move || {
            // SAFETY: lseek on an open file.
            let r = unsafe { libc::lseek(f.as_raw_fd(), 4096, libc::SEEK_DATA) };
            (r, io::Error::last_os_error().raw_os_error())
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || seeker.is_finished()),
        "LSEEK waited for the READ of the same file"
    );
    assert!(
        lower.fs.read_gate.waiting() > 0,
        "the READ is still waiting below"
    );
    let (r, errno) = seeker.join().unwrap();
    assert_eq!(r, 4096, "SEEK_DATA: errno {errno:?}");
    lower.fs.read_gate.open();
    assert_eq!(reader.join().unwrap(), content(SLOW)[..4096]);
}

#[test]
fn zero_message_opens_use_one_handle_for_the_inline_try_and_the_pool() {
    let lower = Lower::new();
    lower.fs.read_gate.open();
    let upper = lower.upper(true, config().no_open(true));
    for _ in 0..3 {
        let f = File::open(upper.m("slow")).unwrap();
        let mut buf = vec![0u8; 8192];
        f.read_exact_at(&mut buf, 100_000).unwrap();
        assert_eq!(buf, content(SLOW)[100_000..108_192]);
    }
    let s = upper.fs.async_thread_pool_stats();
    assert!(s.pool_reads >= 1, "{s:?}");
    assert_eq!(
        SlowFs::count(&lower.fs.opens, SLOW),
        1,
        "the backing file was opened more than once"
    );
    assert!(SlowFs::count(&lower.fs.reads, SLOW) >= 1);
}

/// A passthrough served by a `FuseDevTask` on a tokio runtime whose thread
/// can be made to drop the task and the runtime (every request future with
/// them) at any time, as a takeover by another daemon would.
struct Droppable {
    fs: Arc<PassthroughFs>,
    mnt: PathBuf,
    drop_now: Arc<(AtomicBool, Mutex<Option<Waker>>)>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Droppable {
    fn new(lower: &Lower, pool_threads: usize) -> Self {
        let dir = test_support::tmp_dir("pt-pool-drop-");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        // Names and attributes cached: each operation below is one request
        // (no revalidating LOOKUPs of the directories on the way).
        let config = config()
            .entry_timeout(Duration::from_secs(600))
            .attr_timeout(Duration::from_secs(600));
        let fs = Arc::new(PassthroughFs::new(&lower.mnt, config).unwrap());
        fs.set_async_thread_pool_size(pool_threads);
        fs.enable_async_thread_pool(true);
        let drop_now: Arc<(AtomicBool, Mutex<Option<Waker>>)> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let server = Server::new_async(fs.clone());
        let (m, flag) = (mnt.clone(), drop_now.clone());
        let thread = std::thread::spawn(move || {
            let rt = RuntimeType::Tokio.build().unwrap();
            rt.block_on(async {
                let task = FuseDevTask::mount(server, &m, &options("drop"), TaskConfig::default())
                    .unwrap();
                tx.send(()).unwrap();
                let mut run = pin!(task.run());
                poll_fn(|cx| {
                    if flag.0.load(Ordering::SeqCst) {
                        return Poll::Ready(());
                    }
                    *flag.1.lock().unwrap() = Some(cx.waker().clone());
                    if flag.0.load(Ordering::SeqCst) {
                        return Poll::Ready(());
                    }
                    run.as_mut().poll(cx).map(|_| ())
                })
                .await;
            });
            // The run future (task, request tasks, their pool futures) is
            // gone with the block_on; the runtime goes now.
            drop(rt);
        });
        rx.recv_timeout(Duration::from_secs(30)).expect("mounted");
        Self {
            fs,
            mnt,
            drop_now,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Drops the serving task and its runtime without answering anything.
    fn drop_serving(&mut self) {
        self.drop_now.0.store(true, Ordering::SeqCst);
        if let Some(w) = self.drop_now.1.lock().unwrap().take() {
            w.wake();
        }
        let t = self.thread.take().unwrap();
        assert!(wait_until(Duration::from_secs(20), || t.is_finished()));
        t.join().unwrap();
    }
}

impl Drop for Droppable {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.drop_serving();
        }
        if is_mounted(&self.mnt) {
            let _ = fuse_transport_dev::unmount_path(&self.mnt, true);
        }
    }
}

#[test]
fn dropped_requests_cancel_queued_jobs_and_undo_running_ones() {
    let lower = Lower::new();
    // Three pool threads: LOOKUP, OPEN and CREATE run (waiting below), a
    // fourth job waits in the queue.
    let mut up = Droppable::new(&lower, 3);
    // What the kernel holds before: the directory `gated` and `slowopen`.
    std::fs::metadata(up.mnt.join("gated")).unwrap();
    std::fs::metadata(up.mnt.join("slowopen")).unwrap();
    let mut users = Vec::new();
    let spawn = |f: Box<dyn FnOnce() -> io::Result<()> + Send>| std::thread::spawn(f);
    let held = up.mnt.join("gated/held");
    users.push(spawn(Box::new(move || std::fs::metadata(held).map(drop))));
    let slowopen = up.mnt.join("slowopen");
    users.push(spawn(Box::new(move || File::open(slowopen).map(drop))));
    std::fs::metadata(up.mnt.join("newdir")).unwrap();
    let refs0 = up.fs.lookup_refs();
    assert_eq!(up.fs.handle_count(), 0);
    let created = up.mnt.join("newdir/created");
    users.push(spawn(Box::new(move || File::create(created).map(drop))));
    let g = &lower.fs;
    assert!(
        wait_until(Duration::from_secs(10), || g.lookup_gate.waiting() == 1
            && g.open_gate.waiting() == 1
            && g.create_gate.waiting() == 1),
        "LOOKUP, OPEN and CREATE did not all reach the file system below"
    );
    let s1 = up.fs.async_thread_pool_stats();
    // A fourth pooled request (the LOOKUP of `fast`): all three pool
    // threads are busy, it queues.
    let fast = up.mnt.join("fast");
    users.push(spawn(Box::new(move || File::open(fast).map(drop))));
    let fs = up.fs.clone();
    assert!(
        wait_until(Duration::from_secs(10), || fs
            .async_thread_pool_stats()
            .queued
            > s1.queued),
        "{:?}",
        fs.async_thread_pool_stats()
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(up.fs.async_thread_pool_stats().started, s1.started);

    // The takeover: the serving task and every request future go away.
    up.drop_serving();
    let s = up.fs.async_thread_pool_stats();
    assert_eq!(s.cancelled, 1, "the queued job was cancelled: {s:?}");

    // The jobs below finish now; nobody takes their results.
    lower.open_gates();
    assert!(
        wait_until(Duration::from_secs(20), || {
            let s = fs.async_thread_pool_stats();
            s.abandoned == 3 && s.undone == 3
        }),
        "{:?}",
        fs.async_thread_pool_stats()
    );
    let s = up.fs.async_thread_pool_stats();
    assert_eq!(s.started, s1.started, "the cancelled job never ran: {s:?}");
    assert_eq!(
        up.fs.lookup_refs(),
        refs0,
        "a lookup reference of a dropped request was kept"
    );
    assert_eq!(
        up.fs.handle_count(),
        0,
        "a handle of a dropped request was kept"
    );
    // The cancelled LOOKUP of `fast` never reached the file system below.
    assert_eq!(SlowFs::count(&lower.fs.lookups, FAST), 0);
    // The callers see the connection end.
    for u in users {
        assert!(wait_until(Duration::from_secs(20), || u.is_finished()));
        assert!(u.join().unwrap().is_err());
    }
}
