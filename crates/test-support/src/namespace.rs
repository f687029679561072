//! A mount namespace of a test thread's own, and bind mounts in it: for
//! tests that rearrange `/dev` or hide a directory without touching what
//! the rest of the machine sees.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Gives the calling thread a mount namespace of its own
/// (`unshare(CLONE_NEWNS)`, which unshares its fs too) in which every
/// mount is private: what it mounts from then on is seen by it, and the
/// processes it starts, alone. Fails the test, with the errno, if it can't.
pub fn unshare_mount_namespace() {
    // SAFETY: unshare takes only flags; it changes this thread alone.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNS) };
    assert_eq!(rc, 0, "unshare: {}", std::io::Error::last_os_error());
    // SAFETY: valid NUL-terminated strings and null optional arguments;
    // MS_REC|MS_PRIVATE changes only the propagation of this namespace.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    assert_eq!(
        rc,
        0,
        "making / private: {}",
        std::io::Error::last_os_error()
    );
}

/// Bind-mounts `from` onto `to` (with what is mounted below `from` too
/// when `recursive`); fails the test, with both paths and the errno, if
/// it can't.
pub fn bind_mount(from: &Path, to: &Path, recursive: bool) {
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("a path without NUL");
    let (cfrom, cto) = (c(from), c(to));
    let flags = if recursive {
        libc::MS_BIND | libc::MS_REC
    } else {
        libc::MS_BIND
    };
    // SAFETY: NUL-terminated paths and null optional arguments.
    let rc = unsafe {
        libc::mount(
            cfrom.as_ptr(),
            cto.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    assert_eq!(
        rc,
        0,
        "bind-mounting {} onto {}: {}",
        from.display(),
        to.display(),
        std::io::Error::last_os_error()
    );
}
