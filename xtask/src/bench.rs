//! `cargo xtask bench`: every transport and runtime of our daemon side by
//! side with native and with peers, and a verdict.
//!
//! A run
//!
//! 1. builds what it needs (release): `fuse-bench-daemon` and
//!    `fuse-bench-meta` from `crates/bench`, libfuse's `passthrough_ll` with
//!    gcc, fuser's `passthrough` example with `cargo install --example`
//!    (peers that can't be built are reported as missing);
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
mod machine;
mod report;
mod results;
mod stats;
mod targets;

use anyhow::{bail, Context, Result};
use compare::CompareBy;
use config::{Metric, Peers, Settings, Thresholds, Workload, WorkloadFile, WorkloadKind};
use indicatif::{ProgressBar, ProgressStyle};
use results::{RunReport, Sample, TargetInfo, TargetStatus, SCHEMA};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use targets::{Binaries, MountSettings, Paths, StartError, TargetKind, TargetSpec};

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A short smoke run of every workload on native, our default mode
    /// (dev/sync) and libfuse: 1 round, 1 s each, 500 files (CI runs it).
    #[arg(long)]
    quick: bool,
    /// Targets to run, comma-separated, `*` as a wildcard: native,
    /// ours:<dev|uring>/<sync|tokio|uring>[+pool], libfuse, fuser.
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

/// The workloads to run, with the unmeasured ones the metadata workloads
/// need: `(workload, measured)`, in run order.
fn plan_workloads(all: &[Workload], selected: &[&str]) -> Vec<(Workload, bool)> {
    let meta_selected = all
        .iter()
        .any(|w| w.is_meta() && selected.contains(&w.name.as_str()));
    let create_selected = selected.contains(&"create");
    all.iter()
        .filter_map(|w| {
            let measured = selected.contains(&w.name.as_str());
            let needed = meta_selected && !create_selected && w.meta.as_deref() == Some("create");
            (measured || needed).then(|| (w.clone(), measured))
        })
        .collect()
}

/// Estimated seconds of one workload, for the progress bar's ETA.
fn estimate(w: &Workload, s: &Settings) -> f64 {
    match (w.kind, w.meta.as_deref()) {
        (WorkloadKind::Fio, _) if w.drop_caches => s.runtime + 2.5,
        (WorkloadKind::Fio, _) => s.ramp + s.runtime + 0.6,
        (WorkloadKind::Meta, Some("create" | "delete")) => s.nrfiles as f64 / 2500.0 + 0.2,
        (WorkloadKind::Meta, _) => s.ramp + s.runtime + 0.2,
    }
}

/// Seconds to start and stop a target, for the ETA.
const START_STOP_SECS: f64 = 1.5;

/// Fills `path` with `size` bytes of pseudo-random data unless it already
/// has that size.
fn ensure_file(path: &Path, size: u64) -> Result<bool> {
    if path.metadata().is_ok_and(|m| m.len() == size) {
        return Ok(false);
    }
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut buf = vec![0u64; 1 << 17];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ size;
    let mut left = size;
    while left > 0 {
        for w in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *w = x;
        }
        // SAFETY: a u64 buffer viewed as its bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, buf.len() * 8) };
        let n = left.min(bytes.len() as u64) as usize;
        f.write_all(&bytes[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all()
        .with_context(|| format!("syncing {}", path.display()))?;
    Ok(true)
}

/// The data directory's name: one per size, so that a quick run and a full
/// run don't rewrite each other's files.
fn data_dir_name(s: &Settings) -> String {
    format!("data-{}m-{}m", s.file_size >> 20, s.cold_size >> 20)
}

/// Lays out the backing directory: data files and the marker.
fn prepare_backing(paths: &Paths, s: &Settings, token: &str) -> Result<()> {
    let data = paths.backing.join(data_dir_name(s));
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let mut made = Vec::new();
    if ensure_file(&data.join("bench.data"), s.file_size)? {
        made.push("bench.data");
    }
    for name in ["cold.0", "cold.1", "cold.2", "cold.3"] {
        if ensure_file(&data.join(name), s.cold_size)? {
            made.push(name);
        }
    }
    if !made.is_empty() {
        println!("bench: laid out {} in {}", made.join(", "), data.display());
    }
    std::fs::write(paths.backing.join(targets::MARKER), token)
        .context("writing the marker file")?;
    Ok(())
}

/// Empties the metadata directory (through the backing directory, while
/// nothing is mounted).
fn reset_meta_dir(paths: &Paths) -> Result<()> {
    let meta = paths.backing.join("meta");
    if meta.exists() {
        std::fs::remove_dir_all(&meta).with_context(|| format!("removing {}", meta.display()))?;
    }
    std::fs::create_dir_all(&meta).with_context(|| format!("creating {}", meta.display()))
}

fn drop_caches() -> Result<(), String> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("dropping caches (needs root): {e}"))
}

/// What one workload run measured.
struct Measured {
    summary: stats::FioSummary,
    wall: f64,
}

/// Runs a child to completion within `limit`, killing it (it is our
/// un-reaped child) if it overruns.
fn run_with_timeout(cmd: &mut Command, limit: Duration, log: &Path) -> Result<(), String> {
    let file =
        std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting {:?}: {e}", cmd.get_program()))?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                return Err(format!(
                    "{:?} failed ({status}): {}",
                    cmd.get_program(),
                    tail[tail.len().saturating_sub(3)..].join(" / ")
                ));
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                // Still our un-reaped child: its PID is ours to signal.
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} did not finish within {} s",
                    cmd.get_program(),
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for {:?}: {e}", cmd.get_program())),
        }
    }
}

/// Runs one workload in `root` (a mountpoint or the backing directory).
fn run_workload(
    w: &Workload,
    root: &Path,
    s: &Settings,
    paths: &Paths,
    bins: &Binaries,
    raw: &Path,
) -> Result<Measured, String> {
    if w.drop_caches {
        drop_caches()?;
    }
    let start = Instant::now();
    let log = raw.with_extension("log");
    let _ = std::fs::remove_file(raw);
    match w.kind {
        WorkloadKind::Fio => {
            let job = paths.benches.join(w.job.as_deref().unwrap_or_default());
            let limit = Duration::from_secs_f64(s.ramp + s.runtime + 120.0);
            run_with_timeout(
                Command::new("fio")
                    .arg("--output-format=json")
                    .arg(format!("--output={}", raw.display()))
                    .arg(&job)
                    .current_dir(job.parent().unwrap_or(&paths.benches))
                    .env("BENCH_DIR", root.join(data_dir_name(s)))
                    .env("BENCH_RUNTIME", format!("{}", s.runtime))
                    .env("BENCH_RAMP", format!("{}", s.ramp))
                    .env("BENCH_FILE_SIZE", s.file_size.to_string())
                    .env("BENCH_CACHED_SIZE", s.cached_size.to_string())
                    .env("BENCH_COLD_SIZE", s.cold_size.to_string()),
                limit,
                &log,
            )?;
        }
        WorkloadKind::Meta => {
            let limit = Duration::from_secs_f64(s.ramp + s.runtime + 600.0);
            run_with_timeout(
                Command::new(&bins.meta)
                    .arg(w.meta.as_deref().unwrap_or_default())
                    .arg("--dir")
                    .arg(root.join("meta"))
                    .arg("--files")
                    .arg(s.nrfiles.to_string())
                    .arg("--ramp")
                    .arg(s.ramp.to_string())
                    .arg("--runtime")
                    .arg(s.runtime.to_string())
                    .arg("--output")
                    .arg(raw),
                limit,
                &log,
            )?;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let text =
        std::fs::read_to_string(raw).map_err(|e| format!("reading {}: {e}", raw.display()))?;
    let summary = stats::parse_fio(&text).map_err(|e| format!("{e:#}"))?;
    Ok(Measured { summary, wall })
}

/// The number a workload reports from a run.
fn metric_value(metric: Metric, s: &stats::FioSummary) -> f64 {
    match metric {
        Metric::Iops => s.iops,
        Metric::Bw => s.bw_bytes / (1 << 20) as f64,
    }
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

/// Writes `results.json`, `report.md` and the charts into `dir`.
fn write_outputs(report: &RunReport, dir: &Path, json: bool) -> Result<()> {
    if json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(dir.join("results.json"), text + "\n").context("writing results.json")?;
    }
    std::fs::write(dir.join("report.md"), report::markdown(report)).context("writing report.md")?;
    let charts = dir.join("charts");
    std::fs::create_dir_all(&charts)?;
    for w in &report.workloads {
        if let Some(svg) = report::svg(report, &w.name) {
            std::fs::write(charts.join(format!("{}.svg", file_safe(&w.name))), svg)?;
        }
    }
    Ok(())
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
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
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

/// The markers of the generated part of docs/benchmarks.md.
const DOCS_BEGIN: &str = "<!-- bench-report:begin -->";
/// See [`DOCS_BEGIN`].
const DOCS_END: &str = "<!-- bench-report:end -->";

/// `text` with the part between the markers replaced by `generated`.
fn splice_docs(text: &str, generated: &str) -> Result<String> {
    let begin = text
        .find(DOCS_BEGIN)
        .with_context(|| format!("no {DOCS_BEGIN} line"))?;
    let end = text
        .find(DOCS_END)
        .with_context(|| format!("no {DOCS_END} line"))?;
    if end < begin {
        bail!("{DOCS_END} comes before {DOCS_BEGIN}");
    }
    Ok(format!(
        "{}{DOCS_BEGIN}\n{}\n{}",
        &text[..begin],
        generated.trim_end(),
        &text[end..]
    ))
}

/// Replaces the generated part of docs/benchmarks.md with this run's report.
fn update_docs(report: &RunReport, docs: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(docs).with_context(|| format!("reading {}", docs.display()))?;
    let generated = report::docs_section(report);
    let new = splice_docs(&text, &generated).with_context(|| format!("in {}", docs.display()))?;
    std::fs::write(docs, new).with_context(|| format!("writing {}", docs.display()))?;
    println!("bench: updated {}", docs.display());
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
    let specs: Vec<TargetSpec> = all_targets
        .iter()
        .filter(|t| chosen.contains(&t.name.as_str()))
        .cloned()
        .collect();
    let workload_names: Vec<&str> = file.workloads.iter().map(|w| w.name.as_str()).collect();
    let selected = config::select(&workload_names, args.workloads.as_deref().unwrap_or("*"))
        .context("--workloads")?;
    let steps = plan_workloads(&file.workloads, &selected);

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
    let _lock = lock_bench_dir(&target_dir.join("bench"))?;
    install_interrupt_handler();
    raise_nofile_limit();
    if let Some(note) = enable_fuse_uring() {
        println!("bench: {note}");
    }
    for line in targets::sweep_stale_mounts(&target_dir.join("bench")) {
        println!("bench: stale mount from an earlier run: {line}");
    }

    let stamp = machine::stamp_utc(started_unix);
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| target_dir.join("bench").join(&stamp));
    for sub in ["raw", "logs", "charts"] {
        std::fs::create_dir_all(out_dir.join(sub))
            .with_context(|| format!("creating {}", out_dir.join(sub).display()))?;
    }

    // Build.
    let (daemon, meta) = if args.no_build {
        let release = target_dir.join("release");
        (
            release.join("fuse-bench-daemon"),
            release.join("fuse-bench-meta"),
        )
    } else {
        println!("bench: building fuse-bench-daemon and fuse-bench-meta (release)");
        targets::build_ours(&paths)?
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
        fuser: None,
    };
    if wants(&TargetKind::Libfuse) {
        println!("bench: building libfuse's passthrough_ll (gcc)");
        bins.libfuse = Some(targets::build_libfuse(&paths, &peers));
    }
    if wants(&TargetKind::Fuser) {
        println!(
            "bench: building fuser {}'s {} example (cargo install, from crates.io)",
            peers.fuser.version, peers.fuser.example
        );
        bins.fuser = Some(targets::build_fuser(&paths, &peers));
    }

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

    let ms = MountSettings {
        cache: args.cache.clone(),
        writeback: args.writeback,
        xattr: args.xattr == "on",
        daemon_args: args.daemon_args.clone(),
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
        settings: settings.clone(),
        cache: args.cache.clone(),
        writeback: args.writeback,
        xattr: args.xattr == "on",
        targets: Vec::new(),
        workloads: steps
            .iter()
            .filter(|(_, measured)| *measured)
            .map(|(w, _)| w.clone())
            .collect(),
        samples: Vec::new(),
        summary: Vec::new(),
        goals: Vec::new(),
    };

    // Probe every target.
    println!("bench: probing {} targets", specs.len());
    let mut runnable: Vec<(TargetSpec, Option<targets::CommandLine>)> = Vec::new();
    for spec in &specs {
        if interrupted() {
            break;
        }
        let mut info = TargetInfo {
            name: spec.name.clone(),
            about: spec.about(),
            status: TargetStatus::Ok,
            reason: None,
            command: None,
            start_line: None,
        };
        match targets::command_for(spec, &bins, &paths, &ms) {
            Err(e) => {
                info.status = TargetStatus::Missing;
                info.reason = Some(e);
            }
            Ok(cmd) => {
                info.command = cmd.as_ref().map(|(b, a)| targets::display_command(b, a));
                let log = out_dir
                    .join("logs")
                    .join(format!("{}-probe.log", file_safe(&spec.name)));
                match targets::start(
                    spec,
                    cmd.clone(),
                    &paths,
                    &token,
                    &log,
                    Duration::from_secs(20),
                ) {
                    Ok(mut running) => {
                        info.start_line = running.start_line.clone();
                        let forced = running.stop();
                        if !forced.is_empty() && spec.is_fuse() {
                            println!("bench: {}: {}", spec.name, forced.join("; "));
                        }
                        runnable.push((spec.clone(), cmd));
                    }
                    Err(StartError::NotAvailable(why)) => {
                        info.status = TargetStatus::NotAvailable;
                        info.reason = Some(why);
                    }
                    Err(StartError::Unusable(why)) => {
                        info.status = TargetStatus::Unusable;
                        info.reason = Some(why);
                    }
                    Err(StartError::Failed(why)) => {
                        info.status = TargetStatus::Failed;
                        info.reason = Some(why);
                    }
                }
            }
        }
        println!(
            "  {:<22} {}{}",
            info.name,
            info.status.as_str(),
            info.reason
                .as_deref()
                .map_or(String::new(), |r| format!(": {r}"))
        );
        report.targets.push(info);
    }
    if runnable.is_empty() {
        bail!("no target can run");
    }

    // The matrix.
    let per_round: f64 = steps
        .iter()
        .map(|(w, _)| estimate(w, &settings))
        .sum::<f64>()
        + START_STOP_SECS;
    let total_ms = (per_round * runnable.len() as f64 * settings.repeats as f64 * 1000.0) as u64;
    println!(
        "bench: {} targets × {} workloads × {} rounds, about {}",
        runnable.len(),
        report.workloads.len(),
        settings.repeats,
        report::fmt_duration(total_ms as f64 / 1000.0)
    );
    let pb = ProgressBar::new(total_ms.max(1));
    pb.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar:.cyan/blue}] {percent:>3}% ETA {eta_precise} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let say = |pb: &ProgressBar, line: String| pb.suspend(|| println!("{line}"));
    let json_path = out_dir.join("results.json");
    'rounds: for round in 0..settings.repeats {
        let n = runnable.len();
        for i in 0..n {
            let (spec, cmd) = &runnable[(i + round as usize) % n];
            if interrupted() {
                break 'rounds;
            }
            let tag = format!("round {}/{} · {}", round + 1, settings.repeats, spec.name);
            pb.set_message(tag.clone());
            let round_ms = (per_round * 1000.0) as u64;
            let mut done_ms = 0u64;
            if let Err(e) = reset_meta_dir(&paths) {
                say(&pb, format!("  {tag}: {e:#}"));
            }
            let log =
                out_dir
                    .join("logs")
                    .join(format!("{}-r{}.log", file_safe(&spec.name), round + 1));
            let mut running = match targets::start(
                spec,
                cmd.clone(),
                &paths,
                &token,
                &log,
                Duration::from_secs(20),
            ) {
                Ok(r) => r,
                Err(e) => {
                    let why = format!("start failed: {e:?}");
                    say(&pb, format!("  {tag}: {why}"));
                    for (w, measured) in &steps {
                        if *measured {
                            report.samples.push(Sample {
                                target: spec.name.clone(),
                                workload: w.name.clone(),
                                round,
                                value: None,
                                iops: None,
                                mib_s: None,
                                lat_mean_us: None,
                                error: Some(why.clone()),
                                at: machine::iso_utc(machine::now_unix()),
                                wall_secs: 0.0,
                                raw: None,
                            });
                        }
                    }
                    pb.inc(round_ms);
                    continue;
                }
            };
            let mut dead: Option<String> = None;
            for (w, measured) in &steps {
                if interrupted() {
                    break;
                }
                pb.set_message(format!("{tag} · {}", w.name));
                let est_ms = (estimate(w, &settings) * 1000.0) as u64;
                let rel = format!(
                    "raw/{}-{}-r{}{}.json",
                    file_safe(&spec.name),
                    file_safe(&w.name),
                    round + 1,
                    if *measured { "" } else { "-setup" }
                );
                let at = machine::iso_utc(machine::now_unix());
                let result = match &dead {
                    Some(why) => Err(why.clone()),
                    None => run_workload(
                        w,
                        &running.root,
                        &settings,
                        &paths,
                        &bins,
                        &out_dir.join(&rel),
                    ),
                };
                if interrupted() {
                    // fio got the same SIGINT: whatever it measured is cut short.
                    break;
                }
                if dead.is_none() && !running.alive() {
                    dead = Some(format!(
                        "the daemon died (log: {})",
                        running.log().display()
                    ));
                }
                pb.inc(est_ms);
                done_ms += est_ms;
                if !*measured {
                    if let Err(e) = result {
                        say(&pb, format!("  {tag} · {} (setup): {e}", w.name));
                    }
                    continue;
                }
                let sample = match result {
                    Ok(m) => {
                        let value = metric_value(w.metric, &m.summary);
                        say(
                            &pb,
                            format!(
                                "  {tag:<36} {:<24} {:>10} {}",
                                w.name,
                                report::fmt_value(value, w.metric),
                                w.unit
                            ),
                        );
                        Sample {
                            target: spec.name.clone(),
                            workload: w.name.clone(),
                            round,
                            value: Some(value),
                            iops: Some(m.summary.iops),
                            mib_s: Some(m.summary.bw_bytes / (1 << 20) as f64),
                            lat_mean_us: m.summary.lat_mean_ns.map(|n| n / 1000.0),
                            error: None,
                            at,
                            wall_secs: m.wall,
                            raw: Some(rel),
                        }
                    }
                    Err(e) => {
                        say(&pb, format!("  {tag:<36} {:<24} FAILED: {e}", w.name));
                        Sample {
                            target: spec.name.clone(),
                            workload: w.name.clone(),
                            round,
                            value: None,
                            iops: None,
                            mib_s: None,
                            lat_mean_us: None,
                            error: Some(e),
                            at,
                            wall_secs: 0.0,
                            raw: Some(rel),
                        }
                    }
                };
                report.samples.push(sample);
            }
            let forced = running.stop();
            if !forced.is_empty() && spec.is_fuse() {
                say(&pb, format!("  {tag}: {}", forced.join("; ")));
            }
            drop(running);
            pb.inc(round_ms.saturating_sub(done_ms));
            // Partial results survive a crash or an interrupt.
            let _ = std::fs::write(
                &json_path,
                serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
            );
        }
    }
    pb.finish_and_clear();
    let _ = reset_meta_dir(&paths);

    report.finished = Some(machine::iso_utc(machine::now_unix()));
    report.duration_secs = started_at.elapsed().as_secs_f64();
    report.load_average = load_start.zip(machine::load_average());
    report.summarize();
    report.evaluate_goals(&goals);
    report.complete = !interrupted() && !report::has_own_failures(&report);
    write_outputs(&report, &out_dir, true)?;

    println!("\n{}", report::header(&report));
    println!("{}", report::results_table(&report));
    println!("{}", report::goals_table(&report));
    println!("bench: results in {}", out_dir.display());
    println!("bench: report   {}", out_dir.join("report.md").display());

    if interrupted() {
        bail!("interrupted; partial results in {}", out_dir.display());
    }
    if args.update_docs {
        update_docs(&report, &root.join("docs/benchmarks.md"))?;
    }
    if report::has_own_failures(&report) {
        bail!(
            "some workloads failed on native or on our daemon (see {})",
            out_dir.join("report.md").display()
        );
    }
    if let Some(base) = &args.compare {
        run_compare(&report, base, args.compare_by, &paths.benches, &out_dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wl(name: &str, meta: Option<&str>) -> Workload {
        let mut w = results::tests::workload(name, "metadata");
        if let Some(m) = meta {
            w.kind = WorkloadKind::Meta;
            w.meta = Some(m.into());
            w.job = None;
        }
        w
    }

    #[test]
    fn metadata_workloads_bring_their_setup() {
        let all = vec![
            wl("read", None),
            wl("create", Some("create")),
            wl("readdir", Some("readdir")),
            wl("delete", Some("delete")),
        ];
        let names = |steps: Vec<(Workload, bool)>| {
            steps
                .into_iter()
                .map(|(w, m)| format!("{}{}", w.name, if m { "" } else { "(setup)" }))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(plan_workloads(&all, &["read"])), vec!["read"]);
        assert_eq!(
            names(plan_workloads(&all, &["readdir"])),
            vec!["create(setup)", "readdir"]
        );
        assert_eq!(
            names(plan_workloads(&all, &["create", "delete", "read"])),
            vec!["read", "create", "delete"]
        );
    }

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
    fn data_files_are_laid_out_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        assert!(ensure_file(&p, 3 << 20).unwrap());
        assert_eq!(p.metadata().unwrap().len(), 3 << 20);
        assert!(!ensure_file(&p, 3 << 20).unwrap());
        assert!(ensure_file(&p, 1 << 20).unwrap());
        assert_eq!(p.metadata().unwrap().len(), 1 << 20);
    }

    #[test]
    fn docs_splicing() {
        let text = format!("# Title\n\nintro\n{DOCS_BEGIN}\nold\n{DOCS_END}\nafter\n");
        let new = splice_docs(&text, "new table\n").unwrap();
        assert_eq!(
            new,
            format!("# Title\n\nintro\n{DOCS_BEGIN}\nnew table\n{DOCS_END}\nafter\n")
        );
        assert_eq!(splice_docs(&new, "new table").unwrap(), new, "idempotent");
        assert!(splice_docs("no markers", "x").is_err());
        assert!(splice_docs(&format!("{DOCS_END}\n{DOCS_BEGIN}\n"), "x").is_err());
    }

    #[test]
    fn file_names() {
        assert_eq!(file_safe("ours:dev/sync+pool"), "ours_dev_sync_pool");
        assert_eq!(file_safe("randread-4k.x"), "randread-4k.x");
    }
}
