//! Crash recovery of `passthroughfs` (`--supervise`): the serving process
//! is killed (SIGKILL) again and again while clients use the mount; the
//! supervisor starts another each time, which takes the node table and
//! open files back and has the kernel resend what the dead one held. No
//! client sees an error, nothing fsynced is lost, files opened before the
//! first crash stay usable, and every FORGET finds its node.
//!
//! The crash table keeps nodes by file handle, which opening needs
//! `CAP_DAC_READ_SEARCH` in the initial user namespace: tests that
//! supervise carry `needs_file_handles` in their names and are skipped,
//! counted, by `cargo xtask test-in-userns`; where there are no file
//! handles the supervisor refuses before mounting (tested here with a
//! source whose file system has none).

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/load.rs"]
mod load;

use daemon::{dirs, is_mounted, Daemon, Transport};
use load::{clients, fs_state_with, progress, FioAndGit};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The supervisor's serving process: the last it started (earlier ones
/// may linger as zombies among its children for a moment).
fn serving_pid(supervisor: &Daemon) -> i32 {
    let log = supervisor.stderr();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("serving process started"))
        .unwrap_or_else(|| panic!("no serving process: {log}"));
    let pid = line.rsplit_once("pid=").expect("pid=").1;
    pid.trim().parse().unwrap()
}

/// Kills the serving process (SIGKILL) and waits until its successor
/// serves (the `n`th crash: `n + 2` "serving" lines in the log).
fn crash(supervisor: &Daemon, n: usize) {
    let pid = serving_pid(supervisor);
    // SAFETY: a plain kill of the supervisor's child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_serving(supervisor, n + 1);
    assert!(
        is_mounted(&supervisor.mnt),
        "crash {n}: the mount went away"
    );
}

fn start(src: &Path, mnt: &Path) -> Daemon {
    Daemon::start(src, mnt, Transport::Dev, &["--supervise"])
}

/// The supervisor stops (SIGTERM): the serving process leaves, the
/// supervisor unmounts and exits 0.
fn stop(supervisor: Daemon) -> String {
    let mnt = supervisor.mnt.clone();
    supervisor.signal(libc::SIGTERM);
    let (status, log, _) = supervisor.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
    assert!(!is_mounted(&mnt), "{log}");
    log
}

#[test]
fn twenty_crashes_under_load_and_no_client_notices_needs_file_handles() {
    let d = dirs();
    let daemon = start(&d.src, &d.mnt);
    // Held across every crash: an open file, written at offsets and
    // fsynced after each crash.
    let held_path = d.mnt.join("held");
    let held = daemon::create_rw(&held_path);
    held.write_all_at(b"before;", 0).unwrap();
    let mut written = b"before;".to_vec();

    let stop_clients = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers = clients(&d.mnt, 4, &stop_clients, &rounds);
    progress(&rounds, 20);
    for n in 0..20 {
        crash(&daemon, n);
        let record = format!("{n};");
        held.write_all_at(record.as_bytes(), written.len() as u64)
            .unwrap_or_else(|e| panic!("crash {n}: the file opened before: {e}"));
        held.sync_all().unwrap();
        written.extend_from_slice(record.as_bytes());
        progress(&rounds, 10);
    }
    stop_clients.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap().expect("a client saw an error");
    }
    let mut text = Vec::new();
    (&held).seek(SeekFrom::Start(0)).unwrap();
    (&held).read_to_end(&mut text).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&text),
        String::from_utf8_lossy(&written)
    );
    drop(held);
    // What was fsynced is in the source too.
    assert_eq!(std::fs::read(d.src.join("held")).unwrap(), written);

    // Every node the kernel drops is found (no FORGET finds an unknown
    // node or fewer references than it drops), and every handle is
    // released. A FORGET the kernel had just given a process that was
    // killed is lost with it (no reply, never resent): its node stays
    // counted until the unmount, so the node count isn't checked here.
    for name in ["client-0", "client-1", "client-2", "client-3"] {
        std::fs::remove_dir_all(d.mnt.join(name)).unwrap();
    }
    std::fs::remove_file(&held_path).unwrap();
    let state = fs_state_with(&daemon, &["handles=0"], true);
    eprintln!("after 20 crashes and the clients gone: {state}");
    let log = stop(daemon);
    assert!(
        !log.contains("FORGET of an unknown node id") && !log.contains("more references than held"),
        "{log}"
    );
    assert_eq!(log.matches("; starting another").count(), 20, "{log}");
}

#[test]
fn twenty_crashes_under_fio_verify_and_a_git_loop_needs_file_handles() {
    let d = dirs();
    let daemon = start(&d.src, &d.mnt);
    let load = FioAndGit::start(&d.mnt);
    for n in 0..20 {
        crash(&daemon, n);
        progress(&load.runs, 1);
    }
    load.finish("the crashes");
    stop(daemon);
}

/// Waits until the `n`th successor of the first serving process serves.
fn wait_serving(supervisor: &Daemon, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while supervisor.stderr().matches("passthroughfs serving").count() < n + 1 {
        assert!(
            Instant::now() < deadline,
            "no serving process {n}: {}",
            supervisor.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn ten_planned_restarts_under_load_needs_file_handles() {
    // SIGUSR2: the serving process finishes what it holds, gives the
    // connection back and exits; the supervisor starts the next (a new
    // build installed at the program's path would be it).
    let d = dirs();
    let daemon = start(&d.src, &d.mnt);
    let held = daemon::create_rw(&d.mnt.join("held"));
    let stop_clients = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers = clients(&d.mnt, 4, &stop_clients, &rounds);
    progress(&rounds, 20);
    for n in 1..=10 {
        daemon.signal(libc::SIGUSR2);
        wait_serving(&daemon, n);
        held.write_all_at(format!("{n};").as_bytes(), (n as u64 - 1) * 3)
            .unwrap_or_else(|e| panic!("restart {n}: the file opened before: {e}"));
        progress(&rounds, 10);
    }
    stop_clients.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap().expect("a client saw an error");
    }
    drop(held);
    let log = stop(daemon);
    assert_eq!(
        log.matches("gave the connection back to the supervisor")
            .count(),
        10,
        "{log}"
    );
    // (A restarted process whose source watch thread is still blocked in a
    // notification is reported as died with a thread stuck, and replaced
    // all the same: not a failure.)
    assert!(!log.contains("was killed"), "{log}");
    // Every restart found every request answered.
    assert!(!log.contains("was on these requests"), "{log}");
}

#[test]
fn kernel_passthrough_files_survive_crashes_needs_file_handles() {
    // Kernel passthrough is on by default (as root): the backing ids
    // belong to the connection; the next process adopts them from the
    // handles in the crash table.
    let d = dirs();
    let daemon = start(&d.src, &d.mnt);
    std::fs::write(d.mnt.join("f"), b"0123456789").unwrap();
    let open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.mnt.join("f"))
        .unwrap();
    fs_state_with(&daemon, &["backing_ids=1"], false);
    for n in 0..3 {
        crash(&daemon, n);
        fs_state_with(&daemon, &["backing_ids=1"], false);
        open.write_all_at(format!("{n}").as_bytes(), 0).unwrap();
        // A new open of the same file gets the same backing file.
        let again = std::fs::read(d.mnt.join("f")).unwrap();
        assert_eq!(again[0], b'0' + n as u8, "crash {n}");
        assert_eq!(&again[1..], b"123456789");
    }
    drop(open);
    // The last release closes the id in the process that serves now.
    fs_state_with(&daemon, &["backing_ids=0"], false);
    stop(daemon);
}

#[test]
fn supervised_daemon_ends_with_the_mount_needs_file_handles() {
    // Unmounted from outside: the serving process ends with status 0 and
    // the supervisor with it, without starting another.
    let d = dirs();
    let daemon = start(&d.src, &d.mnt);
    std::fs::write(d.mnt.join("f"), b"x").unwrap();
    let status = std::process::Command::new("umount")
        .arg(&d.mnt)
        .status()
        .unwrap();
    assert!(status.success());
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("serving process started").count(), 1, "{log}");
}

#[test]
fn supervise_is_refused_where_it_would_lose_requests() {
    let d = dirs();
    for (extra, says) in [
        (&["--uring"][..], "--runtime sync only"),
        (&["--runtime", "tokio"][..], "--runtime sync only"),
        (&["--take-over", "/nonexistent/sock"][..], "--take-over"),
    ] {
        let args: Vec<&str> = ["--supervise"].iter().chain(extra).copied().collect();
        let err = daemon::refused_at_start(&d.src, &d.mnt, &args);
        assert!(err.contains(says), "{extra:?}: {err}");
    }
}

/// Without file handles (procfs has none; nor has a user namespace) every
/// serving process would fail to take the crash table back: the
/// supervisor says so once, before mounting, and mounts nothing.
#[test]
fn supervise_without_file_handles_is_refused_before_mounting() {
    let d = dirs();
    let err = daemon::refused_at_start(Path::new("/proc/sys"), &d.mnt, &["--supervise"]);
    assert!(
        err.contains("--supervise keeps the nodes by file handle")
            && err.contains("serve without --supervise")
            && !err.contains("serving process"),
        "{err}"
    );
}

/// A supervisor whose serving processes crash where the file it returns
/// says (`PASSTHROUGHFS_CRASH_AT`, see passthroughfs's src/sandbox/escape.rs).
/// The flag file lies outside SOURCE, and the daemon opens it before it
/// confines itself: it must exist then (empty: armed for nothing).
fn start_with_crash_hook(d: &daemon::Dirs) -> (Daemon, std::path::PathBuf) {
    let flag = d.dir.path().join("crash-at");
    std::fs::write(&flag, "").unwrap();
    let daemon = Daemon::start_with(&d.src, &d.mnt, Transport::Dev, &["--supervise"], |cmd| {
        cmd.env("PASSTHROUGHFS_CRASH_AT", &flag);
    });
    (daemon, flag)
}

/// Whether the crash hook fired (it empties the flag file).
fn hook_fired(flag: &Path) -> bool {
    std::fs::read(flag).unwrap().is_empty()
}

/// The daemon's `lookup_refs` now (SIGUSR1's state line), or `None` once
/// the log shows a FORGET that found too few references or no node.
fn lookup_refs_or_forget_warning(daemon: &Daemon) -> Option<u64> {
    let before = daemon.stderr().matches("file system state").count();
    daemon.signal(libc::SIGUSR1);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = daemon.stderr();
        if log.contains("FORGET of an unknown node id") || log.contains("more references than held")
        {
            return None;
        }
        if log.matches("file system state").count() > before {
            let line = log.lines().rev().find(|l| l.contains("file system state"));
            let refs = line
                .and_then(|l| l.split_once("lookup_refs="))
                .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok());
            return Some(refs.unwrap_or_else(|| panic!("no lookup_refs in the state: {log}")));
        }
        assert!(Instant::now() < deadline, "no state line: {log}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_crash_between_counting_and_journaling_a_lookup_reference_loses_none_needs_file_handles() {
    // A LOOKUP's reply hands the kernel a lookup reference: the crash
    // table counts it and the request journal records it, so that a
    // resend after a crash gives back what the first attempt handed. The
    // test hook kills the serving process between the two steps, while
    // the node already holds a reference (a second name of the same file):
    // the kernel resends the LOOKUP to the next process. Journaled before
    // it was counted, the reference was given back without ever having
    // been counted, taking one of the kernel's: the FORGET of both then
    // found one too few (or no node), the failure twenty crashes under load
    // hit about once in 55 runs.
    let d = dirs();
    let (daemon, flag) = start_with_crash_hook(&d);
    std::fs::write(d.src.join("a"), b"data").unwrap();
    std::fs::hard_link(d.src.join("a"), d.src.join("b")).unwrap();
    let ino = std::fs::metadata(d.src.join("a")).unwrap().ino();
    assert_eq!(std::fs::metadata(d.mnt.join("a")).unwrap().ino(), ino);
    assert_eq!(lookup_refs_or_forget_warning(&daemon), Some(1));

    std::fs::write(&flag, ino.to_string()).unwrap();
    // The LOOKUP of `b` finds the node of `a`; its hand-over kills the
    // serving process; the next one answers the resent LOOKUP.
    let b = std::fs::metadata(d.mnt.join("b"))
        .unwrap_or_else(|e| panic!("a client saw {e}: {}", daemon.stderr()));
    assert_eq!(b.ino(), ino);
    assert!(
        hook_fired(&flag),
        "the hook did not fire: {}",
        daemon.stderr()
    );
    wait_serving(&daemon, 1);
    let log = daemon.stderr();
    assert!(
        log.contains("crash test hook: killed before the reply was recorded"),
        "{log}"
    );
    assert_eq!(std::fs::read(d.mnt.join("b")).unwrap(), b"data");

    // Both names go: the kernel drops the inode and FORGETs both of its
    // references. The one the dead process counted and didn't journal was
    // counted again by the resend, so one stays (the node is kept until
    // the unmount, never lost).
    std::fs::remove_file(d.mnt.join("a")).unwrap();
    std::fs::remove_file(d.mnt.join("b")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match lookup_refs_or_forget_warning(&daemon) {
            Some(1) => break,
            Some(refs) => assert!(
                Instant::now() < deadline,
                "the FORGET never came: lookup_refs={refs}: {}",
                daemon.stderr()
            ),
            None => panic!("a FORGET found too few references: {}", daemon.stderr()),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = stop(daemon);
    assert!(
        !log.contains("FORGET of an unknown node id") && !log.contains("more references than held"),
        "{log}"
    );
}

#[test]
fn a_crash_after_making_a_handle_before_the_reply_leaks_none_needs_file_handles() {
    // An OPEN's handle goes into the crash table (so that a new process
    // opens it again) before the reply carries its number to the kernel.
    // The test hook kills the serving process in between; the kernel
    // resends the OPEN and the next process makes another handle. The
    // first one, which the kernel never got, used to stay (with its
    // descriptor, and kernel passthrough's backing id) until the unmount:
    // now the handle table notes it in the request's journal record and
    // the resend closes it first. Two places: after both (`handle`), and
    // between the note and the table (`handle-noted`: nothing to close).
    // The table used to come first: a crash between the two kept the
    // handle until the unmount (`handles=1` after twenty crashes under
    // load, once in about 23 runs).
    let d = dirs();
    let (daemon, flag) = start_with_crash_hook(&d);
    let crash_points = ["handle", "handle-noted"];
    for at in crash_points {
        std::fs::write(d.src.join(format!("f-{at}")), b"data").unwrap();
        std::fs::create_dir(d.src.join(format!("dir-{at}"))).unwrap();
    }
    let crashes = crash_points
        .into_iter()
        .flat_map(|at| ["f", "dir", "new"].map(|kind| (at, kind)));
    for (n, (at, kind)) in crashes.enumerate() {
        let name = format!("{kind}-{at}");
        std::fs::write(&flag, at).unwrap();
        // OPEN, OPENDIR, CREATE (with O_EXCL): making the handle kills the
        // serving process.
        let opened = if kind == "new" {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(d.mnt.join(&name))
        } else {
            std::fs::File::open(d.mnt.join(&name))
        }
        .unwrap_or_else(|e| panic!("a client saw {e}: {}", daemon.stderr()));
        assert!(
            hook_fired(&flag),
            "the hook did not fire: {}",
            daemon.stderr()
        );
        wait_serving(&daemon, n + 1);
        let state = fs_state_with(&daemon, &["handles=1 "], false);
        eprintln!("{name} open after the crash: {state}");
        drop(opened);
        // RELEASE of the resend's handle: none left.
        let state = fs_state_with(&daemon, &["handles=0 "], false);
        eprintln!("{name} closed: {state}");
    }
    let log = stop(daemon);
    assert_eq!(
        log.matches("crash test hook: killed before the reply was recorded")
            .count(),
        6,
        "{log}"
    );
}

#[test]
fn names_removed_in_the_source_after_a_crash_or_restart_leave_the_mount_needs_file_handles() {
    // The serving process's source watch lets the kernel cache names and
    // attributes for a day. Its fanotify group is the supervisor's, so it
    // outlives the process (a crash, or a planned restart) and the next
    // one takes it on: a name removed behind the mount's back afterwards,
    // in a directory the kernel doesn't ask about again, leaves the mount
    // (before the group outlived processes, the next one had the kernel
    // drop everything instead; without either it stayed for that day).
    let d = dirs();
    let daemon = start(&d.src, &d.mnt);
    assert!(
        daemon.stderr().contains("watching the source for changes"),
        "this kernel has FUSE_NOTIFY_INC_EPOCH (Linux 6.18+): the daemon should watch the \
         source: {}",
        daemon.stderr()
    );
    std::fs::create_dir(d.mnt.join("dir")).unwrap();
    for (n, restart) in [(0, false), (1, true), (2, false)] {
        let name = format!("dir/gone{n}");
        std::fs::write(d.mnt.join(&name), b"x").unwrap();
        assert!(d.mnt.join(&name).exists());
        if restart {
            daemon.signal(libc::SIGUSR2);
            wait_serving(&daemon, n + 1);
        } else {
            crash(&daemon, n);
        }
        std::fs::remove_file(d.src.join(&name)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while d.mnt.join(&name).exists() {
            assert!(
                Instant::now() < deadline,
                "{name}, removed in the source after the {}, is still in the mount \
                 after 60 s",
                if restart { "restart" } else { "crash" }
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stop(daemon);
}

#[test]
fn crashes_and_restarts_keep_cached_names_needs_file_handles() {
    // What the kernel cached before a crash or a planned restart stays
    // valid after it: no LOOKUP of a cached name by the next serving
    // process (`-d` request lines). A crash recovery used to have the
    // kernel drop everything (INC_EPOCH, the watch having died with the
    // process), and a process whose working directory the kernel then
    // unhashed until its next LOOKUP got ENOENT from getcwd meanwhile
    // (`twenty_crashes_under_fio_verify_and_a_git_loop`'s "Unable to read
    // current working directory", 2 of 5 loaded repeat rounds).
    let d = dirs();
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Dev, &["--supervise", "-d"]);
    let kept = d.mnt.join("kept");
    std::fs::create_dir(&kept).unwrap();
    // A process whose working directory `kept` is pins its dentry: other
    // tests' cache drops can't evict it, so a LOOKUP of it that succeeds
    // can only be the kernel revalidating what it dropped.
    let mut sitter = std::process::Command::new("sleep")
        .arg("600")
        .current_dir(&kept)
        .spawn()
        .unwrap();
    for (n, restart) in [(0, false), (1, true), (2, false)] {
        assert!(kept.is_dir());
        if restart {
            daemon.signal(libc::SIGUSR2);
            wait_serving(&daemon, n + 1);
        } else {
            crash(&daemon, n);
        }
        assert!(kept.is_dir());
    }
    let _ = sitter.kill();
    let _ = sitter.wait();
    // (A request's line is written after its reply; the whole log is in
    // once the supervisor has exited.)
    let log = stop(daemon);
    let looked_up: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("LOOKUP node=1 name=\"kept\" -> ok"))
        .collect();
    assert!(
        looked_up.is_empty(),
        "after a crash or a restart the kernel looked `kept` up again: it dropped what it \
         cached: {looked_up:?}"
    );
}
