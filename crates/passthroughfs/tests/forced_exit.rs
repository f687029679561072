//! A second Ctrl-C forces `passthroughfs` out when the first one's stop
//! can't finish: the daemon logs that it forces the exit, detaches its
//! mount (lazy unmount) and dies of the signal, on
//! `/dev/fuse` (worker threads, and a task on a tokio runtime), on FUSE
//! over io_uring, and on `--uring`'s fallback to
//! `/dev/fuse` (io_uring refused by a seccomp filter, `support/seccomp.rs`).
//!
//! A stop that can't finish, made for certain: the daemon under test ("A")
//! serves a directory of another passthrough mount ("B"). B is stopped
//! (SIGSTOP), a client looks up a new name on A, and A's handler is seen
//! blocked in B's `request_wait_answer`: A's stop waits for that request,
//! which can't end while B is stopped. Before, a second signal did nothing
//! (the signal thread ended after the first).
//!
//! They need root (mounting); the io_uring run needs
//! `/sys/module/fuse/parameters/enable_uring` = Y.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/seccomp.rs"]
mod seccomp;

use common::require_root;
use daemon::*;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

/// Only to catch a hang.
const DEADLINE: Duration = Duration::from_secs(60);

/// How A serves.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Dev,
    Uring,
    /// `--uring` with io_uring refused: the `/dev/fuse` fallback.
    UringFallback,
    /// `--runtime tokio`: a `FuseDevTask` (its own signal thread set-up).
    Tokio,
}

/// Whether a thread of process `pid` waits for a FUSE reply.
fn waits_for_a_fuse_reply(pid: i32) -> bool {
    thread_wchans(pid)
        .iter()
        .any(|w| w.ends_with(" request_wait_answer"))
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool, why: impl Fn() -> String) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "waiting for {what}: {}", why());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`wait_for`] A's handler to wait for a reply (from B); what the threads
/// of A and B wait on, and `more`, say why not.
fn wait_for_a_to_wait_on_b(what: &str, a: &Daemon, b: &Daemon, more: impl Fn() -> String) {
    let why = || {
        format!(
            "A's threads: {:?}; B's: {:?}; {}",
            thread_wchans(a.pid()),
            thread_wchans(b.pid()),
            more()
        )
    };
    wait_for(what, || waits_for_a_fuse_reply(a.pid()), why);
}

fn second_signal_forces_the_exit(mode: Mode, first: i32, second: i32) {
    require_root();
    let d = dirs();
    // B serves B-src at A's source directory; A serves that at d.mnt.
    let (b_src, a_src) = (d.dir.path().join("b-src"), d.src.clone());
    std::fs::create_dir(&b_src).unwrap();
    std::fs::write(b_src.join("f"), b"through two mounts").unwrap();
    let b = Daemon::start(&b_src, &a_src, Transport::Dev, &[]);
    let a = match mode {
        Mode::Dev => Daemon::start(&a_src, &d.mnt, Transport::Dev, &[]),
        Mode::Uring => Daemon::start(&a_src, &d.mnt, Transport::Uring, &[]),
        Mode::Tokio => Daemon::start(&a_src, &d.mnt, Transport::Dev, &["--runtime", "tokio"]),
        Mode::UringFallback => {
            Daemon::start_with(&a_src, &d.mnt, Transport::Dev, &["--uring"], |cmd| {
                seccomp::refuse_io_uring(cmd, seccomp::Refusal::All)
            })
        }
    };
    if let Mode::UringFallback = mode {
        assert!(a.stderr().contains("(no io_uring: "), "{}", a.stderr());
    }
    // A serves B's files. Only metadata: a file opened and closed through A
    // makes A close its descriptor on B later, a FLUSH that B could be
    // stopped holding (the closing thread of A would then wait for B, even
    // killed: the kernel waits out a request its server has read).
    assert_eq!(std::fs::metadata(d.mnt.join("f")).unwrap().len(), 18);
    // B idle (every worker waiting for a request) before it is stopped.
    wait_for(
        "B to be idle",
        || {
            let w = thread_wchans(b.pid());
            w.iter()
                .filter(|w| w.starts_with("fuse-dev "))
                .all(|w| w == "fuse-dev fuse_dev_do_read")
        },
        || format!("{:?}", thread_wchans(b.pid())),
    );

    // A request A can't answer while B is stopped.
    b.signal(libc::SIGSTOP);
    // Every thread of B stopped: none can take the request and answer it,
    // or hold it (A's handler would then wait without a timeout for B).
    wait_for(
        "B to stop",
        || threads_stopped(b.pid()),
        || format!("{:?}", thread_wchans(b.pid())),
    );
    let name = d.mnt.join("never-seen");
    let client = std::thread::spawn(move || std::fs::metadata(name).map(drop));
    wait_for_a_to_wait_on_b("A's handler to wait for B", &a, &b, || {
        format!("the client's lookup ended: {}", client.is_finished())
    });

    a.signal(first);
    wait_for(
        "the first signal to be taken",
        || a.stderr().contains("unmounting on signal"),
        || a.stderr(),
    );
    // The stop can't finish: the handler still waits for B. The stop's
    // wake signal ends the handler's interruptible wait for a moment (the
    // kernel then waits on, killable only, for a request B never read):
    // seen running at that moment it is not yet back in the wait.
    wait_for_a_to_wait_on_b(
        "A's handler to wait for B again after the first signal",
        &a,
        &b,
        || format!("A's log: {}", a.stderr()),
    );
    a.signal(second);
    let (status, log, _) = a.wait_exit(DEADLINE);
    assert_eq!(
        status.signal(),
        Some(second),
        "A dies of the second signal: {status}\n{log}"
    );
    assert!(log.contains("forcing the exit"), "{log}");
    assert!(!is_mounted(&d.mnt), "the mount is detached: {log}");
    // The client's request ended with the connection.
    let r = with_timeout(DEADLINE, move || client.join().unwrap())
        .expect("the client hangs after the forced exit");
    let errno = r.unwrap_err().raw_os_error();
    assert!(
        matches!(errno, Some(libc::ECONNABORTED | libc::ENOTCONN)),
        "the client's lookup: {errno:?}"
    );

    // B goes on and stops cleanly.
    b.signal(libc::SIGCONT);
    b.signal(libc::SIGTERM);
    let (status, log, _) = b.wait_exit(DEADLINE);
    assert!(status.success(), "B: {status}\n{log}");
    assert!(!is_mounted(&a_src));
}

test_support::test_cases! {
    second_ctrl_c_forces_the_exit_dev =>
        second_signal_forces_the_exit(Mode::Dev, libc::SIGINT, libc::SIGINT);
    second_ctrl_c_forces_the_exit_uring =>
        second_signal_forces_the_exit(Mode::Uring, libc::SIGINT, libc::SIGINT);
    second_ctrl_c_forces_the_exit_uring_fallback =>
        second_signal_forces_the_exit(Mode::UringFallback, libc::SIGINT, libc::SIGINT);
    second_ctrl_c_forces_the_exit_tokio =>
        second_signal_forces_the_exit(Mode::Tokio, libc::SIGINT, libc::SIGINT);
    sigterm_after_ctrl_c_forces_the_exit_dev =>
        second_signal_forces_the_exit(Mode::Dev, libc::SIGINT, libc::SIGTERM);
}
