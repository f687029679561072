//! `passthroughfs`: serves a directory through FUSE at a mountpoint.
//!
//! ```text
//! passthroughfs [OPTIONS] SOURCE MOUNTPOINT [-o OPT[,OPT...]]
//! ```
//!
//! Goes to the background once the mount is usable, unless `-f` (or `-d`):
//! the command's exit status says whether the mount came up, and the
//! background daemon logs to syslog (or to `--log-file`). A log line that
//! can't be written (standard error a closed pipe, a full disk) is lost;
//! the mount is not. Started under mount(8)'s helper name
//! (`mount.fuse.passthroughfs`) it takes mount(8)'s helper arguments
//! ([`passthroughfs::mount_helper`]); `-o` takes the mount options of
//! fstab lines and `mount.fuse3` ([`passthroughfs::options`]). With
//! `NOTIFY_SOCKET` set it tells the service manager READY=1 once the mount
//! is usable and STOPPING=1 when it unmounts.
//!
//! Serves until the file system is unmounted or the process gets SIGINT,
//! SIGTERM or SIGHUP (then it unmounts and exits 0 once the requests in
//! progress are answered). Another of these signals while that stop is
//! under way forces the exit: the mount is detached (lazy unmount),
//! requests still in progress fail, and the process dies of that signal (a
//! shell reports 128 + its number: 130 for Ctrl-C). `--runtime
//! tokio|uring` serves the file system through its `AsyncFileSystem` on an
//! `async-io` runtime (a `FuseDevTask`, or with `--uring` a runtime per
//! ring thread); `--thread-pool` then moves requests that may block to the
//! backend's thread pool. SIGUSR1 logs the transport's state (with
//! `--uring`: its mode, the ring buffers' reserved and resident bytes,
//! requests per queue) and the file system's (inodes the kernel knows,
//! their lookup references, open handles, cached descriptors, backing ids)
//! and goes on. `RUST_LOG` sets the log level (default `info`).

mod plan;
mod serve;
mod supervise;
mod takeover_socket;
mod upgrade;

use clap::Parser;
use fuse_transport_dev::supervise::Supervised;
use passthroughfs::cli::Args;
use passthroughfs::daemonize::Detach;
use passthroughfs::mount_helper::{helper_args, invoked_as_helper, HelperFlags};
use passthroughfs::{check_source, options, Failure};
use plan::Plan;
use serve::serve;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use supervise::{supervise, LOG_TO_SYSLOG};

/// Memory that a large walk used goes back once the kernel forgot its
/// inodes (glibc): one malloc arena for the whole process (worker threads
/// otherwise get arenas of their own, and what they allocated stays
/// resident in each, scattered; small allocations still go through each
/// thread's cache without taking the arena's lock), and a fixed mmap
/// threshold (the dynamic one rises after a large table is freed, and the
/// next large tables then pin the heap).
fn tune_malloc() {
    #[cfg(target_env = "gnu")]
    // SAFETY: called first in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 10);
    }
}

fn main() -> ExitCode {
    tune_malloc();
    #[cfg(feature = "fault-injection")]
    passthroughfs::sandbox::escape::install();
    // Before any thread: it edits the environment.
    let supervised = match Supervised::from_env() {
        Ok(s) => s,
        Err(e) => return usage_error(&format!("supervised start: {e}")),
    };
    let watch_group = match supervise::inherited_watch_group() {
        Ok(g) => g,
        Err(e) => return usage_error(&format!("supervised start: {e}")),
    };
    let to_syslog = std::env::var_os(LOG_TO_SYSLOG).is_some();
    std::env::remove_var(LOG_TO_SYSLOG);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    let mut helper = HelperFlags::default();
    if argv.first().is_some_and(|a| invoked_as_helper(a)) {
        match helper_args(argv) {
            Ok((daemon_argv, flags)) => (argv, helper) = (daemon_argv, flags),
            Err(Failure(msg)) => return usage_error(&msg),
        }
    }
    let mut args = match Args::try_parse_from(argv.clone()) {
        Ok(args) => args,
        Err(e) => return clap_error(e),
    };
    args.sloppy = helper.sloppy;
    let skipped = match options::apply(&mut args) {
        Ok(skipped) => skipped,
        Err(Failure(msg)) => return usage_error(&msg),
    };
    if let Err(Failure(msg)) = passthroughfs::virtio::settle_args(&mut args) {
        return missing_arguments(&args, &msg);
    }
    let foreground = args.foreground || args.debug || supervised.is_some();
    // Opened before the fork, so that a path that can't be opened is the
    // command's error (and a relative one is the caller's directory's).
    if let Some(path) = &args.log_file {
        if let Err(Failure(msg)) = passthroughfs::logging::log_to_file(path) {
            return usage_error(&msg);
        }
    }
    passthroughfs::logging::init_logging_with(
        "info",
        foreground && !to_syslog && passthroughfs::logging::color_wanted(),
    );
    if to_syslog {
        passthroughfs::logging::log_to_syslog();
    }
    for option in skipped {
        tracing::warn!(%option, "unknown mount option ignored (mount -s)");
    }
    if args.virtio.socket.is_some() {
        return serve_vhost_user(args, foreground, helper.fake);
    }
    let plan = match Plan::new(args, !foreground, supervised.is_some()) {
        Ok(plan) => plan,
        Err(Failure(msg)) => return usage_error(&msg),
    };
    if helper.fake {
        return ExitCode::SUCCESS;
    }
    let mut detach = match detach(foreground) {
        Ok(detach) => detach,
        Err(code) => return code,
    };
    let served = if plan.args.supervise && supervised.is_none() {
        supervise(plan, &mut detach, argv, cwd)
    } else {
        serve(plan, &mut detach, supervised, watch_group)
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            detach.report_failure(&msg);
            ExitCode::FAILURE
        }
    }
}

/// Stays in the foreground, or goes to the background (call it before any
/// thread exists: the child goes on alone); the usage error's exit code
/// if it can't.
fn detach(foreground: bool) -> Result<Detach, ExitCode> {
    if foreground {
        return Ok(Detach::foreground());
    }
    Detach::background().map_err(|Failure(msg)| usage_error(&msg))
}

/// `--vhost-user`: serves virtual machines instead of a mount (see
/// [`passthroughfs::virtio`]).
fn serve_vhost_user(mut args: Args, foreground: bool, fake: bool) -> ExitCode {
    if let Err(Failure(msg)) = passthroughfs::virtio::check_virtio_args(&args) {
        return usage_error(&msg);
    }
    let mut source = args.source.clone();
    if !foreground {
        // The background daemon's working directory becomes `/`.
        source = absolute_or_as_is(&source);
        args.virtio.socket = args.virtio.socket.as_deref().map(absolute_or_as_is);
    }
    if let Err(Failure(msg)) = check_source(&source) {
        return usage_error(&msg);
    }
    if fake {
        return ExitCode::SUCCESS;
    }
    let mut detach = match detach(foreground) {
        Ok(detach) => detach,
        Err(code) => return code,
    };
    match passthroughfs::virtio::serve_virtio(args, source, &mut detach) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            detach.report_failure(&msg);
            ExitCode::FAILURE
        }
    }
}

/// `p` made absolute (it stays as it is if that fails: it is checked
/// later).
fn absolute_or_as_is(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// An error before the daemon started: said on standard error, status 1.
fn usage_error(msg: &str) -> ExitCode {
    passthroughfs::logging::say(&format!("passthroughfs: error: {msg}"));
    ExitCode::FAILURE
}

/// A missing or doubled positional argument (`msg` says which): the usage
/// line, then the error, with clap's status for usage errors (2). With no
/// arguments at all, the error names what a mount needs.
fn missing_arguments(args: &Args, msg: &str) -> ExitCode {
    use passthroughfs::cli::{USAGE, USAGE_VHOST_USER};
    let vhost_user = args.virtio.socket.is_some();
    let nothing = args.source_arg.is_none()
        && args.mountpoint_arg.is_none()
        && args.virtio.shared_dir.is_none()
        && !vhost_user;
    let msg = if nothing {
        "SOURCE and MOUNTPOINT are missing"
    } else {
        msg
    };
    let usage = if vhost_user { USAGE_VHOST_USER } else { USAGE };
    passthroughfs::logging::say(&format!(
        "Usage: {usage}\npassthroughfs: error: {msg}\n\nFor more information, try '--help'."
    ));
    ExitCode::from(2)
}

/// What clap refused (an unknown flag, a bad value), with the prefix of
/// the daemon's other errors and clap's status; `--help` and `--version`
/// print as clap does. Nothing panics if standard error or output is
/// closed.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // Prints to standard output, ignoring a failure.
        let _ = e.print();
        return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
    }
    let text = if passthroughfs::logging::color_wanted() {
        e.render().ansi().to_string()
    } else {
        e.render().to_string()
    };
    passthroughfs::logging::say(&format!("passthroughfs: {}", text.trim_end()));
    ExitCode::from(e.exit_code().clamp(0, 255) as u8)
}
