//! `--supervise`, the supervisor's side: it mounts and runs serving
//! processes (this program again) until one ends with status 0 or it gives
//! up. The serving side of a supervised daemon is in [`crate::serve`];
//! this is apart because the supervisor serves nothing itself.

use crate::plan::Plan;
use fuse_backend_passthrough::PassthroughFs;
use passthroughfs::daemonize::Detach;
use passthroughfs::{notify, Failure};
use std::ffi::OsString;
use std::path::PathBuf;

/// Nodes the crash table of `--supervise` has room for (its memfd is
/// sparse: a slot costs memory once used).
const SUPERVISED_NODES: usize = 1 << 20;

/// `--supervise`: mounts, and runs serving processes (this program again,
/// with `argv`, in `cwd`) until one ends with status 0.
pub(crate) fn supervise(
    plan: Plan,
    detach: &mut Detach,
    argv: Vec<OsString>,
    cwd: PathBuf,
) -> Result<(), Failure> {
    use fuse_transport_dev::supervise::{Supervisor, SupervisorExit};
    // Each serving process takes the crash table back by file handle:
    // where there are none (a user namespace, a source without them) every
    // one would fail, so this is said once, before anything is mounted.
    let probe = PassthroughFs::new(&plan.source, plan.fs_config.clone())
        .map_err(|e| Failure(e.to_string()))?;
    if let Some(why) = probe.file_handle_fallback() {
        return Err(Failure(format!(
            "--supervise keeps the nodes by file handle across crashes, and there are none \
             here: {why}; serve without --supervise"
        )));
    }
    drop(probe);
    let mount = fuse_transport_dev::Mount::new(&plan.args.mountpoint, &plan.options)
        .map_err(|e| Failure(e.to_string()))?;
    let supervisor = Supervisor::new(
        mount,
        fuse_backend_passthrough::crash_table_bytes(SUPERVISED_NODES),
    )
    .map_err(|e| Failure(format!("creating the state area: {e}")))?;
    // The source watch's group outlives serving processes: made here and
    // inherited by each, so that what a crashed one had the kernel cache
    // stays covered and nothing is dropped (docs/takeover.md).
    let watch_group = plan
        .fs_config
        .source_watch_wanted()
        .then(|| {
            fuse_backend_passthrough::SourceWatchGroup::create(plan.fs_config.file_watch_wanted())
        })
        .transpose()
        .unwrap_or_else(|e| {
            tracing::info!("no source watch group for the serving processes: {e}");
            None
        });
    let watch_group_env = match &watch_group {
        Some(g) => Some(inheritable_group(g)?),
        None => None,
    };
    let exe = std::env::current_exe()
        .map_err(|e| Failure(format!("finding this program to run it again: {e}")))?;
    let background = detach.is_background();
    tracing::info!(
        mountpoint = %plan.args.mountpoint.display(),
        "passthroughfs supervising"
    );
    let exit = supervisor
        .run(
            || {
                let mut cmd = std::process::Command::new(&exe);
                cmd.args(argv.iter().skip(1))
                    .current_dir(&cwd)
                    .env_remove("NOTIFY_SOCKET");
                if background {
                    cmd.env(LOG_TO_SYSLOG, "1");
                }
                if let Some(value) = &watch_group_env {
                    cmd.env(WATCH_GROUP, value);
                }
                cmd
            },
            || {
                detach.ready();
                notify::ready();
            },
        )
        .map_err(|e| Failure(format!("supervising: {e}")))?;
    notify::stopping();
    drop(watch_group);
    match exit {
        SupervisorExit::Done => {
            tracing::info!("unmounted; exiting");
            Ok(())
        }
        SupervisorExit::GaveUp(why) => Err(Failure(why)),
    }
}

/// Set for a supervised daemon whose supervisor logs to syslog.
pub(crate) const LOG_TO_SYSLOG: &str = "PASSTHROUGHFS_LOG_TO_SYSLOG";

/// Names the supervisor's source watch group for a serving process:
/// `<descriptor>,<files 0|1>,<privileged 0|1>`.
pub(crate) const WATCH_GROUP: &str = "PASSTHROUGHFS_WATCH_GROUP";

/// Lets serving processes inherit `group` (no close-on-exec); returns its
/// [`WATCH_GROUP`] value.
fn inheritable_group(
    group: &fuse_backend_passthrough::SourceWatchGroup,
) -> Result<String, Failure> {
    use std::os::fd::AsRawFd;
    let fd = group.fd().as_raw_fd();
    // SAFETY: a plain fcntl on a descriptor this process owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(Failure(format!(
            "passing the source watch group on: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(format!(
        "{fd},{},{}",
        u8::from(group.watches_files()),
        u8::from(group.privileged())
    ))
}

/// The supervisor's source watch group, in a serving process started by
/// one ([`WATCH_GROUP`]); taken out of the environment and made
/// close-on-exec. Call it early in `main`, before other threads exist.
pub(crate) fn inherited_watch_group(
) -> Result<Option<fuse_backend_passthrough::SourceWatchGroup>, Failure> {
    let Some(value) = std::env::var_os(WATCH_GROUP) else {
        return Ok(None);
    };
    std::env::remove_var(WATCH_GROUP);
    let value = value.to_string_lossy().into_owned();
    let bad = || {
        Failure(format!(
            "{WATCH_GROUP}={value:?}: not <descriptor>,<0|1>,<0|1>"
        ))
    };
    let parts: Vec<&str> = value.split(',').collect();
    let [fd, files, privileged] = parts[..] else {
        return Err(bad());
    };
    let fd: i32 = fd.parse().map_err(|_| bad())?;
    let flag = |s: &str| match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(bad()),
    };
    let (files, privileged) = (flag(files)?, flag(privileged)?);
    let fd = fuse_transport_dev::supervise::take_inherited_fd(fd)
        .map_err(|e| Failure(format!("{WATCH_GROUP}: descriptor {fd} is not open ({e})")))?;
    Ok(Some(
        fuse_backend_passthrough::SourceWatchGroup::from_parts(fd, files, privileged),
    ))
}
