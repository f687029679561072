//! The scratch directory a fuzzed [`fuse_backend_passthrough::PassthroughFs`]
//! serves, and the fence around it.
//!
//! As root (the fuzzers run as root to reach the caller-credential paths):
//!
//! - the harness thread gets a mount namespace of its own (private
//!   propagation) with a size-limited `tmpfs` (`nodev`, `nosuid`,
//!   `strictatime`) at [`SCRATCH_DIR`]: whatever a request does, it can't
//!   fill the real disk or use a device node;
//! - the tmpfs holds `src/` (the served tree), `outside/secret` (a canary
//!   with random content the served tree links to) and `proc/` (a
//!   read-only `procfs` with only the process directories, for
//!   `/proc/self/fd`);
//! - while an input runs, the thread is `chroot`ed into the tmpfs, so even
//!   a passthrough bug that escaped `src/` could reach nothing but the
//!   canary; after each input [`Scratch::check_outside`] checks that the
//!   canary and the tmpfs root were neither changed nor read (`strictatime`
//!   updates the access time on every read) and the harness checks that no
//!   reply names the canary's inodes or carries its content.
//!
//! Without root the scratch directory is a plain temporary directory (no
//! namespace, no chroot) and a warning says so.
//!
//! The namespace and the chroot belong to the thread that first calls
//! [`Scratch::get`]; every later call must come from the same thread.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Where the scratch tmpfs is mounted (in the harness's own mount namespace).
pub const SCRATCH_DIR: &str = "/tmp/fuse-fuzz-scratch";

/// The size of the scratch tmpfs.
const TMPFS_OPTIONS: &str = "size=64m,nr_inodes=16384,mode=0755";

/// Largest file a request can make (`RLIMIT_FSIZE`).
const MAX_FILE_SIZE: u64 = 16 << 20;

/// The fenced scratch directory.
pub struct Scratch {
    /// The tmpfs root (or the temporary directory without root).
    base: PathBuf,
    base_fd: OwnedFd,
    /// The namespace's own root and the working directory, to leave the
    /// chroot after each input (`None` without root: no chroot).
    restore: Option<(OwnedFd, OwnedFd)>,
    /// The working directory, as seen inside the fence.
    cwd_inside: CString,
    thread: std::thread::ThreadId,
    baseline: Vec<Snapshot>,
    /// Times of everything in the served tree as populated: a request
    /// that changed anything in it changed one of them.
    src_baseline: Vec<TreeTimes>,
    /// Inode numbers of what lies outside the served tree.
    forbidden_inos: Vec<u64>,
    secret: Vec<u8>,
    _tempdir_guard: Option<PathBuf>,
}

/// A path of the served tree with its modification and change times.
type TreeTimes = (PathBuf, (i64, i64), (i64, i64));

/// What is compared to tell that a file was neither changed nor read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    path: PathBuf,
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    size: u64,
    atime: (i64, i64),
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn snapshot(path: &Path) -> io::Result<Snapshot> {
    let m = std::fs::symlink_metadata(path)?;
    Ok(Snapshot {
        path: path.to_path_buf(),
        ino: m.ino(),
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink(),
        size: m.size(),
        atime: (m.atime(), m.atime_nsec()),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

fn check(r: libc::c_int, what: &str) -> io::Result<()> {
    if r < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(())
    }
}

fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    let c = cstr(p);
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    check(fd, "open")?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn mount(
    src: &str,
    target: &Path,
    fstype: &str,
    flags: libc::c_ulong,
    data: &str,
) -> io::Result<()> {
    let (src, fstype, data, target) = (
        CString::new(src).unwrap(),
        CString::new(fstype).unwrap(),
        CString::new(data).unwrap(),
        cstr(target),
    );
    // SAFETY: NUL-terminated strings.
    check(
        unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                flags,
                data.as_ptr().cast(),
            )
        },
        "mount",
    )
}

fn bind(from: &Path, to: &Path) -> io::Result<()> {
    let (from, to) = (cstr(from), cstr(to));
    // SAFETY: NUL-terminated paths; a bind mount takes no data.
    check(
        unsafe {
            libc::mount(
                from.as_ptr(),
                to.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        },
        "bind mount",
    )
}

/// Random bytes from the kernel, as hex.
fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    // SAFETY: `buf` is valid for writes of its length.
    let got = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), n, 0) };
    assert_eq!(got, n as isize, "getrandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fills `src` with the tree every fuzz input (and the capture tool's
/// mount) starts from: files, a hard link, directories, a FIFO, an xattr,
/// and symlinks that lead out of the tree (relative, absolute, `..`),
/// which the passthrough must never follow.
pub fn populate(src: &Path) -> io::Result<()> {
    std::fs::create_dir_all(src)?;
    std::fs::write(src.join("file"), b"hello, world\n")?;
    let big: Vec<u8> = (0..16384u32).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(src.join("big"), big)?;
    std::fs::create_dir(src.join("dir"))?;
    std::fs::write(src.join("dir/inner"), b"inner\n")?;
    std::fs::create_dir(src.join("dir/sub"))?;
    std::fs::create_dir(src.join("empty"))?;
    std::fs::hard_link(src.join("file"), src.join("hard"))?;
    symlink("file", src.join("link"))?;
    symlink("../outside/secret", src.join("uplink"))?;
    symlink("/outside/secret", src.join("abslink"))?;
    symlink("..", src.join("dotdot"))?;
    symlink("../outside", src.join("dir/outlink"))?;
    let fifo = cstr(&src.join("fifo"));
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, "mkfifo")?;
    let file = cstr(&src.join("file"));
    // SAFETY: NUL-terminated strings and a valid value buffer.
    let _ = unsafe {
        libc::setxattr(
            file.as_ptr(),
            c"user.fuzz".as_ptr(),
            b"value".as_ptr().cast(),
            5,
            0,
        )
    };
    Ok(())
}

/// Sets up the fence (see the module docs): a mount namespace of this
/// thread's own with the scratch tmpfs, its procfs and the mirrored
/// directories; returns the tmpfs root and the descriptors to leave the
/// chroot by.
fn fence() -> io::Result<(PathBuf, (OwnedFd, OwnedFd))> {
    check(
        // SAFETY: unshare takes no pointers; CLONE_NEWNS implies CLONE_FS,
        // so the new namespace is this (harness) thread's alone and no
        // other thread's view of the filesystem changes under it.
        unsafe { libc::unshare(libc::CLONE_NEWNS) },
        "unshare(CLONE_NEWNS)",
    )?;
    mount(
        "none",
        Path::new("/"),
        "",
        libc::MS_REC | libc::MS_PRIVATE,
        "",
    )?;
    let base = PathBuf::from(SCRATCH_DIR);
    std::fs::create_dir_all(&base)?;
    mount(
        "fuse-fuzz",
        &base,
        "tmpfs",
        libc::MS_NODEV | libc::MS_NOSUID | libc::MS_STRICTATIME,
        TMPFS_OPTIONS,
    )?;
    std::fs::create_dir(base.join("proc"))?;
    mount(
        "proc",
        &base.join("proc"),
        "proc",
        libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_RDONLY,
        "subset=pid",
    )?;
    // Crash reports are written from inside the fence: mirror the
    // working directory and the artifact directory there, at the
    // same absolute paths (bind mounts), so they reach the disk.
    let cwd = std::env::current_dir()?;
    let mut mirrors = vec![cwd];
    for arg in std::env::args() {
        if let Some(prefix) = arg.strip_prefix("-artifact_prefix=") {
            let p = Path::new(prefix);
            let dir = if prefix.ends_with('/') {
                p
            } else {
                p.parent().unwrap_or(p)
            };
            if dir.is_absolute() && dir.is_dir() {
                mirrors.push(dir.to_path_buf());
            }
        }
    }
    for dir in mirrors.iter().skip(1) {
        // An ASan report is written with whatever file system ids
        // the crashing request had switched the thread to.
        let _ = std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777));
    }
    for dir in &mirrors {
        let inside = base.join(dir.strip_prefix("/").unwrap_or(dir));
        std::fs::create_dir_all(&inside)?;
        bind(dir, &inside)?;
    }
    let restore = (open_dir(Path::new("/"))?, open_dir(Path::new("."))?);
    Ok((base, restore))
}

static SCRATCH: OnceLock<Mutex<Scratch>> = OnceLock::new();

/// The thread is inside the fence (chrooted).
static IN_FENCE: AtomicBool = AtomicBool::new(false);
/// The namespace's root and the working directory, to leave the fence
/// (also from the panic hook, which can't take the scratch lock).
static ROOT_FD: AtomicI32 = AtomicI32::new(-1);
static CWD_FD: AtomicI32 = AtomicI32::new(-1);

/// The thread the fence belongs to.
static FENCE_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();

fn leave_fence() {
    // Only the fenced thread is chrooted (it has a file system context of
    // its own); a panic elsewhere must not touch it.
    if FENCE_THREAD.get() != Some(&std::thread::current().id()) {
        return;
    }
    if !IN_FENCE.swap(false, Ordering::AcqRel) {
        return;
    }
    // SAFETY: descriptor calls on descriptors the scratch keeps open; the
    // file system ids go back to root's (a request may have switched
    // them to its caller's) so that a crash report can be written.
    unsafe {
        libc::syscall(libc::SYS_setfsuid, 0);
        libc::syscall(libc::SYS_setfsgid, 0);
        assert_eq!(libc::fchdir(ROOT_FD.load(Ordering::Acquire)), 0, "fchdir");
        assert_eq!(libc::chroot(c".".as_ptr()), 0, "chroot");
        assert_eq!(libc::fchdir(CWD_FD.load(Ordering::Acquire)), 0, "fchdir");
    }
}

impl Scratch {
    /// The scratch directory, set up on first use (by this thread).
    pub fn get() -> MutexGuard<'static, Scratch> {
        let s = SCRATCH
            .get_or_init(|| {
                Mutex::new(Scratch::setup().expect("setting up the fuzz scratch directory"))
            })
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        assert_eq!(
            s.thread,
            std::thread::current().id(),
            "the scratch directory belongs to the thread that set it up"
        );
        s
    }

    fn setup() -> io::Result<Self> {
        // SAFETY: plain calls without memory arguments.
        let root = unsafe { libc::geteuid() } == 0;
        // Requests can't make large files, and a too large write fails
        // with EFBIG instead of killing the process.
        let rl = libc::rlimit {
            rlim_cur: MAX_FILE_SIZE,
            rlim_max: MAX_FILE_SIZE,
        };
        // SAFETY: valid arguments.
        unsafe {
            libc::setrlimit(libc::RLIMIT_FSIZE, &rl);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        }
        let secret = format!("fuzz-canary-{}\n", random_hex(16)).into_bytes();
        let fenced = if root {
            fence()
                .map_err(|e| {
                    eprintln!(
                        "fuse-fuzz: WARNING: cannot set up the fence ({e}; a user namespace?): \
                     the scratch directory is a plain temporary directory (no private tmpfs, \
                     no chroot)"
                    )
                })
                .ok()
        } else {
            eprintln!(
                "fuse-fuzz: WARNING: not root: the scratch directory is a plain temporary \
                 directory (no private tmpfs, no chroot); run as root for the full fence"
            );
            None
        };
        let (base, restore, guard) = if let Some((base, restore)) = fenced {
            (base, Some(restore), None)
        } else {
            let base = std::env::temp_dir().join(format!("fuse-fuzz-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(&base)?;
            (base.clone(), None, Some(base))
        };
        std::fs::create_dir(base.join("outside"))?;
        std::fs::write(base.join("outside/secret"), &secret)?;
        populate(&base.join("src"))?;
        let base_fd = open_dir(&base)?;
        if let Some((root, cwd)) = &restore {
            let _ = FENCE_THREAD.set(std::thread::current().id());
            ROOT_FD.store(root.as_raw_fd(), Ordering::Release);
            CWD_FD.store(cwd.as_raw_fd(), Ordering::Release);
            // A crash report must be written outside the fence.
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                leave_fence();
                prev(info)
            }));
        }
        let cwd_inside = cstr(&std::env::current_dir()?);
        let mut s = Self {
            base,
            base_fd,
            restore,
            cwd_inside,
            thread: std::thread::current().id(),
            baseline: Vec::new(),
            src_baseline: Vec::new(),
            forbidden_inos: Vec::new(),
            secret,
            _tempdir_guard: guard,
        };
        s.baseline = s.outside_state()?;
        s.src_baseline = s.src_state();
        s.forbidden_inos = s.baseline[1..].iter().map(|x| x.ino).collect();
        Ok(s)
    }

    fn outside_state(&self) -> io::Result<Vec<Snapshot>> {
        ["", "outside", "outside/secret"]
            .iter()
            .map(|p| snapshot(&self.base.join(p)))
            .collect()
    }

    /// The served directory as seen inside the fence (after [`Scratch::enter`]).
    pub fn src_path(&self) -> PathBuf {
        if self.restore.is_some() {
            PathBuf::from("/src")
        } else {
            self.base.join("src")
        }
    }

    /// The served directory as seen from outside the fence.
    pub fn src_outside_path(&self) -> PathBuf {
        self.base.join("src")
    }

    /// Enters the fence (chroot into the scratch tmpfs) for one input.
    pub fn enter(&self) {
        if self.restore.is_some() {
            // SAFETY: descriptor calls on our own descriptors.
            unsafe {
                assert_eq!(libc::fchdir(self.base_fd.as_raw_fd()), 0, "fchdir");
                assert_eq!(libc::chroot(c".".as_ptr()), 0, "chroot");
                // The mirrored working directory (see `setup`).
                libc::chdir(self.cwd_inside.as_ptr());
            }
            IN_FENCE.store(true, Ordering::Release);
        }
    }

    /// Leaves the fence.
    pub fn leave(&self) {
        if self.restore.is_some() {
            leave_fence();
        }
    }

    /// Panics if anything outside the served tree was changed or read.
    pub fn check_outside(&self) {
        let now = self.outside_state().expect("stat of the fence");
        for (before, after) in self.baseline.iter().zip(&now) {
            assert_eq!(
                before,
                after,
                "ESCAPE: {} outside the served tree was changed or read",
                before.path.display()
            );
        }
    }

    /// Whether `ino` is an inode outside the served tree. A directory
    /// listing's `..` entry of the root legitimately names the root's
    /// parent (`dirent`: true), nothing else may.
    pub fn is_forbidden_ino(&self, ino: u64, dirent: bool) -> bool {
        self.forbidden_inos.contains(&ino) || (!dirent && ino == self.baseline[0].ino)
    }

    /// Panics if `body` carries the canary's content (unless the served
    /// tree holds a copy made through requests, which is legitimate).
    pub fn check_body(&self, body: &[u8]) {
        let secret = &self.secret[..self.secret.len() - 1];
        if body.len() >= secret.len() && body.windows(secret.len()).any(|w| w == secret) {
            assert!(
                self.src_holds(secret),
                "ESCAPE: a reply carries the content of outside/secret"
            );
        }
    }

    fn src_holds(&self, needle: &[u8]) -> bool {
        fn walk(dir: &Path, needle: &[u8]) -> bool {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return false;
            };
            rd.filter_map(Result::ok).any(|e| {
                let p = e.path();
                let name = e.file_name();
                if name
                    .as_bytes()
                    .windows(needle.len().min(name.len().max(1)))
                    .any(|w| w == needle)
                {
                    return true;
                }
                match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&p, needle),
                    Ok(t) if t.is_file() => std::fs::read(&p)
                        .map(|d| d.windows(needle.len()).any(|w| w == needle))
                        .unwrap_or(false),
                    _ => false,
                }
            })
        }
        walk(&self.src_outside_path(), needle)
    }

    fn src_state(&self) -> Vec<TreeTimes> {
        fn walk(dir: &Path, out: &mut Vec<TreeTimes>) {
            if let Ok(m) = std::fs::symlink_metadata(dir) {
                out.push((
                    dir.to_path_buf(),
                    (m.mtime(), m.mtime_nsec()),
                    (m.ctime(), m.ctime_nsec()),
                ));
                if m.is_dir() {
                    let mut entries: Vec<_> = std::fs::read_dir(dir)
                        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
                        .unwrap_or_default();
                    entries.sort();
                    for e in entries {
                        walk(&e, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.src_outside_path(), &mut out);
        out
    }

    /// Whether the served tree was changed since it was populated.
    pub fn src_changed(&self) -> bool {
        self.src_baseline.iter().any(|(p, mtime, ctime)| {
            std::fs::symlink_metadata(p).map_or(true, |m| {
                (m.mtime(), m.mtime_nsec()) != *mtime || (m.ctime(), m.ctime_nsec()) != *ctime
            })
        })
    }

    /// Puts the served tree back as [`populate`] made it (which changes
    /// the tmpfs root's times: the baseline is taken again).
    pub fn reset_src(&mut self) {
        let src = self.src_outside_path();
        // remove_dir_all never follows symlinks.
        let _ = std::fs::remove_dir_all(&src);
        if src.exists() {
            // Something made the tree unremovable (immutable flags...):
            // move it aside.
            let aside = self.base.join(format!("old-{}", random_hex(4)));
            std::fs::rename(&src, aside).expect("moving a stuck tree aside");
        }
        populate(&src).expect("re-populating the scratch tree");
        self.baseline = self.outside_state().expect("stat of the fence");
        self.src_baseline = self.src_state();
    }
}
