//! Reading `/proc/self/mountinfo`.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `path` (canonical) is a mount point in this mount namespace,
/// according to `/proc/self/mountinfo` (which never touches the file system).
pub(super) fn is_mount_point(path: &Path) -> io::Result<bool> {
    let mountinfo = std::fs::read("/proc/self/mountinfo")?;
    let wanted = path.as_os_str().as_bytes();
    Ok(mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .any(|field| unescape_mountinfo(field) == wanted))
}

/// Whether the mount with id `id` (as `STATX_MNT_ID` gives it) is in this
/// mount namespace's table, a FUSE mount at `path` (canonical).
pub(super) fn is_fuse_mount(id: u64, path: &Path) -> io::Result<bool> {
    let mountinfo = std::fs::read("/proc/self/mountinfo")?;
    let id = id.to_string();
    let wanted = path.as_os_str().as_bytes();
    Ok(mountinfo.split(|&b| b == b'\n').any(|line| {
        // id parent maj:min root mount-point options [optional...] - fstype ...
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let fstype = fields
            .iter()
            .position(|f| *f == b"-")
            .and_then(|sep| fields.get(sep + 1));
        let fuse =
            fstype.is_some_and(|t| *t == b"fuse" || *t == b"fuseblk" || t.starts_with(b"fuse."));
        fields.first() == Some(&id.as_bytes())
            && fuse
            && fields
                .get(4)
                .is_some_and(|p| unescape_mountinfo(p) == wanted)
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescaping() {
        assert_eq!(unescape_mountinfo(br"/a\040b\134c\011"), b"/a b\\c\t");
        assert_eq!(unescape_mountinfo(br"/x\04"), br"/x\04");
        assert_eq!(unescape_mountinfo(br"/x\9999"), br"/x\9999");
    }
}
