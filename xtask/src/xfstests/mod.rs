//! `cargo xtask xfstests`: xfstests' `generic` group, `fsstress` and `fsx`
//! against passthroughfs mounts, in each of the daemon's modes.
//!
//! A run
//!
//! 1. installs the Debian packages xfstests needs to build and run (only
//!    the missing ones), its test users (`fsgqa`, `fsgqa2`, `123456-fsgqa`),
//!    and switches FUSE over io_uring on;
//! 2. builds xfstests under the work directory (`target/xfstests/`, see
//!    [`Layout`]) from `XFSTESTS_SRC` (a tarball or a source tree), by
//!    default `<workspace>/../shared/vendor/xfstests-63a29724.tar.gz`, else
//!    a clone of upstream at that commit; the build is cached ([`build`]);
//! 3. installs the mount helper `/sbin/mount.fuse.passthroughfs-xfstests`, through
//!    which xfstests' `FSTYP=fuse` mounts start `target/release/passthroughfs`
//!    ([`helper`]);
//! 4. per mode ([`Mode`]: `/dev/fuse`, `--uring`, `--runtime uring
//!    --thread-pool`) runs xfstests' `check` on the chosen tests with fresh
//!    backing directories on the host's file system, each test under a
//!    time limit ([`check`]), and/or `fsstress` and `fsx` ([`stress`]);
//! 5. unmounts whatever is left under the work directory's mount points and
//!    stops any daemon the helper started, also when a run fails.
//!
//! What runs: by default the curated lists (`xtask/xfstests/curated.txt`,
//! what `cargo xtask test`'s `xfstests` step runs) and the stress runs (its
//! `stress` step); `--tests` a chosen set; `--full` the whole group, with a
//! pass/fail/notrun table. Tests left out of the curated lists because they
//! fail are in `xtask/xfstests/excluded.txt` with their reasons ([`lists`]).

mod build;
mod check;
mod helper;
mod lists;
mod stress;

use crate::test::{ensure_apt_packages, is_root, target_dir};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `cargo xtask xfstests`.
#[derive(clap::Args)]
pub struct XfstestsArgs {
    /// Run the whole generic group (hours per mode) and print the
    /// pass/fail/notrun table (also written under the work directory).
    #[arg(long, conflicts_with_all = ["tests", "stress"])]
    full: bool,
    /// A mode to run (repeatable): dev (/dev/fuse, default options), uring
    /// (--uring --no-passthrough), uring-pool (--runtime uring
    /// --thread-pool --no-passthrough --max-nodes 1000), uring-one-ring
    /// (--uring --runtime uring --uring-one-ring --no-passthrough; only when
    /// named, with the uring list). Default: dev, uring and uring-pool.
    #[arg(long, value_enum, value_name = "MODE")]
    mode: Vec<Mode>,
    /// Run these tests instead of the curated lists (comma-separated), e.g.
    /// `--tests generic/001,generic/013`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    tests: Vec<String>,
    /// Only fsstress and fsx (seed: `XFSTESTS_STRESS_SEED`, else random).
    #[arg(long, conflicts_with = "no_stress")]
    stress: bool,
    /// Leave out fsstress and fsx (run only the curated lists).
    #[arg(long)]
    no_stress: bool,
    /// Run each list this many times (to see whether a list is reliable);
    /// with it, a failed test is not run once more.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: u32,
    /// Seconds a test may take before it is killed and counted as hung
    /// (default: 600, with --full 1800).
    #[arg(long, value_name = "SECS")]
    test_timeout: Option<u64>,
}

/// How passthroughfs serves a mount.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Mode {
    /// `/dev/fuse` with worker threads (the daemon's defaults: kernel
    /// passthrough on, so READ and WRITE of most files never reach the
    /// daemon).
    Dev,
    /// FUSE over io_uring (`--uring --no-passthrough`: the daemon serves
    /// every READ and WRITE, so the suites cover its data path).
    Uring,
    /// `/dev/fuse` served by io_uring runtimes with the blocking thread pool
    /// (`--runtime uring --thread-pool --no-passthrough`: READ and WRITE
    /// through the runtimes and the pool), and a node table of at most 1000
    /// (`--max-nodes 1000`): the daemon offers nodes to the kernel to prune
    /// all the time under the suites' churn.
    UringPool,
    /// FUSE over io_uring in async mode on the io_uring runtime with one
    /// ring per queue (`--uring --runtime uring --uring-one-ring
    /// --no-passthrough`): the FUSE commands and the backing files' IO on
    /// one ring. Run only when named (`--mode uring-one-ring`), with the
    /// curated list of `uring`.
    UringOneRing,
}

impl Mode {
    /// Every mode, in the order runs go through them.
    pub const ALL: [Mode; 3] = [Mode::Dev, Mode::Uring, Mode::UringPool];

    /// The name used on the command line and in the lists.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Dev => "dev",
            Mode::Uring => "uring",
            Mode::UringPool => "uring-pool",
            Mode::UringOneRing => "uring-one-ring",
        }
    }

    /// The mode named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Mount options that select the mode (understood by the mount helper).
    pub fn mount_options(self) -> &'static str {
        match self {
            Mode::Dev => "",
            Mode::Uring => ",uring,no_passthrough",
            Mode::UringPool => ",runtime=uring,thread_pool,no_passthrough,max_nodes=1000",
            Mode::UringOneRing => ",uring,runtime=uring,uring_one_ring,no_passthrough",
        }
    }

    /// What the daemon says about its transport in its "passthroughfs
    /// serving" log line when it serves in this mode.
    pub fn serving_marker(self) -> &'static str {
        match self {
            Mode::Dev => "transport=/dev/fuse, ",
            Mode::Uring => "transport=io_uring",
            Mode::UringPool => "a task on a uring runtime",
            Mode::UringOneRing => "whose ring carries the FUSE commands",
        }
    }

    /// The daemon's flags for this mode, for the docs and logs.
    pub fn daemon_flags(self) -> &'static str {
        match self {
            Mode::Dev => "(default options)",
            Mode::Uring => "--uring --no-passthrough",
            Mode::UringPool => "--runtime uring --thread-pool --no-passthrough --max-nodes 1000",
            Mode::UringOneRing => "--uring --runtime uring --uring-one-ring --no-passthrough",
        }
    }
}

/// Where a run keeps things: everything lives under [`Layout::work`].
pub struct Layout {
    /// The workspace root.
    pub root: PathBuf,
    /// `target/xfstests`, or, when another user could not reach it (a
    /// checkout under a private home directory: xfstests runs programs as
    /// `fsgqa` inside its tree and its mounts), `/var/tmp/xfstests-<hash>`.
    pub work: PathBuf,
    /// The built xfstests tree (`check` runs here).
    pub tree: PathBuf,
    /// The passthroughfs binary the mount helper starts: a copy of
    /// `target/release/passthroughfs` (or `XTASK_PASSTHROUGHFS`) taken when
    /// the run starts, so that a build during a long run can't change the
    /// daemon under it.
    pub daemon: PathBuf,
    /// What [`Layout::daemon`] is copied from.
    pub daemon_source: PathBuf,
    /// The helper's state: `daemons/PID` files, `logs/`, `helper.log`.
    pub state: PathBuf,
    /// Parent of every mount point a run uses.
    pub mnt: PathBuf,
    /// Parent of the backing directories.
    pub backing: PathBuf,
    /// Eight hex digits naming this work directory, in the mounts' sources
    /// (`xfstests-test-TAG`): xfstests finds and unmounts its mounts by
    /// source, so two runs on one machine must not share a name.
    pub tag: String,
}

impl Layout {
    /// The layout for the workspace at `root`.
    pub fn new(root: &Path) -> Result<Self> {
        let target = target_dir();
        let preferred = target.join("xfstests");
        let work = if reachable_by_others(&target) {
            preferred
        } else {
            let work = PathBuf::from(format!("/var/tmp/xfstests-{:08x}", fnv1a(root)));
            println!(
                "note: {} is not reachable by other users (xfstests runs programs as fsgqa \
                 there): working in {}",
                target.display(),
                work.display()
            );
            work
        };
        fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        fs::set_permissions(&work, fs::Permissions::from_mode(0o755))?;
        let tag = format!("{:08x}", fnv1a(&work.canonicalize()?));
        let daemon_source = std::env::var_os("XTASK_PASSTHROUGHFS")
            .map(PathBuf::from)
            .unwrap_or_else(|| target.join("release/passthroughfs"));
        Ok(Layout {
            root: root.to_path_buf(),
            tree: work.join("build/xfstests"),
            daemon: work.join("bin/passthroughfs"),
            daemon_source,
            state: work.join("state"),
            mnt: work.join("mnt"),
            backing: work.join("backing"),
            work,
            tag,
        })
    }

    /// The environment that points the machine's one mount helper at this
    /// run's daemon and state directory (see the helper script's header).
    pub fn helper_env(&self) -> [(&'static str, &Path); 2] {
        [
            ("PASSTHROUGHFS_XFSTESTS_DAEMON", &self.daemon),
            ("PASSTHROUGHFS_XFSTESTS_STATE", &self.state),
        ]
    }

    /// Programs put first in `check`'s PATH (a `df` that only looks at
    /// this run's mounts).
    pub fn path_dir(&self) -> PathBuf {
        self.work.join("path")
    }

    /// Where results of a mode go (`check`'s RESULT_BASE, the daemons' logs).
    pub fn results(&self, mode: Mode) -> PathBuf {
        self.work.join("results").join(mode.name())
    }
}

/// The 32-bit FNV-1a hash of a path's bytes: a short, stable name for it.
fn fnv1a(path: &Path) -> u32 {
    let hash = path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    hash as u32
}

/// Whether every directory from `/` down to `dir` lets other users through
/// (the execute bit for others).
fn reachable_by_others(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// Debian packages xfstests' build needs.
const BUILD_PACKAGES: &[&str] = &[
    "make",
    "gcc",
    "autoconf",
    "automake",
    "libtool",
    "libtool-bin",
    "pkg-config",
    "xfslibs-dev",
    "uuid-dev",
    "libacl1-dev",
    "libattr1-dev",
    "libaio-dev",
    "liburing-dev",
    "libcap-dev",
    "libgdbm-dev",
    "libgdbm-compat-dev",
];

/// Debian packages xfstests' `check` and tests call (xfs_io above all).
const RUN_PACKAGES: &[&str] = &[
    "xfsprogs",
    "acl",
    "attr",
    "bc",
    "gawk",
    "psmisc",
    "python3",
    "uuid-runtime",
    "e2fsprogs",
    "fio",
    "diffutils",
    "util-linux",
    "procps",
];

/// Everything a run needs before it starts (as root): packages, users, the
/// io_uring switch, the xfstests build, the daemon, the mount helper.
fn prepare(root: &Path) -> Result<Layout> {
    if !is_root() {
        bail!("xfstests needs root (it mounts, installs packages and adds test users)");
    }
    let layout = Layout::new(root)?;
    let mut packages = BUILD_PACKAGES.to_vec();
    packages.extend_from_slice(RUN_PACKAGES);
    ensure_apt_packages(&packages)?;
    build::ensure_users()?;
    crate::test::enable_fuse_uring()?;
    build::ensure_built(&layout)?;
    ensure_daemon(&layout)?;
    helper::install(&layout)?;
    Ok(layout)
}

/// Builds `target/release/passthroughfs` (cargo's own up-to-date check makes
/// this quick when nothing changed), unless `XTASK_PASSTHROUGHFS` names
/// another daemon.
fn ensure_daemon(layout: &Layout) -> Result<()> {
    if std::env::var_os("XTASK_PASSTHROUGHFS").is_none() {
        crate::test::run_cmd(
            crate::test::cargo()
                .args(["build", "--release", "-p", "fusewire-passthroughfs"])
                .current_dir(&layout.root),
        )?;
    }
    if !layout.daemon_source.is_file() {
        bail!("{} does not exist", layout.daemon_source.display());
    }
    let bin = layout
        .daemon
        .parent()
        .expect("bin/passthroughfs has a parent");
    fs::create_dir_all(bin)?;
    // Copied beside, then renamed over: a daemon still running keeps its
    // (unlinked) old binary.
    let tmp = bin.join("passthroughfs.new");
    fs::copy(&layout.daemon_source, &tmp)
        .with_context(|| format!("copying {}", layout.daemon_source.display()))?;
    fs::rename(&tmp, &layout.daemon)?;
    println!(
        "daemon: {} (a copy of {})",
        layout.daemon.display(),
        layout.daemon_source.display()
    );
    Ok(())
}

/// The command: curated lists and stress runs (default), `--tests`,
/// `--full` or `--stress`, in each selected mode.
pub fn run(args: &XfstestsArgs) -> Result<()> {
    if let Err(e) = run_selected(args) {
        // Printed here rather than returned: an `anyhow` error returned from
        // main would add a backtrace when RUST_BACKTRACE is set.
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

/// [`run`] proper.
fn run_selected(args: &XfstestsArgs) -> Result<()> {
    let root = crate::workspace_root();
    let layout = prepare(&root)?;
    let modes: Vec<Mode> = if args.mode.is_empty() {
        Mode::ALL.to_vec()
    } else {
        args.mode.clone()
    };
    let timeout =
        Duration::from_secs(
            args.test_timeout
                .unwrap_or(if args.full { 1800 } else { 600 }),
        );
    let mut failures = Vec::new();
    let started = Instant::now();
    if args.full {
        let all = lists::whole_group(&layout.tree)?;
        let excluded = lists::Excluded::load(&root)?;
        let mut tables = Vec::new();
        for &mode in &modes {
            // `danger:` tests harm the machine (they fill its disk): never run.
            let (skipped, run): (Vec<String>, Vec<String>) = all
                .iter()
                .cloned()
                .partition(|t| excluded.is_dangerous(t, mode));
            let mut results = check::run_tests(&layout, mode, &run, timeout)?;
            for t in skipped {
                let why = excluded.reason(&t, mode).unwrap_or_default().to_string();
                println!("xfstests {}: {t} not run: {why}", mode.name());
                results.tests.push((t, check::Status::Skipped(why)));
            }
            results.tests.sort_by(|a, b| a.0.cmp(&b.0));
            tables.push((mode, results));
        }
        let report = check::full_report(&tables, &excluded);
        print!("{report}");
        let path = layout.work.join("results/full-report.md");
        fs::write(&path, &report)?;
        println!("report: {}", path.display());
        for (mode, results) in &tables {
            let unexplained = check::unexplained_failures(results, *mode, &excluded);
            if !unexplained.is_empty() {
                failures.push(format!(
                    "{}: {} unexplained failure(s): {}",
                    mode.name(),
                    unexplained.len(),
                    unexplained.join(" ")
                ));
            }
        }
    } else if !args.tests.is_empty() {
        let excluded = lists::Excluded::load(&root)?;
        for t in &args.tests {
            lists::check_name(t)?;
            if modes.iter().any(|&m| excluded.is_dangerous(t, m)) {
                bail!(
                    "{t} is not run here: {}",
                    excluded.reason(t, modes[0]).unwrap_or_default()
                );
            }
        }
        for _ in 0..args.repeat {
            for &mode in &modes {
                let results = check::run_tests(&layout, mode, &args.tests, timeout)?;
                print!("{}", check::summary(mode, &results));
                if let Err(e) = check::require_passed(&layout, mode, &results) {
                    failures.push(format!("{e:#}"));
                }
            }
        }
    } else {
        if !args.stress {
            for _ in 0..args.repeat {
                if let Err(e) = curated_modes(&layout, &modes, timeout, args.repeat == 1) {
                    failures.push(format!("{e:#}"));
                }
            }
        }
        if args.stress || !args.no_stress {
            for &mode in &modes {
                if let Err(e) = stress::run(&layout, mode) {
                    failures.push(format!("{}: {e:#}", mode.name()));
                }
            }
        }
    }
    println!(
        "xfstests: {} mode(s) in {:.0} s",
        modes.len(),
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        let mut msg = String::new();
        for f in &failures {
            let _ = writeln!(msg, "  {f}");
        }
        bail!("xfstests failed:\n{msg}");
    }
    Ok(())
}

/// Runs the curated list of each mode; fails naming the failed tests and
/// their `.out.bad`/`.full` files. With `retry`, a failed test is run once
/// more, alone, first: one that passes then counts as passed and is named
/// `FLAKY` in the log.
fn curated_modes(layout: &Layout, modes: &[Mode], timeout: Duration, retry: bool) -> Result<()> {
    let curated = lists::Curated::load(&layout.root)?;
    let excluded = lists::Excluded::load(&layout.root)?;
    curated.check_against(&excluded)?;
    let mut errors = Vec::new();
    for &mode in modes {
        let tests = curated.tests(mode);
        println!(
            "\n==> xfstests {} ({}): {} curated tests",
            mode.name(),
            mode.daemon_flags(),
            tests.len()
        );
        let t = Instant::now();
        let mut results = check::run_tests(layout, mode, &tests, timeout)?;
        if retry {
            check::retry_failed(layout, mode, &mut results, timeout)?;
        }
        print!("{}", check::summary(mode, &results));
        println!(
            "xfstests {}: {:.0} s",
            mode.name(),
            t.elapsed().as_secs_f64()
        );
        if let Err(e) = check::require_passed(layout, mode, &results) {
            errors.push(format!("{e:#}"));
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(())
}

/// The `xfstests` step of `cargo xtask test`: the curated list of every
/// mode; fails if any curated test fails (after one retry alone).
pub fn test_step(root: &Path) -> Result<()> {
    let layout = prepare(root)?;
    // Curated tests take seconds; a hung one is killed after 2 minutes.
    curated_modes(&layout, &Mode::ALL, Duration::from_secs(120), true)
}

/// The `stress` step of `cargo xtask test`: fsstress and fsx in every mode.
pub fn stress_step(root: &Path) -> Result<()> {
    let layout = prepare(root)?;
    let mut errors = Vec::new();
    for mode in Mode::ALL {
        if let Err(e) = stress::run(&layout, mode) {
            errors.push(format!("{}: {e:#}", mode.name()));
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(())
}
