//! Reading `/proc/self/mountinfo` (proc(5)), for the steps that look at
//! what is mounted (the test runner, the bench, xfstests).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

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
    fn octal_escapes_are_undone_and_others_kept() {
        assert_eq!(unescape_path(r"/tmp/a\040b"), PathBuf::from("/tmp/a b"));
        assert_eq!(unescape_path(r"/x\"), PathBuf::from(r"/x\"));
        assert_eq!(unescape_path("a\\134b\\011"), PathBuf::from("a\\b\t"));
        assert_eq!(unescape_path("trailing\\04"), PathBuf::from("trailing\\04"));
    }
}
