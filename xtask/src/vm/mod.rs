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

use crate::test::{
    cargo, debian_experimental_package, display, ensure_apt_packages, run_cmd, target_dir,
    wait_for_exit, ExperimentalApt, LibtestCounts,
};
use crate::text::sh_quote;
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

mod boot;
mod build;
mod initramfs;
mod kernel;
mod virtiofs;

use boot::*;
use build::*;
use initramfs::*;
use kernel::*;

/// Arguments of `cargo xtask test-in-vm`.
#[derive(clap::Args)]
pub struct VmArgs {
    /// Package whose tests run in the VM (repeatable)
    /// [default: fusewire-transport-uring].
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
    /// per entry; N: registered pools of N, Nu: unregistered pools of N,
    /// Nz: zero copy on registered pools of N; all but Nz without zero
    /// copy), comma-separated.
    #[arg(long, value_name = "N,N", value_delimiter = ',', default_values = ["0", "4"], value_parser = parse_bufs, requires = "measure_memory")]
    measure_bufs: Vec<String>,
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
    /// --measure-memory: what the load threads do: random reads, or
    /// sequential reads or writes of a share of the file each.
    #[arg(
        long,
        value_name = "PATTERN",
        default_value = "rand-read",
        value_parser = ["rand-read", "seq-read", "seq-write"],
        requires = "measure_memory"
    )]
    measure_pattern: String,
    /// --measure-memory: bytes per read or write (a multiple of 4096).
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 1 << 20,
        value_parser = parse_block,
        requires = "measure_memory"
    )]
    measure_block: usize,
    /// Instead of the tests, serve a directory to the guest over virtio-fs
    /// (`passthroughfs --vhost-user` on the host, `vhost-user-fs-pci` in
    /// qemu) and run file operations and a data-integrity check on its
    /// `-t virtiofs` mount, then reconnect and kill the daemon under load
    /// (docs/virtiofs.md).
    #[arg(long, conflicts_with = "measure_memory")]
    virtiofs: bool,
    /// Instead of the tests, benchmark virtio-fs: the same guest and
    /// workloads against `passthroughfs --vhost-user` and virtiofsd,
    /// alternating; prints the ratios (docs/benchmarks.md).
    #[arg(long, conflicts_with_all = ["measure_memory", "virtiofs"])]
    virtiofs_bench: bool,
    /// --virtiofs and --virtiofs-bench: an argument for our daemon
    /// (repeatable), e.g. `--daemon-arg=--runtime=tokio`.
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    daemon_arg: Vec<String>,
    /// --virtiofs-bench: rounds (each runs every workload once on each
    /// daemon's mount).
    #[arg(long, value_name = "N", default_value_t = 5)]
    bench_rounds: usize,
    /// --virtiofs-bench: seconds per workload and mount.
    #[arg(long, value_name = "SECS", default_value_t = 2)]
    bench_secs: u32,
    /// --virtiofs-bench: a workload to run (repeatable; default: all of
    /// them), e.g. `--bench-workload rand-write-4k`.
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(virtiofs::WORKLOADS))]
    bench_workload: Vec<String>,
    /// --virtiofs-bench: the `--cache` mode both daemons get: `auto` (what
    /// users run: the guest caches attributes, entries and listings for a
    /// second) or `never` (every operation reaches a daemon, so the
    /// figures compare the daemons rather than the guest's cache).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["never", "auto", "always"])]
    bench_cache: String,
    /// --virtiofs-bench: the virtiofsd to compare with (default: one
    /// installed under target/tools, or `cargo install virtiofsd` there).
    #[arg(long, value_name = "PATH")]
    virtiofsd: Option<PathBuf>,
}

/// A `--measure-block` value: a positive multiple of 4096 (O_DIRECT).
fn parse_block(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 && n % 4096 == 0 => Ok(n),
        _ => Err(format!("{v:?}: bytes, a positive multiple of 4096")),
    }
}

/// The package tested when no `--package` is given.
const DEFAULT_PACKAGE: &str = "fusewire-transport-uring";

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

/// The kernel command line before `--extra-append`. `tsc=reliable`: on a
/// busy host the emulated TSC looks unstable to the clocksource watchdog,
/// which then switches to the HPET at run time; the code patching that
/// comes with it once crashed the guest under TCG (an `int3` oops in
/// `ktime_get_update_offsets_now`, "Fatal exception in interrupt").
const BASE_APPEND: &str = "console=ttyS0 fuse.enable_uring=1 panic=-1 quiet tsc=reliable";

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
const INIT_SCRIPT: &str = include_str!("../../vm-init.sh");
/// The FUSE INIT probe's C source.
const PROBE_SOURCE: &str = include_str!("../../vm-probe.c");
/// The probe's name in the plan and the summary.
const PROBE_NAME: &str = "fuse-init-probe";

/// The memory measurement's guest script (`--measure-memory`).
const MEASURE_SCRIPT: &str = include_str!("../../vm-memory.sh");
/// The measurement's name in the plan and the summary.
const MEASURE_NAME: &str = "memory-measurement";
/// What `--measure-memory` builds: the daemon, and the load generator.
const MEASURE_DAEMON: (&str, &str) = ("fusewire-passthroughfs", "passthroughfs");
/// See [`MEASURE_DAEMON`].
const MEASURE_LOAD: (&str, &str) = ("fusewire-transport-uring", "direct_read_load");

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
    crate::exit_on_error("error: test-in-vm: ", run_vm(args))
}

/// [`run`], returning its errors.
fn run_vm(args: &VmArgs) -> Result<()> {
    if args.virtiofs {
        return virtiofs::run_virtiofs(args);
    }
    if args.virtiofs_bench {
        return virtiofs::run_virtiofs_bench(args);
    }
    let started = Instant::now();
    let mut timings: Vec<(&str, f64)> = Vec::new();
    let vm_dir = target_dir().join("vm");
    let run_dir = vm_dir.join("run");
    let (_lock, kernel) = start_run(args, &run_dir, &run_dir.join(".lock"), &mut timings)?;

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

/// The start of a run: creates `run_dir`, takes the [`lock`] `lock_path`
/// (held while the returned file is open), installs the host's packages,
/// and finds the kernel (the run's first timed phase, into `timings`).
fn start_run(
    args: &VmArgs,
    run_dir: &Path,
    lock_path: &Path,
    timings: &mut Vec<(&str, f64)>,
) -> Result<(fs::File, Kernel)> {
    fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let lock = lock(lock_path)?;
    ensure_apt_packages(HOST_PACKAGES)?;
    println!("\n--> kernel");
    let t = Instant::now();
    let kernel = find_kernel(args)?;
    println!("kernel: {} ({})", kernel.vmlinuz.display(), kernel.about);
    timings.push(("kernel", t.elapsed().as_secs_f64()));
    Ok((lock, kernel))
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

/// A path as UTF-8 (the plan is a shell script), or an error.
fn utf8(path: &Path) -> Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
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
        let n = |f: fn(&LibtestCounts) -> u64| {
            counts.map_or_else(|| "-".to_string(), |c| f(&c).to_string())
        };
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
    let mut total = LibtestCounts::default();
    let mut zero_matched = Vec::new();
    let tested: BTreeSet<&str> = built.tests.iter().map(|t| t.package.as_str()).collect();
    for package in packages.iter().filter(|_| !args.measure_memory) {
        let mut c = LibtestCounts::default();
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

/// A `--measure-bufs` value: `N`, `Nu` (unregistered pools, N > 0) or
/// `Nz` (zero copy, N > 0).
fn parse_bufs(v: &str) -> Result<String, String> {
    let (n, suffix) = match v.strip_suffix(['u', 'z']) {
        Some(n) => (n, v.chars().last()),
        None => (v, None),
    };
    match n.parse::<usize>() {
        Ok(0) if suffix == Some('u') => {
            Err("0u: per-entry buffers have no pool to leave unregistered".into())
        }
        Ok(0) if suffix == Some('z') => Err("0z: zero copy needs pools".into()),
        Ok(_) => Ok(v.to_string()),
        Err(_) => Err(format!(
            "{v:?}: buffers per queue, a number, with a trailing u for unregistered pools \
             or z for zero copy"
        )),
    }
}

/// One `XTASK-MEMORY:` line as key/value pairs.
fn memory_fields(line: &str) -> std::collections::BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

/// The median of `values` as the bench reports it (the mean of the two
/// middle ones of an even count; NaNs left out); 0 if there is none.
pub(crate) fn median(values: Vec<f64>) -> f64 {
    crate::bench::stats::spread(&values).map_or(0.0, |s| s.median)
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
         {} entries per queue; {} threads ({} per CPU), {} of {} KiB, O_DIRECT, \
         on a {} MiB file on tmpfs, {} s per run, {} rounds alternating; transparent \
         hugepages: {}.\n",
        kernel.about,
        args.cpus,
        args.memory,
        get("cpus"),
        get("possible"),
        get("entries"),
        get("threads"),
        args.measure_readers,
        get("pattern"),
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
        "\nMedians (daemon CPU: user and system time during the load, per GiB read):\n\n| bufs/queue | MiB/s | daemon CPU ms/GiB | RSS peak MiB | RSS steady MiB | VmSize MiB | reserved MiB |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    let seconds: f64 = get("seconds").parse().unwrap_or(f64::NAN);
    // A run's daemon CPU per GiB read.
    let cpu_per_gib = |r: &std::collections::BTreeMap<&str, &str>| {
        num(r, "cpu_ms") / (num(r, "mib_s") * seconds / 1024.0)
    };
    struct Medians<'a> {
        bufs: &'a str,
        mib_s: f64,
        cpu: f64,
        peak: f64,
        steady: f64,
        vmsize: f64,
        reserved: f64,
    }
    let mut medians = Vec::new();
    for bufs in &args.measure_bufs {
        let runs = || {
            rows.iter()
                .filter(|r| r.get("bufs") == Some(&bufs.as_str()))
        };
        let of = |k: &str, scale: f64| median(runs().map(|r| num(r, k) / scale).collect());
        let m = Medians {
            bufs,
            mib_s: of("mib_s", 1.0),
            cpu: median(runs().map(cpu_per_gib).collect()),
            peak: of("rss_peak_kib", KIB),
            steady: of("rss_steady_kib", KIB),
            vmsize: of("vmsize_kib", KIB),
            reserved: of("reserved", MIB),
        };
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
            m.bufs, m.mib_s, m.cpu, m.peak, m.steady, m.vmsize, m.reserved
        );
        medians.push(m);
    }
    // Throughput and CPU drift with the host's load: also the median of
    // the ratios within each round (runs next to each other).
    let paired =
        |a: &str, b: &str, value: &dyn Fn(&std::collections::BTreeMap<&str, &str>) -> f64| {
            median(
                rows.iter()
                    .filter(|r| r.get("bufs") == Some(&a))
                    .filter_map(|r| {
                        let round = r.get("round")?;
                        let other = rows
                            .iter()
                            .find(|o| o.get("bufs") == Some(&b) && o.get("round") == Some(round))?;
                        Some(value(r) / value(other))
                    })
                    .collect(),
            )
        };
    if let Some(per_entry) = medians.iter().find(|m| m.bufs == "0") {
        out.push('\n');
        for m in medians.iter().filter(|m| m.bufs != "0") {
            let _ = writeln!(
                out,
                "{} bufs/queue vs per-entry: RSS steady {:.2}x, RSS peak {:.2}x, reserved {:.2}x, \
                 throughput {:.2}x (median of the per-round ratios {:.2}x), daemon CPU per GiB \
                 {:.2}x (per round {:.2}x); target RSS <= 1/3 of per-entry: {}",
                m.bufs,
                m.steady / per_entry.steady,
                m.peak / per_entry.peak,
                m.reserved / per_entry.reserved,
                m.mib_s / per_entry.mib_s,
                paired(m.bufs, "0", &|r| num(r, "mib_s")),
                m.cpu / per_entry.cpu,
                paired(m.bufs, "0", &cpu_per_gib),
                if m.steady * 3.0 <= per_entry.steady && m.peak * 3.0 <= per_entry.peak {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
    // Zero copy against registered pools (copying) of the same size.
    for m in &medians {
        let Some(n) = m.bufs.strip_suffix('z') else {
            continue;
        };
        let Some(r) = medians.iter().find(|o| o.bufs == n) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{} zero copy vs {n} registered pools: throughput {:.2}x (per round {:.2}x), daemon \
             CPU per GiB {:.2}x (per round {:.2}x)",
            m.bufs,
            m.mib_s / r.mib_s,
            paired(m.bufs, n, &|r| num(r, "mib_s")),
            m.cpu / r.cpu,
            paired(m.bufs, n, &cpu_per_gib),
        );
    }
    // Registered against unregistered pools of the same size.
    for m in &medians {
        let unregistered = format!("{}u", m.bufs);
        let Some(u) = medians.iter().find(|o| o.bufs == unregistered) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{} registered vs unregistered: throughput {:.2}x (per round {:.2}x), daemon CPU per \
             GiB {:.2}x (per round {:.2}x)",
            m.bufs,
            m.mib_s / u.mib_s,
            paired(m.bufs, &unregistered, &|r| num(r, "mib_s")),
            m.cpu / u.cpu,
            paired(m.bufs, &unregistered, &cpu_per_gib),
        );
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
        vm.line("vm| XTASK-MEMORY: cpus=2 bufs=0 seconds=10 cpu_ms=2000 round=1 mib_s=100.0 rss_peak_kib=37888 rss_steady_kib=37888 reserved=33570816");
        vm.line("XTASK-MEMORY: cpus=2 bufs=4 seconds=10 cpu_ms=1000 round=1 mib_s=98.0 rss_peak_kib=10240 rss_steady_kib=10240 reserved=8404992");
        vm.line("XTASK-MEMORY: cpus=2 bufs=4u seconds=10 cpu_ms=1500 round=1 mib_s=98.0 rss_peak_kib=10240 rss_steady_kib=10240 reserved=8404992");
        assert_eq!(vm.memory.len(), 3);
        assert_eq!(memory_fields(&vm.memory[1])["reserved"], "8404992");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
        assert_eq!(median(vec![1.0, 4.0, 2.0, 3.0]), 2.5);
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            vm: VmArgs,
        }
        use clap::Parser as _;
        let args = Cli::try_parse_from([
            "vm",
            "--measure-memory",
            "--measure-rounds",
            "1",
            "--measure-bufs",
            "0,4,4u",
        ])
        .unwrap()
        .vm;
        let kernel = Kernel {
            vmlinuz: PathBuf::from("vmlinuz"),
            about: "test".into(),
        };
        let table = memory_table(&vm.memory, &args, &kernel);
        // 2000 ms for 1000 MiB: 2048 ms per GiB; 1000 ms for 980 MiB: 1045.
        assert!(table.contains("| 0 | 100.0 | 2048 | 37.0 |"), "{table}");
        assert!(
            table.contains("| 4 | 98.0 | 1045 | 10.0 | 10.0 |"),
            "{table}"
        );
        assert!(table.contains("reserved 0.25x"), "{table}");
        assert!(table.contains("per-round ratios 0.98x"), "{table}");
        assert!(table.contains("1/3 of per-entry: met"), "{table}");
        assert!(
            table.contains("4 registered vs unregistered: throughput 1.00x (per round 1.00x), daemon CPU per GiB 0.67x"),
            "{table}"
        );
        assert!(Cli::try_parse_from(["vm", "--measure-memory", "--measure-bufs", "0u"]).is_err());
        assert!(Cli::try_parse_from(["vm", "--measure-memory", "--measure-bufs", "x"]).is_err());
        // The measurement's settings need the flag.
        assert!(Cli::try_parse_from(["vm", "--measure-rounds", "1"]).is_err());
        assert!(!Cli::try_parse_from(["vm"]).unwrap().vm.measure_memory);
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
