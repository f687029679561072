//! The daemon's command line: the clap definition of `passthroughfs`'s
//! arguments, in the library so that `--help`, the man page (`cargo xtask
//! man`) and the daemon come from one definition.

use crate::{FsArgs, Runtime};
use clap::Parser;
use fuse_transport_dev::SessionConfig;
use fuse_transport_uring::UringConfig;
use std::path::PathBuf;

/// What `--help` says about signals (after the options).
pub const SIGNALS_HELP: &str = "\
Signals:
  SIGINT (Ctrl-C), SIGTERM, SIGHUP  unmount and exit 0 once the requests in
                                    progress are answered
  the same again while unmounting   force the exit: the mount is detached
                                    (lazy unmount), requests still in progress
                                    fail, and the process dies of the signal
                                    (status 130 in a shell for Ctrl-C)
  SIGUSR1                           log the transport's and the file system's
                                    state";

/// The command line of `passthroughfs` (its `--help` is the `about` below).
#[derive(Debug, Parser)]
#[command(
    name = "passthroughfs",
    version,
    about = "Serve the directory SOURCE through FUSE at MOUNTPOINT (in the foreground).",
    long_about = None,
    after_help = SIGNALS_HELP
)]
pub struct Args {
    /// The directory to serve.
    pub source: PathBuf,

    /// Where to mount it.
    pub mountpoint: PathBuf,

    /// Worker threads to start with and to keep (more start when all are
    /// busy, up to four per CPU, and leave once idle; `--runtime sync` over
    /// /dev/fuse), or, with `--runtime tokio|uring`
    /// over /dev/fuse, runtime threads, each serving with its own task and
    /// cloned fd.
    #[arg(long, value_name = "N", default_value_t = SessionConfig::default().threads)]
    pub threads: usize,

    /// The backend's switches.
    #[command(flatten)]
    pub fs: FsArgs,

    /// Let users other than the mounting one use the mount (needs --default-permissions).
    #[arg(long)]
    pub allow_other: bool,

    /// Let the kernel check permissions from file modes.
    #[arg(long)]
    pub default_permissions: bool,

    /// Mount read-only.
    #[arg(long)]
    pub ro: bool,

    /// The mount's source name (default: SOURCE).
    #[arg(long, value_name = "NAME")]
    pub fsname: Option<String>,

    /// The mount's subtype (type fuse.NAME); an empty NAME mounts as plain
    /// type fuse (what xfstests' FSTYP=fuse expects to find).
    #[arg(long, value_name = "NAME", default_value = "passthroughfs")]
    pub subtype: String,

    /// Largest read request the kernel sends, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_read: Option<u32>,

    /// Serve over FUSE-over-io_uring when the kernel offers it (falls back
    /// to /dev/fuse, saying why, when it doesn't: then with --threads
    /// workers, as without --uring).
    #[arg(long)]
    pub uring: bool,

    /// io_uring: payload buffers per queue in the kernel's buffer pool
    /// (Linux 7.3+); 0 gives every ring entry its own payload buffer.
    #[arg(long, value_name = "N", default_value_t = UringConfig::default().bufs_per_queue, requires = "uring")]
    pub uring_bufs: usize,

    /// io_uring: ring entries per queue (requests a queue serves at once).
    #[arg(long, value_name = "N", default_value_t = UringConfig::default().entries_per_queue, requires = "uring")]
    pub uring_entries: usize,

    /// io_uring: ring threads serving the kernel's queues (it has one queue
    /// per possible CPU); 0 gives each queue its own thread, pinned to its CPU.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "uring")]
    pub uring_queues: usize,

    /// What runs the request handlers: worker threads (sync), or one
    /// async-io runtime (over /dev/fuse: one thread serving every request
    /// as a task; with --uring: one per ring thread).
    #[arg(long, value_enum, default_value_t = Runtime::Sync)]
    pub runtime: Runtime,

    /// If MOUNTPOINT is a dead FUSE mount (its daemon exited or was
    /// killed: every access fails with ENOTCONN), unmount it lazily first
    /// instead of refusing to start.
    #[arg(long)]
    pub unmount_dead: bool,
}
