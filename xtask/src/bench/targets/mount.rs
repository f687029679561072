//! Reading /proc/self/mountinfo and unmounting: what is mounted where,
//! and making sure nothing a run mounted stays behind. Apart because it is
//! the only part that unmounts, whichever target mounted.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use test_support::mountinfo::mounts;

/// The file system type mounted at `path`, if any (the topmost mount).
pub(super) fn mounted(path: &Path) -> Option<String> {
    mounts()
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path)
        .map(|m| m.fstype)
}

fn umount2(path: &Path, flags: libc::c_int) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Unmounts everything mounted at `path` (a plain unmount, then a lazy one
/// as the last resort). Returns what it had to do, for the log.
pub(super) fn force_unmount(path: &Path) -> Vec<String> {
    let mut done = Vec::new();
    for _ in 0..8 {
        let Some(fstype) = mounted(path) else { break };
        match umount2(path, 0) {
            Ok(()) => done.push(format!("unmounted {} ({fstype})", path.display())),
            Err(e) => match umount2(path, libc::MNT_DETACH) {
                Ok(()) => done.push(format!(
                    "lazily unmounted {} ({fstype}; plain unmount: {e})",
                    path.display()
                )),
                Err(e2) => {
                    done.push(format!("cannot unmount {}: {e2}", path.display()));
                    break;
                }
            },
        }
    }
    done
}

/// Unmounts whatever an earlier, interrupted run left under `dir`.
pub fn sweep_stale_mounts(dir: &Path) -> Vec<String> {
    let mut done = Vec::new();
    let mut stale: Vec<PathBuf> = mounts()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(dir))
        .collect();
    stale.sort();
    stale.dedup();
    for p in stale.into_iter().rev() {
        done.extend(force_unmount(&p));
    }
    done
}
