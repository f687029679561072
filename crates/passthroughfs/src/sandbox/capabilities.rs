//! Capabilities: only those serving uses stay (docs/security.md lists
//! each with why).

use crate::Failure;
use caps::{CapSet, Capability, CapsHashSet};

/// The capabilities a serving root daemon uses, each with why.
pub const KEPT: &[(Capability, &str)] = &[
    (
        Capability::CAP_CHOWN,
        "creating files as the caller and SETATTR of owners (chown, fchownat)",
    ),
    (
        Capability::CAP_DAC_OVERRIDE,
        "reaching files whatever their mode: the kernel (default_permissions) or the caller's \
         identity checks access, the daemon serves every caller",
    ),
    (
        Capability::CAP_DAC_READ_SEARCH,
        "open_by_handle_at (inodes held by file handle) and lookups in directories the \
         daemon may not search",
    ),
    (
        Capability::CAP_FOWNER,
        "utimensat, chmod and xattrs on files the daemon doesn't own, O_NOATIME",
    ),
    (
        Capability::CAP_FSETID,
        "keeping set-user/group-ID bits as the caller asked (chmod, writes)",
    ),
    (
        Capability::CAP_SETUID,
        "setfsuid to each caller's user id (files created with the caller's owner)",
    ),
    (
        Capability::CAP_SETGID,
        "setfsgid and setgroups to each caller's group ids",
    ),
    (Capability::CAP_MKNOD, "MKNOD of device nodes"),
    (
        Capability::CAP_SETFCAP,
        "SETXATTR of security.capability (file capabilities)",
    ),
    (
        Capability::CAP_LINUX_IMMUTABLE,
        "FS_IOC_SETFLAGS of the immutable and append-only flags",
    ),
    (
        Capability::CAP_SYS_ADMIN,
        "trusted.* xattrs, FUSE_DEV_IOC_BACKING_OPEN (kernel passthrough), fanotify (the \
         source watch), and the unmount at the end when there is no unmounter",
    ),
    (
        Capability::CAP_IPC_LOCK,
        "io_uring's registered buffers and rings pinned without counting against \
         RLIMIT_MEMLOCK",
    ),
];

/// Drops every capability not in [`KEPT`] from the effective, permitted,
/// inheritable and bounding sets and clears the ambient set (calling
/// thread only: call it before other threads start).
pub fn drop_unused() -> Result<(), Failure> {
    let kept: CapsHashSet = KEPT.iter().map(|(c, _)| *c).collect();
    let fail = |what: &str, e: caps::errors::CapsError| {
        Failure(format!("dropping capabilities ({what}): {e}"))
    };
    for cap in caps::all() {
        if !kept.contains(&cap) {
            // The bounding set needs CAP_SETPCAP; without it (not root)
            // there is nothing in it worth dropping to an exec we never do.
            if let Err(e) = caps::drop(None, CapSet::Bounding, cap) {
                if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false)
                {
                    return Err(fail("bounding", e));
                }
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("ambient", e))?;
    let permitted = caps::read(None, CapSet::Permitted).map_err(|e| fail("reading", e))?;
    let keep: CapsHashSet = permitted.intersection(&kept).copied().collect();
    caps::set(None, CapSet::Inheritable, &CapsHashSet::new())
        .map_err(|e| fail("inheritable", e))?;
    caps::set(None, CapSet::Effective, &keep).map_err(|e| fail("effective", e))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(|e| fail("permitted", e))?;
    tracing::debug!(kept = ?keep, "capabilities dropped");
    Ok(())
}
