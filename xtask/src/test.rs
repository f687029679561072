//! `cargo xtask test`: the whole test suite, exactly as CI runs it.
//!
//! The suite is a list of named steps ([`STEPS`]), run in order, each printed
//! as a `==> step` heading and timed. The first failing step ends the run with
//! a one-line reason and a non-zero exit; with `--keep-going` every step runs
//! anyway and the run ends with every failure's reason and a non-zero exit. A
//! summary table (step, result, seconds) is printed at the end either way,
//! followed by one line with the test counts (`tests: N passed, N failed, N
//! skipped`).
//!
//! The suite needs real root: it installs packages, mounts FUSE file systems
//! and switches users. Without root, `cargo xtask test-in-userns` runs the
//! workspace's tests in a user namespace instead.
//!
//! Adding a step: write a `fn step_NAME(ctx: &mut Ctx) -> Result<Outcome>`
//! and add it to [`STEPS`]; its name is then usable with `--skip`/`--only`.

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

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub struct TestArgs {
    /// Skip the setup step (package installs, pjdfstest, io_uring switch).
    #[arg(long)]
    no_setup: bool,
    /// Skip a step (repeatable): setup, build, abi-check, cargo-test,
    /// pjdfstest, xfstests, stress, vm, bench.
    #[arg(long, value_name = "STEP")]
    skip: Vec<String>,
    /// Run only these steps (repeatable), in the suite's order.
    #[arg(long, value_name = "STEP")]
    only: Vec<String>,
    /// Run every step even after one failed (a step that needs an earlier
    /// one then fails with its own reason); report all failures at the end.
    #[arg(long)]
    keep_going: bool,
    /// Passed to the test binaries of `cargo test` as `--test-threads N`.
    #[arg(long, value_name = "N")]
    test_threads: Option<usize>,
    /// Run pjdfstest on a plain directory of the host's file system instead
    /// of the passthrough and memfs mounts (a reference run; also
    /// `XTASK_PJDFSTEST_NATIVE=1`).
    #[arg(long)]
    native: bool,
    /// Extra arguments for `cargo test` (after `--`), e.g.
    /// `cargo xtask test --only cargo-test -- -p fuse-abi -- --nocapture`.
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
        about: "build the workspace (release binaries, test binaries, the sync-only passthrough, the docs with -D warnings)",
        run: step_build,
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
        name: "bench",
        about: "benchmark smoke run (cargo xtask bench --quick)",
        run: step_bench,
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
}

/// Passed/failed/skipped test counts.
#[derive(Default, Clone, Copy)]
struct Counts {
    /// Tests that passed.
    passed: u64,
    /// Tests that failed.
    failed: u64,
    /// Tests skipped or ignored.
    skipped: u64,
    /// Whether any runner reported counts at all.
    seen: bool,
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
    for name in args.skip.iter().chain(&args.only) {
        if !STEPS.iter().any(|s| s.name == name) {
            let names: Vec<_> = STEPS.iter().map(|s| s.name).collect();
            eprintln!("error: unknown step `{name}` (steps: {})", names.join(", "));
            std::process::exit(2);
        }
    }
    let mut ctx = Ctx {
        args,
        root: crate::workspace_root(),
        counts: Counts::default(),
    };
    let started = Instant::now();
    let (rows, failures) = run_steps(STEPS, &mut ctx);

    print_summary(&rows, started.elapsed().as_secs_f64());
    if ctx.counts.seen {
        let c = ctx.counts;
        println!(
            "tests: {} passed, {} failed, {} skipped",
            c.passed, c.failed, c.skipped
        );
    }
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

/// Runs `steps` in order: after a failure the rest are not run, unless
/// `--keep-going`. Returns the summary rows and every failure (step name
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
        if !failures.is_empty() && !args.keep_going {
            rows.push((step.name, RowResult::NotRun, None));
            continue;
        }
        println!("\n==> {}: {}", step.name, step.about);
        let t = Instant::now();
        let result = (step.run)(ctx);
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
            RowResult::NotRun => "not run (an earlier step failed)".to_string(),
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
        if a.is_empty() || a.contains(char::is_whitespace) {
            let _ = write!(s, " '{a}'");
        } else {
            let _ = write!(s, " {a}");
        }
    }
    s
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
// Step: setup.

/// Debian packages the suite and its later steps (VM, benchmarks) use.
const APT_PACKAGES: &[&str] = &[
    "fuse3",
    "libfuse3-dev",
    "pkg-config",
    "fio",
    "strace",
    "uidmap",
    "qemu-system-x86",
    "busybox-static",
    "cpio",
];

/// The pjdfstest release the configuration in `xtask/pjdfstest.toml` is for.
const PJDFSTEST_VERSION: &str = "0.2.2";

/// The kernel switch for FUSE over io_uring (6.14 and later).
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Where the fuse control file system is mounted.
const FUSECTL_DIR: &str = "/sys/fs/fuse/connections";

/// Makes the machine ready; idempotent and quick when nothing is missing.
fn step_setup(_ctx: &mut Ctx) -> Result<Outcome> {
    if !is_root() {
        bail!(
            "the suite needs root (it installs packages, mounts FUSE file systems and \
             switches users); without root, run `cargo xtask test-in-userns`"
        );
    }
    ensure_apt_packages(APT_PACKAGES)?;
    ensure_pjdfstest()?;
    enable_fuse_uring()?;
    mount_fusectl();
    Ok(Outcome::Done)
}

/// Whether `dpkg -s` reports a package as installed.
fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg")
        .args(["-s", package])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.trim() == "Status: install ok installed")
        })
}

/// Installs the packages `dpkg -s` does not know as installed; runs
/// `apt-get update` (and retries) only if the first install fails.
pub fn ensure_apt_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        println!("apt packages: all present ({})", packages.join(" "));
        return Ok(());
    }
    println!("apt packages missing: {}", missing.join(" "));
    let install = || {
        run_cmd(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if install().is_err() {
        println!("install failed; refreshing the package lists and trying again");
        run_cmd(
            Command::new("apt-get")
                .args(["update", "-q"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        install()?;
    }
    Ok(())
}

/// Finds pjdfstest (PATH or `~/.cargo/bin`) and checks its version.
fn pjdfstest_binary() -> Option<(PathBuf, String)> {
    let path = find_program("pjdfstest")?;
    let version = Command::new(&path)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    Some((path, version))
}

/// Installs pjdfstest with `cargo install` unless the right version is there.
fn ensure_pjdfstest() -> Result<()> {
    match pjdfstest_binary() {
        Some((path, version)) if version.ends_with(PJDFSTEST_VERSION) => {
            println!("pjdfstest: {} ({version})", path.display());
            return Ok(());
        }
        Some((path, version)) => println!(
            "pjdfstest: {} is `{version}`, not {PJDFSTEST_VERSION}: installing that",
            path.display()
        ),
        None => println!("pjdfstest: not found, installing {PJDFSTEST_VERSION}"),
    }
    run_cmd(cargo().args([
        "install",
        "pjdfstest",
        "--version",
        PJDFSTEST_VERSION,
        "--locked",
    ]))
}

/// Turns FUSE over io_uring on, where the kernel has the switch.
pub(crate) fn enable_fuse_uring() -> Result<()> {
    let path = Path::new(ENABLE_URING);
    if !path.exists() {
        println!("{ENABLE_URING}: absent (kernel without FUSE over io_uring); left alone");
        return Ok(());
    }
    let before = fs::read_to_string(path).with_context(|| format!("reading {ENABLE_URING}"))?;
    let before = before.trim();
    if before == "Y" {
        println!("{ENABLE_URING}: already Y");
        return Ok(());
    }
    fs::write(path, "Y").with_context(|| format!("writing Y to {ENABLE_URING}"))?;
    let after = fs::read_to_string(path).with_context(|| format!("reading {ENABLE_URING}"))?;
    println!("{ENABLE_URING}: was {before}, now {}", after.trim());
    if after.trim() != "Y" {
        bail!("{ENABLE_URING} is still {} after writing Y", after.trim());
    }
    Ok(())
}

/// Mounts fusectl if it is not mounted; a failure is only noted.
fn mount_fusectl() {
    if mounts().iter().any(|m| m.fstype == "fusectl") {
        println!("fusectl: mounted on {FUSECTL_DIR}");
        return;
    }
    match run_cmd(Command::new("mount").args(["-t", "fusectl", "none", FUSECTL_DIR])) {
        Ok(()) => println!("fusectl: mounted on {FUSECTL_DIR}"),
        Err(e) => println!(
            "note: cannot mount fusectl ({}); tests that need {FUSECTL_DIR} will say so",
            one_line(&e)
        ),
    }
}

/// One line of `/proc/self/mountinfo`.
pub(crate) struct MountEntry {
    /// Where it is mounted.
    pub(crate) mount_point: PathBuf,
    /// File system type (`fuse.passthroughfs`, `ext4`, ...).
    pub(crate) fstype: String,
}

/// The mounts visible to this process (empty if mountinfo is unreadable).
pub(crate) fn mounts() -> Vec<MountEntry> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            // id parent maj:min root mount-point options [optional...] - fstype source super
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape_mountinfo(fields.get(4)?)),
                fstype: fields.get(sep + 1)?.to_string(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------
// Step: build.

/// Builds the release binaries, the test binaries, and the sync-only
/// passthrough.
fn step_build(ctx: &mut Ctx) -> Result<Outcome> {
    run_cmd(
        cargo()
            .args(["build", "--release", "--workspace"])
            .current_dir(&ctx.root),
    )?;
    run_cmd(
        cargo()
            .args(["test", "--workspace", "--no-run"])
            .current_dir(&ctx.root),
    )?;
    // Every public item's docs build without a warning (broken links,
    // unescaped HTML), fuse-server's with every item documented.
    run_cmd(
        cargo()
            .args(["doc", "--workspace", "--no-deps", "-q"])
            .env("RUSTDOCFLAGS", "-D warnings")
            .current_dir(&ctx.root),
    )?;
    // The passthrough without its async path (no tokio, no io_uring), as a
    // sync-only user builds it.
    run_cmd(
        cargo()
            .args([
                "build",
                "-p",
                "fuse-backend-passthrough",
                "--no-default-features",
            ])
            .current_dir(&ctx.root),
    )?;
    Ok(Outcome::Done)
}

// ---------------------------------------------------------------------------
// Step: abi-check, and fetching packages from Debian's experimental suite.

/// Runs `cargo xtask abi-check` against the Linux 7.3 `fuse.h`.
///
/// Skipped (with the reason) only off Debian, where no 7.3 header can be had
/// unless `XTASK_FUSE_H` names one.
fn step_abi_check(ctx: &mut Ctx) -> Result<Outcome> {
    let header = match kernel_7_3_fuse_h(&ctx.root) {
        Ok(header) => header,
        Err(e) if e.downcast_ref::<NotDebian>().is_some() => {
            return Ok(Outcome::Skipped(format!(
                "no Linux 7.3 fuse.h: {}",
                one_line(&e)
            )))
        }
        Err(e) => return Err(e),
    };
    run_cmd(
        cargo()
            .args(["xtask", "abi-check"])
            .arg(&header)
            .current_dir(&ctx.root),
    )?;
    Ok(Outcome::Done)
}

/// The Linux 7.3 uapi `fuse.h`: `$XTASK_FUSE_H` if set, else the copy in
/// `../shared/reference/` if there is one, else the one in Debian
/// experimental's `linux-libc-dev` (downloaded once, then cached).
pub fn kernel_7_3_fuse_h(root: &Path) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("XTASK_FUSE_H") {
        let path = PathBuf::from(path);
        println!("header: {} (XTASK_FUSE_H)", path.display());
        if !path.is_file() {
            bail!("XTASK_FUSE_H={} is not a file", path.display());
        }
        return Ok(path);
    }
    let shared = root.join("../shared/reference/linux-7.3-rc7/fuse.h");
    if shared.is_file() {
        println!("header: {}", shared.display());
        return Ok(shared);
    }
    println!("header: {} absent, using linux-libc-dev", shared.display());
    let pkg = debian_experimental_package("linux-libc-dev", "7.3~")?;
    let header = pkg.root.join("usr/include/linux/fuse.h");
    if !header.is_file() {
        bail!(
            "linux-libc-dev {} has no usr/include/linux/fuse.h",
            pkg.version
        );
    }
    println!(
        "header: {} (linux-libc-dev {})",
        header.display(),
        pkg.version
    );
    Ok(header)
}

/// A Debian package unpacked under `target/kernel-7.3/PACKAGE/`.
pub struct UnpackedPackage {
    /// The package's version.
    pub version: String,
    /// The unpacked tree (`dpkg-deb -x`): `root/usr/...`.
    pub root: PathBuf,
    /// The `.deb` itself.
    #[allow(dead_code)] // For the VM runner, which is not written yet.
    pub deb: PathBuf,
}

/// Fetches the newest version (at least `min_version`, a Debian version
/// such as `7.3~`) of `package` from Debian's `experimental` suite and
/// unpacks it under `target/kernel-7.3/PACKAGE/`.
///
/// The result is cached: once unpacked, later calls return it without any
/// network access. Used for `linux-libc-dev` (the 7.3 `fuse.h`) and meant for
/// the kernel package the VM runner boots (`linux-binary-7.3-cloud-amd64`;
/// [`ExperimentalApt::package_names`] finds such names). Needs root (apt).
pub fn debian_experimental_package(package: &str, min_version: &str) -> Result<UnpackedPackage> {
    let dir = target_dir().join("kernel-7.3").join(package);
    let marker = dir.join("VERSION");
    if let Ok(version) = fs::read_to_string(&marker) {
        let version = version.trim().to_string();
        if let Some(deb) = find_deb(&dir) {
            println!("{package} {version}: cached in {}", dir.display());
            return Ok(UnpackedPackage {
                version,
                root: dir.join("root"),
                deb,
            });
        }
    }
    let apt = ExperimentalApt::new()?;
    let version = apt
        .newest_version(package)?
        .with_context(|| format!("{package} is not in Debian experimental"))?;
    if !dpkg_version_ge(&version, min_version)? {
        bail!("Debian experimental has {package} {version}, older than {min_version}");
    }
    println!("{package}: downloading {version} from experimental");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let deb = apt.download(package, &version, &dir)?;
    let tmp_root = dir.join("root.partial");
    run_cmd(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp_root))?;
    fs::rename(&tmp_root, dir.join("root"))?;
    fs::write(&marker, format!("{version}\n"))?;
    Ok(UnpackedPackage {
        version,
        root: dir.join("root"),
        deb,
    })
}

/// The `.deb` in a directory, if there is one.
fn find_deb(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension() == Some(OsStr::new("deb")))
}

/// Whether Debian version `a` >= `b` (`dpkg --compare-versions`).
fn dpkg_version_ge(a: &str, b: &str) -> Result<bool> {
    Ok(Command::new("dpkg")
        .args(["--compare-versions", a, "ge", b])
        .status()
        .context("running dpkg --compare-versions")?
        .success())
}

/// apt pointed at Debian's `experimental` suite alone, through a temporary
/// sources file and package lists: the system's apt state is not touched.
pub struct ExperimentalApt {
    /// Holds the sources file, the lists and apt's cache.
    dir: tempfile::TempDir,
}

impl ExperimentalApt {
    /// Writes the temporary sources file (the mirror is the one
    /// `/etc/apt/sources.list.d/debian.sources` names) and runs `apt-get update`.
    pub fn new() -> Result<Self> {
        let uri = debian_mirror()?;
        let dir = tempfile::Builder::new().prefix("xtask-apt-").tempdir()?;
        fs::create_dir_all(dir.path().join("lists/partial"))?;
        fs::create_dir_all(dir.path().join("cache/archives/partial"))?;
        fs::write(
            dir.path().join("experimental.sources"),
            format!(
                "Types: deb\nURIs: {uri}\nSuites: experimental\nComponents: main\n\
                 Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
            ),
        )?;
        let apt = Self { dir };
        run_cmd(apt.command("apt-get").args(["update", "-qq"]))?;
        Ok(apt)
    }

    /// An apt command (`apt-get`, `apt-cache`) using only these sources.
    fn command(&self, program: &str) -> Command {
        let d = self.dir.path().display();
        let mut cmd = Command::new(program);
        for opt in [
            "Dir::Etc::sourcelist=/dev/null".to_string(),
            format!("Dir::Etc::sourceparts={d}"),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            // Quiets "download is performed unsandboxed" for root-only dirs.
            "APT::Sandbox::User=root".to_string(),
        ] {
            cmd.arg("-o").arg(opt);
        }
        cmd
    }

    /// Package names in experimental that start with `prefix`
    /// (e.g. `linux-binary-7.` for the kernel packages).
    #[allow(dead_code)] // For the VM runner, which is not written yet.
    pub fn package_names(&self, prefix: &str) -> Result<Vec<String>> {
        let out = output(self.command("apt-cache").args(["pkgnames", prefix]))?;
        let mut names: Vec<String> = out.lines().map(str::to_string).collect();
        names.sort();
        Ok(names)
    }

    /// The newest version of `package` in experimental, if it is there.
    pub fn newest_version(&self, package: &str) -> Result<Option<String>> {
        let out = output(self.command("apt-cache").args(["madison", package]))?;
        let mut newest: Option<String> = None;
        // Lines: "pkg | version | uri experimental/main amd64 Packages".
        for line in out.lines() {
            let mut fields = line.split('|').map(str::trim);
            let (Some(name), Some(version)) = (fields.next(), fields.next()) else {
                continue;
            };
            if name != package {
                continue;
            }
            match &newest {
                Some(n) if !dpkg_version_ge(version, n)? => {}
                _ => newest = Some(version.to_string()),
            }
        }
        Ok(newest)
    }

    /// Downloads `package` at `version` into `dest`; returns the `.deb`.
    pub fn download(&self, package: &str, version: &str, dest: &Path) -> Result<PathBuf> {
        let scratch = self.dir.path().join("download");
        fs::create_dir_all(&scratch)?;
        run_cmd(
            self.command("apt-get")
                .args(["download", "-q", &format!("{package}={version}")])
                .current_dir(&scratch),
        )?;
        let deb = find_deb(&scratch).with_context(|| format!("apt-get download {package}"))?;
        let target = dest.join(deb.file_name().expect("a file name"));
        // The scratch dir may be on another file system than target/.
        fs::copy(&deb, &target).with_context(|| format!("copying to {}", target.display()))?;
        fs::remove_file(&deb)?;
        Ok(target)
    }
}

/// The Debian mirror this machine's apt uses.
///
/// `XTASK_DEBIAN_MIRROR` overrides it (e.g. on a machine that is not Debian,
/// where the answer is otherwise a [`NotDebian`] error).
fn debian_mirror() -> Result<String> {
    if let Some(uri) = std::env::var_os("XTASK_DEBIAN_MIRROR") {
        return Ok(uri.to_string_lossy().into_owned());
    }
    let os = fs::read_to_string("/etc/os-release").unwrap_or_default();
    let id = os
        .lines()
        .find_map(|l| l.strip_prefix("ID="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default();
    if id != "debian" {
        return Err(NotDebian(format!(
            "this system is not Debian (ID={id}) and XTASK_DEBIAN_MIRROR is not set"
        ))
        .into());
    }
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list.d/debian.sources") {
        if let Some(uri) = text
            .lines()
            .filter_map(|l| l.strip_prefix("URIs:"))
            .filter_map(|l| l.split_whitespace().next())
            .next()
        {
            return Ok(uri.to_string());
        }
    }
    // One-line style: "deb URI SUITE COMPONENTS", skipping the security archive.
    let text = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    text.lines()
        .map(str::split_whitespace)
        .filter_map(|mut f| (f.next() == Some("deb")).then(|| f.next()).flatten())
        .find(|uri| !uri.contains("security"))
        .map(str::to_string)
        .context("no Debian mirror in /etc/apt/sources.list.d/debian.sources or sources.list")
}

/// The error when Debian's archive cannot be reached because the system
/// is not Debian (so the header or package cannot be had here).
#[derive(Debug)]
pub struct NotDebian(String);

impl std::fmt::Display for NotDebian {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotDebian {}

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
    // `--workspace` would override a package selection given after `--`.
    let selects = cargo_args
        .iter()
        .any(|a| a.starts_with("-p") || a.starts_with("--package"));
    if !selects {
        cmd.arg("--workspace");
    }
    cmd.args(cargo_args);
    // Tests named `vm_` need the Linux 7.3 kernel: the vm step runs them in
    // its guest.
    cmd.args(["--", "--skip", "vm_"]);
    if let Some(n) = ctx.args.test_threads {
        cmd.arg(format!("--test-threads={n}"));
    }
    cmd.args(harness_args);
    let (status, counts) = run_counting(&mut cmd)?;
    ctx.counts.add(counts);
    println!(
        "cargo test: {} passed, {} failed, {} ignored",
        counts.passed, counts.failed, counts.skipped
    );
    if !status.success() {
        bail!(
            "cargo test failed ({status}; {} tests failed)",
            counts.failed
        );
    }
    Ok(Outcome::Done)
}

/// Runs `cargo test`, echoing its stdout, and sums its `test result:` lines.
fn run_counting(cmd: &mut Command) -> Result<(ExitStatus, Counts)> {
    let line = display(cmd);
    println!("$ {line}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let mut counts = Counts::default();
    let stdout = child.stdout.take().expect("piped stdout");
    for l in BufReader::new(stdout).lines() {
        let l = l.context("reading cargo test's output")?;
        println!("{l}");
        if let Some(c) = parse_libtest_result(&l) {
            counts.add(c);
        }
    }
    Ok((child.wait()?, counts))
}

/// Parses libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; ...`.
fn parse_libtest_result(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let mut c = Counts {
        seen: true,
        ..Counts::default()
    };
    for part in rest.split(';') {
        let mut words = part.split_whitespace().rev();
        let (Some(what), Some(n)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => c.passed += n,
            "failed" => c.failed += n,
            "ignored" => c.skipped += n,
            _ => {}
        }
    }
    Some(c)
}

// ---------------------------------------------------------------------------
// Step: pjdfstest.

/// statfs `f_type` of a FUSE mount (`FUSE_SUPER_MAGIC`).
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// How long the daemon may take to mount, and to exit after SIGTERM.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs pjdfstest on a passthroughfs mount and on a mount of the memfs
/// example (or, with `--native` or `XTASK_PJDFSTEST_NATIVE=1`, only on a
/// plain directory for comparison). Both mounts are always tested; their
/// counts are added to the totals, and the step fails if either run did.
///
/// The passthrough daemon is `target/release/passthroughfs` unless
/// `XTASK_PASSTHROUGHFS` names another one; it is run as `DAEMON
/// --allow-other --default-permissions SOURCE MOUNTPOINT`, must stay in
/// the foreground and must unmount and exit on SIGTERM. memfs
/// (`crates/fuse-transport-dev/examples/memfs.rs`, built here) does the
/// same as `memfs MOUNTPOINT` (it mounts with those options itself), with
/// its own configuration, `xtask/pjdfstest-memfs.toml`, whose
/// `expected_failures` (none now) would name the tests it can't pass and
/// say why.
fn step_pjdfstest(ctx: &mut Ctx) -> Result<Outcome> {
    let (pjdfstest, version) =
        pjdfstest_binary().context("pjdfstest is not installed (run the setup step)")?;
    println!("pjdfstest: {} ({version})", pjdfstest.display());
    let native = ctx.args.native
        || std::env::var("XTASK_PJDFSTEST_NATIVE").is_ok_and(|v| !v.is_empty() && v != "0");
    let config = ctx.root.join("xtask/pjdfstest.toml");
    if native {
        // Short paths: some tests bind UNIX sockets (108-byte path limit).
        let dir = short_tempdir("pjd-")?;
        println!("native run in {} (no FUSE)", dir.path().display());
        let mut counts = Counts::default();
        let result = run_pjdfstest(&pjdfstest, &config, dir.path(), &mut counts);
        report_pjdfstest(ctx, "a plain directory", counts);
        result?;
        return Ok(Outcome::Done);
    }

    let mut failures = Vec::new();
    let mut counts = Counts::default();
    let result = pjdfstest_passthrough(&pjdfstest, &config, &mut counts);
    report_pjdfstest(ctx, "passthroughfs", counts);
    if let Err(e) = result {
        failures.push(format!("passthroughfs: {}", one_line(&e)));
    }
    println!();
    let config = ctx.root.join("xtask/pjdfstest-memfs.toml");
    let mut counts = Counts::default();
    let result = pjdfstest_memfs(&ctx.root, &pjdfstest, &config, &mut counts);
    report_pjdfstest(ctx, "memfs", counts);
    if let Err(e) = result {
        failures.push(format!("memfs: {}", one_line(&e)));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(Outcome::Done)
}

/// Adds one run's counts to the totals and prints them.
fn report_pjdfstest(ctx: &mut Ctx, what: &str, counts: Counts) {
    ctx.counts.add(counts);
    if counts.seen {
        println!(
            "pjdfstest on {what}: {} passed, {} failed, {} skipped",
            counts.passed, counts.failed, counts.skipped
        );
    }
}

/// pjdfstest on a passthroughfs mount of an empty directory.
fn pjdfstest_passthrough(pjdfstest: &Path, config: &Path, counts: &mut Counts) -> Result<()> {
    // Another daemon with the same command line can be compared by
    // naming it in XTASK_PASSTHROUGHFS (e.g. a wrapper for libfuse's
    // passthrough_ll).
    let daemon = std::env::var_os("XTASK_PASSTHROUGHFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("release/passthroughfs"));
    if !daemon.is_file() {
        bail!("{} does not exist (run the build step)", daemon.display());
    }
    // Short paths: some tests bind UNIX sockets (108-byte path limit).
    let mountpoint = short_tempdir("pjd-")?;
    let source = short_tempdir("pjd-src-")?;
    let logs = tempfile::Builder::new().prefix("pjd-log-").tempdir()?;
    let mut cmd = Command::new(&daemon);
    cmd.args(["--allow-other", "--default-permissions"])
        .arg(source.path());
    let mount = DaemonMount::start("passthroughfs", cmd, mountpoint.path(), logs.path())?;
    let result = run_pjdfstest(pjdfstest, config, mountpoint.path(), counts);
    // `mount` is gone before `source` and `mountpoint` are removed.
    stop_after(result, mount)
}

/// pjdfstest on a mount of the memfs example, built first (the build step
/// builds no examples).
fn pjdfstest_memfs(
    root: &Path,
    pjdfstest: &Path,
    config: &Path,
    counts: &mut Counts,
) -> Result<()> {
    run_cmd(
        cargo()
            .args(["build", "--release", "-p", "fuse-transport-dev"])
            .args(["--example", "memfs"])
            .current_dir(root),
    )?;
    let daemon = target_dir().join("release/examples/memfs");
    let mountpoint = short_tempdir("pjd-mem-")?;
    let logs = tempfile::Builder::new().prefix("pjd-log-").tempdir()?;
    let cmd = Command::new(&daemon);
    let mount = DaemonMount::start("memfs", cmd, mountpoint.path(), logs.path())?;
    let result = run_pjdfstest(pjdfstest, config, mountpoint.path(), counts);
    stop_after(result, mount)
}

/// Stops the daemon whatever pjdfstest's `result` was; reports
/// pjdfstest's failure first if both failed.
fn stop_after(result: Result<()>, mount: DaemonMount) -> Result<()> {
    match (result, mount.stop()) {
        (Err(e), Err(stop)) => {
            println!("also: {}", one_line(&stop));
            Err(e)
        }
        (result, stop) => result.and(stop),
    }
}

/// A fresh directory `/tmp/PREFIXxxxxxx`, mode 0755 (pjdfstest switches to
/// other users, who must be able to reach the test directory).
fn short_tempdir(prefix: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .context("creating a directory in /tmp")?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// Runs pjdfstest in `dir`, echoing its output; stores its counts in
/// `counts` and fails (naming the failed tests) if any test failed.
///
/// A test that fails is run once more, alone. One that passes then is
/// counted as passed and reported as flaky, by name, in the log and the
/// summary line; one that fails again fails the step. The one seen,
/// `open::etxtbsy` (about 1 run in 7), is no race with the machine: the
/// passthrough's `FUSE_ATOMIC_O_TRUNC` lets the daemon truncate a running
/// executable on `open(O_RDONLY | O_TRUNC)` before the kernel refuses it
/// with `ETXTBSY`, and the program's death then lets the open succeed
/// (docs/testing.md, "The pjdfstest retry"). The retry can go once the
/// passthrough stops asking for `FUSE_ATOMIC_O_TRUNC`.
fn run_pjdfstest(pjdfstest: &Path, config: &Path, dir: &Path, counts: &mut Counts) -> Result<()> {
    let first = run_pjdfstest_once(pjdfstest, config, dir, &[], counts);
    let failed = match first {
        Err(PjdFailure::Tests(failed)) if !failed.is_empty() => failed,
        Err(PjdFailure::Tests(_)) => bail!("pjdfstest reported failures but named none"),
        Err(PjdFailure::Other(e)) => return Err(e),
        Ok(()) => return Ok(()),
    };
    println!(
        "pjdfstest: running the {} failed test(s) once more, alone: {}",
        failed.len(),
        failed.join(", ")
    );
    let mut again = Counts::default();
    let mut still_failing = Vec::new();
    let mut flaky = Vec::new();
    for name in &failed {
        match run_pjdfstest_once(
            pjdfstest,
            config,
            dir,
            std::slice::from_ref(name),
            &mut again,
        ) {
            Ok(()) if again.passed >= 1 => flaky.push(name.clone()),
            Ok(()) => still_failing.push(format!("{name} (not run again)")),
            Err(PjdFailure::Tests(_)) => still_failing.push(name.clone()),
            Err(PjdFailure::Other(e)) => return Err(e),
        }
    }
    counts.failed -= flaky.len() as u64;
    counts.passed += flaky.len() as u64;
    if !flaky.is_empty() {
        println!(
            "pjdfstest: FLAKY (failed once, passed when run again): {}",
            flaky.join(", ")
        );
    }
    if !still_failing.is_empty() {
        bail!(
            "pjdfstest: {} passed, {} failed, {} skipped: {}",
            counts.passed,
            counts.failed,
            counts.skipped,
            still_failing.join(", ")
        );
    }
    Ok(())
}

/// Why a pjdfstest run failed.
enum PjdFailure {
    /// These tests failed.
    Tests(Vec<String>),
    /// It didn't run properly.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for PjdFailure {
    fn from(e: anyhow::Error) -> Self {
        PjdFailure::Other(e)
    }
}

impl From<std::io::Error> for PjdFailure {
    fn from(e: std::io::Error) -> Self {
        PjdFailure::Other(e.into())
    }
}

/// One pjdfstest run (of the tests whose names contain one of `only`, or
/// all; its `--exact` wants names longer than the ones it prints).
fn run_pjdfstest_once(
    pjdfstest: &Path,
    config: &Path,
    dir: &Path,
    only: &[String],
    counts: &mut Counts,
) -> std::result::Result<(), PjdFailure> {
    let mut cmd = Command::new(pjdfstest);
    cmd.arg("-c").arg(config).arg("-p").arg(dir);
    cmd.args(only);
    cmd.current_dir(dir)
        .env("NO_COLOR", "1")
        // A failure's message says enough; backtraces would triple the log.
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped());
    let line = display(&cmd);
    println!("$ {line}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let mut failed_tests = Vec::new();
    let mut summary = None;
    let stdout = child.stdout.take().expect("piped stdout");
    for l in BufReader::new(stdout).lines() {
        let l = strip_ansi(&l.context("reading pjdfstest's output")?);
        println!("{l}");
        let t = l.trim_end();
        if t.ends_with(" FAILED") || t.ends_with(" PASSED UNEXPECTEDLY") {
            if let Some(name) = t.split_whitespace().next() {
                failed_tests.push(name.to_string());
            }
        }
        if let Some(s) = parse_pjdfstest_summary(t) {
            summary = Some(s);
        }
    }
    let status = child.wait()?;
    let Some(summary) = summary else {
        return Err(anyhow::anyhow!("pjdfstest printed no summary ({status})").into());
    };
    *counts = summary;
    if counts.failed > 0 {
        println!("failed pjdfstest tests ({}):", failed_tests.len());
        for t in &failed_tests {
            println!("  {t}");
        }
        let mut list = failed_tests
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if failed_tests.len() > 10 {
            list.push_str(", ...");
        }
        println!(
            "pjdfstest: {} passed, {} failed, {} skipped: {list}",
            counts.passed, counts.failed, counts.skipped
        );
        return Err(PjdFailure::Tests(failed_tests));
    }
    if !status.success() {
        return Err(
            anyhow::anyhow!("pjdfstest exited with {status} although no test failed").into(),
        );
    }
    Ok(())
}

/// Parses `Summary: 0 failed, 15 skipped, 383 passed, 0 expected failures, 398 total`.
fn parse_pjdfstest_summary(line: &str) -> Option<Counts> {
    let rest = line.strip_prefix("Summary:")?;
    let mut c = Counts {
        seen: true,
        ..Counts::default()
    };
    for part in rest.split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let n: u64 = n.parse().ok()?;
        match what {
            "failed" => c.failed = n,
            // Expected failures (a configuration's `expected_failures`)
            // did not pass: they count as skipped.
            "skipped" | "expected" => c.skipped += n,
            "passed" => c.passed = n,
            _ => {}
        }
    }
    Some(c)
}

/// Removes ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// A running FUSE daemon (passthroughfs, memfs) and its mount. Dropping
/// it (also on an error or a panic) stops the daemon and makes sure no
/// mount is left.
struct DaemonMount {
    /// The daemon's name, for messages.
    name: &'static str,
    /// The daemon; `None` once it has been waited for.
    child: Option<Child>,
    /// Where it is mounted.
    mountpoint: PathBuf,
    /// The file holding the daemon's stdout and stderr.
    log: PathBuf,
}

impl DaemonMount {
    /// Starts `cmd MOUNTPOINT` (its stdout and stderr going to a log in
    /// `log_dir`) and waits until the mount answers.
    fn start(
        name: &'static str,
        mut cmd: Command,
        mountpoint: &Path,
        log_dir: &Path,
    ) -> Result<Self> {
        // As mountinfo will show it (no symlinks).
        let mountpoint = mountpoint.canonicalize()?;
        let log = log_dir.join(format!("{name}.log"));
        let log_file = fs::File::create(&log)?;
        cmd.arg(&mountpoint)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        let line = display(&cmd);
        println!("$ {line} &   (log: {})", log.display());
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{line}`"))?;
        let mut mount = Self {
            name,
            child: Some(child),
            mountpoint,
            log,
        };
        mount.wait_mounted()?;
        Ok(mount)
    }

    /// Polls until the mountpoint is a FUSE mount whose statfs answers.
    fn wait_mounted(&mut self) -> Result<()> {
        let deadline = Instant::now() + DAEMON_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("daemon not yet waited for");
            if let Some(status) = child.try_wait()? {
                self.child = None;
                self.print_log();
                bail!(
                    "{} exited before mounting ({status}); its log is above",
                    self.name
                );
            }
            if is_fuse_mounted(&self.mountpoint) {
                // Mounted: statfs goes to the daemon and must answer in time.
                let left = deadline.saturating_duration_since(Instant::now());
                match statfs_type(&self.mountpoint, left.max(Duration::from_secs(1))) {
                    Some(Ok(t)) if t == FUSE_SUPER_MAGIC => {
                        println!("mounted: {} (FUSE)", self.mountpoint.display());
                        return Ok(());
                    }
                    Some(Ok(t)) => bail!(
                        "{} has f_type {t:#x}, not FUSE ({FUSE_SUPER_MAGIC:#x})",
                        self.mountpoint.display()
                    ),
                    Some(Err(e)) => {
                        self.print_log();
                        bail!("statfs({}) failed: {e}", self.mountpoint.display());
                    }
                    None => {
                        self.print_log();
                        bail!(
                            "the mount at {} does not answer statfs",
                            self.mountpoint.display()
                        );
                    }
                }
            }
            if Instant::now() >= deadline {
                self.print_log();
                bail!(
                    "{} did not mount {} within {} s",
                    self.name,
                    self.mountpoint.display(),
                    DAEMON_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Prints the daemon's log.
    fn print_log(&self) {
        let mut text = String::new();
        let _ = fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut text));
        println!("---- {} log ({}) ----", self.name, self.log.display());
        print!("{text}");
        if !text.is_empty() && !text.ends_with('\n') {
            println!();
        }
        println!("---- end of log ----");
    }

    /// Stops the daemon with SIGTERM and checks it unmounted and exited with 0.
    fn stop(mut self) -> Result<()> {
        let status = self.terminate();
        let leftover = self.force_unmount();
        match status {
            Some(s) if s.signal().is_some() => {
                self.print_log();
                bail!("{} died after SIGTERM ({s})", self.name);
            }
            Some(s) if !s.success() => {
                println!("note: {} exited with {s} after SIGTERM", self.name);
            }
            None => {
                self.print_log();
                bail!(
                    "{} did not exit within {} s of SIGTERM",
                    self.name,
                    DAEMON_TIMEOUT.as_secs()
                );
            }
            _ => {}
        }
        if leftover {
            bail!(
                "{} exited but left its mount behind (lazily unmounted)",
                self.name
            );
        }
        println!(
            "{} stopped, {} unmounted",
            self.name,
            self.mountpoint.display()
        );
        Ok(())
    }

    /// Sends SIGTERM and waits up to [`DAEMON_TIMEOUT`]; SIGKILL after that.
    /// Returns the exit status if it exited on its own.
    fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // The Child has not been waited for, so its PID cannot have been
        // reused: it is still our (possibly zombie) child.
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
        // SAFETY: kill has no memory-safety preconditions; pid is our child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + DAEMON_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        println!(
            "{} ignored SIGTERM for {} s: killing it",
            self.name,
            DAEMON_TIMEOUT.as_secs()
        );
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// `umount -l` if the mount is still there; returns whether it was.
    fn force_unmount(&self) -> bool {
        if !is_fuse_mounted(&self.mountpoint) {
            return false;
        }
        println!("{} is still mounted: umount -l", self.mountpoint.display());
        if let Err(e) = run_cmd(Command::new("umount").arg("-l").arg(&self.mountpoint)) {
            println!("warning: {}", one_line(&e));
        }
        true
    }
}

impl Drop for DaemonMount {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.terminate();
        }
        self.force_unmount();
    }
}

/// Whether `/proc/self/mountinfo` lists a FUSE mount at `path`. (Reading
/// mountinfo never blocks, unlike a statfs on a mount whose daemon is stuck.)
fn is_fuse_mounted(path: &Path) -> bool {
    mounts()
        .iter()
        .any(|m| m.mount_point == path && (m.fstype == "fuse" || m.fstype.starts_with("fuse.")))
}

/// statfs `f_type` of `path`, from a helper thread so that a hung daemon
/// cannot hang us: `None` if there is no answer within `timeout`.
fn statfs_type(path: &Path, timeout: Duration) -> Option<std::io::Result<i64>> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: an all-zero statfs is a valid value of a plain C struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: path is NUL-terminated and st is a valid out pointer.
        let r = unsafe { libc::statfs(path.as_ptr(), &mut st) };
        let result = if r == 0 {
            #[allow(clippy::unnecessary_cast)]
            Ok(st.f_type as i64)
        } else {
            Err(std::io::Error::last_os_error())
        };
        let _ = tx.send(result);
    });
    rx.recv_timeout(timeout).ok()
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
    run_cmd(cargo().args(["xtask", "test-in-vm"]).current_dir(&ctx.root))?;
    Ok(Outcome::Done)
}

/// A quick benchmark run, to catch a broken benchmark setup (not to judge
/// speed): `cargo xtask bench --quick`.
fn step_bench(ctx: &mut Ctx) -> Result<Outcome> {
    run_cmd(
        cargo()
            .args(["xtask", "bench", "--quick"])
            .current_dir(&ctx.root),
    )?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libtest_result() {
        let c = parse_libtest_result(
            "test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured; 2 filtered out; finished in 0.01s",
        )
        .unwrap();
        assert_eq!((c.passed, c.failed, c.skipped), (12, 1, 3));
        assert!(parse_libtest_result("running 3 tests").is_none());
    }

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

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape_mountinfo(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mountinfo(r"/x\"), r"/x\");
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

    /// The fake suite with or without `--keep-going`: the rows' results,
    /// the failed steps and how many steps ran.
    fn run_fake(keep_going: bool) -> (Vec<&'static str>, Vec<&'static str>, u64) {
        let args = TestArgs {
            no_setup: false,
            skip: Vec::new(),
            only: Vec::new(),
            keep_going,
            test_threads: None,
            native: false,
            cargo_test_args: Vec::new(),
        };
        let mut ctx = Ctx {
            args: &args,
            root: PathBuf::from("/nonexistent"),
            counts: Counts::default(),
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
    fn a_failure_stops_the_run() {
        assert_eq!(
            run_fake(false),
            (vec!["failed", "not run", "not run"], vec!["first"], 0)
        );
    }

    #[test]
    fn keep_going_runs_every_step_and_reports_every_failure() {
        assert_eq!(
            run_fake(true),
            (vec!["failed", "ok", "failed"], vec!["first", "third"], 1)
        );
    }

    #[test]
    fn step_names_are_unique() {
        for (i, a) in STEPS.iter().enumerate() {
            assert!(STEPS[i + 1..].iter().all(|b| b.name != a.name));
        }
    }
}
