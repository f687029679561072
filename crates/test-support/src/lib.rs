//! What the workspace's mounting tests share: the root and kernel checks
//! that fail a test with its reason (never pass it silently), reading
//! `/proc/self/mountinfo`, scratch directories for a source and a
//! mountpoint, waiting with a deadline, looking at processes, and
//! capturing a log.
//!
//! A dev-dependency of the crates whose tests use it (those that mount,
//! and the server's for its log capture); it depends on none of them, so
//! that none of them is built twice.

pub mod caches;
pub mod file;
pub mod load;
pub mod log;
pub mod mountinfo;
pub mod namespace;
pub mod process;

pub use caches::{drop_kernel_caches, kernel_keeps, KernelKeeps};
pub use file::{create_rw, mmap_writes_through, open_direct, Aligned, SharedMap};
pub use log::{strip_ansi, LogBuf};
pub use mountinfo::{
    detach, is_mounted, kill_and_detach, mounts_with_exact_source, mounts_with_source,
    remove_unless_mounted, MountGuard,
};
pub use namespace::{bind_mount, unshare_mount_namespace};
pub use process::{
    command, current_thread_nice, gone, leave_fuse_sessions_behind, process_mark,
    process_start_time, processes_of, thread_allowed_cpus, thread_names, thread_nices,
    thread_wchans, threads_stopped,
};

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Fails the test (never passes silently) unless we are root: the tests
/// that call it mount with mount(2) (and some switch users).
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test mounts FUSE file systems with mount(2): it needs root (CI runs it as root; \
         or CAP_SYS_ADMIN in a user namespace: `cargo xtask test-in-userns`); euid is {euid}"
    );
}

/// The fusectl directory: a subdirectory per FUSE connection, named by
/// the connection's number (its mount's device minor), with the
/// connection's `waiting` count and `abort` switch. Mounted first where
/// nothing is mounted there yet (a fresh mount namespace, a container).
pub fn fusectl_connections() -> &'static std::path::Path {
    let root = std::path::Path::new("/sys/fs/fuse/connections");
    if std::fs::read_dir(root).map_or(true, |mut d| d.next().is_none()) {
        let _ = command("mount")
            .args(["-t", "fusectl", "none"])
            .arg(root)
            .status();
    }
    root
}

/// The switch that lets the kernel offer FUSE over io_uring.
pub const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Fails the test (never passes silently) unless FUSE over io_uring is
/// switched on ([`URING_PARAM`] is `Y`).
pub fn require_uring() {
    match std::fs::read_to_string(URING_PARAM) {
        Ok(v) if v.trim() == "Y" => {}
        Ok(v) => panic!(
            "FUSE over io_uring is switched off: {URING_PARAM} is {} (run `echo Y > \
             {URING_PARAM}` as root; `cargo xtask test` does)",
            v.trim()
        ),
        Err(e) => panic!(
            "FUSE over io_uring is not available: cannot read {URING_PARAM} ({e}): the kernel \
             lacks it (6.14+ with CONFIG_FUSE_IO_URING)"
        ),
    }
}

/// Whether this process runs in the initial user namespace (where the
/// kernel lets root do what a namespace's root can't, such as register
/// backing files or make device nodes).
pub fn in_initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
        .unwrap_or(false)
}

/// `Err` with the reason unless this kernel takes `FUSE_DEV_IOC_SYNC_INIT`
/// (Linux 6.18) on a fresh `/dev/fuse` descriptor.
pub fn kernel_offers_sync_init() -> Result<(), String> {
    use std::os::fd::AsRawFd;
    // _IO(229, 3): the fuse-abi crate's `ioctl::DEV_IOC_SYNC_INIT`, spelled
    // here so that this crate depends on no sibling.
    const DEV_IOC_SYNC_INIT: libc::c_ulong = (229 << 8) | 3;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse can't be opened: {e}"))?;
    // SAFETY: the ioctl takes no argument; the descriptor is ours and
    // closed, never mounted, right after.
    let rc = unsafe { libc::ioctl(dev.as_raw_fd(), DEV_IOC_SYNC_INIT as _) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "the kernel refuses FUSE_DEV_IOC_SYNC_INIT ({}; Linux 6.18+ has it)",
            std::io::Error::last_os_error()
        ))
    }
}

/// A source directory and a mountpoint in a fresh directory under `/tmp`
/// (removed on drop, with both).
pub struct Scratch {
    /// Holds `src` and `mnt`.
    pub dir: tempfile::TempDir,
    /// The backing directory.
    pub src: PathBuf,
    /// The mountpoint.
    pub mnt: PathBuf,
}

/// A fresh directory under `/tmp` named `PREFIX…` (removed on drop).
pub fn tmp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap_or_else(|e| panic!("a temporary directory {prefix}… in /tmp: {e}"))
}

/// Fresh scratch directories named `PREFIX…`.
pub fn scratch(prefix: &str) -> Scratch {
    let dir = tmp_dir(prefix);
    let src = dir.path().join("src");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&src).expect("creating the source directory");
    std::fs::create_dir(&mnt).expect("creating the mountpoint");
    Scratch { dir, src, mnt }
}

/// [`scratch`] that other users can reach (the directory and the source
/// are mode 0755), for tests that switch users.
pub fn shared_scratch(prefix: &str) -> Scratch {
    let s = scratch(prefix);
    chmod(s.dir.path(), 0o755);
    chmod(&s.src, 0o755);
    s
}

/// Sets the permission bits of `path` (failing the test if it can't).
pub fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// How often the waiting helpers look again.
const POLL: Duration = Duration::from_millis(10);

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Polls `cond` until it holds; fails the test with `why()` once
/// `patience` has passed (a bound against hangs, not a speed check).
pub fn wait_or_fail(patience: Duration, cond: impl FnMut() -> bool, why: impl Fn() -> String) {
    if !wait_until(patience, cond) {
        panic!("{}", why());
    }
}

/// The errno `r` failed with; fails the test if `r` succeeded or its
/// error carries no errno.
pub fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("the call should have failed")
        .raw_os_error()
        .expect("an error with an errno")
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

/// Deterministic pseudo-random bytes (xorshift from `seed`).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `#[test]` functions written one a line, `NAME => CALL;`, each running
/// its call (which holds the test's assertions): a family of tests that
/// differ only in an argument reads as the table it is, and each case is
/// still a test of its own, run and reported by its name. Attributes
/// (`///` docs, `#[cfg(…)]`, `#[ignore = "…"]`) before a line go to that
/// test.
#[macro_export]
macro_rules! test_cases {
    ($($(#[$attr:meta])* $name:ident => $call:expr;)+) => {
        $(
            $(#[$attr])*
            #[test]
            fn $name() {
                $call;
            }
        )+
    };
}
