//! `fuse-bench-daemon`: a passthrough mount in any transport, runtime and
//! pool mode, for `cargo xtask bench` (see `bench::daemon`).
//!
//! ```text
//! fuse-bench-daemon [--transport dev|uring] [--runtime sync|tokio|uring]
//!                   [--threads N] [--thread-pool] [--uring-bufs N]
//!                   [--uring-entries N] [--uring-one-ring] [--cache never|auto|always]
//!                   [--writeback] [--no-passthrough] ... SOURCE MOUNTPOINT
//! ```
//!
//! Prints one `FUSE-BENCH-DAEMON READY transport=… runtime=… buffers=…`
//! line on standard output when the mount is ready; unmounts on SIGINT,
//! SIGTERM or SIGHUP. A mode whose code doesn't exist yet exits with status
//! 3 and "not available yet: …". Logs to standard error (`RUST_LOG`,
//! default `warn`).

use bench::daemon::{run, DaemonArgs};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    passthroughfs::init_logging("warn");
    match run(DaemonArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("fuse-bench-daemon: error: {}", f.message);
            ExitCode::from(f.status)
        }
    }
}
