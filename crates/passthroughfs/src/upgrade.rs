//! Live upgrade, the daemon's side: taking a mount over from the daemon
//! that serves it (`--take-over`) and answering such requests
//! (`--takeover-socket`). The exchange itself is
//! `fuse_transport_dev::takeover`'s; the socket's binding is
//! [`crate::takeover_socket`]'s. Apart from [`crate::serve`], which calls
//! these where a session starts.

use crate::takeover_socket::SocketPlace;
use fuse_backend_passthrough::PassthroughFs;
use fuse_transport_dev::takeover::{Pausable, Received};
use passthroughfs::cli::Args;
use passthroughfs::Failure;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Connects to the serving daemon's takeover socket `socket` for a
/// takeover of `mountpoint` (`--take-over`): before the daemon confines
/// itself, while it can reach both paths. The mountpoint is made absolute
/// here too (a relative one would be taken from the sandbox's root later).
pub(crate) fn connect_for_takeover(
    socket: &Path,
    mountpoint: &Path,
) -> Result<(UnixStream, PathBuf), Failure> {
    let mountpoint = std::path::absolute(mountpoint)
        .map_err(|e| Failure(format!("{}: {e}", mountpoint.display())))?;
    let stream = fuse_transport_dev::takeover::connect(socket)
        .map_err(|e| Failure(format!("taking over through {}: {e}", socket.display())))?;
    Ok((stream, mountpoint))
}

/// Takes over the mount at `mountpoint` served by the daemon at the other
/// end of `stream` ([`connect_for_takeover`]; live upgrade): its
/// connection, negotiated state and the passthrough's node table and
/// handles, restored into `fs`; `start` readies a paused session on what
/// was received (worker threads or tasks: the old daemon may have served
/// another way).
pub(crate) fn take_over<S: Pausable + ?Sized>(
    (stream, mountpoint): (UnixStream, PathBuf),
    fs: &Arc<PassthroughFs>,
    args: &Args,
    start: impl FnOnce(Received) -> std::io::Result<Arc<S>>,
) -> Result<Arc<S>, Failure> {
    let timeout = takeover_timeout(args)?;
    let socket = args.take_over.clone().unwrap_or_default();
    fuse_transport_dev::takeover::take_over_mount_connected(
        stream,
        &mountpoint,
        fs.as_ref(),
        timeout,
        start,
    )
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

/// Serves takeover requests on the socket at `place` (`--takeover-socket`):
/// one at a time; the socket file goes while one is answered (the new
/// daemon may bind the same path for the next upgrade) and comes back if
/// it failed. The socket is bound on the thread that answers (its working
/// directory is the socket's, see [`crate::takeover_socket`]); a first bind that
/// fails is returned.
pub(crate) fn spawn_takeover_listener(
    place: SocketPlace,
    session: Arc<dyn Pausable>,
    fs: Arc<PassthroughFs>,
    timeout: std::time::Duration,
) -> Result<(), Failure> {
    use fuse_transport_dev::takeover::offer_mount;
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let socket = place.path().to_path_buf();
    std::thread::Builder::new()
        .name("takeover".into())
        .spawn(move || {
            let first = place.enter().and_then(|()| place.bind());
            let mut listener = match first {
                Ok(listener) => {
                    let _ = bound_tx.send(Ok(()));
                    listener
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                    return;
                }
            };
            loop {
                let stream = match listener.accept() {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!("takeover socket: {e}");
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        continue;
                    }
                };
                let _ = place.remove();
                tracing::info!("a new daemon asks to take over");
                // The source watch stops reading while the workers still
                // answer (see `serve::pause_quietly`); its group and marks
                // move to the new daemon, or it reads again here if the
                // takeover fails.
                fs.pause_notifications();
                let result = offer_mount(session.as_ref(), fs.as_ref(), &stream, timeout);
                match result {
                    // Released: the main thread's wait returns and sees it.
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) => tracing::warn!("takeover failed: {e}"),
                }
                fs.set_notifier(session.notifier());
                match place.bind() {
                    Ok(l) => listener = l,
                    Err(e) => {
                        tracing::error!(
                            "--takeover-socket {}: {e}; no more takeovers",
                            place.path().display()
                        );
                        return;
                    }
                }
            }
        })
        .map_err(|e| Failure(format!("starting the takeover thread: {e}")))?;
    match bound_rx.recv() {
        Ok(Ok(())) => tracing::info!(socket = %socket.display(), "listening for a takeover"),
        Ok(Err(e)) => return Err(Failure(format!("--takeover-socket: {e}"))),
        Err(_) => {
            return Err(Failure(
                "--takeover-socket: the takeover thread ended".into(),
            ))
        }
    }
    Ok(())
}
