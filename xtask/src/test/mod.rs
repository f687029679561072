//! `cargo xtask test`: the whole test suite, exactly as CI runs it.
//!
//! The suite is a list of named steps ([`STEPS`]), run in order, each printed
//! as a `==> step` heading and timed. Every step runs even after one failed
//! (and `cargo test` runs every test binary: `--no-fail-fast`); the run ends
//! with every failure's reason and a non-zero exit. `--fail-fast` stops at
//! the first failing step instead. A summary table (step, result, seconds)
//! is printed at the end, followed by the test counts of every binary
//! (`tests: N passed, N failed, N skipped`) and every failed test with its
//! binary and first message.
//!
//! The steps run in a mount namespace of the runner's own, and a step that
//! leaves a FUSE mount behind fails for it (see [`mod@mounts`]).
//!
//! `--repeat N` runs the test steps N times, optionally beside a load, and
//! lists every test that failed in any round (see [`repeat`]).
//!
//! The suite needs real root: it installs packages, mounts FUSE file systems
//! and switches users. Without root, `cargo xtask test-in-userns` runs the
//! workspace's tests in a user namespace instead.
//!
//! Adding a step: write a `fn step_NAME(ctx: &mut Ctx) -> Result<Outcome>`
//! and add it to [`STEPS`]; its name is then usable with `--skip`/`--only`.

use crate::text::{sh_quote, strip_ansi};
use anyhow::{bail, Context, Result};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use test_support::mountinfo::mounts;

mod abi;
mod hang;
mod libtest;
mod mounts;
mod package;
mod pjdfstest;
mod repeat;
mod setup;

pub(crate) use abi::*;
pub(crate) use libtest::{print_failed, run_tests, Echo, FailedTest, LibtestCounts, TestRun};
use package::*;
use pjdfstest::*;
pub(crate) use setup::*;

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub struct TestArgs {
    /// Skip the setup step (package installs, pjdfstest, io_uring switch).
    #[arg(long)]
    no_setup: bool,
    /// Skip a step (repeatable): setup, build, package, abi-check,
    /// cargo-test, pjdfstest, xfstests, stress, vm, virtiofs, bench.
    #[arg(long, value_name = "STEP")]
    skip: Vec<String>,
    /// Run only these steps (repeatable), in the suite's order.
    #[arg(long, value_name = "STEP")]
    only: Vec<String>,
    /// Stop at the first failing step, and let `cargo test` stop at its
    /// first failing test binary. Without it every step and every test
    /// binary runs, and all failures are reported at the end.
    #[arg(long)]
    fail_fast: bool,
    /// Accepted for old scripts and ignored: running every step is the
    /// default now (see `--fail-fast`).
    #[arg(long)]
    keep_going: bool,
    /// Run the test steps N times (only `cargo-test` unless `--only` names
    /// others; setup, build and abi-check run once) and list every test
    /// that failed in any round, with its count and first message.
    #[arg(long, value_name = "N")]
    repeat: Option<u32>,
    /// With `--repeat`: run each round beside a load of the runner's own
    /// (two busy loops and a writer of a temporary file).
    #[arg(long, requires = "repeat")]
    load: bool,
    /// With `--repeat`: a round of `cargo test` still running after this
    /// many seconds is reported as hung (with the tests still running),
    /// killed, and the next round starts.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 1800,
        requires = "repeat"
    )]
    watchdog: u64,
    /// The runner's own test: run two scratch steps instead of the suite,
    /// a failing one that leaves a FUSE mount behind and one after it.
    #[arg(long, hide = true)]
    scratch: bool,
    /// Passed to the test binaries of `cargo test` as `--test-threads N`.
    #[arg(long, value_name = "N")]
    test_threads: Option<usize>,
    /// Run pjdfstest on a plain directory of the host's file system instead
    /// of the passthrough and memfs mounts (a reference run; also
    /// `XTASK_PJDFSTEST_NATIVE=1`).
    #[arg(long)]
    native: bool,
    /// Extra arguments for `cargo test` (after `--`), e.g.
    /// `cargo xtask test --only cargo-test -- -p fusewire-abi -- --nocapture`.
    #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
    cargo_test_args: Vec<String>,
}

/// What a step reports when it did not fail.
pub enum Outcome {
    /// The step ran and succeeded.
    Done,
    /// The step decided not to run; the reason is printed and tabulated.
    Skipped(String),
}

/// One step of the suite.
struct Step {
    /// Name used in headings, the summary table, `--skip` and `--only`.
    name: &'static str,
    /// One line saying what the step does.
    about: &'static str,
    /// The step itself.
    run: fn(&mut Ctx) -> Result<Outcome>,
}

/// The suite, in the order it runs.
const STEPS: &[Step] = &[
    Step {
        name: "setup",
        about: "install missing packages and pjdfstest, enable FUSE over io_uring, mount fusectl",
        run: step_setup,
    },
    Step {
        name: "build",
        about: "build the workspace (release binaries, test binaries, the sync-only passthrough, the docs with -D warnings, public and private, clippy with -D warnings)",
        run: step_build,
    },
    Step {
        name: "package",
        about: "cargo package; docs of the unpacked packages as docs.rs builds them; outside crates built from the packages alone, mounted and read",
        run: step_package,
    },
    Step {
        name: "abi-check",
        about: "compare fuse-abi's layouts with the Linux 7.3 fuse.h",
        run: step_abi_check,
    },
    Step {
        name: "cargo-test",
        about: "cargo test --workspace (tests mount for real as root)",
        run: step_cargo_test,
    },
    Step {
        name: "pjdfstest",
        about: "POSIX conformance (pjdfstest 0.2.2) on passthroughfs and memfs mounts",
        run: step_pjdfstest,
    },
    Step {
        name: "xfstests",
        about: "xfstests' curated generic lists on passthroughfs, in 3 modes (xtask/xfstests/curated.txt)",
        run: step_xfstests,
    },
    Step {
        name: "stress",
        about: "fsstress and fsx on passthroughfs in 3 modes, then diff -r against the backing tree",
        run: step_stress,
    },
    Step {
        name: "vm",
        about: "the suite on a real Linux 7.3 kernel under qemu (cargo xtask test-in-vm)",
        run: step_vm,
    },
    Step {
        name: "virtiofs",
        about: "a qemu guest mounts -t virtiofs what passthroughfs --vhost-user serves: file operations, data integrity, pjdfstest, reconnect, reboot, the daemon killed (cargo xtask test-in-vm --virtiofs)",
        run: step_virtiofs,
    },
    Step {
        name: "bench",
        about: "benchmark smoke run (cargo xtask bench --quick)",
        run: step_bench,
    },
];

/// The runner's own test (`--scratch`): a step that fails and leaves a
/// mount, then one that must still run and find no mount.
const SCRATCH_STEPS: &[Step] = &[
    Step {
        name: "scratch-fail",
        about: "fail on purpose, leaving a dead FUSE mount",
        run: mounts::step_scratch_fail,
    },
    Step {
        name: "scratch-after",
        about: "run after the failure and find no mount left",
        run: mounts::step_scratch_after,
    },
];

/// State shared by the steps of one run.
pub struct Ctx<'a> {
    /// The command line.
    args: &'a TestArgs,
    /// The workspace root.
    root: PathBuf,
    /// Test counts gathered so far (cargo test, pjdfstest).
    counts: Counts,
    /// Every failed test of `cargo test` so far, with its binary.
    failed_tests: Vec<FailedTest>,
    /// Set by `--repeat`: how `cargo test` runs in a round.
    round: Option<RoundOptions>,
}

/// How the `cargo-test` step runs in a round of `--repeat`.
struct RoundOptions {
    /// Where the round's output goes (instead of the terminal).
    log: PathBuf,
    /// How long the round may run before it is called hung.
    watchdog: Duration,
    /// Set when the watchdog fired: what was still running.
    hung: Option<String>,
}

/// Passed/failed/skipped test counts.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    /// Tests that passed.
    pub(crate) passed: u64,
    /// Tests that failed.
    pub(crate) failed: u64,
    /// Tests skipped or ignored.
    pub(crate) skipped: u64,
    /// Whether any runner reported counts at all.
    pub(crate) seen: bool,
}

impl Counts {
    /// Adds another runner's counts.
    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.seen |= other.seen;
    }
}

/// How a step ended, for the summary table.
enum RowResult {
    /// Succeeded.
    Ok,
    /// Failed (the run stops unless `--keep-going`).
    Failed,
    /// Not run, with the reason.
    Skipped(String),
    /// Not reached because an earlier step failed (without `--keep-going`).
    NotRun,
}

/// Runs the suite.
pub fn run(args: &TestArgs) -> Result<()> {
    let steps = if args.scratch { SCRATCH_STEPS } else { STEPS };
    for name in args.skip.iter().chain(&args.only) {
        if !steps.iter().any(|s| s.name == name) {
            let names: Vec<_> = steps.iter().map(|s| s.name).collect();
            eprintln!("error: unknown step `{name}` (steps: {})", names.join(", "));
            std::process::exit(2);
        }
    }
    if args.keep_going {
        println!("note: --keep-going is the default now and is ignored (see --fail-fast)");
    }
    // First, while the runner has one thread: see `mounts`.
    if is_root() {
        match mounts::enter_own_namespace() {
            Ok(()) => println!(
                "mount namespace: the runner's own (a slave of the host's): \
                 nothing the steps mount is seen outside it"
            ),
            Err(e) => println!(
                "note: the steps run in the host's mount namespace ({})",
                one_line(&e)
            ),
        }
    }
    let mut ctx = Ctx {
        args,
        root: crate::workspace_root(),
        counts: Counts::default(),
        failed_tests: Vec::new(),
        round: None,
    };
    if let Some(rounds) = args.repeat {
        return repeat::run(steps, &mut ctx, rounds);
    }
    let started = Instant::now();
    let (rows, failures) = run_steps(steps, &mut ctx);

    print_summary(&rows, started.elapsed().as_secs_f64());
    if ctx.counts.seen {
        let c = ctx.counts;
        println!(
            "tests: {} passed, {} failed, {} skipped",
            c.passed, c.failed, c.skipped
        );
    }
    print_failed(&ctx.failed_tests);
    if !failures.is_empty() {
        // Printed here rather than returned: an `anyhow` error returned from
        // main would add a backtrace when RUST_BACKTRACE is set.
        for (name, reason) in &failures {
            eprintln!("error: step `{name}` failed: {reason}");
        }
        if failures.len() > 1 {
            let names: Vec<_> = failures.iter().map(|(n, _)| *n).collect();
            eprintln!(
                "error: {} steps failed: {}",
                failures.len(),
                names.join(", ")
            );
        }
        std::process::exit(1);
    }
    Ok(())
}

/// A row of the summary table: step, result, seconds (if it ran).
type Row<'s> = (&'s str, RowResult, Option<f64>);

/// Runs `steps` in order (after a failure the rest are not run if
/// `--fail-fast`). Returns the summary rows and every failure (step name
/// and one-line reason) in the order they happened.
fn run_steps<'s>(steps: &'s [Step], ctx: &mut Ctx) -> (Vec<Row<'s>>, Vec<(&'s str, String)>) {
    let args = ctx.args;
    let mut rows: Vec<Row<'s>> = Vec::new();
    let mut failures: Vec<(&'s str, String)> = Vec::new();
    for step in steps {
        if let Some(reason) = deselected(args, step.name) {
            println!("\n==> {}: skipped ({reason})", step.name);
            rows.push((step.name, RowResult::Skipped(reason), None));
            continue;
        }
        if !failures.is_empty() && args.fail_fast {
            rows.push((step.name, RowResult::NotRun, None));
            continue;
        }
        println!("\n==> {}: {}", step.name, step.about);
        let t = Instant::now();
        let result = run_checked(step, ctx);
        let secs = t.elapsed().as_secs_f64();
        match result {
            Ok(Outcome::Done) => {
                println!("<== {}: ok ({secs:.1} s)", step.name);
                rows.push((step.name, RowResult::Ok, Some(secs)));
            }
            Ok(Outcome::Skipped(reason)) => {
                println!("<== {}: skipped: {reason} ({secs:.1} s)", step.name);
                rows.push((step.name, RowResult::Skipped(reason), Some(secs)));
            }
            Err(e) => {
                let reason = one_line(&e);
                println!("<== {}: FAILED ({secs:.1} s): {reason}", step.name);
                rows.push((step.name, RowResult::Failed, Some(secs)));
                failures.push((step.name, reason));
            }
        }
    }
    (rows, failures)
}

/// How long a step's new FUSE mounts may take to go away by themselves
/// after the step ends before they count as left behind.
const LEFTOVER_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs one step and fails it if it left a FUSE mount behind (the mounts
/// are detached then, so the later steps run on a clean tree).
fn run_checked(step: &Step, ctx: &mut Ctx) -> Result<Outcome> {
    let before = mounts::fuse_mounts();
    let result = (step.run)(ctx);
    let mut left = mounts::left_behind(&before, &mounts::fuse_mounts());
    // A daemon's unmounter (auto_unmount's watcher, a supervisor) may
    // still be at work when the last test binary returns: give mounts
    // that are on their way out a moment to go before naming them.
    let settle = std::time::Instant::now();
    while !left.is_empty() && settle.elapsed() < LEFTOVER_SETTLE {
        std::thread::sleep(std::time::Duration::from_millis(200));
        left = mounts::left_behind(&before, &mounts::fuse_mounts());
    }
    if left.is_empty() {
        return result;
    }
    let not_detached = mounts::detach(&left);
    let reason = mounts::leftover_reason(&left, &not_detached);
    match result {
        Err(e) => Err(e.context(reason)),
        Ok(_) => Err(anyhow::anyhow!(reason)),
    }
}

/// Why `--no-setup`, `--skip` or `--only` leave a step out, if they do.
fn deselected(args: &TestArgs, name: &str) -> Option<String> {
    if name == "setup" && args.no_setup {
        return Some("--no-setup".into());
    }
    if args.skip.iter().any(|s| s == name) {
        return Some("--skip".into());
    }
    if !args.only.is_empty() && !args.only.iter().any(|s| s == name) {
        return Some("not in --only".into());
    }
    None
}

/// Prints the table of steps, results and durations.
fn print_summary(rows: &[(&str, RowResult, Option<f64>)], total: f64) {
    println!("\n==> summary");
    println!("{:<12} {:<52} {:>8}", "step", "result", "seconds");
    for (name, result, secs) in rows {
        let result = match result {
            RowResult::Ok => "ok".to_string(),
            RowResult::Failed => "FAILED".to_string(),
            RowResult::Skipped(reason) => format!("skipped ({reason})"),
            RowResult::NotRun => "not run (--fail-fast after a failure)".to_string(),
        };
        let secs = secs.map_or_else(|| "-".to_string(), |s| format!("{s:.1}"));
        println!("{name:<12} {result:<52} {secs:>8}");
    }
    println!("{:<12} {:<52} {:>8.1}", "total", "", total);
}

/// An error with its causes, on one line.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

// ---------------------------------------------------------------------------
// Small helpers for running commands.

/// The `cargo` that runs this xtask (so a `sudo` without PATH still works).
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `cargo --quiet xtask`, for a step that runs another task: this xtask is
/// running, so it is built, and cargo's `Finished` and `Running` lines would
/// only repeat the `$ ...` line that [`run_cmd`] prints.
pub(crate) fn xtask() -> Command {
    let mut cmd = cargo();
    cmd.args(["--quiet", "xtask"]);
    cmd
}

/// A command line as a string, for logs and error messages.
pub(crate) fn display(cmd: &Command) -> String {
    let program = cmd.get_program();
    let mut s = if std::env::var_os("CARGO").as_deref() == Some(program) {
        "cargo".to_string()
    } else {
        program.to_string_lossy().into_owned()
    };
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
            let _ = write!(s, " {}", sh_quote(&a));
        } else {
            let _ = write!(s, " {a}");
        }
    }
    s
}

/// Waits up to `limit` for `child` to exit: its status, or `None` while it
/// still runs (or can't be asked).
pub(crate) fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Runs a command with inherited stdio; fails unless it exits with 0.
pub(crate) fn run_cmd(cmd: &mut Command) -> Result<()> {
    let line = display(cmd);
    println!("$ {line}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails unless it exits with 0.
fn output(cmd: &mut Command) -> Result<String> {
    let line = display(cmd);
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Cargo's target directory (`CARGO_TARGET_DIR` or `<root>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => crate::workspace_root().join(dir),
        None => crate::workspace_root().join("target"),
    }
}

/// Searches PATH, then `$CARGO_HOME/bin` (`~/.cargo/bin`), for a program.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(cargo_home().map(|h| h.join("bin")))
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `$CARGO_HOME`, or `~/.cargo`.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

// ---------------------------------------------------------------------------
// Step: build.

/// Builds the release binaries, the test binaries, the docs (public and
/// private, warnings denied), runs clippy (warnings denied), and builds the sync-only
/// passthrough.
fn step_build(ctx: &mut Ctx) -> Result<Outcome> {
    // Each is `cargo ARGS` in the workspace's root.
    let in_root = |args: &[&str]| {
        let mut cmd = cargo();
        cmd.args(args).current_dir(&ctx.root);
        cmd
    };
    run_cmd(&mut in_root(&["build", "--release", "--workspace"]))?;
    run_cmd(&mut in_root(&["test", "--workspace", "--no-run"]))?;
    // Every public item's docs build without a warning (broken links,
    // unescaped HTML, links from public docs to private items),
    // fuse-server's with every item documented.
    run_cmd(
        in_root(&["doc", "--workspace", "--no-deps", "-q"]).env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    // The private items' docs too (module docs of the internals are where
    // the next engineer reads how a crate works), with every feature on.
    run_cmd(
        in_root(&[
            "doc",
            "--workspace",
            "--no-deps",
            "-q",
            "--document-private-items",
            "--all-features",
        ])
        .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    // Clippy on every target, warnings denied: among them the workspace's
    // `undocumented_unsafe_blocks` (Cargo.toml), so each `unsafe` block
    // keeps its `// SAFETY:` comment.
    run_cmd(&mut in_root(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "-q",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The passthrough without its async path (no tokio, no io_uring), as a
    // sync-only user builds it.
    run_cmd(&mut in_root(&[
        "build",
        "-p",
        "fusewire-backend-passthrough",
        "--no-default-features",
    ]))?;
    Ok(Outcome::Done)
}

// ---------------------------------------------------------------------------
// Step: cargo-test.

/// `cargo test --workspace`, forwarding `--test-threads` and the extra args.
fn step_cargo_test(ctx: &mut Ctx) -> Result<Outcome> {
    let extra = &ctx.args.cargo_test_args;
    let split = extra.iter().position(|a| a == "--");
    let (cargo_args, harness_args) = match split {
        Some(i) => (&extra[..i], &extra[i + 1..]),
        None => (&extra[..], &extra[extra.len()..]),
    };
    let mut cmd = cargo();
    cmd.arg("test").current_dir(&ctx.root);
    // fuse-abi's layout test compares with the 7.3 header: the one the
    // abi-check step used (cached by then), wherever it came from.
    if std::env::var_os("FUSE_ABI_REFERENCE_H").is_none() {
        match kernel_7_3_fuse_h(&ctx.root) {
            Ok(header) => {
                cmd.env("FUSE_ABI_REFERENCE_H", header);
            }
            Err(e) => println!(
                "no Linux 7.3 fuse.h for fuse-abi's layout test ({}); it will fail",
                one_line(&e)
            ),
        }
    }
    // The live upgrade tests alternate between the test build of
    // passthroughfs and another one: the release build of the build step,
    // brought up to date here (a step run without the build step, as
    // `--only cargo-test` or `--repeat` after a pull, would otherwise
    // upgrade to an older commit's build, which refuses the newer state).
    let release = target_dir().join("release/passthroughfs");
    if std::env::var_os("PASSTHROUGHFS_SECOND_BUILD").is_none() && release.exists() {
        let fresh = cargo()
            .args(["build", "--release", "--workspace"])
            .current_dir(&ctx.root)
            .status()
            .context("building the release build the upgrade tests alternate with")?;
        if !fresh.success() {
            bail!("building the release build the upgrade tests alternate with: {fresh}");
        }
        cmd.env("PASSTHROUGHFS_SECOND_BUILD", &release);
    }
    // `--workspace` would override a package selection given after `--`.
    let selects = cargo_args
        .iter()
        .any(|a| a.starts_with("-p") || a.starts_with("--package"));
    if !selects {
        cmd.arg("--workspace");
    }
    // Every test binary runs even after one failed, unless --fail-fast.
    if !ctx.args.fail_fast {
        cmd.arg("--no-fail-fast");
    }
    cmd.args(cargo_args);
    // Tests named `vm_` need the Linux 7.3 kernel: the vm step runs them in
    // its guest.
    cmd.args(["--", "--skip", "vm_"]);
    if let Some(n) = ctx.args.test_threads {
        cmd.arg(format!("--test-threads={n}"));
    }
    cmd.args(harness_args);
    let run = match &mut ctx.round {
        None => run_tests(&mut cmd, Echo::Stdout, None, |_| Ok(()))?,
        Some(round) => {
            let log = fs::File::create(&round.log)
                .with_context(|| format!("creating {}", round.log.display()))?;
            let run = run_tests(&mut cmd, Echo::File(log), Some(round.watchdog), |_| Ok(()))?;
            round.hung.clone_from(&run.hung);
            run
        }
    };
    let counts = run.report.counts;
    ctx.counts.add(counts);
    ctx.failed_tests.extend(run.report.failed.iter().cloned());
    if ctx.round.is_none() {
        println!(
            "cargo test: {} passed, {} failed, {} ignored",
            counts.passed, counts.failed, counts.skipped
        );
        print_failed(&run.report.failed);
    }
    match run.status {
        None => bail!(
            "cargo test hung: killed after {} s; running: {}",
            ctx.args.watchdog,
            run.hung.unwrap_or_default()
        ),
        Some(status) if !status.success() => bail!(
            "cargo test failed ({status}; {} tests failed{})",
            counts.failed,
            match run
                .report
                .failed
                .iter()
                .filter(|f| f.test == libtest::WHOLE_BINARY)
                .count()
            {
                0 => String::new(),
                n => format!(", {n} binaries ended without a result"),
            }
        ),
        Some(_) => Ok(Outcome::Done),
    }
}

// ---------------------------------------------------------------------------
// Steps: xfstests and stress (see xtask/src/xfstests/).

/// The curated xfstests lists in each mode (`cargo xtask xfstests --no-stress`).
fn step_xfstests(ctx: &mut Ctx) -> Result<Outcome> {
    crate::xfstests::test_step(&ctx.root)?;
    Ok(Outcome::Done)
}

/// fsstress and fsx in each mode (`cargo xtask xfstests --stress`).
fn step_stress(ctx: &mut Ctx) -> Result<Outcome> {
    crate::xfstests::stress_step(&ctx.root)?;
    Ok(Outcome::Done)
}

// ---------------------------------------------------------------------------
// Steps that run other xtask subcommands.

/// The suite on a real Linux 7.3 kernel (buffer pools, protocol 7.46) under
/// qemu: `cargo xtask test-in-vm`. The VM runner gets the kernel with
/// [`debian_experimental_package`].
fn step_vm(ctx: &mut Ctx) -> Result<Outcome> {
    run_cmd(xtask().arg("test-in-vm").current_dir(&ctx.root))?;
    Ok(Outcome::Done)
}

/// virtio-fs with a real guest: `cargo xtask test-in-vm --virtiofs`
/// (docs/virtiofs.md).
fn step_virtiofs(ctx: &mut Ctx) -> Result<Outcome> {
    run_cmd(
        xtask()
            .args(["test-in-vm", "--virtiofs", "--quiet"])
            .current_dir(&ctx.root),
    )?;
    Ok(Outcome::Done)
}

/// A quick benchmark run, to catch a broken benchmark setup (not to judge
/// speed): `cargo xtask bench --quick`.
fn step_bench(ctx: &mut Ctx) -> Result<Outcome> {
    run_cmd(xtask().args(["bench", "--quick"]).current_dir(&ctx.root))?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pjdfstest_summary() {
        let c = parse_pjdfstest_summary(
            "Summary: 2 failed, 15 skipped, 381 passed, 0 expected failures, 398 total",
        )
        .unwrap();
        assert_eq!((c.passed, c.failed, c.skipped), (381, 2, 15));
        let c = parse_pjdfstest_summary(
            "Summary: 0 failed, 16 skipped, 380 passed, 2 expected failures, 398 total",
        )
        .unwrap();
        assert_eq!((c.passed, c.failed, c.skipped), (380, 0, 18));
    }

    #[test]
    fn strips_ansi() {
        assert_eq!(strip_ansi("\u{1b}[1;31mFAILED\u{1b}[0m x"), "FAILED x");
    }

    /// A step that fails.
    fn failing_step(_: &mut Ctx) -> Result<Outcome> {
        bail!("broken on purpose")
    }

    /// A step that succeeds and counts that it ran.
    fn counting_step(ctx: &mut Ctx) -> Result<Outcome> {
        ctx.counts.passed += 1;
        Ok(Outcome::Done)
    }

    const FAKE_STEPS: &[Step] = &[
        Step {
            name: "first",
            about: "fails",
            run: failing_step,
        },
        Step {
            name: "second",
            about: "succeeds",
            run: counting_step,
        },
        Step {
            name: "third",
            about: "fails too",
            run: failing_step,
        },
    ];

    /// The fake suite with or without `--fail-fast`: the rows' results,
    /// the failed steps and how many steps ran.
    fn run_fake(fail_fast: bool) -> (Vec<&'static str>, Vec<&'static str>, u64) {
        let args = TestArgs {
            no_setup: false,
            skip: Vec::new(),
            only: Vec::new(),
            fail_fast,
            keep_going: false,
            repeat: None,
            load: false,
            watchdog: 1800,
            scratch: false,
            test_threads: None,
            native: false,
            cargo_test_args: Vec::new(),
        };
        let mut ctx = Ctx {
            args: &args,
            root: PathBuf::from("/nonexistent"),
            counts: Counts::default(),
            failed_tests: Vec::new(),
            round: None,
        };
        let (rows, failures) = run_steps(FAKE_STEPS, &mut ctx);
        let results = rows
            .iter()
            .map(|(_, r, _)| match r {
                RowResult::Ok => "ok",
                RowResult::Failed => "failed",
                RowResult::Skipped(_) => "skipped",
                RowResult::NotRun => "not run",
            })
            .collect();
        for (_, reason) in &failures {
            assert_eq!(reason, "broken on purpose");
        }
        let failed = failures.iter().map(|(n, _)| *n).collect();
        (results, failed, ctx.counts.passed)
    }

    #[test]
    fn every_step_runs_and_every_failure_is_reported() {
        assert_eq!(
            run_fake(false),
            (vec!["failed", "ok", "failed"], vec!["first", "third"], 1)
        );
    }

    #[test]
    fn fail_fast_stops_at_the_first_failure() {
        assert_eq!(
            run_fake(true),
            (vec!["failed", "not run", "not run"], vec!["first"], 0)
        );
    }

    #[test]
    fn step_names_are_unique() {
        for (i, a) in STEPS.iter().enumerate() {
            assert!(STEPS[i + 1..].iter().all(|b| b.name != a.name));
        }
    }
}
