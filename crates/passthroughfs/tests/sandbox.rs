//! Escape tests: a daemon made to attempt, in the middle of a request,
//! what a subverted one would (the `fault-injection` hook of
//! `passthroughfs::sandbox::escape`, reached by a LOOKUP of
//! `.passthroughfs-escape-WHAT`): read a file outside SOURCE, run a
//! program, connect to a TCP listener, signal another process.
//!
//! - Unconfined (`--sandbox none --seccomp none --landlock off`) every
//!   attempt succeeds, with its effect seen from outside: the test is real.
//! - `--sandbox namespace --landlock on` (the file read through
//!   `/proc/1/root`, which leads out of the namespace), and Landlock alone:
//!   each attempt is refused, logged, without effect; the daemon serves on, the data
//!   is intact, and it unmounts at SIGTERM.
//! - `--seccomp kill`: a forbidden call ends the daemon (status 159) with
//!   a line naming the call; a program it starts dies of SIGSYS at its
//!   `execve`.
//!
//! They need root (mounting, the namespaces); they fail without it.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::{pattern, require_root};
use daemon::*;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// The file a test checks is intact after the attempts.
const DATA_LEN: usize = 256 << 10;

/// What the attempts aim at, all outside SOURCE.
struct Targets {
    /// A file to read.
    secret: PathBuf,
    /// What the program run would create.
    marker: PathBuf,
    /// A TCP listener to connect to.
    listener: TcpListener,
    /// A process to signal.
    victim: Child,
}

impl Targets {
    fn new(dir: &Path) -> Targets {
        let secret = dir.join("outside-secret");
        std::fs::write(&secret, b"not for the daemon").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Targets {
            secret,
            marker: dir.join("exec-marker"),
            listener,
            victim: Command::new("sleep").arg("600").spawn().unwrap(),
        }
    }

    /// The daemon's environment naming them.
    fn env(&self, cmd: &mut Command) {
        cmd.env("PASSTHROUGHFS_ESCAPE_OPEN", &self.secret)
            .env("PASSTHROUGHFS_ESCAPE_EXEC", touch())
            .env("PASSTHROUGHFS_ESCAPE_ARG", &self.marker)
            .env(
                "PASSTHROUGHFS_ESCAPE_CONNECT",
                self.listener.local_addr().unwrap().to_string(),
            )
            .env("PASSTHROUGHFS_ESCAPE_KILL", self.victim.id().to_string());
    }

    /// Whether the attempt `what` had its effect.
    fn hit(&mut self, what: &str) -> bool {
        match what {
            // The daemon says it read the file (its log line).
            "open" => false,
            "exec" => self.marker.exists(),
            "socket" => self.listener.accept().is_ok(),
            "kill" => {
                // Reaped if it died of the signal.
                for _ in 0..200 {
                    if self.victim.try_wait().unwrap().is_some() {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                false
            }
            _ => unreachable!("{what}"),
        }
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
    }
}

/// `touch`, where this system has it.
fn touch() -> &'static str {
    ["/usr/bin/touch", "/bin/touch"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("these tests need touch(1)")
}

/// The confinement arguments: `--sandbox`, `--landlock` and `--seccomp`
/// with these values.
const fn confined(
    sandbox: &'static str,
    landlock: &'static str,
    seccomp: &'static str,
) -> [&'static str; 6] {
    [
        "--sandbox",
        sandbox,
        "--landlock",
        landlock,
        "--seccomp",
        seccomp,
    ]
}

const ATTEMPTS: [&str; 4] = ["open", "exec", "socket", "kill"];

/// Makes the daemon at `mnt` attempt `what`: the lookup's error
/// (`EEXIST`: the attempt succeeded).
fn attempt(mnt: &Path, what: &str) -> io::Error {
    let name = format!(".passthroughfs-escape-{what}");
    match std::fs::symlink_metadata(mnt.join(name)) {
        Ok(_) => panic!("{what}: the hook didn't run (is the daemon built with fault-injection?)"),
        Err(e) => e,
    }
}

fn succeeded(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EEXIST)
}

/// SOURCE with a file to check afterwards.
fn setup() -> (Dirs, Vec<u8>) {
    require_root();
    let d = dirs();
    let data = pattern(DATA_LEN, 33);
    std::fs::write(d.src.join("data"), &data).unwrap();
    (d, data)
}

fn start(d: &Dirs, t: &Targets, args: &[&str]) -> Daemon {
    Daemon::start_with(&d.src, &d.mnt, Transport::Dev, args, |cmd| {
        t.env(cmd);
        // In a mount namespace of its own the host's files are still one
        // link away: /proc/1/root (init's root) leads to them.
        if args.contains(&"namespace") {
            let mut through_proc = PathBuf::from("/proc/1/root");
            through_proc.push(t.secret.strip_prefix("/").unwrap());
            cmd.env("PASSTHROUGHFS_ESCAPE_OPEN", through_proc);
        }
    })
}

/// SIGTERM: it exits 0, the mount is gone, and no ERROR was logged.
fn stop(daemon: Daemon, mnt: &Path) -> String {
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}: {log}");
    assert!(!is_mounted(mnt), "the mount is left: {log}");
    assert!(error_lines(&log).is_empty(), "{log}");
    log
}

/// Every attempt refused without effect, each logged, the daemon serving
/// on and the data intact; returns the errors.
fn all_denied(args: &[&str]) -> Vec<(String, io::Error)> {
    let (d, data) = setup();
    let mut t = Targets::new(d.dir.path());
    let daemon = start(&d, &t, args);
    denied_by(daemon, &d, &mut t, &data, args)
}

/// [`all_denied`] of a running `daemon` (started with `args`) serving `d`.
fn denied_by(
    daemon: Daemon,
    d: &Dirs,
    t: &mut Targets,
    data: &[u8],
    args: &[&str],
) -> Vec<(String, io::Error)> {
    let mut errors = Vec::new();
    for what in ATTEMPTS {
        let e = attempt(&d.mnt, what);
        assert!(
            !succeeded(&e),
            "{args:?} {what}: it succeeded: {}",
            daemon.stderr()
        );
        assert!(!t.hit(what), "{args:?} {what}: it had its effect");
        errors.push((what.to_string(), e));
        // Served on: the mount's data reads back.
        assert_eq!(std::fs::read(d.mnt.join("data")).unwrap(), data, "{what}");
    }
    let log = stop(daemon, &d.mnt);
    for what in ATTEMPTS {
        assert!(
            log.contains(&format!("attempt=\"{what}\"")) && log.contains("the attempt was denied"),
            "{what} not logged: {log}"
        );
    }
    assert!(!log.contains("read a file outside SOURCE"), "{log}");
    assert_eq!(std::fs::read(d.src.join("data")).unwrap(), data);
    errors
}

#[test]
fn unconfined_every_attempt_succeeds() {
    let (d, data) = setup();
    let mut t = Targets::new(d.dir.path());
    let daemon = start(&d, &t, &confined("none", "off", "none"));
    for what in ATTEMPTS {
        let e = attempt(&d.mnt, what);
        assert!(succeeded(&e), "{what}: {e}: {}", daemon.stderr());
        if what != "open" {
            assert!(t.hit(what), "{what}: no effect");
        }
    }
    let log = stop(daemon, &d.mnt);
    assert!(log.contains("read a file outside SOURCE"), "{log}");
    assert_eq!(std::fs::read(d.src.join("data")).unwrap(), data);
}

#[test]
fn namespace_and_landlock_deny_every_attempt() {
    namespace_and_landlock_denied(all_denied(&confined("namespace", "on", "none")));
}

/// What each attempt gets under `--sandbox namespace --landlock on`.
fn namespace_and_landlock_denied(errors: Vec<(String, io::Error)>) {
    for (what, e) in errors {
        // Landlock refuses the file reached through /proc/1/root and TCP
        // (before the empty network namespace would) and keeps signals
        // in; the program isn't in the new root.
        let want = match what.as_str() {
            "exec" => libc::ENOENT,
            "open" | "socket" => libc::EACCES,
            _ => libc::EPERM,
        };
        assert_eq!(e.raw_os_error(), Some(want), "{what}: {e}");
    }
}

/// A live upgrade at the takeover modes' defaults (namespace and
/// Landlock): the old daemon, confined, hands the mount over through its
/// socket (made, renamed and removed through its directory's descriptor);
/// the new one connected before confining itself, denies every attempt,
/// and unmounts at SIGTERM through the unmounter it started for the mount
/// it took.
#[test]
fn a_daemon_that_took_the_mount_over_is_confined() {
    let (d, data) = setup();
    let mut t = Targets::new(d.dir.path());
    let sock = d.dir.path().join("takeover.sock");
    let sock = sock.to_str().unwrap();
    let confinement = confined("namespace", "on", "none");
    let mut old = start(
        &d,
        &t,
        &[&confinement[..], &["--takeover-socket", sock]].concat(),
    );
    let args = [
        &confinement[..],
        &["--take-over", sock, "--takeover-socket", sock],
    ]
    .concat();
    let new = start(&d, &t, &args);
    old.forget_mount();
    let (status, log, _) = old.wait_exit(Duration::from_secs(60));
    assert!(
        status.success() && log.contains("handed the mount over"),
        "the old daemon: {status}: {log}"
    );
    assert!(
        new.stderr()
            .contains("confinement=namespace, capabilities, landlock"),
        "{}",
        new.stderr()
    );
    // The new daemon listens for the next upgrade.
    assert!(Path::new(sock).exists(), "{}", new.stderr());
    namespace_and_landlock_denied(denied_by(new, &d, &mut t, &data, &args));
}

/// Landlock handles reading and writing files only where the backend
/// holds no inodes by file handle (see `sandbox::landlock`).
#[test]
fn landlock_alone_denies_every_attempt() {
    let errors =
        all_denied(&[&confined("none", "on", "none")[..], &["--no-file-handles"]].concat());
    for (what, e) in errors {
        let want = match what.as_str() {
            "kill" => libc::EPERM,
            _ => libc::EACCES,
        };
        assert_eq!(e.raw_os_error(), Some(want), "{what}: {e}");
    }
}

/// The filter alone: no namespace, no Landlock.
const SECCOMP_KILL_ONLY: [&str; 6] = confined("none", "off", "kill");

#[test]
fn seccomp_kill_ends_the_daemon_at_a_forbidden_call() {
    for (what, call) in [("socket", "socket"), ("kill", "kill")] {
        let (d, data) = setup();
        let mut t = Targets::new(d.dir.path());
        let daemon = start(&d, &t, &SECCOMP_KILL_ONLY);
        let mnt = d.mnt.clone();
        // The request fails once the daemon is gone.
        let e = attempt(&mnt, what);
        assert!(!succeeded(&e), "{what}: {e}");
        let (status, log, _) = daemon.wait_exit(Duration::from_secs(30));
        let _dead = MountGuard(mnt);
        assert_eq!(status.code(), Some(159), "{what}: {status}: {log}");
        assert!(
            log.contains(&format!("seccomp: system call {call} (")),
            "{what}: the call isn't named: {log}"
        );
        assert!(!t.hit(what), "{what}: it had its effect");
        assert_eq!(std::fs::read(d.src.join("data")).unwrap(), data);
    }
}

#[test]
fn seccomp_kill_ends_a_program_the_daemon_runs() {
    let (d, data) = setup();
    let mut t = Targets::new(d.dir.path());
    let daemon = start(&d, &t, &SECCOMP_KILL_ONLY);
    let e = attempt(&d.mnt, "exec");
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EPERM),
        "{e}: {}",
        daemon.stderr()
    );
    assert!(!t.hit("exec"));
    assert_eq!(std::fs::read(d.mnt.join("data")).unwrap(), data);
    let log = stop(daemon, &d.mnt);
    // The child dies of SIGSYS (posix_spawn resets its handlers).
    assert!(
        log.contains("attempt=\"exec\"") && log.contains("the attempt was denied"),
        "{log}"
    );
}

/// Files the backend reopens by file handle (`open_by_handle_at`, once its
/// descriptor cache, sized from a low open file limit, dropped theirs)
/// read back and take writes, confined as by default and unconfined:
/// Landlock checks such files as being at SOURCE's mount root, which
/// `--sandbox namespace` makes SOURCE itself.
#[test]
fn files_reopened_by_handle_read_back_confined_and_unconfined_needs_file_handles() {
    use std::os::unix::process::CommandExt;
    let files = 600;
    for args in [
        confined("namespace", "on", "kill"),
        confined("none", "on", "kill"),
        confined("none", "off", "none"),
    ] {
        let (d, _) = setup();
        for i in 0..files {
            std::fs::write(d.src.join(format!("f{i}")), pattern(512, i)).unwrap();
        }
        let daemon = Daemon::start_with(&d.src, &d.mnt, Transport::Dev, &args, |cmd| {
            // SAFETY: setrlimit is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    // 192 descriptors cached: most files are reopened.
                    let rl = libc::rlimit {
                        rlim_cur: 256,
                        rlim_max: 256,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        });
        for round in 0..2 {
            for i in 0..files {
                let p = d.mnt.join(format!("f{i}"));
                let got = std::fs::read(&p).unwrap_or_else(|e| {
                    panic!("{args:?} round {round} f{i}: {e}: {}", daemon.stderr())
                });
                assert_eq!(got, pattern(512, i + round), "{args:?} round {round} f{i}");
                std::fs::write(&p, pattern(512, i + round + 1)).unwrap();
            }
        }
        stop(daemon, &d.mnt);
        for i in 0..files {
            assert_eq!(
                std::fs::read(d.src.join(format!("f{i}"))).unwrap(),
                pattern(512, i + 2),
                "{args:?} f{i} in SOURCE"
            );
        }
    }
}

#[test]
fn callers_supplementary_groups_count_under_every_confinement() {
    // The passthrough acts as each caller with the groups it reads from
    // `/proc/<tid>/status`; under `--sandbox namespace` with Landlock that
    // is a proc instance of the new root, which a rule on the host's
    // /proc doesn't cover (the groups were read as none, and a chgrp to a
    // caller's supplementary group failed with EPERM).
    require_root();
    let (user, group, supplementary) = (65534, 65534, 65532);
    for (transport, args) in [
        (Transport::Dev, &[][..]),
        (Transport::Uring, &[][..]),
        (
            Transport::Dev,
            &["--sandbox", "none", "--landlock", "on"][..],
        ),
        (
            Transport::Dev,
            &["--sandbox", "namespace", "--landlock", "off"][..],
        ),
        (Transport::Dev, &confined("none", "off", "none")[..]),
    ] {
        let d = test_support::shared_scratch("pt-groups-");
        let f = d.src.join("f");
        std::fs::write(&f, b"x").unwrap();
        std::os::unix::fs::chown(&f, Some(user), Some(group)).unwrap();
        let mut all = vec!["--allow-other", "--default-permissions"];
        all.extend_from_slice(args);
        let daemon = Daemon::start_with(&d.src, &d.mnt, transport, &all, |_| {});
        let out = common::run_as(
            user,
            group,
            &[group, supplementary],
            &d.mnt,
            &format!("chgrp {supplementary} f"),
        );
        assert!(
            out.status.success(),
            "{transport:?} {args:?}: chgrp to a supplementary group through the mount: {}{}",
            String::from_utf8_lossy(&out.stderr),
            daemon.stderr()
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().gid(),
            supplementary,
            "{transport:?} {args:?}: the group in SOURCE"
        );
        stop(daemon, &d.mnt);
    }
}
