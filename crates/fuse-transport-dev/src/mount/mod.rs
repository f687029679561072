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
//! [`Mount::dev_fd`]. With [`Mount::new`], right after mounting, the kernel
//! queues a `FUSE_INIT` request on that descriptor, and every access to the
//! mount (`stat`, `statfs`, ...) blocks until the daemon has answered it.
//!
//! ## Synchronous INIT
//!
//! [`Mount::new_with_sync_init`] asks for the kernel's synchronous INIT
//! (`FUSE_DEV_IOC_SYNC_INIT`, Linux 6.18) before mount(2): the kernel then
//! sends INIT from inside mount(2), which returns only once INIT is
//! answered, with the mount usable, or fails with the error INIT was
//! answered with. Since the calling thread is inside mount(2), the caller's
//! [`SyncInit::answer`] reads and answers INIT on a thread of its own. A
//! kernel without the ioctl (`ENOTTY`), and a mount through `fusermount3`
//! (which opens its own descriptor), take the old path: INIT arrives after
//! the mount, and the caller answers it as with [`Mount::new`].
//!
//! Every descriptor this module creates has `O_CLOEXEC` set.

mod error;
mod fusermount;
mod mountinfo;
mod options;
mod sys;
mod watcher;

pub use error::MountError;
pub use options::MountOptions;

use fusermount::{collect, mount_fusermount, run_fusermount_unmount, AutoUnmountHelper};
use mountinfo::is_mount_point;
use options::invalid;
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;
use watcher::UnmountWatcher;

/// `f_type` reported by `statfs(2)` for a FUSE file system.
pub const FUSE_SUPER_MAGIC: u32 = 0x6573_5546;

/// Name of the setuid mount helper from the `fuse3` package.
pub const FUSERMOUNT_PROGRAM: &str = "fusermount3";

/// The FUSE device.
const DEV_FUSE: &CStr = c"/dev/fuse";

/// The kernel copies at most one page of mount data; longer strings are cut.
const MAX_MOUNT_DATA: usize = 4095;

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
    /// With `auto_unmount` on a `mount(2)` mount: the watcher process.
    watcher: Option<UnmountWatcher>,
    /// The mount's id (`STATX_MNT_ID`, as `/proc/self/mountinfo` lists
    /// it), read when it was made or adopted; `None` if the kernel didn't
    /// say.
    mount_id: Option<u64>,
    /// The kernel ended the connection (`ENODEV` on the device): unmounted,
    /// or aborted with the mount left in place ([`Mount::connection_ended`]).
    ended: bool,
    /// Set by [`Mount::unmount_through`]: what unmounts instead of this
    /// process.
    unmounter: Option<Unmounter>,
}

/// An unmount done by someone else for this process (see
/// [`Mount::unmount_through`]).
pub type UnmountFn = Box<dyn FnMut() -> io::Result<()> + Send>;

struct Unmounter(UnmountFn);

/// How [`Mount::new_with_sync_init`] answers the kernel's INIT while
/// mount(2) waits for it.
pub struct SyncInit<'a> {
    /// Reads requests on the session descriptor and answers them until
    /// INIT is answered, saying whether INIT was accepted. It runs on a
    /// thread of its own while the calling thread is in mount(2), and must
    /// return once its flag is set: then mount(2) failed before the kernel
    /// sent INIT, and its `read(2)` is interrupted by
    /// [`SyncInit::wake_signal`] (it sees `EINTR`). An error it returns is
    /// logged; mount(2)'s own result decides, except that a failed mount
    /// after [`InitAnswer::Refused`] is [`MountError::InitRefused`].
    pub answer: &'a (dyn Fn(BorrowedFd<'_>, &AtomicBool) -> io::Result<InitAnswer> + Sync),
    /// A signal with a do-nothing handler installed without `SA_RESTART`
    /// and not blocked in the calling thread (the answering thread inherits
    /// its mask): what interrupts the answering thread's `read(2)`.
    pub wake_signal: i32,
}

/// How [`SyncInit::answer`] answered INIT.
#[derive(Debug)]
pub enum InitAnswer {
    /// With the file system's agreement.
    Accepted,
    /// With this error.
    Refused(io::Error),
}

/// Whether INIT was answered during mount(2) ([`Mount::new_with_sync_init`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitMode {
    /// Synchronous INIT: answered by [`SyncInit::answer`] before mount(2)
    /// returned; the mount is usable.
    Answered,
    /// The old path (a kernel without `FUSE_DEV_IOC_SYNC_INIT`, or a mount
    /// through `fusermount3`): INIT waits on the descriptor for the caller.
    Pending,
}

impl std::fmt::Debug for Unmounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unmounter")
    }
}

impl Mount {
    /// Mounts a FUSE file system on `mountpoint` (canonicalized first).
    ///
    /// Tries `mount(2)`; if that is refused with `EPERM` (or `/dev/fuse` may
    /// not be opened), falls back to `fusermount3`. With `auto_unmount` in
    /// the options, a `mount(2)` mount gets a watcher process that detaches
    /// it if this process dies without unmounting (see `watcher.rs`);
    /// through `fusermount3`, that program stays to do the same.
    /// `fusermount3` opens `/dev/fuse` as the calling user, so where its
    /// mode keeps other users out (0600, without the `fuse3` package's udev
    /// rule) nobody but root can mount: that is
    /// [`MountError::DevicePermission`], which says what to change.
    pub fn new(mountpoint: &Path, options: &MountOptions) -> Result<Mount, MountError> {
        options.validate()?;
        let target = Target::prepare(mountpoint)?;
        match mount_syscall(&target, options) {
            Ok(fd) => Mount::syscall_mounted(fd, target.path, options),
            Err(err) => Self::fusermount_instead(target, options, err, ""),
        }
    }

    /// [`Mount::new`] with synchronous INIT where the kernel offers it (see
    /// the module docs): `init` answers INIT while mount(2) runs, so the
    /// mount returned is usable, and an INIT answered with an error fails
    /// the mount with that error ([`MountError::Mount`]). Whether the
    /// kernel offers it is learnt from the ioctl's answer, not from its
    /// version; where it doesn't (or the mount goes through `fusermount3`),
    /// the result says [`InitMode::Pending`] and the caller answers INIT
    /// as after [`Mount::new`].
    pub fn new_with_sync_init(
        mountpoint: &Path,
        options: &MountOptions,
        init: &SyncInit<'_>,
    ) -> Result<(Mount, InitMode), MountError> {
        options.validate()?;
        let target = Target::prepare(mountpoint)?;
        match mount_syscall_sync(&target, options, init) {
            Ok((fd, mode)) => Ok((Mount::syscall_mounted(fd, target.path, options)?, mode)),
            Err(err) => {
                let mount =
                    Self::fusermount_instead(target, options, err, " (INIT after the mount)")?;
                Ok((mount, InitMode::Pending))
            }
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
                let fd = mount_syscall(&target, options)?;
                Mount::syscall_mounted(fd, target.path, options)
            }
            MountMethod::Fusermount => Self::with_fusermount(target, options, "mount"),
        }
    }

    /// A `mount(2)` mount, with its `auto_unmount` watcher if asked for
    /// (if the watcher can't start, the mount is undone and that is the
    /// error).
    fn syscall_mounted(
        fd: OwnedFd,
        path: PathBuf,
        options: &MountOptions,
    ) -> Result<Mount, MountError> {
        let mut mount = Mount::from_parts(fd, path, MountMethod::Syscall, None);
        if options.has_extra("auto_unmount") {
            match UnmountWatcher::spawn(&mount.mountpoint) {
                Ok(watcher) => mount.watcher = Some(watcher),
                Err(source) => {
                    let path = mount.mountpoint.clone();
                    drop(mount);
                    return Err(MountError::Io {
                        action: "start the auto_unmount watcher",
                        path,
                        source,
                    });
                }
            }
        }
        Ok(mount)
    }

    /// What [`Mount::new`] and [`Mount::new_with_sync_init`] do when
    /// mount(2) failed with `err`: mount with `fusermount3` where `err`
    /// says the caller may not mount (logged, with `note` after the
    /// message), else return `err`.
    fn fusermount_instead(
        target: Target,
        options: &MountOptions,
        err: MountError,
        note: &str,
    ) -> Result<Mount, MountError> {
        let Some(action) = err.unprivileged_reason() else {
            return Err(err);
        };
        tracing::debug!(
            mountpoint = %target.path.display(),
            error = %err,
            "mount(2) not permitted; falling back to fusermount3{note}"
        );
        Self::with_fusermount(target, options, action)
    }

    fn with_fusermount(
        target: Target,
        options: &MountOptions,
        action: &'static str,
    ) -> Result<Mount, MountError> {
        let (fd, helper) = mount_fusermount(&target, options, action)
            .map_err(|err| explain_fusermount_failure(&target.path, err))?;
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
        let mount_id = mount_id_of(&mountpoint);
        Mount {
            fd,
            mountpoint,
            method,
            mounted: true,
            auto_unmount,
            watcher: None,
            mount_id,
            ended: false,
            unmounter: None,
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
        if self.ended && self.unmounter.is_none() {
            if !self.still_in_table() {
                self.forget_unmounted();
                return Ok(());
            }
            self.aborted_warning();
        }
        let result = match self.unmounter.as_mut() {
            Some(Unmounter(unmount)) => unmount().map_err(|source| match source.raw_os_error() {
                Some(libc::EINVAL | libc::ENOENT) => MountError::NotMounted {
                    path: self.mountpoint.clone(),
                },
                _ => MountError::Io {
                    action: "unmount (through the unmounter)",
                    path: self.mountpoint.clone(),
                    source,
                },
            }),
            None => self.unmount_here(self.method),
        };
        match result {
            // (The unmounter unmounts only a mount that is still this one.)
            Ok(()) if self.ended && self.unmounter.is_some() => self.aborted_warning(),
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
        if let Some(mut watcher) = self.watcher.take() {
            watcher.unmounted();
        }
        tracing::debug!(mountpoint = %self.mountpoint.display(), "unmounted FUSE file system");
        Ok(())
    }

    /// Has `unmount` call `unmount` from now on instead of unmounting
    /// itself (which must fail with `ENOENT` or `EINVAL` when the path no
    /// longer holds this mount): for a process confined where it can't reach its mountpoint
    /// (a private mount namespace, Landlock, a seccomp filter without
    /// `fusermount3`'s exec), which hands the unmount to a helper outside.
    pub fn unmount_through(&mut self, unmount: UnmountFn) {
        self.unmounter = Some(Unmounter(unmount));
    }

    /// This process's own unmount by `method`.
    fn unmount_here(&self, method: MountMethod) -> Result<(), MountError> {
        match method {
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
        }
    }

    /// Whether [`Mount::release`] would give the mount up (no
    /// `auto_unmount` helper).
    pub fn can_release(&self) -> bool {
        self.auto_unmount.is_none() && self.watcher.is_none()
    }

    /// Gives up the mount without unmounting it: the session descriptor,
    /// for a process that takes the connection over (live upgrade; see
    /// `crate::takeover`). The mount stays as long as any descriptor of
    /// the connection is open. Refused for a mount with `auto_unmount`,
    /// whose helper would unmount it once this process is gone.
    ///
    /// On an error the mount is still this one's (and unmounts when
    /// dropped, as before); once released, dropping it does nothing.
    pub fn release(&mut self) -> io::Result<OwnedFd> {
        if !self.can_release() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a mount with auto_unmount can't be handed over: its helper would unmount it \
                 when this process exits",
            ));
        }
        let fd = self.fd.try_clone()?;
        self.mounted = false;
        Ok(fd)
    }

    /// A mount made by another process (or an earlier session of this
    /// one) that hands over its session descriptor `fd` for `mountpoint`:
    /// it unmounts like one made here.
    pub fn adopt(fd: OwnedFd, mountpoint: PathBuf) -> Mount {
        let mount_id = mount_id_of(&mountpoint);
        Mount {
            fd,
            mountpoint,
            method: MountMethod::Syscall,
            mounted: true,
            auto_unmount: None,
            watcher: None,
            mount_id,
            ended: false,
            unmounter: None,
        }
    }

    /// The transport read `ENODEV`: the kernel ended the connection,
    /// either because the file system was unmounted (by us or from
    /// outside) or because it aborted the connection (a request past the
    /// negotiated request timeout, or fusectl's abort) and left a dead
    /// mount that answers `ENOTCONN`. [`Mount::unmount`] then unmounts
    /// only a mount that is still this one (by mount id: whatever is
    /// mounted on the path now may be somebody else's), and says when
    /// the kernel aborted it.
    pub(crate) fn connection_ended(&mut self) {
        self.ended = true;
    }

    fn aborted_warning(&self) {
        tracing::warn!(
            mountpoint = %self.mountpoint.display(),
            "the kernel aborted the connection (a request went unanswered past the \
             request timeout, or fusectl's abort): unmounting its dead mount"
        );
    }

    fn still_in_table(&self) -> bool {
        let Some(id) = self.mount_id else {
            return false;
        };
        mountinfo::is_fuse_mount(id, &self.mountpoint).unwrap_or(false)
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
        if let Some(mut watcher) = self.watcher.take() {
            watcher.unmounted();
        }
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
// Mountpoint checks

/// A checked mountpoint.
pub(super) struct Target {
    /// Canonical absolute path.
    pub(super) path: PathBuf,
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

/// A failed `fusermount3` explained: when the mode of `/dev/fuse` is why
/// (fusermount3 opens it as the calling user, so it fails just as this
/// process does), [`MountError::DevicePermission`], which says what to
/// change; any other error as it is.
fn explain_fusermount_failure(path: &Path, err: MountError) -> MountError {
    let MountError::FusermountFailed { stderr, .. } = &err else {
        return err;
    };
    match device_mode_refusal() {
        Some((mode, owner, group)) => MountError::DevicePermission {
            path: path.to_owned(),
            mode,
            owner,
            group,
            fusermount: stderr.clone(),
        },
        None => err,
    }
}

/// The permission bits, owner and group of `/dev/fuse`, if this process
/// may not open it and its mode is why (others may not read and write it).
fn device_mode_refusal() -> Option<(u32, u32, u32)> {
    let refused = sys::open_cloexec(DEV_FUSE, libc::O_RDWR).err()?;
    if !matches!(refused.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
        return None;
    }
    let meta = std::fs::metadata("/dev/fuse").ok()?;
    let mode = meta.mode() & 0o7777;
    (mode & 0o006 != 0o006).then_some((mode, meta.uid(), meta.gid()))
}

// ---------------------------------------------------------------------------
// mount(2)

fn mount_syscall(target: &Target, options: &MountOptions) -> Result<OwnedFd, MountError> {
    let fd = open_device(target)?;
    mount_fd(target, options, &fd)?;
    Ok(fd)
}

fn open_device(target: &Target) -> Result<OwnedFd, MountError> {
    sys::open_cloexec(DEV_FUSE, libc::O_RDWR).map_err(|source| MountError::OpenDevice {
        path: target.path.clone(),
        source,
    })
}

/// mount(2) with synchronous INIT if the kernel takes
/// `FUSE_DEV_IOC_SYNC_INIT`, else as [`mount_syscall`].
fn mount_syscall_sync(
    target: &Target,
    options: &MountOptions,
    init: &SyncInit<'_>,
) -> Result<(OwnedFd, InitMode), MountError> {
    let fd = open_device(target)?;
    if let Err(err) = sys::sync_init(fd.as_fd()) {
        // ENOTTY: a kernel before 6.18. Anything else: take the old path too.
        tracing::debug!(
            error = %err,
            "no synchronous INIT (FUSE_DEV_IOC_SYNC_INIT refused); INIT after the mount"
        );
        mount_fd(target, options, &fd)?;
        return Ok((fd, InitMode::Pending));
    }
    let stop = AtomicBool::new(false);
    let tid = AtomicI32::new(0);
    // The answering thread logs where the calling thread does (a caller
    // may have set a subscriber for this thread only).
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    let mounted = std::thread::scope(|scope| {
        let answering = std::thread::Builder::new()
            .name("fuse-sync-init".into())
            .spawn_scoped(scope, || {
                tid.store(sys::gettid(), Ordering::Release);
                tracing::dispatcher::with_default(&dispatch, || (init.answer)(fd.as_fd(), &stop))
            })
            .map_err(|source| MountError::Io {
                action: "start the thread that answers INIT",
                path: target.path.clone(),
                source,
            })?;
        let mounted = mount_fd(target, options, &fd);
        if mounted.is_err() {
            // mount(2) failed before INIT was sent (the answering thread
            // waits in read(2) for a connection that will never be) or
            // after INIT was refused (its read then ends with ENODEV):
            // stop it, interrupting its read until it has returned (a
            // signal sent just before it enters read(2) is lost, hence
            // the repeats).
            stop.store(true, Ordering::Release);
            while !answering.is_finished() {
                let id = tid.load(Ordering::Acquire);
                if id != 0 {
                    let _ = sys::tgkill(id, init.wake_signal);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let refused = match answering.join() {
            Ok(Ok(InitAnswer::Accepted)) => None,
            Ok(Ok(InitAnswer::Refused(err))) => Some(err),
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "answering INIT during mount(2)");
                None
            }
            Err(_) => {
                tracing::error!("the thread answering INIT panicked");
                None
            }
        };
        match (mounted, refused) {
            (Err(MountError::Mount { source, .. }), Some(refusal)) => {
                Err(MountError::InitRefused {
                    path: target.path.clone(),
                    source: refusal,
                    mount_error: source,
                })
            }
            (mounted, _) => mounted,
        }
    });
    // A joined thread can still be listed in /proc/self/task: join returns
    // once the kernel cleared its thread id, before the task has finished
    // exiting. A caller that confines itself next (unshare, Landlock) checks
    // it is alone: wait until the thread has left.
    wait_until_thread_left(tid.load(Ordering::Acquire));
    mounted?;
    Ok((fd, InitMode::Answered))
}

/// Waits (a few seconds at most) until thread `tid` of this process, which
/// has been joined, is gone from `/proc/self/task`.
fn wait_until_thread_left(tid: i32) {
    if tid == 0 {
        return;
    }
    let task = PathBuf::from(format!("/proc/self/task/{tid}"));
    let mut pause = Duration::from_micros(50);
    let mut waited = Duration::ZERO;
    while task.exists() {
        if waited > Duration::from_secs(5) {
            tracing::debug!(tid, "the thread that answered INIT is still exiting");
            return;
        }
        std::thread::sleep(pause);
        waited += pause;
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

fn mount_fd(target: &Target, options: &MountOptions, fd: &OwnedFd) -> Result<(), MountError> {
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
    sys::mount(&c_source, &target.path, &c_fstype, flags, &c_data).map_err(mount_error)
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

/// [`mount_id_at`] of a path.
fn mount_id_of(path: &Path) -> Option<u64> {
    mount_id_at(&CString::new(path.as_os_str().as_bytes()).ok()?)
}

/// The id of the mount on `path` (`STATX_MNT_ID`, as `/proc/self/mountinfo`
/// lists it), read from the kernel's cache (`AT_STATX_DONT_SYNC`): no
/// daemon is asked, so neither one that hasn't answered INIT yet (or is
/// this very thread) nor a hung one holds it up. `None` if the kernel
/// doesn't say.
///
/// One system call, with no allocation and no lock: a child may make it
/// between `fork` and `_exit` (an unmounter checking that the mount on the
/// path is still the one it was made for, see [`Mount::unmount_through`]).
pub fn mount_id_at(path: &CStr) -> Option<u64> {
    // SAFETY: an all-zero statx is a valid output buffer.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated; `stx` is a valid output buffer.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_DONT_SYNC | libc::AT_NO_AUTOMOUNT | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    (r == 0 && stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id)
}
