//! Which mode the daemon serves in: the [`Transport`], the [`Plan`] that
//! [`plan`](fn@plan) makes of a command line (or the [`PlanError`] saying why
//! it can't be served), and the backend's configuration and mount options
//! for it.

use super::DaemonArgs;
use clap::ValueEnum;
use fuse_backend_passthrough::PassthroughConfig;
use fuse_transport_dev::{MountOptions, SessionConfig, TaskConfig};
use fuse_transport_uring::UringConfig;
use passthroughfs::Runtime;
use std::fmt;

/// How requests reach the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// `read(2)`/`writev(2)` on `/dev/fuse`.
    Dev,
    /// FUSE over io_uring (`FUSE_OVER_IO_URING`).
    Uring,
}

impl Transport {
    /// The name used on the command line and in the start line.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Dev => "dev",
            Transport::Uring => "uring",
        }
    }
}

/// How the daemon will serve: one variant per mode whose code exists.
#[derive(Debug, Clone)]
pub enum Plan {
    /// `/dev/fuse` worker threads ([`DevSession`](fuse_transport_dev::DevSession)).
    DevSync(SessionConfig),
    /// FUSE over io_uring ring threads
    /// ([`UringSession`](fuse_transport_uring::UringSession)), synchronous
    /// handlers, or (with [`UringConfig::runtime`] set) async handlers on a
    /// runtime per ring thread.
    UringSync {
        /// The transport's configuration.
        config: UringConfig,
        /// Fail unless the kernel gives buffer pools (`--uring-bufs N`, N > 0).
        require_pools: bool,
        /// Serve over `/dev/fuse` if io_uring can't be used.
        allow_fallback: bool,
    },
    /// `/dev/fuse` read by a task on an `async-io` runtime ([`fuse_transport_dev::FuseDevTask`]).
    DevAsync {
        /// Which runtime.
        runtime: async_io::RuntimeType,
        /// The task's configuration.
        config: TaskConfig,
        /// Runtime threads, each with a task (the first and its siblings).
        threads: usize,
    },
}

/// Why a command line can't be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The mode is valid but its code does not exist yet.
    NotAvailable(String),
    /// The switches contradict each other or are out of range.
    Invalid(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NotAvailable(m) => write!(f, "not available yet: {m}"),
            PlanError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PlanError {}

/// Decides how to serve `args`, or why it can't be done.
pub fn plan(args: &DaemonArgs) -> Result<Plan, PlanError> {
    if args.fs.thread_pool && args.runtime == Runtime::Sync {
        // The pool serves the async path (AsyncFileSystem); synchronous
        // workers already block on threads of their own.
        return Err(PlanError::NotAvailable(
            "--thread-pool with --runtime sync: the backend's pool serves the async runtimes \
             (--runtime tokio or uring); synchronous workers already run READ and WRITE on \
             blocking threads of their own"
                .into(),
        ));
    }
    if args.threads == Some(0) && args.transport == Transport::Dev {
        return Err(PlanError::Invalid("--threads must be at least 1".into()));
    }
    let uring_only = [
        ("--uring-bufs", args.uring_bufs.is_some()),
        ("--uring-entries", args.uring_entries.is_some()),
        ("--uring-one-ring", args.uring_one_ring),
        ("--uring-unpinned", args.uring_unpinned),
        ("--uring-nice", args.uring_nice.is_some()),
        ("--allow-fallback", args.allow_fallback),
    ];
    if args.transport != Transport::Uring {
        if let Some((name, _)) = uring_only.iter().find(|(_, set)| *set) {
            return Err(PlanError::Invalid(format!(
                "{name} needs --transport uring"
            )));
        }
    }
    if args.fs.passthrough && (args.fs.writeback || args.fs.no_open) {
        return Err(PlanError::Invalid(
            "--passthrough excludes --writeback and --no-open".into(),
        ));
    }
    if (args.runtime == Runtime::Sync || args.transport == Transport::Uring)
        && args.max_in_flight.is_some()
    {
        return Err(PlanError::Invalid(
            "--max-in-flight needs --transport dev with --runtime tokio or uring (over io_uring \
             --uring-entries bounds the requests a queue serves at once)"
                .into(),
        ));
    }
    match (args.transport, args.runtime) {
        (Transport::Dev, Runtime::Sync) => Ok(Plan::DevSync(
            passthroughfs::session_config(args.threads.unwrap_or(default_threads()), None)
                .map_err(invalid)?,
        )),
        (Transport::Uring, runtime) => {
            let default = UringConfig::default();
            let dev = passthroughfs::session_config(default_threads(), None).map_err(invalid)?;
            Ok(Plan::UringSync {
                config: passthroughfs::uring_config(
                    passthroughfs::RingLayout {
                        threads: args.threads.unwrap_or(default.threads),
                        threads_per_queue: default.threads_per_queue,
                        entries: args.uring_entries.unwrap_or(default.entries_per_queue),
                    },
                    args.uring_bufs.unwrap_or(default.bufs_per_queue),
                    runtime,
                    &dev,
                )
                .map_err(invalid)?
                .one_ring(args.uring_one_ring)
                .pin_threads(!args.uring_unpinned)
                .nice(args.uring_nice.or(default.nice)),
                require_pools: args.uring_bufs.is_some_and(|n| n > 0),
                allow_fallback: args.allow_fallback,
            })
        }
        (Transport::Dev, Runtime::Tokio | Runtime::Uring) => {
            if args.fs.passthrough {
                // FuseDevTask answers INIT inside the task, after the start
                // line, so the daemon can't check that the kernel agreed.
                return Err(PlanError::NotAvailable(format!(
                    "--passthrough with --runtime {}: the daemon can't yet check that \
                     INIT turned it on before it reports ready",
                    args.runtime.as_str()
                )));
            }
            let runtime = args
                .runtime
                .async_type()
                .unwrap_or(async_io::RuntimeType::Tokio);
            let default = TaskConfig::default();
            let max_in_flight = args.max_in_flight.unwrap_or(default.max_in_flight);
            Ok(Plan::DevAsync {
                runtime,
                config: default.max_in_flight(max_in_flight),
                threads: args.threads.unwrap_or(default_threads()),
            })
        }
    }
}

/// `/dev/fuse` worker threads or runtime threads without `--threads`.
fn default_threads() -> usize {
    SessionConfig::default().threads
}

fn invalid(f: passthroughfs::Failure) -> PlanError {
    PlanError::Invalid(f.0)
}

/// The backend's configuration for `args` (`passthroughfs`'s mapping).
pub fn passthrough_config(args: &DaemonArgs) -> Result<PassthroughConfig, PlanError> {
    args.fs.passthrough_config().map_err(invalid)
}

/// The mount options for `args`.
pub fn mount_options(args: &DaemonArgs) -> MountOptions {
    MountOptions::default()
        .fsname(format!("fuse-bench:{}", args.source.display()))
        .subtype("fuse-bench")
        .default_permissions(args.default_permissions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{Failure, EXIT_NOT_AVAILABLE};
    use clap::Parser;
    use fuse_backend_passthrough::CachePolicy;
    use std::time::Duration;

    fn args(extra: &[&str]) -> DaemonArgs {
        let mut argv = vec!["fuse-bench-daemon", "/src", "/mnt"];
        argv.extend_from_slice(extra);
        DaemonArgs::try_parse_from(argv).expect("valid arguments")
    }

    #[test]
    fn default_mode_is_dev_sync() {
        match plan(&args(&[])).unwrap() {
            Plan::DevSync(c) => assert_eq!(c.threads, SessionConfig::default().threads),
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--threads", "5"])).unwrap() {
            Plan::DevSync(c) => {
                assert_eq!(c.threads, 5);
                assert!(c.max_threads >= 5);
            }
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn uring_switches_reach_the_config() {
        match plan(&args(&[
            "--transport",
            "uring",
            "--uring-bufs",
            "0",
            "--uring-entries",
            "16",
            "--threads",
            "1",
            "--uring-one-ring",
            "--uring-unpinned",
        ]))
        .unwrap()
        {
            Plan::UringSync {
                config,
                require_pools,
                allow_fallback,
            } => {
                assert_eq!(config.bufs_per_queue, 0);
                assert_eq!(config.entries_per_queue, 16);
                assert_eq!(config.threads, 1);
                assert!(config.one_ring);
                assert!(!config.pin_threads);
                assert!(!require_pools);
                assert!(!allow_fallback);
            }
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--transport", "uring", "--uring-bufs", "8"])).unwrap() {
            Plan::UringSync {
                config,
                require_pools,
                ..
            } => {
                assert!(require_pools);
                assert!(config.pin_threads, "ring threads are pinned by default");
            }
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn missing_modes_are_refused_not_substituted() {
        let e = plan(&args(&["--thread-pool"])).unwrap_err();
        assert!(matches!(e, PlanError::NotAvailable(_)), "{e}");
        assert!(e.to_string().starts_with("not available yet: "), "{e}");
        for rt in ["tokio", "uring"] {
            let e = plan(&args(&["--runtime", rt, "--passthrough"])).unwrap_err();
            assert!(matches!(e, PlanError::NotAvailable(_)), "{e}");
        }
        let f = Failure::from(plan(&args(&["--thread-pool"])).unwrap_err());
        assert_eq!(f.status, EXIT_NOT_AVAILABLE);
    }

    #[test]
    fn thread_pool_and_async_uring_plan() {
        for (rt, want) in [
            ("tokio", async_io::RuntimeType::Tokio),
            ("uring", async_io::RuntimeType::IoUring),
        ] {
            match plan(&args(&[
                "--runtime",
                rt,
                "--thread-pool",
                "--pool-threads",
                "8",
            ]))
            .unwrap()
            {
                Plan::DevAsync { runtime, .. } => assert_eq!(runtime, want),
                other => panic!("unexpected plan {other:?}"),
            }
            match plan(&args(&[
                "--transport",
                "uring",
                "--runtime",
                rt,
                "--thread-pool",
            ]))
            .unwrap()
            {
                Plan::UringSync { config, .. } => assert_eq!(config.runtime, Some(want.into())),
                other => panic!("unexpected plan {other:?}"),
            }
            let e = plan(&args(&[
                "--transport",
                "uring",
                "--runtime",
                rt,
                "--max-in-flight",
                "4",
            ]))
            .unwrap_err();
            assert!(matches!(e, PlanError::Invalid(_)), "{e}");
        }
        match plan(&args(&["--transport", "uring"])).unwrap() {
            Plan::UringSync { config, .. } => assert_eq!(config.runtime, None),
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn async_runtimes_plan() {
        match plan(&args(&["--runtime", "tokio"])).unwrap() {
            Plan::DevAsync { runtime, .. } => assert_eq!(runtime, async_io::RuntimeType::Tokio),
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--runtime", "uring", "--max-in-flight", "7"])).unwrap() {
            Plan::DevAsync {
                runtime,
                config,
                threads,
            } => {
                assert_eq!(runtime, async_io::RuntimeType::IoUring);
                assert_eq!(config.max_in_flight, 7);
                assert_eq!(threads, SessionConfig::default().threads);
            }
            other => panic!("unexpected plan {other:?}"),
        }
        match plan(&args(&["--runtime", "tokio", "--threads", "3"])).unwrap() {
            Plan::DevAsync { threads, .. } => assert_eq!(threads, 3),
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn contradictions_are_invalid() {
        for extra in [
            &["--uring-bufs", "2"][..],
            &["--allow-fallback"][..],
            &["--uring-unpinned"][..],
            &["--max-in-flight", "3"][..],
            &["--threads", "0"][..],
            &["--passthrough", "--writeback"][..],
        ] {
            let e = plan(&args(extra)).unwrap_err();
            assert!(matches!(e, PlanError::Invalid(_)), "{extra:?}: {e}");
        }
        let a = args(&["--attr-timeout=-1"]);
        assert!(passthrough_config(&a).is_err());
        assert!(DaemonArgs::try_parse_from(["x", "/s", "/m", "--pool-threads", "2"]).is_err());
    }

    #[test]
    fn cache_switches_reach_the_backend() {
        let c = passthrough_config(&args(&[
            "--cache",
            "always",
            "--writeback",
            "--no-readdirplus",
            "--entry-timeout",
            "2.5",
        ]))
        .unwrap();
        assert_eq!(c.cache, CachePolicy::Always);
        assert!(c.writeback);
        assert!(!c.readdirplus);
        assert_eq!(c.entry_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(c.attr_timeout, None);
        assert!(
            c.passthrough,
            "kernel passthrough where available, as in passthroughfs"
        );
        assert!(c.file_handles);
        let c = passthrough_config(&args(&["--no-passthrough", "--no-file-handles"])).unwrap();
        assert!(!c.passthrough);
        assert!(!c.file_handles);
        let c = passthrough_config(&args(&["--passthrough"])).unwrap();
        assert!(c.passthrough);
    }
}
