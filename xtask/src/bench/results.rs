//! The results of a run (`results.json`): every sample, the targets and
//! what became of them, the medians and ratios, and the goals' verdicts.

use super::config::{glob_match, Goal, Metric, Settings, Workload};
use super::machine::Machine;
use super::stats::{ratio, spread};
use serde::{Deserialize, Serialize};

/// Version of the `results.json` layout.
pub const SCHEMA: u32 = 1;

/// The baseline target names the report computes ratios against.
pub const NATIVE: &str = "native";
/// libfuse's passthrough_ll.
pub const LIBFUSE: &str = "libfuse";

fn yes() -> bool {
    true
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The command line.
    pub command: String,
    /// When the run started (ISO 8601, UTC).
    pub started: String,
    /// When it ended.
    #[serde(default)]
    pub finished: Option<String>,
    /// Wall time of the whole run, seconds.
    #[serde(default)]
    pub duration_secs: f64,
    /// `--quick`.
    #[serde(default)]
    pub quick: bool,
    /// Whether the run was complete (not interrupted, nothing failed).
    #[serde(default)]
    pub complete: bool,
    /// The machine.
    pub machine: Machine,
    /// The 1-minute load average at the start and at the end (other work on
    /// the machine shows here).
    #[serde(default)]
    pub load_average: Option<(f64, f64)>,
    /// Run length and sizes.
    pub settings: Settings,
    /// Cache policy given to every FUSE target that has one.
    pub cache: String,
    /// Writeback cache on for every FUSE target that has one.
    pub writeback: bool,
    /// Extended attributes served by every FUSE target that can choose.
    #[serde(default = "yes")]
    pub xattr: bool,
    /// Every target asked for, including those that could not run.
    pub targets: Vec<TargetInfo>,
    /// The workloads, in run order.
    pub workloads: Vec<Workload>,
    /// Every measurement.
    pub samples: Vec<Sample>,
    /// Medians and ratios per (workload, target).
    #[serde(default)]
    pub summary: Vec<SummaryRow>,
    /// The goals' verdicts.
    #[serde(default)]
    pub goals: Vec<GoalRow>,
}

/// What became of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetStatus {
    /// It ran.
    Ok,
    /// A mode of our daemon whose code doesn't exist yet.
    NotAvailable,
    /// A peer that could not be built.
    Missing,
    /// It was built and mounted but can't run the workloads.
    Unusable,
    /// It failed to start or to serve.
    Failed,
}

impl TargetStatus {
    /// As printed in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetStatus::Ok => "ok",
            TargetStatus::NotAvailable => "not available yet",
            TargetStatus::Missing => "missing",
            TargetStatus::Unusable => "unusable",
            TargetStatus::Failed => "failed",
        }
    }
}

/// One target of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Name (`native`, `libfuse`, `fuser`, `ours:dev/sync`, …).
    pub name: String,
    /// What it is.
    pub about: String,
    /// What became of it.
    pub status: TargetStatus,
    /// Why it isn't `ok`.
    #[serde(default)]
    pub reason: Option<String>,
    /// The command that serves it (none for native).
    #[serde(default)]
    pub command: Option<String>,
    /// The start line our daemon printed.
    #[serde(default)]
    pub start_line: Option<String>,
}

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// Target name.
    pub target: String,
    /// Workload name.
    pub workload: String,
    /// Round (0-based); the targets alternate within a round.
    pub round: u32,
    /// The workload's metric (IOPS or MiB/s); `None` if it failed.
    pub value: Option<f64>,
    /// Operations per second.
    #[serde(default)]
    pub iops: Option<f64>,
    /// MiB per second.
    #[serde(default)]
    pub mib_s: Option<f64>,
    /// Mean latency in microseconds.
    #[serde(default)]
    pub lat_mean_us: Option<f64>,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// When it started (ISO 8601).
    pub at: String,
    /// Wall seconds, process start to end.
    pub wall_secs: f64,
    /// The raw JSON output, relative to the run directory.
    #[serde(default)]
    pub raw: Option<String>,
    /// What the daemon used (none for native, and in files written before
    /// the harness measured it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonSample>,
}

impl Sample {
    /// A failed sample of `workload` on `target` in `round`: no figures,
    /// `error` saying why.
    pub fn failed(
        target: &str,
        workload: &str,
        round: u32,
        error: String,
        at: String,
        raw: Option<String>,
    ) -> Sample {
        Sample {
            target: target.to_owned(),
            workload: workload.to_owned(),
            round,
            value: None,
            iops: None,
            mib_s: None,
            lat_mean_us: None,
            error: Some(error),
            at,
            wall_secs: 0.0,
            raw,
            daemon: None,
        }
    }
}

/// What the daemon serving a sample used, read from /proc right before and
/// right after the workload process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonSample {
    /// Peak resident set during the workload (`VmHWM`, reset right before
    /// it), KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_peak_kib: Option<u64>,
    /// Threads right after the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// CPU seconds (user + system, all threads) during the workload
    /// process, its ramp included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_secs: Option<f64>,
    /// `cpu_secs` per operation the process did (ramp included), in
    /// microseconds: metadata workloads only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_op: Option<f64>,
}

/// Medians of what a target's daemon used: per workload group, the peak
/// resident set and the threads (per round the largest over the group's
/// workloads, then the median over rounds), and per metadata workload the
/// CPU time per operation (median over rounds).
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonRow {
    /// Target name.
    pub target: String,
    /// `(group, peak RSS in MiB, threads)`, in the groups' run order.
    pub groups: Vec<(String, Option<f64>, Option<f64>)>,
    /// `(workload, µs of CPU per operation)` of the metadata workloads.
    pub cpu_us_per_op: Vec<(String, Option<f64>)>,
}

/// Medians and ratios of one (workload, target).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    /// Workload name.
    pub workload: String,
    /// Target name.
    pub target: String,
    /// Successful samples.
    pub n: usize,
    /// Failed samples.
    pub failed: usize,
    /// Median.
    pub median: Option<f64>,
    /// Smallest sample.
    pub min: Option<f64>,
    /// Largest sample.
    pub max: Option<f64>,
    /// Median / native's median.
    pub ratio_native: Option<f64>,
    /// Median / libfuse's median.
    pub ratio_libfuse: Option<f64>,
}

/// The verdict of one goal on one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The ratio is at least the goal's.
    Met,
    /// It isn't.
    Missed,
    /// One side has no result.
    NotMeasured,
}

impl Verdict {
    /// As printed in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// One row of the goals table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalRow {
    /// The goal's text.
    pub goal: String,
    /// Target measured.
    pub subject: String,
    /// Target measured against.
    pub baseline: String,
    /// Workload (`*` when one row stands for all of them).
    pub workload: String,
    /// Median ratio subject / baseline.
    pub ratio: Option<f64>,
    /// Smallest ratio of any subject sample to any baseline sample (a
    /// pessimistic bound) and the largest (an optimistic one).
    pub ratio_range: Option<(f64, f64)>,
    /// The ratio the goal asks for.
    pub min_ratio: f64,
    /// The verdict.
    pub verdict: Verdict,
    /// Why it couldn't be measured.
    #[serde(default)]
    pub note: Option<String>,
}

impl RunReport {
    /// The values of the successful samples of (target, workload).
    pub fn values(&self, target: &str, workload: &str) -> Vec<f64> {
        self.samples
            .iter()
            .filter(|s| s.target == target && s.workload == workload)
            .filter_map(|s| s.value)
            .collect()
    }

    /// The summary row of (target, workload).
    pub fn row(&self, target: &str, workload: &str) -> Option<&SummaryRow> {
        self.summary
            .iter()
            .find(|r| r.target == target && r.workload == workload)
    }

    /// The target called `name`.
    pub fn target(&self, name: &str) -> Option<&TargetInfo> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The workload called `name`.
    pub fn workload(&self, name: &str) -> Option<&Workload> {
        self.workloads.iter().find(|w| w.name == name)
    }

    /// Targets that ran (status ok), in the report's order.
    pub fn ran_targets(&self) -> Vec<&TargetInfo> {
        self.targets
            .iter()
            .filter(|t| t.status == TargetStatus::Ok)
            .collect()
    }

    /// Recomputes [`RunReport::summary`] from the samples.
    pub fn summarize(&mut self) {
        let mut rows = Vec::new();
        for w in &self.workloads {
            let median_of = |t: &str| spread(&self.values(t, &w.name)).map(|s| s.median);
            let native = median_of(NATIVE);
            let libfuse = median_of(LIBFUSE);
            for t in self.ran_targets() {
                let samples: Vec<&Sample> = self
                    .samples
                    .iter()
                    .filter(|s| s.target == t.name && s.workload == w.name)
                    .collect();
                if samples.is_empty() {
                    continue;
                }
                let values: Vec<f64> = samples.iter().filter_map(|s| s.value).collect();
                let sp = spread(&values);
                let median = sp.map(|s| s.median);
                rows.push(SummaryRow {
                    workload: w.name.clone(),
                    target: t.name.clone(),
                    n: values.len(),
                    failed: samples.len() - values.len(),
                    median,
                    min: sp.map(|s| s.min),
                    max: sp.map(|s| s.max),
                    ratio_native: ratio(median, native),
                    ratio_libfuse: ratio(median, libfuse),
                });
            }
        }
        self.summary = rows;
    }

    /// Evaluates `goals` against the summary (call [`RunReport::summarize`]
    /// first) into [`RunReport::goals`].
    pub fn evaluate_goals(&mut self, goals: &[Goal]) {
        let mut rows = Vec::new();
        for g in goals {
            let workloads: Vec<&str> = self
                .workloads
                .iter()
                .map(|w| w.name.as_str())
                .filter(|name| g.workloads.iter().any(|p| glob_match(p, name)))
                .collect();
            let unmeasured = |note: String, workload: &str| GoalRow {
                goal: g.text.clone(),
                subject: g.subject.clone(),
                baseline: g.baseline.clone(),
                workload: workload.to_string(),
                ratio: None,
                ratio_range: None,
                min_ratio: g.min_ratio,
                verdict: Verdict::NotMeasured,
                note: Some(note),
            };
            let all = if g.workloads.iter().any(|p| p == "*") {
                "*".to_string()
            } else {
                g.workloads.join(", ")
            };
            // A side that didn't run makes one row for the whole goal.
            let side_problem =
                [&g.subject, &g.baseline]
                    .into_iter()
                    .find_map(|name| match self.target(name) {
                        None => Some(format!("{name} was not in this run")),
                        Some(t) if t.status != TargetStatus::Ok => Some(format!(
                            "{name} {}: {}",
                            t.status.as_str(),
                            t.reason.as_deref().unwrap_or("no reason recorded")
                        )),
                        Some(_) => None,
                    });
            if let Some(note) = side_problem {
                rows.push(unmeasured(note, &all));
                continue;
            }
            if workloads.is_empty() {
                rows.push(unmeasured("none of its workloads ran".into(), &all));
                continue;
            }
            for w in workloads {
                let subject = self.values(&g.subject, w);
                let baseline = self.values(&g.baseline, w);
                let (Some(s), Some(b)) = (spread(&subject), spread(&baseline)) else {
                    rows.push(unmeasured("no successful samples".into(), w));
                    continue;
                };
                let r = ratio(Some(s.median), Some(b.median));
                let range = (b.max > 0.0 && b.min > 0.0).then(|| (s.min / b.max, s.max / b.min));
                let verdict = match r {
                    Some(r) if r >= g.min_ratio => Verdict::Met,
                    Some(_) => Verdict::Missed,
                    None => Verdict::NotMeasured,
                };
                rows.push(GoalRow {
                    goal: g.text.clone(),
                    subject: g.subject.clone(),
                    baseline: g.baseline.clone(),
                    workload: w.to_string(),
                    ratio: r,
                    ratio_range: range,
                    min_ratio: g.min_ratio,
                    verdict,
                    note: None,
                });
            }
        }
        self.goals = rows;
    }

    /// The workload groups, in run order.
    pub fn groups(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for w in &self.workloads {
            if !v.contains(&w.group.as_str()) {
                v.push(&w.group);
            }
        }
        v
    }

    /// [`DaemonRow`]s of the targets that ran and have daemon figures.
    pub fn daemon_rows(&self) -> Vec<DaemonRow> {
        let groups = self.groups();
        let mut rows = Vec::new();
        for t in self.ran_targets() {
            let samples: Vec<&Sample> = self
                .samples
                .iter()
                .filter(|s| s.target == t.name && s.daemon.is_some())
                .collect();
            if samples.is_empty() {
                continue;
            }
            let in_group = |s: &Sample, g: &str| {
                self.workload(&s.workload).map(|w| w.group.as_str()) == Some(g)
            };
            // Per round, the largest over the group's workloads; then the
            // median over rounds.
            let per_round = |g: &str, f: &dyn Fn(&DaemonSample) -> Option<f64>| {
                let mut rounds: Vec<u32> = samples.iter().map(|s| s.round).collect();
                rounds.sort_unstable();
                rounds.dedup();
                let peaks: Vec<f64> = rounds
                    .iter()
                    .filter_map(|&r| {
                        samples
                            .iter()
                            .filter(|s| s.round == r && in_group(s, g))
                            .filter_map(|s| s.daemon.as_ref().and_then(f))
                            .reduce(f64::max)
                    })
                    .collect();
                spread(&peaks).map(|s| s.median)
            };
            let group_cells = groups
                .iter()
                .map(|g| {
                    (
                        g.to_string(),
                        per_round(g, &|d| d.rss_peak_kib.map(|k| k as f64 / 1024.0)),
                        per_round(g, &|d| d.threads.map(f64::from)),
                    )
                })
                .collect();
            let cpu = self
                .workloads
                .iter()
                .filter(|w| w.is_meta())
                .map(|w| {
                    let v: Vec<f64> = samples
                        .iter()
                        .filter(|s| s.workload == w.name)
                        .filter_map(|s| s.daemon.as_ref().and_then(|d| d.cpu_us_per_op))
                        .collect();
                    (w.name.clone(), spread(&v).map(|s| s.median))
                })
                .collect();
            rows.push(DaemonRow {
                target: t.name.clone(),
                groups: group_cells,
                cpu_us_per_op: cpu,
            });
        }
        rows
    }

    /// The metric of a workload (IOPS when unknown).
    pub fn metric(&self, workload: &str) -> Metric {
        self.workload(workload).map_or(Metric::Iops, |w| w.metric)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::bench::config::WorkloadKind;

    /// A workload for tests.
    pub fn workload(name: &str, group: &str) -> Workload {
        Workload {
            name: name.into(),
            kind: WorkloadKind::Fio,
            job: Some(format!("fio/{name}.fio")),
            meta: None,
            metric: Metric::Iops,
            unit: "IOPS".into(),
            group: group.into(),
            drop_caches: false,
            description: format!("{name} workload"),
        }
    }

    /// A sample for tests.
    pub fn sample(target: &str, workload: &str, round: u32, value: Option<f64>) -> Sample {
        Sample {
            target: target.into(),
            workload: workload.into(),
            round,
            value,
            iops: value,
            mib_s: None,
            lat_mean_us: None,
            error: value.is_none().then(|| "boom".to_string()),
            at: "2026-01-01T00:00:00Z".into(),
            wall_secs: 1.0,
            raw: None,
            daemon: None,
        }
    }

    fn target(name: &str, status: TargetStatus) -> TargetInfo {
        TargetInfo {
            name: name.into(),
            about: String::new(),
            status,
            reason: (status != TargetStatus::Ok).then(|| "it can't".to_string()),
            command: None,
            start_line: None,
        }
    }

    /// Three repeats of `read` on native, ours and libfuse.
    pub const READS: [(&str, &str, &[f64]); 3] = [
        ("native", "read", &[100.0, 120.0, 110.0]),
        ("ours:dev/sync", "read", &[50.0, 60.0, 55.0]),
        ("libfuse", "read", &[40.0, 44.0, 50.0]),
    ];

    /// A report with native, libfuse and ours on two workloads.
    pub fn report(samples: &[(&str, &str, &[f64])]) -> RunReport {
        let mut r = RunReport {
            schema: SCHEMA,
            command: "cargo xtask bench".into(),
            started: "2026-01-01T00:00:00Z".into(),
            finished: None,
            duration_secs: 0.0,
            quick: false,
            complete: true,
            machine: Machine {
                cpu_model: "cpu".into(),
                cores: 2,
                memory_bytes: 1 << 30,
                kernel: "6.18".into(),
                git_revision: None,
                hostname: "h".into(),
                fio_version: None,
                fuse_enable_uring: None,
            },
            load_average: None,
            settings: Settings {
                runtime: 1.0,
                ramp: 0.0,
                repeats: 3,
                nrfiles: 10,
                file_size: 1 << 20,
                cached_size: 1 << 20,
                cold_size: 1 << 20,
            },
            cache: "auto".into(),
            writeback: false,
            xattr: true,
            targets: vec![
                target("native", TargetStatus::Ok),
                target("ours:dev/sync", TargetStatus::Ok),
                target("libfuse", TargetStatus::Ok),
                target("fuser", TargetStatus::Unusable),
            ],
            workloads: vec![workload("read", "data"), workload("stat", "metadata")],
            samples: Vec::new(),
            summary: Vec::new(),
            goals: Vec::new(),
        };
        for (t, w, values) in samples {
            for (i, v) in values.iter().enumerate() {
                r.samples.push(sample(t, w, i as u32, Some(*v)));
            }
        }
        r.summarize();
        r
    }

    #[test]
    fn summary_medians_and_ratios() {
        let mut r = report(&READS);
        r.samples.push(sample("ours:dev/sync", "read", 3, None));
        r.summarize();
        let row = r.row("ours:dev/sync", "read").unwrap();
        assert_eq!(row.n, 3);
        assert_eq!(row.failed, 1);
        assert_eq!(row.median, Some(55.0));
        assert_eq!((row.min, row.max), (Some(50.0), Some(60.0)));
        assert_eq!(row.ratio_native, Some(0.5));
        assert_eq!(row.ratio_libfuse, Some(55.0 / 44.0));
        assert_eq!(r.row("native", "read").unwrap().ratio_native, Some(1.0));
        assert!(
            r.row("fuser", "read").is_none(),
            "unusable targets have no rows"
        );
        assert!(r.row("native", "stat").is_none(), "no samples, no row");
    }

    #[test]
    fn goals_verdicts() {
        let mut r = report(&[
            ("native", "read", &[100.0, 100.0, 100.0]),
            ("native", "stat", &[100.0]),
            ("ours:dev/sync", "read", &[95.0, 91.0, 99.0]),
            ("ours:dev/sync", "stat", &[80.0]),
            ("libfuse", "read", &[50.0, 50.0, 50.0]),
        ]);
        let goals = vec![
            Goal {
                text: "within 10% of native".into(),
                subject: "ours:dev/sync".into(),
                baseline: "native".into(),
                workloads: vec!["*".into()],
                min_ratio: 0.9,
            },
            Goal {
                text: "vs fuser".into(),
                subject: "ours:dev/sync".into(),
                baseline: "fuser".into(),
                workloads: vec!["*".into()],
                min_ratio: 1.1,
            },
            Goal {
                text: "vs libfuse".into(),
                subject: "ours:dev/sync".into(),
                baseline: "libfuse".into(),
                workloads: vec!["read".into(), "stat".into()],
                min_ratio: 1.1,
            },
            Goal {
                text: "uring".into(),
                subject: "ours:uring/sync".into(),
                baseline: "ours:dev/sync".into(),
                workloads: vec!["stat".into()],
                min_ratio: 1.3,
            },
        ];
        r.evaluate_goals(&goals);
        let g: Vec<(&str, &str, Verdict)> = r
            .goals
            .iter()
            .map(|g| (g.goal.as_str(), g.workload.as_str(), g.verdict))
            .collect();
        assert_eq!(
            g,
            vec![
                ("within 10% of native", "read", Verdict::Met),
                ("within 10% of native", "stat", Verdict::Missed),
                ("vs fuser", "*", Verdict::NotMeasured),
                ("vs libfuse", "read", Verdict::Met),
                ("vs libfuse", "stat", Verdict::NotMeasured),
                ("uring", "stat", Verdict::NotMeasured),
            ]
        );
        assert_eq!(r.goals[0].ratio, Some(0.95));
        assert_eq!(r.goals[0].ratio_range, Some((0.91, 0.99)));
        assert!(r.goals[2].note.as_deref().unwrap().contains("unusable"));
        assert!(r.goals[5]
            .note
            .as_deref()
            .unwrap()
            .contains("not in this run"));
    }

    #[test]
    fn daemon_figures_are_medians_of_round_peaks() {
        let mut r = report(&[
            ("native", "read", &[100.0, 100.0]),
            ("ours:dev/sync", "read", &[50.0, 50.0, 50.0]),
            ("ours:dev/sync", "stat", &[10.0, 10.0, 10.0]),
        ]);
        r.workloads[1].kind = crate::bench::config::WorkloadKind::Meta;
        r.workloads[1].meta = Some("stat".into());
        for s in r.samples.iter_mut().filter(|s| s.target != NATIVE) {
            let round = s.round as u64;
            s.daemon = Some(if s.workload == "read" {
                DaemonSample {
                    rss_peak_kib: Some((10 + round) * 1024),
                    threads: Some(2 + round as u32),
                    cpu_secs: Some(0.5),
                    cpu_us_per_op: None,
                }
            } else {
                DaemonSample {
                    rss_peak_kib: Some(4 * 1024),
                    threads: Some(3),
                    cpu_secs: Some(0.1),
                    cpu_us_per_op: Some([4.0, 9.0, 5.0][round as usize]),
                }
            });
        }
        let rows = r.daemon_rows();
        assert_eq!(rows.len(), 1, "native has no daemon");
        let row = &rows[0];
        assert_eq!(row.target, "ours:dev/sync");
        assert_eq!(
            row.groups,
            vec![
                ("data".to_string(), Some(11.0), Some(3.0)),
                ("metadata".to_string(), Some(4.0), Some(3.0)),
            ]
        );
        assert_eq!(row.cpu_us_per_op, vec![("stat".to_string(), Some(5.0))]);
    }

    #[test]
    fn older_results_without_daemon_figures_load() {
        let r = report(&[("ours:dev/sync", "read", &[1.0])]);
        let mut v = serde_json::to_value(&r).unwrap();
        assert!(v["samples"][0].get("daemon").is_none(), "None is left out");
        v["samples"][0]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k != "daemon");
        let back: RunReport = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back.samples[0].daemon, None);
        // With the figures, they come back.
        v["samples"][0]["daemon"] = serde_json::json!({"rss_peak_kib": 2048, "threads": 4});
        let back: RunReport = serde_json::from_value(v).unwrap();
        let d = back.samples[0].daemon.clone().unwrap();
        assert_eq!(
            (d.rss_peak_kib, d.threads, d.cpu_secs),
            (Some(2048), Some(4), None)
        );
    }

    #[test]
    fn reports_round_trip_through_json() {
        let r = report(&[("native", "read", &[1.0, 2.0])]);
        let text = serde_json::to_string(&r).unwrap();
        let back: RunReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.summary, r.summary);
        assert_eq!(back.samples.len(), 2);
    }
}
