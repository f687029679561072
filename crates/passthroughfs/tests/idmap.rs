//! Idmapped mounts (`FUSE_ALLOW_IDMAP`, Linux 6.12+) on the real kernel:
//! the daemon with `--allow-idmap --default-permissions` lets
//! `mount_setattr(MOUNT_ATTR_IDMAP)` map its mount into a user namespace,
//! as container runtimes do with volumes; files made through the idmapped
//! mount are owned in SOURCE by the creator's ids mapped through the
//! mount's idmapping, and the other requests (which the kernel sends
//! without caller ids) work too. Without `--allow-idmap` the kernel
//! refuses to idmap the mount. Needs root; on a kernel without the flag
//! the test fails, saying so.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The user namespace's mapping: its id `INSIDE` is the host's root, so
/// that through the idmapped mount root creates files owned by `INSIDE`
/// in SOURCE, and sees files owned by `INSIDE` as its own.
const INSIDE: u32 = 1000;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// A process in a user namespace of its own mapping `INSIDE` to the
/// host's 0 (uid and gid); killed on drop.
struct Userns(Child);

impl Userns {
    fn new() -> Userns {
        let mut cmd = Command::new("sleep");
        cmd.arg("infinity").stdin(Stdio::null());
        // SAFETY: unshare(2) is async-signal-safe; the child only execs
        // after it.
        unsafe {
            cmd.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // spawn returns after the exec, so the namespace exists.
        let child = cmd
            .spawn()
            .expect("starting a process in a new user namespace");
        let pid = child.id();
        let ns = Userns(child);
        let map = format!("{INSIDE} 0 1\n");
        std::fs::write(format!("/proc/{pid}/uid_map"), &map).expect("writing uid_map");
        std::fs::write(format!("/proc/{pid}/gid_map"), &map).expect("writing gid_map");
        ns
    }

    fn fd(&self) -> OwnedFd {
        let f = std::fs::File::open(format!("/proc/{}/ns/user", self.0.id())).unwrap();
        f.into()
    }
}

impl Drop for Userns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A detached copy of the mount at `mnt` (open_tree(OPEN_TREE_CLONE)),
/// idmapped into the namespace of `userns`: it is reached through the
/// descriptor only, and goes with it.
fn idmapped_tree(mnt: &Path, userns: &OwnedFd) -> io::Result<OwnedFd> {
    let path = CString::new(mnt.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; the result is checked.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: an empty path with AT_EMPTY_PATH names `tree`; `attr` is a
    // valid mount_attr of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tree)
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// `fstatat` relative to `dir`, not following a last symlink.
fn stat_at(dir: &OwnedFd, name: &str) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid output buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let name = cstr(name);
    // SAFETY: valid descriptor, NUL-terminated name, output buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn check(r: libc::c_int, what: &str) {
    assert!(r >= 0, "{what}: {}", io::Error::last_os_error());
}

test_support::test_cases! {
    files_made_through_an_idmapped_mount_are_owned_by_the_mapped_ids_in_source =>
        made_through_an_idmapped_mount(Transport::Dev, &[]);
    files_made_through_an_idmapped_mount_on_tokio =>
        made_through_an_idmapped_mount(Transport::Dev, &["--runtime", "tokio"]);
    files_made_through_an_idmapped_mount_over_io_uring =>
        made_through_an_idmapped_mount(Transport::Uring, &[]);
}

/// The daemon on `transport` with `extra` arguments, idmapped: ownership
/// in SOURCE of what is made through the idmapped mount, and requests
/// without caller ids.
fn made_through_an_idmapped_mount(transport: Transport, extra: &[&str]) {
    require_root();
    let d = dirs();
    // SOURCE and a file in it owned by the id that maps to root (a
    // directory owned by an id the mount doesn't map is nobody's through
    // it, and root may not create in it there).
    std::os::unix::fs::lchown(&d.src, Some(INSIDE), Some(INSIDE)).unwrap();
    std::fs::write(d.src.join("theirs"), b"x").unwrap();
    std::os::unix::fs::lchown(d.src.join("theirs"), Some(INSIDE), Some(INSIDE)).unwrap();
    let mut args = vec!["--default-permissions", "--allow-idmap"];
    args.extend_from_slice(extra);
    let daemon = Daemon::start(&d.src, &d.mnt, transport, &args);
    let log = daemon.stderr();
    assert!(
        !log.contains("offers no idmapped mounts"),
        "this kernel doesn't offer FUSE_ALLOW_IDMAP, which the test needs (Linux 6.12+): {log}"
    );
    // The kernel allows idmapping once INIT is answered (the flag is read
    // from the reply); without synchronous INIT a daemon on tokio answers
    // it after mount(2), maybe after it says it serves: a request on the
    // mount waits for INIT.
    std::fs::metadata(&d.mnt).unwrap();
    let userns = Userns::new();
    let tree = idmapped_tree(&d.mnt, &userns.fd())
        .unwrap_or_else(|e| panic!("idmapping the mount: {e}\n{}", daemon.stderr()));

    // Seen through the idmapped mount, the file owned by INSIDE is root's.
    let st = stat_at(&tree, "theirs").unwrap();
    assert_eq!((st.st_uid, st.st_gid), (0, 0));

    // Made through it by root (CREATE, MKDIR, SYMLINK, MKNOD): owned by
    // INSIDE in SOURCE, by root as seen through the idmapped mount.
    // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
    // live until the end of the statement, past the call.
    let fd = unsafe {
        libc::openat(
            tree.as_raw_fd(),
            cstr("created").as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644,
        )
    };
    check(fd, "create through the idmapped mount");
    // SAFETY: a descriptor just opened.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a valid descriptor and buffer.
    let n = unsafe { libc::write(file.as_raw_fd(), b"data".as_ptr().cast(), 4) };
    assert_eq!(n, 4, "{}", io::Error::last_os_error());
    drop(file);
    check(
        // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
        // live until the end of the statement, past the call.
        unsafe { libc::mkdirat(tree.as_raw_fd(), cstr("dir").as_ptr(), 0o755) },
        "mkdir",
    );
    check(
        // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
        // live until the end of the statement, past the call.
        unsafe {
            libc::symlinkat(
                cstr("created").as_ptr(),
                tree.as_raw_fd(),
                cstr("link").as_ptr(),
            )
        },
        "symlink",
    );
    check(
        // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
        // live until the end of the statement, past the call.
        unsafe {
            libc::mknodat(
                tree.as_raw_fd(),
                cstr("fifo").as_ptr(),
                libc::S_IFIFO | 0o600,
                0,
            )
        },
        "mknod",
    );
    for name in ["created", "dir", "link", "fifo"] {
        let meta = std::fs::symlink_metadata(d.src.join(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (INSIDE, INSIDE),
            "{name} in SOURCE is owned by the mapped ids"
        );
        let st = stat_at(&tree, name).unwrap();
        assert_eq!(
            (st.st_uid, st.st_gid),
            (0, 0),
            "{name} through the idmapped mount"
        );
        let plain = std::fs::symlink_metadata(d.mnt.join(name)).unwrap();
        assert_eq!(
            (plain.uid(), plain.gid()),
            (INSIDE, INSIDE),
            "{name} through the plain mount"
        );
    }
    assert_eq!(std::fs::read(d.src.join("created")).unwrap(), b"data");

    // Requests that come without caller ids (SETATTR, RENAME, UNLINK,
    // RMDIR) work, and a chown through the idmapped mount maps the ids
    // too: root there is INSIDE in SOURCE; INSIDE + 1 has no mapping and
    // is refused.
    check(
        // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
        // live until the end of the statement, past the call.
        unsafe { libc::fchownat(tree.as_raw_fd(), cstr("theirs").as_ptr(), 0, 0, 0) },
        "chown through the idmapped mount",
    );
    let meta = std::fs::metadata(d.src.join("theirs")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (INSIDE, INSIDE));
    // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
    // live until the end of the statement, past the call.
    let r = unsafe { libc::fchownat(tree.as_raw_fd(), cstr("theirs").as_ptr(), 1, 1, 0) };
    assert!(r != 0, "chown to an id the mount doesn't map succeeded");
    check(
        // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
        // live until the end of the statement, past the call.
        unsafe {
            libc::renameat(
                tree.as_raw_fd(),
                cstr("created").as_ptr(),
                tree.as_raw_fd(),
                cstr("renamed").as_ptr(),
            )
        },
        "rename",
    );
    assert_eq!(std::fs::read(d.src.join("renamed")).unwrap(), b"data");
    for (name, flags) in [
        ("renamed", 0),
        ("link", 0),
        ("fifo", 0),
        ("dir", libc::AT_REMOVEDIR),
    ] {
        check(
            // SAFETY: `tree` is an open descriptor and the names are temporary CStrings that
            // live until the end of the statement, past the call.
            unsafe { libc::unlinkat(tree.as_raw_fd(), cstr(name).as_ptr(), flags) },
            name,
        );
        assert!(!d.src.join(name).exists(), "{name} is gone from SOURCE");
    }
    drop(tree);
    drop(daemon);
}

#[test]
fn without_allow_idmap_the_kernel_refuses_to_idmap_the_mount() {
    require_root();
    let d = dirs();
    let daemon = Daemon::start(&d.src, &d.mnt, Transport::Dev, &["--default-permissions"]);
    // INIT answered (see above): the refusal is the flag's absence.
    std::fs::metadata(&d.mnt).unwrap();
    let userns = Userns::new();
    let err = idmapped_tree(&d.mnt, &userns.fd()).expect_err("an idmapped mount without the flag");
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    drop(daemon);
}

#[test]
fn allow_idmap_needs_default_permissions() {
    let d = dirs();
    let err = refused_at_start(&d.src, &d.mnt, &["--allow-idmap"]);
    assert!(
        err.contains("--allow-idmap needs --default-permissions"),
        "{err}"
    );
    let err = refused_at_start(&d.src, &d.mnt, &["-o", "allow_idmap"]);
    assert!(
        err.contains("-o allow_idmap needs -o default_permissions"),
        "{err}"
    );
}
