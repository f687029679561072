//! POSIX (fcntl) and BSD (flock) locks through the mount: contention
//! between processes, blocking waits released by another process,
//! interrupted waits, and release on close. Needs root (CI runs as root).
//!
//! A blocking wait is checked by the order of events, never by elapsed
//! time: the waiter's request is seen blocked on the holder's lock (the
//! daemon's wait on the backing file is listed in `/proc/locks` as blocked),
//! and the waiter gets the lock only after the holder released it.

mod common;

use common::*;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a test waits for something that must happen (a lock wait to
/// show up, a lock to go away): only a broken mount takes this long, so it
/// is generous for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn flock_struct(ty: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: plain data, all-zero is valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

fn fcntl_lock(fd: i32, cmd: i32, fl: &mut libc::flock) -> i32 {
    // SAFETY: valid fd and flock struct.
    if unsafe { libc::fcntl(fd, cmd, fl as *mut libc::flock) } == 0 {
        0
    } else {
        last_errno()
    }
}

/// A mount whose source holds the one-byte file `f`, the file the tests
/// lock.
fn mount_with_f() -> TestMount {
    let t = TestMount::new();
    std::fs::write(t.m("f"), b"x").unwrap();
    t
}

/// A set command (`F_SETLK`, `F_OFD_SETLKW`, ...) for a lock of type `ty`
/// on `len` bytes from `start` (0: to the end): 0 or the errno.
fn set_lock(fd: i32, cmd: i32, ty: i32, start: i64, len: i64) -> i32 {
    fcntl_lock(fd, cmd, &mut flock_struct(ty, start, len))
}

/// A get command (`F_GETLK`, `F_OFD_GETLK`) for a lock of type `ty` on
/// `len` bytes from `start`: the lock in the way, or `F_UNLCK` as its type.
fn get_lock(fd: i32, cmd: i32, ty: i32, start: i64, len: i64) -> libc::flock {
    let mut q = flock_struct(ty, start, len);
    assert_eq!(fcntl_lock(fd, cmd, &mut q), 0);
    q
}

/// Another process holding a write lock on a file through the mount: this
/// test binary run again as [`lock_holder_helper`]. (Not a plain fork:
/// a forked child would keep copies of every mount's /dev/fuse
/// descriptors of this process, which is also the daemon.)
struct LockHolder {
    pid: libc::pid_t,
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl LockHolder {
    fn spawn(path: &Path, start: i64, len: i64, use_flock: bool) -> Self {
        use std::io::BufRead;
        let mut child = test_support::command(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lock_holder_helper",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PT_LOCK_HOLDER", path)
            .env(
                "PT_LOCK_RANGE",
                format!("{start} {len} {}", use_flock as u8),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "lock holder failed to lock"
            );
            if line.trim_end().ends_with("locked") {
                break;
            }
        }
        Self {
            pid: child.id() as libc::pid_t,
            child,
            out,
        }
    }

    /// Tells the holder to close the file and exit; waits for it.
    fn release(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        assert!(self.child.wait().unwrap().success(), "lock holder: {rest}");
    }
}

/// Opens `path` for reading and writing.
fn open_rw(path: impl AsRef<Path>) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// The lock holder's side of [`LockHolder`]; does nothing in a normal run.
#[test]
#[ignore = "helper process of the lock tests"]
fn lock_holder_helper() {
    let Some(path) = std::env::var_os("PT_LOCK_HOLDER") else {
        return;
    };
    let range = std::env::var("PT_LOCK_RANGE").unwrap();
    let v: Vec<i64> = range.split(' ').map(|x| x.parse().unwrap()).collect();
    let f = open_rw(path);
    if v[2] == 1 {
        assert_eq!(
            // SAFETY: the descriptor belongs to a File that is open across the call;
            // no pointers are passed.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
    } else {
        assert_eq!(
            set_lock(f.as_raw_fd(), libc::F_SETLK, libc::F_WRLCK, v[0], v[1]),
            0
        );
    }
    println!("locked");
    let mut buf = [0u8; 1];
    // Wait until the parent closes our stdin.
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut buf);
    drop(f);
}

/// How many locks of `kind` (POSIX, OFDLCK, FLOCK) /proc/locks lists as
/// held on the backing file's inode.
fn proc_locks_on(path: &Path, kind: &str) -> usize {
    proc_locks(path, kind, false)
}

/// How many requests for a lock of `kind` /proc/locks lists as blocked on
/// a lock of the backing file's inode (its `->` lines).
fn proc_locks_blocked_on(path: &Path, kind: &str) -> usize {
    proc_locks(path, kind, true)
}

/// Lines of /proc/locks for `kind` on the inode of `path`: `N: KIND ...
/// DEV:INO START END` for held locks, `N: -> KIND ...` for blocked waits.
///
/// The kernel hands /proc/locks out a page per read(2), finding where it
/// left off by position: a lock of another process (another test of this
/// binary) released between two reads shifts the list, and the line after
/// it is skipped. So the file is read until two readings agree.
fn proc_locks(path: &Path, kind: &str, blocked: bool) -> usize {
    let ino = std::fs::metadata(path).unwrap().ino().to_string();
    let mut last = proc_locks_once(&ino, kind, blocked);
    for _ in 0..1000 {
        let now = proc_locks_once(&ino, kind, blocked);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("/proc/locks never read the same twice for inode {ino}")
}

/// One reading of [`proc_locks`].
fn proc_locks_once(ino: &str, kind: &str, blocked: bool) -> usize {
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    locks
        .lines()
        .filter(|l| {
            let mut f: Vec<&str> = l.split_whitespace().collect();
            let is_blocked = f.get(1) == Some(&"->");
            if is_blocked {
                f.remove(1);
            }
            is_blocked == blocked
                && f.len() > 5
                && f[1] == kind
                && f[5].rsplit(':').next() == Some(ino)
        })
        .count()
}

/// Waits until `waiter` is blocked in the backing file's lock queue (the
/// daemon waits there for it), failing if it returns first: a blocking
/// request that does not block is an error, whatever it returned.
fn wait_until_blocked<T: std::fmt::Debug>(waiter: &JoinHandle<T>, path: &Path, kind: &str) {
    let blocked = wait_until(PATIENCE, || {
        waiter.is_finished() || proc_locks_blocked_on(path, kind) == 1
    });
    assert!(
        !waiter.is_finished(),
        "the blocking {kind} request returned while another process held a conflicting lock"
    );
    assert!(
        blocked,
        "the blocking {kind} request never showed up in /proc/locks as waiting: {}",
        std::fs::read_to_string("/proc/locks").unwrap()
    );
}

/// Runs `take`, a blocking lock call (`what`, seen in /proc/locks as
/// `kind`), on a thread while `holder` holds a conflicting lock: it waits
/// on the holder's lock, and gets the lock (returns 0) only after the
/// holder released it (a flag set just before the release, read by the
/// waiter once it has the lock).
fn waits_until_released(
    holder: LockHolder,
    path: &Path,
    kind: &str,
    what: &str,
    take: impl FnOnce() -> i32 + Send + 'static,
) {
    let released = Arc::new(AtomicBool::new(false));
    let seen = released.clone();
    let waiter = std::thread::spawn(move || {
        let r = take();
        (r, seen.load(Ordering::SeqCst))
    });
    wait_until_blocked(&waiter, path, kind);
    released.store(true, Ordering::SeqCst);
    holder.release();
    let (r, after_release) = waiter.join().unwrap();
    assert_eq!(r, 0, "{what} after the holder released");
    assert!(
        after_release,
        "{what} got the lock before the holder released it"
    );
}

#[test]
fn posix_locks_contended_and_setlkw_released_by_another_process() {
    let t = TestMount::new();
    std::fs::write(t.m("f"), vec![0u8; 1000]).unwrap();
    let f = open_rw(t.m("f"));
    let fd = f.as_raw_fd();
    // No lock yet.
    let q = get_lock(fd, libc::F_GETLK, libc::F_WRLCK, 0, 0);
    assert_eq!(q.l_type as i32, libc::F_UNLCK);

    let holder = LockHolder::spawn(&t.m("f"), 0, 100, false);
    // The lock is an OFD lock on the backing file.
    assert_eq!(proc_locks_on(&t.s("f"), "OFDLCK"), 1);
    let q = get_lock(fd, libc::F_GETLK, libc::F_RDLCK, 10, 5);
    assert_eq!(q.l_type as i32, libc::F_WRLCK);
    assert_eq!((q.l_start, q.l_len), (0, 100));
    assert_eq!(q.l_pid, holder.pid, "GETLK names the holder");
    let e = set_lock(fd, libc::F_SETLK, libc::F_WRLCK, 50, 10);
    assert!(e == libc::EAGAIN || e == libc::EACCES, "F_SETLK: {e}");
    // A range nobody holds.
    assert_eq!(set_lock(fd, libc::F_SETLK, libc::F_WRLCK, 200, 100), 0);
    // Processes using the backing file directly see our lock too.
    let b = open_rw(t.s("f"));
    let q = get_lock(b.as_raw_fd(), libc::F_OFD_GETLK, libc::F_WRLCK, 250, 1);
    assert_eq!(q.l_type as i32, libc::F_WRLCK);

    // A blocking wait, which waits for the holder.
    waits_until_released(holder, &t.s("f"), "OFDLCK", "F_SETLKW", move || {
        set_lock(fd, libc::F_SETLKW, libc::F_WRLCK, 50, 10)
    });
    let q = get_lock(b.as_raw_fd(), libc::F_OFD_GETLK, libc::F_WRLCK, 0, 0);
    assert_eq!(
        q.l_type as i32,
        libc::F_WRLCK,
        "we hold [50,60) and [200,300)"
    );
    // Unlock one range explicitly.
    assert_eq!(set_lock(fd, libc::F_SETLK, libc::F_UNLCK, 200, 100), 0);
    let q = get_lock(b.as_raw_fd(), libc::F_OFD_GETLK, libc::F_WRLCK, 200, 100);
    assert_eq!(q.l_type as i32, libc::F_UNLCK);
    // Closing the file releases the rest (FLUSH drops the owner's locks).
    drop(f);
    assert!(wait_until(PATIENCE, || proc_locks_on(&t.s("f"), "OFDLCK") == 0));
    assert!(t.count(fuse_abi::Opcode::Setlkw) >= 1);
    assert!(t.count(fuse_abi::Opcode::Getlk) >= 1);
}

#[test]
fn closing_any_descriptor_releases_posix_locks() {
    let t = mount_with_f();
    let f1 = open_rw(t.m("f"));
    assert_eq!(
        set_lock(f1.as_raw_fd(), libc::F_SETLK, libc::F_WRLCK, 0, 0),
        0
    );
    // Our own second descriptor does not conflict with our lock (one owner).
    let f2 = File::open(t.m("f")).unwrap();
    assert_eq!(
        set_lock(f2.as_raw_fd(), libc::F_SETLK, libc::F_RDLCK, 0, 0),
        0
    );
    assert_eq!(proc_locks_on(&t.s("f"), "OFDLCK"), 1);
    // POSIX: closing any descriptor of the file drops the process's locks.
    drop(f2);
    assert!(wait_until(PATIENCE, || proc_locks_on(&t.s("f"), "OFDLCK") == 0));
    drop(f1);
}

/// An OFD lock belongs to its open file: closing a duplicate keeps it,
/// closing the open file's last descriptor releases it (the kernel sends
/// no unlock for that, only the RELEASE). Before, the lock outlived the
/// file and every later F_OFD_SETLKW on the range waited forever (xfstests
/// generic/478 hung).
#[test]
fn closing_an_open_file_releases_its_ofd_locks() {
    let t = mount_with_f();
    let f1 = open_rw(t.m("f"));
    assert_eq!(
        set_lock(f1.as_raw_fd(), libc::F_OFD_SETLK, libc::F_WRLCK, 0, 10),
        0
    );
    // A duplicate's close leaves the lock: another open file conflicts.
    drop(f1.try_clone().unwrap());
    let f2 = open_rw(t.m("f"));
    assert_eq!(
        set_lock(f2.as_raw_fd(), libc::F_OFD_SETLK, libc::F_WRLCK, 0, 10),
        libc::EAGAIN
    );
    // The open file's last close releases it.
    drop(f1);
    assert!(wait_until(PATIENCE, || {
        set_lock(f2.as_raw_fd(), libc::F_OFD_SETLK, libc::F_WRLCK, 0, 10) == 0
    }));
    assert_eq!(proc_locks_on(&t.s("f"), "OFDLCK"), 1);
}

#[test]
fn flock_contended_and_released() {
    let t = mount_with_f();
    let holder = LockHolder::spawn(&t.m("f"), 0, 0, true);
    assert_eq!(proc_locks_on(&t.s("f"), "FLOCK"), 1);
    let f = File::open(t.m("f")).unwrap();
    let fd = f.as_raw_fd();
    assert_eq!(
        // SAFETY: the descriptor belongs to a File that is open across the call;
        // no pointers are passed.
        unsafe { libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) },
        -1
    );
    assert_eq!(last_errno(), libc::EWOULDBLOCK);
    // It waits on the holder's lock and gets it only after the release.
    waits_until_released(holder, &t.s("f"), "FLOCK", "flock(LOCK_EX)", move || {
        // SAFETY: valid fd.
        unsafe { libc::flock(fd, libc::LOCK_EX) }
    });
    // Our lock is now on the backing file.
    let b = File::open(t.s("f")).unwrap();
    assert_eq!(
        // SAFETY: the descriptor belongs to a File that is open across the call;
        // no pointers are passed.
        unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        -1
    );
    // SAFETY: valid fd.
    assert_eq!(unsafe { libc::flock(fd, libc::LOCK_UN) }, 0);
    assert_eq!(
        // SAFETY: the descriptor belongs to a File that is open across the call;
        // no pointers are passed.
        unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    assert!(t.count(fuse_abi::Opcode::Setlk) + t.count(fuse_abi::Opcode::Setlkw) >= 2);
}

#[test]
fn setlkw_interrupted_by_a_signal() {
    let t = mount_with_f();
    let holder = LockHolder::spawn(&t.m("f"), 0, 0, false);
    fuse_server::sys::install_interrupting_handler(libc::SIGUSR1).unwrap();
    let path = CString::new(t.m("f").as_os_str().as_encoded_bytes()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // SAFETY: valid path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
        assert!(fd >= 0);
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        let r = set_lock(fd, libc::F_SETLKW, libc::F_WRLCK, 0, 0);
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
        r
    });
    let thread = rx.recv().unwrap();
    wait_until_blocked(&waiter, &t.s("f"), "OFDLCK");
    // The kernel turns the signal into INTERRUPT; the daemon ends the wait.
    // Sent until the waiter returns (a signal that comes before the request
    // reached the daemon may only restart it).
    let ended = wait_until(PATIENCE, || {
        if !waiter.is_finished() {
            // SAFETY: the thread is alive until it finishes (checked here).
            unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
        }
        waiter.is_finished()
    });
    assert!(ended, "SIGUSR1 did not end the F_SETLKW wait");
    assert_eq!(waiter.join().unwrap(), libc::EINTR);
    assert!(t.count(fuse_abi::Opcode::Interrupt) >= 1);
    // The wait is gone from the backing file's queue, and the holder's
    // lock is still the only one.
    assert!(wait_until(PATIENCE, || proc_locks_blocked_on(
        &t.s("f"),
        "OFDLCK"
    ) == 0));
    assert_eq!(proc_locks_on(&t.s("f"), "OFDLCK"), 1);
    holder.release();
    // The interrupted waiter got no lock.
    assert!(wait_until(PATIENCE, || proc_locks_on(&t.s("f"), "OFDLCK") == 0));
}
