//! The open file limit: the `passthroughfs` daemon started with a hard
//! `RLIMIT_NOFILE` of 512 or 1024 says at start what the limit allows,
//! walks (`find -ls`) a tree of 5,000 files without a single "Too many
//! open files", and keeps doing so while clients hold more files open than
//! the limit leaves beside its descriptor cache (the cache, sized to three
//! quarters of the limit, gives its descriptors back when an open runs out, and the
//! open is tried again).
//!
//! Needs real root: inodes are held by file handle (`open_by_handle_at`
//! needs `CAP_DAC_READ_SEARCH` in the initial user namespace).

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use test_support::strip_ansi;

/// `find MNT -ls`: must list `entries` lines and report no error.
fn walk(mnt: &Path, entries: usize, what: &str) {
    let out = Command::new("find").arg(mnt).arg("-ls").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors = stderr.lines().count();
    assert!(
        out.status.success() && errors == 0,
        "{what}: find -ls reported {errors} errors, the first: {}",
        stderr.lines().next().unwrap_or("")
    );
    let lines = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(lines, entries, "{what}: find listed every entry");
}

fn walks_within_a_hard_limit(limit: u64) {
    require_root();
    let files = 5000;
    let d = dirs();
    let ndirs = make_tree(&d.src, files, 0);
    let entries = files + ndirs + 1;
    let daemon = Daemon::start_with(&d.src, &d.mnt, Transport::Dev, &[], |cmd| {
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let rl = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let log = strip_ansi(&daemon.stderr());
    let cached = limit / 4 * 3;
    assert!(
        log.contains("inodes held by file handle")
            && log.contains(&format!("fd_limit={limit}"))
            && log.contains(&format!("descriptors of up to {cached} in use kept open")),
        "the start says what the limit of {limit} allows (three quarters of it cached): {log}"
    );

    walk(&d.mnt, entries, &format!("limit {limit}"));

    // Clients hold three quarters of the limit open: with the cache full,
    // opens run out of descriptors until the cache gives its back.
    let held: Vec<std::fs::File> = (0..(limit * 3 / 4) as usize)
        .map(|i| {
            let path = d.mnt.join(format!("d{}/f{}", i % ndirs, i / ndirs));
            std::fs::File::open(&path)
                .unwrap_or_else(|e| panic!("limit {limit}: opening file {i} ({path:?}): {e}"))
        })
        .collect();
    walk(
        &d.mnt,
        entries,
        &format!("limit {limit} with {} files held open", held.len()),
    );
    drop(held);
    walk(
        &d.mnt,
        entries,
        &format!("limit {limit}, files closed again"),
    );
    assert!(
        daemon.stderr().contains("out of file descriptors"),
        "the daemon said it ran out and gave cached descriptors back: {}",
        daemon.stderr()
    );
}

test_support::test_cases! {
    find_ls_of_5000_files_under_a_hard_limit_of_512_needs_root => walks_within_a_hard_limit(512);
    find_ls_of_5000_files_under_a_hard_limit_of_1024_needs_root => walks_within_a_hard_limit(1024);
}
