//! Mounting and unmounting without a FUSE serving loop.
//!
//! These tests mount for real: they need root (or CAP_SYS_ADMIN in a user
//! namespace, e.g. `unshare -U -r -m`) and, for the fusermount3 tests, the
//! `fuse3` package. When that is missing they fail and say why.
//!
//! Right after mounting, the kernel queues FUSE_INIT and any access to the
//! mount (stat, statfs) blocks until it is answered. So the tests look at
//! /proc/self/mountinfo, which does not touch the file system, and the one test
//! that calls statfs answers INIT and STATFS itself in a helper thread.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use test_support::mountinfo::{mounts_at as mountinfo_for, Mount as MountInfo};
use test_support::require_root;

use fuse_transport_dev::mount::{
    is_fuse_mount, unmount_path, Mount, MountError, MountMethod, MountOptions,
};

// ---------------------------------------------------------------------------
// Helpers

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn fusermount3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("fusermount3"))
        .find(|p| p.is_file())
}

fn require_fusermount3() {
    assert!(
        fusermount3().is_some(),
        "fusermount3 not installed (apt-get install fuse3)"
    );
}

/// A mountpoint in a fresh temporary directory. Dropping it unmounts anything
/// still mounted there (lazily) before removing the directory; if that fails it
/// leaves the directory behind rather than walk into a mount.
struct TestDir {
    dir: Option<tempfile::TempDir>,
    mnt: PathBuf,
}

impl TestDir {
    fn new() -> TestDir {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let mnt = dir
            .path()
            .canonicalize()
            .expect("canonicalize the temporary directory")
            .join("mnt");
        std::fs::create_dir(&mnt).expect("create the mountpoint");
        TestDir {
            dir: Some(dir),
            mnt,
        }
    }

    fn root(&self) -> &Path {
        self.mnt.parent().expect("mountpoint has a parent")
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        for _ in 0..16 {
            if mountinfo_for(&self.mnt).is_empty() {
                return; // the TempDir field is removed after this
            }
            if let Err(err) = unmount_path(&self.mnt, true) {
                eprintln!("cleanup: unmounting {}: {err}", self.mnt.display());
            }
        }
        if !mountinfo_for(&self.mnt).is_empty() {
            eprintln!(
                "cleanup: {} is still mounted; leaving the directory in place",
                self.mnt.display()
            );
            if let Some(dir) = self.dir.take() {
                let _ = dir.keep();
            }
        }
    }
}

fn only_mount(path: &Path) -> MountInfo {
    let mut mounts = mountinfo_for(path);
    assert_eq!(
        mounts.len(),
        1,
        "expected one mount on {}: {mounts:?}",
        path.display()
    );
    mounts.remove(0)
}

fn has(options: &[String], option: &str) -> bool {
    options.iter().any(|o| o == option)
}

// FUSE wire format, just enough to answer INIT and STATFS.
const FUSE_IN_HEADER_LEN: usize = 40;
const FUSE_OUT_HEADER_LEN: usize = 16;
const OP_FORGET: u32 = 2;
const OP_STATFS: u32 = 17;
const OP_INIT: u32 = 26;
const OP_INTERRUPT: u32 = 36;
const OP_BATCH_FORGET: u32 = 42;
const ENOSYS: i32 = 38;

fn reply(dev: &mut File, unique: u64, error: i32, body: &[u8]) {
    let len = u32::try_from(FUSE_OUT_HEADER_LEN + body.len()).expect("small reply");
    let mut msg = Vec::with_capacity(len as usize);
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&error.to_ne_bytes());
    msg.extend_from_slice(&unique.to_ne_bytes());
    msg.extend_from_slice(body);
    // One write per reply; errors (a request that was interrupted) are fine.
    let _ = dev.write(&msg);
}

/// Answers INIT (7.31), STATFS (all zeros) and everything else with ENOSYS
/// until the connection goes away; returns the opcodes seen.
fn serve_minimal(fd: OwnedFd) -> JoinHandle<Vec<u32>> {
    std::thread::spawn(move || {
        let mut dev = File::from(fd);
        let mut buf = vec![0u8; (1 << 20) + 4096];
        let mut seen = Vec::new();
        loop {
            let n = match dev.read(&mut buf) {
                Ok(n) => n,
                Err(err) if err.raw_os_error() == Some(libc::ENODEV) => break,
                Err(err) if matches!(err.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => {
                    continue
                }
                Err(err) => panic!("reading /dev/fuse: {err}"),
            };
            assert!(n >= FUSE_IN_HEADER_LEN, "short request of {n} bytes");
            let opcode = u32::from_ne_bytes(buf[4..8].try_into().unwrap());
            let unique = u64::from_ne_bytes(buf[8..16].try_into().unwrap());
            seen.push(opcode);
            match opcode {
                OP_INIT => {
                    let mut out = [0u8; 64];
                    out[0..4].copy_from_slice(&7u32.to_ne_bytes()); // major
                    out[4..8].copy_from_slice(&31u32.to_ne_bytes()); // minor
                    out[8..12].copy_from_slice(&(128u32 * 1024).to_ne_bytes()); // max_readahead
                                                                                // flags 0
                    out[16..18].copy_from_slice(&16u16.to_ne_bytes()); // max_background
                    out[18..20].copy_from_slice(&12u16.to_ne_bytes()); // congestion_threshold
                    out[20..24].copy_from_slice(&4096u32.to_ne_bytes()); // max_write
                    out[24..28].copy_from_slice(&1u32.to_ne_bytes()); // time_gran
                    out[28..30].copy_from_slice(&1u16.to_ne_bytes()); // max_pages
                    reply(&mut dev, unique, 0, &out);
                }
                OP_STATFS => reply(&mut dev, unique, 0, &[0u8; 80]),
                OP_FORGET | OP_BATCH_FORGET | OP_INTERRUPT => {}
                _ => reply(&mut dev, unique, -ENOSYS, &[]),
            }
        }
        seen
    })
}

/// Leaves a dead FUSE mount on `path`: mounted with a /dev/fuse descriptor
/// that is closed at once, so the connection is aborted.
fn make_dead_mount(path: &Path) {
    use std::ffi::CString;
    use std::os::fd::FromRawFd;
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(
        fd >= 0,
        "open /dev/fuse: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: open just returned this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let target = CString::new(path.to_str().unwrap()).unwrap();
    let data = CString::new(format!(
        "fd={},rootmode=40000,user_id=0,group_id=0",
        fd.as_raw_fd()
    ))
    .unwrap();
    // SAFETY: valid NUL-terminated strings that outlive the call.
    let ret = unsafe {
        libc::mount(
            c"deadfs".as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(ret, 0, "mount: {}", std::io::Error::last_os_error());
    drop(fd);
}

// ---------------------------------------------------------------------------
// mount(2)

#[test]
fn syscall_mount_appears_in_mountinfo_with_options() {
    require_root();
    let dir = TestDir::new();
    let options = MountOptions::default()
        .fsname("mount-only-test")
        .subtype("mountonly")
        .allow_other(true)
        .default_permissions(true)
        .read_only(true)
        .max_read(65536);
    let mut mount = mount_by(&dir, &options, MountMethod::Syscall);

    let info = only_mount(&dir.mnt);
    assert_eq!(info.fstype, "fuse.mountonly");
    assert_eq!(info.source, "mount-only-test");
    for option in ["ro", "nosuid", "nodev"] {
        assert!(
            has(&info.mount_options, option),
            "{option} missing: {info:?}"
        );
    }
    let uid = format!("user_id={}", euid());
    for option in [
        "ro",
        uid.as_str(),
        "default_permissions",
        "allow_other",
        "max_read=65536",
    ] {
        assert!(
            has(&info.super_options, option),
            "{option} missing: {info:?}"
        );
    }

    mount.unmount().expect("unmount");
    assert!(mountinfo_for(&dir.mnt).is_empty(), "still mounted");
    mount.unmount().expect("a second unmount does nothing");
}

#[test]
fn mount_new_as_root_uses_mount_syscall_and_drop_unmounts() {
    require_root();
    let dir = TestDir::new();
    let mount = Mount::new(&dir.mnt, &MountOptions::default()).expect("mount");
    assert_eq!(mount.method(), MountMethod::Syscall);
    let info = only_mount(&dir.mnt);
    assert_eq!(info.fstype, "fuse");
    assert_eq!(info.source, "fuse");
    assert!(has(&info.mount_options, "rw"), "{info:?}");
    assert!(has(&info.mount_options, "nosuid"), "{info:?}");
    assert!(has(&info.mount_options, "nodev"), "{info:?}");
    assert!(!has(&info.super_options, "allow_other"), "{info:?}");
    drop(mount);
    assert!(mountinfo_for(&dir.mnt).is_empty(), "Drop did not unmount");
}

#[test]
fn relative_mountpoint_is_canonicalized() {
    require_root();
    let dir = TestDir::new();
    // A path with a `..` and a symlink in it.
    let link = dir.root().join("link");
    std::os::unix::fs::symlink(dir.root(), &link).unwrap();
    let crooked = link.join("mnt").join("..").join("mnt");
    let mount = Mount::new_with_method(&crooked, &MountOptions::default(), MountMethod::Syscall)
        .expect("mount");
    assert_eq!(mount.mountpoint(), dir.mnt);
    only_mount(&dir.mnt);
}

#[test]
fn extra_flag_options_become_mount_flags() {
    require_root();
    let dir = TestDir::new();
    let options = MountOptions::default()
        .nosuid(false)
        .extra(["noexec", "noatime", "nonempty"]);
    let _mount = Mount::new_with_method(&dir.mnt, &options, MountMethod::Syscall)
        .expect("mount with extra flags");
    let info = only_mount(&dir.mnt);
    assert!(has(&info.mount_options, "noexec"), "{info:?}");
    assert!(has(&info.mount_options, "noatime"), "{info:?}");
    assert!(has(&info.mount_options, "nodev"), "{info:?}");
    assert!(!has(&info.mount_options, "nosuid"), "{info:?}");
}

#[test]
fn fsname_with_comma_and_backslash_syscall() {
    require_root();
    let dir = TestDir::new();
    let options = MountOptions::default().fsname(r"a,b\c d");
    let _mount = Mount::new_with_method(&dir.mnt, &options, MountMethod::Syscall).expect("mount");
    assert_eq!(only_mount(&dir.mnt).source, r"a,b\c d");
}

#[test]
fn is_fuse_mount_after_answering_init() {
    require_root();
    let dir = TestDir::new();
    let mut mount = Mount::new(&dir.mnt, &MountOptions::default()).expect("mount");
    let fd = mount
        .dev_fd()
        .try_clone_to_owned()
        .expect("dup /dev/fuse fd");
    let server = serve_minimal(fd);

    assert!(is_fuse_mount(&dir.mnt).expect("statfs the mount"));
    assert!(!is_fuse_mount(dir.root()).expect("statfs the parent"));

    mount.unmount().expect("unmount");
    let seen = server.join().expect("server thread");
    assert_eq!(seen.first(), Some(&OP_INIT), "opcodes: {seen:?}");
    assert!(seen.contains(&OP_STATFS), "opcodes: {seen:?}");
    assert!(!is_fuse_mount(&dir.mnt).expect("statfs after unmount"));
}

#[test]
fn unmount_falls_back_to_lazy_when_busy() {
    require_root();
    let dir = TestDir::new();
    let mut mount = Mount::new(&dir.mnt, &MountOptions::default()).expect("mount");
    // Hold the mount busy with an O_PATH descriptor of its root (O_PATH sends
    // no FUSE request, so INIT need not be answered).
    let busy = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(&dir.mnt)
        .expect("open the mount root");
    let err = unmount_path(&dir.mnt, false).unwrap_err();
    assert!(
        matches!(&err, MountError::Unmount { source, .. } if source.raw_os_error() == Some(libc::EBUSY)),
        "{err:?}"
    );
    mount.unmount().expect("unmount (lazy fallback)");
    assert!(mountinfo_for(&dir.mnt).is_empty(), "still mounted");
    drop(busy);
}

#[test]
fn unmount_path_of_plain_directory_is_not_mounted() {
    require_root();
    let dir = TestDir::new();
    let err = unmount_path(&dir.mnt, false).unwrap_err();
    assert!(matches!(err, MountError::NotMounted { .. }), "{err:?}");
    assert!(err.to_string().contains("not a mount point"), "{err}");
}

#[test]
fn unmount_path_unmounts() {
    require_root();
    let dir = TestDir::new();
    let mut mount = Mount::new(&dir.mnt, &MountOptions::default()).expect("mount");
    unmount_path(&dir.mnt, false).expect("unmount_path");
    assert!(mountinfo_for(&dir.mnt).is_empty());
    // Someone else unmounted it: Mount::unmount still succeeds.
    mount.unmount().expect("unmount after external unmount");
}

#[test]
fn dead_mount_is_reported() {
    require_root();
    let dir = TestDir::new();
    make_dead_mount(&dir.mnt);
    let err = Mount::new(&dir.mnt, &MountOptions::default()).unwrap_err();
    assert!(matches!(err, MountError::DeadMount { .. }), "{err:?}");
    let expected = format!(
        "mountpoint {0} is a dead FUSE mount (its daemon exited); unmount it with `umount -l {0}`",
        dir.mnt.display()
    );
    assert_eq!(err.to_string(), expected);
    // A dead mount is still recognized by statfs? No: it fails with ENOTCONN.
    let statfs = is_fuse_mount(&dir.mnt).unwrap_err();
    assert_eq!(statfs.raw_os_error(), Some(libc::ENOTCONN));
    unmount_path(&dir.mnt, false).expect("unmount the dead mount");
    assert!(mountinfo_for(&dir.mnt).is_empty());
}

// ---------------------------------------------------------------------------
// Errors that need no privileges

#[test]
fn missing_mountpoint() {
    let dir = TestDir::new();
    let missing = dir.root().join("missing");
    let err = Mount::new(&missing, &MountOptions::default()).unwrap_err();
    assert!(
        matches!(err, MountError::MountpointNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("mountpoint {} does not exist", missing.display())
    );
}

#[test]
fn mountpoint_is_a_file() {
    let dir = TestDir::new();
    let file = dir.root().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = Mount::new(&file, &MountOptions::default()).unwrap_err();
    assert!(matches!(err, MountError::NotADirectory { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("mountpoint {} is not a directory", file.display())
    );
    // A path through the file does not exist.
    let below = file.join("below");
    let err = Mount::new(&below, &MountOptions::default()).unwrap_err();
    assert!(
        matches!(err, MountError::MountpointNotFound { .. }),
        "{err:?}"
    );
}

#[test]
fn invalid_options_are_rejected() {
    let dir = TestDir::new();
    let check = |options: MountOptions, want_option: &str, want_reason: &str| {
        let err = Mount::new(&dir.mnt, &options).unwrap_err();
        match &err {
            MountError::InvalidOption { option, reason } => {
                assert_eq!(option, want_option, "{err}");
                assert!(reason.contains(want_reason), "{err}");
            }
            other => panic!("expected InvalidOption, got {other:?}"),
        }
        assert!(err.to_string().starts_with("invalid mount option"), "{err}");
    };
    let extra = |e: &str| MountOptions::default().extra([e]);
    check(
        extra("noatime,suid"),
        "noatime,suid",
        "must not contain ','",
    );
    check(extra("a\0b"), "a\0b", "NUL");
    check(extra(""), "", "must not be empty");
    check(extra("fd=3"), "fd=3", "set by the mount code");
    check(extra("fsname=x"), "fsname=x", "MountOptions::fsname");
    check(extra("blkdev"), "blkdev", "not supported");
    check(
        MountOptions::default().subtype("a,b"),
        "subtype=a,b",
        "must not contain ','",
    );
    check(MountOptions::default().fsname("a\0b"), "fsname=a\0b", "NUL");
    assert!(mountinfo_for(&dir.mnt).is_empty());
}

#[test]
fn default_options_are_nosuid_nodev() {
    let options = MountOptions::default();
    assert!(options.nosuid && options.nodev);
    assert!(!options.read_only && !options.allow_other && !options.default_permissions);
    assert!(options.fsname.is_none() && options.subtype.is_none() && options.extra.is_empty());
}

// ---------------------------------------------------------------------------
// fusermount3

#[test]
fn fusermount_mount_and_unmount() {
    require_fusermount3();
    let dir = TestDir::new();
    let options = MountOptions::default()
        .fsname(r"fm,name\x")
        .subtype("fmtest")
        .default_permissions(true)
        .max_read(32768);
    let mut mount = mount_by(&dir, &options, MountMethod::Fusermount);
    // The descriptor came over SCM_RIGHTS with close-on-exec set.
    // SAFETY: F_GETFD on a descriptor we borrow.
    let flags = unsafe { libc::fcntl(mount.dev_fd().as_raw_fd(), libc::F_GETFD) };
    assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "flags {flags}");

    let info = only_mount(&dir.mnt);
    assert_eq!(info.fstype, "fuse.fmtest");
    assert_eq!(info.source, r"fm,name\x");
    assert!(has(&info.mount_options, "nosuid"), "{info:?}");
    assert!(has(&info.mount_options, "nodev"), "{info:?}");
    assert!(has(&info.super_options, "default_permissions"), "{info:?}");
    assert!(has(&info.super_options, "max_read=32768"), "{info:?}");

    // The session works: INIT and STATFS get through.
    let server = serve_minimal(mount.dev_fd().try_clone_to_owned().unwrap());
    assert!(is_fuse_mount(&dir.mnt).expect("statfs"));

    mount.unmount().expect("fusermount3 -u -z");
    assert!(mountinfo_for(&dir.mnt).is_empty(), "still mounted");
    mount.unmount().expect("a second unmount does nothing");
    server.join().expect("server thread");
}

#[test]
fn fusermount_unmount_after_external_unmount() {
    require_fusermount3();
    let dir = TestDir::new();
    let mut mount =
        Mount::new_with_method(&dir.mnt, &MountOptions::default(), MountMethod::Fusermount)
            .expect("mount with fusermount3");
    unmount_path(&dir.mnt, true).expect("unmount_path");
    assert!(mountinfo_for(&dir.mnt).is_empty());
    mount
        .unmount()
        .expect("unmount of an already unmounted fusermount3 mount");
}

#[test]
fn fusermount_auto_unmount() {
    require_fusermount3();
    let dir = TestDir::new();
    let options = MountOptions::default().extra(["auto_unmount"]);
    let mount = Mount::new_with_method(&dir.mnt, &options, MountMethod::Fusermount)
        .expect("mount with auto_unmount");
    assert_eq!(mount.method(), MountMethod::Fusermount);
    only_mount(&dir.mnt);
    drop(mount);
    assert!(mountinfo_for(&dir.mnt).is_empty(), "still mounted");
}

/// As root, `auto_unmount` is a mount(2) mount with a watcher process (its
/// unmounting after a SIGKILL is tested with the daemon in
/// crates/passthroughfs/tests/running.rs); a clean unmount ends the
/// watcher, which is reaped, and leaves nothing mounted.
#[test]
fn syscall_auto_unmount_has_a_watcher_that_a_clean_unmount_ends_needs_root() {
    require_root();
    let dir = TestDir::new();
    let options = MountOptions::default().extra(["auto_unmount"]);
    let children = || {
        std::fs::read_to_string(format!(
            "/proc/self/task/{}/children",
            // SAFETY: gettid has no preconditions.
            unsafe { libc::gettid() }
        ))
        .unwrap_or_default()
        .split_whitespace()
        .count()
    };
    let before = children();
    let mut mount = Mount::new(&dir.mnt, &options).expect("mount with auto_unmount");
    assert_eq!(mount.method(), MountMethod::Syscall);
    assert_eq!(children(), before + 1, "the watcher runs");
    only_mount(&dir.mnt);
    mount.unmount().expect("unmount");
    assert!(mountinfo_for(&dir.mnt).is_empty(), "still mounted");
    assert_eq!(children(), before, "the watcher is gone and reaped");
}

#[test]
fn fusermount_errors_are_reported() {
    require_fusermount3();
    let dir = TestDir::new();
    // fusermount3 rejects an unknown option; the kernel would too.
    let options = MountOptions::default().extra(["no_such_option"]);
    let err = Mount::new_with_method(&dir.mnt, &options, MountMethod::Fusermount).unwrap_err();
    match &err {
        MountError::FusermountFailed { stderr, .. } => {
            assert!(!stderr.is_empty(), "{err}")
        }
        other => panic!("expected FusermountFailed, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&*dir.mnt.to_string_lossy()),
        "{err}"
    );
    assert!(mountinfo_for(&dir.mnt).is_empty());
}

const NOBODY: u32 = 65534;

/// Runs `unprivileged_child` as user nobody: `Mount::new` must find mount(2)
/// refused and fall back to fusermount3, which hands over the descriptor.
///
/// fusermount3 opens /dev/fuse with the caller's identity, and on these
/// machines /dev/fuse is mode 0600, so the child runs in a private mount
/// namespace where a mode-0666 node of the same device (10:229) is bound over
/// /dev/fuse, as on a stock system. Its mounts vanish with that namespace.
#[test]
fn unprivileged_mount_falls_back_to_fusermount_needs_root() {
    run_child_as_nobody("unprivileged_child", 0o666);
}

/// Runs the ignored test `child` of this binary as user nobody, in a
/// private mount namespace where a node of the FUSE device (10:229) with
/// `dev_fuse_mode` is bound over /dev/fuse (the real one is never touched;
/// the child's mounts vanish with its namespace), and checks that it ran
/// and passed and left no mount. Fails with the reason where that can't be
/// set up (it needs real root in the initial user namespace, and
/// fusermount3).
fn run_child_as_nobody(child: &str, dev_fuse_mode: libc::mode_t) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    require_root();
    require_fusermount3();
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").expect("read uid_map");
    assert_eq!(
        uid_map.split_whitespace().collect::<Vec<_>>(),
        ["0", "0", "4294967295"],
        "this test switches to user nobody and creates a device node, which needs real \
         root in the initial user namespace; this process runs with uid_map {uid_map:?}"
    );
    let dir = TestDir::new();
    let chown = |p: &Path| std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
    chown(dir.root());
    chown(&dir.mnt);
    let devdir = dir.root().join("dev");
    std::fs::create_dir(&devdir).unwrap();
    let cstring = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let devdir_c = cstring(&devdir);
    let node_c = cstring(&devdir.join("fuse"));

    let mut command = test_support::command(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MOUNT_ONLY_CHILD_MNT", &dir.mnt);
    // SAFETY: the closure only makes raw syscalls (async-signal-safe) on
    // strings prepared before the fork.
    unsafe {
        command.pre_exec(move || enter_unprivileged_namespace(&devdir_c, &node_c, dev_fuse_mode));
    }
    let output = command.output().unwrap_or_else(|err| {
        panic!(
            "cannot run the test binary as user nobody in a private mount namespace \
             (needs real root with uid 65534 mapped and mknod allowed): {err}"
        )
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "child {child} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child {child} did not run:\n{text}"
    );
    assert!(
        mountinfo_for(&dir.mnt).is_empty(),
        "child {child} left a mount"
    );
}

/// Mounts at `dir` with `options` by `method`, and checks that the mount
/// says so.
fn mount_by(dir: &TestDir, options: &MountOptions, method: MountMethod) -> Mount {
    let mount = Mount::new_with_method(&dir.mnt, options, method)
        .unwrap_or_else(|e| panic!("mount with {method:?}: {e}"));
    assert_eq!(mount.method(), method);
    assert_eq!(mount.mountpoint(), dir.mnt);
    mount
}

/// In a child run by [`run_child_as_nobody`]: the mountpoint it was given,
/// once it is sure it runs unprivileged.
fn child_mountpoint() -> PathBuf {
    let mnt = PathBuf::from(
        std::env::var_os("MOUNT_ONLY_CHILD_MNT").expect("MOUNT_ONLY_CHILD_MNT not set"),
    );
    assert_ne!(euid(), 0, "must run unprivileged");
    mnt
}

/// In a forked child: private mount namespace, a /dev/fuse of `mode`, user
/// nobody.
fn enter_unprivileged_namespace(
    devdir: &std::ffi::CStr,
    node: &std::ffi::CStr,
    mode: libc::mode_t,
) -> std::io::Result<()> {
    fn ok(ret: libc::c_int) -> std::io::Result<()> {
        if ret < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
    let null = std::ptr::null();
    // SAFETY: plain syscalls on valid NUL-terminated strings (or null where
    // the kernel allows it); the child is single-threaded.
    unsafe {
        ok(libc::unshare(libc::CLONE_NEWNS))?;
        ok(libc::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            null.cast(),
        ))?;
        ok(libc::mount(
            c"tmpfs".as_ptr(),
            devdir.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            null.cast(),
        ))?;
        ok(libc::mknod(
            node.as_ptr(),
            libc::S_IFCHR | mode,
            libc::makedev(10, 229),
        ))?;
        ok(libc::chmod(node.as_ptr(), mode))?;
        ok(libc::mount(
            node.as_ptr(),
            c"/dev/fuse".as_ptr(),
            null,
            libc::MS_BIND,
            null.cast(),
        ))?;
        ok(libc::setgroups(0, std::ptr::null()))?;
        ok(libc::setgid(NOBODY))?;
        ok(libc::setuid(NOBODY))?;
    }
    Ok(())
}

#[test]
#[ignore = "helper: run as another user by unprivileged_mount_falls_back_to_fusermount_needs_root"]
fn unprivileged_child() {
    let mnt = child_mountpoint();
    let mut mount = Mount::new(&mnt, &MountOptions::default()).expect("unprivileged mount");
    assert_eq!(mount.method(), MountMethod::Fusermount);
    let info = only_mount(&mnt);
    assert!(
        has(&info.super_options, &format!("user_id={}", euid())),
        "{info:?}"
    );
    mount.unmount().expect("unprivileged unmount");
    assert!(mountinfo_for(&mnt).is_empty());
    // Without privileges the syscall path alone fails with EPERM or EACCES.
    let err =
        Mount::new_with_method(&mnt, &MountOptions::default(), MountMethod::Syscall).unwrap_err();
    assert!(
        matches!(
            err,
            MountError::OpenDevice { .. } | MountError::Mount { .. }
        ),
        "{err:?}"
    );
}

/// A user that isn't root, with `/dev/fuse` of mode 0600 as some systems
/// leave it (no udev rule of the fuse3 package): the mount fails with
/// [`MountError::DevicePermission`], which says that the mode is why and
/// what to change.
#[test]
fn dev_fuse_0600_refuses_other_users_and_says_why_needs_root() {
    run_child_as_nobody("dev_fuse_0600_child", 0o600);
}

#[test]
#[ignore = "helper: run as another user by dev_fuse_0600_refuses_other_users_and_says_why_needs_root"]
fn dev_fuse_0600_child() {
    let mnt = child_mountpoint();
    let err =
        Mount::new(&mnt, &MountOptions::default()).expect_err("mounted with a 0600 /dev/fuse");
    println!("the error: {err}");
    match &err {
        MountError::DevicePermission {
            path,
            mode,
            owner,
            fusermount,
            ..
        } => {
            assert_eq!(path, &mnt);
            assert_eq!((*mode, *owner), (0o600, 0));
            assert!(fusermount.contains("/dev/fuse"), "{fusermount}");
        }
        other => panic!("expected DevicePermission, got {other:?}"),
    }
    let text = err.to_string();
    for part in [
        "/dev/fuse is mode 0600",
        "users other than root cannot open it",
        "chmod 0666 /dev/fuse",
        "udev rule",
        "or mount as root",
    ] {
        assert!(text.contains(part), "{part:?} missing: {text}");
    }
    // fusermount3 alone fails the same way and is explained the same way.
    let err = Mount::new_with_method(&mnt, &MountOptions::default(), MountMethod::Fusermount)
        .expect_err("mounted with a 0600 /dev/fuse");
    assert!(
        matches!(err, MountError::DevicePermission { .. }),
        "{err:?}"
    );
    assert!(mountinfo_for(&mnt).is_empty());
}
