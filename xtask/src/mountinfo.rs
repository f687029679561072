//! Reading `/proc/self/mountinfo` (proc(5)), for the steps that look at
//! what is mounted (the test runner, the bench, xfstests).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One line of `/proc/self/mountinfo`.
pub(crate) struct MountEntry {
    /// Where it is mounted.
    pub(crate) mount_point: PathBuf,
    /// File system type (`fuse.passthroughfs`, `ext4`, ...).
    pub(crate) fstype: String,
}

/// The mounts of a mountinfo text, in its order (bottom first).
pub(crate) fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            // id parent maj:min root mount-point options [optional...] - fstype source super
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
                mount_point: unescape_path(fields.get(4)?),
                fstype: fields.get(sep + 1)?.to_string(),
            })
        })
        .collect()
}

/// The mounts visible to this process (empty if mountinfo is unreadable).
pub(crate) fn mounts() -> Vec<MountEntry> {
    parse(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// A mountinfo path field (the mount point, field 5) with the kernel's
/// octal escapes (`\040` for a space, `\011` tab, `\012` newline, `\134`
/// backslash) undone; a backslash not followed by three octal digits of a
/// byte stays as it is.
pub(crate) fn unescape_path(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let byte = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let value = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                u8::try_from(value).ok()
            });
        match byte {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parsing() {
        let text = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    99 22 0:55 / /tmp/a\\040b rw,nosuid - fuse.fuse-bench src rw,user_id=0\n\
                    100 22 0:56 / /x rw master:2 shared:3 - fuse /dev/fuse rw\n";
        let m: Vec<(PathBuf, String)> = parse(text)
            .into_iter()
            .map(|m| (m.mount_point, m.fstype))
            .collect();
        assert_eq!(
            m,
            vec![
                (PathBuf::from("/"), "ext4".to_string()),
                (PathBuf::from("/tmp/a b"), "fuse.fuse-bench".to_string()),
                (PathBuf::from("/x"), "fuse".to_string()),
            ]
        );
    }

    #[test]
    fn octal_escapes_are_undone_and_others_kept() {
        assert_eq!(unescape_path(r"/tmp/a\040b"), PathBuf::from("/tmp/a b"));
        assert_eq!(unescape_path(r"/x\"), PathBuf::from(r"/x\"));
        assert_eq!(unescape_path("a\\134b\\011"), PathBuf::from("a\\b\t"));
        assert_eq!(unescape_path("trailing\\04"), PathBuf::from("trailing\\04"));
    }
}
