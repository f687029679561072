//! The `passthroughfs` daemon as a child process, for the fault and scale
//! tests: started on either transport, signalled, waited for with a
//! deadline, its standard error kept; killed and its mount removed on drop.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
// Each test binary uses a part of what the shared module offers.
#[allow(unused_imports)]
pub use test_support::{
    create_rw, gone, is_mounted, require_uring, thread_names, thread_wchans, threads_stopped,
    with_timeout, MountGuard, Scratch as Dirs,
};

/// Runs `cmd` (a daemon's start, say, that returns once it is in the
/// background) to completion, with the daemon's log at info.
pub fn output(cmd: &mut Command) -> std::process::Output {
    cmd.env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

/// `bytes` (a process's output) as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Makes `files` empty files in directories of 1,000 under `src`
/// (`dN/fM`, the numbers zero-padded to `width` digits); returns the
/// number of directories.
pub fn make_tree(src: &Path, files: usize, width: usize) -> usize {
    let per_dir = 1000;
    let dirs = files.div_ceil(per_dir);
    for d in 0..dirs {
        let dir = src.join(format!("d{d:0width$}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::File::create(dir.join(format!("f{f:0width$}"))).unwrap();
        }
    }
    dirs
}

/// Fresh directories for a daemon's source and mountpoint.
pub fn dirs() -> Dirs {
    test_support::scratch("pt-fault-")
}

/// Fails the test unless we are root (the caller mounts); then fresh
/// [`dirs`].
pub fn dirs_as_root() -> Dirs {
    test_support::require_root();
    dirs()
}

/// Fresh [`dirs`] held together with a [`MountGuard`] on their
/// mountpoint, which goes first: whatever a test leaves mounted there,
/// passing or failing, is detached before the directories are removed.
pub struct GuardedDirs {
    _guard: MountGuard,
    dirs: Dirs,
}

impl std::ops::Deref for GuardedDirs {
    type Target = Dirs;

    fn deref(&self) -> &Dirs {
        &self.dirs
    }
}

/// Fails the test unless we are root (the tests that call it mount);
/// then fresh [`GuardedDirs`].
pub fn guarded_dirs_as_root() -> GuardedDirs {
    test_support::require_root();
    let dirs = dirs();
    GuardedDirs {
        _guard: MountGuard(dirs.mnt.clone()),
        dirs,
    }
}

/// The daemon binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_passthroughfs");

/// How long a daemon may take to mount and start serving: generous, so
/// that a busy machine doesn't fail a test (a daemon that never comes up
/// still fails it, with its log).
pub const START_PATIENCE: Duration = Duration::from_secs(60);

/// Waits until `what` holds, failing after [`START_PATIENCE`] with `why`
/// (a bound against hangs, such as a daemon that never comes up or never
/// goes away, not a speed check).
pub fn wait_until(what: impl FnMut() -> bool, why: impl Fn() -> String) {
    test_support::wait_or_fail(START_PATIENCE, what, why)
}

/// Which transport a daemon serves with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `/dev/fuse` worker threads.
    Dev,
    /// FUSE over io_uring (`--uring`).
    Uring,
}

impl Transport {
    /// Both, for tests that run on each.
    pub const ALL: [Transport; 2] = [Transport::Dev, Transport::Uring];

    fn args(self) -> &'static [&'static str] {
        match self {
            Transport::Dev => &[],
            Transport::Uring => &["--uring"],
        }
    }
}

/// A running daemon.
pub struct Daemon {
    child: Option<Child>,
    /// Its mountpoint.
    pub mnt: PathBuf,
    stderr: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Runs the daemon in the foreground with `args` on `src` and `mnt`,
/// which must fail; its standard error.
pub fn failed_run(src: &Path, mnt: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("--foreground")
        .args(args)
        .arg(src)
        .arg(mnt)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?}: {err}");
    err
}

/// Runs the daemon with `args` on `src` and `mnt`, which must refuse to
/// start without mounting anything; its standard error.
pub fn refused_at_start(src: &Path, mnt: &Path, args: &[&str]) -> String {
    let err = failed_run(src, mnt, args);
    assert!(!is_mounted(mnt), "{args:?}: {err}");
    err
}

impl Daemon {
    /// Starts `passthroughfs` with `transport` and `extra` arguments, and
    /// waits until it has mounted.
    pub fn start(src: &Path, mnt: &Path, transport: Transport, extra: &[&str]) -> Self {
        Self::start_with(src, mnt, transport, extra, |_| {})
    }

    /// Like [`Daemon::start`], letting `setup` change the command first.
    pub fn start_with(
        src: &Path,
        mnt: &Path,
        transport: Transport,
        extra: &[&str],
        setup: impl FnOnce(&mut Command),
    ) -> Self {
        Self::start_program(Path::new(BIN), src, mnt, transport, extra, setup)
    }

    /// Like [`Daemon::start_with`], running `program` (another build of
    /// passthroughfs).
    pub fn start_program(
        program: &Path,
        src: &Path,
        mnt: &Path,
        transport: Transport,
        extra: &[&str],
        setup: impl FnOnce(&mut Command),
    ) -> Self {
        if transport == Transport::Uring {
            require_uring();
        }
        let mut cmd = Command::new(program);
        cmd.arg("--foreground")
            .args(transport.args())
            .args(extra)
            .arg(src)
            .arg(mnt)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        setup(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut d = Daemon {
            child: Some(child),
            mnt: mnt.to_path_buf(),
            stderr,
            reader: Some(reader),
        };
        let start = Instant::now();
        while !is_mounted(mnt) {
            if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "daemon exited with {status} before mounting: {}",
                    d.stderr()
                );
            }
            assert!(
                start.elapsed() < START_PATIENCE,
                "daemon did not mount: {}",
                d.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Mounted; wait for the serving line (INIT answered, workers up).
        while !d.stderr().contains("passthroughfs serving") {
            assert!(start.elapsed() < START_PATIENCE, "{}", d.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
        if transport == Transport::Uring {
            let log = d.stderr();
            assert!(
                log.contains("io_uring with") && !log.contains("falls back to /dev/fuse"),
                "the daemon serves over io_uring: {log}"
            );
        }
        d
    }

    /// The mount is someone else's now (handed over to a new daemon):
    /// dropping this one doesn't unmount it.
    pub fn forget_mount(&mut self) {
        self.mnt = PathBuf::new();
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// What the daemon wrote to standard error so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Sends `sig`.
    pub fn signal(&self, sig: i32) {
        // SAFETY: our own child, not yet reaped (the pid can't be reused).
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Waits up to `timeout` for the daemon to exit; returns its status and
    /// standard error, or panics (after killing it) if it didn't exit.
    pub fn wait_exit(mut self, timeout: Duration) -> (ExitStatus, String, Duration) {
        let start = Instant::now();
        let mut child = self.child.take().unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let took = start.elapsed();
                if let Some(r) = self.reader.take() {
                    r.join().unwrap();
                }
                return (status, self.stderr(), took);
            }
            if start.elapsed() > timeout {
                let threads = thread_names(child.id());
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "daemon did not exit within {timeout:?}; its threads: {threads:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the daemon with SIGKILL and reaps it, leaving its (dead)
    /// mount behind; returns the mountpoint, which the caller must
    /// unmount (see [`MountGuard`]).
    pub fn kill(mut self) -> MountGuard {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        MountGuard(std::mem::take(&mut self.mnt))
    }
}

/// The lines of a daemon's standard error that report errors or panics.
pub fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("panicked") || l.contains("error:"))
        .collect()
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::kill_and_detach(self.child.take(), &self.mnt);
    }
}

/// The processes of the daemon binary whose command line names `mnt`.
pub fn daemons_at(mnt: &Path) -> Vec<i32> {
    test_support::processes_of(Path::new(BIN), mnt)
}

/// Unmounts `mnt` with umount(8) and waits for the daemons serving it to
/// exit (failing after [`START_PATIENCE`]: a bound against hangs).
pub fn umount_and_wait(mnt: &Path) {
    let pids = daemons_at(mnt);
    let out = Command::new("umount").arg(mnt).output().unwrap();
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for pid in pids {
        test_support::wait_or_fail(
            START_PATIENCE,
            || gone(pid),
            || format!("daemon {pid} still runs after umount"),
        );
    }
}
