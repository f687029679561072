//! The probe and the rounds of a run: every target mounted once to see
//! whether it can run, then, round after round, every target that can
//! running every workload, with the samples going into the report.

use super::config::{Settings, Workload};
use super::results::{DaemonSample, RunReport, Sample, TargetInfo, TargetStatus};
use super::targets::{self, Binaries, MountSettings, Paths, Running, StartError, TargetSpec};
use super::workload::{estimate, metric_value, reset_meta_dir, run_workload, START_STOP_SECS};
use super::{file_safe, interrupted, machine, procstat, report};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the probe, the rounds and the verdict share: where things are,
/// what every target runs, and how it mounts.
pub(super) struct Bench {
    pub(super) paths: Paths,
    pub(super) bins: Binaries,
    pub(super) settings: Settings,
    pub(super) steps: Vec<(Workload, bool)>,
    pub(super) ms: MountSettings,
    pub(super) token: String,
    pub(super) out_dir: PathBuf,
}

/// Prints `line` above the progress bar.
fn say(pb: &ProgressBar, line: String) {
    pb.suspend(|| println!("{line}"));
}

impl Bench {
    /// Starts `spec` running `cmd` on the run's paths, logging to `log`:
    /// the probe and the rounds start targets alike.
    fn start(
        &self,
        spec: &TargetSpec,
        cmd: Option<targets::CommandLine>,
        log: &Path,
    ) -> Result<Running, StartError> {
        targets::start(
            spec,
            cmd,
            &self.paths,
            &self.token,
            log,
            Duration::from_secs(20),
        )
    }

    /// Mounts and unmounts every target of `specs` once, recording in
    /// `report` how it went: the targets that can run, with their command
    /// lines.
    pub(super) fn probe(
        &self,
        specs: &[TargetSpec],
        report: &mut RunReport,
    ) -> Vec<(TargetSpec, Option<targets::CommandLine>)> {
        println!("bench: probing {} targets", specs.len());
        let mut runnable: Vec<(TargetSpec, Option<targets::CommandLine>)> = Vec::new();
        for spec in specs {
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
            match targets::command_for(spec, &self.bins, &self.paths, &self.ms) {
                Err(e) => {
                    info.status = TargetStatus::Missing;
                    info.reason = Some(e);
                }
                Ok(cmd) => {
                    info.command = cmd.as_ref().map(|(b, a)| targets::display_command(b, a));
                    let log = self
                        .out_dir
                        .join("logs")
                        .join(format!("{}-probe.log", file_safe(&spec.name)));
                    match self.start(spec, cmd.clone(), &log) {
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
        runnable
    }

    /// The rounds: in each, every target of `runnable` in turn (the order
    /// rotates from round to round) runs every step, behind a progress bar
    /// with an ETA.
    pub(super) fn matrix(
        &self,
        runnable: &[(TargetSpec, Option<targets::CommandLine>)],
        report: &mut RunReport,
    ) {
        let settings = &self.settings;
        let per_round: f64 = self
            .steps
            .iter()
            .map(|(w, _)| estimate(w, settings))
            .sum::<f64>()
            + START_STOP_SECS;
        let total_ms =
            (per_round * runnable.len() as f64 * settings.repeats as f64 * 1000.0) as u64;
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
        let round_ms = (per_round * 1000.0) as u64;
        'rounds: for round in 0..settings.repeats {
            let n = runnable.len();
            for i in 0..n {
                let target = &runnable[(i + round as usize) % n];
                if interrupted() {
                    break 'rounds;
                }
                self.target_round(&pb, target, round, round_ms, report);
            }
        }
        pb.finish_and_clear();
    }

    /// One round of one target: starts it, runs every step on its mount
    /// (each measured one a [`Sample`] in `report`), stops it, and saves the
    /// results so far.
    fn target_round(
        &self,
        pb: &ProgressBar,
        (spec, cmd): &(TargetSpec, Option<targets::CommandLine>),
        round: u32,
        round_ms: u64,
        report: &mut RunReport,
    ) {
        let settings = &self.settings;
        let tag = format!("round {}/{} · {}", round + 1, settings.repeats, spec.name);
        pb.set_message(tag.clone());
        let mut done_ms = 0u64;
        if let Err(e) = reset_meta_dir(&self.paths) {
            say(pb, format!("  {tag}: {e:#}"));
        }
        let log =
            self.out_dir
                .join("logs")
                .join(format!("{}-r{}.log", file_safe(&spec.name), round + 1));
        let mut running = match self.start(spec, cmd.clone(), &log) {
            Ok(r) => r,
            Err(e) => {
                let why = format!("start failed: {e:?}");
                say(pb, format!("  {tag}: {why}"));
                for (w, measured) in &self.steps {
                    if *measured {
                        report.samples.push(Sample::failed(
                            &spec.name,
                            &w.name,
                            round,
                            why.clone(),
                            machine::iso_utc(machine::now_unix()),
                            None,
                        ));
                    }
                }
                pb.inc(round_ms);
                return;
            }
        };
        let mut dead: Option<String> = None;
        for (w, measured) in &self.steps {
            if interrupted() {
                break;
            }
            pb.set_message(format!("{tag} · {}", w.name));
            let est_ms = (estimate(w, settings) * 1000.0) as u64;
            let rel = format!(
                "raw/{}-{}-r{}{}.json",
                file_safe(&spec.name),
                file_safe(&w.name),
                round + 1,
                if *measured { "" } else { "-setup" }
            );
            let at = machine::iso_utc(machine::now_unix());
            // The daemon's PID while it is our un-reaped child (none for
            // native, nor once it died).
            let pid = if dead.is_none() { running.pid() } else { None };
            let before = pid.map(daemon_before);
            let result = match &dead {
                Some(why) => Err(why.clone()),
                None => run_workload(
                    w,
                    &running.root,
                    settings,
                    &self.paths,
                    &self.bins,
                    &self.out_dir.join(&rel),
                ),
            };
            let used = match (pid, before, &result) {
                (Some(pid), Some(before), Ok(m)) => Some(daemon_after(
                    pid,
                    before,
                    w.is_meta().then_some(m.summary.ops_done).flatten(),
                )),
                _ => None,
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
                    say(pb, format!("  {tag} · {} (setup): {e}", w.name));
                }
                continue;
            }
            let sample = match result {
                Ok(m) => {
                    let value = metric_value(w.metric, &m.summary);
                    say(
                        pb,
                        format!(
                            "  {tag:<36} {:<24} {:>10} {}{}",
                            w.name,
                            report::fmt_value(value, w.metric),
                            w.unit,
                            used.as_ref().map_or(String::new(), report::daemon_note)
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
                        daemon: used,
                    }
                }
                Err(e) => {
                    say(pb, format!("  {tag:<36} {:<24} FAILED: {e}", w.name));
                    Sample::failed(&spec.name, &w.name, round, e, at, Some(rel))
                }
            };
            report.samples.push(sample);
        }
        let forced = running.stop();
        if !forced.is_empty() && spec.is_fuse() {
            say(pb, format!("  {tag}: {}", forced.join("; ")));
        }
        drop(running);
        pb.inc(round_ms.saturating_sub(done_ms));
        // Partial results survive a crash or an interrupt.
        let _ = std::fs::write(
            self.out_dir.join("results.json"),
            serde_json::to_string_pretty(&*report).unwrap_or_default() + "\n",
        );
    }
}

/// What is read of the daemon right before a workload: its peak resident
/// set reset (whether that worked) and its CPU time so far.
fn daemon_before(pid: u32) -> (bool, Option<f64>) {
    (procstat::reset_peak(pid), procstat::cpu_secs(pid))
}

/// What the daemon used during the workload: its peak resident set (only
/// when it was reset before, else it would be the peak since the mount),
/// threads, CPU time, and CPU time per operation where `ops` is known.
fn daemon_after(
    pid: u32,
    (reset, cpu_before): (bool, Option<f64>),
    ops: Option<f64>,
) -> DaemonSample {
    let status = procstat::status(pid);
    let cpu_secs = cpu_before
        .zip(procstat::cpu_secs(pid))
        .map(|(a, b)| (b - a).max(0.0));
    DaemonSample {
        rss_peak_kib: status.filter(|_| reset).map(|s| s.rss_peak_kib),
        threads: status.map(|s| s.threads),
        cpu_secs,
        cpu_us_per_op: cpu_secs
            .zip(ops.filter(|&n| n > 0.0))
            .map(|(c, n)| c * 1e6 / n),
    }
}
