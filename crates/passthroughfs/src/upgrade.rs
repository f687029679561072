//! Live upgrade, the daemon's side: taking a mount over from the daemon
//! that serves it (`--take-over`) and answering such requests
//! (`--takeover-socket`). The exchange itself is
//! `fuse_transport_dev::takeover`'s; the socket's binding is
//! [`crate::takeover_socket`]'s. Apart from [`crate::serve`], which calls
//! these where a session starts.

use crate::takeover_socket;
use fuse_backend_passthrough::PassthroughFs;
use fuse_transport_dev::takeover::{Pausable, Received};
use passthroughfs::cli::Args;
use passthroughfs::Failure;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Takes over the mount served by the daemon listening on `socket` (live
/// upgrade): its connection, negotiated state and the passthrough's node
/// table and handles, restored into `fs`; `start` readies a paused session
/// on what was received (worker threads or tasks: the old daemon may have
/// served another way).
pub(crate) fn take_over<S: Pausable + ?Sized>(
    socket: &Path,
    fs: &Arc<PassthroughFs>,
    mountpoint: &Path,
    args: &Args,
    start: impl FnOnce(Received) -> std::io::Result<Arc<S>>,
) -> Result<Arc<S>, Failure> {
    let timeout = takeover_timeout(args)?;
    let mountpoint = std::path::absolute(mountpoint)
        .map_err(|e| Failure(format!("{}: {e}", mountpoint.display())))?;
    fuse_transport_dev::takeover::take_over_mount(socket, &mountpoint, fs.as_ref(), timeout, start)
        .map_err(|e| Failure(format!("taking over through {}: {e}", socket.display())))
}

/// `--takeover-timeout`, checked.
pub(crate) fn takeover_timeout(args: &Args) -> Result<std::time::Duration, Failure> {
    if args.takeover_timeout == 0 {
        return Err(Failure(
            "--takeover-timeout must be at least 1 second".into(),
        ));
    }
    Ok(std::time::Duration::from_secs(args.takeover_timeout))
}

/// Serves takeover requests on `path` (`--takeover-socket`): one at a
/// time; the socket file goes while one is answered (the new daemon may
/// bind the same path for the next upgrade) and comes back if it failed.
pub(crate) fn spawn_takeover_listener(
    path: PathBuf,
    session: Arc<dyn Pausable>,
    fs: Arc<PassthroughFs>,
    timeout: std::time::Duration,
) -> Result<(), Failure> {
    use fuse_transport_dev::takeover::offer_mount;
    let mut listener = takeover_socket::bind(&path)
        .map_err(|e| Failure(format!("--takeover-socket {}: {e}", path.display())))?;
    tracing::info!(socket = %path.display(), "listening for a takeover");
    std::thread::Builder::new()
        .name("takeover".into())
        .spawn(move || loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("takeover socket: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            let _ = std::fs::remove_file(&path);
            tracing::info!("a new daemon asks to take over");
            // The source watch stops reading while the workers still
            // answer (see `serve::pause_quietly`); its group and marks move to the
            // new daemon, or it reads again here if the takeover fails.
            fs.pause_notifications();
            let result = offer_mount(session.as_ref(), fs.as_ref(), &stream, timeout);
            match result {
                // Released: the main thread's wait returns and sees it.
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::warn!("takeover failed: {e}"),
            }
            fs.set_notifier(session.notifier());
            match takeover_socket::bind(&path) {
                Ok(l) => listener = l,
                Err(e) => {
                    tracing::error!(
                        "--takeover-socket {}: {e}; no more takeovers",
                        path.display()
                    );
                    return;
                }
            }
        })
        .map_err(|e| Failure(format!("starting the takeover thread: {e}")))?;
    Ok(())
}
