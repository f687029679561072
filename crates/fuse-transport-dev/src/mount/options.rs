//! [`MountOptions`]: checking them and turning them into `mount(2)` flags
//! and data or `fusermount3`'s `-o`.

use super::{sys, MountError};

/// Options of a FUSE mount.
///
/// `Default` gives `nosuid` and `nodev` set (as `fusermount3` always does for
/// unprivileged users) and everything else off.
///
/// String options are validated by [`Mount::new`](super::Mount::new):
/// - `fsname` (the mount's source, shown in `/proc/self/mountinfo`) may contain
///   any character but NUL. A `,` or `\` in it is backslash-escaped for
///   `fusermount3`, which accepts that escape; `mount(2)` takes the source as a
///   separate argument, so no escaping is needed there.
/// - `subtype` and every `extra` entry must be non-empty and contain neither
///   `,` nor NUL (they are rejected with [`MountError::InvalidOption`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// (unmount when the daemon dies, even of SIGKILL): on a `mount(2)`
    /// mount a watcher process forked at mount time does it, through
    /// `fusermount3` that program does. `fd=`, `rootmode=`,
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

/// Builder-style setters, one per field: start from [`MountOptions::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl MountOptions {
    /// Sets the mount's source (`fsname`).
    #[must_use]
    pub fn fsname(mut self, name: impl Into<String>) -> Self {
        self.fsname = Some(name.into());
        self
    }

    /// Sets the file system subtype (`subtype`): the type becomes
    /// `fuse.<subtype>`.
    #[must_use]
    pub fn subtype(mut self, subtype: impl Into<String>) -> Self {
        self.subtype = Some(subtype.into());
        self
    }

    /// Sets `allow_other`.
    #[must_use]
    pub fn allow_other(mut self, on: bool) -> Self {
        self.allow_other = on;
        self
    }

    /// Sets `default_permissions` (the kernel checks permissions).
    #[must_use]
    pub fn default_permissions(mut self, on: bool) -> Self {
        self.default_permissions = on;
        self
    }

    /// Sets whether to mount read-only (`read_only`).
    #[must_use]
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// Sets the largest read request (`max_read`; `None`: the kernel's).
    #[must_use]
    pub fn max_read(mut self, max: impl Into<Option<u32>>) -> Self {
        self.max_read = max.into();
        self
    }

    /// Sets `nosuid` (default `true`).
    #[must_use]
    pub fn nosuid(mut self, on: bool) -> Self {
        self.nosuid = on;
        self
    }

    /// Sets `nodev` (default `true`).
    #[must_use]
    pub fn nodev(mut self, on: bool) -> Self {
        self.nodev = on;
        self
    }

    /// Replaces the raw options passed through (`extra`; see that field for
    /// which are accepted).
    #[must_use]
    pub fn extra(mut self, options: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extra = options.into_iter().map(Into::into).collect();
        self
    }
}

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

pub(super) fn invalid(option: impl Into<String>, reason: impl Into<String>) -> MountError {
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

    pub(super) fn has_extra(&self, name: &str) -> bool {
        self.extra.iter().any(|e| e == name)
    }

    /// The mount's source: fsname, else subtype, else `fuse`.
    pub(super) fn source(&self) -> &str {
        self.fsname
            .as_deref()
            .or(self.subtype.as_deref())
            .unwrap_or("fuse")
    }

    pub(super) fn fstype(&self) -> String {
        match &self.subtype {
            Some(subtype) => format!("fuse.{subtype}"),
            None => "fuse".to_owned(),
        }
    }

    /// `MS_*` flags and the kernel's FUSE option string for `mount(2)`.
    pub(super) fn syscall_options(&self, fd: i32, rootmode: u32) -> (libc::c_ulong, String) {
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
    pub(super) fn fusermount_options(&self) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusermount_escaping() {
        assert_eq!(escape_fusermount("plain"), "plain");
        assert_eq!(escape_fusermount(r"a,b\c"), r"a\,b\\c");
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
