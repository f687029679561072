//! Kernel passthrough (`FUSE_PASSTHROUGH`) through the `passthroughfs`
//! daemon: it logs a backing file the kernel refuses once, and
//! `--no-passthrough` turns passthrough off. The library's own passthrough
//! tests are `fuse-backend-passthrough/tests/passthrough.rs`.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The daemon binary over `src` at `mnt` with `extra` options; returns
/// it once mounted.
fn start_daemon(src: &Path, mnt: &Path, extra: &[&str]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_passthroughfs"))
        .arg("--foreground")
        .args(extra)
        .arg(src)
        .arg(mnt)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = wait_until(Duration::from_secs(60), || {
        is_mounted(mnt) || child.try_wait().unwrap().is_some()
    });
    assert!(up && is_mounted(mnt), "daemon did not mount");
    child
}

/// SIGTERM, then the daemon's log.
fn stop_daemon(mut child: Child, mnt: &Path) -> String {
    // SAFETY: our own child, not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let done = wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    if !done {
        let _ = child.kill();
    }
    if is_mounted(mnt) {
        let _ = fuse_transport_dev::unmount_path(mnt, true);
    }
    let out = child.wait_with_output().unwrap();
    assert!(done, "daemon did not exit on SIGTERM");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn daemon_logs_a_refusal_once_needs_root() {
    require_passthrough_host();
    let test_support::Scratch {
        dir: _dir,
        src,
        mnt,
    } = test_support::scratch("pt-daemon-");
    let ovl = Overlay::mount(&src.join("ovl"));
    let child = start_daemon(&src, &mnt, &[]);
    for i in 0..5 {
        fs::write(mnt.join(format!("ovl/f{i}")), b"refused").unwrap();
        assert_eq!(fs::read(mnt.join(format!("ovl/f{i}"))).unwrap(), b"refused");
    }
    fs::write(mnt.join("plain"), b"passed").unwrap();
    let log = stop_daemon(child, &mnt);
    drop(ovl);
    assert!(log.contains("kernel passthrough on"), "{log}");
    let refusals = log.matches("kernel passthrough refused").count();
    assert_eq!(refusals, 1, "refusals logged: {log}");
    // And --no-passthrough turns it off.
    let child = start_daemon(&src, &mnt, &["--no-passthrough"]);
    fs::write(mnt.join("plain"), b"daemon").unwrap();
    let log = stop_daemon(child, &mnt);
    assert!(!log.contains("kernel passthrough on"), "{log}");
    assert_eq!(fs::read(src.join("plain")).unwrap(), b"daemon");
}
