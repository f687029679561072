//! Mounting and unmounting through the setuid helper `fusermount3`.

use super::{sys, MountError, MountOptions, Target, FUSERMOUNT_PROGRAM};
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// Environment variable through which `fusermount3` learns the socket to send
/// the `/dev/fuse` descriptor on.
const COMMFD_ENV: &str = "_FUSE_COMMFD";

/// The `fusermount3` process that unmounts when the socket closes.
#[derive(Debug)]
pub(super) struct AutoUnmountHelper {
    pub(super) socket: OwnedFd,
    pub(super) child: Child,
}

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

pub(super) fn mount_fusermount(
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
pub(super) fn collect(mut child: Child) -> io::Result<(ExitStatus, String)> {
    let mut stderr = Vec::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_end(&mut stderr)?;
    }
    let status = child.wait()?;
    Ok((status, String::from_utf8_lossy(&stderr).trim().to_owned()))
}

/// Runs `fusermount3 -u [-z] -- path`.
pub(super) fn run_fusermount_unmount(path: &Path, lazy: bool) -> Result<(), MountError> {
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
