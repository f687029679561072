//! A Landlock ruleset: file access limited to SOURCE (and reading
//! `/proc`, opening `/dev/fuse` and `/dev/null`, making and removing the
//! takeover socket in its directory), no TCP binds or connects, no signals to processes and no
//! connections to abstract sockets outside the sandbox. It holds under
//! `--sandbox none` too.

use crate::Failure;
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

/// The newest ABI these rules were written for (Linux 6.12: scopes).
const ABI_USED: ABI = ABI::V6;

/// SOURCE and `/proc`, opened while their host paths still lead to them.
#[derive(Debug)]
pub struct Rules {
    source: PathFd,
    /// The host's `/proc` (descriptors opened before the sandbox, such as
    /// `/proc/self/fd`, lead into it) and, under `--sandbox namespace`, the
    /// new root's own instance ([`Rules::add_proc_inside`]): a rule covers
    /// one file system instance, and paths the daemon opens after the
    /// sandbox (`/proc/<tid>/status` of callers) lead into the second.
    procs: Vec<PathFd>,
    /// `/dev/fuse` (serving threads open it to clone their session's
    /// descriptor) and `/dev/null` (the background daemon's streams).
    devices: Vec<PathFd>,
    /// The takeover socket's directory: its socket is made, renamed and
    /// removed there.
    socket_dir: Option<Arc<OwnedFd>>,
}

impl Rules {
    /// Opens SOURCE and `/proc` (before the namespace changes the root);
    /// `socket_dir` is the takeover socket's directory, if there is one.
    pub fn open(source: &Path, socket_dir: Option<Arc<OwnedFd>>) -> Result<Rules, Failure> {
        let open = |p: &Path| {
            PathFd::new(p).map_err(|e| Failure(format!("--landlock on: {}: {e}", p.display())))
        };
        Ok(Rules {
            source: open(source)?,
            procs: vec![open(Path::new("/proc"))?],
            devices: ["/dev/fuse", "/dev/null"]
                .into_iter()
                .filter_map(|p| PathFd::new(p).ok())
                .collect(),
            socket_dir,
        })
    }

    /// Adds the `/proc` that the root now shows (call after the namespace
    /// changed the root: it is a new proc instance, which the host's rule
    /// doesn't cover).
    pub fn add_proc_inside(&mut self) -> Result<(), Failure> {
        let inside = PathFd::new("/proc")
            .map_err(|e| Failure(format!("--landlock on: /proc in the sandbox: {e}")))?;
        self.procs.push(inside);
        Ok(())
    }
}

/// The file-level rights: checked on the file opened, not on the path.
fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
}

/// Restricts this thread (and threads and children it starts later) to
/// `rules`. Without `file_rights` the file-level rights (read, write,
/// truncate, device ioctls) are left unhandled: where the backend holds
/// inodes by file handle and SOURCE is not the root of the mount it was
/// opened on (`--sandbox none`), Landlock checks a file opened by
/// `open_by_handle_at` as if it sat at that mount's root (the dentry is
/// disconnected), outside the rule for SOURCE, and would refuse every
/// reopened file. Under `--sandbox namespace` SOURCE is a mount of its own
/// and the rights are handled. Directory rights (creating, removing,
/// renaming, listing, executing) are always handled. Returns what applied,
/// `None` if the kernel has no Landlock.
pub fn restrict(rules: Rules, file_rights_too: bool) -> Result<Option<&'static str>, Failure> {
    let fail = |e: landlock::RulesetError| Failure(format!("--landlock on: {e}"));
    let mut handled = AccessFs::from_all(ABI_USED);
    if !file_rights_too {
        handled &= !file_rights();
    }
    let proc_rights = (AccessFs::from_read(ABI_USED)) & handled;
    let status = Ruleset::default()
        .handle_access(handled)
        .map_err(fail)?
        .handle_access(AccessNet::from_all(ABI_USED))
        .map_err(fail)?
        .scope(Scope::from_all(ABI_USED))
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rule(PathBeneath::new(rules.source, handled))
        .map_err(fail)?
        .add_rules(
            rules
                .procs
                .into_iter()
                .map(|fd| Ok(PathBeneath::new(fd, proc_rights))),
        )
        .map_err(fail)?
        .add_rules(
            rules
                .devices
                .into_iter()
                .filter(|_| !(file_rights() & handled).is_empty())
                .map(|fd| Ok(PathBeneath::new(fd, file_rights() & handled))),
        )
        .map_err(fail)?
        .add_rules(rules.socket_dir.into_iter().map(|fd| {
            // Same-directory renames need no `Refer`.
            Ok(PathBeneath::new(
                fd,
                (AccessFs::MakeSock | AccessFs::RemoveFile) & handled,
            ))
        }))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(Some("landlock")),
        RulesetStatus::PartiallyEnforced => {
            tracing::warn!("Landlock: this kernel enforces only part of the ruleset");
            Ok(Some("landlock (partly)"))
        }
        RulesetStatus::NotEnforced => Ok(None),
    }
}
