//! Shared harness of the mount tests: a passthrough mounted for real over a
//! fresh backing directory, unmounted (lazily as a last resort) on drop or
//! panic, and helpers to compare the mount with the backing directory.
#![allow(dead_code)]

use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;
// Each test binary uses a part of what the shared module offers.
#[allow(unused_imports)]
pub use test_support::{
    chmod, create_rw, errno_of, in_initial_user_namespace, is_mounted, mmap_writes_through,
    mounts_with_exact_source, mounts_with_source, open_direct, pattern, process_mark,
    process_start_time, require_root, wait_until, Aligned, SharedMap,
};

/// Small files written through the mount read the same below, and the
/// other way round (`a` through the mount, `b` below).
pub fn small_files_both_ways(t: &impl Sides) {
    fs::write(t.m("a"), b"hello").unwrap();
    assert_eq!(fs::read(t.s("a")).unwrap(), b"hello");
    fs::write(t.s("b"), b"from below").unwrap();
    assert_eq!(fs::read(t.m("b")).unwrap(), b"from below");
}

/// A large file, `big`, written through the mount with positioned writes
/// (across request sizes); checked below, and returned.
pub fn big_file_written(t: &impl Sides) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let data = pattern(3 * 1024 * 1024 + 123, 1);
    let f = fs::File::create(t.m("big")).unwrap();
    f.write_all_at(&data[..1000], 0).unwrap();
    f.write_all_at(&data[1000..], 1000).unwrap();
    drop(f);
    assert_eq!(fs::read(t.s("big")).unwrap(), data);
    data
}

/// `big` read through the mount: a positioned read, a read across the end
/// (what is there, then 0), and the whole file.
pub fn big_file_read(t: &impl Sides, data: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = fs::File::open(t.m("big")).unwrap();
    let mut buf = vec![0u8; 200_000];
    f.read_exact_at(&mut buf, 2_000_000).unwrap();
    assert_eq!(buf, data[2_000_000..2_200_000]);
    let mut tail = vec![0u8; 4096];
    let n = f.read_at(&mut tail, data.len() as u64 - 100).unwrap();
    assert_eq!(n, 100);
    assert_eq!(f.read_at(&mut tail, data.len() as u64).unwrap(), 0);
    assert_eq!(fs::read(t.m("big")).unwrap(), data);
}

/// O_APPEND appends (to the `a` of [`small_files_both_ways`]).
pub fn append_to_a(t: &impl Sides) {
    use std::io::Write;
    let mut f = fs::OpenOptions::new().append(true).open(t.m("a")).unwrap();
    f.write_all(b" world").unwrap();
    drop(f);
    assert_eq!(fs::read(t.s("a")).unwrap(), b"hello world");
}

/// O_TRUNC truncates (`a`).
pub fn truncate_a(t: &impl Sides) {
    use std::io::Write;
    let mut f = open_truncated(&t.m("a"));
    f.write_all(b"x").unwrap();
    drop(f);
    assert_eq!(fs::read(t.s("a")).unwrap(), b"x");
}

/// Seek and read `big` through a plain file position.
pub fn seek_and_read_big(t: &impl Sides, data: &[u8]) {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = fs::File::open(t.m("big")).unwrap();
    f.seek(SeekFrom::Start(10)).unwrap();
    let mut b = [0u8; 10];
    f.read_exact(&mut b).unwrap();
    assert_eq!(b, data[10..20]);
}

/// `d` opened through the mount with `O_DIRECT` and written from aligned
/// buffers: a MiB of [`pattern`] at 0 and its first 64 KiB at 1 MiB; the
/// first MiB read back. The open file and that MiB.
pub fn direct_file_written(t: &impl Sides) -> (fs::File, Vec<u8>) {
    use std::os::unix::fs::FileExt;
    let f = open_direct(&t.m("d"));
    let mut buf = Aligned::new(1 << 20);
    let data = pattern(1 << 20, 7);
    buf.as_mut().copy_from_slice(&data);
    f.write_all_at(buf.as_mut(), 0).unwrap();
    f.write_all_at(&buf.as_mut()[..64 << 10], 1 << 20).unwrap();
    let mut back = Aligned::new(1 << 20);
    f.read_exact_at(back.as_mut(), 0).unwrap();
    assert_eq!(back.as_mut(), &data[..]);
    (f, data)
}

/// What [`direct_file_written`] wrote, as the backing file holds it.
pub fn direct_file_below(t: &impl Sides, data: &[u8]) {
    let below = fs::read(t.s("d")).unwrap();
    assert_eq!(below.len(), (1 << 20) + (64 << 10));
    assert_eq!(&below[..1 << 20], data);
}

/// `renameat2(from, to, flags)`: 0, or the errno it failed with.
pub fn renameat2(from: &Path, to: &Path, flags: u32) -> i32 {
    match test_support::file::renameat2(from, to, flags) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// `path`, which exists, opened for writing and truncated.
pub fn open_truncated(path: &Path) -> fs::File {
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| panic!("truncating {}: {e}", path.display()))
}

/// A request context of this process's own user and group, as the
/// kernel would send for a call made here.
pub fn own_context() -> fuse_server::Context {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    fuse_server::Context {
        uid,
        gid,
        ..fuse_server::Context::default()
    }
}

/// The fsname every test mount carries, to find leftovers.
pub const FSNAME_PREFIX: &str = "pt-test";

/// A passthrough mounted in-process over a fresh backing directory.
pub struct TestMount {
    /// The file system (for lookup counts).
    pub fs: Arc<PassthroughFs>,
    session: Option<DevSession>,
    /// The backing directory.
    pub src: PathBuf,
    /// The mountpoint.
    pub mnt: PathBuf,
    /// Holds `src` and `mnt`; removed last.
    dir: Option<tempfile::TempDir>,
}

/// Mount options of the tests: like pjdfstest's (`allow_other`,
/// `default_permissions`), with an fsname naming the process that mounted.
pub fn test_options() -> MountOptions {
    MountOptions::default()
        .fsname(format!("{FSNAME_PREFIX}-{}", process_mark()))
        .subtype("passthroughfs")
        .allow_other(true)
        .default_permissions(true)
        .nodev(false)
}

/// The config of most tests: attributes and names not cached, so every
/// stat through the mount reaches the backing file.
pub fn uncached() -> PassthroughConfig {
    PassthroughConfig::default()
        .attr_timeout(Duration::ZERO)
        .entry_timeout(Duration::ZERO)
}

/// The two sides of a test mount: a path in the backing directory and the
/// same path through the mount.
pub trait Sides {
    /// The backing directory and the mountpoint.
    fn sides(&self) -> (&Path, &Path);

    /// A path in the backing directory.
    fn s(&self, name: &str) -> PathBuf {
        self.sides().0.join(name)
    }

    /// A path through the mount.
    fn m(&self, name: &str) -> PathBuf {
        self.sides().1.join(name)
    }
}

impl Sides for TestMount {
    fn sides(&self) -> (&Path, &Path) {
        (&self.src, &self.mnt)
    }
}

impl TestMount {
    /// A mount with [`uncached`] options.
    pub fn new() -> Self {
        Self::with(uncached(), test_options())
    }

    /// A mount with `config` and `options`.
    pub fn with(config: PassthroughConfig, options: MountOptions) -> Self {
        require_root();
        // Other users must reach the test files.
        let s = test_support::shared_scratch("pt-test-");
        Self::over(s.dir, s.src, s.mnt, config, options)
    }

    /// A second mount of the same backing directory as `other`.
    pub fn same_source(other: &TestMount, config: PassthroughConfig) -> Self {
        let (dir, mnt) = mountpoint_only();
        Self::over(dir, other.src.clone(), mnt, config, test_options())
    }

    /// A mount of the existing directory `src`, which outlives the mount
    /// (the caller removes it).
    pub fn of_source(src: &Path, config: PassthroughConfig, options: MountOptions) -> Self {
        require_root();
        let (dir, mnt) = mountpoint_only();
        Self::over(dir, src.to_path_buf(), mnt, config, options)
    }

    fn over(
        dir: tempfile::TempDir,
        src: PathBuf,
        mnt: PathBuf,
        config: PassthroughConfig,
        options: MountOptions,
    ) -> Self {
        let fs = Arc::new(PassthroughFs::new(&src, config).expect("PassthroughFs::new"));
        let server = Server::new(fs.clone());
        let session =
            DevSession::mount(server, &mnt, &options, SessionConfig::default().threads(2))
                .expect("mounting the passthrough");
        fs.set_notifier(session.notifier().ok());
        let mnt = session.mountpoint().to_path_buf();
        Self {
            fs,
            session: Some(session),
            src,
            mnt,
            dir: Some(dir),
        }
    }

    /// The session (counters, notifier).
    pub fn session(&self) -> &DevSession {
        self.session.as_ref().expect("mounted")
    }

    /// Requests seen with `op`.
    pub fn count(&self, op: fuse_abi::Opcode) -> u64 {
        self.session().server().counters().get(op)
    }

    /// Unmounts and waits for the workers (the file system's `destroy` runs).
    pub fn unmount(&mut self) {
        if let Some(session) = self.session.take() {
            session.stop();
            session.wait().expect("session ended with an error");
            drop(session);
        }
        self.fs.set_notifier(None);
        assert!(
            !is_mounted(&self.mnt),
            "{} still mounted after unmount",
            self.mnt.display()
        );
    }
}

/// Scratch directories of a mount whose source is elsewhere: the holder
/// (other users can reach it) and the mountpoint in it.
fn mountpoint_only() -> (tempfile::TempDir, PathBuf) {
    let s = test_support::shared_scratch("pt-test-");
    std::fs::remove_dir(&s.src).expect("removing the unused source directory");
    (s.dir, s.mnt)
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            session.stop();
            let _ = session.wait();
        }
        self.fs.set_notifier(None);
        test_support::detach(&self.mnt);
        // Only remove the directories once nothing is mounted on them.
        if let Some(dir) = self.dir.take() {
            test_support::remove_unless_mounted(dir, &self.mnt);
        }
    }
}

/// A NUL-terminated path.
pub fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of the last failed libc call.
pub fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `lstat` of a path.
pub fn lmeta(p: &Path) -> std::fs::Metadata {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()))
}

/// Asserts that the mount and the backing directory show the same
/// attributes for `name` (what a passthrough must preserve).
pub fn assert_same_meta(t: &TestMount, name: &str) {
    let a = lmeta(&t.m(name));
    let b = lmeta(&t.s(name));
    assert_eq!(a.mode(), b.mode(), "{name}: mode");
    assert_eq!(a.uid(), b.uid(), "{name}: uid");
    assert_eq!(a.gid(), b.gid(), "{name}: gid");
    assert_eq!(a.nlink(), b.nlink(), "{name}: nlink");
    assert_eq!(a.ino(), b.ino(), "{name}: ino");
    assert_eq!(a.rdev(), b.rdev(), "{name}: rdev");
    if !a.is_dir() {
        assert_eq!(a.size(), b.size(), "{name}: size");
        assert_eq!(a.blocks(), b.blocks(), "{name}: blocks");
    }
    assert_eq!(
        (a.mtime(), a.mtime_nsec()),
        (b.mtime(), b.mtime_nsec()),
        "{name}: mtime"
    );
    assert_eq!(
        (a.ctime(), a.ctime_nsec()),
        (b.ctime(), b.ctime_nsec()),
        "{name}: ctime"
    );
}

/// Runs `sh -c script` as `uid`/`gid` with supplementary `groups`
/// (switched in the child between fork and exec).
pub fn run_as(uid: u32, gid: u32, groups: &[u32], dir: &Path, script: &str) -> Output {
    let groups = groups.to_vec();
    let mut cmd = test_support::command("/bin/sh");
    cmd.arg("-c").arg(script).current_dir(dir);
    // SAFETY: the closure only makes async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
            libc::umask(0o022);
            Ok(())
        });
    }
    cmd.output().expect("running sh")
}

/// Like [`run_as`], asserting success.
pub fn run_as_ok(uid: u32, gid: u32, groups: &[u32], dir: &Path, script: &str) {
    let out = run_as(uid, gid, groups, dir, script);
    assert!(
        out.status.success(),
        "as {uid}:{gid} `{script}` failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Until the guard drops, no test (of this binary or another process)
/// drops caches: the kernel keeps what this test looked up (memory
/// pressure aside). Drop it before [`drop_caches`] or
/// [`assert_refs_return_to_zero`], which would wait for it.
pub fn kernel_keeps() -> test_support::KernelKeeps {
    test_support::kernel_keeps()
}

/// Evicts unused dentries and inodes (the kernel then sends FORGETs).
/// Needs real root: tests using it have `needs_root` in their names.
pub fn drop_caches() {
    test_support::drop_kernel_caches()
        .expect("writing /proc/sys/vm/drop_caches (needs real root, not a user namespace)");
}

/// Drops caches until the kernel has forgotten every inode of the mount
/// `fs` serves and `fs` has let them all go but the root. Both are waited
/// for: a FORGET takes a node's count to 0 first and the node out of the
/// table after (another lock), so the count can read 0 while the node is
/// still there for a moment (which a busy machine stretches).
pub fn assert_refs_return_to_zero(fs: &PassthroughFs) {
    let ok = wait_until(Duration::from_secs(20), || {
        drop_caches();
        fs.lookup_refs() == 0 && fs.inode_count() == 1
    });
    assert!(
        ok,
        "lookup references did not return to 0 with only the root left: {} refs, {} inodes",
        fs.lookup_refs(),
        fs.inode_count()
    );
}

/// Fails (never passes silently) where passthrough can't work.
pub fn require_passthrough_host() {
    require_root();
    assert!(
        in_initial_user_namespace(),
        "kernel passthrough needs CAP_SYS_ADMIN in the initial user namespace: this test needs \
         real root (it is skipped by `cargo xtask test-in-userns`)"
    );
}

/// An overlayfs mounted on `at` (a directory inside a passthrough's
/// source): its files are one level stacked, so with `max_stack_depth` 1
/// the kernel refuses them as backing files (ELOOP). Unmounted on drop.
pub struct Overlay {
    at: PathBuf,
    _dirs: tempfile::TempDir,
}

impl Overlay {
    pub fn mount(at: &Path) -> Self {
        let dirs = test_support::tmp_dir("pt-ovl-");
        for d in ["lower", "upper", "work"] {
            fs::create_dir(dirs.path().join(d)).unwrap();
        }
        fs::write(dirs.path().join("lower/low"), b"from the lower layer").unwrap();
        fs::create_dir_all(at).unwrap();
        let opts = format!(
            "lowerdir={0}/lower,upperdir={0}/upper,workdir={0}/work",
            dirs.path().display()
        );
        let status = test_support::command("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(at)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting an overlayfs on {}",
            at.display()
        );
        Self {
            at: at.to_path_buf(),
            _dirs: dirs,
        }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = test_support::command("umount")
            .arg("-l")
            .arg(&self.at)
            .status();
    }
}

/// A tmpfs mounted for the test; unmounted on drop.
pub struct Tmpfs {
    dir: Option<tempfile::TempDir>,
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let c = c(dir.path());
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// A tmpfs mounted on a fresh directory named with `prefix` (needs root,
/// or a user namespace of one's own): the directory, and the mount.
pub fn tmpfs_source(prefix: &str) -> (PathBuf, Tmpfs) {
    let dir = test_support::tmp_dir(prefix);
    let target = c(dir.path());
    // SAFETY: NUL-terminated strings; a plain tmpfs mount.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr().cast(),
        )
    };
    assert_eq!(
        r,
        0,
        "mounting a tmpfs: {}",
        std::io::Error::last_os_error()
    );
    (dir.path().to_path_buf(), Tmpfs { dir: Some(dir) })
}
