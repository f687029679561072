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
                                    state
  With --supervise, the supervisor passes these to the serving process, and
  starts another when that one dies any other way (a crash, kill -9).
  SIGUSR2 (--supervise)             restart the serving process: it answers
                                    what it holds and the supervisor starts
                                    the program again (a new build there)";

/// What `--help` says after the options: the `-o` names, the environment
/// and the signals.
pub fn after_help() -> String {
    format!(
        "Mount options (-o OPT[,OPT...], as mount(8), fstab and mount.fuse3 pass them; a later \
         option wins):\n{}\n\n{ENVIRONMENT_HELP}\n\n{SIGNALS_HELP}",
        crate::options::help()
    )
}

/// What `--help` says about the environment.
pub const ENVIRONMENT_HELP: &str = "\
Environment:
  RUST_LOG       log filter (default: info; e.g. debug, or fuse_request=off
                 to silence --debug's request lines)
  NO_COLOR       no colours in the log (there are none unless standard error
                 is a terminal)
  NOTIFY_SOCKET  where to send READY=1 once the mount is usable and
                 STOPPING=1 when unmounting (systemd Type=notify)";

/// What `--auto-unmount` does, said once: `--help`, the man page (made
/// from the same definition) and the README (checked by a test) say
/// this.
pub const AUTO_UNMOUNT_HELP: &str = "Unmount when the daemon dies, even of SIGKILL, so that no \
    dead mount (ENOTCONN) stays behind. As root a watcher process forked at \
    mount time does it (it also aborts the connection, and it checks by mount id that the mount \
    is still this one); as a normal user fusermount3 does, as for libfuse.";

/// The usage line of a mount.
pub const USAGE: &str = "passthroughfs [OPTIONS] SOURCE MOUNTPOINT [-o OPT[,OPT...]]";

/// The usage line of `--vhost-user`.
pub const USAGE_VHOST_USER: &str =
    "passthroughfs --vhost-user SOCKET [OPTIONS] SOURCE (or --shared-dir DIR)";

/// The command line of `passthroughfs` (its `--help` is the `about` below).
#[derive(Debug, Parser)]
#[command(
    name = "passthroughfs",
    version,
    about = "Serve the directory SOURCE through FUSE at MOUNTPOINT. It goes to the background once \
             the mount is usable (the exit status says whether it came up) unless -f or -d; \
             `mount -t fuse.passthroughfs SOURCE MOUNTPOINT -o OPTIONS` and fstab lines of that \
             type run it through mount.fuse3.",
    long_about = None,
    after_help = after_help(),
    override_usage = format!("{USAGE}\n       {USAGE_VHOST_USER}")
)]
pub struct Args {
    /// The directory to serve (with `-o source=DIR`: the mount's name, as
    /// mount(8) passes the first field of an fstab line).
    #[arg(value_name = "SOURCE")]
    pub source_arg: Option<PathBuf>,

    /// Where to mount it (none with --vhost-user).
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint_arg: Option<PathBuf>,

    /// SOURCE, or `--shared-dir` (set by
    /// [`crate::virtio::settle_args`]).
    #[arg(skip)]
    pub source: PathBuf,

    /// MOUNTPOINT (set by [`crate::virtio::settle_args`]; empty with
    /// `--vhost-user`).
    #[arg(skip)]
    pub mountpoint: PathBuf,

    /// Mount options, comma-separated, libfuse's names (listed below); may
    /// be given more than once.
    #[arg(short = 'o', value_name = "OPT[,OPT...]", action = clap::ArgAction::Append)]
    pub options: Vec<String>,

    /// Stay in the foreground (by default the daemon goes to the background
    /// once the mount is usable, and logs to syslog or the --log-file from then on).
    #[arg(short = 'f', long)]
    pub foreground: bool,

    /// Log one line per request (opcode, node, arguments, result, latency);
    /// implies --foreground.
    #[arg(short = 'd', long)]
    pub debug: bool,

    /// Append the log to this file (created if missing) instead of
    /// standard error, and in the background instead of syslog; a line
    /// that can't be written (a full disk) is dropped, never the mount.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    /// One worker thread (libfuse's -s): --threads 1 --max-threads 1.
    #[arg(short = 's', long)]
    pub single_threaded: bool,

    /// Worker threads to start with and to keep (more start when all are
    /// busy, up to four per CPU, and leave once idle; `--runtime sync` over
    /// /dev/fuse), or, with `--runtime tokio|uring`
    /// over /dev/fuse, runtime threads, each serving with its own task and
    /// cloned fd.
    #[arg(long, value_name = "N", default_value_t = SessionConfig::default().threads)]
    pub threads: usize,

    /// The most worker threads over /dev/fuse (default: four per CPU,
    /// between 8 and 64, and at least --threads).
    #[arg(long, value_name = "N")]
    pub max_threads: Option<usize>,

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

    /// See [`AUTO_UNMOUNT_HELP`].
    #[arg(long, help = AUTO_UNMOUNT_HELP)]
    pub auto_unmount: bool,

    /// Serve over FUSE-over-io_uring when the kernel offers it (falls back
    /// to /dev/fuse, saying why, when it doesn't: then with --threads
    /// workers, as without --uring).
    #[arg(long)]
    pub uring: bool,

    /// io_uring: payload buffers per queue in the kernel's buffer pool
    /// (Linux 7.3+); 0 gives every ring entry its own payload buffer.
    #[arg(long, value_name = "N", default_value_t = UringConfig::default().bufs_per_queue)]
    pub uring_bufs: usize,

    /// io_uring: don't register the buffer pools with the rings (they are
    /// by default, where the kernel takes it: payloads are then copied
    /// through pages pinned once instead of per request).
    #[arg(long)]
    pub uring_unregistered_pools: bool,

    /// io_uring: don't ask for zero copy (it is asked for by default, Linux
    /// 7.3+ with CAP_SYS_ADMIN: READ and WRITE data then moves between the
    /// kernel's pages and the backing files without the daemon copying it).
    #[arg(long)]
    pub uring_no_zero_copy: bool,

    /// io_uring with --runtime uring: one ring per queue. The runtime's
    /// io_uring carries both the FUSE commands and the backing files' IO,
    /// so a READ that goes to the disk costs no second ring's round trip
    /// (without it each ring thread runs the FUSE ring and the runtime's
    /// own). Queues with buffer pools (Linux 7.3) keep two rings (logged).
    #[arg(long)]
    pub uring_one_ring: bool,

    /// io_uring: leave the ring threads free to run on any CPU instead of
    /// pinning each to its queue's. Requests one at a time (a stat, a
    /// lookup) then keep their client on its CPU and answer faster; reads
    /// many at a time and creates are slower (docs/benchmarks.md, "Where
    /// the ring threads run").
    #[arg(long)]
    pub uring_unpinned: bool,

    /// io_uring: the nice value the daemon's threads run at once it serves
    /// (-20 to 19). Above their clients' weight, ring threads answer a
    /// request before the client has gone to sleep, which keeps the client
    /// on its CPU (see the io_uring transport's `UringConfig::nice`). Set
    /// before confinement; without `CAP_SYS_NICE` (a user namespace) the
    /// threads keep the nice the daemon started with.
    #[arg(long, value_name = "N", default_value_t = fuse_transport_uring::DEFAULT_RING_NICE,
          allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub uring_nice: i32,

    /// io_uring: ring entries per queue (requests a queue serves at once),
    /// split among its threads; 0: one per ring thread, 16 per thread with
    /// --runtime tokio|uring.
    #[arg(long, value_name = "N", default_value_t = UringConfig::default().entries_per_queue)]
    pub uring_entries: usize,

    /// io_uring: ring threads in all (the kernel has one queue per possible
    /// CPU; fewer threads than queues serve several queues each, more
    /// serve each queue with several); 0: --uring-threads-per-queue for
    /// every queue.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub uring_queues: usize,

    /// io_uring: ring threads per queue, all pinned to the queue's CPU
    /// (a synchronous ring thread serves one request at a time, so more
    /// threads let a queue serve more at once); 0: 4 on machines of up to
    /// 4 CPUs, 2 on larger ones, 1 with --runtime tokio|uring (which
    /// serves a queue's entries concurrently on one thread).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub uring_threads_per_queue: usize,

    /// What runs the request handlers: worker threads (sync), or one
    /// async-io runtime (over /dev/fuse: one thread serving every request
    /// as a task; with --uring: one per ring thread; with --vhost-user: one
    /// per virtqueue thread).
    #[arg(long, value_enum, default_value_t = Runtime::Sync)]
    pub runtime: Runtime,

    /// If MOUNTPOINT is a dead FUSE mount (its daemon exited or was
    /// killed: every access fails with ENOTCONN), unmount it lazily first
    /// instead of refusing to start.
    #[arg(long)]
    pub unmount_dead: bool,

    /// Crash recovery: a supervisor process mounts and holds the
    /// connection, and starts the daemon that serves it; if that daemon
    /// dies (a crash, kill -9), the supervisor starts another, which takes
    /// the node table and open files back from shared memory and has the
    /// kernel resend what the dead one was answering: clients see no
    /// error. /dev/fuse with --runtime sync only; see docs/takeover.md.
    #[arg(long)]
    pub supervise: bool,

    /// Live upgrade: listen on this Unix socket for a new daemon started
    /// with --take-over, and hand the mount over to it (the mount stays;
    /// this daemon exits 0). /dev/fuse with any --runtime (the new daemon
    /// may serve with another); not with --uring.
    #[arg(long, value_name = "PATH")]
    pub takeover_socket: Option<PathBuf>,

    /// Live upgrade: instead of mounting, take over the mount that the
    /// daemon listening on this socket serves (see --takeover-socket);
    /// MOUNTPOINT must be its mountpoint and SOURCE its source.
    #[arg(long, value_name = "PATH")]
    pub take_over: Option<PathBuf>,

    /// Live upgrade: how long either daemon waits for the other during a
    /// takeover, in seconds; the serving daemon stays paused at most that
    /// long for a new daemon that hangs, then serves on.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub takeover_timeout: u64,

    /// Confinement once the mount (or the vhost-user socket) is set up:
    /// `namespace` (new mount, network and IPC namespaces, a root holding
    /// only SOURCE and /proc, capabilities dropped to those used), or
    /// `none`; `chroot` is refused (see docs/security.md). Default:
    /// `namespace` for a new mount (/dev/fuse or --uring), a mount taken
    /// over (--take-over) or offered (--takeover-socket), --supervise's
    /// serving processes and --vhost-user, where this process may build it
    /// (else `none`, with a warning).
    #[arg(long, value_name = "MODE", value_enum)]
    pub sandbox: Option<crate::sandbox::SandboxMode>,

    /// A seccomp filter of the system calls serving makes: `kill` (a call
    /// outside it is logged by name and the daemon exits), `log` (the
    /// kernel logs it and lets it run) or `none`. Default: kill.
    #[arg(long, value_name = "MODE", value_enum)]
    pub seccomp: Option<crate::sandbox::SeccompMode>,

    /// A Landlock ruleset limiting file access to SOURCE (and reading
    /// /proc), with no TCP and no signals out of the sandbox, under any
    /// --sandbox: `on` or `off`. Default: `on` (`off`, with a warning, on
    /// a kernel without Landlock).
    #[arg(long, value_name = "on|off", value_enum)]
    pub landlock: Option<crate::sandbox::LandlockMode>,

    /// Serving a virtual machine over vhost-user (virtio-fs) instead of
    /// mounting.
    #[command(flatten)]
    pub virtio: VirtioArgs,

    /// Generic mount flags from `-o` (`suid`, `dev`, `noexec`, `noatime`,
    /// ...), in order.
    #[arg(skip)]
    pub mount_flags: Vec<String>,

    /// From `-o source=DIR`: the directory to serve (SOURCE then names the
    /// mount).
    #[arg(skip)]
    pub source_dir: Option<PathBuf>,

    /// Run as mount(8)'s helper with its `-s`: unknown `-o` options are
    /// logged and ignored instead of refused.
    #[arg(skip)]
    pub sloppy: bool,
}

/// The virtio-fs options: serving a virtual machine's `vhost-user-fs`
/// device instead of a mount, under the names virtiofsd's users know
/// where they mean the same.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct VirtioArgs {
    /// Serve a virtual machine's virtio-fs device instead of mounting:
    /// listen on this Unix socket for the VMM (QEMU: -chardev
    /// socket,id=ID,path=SOCKET -device vhost-user-fs-pci,chardev=ID,tag=TAG);
    /// no MOUNTPOINT. Serves until the VM disconnects, then waits for the
    /// next connection (a restarted VM), until a signal stops it.
    #[arg(
        long = "vhost-user",
        visible_alias = "socket-path",
        value_name = "SOCKET"
    )]
    pub socket: Option<PathBuf>,

    /// The file system's tag, offered to VMMs that read it from the device
    /// (QEMU's vhost-user-fs-pci takes its own tag=; the guest mounts
    /// `mount -t virtiofs TAG DIR`).
    #[arg(long, value_name = "TAG", requires = "socket")]
    pub tag: Option<String>,

    /// The directory to serve (virtiofsd's name for SOURCE).
    #[arg(long, value_name = "DIR")]
    pub shared_dir: Option<PathBuf>,

    /// Serve one VM connection and exit when it ends, as virtiofsd does
    /// (by default the socket waits for the next connection).
    #[arg(long, requires = "socket")]
    pub once: bool,

    /// Request queues the device offers (the VMM uses up to this many:
    /// QEMU's num-request-queues); a thread serves each, and one more the
    /// hiprio queue.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "socket")]
    pub virtio_queues: usize,
}
