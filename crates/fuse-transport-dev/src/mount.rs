//! Mounting and unmounting a FUSE file system on Linux.
//!
//! [`Mount::new`] opens `/dev/fuse` and mounts it with `mount(2)` when the
//! process may do so (root, or `CAP_SYS_ADMIN` in a user namespace that owns
//! its mount namespace). When `mount(2)` is refused with `EPERM` it falls back
//! to the setuid helper `fusermount3` (package `fuse3`), which mounts on our
//! behalf and hands the `/dev/fuse` descriptor back over a Unix socket
//! (`SCM_RIGHTS`).
//!
//! This module does no FUSE protocol handling: the caller serves requests on
//! [`Mount::dev_fd`]. Right after mounting, the kernel queues a `FUSE_INIT`
//! request on that descriptor, and every access to the mount (`stat`,
//! `statfs`, ...) blocks until the daemon has answered it.
//!
//! Every descriptor this module creates has `O_CLOEXEC` set.

use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// `f_type` reported by `statfs(2)` for a FUSE file system.
pub const FUSE_SUPER_MAGIC: u32 = 0x6573_5546;

/// Name of the setuid mount helper from the `fuse3` package.
pub const FUSERMOUNT_PROGRAM: &str = "fusermount3";

/// Environment variable through which `fusermount3` learns the socket to send
/// the `/dev/fuse` descriptor on.
const COMMFD_ENV: &str = "_FUSE_COMMFD";

/// The FUSE device.
const DEV_FUSE: &CStr = c"/dev/fuse";

/// The kernel copies at most one page of mount data; longer strings are cut.
const MAX_MOUNT_DATA: usize = 4095;

/// Options of a FUSE mount.
///
/// `Default` gives `nosuid` and `nodev` set (as `fusermount3` always does for
/// unprivileged users) and everything else off.
///
/// String options are validated by [`Mount::new`]:
/// - `fsname` (the mount's source, shown in `/proc/self/mountinfo`) may contain
///   any character but NUL. A `,` or `\` in it is backslash-escaped for
///   `fusermount3`, which accepts that escape; `mount(2)` takes the source as a
///   separate argument, so no escaping is needed there.
/// - `subtype` and every `extra` entry must be non-empty and contain neither
///   `,` nor NUL (they are rejected with [`MountError::InvalidOption`]).
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Source of the mount (first field of `mount`'s output); `None` uses the
    /// subtype, or `"fuse"` without one.
    pub fsname: Option<String>,
    /// File system subtype: the mount's type becomes `fuse.<subtype>`.
    pub subtype: Option<String>,
    /// Let users other than the mounting one access the file system
    /// (`allow_other`; unprivileged users need `user_allow_other` in
    /// `/etc/fuse.conf`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the file mode
    /// (`default_permissions`).
    pub default_permissions: bool,
    /// Mount read-only (`MS_RDONLY` / `ro`).
    pub read_only: bool,
    /// Largest read request the kernel sends (`max_read=N`).
    pub max_read: Option<u32>,
    /// Ignore set-user-ID and set-group-ID bits (`MS_NOSUID`); default `true`.
    pub nosuid: bool,
    /// Do not interpret device nodes (`MS_NODEV`); default `true`.
    pub nodev: bool,
    /// Raw options passed through. With `mount(2)`, generic mount flags
    /// (`noexec`, `noatime`, `sync`, `dirsync`, `nosymfollow`, ...) become
    /// `MS_*` flags and the rest go into the kernel's FUSE option string;
    /// with `fusermount3` they are all passed on its `-o`. `auto_unmount`
    /// (unmount when the daemon dies) is a `fusermount3` feature, so it makes
    /// [`Mount::new`] use `fusermount3` directly. `fd=`, `rootmode=`,
    /// `user_id=`, `group_id=` (set by this module), `fsname=`, `subtype=`
    /// (use the fields) and `blkdev` (not supported) are rejected.
    pub extra: Vec<String>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: None,
            subtype: None,
            allow_other: false,
            default_permissions: false,
            read_only: false,
            max_read: None,
            nosuid: true,
            nodev: true,
            extra: Vec::new(),
        }
    }
}

/// How a [`Mount`] was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MountMethod {
    /// `mount(2)` called by this process (root, or `CAP_SYS_ADMIN` in a user
    /// namespace).
    Syscall,
    /// The setuid helper `fusermount3`, for unprivileged users.
    Fusermount,
}

impl fmt::Display for MountMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MountMethod::Syscall => "mount(2)",
            MountMethod::Fusermount => FUSERMOUNT_PROGRAM,
        })
    }
}

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

/// A mounted FUSE file system and its session `/dev/fuse` descriptor.
///
/// Dropping it unmounts the file system (errors are logged, never panic); the
/// descriptor is closed after that.
#[derive(Debug)]
pub struct Mount {
    fd: OwnedFd,
    mountpoint: PathBuf,
    method: MountMethod,
    mounted: bool,
    /// With `auto_unmount`, `fusermount3` stays alive until its socket closes.
    auto_unmount: Option<AutoUnmountHelper>,
}

/// The `fusermount3` process that unmounts when the socket closes.
#[derive(Debug)]
struct AutoUnmountHelper {
    socket: OwnedFd,
    child: Child,
}

impl Mount {
    /// Mounts a FUSE file system on `mountpoint` (canonicalized first).
    ///
    /// Tries `mount(2)`; if that is refused with `EPERM` (or `/dev/fuse` may
    /// not be opened), falls back to `fusermount3`. Options containing
    /// `auto_unmount` go to `fusermount3` directly.
    pub fn new(mountpoint: &Path, options: &MountOptions) -> Result<Mount, MountError> {
        options.validate()?;
        let target = Target::prepare(mountpoint)?;
        if options.has_extra("auto_unmount") {
            tracing::debug!(
                mountpoint = %target.path.display(),
                "auto_unmount requested: mounting with fusermount3"
            );
            return Self::with_fusermount(target, options, "mount with auto_unmount");
        }
        match mount_syscall(&target, options) {
            Ok(fd) => Ok(Mount::from_parts(
                fd,
                target.path,
                MountMethod::Syscall,
                None,
            )),
            Err(err) => match err.unprivileged_reason() {
                Some(action) => {
                    tracing::debug!(
                        mountpoint = %target.path.display(),
                        error = %err,
                        "mount(2) not permitted; falling back to fusermount3"
                    );
                    Self::with_fusermount(target, options, action)
                }
                None => Err(err),
            },
        }
    }

    /// Mounts with the given method only, without falling back.
    pub fn new_with_method(
        mountpoint: &Path,
        options: &MountOptions,
        method: MountMethod,
    ) -> Result<Mount, MountError> {
        options.validate()?;
        let target = Target::prepare(mountpoint)?;
        match method {
            MountMethod::Syscall => {
                if options.has_extra("auto_unmount") {
                    return Err(MountError::InvalidOption {
                        option: "auto_unmount".into(),
                        reason: "auto_unmount needs fusermount3; mount(2) cannot provide it".into(),
                    });
                }
                let fd = mount_syscall(&target, options)?;
                Ok(Mount::from_parts(
                    fd,
                    target.path,
                    MountMethod::Syscall,
                    None,
                ))
            }
            MountMethod::Fusermount => Self::with_fusermount(target, options, "mount"),
        }
    }

    fn with_fusermount(
        target: Target,
        options: &MountOptions,
        action: &'static str,
    ) -> Result<Mount, MountError> {
        let (fd, helper) = mount_fusermount(&target, options, action)?;
        Ok(Mount::from_parts(
            fd,
            target.path,
            MountMethod::Fusermount,
            helper,
        ))
    }

    fn from_parts(
        fd: OwnedFd,
        mountpoint: PathBuf,
        method: MountMethod,
        auto_unmount: Option<AutoUnmountHelper>,
    ) -> Mount {
        tracing::debug!(mountpoint = %mountpoint.display(), %method, "mounted FUSE file system");
        Mount {
            fd,
            mountpoint,
            method,
            mounted: true,
            auto_unmount,
        }
    }

    /// The session `/dev/fuse` descriptor to serve requests on.
    pub fn dev_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The canonical, absolute mountpoint.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// How the file system was mounted.
    pub fn method(&self) -> MountMethod {
        self.method
    }

    /// Unmounts the file system; calling it again after success does nothing.
    ///
    /// With [`MountMethod::Syscall`] a plain `umount2` is tried first and, if
    /// the mount is busy (`EBUSY`), a lazy one (`MNT_DETACH`). With
    /// [`MountMethod::Fusermount`] it runs `fusermount3 -u -z`. A mount that
    /// somebody else already unmounted counts as success. Reading the
    /// descriptor returns `ENODEV` once the file system is unmounted.
    pub fn unmount(&mut self) -> Result<(), MountError> {
        if !self.mounted {
            return Ok(());
        }
        let result = match self.method {
            MountMethod::Syscall => unmount_with_fallback(&self.mountpoint),
            MountMethod::Fusermount => {
                run_fusermount_unmount(&self.mountpoint, true).map_err(|err| {
                    // fusermount3 fails on a path that is no longer mounted.
                    match is_mount_point(&self.mountpoint) {
                        Ok(false) => MountError::NotMounted {
                            path: self.mountpoint.clone(),
                        },
                        _ => err,
                    }
                })
            }
        };
        match result {
            Ok(()) => {}
            Err(MountError::NotMounted { .. }) => {
                tracing::debug!(
                    mountpoint = %self.mountpoint.display(),
                    "already unmounted"
                );
            }
            Err(err) => return Err(err),
        }
        self.mounted = false;
        self.reap_auto_unmount_helper();
        tracing::debug!(mountpoint = %self.mountpoint.display(), "unmounted FUSE file system");
        Ok(())
    }

    /// Records that the file system is no longer mounted (the kernel said
    /// so: `ENODEV` on the device), without touching the mountpoint's path.
    pub(crate) fn forget_unmounted(&mut self) {
        if self.mounted {
            tracing::debug!(
                mountpoint = %self.mountpoint.display(),
                "unmounted from outside"
            );
        }
        self.mounted = false;
        self.reap_auto_unmount_helper();
    }

    /// Closes the `auto_unmount` helper's socket and, once the file system is
    /// unmounted, waits for the helper to exit. While still mounted the helper
    /// opens the mountpoint before unmounting it, which needs a serving daemon,
    /// so then it is left to finish on its own.
    fn reap_auto_unmount_helper(&mut self) {
        let Some(AutoUnmountHelper { socket, child }) = self.auto_unmount.take() else {
            return;
        };
        drop(socket);
        if self.mounted {
            tracing::debug!(
                mountpoint = %self.mountpoint.display(),
                "left the fusermount3 auto_unmount helper to unmount"
            );
            return;
        }
        match collect(child) {
            Ok((status, stderr)) => {
                if !status.success() || !stderr.is_empty() {
                    tracing::debug!(
                        mountpoint = %self.mountpoint.display(),
                        %status,
                        stderr = %stderr,
                        "fusermount3 auto_unmount helper exited"
                    );
                }
            }
            Err(err) => tracing::warn!(
                mountpoint = %self.mountpoint.display(),
                error = %err,
                "cannot wait for the fusermount3 auto_unmount helper"
            ),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(err) = self.unmount() {
            tracing::error!(
                mountpoint = %self.mountpoint.display(),
                error = %err,
                "failed to unmount FUSE file system"
            );
        }
        // If unmounting failed, closing the socket lets fusermount3 try.
        self.reap_auto_unmount_helper();
        // The /dev/fuse descriptor is closed after this; closing the last one
        // (the serving loop may hold clones) aborts the connection if the file
        // system is somehow still mounted.
    }
}

/// Unmounts whatever is mounted on `path`: `umount2(path)`, with `MNT_DETACH`
/// when `lazy`. A busy mount is not retried lazily. If `umount2` is refused
/// with `EPERM`, `fusermount3 -u` (`-z` when lazy) is tried.
pub fn unmount_path(path: &Path, lazy: bool) -> Result<(), MountError> {
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    match sys::umount2(path, flags) {
        Ok(()) => Ok(()),
        Err(err) if err.raw_os_error() == Some(libc::EPERM) => {
            tracing::debug!(
                path = %path.display(),
                "umount2 not permitted; trying fusermount3 -u"
            );
            run_fusermount_unmount(path, lazy)
        }
        Err(err) => Err(unmount_error(path, err)),
    }
}

/// Whether `path` is on a FUSE file system (`statfs(2)` `f_type` is
/// [`FUSE_SUPER_MAGIC`]).
///
/// On a live FUSE mount this sends `FUSE_STATFS` (after `FUSE_INIT`) and blocks
/// until the daemon answers; on a dead one it fails with `ENOTCONN`.
pub fn is_fuse_mount(path: &Path) -> io::Result<bool> {
    sys::statfs_is_fuse(path)
}

// ---------------------------------------------------------------------------
// Options

/// `MS_*` flags recognized in [`MountOptions::extra`] on the `mount(2)` path:
/// name, flag, whether the name sets (true) or clears it.
const FLAG_OPTIONS: &[(&str, libc::c_ulong, bool)] = &[
    ("ro", libc::MS_RDONLY, true),
    ("rw", libc::MS_RDONLY, false),
    ("nosuid", libc::MS_NOSUID, true),
    ("suid", libc::MS_NOSUID, false),
    ("nodev", libc::MS_NODEV, true),
    ("dev", libc::MS_NODEV, false),
    ("noexec", libc::MS_NOEXEC, true),
    ("exec", libc::MS_NOEXEC, false),
    ("sync", libc::MS_SYNCHRONOUS, true),
    ("async", libc::MS_SYNCHRONOUS, false),
    ("dirsync", libc::MS_DIRSYNC, true),
    ("noatime", libc::MS_NOATIME, true),
    ("atime", libc::MS_NOATIME, false),
    ("nodiratime", libc::MS_NODIRATIME, true),
    ("diratime", libc::MS_NODIRATIME, false),
    ("relatime", libc::MS_RELATIME, true),
    ("norelatime", libc::MS_RELATIME, false),
    ("strictatime", libc::MS_STRICTATIME, true),
    ("lazytime", libc::MS_LAZYTIME, true),
    ("nolazytime", libc::MS_LAZYTIME, false),
    ("nosymfollow", libc::MS_NOSYMFOLLOW, true),
    ("symfollow", libc::MS_NOSYMFOLLOW, false),
];

/// Options only `fusermount3`/libfuse understand, skipped on the `mount(2)`
/// path.
const HELPER_ONLY_OPTIONS: &[&str] = &["nonempty", "auto_unmount"];

fn invalid(option: impl Into<String>, reason: impl Into<String>) -> MountError {
    MountError::InvalidOption {
        option: option.into(),
        reason: reason.into(),
    }
}

impl MountOptions {
    /// Checks the string options (see the type's documentation).
    pub fn validate(&self) -> Result<(), MountError> {
        if let Some(fsname) = &self.fsname {
            let option = format!("fsname={fsname}");
            if fsname.is_empty() {
                return Err(invalid(option, "fsname must not be empty"));
            }
            if fsname.contains('\0') {
                return Err(invalid(option, "fsname must not contain a NUL byte"));
            }
        }
        if let Some(subtype) = &self.subtype {
            let option = format!("subtype={subtype}");
            if subtype.is_empty() {
                return Err(invalid(option, "subtype must not be empty"));
            }
            check_plain(&option, subtype, "subtype")?;
        }
        for extra in &self.extra {
            if extra.is_empty() {
                return Err(invalid(extra.clone(), "an extra option must not be empty"));
            }
            check_plain(extra, extra, "an extra option")?;
            let name = extra.split('=').next().unwrap_or(extra);
            match name {
                "fd" | "rootmode" | "user_id" | "group_id" => {
                    return Err(invalid(
                        extra.clone(),
                        format!("{name} is set by the mount code itself"),
                    ));
                }
                "fsname" | "subtype" => {
                    return Err(invalid(
                        extra.clone(),
                        format!("use MountOptions::{name} instead of an extra option"),
                    ));
                }
                "blkdev" => {
                    return Err(invalid(
                        extra.clone(),
                        "block-device FUSE mounts (fuseblk) are not supported",
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn has_extra(&self, name: &str) -> bool {
        self.extra.iter().any(|e| e == name)
    }

    /// The mount's source: fsname, else subtype, else `fuse`.
    fn source(&self) -> &str {
        self.fsname
            .as_deref()
            .or(self.subtype.as_deref())
            .unwrap_or("fuse")
    }

    fn fstype(&self) -> String {
        match &self.subtype {
            Some(subtype) => format!("fuse.{subtype}"),
            None => "fuse".to_owned(),
        }
    }

    /// `MS_*` flags and the kernel's FUSE option string for `mount(2)`.
    fn syscall_options(&self, fd: i32, rootmode: u32) -> (libc::c_ulong, String) {
        let mut flags: libc::c_ulong = 0;
        let mut set = |flag: libc::c_ulong, on: bool| {
            if on {
                flags |= flag;
            } else {
                flags &= !flag;
            }
        };
        set(libc::MS_NOSUID, self.nosuid);
        set(libc::MS_NODEV, self.nodev);
        set(libc::MS_RDONLY, self.read_only);
        let mut data = format!(
            "fd={fd},rootmode={rootmode:o},user_id={},group_id={}",
            sys::geteuid(),
            sys::getegid()
        );
        if self.default_permissions {
            data.push_str(",default_permissions");
        }
        if self.allow_other {
            data.push_str(",allow_other");
        }
        if let Some(max_read) = self.max_read {
            data.push_str(&format!(",max_read={max_read}"));
        }
        for extra in &self.extra {
            if let Some(&(_, flag, on)) = FLAG_OPTIONS.iter().find(|(n, _, _)| n == extra) {
                set(flag, on);
            } else if HELPER_ONLY_OPTIONS.contains(&extra.as_str()) {
                tracing::debug!(option = %extra, "option ignored by mount(2)");
            } else {
                data.push(',');
                data.push_str(extra);
            }
        }
        (flags, data)
    }

    /// The `-o` argument for `fusermount3`.
    fn fusermount_options(&self) -> String {
        let mut opts = vec![format!("fsname={}", escape_fusermount(self.source()))];
        if let Some(subtype) = &self.subtype {
            opts.push(format!("subtype={}", escape_fusermount(subtype)));
        }
        opts.push(if self.read_only { "ro" } else { "rw" }.to_owned());
        opts.push(if self.nosuid { "nosuid" } else { "suid" }.to_owned());
        opts.push(if self.nodev { "nodev" } else { "dev" }.to_owned());
        if self.default_permissions {
            opts.push("default_permissions".to_owned());
        }
        if self.allow_other {
            opts.push("allow_other".to_owned());
        }
        if let Some(max_read) = self.max_read {
            opts.push(format!("max_read={max_read}"));
        }
        opts.extend(self.extra.iter().cloned());
        opts.join(",")
    }
}

fn check_plain(option: &str, value: &str, what: &str) -> Result<(), MountError> {
    if value.contains(',') {
        return Err(invalid(
            option,
            format!("{what} must not contain ',' (it separates mount options)"),
        ));
    }
    if value.contains('\0') {
        return Err(invalid(
            option,
            format!("{what} must not contain a NUL byte"),
        ));
    }
    Ok(())
}

/// Backslash-escapes `\` and `,` the way `fusermount3` unescapes `fsname=` and
/// `subtype=` values.
fn escape_fusermount(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if c == '\\' || c == ',' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------
// Mountpoint checks

/// A checked mountpoint.
struct Target {
    /// Canonical absolute path.
    path: PathBuf,
    /// `st_mode & S_IFMT` of the mountpoint.
    rootmode: u32,
}

impl Target {
    fn prepare(mountpoint: &Path) -> Result<Target, MountError> {
        let meta = std::fs::metadata(mountpoint)
            .map_err(|err| classify_path_error(mountpoint, "access mountpoint", err))?;
        // stat can be answered from the attribute cache for a while after a
        // FUSE daemon died; statfs always asks the daemon, so a dead mount
        // fails it with ENOTCONN.
        is_fuse_mount(mountpoint)
            .map_err(|err| classify_path_error(mountpoint, "access mountpoint", err))?;
        if !meta.is_dir() {
            return Err(MountError::NotADirectory {
                path: mountpoint.to_owned(),
            });
        }
        let path = std::fs::canonicalize(mountpoint)
            .map_err(|err| classify_path_error(mountpoint, "canonicalize mountpoint", err))?;
        Ok(Target {
            path,
            rootmode: meta.mode() & libc::S_IFMT,
        })
    }
}

fn classify_path_error(path: &Path, action: &'static str, err: io::Error) -> MountError {
    let path = path.to_owned();
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => MountError::MountpointNotFound { path },
        Some(libc::ENOTCONN) => MountError::DeadMount { path },
        Some(libc::EACCES) | Some(libc::EPERM) => MountError::PermissionDenied {
            action,
            path,
            source: err,
        },
        _ => MountError::Io {
            action,
            path,
            source: err,
        },
    }
}

impl MountError {
    /// If this is `mount(2)` (or opening `/dev/fuse`) being refused for lack
    /// of privilege, so that `fusermount3` should be tried: what fusermount3
    /// is then needed for.
    fn unprivileged_reason(&self) -> Option<&'static str> {
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

// ---------------------------------------------------------------------------
// mount(2)

fn mount_syscall(target: &Target, options: &MountOptions) -> Result<OwnedFd, MountError> {
    let fd =
        sys::open_cloexec(DEV_FUSE, libc::O_RDWR).map_err(|source| MountError::OpenDevice {
            path: target.path.clone(),
            source,
        })?;
    let (flags, data) = options.syscall_options(fd.as_raw_fd(), target.rootmode);
    if data.len() > MAX_MOUNT_DATA {
        return Err(invalid(
            data.clone(),
            format!(
                "the option string is {} bytes, more than the kernel's limit of {MAX_MOUNT_DATA}",
                data.len()
            ),
        ));
    }
    let fstype = options.fstype();
    let mount_error = |source: io::Error| MountError::Mount {
        path: target.path.clone(),
        fstype: fstype.clone(),
        options: data.clone(),
        source,
    };
    // validate() ruled out NUL bytes in all three strings.
    let c_source = CString::new(options.source()).map_err(|e| mount_error(e.into()))?;
    let c_fstype = CString::new(fstype.as_str()).map_err(|e| mount_error(e.into()))?;
    let c_data = CString::new(data.as_str()).map_err(|e| mount_error(e.into()))?;
    sys::mount(&c_source, &target.path, &c_fstype, flags, &c_data).map_err(mount_error)?;
    Ok(fd)
}

/// `umount2` on our own canonical mountpoint: plain first, lazy if busy.
fn unmount_with_fallback(path: &Path) -> Result<(), MountError> {
    match sys::umount2(path, libc::UMOUNT_NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
            tracing::debug!(
                mountpoint = %path.display(),
                "mount is busy; unmounting lazily (MNT_DETACH)"
            );
            sys::umount2(path, libc::UMOUNT_NOFOLLOW | libc::MNT_DETACH)
                .map_err(|err| unmount_error(path, err))
        }
        Err(err) => Err(unmount_error(path, err)),
    }
}

fn unmount_error(path: &Path, err: io::Error) -> MountError {
    if err.raw_os_error() == Some(libc::EINVAL) {
        MountError::NotMounted {
            path: path.to_owned(),
        }
    } else {
        MountError::Unmount {
            path: path.to_owned(),
            source: err,
        }
    }
}

/// Whether `path` (canonical) is a mount point in this mount namespace,
/// according to `/proc/self/mountinfo` (which never touches the file system).
fn is_mount_point(path: &Path) -> io::Result<bool> {
    let mountinfo = std::fs::read("/proc/self/mountinfo")?;
    let wanted = path.as_os_str().as_bytes();
    Ok(mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .any(|field| unescape_mountinfo(field) == wanted))
}

/// Undoes the kernel's octal escapes (`\040` for a space) in a mountinfo field.
fn unescape_mountinfo(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|digits| field[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        if let Some(digits) = octal {
            let value = digits
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            out.push(value as u8);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------
// fusermount3

/// Looks `fusermount3` up in `PATH` (a standard `PATH` if it is unset).
fn find_fusermount() -> Option<PathBuf> {
    let path = std::env::var_os("PATH");
    let path = path.as_deref().unwrap_or(OsStr::new(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ));
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(FUSERMOUNT_PROGRAM))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

fn mount_fusermount(
    target: &Target,
    options: &MountOptions,
    action: &'static str,
) -> Result<(OwnedFd, Option<AutoUnmountHelper>), MountError> {
    let path = &target.path;
    let program = find_fusermount().ok_or_else(|| MountError::FusermountNotFound {
        action,
        path: path.clone(),
    })?;
    let auto_unmount = options.has_extra("auto_unmount");
    let io_error = |action: &'static str| {
        move |source| MountError::Io {
            action,
            path: path.clone(),
            source,
        }
    };
    let (ours, theirs) = sys::socketpair_cloexec()
        .map_err(io_error("create a socket pair for fusermount3 to mount"))?;
    // Keep the child's end away from the standard descriptors, which the
    // child's stdio setup overwrites.
    let theirs = if theirs.as_raw_fd() <= 2 {
        sys::dup_cloexec_min(theirs.as_fd(), 3)
            .map_err(io_error("duplicate the socket for fusermount3 to mount"))?
    } else {
        theirs
    };
    let theirs_raw = theirs.as_raw_fd();

    let mut command = Command::new(&program);
    command
        .arg("-o")
        .arg(options.fusermount_options())
        .arg("--")
        .arg(path)
        .env(COMMFD_ENV, theirs_raw.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // With auto_unmount the helper outlives this call; the pipe stays
        // open in its `Child` and is read when the helper is reaped.
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and only calls
    // fcntl(2), which is async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || sys::set_cloexec(theirs_raw, false));
    }
    let mut child = command
        .spawn()
        .map_err(|source| MountError::FusermountSpawn {
            program: program.clone(),
            action,
            path: path.clone(),
            source,
        })?;
    // Only the child may hold the other end now, so EOF means it exited.
    drop(theirs);

    let received = sys::recv_fd(ours.as_fd());
    match received {
        Ok(Some(fd)) if auto_unmount => Ok((
            fd,
            Some(AutoUnmountHelper {
                socket: ours,
                child,
            }),
        )),
        Ok(Some(fd)) => {
            match collect(child) {
                Ok((status, stderr)) if !status.success() => tracing::warn!(
                    mountpoint = %path.display(),
                    %status,
                    stderr = %stderr,
                    "fusermount3 sent a /dev/fuse descriptor but exited with an error"
                ),
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "cannot wait for fusermount3"),
            }
            Ok((fd, None))
        }
        Ok(None) => {
            let (status, stderr) =
                collect(child).map_err(io_error("wait for fusermount3 to mount"))?;
            if status.success() {
                Err(MountError::FusermountProtocol {
                    path: path.clone(),
                    reason: format!(
                        "it exited successfully without sending one (stderr: {stderr:?})"
                    ),
                })
            } else {
                Err(MountError::FusermountFailed {
                    program,
                    action,
                    path: path.clone(),
                    status,
                    stderr,
                })
            }
        }
        Err(err) => {
            let reason = format!("receiving it failed: {err}");
            // The helper may be stuck; it is of no use any more.
            let _ = child.kill();
            let _ = collect(child);
            // If it did mount, leave nothing behind.
            if let Err(e) = run_fusermount_unmount(path, true) {
                tracing::debug!(error = %e, "cleanup unmount after failed fusermount3");
            }
            Err(MountError::FusermountProtocol {
                path: path.clone(),
                reason,
            })
        }
    }
}

/// Waits for a child and returns its status and trimmed stderr.
fn collect(mut child: Child) -> io::Result<(ExitStatus, String)> {
    let mut stderr = Vec::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_end(&mut stderr)?;
    }
    let status = child.wait()?;
    Ok((status, String::from_utf8_lossy(&stderr).trim().to_owned()))
}

/// Runs `fusermount3 -u [-z] -- path`.
fn run_fusermount_unmount(path: &Path, lazy: bool) -> Result<(), MountError> {
    let action = "unmount";
    let program = find_fusermount().ok_or_else(|| MountError::FusermountNotFound {
        action,
        path: path.to_owned(),
    })?;
    let mut command = Command::new(&program);
    command.arg("-u");
    if lazy {
        command.arg("-z");
    }
    let output = command
        .arg("--")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| MountError::FusermountSpawn {
            program: program.clone(),
            action,
            path: path.to_owned(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(MountError::FusermountFailed {
            program,
            action,
            path: path.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

// ---------------------------------------------------------------------------
// Raw syscalls, each wrapped once.

mod sys {
    use std::ffi::{CStr, CString};
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn path_cstring(path: &Path) -> io::Result<CString> {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
    }

    fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret)
        }
    }

    pub(super) fn geteuid() -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    pub(super) fn getegid() -> u32 {
        // SAFETY: getegid has no preconditions and cannot fail.
        unsafe { libc::getegid() }
    }

    /// open(2) with `O_CLOEXEC` added.
    pub(super) fn open_cloexec(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        loop {
            // SAFETY: `path` is a valid NUL-terminated string.
            let ret = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
            match check(ret) {
                // SAFETY: open returned a new descriptor that nothing else owns.
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }

    pub(super) fn mount(
        source: &CStr,
        target: &Path,
        fstype: &CStr,
        flags: libc::c_ulong,
        data: &CStr,
    ) -> io::Result<()> {
        let target = path_cstring(target)?;
        // SAFETY: all pointers are valid NUL-terminated strings that outlive
        // the call; FUSE's mount data is a string.
        let ret = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                flags,
                data.as_ptr().cast(),
            )
        };
        check(ret).map(drop)
    }

    pub(super) fn umount2(target: &Path, flags: libc::c_int) -> io::Result<()> {
        let target = path_cstring(target)?;
        // SAFETY: `target` is a valid NUL-terminated string.
        check(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
    }

    pub(super) fn statfs_is_fuse(path: &Path) -> io::Result<bool> {
        let path = path_cstring(path)?;
        let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
        loop {
            // SAFETY: `path` is NUL-terminated and `buf` is writable and large
            // enough for a struct statfs.
            let ret = unsafe { libc::statfs(path.as_ptr(), buf.as_mut_ptr()) };
            match check(ret) {
                Ok(_) => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
        // SAFETY: statfs succeeded, so it filled in the whole struct.
        let buf = unsafe { buf.assume_init() };
        Ok(buf.f_type == libc::FUSE_SUPER_MAGIC)
    }

    /// A connected pair of Unix stream sockets, both `O_CLOEXEC`.
    pub(super) fn socketpair_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [-1 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair writes.
        check(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: socketpair succeeded and returned two new descriptors that
        // nothing else owns.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// `F_DUPFD_CLOEXEC`: a duplicate numbered at least `min`.
    pub(super) fn dup_cloexec_min(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: `fd` is a valid open descriptor for the call's duration.
        let new = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
        // SAFETY: fcntl returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    }

    /// Sets or clears `FD_CLOEXEC`. Async-signal-safe (used between fork and
    /// exec): it only calls fcntl(2) and builds errors without allocating.
    pub(super) fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
        // SAFETY: F_GETFD/F_SETFD only read and write the descriptor's flags;
        // an invalid `fd` gives EBADF.
        let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        // SAFETY: as above.
        check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags) }).map(drop)
    }

    /// Receives one descriptor sent with `SCM_RIGHTS` (made `O_CLOEXEC`).
    /// `Ok(None)` means the peer closed the socket without sending one.
    pub(super) fn recv_fd(sock: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: byte.len(),
        };
        // Room for a few descriptors, aligned for cmsghdr.
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data for which all-zero bytes are valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let received = loop {
            // SAFETY: `msg` points at `iov` and `control`, which are live and
            // writable for the lengths given.
            let ret = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if ret >= 0 {
                break ret;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };

        let mut fds = Vec::new();
        // SAFETY: `msg` was filled in by recvmsg; CMSG_FIRSTHDR/CMSG_NXTHDR
        // stay within msg_control/msg_controllen.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: `cmsg` is non-null and points at a header inside `control`.
            let header = unsafe { std::ptr::read_unaligned(cmsg) };
            if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
                // SAFETY: CMSG_LEN only computes a length.
                let data_len = (header.cmsg_len as usize)
                    .saturating_sub(unsafe { libc::CMSG_LEN(0) } as usize);
                let count = data_len / std::mem::size_of::<RawFd>();
                // SAFETY: the data of this header lies inside `control`.
                let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<RawFd>();
                for i in 0..count {
                    // SAFETY: `i < count` keeps the read inside this header's
                    // data; it may be unaligned.
                    let fd = unsafe { std::ptr::read_unaligned(data.add(i)) };
                    // SAFETY: the kernel installed this descriptor for us just
                    // now; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
            // SAFETY: as for CMSG_FIRSTHDR.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }

        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other("control message truncated"));
        }
        if fds.len() > 1 {
            tracing::debug!(count = fds.len(), "closing extra received descriptors");
        }
        let fd = fds.into_iter().next();
        if fd.is_none() && received > 0 {
            return Err(io::Error::other("a message arrived without a descriptor"));
        }
        Ok(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusermount_escaping() {
        assert_eq!(escape_fusermount("plain"), "plain");
        assert_eq!(escape_fusermount(r"a,b\c"), r"a\,b\\c");
    }

    #[test]
    fn mountinfo_unescaping() {
        assert_eq!(unescape_mountinfo(br"/a\040b\134c\011"), b"/a b\\c\t");
        assert_eq!(unescape_mountinfo(br"/x\04"), br"/x\04");
        assert_eq!(unescape_mountinfo(br"/x\9999"), br"/x\9999");
    }

    #[test]
    fn syscall_option_string_and_flags() {
        let options = MountOptions {
            allow_other: true,
            default_permissions: true,
            read_only: true,
            max_read: Some(4096),
            nodev: false,
            extra: vec!["noexec".into(), "nonempty".into(), "blksize=4096".into()],
            ..MountOptions::default()
        };
        let (flags, data) = options.syscall_options(7, libc::S_IFDIR);
        assert_eq!(
            data,
            format!(
                "fd=7,rootmode=40000,user_id={},group_id={},default_permissions,allow_other,\
                 max_read=4096,blksize=4096",
                sys::geteuid(),
                sys::getegid()
            )
        );
        assert_eq!(flags, libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC);
    }

    #[test]
    fn fusermount_option_string() {
        let options = MountOptions {
            fsname: Some("a,b".into()),
            subtype: Some("sub".into()),
            allow_other: true,
            max_read: Some(8192),
            extra: vec!["noatime".into()],
            ..MountOptions::default()
        };
        assert_eq!(
            options.fusermount_options(),
            r"fsname=a\,b,subtype=sub,rw,nosuid,nodev,allow_other,max_read=8192,noatime"
        );
        let default = MountOptions::default();
        assert_eq!(default.fusermount_options(), "fsname=fuse,rw,nosuid,nodev");
        assert_eq!(default.fstype(), "fuse");
        let sub = MountOptions {
            subtype: Some("x".into()),
            ..MountOptions::default()
        };
        assert_eq!(sub.source(), "x");
        assert_eq!(sub.fstype(), "fuse.x");
    }
}
