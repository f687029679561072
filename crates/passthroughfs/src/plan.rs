//! What the daemon works out from its arguments before it forks and
//! mounts: the checks that make a bad argument the command's error, and the
//! [`Plan`] that [`serve`](crate::serve::serve) and
//! [`supervise`](crate::supervise::supervise) start from. Apart from the
//! serving so that the checks read in one place.

use fuse_backend_passthrough::PassthroughConfig;
use fuse_transport_dev::{MountOptions, SessionConfig};
use fuse_transport_uring::UringConfig;
use passthroughfs::cli::Args;
use passthroughfs::{check_source, options, session_config, uring_config, Failure, RingLayout};
use std::path::{Path, PathBuf};

fn check_mountpoint(mountpoint: &Path, unmount_dead: bool) -> Result<(), Failure> {
    // statfs always asks the daemon (a stat may be answered from the
    // kernel's cache even on a dead mount): a live FUSE mount there is in
    // use, one whose daemon is gone answers ENOTCONN.
    match fuse_transport_dev::is_fuse_mount(mountpoint) {
        Ok(true) => Err(Failure(format!(
            "mountpoint {} is in use: a FUSE file system is already mounted there (unmount it first)",
            mountpoint.display()
        ))),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) && unmount_dead => {
            // Lazily: programs may still hold files of the dead mount.
            fuse_transport_dev::unmount_path(mountpoint, true).map_err(|e| {
                Failure(format!(
                    "cannot unmount the dead FUSE mount at {}: {e}",
                    mountpoint.display()
                ))
            })?;
            tracing::warn!(
                mountpoint = %mountpoint.display(),
                "unmounted a dead FUSE mount (its daemon had exited) lazily"
            );
            check_mountpoint(mountpoint, false)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Err(Failure(format!(
            "{}, or start passthroughfs with --unmount-dead to do that itself",
            fuse_transport_dev::MountError::DeadMount {
                path: mountpoint.to_path_buf(),
            }
        ))),
        // Checked here rather than left to the mount, so that the
        // command reports it before the daemon goes to the background.
        _ => match std::fs::metadata(mountpoint) {
            Ok(m) if !m.is_dir() => Err(Failure(format!(
                "mountpoint {} is not a directory",
                mountpoint.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure(format!(
                "mountpoint {} does not exist",
                mountpoint.display()
            ))),
            // Anything else (no permission, ...) is the mount's to report.
            _ => Ok(()),
        },
    }
}

/// Everything checked and worked out before the daemon forks (so that a
/// bad argument is reported by the command the user ran, before any log
/// line) and mounts.
pub(crate) struct Plan {
    pub(crate) args: Args,
    /// The directory to serve.
    pub(crate) source: PathBuf,
    pub(crate) options: MountOptions,
    pub(crate) fs_config: PassthroughConfig,
    pub(crate) session_config: SessionConfig,
    pub(crate) uring: Option<UringConfig>,
    /// `--sandbox`, `--seccomp`, `--landlock` (docs/security.md).
    pub(crate) confinement: passthroughfs::sandbox::Confinement,
}

impl Plan {
    pub(crate) fn new(mut args: Args, background: bool, supervised: bool) -> Result<Plan, Failure> {
        if args.allow_other && !args.default_permissions {
            // Named as typed: `-o allow_other` (an fstab line) or the switch.
            let (allow_other, default_permissions) = if options::named(&args, "allow_other") {
                ("-o allow_other", "-o default_permissions")
            } else {
                ("--allow-other", "--default-permissions")
            };
            return Err(Failure(format!(
                "{allow_other} needs {default_permissions}: the daemon serves every user's \
                 requests with its own privileges (root's) for lookups, reads and writes, so \
                 without the kernel checking file modes any user could read, change or list \
                 files that the backing directory's permissions deny them"
            )));
        }
        if args.fs.allow_idmap && !args.default_permissions {
            let (allow_idmap, default_permissions) = if options::named(&args, "allow_idmap") {
                ("-o allow_idmap", "-o default_permissions")
            } else {
                ("--allow-idmap", "--default-permissions")
            };
            return Err(Failure(format!(
                "{allow_idmap} needs {default_permissions}: the kernel allows idmapped FUSE \
                 mounts only where it checks permissions itself, and fails INIT otherwise"
            )));
        }
        if (args.takeover_socket.is_some() || args.take_over.is_some()) && args.uring {
            return Err(Failure(
                "--takeover-socket and --take-over work over /dev/fuse only (any --runtime, \
                 with or without --thread-pool): over io_uring the kernel hands requests to \
                 the old daemon's ring entries until its ring closes, and a request they hold \
                 then is neither answered nor resent (a client would hang); see \
                 docs/takeover.md"
                    .into(),
            ));
        }
        if args.supervise {
            if args.uring || args.runtime != passthroughfs::Runtime::Sync {
                return Err(Failure(
                    "--supervise works over /dev/fuse with --runtime sync only, for now (the \
                     request journal follows a request on one thread; the kernel resends only \
                     what /dev/fuse readers held)"
                        .into(),
                ));
            }
            if args.takeover_socket.is_some() || args.take_over.is_some() {
                return Err(Failure(
                    "--supervise can't be combined with --takeover-socket or --take-over yet"
                        .into(),
                ));
            }
        }
        if args.take_over.is_some() && args.auto_unmount {
            return Err(Failure(
                "--take-over can't be combined with --auto-unmount: the mount exists already"
                    .into(),
            ));
        }
        let uring_defaults = UringConfig::default();
        if !args.uring
            && (args.uring_bufs != uring_defaults.bufs_per_queue
                || args.uring_entries != uring_defaults.entries_per_queue
                || args.uring_queues != 0
                || args.uring_threads_per_queue != 0
                || args.uring_unregistered_pools
                || args.uring_no_zero_copy
                || args.uring_one_ring
                || args.uring_unpinned
                || args.uring_nice != fuse_transport_uring::DEFAULT_RING_NICE)
        {
            return Err(Failure(
                "--uring-bufs, --uring-entries, --uring-queues, --uring-threads-per-queue, \
                 --uring-unregistered-pools, --uring-no-zero-copy, --uring-one-ring, \
                 --uring-unpinned and --uring-nice need --uring (-o io_uring)"
                    .into(),
            ));
        }
        if args.uring_one_ring && args.runtime != passthroughfs::Runtime::Uring {
            return Err(Failure(
                "--uring-one-ring needs --runtime uring: the ring it shares is the io_uring \
                 runtime's"
                    .into(),
            ));
        }
        if args.single_threaded {
            args.threads = 1;
            args.max_threads = Some(1);
        }
        // `-o source=DIR`: SOURCE is the mount's name (as mount(8) passes
        // an fstab line's first field).
        let (mut source, name) = match args.source_dir.clone() {
            Some(dir) => (dir, args.source.to_string_lossy().into_owned()),
            None => (
                args.source.clone(),
                args.source.to_string_lossy().into_owned(),
            ),
        };
        if background {
            // The background daemon's working directory becomes `/`.
            let absolute = |p: &Path| {
                std::path::absolute(p)
                    .map_err(|e| Failure(format!("cannot use {}: {e}", p.display())))
            };
            source = absolute(&source)?;
            args.mountpoint = absolute(&args.mountpoint)?;
        }
        check_source(&source)?;
        // A supervised daemon serves the supervisor's mount.
        if args.take_over.is_none() && !supervised {
            check_mountpoint(&args.mountpoint, args.unmount_dead)?;
        }
        let fs_config = args.fs.passthrough_config()?;
        args.fs.check_thread_pool(args.runtime)?;
        let session_config = session_config(args.threads, args.max_threads)?;
        let uring = if args.uring {
            Some(
                uring_config(
                    RingLayout {
                        threads: args.uring_queues,
                        threads_per_queue: args.uring_threads_per_queue,
                        entries: args.uring_entries,
                    },
                    args.uring_bufs,
                    args.runtime,
                    &session_config,
                )?
                .registered_pools(!args.uring_unregistered_pools)
                .zero_copy(!args.uring_no_zero_copy)
                .one_ring(args.uring_one_ring)
                .pin_threads(!args.uring_unpinned)
                // Ring threads start confined, without CAP_SYS_NICE (and
                // setpriority(2) outside the seccomp filter): they inherit
                // `--uring-nice` from the thread that confines, which sets it
                // (`sandbox::Confinement::thread_nice`).
                .nice(None),
            )
        } else {
            None
        };
        let mut options = MountOptions::default()
            .fsname(args.fsname.clone().unwrap_or(name))
            .allow_other(args.allow_other)
            .default_permissions(args.default_permissions)
            .read_only(args.ro)
            .max_read(args.max_read);
        if !args.subtype.is_empty() {
            options = options.subtype(args.subtype.clone());
        }
        let mut extra = Vec::new();
        for flag in &args.mount_flags {
            options = match flag.as_str() {
                "suid" => options.nosuid(false),
                "nosuid" => options.nosuid(true),
                "dev" => options.nodev(false),
                "nodev" => options.nodev(true),
                _ => {
                    extra.push(flag.clone());
                    options
                }
            };
        }
        if args.auto_unmount {
            extra.push("auto_unmount".into());
        }
        let options = options.extra(extra);
        options.validate().map_err(|e| Failure(e.to_string()))?;
        let confinement = passthroughfs::sandbox::Confinement::from_args(&args, &source)?;
        Ok(Plan {
            args,
            source,
            options,
            fs_config,
            session_config,
            uring,
            confinement,
        })
    }
}
