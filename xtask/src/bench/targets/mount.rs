//! Reading /proc/self/mountinfo and unmounting: what is mounted where,
//! and making sure nothing a run mounted stays behind. Apart because it is
//! the only part that unmounts, whichever target mounted.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// (mountpoint, file system type) of every mount in a mountinfo text.
fn parse_mountinfo(text: &str) -> Vec<(PathBuf, String)> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mountpoint = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            Some((
                crate::mountinfo::unescape_path(mountpoint),
                fstype.to_string(),
            ))
        })
        .collect()
}

/// The mounts of this process's namespace.
fn mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The file system type mounted at `path`, if any (the topmost mount).
pub(super) fn mounted(path: &Path) -> Option<String> {
    mounts()
        .into_iter()
        .rev()
        .find(|(p, _)| p == path)
        .map(|(_, t)| t)
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
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(dir))
        .collect();
    stale.sort();
    stale.dedup();
    for p in stale.into_iter().rev() {
        done.extend(force_unmount(&p));
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parsing() {
        let text = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    99 22 0:55 / /tmp/a\\040b rw,nosuid - fuse.fuse-bench src rw,user_id=0\n\
                    100 22 0:56 / /x rw master:2 shared:3 - fuse /dev/fuse rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(
            m,
            vec![
                (PathBuf::from("/"), "ext4".to_string()),
                (PathBuf::from("/tmp/a b"), "fuse.fuse-bench".to_string()),
                (PathBuf::from("/x"), "fuse".to_string()),
            ]
        );
    }
}
