//! `passthroughfs --uring` falling back to `/dev/fuse` for real: the
//! daemon runs under a seccomp filter that refuses it `io_uring_setup(2)`
//! (`support/seccomp.rs`; the machine-wide switches would reach every other
//! test), so each of its fallback paths is taken where the kernel itself
//! offers io_uring:
//!
//! - io_uring refused entirely: the daemon's probe fails before INIT, so it
//!   never asks for `FUSE_OVER_IO_URING` ("this process cannot create an
//!   io_uring");
//! - only the ring threads' rings refused: INIT agrees to io_uring, the
//!   ring threads fail to set up, and the daemon switches the connection
//!   back to `/dev/fuse` (`switch_kernel_to_dev_fuse`).
//!
//! On each: the fallback serves with as many `/dev/fuse` workers as plain
//! `/dev/fuse` serving (or `--threads`), which its start line says and its
//! threads show; and Ctrl-C (SIGINT) unmounts and exits 0 (it used to log
//! "unmounting on signal" and hang). The third path, a kernel that doesn't
//! offer `FUSE_OVER_IO_URING`, needs the global `enable_uring` switch off
//! and is not run here (see docs/testing.md).
//!
//! They need root (mounting); the second path needs
//! `/sys/module/fuse/parameters/enable_uring` = Y.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/seccomp.rs"]
mod seccomp;

use common::require_root;
use daemon::*;
use seccomp::Refusal;
use std::time::{Duration, Instant};

/// Only to catch a hang.
const DEADLINE: Duration = Duration::from_secs(60);

/// The workers the start line of `log` reports: the number in
/// "/dev/fuse, N worker threads" ("1 worker thread").
fn workers_in_start_line(log: &str) -> usize {
    let line = log
        .lines()
        .find(|l| l.contains("passthroughfs serving"))
        .unwrap_or_else(|| panic!("no start line: {log}"));
    let at = line
        .find("/dev/fuse, ")
        .unwrap_or_else(|| panic!("the start line names no /dev/fuse workers: {line}"));
    let digits: String = line[at + "/dev/fuse, ".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no worker count in: {line}"))
}

/// The daemon's threads named `fuse-dev` (its `/dev/fuse` workers).
fn dev_worker_threads(d: &Daemon) -> usize {
    thread_names(d.pid() as u32)
        .iter()
        .filter(|n| *n == "fuse-dev")
        .count()
}

/// What plain `/dev/fuse` serving starts with (no `--threads`).
fn plain_dev_workers() -> usize {
    let d = dirs();
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Dev, &[]);
    let n = workers_in_start_line(&daemon.stderr());
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(DEADLINE);
    assert!(status.success(), "{status}: {log}");
    n
}

/// `passthroughfs --uring EXTRA` under `refusal`: which path it took (the
/// log says `why`), how many workers serve, and that Ctrl-C ends it.
fn falls_back(refusal: Refusal, why: &str, extra: &[&str], workers: usize) {
    require_root();
    if refusal != Refusal::All {
        require_uring();
    }
    let d = dirs();
    std::fs::write(d.src.join("f"), b"served").unwrap();
    let args = [&["--uring"], extra].concat();
    let daemon = Daemon::start_with(&d.src, &d.mnt, Transport::Dev, &args, |cmd| {
        seccomp::refuse_io_uring(cmd, refusal)
    });
    let log = daemon.stderr();
    assert!(
        log.contains(&format!(
            "FUSE over io_uring falls back to /dev/fuse: {why}"
        )),
        "the fallback is logged with its reason ({why}): {log}"
    );
    if refusal != Refusal::All {
        // The kernel was asked, and agreed: the probe went through.
        assert!(!log.contains("cannot create an io_uring"), "{log}");
    }
    assert!(
        log.contains("(no io_uring: "),
        "the start line says why: {log}"
    );
    assert_eq!(
        workers_in_start_line(&log),
        workers,
        "the fallback serves with the workers of plain /dev/fuse serving: {log}"
    );
    // Thread names are set by the threads themselves, just after they start.
    let start = Instant::now();
    while dev_worker_threads(&daemon) < workers {
        assert!(
            start.elapsed() < DEADLINE,
            "{} fuse-dev threads, not {workers}: {:?}",
            dev_worker_threads(&daemon),
            thread_names(daemon.pid() as u32)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"served");
    std::fs::write(d.mnt.join("g"), b"written").unwrap();

    daemon.signal(libc::SIGINT);
    let (status, log, _) = daemon.wait_exit(DEADLINE);
    assert!(status.success(), "Ctrl-C: exit status {status}: {log}");
    assert!(log.contains("unmounting on signal"), "{log}");
    assert!(log.contains("unmounted; exiting"), "{log}");
    assert!(error_lines(&log).is_empty(), "{log}");
    assert!(!is_mounted(&d.mnt), "still mounted after Ctrl-C");
    assert_eq!(std::fs::read(d.src.join("g")).unwrap(), b"written");
}

#[test]
fn uring_refused_falls_back_with_the_default_workers_and_stops_on_ctrl_c() {
    require_root();
    let workers = plain_dev_workers();
    falls_back(
        Refusal::All,
        "this process cannot create an io_uring: Operation not permitted",
        &[],
        workers,
    );
}

#[test]
fn uring_refused_falls_back_with_threads_workers() {
    falls_back(
        Refusal::All,
        "this process cannot create an io_uring: Operation not permitted",
        &["--threads", "3"],
        3,
    );
}

#[test]
fn ring_setup_failing_falls_back_with_the_default_workers_and_stops_on_ctrl_c() {
    require_root();
    let workers = plain_dev_workers();
    // 8 entries per queue on one thread: the ring threads ask for
    // 16-entry rings.
    falls_back(
        Refusal::LargerThan(4),
        "creating an io_uring: Operation not permitted",
        &["--uring-entries", "8", "--uring-threads-per-queue", "1"],
        workers,
    );
}

#[test]
fn ring_setup_failing_falls_back_with_threads_workers() {
    falls_back(
        Refusal::LargerThan(4),
        "creating an io_uring: Operation not permitted",
        &[
            "--uring-entries",
            "8",
            "--uring-threads-per-queue",
            "1",
            "--threads",
            "3",
        ],
        3,
    );
}
