//! `cargo xtask bench`: every transport and runtime of our daemon side by
//! side with native and with peers, and a verdict.
//!
//! A run
//!
//! 1. builds what it needs (release): `fuse-bench-daemon` and
//!    `fuse-bench-meta` from `crates/bench`, libfuse's `passthrough_ll` with
//!    gcc, libfuse master's `passthrough_hp` with meson and ninja
//!    (`LIBFUSE_SRC`, by default the vendored tarball), fuser's
//!    `passthrough` example with `cargo install --example` (peers that
//!    can't be built are reported as missing);
//! 2. lays out the data files in `target/bench/work/backing` once;
//! 3. probes every selected target (mounts it, checks that the mount shows
//!    the backing directory, unmounts): modes whose code doesn't exist yet
//!    are reported as "not available yet", with the daemon's reason;
//! 4. runs the matrix: for each round, every target in turn (the order
//!    rotates from round to round) runs every workload of
//!    `benches/workloads.toml`;
//! 5. writes `target/bench/<timestamp>/`: `results.json` (every sample, the
//!    machine, the settings), `report.md` (medians, min–max, ratios to
//!    native and to libfuse, the goals of `benches/goals.toml` met or
//!    missed), `charts/<workload>.svg`, and the raw outputs and logs;
//! 6. with `--compare BASE.json`, reports regressions beyond the thresholds
//!    of `benches/thresholds.toml` and exits non-zero if there are any.
//!
//! Mounts are never left behind: each target runs behind a guard that
//! stops the daemon (signalling it only while it is our un-reaped child),
//! unmounts (lazily as the last resort), and a run starts by sweeping
//! mounts an interrupted run left under `target/bench`.

mod compare;
mod config;
mod docs;
mod machine;
mod matrix;
mod procstat;
mod report;
mod results;
pub(crate) mod stats;
mod targets;
mod workload;

use anyhow::{bail, Context, Result};
use compare::CompareBy;
use config::{Peers, Settings, Thresholds, Workload, WorkloadFile};
use docs::{update_docs, write_outputs};
use matrix::Bench;
use results::{RunReport, SCHEMA};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use targets::{Binaries, MountSettings, Paths, TargetKind, TargetSpec};
use workload::{plan_workloads, prepare_backing, reset_meta_dir};

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A short smoke run of every workload on native, our default mode
    /// (dev/sync) and libfuse: 1 round, 1 s each, 500 files (CI runs it).
    #[arg(long)]
    quick: bool,
    /// Targets to run, comma-separated, `*` as a wildcard: native,
    /// ours:<dev|uring>/<sync|tokio|uring>[+pool], ours:<dev|uring>/sync+kpt,
    /// ours:uring/uring+onering, ours:uring/sync+unpinned,
    /// ours:uring/sync+nice0, ours:uring/uring+onering+nice0 (ring threads at nice 0),
    /// ours:<dev|uring>/sync+list1 (a listing's lookups on one thread),
    /// libfuse, libfuse-hp:<dev|uring|kpt>, fuser, pfs:<dev|uring>[+open]
    /// (passthroughfs confined at its defaults, and `+open` not confined).
    /// Default: all of them (with --quick: native,ours:dev/sync,libfuse).
    #[arg(long, value_name = "LIST")]
    targets: Option<String>,
    /// Workloads to run, comma-separated, `*` as a wildcard (names as in
    /// benches/workloads.toml). Default: all.
    #[arg(long, value_name = "LIST")]
    workloads: Option<String>,
    /// Rounds (every target runs every workload once per round).
    #[arg(long, value_name = "N")]
    repeats: Option<u32>,
    /// Measured seconds per time-based workload.
    #[arg(long, value_name = "SECS")]
    runtime: Option<f64>,
    /// Seconds run first and discarded.
    #[arg(long, value_name = "SECS")]
    ramp: Option<f64>,
    /// Files in the metadata directory (create, readdir, stat, delete).
    #[arg(long, value_name = "N")]
    nrfiles: Option<usize>,
    /// Cache policy of every FUSE target that has one.
    #[arg(long, value_name = "POLICY", default_value = "auto",
          value_parser = ["never", "auto", "always"])]
    cache: String,
    /// Turn on the writeback cache on every FUSE target that has it.
    #[arg(long)]
    writeback: bool,
    /// Serve extended attributes on every FUSE target that can choose
    /// (ours: --no-xattr when off; libfuse: -o xattr / -o no_xattr).
    #[arg(long, value_name = "on|off", default_value = "on",
          value_parser = ["on", "off"])]
    xattr: String,
    /// Extra argument for fuse-bench-daemon (repeatable), e.g.
    /// `--daemon-arg=--threads --daemon-arg=4`.
    #[arg(long = "daemon-arg", value_name = "ARG", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    /// Compare with an earlier run's results.json; exits non-zero on a
    /// regression beyond benches/thresholds.toml.
    #[arg(long, value_name = "BASE.json")]
    compare: Option<PathBuf>,
    /// What --compare compares: the medians, or the medians relative to
    /// native in the same run.
    #[arg(long, value_enum, default_value_t = CompareBy::Absolute)]
    compare_by: CompareBy,
    /// Don't run anything: take this run's results.json (re-rendering its
    /// report with the current goals), e.g. to --compare two runs.
    #[arg(long, value_name = "RESULTS.json")]
    results: Option<PathBuf>,
    /// Write into this directory instead of `target/bench/<timestamp>`.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Use the binaries already built instead of building.
    #[arg(long)]
    no_build: bool,
    /// Put the report's tables into docs/benchmarks.md, between its
    /// `<!-- bench-report:begin -->` and `<!-- bench-report:end -->` lines.
    #[arg(long)]
    update_docs: bool,
}

/// Set by SIGINT/SIGTERM: the run stops after the current step.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn install_interrupt_handler() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe { libc::signal(sig, on_interrupt as *const () as libc::sighandler_t) };
    }
}

fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to fill in and then pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The settings of this run: the file's (or its quick ones), then flags.
fn resolve_settings(args: &BenchArgs, file: &WorkloadFile) -> Result<Settings> {
    let mut s = if args.quick {
        file.quick.clone()
    } else {
        file.settings.clone()
    };
    if let Some(v) = args.repeats {
        s.repeats = v;
    }
    if let Some(v) = args.runtime {
        s.runtime = v;
    }
    if let Some(v) = args.ramp {
        s.ramp = v;
    }
    if let Some(v) = args.nrfiles {
        s.nrfiles = v;
    }
    s.validate().context("bad settings")?;
    Ok(s)
}

fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

/// Compares `report` with `base_path` and prints (and saves) the table;
/// fails if anything regressed.
fn run_compare(
    report: &RunReport,
    base_path: &Path,
    by: CompareBy,
    benches: &Path,
    out_dir: &Path,
) -> Result<()> {
    let text = std::fs::read_to_string(base_path)
        .with_context(|| format!("reading {}", base_path.display()))?;
    let mut base: RunReport =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", base_path.display()))?;
    base.summarize();
    let th = Thresholds::load(benches)?;
    let c = compare::compare(&base, report, &th, by);
    let md = compare::markdown(&c, report, &base_path.display().to_string(), by);
    println!("\n{md}");
    let _ = std::fs::write(out_dir.join("compare.md"), &md);
    let n = c.regressions().count();
    if n > 0 {
        bail!(
            "{n} regression{} against {}",
            if n == 1 { "" } else { "s" },
            base_path.display()
        );
    }
    Ok(())
}

/// Re-renders an existing run and compares it if asked.
fn from_results(args: &BenchArgs, path: &Path, benches: &Path) -> Result<()> {
    let text = crate::text::read_text(path)?;
    let mut report: RunReport =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if report.schema != SCHEMA {
        bail!(
            "{} has schema {}, expected {SCHEMA}",
            path.display(),
            report.schema
        );
    }
    report.summarize();
    report.evaluate_goals(&config::load_goals(benches)?);
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| path.parent().unwrap_or(Path::new(".")).to_path_buf());
    std::fs::create_dir_all(&dir)?;
    write_outputs(&report, &dir, args.out.is_some())?;
    println!(
        "bench: report rendered into {}",
        dir.join("report.md").display()
    );
    if args.update_docs {
        update_docs(&report, &crate::workspace_root().join("docs/benchmarks.md"))?;
    }
    if let Some(base) = &args.compare {
        run_compare(&report, base, args.compare_by, benches, &dir)?;
    }
    Ok(())
}

/// Takes `dir/.lock` for the run: two runs would share the mountpoint (and
/// the second's sweep would unmount the first's mount).
fn lock_bench_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(dir)?;
    let path = dir.join(".lock");
    let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    // SAFETY: flock on a descriptor we own; released when the file closes.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "another `cargo xtask bench` is running (it holds {})",
            path.display()
        );
    }
    Ok(f)
}

/// Turns FUSE over io_uring on if the module has it off (root only).
fn enable_fuse_uring() -> Option<String> {
    const SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";
    match std::fs::read_to_string(SWITCH) {
        Ok(v) if v.trim() == "N" => match std::fs::write(SWITCH, "Y") {
            Ok(()) => Some(format!("turned FUSE over io_uring on ({SWITCH})")),
            Err(e) => Some(format!("cannot turn FUSE over io_uring on ({SWITCH}): {e}")),
        },
        _ => None,
    }
}

/// Runs the benchmark matrix.
pub fn run(args: &BenchArgs) -> Result<()> {
    let root = crate::workspace_root();
    let target_dir = crate::test::target_dir();
    let paths = Paths::new(&root, &target_dir);
    if let Some(path) = &args.results {
        return from_results(args, path, &paths.benches);
    }
    let started_at = Instant::now();
    let started_unix = machine::now_unix();
    let load_start = machine::load_average();
    let file = WorkloadFile::load(&paths.benches)?;
    let goals = config::load_goals(&paths.benches)?;
    let peers = Peers::load(&paths.benches)?;
    let thresholds_ok = Thresholds::load(&paths.benches)?;
    drop(thresholds_ok);
    let settings = resolve_settings(args, &file)?;

    // What to run.
    let specs = choose_targets(args)?;
    let steps = choose_steps(args, &file)?;

    let _lock = prepare_host(&target_dir)?;

    let stamp = machine::stamp_utc(started_unix);
    // Absolute: fio runs in benches/fio and writes its output there.
    let out_dir = match &args.out {
        Some(dir) => std::path::absolute(dir)
            .with_context(|| format!("--out {}: making it absolute", dir.display()))?,
        None => target_dir.join("bench").join(&stamp),
    };
    for sub in ["raw", "logs", "charts"] {
        std::fs::create_dir_all(out_dir.join(sub))
            .with_context(|| format!("creating {}", out_dir.join(sub).display()))?;
    }

    // Build.
    let bins = build_binaries(args, &paths, &target_dir, &specs, &peers)?;

    // Data.
    let token = format!(
        "{:x}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        std::process::id()
    );
    prepare_backing(&paths, &settings, &token)?;
    reset_meta_dir(&paths)?;

    let bench = Bench {
        paths,
        bins,
        settings,
        steps,
        ms: MountSettings {
            cache: args.cache.clone(),
            writeback: args.writeback,
            xattr: args.xattr == "on",
            daemon_args: args.daemon_args.clone(),
        },
        token,
        out_dir,
    };
    let mut report = RunReport {
        schema: SCHEMA,
        command: command_line(),
        started: machine::iso_utc(started_unix),
        finished: None,
        duration_secs: 0.0,
        quick: args.quick,
        complete: false,
        machine: machine::Machine::detect(&root),
        load_average: None,
        settings: bench.settings.clone(),
        cache: args.cache.clone(),
        writeback: args.writeback,
        xattr: args.xattr == "on",
        targets: Vec::new(),
        workloads: bench
            .steps
            .iter()
            .filter(|(_, measured)| *measured)
            .map(|(w, _)| w.clone())
            .collect(),
        samples: Vec::new(),
        summary: Vec::new(),
        goals: Vec::new(),
    };

    // Probe every target.
    let runnable = bench.probe(&specs, &mut report);
    if runnable.is_empty() {
        bail!("no target can run");
    }

    // The matrix.
    bench.matrix(&runnable, &mut report);
    let _ = reset_meta_dir(&bench.paths);

    report.finished = Some(machine::iso_utc(machine::now_unix()));
    report.duration_secs = started_at.elapsed().as_secs_f64();
    report.load_average = load_start.zip(machine::load_average());
    report.summarize();
    report.evaluate_goals(&goals);
    report.complete = !interrupted() && !report::has_own_failures(&report);
    write_outputs(&report, &bench.out_dir, true)?;
    conclude(&bench, args, &report)
}

/// The targets `--targets` selects.
fn choose_targets(args: &BenchArgs) -> Result<Vec<TargetSpec>> {
    let all_targets = targets::all_targets();
    let target_names: Vec<&str> = all_targets.iter().map(|t| t.name.as_str()).collect();
    let default_targets = if args.quick {
        "native,ours:dev/sync,libfuse"
    } else {
        "*"
    };
    let chosen = config::select(
        &target_names,
        args.targets.as_deref().unwrap_or(default_targets),
    )
    .context("--targets")?;
    Ok(all_targets
        .iter()
        .filter(|t| chosen.contains(&t.name.as_str()))
        .cloned()
        .collect())
}

/// The workloads `--workloads` selects, with the setup steps they need
/// (see [`plan_workloads`]).
fn choose_steps(args: &BenchArgs, file: &WorkloadFile) -> Result<Vec<(Workload, bool)>> {
    let workload_names: Vec<&str> = file.workloads.iter().map(|w| w.name.as_str()).collect();
    let selected = config::select(&workload_names, args.workloads.as_deref().unwrap_or("*"))
        .context("--workloads")?;
    Ok(plan_workloads(&file.workloads, &selected))
}

/// Checks that the host can run the matrix (root, fio), takes the run's
/// lock (held while the returned file is open) and readies the host: the
/// interrupt handler, the open-file limit, FUSE over io_uring, and no
/// mounts left by an earlier run.
fn prepare_host(target_dir: &Path) -> Result<std::fs::File> {
    if !crate::test::is_root() {
        bail!("cargo xtask bench needs root: it mounts FUSE file systems and drops caches");
    }
    if Command::new("fio")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
    {
        bail!("fio is not installed (apt-get install fio; `cargo xtask test` installs it)");
    }
    let lock = lock_bench_dir(&target_dir.join("bench"))?;
    install_interrupt_handler();
    raise_nofile_limit();
    if let Some(note) = enable_fuse_uring() {
        println!("bench: {note}");
    }
    for line in targets::sweep_stale_mounts(&target_dir.join("bench")) {
        println!("bench: stale mount from an earlier run: {line}");
    }
    Ok(lock)
}

/// The binaries of the run: ours (built unless `--no-build`), and the
/// peers among `specs` (built; one that can't be has the reason).
fn build_binaries(
    args: &BenchArgs,
    paths: &Paths,
    target_dir: &Path,
    specs: &[TargetSpec],
    peers: &Peers,
) -> Result<Binaries> {
    let (daemon, meta) = if args.no_build {
        let release = target_dir.join("release");
        (
            release.join("fuse-bench-daemon"),
            release.join("fuse-bench-meta"),
        )
    } else {
        println!("bench: building fuse-bench-daemon and fuse-bench-meta (release)");
        targets::build_ours(paths)?
    };
    for b in [&daemon, &meta] {
        if !b.is_file() {
            bail!("{} is missing (build it, or drop --no-build)", b.display());
        }
    }
    let wants = |k: &TargetKind| specs.iter().any(|s| &s.kind == k);
    let mut bins = Binaries {
        daemon,
        meta,
        libfuse: None,
        libfuse_hp: None,
        fuser: None,
        passthroughfs: None,
    };
    if wants(&TargetKind::Libfuse) {
        println!("bench: building libfuse's passthrough_ll (gcc)");
        bins.libfuse = Some(targets::build_libfuse(paths, peers));
    }
    if specs
        .iter()
        .any(|s| matches!(s.kind, TargetKind::LibfuseHp(_)))
    {
        println!(
            "bench: building libfuse master's passthrough_hp (meson + ninja; {} or the vendored \
             tarball; only when missing)",
            peers.libfuse_hp.source_var
        );
        bins.libfuse_hp = Some(targets::build_libfuse_hp(paths, peers));
    }
    if wants(&TargetKind::Fuser) {
        println!(
            "bench: building fuser {}'s {} example (cargo install, from the crate registry)",
            peers.fuser.version, peers.fuser.example
        );
        bins.fuser = Some(targets::build_fuser(paths, peers));
    }
    if specs
        .iter()
        .any(|s| matches!(s.kind, TargetKind::Passthroughfs { .. }))
    {
        let bin = target_dir.join("release").join("passthroughfs");
        bins.passthroughfs = Some(if args.no_build {
            if bin.is_file() {
                Ok(bin)
            } else {
                Err(format!(
                    "{} is missing (build it, or drop --no-build)",
                    bin.display()
                ))
            }
        } else {
            println!("bench: building passthroughfs (release)");
            targets::build_passthroughfs(paths)
        });
    }
    Ok(bins)
}

/// Prints the tables and where the run's files are, updates the docs if
/// asked, and gives the verdict: an error if the run was interrupted,
/// if a workload failed on native or on our daemon, or (`--compare`) on
/// a regression.
fn conclude(bench: &Bench, args: &BenchArgs, report: &RunReport) -> Result<()> {
    let out_dir = &bench.out_dir;
    println!("\n{}", report::header(report));
    println!("{}", report::results_table(report));
    let daemon = report::daemon_table(report);
    if !daemon.is_empty() {
        println!("Daemon memory, threads and CPU per operation:\n\n{daemon}");
    }
    println!("{}", report::goals_table(report));
    println!("bench: results in {}", out_dir.display());
    println!("bench: report   {}", out_dir.join("report.md").display());

    if interrupted() {
        bail!("interrupted; partial results in {}", out_dir.display());
    }
    if args.update_docs {
        update_docs(report, &bench.paths.root.join("docs/benchmarks.md"))?;
    }
    if report::has_own_failures(report) {
        bail!(
            "some workloads failed on native or on our daemon (see {})",
            out_dir.join("report.md").display()
        );
    }
    if let Some(base) = &args.compare {
        run_compare(report, base, args.compare_by, &bench.paths.benches, out_dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_flags_override_the_file() {
        let file = WorkloadFile::load(&crate::workspace_root().join("benches")).unwrap();
        let args = BenchArgs {
            quick: true,
            targets: None,
            workloads: None,
            repeats: Some(2),
            runtime: None,
            ramp: Some(0.5),
            nrfiles: None,
            cache: "auto".into(),
            writeback: false,
            daemon_args: Vec::new(),
            compare: None,
            compare_by: CompareBy::Absolute,
            results: None,
            out: None,
            no_build: false,
            xattr: "on".into(),
            update_docs: false,
        };
        let s = resolve_settings(&args, &file).unwrap();
        assert_eq!(s.repeats, 2);
        assert_eq!(s.ramp, 0.5);
        assert_eq!(s.runtime, file.quick.runtime);
        let bad = BenchArgs {
            repeats: Some(0),
            ..args
        };
        assert!(resolve_settings(&bad, &file).is_err());
    }

    #[test]
    fn file_names() {
        assert_eq!(file_safe("ours:dev/sync+pool"), "ours_dev_sync_pool");
        assert_eq!(file_safe("randread-4k.x"), "randread-4k.x");
    }
}
