//! Mounts a step leaves behind.
//!
//! `cargo xtask test` runs its steps in a mount namespace of its own
//! ([`enter_own_namespace`]), a slave of the host's: mounts and unmounts on
//! the host still reach it (so it never keeps another program's mount
//! alive after the host unmounted it), but nothing the steps mount is seen
//! on the host, and whatever a failed test leaves mounted goes away with
//! the namespace when the run ends.
//!
//! Around each step the runner compares the FUSE mounts of the namespace
//! ([`fuse_mounts`]): one that appeared during the step and did not come
//! from the host (mountinfo marks those `master:N`) was left by the step.
//! The step then fails naming each such mount, and the runner detaches
//! them (`umount -l`) so that the later steps run on a clean tree.

use super::*;

/// One FUSE mount of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FuseMount {
    /// The mount's ID (mountinfo's first field), unique while it exists.
    pub(crate) id: u64,
    /// Where it is mounted.
    pub(crate) mount_point: PathBuf,
    /// `fuse`, `fuse.passthroughfs`, `fuseblk`, ...
    pub(crate) fstype: String,
    /// Whether it propagated from the host's namespace (`master:N`).
    pub(crate) from_host: bool,
    /// Its device's minor number (`0:N`): the FUSE connection's number
    /// under `/sys/fs/fuse/connections`.
    pub(crate) minor: Option<u32>,
}

impl FuseMount {
    /// `m` if it is a FUSE mount.
    fn of(m: test_support::mountinfo::Mount) -> Option<FuseMount> {
        m.is_fuse().then(|| FuseMount {
            id: m.id,
            from_host: m.from_master(),
            minor: (m.device.0 == 0).then_some(m.device.1),
            mount_point: m.mount_point,
            fstype: m.fstype,
        })
    }
}

/// The FUSE mounts in a mountinfo text.
pub(crate) fn parse_fuse_mounts(text: &str) -> Vec<FuseMount> {
    text.lines()
        .filter_map(test_support::mountinfo::Mount::parse)
        .filter_map(FuseMount::of)
        .collect()
}

/// The FUSE mounts this thread sees (none if mountinfo is unreadable:
/// reading it never blocks, unlike a stat of a mount whose daemon hangs).
pub(crate) fn fuse_mounts() -> Vec<FuseMount> {
    test_support::mountinfo::mounts()
        .into_iter()
        .filter_map(FuseMount::of)
        .collect()
}

/// The mounts of `after` that are neither in `before` nor from the host.
pub(crate) fn left_behind(before: &[FuseMount], after: &[FuseMount]) -> Vec<FuseMount> {
    after
        .iter()
        .filter(|m| !m.from_host && !before.iter().any(|b| b.id == m.id))
        .cloned()
        .collect()
}

/// Detaches each mount (`umount2(MNT_DETACH)`), the deepest first; the
/// mounts that could not be detached, with the reason.
pub(crate) fn detach(mounts: &[FuseMount]) -> Vec<(PathBuf, String)> {
    let mut sorted: Vec<&FuseMount> = mounts.iter().collect();
    sorted.sort_by_key(|m| std::cmp::Reverse(m.mount_point.as_os_str().len()));
    let mut failed = Vec::new();
    for m in sorted {
        let Ok(path) = std::ffi::CString::new(m.mount_point.as_os_str().as_encoded_bytes()) else {
            failed.push((m.mount_point.clone(), "a NUL byte in the path".into()));
            continue;
        };
        // SAFETY: path is a valid NUL-terminated string.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
            let e = std::io::Error::last_os_error();
            // Gone already (its daemon's exit unmounted it meanwhile).
            if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
                failed.push((m.mount_point.clone(), e.to_string()));
            }
        }
    }
    failed
}

/// The error a step gets for the mounts it left: each named, then whether
/// detaching them worked.
pub(crate) fn leftover_reason(left: &[FuseMount], not_detached: &[(PathBuf, String)]) -> String {
    let names: Vec<String> = left
        .iter()
        .map(|m| format!("{} ({})", m.mount_point.display(), m.fstype))
        .collect();
    let mut reason = format!(
        "left {} FUSE mount{} behind: {}",
        left.len(),
        if left.len() == 1 { "" } else { "s" },
        names.join(", ")
    );
    if not_detached.is_empty() {
        reason.push_str(" (detached with umount -l)");
    } else {
        let failed: Vec<String> = not_detached
            .iter()
            .map(|(p, e)| format!("{}: {e}", p.display()))
            .collect();
        let _ = write!(reason, " (could not detach: {})", failed.join(", "));
    }
    reason
}

/// Moves this process into a new mount namespace whose mounts are slaves of
/// the host's. Must run while the process has a single thread: a mount
/// namespace belongs to a thread, and only threads started afterwards
/// inherit it.
pub(crate) fn enter_own_namespace() -> Result<()> {
    let threads = fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
    if threads != 1 {
        bail!("the runner has {threads} threads; it must enter its namespace before starting any");
    }
    // SAFETY: unshare and mount take no pointers but the static strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(std::io::Error::last_os_error()).context("unshare(CLONE_NEWNS)");
        }
        if libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error()).context("making / a slave mount");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The scratch steps (`--scratch`): the runner's own test.

/// The directory the scratch steps share (one per run).
fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("xtask-scratch-{}", std::process::id()))
}

/// A step that fails as a broken test does: it leaves a dead FUSE mount
/// (mounted on `/dev/fuse` with nobody serving it) and an error.
pub(crate) fn step_scratch_fail(_ctx: &mut Ctx) -> Result<Outcome> {
    let mnt = scratch_dir().join("mnt");
    fs::create_dir_all(&mnt).with_context(|| format!("creating {}", mnt.display()))?;
    let dev = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .context("opening /dev/fuse")?;
    let options = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0",
        std::os::fd::AsRawFd::as_raw_fd(&dev)
    );
    let target = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes())?;
    let data = std::ffi::CString::new(options)?;
    // SAFETY: every pointer is a valid NUL-terminated string.
    let rc = unsafe {
        libc::mount(
            c"xtask-scratch".as_ptr(),
            target.as_ptr(),
            c"fuse.xtask-scratch".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mounting FUSE on {} (needs root)", mnt.display()));
    }
    // Closing the device ends the connection: the mount stays, dead.
    drop(dev);
    println!("scratch: mounted FUSE on {} and left it", mnt.display());
    bail!("a scratch test failed on purpose")
}

/// The step after it: runs (so a failure did not stop the run) and finds
/// no mount left by the failed one.
pub(crate) fn step_scratch_after(_ctx: &mut Ctx) -> Result<Outcome> {
    let dir = scratch_dir();
    let left: Vec<_> = fuse_mounts()
        .into_iter()
        .filter(|m| m.mount_point.starts_with(&dir))
        .collect();
    if !left.is_empty() {
        bail!("the scratch mount is still there: {left:?}");
    }
    println!("scratch: no FUSE mount under {}", dir.display());
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
40 22 0:50 / /tmp/host\\040mnt rw,nosuid,nodev shared:20 master:7 - fuse.passthroughfs passthroughfs rw,user_id=0
41 22 0:51 / /tmp/.tmpAb/mnt rw,nosuid,nodev - fuse fuse rw,user_id=0
42 22 0:52 / /sys/fs/fuse/connections rw - fusectl none rw
43 41 0:53 / /tmp/.tmpAb/mnt/inner rw - fuseblk dev rw
";

    #[test]
    fn finds_fuse_mounts_and_their_origin() {
        let m = parse_fuse_mounts(MOUNTINFO);
        let seen: Vec<_> = m
            .iter()
            .map(|m| {
                (
                    m.id,
                    m.mount_point.to_str().unwrap(),
                    m.fstype.as_str(),
                    m.from_host,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (40, "/tmp/host mnt", "fuse.passthroughfs", true),
                (41, "/tmp/.tmpAb/mnt", "fuse", false),
                (43, "/tmp/.tmpAb/mnt/inner", "fuseblk", false),
            ]
        );
    }

    #[test]
    fn new_mounts_of_the_namespace_are_left_behind() {
        let all = parse_fuse_mounts(MOUNTINFO);
        // Before the step only the first local one existed; the host's
        // mount appeared meanwhile and is not the step's.
        let before = vec![all[1].clone()];
        let left = left_behind(&before, &all);
        assert_eq!(left, [all[2].clone()]);
        assert_eq!(
            leftover_reason(&left, &[]),
            "left 1 FUSE mount behind: /tmp/.tmpAb/mnt/inner (fuseblk) (detached with umount -l)"
        );
    }
}
