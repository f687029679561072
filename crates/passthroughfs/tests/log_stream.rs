//! The daemon survives its log stream: started with standard error a pipe
//! whose reader is gone (`passthroughfs SRC MNT 2>&1 | head -1`), in the
//! foreground and in the background, or with its `--log-file` on a full
//! disk, it mounts, serves and unmounts cleanly (the lines are lost, not
//! the mount). `--log-file` (and `-o log_file=`) keeps the log in a file in
//! both modes; a background start with no syslog daemon on `/dev/log` and
//! no log file says so once on the standard error its caller sees. These
//! need root (CI runs as root) and fail with the reason otherwise.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::{
    daemons_at, dirs, guarded_dirs_as_root, is_mounted, output, text, wait_until, MountGuard, BIN,
};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a daemon may take to come up or go away on a busy machine
/// (only there so that a hang fails instead of waiting forever).
const PATIENCE: Duration = Duration::from_secs(60);

/// [`daemon::umount_and_wait`], failing also if no daemon served `mnt` or
/// the mount stays.
fn umount_and_wait(mnt: &Path) {
    assert!(
        !daemons_at(mnt).is_empty(),
        "no daemon serves {}",
        mnt.display()
    );
    daemon::umount_and_wait(mnt);
    assert!(!is_mounted(mnt));
}

/// What `head -1` leaves: the write end of a pipe whose read end is
/// closed (a write fails with EPIPE).
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both were just created and are owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

/// The daemon with `flags`, serving `d`'s source at its mountpoint, its
/// log at debug and both its output streams [`closed_pipe`]s.
fn with_closed_output(flags: &[&str], d: &daemon::Dirs) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(flags)
        .arg(&d.src)
        .arg(&d.mnt)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::from(closed_pipe()));
    cmd
}

/// Starts `daemon` (the program and its options) serving `d`'s source at
/// its mountpoint, its log at `rust_log`, its standard error piped.
fn spawn_with_stderr(daemon: &mut Command, d: &daemon::Dirs, rust_log: &str) -> Child {
    daemon
        .arg(&d.src)
        .arg(&d.mnt)
        .env("RUST_LOG", rust_log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` to exit (killing it and failing if it doesn't).
fn wait_exit(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the daemon did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes a file through the mount and reads it back from the source.
fn serves(src: &Path, mnt: &Path, name: &str) {
    let data = format!("written through the mount as {name}");
    std::fs::write(mnt.join(name), &data).unwrap();
    assert_eq!(std::fs::read_to_string(src.join(name)).unwrap(), data);
    assert_eq!(std::fs::read_to_string(mnt.join(name)).unwrap(), data);
}

#[test]
fn a_foreground_daemon_whose_standard_error_is_closed_serves_and_stops() {
    let d = guarded_dirs_as_root();
    // Every log line fails with EPIPE, from the first; -d adds one per
    // request.
    let mut child = with_closed_output(&["-f", "-d"], &d).spawn().unwrap();
    wait_until(
        || is_mounted(&d.mnt) || child.try_wait().unwrap().is_some(),
        || "the daemon neither mounted nor exited".into(),
    );
    assert!(
        is_mounted(&d.mnt),
        "the daemon exited without mounting: {:?}",
        child.try_wait()
    );
    serves(&d.src, &d.mnt, "f");
    // SAFETY: our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!is_mounted(&d.mnt));
}

#[test]
fn a_background_start_whose_standard_error_is_closed_serves_and_stops() {
    let d = guarded_dirs_as_root();
    let status = with_closed_output(&[], &d).status().unwrap();
    assert_eq!(status.code(), Some(0), "the command says the mount came up");
    assert!(is_mounted(&d.mnt));
    serves(&d.src, &d.mnt, "f");
    umount_and_wait(&d.mnt);
}

/// The README's own words: `passthroughfs SRC MNT 2>&1 | head -1`.
#[test]
fn the_readme_s_pipe_into_head_mounts_serves_and_stops() {
    let d = guarded_dirs_as_root();
    let script = "\"$0\" \"$1\" \"$2\" 2>&1 | head -1";
    let out = output(
        Command::new("sh")
            .args(["-c", script, BIN])
            .arg(&d.src)
            .arg(&d.mnt),
    );
    // `sh`'s status is head's; the daemon's shows in the mount.
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().count(),
        1,
        "head printed the first log line: {}",
        text(&out.stdout)
    );
    assert!(is_mounted(&d.mnt), "{}", text(&out.stdout));
    serves(&d.src, &d.mnt, "f");
    umount_and_wait(&d.mnt);
}

#[test]
fn the_log_file_keeps_the_log_in_the_foreground_and_the_background() {
    let d = guarded_dirs_as_root();
    // Foreground: nothing on standard error, every line in the file.
    let fg_log = d.dir.path().join("fg.log");
    let mut child = spawn_with_stderr(
        Command::new(BIN).arg("-f").arg("--log-file").arg(&fg_log),
        &d,
        "info",
    );
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    wait_until(
        || read(&fg_log).contains("passthroughfs serving") || child.try_wait().unwrap().is_some(),
        || format!("no serving line in the log file: {}", read(&fg_log)),
    );
    serves(&d.src, &d.mnt, "fg");
    // SAFETY: our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(wait_exit(&mut child).code(), Some(0), "{}", read(&fg_log));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr, "", "the log went to the file");
    let log = read(&fg_log);
    assert!(log.contains("unmounted; exiting"), "{log}");
    assert!(!log.contains('\x1b'), "no colours in a file: {log:?}");

    // Background, named by -o as an fstab line would: the file again
    // (appended to), before and after the daemon detached, and no word
    // about syslog on standard error.
    let bg_log = d.dir.path().join("bg.log");
    std::fs::write(&bg_log, "an earlier line\n").unwrap();
    let out = output(
        Command::new(BIN)
            .arg(&d.src)
            .arg(&d.mnt)
            .arg("-o")
            .arg(format!("log_file={}", bg_log.display())),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "the log went to the file");
    serves(&d.src, &d.mnt, "bg");
    umount_and_wait(&d.mnt);
    let log = read(&bg_log);
    assert!(log.starts_with("an earlier line\n"), "appended: {log}");
    assert!(log.contains("passthroughfs serving"), "{log}");
    assert!(log.contains("unmounted; exiting"), "after detaching: {log}");
}

/// A log file on a full disk (`/dev/full` answers every write with
/// ENOSPC) costs the lines, not the mount.
#[test]
fn a_log_file_on_a_full_disk_costs_lines_not_the_mount() {
    let d = guarded_dirs_as_root();
    let mut child = spawn_with_stderr(
        Command::new(BIN).args(["-f", "-d", "--log-file", "/dev/full"]),
        &d,
        "debug",
    );
    wait_until(
        || is_mounted(&d.mnt) || child.try_wait().unwrap().is_some(),
        || "the daemon neither mounted nor exited".into(),
    );
    assert!(is_mounted(&d.mnt), "exited: {:?}", child.try_wait());
    serves(&d.src, &d.mnt, "f");
    // SAFETY: our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(wait_exit(&mut child).code(), Some(0));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr, "", "nothing falls back to standard error");
    assert!(!is_mounted(&d.mnt));
}

/// A `--log-file` that can't be opened is the command's error, before
/// anything is mounted.
#[test]
fn a_log_file_that_cannot_be_opened_is_refused_at_start() {
    let d = dirs();
    let path = d.dir.path().join("no/such/dir/log");
    let out = output(
        Command::new(BIN)
            .arg("--log-file")
            .arg(&path)
            .arg(&d.src)
            .arg(&d.mnt),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("passthroughfs: error: --log-file ") && err.contains("no/such/dir/log"),
        "{err}"
    );
    assert!(!is_mounted(&d.mnt));
}

/// Runs `f` on a thread of its own whose mount namespace has a `/dev`
/// holding `null` and `fuse` (the machine's, bind-mounted), and a datagram socket `log` if `syslog`
/// (so that the machine's /dev and syslog are left alone); `f` gets the
/// socket.
fn with_own_dev(
    dir: &Path,
    syslog: bool,
    f: impl FnOnce(Option<std::os::unix::net::UnixDatagram>) + Send + 'static,
) {
    let dev = dir.join("dev");
    std::thread::spawn(move || {
        test_support::unshare_mount_namespace();
        std::fs::create_dir(&dev).unwrap();
        // The machine's device nodes, bind-mounted onto empty files: mknod
        // is refused in a user namespace (`cargo xtask test-in-userns`),
        // a bind mount is not.
        for name in ["null", "fuse"] {
            std::fs::write(dev.join(name), b"").unwrap();
            test_support::bind_mount(&Path::new("/dev").join(name), &dev.join(name), false);
        }
        let socket = syslog.then(|| {
            let s = std::os::unix::net::UnixDatagram::bind(dev.join("log")).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            s
        });
        // Our directory over /dev, with the device nodes bound inside it.
        test_support::bind_mount(&dev, Path::new("/dev"), true);
        f(socket);
    })
    .join()
    .unwrap();
}

/// Without a syslog daemon (no `/dev/log`) the background start says once,
/// on standard error, that the log will be lost and how to keep it; with
/// one listening it says nothing of the kind.
#[test]
fn a_background_start_without_syslog_says_so_once() {
    require_root();
    let (d1, d2) = (dirs(), dirs());
    background_start(&d1, false, |err| {
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("no syslog daemon listens on /dev/log"))
            .collect();
        assert_eq!(warnings.len(), 1, "said once: {err}");
        assert!(warnings[0].contains("--log-file PATH"), "{err}");
    });
    let socket = background_start(&d2, true, |err| {
        assert!(!err.contains("no syslog daemon"), "{err}");
    });
    let socket = socket.expect("the log socket");
    let mut buf = [0u8; 4096];
    loop {
        let n = socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no syslog line with \"unmounted\": {e}"));
        if text(&buf[..n]).contains("unmounted; exiting") {
            break;
        }
    }
}

/// Starts the daemon in the background on `d` (with its own /dev, and a
/// syslog daemon listening on `/dev/log` if `syslog`); it must start, with
/// `check` content with its standard error, serve, and go when unmounted.
/// Returns the log socket (with `syslog`), still holding what was logged.
fn background_start(
    d: &daemon::Dirs,
    syslog: bool,
    check: impl FnOnce(&str) + Send + 'static,
) -> Option<std::os::unix::net::UnixDatagram> {
    let (src, mnt) = (d.src.clone(), d.mnt.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    with_own_dev(d.dir.path(), syslog, move |socket| {
        let _guard = MountGuard(mnt.clone());
        let out = output(Command::new(BIN).arg(&src).arg(&mnt));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        check(&err);
        serves(&src, &mnt, "f");
        umount_and_wait(&mnt);
        tx.send(socket).unwrap();
    });
    rx.recv().unwrap()
}
