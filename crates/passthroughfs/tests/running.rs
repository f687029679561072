//! Running passthroughfs the way people run FUSE daemons, with the real
//! binary: in the background by default (the exit status says whether the
//! mount came up), from mount(8) and from an fstab line (through the fuse3
//! package's `mount.fuse`), as mount(8)'s helper under its own name, with
//! `-o` option strings, with `auto_unmount` surviving SIGKILL, telling a
//! service manager through `NOTIFY_SOCKET`, logging one line per request
//! with `-d`, and to syslog once in the background. They need root (CI
//! runs as root) and fail with the reason otherwise; a test that needs a
//! program that is missing fails and names the package.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a daemon may take to come up or go away on a busy machine
/// (not a speed bound: only there so that a hang fails instead of waiting
/// forever).
const PATIENCE: Duration = Duration::from_secs(60);

/// Fails unless `program` can be run, naming the package that has it.
fn require_program(program: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "{program} is needed (apt-get install {package})");
}

/// The `/proc/self/mountinfo` line of the (topmost) mount at `mnt`.
fn mount_line(mnt: &Path) -> String {
    test_support::mountinfo::mounts_at(mnt)
        .pop()
        .unwrap_or_else(|| panic!("{} is not mounted", mnt.display()))
        .line
}

#[test]
fn goes_to_the_background_once_the_mount_is_usable() {
    let d = dirs_as_root();
    std::fs::write(d.src.join("f"), b"data").unwrap();
    let _guard = MountGuard(d.mnt.clone());
    let out = output(Command::new(BIN).arg(&d.src).arg(&d.mnt));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Usable as soon as the command returned.
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"data");
    let pids = daemons_at(&d.mnt);
    assert_eq!(pids.len(), 1, "one background daemon: {pids:?}");
    let log = text(&out.stderr);
    assert!(log.contains("background=true"), "{log}");
    // In a session of its own, its working directory the root.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[0])).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    assert_eq!(fields[3], pids[0].to_string(), "session leader: {stat}");
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/cwd", pids[0])).unwrap(),
        Path::new("/")
    );
    umount_and_wait(&d.mnt);
}

#[test]
fn a_start_that_fails_in_the_background_says_why_with_status_1_needs_root() {
    let d = dirs_as_root();
    // Nobody may use /dev/fuse's mount(2) or fusermount3 on a directory
    // it can't reach: the mount fails after the daemon forked.
    std::fs::set_permissions(
        d.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    std::fs::set_permissions(&d.mnt, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let out = output(
        Command::new(BIN)
            .arg(&d.src)
            .arg(&d.mnt)
            .env("RUST_LOG", "warn")
            .uid(65534)
            .gid(65534),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("passthroughfs: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert!(!is_mounted(&d.mnt));
    assert!(daemons_at(&d.mnt).is_empty(), "the child is gone too");
}

#[test]
fn argument_errors_come_first_in_one_line() {
    let d = dirs();
    for (args, want) in [
        (&["-o", "ro,bogus"][..], "-o bogus: unknown mount option"),
        (
            &["-o", "cache=sometimes"][..],
            "\"sometimes\" is not one of never, auto, always",
        ),
        (
            &["-o", "allow_root"][..],
            "-o allow_root: the kernel has no such option",
        ),
        (
            &["--attr-timeout=-1"][..],
            "--attr-timeout must be a number of seconds",
        ),
        (&["--uring-entries", "4"][..], "need --uring"),
        (&["--uring-unpinned"][..], "need --uring"),
        (
            &["--threads", "4", "--max-threads", "2"][..],
            "--max-threads 2 is below --threads 4",
        ),
        (
            &["--thread-pool"][..],
            "--thread-pool needs --runtime tokio or uring",
        ),
    ] {
        let out = output(Command::new(BIN).arg(&d.src).arg(&d.mnt).args(args));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: only the error: {err}");
        assert!(err.starts_with("passthroughfs: error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn help_names_the_options_environment_and_signals() {
    let out = output(Command::new(BIN).arg("--help"));
    assert!(out.status.success());
    let help = text(&out.stdout);
    for want in [
        "-o <OPT[,OPT...]>",
        "--foreground",
        "--debug",
        "--auto-unmount",
        "allow_other",
        "default_permissions",
        "max_threads=",
        "io_uring",
        "cache=",
        "timeout=",
        "RUST_LOG",
        "NO_COLOR",
        "NOTIFY_SOCKET",
        "SIGUSR1",
        "SIGTERM",
    ] {
        assert!(help.contains(want), "--help lacks {want}:\n{help}");
    }
}

#[test]
fn option_strings_reach_the_mount_and_the_file_system() {
    let d = dirs_as_root();
    std::fs::write(d.src.join("f"), b"x").unwrap();
    let daemon = Daemon::start(
        &d.src,
        &d.mnt,
        Transport::Dev,
        &[
            "-o",
            "ro,allow_other,default_permissions,fsname=my\\,fs,subtype=mine,max_read=65536",
            "-o",
            "noexec,noatime,cache=always,timeout=5,max_threads=3,noauto,x-systemd.automount",
        ],
    );
    let line = mount_line(&d.mnt);
    assert!(line.contains(" - fuse.mine my,fs "), "{line}");
    for want in [
        " ro,",
        "noexec",
        "noatime",
        "allow_other",
        "default_permissions",
        "max_read=65536",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"x");
    let e = std::fs::write(d.mnt.join("g"), b"").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    daemon.signal(libc::SIGTERM);
    let (status, log, _) = daemon.wait_exit(PATIENCE);
    assert_eq!(status.code(), Some(0), "{log}");
}

#[test]
fn mount_8_and_an_fstab_line_mount_it_and_umount_stops_it() {
    require_root();
    require_program("mount.fuse3", "fuse3");
    let d = dirs();
    std::fs::write(d.src.join("f"), b"via mount").unwrap();
    let _guard = MountGuard(d.mnt.clone());
    // mount(8) runs /sbin/mount.fuse (fuse3's mount.fuse3) for type fuse;
    // the program before '#' is what it starts. mount(8) clears PATH for
    // its helpers, so the program is named by its path here (installed,
    // `passthroughfs#SRC` finds it in /usr/local/bin).
    let spec = format!("{BIN}#{}", d.src.display());
    let out = output(
        Command::new("mount")
            .args(["-t", "fuse", &spec])
            .arg(&d.mnt)
            .args(["-o", "allow_other,default_permissions,cache=always,noexec"]),
    );
    assert!(out.status.success(), "mount: {}", text(&out.stderr));
    let line = mount_line(&d.mnt);
    assert!(
        line.contains(&format!(" - fuse.passthroughfs {} ", d.src.display())),
        "{line}"
    );
    assert!(
        line.contains("noexec") && line.contains("allow_other"),
        "{line}"
    );
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"via mount");
    umount_and_wait(&d.mnt);
    assert!(!is_mounted(&d.mnt));

    // The same from an fstab line: `mount MNT` reads it (here from a
    // table of the test's own, `mount -T`), `umount MNT` ends it.
    let fstab = d.dir.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# passthroughfs\n{} {} fuse noauto,nofail,ro,allow_other,default_permissions,x-systemd.automount 0 0\n",
            spec.replace(' ', "\\040"),
            d.mnt.display()
        ),
    )
    .unwrap();
    let out = output(Command::new("mount").arg("-T").arg(&fstab).arg(&d.mnt));
    assert!(
        out.status.success(),
        "mount from fstab: {}",
        text(&out.stderr)
    );
    let line = mount_line(&d.mnt);
    assert!(line.contains(" ro,"), "{line}");
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"via mount");
    umount_and_wait(&d.mnt);

    // Type fuse.passthroughfs: what mount(8) has mount.fuse3 do when no
    // mount.fuse.passthroughfs is installed (the program found in PATH).
    let bin_dir = Path::new(BIN).parent().unwrap();
    let out = output(
        Command::new("mount.fuse3")
            .arg(&d.src)
            .arg(&d.mnt)
            .args(["-t", "fuse.passthroughfs", "-o", "rw,cache=never"])
            .env(
                "PATH",
                format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin_dir.display()),
            ),
    );
    assert!(out.status.success(), "mount.fuse3: {}", text(&out.stderr));
    assert!(mount_line(&d.mnt).contains(" - fuse.passthroughfs "));
    umount_and_wait(&d.mnt);
}

#[test]
fn installed_as_mount_8_s_helper_it_takes_its_arguments() {
    let d = dirs_as_root();
    std::fs::write(d.src.join("f"), b"helper").unwrap();
    let _guard = MountGuard(d.mnt.clone());
    // /sbin/mount.fuse.passthroughfs as a symlink to the binary: mount(8)
    // runs it as `mount.fuse.passthroughfs SPEC DIR [-sfnv] -o OPTS -t TYPE`.
    let helper = d.dir.path().join("mount.fuse.passthroughfs");
    std::os::unix::fs::symlink(BIN, &helper).unwrap();
    let source_opt = format!(
        "rw,source={},allow_other,default_permissions",
        d.src.display()
    );
    // -f is mount(8)'s "fake": everything is checked, nothing mounted.
    let out = output(Command::new(&helper).args(["myname"]).arg(&d.mnt).args([
        "-f",
        "-o",
        &source_opt,
        "-t",
        "fuse.passthroughfs",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!is_mounted(&d.mnt));
    // Another type is not ours.
    let out = output(
        Command::new(&helper)
            .arg("x")
            .arg(&d.mnt)
            .args(["-t", "fuse.sshfs"]),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("-t fuse.sshfs"),
        "{}",
        text(&out.stderr)
    );
    // -s (sloppy) lets an unknown option by; -n and -v are mount(8)'s.
    let out = output(Command::new(&helper).arg("myname").arg(&d.mnt).args([
        "-snv",
        "-o",
        &format!("{source_opt},no_such_option"),
        "-t",
        "fuse.passthroughfs",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no_such_option"),
        "the skipped option is named"
    );
    // SPEC names the mount, source= is the directory (xfstests mounts so).
    assert!(mount_line(&d.mnt).contains(" - fuse.passthroughfs myname "));
    assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"helper");
    umount_and_wait(&d.mnt);
}

#[test]
fn auto_unmount_removes_the_mount_when_the_daemon_is_killed() {
    require_root();
    require_program("fusermount3", "fuse3");
    for transport in Transport::ALL {
        let d = dirs();
        std::fs::write(d.src.join("f"), b"x").unwrap();
        let daemon = Daemon::start(&d.src, &d.mnt, transport, &["-o", "auto_unmount"]);
        assert_eq!(std::fs::read(d.mnt.join("f")).unwrap(), b"x");
        let guard = daemon.kill();
        wait_until(
            || !is_mounted(&guard.0),
            || format!("{transport:?}: still mounted after SIGKILL with auto_unmount"),
        );
        // The mountpoint is an ordinary directory again (no ENOTCONN).
        assert_eq!(std::fs::read_dir(&guard.0).unwrap().count(), 0);
    }
}

#[test]
fn tells_the_service_manager_when_ready_and_when_stopping() {
    require_root();
    for abstract_name in [false, true] {
        let d = dirs();
        let (socket, address) = if abstract_name {
            let name = format!("passthroughfs-test-{}", std::process::id());
            let addr = <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(&name).unwrap();
            (UnixDatagram::bind_addr(&addr).unwrap(), format!("@{name}"))
        } else {
            let path = d.dir.path().join("notify");
            (
                UnixDatagram::bind(&path).unwrap(),
                path.to_string_lossy().into_owned(),
            )
        };
        socket.set_read_timeout(Some(PATIENCE)).unwrap();
        let daemon = Daemon::start_with(&d.src, &d.mnt, Transport::Dev, &[], |cmd| {
            cmd.env("NOTIFY_SOCKET", &address);
        });
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).expect("READY=1 within the patience");
        assert_eq!(
            text(&buf[..n]),
            format!("READY=1\nMAINPID={}", daemon.pid()),
            "{address}"
        );
        // Ready means usable.
        assert_eq!(std::fs::read_dir(&d.mnt).unwrap().count(), 0);
        daemon.signal(libc::SIGTERM);
        let n = socket.recv(&mut buf).expect("STOPPING=1");
        assert_eq!(text(&buf[..n]), "STOPPING=1");
        let (status, log, _) = daemon.wait_exit(PATIENCE);
        assert_eq!(status.code(), Some(0), "{log}");
    }
}

#[test]
fn no_colour_unless_standard_error_is_a_terminal() {
    require_root();
    require_program("script", "bsdutils");
    let d = dirs();
    // `script` gives the daemon a terminal; it is stopped once mounted.
    let run = |no_color: bool| -> String {
        let cmd = format!(
            "{BIN} -f {src} {mnt} & pid=$!; \
             for i in $(seq 1200); do grep -q ' {mnt} ' /proc/self/mountinfo && break; sleep 0.05; done; \
             kill $pid; wait $pid",
            src = d.src.display(),
            mnt = d.mnt.display()
        );
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]);
        if no_color {
            c.env("NO_COLOR", "1");
        } else {
            c.env_remove("NO_COLOR");
        }
        text(&output(&mut c).stdout)
    };
    let coloured = run(false);
    assert!(coloured.contains("passthroughfs serving"), "{coloured}");
    assert!(
        coloured.contains('\x1b'),
        "colours on a terminal: {coloured:?}"
    );
    let plain = run(true);
    assert!(plain.contains("passthroughfs serving"), "{plain}");
    assert!(!plain.contains('\x1b'), "NO_COLOR: {plain:?}");
    // Into a pipe: none either.
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Dev, &[]);
    daemon.signal(libc::SIGTERM);
    let (_, log, _) = daemon.wait_exit(PATIENCE);
    assert!(!log.contains('\x1b'), "{log:?}");
}

#[test]
fn debug_logs_one_line_per_request_and_stays_in_the_foreground() {
    let d = dirs_as_root();
    std::fs::write(d.src.join("f"), b"x").unwrap();
    // No -f: -d implies it, so the child itself serves.
    let mut child = Command::new(BIN)
        .args(["-d", "--cache", "never"])
        .arg(&d.src)
        .arg(&d.mnt)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _guard = MountGuard(d.mnt.clone());
    wait_until(
        || is_mounted(&d.mnt) || child.try_wait().unwrap().is_some(),
        || "the daemon did not mount".into(),
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "-d stays in the foreground"
    );
    std::fs::metadata(d.mnt.join("f")).unwrap();
    assert!(std::fs::metadata(d.mnt.join("missing")).is_err());
    // SAFETY: our own child, not reaped yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    let requests: Vec<&str> = log.lines().filter(|l| l.contains("fuse_request")).collect();
    let has = |parts: &[&str]| requests.iter().any(|l| parts.iter().all(|p| l.contains(p)));
    assert!(has(&["INIT", "-> ok"]), "{log}");
    assert!(
        has(&["LOOKUP node=1", "name=\"f\"", "-> ok node="]),
        "{log}"
    );
    assert!(
        has(&["LOOKUP node=1", "name=\"missing\"", "ENOENT"]),
        "{log}"
    );
    assert!(
        requests.iter().all(|l| l.contains(" µs)")),
        "latency on every line: {log}"
    );
}

/// docs/passthroughfs.service, the systemd unit the README points to: its
/// ExecStart line (the binary and the two directories replaced by the
/// test's) is started with its Environment= lines and a notify socket, as
/// systemd would: READY=1 from the main process once the mount is usable,
/// STOPPING=1 and exit 0 on SIGTERM, and auto_unmount as the unit says.
#[test]
fn the_documented_systemd_unit_starts_as_systemd_would() {
    require_root();
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/passthroughfs.service"
    ))
    .unwrap();
    let value = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(value("Type"), ["notify"], "{unit}");
    let exec = value("ExecStart").pop().expect("an ExecStart line");
    let mut words: Vec<String> = exec.split_whitespace().map(str::to_string).collect();
    assert_eq!(words[0], "/usr/local/bin/passthroughfs", "{exec}");
    assert!(
        words.iter().any(|w| w == "-f"),
        "the unit keeps it in the foreground: {exec}"
    );
    let d = dirs();
    let n = words.len();
    assert_eq!(&words[n - 2..], ["/srv/data", "/mnt/data"], "{exec}");
    words[0] = BIN.into();
    words[n - 2] = d.src.to_string_lossy().into_owned();
    words[n - 1] = d.mnt.to_string_lossy().into_owned();

    let path = d.dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .env("NOTIFY_SOCKET", &path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for env in value("Environment") {
        let (k, v) = env.split_once('=').unwrap();
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let _guard = MountGuard(d.mnt.clone());
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("READY=1");
    assert_eq!(text(&buf[..n]), format!("READY=1\nMAINPID={}", child.id()));
    assert!(mount_line(&d.mnt).contains("allow_other"));
    // SAFETY: our own child, not reaped yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let n = socket.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(text(&buf[..n]), "STOPPING=1");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains('\x1b'),
        "NO_COLOR from the unit"
    );
    assert!(!is_mounted(&d.mnt));
}

/// Once in the background the daemon logs to syslog. This test's thread
/// gets a mount namespace of its own with a `/dev` holding `null`, `fuse`
/// and a `log` socket that it reads (so the machine's /dev and syslog are
/// left alone), starts the daemon there without -f, has it log its state
/// (SIGUSR1) and unmounts it: both lines arrive as syslog messages of
/// `passthroughfs[PID]`.
#[test]
fn the_background_daemon_logs_to_syslog_needs_root() {
    let d = dirs_as_root();
    std::thread::spawn(move || {
        test_support::unshare_mount_namespace();
        let dev = d.dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        for (name, major, minor) in [("null", 1, 3), ("fuse", 10, 229)] {
            let path = std::ffi::CString::new(dev.join(name).to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path; a character device node.
            let rc = unsafe {
                libc::mknod(
                    path.as_ptr(),
                    libc::S_IFCHR | 0o666,
                    libc::makedev(major, minor),
                )
            };
            assert_eq!(rc, 0, "mknod {name}: {}", std::io::Error::last_os_error());
        }
        let log = UnixDatagram::bind(dev.join("log")).unwrap();
        log.set_read_timeout(Some(PATIENCE)).unwrap();
        test_support::bind_mount(&dev, Path::new("/dev"), false);

        let out = output(Command::new(BIN).arg(&d.src).arg(&d.mnt));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let _guard = MountGuard(d.mnt.clone());
        let pids = daemons_at(&d.mnt);
        assert_eq!(pids.len(), 1, "{pids:?}");
        let tag = format!("passthroughfs[{}]: ", pids[0]);
        let mut buf = [0u8; 4096];
        let mut next_line = |want: &str| loop {
            let n = log
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("no syslog line with {want:?}: {e}"));
            let line = text(&buf[..n]);
            assert!(line.contains(&tag), "{line}");
            if line.contains(want) {
                return line;
            }
        };
        // SAFETY: the daemon's pid, alive (it serves the mount).
        assert_eq!(unsafe { libc::kill(pids[0], libc::SIGUSR1) }, 0);
        let state = next_line("transport state");
        assert!(!state.contains('\x1b'), "no colours in syslog: {state:?}");
        umount_and_wait(&d.mnt);
        next_line("unmounted; exiting");
    })
    .join()
    .unwrap();
}
