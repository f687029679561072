//! Every file operation through the kernel on a mounted passthrough,
//! checked against the same call (or its effect) on the backing directory.
//! Needs root (CI runs as root); fails with the reason otherwise.

mod common;

use common::*;
use fuse_backend_passthrough::CachePolicy;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

#[test]
fn file_data_roundtrip() {
    let t = TestMount::new();
    small_files_both_ways(&t);
    let data = big_file_written(&t);
    big_file_read(&t, &data);
    append_to_a(&t);
    assert_same_meta(&t, "a");
    assert_same_meta(&t, "big");
    truncate_a(&t);
    seek_and_read_big(&t, &data);
}

#[test]
fn create_exclusive_and_errors_match_backing() {
    let t = TestMount::new();
    fs::write(t.m("f"), b"").unwrap();
    let excl = |p: &Path| OpenOptions::new().write(true).create_new(true).open(p);
    assert_eq!(errno_of(excl(&t.m("f"))), errno_of(excl(&t.s("f"))));
    assert_eq!(errno_of(excl(&t.m("f"))), libc::EEXIST);
    for name in ["missing", "f/x"] {
        assert_eq!(
            errno_of(File::open(t.m(name))),
            errno_of(File::open(t.s(name))),
            "{name}"
        );
    }
    fs::create_dir(t.m("d")).unwrap();
    fs::write(t.m("d/x"), b"1").unwrap();
    assert_eq!(errno_of(fs::remove_dir(t.m("d"))), libc::ENOTEMPTY);
    assert_eq!(
        errno_of(fs::remove_file(t.m("d"))),
        errno_of(fs::remove_file(t.s("d")))
    );
    assert_eq!(errno_of(fs::create_dir(t.m("d"))), libc::EEXIST);
    assert_eq!(errno_of(fs::remove_dir(t.m("f"))), libc::ENOTDIR);
    assert_eq!(errno_of(fs::remove_file(t.m("nope"))), libc::ENOENT);
    fs::remove_file(t.m("d/x")).unwrap();
    fs::remove_dir(t.m("d")).unwrap();
    assert!(!t.s("d").exists());
    fs::remove_file(t.m("f")).unwrap();
    assert!(!t.s("f").exists());
    // A long name is refused by the backing file system the same way.
    let long = "x".repeat(256);
    assert_eq!(
        errno_of(fs::write(t.m(&long), b"")),
        errno_of(fs::write(t.s(&long), b""))
    );
}

#[test]
fn metadata_matches_backing() {
    let t = TestMount::new();
    fs::write(t.m("f"), b"12345").unwrap();
    fs::create_dir(t.m("d")).unwrap();
    std::os::unix::fs::symlink("f", t.m("l")).unwrap();
    fs::write(t.s("below"), b"made below").unwrap();
    for name in ["f", "d", "l", "below", "."] {
        assert_same_meta(&t, name);
    }
    let m = lmeta(&t.m("d"));
    assert!(m.is_dir());
    assert_eq!(
        m.mode() & 0o777,
        0o755,
        "umask 022 of the test applied once"
    );
    assert_eq!(lmeta(&t.m("f")).mode() & 0o777, 0o644);
}

#[test]
fn setattr_chmod_chown_truncate_utimes_needs_root() {
    let t = TestMount::new();
    fs::write(t.m("f"), pattern(10_000, 2)).unwrap();
    // chmod, including set-id and sticky bits.
    for mode in [0o600, 0o4755, 0o2711, 0o1777, 0o000] {
        fs::set_permissions(t.m("f"), fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(lmeta(&t.s("f")).mode() & 0o7777, mode);
        assert_same_meta(&t, "f");
    }
    // chown to other users (we are root).
    std::os::unix::fs::chown(t.m("f"), Some(1234), Some(5678)).unwrap();
    assert_eq!(
        (lmeta(&t.s("f")).uid(), lmeta(&t.s("f")).gid()),
        (1234, 5678)
    );
    std::os::unix::fs::chown(t.m("f"), None, Some(42)).unwrap();
    assert_eq!((lmeta(&t.s("f")).uid(), lmeta(&t.s("f")).gid()), (1234, 42));
    assert_same_meta(&t, "f");
    // truncate by path, shrink and grow.
    let cpath = c(&t.m("f"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::truncate(cpath.as_ptr(), 100) }, 0);
    assert_eq!(lmeta(&t.s("f")).len(), 100);
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::truncate(cpath.as_ptr(), 1 << 20) }, 0);
    assert_eq!(lmeta(&t.s("f")).len(), 1 << 20);
    // ftruncate through an open file (the handle is sent along).
    fs::set_permissions(t.m("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let f = OpenOptions::new().write(true).open(t.m("f")).unwrap();
    f.set_len(7).unwrap();
    assert_eq!(lmeta(&t.s("f")).len(), 7);
    assert_eq!(fs::read(t.s("f")).unwrap(), pattern(10_000, 2)[..7]);
    drop(f);
    // utimensat with given times, UTIME_OMIT and UTIME_NOW.
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 123_456_789,
        },
        libc::timespec {
            tv_sec: 1_200_000_000,
            tv_nsec: 987_654_321,
        },
    ];
    assert_eq!(
        // SAFETY: the path is NUL-terminated and the two timespecs are
        // what utimensat reads; both live across the call.
        unsafe { libc::utimensat(libc::AT_FDCWD, cpath.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let b = lmeta(&t.s("f"));
    assert_eq!((b.atime(), b.atime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!((b.mtime(), b.mtime_nsec()), (1_200_000_000, 987_654_321));
    let omit_now = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    ];
    assert_eq!(
        // SAFETY: the path is NUL-terminated and the two timespecs are
        // what utimensat reads; both live across the call.
        unsafe { libc::utimensat(libc::AT_FDCWD, cpath.as_ptr(), omit_now.as_ptr(), 0) },
        0
    );
    let b = lmeta(&t.s("f"));
    assert_eq!((b.atime(), b.atime_nsec()), (1_000_000_000, 123_456_789));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((b.mtime() - now).abs() < 10, "mtime set to now");
    assert_same_meta(&t, "f");
    // lchown of a symlink changes the link, not its target.
    std::os::unix::fs::symlink("f", t.m("l")).unwrap();
    std::os::unix::fs::lchown(t.m("l"), Some(77), Some(88)).unwrap();
    assert_eq!((lmeta(&t.s("l")).uid(), lmeta(&t.s("l")).gid()), (77, 88));
    assert_eq!(lmeta(&t.s("f")).uid(), 1234);
    // Times of a symlink itself.
    let lpath = c(&t.m("l"));
    assert_eq!(
        // SAFETY: the path is NUL-terminated and the two timespecs are
        // what utimensat reads; both live across the call.
        unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                lpath.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        },
        0
    );
    assert_eq!(lmeta(&t.s("l")).mtime(), 1_200_000_000);
    assert_eq!(lmeta(&t.s("f")).mtime(), b.mtime());
}

#[test]
fn symlinks_and_readlink() {
    let t = TestMount::new();
    let long = "d/".repeat(2000) + "end";
    for (name, target) in [
        ("rel", "target"),
        ("abs", "/etc/passwd"),
        ("dots", "../../.."),
        ("long", long.as_str()),
    ] {
        std::os::unix::fs::symlink(target, t.m(name)).unwrap();
        assert_eq!(fs::read_link(t.s(name)).unwrap().to_str().unwrap(), target);
        assert_eq!(fs::read_link(t.m(name)).unwrap().to_str().unwrap(), target);
        assert_same_meta(&t, name);
    }
    // A symlink made below reads the same through the mount.
    std::os::unix::fs::symlink("x/y", t.s("below")).unwrap();
    assert_eq!(
        fs::read_link(t.m("below")).unwrap().to_str().unwrap(),
        "x/y"
    );
    // A symlink in the backing tree is never followed by the passthrough:
    // a directory symlink pointing out of the tree is a symlink here.
    std::os::unix::fs::symlink("/", t.s("escape")).unwrap();
    assert!(lmeta(&t.m("escape")).file_type().is_symlink());
    // readlink of a non-symlink: EINVAL as below.
    fs::write(t.m("f"), b"").unwrap();
    assert_eq!(
        errno_of(fs::read_link(t.m("f"))),
        errno_of(fs::read_link(t.s("f")))
    );
}

#[test]
fn mknod_fifo_and_socket() {
    let t = TestMount::new();
    let fifo = c(&t.m("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    let sock = c(&t.m("sock"));
    assert_eq!(
        // SAFETY: the path is a NUL-terminated CString that outlives the call.
        unsafe { libc::mknod(sock.as_ptr(), libc::S_IFSOCK | 0o600, 0) },
        0
    );
    let reg = c(&t.m("reg"));
    assert_eq!(
        // SAFETY: the path is a NUL-terminated CString that outlives the call.
        unsafe { libc::mknod(reg.as_ptr(), libc::S_IFREG | 0o600, 0) },
        0
    );
    assert_eq!(lmeta(&t.s("fifo")).mode(), libc::S_IFIFO | 0o640);
    assert_eq!(lmeta(&t.s("sock")).mode(), libc::S_IFSOCK | 0o600);
    assert_eq!(lmeta(&t.s("reg")).mode(), libc::S_IFREG | 0o600);
    for n in ["fifo", "sock", "reg"] {
        assert_same_meta(&t, n);
    }
    // A FIFO through the mount is a FIFO: the kernel serves it.
    let path = t.m("fifo");
    let writer = std::thread::spawn(move || fs::write(path, b"through the pipe").unwrap());
    assert_eq!(fs::read(t.m("fifo")).unwrap(), b"through the pipe");
    writer.join().unwrap();
    // A UNIX socket bound through the mount.
    let l = std::os::unix::net::UnixListener::bind(t.m("bound")).unwrap();
    assert!(lmeta(&t.s("bound")).file_type().is_socket());
    drop(l);
}

#[test]
fn mknod_device_nodes_needs_root() {
    let t = TestMount::new();
    let chr = c(&t.m("null"));
    let blk = c(&t.m("blk"));
    let big = c(&t.m("big"));
    // SAFETY: valid paths.
    unsafe {
        assert_eq!(
            libc::mknod(chr.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)),
            0
        );
        assert_eq!(
            libc::mknod(blk.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(7, 200)),
            0
        );
        // Major and minor beyond 8 bits.
        assert_eq!(
            libc::mknod(
                big.as_ptr(),
                libc::S_IFCHR | 0o600,
                libc::makedev(300, 70000)
            ),
            0
        );
    }
    assert_eq!(lmeta(&t.s("null")).rdev(), libc::makedev(1, 3));
    assert_eq!(lmeta(&t.s("blk")).rdev(), libc::makedev(7, 200));
    assert_eq!(lmeta(&t.s("big")).rdev(), libc::makedev(300, 70000));
    for n in ["null", "blk", "big"] {
        assert_same_meta(&t, n);
    }
    // The device works through the mount (mounted without nodev).
    fs::write(t.m("null"), b"gone").unwrap();
}

#[test]
fn rename_and_rename2_flags() {
    let t = TestMount::new();
    fs::write(t.m("a"), b"A").unwrap();
    fs::write(t.m("b"), b"B").unwrap();
    fs::create_dir(t.m("d")).unwrap();
    // Plain rename, replacing.
    fs::rename(t.m("a"), t.m("b")).unwrap();
    assert!(!t.s("a").exists());
    assert_eq!(fs::read(t.s("b")).unwrap(), b"A");
    // Across directories.
    fs::rename(t.m("b"), t.m("d/b")).unwrap();
    assert_eq!(fs::read(t.s("d/b")).unwrap(), b"A");
    let rename2 = |from: &str, to: &str, flags| renameat2(&t.m(from), &t.m(to), flags);
    fs::write(t.m("x"), b"X").unwrap();
    fs::write(t.m("y"), b"Y").unwrap();
    assert_eq!(rename2("x", "y", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(rename2("x", "z", libc::RENAME_NOREPLACE), 0);
    assert_eq!(fs::read(t.s("z")).unwrap(), b"X");
    // Exchange a file and a directory.
    assert_eq!(rename2("z", "d", libc::RENAME_EXCHANGE), 0);
    assert!(lmeta(&t.s("z")).is_dir());
    assert_eq!(fs::read(t.s("d")).unwrap(), b"X");
    assert_eq!(fs::read(t.s("z/b")).unwrap(), b"A");
    assert_eq!(fs::read(t.m("z/b")).unwrap(), b"A");
    assert_eq!(rename2("y", "nothere", libc::RENAME_EXCHANGE), libc::ENOENT);
    // Renaming a directory over a non-empty one fails as below.
    fs::create_dir(t.m("e")).unwrap();
    assert_eq!(
        errno_of(fs::rename(t.m("e"), t.m("z"))),
        errno_of(fs::rename(t.s("e"), t.s("z")))
    );
    assert_same_meta(&t, "z");
    assert_same_meta(&t, "d");
}

#[test]
fn rename_whiteout_needs_root() {
    let t = TestMount::new();
    fs::write(t.m("a"), b"A").unwrap();
    let r = renameat2(&t.m("a"), &t.m("b"), libc::RENAME_WHITEOUT);
    assert_eq!(
        r,
        0,
        "RENAME_WHITEOUT: {}",
        std::io::Error::from_raw_os_error(r)
    );
    assert_eq!(fs::read(t.s("b")).unwrap(), b"A");
    // The whiteout: a character device 0:0 where the source was.
    let w = lmeta(&t.s("a"));
    assert!(w.file_type().is_char_device());
    assert_eq!(w.rdev(), 0);
    assert_same_meta(&t, "a");
}

#[test]
fn hard_links() {
    let t = TestMount::new();
    fs::write(t.m("f"), b"data").unwrap();
    fs::hard_link(t.m("f"), t.m("g")).unwrap();
    fs::create_dir(t.m("d")).unwrap();
    fs::hard_link(t.m("f"), t.m("d/h")).unwrap();
    assert_eq!(lmeta(&t.s("f")).nlink(), 3);
    assert_eq!(lmeta(&t.m("f")).nlink(), 3);
    assert_eq!(lmeta(&t.m("g")).ino(), lmeta(&t.m("f")).ino());
    assert_eq!(lmeta(&t.m("d/h")).ino(), lmeta(&t.s("f")).ino());
    fs::write(t.m("g"), b"changed").unwrap();
    assert_eq!(fs::read(t.m("d/h")).unwrap(), b"changed");
    fs::remove_file(t.m("f")).unwrap();
    assert_eq!(lmeta(&t.m("g")).nlink(), 2);
    assert_same_meta(&t, "g");
    // Hard link of a symlink links the symlink itself.
    std::os::unix::fs::symlink("target", t.m("l")).unwrap();
    let (l, l2) = (c(&t.m("l")), c(&t.m("l2")));
    assert_eq!(
        // SAFETY: both paths are NUL-terminated CStrings that outlive the call.
        unsafe { libc::linkat(libc::AT_FDCWD, l.as_ptr(), libc::AT_FDCWD, l2.as_ptr(), 0) },
        0
    );
    assert_eq!(
        fs::read_link(t.s("l2")).unwrap().to_str().unwrap(),
        "target"
    );
    assert_eq!(lmeta(&t.s("l")).nlink(), 2);
    // Linking a directory fails as below.
    assert_eq!(
        errno_of(fs::hard_link(t.m("d"), t.m("dd"))),
        errno_of(fs::hard_link(t.s("d"), t.s("dd")))
    );
}

fn getxattr(p: &Path, name: &str, size: usize, follow: bool) -> Result<Vec<u8>, i32> {
    let (p, n) = (c(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; size];
    // SAFETY: valid strings; buffer of `size` bytes.
    let r = unsafe {
        if follow {
            libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size)
        } else {
            libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size)
        }
    };
    if r < 0 {
        return Err(last_errno());
    }
    buf.truncate(if size == 0 { 0 } else { r as usize });
    if size == 0 {
        return Ok((r as u64).to_ne_bytes().to_vec());
    }
    Ok(buf)
}

fn setxattr(p: &Path, name: &str, value: &[u8], flags: i32, follow: bool) -> i32 {
    let (p, n) = (c(p), CString::new(name).unwrap());
    // SAFETY: valid strings and value.
    let r = unsafe {
        if follow {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        } else {
            libc::lsetxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        }
    };
    if r < 0 {
        last_errno()
    } else {
        0
    }
}

fn listxattr(p: &Path) -> Vec<String> {
    let p = c(p);
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid path and buffer.
    let r = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr: {}", std::io::Error::last_os_error());
    let mut names: Vec<String> = buf[..r as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn xattrs() {
    let t = TestMount::new();
    fs::write(t.m("f"), b"").unwrap();
    fs::create_dir(t.m("d")).unwrap();
    for n in ["f", "d"] {
        assert_eq!(setxattr(&t.m(n), "user.one", b"1", 0, true), 0);
        assert_eq!(setxattr(&t.m(n), "user.big", &pattern(4000, 3), 0, true), 0);
        assert_eq!(getxattr(&t.s(n), "user.one", 100, true).unwrap(), b"1");
        assert_eq!(
            getxattr(&t.m(n), "user.big", 4096, true).unwrap(),
            pattern(4000, 3)
        );
        // Size query, a too small buffer, a missing attribute.
        assert_eq!(
            getxattr(&t.m(n), "user.big", 0, true).unwrap(),
            4000u64.to_ne_bytes()
        );
        assert_eq!(getxattr(&t.m(n), "user.big", 10, true), Err(libc::ERANGE));
        assert_eq!(getxattr(&t.m(n), "user.none", 10, true), Err(libc::ENODATA));
        // XATTR_CREATE / XATTR_REPLACE.
        assert_eq!(
            setxattr(&t.m(n), "user.one", b"x", libc::XATTR_CREATE, true),
            libc::EEXIST
        );
        assert_eq!(
            setxattr(&t.m(n), "user.two", b"x", libc::XATTR_REPLACE, true),
            libc::ENODATA
        );
        assert_eq!(listxattr(&t.m(n)), listxattr(&t.s(n)));
        assert!(listxattr(&t.m(n)).contains(&"user.one".to_string()));
        let (p, name) = (c(&t.m(n)), CString::new("user.one").unwrap());
        // SAFETY: valid strings.
        assert_eq!(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }, 0);
        assert_eq!(getxattr(&t.s(n), "user.one", 10, true), Err(libc::ENODATA));
        // SAFETY: valid strings.
        assert_eq!(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }, -1);
        assert_eq!(last_errno(), libc::ENODATA);
    }
    // Symlinks: user.* is refused as on the backing symlink.
    std::os::unix::fs::symlink("f", t.m("l")).unwrap();
    assert_eq!(
        setxattr(&t.m("l"), "user.x", b"1", 0, false),
        setxattr(&t.s("l"), "user.x", b"1", 0, false)
    );
    assert_eq!(setxattr(&t.m("l"), "user.x", b"1", 0, false), libc::EPERM);
    assert_eq!(listxattr(&t.m("l")), listxattr(&t.s("l")));
    // Through a symlink (following) reaches the target.
    assert_eq!(setxattr(&t.m("l"), "user.via", b"v", 0, true), 0);
    assert_eq!(getxattr(&t.s("f"), "user.via", 10, true).unwrap(), b"v");
    // FIFOs: user.* refused as below.
    let fifo = c(&t.m("p"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    assert_eq!(
        setxattr(&t.m("p"), "user.x", b"1", 0, false),
        setxattr(&t.s("p"), "user.x", b"1", 0, false)
    );
}

#[test]
fn trusted_xattrs_on_files_and_symlinks_needs_root() {
    let t = TestMount::new();
    fs::write(t.m("f"), b"").unwrap();
    assert_eq!(setxattr(&t.m("f"), "trusted.t", b"t", 0, true), 0);
    assert_eq!(getxattr(&t.s("f"), "trusted.t", 10, true).unwrap(), b"t");
    assert_eq!(getxattr(&t.m("f"), "trusted.t", 10, true).unwrap(), b"t");
    // On a symlink itself (not its target).
    std::os::unix::fs::symlink("f", t.m("l")).unwrap();
    assert_eq!(setxattr(&t.m("l"), "trusted.link", b"L", 0, false), 0);
    assert_eq!(
        getxattr(&t.s("l"), "trusted.link", 10, false).unwrap(),
        b"L"
    );
    assert_eq!(
        getxattr(&t.m("l"), "trusted.link", 10, false).unwrap(),
        b"L"
    );
    assert_eq!(
        getxattr(&t.s("f"), "trusted.link", 10, true),
        Err(libc::ENODATA)
    );
    assert_eq!(listxattr(&t.m("l")), listxattr(&t.s("l")));
    assert_eq!(listxattr(&t.m("f")), listxattr(&t.s("f")));
}

#[test]
fn xattrs_disabled() {
    let config = uncached().xattr(false);
    let t = TestMount::with(config, test_options());
    fs::write(t.m("f"), b"").unwrap();
    assert_eq!(
        setxattr(&t.m("f"), "user.one", b"1", 0, true),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        getxattr(&t.m("f"), "user.one", 10, true),
        Err(libc::EOPNOTSUPP)
    );
}

#[test]
fn statfs_matches_backing() {
    let t = TestMount::new();
    let stat = |p: &Path| {
        let p = c(p);
        // SAFETY: `statvfs` is plain integers, for which all zeroes is valid.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `p` is a NUL-terminated path and `st` a writable statvfs,
        // both live across the call.
        assert_eq!(unsafe { libc::statvfs(p.as_ptr(), &mut st) }, 0);
        st
    };
    let (a, b) = (stat(&t.mnt), stat(&t.src));
    assert_eq!(a.f_bsize, b.f_bsize);
    assert_eq!(a.f_frsize, b.f_frsize);
    assert_eq!(a.f_blocks, b.f_blocks);
    assert_eq!(a.f_files, b.f_files);
    assert_eq!(a.f_namemax, b.f_namemax);
    // Free counts move with other tests: only roughly the same.
    assert!(a.f_bfree.abs_diff(b.f_bfree) < b.f_blocks / 10 + 1000);
}

#[test]
fn fsync_fdatasync_syncfs_fsyncdir() {
    let t = TestMount::new();
    let mut f = File::create(t.m("f")).unwrap();
    f.write_all(b"sync me").unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    // The kernel sends SYNCFS only to virtio-fs; on /dev/fuse syncfs(2)
    // succeeds without asking the daemon.
    // SAFETY: valid fd.
    assert_eq!(unsafe { libc::syncfs(f.as_raw_fd()) }, 0);
    let d = File::open(&t.mnt).unwrap();
    d.sync_all().unwrap();
    assert_eq!(fs::read(t.s("f")).unwrap(), b"sync me");
    assert!(t.count(fuse_abi::Opcode::Fsync) >= 2);
    assert!(t.count(fuse_abi::Opcode::Fsyncdir) >= 1);
}

/// SEEK_DATA / SEEK_HOLE offsets of `f` from every 4 KiB step.
fn seek_map(f: &File, len: u64) -> Vec<(i64, i64)> {
    (0..len)
        .step_by(4096)
        .map(|off| {
            // SAFETY: valid fd.
            let d = unsafe { libc::lseek(f.as_raw_fd(), off as i64, libc::SEEK_DATA) };
            let d = if d < 0 { -(last_errno() as i64) } else { d };
            // SAFETY: valid fd.
            let h = unsafe { libc::lseek(f.as_raw_fd(), off as i64, libc::SEEK_HOLE) };
            let h = if h < 0 { -(last_errno() as i64) } else { h };
            (d, h)
        })
        .collect()
}

#[test]
fn fallocate_punch_hole_and_seek_data_hole() {
    let t = TestMount::new();
    let f = create_rw(&t.m("f"));
    const MB: i64 = 1 << 20;
    // SAFETY: valid fd.
    unsafe {
        assert_eq!(libc::fallocate(f.as_raw_fd(), 0, 0, 4 * MB), 0);
    }
    assert_eq!(lmeta(&t.s("f")).len(), 4 << 20);
    assert!(lmeta(&t.s("f")).blocks() >= 8192);
    f.write_all_at(&pattern(MB as usize, 4), 0).unwrap();
    f.write_all_at(&pattern(MB as usize, 5), 3 * MB as u64)
        .unwrap();
    // Punch a hole in the middle (keep size), extend with KEEP_SIZE.
    // SAFETY: valid fd.
    unsafe {
        assert_eq!(
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                MB,
                2 * MB
            ),
            0
        );
        assert_eq!(
            libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 4 * MB, MB),
            0
        );
        // posix_fallocate beyond the end grows the file.
        assert_eq!(libc::posix_fallocate(f.as_raw_fd(), 5 * MB, MB), 0);
    }
    f.sync_all().unwrap();
    let b = File::open(t.s("f")).unwrap();
    assert_eq!(lmeta(&t.s("f")).len(), 6 << 20);
    assert_same_meta(&t, "f");
    let mut middle = vec![1u8; MB as usize];
    f.read_exact_at(&mut middle, MB as u64 + 1234).unwrap();
    assert!(middle.iter().all(|&x| x == 0));
    assert_eq!(seek_map(&f, 7 << 20), seek_map(&b, 7 << 20));
    // The hole is where it was punched.
    assert_eq!(
        // SAFETY: the descriptor belongs to a File that is open across the call;
        // no pointers are passed.
        unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_HOLE) },
        MB
    );
    assert_eq!(
        // SAFETY: the descriptor belongs to a File that is open across the call;
        // no pointers are passed.
        unsafe { libc::lseek(f.as_raw_fd(), MB, libc::SEEK_DATA) },
        3 * MB
    );
    // An invalid mode fails as below.
    // SAFETY: valid fds.
    let (rm, rb) = unsafe {
        (
            libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
            libc::fallocate(b.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
        )
    };
    assert_eq!(rm, rb);
}

/// A negative offset gets the backing file's answer for each whence (ENXIO
/// for SEEK_DATA/SEEK_HOLE, EINVAL for SEEK_SET), not a blanket EINVAL
/// (xfstests generic/448).
#[test]
fn lseek_to_a_negative_offset_answers_as_the_backing_file() {
    let t = TestMount::new();
    std::fs::write(t.s("f"), vec![7u8; 8192]).unwrap();
    let f = File::open(t.m("f")).unwrap();
    let b = File::open(t.s("f")).unwrap();
    for whence in [
        libc::SEEK_SET,
        libc::SEEK_CUR,
        libc::SEEK_DATA,
        libc::SEEK_HOLE,
    ] {
        let answer = |file: &File| {
            // SAFETY: a valid fd.
            let r = unsafe { libc::lseek(file.as_raw_fd(), -4096, whence) };
            if r < 0 {
                -(last_errno() as i64)
            } else {
                r
            }
        };
        assert_eq!(answer(&f), answer(&b), "whence {whence}");
    }
}

#[test]
fn copy_file_range_between_files() {
    let t = TestMount::new();
    let data = pattern(5 << 20, 6);
    fs::write(t.m("a"), &data).unwrap();
    let src = File::open(t.m("a")).unwrap();
    let dst = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(t.m("b"))
        .unwrap();
    let mut off_in: i64 = 1000;
    let mut off_out: i64 = 0;
    let mut left = data.len() - 1000;
    while left > 0 {
        // SAFETY: valid fds and offsets.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        assert!(
            n > 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        left -= n as usize;
    }
    drop(dst);
    assert_eq!(fs::read(t.s("b")).unwrap(), data[1000..]);
    assert!(
        t.count(fuse_abi::Opcode::CopyFileRange) + t.count(fuse_abi::Opcode::CopyFileRange64) >= 1
    );
}

/// Runs `check` on a fresh [`uncached`] mount with each of the cache
/// policies `Auto` and `Never`.
fn with_auto_and_never_cache(mut check: impl FnMut(CachePolicy, TestMount)) {
    for cache in [CachePolicy::Auto, CachePolicy::Never] {
        check(
            cache,
            TestMount::with(uncached().cache(cache), test_options()),
        );
    }
}

#[test]
fn o_direct_reads_and_writes() {
    with_auto_and_never_cache(|_, t| {
        let (f, data) = direct_file_written(&t);
        let mut part = Aligned::new(8192);
        f.read_exact_at(part.as_mut(), 4096 * 10).unwrap();
        assert_eq!(part.as_mut(), &data[40960..40960 + 8192]);
        drop(f);
        direct_file_below(&t, &data);
        // The backing file is opened with O_DIRECT too (this process is the
        // daemon: look at its descriptors).
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(t.m("d"))
            .unwrap();
        assert!(backing_fd_flags(&t.s("d"))
            .iter()
            .any(|&fl| fl & libc::O_DIRECT != 0));
        drop(f);
    });
}

/// The open flags of this process's descriptors of `path`.
fn backing_fd_flags(path: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if fs::read_link(e.path()).ok().as_deref() != Some(path) {
            continue;
        }
        let info = fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            e.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        if let Some(line) = info.lines().find(|l| l.starts_with("flags:")) {
            out.push(i32::from_str_radix(line[6..].trim(), 8).unwrap());
        }
    }
    out
}

#[test]
fn o_tmpfile_and_linkat() {
    let t = TestMount::new();
    let dir = c(&t.mnt);
    // SAFETY: valid path.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o640) };
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just opened and is ours.
    let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    f.write_all_at(b"temporary", 0).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.nlink(), 0);
    assert_eq!(m.mode(), libc::S_IFREG | 0o640);
    assert_eq!(
        fs::read_dir(&t.src).unwrap().count(),
        0,
        "nothing named below"
    );
    // Give it a name.
    let proc = CString::new(format!("/proc/self/fd/{fd}")).unwrap();
    let name = c(&t.m("named"));
    // SAFETY: valid strings.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc.as_ptr(),
            libc::AT_FDCWD,
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    assert_eq!(r, 0, "linkat: {}", std::io::Error::last_os_error());
    assert_eq!(fs::read(t.s("named")).unwrap(), b"temporary");
    assert_eq!(lmeta(&t.s("named")).ino(), m.ino());
    assert!(t.count(fuse_abi::Opcode::Tmpfile) >= 1);
}

#[test]
fn statx_matches_backing() {
    let t = TestMount::new();
    fs::write(t.m("f"), pattern(12345, 8)).unwrap();
    let sx = |p: &Path| {
        let p = c(p);
        // SAFETY: `statx` is plain integers, for which all zeroes is valid.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: `p` is a NUL-terminated path and `st` a writable statx,
        // both live across the call.
        let r = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                p.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_FORCE_SYNC,
                libc::STATX_BASIC_STATS | libc::STATX_BTIME,
                &mut st,
            )
        };
        assert_eq!(r, 0, "statx: {}", std::io::Error::last_os_error());
        st
    };
    let (a, b) = (sx(&t.m("f")), sx(&t.s("f")));
    assert_eq!(a.stx_size, b.stx_size);
    assert_eq!(a.stx_mode, b.stx_mode);
    assert_eq!(a.stx_ino, b.stx_ino);
    assert_eq!(a.stx_nlink, b.stx_nlink);
    assert_eq!(a.stx_blocks, b.stx_blocks);
    assert_eq!(
        (a.stx_mtime.tv_sec, a.stx_mtime.tv_nsec),
        (b.stx_mtime.tv_sec, b.stx_mtime.tv_nsec)
    );
    // Birth time comes through FUSE_STATX.
    assert_ne!(a.stx_mask & libc::STATX_BTIME, 0, "btime through the mount");
    assert_eq!(
        (a.stx_btime.tv_sec, a.stx_btime.tv_nsec),
        (b.stx_btime.tv_sec, b.stx_btime.tv_nsec)
    );
    assert!(t.count(fuse_abi::Opcode::Statx) >= 1);
}

#[test]
fn mmap_read_and_write() {
    with_auto_and_never_cache(|cache, t| {
        mmap_writes_through(&t.s("m"), &t.m("m"), &format!("{cache:?}"))
    });
}

#[test]
fn access_without_default_permissions() {
    // Without default_permissions the kernel asks the file system (ACCESS).
    let mut options = test_options();
    options.allow_other = false;
    options.default_permissions = false;
    let t = TestMount::with(uncached(), options);
    fs::write(t.m("f"), b"").unwrap();
    fs::set_permissions(t.m("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let access = |p: &Path, mode| {
        let p = c(p);
        // SAFETY: valid path.
        if unsafe { libc::access(p.as_ptr(), mode) } == 0 {
            0
        } else {
            last_errno()
        }
    };
    for mode in [
        libc::F_OK,
        libc::R_OK,
        libc::W_OK,
        libc::X_OK,
        libc::R_OK | libc::X_OK,
    ] {
        assert_eq!(
            access(&t.m("f"), mode),
            access(&t.s("f"), mode),
            "mode {mode}"
        );
    }
    assert_eq!(access(&t.m("missing"), libc::F_OK), libc::ENOENT);
    assert!(t.count(fuse_abi::Opcode::Access) >= 1);
}
