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
                cmd
            },
            || {
                detach.ready();
                notify::ready();
            },
        )
        .map_err(|e| Failure(format!("supervising: {e}")))?;
    notify::stopping();
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
