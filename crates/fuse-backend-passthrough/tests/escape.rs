//! No escape from the source directory.
//!
//! - `..` of the root is the root; `.` and `..` never name an entry to
//!   make, remove or rename; names with `/`, empty and overlong names are
//!   refused; none of it touches anything outside SOURCE.
//! - The daemon never follows a symlink of the backing tree on a request's
//!   behalf: a symlink (relative, absolute, to a directory) is looked up,
//!   stat'ed, linked, chmod'ed, truncated and xattr'ed as itself, and
//!   nothing can be made, opened or renamed through it.
//! - A symlink created through the mount that points outside stays a
//!   symlink.
//! - A directory swapped for a symlink to the outside, in a loop, racing
//!   reads, creates and renames through the mount, never lets a request
//!   read, create or rename anything outside SOURCE. The racing clients run
//!   in a mount namespace of their own where the outside directory is
//!   hidden under an empty tmpfs: what the *kernel* resolves for them
//!   through a symlink lands in that tmpfs, so the real outside directory
//!   can only be reached by the daemon following a link.
//!
//! The mount tests need root.

mod common;

use common::*;
use fuse_abi::ROOT_ID;
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{Context, CreateArgs, FileSystem, MkdirArgs, MknodArgs, OpenArgs, RenameArgs};
use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"SECRET outside the source";

/// `dir/{src, outside}`: the outside holds `f` and `secret`, and the
/// source symlinks that point there.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    src: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let dir = test_support::tmp_dir("pt-escape-");
    let root = dir.path().to_path_buf();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = root.join("src");
    let outside = root.join("outside");
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f"), SECRET).unwrap();
    std::fs::write(outside.join("secret"), SECRET).unwrap();
    std::os::unix::fs::symlink("../outside/secret", src.join("uplink")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), src.join("abslink")).unwrap();
    std::os::unix::fs::symlink("../outside", src.join("dirlink")).unwrap();
    std::os::unix::fs::symlink("..", src.join("dotdot")).unwrap();
    std::fs::create_dir(src.join("d")).unwrap();
    std::fs::write(src.join("d/f"), b"inside").unwrap();
    std::fs::create_dir(root.join("mnt")).unwrap();
    Tree {
        _dir: dir,
        root,
        src,
        outside,
    }
}

/// An entry's name, inode, mode, links, size, mtime and nanoseconds.
type EntryState = (String, u64, u32, u64, u64, i64, i64);

/// Everything about the outside directory and its files that a change or
/// a new entry would alter.
fn outside_state(t: &Tree) -> Vec<EntryState> {
    // Name, inode, mode, links, size, mtime and the nanoseconds `nsec`.
    let state = |name: String, m: &std::fs::Metadata, nsec: i64| {
        let (ino, mode, nlink, size) = (m.ino(), m.mode(), m.nlink(), m.size());
        (name, ino, mode, nlink, size, m.mtime(), nsec)
    };
    let mut v: Vec<_> = std::fs::read_dir(&t.outside)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            state(name, &m, m.ctime_nsec())
        })
        .collect();
    let m = std::fs::metadata(&t.outside).unwrap();
    v.push(state(".".into(), &m, m.mtime_nsec()));
    let m = std::fs::metadata(&t.root).unwrap();
    v.push(state("..".into(), &m, m.mtime_nsec()));
    v.sort();
    v
}

fn ctx() -> Context {
    Context {
        unique: 1,
        nodeid: ROOT_ID,
        uid: 0,
        gid: 0,
        pid: 0,
    }
}

fn fs_over(t: &Tree) -> PassthroughFs {
    PassthroughFs::new(&t.src, PassthroughConfig::default()).unwrap()
}

#[test]
fn dot_and_dotdot_of_the_root_are_the_root() {
    let t = tree();
    let fs = fs_over(&t);
    let root_ino = std::fs::metadata(&t.src).unwrap().ino();
    for name in [c"..", c"."] {
        let e = fs.lookup(&ctx(), ROOT_ID, name).unwrap();
        assert_eq!(e.nodeid, ROOT_ID, "{name:?} of the root");
        assert_eq!(e.attr.ino, root_ino, "{name:?} of the root");
    }
    // `..` of a directory is its parent, and `..` of that the root again.
    let d = fs.lookup(&ctx(), ROOT_ID, c"d").unwrap();
    let up = fs.lookup(&ctx(), d.nodeid, c"..").unwrap();
    assert_eq!(up.nodeid, ROOT_ID);
    let up2 = fs.lookup(&ctx(), up.nodeid, c"..").unwrap();
    assert_eq!(up2.nodeid, ROOT_ID);
}

#[test]
fn bad_names_are_refused_everywhere() {
    let t = tree();
    let before = outside_state(&t);
    let fs = fs_over(&t);
    let c = ctx();
    let long = CString::new(vec![b'x'; 256]).unwrap();
    let huge = CString::new(vec![b'y'; 5000]).unwrap();
    let file = fs
        .create(
            &c,
            ROOT_ID,
            c"file",
            &CreateArgs {
                flags: libc::O_RDWR as u32,
                mode: 0o644,
                ..CreateArgs::default()
            },
        )
        .unwrap()
        .0;
    for name in [c"", c"/", c"a/b", c"../outside", c"..", c".", &long, &huge] {
        let n: &CStr = name;
        let mk = MkdirArgs {
            mode: 0o755,
            umask: 0,
        };
        let results = [
            ("mkdir", fs.mkdir(&c, ROOT_ID, n, &mk).map(drop)),
            (
                "mknod",
                fs.mknod(
                    &c,
                    ROOT_ID,
                    n,
                    &MknodArgs {
                        mode: libc::S_IFREG | 0o644,
                        rdev: 0,
                        umask: 0,
                    },
                )
                .map(drop),
            ),
            (
                "create",
                fs.create(
                    &c,
                    ROOT_ID,
                    n,
                    &CreateArgs {
                        flags: libc::O_RDWR as u32,
                        mode: 0o644,
                        ..CreateArgs::default()
                    },
                )
                .map(drop),
            ),
            ("symlink", fs.symlink(&c, ROOT_ID, n, c"target").map(drop)),
            ("link", fs.link(&c, file.nodeid, ROOT_ID, n).map(drop)),
            ("unlink", fs.unlink(&c, ROOT_ID, n)),
            ("rmdir", fs.rmdir(&c, ROOT_ID, n)),
            (
                "rename from",
                fs.rename(
                    &c,
                    ROOT_ID,
                    &RenameArgs {
                        name: n,
                        newdir: ROOT_ID,
                        newname: c"x",
                        flags: Default::default(),
                    },
                ),
            ),
            (
                "rename to",
                fs.rename(
                    &c,
                    ROOT_ID,
                    &RenameArgs {
                        name: c"file",
                        newdir: ROOT_ID,
                        newname: n,
                        flags: Default::default(),
                    },
                ),
            ),
        ];
        for (op, r) in results {
            let e = errno_of(r);
            let want = if name.to_bytes().len() > 255 {
                libc::ENAMETOOLONG
            } else {
                libc::EINVAL
            };
            assert_eq!(e, want, "{op} {:?}", String::from_utf8_lossy(n.to_bytes()));
        }
        if n.to_bytes().len() <= 255
            && !n.to_bytes().is_empty()
            && n.to_bytes() != b"."
            && n.to_bytes() != b".."
        {
            // A name with a `/` is refused, not resolved.
            assert_eq!(errno_of(fs.lookup(&c, ROOT_ID, n)), libc::EINVAL);
        }
    }
    assert_eq!(outside_state(&t), before, "nothing outside changed");
    let names: Vec<_> = std::fs::read_dir(&t.src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 6, "only `file` was made: {names:?}");
}

#[test]
fn symlinks_in_the_backing_tree_are_never_followed() {
    let t = tree();
    let before = outside_state(&t);
    let secret_ino = std::fs::metadata(t.outside.join("secret")).unwrap().ino();
    let fs = fs_over(&t);
    let c = ctx();
    for link in [c"uplink", c"abslink", c"dirlink", c"dotdot"] {
        let e = fs.lookup(&c, ROOT_ID, link).unwrap();
        assert_eq!(
            e.attr.mode & libc::S_IFMT,
            libc::S_IFLNK,
            "{link:?} is itself"
        );
        assert_ne!(e.attr.ino, secret_ino);
        let a = fs.getattr(&c, e.nodeid, None).unwrap();
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFLNK);
        // Nothing to open, list, or make through it.
        let read_only = OpenArgs {
            flags: libc::O_RDONLY as u32,
            ..OpenArgs::default()
        };
        let create = |mode| CreateArgs {
            flags: libc::O_RDWR as u32,
            mode,
            ..CreateArgs::default()
        };
        assert!(fs.open(&c, e.nodeid, &read_only).is_err());
        assert!(fs.opendir(&c, e.nodeid, &OpenArgs::default()).is_err());
        assert_eq!(
            errno_of(fs.lookup(&c, e.nodeid, c"secret")),
            libc::ENOTDIR,
            "{link:?}/secret"
        );
        assert_eq!(errno_of(fs.lookup(&c, e.nodeid, c"f")), libc::ENOTDIR);
        assert!(fs.create(&c, e.nodeid, c"new", &create(0o644)).is_err());
        assert!(fs
            .mkdir(
                &c,
                e.nodeid,
                c"newdir",
                &MkdirArgs {
                    mode: 0o755,
                    umask: 0
                }
            )
            .is_err());
        assert!(fs.symlink(&c, e.nodeid, c"s", c"x").is_err());
        assert!(fs.unlink(&c, e.nodeid, c"f").is_err());
        assert!(fs
            .rename(
                &c,
                ROOT_ID,
                &RenameArgs {
                    name: c"d",
                    newdir: e.nodeid,
                    newname: c"d",
                    flags: Default::default()
                }
            )
            .is_err());
        assert!(fs.tmpfile(&c, e.nodeid, &create(0o600)).is_err());
        // Attribute changes apply to the link itself or fail.
        let sa = fuse_server::SetattrArgs {
            size: Some(0),
            ..Default::default()
        };
        let _ = fs.setattr(&c, e.nodeid, &sa);
        let sa = fuse_server::SetattrArgs {
            mode: Some(0o600),
            ..Default::default()
        };
        let _ = fs.setattr(&c, e.nodeid, &sa);
        let _ = fs.setxattr(
            &c,
            e.nodeid,
            &fuse_server::SetxattrArgs {
                name: c"trusted.escape",
                value: b"1",
                flags: 0,
                setxattr_flags: Default::default(),
            },
        );
        // A hard link of the link is a link.
        let hl = CString::new(format!("hl-{}", link.to_str().unwrap())).unwrap();
        let h = fs.link(&c, e.nodeid, ROOT_ID, &hl).unwrap();
        assert_eq!(h.attr.mode & libc::S_IFMT, libc::S_IFLNK);
        assert_eq!(
            fs.readlink(&c, e.nodeid).unwrap(),
            std::fs::read_link(t.src.join(link.to_str().unwrap()))
                .unwrap()
                .as_os_str()
                .as_encoded_bytes()
        );
    }
    assert_eq!(std::fs::read(t.outside.join("secret")).unwrap(), SECRET);
    assert_eq!(outside_state(&t), before, "nothing outside changed");
}

/// Runs `f` on a thread of its own mount namespace where `hide` is covered
/// by an empty tmpfs.
fn in_private_ns<T: Send + 'static>(hide: PathBuf, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let none = CString::new("none").unwrap();
        let tmpfs = CString::new("tmpfs").unwrap();
        let root = CString::new("/").unwrap();
        let hide = CString::new(hide.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: unshare and mount with valid NUL-terminated strings; the
        // namespace belongs to this thread only.
        unsafe {
            assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare");
            assert_eq!(
                libc::mount(
                    none.as_ptr(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null()
                ),
                0
            );
            assert_eq!(
                libc::mount(
                    tmpfs.as_ptr(),
                    hide.as_ptr(),
                    tmpfs.as_ptr(),
                    0,
                    std::ptr::null()
                ),
                0,
                "tmpfs over the outside: {}",
                io::Error::last_os_error()
            );
        }
        f()
    })
    .join()
    .unwrap()
}

/// The tree's source mounted (uncached: every access reaches the
/// daemon), unmounted on drop.
struct Mounted {
    session: Option<fuse_transport_dev::DevSession>,
    mnt: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        use fuse_server::Session;
        if let Some(s) = self.session.take() {
            s.stop();
            let _ = s.wait();
        }
        if is_mounted(&self.mnt) {
            let _ = fuse_transport_dev::unmount_path(&self.mnt, true);
        }
    }
}

/// As root: a fresh [`tree`], its [`outside_state`] before anything
/// ran, and its source mounted (dropped, that is unmounted, before the
/// tree goes: tuple bindings drop in reverse order).
fn mounted_tree() -> (Tree, Vec<EntryState>, Mounted) {
    require_root();
    let t = tree();
    let before = outside_state(&t);
    let m = mount_over(&t);
    (t, before, m)
}

fn mount_over(t: &Tree) -> Mounted {
    let mnt = t.root.join("mnt");
    let fs = Arc::new(PassthroughFs::new(&t.src, uncached()).unwrap());
    let session = fuse_transport_dev::DevSession::mount(
        fuse_server::Server::new(fs),
        &mnt,
        &test_options(),
        fuse_transport_dev::SessionConfig::default().threads(2),
    )
    .expect("mounting");
    Mounted {
        session: Some(session),
        mnt,
    }
}

#[test]
fn symlinks_through_the_mount_needs_root() {
    let (t, before, m) = mounted_tree();
    let mnt = m.mnt.clone();
    let outside = t.outside.clone();
    let seen = in_private_ns(t.outside.clone(), move || {
        // The kernel follows these links itself, into the (hidden) outside.
        let mut seen = Vec::new();
        for p in ["uplink", "abslink", "dirlink/f", "dirlink/secret"] {
            if let Ok(data) = std::fs::read(mnt.join(p)) {
                seen.push((p, data));
            }
        }
        // Made through the links: lands in the hidden tmpfs, never outside.
        let _ = std::fs::write(mnt.join("dirlink/new"), b"x");
        let _ = std::fs::create_dir(mnt.join("dirlink/newdir"));
        // A symlink made through the mount that points outside stays one.
        std::os::unix::fs::symlink(outside.join("secret"), mnt.join("made")).unwrap();
        std::os::unix::fs::symlink("../outside/f", mnt.join("made-rel")).unwrap();
        seen
    });
    for (p, data) in &seen {
        assert_ne!(
            data.as_slice(),
            SECRET,
            "{p}: the daemon followed a symlink"
        );
    }
    for (name, target) in [
        ("made", t.outside.join("secret")),
        ("made-rel", PathBuf::from("../outside/f")),
    ] {
        let m = std::fs::symlink_metadata(t.src.join(name)).unwrap();
        assert!(m.file_type().is_symlink(), "{name} stays a symlink");
        assert_eq!(std::fs::read_link(t.src.join(name)).unwrap(), target);
    }
    assert_eq!(outside_state(&t), before, "nothing outside changed");
    drop(m);
}

/// Swaps and reads the symlink race runs at least.
const RACE_MIN: u64 = 100;

#[test]
fn directory_swapped_for_a_symlink_while_racing_needs_root() {
    let (t, before, m) = mounted_tree();
    let stop = Arc::new(AtomicBool::new(false));
    // The racer: `d` is a directory, then a symlink to the outside, again
    // and again.
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, src, swaps) = (stop.clone(), t.src.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let _ = std::fs::rename(src.join("d"), src.join("d.real"));
                let _ = std::os::unix::fs::symlink("../outside", src.join("d"));
                std::thread::sleep(Duration::from_micros(300));
                let _ = std::fs::remove_file(src.join("d"));
                let _ = std::fs::rename(src.join("d.real"), src.join("d"));
                std::thread::sleep(Duration::from_micros(300));
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mnt = m.mnt.clone();
    let counted = swaps.clone();
    let (reads, leaks) = in_private_ns(t.outside.clone(), move || {
        let start = Instant::now();
        let (mut reads, mut leaks, mut i) = (0u64, Vec::new(), 0u64);
        // At least 4 s, and until the race ran enough on both sides (a
        // loaded machine may take longer; two minutes is the limit).
        let ran = |reads: u64| reads > RACE_MIN && counted.load(Ordering::Relaxed) > RACE_MIN;
        while (start.elapsed() < Duration::from_secs(4) || !ran(reads))
            && start.elapsed() < Duration::from_secs(120)
        {
            i += 1;
            // `f` may be left as `g` by a rename the swap cut in two.
            for name in ["d/f", "d/g"] {
                if let Ok(data) = std::fs::read(mnt.join(name)) {
                    reads += 1;
                    if data == SECRET {
                        leaks.push("read d/f");
                    }
                }
            }
            if let Ok(data) = std::fs::read(mnt.join("d/secret")) {
                if data == SECRET {
                    leaks.push("read d/secret");
                }
            }
            let _ = std::fs::write(mnt.join(format!("d/new-{}", i % 4)), b"x");
            let _ = std::fs::create_dir(mnt.join(format!("d/dir-{}", i % 4)));
            let _ = std::fs::rename(mnt.join("d/f"), mnt.join("d/g"));
            let _ = std::fs::rename(mnt.join("d/g"), mnt.join("d/f"));
            let _ = std::fs::rename(mnt.join("d/secret"), mnt.join("d/stolen"));
            let _ = std::fs::remove_file(mnt.join("d/f.tmp"));
            let _ = std::os::unix::fs::symlink("x", mnt.join(format!("d/sl-{}", i % 4)));
            if let Ok(f) = std::fs::File::open(mnt.join("d")) {
                drop(f);
            }
            let _ = std::fs::read_dir(mnt.join("d")).map(|rd| rd.count());
        }
        (reads, leaks)
    });
    stop.store(true, Ordering::Release);
    racer.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("escape race: {swaps} swaps, {reads} reads of d/f");
    assert!(
        leaks.is_empty(),
        "the daemon followed a swapped-in symlink: {leaks:?}"
    );
    assert!(
        swaps > RACE_MIN && reads > RACE_MIN,
        "the race did not run in two minutes ({swaps} swaps, {reads} reads)"
    );
    assert_eq!(
        outside_state(&t),
        before,
        "nothing outside was created, renamed or changed"
    );
    assert_eq!(std::fs::read(t.outside.join("f")).unwrap(), SECRET);
    drop(m);
}
