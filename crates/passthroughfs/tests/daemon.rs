//! The `passthroughfs` daemon: argument errors, refusing unsafe option
//! combinations, serving in the foreground, unmounting on SIGINT, SIGTERM
//! and SIGHUP, and ending when unmounted from outside. The mounting tests
//! need root (CI runs as root) and fail with the reason otherwise.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_passthroughfs");

/// The daemon's command, its log at info and both output streams piped.
fn daemon_command() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs the daemon to completion (failing the test if it doesn't end).
fn run(args: &[&str]) -> Output {
    let child = daemon_command().args(args).spawn().unwrap();
    wait_with_timeout(child, Duration::from_secs(30))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The error lines the daemon printed (log lines aside).
fn error_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("passthroughfs: error"))
        .map(str::to_owned)
        .collect()
}

fn dirs() -> test_support::Scratch {
    test_support::scratch("pt-daemon-")
}

/// Fails the test unless we are root (the caller mounts); then [`dirs`].
fn dirs_as_root() -> test_support::Scratch {
    require_root();
    dirs()
}

/// A running daemon; killed and its mount removed on drop.
struct Daemon {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Daemon {
    fn start(src: &Path, mnt: &Path, extra: &[&str]) -> Self {
        let child = daemon_command()
            .arg("--foreground")
            .args(extra)
            .arg(src)
            .arg(mnt)
            .spawn()
            .unwrap();
        let mut d = Daemon {
            child: Some(child),
            mnt: mnt.to_path_buf(),
        };
        let up = wait_until(Duration::from_secs(60), || {
            is_mounted(mnt) || d.child.as_mut().unwrap().try_wait().unwrap().is_some()
        });
        assert!(
            up && is_mounted(mnt),
            "daemon did not mount {}",
            mnt.display()
        );
        d
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    fn wait(mut self) -> Output {
        let child = self.child.take().unwrap();
        wait_with_timeout(child, Duration::from_secs(20))
    }
}

fn wait_with_timeout(mut child: Child, timeout: Duration) -> Output {
    let done = wait_until(timeout, || child.try_wait().unwrap().is_some());
    if !done {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        done,
        "daemon did not exit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::kill_and_detach(self.child.take(), &self.mnt);
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["/tmp"][..],
        &["--cache", "sometimes", "/a", "/b"][..],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--threads",
        "--cache",
        "--writeback",
        "--attr-timeout",
        "--entry-timeout",
        "--no-xattr",
        "--no-readdirplus",
        "--no-open",
        "--no-opendir",
        "--killpriv-v2",
        "--allow-other",
        "--default-permissions",
        "--ro",
        "--fsname",
        "--subtype",
        "--max-read",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

/// What clap refuses carries the prefix of every other error; with
/// nothing given, the usage line comes first and the error names what a
/// mount needs (not a vhost-user option).
#[test]
fn usage_errors_say_passthroughfs_and_show_the_usage() {
    for flag in ["-x", "--no-such-flag"] {
        let o = run(&[flag, "/a", "/b"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.starts_with(&format!(
                "passthroughfs: error: unexpected argument '{flag}' found"
            )),
            "{err}"
        );
    }
    let o = run(&[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("Usage: {}", passthroughfs::cli::USAGE).as_str()),
        "{err}"
    );
    assert_eq!(
        lines.get(1).copied(),
        Some("passthroughfs: error: SOURCE and MOUNTPOINT are missing"),
        "{err}"
    );
    assert!(!err.contains("--shared-dir"), "{err}");
    let o = run(&["/tmp"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("Usage: passthroughfs "), "{err}");
    assert!(
        err.contains("passthroughfs: error: MOUNTPOINT is missing"),
        "{err}"
    );
}

#[test]
fn bad_source_and_mountpoint_fail_with_one_line() {
    let d = dirs();
    let file = d.src.join("file");
    std::fs::write(&file, b"").unwrap();
    let missing = d.src.join("missing");
    let cases: Vec<(Vec<&Path>, &str)> = vec![
        (vec![&missing, &d.mnt], "does not exist"),
        (vec![&file, &d.mnt], "not a directory"),
        (vec![&d.src, &missing], "does not exist"),
        (vec![&d.src, &file], "not a directory"),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(|p| p.to_str().unwrap()).collect();
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let errs = error_lines(&o);
        assert_eq!(errs.len(), 1, "{args:?}: {}", stderr(&o));
        assert!(errs[0].contains(want), "{args:?}: {}", errs[0]);
    }
    let o = run(&[
        "--threads",
        "0",
        d.src.to_str().unwrap(),
        d.mnt.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
}

/// `o` is a refusal with status 1 and one error line, which starts with
/// `start`; nothing was mounted on `mnt`.
fn refused_in_one_line(o: &Output, start: &str, mnt: &Path) {
    assert_eq!(o.status.code(), Some(1));
    let errs = error_lines(o);
    assert_eq!(errs.len(), 1, "{}", stderr(o));
    assert!(errs[0].starts_with(start), "{}", errs[0]);
    assert!(!is_mounted(mnt));
}

#[test]
fn allow_other_needs_default_permissions() {
    let d = dirs();
    let o = run(&[
        "--allow-other",
        d.src.to_str().unwrap(),
        d.mnt.to_str().unwrap(),
    ]);
    refused_in_one_line(
        &o,
        "passthroughfs: error: --allow-other needs --default-permissions",
        &d.mnt,
    );
    // Typed as a mount option (an fstab line): named as one.
    let o = run(&[
        d.src.to_str().unwrap(),
        d.mnt.to_str().unwrap(),
        "-o",
        "ro,allow_other",
    ]);
    refused_in_one_line(
        &o,
        "passthroughfs: error: -o allow_other needs -o default_permissions",
        &d.mnt,
    );
}

#[test]
fn serves_and_unmounts_on_signals() {
    require_root();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let d = dirs();
        let daemon = Daemon::start(
            &d.src,
            &d.mnt,
            &["--allow-other", "--default-permissions", "--threads", "3"],
        );
        std::fs::write(d.mnt.join("f"), b"through the daemon").unwrap();
        assert_eq!(
            std::fs::read(d.src.join("f")).unwrap(),
            b"through the daemon"
        );
        daemon.signal(sig);
        let out = daemon.wait();
        assert_eq!(out.status.code(), Some(0), "signal {sig}: {}", stderr(&out));
        assert!(!is_mounted(&d.mnt), "signal {sig}: still mounted");
        let log = stderr(&out);
        assert!(log.contains("/dev/fuse"), "the transport is named: {log}");
    }
}

#[test]
fn exits_when_unmounted_from_outside() {
    let d = dirs_as_root();
    let daemon = Daemon::start(&d.src, &d.mnt, &["--cache", "never", "--no-readdirplus"]);
    assert_eq!(std::fs::read_dir(&d.mnt).unwrap().count(), 0);
    // EBUSY while another test's fork (these tests spawn daemons in
    // parallel) still holds a copy of the directory's descriptor, until
    // that child execs and close-on-exec drops it: try again.
    let mut last = None;
    let unmounted = wait_until(
        Duration::from_secs(60),
        || match fuse_transport_dev::unmount_path(&d.mnt, false) {
            Ok(()) => true,
            Err(e) => {
                last = Some(e.to_string());
                false
            }
        },
    );
    assert!(unmounted, "umount kept failing: {last:?}");
    let out = daemon.wait();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn options_reach_the_mount() {
    let d = dirs_as_root();
    std::fs::write(d.src.join("f"), b"x").unwrap();
    let daemon = Daemon::start(
        &d.src,
        &d.mnt,
        &[
            "--ro",
            "--fsname",
            "myfs",
            "--subtype",
            "mytype",
            "--max-read",
            "65536",
            "--writeback",
            "--attr-timeout",
            "0.5",
            "--entry-timeout",
            "0",
            "--no-xattr",
            "--no-open",
            "--no-opendir",
            "--killpriv-v2",
        ],
    );
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.contains(d.mnt.to_str().unwrap()))
        .unwrap()
        .to_owned();
    assert!(line.contains("fuse.mytype myfs"), "{line}");
    assert!(line.contains(" ro,") || line.contains(" ro "), "{line}");
    assert!(line.contains("max_read=65536"), "{line}");
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"x");
    let e = std::fs::write(d.mnt.join("g"), b"").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait().status.code(), Some(0));
}

#[test]
fn dead_and_busy_mountpoints_are_refused() {
    let d = dirs_as_root();
    // A live mount: in use.
    let daemon = Daemon::start(&d.src, &d.mnt, &[]);
    let o = run(&[d.src.to_str().unwrap(), d.mnt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(error_lines(&o)[0].contains("in use"), "{}", stderr(&o));
    // Killed without unmounting: a dead mount.
    let mut daemon = daemon;
    let mut child = daemon.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let o = run(&[d.src.to_str().unwrap(), d.mnt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let errs = error_lines(&o);
    assert_eq!(errs.len(), 1, "{}", stderr(&o));
    assert!(errs[0].contains("dead"), "{}", errs[0]);
    fuse_transport_dev::unmount_path(&d.mnt, true).unwrap();
    drop(daemon);
}

#[test]
fn unprivileged_user_gets_one_line_error_needs_root() {
    let d = dirs_as_root();
    chmod(d.dir.path(), 0o755);
    let out = Command::new(BIN)
        .arg(&d.src)
        .arg(&d.mnt)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(error_lines(&out).len(), 1, "{}", stderr(&out));
    assert!(!is_mounted(&d.mnt));
}

use std::os::unix::process::CommandExt;
