//! `--vhost-user SOCKET`: serving a virtual machine's virtio-fs device
//! instead of a mount, through `fuse-transport-virtio`.
//!
//! The daemon listens on SOCKET; the VMM (QEMU's `vhost-user-fs-pci`)
//! connects and the guest mounts `-t virtiofs TAG`. Each guest session
//! (a connection, or a reboot within one) gets a new `PassthroughFs` of
//! SOURCE and a new server. When the VM disconnects the daemon waits for
//! the next connection, until SIGINT, SIGTERM or SIGHUP (with `--once` it
//! exits, as virtiofsd does).
//!
//! Sandboxing: `--sandbox`, `--seccomp` and `--landlock` as for a mount
//! ([`crate::sandbox`]), applied once the socket is bound and before the
//! first connection; docs/security.md compares them with virtiofsd's.

use crate::cli::Args;
use crate::daemonize::Detach;
use crate::{block_signals, check_source, log_fs_state, spawn_signal_thread, Failure, Runtime};
use fuse_backend_passthrough::PassthroughFs;
use fuse_server::Server;
use fuse_transport_virtio::{ServerFactory, VirtioConfig, VirtioRuntime, VirtioServe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Settles SOURCE and MOUNTPOINT from the positional arguments and
/// `--shared-dir`, and checks that what the mode needs
/// was given: SOURCE and MOUNTPOINT to mount, SOURCE alone with
/// `--vhost-user`.
pub fn settle_args(args: &mut Args) -> Result<(), Failure> {
    let empty = |p: &Path| p.as_os_str().is_empty();
    let vhost_user = args.virtio.socket.is_some();
    let mut source = args.source_arg.clone();
    let mut mountpoint = args.mountpoint_arg.clone();
    if let Some(dir) = args.virtio.shared_dir.clone() {
        match (source.take(), mountpoint.is_some()) {
            (None, _) => source = Some(dir),
            // `--shared-dir DIR MOUNTPOINT`: the one positional argument
            // is the mountpoint.
            (Some(first), false) if !vhost_user => {
                mountpoint = Some(first);
                source = Some(dir);
            }
            _ => {
                return Err(Failure(
                    "--shared-dir names the directory to serve, as SOURCE does: give one of \
                     them"
                        .into(),
                ))
            }
        }
    }
    args.source = source.unwrap_or_default();
    args.mountpoint = mountpoint.unwrap_or_default();
    if empty(&args.source) {
        return Err(Failure(
            "the directory to serve is missing (SOURCE or --shared-dir)".into(),
        ));
    }
    match (vhost_user, empty(&args.mountpoint)) {
        (true, false) => Err(Failure(format!(
            "--vhost-user serves a virtual machine, not a mount: no MOUNTPOINT ({} given)",
            args.mountpoint.display()
        ))),
        (false, true) => Err(Failure("MOUNTPOINT is missing".into())),
        _ => Ok(()),
    }
}

/// Refuses what `--vhost-user` can't do (mount options, other
/// transports, takeover and supervision).
pub fn check_virtio_args(args: &Args) -> Result<(), Failure> {
    let mut refused = Vec::new();
    let mut no = |on: bool, what: &str| {
        if on {
            refused.push(what.to_string());
        }
    };
    no(args.uring, "--uring");
    no(args.supervise, "--supervise");
    no(args.takeover_socket.is_some(), "--takeover-socket");
    no(args.take_over.is_some(), "--take-over");
    no(args.auto_unmount, "--auto-unmount");
    no(args.allow_other, "--allow-other");
    no(args.unmount_dead, "--unmount-dead");
    no(args.max_read.is_some(), "--max-read");
    no(!args.mount_flags.is_empty(), "mount flags (-o)");
    if refused.is_empty() {
        return Ok(());
    }
    Err(Failure(format!(
        "--vhost-user can't be combined with {}: the guest's kernel mounts, and its \
         requests come through virtqueues, each served by a thread (and its runtime \
         with --runtime tokio|uring)",
        refused.join(", ")
    )))
}

/// The transport's configuration from the arguments.
pub fn virtio_config(args: &Args) -> Result<VirtioConfig, Failure> {
    let runtime = match args.runtime {
        Runtime::Sync => None,
        Runtime::Tokio => Some(VirtioRuntime::Tokio),
        Runtime::Uring => Some(VirtioRuntime::IoUring),
    };
    let config = VirtioConfig::default()
        .request_queues(args.virtio.virtio_queues)
        .tag(args.virtio.tag.clone())
        .runtime(runtime);
    config
        .validate()
        .map_err(|e| Failure(format!("--vhost-user: {e}")))?;
    Ok(config)
}

/// Listens on the socket and serves virtual machines one connection after
/// another until a signal stops it; `detach` is told once the socket
/// listens.
pub fn serve_virtio(args: Args, source: PathBuf, detach: &mut Detach) -> Result<(), Failure> {
    check_virtio_args(&args)?;
    check_source(&source)?;
    let config = virtio_config(&args)?;
    let fs_config = args.fs.passthrough_config()?;
    let socket = args
        .virtio
        .socket
        .clone()
        .ok_or_else(|| Failure("--vhost-user SOCKET is missing".into()))?;
    let confinement = crate::sandbox::Confinement::from_args(&args, &source)?;
    crate::raise_nofile_limit();
    let signals = block_signals();
    // The socket first, then confinement (before any thread starts);
    // each connection's file system opens SOURCE where the sandbox has it.
    let serve =
        Arc::new(VirtioServe::bind(&socket, config.clone()).map_err(|e| Failure(e.to_string()))?);
    let confined = crate::sandbox::confine(&confinement)?;

    // The file system of the current session, for SIGUSR1's log.
    let current: Arc<Mutex<Option<Arc<PassthroughFs>>>> = Arc::default();
    args.fs.check_thread_pool(args.runtime)?;
    let factory: Arc<ServerFactory> = {
        let (source, current, debug) = (confined.source.clone(), current.clone(), args.debug);
        let (fs_args, runtime) = (args.fs.clone(), args.runtime);
        Arc::new(move || {
            let fs = Arc::new(
                PassthroughFs::new(&source, fs_config.clone()).map_err(std::io::Error::other)?,
            );
            fs_args
                .apply_thread_pool(&fs, runtime)
                .map_err(|Failure(e)| std::io::Error::other(e))?;
            *current.lock().unwrap_or_else(|e| e.into_inner()) = Some(fs.clone());
            let server = match runtime {
                Runtime::Sync => Server::new(fs),
                _ => Server::new_async(fs),
            };
            Ok(Arc::new(server.with_request_log(debug)))
        })
    };
    tracing::info!(
        source = %source.display(),
        socket = %socket.display(),
        tag = config.tag.as_deref().unwrap_or("(the VMM's)"),
        request_queues = config.request_queues,
        runtime = ?config.runtime,
        background = detach.is_background(),
        confinement = %confined.summary,
        "passthroughfs serving virtio-fs over vhost-user"
    );
    detach.ready();
    crate::notify::ready();
    let stopper = serve.clone();
    spawn_signal_thread(
        signals,
        socket.clone(),
        move || {
            if let Some(fs) = &*current.lock().unwrap_or_else(|e| e.into_inner()) {
                log_fs_state(fs);
            }
        },
        move || {
            crate::notify::stopping();
            stopper.stop();
        },
    )?;
    let result = if args.virtio.once {
        serve.serve_one(factory)
    } else {
        serve.run(factory)
    };
    crate::notify::stopping();
    match result {
        Ok(()) => {
            tracing::info!("stopped; exiting");
            Ok(())
        }
        Err(e) => Err(Failure(format!("serving failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(argv: &[&str]) -> Result<Args, Failure> {
        let mut args =
            Args::try_parse_from(std::iter::once("passthroughfs").chain(argv.iter().copied()))
                .map_err(|e| Failure(e.to_string()))?;
        settle_args(&mut args)?;
        Ok(args)
    }

    #[test]
    fn vhost_user_takes_a_source_and_no_mountpoint() {
        let a = parse(&["--vhost-user", "/run/vfs.sock", "--tag", "fs0", "/srv"]).unwrap();
        assert_eq!(a.virtio.socket, Some(PathBuf::from("/run/vfs.sock")));
        assert_eq!(a.source, PathBuf::from("/srv"));
        assert!(a.mountpoint.as_os_str().is_empty());
        let a = parse(&[
            "--socket-path",
            "/s",
            "--shared-dir",
            "/srv",
            "--sandbox",
            "none",
        ])
        .unwrap();
        assert_eq!(a.source, PathBuf::from("/srv"));
        assert!(parse(&["--vhost-user", "/s", "/srv", "/mnt"])
            .unwrap_err()
            .0
            .contains("no MOUNTPOINT"));
        assert!(parse(&["--vhost-user", "/s"])
            .unwrap_err()
            .0
            .contains("missing"));
        assert!(parse(&["--vhost-user", "/s", "--shared-dir", "/a", "/b"])
            .unwrap_err()
            .0
            .contains("give one of them"));
    }

    #[test]
    fn shared_dir_is_source_when_mounting_too() {
        let a = parse(&["--shared-dir", "/srv", "/mnt"]).unwrap();
        assert_eq!(a.source, PathBuf::from("/srv"));
        assert_eq!(a.mountpoint, PathBuf::from("/mnt"));
        assert!(parse(&["/srv"])
            .unwrap_err()
            .0
            .contains("MOUNTPOINT is missing"));
        assert!(parse(&[]).unwrap_err().0.contains("missing"));
    }

    #[test]
    fn sandbox_modes_parse_with_vhost_user() {
        use crate::sandbox::SandboxMode;
        let a = parse(&["--vhost-user", "/s", "--sandbox", "namespace", "/srv"]).unwrap();
        assert_eq!(a.sandbox, Some(SandboxMode::Namespace));
        for mode in ["bogus", ""] {
            assert!(parse(&["--vhost-user", "/s", "--sandbox", mode, "/srv"]).is_err());
        }
    }

    #[test]
    fn mount_only_options_are_refused_with_vhost_user() {
        let a = parse(&["--vhost-user", "/s", "--uring", "--allow-other", "/srv"]).unwrap();
        let e = check_virtio_args(&a).unwrap_err();
        assert!(
            e.0.contains("--uring") && e.0.contains("--allow-other"),
            "{}",
            e.0
        );
        let a = parse(&["--vhost-user", "/s", "/srv"]).unwrap();
        check_virtio_args(&a).unwrap();
        let a = parse(&["--vhost-user", "/s", "--runtime", "uring", "/srv"]).unwrap();
        check_virtio_args(&a).unwrap();
        assert_eq!(
            virtio_config(&a).unwrap().runtime,
            Some(VirtioRuntime::IoUring)
        );
        assert!(
            parse(&["--tag", "x", "/srv", "/mnt"]).is_err(),
            "--tag needs --vhost-user"
        );
    }

    #[test]
    fn bad_queue_counts_and_tags_are_refused() {
        let a = parse(&["--vhost-user", "/s", "--virtio-queues", "0", "/srv"]).unwrap();
        assert!(virtio_config(&a).is_err());
        let long = "t".repeat(37);
        let a = parse(&["--vhost-user", "/s", "--tag", &long, "/srv"]).unwrap();
        assert!(virtio_config(&a).unwrap_err().0.contains("tag"));
    }
}
