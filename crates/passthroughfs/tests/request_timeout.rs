//! `--request-timeout SECS` on the real kernel: a request left unanswered
//! past the timeout makes the kernel abort the connection; the waiting
//! client gets an error instead of hanging, and the daemon says why,
//! unmounts the dead mount and exits. The unanswered request here is a
//! lock wait (`flock(LOCK_EX)` on a file another open file holds): the
//! kernel can't tell a long wait from a hung daemon, which is why the
//! option's help says a timeout also ends lock waits that long. It needs a
//! kernel with `FUSE_REQUEST_TIMEOUT` (Linux 6.14+): without one the wait
//! is never timed out and the test fails, saying so.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

/// Only catches hangs: the kernel checks for expired requests every few
/// seconds (15 at most).
const HANG: Duration = Duration::from_secs(300);

test_support::test_cases! {
    an_unanswered_request_aborts_the_connection_and_the_daemon_unmounts =>
        aborted_in(Transport::Dev, &[]);
    an_unanswered_request_aborts_the_connection_on_tokio =>
        aborted_in(Transport::Dev, &["--runtime", "tokio"]);
}

#[test]
fn an_unanswered_request_aborts_the_connection_over_io_uring() {
    require_uring();
    aborted_in(Transport::Uring, &[]);
}

/// The daemon with `--request-timeout 1` on `transport` with `extra`
/// arguments: a lock wait past the timeout ends the connection and the
/// daemon.
fn aborted_in(transport: Transport, extra: &[&str]) {
    require_root();
    let d = dirs();
    std::fs::write(d.src.join("locked"), b"x").unwrap();
    let mut args = vec!["--request-timeout", "1"];
    args.extend_from_slice(extra);
    let daemon = Daemon::start(&d.src, &d.mnt, transport, &args);
    let path = d.mnt.join("locked");
    let holder = File::open(&path).unwrap();
    assert_eq!(
        // SAFETY: `holder` is an open File that outlives the call; flock
        // takes no pointers.
        unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let waiter = File::open(&path).unwrap();
        // SAFETY: flock on a descriptor we own; it waits for `holder`.
        let r = unsafe { libc::flock(waiter.as_raw_fd(), libc::LOCK_EX) };
        let _ = tx.send((r, std::io::Error::last_os_error()));
    });
    let (r, err) = rx
        .recv_timeout(HANG)
        .expect("the lock wait was never timed out (does the kernel offer FUSE_REQUEST_TIMEOUT?)");
    if r == 0 {
        // Granted: only if the kernel negotiated no timeout (and the
        // holder's lock went away, which it can't have): say so.
        panic!("the lock wait succeeded; stderr:\n{}", daemon.stderr());
    }
    drop(holder);
    let (status, stderr, _) = daemon.wait_exit(HANG);
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ECONNABORTED),
        "{err}; stderr:\n{stderr}"
    );
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(
        stderr.contains("the kernel aborted the connection"),
        "the daemon didn't say why it ended; stderr:\n{stderr}"
    );
    assert!(!is_mounted(&d.mnt), "the dead mount was left behind");
}
