//! `--compare BASE.json`: regressions against an earlier run, with the
//! thresholds of `benches/thresholds.toml`.

use super::config::Thresholds;
use super::report::{fmt_ratio, fmt_value};
use super::results::{RunReport, NATIVE};
use std::fmt::Write as _;

/// What is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareBy {
    /// The medians themselves.
    Absolute,
    /// Each target's median relative to native's in the same run (less
    /// sensitive to a machine that got slower or faster as a whole).
    Native,
}

/// One (workload, target) present in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRow {
    /// Workload name.
    pub workload: String,
    /// Target name.
    pub target: String,
    /// The base run's value.
    pub base: f64,
    /// This run's value.
    pub new: f64,
    /// `new / base - 1`.
    pub change: f64,
    /// The allowed drop.
    pub threshold: f64,
    /// `new < base * (1 - threshold)`.
    pub regressed: bool,
}

/// The comparison of two runs.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// Pairs present in both.
    pub rows: Vec<CompareRow>,
    /// Pairs in the base run that this run lacks.
    pub missing: Vec<String>,
}

impl Comparison {
    /// The rows that regressed.
    pub fn regressions(&self) -> impl Iterator<Item = &CompareRow> {
        self.rows.iter().filter(|r| r.regressed)
    }
}

/// Compares `new` with `base` (both summarized).
pub fn compare(base: &RunReport, new: &RunReport, th: &Thresholds, by: CompareBy) -> Comparison {
    let mut c = Comparison::default();
    for b in &base.summary {
        if by == CompareBy::Native && b.target == NATIVE {
            continue;
        }
        let pick = |row: &super::results::SummaryRow| match by {
            CompareBy::Absolute => row.median,
            CompareBy::Native => row.ratio_native,
        };
        let Some(base_value) = pick(b) else { continue };
        let Some(new_value) = new.row(&b.target, &b.workload).and_then(pick) else {
            c.missing.push(format!("{} / {}", b.workload, b.target));
            continue;
        };
        let group = new
            .workload(&b.workload)
            .or_else(|| base.workload(&b.workload))
            .map(|w| w.group.as_str());
        let threshold = th.for_workload(&b.workload, group);
        let change = if base_value > 0.0 {
            new_value / base_value - 1.0
        } else {
            0.0
        };
        c.rows.push(CompareRow {
            workload: b.workload.clone(),
            target: b.target.clone(),
            base: base_value,
            new: new_value,
            change,
            threshold,
            regressed: base_value > 0.0 && new_value < base_value * (1.0 - threshold),
        });
    }
    c
}

/// The comparison as Markdown.
pub fn markdown(c: &Comparison, new: &RunReport, base_name: &str, by: CompareBy) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Compared with {base_name} ({}): a regression is a drop larger than the threshold \
         (benches/thresholds.toml).\n",
        match by {
            CompareBy::Absolute => "medians",
            CompareBy::Native => "medians relative to native in the same run",
        }
    );
    out.push_str(
        "| workload | target | base | now | change | threshold | verdict |\n\
         |---|---|---:|---:|---:|---:|---|\n",
    );
    for r in &c.rows {
        let fmt = |v: f64| match by {
            CompareBy::Absolute => fmt_value(v, new.metric(&r.workload)),
            CompareBy::Native => fmt_ratio(Some(v)),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:+.1}% | -{:.0}% | {} |",
            r.workload,
            r.target,
            fmt(r.base),
            fmt(r.new),
            r.change * 100.0,
            r.threshold * 100.0,
            if r.regressed { "**REGRESSION**" } else { "ok" }
        );
    }
    if !c.missing.is_empty() {
        let _ = writeln!(
            out,
            "\nIn the base run but not in this one: {}",
            c.missing.join(", ")
        );
    }
    let n = c.regressions().count();
    let _ = writeln!(
        out,
        "\n{} regression{} in {} comparison{}.",
        n,
        if n == 1 { "" } else { "s" },
        c.rows.len(),
        if c.rows.len() == 1 { "" } else { "s" }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::results::tests::report;

    fn thresholds() -> Thresholds {
        Thresholds::parse("default = 0.1\n[groups]\nmetadata = 0.25\n").unwrap()
    }

    /// A run with one workload, read, at `native` on the backing
    /// directory and `ours` through our daemon.
    fn native_and_ours(native: f64, ours: f64) -> RunReport {
        report(&[
            ("native", "read", &[native]),
            ("ours:dev/sync", "read", &[ours]),
        ])
    }

    /// How many regressions `new` has against `base` (the test thresholds).
    fn regressions(base: &RunReport, new: &RunReport, by: CompareBy) -> usize {
        compare(base, new, &thresholds(), by).regressions().count()
    }

    #[test]
    fn a_made_up_regression_is_caught() {
        let base = report(&[
            ("native", "read", &[100.0, 100.0, 100.0]),
            ("ours:dev/sync", "read", &[80.0, 80.0, 80.0]),
            ("ours:dev/sync", "stat", &[1000.0]),
            ("libfuse", "read", &[70.0]),
        ]);
        // ours loses 15% on read (threshold 10%: regression) and 20% on stat
        // (metadata, threshold 25%: fine); libfuse is gone.
        let new = report(&[
            ("native", "read", &[100.0, 100.0, 100.0]),
            ("ours:dev/sync", "read", &[68.0, 68.0, 68.0]),
            ("ours:dev/sync", "stat", &[800.0]),
        ]);
        let c = compare(&base, &new, &thresholds(), CompareBy::Absolute);
        let regressed: Vec<_> = c
            .regressions()
            .map(|r| (r.workload.as_str(), r.target.as_str()))
            .collect();
        assert_eq!(regressed, vec![("read", "ours:dev/sync")]);
        let read = c
            .rows
            .iter()
            .find(|r| r.workload == "read" && r.target == "ours:dev/sync")
            .unwrap();
        assert!((read.change + 0.15).abs() < 1e-9);
        assert_eq!(read.threshold, 0.1);
        let stat = c.rows.iter().find(|r| r.workload == "stat").unwrap();
        assert!(!stat.regressed);
        assert_eq!(stat.threshold, 0.25);
        assert_eq!(c.missing, vec!["read / libfuse".to_string()]);
        let md = markdown(&c, &new, "base.json", CompareBy::Absolute);
        assert!(
            md.contains("| read | ours:dev/sync | 80 | 68 | -15.0% | -10% | **REGRESSION** |"),
            "{md}"
        );
        assert!(md.contains("1 regression in 3 comparisons."), "{md}");
    }

    #[test]
    fn equal_runs_and_improvements_pass() {
        let base = native_and_ours(100.0, 80.0);
        let better = native_and_ours(100.0, 95.0);
        assert_eq!(regressions(&base, &base, CompareBy::Absolute), 0);
        assert_eq!(regressions(&base, &better, CompareBy::Absolute), 0);
        // Exactly at the threshold is not a regression.
        let edge = native_and_ours(100.0, 72.0);
        assert_eq!(regressions(&base, &edge, CompareBy::Absolute), 0);
    }

    #[test]
    fn relative_to_native_ignores_a_slower_machine() {
        let base = native_and_ours(100.0, 80.0);
        // Everything 30% slower: absolute regresses, relative doesn't.
        let slow = native_and_ours(70.0, 56.0);
        assert_eq!(regressions(&base, &slow, CompareBy::Absolute), 2);
        let rel = compare(&base, &slow, &thresholds(), CompareBy::Native);
        assert_eq!(rel.rows.len(), 1, "native itself is not compared");
        assert_eq!(rel.regressions().count(), 0);
    }
}
