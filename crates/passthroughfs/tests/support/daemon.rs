//! The `passthroughfs` daemon as a child process, for the fault and scale
//! tests: started on either transport, signalled, waited for with a
//! deadline, its standard error kept; killed and its mount removed on drop.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The daemon binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_passthroughfs");

/// How long a daemon may take to mount and start serving: generous, so
/// that a busy machine doesn't fail a test (a daemon that never comes up
/// still fails it, with its log).
pub const START_PATIENCE: Duration = Duration::from_secs(60);

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

/// Fails (never passes silently) unless FUSE over io_uring is enabled.
pub fn require_uring() {
    let v = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").unwrap_or_default();
    assert_eq!(
        v.trim(),
        "Y",
        "FUSE over io_uring is off: echo Y > /sys/module/fuse/parameters/enable_uring \
         (cargo xtask test does)"
    );
}

/// A source directory and a mountpoint in a fresh temporary directory.
pub struct Dirs {
    /// Holds both.
    pub dir: tempfile::TempDir,
    /// The backing directory.
    pub src: PathBuf,
    /// The mountpoint.
    pub mnt: PathBuf,
}

/// Fresh directories.
pub fn dirs() -> Dirs {
    let dir = tempfile::Builder::new()
        .prefix("pt-fault-")
        .tempdir_in("/tmp")
        .unwrap();
    let src = dir.path().join("src");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    Dirs { dir, src, mnt }
}

/// A running daemon.
pub struct Daemon {
    child: Option<Child>,
    /// Its mountpoint.
    pub mnt: PathBuf,
    stderr: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Runs the daemon with `args` on `src` and `mnt`, which must refuse to
/// start without mounting anything; its standard error.
pub fn refused_at_start(src: &Path, mnt: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("--foreground")
        .args(args)
        .arg(src)
        .arg(mnt)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?}: {err}");
    assert!(!is_mounted(mnt), "{args:?}: {err}");
    err
}

/// Whether `path` is a mountpoint.
pub fn is_mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = path.to_string_lossy().replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(&want))
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

/// The names of a process's threads (to tell which one hangs).
pub fn thread_names(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect()
}

/// What each thread of process `pid` waits in: "NAME WCHAN" (WCHAN is 0
/// for a running thread), to check where a thread is blocked.
pub fn thread_wchans(pid: i32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| {
            let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
            format!("{} {}", read("comm").trim(), read("wchan"))
        })
        .collect()
}

/// Whether every thread of process `pid` is stopped (state T: SIGSTOP
/// took effect everywhere, so none of them can take a request any more).
pub fn threads_stopped(pid: i32) -> bool {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    rd.filter_map(|e| e.ok()).all(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which may hold spaces.
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state == "T")
    })
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
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if is_mounted(&self.mnt) {
            let _ = fuse_transport_dev::unmount_path(&self.mnt, true);
        }
    }
}

/// Unmounts (lazily) on drop, if still mounted.
pub struct MountGuard(pub PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = fuse_transport_dev::unmount_path(&self.0, true);
        }
    }
}

/// Runs `f` on a thread and waits at most `timeout` for it: `None` if it
/// did not return (the thread is left behind, blocked).
pub fn with_timeout<T: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(timeout).ok()
}

/// `s` without terminal colour sequences (`ESC [ ... m`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
