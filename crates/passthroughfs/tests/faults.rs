//! Faults the `passthroughfs` daemon survives, each on both transports
//! (`/dev/fuse` and FUSE over io_uring), with the daemon as a child
//! process:
//!
//! - unmounted (`umount`, and `umount -l`) while 4 writers and 4 readers
//!   run: it exits 0 within 5 s, no thread hangs, no ERROR or panic on its
//!   standard error, and every file written and fsynced is intact;
//! - SIGTERM during the same load: the same;
//! - SIGKILL: the dead mount answers ENOTCONN instead of hanging, a new
//!   daemon refuses the dead mountpoint with a message that says what to
//!   do, and `--unmount-dead` recovers it;
//! - SIGKILL, the errors clients get (the kernel's; docs/security.md says
//!   which path gives which): requests waiting in the kernel while the
//!   daemon can't take them (SIGSTOP) get ECONNABORTED on `/dev/fuse` and
//!   ECANCELED over io_uring; clients in loops see only those (and, over
//!   `/dev/fuse`, EIO for a request being copied to the daemon as it died)
//!   until they get ENOTCONN;
//! - the backing tree changed behind the mount (truncated, replaced by
//!   rename, deleted, a directory removed or replaced by a file): the
//!   mount shows the change once the timeouts pass, or a clean error,
//!   never stale data past them, and the daemon keeps serving;
//! - and, not a fault but a refusal: `--allow-other` without
//!   `--default-permissions` is refused with the reason.
//!
//! They need root (mounting); the io_uring runs need
//! `/sys/module/fuse/parameters/enable_uring` = Y. Both fail, never pass,
//! without them.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::{pattern, require_root};
use daemon::*;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Files written and fsynced through the mount: (name, content).
type Synced = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// 4 writers and 4 readers working in `work` (a directory of the mount).
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Option<io::Error>>>,
    synced: Synced,
}

impl Load {
    fn start(work: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let synced: Synced = Arc::default();
        let mut threads = Vec::new();
        for w in 0..4u64 {
            let (stop, synced, work) = (stop.clone(), synced.clone(), work.to_path_buf());
            threads.push(std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    n += 1;
                    let name = format!("w{w}-{n}");
                    let data = pattern(8192 + (n as usize % 5) * 4096, w * 1_000_000 + n);
                    let r = (|| {
                        let mut f = std::fs::File::create(work.join(&name))?;
                        f.write_all(&data)?;
                        f.sync_all()?;
                        Ok::<_, io::Error>(())
                    })();
                    match r {
                        Ok(()) => synced.lock().unwrap().push((name, data)),
                        Err(e) => return Some(e),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                None
            }));
        }
        for r in 0..4usize {
            let (stop, synced, work) = (stop.clone(), synced.clone(), work.to_path_buf());
            threads.push(std::thread::spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::Acquire) {
                    let pick = {
                        let s = synced.lock().unwrap();
                        (!s.is_empty()).then(|| s[i % s.len()].clone())
                    };
                    i += 7;
                    if let Some((name, want)) = pick {
                        let mut got = Vec::new();
                        let r = std::fs::File::open(work.join(&name))
                            .and_then(|mut f| f.read_to_end(&mut got));
                        match r {
                            Ok(_) => assert_eq!(got, want, "{name}: read back differs"),
                            Err(e) => return Some(e),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                None
            }));
        }
        Self {
            stop,
            threads,
            synced,
        }
    }

    /// Stops the clients; each must return within `timeout` (none hangs).
    /// Returns the errors they met.
    fn stop(self, timeout: Duration) -> (Vec<io::Error>, Synced) {
        self.stop.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        let mut errors = Vec::new();
        for t in self.threads {
            while !t.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "a client thread hangs on the mount"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            if let Some(e) = t.join().expect("client thread panicked") {
                errors.push(e);
            }
        }
        (errors, self.synced)
    }
}

/// The files written and fsynced are in the backing directory, intact.
fn assert_synced_intact(src_work: &Path, synced: &Synced) {
    let synced = synced.lock().unwrap();
    assert!(
        synced.len() >= 8,
        "the load wrote only {} files",
        synced.len()
    );
    for (name, data) in synced.iter() {
        let got = std::fs::read(src_work.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == *data, "{name}: fsynced data not intact");
    }
}

/// A clean exit: status 0 within `limit` of `since`, nothing alarming
/// logged.
fn assert_clean_exit(d: Daemon, since: Instant, limit: Duration, what: &str) {
    let (status, stderr, _) = d.wait_exit(Duration::from_secs(20));
    let took = since.elapsed();
    assert!(
        status.success(),
        "{what}: daemon exited with {status}:\n{stderr}"
    );
    assert!(
        took <= limit,
        "{what}: daemon took {took:?} to exit (limit {limit:?}):\n{stderr}"
    );
    let errors = error_lines(&stderr);
    assert!(
        errors.is_empty(),
        "{what}: error noise on stderr: {errors:?}\n{stderr}"
    );
}

/// SIGTERM, then [`assert_clean_exit`] within 5 s of it.
fn stops_cleanly_on_sigterm(daemon: Daemon, what: &str) {
    daemon.signal(libc::SIGTERM);
    assert_clean_exit(daemon, Instant::now(), Duration::from_secs(5), what);
}

fn under_load(transport: Transport, how: &str) {
    require_root();
    let d = dirs();
    let daemon = Daemon::start(&d.src, &d.mnt, transport, &[]);
    std::fs::create_dir(d.mnt.join("work")).unwrap();
    let load = Load::start(&d.mnt.join("work"));
    std::thread::sleep(Duration::from_millis(1500));
    match how {
        "umount" => {
            // A busy mount can't be unmounted: retry until no client has a
            // file open (they pause between files).
            let start = Instant::now();
            loop {
                match fuse_transport_dev::unmount_path(&d.mnt, false) {
                    Ok(()) => break,
                    Err(e) => assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "umount kept failing: {e}"
                    ),
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        "umount -l" => {
            fuse_transport_dev::unmount_path(&d.mnt, true).unwrap();
        }
        "SIGTERM" => {
            daemon.signal(libc::SIGTERM);
        }
        _ => unreachable!(),
    }
    let t0 = Instant::now();
    // Clients now fail (the mount is gone) and stop; none may hang.
    let (_errors, synced) = load.stop(Duration::from_secs(10));
    assert_clean_exit(
        daemon,
        t0,
        Duration::from_secs(5),
        &format!("{transport:?} {how}"),
    );
    assert!(!is_mounted(&d.mnt), "still mounted after {how}");
    assert_synced_intact(&d.src.join("work"), &synced);
}

test_support::test_cases! {
    umount_under_load_dev => under_load(Transport::Dev, "umount");
    umount_under_load_uring => under_load(Transport::Uring, "umount");
    lazy_umount_under_load_dev => under_load(Transport::Dev, "umount -l");
    lazy_umount_under_load_uring => under_load(Transport::Uring, "umount -l");
    sigterm_under_load_dev => under_load(Transport::Dev, "SIGTERM");
    sigterm_under_load_uring => under_load(Transport::Uring, "SIGTERM");
}

/// The daemon started with `flags` over `d`, which must refuse with exit
/// status 1; its standard error.
fn refused_with_status_1(flags: &[&str], d: &Dirs) -> String {
    let out = std::process::Command::new(BIN)
        .args(flags)
        .arg(&d.src)
        .arg(&d.mnt)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

/// `statx(AT_STATX_FORCE_SYNC)`: a stat that always reaches the daemon.
fn forced_stat(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: zeroed `statx` is a valid out-buffer for statx(2).
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `buf` a writable statx
    // buffer, both alive for the call.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_FORCE_SYNC,
            libc::STATX_BASIC_STATS,
            &mut buf,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn sigkill(transport: Transport) {
    require_root();
    let d = dirs();
    let daemon = Daemon::start(&d.src, &d.mnt, transport, &[]);
    std::fs::write(d.mnt.join("f"), b"before the kill").unwrap();
    // A reader keeps requests coming while the daemon dies.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, f) = (stop.clone(), d.mnt.join("f"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if std::fs::read(&f).is_err() {
                    break;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let _guard = daemon.kill();
    stop.store(true, Ordering::Release);
    let r = with_timeout(Duration::from_secs(5), move || reader.join());
    assert!(
        r.is_some(),
        "{transport:?}: a reader hangs on the dead mount"
    );

    // The dead mount answers ENOTCONN, never hangs. (While the kernel
    // still tears down a dead daemon's connection, a request may get
    // ECONNABORTED, or ECANCELED from its rings, instead; it settles to
    // ENOTCONN within moments.)
    // The stat forces a GETATTR: a plain one may be answered from the
    // kernel's attribute cache without asking the daemon, and whether the
    // attributes are still cached then depends on the environment (in a
    // user namespace, with kernel passthrough off, the reader's READs
    // leave them valid).
    let start = Instant::now();
    for what in ["stat", "statfs", "open"] {
        loop {
            let p = d.mnt.join("f");
            let mnt = d.mnt.clone();
            let r = with_timeout(Duration::from_secs(5), move || match what {
                "stat" => forced_stat(&p),
                "statfs" => fuse_transport_dev::is_fuse_mount(&mnt).map(drop),
                _ => std::fs::File::open(&p).map(drop),
            })
            .unwrap_or_else(|| panic!("{transport:?}: {what} hangs on the dead mount"));
            let errno = r.unwrap_err().raw_os_error();
            if errno == Some(libc::ENOTCONN) {
                break;
            }
            assert!(
                matches!(errno, Some(libc::ECONNABORTED | libc::ECANCELED))
                    && start.elapsed() < Duration::from_secs(30),
                "{transport:?}: {what} on the dead mount: {errno:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // A new daemon refuses the dead mountpoint and says what to do.
    let stderr = refused_with_status_1(&[], &d);
    assert!(
        stderr.contains("umount -l") && stderr.contains("--unmount-dead"),
        "the message says how to recover: {stderr}"
    );

    // With --unmount-dead it lazily unmounts the dead mount and serves.
    let daemon = Daemon::start(&d.src, &d.mnt, transport, &["--unmount-dead"]);
    assert!(
        daemon.stderr().contains("dead"),
        "the recovery is logged: {}",
        daemon.stderr()
    );
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"before the kill");
    stops_cleanly_on_sigterm(daemon, "after recovery");
    assert!(!is_mounted(&d.mnt));
}

test_support::test_cases! {
    sigkill_leaves_a_dead_mount_that_can_be_recovered_dev => sigkill(Transport::Dev);
    sigkill_leaves_a_dead_mount_that_can_be_recovered_uring => sigkill(Transport::Uring);
}

/// One request of each kind a client makes, each on a file of its own (no
/// request waits for another's inode lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Lookup,
    Getattr,
    Read,
    Write,
    Mkdir,
    Create,
}

const OPS: [Op; 6] = [
    Op::Lookup,
    Op::Getattr,
    Op::Read,
    Op::Write,
    Op::Mkdir,
    Op::Create,
];

/// Files opened through the mount before the daemon dies (their OPEN
/// answered), for the requests that need an open file.
struct OpFiles {
    read: std::fs::File,
    write: std::fs::File,
    getattr: std::fs::File,
}

/// The daemon's options for [`issue`]: every request reaches the daemon
/// (no kernel passthrough, nothing cached; O_DIRECT reads and writes), and
/// a WRITE is the only request of a write: without extended attributes
/// the kernel stops asking for `security.capability` before each write
/// (`file_remove_privs`) once the first GETXATTR got ENOSYS.
const UNCACHED: &[&str] = &[
    "--no-xattr",
    "--no-passthrough",
    "--attr-timeout",
    "0",
    "--entry-timeout",
    "0",
];

/// Backing files for [`open_op_files`], and a directory for each request
/// on names (a lookup holds its directory's lock shared, a mkdir or create
/// exclusively: in one directory they would wait for each other, not for
/// the daemon).
fn make_op_files(src: &Path) {
    for f in ["r", "w", "g"] {
        std::fs::write(src.join(f), pattern(8192, 7)).unwrap();
    }
    for dir in ["l", "m", "c"] {
        std::fs::create_dir(src.join(dir)).unwrap();
    }
}

fn open_op_files(mnt: &Path) -> OpFiles {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |name: &str, write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_DIRECT)
            .open(mnt.join(name))
            .unwrap()
    };
    let files = OpFiles {
        read: open("r", false),
        write: open("w", true),
        getattr: open("g", false),
    };
    // The first write's GETXATTR gets ENOSYS: the later ones send none.
    assert_eq!(issue(Op::Write, 0, mnt, &files), None);
    files
}

/// Makes request `op` (the `n`th of its kind, for fresh names) through the
/// mount: its errno, or `None` if it succeeded.
fn issue(op: Op, n: usize, mnt: &Path, files: &OpFiles) -> Option<i32> {
    use std::os::unix::fs::FileExt;
    let mut buf = common::Aligned::new(4096);
    match op {
        Op::Lookup => errno_of(std::fs::metadata(mnt.join(format!("l/absent-{n}")))),
        Op::Getattr => errno_of(files.getattr.metadata()),
        Op::Read => errno_of(files.read.read_at(buf.as_mut(), 0)),
        Op::Write => errno_of(files.write.write_at(buf.as_mut(), 0)),
        Op::Mkdir => errno_of(std::fs::create_dir(mnt.join(format!("m/dir-{n}")))),
        Op::Create => errno_of(std::fs::File::create(mnt.join(format!("c/new-{n}")))),
    }
    .filter(|&e| !(op == Op::Lookup && e == libc::ENOENT))
}

/// The errnos a client sees for requests cut off by the daemon's death,
/// besides the ENOTCONN of requests made once the connection is gone:
/// ECONNABORTED for a request the kernel had queued or handed to the daemon
/// when the connection was aborted, on both transports; over /dev/fuse
/// also EIO, for a request the kernel was copying into the daemon's read
/// buffer when the SIGKILL came (`fuse_dev_do_read`: pinning a page of
/// the daemon's buffer that has to be faulted in fails with EINTR once a
/// fatal signal is pending, and a request whose copy failed ends with
/// EIO; a WRITE, whose data spans pages, is the one seen); with io_uring
/// also ECANCELED, for a request the kernel had assigned to a ring entry
/// but whose hand-over to the daemon (task work on the ring) had not run
/// yet: it runs cancelled once the daemon is dead
/// (`fuse_uring_send_in_task`). See docs/security.md, "A daemon that
/// dies".
///
/// Over io_uring also EINTR and EAGAIN: the kernel hands a request to the
/// daemon's ring thread as task work that copies its arguments into the
/// ring entry's buffer, and once that thread has a SIGKILL pending (before
/// it is marked exiting, when the work would be cancelled instead) a copy
/// that has to fault a page in fails with EINTR (EAGAIN where the address
/// space lock is contended), which the request ends with as it is
/// (`fuse_uring_prepare_send`, `fuse_uring_req_end`; found once in a
/// loaded run, by a LOOKUP, whose name is such an argument). Over
/// /dev/fuse the kernel turns copy failures into EIO.
fn cut_off_errnos(transport: Transport) -> &'static [i32] {
    match transport {
        Transport::Dev => &[libc::ECONNABORTED, libc::EIO],
        Transport::Uring => &[
            libc::ECONNABORTED,
            libc::ECANCELED,
            libc::EINTR,
            libc::EAGAIN,
        ],
    }
}

fn name(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string()
}

/// Requests waiting in the kernel while the daemon can't take them
/// (SIGSTOP), then SIGKILL: each gets ECONNABORTED over /dev/fuse (still
/// queued when the connection is aborted) and ECANCELED over io_uring
/// (assigned to a ring entry, its hand-over cancelled with the ring); then
/// every request gets ENOTCONN.
fn requests_waiting_when_the_daemon_dies(transport: Transport) {
    require_root();
    let d = dirs();
    make_op_files(&d.src);
    // Over io_uring, more entries per queue than requests: each request is
    // assigned an entry at once, none waits in the queue for one.
    let entries: &[&str] = match transport {
        Transport::Dev => &[],
        Transport::Uring => &["--uring-entries", "8"],
    };
    let daemon = Daemon::start(&d.src, &d.mnt, transport, &[UNCACHED, entries].concat());
    let files = Arc::new(open_op_files(&d.mnt));
    // The daemon idle, then stopped everywhere: no thread of it can take
    // a request any more.
    let idle = |w: &String| {
        !(w.starts_with("fuse-dev ") || w.starts_with("fuse-uring-"))
            || w.ends_with(" fuse_dev_do_read")
            || w.ends_with(" io_cqring_wait")
    };
    wait_until_or_panic(
        "the daemon to be idle",
        || thread_wchans(daemon.pid()).iter().all(idle),
        || thread_wchans(daemon.pid()),
    );
    daemon.signal(libc::SIGSTOP);
    wait_until_or_panic(
        "the daemon to stop",
        || threads_stopped(daemon.pid()),
        || thread_wchans(daemon.pid()),
    );

    // One client per request, each seen waiting in the kernel.
    let tids = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = OPS
        .iter()
        .map(|&op| {
            let (files, tids, mnt) = (files.clone(), tids.clone(), d.mnt.clone());
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tids.lock().unwrap().push(unsafe { libc::gettid() });
                (op, issue(op, 0, &mnt, &files))
            })
        })
        .collect();
    let me = std::process::id();
    let waiting = || {
        let tids = tids.lock().unwrap();
        tids.len() == OPS.len()
            && tids.iter().all(|tid| {
                // Synchronous requests wait for their answer; O_DIRECT
                // reads and writes for the completion of theirs (sent in
                // the background: FUSE_ASYNC_DIO).
                let w = std::fs::read_to_string(format!("/proc/{me}/task/{tid}/wchan"))
                    .unwrap_or_default();
                w == "request_wait_answer" || w == "fuse_direct_IO"
            })
    };
    let where_ = || {
        let tids = tids.lock().unwrap();
        tids.iter()
            .map(|tid| {
                std::fs::read_to_string(format!("/proc/{me}/task/{tid}/wchan")).unwrap_or_default()
            })
            .collect::<Vec<_>>()
    };
    wait_until_or_panic("every client to wait for the daemon", waiting, where_);
    let _guard = daemon.kill();

    let mut got: Vec<(Op, Option<i32>)> = clients
        .into_iter()
        .map(|c| {
            with_timeout(Duration::from_secs(60), move || c.join().unwrap())
                .expect("a client hangs on the dead mount")
        })
        .collect();
    got.sort();
    let want = match transport {
        Transport::Dev => libc::ECONNABORTED,
        Transport::Uring => libc::ECANCELED,
    };
    let unexpected: Vec<_> = got
        .iter()
        .filter(|(_, e)| *e != Some(want))
        .map(|(op, e)| format!("{op:?}: {}", e.map_or("success".into(), name)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{transport:?}: every request waiting when the daemon died gets {}; these got: {unexpected:?}",
        name(want)
    );

    // From now on (once the kernel has torn the connection down): ENOTCONN.
    for op in OPS {
        let start = Instant::now();
        loop {
            let e = issue(op, 1, &d.mnt, &files);
            if e == Some(libc::ENOTCONN) {
                break;
            }
            assert!(
                e.is_some_and(|e| cut_off_errnos(transport).contains(&e))
                    && start.elapsed() < Duration::from_secs(60),
                "{transport:?}: {op:?} on the dead mount: {e:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

test_support::test_cases! {
    sigkill_requests_waiting_get_econnaborted_dev =>
        requests_waiting_when_the_daemon_dies(Transport::Dev);
    sigkill_requests_waiting_get_ecanceled_uring =>
        requests_waiting_when_the_daemon_dies(Transport::Uring);
}

/// Clients making every kind of request in a loop while the daemon is
/// SIGKILLed: each sees only [`cut_off_errnos`] until it gets ENOTCONN
/// (which every one of them does); the errnos seen are printed.
fn errnos_of_a_daemon_killed_under_load(transport: Transport) {
    require_root();
    let d = dirs();
    make_op_files(&d.src);
    let daemon = Daemon::start(&d.src, &d.mnt, transport, UNCACHED);
    let files = Arc::new(open_op_files(&d.mnt));
    let rounds: Arc<Vec<std::sync::atomic::AtomicUsize>> =
        Arc::new(OPS.iter().map(|_| Default::default()).collect());
    let clients: Vec<_> = OPS
        .iter()
        .enumerate()
        .map(|(i, &op)| {
            let (files, rounds, mnt) = (files.clone(), rounds.clone(), d.mnt.clone());
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                for n in 0.. {
                    match issue(op, n, &mnt, &files) {
                        None => {}
                        Some(libc::ENOTCONN) => break,
                        Some(e) => {
                            seen.insert(e);
                        }
                    }
                    rounds[i].fetch_add(1, Ordering::Relaxed);
                }
                (op, seen)
            })
        })
        .collect();
    // Every client is making requests; then the daemon dies under them.
    wait_until_or_panic(
        "every client to get going",
        || rounds.iter().all(|r| r.load(Ordering::Relaxed) >= 20),
        || {
            rounds
                .iter()
                .map(|r| r.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        },
    );
    let _guard = daemon.kill();
    let mut seen = std::collections::BTreeSet::new();
    for c in clients {
        let (op, errnos) = with_timeout(Duration::from_secs(60), move || c.join().unwrap())
            .expect("a client hangs on the dead mount");
        let unexpected: Vec<_> = errnos
            .iter()
            .filter(|e| !cut_off_errnos(transport).contains(e))
            .map(|&e| name(e))
            .collect();
        assert!(
            unexpected.is_empty(),
            "{transport:?}: {op:?} got {unexpected:?} from the dying connection"
        );
        seen.extend(errnos);
    }
    let seen: Vec<_> = seen.into_iter().map(name).collect();
    println!("{transport:?}: before ENOTCONN, clients saw {seen:?}");
}

test_support::test_cases! {
    sigkill_under_load_clients_see_only_connection_errors_dev =>
        errnos_of_a_daemon_killed_under_load(Transport::Dev);
    sigkill_under_load_clients_see_only_connection_errors_uring =>
        errnos_of_a_daemon_killed_under_load(Transport::Uring);
}

/// Polls `cond` (every 10 ms) until it holds; panics after a minute (only
/// a broken mount takes that long).
fn wait_until_or_panic<T: std::fmt::Debug>(
    what: &str,
    mut cond: impl FnMut() -> bool,
    state: impl Fn() -> T,
) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waiting for {what}: {:?}",
            state()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn errno_of(r: io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn backing_changes(transport: Transport) {
    require_root();
    let d = dirs();
    let (src, mnt) = (&d.src, &d.mnt);
    let a = pattern(100_000, 1);
    std::fs::write(src.join("trunc"), &a).unwrap();
    std::fs::write(src.join("repl"), b"first version").unwrap();
    std::fs::write(src.join("gone"), b"to be deleted").unwrap();
    std::fs::create_dir_all(src.join("dir/sub")).unwrap();
    std::fs::write(src.join("dir/sub/x"), b"x").unwrap();
    std::fs::create_dir(src.join("dir2")).unwrap();
    std::fs::write(src.join("dir2/y"), b"y").unwrap();
    // Timeouts of 0.3 s: what the kernel may cache, and for how long.
    let timeout = Duration::from_millis(300);
    let past = timeout + Duration::from_millis(200);
    let daemon = Daemon::start(
        src,
        mnt,
        transport,
        &["--attr-timeout", "0.3", "--entry-timeout", "0.3"],
    );
    let m = |p: &str| mnt.join(p);
    let truncate_in_source = |p: &str, len: u64| {
        let file = std::fs::OpenOptions::new().write(true).open(src.join(p));
        file.unwrap().set_len(len).unwrap();
    };
    // The mount has seen everything.
    assert_eq!(std::fs::read(m("trunc")).unwrap(), a);
    let mut old_repl = std::fs::File::open(m("repl")).unwrap();
    let mut old_gone = std::fs::File::open(m("gone")).unwrap();
    assert_eq!(std::fs::read(m("dir/sub/x")).unwrap(), b"x");
    assert_eq!(std::fs::read(m("dir2/y")).unwrap(), b"y");

    // Changed behind the mount.
    truncate_in_source("trunc", 10);
    std::fs::write(src.join("repl.new"), b"second version").unwrap();
    std::fs::rename(src.join("repl.new"), src.join("repl")).unwrap();
    std::fs::remove_file(src.join("gone")).unwrap();
    std::fs::remove_dir_all(src.join("dir")).unwrap();
    std::fs::remove_dir_all(src.join("dir2")).unwrap();
    std::fs::write(src.join("dir2"), b"now a file").unwrap();
    std::thread::sleep(past);

    // Past the timeouts the mount shows the change.
    assert_eq!(std::fs::metadata(m("trunc")).unwrap().len(), 10);
    assert_eq!(std::fs::read(m("trunc")).unwrap(), &a[..10]);
    assert_eq!(std::fs::read(m("repl")).unwrap(), b"second version");
    assert_eq!(errno_of(std::fs::metadata(m("gone"))), Some(libc::ENOENT));
    assert_eq!(errno_of(std::fs::metadata(m("dir"))), Some(libc::ENOENT));
    assert_eq!(errno_of(std::fs::read(m("dir/sub/x"))), Some(libc::ENOENT));
    assert!(std::fs::metadata(m("dir2")).unwrap().is_file());
    assert_eq!(std::fs::read(m("dir2")).unwrap(), b"now a file");
    // Files opened before keep their (old) inode, as on any file system.
    let mut got = String::new();
    old_repl.read_to_string(&mut got).unwrap();
    assert_eq!(got, "first version");
    let mut got = String::new();
    old_gone.read_to_string(&mut got).unwrap();
    assert_eq!(got, "to be deleted");
    assert_eq!(old_gone.metadata().unwrap().nlink(), 0);
    drop((old_repl, old_gone));

    // Truncated while open through the mount, then read past the new end.
    let mut f = std::fs::File::open(m("repl")).unwrap();
    truncate_in_source("repl", 3);
    std::thread::sleep(past);
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    assert!(
        got.len() == 3 || got == b"second version",
        "a read sees the truncation or the cached pages: {got:?}"
    );
    drop(f);

    // Still serving, nothing alarming logged.
    let names: Vec<PathBuf> = std::fs::read_dir(mnt)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    stops_cleanly_on_sigterm(daemon, "after backing changes");
}

test_support::test_cases! {
    backing_tree_changed_behind_the_mount_dev => backing_changes(Transport::Dev);
    backing_tree_changed_behind_the_mount_uring => backing_changes(Transport::Uring);
}

/// `--allow-other` without `--default-permissions` is refused, and the
/// message says why (the daemon serves every user with its own privileges).
#[test]
fn allow_other_without_default_permissions_is_refused_with_the_reason() {
    let d = dirs();
    let stderr = refused_with_status_1(&["--allow-other"], &d);
    for why in ["--default-permissions", "privileges", "any user"] {
        assert!(
            stderr.contains(why),
            "the message says why ({why}): {stderr}"
        );
    }
    assert!(!is_mounted(&d.mnt));
}
