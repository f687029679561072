//! The request log through a real mount: the hello example served with
//! `Server::with_request_log(true)`, a stat and a failed lookup through the
//! kernel, and their lines in the log, written from the worker threads.
//! Needs root (CI runs as root).
//!
//! The log goes to a process-wide subscriber (the workers are threads of
//! their own), so this file holds this one test.

#[path = "../examples/hello.rs"]
#[allow(dead_code)]
mod hello;

mod common;

use common::require_root;
use fuse_server::{Server, Session};
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::log::{without_latency, LogBuf};

/// Only a broken mount takes this long to log what it answered.
const DEADLINE: Duration = Duration::from_secs(60);

/// Waits until a line of `log` contains each of `parts` and returns it.
fn wait_for_line(log: &LogBuf, parts: &[&str]) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let lines = log.lines();
        if let Some(line) = lines.iter().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no line with {parts:?} in the log:\n{}",
            lines.join("\n")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn request_log_through_a_mount() {
    require_root();
    let log = LogBuf::default();
    tracing::subscriber::set_global_default(log.subscriber("fuse_request=info")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let server = Server::new(Arc::new(hello::HelloFs::new())).with_request_log(true);
    let options = MountOptions::default().fsname("hello").read_only(true);
    let session = DevSession::mount(server, dir.path(), &options, SessionConfig::default())
        .expect("mounting the hello example");
    let mnt = session.mountpoint().to_path_buf();

    let meta = std::fs::metadata(mnt.join(hello::NAME)).unwrap();
    assert_eq!(meta.len(), hello::CONTENT.len() as u64);
    let missing = std::fs::metadata(mnt.join("nope")).unwrap_err();
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(
        std::fs::read(mnt.join(hello::NAME)).unwrap(),
        hello::CONTENT
    );

    let init = wait_for_line(&log, &[" INIT node=0 kernel=7."]);
    let found = wait_for_line(&log, &[" LOOKUP node=1 name=\"hello.txt\" "]);
    let not_found = wait_for_line(&log, &[" LOOKUP node=1 name=\"nope\" "]);
    let read = wait_for_line(&log, &[" READ node=2 fh=0 offset=0 "]);
    session.stop();
    session.wait().unwrap();
    // What a reader sees (cargo test --nocapture).
    eprintln!("{}", log.lines().join("\n"));

    for line in [&init, &found, &not_found, &read] {
        assert!(
            line.trim_start().starts_with("INFO fuse_request: unique="),
            "{line}"
        );
    }
    assert!(
        without_latency(&init).ends_with(" -> ok 64 bytes"),
        "{init}"
    );
    assert!(
        without_latency(&found).ends_with(" -> ok node=2"),
        "{found}"
    );
    assert!(
        without_latency(&not_found).ends_with(" -> ENOENT errno=2"),
        "{not_found}"
    );
    let want = format!(" -> ok {} bytes", hello::CONTENT.len());
    assert!(without_latency(&read).ends_with(&want), "{read}");
    // One line per request: no unique appears twice.
    let lines = log.lines();
    let mut uniques: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("unique=")))
        .collect();
    let all = uniques.len();
    uniques.sort_unstable();
    uniques.dedup();
    assert_eq!(
        uniques.len(),
        all,
        "a request logged twice:\n{}",
        lines.join("\n")
    );
}
