//! [`MountError`].

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Errors from mounting and unmounting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// A mount option is malformed or not allowed.
    #[error("invalid mount option {option:?}: {reason}")]
    InvalidOption {
        /// The offending option (or field name and value).
        option: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The mountpoint does not exist.
    #[error("mountpoint {} does not exist", path.display())]
    MountpointNotFound {
        /// The mountpoint as given.
        path: PathBuf,
    },
    /// The mountpoint is not a directory.
    #[error("mountpoint {} is not a directory", path.display())]
    NotADirectory {
        /// The mountpoint as given.
        path: PathBuf,
    },
    /// The mountpoint is a FUSE mount whose daemon is gone (`ENOTCONN`).
    #[error(
        "mountpoint {} is a dead FUSE mount (its daemon exited); unmount it with `umount -l {}`",
        path.display(),
        path.display()
    )]
    DeadMount {
        /// The mountpoint as given.
        path: PathBuf,
    },
    /// Access to a path was denied.
    #[error("permission denied while trying to {action} {}: {source}", path.display())]
    PermissionDenied {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Some other I/O error while preparing or checking a path.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `/dev/fuse` could not be opened.
    #[error("cannot open /dev/fuse to mount {}: {source}", path.display())]
    OpenDevice {
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `mount(2)` failed.
    #[error(
        "mount(2) of {fstype} on {} with options \"{options}\" failed: {source}",
        path.display()
    )]
    Mount {
        /// The mountpoint.
        path: PathBuf,
        /// The file system type passed (`fuse` or `fuse.<subtype>`).
        fstype: String,
        /// The option string passed.
        options: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Synchronous INIT: the file system answered the kernel's INIT with
    /// an error, and mount(2) failed (the kernel reports `ENOTCONN`, not
    /// the answer's errno, which `source` keeps).
    #[error(
        "the file system refused the kernel's INIT for {}: {source} (mount(2) failed: {mount_error})",
        path.display()
    )]
    InitRefused {
        /// The mountpoint.
        path: PathBuf,
        /// The error INIT was answered with.
        source: io::Error,
        /// mount(2)'s own error.
        mount_error: io::Error,
    },
    /// `fusermount3` is needed but not found in `PATH`.
    #[error(
        "fusermount3 not installed (apt-get install fuse3): it was not found in PATH and is needed to {action} (mountpoint {})",
        path.display()
    )]
    FusermountNotFound {
        /// What it was needed for.
        action: &'static str,
        /// The mountpoint.
        path: PathBuf,
    },
    /// `fusermount3` could not be started.
    #[error("cannot run {} to {action} (mountpoint {}): {source}", program.display(), path.display())]
    FusermountSpawn {
        /// The program that was run.
        program: PathBuf,
        /// What it was run for.
        action: &'static str,
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `fusermount3` ran and failed.
    #[error("{} failed to {action} (mountpoint {}, {status}): {stderr}", program.display(), path.display())]
    FusermountFailed {
        /// The program that was run.
        program: PathBuf,
        /// What it was run for.
        action: &'static str,
        /// The mountpoint.
        path: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// What it wrote to standard error (trimmed).
        stderr: String,
    },
    /// This user may not open `/dev/fuse`: its mode lets only root (or its
    /// owner or group) read and write it. Neither `mount(2)` nor
    /// `fusermount3` can then mount: `fusermount3` is setuid root but opens
    /// the device as the calling user. Common where `/dev/fuse` was made
    /// without the `fuse3` package's udev rule (containers, minimal
    /// images), which would make it 0666.
    #[error(
        "cannot mount {}: /dev/fuse is mode {mode:04o}, so {} (fusermount3 opens it as the \
         calling user); let every user open it with `chmod 0666 /dev/fuse` as root (the mode \
         the fuse3 package's udev rule sets), or mount as root [{fusermount}]",
        path.display(),
        who_cannot_open(*mode, *owner, *group)
    )]
    DevicePermission {
        /// The mountpoint.
        path: PathBuf,
        /// The permission bits of `/dev/fuse`.
        mode: u32,
        /// Its owner's uid.
        owner: u32,
        /// Its group's gid.
        group: u32,
        /// What `fusermount3` wrote to standard error (trimmed).
        fusermount: String,
    },
    /// `fusermount3` did not hand over a `/dev/fuse` descriptor as expected.
    #[error("fusermount3 did not hand over a /dev/fuse descriptor for {}: {reason}", path.display())]
    FusermountProtocol {
        /// The mountpoint.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The path to unmount is not a mount point (`umount2` gave `EINVAL`).
    #[error(
        "cannot unmount {}: it is not a mount point (or not one this mount namespace may unmount)",
        path.display()
    )]
    NotMounted {
        /// The path.
        path: PathBuf,
    },
    /// `umount2(2)` failed.
    #[error("unmounting {} failed: {source}", path.display())]
    Unmount {
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Who may not open a device of `mode` owned by `owner` and `group`
/// (root always may).
fn who_cannot_open(mode: u32, owner: u32, group: u32) -> String {
    let owner_rw = mode & 0o600 == 0o600 && owner != 0;
    match (owner_rw, mode & 0o060 == 0o060) {
        (false, false) => "users other than root cannot open it".to_string(),
        (true, false) => format!("users other than root and uid {owner} cannot open it"),
        (false, true) => {
            format!("users other than root and the members of group {group} cannot open it")
        }
        (true, true) => format!(
            "users other than root, uid {owner} and the members of group {group} cannot open it"
        ),
    }
}

impl MountError {
    /// If this is `mount(2)` (or opening `/dev/fuse`) being refused for lack
    /// of privilege, so that `fusermount3` should be tried: what fusermount3
    /// is then needed for.
    pub(super) fn unprivileged_reason(&self) -> Option<&'static str> {
        match self {
            MountError::Mount { source, .. } if source.raw_os_error() == Some(libc::EPERM) => {
                Some("mount without privileges, since mount(2) was refused with EPERM")
            }
            MountError::OpenDevice { source, .. }
                if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
            {
                Some("mount without privileges, since /dev/fuse may not be opened")
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_permission_says_what_to_change() {
        let err = MountError::DevicePermission {
            path: "/mnt/x".into(),
            mode: 0o600,
            owner: 0,
            group: 0,
            fusermount: "fusermount3: failed to open /dev/fuse: Permission denied".into(),
        };
        assert_eq!(
            err.to_string(),
            "cannot mount /mnt/x: /dev/fuse is mode 0600, so users other than root cannot \
             open it (fusermount3 opens it as the calling user); let every user open it with \
             `chmod 0666 /dev/fuse` as root (the mode the fuse3 package's udev rule sets), or \
             mount as root [fusermount3: failed to open /dev/fuse: Permission denied]"
        );
        assert_eq!(
            who_cannot_open(0o660, 0, 107),
            "users other than root and the members of group 107 cannot open it"
        );
        assert_eq!(
            who_cannot_open(0o600, 1000, 1000),
            "users other than root and uid 1000 cannot open it"
        );
    }
}
