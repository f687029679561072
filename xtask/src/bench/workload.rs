//! The workloads of a run: which ones run and how long they take, the
//! backing directory they run in (data files, the metadata directory, the
//! page cache dropped), and running one under a time limit with what it
//! measured.

use super::config::{Metric, Settings, Workload, WorkloadKind, FIRST_LIST};
use super::stats;
use super::targets::{self, Binaries, Paths};
use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The workloads to run, with the unmeasured ones the metadata workloads
/// need: `(workload, measured)`, in run order.
pub(super) fn plan_workloads(all: &[Workload], selected: &[&str]) -> Vec<(Workload, bool)> {
    let meta_selected = all
        .iter()
        .any(|w| w.uses_meta_dir() && selected.contains(&w.name.as_str()));
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
pub(super) fn estimate(w: &Workload, s: &Settings) -> f64 {
    match (w.kind, w.meta.as_deref()) {
        (WorkloadKind::Fio, _) if w.drop_caches => s.runtime + 2.5,
        (WorkloadKind::Fio, _) => s.ramp + s.runtime + 0.6,
        (WorkloadKind::Meta, Some("create" | "delete")) => s.nrfiles as f64 / 2500.0 + 0.2,
        // Warming the backing directory, or two drops a second apart.
        (WorkloadKind::Meta, Some(FIRST_LIST)) if w.drop_caches => 3.0,
        (WorkloadKind::Meta, Some(FIRST_LIST)) => s.nrfiles as f64 / 20000.0 + 0.3,
        (WorkloadKind::Meta, _) => s.ramp + s.runtime + 0.2,
    }
}

/// Seconds to start and stop a target, for the ETA.
pub(super) const START_STOP_SECS: f64 = 1.5;

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

/// The first-listing directory's name: one per size, as the data's.
fn first_list_dir_name(s: &Settings) -> String {
    format!("first-list-{}", s.nrfiles)
}

/// Fills `dir` with the empty files `f.0` … `f.N-1` unless it holds
/// exactly those; whether it wrote anything. Made in the backing
/// directory (never through a mount), so that each mount sees its names
/// for the first time.
fn ensure_first_list_dir(dir: &Path, files: usize) -> Result<bool> {
    let count = std::fs::read_dir(dir).map(|d| d.count()).ok();
    if count == Some(files) && dir.join(format!("f.{}", files.saturating_sub(1))).exists() {
        return Ok(false);
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for i in 0..files {
        let p = dir.join(format!("f.{i}"));
        std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
    }
    Ok(true)
}

/// Reads the directory `dir` and the attributes of every entry, so that
/// the backing file system has them cached.
fn warm_dir(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("listing {}: {e}", dir.display()))?;
        std::fs::symlink_metadata(entry.path())
            .map_err(|e| format!("stat of {}: {e}", entry.path().display()))?;
    }
    Ok(())
}

/// Lays out the backing directory: data files, the first-listing
/// directory and the marker.
pub(super) fn prepare_backing(paths: &Paths, s: &Settings, token: &str) -> Result<()> {
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
    let first = paths.backing.join(first_list_dir_name(s));
    if ensure_first_list_dir(&first, s.nrfiles)? {
        println!("bench: laid out {} files in {}", s.nrfiles, first.display());
    }
    std::fs::write(paths.backing.join(targets::MARKER), token)
        .context("writing the marker file")?;
    Ok(())
}

/// Empties the metadata directory (through the backing directory, while
/// nothing is mounted).
pub(super) fn reset_meta_dir(paths: &Paths) -> Result<()> {
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
pub(super) struct Measured {
    pub(super) summary: stats::FioSummary,
    pub(super) wall: f64,
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
pub(super) fn run_workload(
    w: &Workload,
    root: &Path,
    s: &Settings,
    paths: &Paths,
    bins: &Binaries,
    raw: &Path,
) -> Result<Measured, String> {
    if w.is_first_list() {
        if w.drop_caches {
            // The first drop makes the kernel forget what an earlier
            // workload of this mount listed (a FORGET per node), the pause
            // lets the daemon process those FORGETs outside the measured
            // pass (and a passthrough that holds a descriptor per node
            // close them), the second drop empties the page cache of
            // whatever that work read back.
            drop_caches()?;
            std::thread::sleep(Duration::from_secs(1));
            drop_caches()?;
        } else {
            warm_dir(&paths.backing.join(first_list_dir_name(s)))?;
        }
    } else if w.drop_caches {
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
                    .arg(root.join(if w.is_first_list() {
                        first_list_dir_name(s)
                    } else {
                        "meta".into()
                    }))
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
pub(super) fn metric_value(metric: Metric, s: &stats::FioSummary) -> f64 {
    match metric {
        Metric::Iops => s.iops,
        Metric::Bw => s.bw_bytes / (1 << 20) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::results;

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
        // A first listing has its own directory: no create before it.
        let mut first = all.clone();
        first.push(wl("first-list", Some(FIRST_LIST)));
        assert_eq!(
            names(plan_workloads(&first, &["first-list"])),
            vec!["first-list"]
        );
    }

    #[test]
    fn the_first_listing_directory_is_laid_out_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("first-list-3");
        assert!(ensure_first_list_dir(&d, 3).unwrap());
        let mut names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["f.0", "f.1", "f.2"]);
        assert!(!ensure_first_list_dir(&d, 3).unwrap());
        // A stray file makes it lay the directory out again.
        std::fs::write(d.join("stray"), b"").unwrap();
        assert!(ensure_first_list_dir(&d, 3).unwrap());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 3);
        warm_dir(&d).unwrap();
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
}
