//! Project tasks, run as `cargo xtask <task>`.
//!
//! The xtask builds and runs the workspace's binaries and test suites; it
//! links none of the workspace's crates.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

mod abi_check;
mod bench;
mod man;
#[cfg(test)]
mod registry_host;
mod test;
mod text;
mod userns;
mod vendor;
mod vm;
mod xfstests;

/// passthroughfs's options for no confinement at all (no namespace, no
/// Landlock, no seccomp filter), for runs that measure or count the
/// daemon's own work (over vhost-user it confines itself by default).
const UNCONFINED: [&str; 6] = [
    "--sandbox",
    "none",
    "--landlock",
    "off",
    "--seccomp",
    "none",
];

#[derive(Parser)]
#[command(about = "Project tasks for the FUSE workspace")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Compare fuse-abi's struct sizes and field offsets with a kernel fuse.h.
    AbiCheck {
        /// Path of the kernel's uapi `fuse.h`.
        header: PathBuf,
    },
    /// Run the whole test suite (installs what is missing first); every
    /// step and test binary runs, `--repeat N` hunts flaky tests.
    Test(test::TestArgs),
    /// Run the test suite inside a user namespace (no real root needed).
    TestInUserns(userns::UsernsArgs),
    /// Boot Linux 7.3 under qemu and run the tests that need its kernel.
    TestInVm(vm::VmArgs),
    /// Run the benchmark matrix against native, our daemon and peers.
    Bench(bench::BenchArgs),
    /// Run xfstests' generic group, fsstress and fsx on passthroughfs mounts.
    Xfstests(xfstests::XfstestsArgs),
    /// Write the passthroughfs(1) man page (from the daemon's clap definition).
    Man(man::ManArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::AbiCheck { header } => abi_check::run(&header),
        Task::Test(args) => test::run(&args),
        Task::TestInUserns(args) => userns::run(&args),
        Task::TestInVm(args) => vm::run(&args),
        Task::Bench(args) => bench::run(&args),
        Task::Xfstests(args) => xfstests::run(&args),
        Task::Man(args) => man::run(&args),
    }
}

/// Passes `result` on, unless it is an error: then prints it on one line
/// after `prefix` and ends the process with status 1 (an error returned
/// from `main` would add a backtrace when `RUST_BACKTRACE` is set).
fn exit_on_error(prefix: &str, result: anyhow::Result<()>) -> anyhow::Result<()> {
    if let Err(e) = result {
        eprintln!("{prefix}{}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
    Ok(())
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}
