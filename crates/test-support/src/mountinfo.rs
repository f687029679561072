//! Reading the mount table (`mountinfo`), with the kernel's octal escapes
//! undone, so that a mountpoint with a space or a backslash in its name is
//! found too.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of `mountinfo` (proc(5)), its fields unescaped.
#[derive(Debug, Clone)]
pub struct Mount {
    /// The mount's id (field 1), unique while it exists.
    pub id: u64,
    /// The device's major and minor numbers (field 3, `maj:min`); for FUSE
    /// the minor is the connection's number under
    /// `/sys/fs/fuse/connections`.
    pub device: (u32, u32),
    /// Where it is mounted (field 5).
    pub mount_point: PathBuf,
    /// Per-mount options (field 6), split at commas.
    pub mount_options: Vec<String>,
    /// The optional fields between the options and the `-` separator
    /// (`shared:N`, `master:N`, ...).
    pub tags: Vec<String>,
    /// The file system type after the `-` separator (`fuse.NAME`).
    pub fstype: String,
    /// The source (`fsname`).
    pub source: String,
    /// Per-superblock options, split at commas.
    pub super_options: Vec<String>,
    /// The line as the kernel wrote it.
    pub line: String,
}

impl Mount {
    /// Parses one `mountinfo` line; `None` for a line without the fields
    /// proc(5) lists.
    pub fn parse(line: &str) -> Option<Mount> {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        if dash < 6 || fields.len() < dash + 4 {
            return None;
        }
        let (major, minor) = fields[2].split_once(':')?;
        Some(Mount {
            id: fields[0].parse().ok()?,
            device: (major.parse().ok()?, minor.parse().ok()?),
            mount_point: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(fields[4]))),
            mount_options: split_options(fields[5]),
            tags: fields[6..dash].iter().map(|f| f.to_string()).collect(),
            fstype: unescape_lossy(fields[dash + 1]),
            source: unescape_lossy(fields[dash + 2]),
            super_options: split_options(fields[dash + 3]),
            line: line.to_owned(),
        })
    }

    /// Whether it is a FUSE mount (`fuse`, `fuseblk` or `fuse.SUBTYPE`;
    /// not `fusectl`).
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype == "fuseblk" || self.fstype.starts_with("fuse.")
    }

    /// Whether it came into this mount namespace from the one it is a
    /// slave of (a `master:N` tag).
    pub fn from_master(&self) -> bool {
        self.tags.iter().any(|t| t.starts_with("master:"))
    }
}

fn split_options(field: &str) -> Vec<String> {
    field.split(',').map(unescape_lossy).collect()
}

/// Undoes the kernel's octal escapes in a `mountinfo` field (`\040` for a
/// space, `\011` tab, `\012` newline, `\134` backslash); a backslash not
/// followed by three octal digits stays as it is.
pub fn unescape(field: &str) -> Vec<u8> {
    let field = field.as_bytes();
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                // Three octal digits reach 511; the kernel only escapes bytes.
                out.push(value as u8);
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

fn unescape_lossy(field: &str) -> String {
    String::from_utf8_lossy(&unescape(field)).into_owned()
}

/// The mounts this thread sees, in table order (bottom first).
///
/// Reads `/proc/thread-self/mountinfo`: a test that gives one thread a
/// mount namespace of its own sees that namespace's table there, where
/// `/proc/self` would show the main thread's. Empty if it can't be read.
pub fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/thread-self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(Mount::parse)
        .collect()
}

/// The mounts whose mountpoint is `path`, bottom first.
pub fn mounts_at(path: &Path) -> Vec<Mount> {
    mounts()
        .into_iter()
        .filter(|m| m.mount_point == path)
        .collect()
}

/// Whether something is mounted on `path`.
pub fn is_mounted(path: &Path) -> bool {
    mounts().iter().any(|m| m.mount_point == path)
}

/// Detaches whatever is still mounted on `path` (a lazy unmount, as
/// `umount -l`), for the clean-up of a test that failed half-way; an error
/// is left alone (there is nothing more a clean-up can do).
pub fn detach(path: &Path) {
    if !is_mounted(path) {
        return;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a NUL-terminated path; umount2 takes no other pointer.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

/// What a test's daemon leaves when the test ends, passing or failing:
/// its process `child`, if still held, killed and reaped, and whatever is
/// mounted on `mnt` detached.
pub fn kill_and_detach(child: Option<std::process::Child>, mnt: &Path) {
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    detach(mnt);
}

/// Removes `dir` unless something is still mounted at `mnt` inside it:
/// then it is left behind, as removing it would walk into the mount.
pub fn remove_unless_mounted(dir: tempfile::TempDir, mnt: &Path) {
    if is_mounted(mnt) {
        std::mem::forget(dir);
    }
}

/// Detaches the mount at its path on drop, if one is still there: a
/// failing test leaves no mount behind.
pub struct MountGuard(pub PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        detach(&self.0);
    }
}

/// The `mountinfo` lines of the FUSE mounts whose source starts with
/// `prefix`.
pub fn mounts_with_source(prefix: &str) -> Vec<String> {
    mounts()
        .into_iter()
        .filter(|m| m.is_fuse() && m.source.starts_with(prefix))
        .map(|m| m.line)
        .collect()
}

/// The `mountinfo` lines of the FUSE mounts whose source is `source`.
pub fn mounts_with_exact_source(source: &str) -> Vec<String> {
    mounts()
        .into_iter()
        .filter(|m| m.is_fuse() && m.source == source)
        .map(|m| m.line)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_escapes_are_undone_and_others_kept() {
        assert_eq!(unescape(r"/a\040b\134c\011"), b"/a b\\c\t");
        assert_eq!(unescape(r"/x\04"), br"/x\04");
        assert_eq!(unescape(r"/x\9999"), br"/x\9999");
    }

    #[test]
    fn a_line_is_parsed_into_its_fields() {
        let line = r"36 35 0:40 / /tmp/a\040b rw,nosuid shared:1 - fuse.pt my\040src rw,user_id=0";
        let m = Mount::parse(line).expect("a well-formed line");
        assert_eq!(m.id, 36);
        assert_eq!(m.device, (0, 40));
        assert_eq!(m.tags, ["shared:1"]);
        assert!(!m.from_master());
        assert_eq!(m.mount_point, Path::new("/tmp/a b"));
        assert_eq!(m.mount_options, ["rw", "nosuid"]);
        assert_eq!(m.fstype, "fuse.pt");
        assert_eq!(m.source, "my src");
        assert_eq!(m.super_options, ["rw", "user_id=0"]);
        assert!(m.is_fuse());
        assert!(Mount::parse("36 35 0:40 / /x rw").is_none());
    }

    #[test]
    fn fuse_mounts_and_tags_are_told_apart() {
        let ctl = Mount::parse("40 22 0:41 / /sys/fs/fuse/connections rw - fusectl fusectl rw")
            .expect("a well-formed line");
        assert!(!ctl.is_fuse());
        assert!(ctl.tags.is_empty());
        let blk = Mount::parse("41 22 8:1 / /b rw master:2 shared:3 - fuseblk /dev/sda1 rw")
            .expect("a well-formed line");
        assert!(blk.is_fuse());
        assert!(blk.from_master());
        assert_eq!(blk.tags, ["master:2", "shared:3"]);
    }
}
