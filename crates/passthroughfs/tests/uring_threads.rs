//! Where `passthroughfs --uring`'s ring threads may run: each pinned to its
//! queue's CPU by default (the kernel picks a request's queue by the CPU
//! it was issued on), free to run anywhere the daemon may with
//! `--uring-unpinned` (docs/benchmarks.md, "Where the ring threads run",
//! says what each costs); and at what nice value (`--uring-nice`, -5 by
//! default: "Ring threads above their clients"). Read from
//! `/proc/PID/task/TID/status` and `stat` of a serving daemon. They need
//! root and FUSE over io_uring, and fail with the reason otherwise.

#[path = "support/daemon.rs"]
mod daemon;

use daemon::*;

/// `(name, allowed CPUs)` of each ring thread (`fuse-uring-N`) of `pid`,
/// and the CPUs the process's main thread may run on.
fn ring_threads(pid: i32) -> (Vec<(String, String)>, String) {
    let mut ring = Vec::new();
    let mut process = String::new();
    for line in test_support::thread_allowed_cpus(pid) {
        let (name, cpus) = line.split_once(' ').unwrap_or((&line, ""));
        if name.starts_with("fuse-uring-") {
            ring.push((name.to_owned(), cpus.to_owned()));
        } else if name == "passthroughfs" {
            process = cpus.to_owned();
        }
    }
    ring.sort();
    (ring, process)
}

/// Serves fresh directories over io_uring with `extra` and checks each
/// ring thread's allowed CPUs (`name`, CPUs) with `check`, given the
/// daemon's own.
fn check_ring_threads(extra: &[&str], check: impl Fn(&str, &str, &str)) {
    let d = guarded_dirs_as_root();
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Uring, extra);
    // Serving: the mount answers (the ring threads are up).
    std::fs::metadata(&d.mnt).unwrap();
    let (threads, process) = ring_threads(daemon.pid());
    assert!(!threads.is_empty(), "no ring threads: {}", daemon.stderr());
    assert!(!process.is_empty(), "no main thread: {}", daemon.stderr());
    for (name, cpus) in &threads {
        check(name, cpus, &process);
    }
}

#[test]
fn ring_threads_are_pinned_to_their_queues_cpus_by_default() {
    check_ring_threads(&[], |name, cpus, process| {
        assert!(
            cpus.parse::<usize>().is_ok(),
            "{name} may run on {cpus:?}, not on one CPU (the daemon on {process:?})"
        );
    });
}

#[test]
fn uring_unpinned_leaves_the_ring_threads_free() {
    check_ring_threads(&["--uring-unpinned"], |name, cpus, process| {
        assert_eq!(
            cpus, process,
            "{name} may run where the daemon may, with --uring-unpinned"
        );
    });
}

/// The nice value of each ring thread of a daemon serving fresh
/// directories over io_uring with `extra`.
fn ring_thread_nices(extra: &[&str]) -> Vec<(String, i32)> {
    let d = guarded_dirs_as_root();
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Uring, extra);
    std::fs::metadata(&d.mnt).unwrap();
    let ring: Vec<_> = test_support::thread_nices(daemon.pid())
        .into_iter()
        .filter(|(name, _)| name.starts_with("fuse-uring-"))
        .collect();
    assert!(!ring.is_empty(), "no ring threads: {}", daemon.stderr());
    ring
}

/// Lowering a nice value takes `CAP_SYS_NICE` in the initial user
/// namespace (a user namespace's root keeps 0 and serves all the same).
#[test]
fn ring_threads_run_at_nice_minus_5_by_default_needs_root() {
    for (name, nice) in ring_thread_nices(&[]) {
        assert_eq!(nice, -5, "{name} runs at nice {nice}");
    }
}

/// A higher nice needs no privilege: this one holds in a user namespace too.
#[test]
fn uring_nice_sets_the_ring_threads_nice() {
    for (name, nice) in ring_thread_nices(&["--uring-nice", "3"]) {
        assert_eq!(nice, 3, "{name} runs at nice {nice} with --uring-nice 3");
    }
}
