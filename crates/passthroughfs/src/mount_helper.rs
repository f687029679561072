//! Running as mount(8)'s helper. `mount -t fuse.passthroughfs SOURCE DIR`
//! (or an fstab line of that type) runs `/sbin/mount.fuse.passthroughfs`
//! if it exists, else `/sbin/mount.fuse` (the fuse3 package's
//! `mount.fuse3`, which starts `passthroughfs SOURCE DIR -o OPTIONS` from
//! `PATH`). Installed under the helper's name (a symlink
//! `/sbin/mount.fuse.passthroughfs` to the binary), passthroughfs takes
//! mount(8)'s own helper arguments, `SOURCE DIR [-sfnv] [-N NS] [-o OPTS]
//! [-t TYPE]`, which differ from its command line: `-f` is mount(8)'s
//! "fake" and `-s` its "sloppy". [`helper_args`] turns them into the
//! daemon's arguments.

use crate::Failure;
use std::ffi::{OsStr, OsString};
use std::path::Path;

/// What mount(8)'s helper flags asked for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HelperFlags {
    /// `-s`: tolerate unknown mount options (log and skip them).
    pub sloppy: bool,
    /// `-f`: check everything, then exit 0 without mounting.
    pub fake: bool,
}

/// Whether the program was started under a mount(8) helper's name
/// (`mount.fuse.passthroughfs`, or any `mount.*`).
pub fn invoked_as_helper(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("mount."))
}

/// The daemon's arguments for mount(8)'s helper arguments `argv` (the
/// program name first): the positionals and `-o` strings kept, `-n` and
/// `-v` dropped, `-s` and `-f` returned as flags, `-t` checked to be this
/// file system's type.
pub fn helper_args(argv: Vec<OsString>) -> Result<(Vec<OsString>, HelperFlags), Failure> {
    let mut it = argv.into_iter();
    let mut out = vec![OsString::from("passthroughfs")];
    it.next();
    let mut flags = HelperFlags::default();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy().into_owned();
        match s.as_str() {
            "-o" => {
                let opts = it
                    .next()
                    .ok_or_else(|| Failure("-o needs an option string".into()))?;
                out.push("-o".into());
                out.push(opts);
            }
            "-t" => {
                let ty = it
                    .next()
                    .ok_or_else(|| Failure("-t needs a type".into()))?
                    .to_string_lossy()
                    .into_owned();
                if !matches!(ty.as_str(), "fuse.passthroughfs" | "passthroughfs" | "fuse") {
                    return Err(Failure(format!(
                        "-t {ty}: this helper mounts type fuse.passthroughfs"
                    )));
                }
            }
            "-N" => {
                return Err(Failure(
                    "-N (mount in another namespace) is not supported: run mount in that \
                     namespace (nsenter) instead"
                        .into(),
                ))
            }
            _ if s.len() > 1
                && s.starts_with('-')
                && s[1..].chars().all(|c| "sfnv".contains(c)) =>
            {
                flags.sloppy |= s.contains('s');
                flags.fake |= s.contains('f');
            }
            _ => out.push(arg),
        }
    }
    Ok((out, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn recognizes_the_helper_name() {
        assert!(invoked_as_helper(OsStr::new(
            "/sbin/mount.fuse.passthroughfs"
        )));
        assert!(!invoked_as_helper(OsStr::new("/usr/bin/passthroughfs")));
    }

    #[test]
    fn turns_mount_8_arguments_into_the_daemon_s() {
        let (out, flags) = helper_args(args(&[
            "/sbin/mount.fuse.passthroughfs",
            "/srv/data",
            "/mnt",
            "-nsv",
            "-o",
            "rw,allow_other",
            "-t",
            "fuse.passthroughfs",
        ]))
        .unwrap();
        assert_eq!(
            out,
            args(&["passthroughfs", "/srv/data", "/mnt", "-o", "rw,allow_other"])
        );
        assert_eq!(
            flags,
            HelperFlags {
                sloppy: true,
                fake: false
            }
        );
        let (_, flags) = helper_args(args(&["m", "s", "d", "-f"])).unwrap();
        assert!(flags.fake && !flags.sloppy);
    }

    #[test]
    fn refuses_another_type_and_namespaces() {
        let e = helper_args(args(&["m", "s", "d", "-t", "fuse.sshfs"])).unwrap_err();
        assert_eq!(
            e.0,
            "-t fuse.sshfs: this helper mounts type fuse.passthroughfs"
        );
        assert!(helper_args(args(&["m", "s", "d", "-N", "1"])).is_err());
        assert!(helper_args(args(&["m", "s", "d", "-o"])).is_err());
    }
}
