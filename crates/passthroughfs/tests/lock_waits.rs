//! Lock waits never hold the daemon hostage: the `passthroughfs` daemon as
//! a child process, on every transport and runtime, with clients waiting
//! in `flock(LOCK_EX)` and `fcntl(F_SETLKW)` on a file another client has
//! locked.
//!
//! - SIGTERM with waiters pending: the daemon exits (status 0) and every
//!   waiter and the lock holder get their answer; nothing hangs.
//! - A waiter killed while it waits: the kernel sends INTERRUPT and waits
//!   for the daemon's answer before the process can die; the daemon ends
//!   the wait with EINTR, and the lock is not taken behind the dead
//!   waiter's back. And the same with every INTERRUPT dropped (a fault
//!   hook, standing for the ones FUSE over io_uring doesn't send): the
//!   daemon ends the wait because the requester has a signal pending.
//! - 64 waiters on one lock: `ls` and `cat` on the mount still answer, and
//!   when the holder lets go every waiter gets the lock in turn.
//! - Over io_uring inside the namespace sandbox (`--uring --sandbox
//!   namespace`, where the daemon can't see the mountpoint's path): waiters
//!   on every CPU hold more ring entries than a queue was set up with, a
//!   request issued on each CPU meanwhile is answered, and every waiter
//!   gets the lock once the holder lets go. And the case that needs the
//!   transport's kick: with one ring entry on CPU 0's queue, held by a
//!   stalled request (the `fault-injection` stall hook), a lock wait and
//!   then a `cat` issued on CPU 0 are queued by the kernel; once the stall
//!   ends, the wait takes the entry back and holds it, and the `cat` gets
//!   its answer only because the transport issues a request of its own on
//!   that queue (nothing else runs on CPU 0's queue).
//!
//! Waits are detected through fusectl's `waiting` count of the connection
//! (mounted here if it isn't). Deadlines only catch hangs; they are far
//! above what a loaded machine needs.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long anything may go without progress before the test calls it a
/// hang (far more than a loaded 2-core machine needs).
const HANG: Duration = Duration::from_secs(120);

/// The modes under test: transport and extra daemon arguments. Set
/// `LOCK_WAITS_MODES` to a comma-separated list of their names to run only
/// those (to repeat one mode while chasing a failure).
fn modes() -> Vec<(&'static str, Transport, Vec<&'static str>)> {
    let all = vec![
        ("dev", Transport::Dev, vec![]),
        ("dev+tokio", Transport::Dev, vec!["--runtime", "tokio"]),
        (
            "dev+tokio+pool",
            Transport::Dev,
            vec!["--runtime", "tokio", "--thread-pool"],
        ),
        (
            "dev+uring-runtime",
            Transport::Dev,
            vec!["--runtime", "uring"],
        ),
        ("uring", Transport::Uring, vec![]),
        (
            "uring+uring-runtime",
            Transport::Uring,
            vec!["--runtime", "uring"],
        ),
    ];
    match std::env::var("LOCK_WAITS_MODES") {
        Ok(only) => {
            let only: Vec<&str> = only.split(',').map(str::trim).collect();
            let picked: Vec<_> = all.into_iter().filter(|m| only.contains(&m.0)).collect();
            assert!(
                !picked.is_empty(),
                "LOCK_WAITS_MODES={only:?} names no mode"
            );
            picked
        }
        Err(_) => all,
    }
}

/// The fusectl directory of the connection serving `mnt`.
fn connection_dir(mnt: &Path) -> PathBuf {
    let root = test_support::fusectl_connections();
    let dev = std::fs::metadata(mnt).unwrap().dev();
    let minor = libc::minor(dev);
    let dir = root.join(minor.to_string());
    assert!(
        dir.join("waiting").exists(),
        "fusectl shows no connection {minor} for {} (is fusectl mounted?)",
        mnt.display()
    );
    dir
}

/// Requests the daemon has not answered yet.
fn waiting(conn: &Path) -> u64 {
    std::fs::read_to_string(conn.join("waiting"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Waits until the connection has at least `n` requests waiting.
fn wait_for_waiting(conn: &Path, n: u64, what: &str) {
    let start = Instant::now();
    while waiting(conn) < n {
        assert!(
            start.elapsed() < HANG,
            "{what}: only {} requests waiting, expected {n}",
            waiting(conn)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `flock(fd, op)`.
fn flock(f: &File, op: i32) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A child process waiting for an exclusive lock on `path`, with flock(1)
/// (`posix`: false) or with `fcntl(F_SETLKW)` from perl (`posix`: true).
fn waiter(path: &Path, posix: bool) -> Child {
    let mut cmd = if posix {
        let mut c = Command::new("perl");
        c.args([
            "-MFcntl",
            "-e",
            "open(my $f, '+<', $ARGV[0]) or die \"open: $!\"; \
             fcntl($f, F_SETLKW, pack('s s x4 q q l x4', F_WRLCK, SEEK_SET, 0, 0, 0)) \
             or die \"lock: $!\";",
        ]);
        c.arg(path);
        c
    } else {
        let mut c = Command::new("flock");
        c.arg("-x").arg(path).arg("true");
        c
    };
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The lock holder of a test: this process's `flock(LOCK_EX)`, or a child
/// process holding a POSIX write lock (POSIX locks are per process).
struct Holder {
    file: Option<File>,
    process: Option<Child>,
}

impl Holder {
    fn take(path: &Path, posix: bool) -> Self {
        if posix {
            return Self {
                file: None,
                process: Some(posix_holder(path)),
            };
        }
        let h = File::open(path).unwrap();
        flock(&h, libc::LOCK_EX).unwrap();
        Self {
            file: Some(h),
            process: None,
        }
    }

    /// Lets go: closes the file, or kills the holding process and reaps it.
    fn release(&mut self, what: &str) {
        self.file.take();
        if let Some(p) = self.process.as_mut() {
            p.kill().unwrap();
            reap(p, &format!("{what}: the lock holder"));
        }
    }
}

/// A child process holding a POSIX write lock on `path` until killed.
fn posix_holder(path: &Path) -> Child {
    let mut child = Command::new("perl")
        .args([
            "-MFcntl",
            "-MIO::Handle",
            "-e",
            "open(my $f, '+<', $ARGV[0]) or die \"open: $!\"; \
             fcntl($f, F_SETLK, pack('s s x4 q q l x4', F_WRLCK, SEEK_SET, 0, 0, 0)) \
             or die \"lock: $!\"; print \"locked\\n\"; STDOUT->flush; sleep 1000;",
        ])
        .arg(path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        first_line(&mut child),
        "locked\n",
        "the POSIX lock holder took its lock"
    );
    child
}

/// Waits for `child` to exit within [`HANG`]; panics (after killing it) if
/// it doesn't.
fn reap(child: &mut Child, what: &str) -> std::process::ExitStatus {
    reap_or_report(child, what, String::new)
}

/// [`reap`], with `report()` (the state of a hang) in the failure message.
fn reap_or_report(
    child: &mut Child,
    what: &str,
    report: impl FnOnce() -> String,
) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > HANG {
            let report = report();
            let _ = child.kill();
            panic!(
                "{what}: process {} still running after {HANG:?}; {report}",
                child.id()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Where process `pid` waits, and its signal masks: the state of a client
/// stuck in a request.
fn process_state(pid: u32) -> String {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_else(|e| format!("({e})"))
    };
    let status = read("status");
    let masks: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("State") || l.starts_with("Sig") || l.starts_with("ShdPnd"))
        .collect();
    format!(
        "process {pid} in {}, {masks:?}, kernel stack: {}",
        read("wchan").trim(),
        read("stack").replace('\n', " | ")
    )
}

/// Waits for every child to exit; fails only if none exits for [`HANG`]
/// (waiters get a lock one after the other: the chain may take long on a
/// busy machine, but it must move).
fn reap_all(
    children: &mut [Child],
    what: &str,
    report: impl Fn() -> String,
) -> Vec<std::process::ExitStatus> {
    let mut statuses = vec![None; children.len()];
    let mut progress = Instant::now();
    while statuses.iter().any(Option::is_none) {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                if let Some(s) = child.try_wait().unwrap() {
                    *status = Some(s);
                    progress = Instant::now();
                }
            }
        }
        if progress.elapsed() > HANG {
            let left = statuses.iter().filter(|s| s.is_none()).count();
            let report = report();
            for c in children.iter_mut() {
                let _ = c.kill();
            }
            panic!("{what}: {left} processes made no progress for {HANG:?}; {report}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    statuses.into_iter().map(Option::unwrap).collect()
}

/// Fails unless `daemon` says it runs in its namespace sandbox.
fn assert_in_namespace_sandbox(daemon: &Daemon, what: &str) {
    assert!(
        daemon.stderr().contains("confinement=namespace"),
        "{what}: the daemon runs in its namespace sandbox: {}",
        daemon.stderr()
    );
}

/// The first line `child` writes on its (piped) standard output.
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

/// Once the holder let go: every one of `waiters` gets the lock in turn and
/// exits with success (a hang fails with [`hang_report`]).
fn all_get_the_lock(waiters: &mut [Child], what: &str, daemon: &Daemon, conn: &Path) {
    let statuses = reap_all(
        waiters,
        &format!("{what}: waiters after the holder let go"),
        || hang_report(daemon, conn),
    );
    for status in statuses {
        assert!(status.success(), "{what}: a waiter got the lock: {status}");
    }
}

/// What the daemon's threads wait in, and the connection's waiting count:
/// the state of a hang, for its failure message.
fn hang_report(daemon: &Daemon, conn: &Path) -> String {
    let mut threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", daemon.pid()))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| {
                    let read = |f: &str| {
                        std::fs::read_to_string(e.path().join(f))
                            .unwrap_or_default()
                            .trim()
                            .to_owned()
                    };
                    format!("{} in {}", read("comm"), read("wchan"))
                })
                .collect()
        })
        .unwrap_or_default();
    threads.sort();
    format!(
        "{} requests waiting; daemon threads: {threads:?}; daemon log:\n{}",
        waiting(conn),
        daemon.stderr()
    )
}

/// Runs `cmd` and waits for it within [`HANG`]: it must succeed; a hang is
/// reported with the daemon's state.
fn run_within(cmd: &mut Command, what: &str, daemon: &Daemon, conn: &Path) -> String {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).unwrap();
        s
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < HANG {
        std::thread::sleep(Duration::from_millis(10));
    }
    if child.try_wait().unwrap().is_none() {
        let report = hang_report(daemon, conn);
        let _ = child.kill();
        panic!("{what}: still running after {HANG:?}; {report}");
    }
    let status = reap(&mut child, what);
    assert!(status.success(), "{what}: {status}");
    reader.join().unwrap()
}

fn start(mode: &(&str, Transport, Vec<&str>)) -> (Dirs, Daemon) {
    start_with_env(mode, false)
}

/// [`start`], with the daemon ignoring INTERRUPTs if `drop_interrupts`.
fn start_with_env(mode: &(&str, Transport, Vec<&str>), drop_interrupts: bool) -> (Dirs, Daemon) {
    let d = dirs();
    std::fs::write(d.src.join("f"), b"contents\n").unwrap();
    // The transport's debug lines (ring entries added for lock waits) go
    // into a hang's report.
    let daemon = Daemon::start_with(&d.src, &d.mnt, mode.1, &mode.2, |cmd| {
        cmd.env(
            "RUST_LOG",
            "info,fuse_transport_uring=debug,fuse_server=debug,\
             fuse_backend_passthrough::locks=debug",
        );
        if drop_interrupts {
            cmd.env("PASSTHROUGHFS_DROP_INTERRUPTS", "1");
        }
    });
    (d, daemon)
}

#[test]
fn sigterm_with_lock_waiters_pending_ends_the_daemon_and_the_waits() {
    require_root();
    for mode in modes() {
        for posix in [false, true] {
            let what = format!("{} ({})", mode.0, if posix { "fcntl" } else { "flock" });
            let (d, daemon) = start(&mode);
            let conn = connection_dir(&d.mnt);
            let f = d.mnt.join("f");
            let base = waiting(&conn);
            let mut holder = Holder::take(&f, posix);
            let mut waiters: Vec<Child> = (0..4).map(|_| waiter(&f, posix)).collect();
            wait_for_waiting(&conn, base + 4, &what);

            daemon.signal(libc::SIGTERM);
            let (status, log, took) = daemon.wait_exit(HANG);
            assert!(status.success(), "{what}: daemon exit {status}: {log}");
            eprintln!("{what}: the daemon exited {took:?} after SIGTERM with 4 lock waiters");
            // Their waits ended (with an error: the mount is gone).
            reap_all(
                &mut waiters,
                &format!("{what}: waiters after the daemon stopped"),
                String::new,
            );
            holder.release(&what);
        }
    }
}

#[test]
fn a_killed_waiter_is_interrupted_and_takes_no_lock() {
    killed_waiters(false);
}

#[test]
fn a_killed_waiter_whose_interrupt_never_comes_still_ends() {
    // FUSE over io_uring sends no INTERRUPT for a signal that comes after
    // a ring entry took the request and before the daemon got it; the
    // daemon's fault hook drops every INTERRUPT, so the wait can only end
    // through the daemon's look at the requester's pending signals (which
    // the namespace sandbox with Landlock once made it unable to read).
    killed_waiters(true);
}

/// [`killed_waiter`] in every mode, waiting for a flock and for a POSIX
/// lock.
fn killed_waiters(drop_interrupts: bool) {
    require_root();
    for mode in modes() {
        for posix in [false, true] {
            killed_waiter(&mode, posix, drop_interrupts);
        }
    }
}

/// A waiter killed while it waits: it exits, and once the holder lets go
/// the lock is free. With `drop_interrupts` the daemon ignores the
/// kernel's INTERRUPTs (`PASSTHROUGHFS_DROP_INTERRUPTS`), and the waiter
/// is killed only once the daemon says its wait started.
fn killed_waiter(mode: &(&str, Transport, Vec<&str>), posix: bool, drop_interrupts: bool) {
    let what = format!(
        "{} ({}{})",
        mode.0,
        if posix { "fcntl" } else { "flock" },
        if drop_interrupts {
            ", INTERRUPTs dropped"
        } else {
            ""
        }
    );
    let (d, daemon) = start_with_env(mode, drop_interrupts);
    let conn = connection_dir(&d.mnt);
    let f = d.mnt.join("f");
    let base = waiting(&conn);
    let mut holder = Holder::take(&f, posix);
    let mut w = waiter(&f, posix);
    let w_pid = w.id();
    wait_for_waiting(&conn, base + 1, &what);
    if drop_interrupts {
        let start = Instant::now();
        // The holder's lock went through a wait too (one that ended at
        // once): the waiter's is the one for its process.
        let started = format!("requester={w_pid}");
        while !daemon
            .stderr()
            .lines()
            .any(|l| l.contains("lock wait starts") && l.ends_with(&started))
        {
            assert!(
                start.elapsed() < HANG,
                "{what}: the daemon never started the wait: {}",
                daemon.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // A fatal signal: the process can only die once the daemon has
    // answered its request (the kernel sends INTERRUPT for it, or the
    // daemon sees the signal pending).
    w.kill().unwrap();
    reap_or_report(&mut w, &format!("{what}: the killed waiter"), || {
        format!(
            "the waiter: {}; {}",
            process_state(w_pid),
            hang_report(&daemon, &conn)
        )
    });
    // The holder lets go: the lock must be free now (the interrupted wait
    // must not have taken it afterwards).
    holder.release(&what);
    let probe = File::open(&f).unwrap();
    let start = Instant::now();
    loop {
        let free = if posix {
            let out = Command::new("perl")
                .args([
                    "-MFcntl",
                    "-e",
                    "open(my $f, '+<', $ARGV[0]) or die; \
                     fcntl($f, F_SETLK, pack('s s x4 q q l x4', F_WRLCK, SEEK_SET, 0, 0, 0)) \
                     or exit 1;",
                ])
                .arg(&f)
                .status()
                .unwrap();
            out.success()
        } else {
            flock(&probe, libc::LOCK_EX | libc::LOCK_NB).is_ok()
        };
        if free {
            break;
        }
        assert!(
            start.elapsed() < HANG,
            "{what}: the lock stays taken after its holder let go and the only waiter was \
             killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(probe);
    let log = daemon.stderr();
    assert!(error_lines(&log).is_empty(), "{what}: {log}");
    if drop_interrupts {
        assert!(
            log.contains("has a signal pending and no INTERRUPT came"),
            "{what}: the wait ended some other way: {log}"
        );
    }
    drop(daemon);
}

#[test]
fn sixty_four_lock_waiters_dont_stop_the_mount() {
    require_root();
    for mode in modes() {
        let what = mode.0;
        let (d, daemon) = start(&mode);
        let conn = connection_dir(&d.mnt);
        let f = d.mnt.join("f");
        let base = waiting(&conn);
        let holder = File::open(&f).unwrap();
        flock(&holder, libc::LOCK_EX).unwrap();
        let mut waiters: Vec<Child> = (0..64).map(|_| waiter(&f, false)).collect();
        wait_for_waiting(&conn, base + 64, what);
        let listed = run_within(
            Command::new("ls").arg(&d.mnt),
            &format!("{what}: ls"),
            &daemon,
            &conn,
        );
        assert_eq!(listed.trim(), "f", "{what}: ls");
        let cat = run_within(
            Command::new("cat").arg(&f),
            &format!("{what}: cat"),
            &daemon,
            &conn,
        );
        assert_eq!(cat, "contents\n", "{what}: cat");
        // Let go: every waiter gets the lock in turn and exits.
        drop(holder);
        all_get_the_lock(&mut waiters, what, &daemon, &conn);
        let log = daemon.stderr();
        assert!(error_lines(&log).is_empty(), "{what}: {log}");
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is the empty set; pid 0 is this thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set is live and sized.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: reading bits of a live set below its capacity.
    (0..8 * size_of::<libc::cpu_set_t>())
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// `cmd` run on CPU `cpu` only (through taskset(1)): the kernel sends its
/// requests to that CPU's ring queue.
fn on_cpu(cpu: usize, cmd: &Command) -> Command {
    let mut c = Command::new("taskset");
    c.arg("-c").arg(cpu.to_string()).arg(cmd.get_program());
    c.args(cmd.get_args());
    c
}

#[test]
fn lock_waits_are_served_over_uring_in_the_namespace_sandbox() {
    require_root();
    let cpus = allowed_cpus();
    for mode in [
        (
            "uring+namespace",
            Transport::Uring,
            vec!["--sandbox", "namespace"],
        ),
        (
            "uring+uring-runtime+namespace",
            Transport::Uring,
            vec!["--sandbox", "namespace", "--runtime", "uring"],
        ),
    ] {
        let what = mode.0;
        let (d, daemon) = start(&mode);
        assert_in_namespace_sandbox(&daemon, what);
        let conn = connection_dir(&d.mnt);
        let f = d.mnt.join("f");
        let base = waiting(&conn);
        let mut holder = Holder::take(&f, false);
        // More waiters per CPU than a queue has entries (4 by default), on
        // every CPU: each queue's entries are all held by waits at some
        // point, and the requests the kernel queued meanwhile are handed
        // out only by the transport's kick.
        let per_cpu = 12;
        let mut waiters: Vec<Child> = Vec::new();
        for &cpu in &cpus {
            for _ in 0..per_cpu {
                let mut flock = Command::new("flock");
                flock.arg("-x").arg(&f).arg("true");
                waiters.push(
                    on_cpu(cpu, &flock)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap(),
                );
            }
        }
        wait_for_waiting(&conn, base + (per_cpu * cpus.len()) as u64, what);
        // A request on every CPU's queue while the waits hold its entries.
        for &cpu in &cpus {
            let cat = run_within(
                &mut on_cpu(cpu, Command::new("cat").arg(&f)),
                &format!("{what}: cat on CPU {cpu}"),
                &daemon,
                &conn,
            );
            assert_eq!(cat, "contents\n", "{what}: cat on CPU {cpu}");
        }
        holder.release(what);
        all_get_the_lock(&mut waiters, what, &daemon, &conn);
        let log = daemon.stderr();
        assert!(
            log.contains("ring entry added"),
            "{what}: the waits held the queues' entries (entries were added): {log}"
        );
        assert!(error_lines(&log).is_empty(), "{what}: {log}");
    }
}

/// A child process on CPU `cpu` that opens `path` first and, once told (a
/// line on its standard input), waits for an exclusive `flock` on it:
/// its SETLKW is then the first request it issues after the go.
struct OpenWaiter {
    child: Child,
}

impl OpenWaiter {
    fn open(cpu: usize, path: &Path) -> Self {
        let mut perl = Command::new("perl");
        perl.args([
            "-MFcntl=:flock",
            "-MIO::Handle",
            "-e",
            "open(my $f, '<', $ARGV[0]) or die \"open: $!\"; print \"open\\n\"; \
             STDOUT->flush; my $go = <STDIN>; flock($f, LOCK_EX) or die \"lock: $!\";",
        ])
        .arg(path);
        let mut child = on_cpu(cpu, &perl)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        assert_eq!(
            first_line(&mut child),
            "open\n",
            "the waiter opened the file"
        );
        Self { child }
    }

    /// Lets it ask for the lock.
    fn go(&mut self) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
}

#[test]
fn a_request_queued_behind_a_lock_wait_is_served_over_uring_in_the_namespace_sandbox() {
    require_root();
    let cpu = allowed_cpus()[0];
    for runtime in ["sync", "uring"] {
        let what = format!("uring+namespace, --runtime {runtime}");
        let d = dirs();
        std::fs::write(d.src.join("f"), b"contents\n").unwrap();
        let release = "stall-released";
        // One entry and one ring thread per queue: a stalled request holds
        // CPU `cpu`'s queue whole.
        let daemon = Daemon::start_with(
            &d.src,
            &d.mnt,
            Transport::Uring,
            &[
                "--sandbox",
                "namespace",
                "--runtime",
                runtime,
                "--uring-entries",
                "1",
                "--uring-threads-per-queue",
                "1",
            ],
            |cmd| {
                cmd.env("RUST_LOG", "info,fuse_transport_uring=debug").env(
                    "PASSTHROUGHFS_ESCAPE_STALL_UNTIL",
                    format!("/source/{release}"),
                );
            },
        );
        assert_in_namespace_sandbox(&daemon, &what);
        let conn = connection_dir(&d.mnt);
        let f = d.mnt.join("f");
        let mut holder = Holder::take(&f, false);
        let mut waiter = OpenWaiter::open(cpu, &f);
        let base = waiting(&conn);
        let mut stalled = on_cpu(
            cpu,
            Command::new("stat").arg(d.mnt.join(".passthroughfs-escape-stall")),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        // Held once the daemon says so and the kernel counts it; a stat
        // that ends first was not held (a daemon without the hook).
        let start = Instant::now();
        while !(daemon
            .stderr()
            .contains("stall test hook: holding a LOOKUP")
            && waiting(&conn) > base)
        {
            assert!(
                stalled.try_wait().unwrap().is_none() && start.elapsed() < HANG,
                "{what}: the daemon doesn't hold the stalled LOOKUP (is it built with \
                 fault-injection?): {}",
                daemon.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Queued by the kernel in this order behind the stalled request.
        waiter.go();
        wait_for_waiting(&conn, base + 2, &format!("{what}: the lock wait"));
        let mut cat = on_cpu(cpu, Command::new("cat").arg(&f))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_waiting(&conn, base + 3, &format!("{what}: the cat"));
        std::fs::write(d.src.join(release), b"").unwrap();
        reap(&mut stalled, &format!("{what}: the stalled stat"));
        // The stall's commit hands the lock wait its entry, which it keeps;
        // the cat is served through the transport's kick alone.
        let start = Instant::now();
        while cat.try_wait().unwrap().is_none() {
            if start.elapsed() > HANG {
                let report = hang_report(&daemon, &conn);
                let _ = cat.kill();
                panic!("{what}: the cat queued behind the lock wait got no answer; {report}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut out = String::new();
        std::io::Read::read_to_string(cat.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert!(cat.wait().unwrap().success(), "{what}: cat");
        assert_eq!(out, "contents\n", "{what}: cat");
        holder.release(&what);
        let status = reap(&mut waiter.child, &format!("{what}: the waiter"));
        assert!(
            status.success(),
            "{what}: the waiter got the lock: {status}"
        );
        let log = daemon.stderr();
        assert!(error_lines(&log).is_empty(), "{what}: {log}");
    }
}
