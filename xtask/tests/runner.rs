//! The test runner's own test (issue 37): a step that fails and leaves a
//! FUSE mount behind does not stop the run, the step is failed for the
//! mount (named), and the mount is gone before the next step runs.
//!
//! `cargo xtask test --scratch` runs two scratch steps instead of the suite:
//! `scratch-fail` mounts FUSE on a directory with nobody serving it (a dead
//! mount, as a crashed test leaves) and fails; `scratch-after` fails if that
//! mount is still there. Mounting needs root, or root of a user namespace
//! (`cargo xtask test-in-userns`).

use std::path::Path;
use std::process::Output;

/// Runs `xtask test --scratch ARGS` with `TMPDIR` set to `tmp`.
fn scratch(tmp: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["test", "--scratch"])
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .expect("running the xtask")
}

/// Fails with the reason unless this process may mount.
fn require_root() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "the runner's test mounts FUSE: it needs root (or `cargo xtask test-in-userns`)"
    );
}

/// Whether this process sees any mount under `dir`.
fn mounted_under(dir: &Path) -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    mountinfo
        .lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(dir)))
}

#[test]
fn a_failed_step_leaves_no_mount_and_the_next_step_runs() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = scratch(tmp.path(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let both = format!("{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{both}");
    assert!(
        stdout.contains("mount namespace: the runner's own"),
        "{both}"
    );
    let left = format!(
        "left 1 FUSE mount behind: {}/xtask-scratch-",
        tmp.path().display()
    );
    assert!(stdout.contains("<== scratch-fail: FAILED"), "{both}");
    assert!(stdout.contains(&left), "the leftover is not named: {both}");
    assert!(
        stdout.contains("/mnt (fuse.xtask-scratch) (detached with umount -l)"),
        "{both}"
    );
    // The later step ran, and found the mount gone.
    assert!(stdout.contains("<== scratch-after: ok"), "{both}");
    assert!(
        stderr.contains("error: step `scratch-fail` failed"),
        "{both}"
    );
    // Nothing under the run's temporary directory is mounted (here, where
    // the runner's namespace never showed it) and nothing is left there.
    assert!(!mounted_under(tmp.path()));
    let leftover: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(leftover.is_empty(), "{leftover:?}");
}

#[test]
fn fail_fast_stops_after_the_failed_step_and_still_detaches() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = scratch(tmp.path(), &["--fail-fast"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("(detached with umount -l)"), "{stdout}");
    assert!(!stdout.contains("==> scratch-after"), "{stdout}");
    assert!(
        stdout.contains("not run (--fail-fast after a failure)"),
        "{stdout}"
    );
    assert!(!mounted_under(tmp.path()));
}

#[test]
fn repeat_counts_the_rounds_a_step_failed_in() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = scratch(tmp.path(), &["--repeat", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("round 2/2 scratch-after: ok"), "{stdout}");
    assert!(
        stdout.contains("2/2 step scratch-fail (rounds 1,2): left 1 FUSE mount behind"),
        "{stdout}"
    );
    assert!(!mounted_under(tmp.path()));
}
