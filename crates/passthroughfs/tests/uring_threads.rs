//! Where `passthroughfs --uring`'s ring threads may run: each pinned to its
//! queue's CPU by default (the kernel picks a request's queue by the CPU
//! it was issued on), free to run anywhere the daemon may with
//! `--uring-unpinned` (docs/benchmarks.md, "Where the ring threads run",
//! says what each costs). Read from `/proc/PID/task/TID/status` of a
//! serving daemon. They need root and FUSE over io_uring, and fail with
//! the reason otherwise.

#[path = "support/daemon.rs"]
mod daemon;

use daemon::*;

/// `Cpus_allowed_list` of a `/proc/.../status` file.
fn allowed_cpus(status: &str) -> String {
    let text = std::fs::read_to_string(status).unwrap_or_else(|e| panic!("{status}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("{status} has no Cpus_allowed_list"))
        .trim()
        .to_owned()
}

/// `(name, allowed CPUs)` of each ring thread (`fuse-uring-N`) of `pid`.
fn ring_threads(pid: i32) -> Vec<(String, String)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let name = name.trim();
        if name.starts_with("fuse-uring-") {
            let status = dir.join("status");
            threads.push((name.to_owned(), allowed_cpus(&status.to_string_lossy())));
        }
    }
    threads.sort();
    threads
}

/// Serves fresh directories over io_uring with `extra` and checks each
/// ring thread's allowed CPUs (`name`, CPUs) with `check`, given the
/// daemon's own.
fn check_ring_threads(extra: &[&str], check: impl Fn(&str, &str, &str)) {
    let d = guarded_dirs_as_root();
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Uring, extra);
    // Serving: the mount answers (the ring threads are up).
    std::fs::metadata(&d.mnt).unwrap();
    let threads = ring_threads(daemon.pid());
    let process = allowed_cpus(&format!("/proc/{}/status", daemon.pid()));
    assert!(!threads.is_empty(), "no ring threads: {}", daemon.stderr());
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
