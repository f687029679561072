//! `--sandbox namespace` (and the refused `chroot`): the daemon's view of
//! the file system cut down to SOURCE.

use crate::Failure;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where SOURCE is inside the new root.
pub const SOURCE_INSIDE: &str = "/source";

/// A failed step, said with what the kernel refused and what it needs.
fn step<'a>(what: &'a str, needs: &'a str) -> impl FnOnce(io::Error) -> Failure + 'a {
    move |e| {
        let hint = match e.raw_os_error() {
            Some(libc::EPERM) => format!(
                " (it needs {needs}; unprivileged, or in a container that refuses it, use \
                 --sandbox none: Landlock and seccomp still apply)"
            ),
            _ => String::new(),
        };
        Failure(format!("--sandbox namespace: {what}: {e}{hint}"))
    }
}

fn cstr(p: &Path) -> Result<CString, Failure> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Failure(format!("{}: a path with a NUL byte", p.display())))
}

fn check(r: libc::c_int) -> io::Result<()> {
    fuse_server::sys::cvt(r).map(drop)
}

fn mount(
    src: Option<&std::ffi::CStr>,
    target: &std::ffi::CStr,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    let p = |c: Option<&std::ffi::CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: NUL-terminated strings or null where mount(2) allows it.
    check(unsafe { libc::mount(p(src), target.as_ptr(), p(fstype), flags, p(data).cast()) })
}

/// Enters new mount, network and IPC namespaces and makes the root a
/// read-only tmpfs holding SOURCE (a recursive bind, at
/// [`SOURCE_INSIDE`]), a `/proc` of the daemon's PID namespace,
/// `/dev/fuse` and `/dev/null`; the old root is detached. Returns SOURCE's path inside.
///
/// No new PID namespace: the passthrough reads the callers' supplementary
/// groups from `/proc/<tid>/status` (thread ids the kernel gives in each
/// request, in this PID namespace), and reopens inodes through
/// `/proc/self/fd`; Landlock keeps `/proc/<pid>/root` links from leading
/// out (docs/security.md).
pub fn enter(source: &Path) -> Result<PathBuf, Failure> {
    let source_c = cstr(source)?;
    // SAFETY: plain system call.
    check(unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC) })
        .map_err(step(
            "unshare(mount, network, IPC namespaces)",
            "CAP_SYS_ADMIN",
        ))?;
    // Nothing done here reaches the host; the host's unmounts still reach
    // here (a slave, as virtiofsd makes it).
    mount(None, c"/", None, libc::MS_SLAVE | libc::MS_REC, None)
        .map_err(step("making / a slave mount", "CAP_SYS_ADMIN"))?;
    // SOURCE's tree, detached, before a tmpfs may hide it.
    // SAFETY: a valid path; the result is checked.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source_c.as_ptr(),
            (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint
                | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(step("cloning SOURCE's mount tree", "CAP_SYS_ADMIN")(
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: a new descriptor of ours.
    let tree =
        unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(tree as i32) };
    // The new root: a tmpfs over /tmp of this namespace only (any
    // directory would do; /tmp is there on every system).
    let root = Path::new("/tmp");
    let root_c = cstr(root)?;
    mount(
        Some(c"passthroughfs-root"),
        &root_c,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"mode=0755,size=16k"),
    )
    .map_err(step("mounting the new root's tmpfs", "CAP_SYS_ADMIN"))?;
    for dir in ["source", "proc", "dev"] {
        std::fs::create_dir(root.join(dir))
            .map_err(|e| Failure(format!("--sandbox namespace: creating /{dir}: {e}")))?;
    }
    // /dev/fuse: serving threads clone their session's descriptor by
    // opening it; /dev/null: the background daemon's standard streams (a
    // bind of a node keeps its own mount's flags).
    for node in ["fuse", "null"] {
        let at = root.join("dev").join(node);
        std::fs::File::create(&at)
            .map_err(|e| Failure(format!("--sandbox namespace: creating /dev/{node}: {e}")))?;
        let host = cstr(&Path::new("/dev").join(node))?;
        mount(Some(&host), &cstr(&at)?, None, libc::MS_BIND, None).map_err(step(
            "binding a /dev node into the new root",
            "CAP_SYS_ADMIN",
        ))?;
    }
    let at = cstr(&root.join("source"))?;
    // SAFETY: a valid descriptor and paths; the result is checked.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            std::os::fd::AsRawFd::as_raw_fd(&tree),
            c"".as_ptr(),
            libc::AT_FDCWD,
            at.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        ) as libc::c_int
    })
    .map_err(step("attaching SOURCE in the new root", "CAP_SYS_ADMIN"))?;
    let proc_at = cstr(&root.join("proc"))?;
    // A new instance of this PID namespace's proc. In a user namespace
    // that doesn't own the PID namespace (a container, `cargo xtask
    // test-in-userns`) the kernel refuses that, and the host's /proc,
    // bound with its submounts (the kernel refuses to bind it without
    // them there), shows the same processes.
    mount(
        Some(c"proc"),
        &proc_at,
        Some(c"proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .or_else(|e| match e.raw_os_error() {
        Some(libc::EPERM) => mount(
            Some(c"/proc"),
            &proc_at,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        ),
        _ => Err(e),
    })
    .map_err(step("mounting /proc in the new root", "CAP_SYS_ADMIN"))?;
    std::env::set_current_dir(root)
        .map_err(|e| Failure(format!("--sandbox namespace: entering the new root: {e}")))?;
    // pivot_root(".", "."): the old root ends up on top of the new one,
    // then is detached.
    // SAFETY: valid paths; the results are checked.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as i32 })
        .map_err(step("pivot_root into the new root", "CAP_SYS_ADMIN"))?;
    // SAFETY: as above.
    check(unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) })
        .map_err(step("detaching the old root", "CAP_SYS_ADMIN"))?;
    std::env::set_current_dir("/")
        .map_err(|e| Failure(format!("--sandbox namespace: chdir /: {e}")))?;
    // Nothing more is to be made in the root itself.
    mount(
        None,
        c"/",
        None,
        libc::MS_REMOUNT
            | libc::MS_BIND
            | libc::MS_RDONLY
            | libc::MS_NOSUID
            | libc::MS_NODEV
            | libc::MS_NOEXEC,
        None,
    )
    .map_err(step("making the new root read-only", "CAP_SYS_ADMIN"))?;
    Ok(PathBuf::from(SOURCE_INSIDE))
}

/// `--sandbox chroot`: refused. The passthrough reaches files by their
/// `/proc/self/fd/N` paths for the calls that take only a path (chmod,
/// truncate, extended attributes, link) and reads callers' groups from
/// `/proc`; inside a `chroot(2)` into SOURCE those paths would name files
/// of SOURCE that a client controls. A chroot can't add a `/proc` without
/// a mount namespace, which is `namespace` mode.
pub fn chroot(_source: &Path) -> Result<(), Failure> {
    Err(Failure(
        "--sandbox chroot is not supported: the passthrough reaches files through \
         /proc/self/fd paths, which a chroot into SOURCE can't see (they would name files \
         in SOURCE instead); use --sandbox namespace, or --sandbox none with --landlock on \
         and --seccomp (see docs/security.md)"
            .into(),
    ))
}
