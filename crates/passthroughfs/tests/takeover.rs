//! Live upgrade of `passthroughfs` (`--takeover-socket`, `--take-over`):
//! new daemon processes take the mount over one after another while
//! clients use it, and no client notices. Files opened before the first
//! upgrade stay usable after the last, a lock taken before them is still
//! held, and once the clients are gone the last daemon holds no node the
//! kernel forgot (every FORGET found its node).

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/load.rs"]
mod load;

use daemon::{dirs, is_mounted, Daemon, Dirs, Transport};
use load::{clients, fs_state_with, progress, FioAndGit};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The build upgrade `n` starts: the test build and another one in turn
/// (`PASSTHROUGHFS_SECOND_BUILD`, which `cargo xtask test` sets to its
/// release build), or the test build alone, said once, without it.
fn build_for(n: usize) -> std::path::PathBuf {
    static SAID: std::sync::Once = std::sync::Once::new();
    match std::env::var_os("PASSTHROUGHFS_SECOND_BUILD") {
        Some(other) if n % 2 == 0 => other.into(),
        Some(_) => daemon::BIN.into(),
        None => {
            SAID.call_once(|| {
                eprintln!(
                    "SKIPPED alternating two builds: PASSTHROUGHFS_SECOND_BUILD is not set \
                     (cargo xtask test sets it to the release build); upgrading between \
                     processes of the test build"
                )
            });
            daemon::BIN.into()
        }
    }
}

/// One upgrade: a daemon started with `args` (of the build [`build_for`]
/// `n` picks) takes over the mount of `old`, which must exit 0 saying it
/// handed the mount over, the mount staying; the new daemon.
fn upgrade(mut old: Daemon, src: &Path, mnt: &Path, args: &[&str], n: usize) -> Daemon {
    let next = Daemon::start_program(&build_for(n), src, mnt, Transport::Dev, args, |_| {});
    old.forget_mount();
    let (status, log, _) = old.wait_exit(Duration::from_secs(60));
    assert!(
        status.success(),
        "upgrade {n}: the old daemon exited with {status}: {log}"
    );
    assert!(log.contains("handed the mount over"), "upgrade {n}: {log}");
    assert!(is_mounted(mnt), "upgrade {n}: the mount went away");
    next
}

/// A daemon serving fresh directories with `args` and a takeover socket
/// (in the directories): the directories, the socket as an argument, the
/// daemon.
fn serving_with_socket(args: &[&str]) -> (Dirs, String, Daemon) {
    let d = dirs();
    let sock = d.dir.path().join("takeover.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let mut all = args.to_vec();
    all.extend(["--takeover-socket", &sock_arg]);
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Dev, &all);
    (d, sock_arg, daemon)
}

fn flock_nb(path: &Path) -> bool {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[test]
fn twenty_upgrades_under_load_and_no_client_notices() {
    // Kernel passthrough off: reads and writes go through the daemons
    // (passthrough files have a test of their own).
    let (d, sock_arg, mut daemon) = serving_with_socket(&["--no-passthrough"]);

    // Held across every upgrade: an open file (its offset too) and a lock.
    let held_path = d.mnt.join("held");
    let mut held = daemon::create_rw(&held_path);
    held.write_all(b"before;").unwrap();
    // And a file deleted while open: no name leads to it any more.
    let mut ghost = daemon::create_rw(&d.mnt.join("ghost"));
    std::fs::remove_file(d.mnt.join("ghost")).unwrap();
    let locked = std::fs::File::open(d.mnt.join("held")).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(locked.as_raw_fd(), libc::LOCK_EX) }, 0);

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers = clients(&d.mnt, 4, &stop, &rounds);
    progress(&rounds, 20);

    let take_args = [&["--no-passthrough"][..], &takes_over(&sock_arg)].concat();
    for upgrade in 0..20 {
        daemon = self::upgrade(daemon, &d.src, &d.mnt, &take_args, upgrade);
        // The held file goes on where it was.
        held.write_all(format!("{upgrade};").as_bytes()).unwrap();
        ghost
            .write_all(format!("{upgrade};").as_bytes())
            .unwrap_or_else(|e| panic!("upgrade {upgrade}: the deleted open file: {e}"));
        progress(&rounds, 10);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap().expect("a client saw an error");
    }
    // The lock taken before the first upgrade is still held.
    assert!(!flock_nb(&held_path), "the lock was lost on the way");
    drop(locked);
    // The kernel sends the RELEASE that drops the flock after close
    // returns: wait until the daemon has answered it (and every other
    // release of the clients and of flock_nb), `held` and `ghost` being
    // the only handles left.
    fs_state_with(&daemon, &["handles=2 "], false);
    assert!(
        flock_nb(&held_path),
        "the lock outlived its holder's release"
    );
    held.seek(SeekFrom::Start(0)).unwrap();
    let mut text = String::new();
    held.read_to_string(&mut text).unwrap();
    let want: String = std::iter::once("before;".to_string())
        .chain((0..20).map(|u| format!("{u};")))
        .collect();
    assert_eq!(text, want);
    drop(held);
    ghost.seek(SeekFrom::Start(0)).unwrap();
    let mut text = String::new();
    ghost.read_to_string(&mut text).unwrap();
    assert_eq!(format!("before;{text}"), want, "the deleted open file");
    drop(ghost);

    // Every node the kernel drops is found: once it dropped its dentries
    // and inodes, the daemon holds the root alone.
    for name in ["client-0", "client-1", "client-2", "client-3"] {
        std::fs::remove_dir_all(d.mnt.join(name)).unwrap();
    }
    std::fs::remove_file(&held_path).unwrap();
    holds_the_root_alone_and_stops(daemon, &d.mnt);
}

/// Once the kernel dropped its dentries and inodes, `daemon` holds the root
/// alone, with no reference it miscounted on the way; SIGTERM then ends
/// it cleanly and its mount at `mnt` is gone.
fn holds_the_root_alone_and_stops(daemon: Daemon, mnt: &Path) {
    fs_state_with(&daemon, &["inodes=1 ", "lookup_refs=0"], true);
    let log = daemon.stderr();
    assert!(
        !log.contains("FORGET of an unknown node id") && !log.contains("more references than held"),
        "{log}"
    );
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
    assert!(!is_mounted(mnt));
}

/// The arguments of a daemon that takes over from the one listening on
/// `sock` and then listens there itself.
fn takes_over(sock: &str) -> [&str; 4] {
    ["--take-over", sock, "--takeover-socket", sock]
}

/// Runs a `--take-over` daemon that must fail; its standard error.
fn failed_takeover(src: &Path, mnt: &Path, sock: &str) -> String {
    let args = [
        "--no-passthrough",
        "--takeover-timeout",
        "2",
        "--take-over",
        sock,
    ];
    daemon::failed_run(src, mnt, &args)
}

#[test]
fn refused_or_unanswered_takeovers_leave_the_mount_served() {
    let d = dirs();
    let sock = d.dir.path().join("takeover.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    // Nobody listens: the new daemon fails with the reason.
    let err = failed_takeover(&d.src, &d.mnt, &sock_arg);
    assert!(err.contains("takeover socket"), "{err}");

    let daemon = Daemon::start(
        &d.src,
        &d.mnt,
        Transport::Dev,
        &["--takeover-socket", &sock_arg],
    );
    std::fs::write(d.mnt.join("f"), b"data").unwrap();

    // Another mountpoint than the one served: the new daemon refuses.
    let other = d.dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let err = failed_takeover(&d.src, &other, &sock_arg);
    assert!(err.contains("mountpoint"), "{err}");
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"data");

    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"data");

    // A takeover under way (a new daemon that said hello and hangs): a
    // second one finds no socket and says so; once the first hangs up, the
    // serving daemon serves on and listens again.
    let wait_socket = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !sock.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "no takeover socket again"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // The refusal above: the new daemon exits once refused, and the
    // serving one binds its socket again after that.
    wait_socket();
    let hung = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let hello = format!(
        "fuse-takeover-hello {}\n",
        fuse_transport_dev::takeover::TAKEOVER_VERSION
    );
    (&hung).write_all(hello.as_bytes()).unwrap();
    // The serving daemon removes the socket file once it accepted `hung`;
    // before that, a second daemon would wait in its listen queue.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sock.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the takeover socket stays while one is under way"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let err = failed_takeover(&d.src, &d.mnt, &sock_arg);
    assert!(err.contains("takeover socket"), "{err}");
    drop(hung);
    wait_socket();
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"data");

    // A takeover socket whose daemon never answers (a listener that
    // accepts and says nothing): the new daemon gives up after its
    // --takeover-timeout, with the reason.
    let silent_path = d.dir.path().join("silent.sock");
    let silent = std::os::unix::net::UnixListener::bind(&silent_path).unwrap();
    let err = failed_takeover(&d.src, &d.mnt, silent_path.to_str().unwrap());
    assert!(err.contains("sent nothing within"), "{err}");
    drop(silent);

    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"data");
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
}

#[test]
fn upgrades_under_fio_verify_and_a_git_loop() {
    let (d, sock_arg, mut daemon) = serving_with_socket(&["--no-passthrough"]);
    let load = FioAndGit::start(&d.mnt);
    let take_args = [&["--no-passthrough"][..], &takes_over(&sock_arg)].concat();
    for upgrade in 0..20 {
        daemon = self::upgrade(daemon, &d.src, &d.mnt, &take_args, upgrade);
        progress(&load.runs, 1);
    }
    load.finish("the upgrades");
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
    assert!(!is_mounted(&d.mnt));
}

/// `-d`'s request lines in `log` that look `name` up in the root.
fn lookups_of(log: &str, name: &str) -> Vec<String> {
    let wanted = format!("name=\"{name}\"");
    log.lines()
        .filter(|l| {
            l.contains("fuse_request") && l.contains("LOOKUP node=1") && l.contains(&wanted)
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn upgrades_keep_cached_names_and_the_watch_that_covers_them() {
    // An upgrade used to have the kernel drop every name it cached (an
    // INC_EPOCH, as the new daemon watched the source afresh): the kernel
    // then unhashes each cached dentry at its next use and looks it up
    // again (here: the walk of `test -d`), and a process whose working directory is that dentry (a
    // shell, git) got ENOENT from getcwd in the window between the two
    // (`upgrades_change_runtimes_under_load`'s "git failed across", about
    // once in 40 runs). Now the source watch moves with the upgrade: what
    // the kernel cached stays valid (no LOOKUP after an upgrade for a name
    // cached before it) and covered (a name removed behind the mount's
    // back after the upgrade, in a directory only the moved watch marks,
    // disappears from the mount).
    use std::io::BufRead;
    let args = ["--no-passthrough", "-d"];
    let (d, sock_arg, mut daemon) = serving_with_socket(&args);
    assert!(
        daemon.stderr().contains("watching the source for changes"),
        "this kernel has FUSE_NOTIFY_INC_EPOCH (Linux 6.18+): the daemon should watch the \
         source: {}",
        daemon.stderr()
    );
    let dir = d.mnt.join("cwd");
    std::fs::create_dir(&dir).unwrap();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && echo in && while read _; do test -d \"$1\" && pwd -P || exit 1; done")
        .arg("sh")
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert_eq!(line, "in\n");
    let mut take_args = args.to_vec();
    take_args.extend(["--take-over", &sock_arg, "--takeover-socket", &sock_arg]);
    for upgrade in 0..3 {
        // Cached before the upgrade, by a reply in a marked directory.
        std::fs::write(dir.join("gone"), b"x").unwrap();
        daemon = self::upgrade(daemon, &d.src, &d.mnt, &take_args, upgrade);
        let log = daemon.stderr();
        assert!(
            log.contains("source_watch=\"taken over\""),
            "upgrade {upgrade}: {log}"
        );
        writeln!(input, "again").unwrap();
        line.clear();
        output.read_line(&mut line).unwrap();
        if line.trim_end() != dir.to_str().unwrap() {
            drop(input);
            let out = child.wait_with_output().unwrap();
            panic!(
                "upgrade {upgrade}: the working directory in the mount: {line:?} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Only the moved watch marks `cwd` in this daemon (no request
        // made this one mark it): its mark reports the removal.
        std::fs::remove_file(d.src.join("cwd/gone")).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while dir.join("gone").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "upgrade {upgrade}: a name removed in the source is still in the mount \
                 after 60 s: the watch did not move"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // (A request's line is written after its reply: by now, after
        // the requests above, the walk's would be in the log. The last
        // daemon's whole log is checked again once it exits.)
        let lookups = lookups_of(&daemon.stderr(), "cwd");
        assert!(
            lookups.is_empty(),
            "upgrade {upgrade}: the kernel looked a cached name up again: {lookups:?}"
        );
    }
    drop(input);
    assert!(child.wait().unwrap().success());
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
    let lookups = lookups_of(&log, "cwd");
    assert!(
        lookups.is_empty(),
        "the kernel looked a cached name up again: {lookups:?}"
    );
    assert!(!is_mounted(&d.mnt));
}

/// Kernel passthrough registers backing files, which the kernel allows
/// only to `CAP_SYS_ADMIN` in the initial user namespace: real root.
#[test]
fn kernel_passthrough_files_survive_upgrades_needs_root() {
    // Kernel passthrough is on by default.
    let (d, sock_arg, mut daemon) = serving_with_socket(&[]);
    std::fs::write(d.mnt.join("f"), b"0123456789").unwrap();
    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.mnt.join("f"))
        .unwrap();
    // The open file is passed through: one backing id.
    fs_state_with(&daemon, &["backing_ids=1"], false);
    let take_args = takes_over(&sock_arg);
    for upgrade in 0..3 {
        daemon = self::upgrade(daemon, &d.src, &d.mnt, &take_args, upgrade);
        // The new daemon owns the id: the open file works, and a new
        // open of the same file gets the same backing file.
        fs_state_with(&daemon, &["backing_ids=1"], false);
        open.seek(SeekFrom::Start(0)).unwrap();
        open.write_all(format!("{upgrade}").as_bytes()).unwrap();
        let again = std::fs::read(d.mnt.join("f")).unwrap();
        assert_eq!(again[0], b'0' + upgrade as u8, "upgrade {upgrade}");
        assert_eq!(&again[1..], b"123456789");
    }
    drop(open);
    // The last release closes the id in the daemon that serves now.
    fs_state_with(&daemon, &["backing_ids=0"], false);
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
}

/// How upgrade `n` of [`upgrades_change_runtimes_under_load`] serves:
/// every runtime, with and without the thread pool, in turn.
fn runtime_args(n: usize) -> &'static [&'static str] {
    const WAYS: [&[&str]; 5] = [
        &["--runtime", "tokio", "--threads", "2"],
        &["--runtime", "uring", "--thread-pool"],
        &["--runtime", "sync"],
        &["--runtime", "tokio", "--thread-pool", "--threads", "2"],
        &["--runtime", "uring", "--threads", "2"],
    ];
    WAYS[n % WAYS.len()]
}

#[test]
fn upgrades_change_runtimes_under_load() {
    // 20 upgrades, each new daemon serving with another runtime (tasks on
    // tokio or on io_uring runtimes, with and without the thread pool, or
    // worker threads) and the builds alternating, under fio's verify, the
    // git loop and the shell clients; afterwards every node the kernel
    // forgets is found and none is left.
    let (d, sock_arg, mut daemon) = serving_with_socket(&["--runtime", "sync"]);
    let load = FioAndGit::start(&d.mnt);
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers = clients(&d.mnt, 2, &stop, &rounds);
    for upgrade in 0..20 {
        let mut args = vec!["--take-over", &sock_arg, "--takeover-socket", &sock_arg];
        args.extend_from_slice(runtime_args(upgrade));
        daemon = self::upgrade(daemon, &d.src, &d.mnt, &args, upgrade);
        progress(&load.runs, 1);
        progress(&rounds, 5);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap().expect("a client saw an error");
    }
    load.finish("the upgrades between runtimes");
    for name in ["client-0", "client-1", "fio", "repo"] {
        std::fs::remove_dir_all(d.mnt.join(name)).unwrap();
    }
    holds_the_root_alone_and_stops(daemon, &d.mnt);
}

#[test]
fn takeover_is_refused_where_it_would_lose_requests() {
    // io_uring (a ring's entries can't be retired without failing a
    // request): refused at start, with the reason, before anything is
    // mounted.
    let d = dirs();
    for extra in [&["--uring"][..], &["--uring", "--runtime", "tokio"][..]] {
        let args: Vec<&str> = ["--takeover-socket", "/nonexistent/sock"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let err = daemon::refused_at_start(&d.src, &d.mnt, &args);
        assert!(err.contains("over /dev/fuse only"), "{extra:?}: {err}");
    }
}
