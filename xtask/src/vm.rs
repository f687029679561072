//! `cargo xtask test-in-vm`: the tests that need a real Linux 7.3 kernel
//! (FUSE protocol 7.46, FUSE over io_uring with kernel buffer pools), run in
//! a qemu guest booted from Debian's 7.3 cloud kernel.
//!
//! The run, each phase timed:
//!
//! 1. **kernel**: the newest `linux-binary-X.Y-cloud-amd64` (X.Y >= 7.3) from
//!    Debian's `experimental` suite, through
//!    [`debian_experimental_package`] and cached under
//!    `target/kernel-7.3/PACKAGE/`. Once a kernel is cached, later runs use
//!    the newest cached one without any network access (`--refresh-kernel`
//!    looks for a newer one; `--kernel PATH` boots a given `vmlinuz`).
//! 2. **build**: `cargo test --no-run` for the chosen packages, statically
//!    linked (`-C target-feature=+crt-static`, `--target
//!    x86_64-unknown-linux-gnu`) in `target/vm` so the host's build is left
//!    alone. The executables come from cargo's JSON messages.
//! 3. **initramfs**: busybox-static, `/init` (`xtask/vm-init.sh`), a plan
//!    that `/init` sources, `/etc/passwd` with root and nobody, the FUSE INIT
//!    probe (`xtask/vm-probe.c`, built with `gcc -static`) and the test
//!    executables, each at the same absolute path as on the host (so
//!    `CARGO_BIN_EXE_*` paths baked into tests still work), with the tested
//!    packages' directories (fixtures a test reads through
//!    `CARGO_MANIFEST_DIR`) and whatever `--include` names. Packed with
//!    `cpio -H newc` and `gzip` into `target/vm/run/initrd.gz`. A second
//!    `test-in-vm` in the same tree waits for the first (a lock file).
//! 4. **boot** and **run**: `qemu-system-x86_64 -accel tcg` (the host's KVM
//!    vCPU lacks BMI2, which this kernel needs) with `fuse.enable_uring=1`.
//!    The guest's console is streamed to the terminal and saved in
//!    `target/vm/run/console.log`. The guest runs the probe first (it prints
//!    the kernel's FUSE version and whether INIT offers bits 41,
//!    `FUSE_OVER_IO_URING`, and 43, `FUSE_HAS_IO_URING_BUFPOOL`), then every
//!    test executable with the filter, and powers off.
//!
//! The host parses the sentinel lines `/init` prints (`XTASK-VM-BOOTED`,
//! `XTASK-VM-START`, `XTASK-VM-RESULT <name> <status>`, `XTASK-VM-DONE`) and
//! libtest's `test result:` lines, prints a summary, and fails if the probe
//! does not show 7.46 with both bits, if any executable fails, if a result is
//! missing (the guest died) or if the run exceeds `--timeout`. A package whose
//! tests all miss the filter is reported loudly as "0 tests matched", which
//! is not a failure.
//!
//! `--measure-memory` replaces the tests with a measurement (the probe still
//! runs first): the `passthroughfs` daemon and the `direct_read_load`
//! example of fuse-transport-uring are built (`--release`, static) instead,
//! and the guest runs `xtask/vm-memory.sh`, which serves a tmpfs directory
//! with `passthroughfs --uring` once per `--measure-bufs` value and round,
//! alternating, under random 1 MiB `O_DIRECT` reads, and prints one
//! `XTASK-MEMORY:` line per run (daemon RSS and VmSize, the ring memory's
//! reserved and resident bytes, throughput). The host prints them as a
//! table with the medians and writes it to `target/vm/run/memory.md`.
//! `docs/fuse-uring-performance.md` has the numbers. CI never passes the
//! flag.

use crate::test::{debian_experimental_package, ensure_apt_packages, target_dir, ExperimentalApt};
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Arguments of `cargo xtask test-in-vm`.
#[derive(clap::Args)]
pub struct VmArgs {
    /// Package whose tests run in the VM (repeatable)
    /// [default: fuse-transport-uring].
    #[arg(short = 'p', long = "package", value_name = "NAME")]
    packages: Vec<String>,
    /// Test name filter given to every test executable; '' runs all tests.
    #[arg(long, value_name = "STR", default_value = "vm_")]
    filter: String,
    /// Passed to the test executables as `--test-threads N`.
    #[arg(long, value_name = "N")]
    test_threads: Option<usize>,
    /// Passed to the test executables as `--nocapture`.
    #[arg(long)]
    nocapture: bool,
    /// Build the test executables with `--release`.
    #[arg(long)]
    release: bool,
    /// Seconds the VM may run (boot to power-off) before qemu is killed.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    /// Guest memory in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    memory: u32,
    /// Guest CPUs.
    #[arg(long, value_name = "N", default_value_t = 2)]
    cpus: u32,
    /// Boot this kernel image (a bzImage/vmlinuz) instead of Debian's 7.3.
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// Ask Debian experimental for the newest 7.3+ kernel even when one is
    /// cached (re-downloads it).
    #[arg(long)]
    refresh_kernel: bool,
    /// Appended to the kernel command line.
    #[arg(long, value_name = "STR")]
    extra_append: Option<String>,
    /// Copy this host file or directory into the guest at the same absolute
    /// path (repeatable), e.g. data a test reads. The tested packages'
    /// directories are always copied.
    #[arg(long, value_name = "PATH")]
    include: Vec<PathBuf>,
    /// Keep the initramfs staging directory (`target/vm/run/initramfs/`).
    #[arg(long)]
    keep: bool,
    /// Don't stream the guest console; print its last lines on failure.
    #[arg(long)]
    quiet: bool,
    /// Extra arguments for every test executable (after `--`).
    #[arg(last = true, value_name = "TEST_ARGS")]
    test_args: Vec<String>,
    /// Instead of the tests, measure the memory and throughput of
    /// `passthroughfs --uring` under random 1 MiB O_DIRECT reads, per-entry
    /// buffers against buffer pools (docs/fuse-uring-performance.md).
    #[arg(long)]
    measure_memory: bool,
    /// --measure-memory: buffers per queue to compare (0: a payload buffer
    /// per entry), comma-separated.
    #[arg(long, value_name = "N,N", value_delimiter = ',', default_values_t = [0, 4], requires = "measure_memory")]
    measure_bufs: Vec<usize>,
    /// --measure-memory: ring entries per queue.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        requires = "measure_memory"
    )]
    measure_entries: usize,
    /// --measure-memory: rounds (each runs every --measure-bufs value once,
    /// alternating).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        requires = "measure_memory"
    )]
    measure_rounds: usize,
    /// --measure-memory: seconds of load per run.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 10,
        requires = "measure_memory"
    )]
    measure_seconds: u32,
    /// --measure-memory: reader threads per guest CPU.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        requires = "measure_memory"
    )]
    measure_readers: usize,
    /// --measure-memory: size of the file the readers read, in MiB.
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 256,
        requires = "measure_memory"
    )]
    measure_file_mib: usize,
}

/// The package tested when no `--package` is given.
const DEFAULT_PACKAGE: &str = "fuse-transport-uring";

/// The target the guest's executables are built for (statically linked).
const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// Debian's kernel image packages are `linux-binary-X.Y-cloud-amd64`.
const KERNEL_PACKAGE_PREFIX: &str = "linux-binary-";
/// See [`KERNEL_PACKAGE_PREFIX`].
const KERNEL_PACKAGE_SUFFIX: &str = "-cloud-amd64";
/// The oldest kernel series that has buffer pools.
const MIN_SERIES: (u32, u32) = (7, 3);
/// [`MIN_SERIES`] as a Debian version.
const MIN_VERSION: &str = "7.3~";

/// The FUSE minor version the 7.3 kernel speaks.
const WANTED_MINOR: u32 = 46;

/// The kernel command line before `--extra-append`.
const BASE_APPEND: &str = "console=ttyS0 fuse.enable_uring=1 panic=-1 quiet";

/// Host packages the run needs.
const HOST_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "gcc",
    "libc6-dev",
];

/// busybox-static's binary.
const BUSYBOX: &str = "/bin/busybox";

/// The guest's `/init`.
const INIT_SCRIPT: &str = include_str!("../vm-init.sh");
/// The FUSE INIT probe's C source.
const PROBE_SOURCE: &str = include_str!("../vm-probe.c");
/// The probe's name in the plan and the summary.
const PROBE_NAME: &str = "fuse-init-probe";

/// The memory measurement's guest script (`--measure-memory`).
const MEASURE_SCRIPT: &str = include_str!("../vm-memory.sh");
/// The measurement's name in the plan and the summary.
const MEASURE_NAME: &str = "memory-measurement";
/// What `--measure-memory` builds: the daemon, and the load generator.
const MEASURE_DAEMON: (&str, &str) = ("passthroughfs", "passthroughfs");
/// See [`MEASURE_DAEMON`].
const MEASURE_LOAD: (&str, &str) = ("fuse-transport-uring", "direct_read_load");

/// Environment variables passed on from the host to the guest's tests.
const PASSED_ENV: &[&str] = &[
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "RUST_MIN_STACK",
    "RUST_TEST_THREADS",
];

/// Console lines kept for `--quiet`'s tail on failure.
const TAIL_LINES: usize = 80;

/// Boots the 7.3 kernel and runs the tests that need it.
///
/// Errors are printed here and end the process with status 1 (an error
/// returned from `main` would add a backtrace when `RUST_BACKTRACE` is set).
pub fn run(args: &VmArgs) -> Result<()> {
    if let Err(e) = run_vm(args) {
        eprintln!("error: test-in-vm: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
    Ok(())
}

/// [`run`], returning its errors.
fn run_vm(args: &VmArgs) -> Result<()> {
    let started = Instant::now();
    let mut timings: Vec<(&str, f64)> = Vec::new();
    let vm_dir = target_dir().join("vm");
    let run_dir = vm_dir.join("run");
    fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let _lock = lock(&run_dir.join(".lock"))?;

    ensure_apt_packages(HOST_PACKAGES)?;

    println!("\n--> kernel");
    let t = Instant::now();
    let kernel = find_kernel(args)?;
    println!("kernel: {} ({})", kernel.vmlinuz.display(), kernel.about);
    timings.push(("kernel", t.elapsed().as_secs_f64()));

    println!("\n--> build");
    let t = Instant::now();
    let packages = if args.packages.is_empty() {
        vec![DEFAULT_PACKAGE.to_string()]
    } else {
        args.packages.clone()
    };
    let built = if args.measure_memory {
        build_measurement(&vm_dir)?
    } else {
        build_tests(args, &packages, &vm_dir)?
    };
    for b in &built.tests {
        println!("test executable: {} ({})", b.name, b.exe.display());
    }
    let probe = build_probe(&run_dir)?;
    timings.push(("build", t.elapsed().as_secs_f64()));

    println!("\n--> initramfs");
    let t = Instant::now();
    let initrd = build_initramfs(args, &run_dir, &probe, &built)?;
    timings.push(("initramfs", t.elapsed().as_secs_f64()));

    println!("\n--> boot");
    let mut planned = vec![PROBE_NAME.to_string()];
    planned.extend(built.tests.iter().map(|b| b.name.clone()));
    if built.measure.is_some() {
        planned.push(MEASURE_NAME.to_string());
    }
    let log = run_dir.join("console.log");
    let mut vm = boot(args, &kernel.vmlinuz, &initrd, &log)?;
    // TCG now and then crashes the guest kernel while it boots (seen: an
    // `int3` Oops in `sched_clock_cpu` during boot-time code patching,
    // 1 boot in dozens), before any test ran. That says nothing about our
    // code: boot again, at most twice, and say so.
    for attempt in 2..=3 {
        if vm.booted.is_some() || vm.panic.is_none() {
            break;
        }
        let why = vm.panic.clone().unwrap_or_default();
        let kept = run_dir.join(format!("console-boot-{}.log", attempt - 1));
        let _ = fs::rename(&log, &kept);
        println!(
            "the guest kernel died while booting ({why}), before any test ran; its console \
             is in {}; booting again (attempt {attempt} of 3)",
            kept.display()
        );
        vm = boot(args, &kernel.vmlinuz, &initrd, &log)?;
    }
    timings.extend(vm.timings());

    let total = started.elapsed().as_secs_f64();
    let problems = report(&kernel, &packages, &built, &planned, &vm, args);
    if args.measure_memory && !vm.memory.is_empty() {
        let table = memory_table(&vm.memory, args, &kernel);
        println!(
            "\n==> memory (also in {})\n{table}",
            run_dir.join("memory.md").display()
        );
        fs::write(run_dir.join("memory.md"), &table)?;
    }
    print_timings(&timings, total);
    if !problems.is_empty() {
        if args.quiet {
            print_tail(&vm.console);
        }
        println!("console log: {}", log.display());
        bail!("{}", problems.join("; "));
    }
    println!("test-in-vm: ok");
    Ok(())
}

// ---------------------------------------------------------------------------
// Small helpers.

/// The `cargo` that runs this xtask.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// A command line as a string, for logs and error messages.
fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
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

/// Runs a command with inherited stdio; fails unless it exits with 0.
fn run_cmd(cmd: &mut Command) -> Result<()> {
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

/// Takes an exclusive `flock` on `path` (waiting for it if another
/// `test-in-vm` in the same tree holds it); released when the file closes.
fn lock(path: &Path) -> Result<fs::File> {
    use std::os::fd::AsRawFd;
    let file = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let flock = |op| {
        // SAFETY: flock has no memory-safety preconditions; the fd is open.
        unsafe { libc::flock(file.as_raw_fd(), op) == 0 }
    };
    if !flock(libc::LOCK_EX | libc::LOCK_NB) {
        println!(
            "waiting for another `cargo xtask test-in-vm` ({})",
            path.display()
        );
        if !flock(libc::LOCK_EX) {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", path.display()));
        }
    }
    Ok(file)
}

/// A string as one single-quoted `sh` word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A path as UTF-8 (the plan is a shell script), or an error.
fn utf8(path: &Path) -> Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

// ---------------------------------------------------------------------------
// Kernel.

/// The kernel to boot.
struct Kernel {
    /// Its `vmlinuz`.
    vmlinuz: PathBuf,
    /// Package, version and where it came from, for the log and summary.
    about: String,
}

/// The kernel series (`(7, 3)`) of a name `linux-binary-7.3-cloud-amd64`.
fn kernel_series(package: &str) -> Option<(u32, u32)> {
    let series = package
        .strip_prefix(KERNEL_PACKAGE_PREFIX)?
        .strip_suffix(KERNEL_PACKAGE_SUFFIX)?;
    let (major, minor) = series.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The newest-series kernel package name (>= [`MIN_SERIES`]) among `names`.
fn newest_kernel_package<I: IntoIterator<Item = String>>(names: I) -> Option<String> {
    names
        .into_iter()
        .filter_map(|n| kernel_series(&n).map(|s| (s, n)))
        .filter(|(s, _)| *s >= MIN_SERIES)
        .max()
        .map(|(_, n)| n)
}

/// Where [`debian_experimental_package`] keeps its packages.
fn kernel_cache_dir() -> PathBuf {
    target_dir().join("kernel-7.3")
}

/// Kernel packages already unpacked in the cache.
fn cached_kernel_packages() -> Vec<String> {
    let Ok(entries) = fs::read_dir(kernel_cache_dir()) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("root").is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| kernel_series(n).is_some())
        .collect()
}

/// The kernel to boot: `--kernel`, else the newest cached 7.3+ cloud kernel,
/// else (or with `--refresh-kernel`) the newest one in Debian experimental.
fn find_kernel(args: &VmArgs) -> Result<Kernel> {
    if let Some(path) = &args.kernel {
        if !path.is_file() {
            bail!("--kernel {}: no such file", path.display());
        }
        return Ok(Kernel {
            vmlinuz: path.clone(),
            about: "given with --kernel".into(),
        });
    }
    let cached = newest_kernel_package(cached_kernel_packages());
    let (package, how) = match cached {
        Some(package) if !args.refresh_kernel => (package, "cached"),
        _ => {
            let apt = ExperimentalApt::new()?;
            let names = apt.package_names(KERNEL_PACKAGE_PREFIX)?;
            let package = newest_kernel_package(names).with_context(|| {
                format!(
                    "Debian experimental has no {KERNEL_PACKAGE_PREFIX}X.Y{KERNEL_PACKAGE_SUFFIX} \
                     with X.Y >= {}.{}",
                    MIN_SERIES.0, MIN_SERIES.1
                )
            })?;
            println!("newest kernel package in experimental: {package}");
            if args.refresh_kernel {
                // The cache answers without asking apt: empty it so the
                // newest version is downloaded.
                let dir = kernel_cache_dir().join(&package);
                if dir.exists() {
                    println!("--refresh-kernel: removing {}", dir.display());
                    fs::remove_dir_all(&dir)
                        .with_context(|| format!("removing {}", dir.display()))?;
                }
            }
            (package, "downloaded")
        }
    };
    let unpacked = debian_experimental_package(&package, MIN_VERSION)?;
    let vmlinuz = find_vmlinuz(&unpacked.root)
        .with_context(|| format!("{package} has no usr/lib/modules/*/vmlinuz"))?;
    Ok(Kernel {
        vmlinuz,
        about: format!("{package} {}, {how}", unpacked.version),
    })
}

/// `usr/lib/modules/*/vmlinuz` (or `boot/vmlinuz-*`) in an unpacked package.
fn find_vmlinuz(root: &Path) -> Option<PathBuf> {
    let modules = fs::read_dir(root.join("usr/lib/modules")).ok();
    let boot = fs::read_dir(root.join("boot")).ok();
    let mut found: Vec<PathBuf> = modules
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("vmlinuz"))
        .chain(
            boot.into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("vmlinuz"))
                }),
        )
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

// ---------------------------------------------------------------------------
// Build.

/// A test executable to run in the guest.
struct TestExe {
    /// The package it belongs to.
    package: String,
    /// `package/lib`, `package/test/NAME`, ...: unique, no spaces.
    name: String,
    /// The executable.
    exe: PathBuf,
    /// The package's directory (cargo runs tests there).
    dir: PathBuf,
}

/// What `cargo test --no-run` built.
struct Built {
    /// The test executables.
    tests: Vec<TestExe>,
    /// Other executables of the build (`[[bin]]`s, which integration tests
    /// find through `CARGO_BIN_EXE_*`).
    bins: Vec<PathBuf>,
    /// `--measure-memory`: the daemon and the load generator.
    measure: Option<(PathBuf, PathBuf)>,
}

/// Builds the packages' tests, statically linked, in `vm_dir`.
fn build_tests(args: &VmArgs, packages: &[String], vm_dir: &Path) -> Result<Built> {
    let mut cargo_args = vec!["test", "--no-run"];
    for p in packages {
        cargo_args.extend(["-p", p.as_str()]);
    }
    if args.release {
        cargo_args.push("--release");
    }
    guest_build(&cargo_args, vm_dir)
}

/// `--measure-memory`: builds the daemon and the load generator
/// (`--release`, statically linked) in `vm_dir`.
fn build_measurement(vm_dir: &Path) -> Result<Built> {
    let mut built = guest_build(
        &[
            "build",
            "--release",
            "-p",
            MEASURE_DAEMON.0,
            "--bin",
            MEASURE_DAEMON.1,
            "-p",
            MEASURE_LOAD.0,
            "--example",
            MEASURE_LOAD.1,
        ],
        vm_dir,
    )?;
    let find = |name: &str| {
        built
            .bins
            .iter()
            .find(|b| b.file_name().is_some_and(|n| n == name))
            .cloned()
            .with_context(|| format!("cargo built no executable named {name}"))
    };
    let daemon = find(MEASURE_DAEMON.1)?;
    let load = find(MEASURE_LOAD.1)?;
    println!(
        "daemon: {}
load generator: {}",
        daemon.display(),
        load.display()
    );
    built.bins.clear();
    built.measure = Some((daemon, load));
    Ok(built)
}

/// Runs `cargo CARGO_ARGS` for the guest (statically linked, `--target
/// GUEST_TARGET`, in `vm_dir`) and collects the executables it built.
fn guest_build(cargo_args: &[&str], vm_dir: &Path) -> Result<Built> {
    let mut cmd = cargo();
    cmd.args(cargo_args)
        .arg("--message-format=json-render-diagnostics")
        .args(["--target", GUEST_TARGET])
        .arg("--target-dir")
        .arg(vm_dir)
        .current_dir(crate::workspace_root());
    // With --target, RUSTFLAGS reach only the target's crates: build scripts
    // and proc macros stay dynamically linked host code.
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        rustflags.push(' ');
    }
    rustflags.push_str("-C target-feature=+crt-static");
    cmd.env("RUSTFLAGS", &rustflags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdout(Stdio::piped());
    let line = format!("RUSTFLAGS={} {}", sh_quote(&rustflags), display(&cmd));
    println!("$ {line}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut built = Built {
        tests: Vec::new(),
        bins: Vec::new(),
        measure: None,
    };
    for l in BufReader::new(stdout).lines() {
        let l = l.context("reading cargo's output")?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&l) else {
            continue;
        };
        if let Some(artifact) = parse_artifact(&msg) {
            match artifact {
                Artifact::Test(t) => built.tests.push(t),
                Artifact::Bin(b) => built.bins.push(b),
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    built.tests.sort_by(|a, b| a.name.cmp(&b.name));
    built.tests.dedup_by(|a, b| a.exe == b.exe);
    built.bins.sort();
    built.bins.dedup();
    Ok(built)
}

/// An executable from one of cargo's `compiler-artifact` messages.
enum Artifact {
    /// A test executable (profile.test).
    Test(TestExe),
    /// Another executable.
    Bin(PathBuf),
}

/// The executable a cargo JSON message announces, if any.
fn parse_artifact(msg: &serde_json::Value) -> Option<Artifact> {
    if msg["reason"] != "compiler-artifact" {
        return None;
    }
    let exe = PathBuf::from(msg["executable"].as_str()?);
    if msg["profile"]["test"] != true {
        return Some(Artifact::Bin(exe));
    }
    let manifest = PathBuf::from(msg["manifest_path"].as_str()?);
    let dir = manifest.parent()?.to_path_buf();
    let package = msg["package_id"]
        .as_str()
        .and_then(package_name)
        .or_else(|| dir.file_name()?.to_str().map(str::to_string))?;
    let kind = msg["target"]["kind"][0].as_str().unwrap_or("unknown");
    let target = msg["target"]["name"].as_str().unwrap_or("unknown");
    let name = match kind {
        "lib" | "rlib" | "proc-macro" | "cdylib" | "dylib" | "staticlib" => {
            format!("{package}/lib")
        }
        _ => format!("{package}/{kind}/{target}"),
    };
    Some(Artifact::Test(TestExe {
        package,
        name,
        exe,
        dir,
    }))
}

/// A package's name from a cargo package ID: `path+file:///x/fuse-abi#0.1.0`
/// or `registry+https://...#serde@1.0.0` (or the old `name version (source)`).
fn package_name(id: &str) -> Option<String> {
    if let Some((source, fragment)) = id.rsplit_once('#') {
        if let Some((name, _version)) = fragment.split_once('@') {
            return Some(name.to_string());
        }
        return source
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .map(str::to_string);
    }
    id.split_whitespace().next().map(str::to_string)
}

/// Compiles the FUSE INIT probe with `gcc -static` into `run_dir`.
fn build_probe(run_dir: &Path) -> Result<PathBuf> {
    let source = run_dir.join("vm-probe.c");
    let exe = run_dir.join("vm-probe");
    fs::write(&source, PROBE_SOURCE)?;
    run_cmd(
        Command::new("gcc")
            .args(["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(&source),
    )?;
    Ok(exe)
}

// ---------------------------------------------------------------------------
// Initramfs.

/// Files of the guest's `/etc`.
const ETC_FILES: &[(&str, &str)] = &[
    (
        "passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ),
    ("group", "root:x:0:\nnogroup:x:65534:\n"),
    (
        "nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files\n",
    ),
    ("hosts", "127.0.0.1 localhost\n::1 localhost\n"),
];

/// The plan `/init` sources: environment, then one `run_test` per
/// executable (the probe first).
fn plan(args: &VmArgs, probe: &str, built: &Built) -> Result<String> {
    let mut plan = String::from("# Generated by `cargo xtask test-in-vm`.\n");
    for var in PASSED_ENV {
        if let Ok(value) = std::env::var(var) {
            let _ = writeln!(plan, "export {var}={}", sh_quote(&value));
        }
    }
    if std::env::var_os("RUST_BACKTRACE").is_none() {
        plan.push_str("export RUST_BACKTRACE=1\n");
    }
    let _ = writeln!(plan, "run_test {PROBE_NAME} / {probe}");
    let mut test_args: Vec<String> = Vec::new();
    if !args.filter.is_empty() {
        test_args.push(args.filter.clone());
    }
    if let Some(n) = args.test_threads {
        test_args.push(format!("--test-threads={n}"));
    }
    if args.nocapture {
        test_args.push("--nocapture".into());
    }
    test_args.extend(args.test_args.iter().cloned());
    for t in &built.tests {
        let dir = utf8(&t.dir)?;
        let mut line = format!(
            "run_test {} {} env CARGO_MANIFEST_DIR={} CARGO_PKG_NAME={} {}",
            sh_quote(&t.name),
            sh_quote(dir),
            sh_quote(dir),
            sh_quote(&t.package),
            sh_quote(utf8(&t.exe)?),
        );
        for a in &test_args {
            line.push(' ');
            line.push_str(&sh_quote(a));
        }
        plan.push_str(&line);
        plan.push('\n');
    }
    if let Some((daemon, load)) = &built.measure {
        let bufs: Vec<String> = args.measure_bufs.iter().map(|b| b.to_string()).collect();
        for (var, value) in [
            ("MEM_BUFS", bufs.join(" ")),
            ("MEM_ENTRIES", args.measure_entries.to_string()),
            ("MEM_ROUNDS", args.measure_rounds.to_string()),
            ("MEM_SECONDS", args.measure_seconds.to_string()),
            ("MEM_READERS", args.measure_readers.to_string()),
            ("MEM_FILE_MIB", args.measure_file_mib.to_string()),
        ] {
            let _ = writeln!(plan, "export {var}={}", sh_quote(&value));
        }
        let _ = writeln!(
            plan,
            "run_test {MEASURE_NAME} /tmp /bin/sh {GUEST_MEASURE_SCRIPT} {} {}",
            sh_quote(utf8(daemon)?),
            sh_quote(utf8(load)?)
        );
    }
    Ok(plan)
}

/// Where the measurement script lies in the guest.
const GUEST_MEASURE_SCRIPT: &str = "/xtask/vm-memory.sh";

/// Copies `from` to `staging/<to, made relative>`, executable.
fn install(staging: &Path, from: &Path, to: &Path) -> Result<()> {
    let dest = staging.join(to.strip_prefix("/").unwrap_or(to));
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::copy(from, &dest)
        .with_context(|| format!("copying {} to {}", from.display(), dest.display()))?;
    fs::set_permissions(&dest, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Copies the tree `from` to `to` (files, directories and symlinks), leaving
/// out `target` and hidden directories.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let (src, dest) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if kind.is_dir() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name != "target" && !name.starts_with('.') {
                copy_tree(&src, &dest)?;
            }
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src)?, &dest)
                .with_context(|| format!("linking {}", dest.display()))?;
        } else if kind.is_file() {
            fs::copy(&src, &dest)
                .with_context(|| format!("copying {} to {}", src.display(), dest.display()))?;
        }
    }
    Ok(())
}

/// Writes `target/vm/run/initrd.gz`; removes the staging directory unless
/// `--keep`.
fn build_initramfs(args: &VmArgs, run_dir: &Path, probe: &Path, built: &Built) -> Result<PathBuf> {
    let staging = run_dir.join("initramfs");
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    for dir in [
        "bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "tmp", "root", "run",
        "xtask",
    ] {
        fs::create_dir_all(staging.join(dir))?;
    }
    install(&staging, Path::new(BUSYBOX), Path::new(BUSYBOX))?;
    fs::write(staging.join("init"), INIT_SCRIPT)?;
    fs::set_permissions(staging.join("init"), fs::Permissions::from_mode(0o755))?;
    for (name, text) in ETC_FILES {
        fs::write(staging.join("etc").join(name), text)?;
    }
    let guest_probe = "/xtask/vm-probe";
    install(&staging, probe, Path::new(guest_probe))?;
    for t in &built.tests {
        install(&staging, &t.exe, &t.exe)?;
        fs::create_dir_all(staging.join(t.dir.strip_prefix("/").unwrap_or(&t.dir)))?;
    }
    for b in &built.bins {
        install(&staging, b, b)?;
    }
    if let Some((daemon, load)) = &built.measure {
        install(&staging, daemon, daemon)?;
        install(&staging, load, load)?;
        fs::write(
            staging.join(GUEST_MEASURE_SCRIPT.trim_start_matches('/')),
            MEASURE_SCRIPT,
        )?;
    }
    let packages: BTreeSet<&Path> = built.tests.iter().map(|t| t.dir.as_path()).collect();
    for dir in packages {
        copy_tree(dir, &staging.join(dir.strip_prefix("/").unwrap_or(dir)))?;
    }
    for path in &args.include {
        let path = path
            .canonicalize()
            .with_context(|| format!("--include {}", path.display()))?;
        let dest = staging.join(path.strip_prefix("/").unwrap_or(&path));
        println!("including {}", path.display());
        if path.is_dir() {
            copy_tree(&path, &dest)?;
        } else {
            fs::create_dir_all(dest.parent().expect("a parent"))?;
            fs::copy(&path, &dest)
                .with_context(|| format!("copying {} to {}", path.display(), dest.display()))?;
        }
    }
    let plan = plan(args, guest_probe, built)?;
    fs::write(staging.join("xtask/plan.sh"), &plan)?;
    print!("plan (/xtask/plan.sh):\n{plan}");

    let initrd = run_dir.join("initrd.gz");
    pack(&staging, &initrd)?;
    let size = fs::metadata(&initrd)?.len();
    println!(
        "initramfs: {} ({:.1} MiB)",
        initrd.display(),
        size as f64 / (1024.0 * 1024.0)
    );
    if args.keep {
        println!("kept the staging directory: {}", staging.display());
    } else {
        fs::remove_dir_all(&staging)?;
    }
    Ok(initrd)
}

/// Every path under `dir` (directories before their contents), as `./...`.
fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e
            .file_name()
            .into_string()
            .map_err(|n| anyhow::anyhow!("non-UTF-8 file name {n:?}"))?;
        let path = format!("{rel}/{name}");
        out.push(path.clone());
        if e.file_type()?.is_dir() {
            walk(&e.path(), &path, out)?;
        }
    }
    Ok(())
}

/// `cpio -o -H newc | gzip -1` of `staging` into `out`.
fn pack(staging: &Path, out: &Path) -> Result<()> {
    let mut list = Vec::new();
    walk(staging, ".", &mut list)?;
    let mut cpio_cmd = Command::new("cpio");
    cpio_cmd
        .args([
            "--null",
            "--create",
            "--format=newc",
            "--owner=0:0",
            "--quiet",
        ])
        .current_dir(staging)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    println!(
        "$ (cd {} && cpio ...) | gzip -1 > {}",
        staging.display(),
        out.display()
    );
    let mut cpio = cpio_cmd.spawn().context("cannot start cpio")?;
    let cpio_out = cpio.stdout.take().expect("piped stdout");
    let gzip_status = {
        let mut gzip = Command::new("gzip")
            .args(["-1", "-n", "-c"])
            .stdin(cpio_out)
            .stdout(fs::File::create(out)?)
            .spawn()
            .context("cannot start gzip")?;
        let mut stdin = cpio.stdin.take().expect("piped stdin");
        let names: Vec<u8> = list.iter().flat_map(|p| p.bytes().chain([0])).collect();
        let written = stdin.write_all(&names);
        drop(stdin);
        let status = gzip.wait()?;
        written.context("writing cpio's file list")?;
        status
    };
    let cpio_status = cpio.wait()?;
    if !cpio_status.success() {
        bail!("cpio failed ({cpio_status})");
    }
    if !gzip_status.success() {
        bail!("gzip failed ({gzip_status})");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Boot and run.

/// libtest's counts from its `test result:` line.
#[derive(Default, Clone, Copy)]
struct Counts {
    /// Passed tests.
    passed: u64,
    /// Failed tests.
    failed: u64,
    /// Ignored tests.
    ignored: u64,
    /// Tests the filter left out.
    filtered: u64,
}

impl Counts {
    /// Tests that matched the filter.
    fn matched(&self) -> u64 {
        self.passed + self.failed + self.ignored
    }
}

/// Parses `test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured;
/// 2 filtered out; finished in 0.01s`.
fn parse_test_result(line: &str) -> Option<Counts> {
    let rest = &line[line.find("test result: ")? + "test result: ".len()..];
    let (_, rest) = rest.split_once(". ")?;
    let mut c = Counts::default();
    for part in rest.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse() else { continue };
        match what {
            "passed" => c.passed = n,
            "failed" => c.failed = n,
            "ignored" => c.ignored = n,
            "filtered" => c.filtered = n,
            _ => {}
        }
    }
    Some(c)
}

/// What the FUSE INIT probe reported.
struct Probe {
    /// The line after `XTASK-PROBE: `.
    line: String,
    /// FUSE major version.
    major: u32,
    /// FUSE minor version.
    minor: u32,
    /// INIT offers `FUSE_OVER_IO_URING` (bit 41).
    over_io_uring: bool,
    /// INIT offers `FUSE_HAS_IO_URING_BUFPOOL` (bit 43).
    bufpool: bool,
}

/// Parses `kernel FUSE 7.46, over_io_uring=1, bufpool=1 (...)`.
fn parse_probe(line: &str) -> Option<Probe> {
    let rest = line.strip_prefix("kernel FUSE ")?;
    let (version, rest) = rest.split_once(',')?;
    let (major, minor) = version.trim().split_once('.')?;
    let flag = |name: &str| {
        let at = rest.find(&format!("{name}="))? + name.len() + 1;
        Some(rest[at..].starts_with('1'))
    };
    Some(Probe {
        line: line.to_string(),
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        over_io_uring: flag("over_io_uring")?,
        bufpool: flag("bufpool")?,
    })
}

/// One executable's run in the guest.
struct ExeRun {
    /// Its name in the plan.
    name: String,
    /// Its exit status (`None` if the guest never reported it).
    status: Option<i32>,
    /// libtest's counts, if it printed them.
    counts: Option<Counts>,
    /// Host time between its start and result lines.
    secs: f64,
}

/// What the guest's console showed.
#[derive(Default)]
struct VmRun {
    /// When qemu was started.
    spawned: Option<Instant>,
    /// When `/init` said it was up.
    booted: Option<Instant>,
    /// When `/init` said all was run.
    done: Option<Instant>,
    /// When qemu exited (or was killed).
    ended: Option<Instant>,
    /// `XTASK-VM-BOOTED`'s text.
    booted_line: Option<String>,
    /// The probe's report.
    probe: Option<Probe>,
    /// The probe's failure line, if it printed one.
    probe_failure: Option<String>,
    /// The executables, in the order they ran.
    exes: Vec<ExeRun>,
    /// Start time of the executable running now.
    running: Option<Instant>,
    /// `Some(reason)` if the run was cut short (timeout).
    killed: Option<String>,
    /// qemu's exit status, as text.
    qemu_status: Option<String>,
    /// The first `Kernel panic` line, if the guest kernel panicked.
    panic: Option<String>,
    /// Every console line.
    console: Vec<String>,
    /// The `XTASK-MEMORY:` lines of `--measure-memory` (their text after
    /// the marker).
    memory: Vec<String>,
}

impl VmRun {
    /// Digests one console line.
    fn line(&mut self, line: &str) {
        let now = Instant::now();
        if let Some(rest) = after(line, "XTASK-VM-BOOTED: ") {
            self.booted = Some(now);
            self.booted_line = Some(rest.to_string());
        } else if let Some(rest) = after(line, "XTASK-VM-START: ") {
            self.running = Some(now);
            self.exes.push(ExeRun {
                name: rest.trim().to_string(),
                status: None,
                counts: None,
                secs: 0.0,
            });
        } else if let Some(rest) = after(line, "XTASK-VM-RESULT: ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(status)) = (words.next(), words.next()) {
                let secs = self
                    .running
                    .take()
                    .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
                if let Some(e) = self.exes.iter_mut().rev().find(|e| e.name == name) {
                    e.status = status.parse().ok();
                    e.secs = secs;
                }
            }
        } else if let Some(rest) = after(line, "XTASK-MEMORY: ") {
            self.memory.push(rest.trim().to_string());
        } else if after(line, "XTASK-VM-DONE").is_some() {
            self.done = Some(now);
        } else if let Some(rest) = after(line, "XTASK-PROBE: ") {
            match parse_probe(rest.trim()) {
                Some(p) => self.probe = Some(p),
                None => self.probe_failure = Some(rest.trim().to_string()),
            }
        } else if let Some(rest) = after(line, "Kernel panic - ") {
            self.panic.get_or_insert_with(|| rest.trim().to_string());
        } else if let Some(c) = parse_test_result(line) {
            if let Some(e) = self.exes.last_mut() {
                if e.status.is_none() {
                    e.counts = Some(c);
                }
            }
        }
    }

    /// The name of the executable that started but never reported.
    fn unfinished(&self) -> Option<&str> {
        self.exes
            .iter()
            .rev()
            .find(|e| e.status.is_none())
            .map(|e| e.name.as_str())
    }

    /// Boot, run and shutdown durations.
    fn timings(&self) -> Vec<(&'static str, f64)> {
        let span = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(b.duration_since(a).as_secs_f64()),
            _ => None,
        };
        let mut t = Vec::new();
        if let Some(s) = span(self.spawned, self.booted) {
            t.push(("boot", s));
        }
        if let Some(s) = span(self.booted, self.done.or(self.ended)) {
            t.push(("run", s));
        }
        if let Some(s) = span(self.done, self.ended) {
            t.push(("shutdown", s));
        }
        t
    }
}

/// The text after `marker` in `line`, if `marker` is there.
fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// A console line without `\r`, escape sequences and other control
/// characters (SeaBIOS clears the screen, for one).
fn clean(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\u{1b}' => {
                // ESC [ ... letter, or ESC + one character.
                if let Some(next) = chars.next() {
                    if next == '[' {
                        for c in chars.by_ref() {
                            if c.is_ascii_alphabetic() {
                                break;
                            }
                        }
                    }
                }
            }
            '\t' => out.push(ch),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// qemu, killed when dropped (an error or panic must not leave it running).
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A console event from the reader threads.
enum Event {
    /// One line of qemu's stdout (the guest's serial console) or stderr.
    Line(String),
    /// One of the two streams ended.
    Eof,
}

/// Forwards the lines of `stream` as [`Event`]s.
fn forward(stream: impl Read + Send + 'static, tx: mpsc::Sender<Event>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(Event::Line(clean(&buf))).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

/// Boots the guest and follows its console until it powers off, dies or
/// runs out of time.
fn boot(args: &VmArgs, vmlinuz: &Path, initrd: &Path, log: &Path) -> Result<VmRun> {
    let mut append = BASE_APPEND.to_string();
    if let Some(extra) = &args.extra_append {
        append.push(' ');
        append.push_str(extra);
    }
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-cpu", "max"])
        .args(["-smp", &args.cpus.to_string()])
        .args(["-m", &args.memory.to_string()])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = display(&cmd);
    println!("$ {line}");
    println!(
        "timeout: {} s; console log: {}",
        args.timeout,
        log.display()
    );
    let mut log_file =
        fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut vm = VmRun {
        spawned: Some(Instant::now()),
        ..VmRun::default()
    };
    let mut qemu = Qemu(
        cmd.spawn()
            .with_context(|| format!("cannot start `{line}`"))?,
    );
    let (tx, rx) = mpsc::channel();
    forward(qemu.0.stdout.take().expect("piped stdout"), tx.clone());
    forward(qemu.0.stderr.take().expect("piped stderr"), tx);
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut open_streams = 2;
    while open_streams > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Line(l)) => {
                let _ = writeln!(log_file, "{l}");
                if !args.quiet || l.contains("XTASK-") {
                    println!("vm| {l}");
                }
                vm.line(&l);
                vm.console.push(l);
            }
            Ok(Event::Eof) => open_streams -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let what = match (vm.booted, vm.unfinished()) {
                    (None, _) => "the guest had not finished booting".to_string(),
                    (Some(_), Some(name)) => format!("`{name}` was running"),
                    (Some(_), None) => "between executables".to_string(),
                };
                let msg = format!(
                    "timed out after {} s ({what}); qemu killed (raise --timeout if the run \
                     is just slow)",
                    args.timeout
                );
                println!("test-in-vm: {msg}");
                vm.killed = Some(msg);
                let _ = qemu.0.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = qemu.0.wait()?;
    vm.ended = Some(Instant::now());
    vm.qemu_status = Some(status.to_string());
    Ok(vm)
}

// ---------------------------------------------------------------------------
// Summary.

/// Prints the summary; returns the reasons the run failed (empty: passed).
fn report(
    kernel: &Kernel,
    packages: &[String],
    built: &Built,
    planned: &[String],
    vm: &VmRun,
    args: &VmArgs,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut not_run = 0;
    println!("\n==> test-in-vm summary");
    println!("kernel:  {} ({})", kernel.vmlinuz.display(), kernel.about);
    if let Some(b) = &vm.booted_line {
        println!("guest:   uptime/release/enable_uring: {b}");
    }
    match (&vm.probe, &vm.probe_failure) {
        (Some(p), _) => {
            println!("probe:   {}", p.line);
            let mut missing = Vec::new();
            if (p.major, p.minor) < (7, WANTED_MINOR) {
                missing.push(format!("protocol 7.{WANTED_MINOR}"));
            }
            if !p.over_io_uring {
                missing.push("FUSE_OVER_IO_URING (bit 41)".to_string());
            }
            if !p.bufpool {
                missing.push("FUSE_HAS_IO_URING_BUFPOOL (bit 43)".to_string());
            }
            if !missing.is_empty() {
                problems.push(format!(
                    "the guest kernel's FUSE INIT lacks {} (is it a 7.3+ kernel booted \
                     with fuse.enable_uring=1?)",
                    missing.join(", ")
                ));
            }
        }
        (None, Some(f)) => {
            println!("probe:   {f}");
            problems.push(format!("the FUSE INIT probe failed: {f}"));
        }
        (None, None) => {
            println!("probe:   no report");
            problems.push("the FUSE INIT probe printed nothing".to_string());
        }
    }

    println!(
        "\n{:<52} {:>8} {:>6} {:>6} {:>7} {:>8} {:>7}",
        "executable", "result", "passed", "failed", "ignored", "filtered", "seconds"
    );
    for name in planned {
        let run = vm.exes.iter().find(|e| &e.name == name);
        let (result, counts, secs) = match run {
            None => ("not run".to_string(), None, None),
            Some(e) => match e.status {
                None => ("no exit".to_string(), e.counts, None),
                Some(0) => ("ok".to_string(), e.counts, Some(e.secs)),
                Some(s) if s > 128 => (format!("signal {}", s - 128), e.counts, Some(e.secs)),
                Some(s) => (format!("exit {s}"), e.counts, Some(e.secs)),
            },
        };
        let n =
            |f: fn(&Counts) -> u64| counts.map_or_else(|| "-".to_string(), |c| f(&c).to_string());
        println!(
            "{name:<52} {result:>8} {:>6} {:>6} {:>7} {:>8} {:>7}",
            n(|c| c.passed),
            n(|c| c.failed),
            n(|c| c.ignored),
            n(|c| c.filtered),
            secs.map_or_else(|| "-".to_string(), |s| format!("{s:.1}"))
        );
        match run.map(|e| e.status) {
            Some(Some(0)) => {}
            Some(Some(s)) => problems.push(format!("{name} exited with {s}")),
            Some(None) => problems.push(format!("{name} never reported an exit status")),
            None => not_run += 1,
        }
    }

    // Tests per package, and the loud note for a package whose tests all
    // miss the filter.
    let mut total = Counts::default();
    let mut zero_matched = Vec::new();
    let tested: BTreeSet<&str> = built.tests.iter().map(|t| t.package.as_str()).collect();
    for package in packages.iter().filter(|_| !args.measure_memory) {
        let mut c = Counts::default();
        // Whether every executable of the package printed its counts (one
        // that crashed did not, and then "0 matched" would be a guess).
        let mut all_counted = true;
        for t in built.tests.iter().filter(|t| &t.package == package) {
            match vm
                .exes
                .iter()
                .find(|e| e.name == t.name)
                .and_then(|e| e.counts)
            {
                Some(ec) => {
                    c.passed += ec.passed;
                    c.failed += ec.failed;
                    c.ignored += ec.ignored;
                    c.filtered += ec.filtered;
                }
                None => all_counted = false,
            }
        }
        total.passed += c.passed;
        total.failed += c.failed;
        total.ignored += c.ignored;
        total.filtered += c.filtered;
        if !tested.contains(package.as_str()) {
            zero_matched.push(format!("{package}: no test executables"));
        } else if c.matched() == 0 && all_counted {
            zero_matched.push(format!(
                "{package}: 0 tests matched filter `{}` ({} filtered out)",
                args.filter, c.filtered
            ));
        }
    }
    println!(
        "\ntests: {} passed, {} failed, {} ignored, {} filtered out (filter `{}`)",
        total.passed, total.failed, total.ignored, total.filtered, args.filter
    );
    for z in &zero_matched {
        println!("!!!");
        println!("!!! {z}");
        println!("!!!");
    }

    if let Some(k) = &vm.killed {
        problems.insert(0, k.clone());
    } else if vm.done.is_none() {
        let status = vm.qemu_status.as_deref().unwrap_or("?");
        let why = match &vm.panic {
            Some(p) => format!("kernel panic: {p}"),
            None if vm.booted.is_none() => "the guest never reached /init".to_string(),
            None => "did /init die?".to_string(),
        };
        problems.insert(
            0,
            format!("the guest ended without XTASK-VM-DONE ({why}; qemu: {status})"),
        );
    }
    if not_run > 0 {
        problems.push(format!("{not_run} executable(s) did not run"));
    }
    if args.measure_memory {
        let want = args.measure_rounds * args.measure_bufs.len();
        if vm.memory.len() != want {
            problems.push(format!(
                "the memory measurement reported {} of {want} runs",
                vm.memory.len()
            ));
        }
    }
    problems
}

/// One `XTASK-MEMORY:` line as key/value pairs.
fn memory_fields(line: &str) -> std::collections::BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

/// The median of `values` (the upper one of an even count); 0 if empty.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// `--measure-memory`'s results as Markdown: every run, then the medians
/// per configuration and the pooled/per-entry ratios.
fn memory_table(lines: &[String], args: &VmArgs, kernel: &Kernel) -> String {
    const KIB: f64 = 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;
    let rows: Vec<_> = lines.iter().map(|l| memory_fields(l)).collect();
    let num = |r: &std::collections::BTreeMap<&str, &str>, k: &str| -> f64 {
        r.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    };
    let first = rows.first();
    let get = |k: &str| first.and_then(|r| r.get(k).copied()).unwrap_or("?");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kernel {}; qemu -accel tcg -smp {} -m {}; {} CPUs online (possible {}), \
         {} entries per queue; {} readers ({} per CPU), random {} KiB O_DIRECT reads \
         of a {} MiB file on tmpfs, {} s per run, {} rounds alternating; transparent \
         hugepages: {}.\n",
        kernel.about,
        args.cpus,
        args.memory,
        get("cpus"),
        get("possible"),
        get("entries"),
        get("threads"),
        args.measure_readers,
        get("block").parse::<f64>().map_or(f64::NAN, |b| b / KIB),
        get("file_mib"),
        get("seconds"),
        args.measure_rounds,
        get("thp"),
    );
    let _ = writeln!(
        out,
        "| bufs/queue | round | MiB/s | RSS mounted MiB | RSS peak MiB | RSS steady MiB | VmSize MiB | ring reserved MiB | ring resident at mount MiB | ring resident after MiB | AnonHugePages MiB |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.get("bufs").unwrap_or(&"?"),
            r.get("round").unwrap_or(&"?"),
            num(r, "mib_s"),
            num(r, "rss_mounted_kib") / KIB,
            num(r, "rss_peak_kib") / KIB,
            num(r, "rss_steady_kib") / KIB,
            num(r, "vmsize_kib") / KIB,
            num(r, "reserved") / MIB,
            num(r, "resident_idle") / MIB,
            num(r, "resident") / MIB,
            num(r, "anon_huge_kib") / KIB,
        );
    }
    let _ = writeln!(
        out,
        "\nMedians:\n\n| bufs/queue | MiB/s | RSS peak MiB | RSS steady MiB | VmSize MiB | reserved MiB |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let mut medians = Vec::new();
    for bufs in &args.measure_bufs {
        let of = |k: &str, scale: f64| {
            median(
                rows.iter()
                    .filter(|r| r.get("bufs") == Some(&bufs.to_string().as_str()))
                    .map(|r| num(r, k) / scale)
                    .collect(),
            )
        };
        let m = (
            *bufs,
            of("mib_s", 1.0),
            of("rss_peak_kib", KIB),
            of("rss_steady_kib", KIB),
            of("vmsize_kib", KIB),
            of("reserved", MIB),
        );
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            m.0, m.1, m.2, m.3, m.4, m.5
        );
        medians.push(m);
    }
    if let Some(per_entry) = medians.iter().find(|m| m.0 == 0) {
        out.push('\n');
        for m in medians.iter().filter(|m| m.0 != 0) {
            // Throughput drifts with the host's load: also the median of
            // the ratios within each round (runs next to each other).
            let in_round = |bufs: usize, round: &str| {
                rows.iter()
                    .find(|r| {
                        r.get("bufs") == Some(&bufs.to_string().as_str())
                            && r.get("round") == Some(&round)
                    })
                    .map(|r| num(r, "mib_s"))
            };
            let paired = median(
                rows.iter()
                    .filter(|r| r.get("bufs") == Some(&m.0.to_string().as_str()))
                    .filter_map(|r| {
                        let round = r.get("round")?;
                        Some(num(r, "mib_s") / in_round(0, round)?)
                    })
                    .collect(),
            );
            let _ = writeln!(
                out,
                "{} bufs/queue vs per-entry: RSS steady {:.2}x, RSS peak {:.2}x, reserved {:.2}x, \
                 throughput {:.2}x (median of the per-round ratios {paired:.2}x); \
                 target RSS <= 1/3 of per-entry: {}",
                m.0,
                m.3 / per_entry.3,
                m.2 / per_entry.2,
                m.5 / per_entry.5,
                m.1 / per_entry.1,
                if m.3 * 3.0 <= per_entry.3 && m.2 * 3.0 <= per_entry.2 {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
    out
}

/// Prints the phase timings.
fn print_timings(timings: &[(&str, f64)], total: f64) {
    let mut line = String::from("timings:");
    for (name, secs) in timings {
        let _ = write!(line, " {name} {secs:.1} s,");
    }
    let _ = write!(line, " total {total:.1} s");
    println!("{line}");
}

/// Prints the last console lines (for `--quiet` runs that failed).
fn print_tail(console: &[String]) {
    let from = console.len().saturating_sub(TAIL_LINES);
    println!("---- last {} console lines ----", console.len() - from);
    for l in &console[from..] {
        println!("vm| {l}");
    }
    println!("---- end ----");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_package_names() {
        assert_eq!(kernel_series("linux-binary-7.3-cloud-amd64"), Some((7, 3)));
        assert_eq!(
            kernel_series("linux-binary-7.12-cloud-amd64"),
            Some((7, 12))
        );
        assert_eq!(kernel_series("linux-binary-unsigned-7.3-cloud-amd64"), None);
        assert_eq!(kernel_series("linux-binary-7.3-rt-amd64"), None);
        let names = [
            "linux-binary-6.19-cloud-amd64",
            "linux-binary-7.3-cloud-amd64",
            "linux-binary-7.10-cloud-amd64",
            "linux-binary-7.4-amd64",
        ]
        .map(String::from);
        assert_eq!(
            newest_kernel_package(names).as_deref(),
            Some("linux-binary-7.10-cloud-amd64")
        );
        assert_eq!(
            newest_kernel_package(["linux-binary-7.2-cloud-amd64".to_string()]),
            None
        );
    }

    #[test]
    fn package_ids() {
        assert_eq!(
            package_name("path+file:///work/main/crates/fuse-abi#0.1.0").as_deref(),
            Some("fuse-abi")
        );
        assert_eq!(
            package_name("path+file:///work/main/crates/abi#fuse-abi@0.1.0").as_deref(),
            Some("fuse-abi")
        );
        assert_eq!(
            package_name("fuse-abi 0.1.0 (path+file:///work/main/crates/fuse-abi)").as_deref(),
            Some("fuse-abi")
        );
    }

    #[test]
    fn test_result_line() {
        let c = parse_test_result(
            "test result: FAILED. 12 passed; 1 failed; 3 ignored; 0 measured; 2 filtered out; \
             finished in 0.01s",
        )
        .unwrap();
        assert_eq!((c.passed, c.failed, c.ignored, c.filtered), (12, 1, 3, 2));
        assert!(parse_test_result("running 3 tests").is_none());
    }

    #[test]
    fn probe_line() {
        let p =
            parse_probe("kernel FUSE 7.46, over_io_uring=1, bufpool=0 (flags=0x1, release 7.3.0)")
                .unwrap();
        assert_eq!(
            (p.major, p.minor, p.over_io_uring, p.bufpool),
            (7, 46, true, false)
        );
        assert!(parse_probe("FAILED: open /dev/fuse").is_none());
    }

    #[test]
    fn console_lines() {
        let mut vm = VmRun::default();
        for l in [
            "XTASK-VM-BOOTED: 1.5 7.3 enable_uring=Y",
            "XTASK-VM-START: a/lib",
            "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 5 filtered out",
            "partial outputXTASK-VM-RESULT: a/lib 0",
            "XTASK-VM-START: b/lib",
        ] {
            vm.line(l);
        }
        assert_eq!(vm.exes[0].status, Some(0));
        assert_eq!(vm.exes[0].counts.unwrap().filtered, 5);
        assert_eq!(vm.unfinished(), Some("b/lib"));
        assert_eq!(clean(b"\x1b[2J\x1bcSeaBIOS\r\n"), "SeaBIOS");
    }

    #[test]
    fn memory_lines() {
        let mut vm = VmRun::default();
        vm.line("vm| XTASK-MEMORY: cpus=2 bufs=0 round=1 mib_s=100.0 rss_peak_kib=37888 rss_steady_kib=37888 reserved=33570816");
        vm.line("XTASK-MEMORY: cpus=2 bufs=4 round=1 mib_s=98.0 rss_peak_kib=10240 rss_steady_kib=10240 reserved=8404992");
        assert_eq!(vm.memory.len(), 2);
        assert_eq!(memory_fields(&vm.memory[1])["reserved"], "8404992");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            vm: VmArgs,
        }
        use clap::Parser as _;
        let args = Cli::try_parse_from(["vm", "--measure-memory", "--measure-rounds", "1"])
            .unwrap()
            .vm;
        let kernel = Kernel {
            vmlinuz: PathBuf::from("vmlinuz"),
            about: "test".into(),
        };
        let table = memory_table(&vm.memory, &args, &kernel);
        assert!(table.contains("| 4 | 98.0 | 10.0 | 10.0 |"), "{table}");
        assert!(table.contains("reserved 0.25x"), "{table}");
        assert!(table.contains("per-round ratios 0.98x"), "{table}");
        assert!(table.contains("1/3 of per-entry: met"), "{table}");
        // The measurement's settings need the flag.
        assert!(Cli::try_parse_from(["vm", "--measure-rounds", "1"]).is_err());
        assert!(!Cli::try_parse_from(["vm"]).unwrap().vm.measure_memory);
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
