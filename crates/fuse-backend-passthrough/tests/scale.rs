//! Scale: the `passthroughfs` daemon, started with the usual default soft
//! open file limit (1024), walks (`find -ls`: a lookup and a stat of every
//! entry) a tree of 200,000 files twice, holding inodes by file handle;
//! its descriptors stay few (about the 1024 of its cache), and after each
//! walk a FORGET storm (`drop_caches`) gives the memory back: after the
//! second, its resident memory is within 10% of what it was before that
//! walk (the first walk also warms the daemon up: worker threads started
//! on demand, their stacks and buffers; its numbers are printed).
//!
//! `FUSE_SCALE_FILES` sets the number of files (default 200,000; a walk
//! takes 10 to 20 s here, the whole test 2 to 3 minutes). Needs real root
//! (`drop_caches`, and `open_by_handle_at` needs `CAP_DAC_READ_SEARCH` in
//! the initial user namespace), hence `needs_root` in the name. Timings
//! are printed, never asserted.

mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Open descriptors of a process.
fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn make_tree(src: &Path, files: usize) -> usize {
    let per_dir = 1000;
    let dirs = files.div_ceil(per_dir);
    for d in 0..dirs {
        let dir = src.join(format!("d{d:04}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::File::create(dir.join(format!("f{f:04}"))).unwrap();
        }
    }
    dirs
}

#[test]
fn walk_of_200k_files_with_default_fd_limit_and_rss_back_after_forget_needs_root() {
    require_root();
    let files: usize = std::env::var("FUSE_SCALE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let d = dirs();
    let t = Instant::now();
    let ndirs = make_tree(&d.src, files);
    eprintln!(
        "scale: made {files} files in {ndirs} directories in {:?}",
        t.elapsed()
    );

    // The soft limit a login shell or a service gets by default.
    let daemon = Daemon::start_with(&d.src, &d.mnt, Transport::Dev, &[], |cmd| {
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                let rl = libc::rlimit {
                    rlim_cur: 1024,
                    rlim_max: 20_000,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
                Ok(())
            });
        }
    });
    let pid = daemon.pid();
    let log = daemon.stderr();
    assert!(
        log.contains("inodes held by file handle"),
        "file handles are used here (ext4 or tmpfs, real root): {log}"
    );
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    eprintln!("scale: daemon {open_files}");
    assert!(
        open_files.split_whitespace().nth(3) == open_files.split_whitespace().nth(4),
        "the soft limit was raised to the hard one: {open_files}"
    );

    assert_eq!(std::fs::read_dir(&d.mnt).unwrap().count(), ndirs);
    let rss_start = rss_kib(pid);
    eprintln!(
        "scale: at start RSS {rss_start} KiB, {} descriptors, {} threads",
        fd_count(pid),
        thread_names(pid as u32).len()
    );
    // Two rounds of walk and FORGET storm. The first also warms the daemon
    // up (worker threads started on demand, their stacks and buffers in
    // use); the second must give back all it took: memory that grows with
    // the number of inodes must not stay.
    let mut rss_before = rss_start;
    for round in 1..=2 {
        let fds_before = fd_count(pid);
        let t = Instant::now();
        let out = Command::new("find")
            .arg(&d.mnt)
            .arg("-ls")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let walk = t.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "find failed: {stderr}");
        assert!(stderr.is_empty(), "find reported errors: {stderr}");
        let lines = out
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        assert_eq!(lines, files + ndirs + 1, "find listed every entry");
        let rss_walk = rss_kib(pid);
        let fds_walk = fd_count(pid);
        eprintln!(
            "scale: round {round}: find -ls of {lines} entries took {walk:?}; daemon RSS \
             {rss_before} KiB before, {rss_walk} KiB after the walk; descriptors {fds_before} \
             before, {fds_walk} after"
        );
        // The descriptors of inodes in use are cached, up to half the
        // limit (20,000 here, so at most 8192 cached): the other inodes
        // must need none.
        assert!(
            fds_walk < 10_000,
            "the daemon holds {fds_walk} descriptors after the walk of {lines} entries: \
             inodes beyond the cache of inodes in use should need none"
        );

        // A FORGET storm: the kernel drops its inodes and tells the daemon.
        let t = Instant::now();
        let mut last = u64::MAX;
        let mut rss_after = rss_kib(pid);
        while t.elapsed() < Duration::from_secs(60)
            && (if round == 1 {
                rss_after != last
            } else {
                rss_after > rss_before + rss_before / 10
            })
        {
            std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
            std::thread::sleep(Duration::from_millis(700));
            last = rss_after;
            rss_after = rss_kib(pid);
        }
        eprintln!(
            "scale: round {round}: after the FORGET storm ({:?}) RSS {rss_after} KiB \
             ({:+.1}% of before the walk), {} descriptors, {} threads",
            t.elapsed(),
            (rss_after as f64 / rss_before as f64 - 1.0) * 100.0,
            fd_count(pid),
            thread_names(pid as u32).len()
        );
        if round == 2 {
            assert!(
                rss_after <= rss_before + rss_before / 10,
                "RSS {rss_after} KiB is not within 10% of {rss_before} KiB"
            );
        }
        rss_before = rss_after;
    }
    daemon.signal(libc::SIGTERM);
    let (status, stderr, _) = daemon.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    assert!(error_lines(&stderr).is_empty(), "{stderr}");
}
