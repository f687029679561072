//! The examples (`examples/hello.rs`, `examples/memfs.rs`) mounted for
//! real and used through the kernel: hello.txt's contents, attributes and
//! listing; a memfs workload (files, O_APPEND, holes, directories, hard
//! links, symlinks, renames with and without flags, xattrs, special
//! files, unlink and rmdir) checked call by call, with link counts and
//! times, and at the end memfs's own count of nodes back to the root once
//! the kernel forgot everything; and `serve_until_signal` stopping on
//! SIGTERM, and leaving a SIGINT ignored at start ignored (as the
//! examples' `--help` says). The examples' file systems are compiled in from their files,
//! so what is tested is what a reader copies. Needs root (CI runs as
//! root).
//!
//! Every mount is a `DevSession`, whose drop stops it and unmounts (lazily
//! if busy), also when an assertion fails half-way; the files a test
//! opens are declared after it, so they are closed first.

#[path = "../examples/hello.rs"]
#[allow(dead_code)]
mod hello;
#[path = "../examples/memfs.rs"]
#[allow(dead_code)]
mod memfs;

mod common;

use common::require_root;
use fuse_server::Session;
use fuse_transport_dev::DevSession;
use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use test_support::errno_of;

/// How long the kernel may take to send what a test waits for (FORGETs,
/// a signal's stop): only a broken mount takes this long.
const DEADLINE: Duration = Duration::from_secs(60);

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// A libc call's result as an `io::Result`.
fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Ends a session and checks it is gone.
fn finish(session: DevSession, dir: &Path) {
    session.stop();
    session.wait().unwrap();
    assert!(!fuse_transport_dev::is_fuse_mount(dir).unwrap());
}

#[test]
fn hello_serves_its_file() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let session = hello::mount(dir.path()).unwrap();
    let mnt = session.mountpoint().to_path_buf();
    let file = mnt.join(hello::NAME);

    assert_eq!(fs::read(&file).unwrap(), hello::CONTENT);
    let meta = fs::metadata(&file).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), hello::CONTENT.len() as u64);
    assert_eq!(meta.permissions().mode() & 0o7777, 0o444);
    assert_eq!((meta.ino(), meta.nlink(), meta.uid()), (2, 1, 0));
    let root = fs::metadata(&mnt).unwrap();
    assert!(root.is_dir());
    assert_eq!(root.permissions().mode() & 0o7777, 0o555);
    assert_eq!(root.ino(), 1);

    // A read in the middle, and one past the end.
    let f = File::open(&file).unwrap();
    let mut buf = [0u8; 5];
    assert_eq!(f.read_at(&mut buf, 7).unwrap(), 5);
    assert_eq!(&buf, b"world");
    assert_eq!(f.read_at(&mut buf, 100).unwrap(), 0);
    drop(f);

    let names: Vec<_> = fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [hello::NAME]);
    assert_eq!(errno_of(fs::metadata(mnt.join("nope"))), libc::ENOENT);
    // Mounted read-only: the kernel refuses writes and new names.
    let write = OpenOptions::new().write(true).open(&file);
    assert_eq!(errno_of(write), libc::EROFS);
    assert_eq!(errno_of(fs::create_dir(mnt.join("d"))), libc::EROFS);
    finish(session, dir.path());
}

/// Whether this process has a handler for `signal` (not the default).
fn has_handler(signal: libc::c_int) -> bool {
    // SAFETY: a zeroed sigaction is valid; only the old action is read.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction != libc::SIG_DFL
    }
}

/// The tests that signal this process take turns: `serve_until_signal`
/// serves one call at a time, and one test's SIGTERM must not stop
/// another's session.
static SIGNAL_TESTS: Mutex<()> = Mutex::new(());

#[test]
fn serve_until_signal_stops_on_sigterm() {
    require_root();
    let _turn = SIGNAL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let session = hello::mount(dir.path()).unwrap();
    assert!(!has_handler(libc::SIGTERM), "SIGTERM is handled already");
    let (handled, result) = std::thread::scope(|scope| {
        let serving = scope.spawn(|| fuse_transport_dev::serve_until_signal(&session));
        let deadline = Instant::now() + DEADLINE;
        while !has_handler(libc::SIGTERM) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let handled = has_handler(libc::SIGTERM);
        if handled {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        } else {
            session.stop(); // or the thread would serve forever
        }
        (handled, serving.join().unwrap())
    });
    assert!(handled, "serve_until_signal installed no SIGTERM handler");
    result.unwrap();
    assert!(session.server().is_destroyed());
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
    assert!(!has_handler(libc::SIGTERM), "the handler was not restored");
    finish(session, dir.path());
}

/// This process's disposition of `signal`.
fn disposition(signal: libc::c_int) -> libc::sighandler_t {
    // SAFETY: a zeroed sigaction is valid; only the old action is read.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(signal, std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

/// Puts a signal's earlier disposition back on drop.
struct RestoreSignal(libc::c_int, libc::sighandler_t);

impl Drop for RestoreSignal {
    fn drop(&mut self) {
        // SAFETY: puts back the disposition read before (SIG_DFL here).
        unsafe { libc::signal(self.0, self.1) };
    }
}

/// What the examples' `--help` says about a SIGINT ignored at start (a
/// script's `example MOUNTPOINT &`) holds: `serve_until_signal` leaves it
/// ignored, so Ctrl-C doesn't stop the example, and SIGTERM still does.
#[test]
fn an_ignored_sigint_stays_ignored_as_the_examples_help_says() {
    for help in [hello::HELP, memfs::HELP] {
        for want in ["SIGINT", "SIGTERM", "stays ignored", "kill (SIGTERM)"] {
            assert!(help.contains(want), "{want:?} is not in:\n{help}");
        }
        assert!(help.lines().all(|l| l.len() <= 80), "{help}");
    }
    require_root();
    let _turn = SIGNAL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let session = hello::mount(dir.path()).unwrap();
    let mnt = session.mountpoint().to_path_buf();
    // SAFETY: sets SIGINT's disposition to ignore; restored on drop.
    let _restore = RestoreSignal(libc::SIGINT, unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN)
    });
    let (handled, sigint, read, result) = std::thread::scope(|scope| {
        let serving = scope.spawn(|| fuse_transport_dev::serve_until_signal(&session));
        let deadline = Instant::now() + DEADLINE;
        while !has_handler(libc::SIGTERM) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let handled = has_handler(libc::SIGTERM);
        let sigint = disposition(libc::SIGINT);
        let mut read = None;
        if handled {
            // SAFETY: kill has no memory-safety preconditions. An ignored
            // signal is discarded when sent.
            unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
            read = Some(fs::read(mnt.join(hello::NAME)));
            // SAFETY: as above; this one stops the session.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        } else {
            session.stop(); // or the thread would serve forever
        }
        (handled, sigint, read, serving.join().unwrap())
    });
    assert!(handled, "serve_until_signal installed no SIGTERM handler");
    assert_eq!(sigint, libc::SIG_IGN, "SIGINT got a handler");
    assert_eq!(
        read.unwrap().unwrap(),
        hello::CONTENT,
        "still serving after SIGINT"
    );
    result.unwrap();
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
    finish(session, dir.path());
}

/// A memfs mount and the file system behind it.
struct MemMount {
    fs: Arc<memfs::MemFs>,
    session: DevSession,
    mnt: PathBuf,
}

/// Fails the test unless we are root; then memfs mounted on a fresh
/// temporary directory (the mount, dropped first, before the directory).
fn memfs_as_root() -> (tempfile::TempDir, MemMount) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let m = MemMount::new(dir.path());
    (dir, m)
}

impl MemMount {
    fn new(dir: &Path) -> Self {
        let fs = Arc::new(memfs::MemFs::new(0, 0));
        let session = memfs::mount(fs.clone(), dir).unwrap();
        let mnt = session.mountpoint().to_path_buf();
        Self { fs, session, mnt }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }

    /// Waits until memfs holds only the root: every name removed, and
    /// every reference the kernel had forgotten (it evicts a node without
    /// links once nothing uses it, and sends a FORGET for it).
    fn wait_for_only_the_root(&self) {
        let deadline = Instant::now() + DEADLINE;
        while self.fs.node_count() > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            self.fs.node_count(),
            1,
            "nodes left after everything was removed and forgotten"
        );
    }
}

/// Sleeps a little, so that times set after it differ from those before
/// (they have nanoseconds; this only makes the difference plain).
fn nap() {
    std::thread::sleep(Duration::from_millis(10));
}

fn ctime(path: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(path).unwrap();
    (m.ctime(), m.ctime_nsec())
}

fn mtime(path: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(path).unwrap();
    (m.mtime(), m.mtime_nsec())
}

#[test]
fn memfs_files_append_truncate_and_holes() {
    let (dir, m) = memfs_as_root();
    let a = m.path("a");

    let root_mtime = mtime(&m.mnt);
    nap();
    let mut f = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o640)
        .open(&a)
        .unwrap();
    f.write_all(b"hello").unwrap();
    drop(f);
    assert!(mtime(&m.mnt) > root_mtime, "creating a name sets the mtime");
    assert_eq!(fs::read(&a).unwrap(), b"hello");
    let meta = fs::metadata(&a).unwrap();
    assert_eq!(meta.len(), 5);
    assert_eq!(meta.nlink(), 1);
    assert_eq!(meta.permissions().mode() & 0o777, 0o640 & !umask());
    let exists = OpenOptions::new().create_new(true).write(true).open(&a);
    assert_eq!(errno_of(exists), libc::EEXIST);

    // O_APPEND goes to the end, even with an offset (Linux's pwrite).
    let f = OpenOptions::new().append(true).open(&a).unwrap();
    (&f).write_all(b", world").unwrap();
    f.write_at(b"!", 0).unwrap();
    drop(f);
    assert_eq!(fs::read(&a).unwrap(), b"hello, world!");

    // Writing in place, and truncating both ways.
    let f = OpenOptions::new().write(true).open(&a).unwrap();
    f.write_at(b"J", 0).unwrap();
    let (before_c, before_m) = (ctime(&a), mtime(&a));
    nap();
    f.set_len(5).unwrap();
    assert!(ctime(&a) > before_c && mtime(&a) > before_m);
    f.set_len(8).unwrap();
    drop(f);
    assert_eq!(fs::read(&a).unwrap(), b"Jello\0\0\0");

    // A hole of 3 GiB takes no memory: one page at the end does.
    let sparse = m.path("sparse");
    let f = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&sparse)
        .unwrap();
    let far = 3 << 30;
    f.write_at(b"end", far).unwrap();
    let meta = fs::metadata(&sparse).unwrap();
    assert_eq!(meta.len(), far + 3);
    assert_eq!(meta.blocks(), 8, "one 4 KiB page");
    let mut buf = [1u8; 8];
    assert_eq!(f.read_at(&mut buf, far - 5).unwrap(), 8);
    assert_eq!(&buf, b"\0\0\0\0\0end");
    // Shrinking into the page zeroes what was past the new end.
    f.set_len(far + 1).unwrap();
    f.set_len(far + 3).unwrap();
    assert_eq!(f.read_at(&mut buf[..3], far).unwrap(), 3);
    assert_eq!(&buf[..3], b"e\0\0");
    drop(f);

    // statfs counts pages in use against the capacity.
    let st = statvfs(&m.mnt);
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_blocks * 4096, memfs::CAPACITY);
    assert_eq!(st.f_blocks - st.f_bfree, 2, "a's page and sparse's");
    assert_eq!(st.f_namemax, 255);
    let long = m.path(&"x".repeat(256));
    assert_eq!(errno_of(File::create(long)), libc::ENAMETOOLONG);

    fs::remove_file(&a).unwrap();
    fs::remove_file(&sparse).unwrap();
    assert_eq!(errno_of(fs::metadata(&a)), libc::ENOENT);
    m.wait_for_only_the_root();
    assert_eq!(statvfs(&m.mnt).f_bfree, statvfs(&m.mnt).f_blocks);
    finish(m.session, dir.path());
}

/// This process's umask (read, not set: other tests create files now).
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .unwrap();
    u32::from_str_radix(line.trim(), 8).unwrap()
}

fn statvfs(path: &Path) -> libc::statvfs {
    // SAFETY: a zeroed statvfs is valid; the path is NUL-terminated.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        check(libc::statvfs(cpath(path).as_ptr(), &mut st)).unwrap();
        st
    }
}

#[test]
fn memfs_directories_links_symlinks_and_renames() {
    let (dir, m) = memfs_as_root();
    let (a, d) = (m.path("a"), m.path("d"));
    fs::write(&a, b"data").unwrap();

    // Directories count their subdirectories' `..` links.
    fs::create_dir(&d).unwrap();
    assert_eq!(fs::metadata(&m.mnt).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 2);

    // A hard link: one node, two names, and changes seen through both.
    let b = d.join("b");
    let a_ctime = ctime(&a);
    nap();
    fs::hard_link(&a, &b).unwrap();
    let (ma, mb) = (fs::metadata(&a).unwrap(), fs::metadata(&b).unwrap());
    assert_eq!(ma.ino(), mb.ino());
    assert_eq!((ma.nlink(), mb.nlink()), (2, 2));
    assert!(ctime(&a) > a_ctime, "a new link changes the ctime");
    fs::write(&b, b"DATA").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"DATA");
    assert_eq!(errno_of(fs::hard_link(&d, m.path("d2"))), libc::EPERM);

    // A symlink, followed and not.
    let s = m.path("s");
    std::os::unix::fs::symlink("a", &s).unwrap();
    assert_eq!(fs::read_link(&s).unwrap(), Path::new("a"));
    assert_eq!(fs::read(&s).unwrap(), b"DATA");
    let ms = fs::symlink_metadata(&s).unwrap();
    assert!(ms.file_type().is_symlink());
    assert_eq!(ms.len(), 1);

    // rename: the node moves, its ctime and both directories' mtimes change.
    let c = d.join("c");
    let (root_mtime, d_mtime) = (mtime(&m.mnt), mtime(&d));
    let ino = fs::metadata(&a).unwrap().ino();
    let a_ctime = ctime(&a);
    nap();
    fs::rename(&a, &c).unwrap();
    assert_eq!(errno_of(fs::metadata(&a)), libc::ENOENT);
    assert_eq!(fs::metadata(&c).unwrap().ino(), ino);
    assert!(ctime(&c) > a_ctime);
    assert!(mtime(&m.mnt) > root_mtime && mtime(&d) > d_mtime);
    // The symlink now dangles.
    assert_eq!(errno_of(fs::read(&s)), libc::ENOENT);

    // Replacing a name drops the replaced node's link.
    fs::write(m.path("victim"), b"v").unwrap();
    let victim = File::open(m.path("victim")).unwrap();
    fs::rename(&b, m.path("victim")).unwrap();
    assert_eq!(fs::metadata(&c).unwrap().nlink(), 2);
    assert_eq!(victim.metadata().unwrap().nlink(), 0);
    let mut kept = String::new();
    (&victim).read_to_string(&mut kept).unwrap();
    assert_eq!(kept, "v", "an open file outlives its last name");
    drop(victim);

    // RENAME_NOREPLACE and RENAME_EXCHANGE.
    let noreplace = renameat2(&c, &m.path("victim"), libc::RENAME_NOREPLACE);
    assert_eq!(errno_of(noreplace), libc::EEXIST);
    renameat2(&c, &s, libc::RENAME_EXCHANGE).unwrap();
    assert!(fs::symlink_metadata(&c).unwrap().file_type().is_symlink());
    assert_eq!(fs::metadata(&s).unwrap().ino(), ino);

    // A directory moved to another parent takes its `..` link along, and
    // can't move below itself.
    let e = d.join("e");
    fs::create_dir(&e).unwrap();
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 3);
    fs::rename(&e, m.path("e")).unwrap();
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(&m.mnt).unwrap().nlink(), 4);
    assert_eq!(errno_of(fs::rename(&d, d.join("inside"))), libc::EINVAL);
    // Onto a non-empty directory: no; onto an empty one: yes.
    assert_eq!(errno_of(fs::rename(m.path("e"), &d)), libc::ENOTEMPTY);
    fs::rename(&d, m.path("e")).unwrap();
    assert_eq!(fs::metadata(&m.mnt).unwrap().nlink(), 3);

    let names: BTreeSet<_> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["e", "s", "victim"].map(String::from))
    );
    let e = m.path("e");
    let inside: BTreeSet<_> = fs::read_dir(&e)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(inside, BTreeSet::from(["c".to_string()]));

    assert_eq!(errno_of(fs::remove_dir(&e)), libc::ENOTEMPTY);
    assert_eq!(errno_of(fs::remove_file(&e)), libc::EISDIR);
    fs::remove_file(e.join("c")).unwrap();
    fs::remove_dir(&e).unwrap();
    fs::remove_file(&s).unwrap();
    fs::remove_file(m.path("victim")).unwrap();
    assert_eq!(fs::metadata(&m.mnt).unwrap().nlink(), 2);
    m.wait_for_only_the_root();
    finish(m.session, dir.path());
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    test_support::file::renameat2(from, to, flags)
}

#[test]
fn memfs_xattrs_fifos_sockets_and_attributes() {
    let (dir, m) = memfs_as_root();
    let f = m.path("f");
    fs::write(&f, b"").unwrap();

    // Extended attributes.
    let ctime_before = ctime(&f);
    nap();
    setxattr(&f, "user.k", b"v1", 0).unwrap();
    assert!(ctime(&f) > ctime_before, "setxattr changes the ctime");
    assert_eq!(getxattr(&f, "user.k").unwrap(), b"v1");
    setxattr(&f, "user.k", b"value2", libc::XATTR_REPLACE).unwrap();
    setxattr(&f, "user.other", b"", libc::XATTR_CREATE).unwrap();
    assert_eq!(getxattr(&f, "user.k").unwrap(), b"value2");
    let created = setxattr(&f, "user.k", b"x", libc::XATTR_CREATE);
    assert_eq!(errno_of(created), libc::EEXIST);
    let replaced = setxattr(&f, "user.none", b"x", libc::XATTR_REPLACE);
    assert_eq!(errno_of(replaced), libc::ENODATA);
    assert_eq!(listxattr(&f).unwrap(), b"user.k\0user.other\0");
    removexattr(&f, "user.k").unwrap();
    assert_eq!(errno_of(getxattr(&f, "user.k")), libc::ENODATA);
    assert_eq!(errno_of(removexattr(&f, "user.k")), libc::ENODATA);
    assert_eq!(listxattr(&f).unwrap(), b"user.other\0");

    // chmod, chown and utimes: each changes the ctime.
    let ctime_before = ctime(&f);
    nap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4751)).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, 0o4751);
    assert!(ctime(&f) > ctime_before);
    std::os::unix::fs::chown(&f, Some(1), Some(2)).unwrap();
    let meta = fs::metadata(&f).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1, 2));
    assert_eq!(meta.mode() & 0o7777, 0o751, "chown clears set-user-ID");
    let when = SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
    File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_times(fs::FileTimes::new().set_modified(when).set_accessed(when))
        .unwrap();
    let meta = fs::metadata(&f).unwrap();
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (1_000_000_000, 123_456_789)
    );
    assert_eq!(
        (meta.atime(), meta.atime_nsec()),
        (1_000_000_000, 123_456_789)
    );

    // A set-group-ID directory gives its group to what is created in it.
    let g = m.path("g");
    fs::create_dir(&g).unwrap();
    std::os::unix::fs::chown(&g, None, Some(7)).unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o2775)).unwrap();
    fs::create_dir(g.join("sub")).unwrap();
    let sub = fs::metadata(g.join("sub")).unwrap();
    assert_eq!(sub.gid(), 7);
    assert_ne!(
        sub.mode() & 0o2000,
        0,
        "and its set-group-ID bit to directories"
    );

    // A FIFO and a socket.
    let fifo = cpath(&m.path("fifo"));
    // SAFETY: the path is NUL-terminated.
    check(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }).unwrap();
    assert!(fs::metadata(m.path("fifo")).unwrap().file_type().is_fifo());
    let socket = std::os::unix::net::UnixListener::bind(m.path("sock")).unwrap();
    assert!(fs::metadata(m.path("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    drop(socket);
    for name in ["f", "fifo", "sock"] {
        fs::remove_file(m.path(name)).unwrap();
    }
    fs::remove_dir(g.join("sub")).unwrap();
    fs::remove_dir(&g).unwrap();
    m.wait_for_only_the_root();
    finish(m.session, dir.path());
}

/// Device nodes (creating one needs real root: EPERM in a user namespace).
#[test]
fn memfs_device_nodes_needs_root() {
    let (dir, m) = memfs_as_root();
    let dev = cpath(&m.path("null"));
    // SAFETY: the path is NUL-terminated.
    check(unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) })
        .unwrap();
    let meta = fs::metadata(m.path("null")).unwrap();
    assert!(meta.file_type().is_char_device());
    assert_eq!(meta.rdev(), libc::makedev(1, 3));
    let big = cpath(&m.path("big"));
    // The largest device number FUSE can carry: 12 bits of major, 20 of minor.
    let number = libc::makedev(4095, (1 << 20) - 1);
    // SAFETY: the path is NUL-terminated.
    check(unsafe { libc::mknod(big.as_ptr(), libc::S_IFBLK | 0o600, number) }).unwrap();
    assert_eq!(fs::metadata(m.path("big")).unwrap().rdev(), number);

    fs::remove_file(m.path("null")).unwrap();
    fs::remove_file(m.path("big")).unwrap();
    m.wait_for_only_the_root();
    finish(m.session, dir.path());
}

fn setxattr(path: &Path, name: &str, value: &[u8], flags: libc::c_int) -> io::Result<()> {
    let (path, name) = (cpath(path), CString::new(name).unwrap());
    // SAFETY: the strings are NUL-terminated and `value` is valid for its length.
    check(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
}

/// getxattr or listxattr: the size first, then the value.
fn get_sized(get: impl Fn(*mut libc::c_void, usize) -> isize) -> io::Result<Vec<u8>> {
    let size = get(std::ptr::null_mut(), 0);
    if size < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; size as usize];
    if size > 0 {
        // One byte short of it is ERANGE.
        assert_eq!(get(buf.as_mut_ptr().cast(), buf.len() - 1), -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::ERANGE)
        );
    }
    let n = get(buf.as_mut_ptr().cast(), buf.len());
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn getxattr(path: &Path, name: &str) -> io::Result<Vec<u8>> {
    let (path, name) = (cpath(path), CString::new(name).unwrap());
    // SAFETY: the strings are NUL-terminated; `buf` is valid for `len` bytes.
    get_sized(|buf, len| unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf, len) })
}

fn listxattr(path: &Path) -> io::Result<Vec<u8>> {
    let path = cpath(path);
    // SAFETY: the path is NUL-terminated; `buf` is valid for `len` bytes.
    get_sized(|buf, len| unsafe { libc::listxattr(path.as_ptr(), buf.cast(), len) })
}

fn removexattr(path: &Path, name: &str) -> io::Result<()> {
    let (path, name) = (cpath(path), CString::new(name).unwrap());
    // SAFETY: the strings are NUL-terminated.
    check(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) })
}

#[test]
fn memfs_listing_survives_removals_midway() {
    let (dir, m) = memfs_as_root();
    let d = m.path("d");
    fs::create_dir(&d).unwrap();
    // Long names: many READDIR replies, and several getdents calls.
    let names: Vec<String> = (0..1000)
        .map(|i| format!("{i:04}-{}", "n".repeat(100)))
        .collect();
    for name in &names {
        File::create(d.join(name)).unwrap();
    }
    let mut listing = fs::read_dir(&d).unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut removed = BTreeSet::new();
    for _ in 0..100 {
        let name = listing.next().unwrap().unwrap().file_name();
        *seen.entry(name.into_string().unwrap()).or_default() += 1;
    }
    // Remove every third name, seen or not, while the listing is open.
    for name in names.iter().step_by(3) {
        fs::remove_file(d.join(name)).unwrap();
        removed.insert(name.clone());
    }
    for entry in listing {
        *seen
            .entry(entry.unwrap().file_name().into_string().unwrap())
            .or_default() += 1;
    }
    for name in &names {
        let count = seen.get(name).copied().unwrap_or(0);
        // A name removed while the listing ran may or may not be listed;
        // every other name exactly once.
        if removed.contains(name) {
            assert!(count <= 1, "{name} listed {count} times");
        } else {
            assert_eq!(count, 1, "{name} listed {count} times");
        }
    }
    assert!(seen.keys().all(|name| names.contains(name)));
    fs::remove_dir_all(&d).unwrap();
    m.wait_for_only_the_root();
    finish(m.session, dir.path());
}
