//! The Markdown report (`report.md`) and the SVG charts of a run.

use super::config::Metric;
use super::results::{DaemonSample, RunReport, TargetStatus, Verdict, LIBFUSE, NATIVE};
use std::fmt::Write as _;

/// A value of `metric` for tables: IOPS as `12.3k`/`1.23M`, MiB/s plain.
pub fn fmt_value(v: f64, metric: Metric) -> String {
    match metric {
        Metric::Iops if v >= 1e6 => format!("{:.2}M", v / 1e6),
        Metric::Iops if v >= 1e4 => format!("{:.1}k", v / 1e3),
        Metric::Iops if v >= 1e3 => format!("{:.2}k", v / 1e3),
        Metric::Iops => format!("{v:.0}"),
        Metric::Bw if v >= 100.0 => format!("{v:.0}"),
        Metric::Bw => format!("{v:.1}"),
    }
}

/// A ratio for tables, `–` when there is none.
pub fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "–".to_string(), |r| format!("{r:.2}"))
}

/// Seconds as `21 min 30 s`.
pub fn fmt_duration(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

fn bytes(n: u64) -> String {
    if n >= 1 << 30 && n % (1 << 30) == 0 {
        format!("{} GiB", n >> 30)
    } else {
        format!("{} MiB", n >> 20)
    }
}

/// Escapes `|` for a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The reason of the first failed sample of (target, workload).
fn first_error<'a>(r: &'a RunReport, target: &str, workload: &str) -> Option<&'a str> {
    r.samples
        .iter()
        .filter(|s| s.target == target && s.workload == workload)
        .filter_map(|s| Some((s.round, s.error.as_deref()?)))
        .min_by_key(|&(round, _)| round)
        .map(|(_, e)| e)
}

/// An absolute path in `word` (`/a/b/file`, maybe quoted or followed by
/// `:` or `,`) cut to its last component: `…/file`.
fn shorten_path(word: &str) -> String {
    let Some(start) = word.find('/') else {
        return word.to_string();
    };
    let (head, rest) = word.split_at(start);
    let body = rest.trim_end_matches(['"', '\'', ')', ']', '>', ':', ',', ';', '.']);
    let tail = &rest[body.len()..];
    let body = body.trim_end_matches('/');
    let is_path = head.chars().all(|c| "\"'(<[".contains(c)) && body.matches('/').count() >= 2;
    match body.rsplit_once('/') {
        Some((_, last)) if is_path && !last.is_empty() => format!("{head}…/{last}{tail}"),
        _ => word.to_string(),
    }
}

/// A failure's reason for a chart row or a table cell: on one line,
/// absolute paths cut to their last component, at most `max` characters
/// (an ellipsis ends a cut one). The whole reason is in "Failed samples".
fn short_reason(reason: &str, max: usize) -> String {
    let line = reason
        .split_whitespace()
        .map(shorten_path)
        .collect::<Vec<_>>()
        .join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// Longest failure reason in a results table cell.
const TABLE_REASON_CHARS: usize = 100;
/// Longest failure reason on a chart row (what fits the plot's width in
/// the row's smaller type).
const CHART_REASON_CHARS: usize = 96;

/// The start line without the fields that change from run to run.
pub fn short_start_line(line: &str) -> String {
    line.split(' ')
        .skip(2)
        .filter(|f| !f.starts_with("pid=") && !f.starts_with("mountpoint="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The run's header: date, command, machine, settings.
pub fn header(r: &RunReport) -> String {
    let mut out = String::new();
    let s = &r.settings;
    let _ = writeln!(
        out,
        "- Date: {} (took {}){}",
        r.started,
        fmt_duration(r.duration_secs),
        if r.complete {
            ""
        } else {
            " — incomplete run"
        }
    );
    let _ = writeln!(out, "- Command: `{}`", r.command);
    let _ = writeln!(out, "- Machine: {}", r.machine.one_line());
    if let Some((start, end)) = r.load_average {
        let _ = writeln!(
            out,
            "- Load average (1 min): {start:.1} at the start, {end:.1} at the end, on {} cores",
            r.machine.cores
        );
    }
    if let Some(fio) = &r.machine.fio_version {
        let _ = writeln!(out, "- fio: {fio}");
    }
    let _ = writeln!(
        out,
        "- Settings: {} round{} (targets alternate within a round), {} s measured after {} s ramp, \
         {} files in the metadata directory, bench.data {} (cached workloads use {} of it), \
         cold-cache files 4 × {}; cache={}, writeback {}, xattrs {}",
        s.repeats,
        if s.repeats == 1 { "" } else { "s" },
        s.runtime,
        s.ramp,
        s.nrfiles,
        bytes(s.file_size),
        bytes(s.cached_size),
        bytes(s.cold_size),
        r.cache,
        if r.writeback { "on" } else { "off" },
        if r.xattr { "on" } else { "off" },
    );
    out
}

/// The targets table.
pub fn targets_table(r: &RunReport) -> String {
    let mut out = String::from("| target | status | served by | notes |\n|---|---|---|---|\n");
    for t in &r.targets {
        let notes = match (&t.start_line, &t.reason) {
            (_, Some(reason)) => reason.clone(),
            (Some(line), None) => short_start_line(line),
            (None, None) => t.about.clone(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            t.name,
            t.status.as_str(),
            t.command
                .as_deref()
                .map_or("–".to_string(), |c| format!("`{}`", cell(c))),
            cell(&notes)
        );
    }
    out
}

/// The results table: median, min–max and ratios per (workload, target);
/// a target whose every sample of a workload failed shows `failed` and
/// the (shortened) reason instead of a median.
pub fn results_table(r: &RunReport) -> String {
    let mut out = String::from(
        "| workload | target | median | min–max | n | × native | × libfuse |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for w in &r.workloads {
        let rows: Vec<_> = r.summary.iter().filter(|s| s.workload == w.name).collect();
        for (i, s) in rows.iter().enumerate() {
            let label = if i == 0 {
                format!("{} ({})", w.name, w.unit)
            } else {
                String::new()
            };
            let value = |v: Option<f64>| v.map_or("–".into(), |v| fmt_value(v, w.metric));
            let n = if s.failed > 0 {
                format!("{} ({} failed)", s.n, s.failed)
            } else {
                s.n.to_string()
            };
            if s.median.is_none() {
                let reason = first_error(r, &s.target, &w.name).unwrap_or("no reason recorded");
                let _ = writeln!(
                    out,
                    "| {label} | {} | failed: {} | – | {n} | – | – |",
                    s.target,
                    cell(&short_reason(reason, TABLE_REASON_CHARS))
                );
                continue;
            }
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {}–{} | {n} | {} | {} |",
                s.target,
                value(s.median),
                value(s.min),
                value(s.max),
                if s.target == NATIVE {
                    "1.00".into()
                } else {
                    fmt_ratio(s.ratio_native)
                },
                if s.target == LIBFUSE {
                    "1.00".into()
                } else {
                    fmt_ratio(s.ratio_libfuse)
                },
            );
        }
    }
    out
}

/// MiB for the daemon table: one decimal below 100.
fn fmt_mib(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A median count: whole unless it is halfway.
fn fmt_count(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Microseconds with about three significant digits.
pub fn fmt_us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// The daemon's figures of one sample, for the progress lines.
pub fn daemon_note(d: &DaemonSample) -> String {
    let mut parts = Vec::new();
    if let Some(k) = d.rss_peak_kib {
        parts.push(format!("RSS {} MiB", fmt_mib(k as f64 / 1024.0)));
    }
    if let Some(t) = d.threads {
        parts.push(format!("{t} threads"));
    }
    if let Some(us) = d.cpu_us_per_op {
        parts.push(format!("CPU {} µs/op", fmt_us(us)));
    } else if let Some(c) = d.cpu_secs {
        parts.push(format!("CPU {c:.2} s"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("   (daemon: {})", parts.join(", "))
    }
}

/// What the daemon table shows, for the report and the docs.
pub const DAEMON_TABLE_NOTE: &str = "Per target: the daemon's peak resident set (VmHWM, reset \
     before each workload) and its threads right after each workload, the largest over a \
     group's workloads in a round, median over rounds; and per metadata workload its CPU time \
     (user + system, all threads) during the workload process divided by the operations the \
     process did, ramp included (entries for the readdir workloads), median over rounds. \
     Native has no daemon.";

/// The daemon table ("daemon memory and threads", and CPU per operation);
/// empty when no sample has daemon figures (a run from before they were
/// measured).
pub fn daemon_table(r: &RunReport) -> String {
    let rows = r.daemon_rows();
    let Some(first) = rows.first() else {
        return String::new();
    };
    let groups: Vec<&str> = first.groups.iter().map(|(g, _, _)| g.as_str()).collect();
    let metas: Vec<&str> = first
        .cpu_us_per_op
        .iter()
        .map(|(w, _)| w.as_str())
        .collect();
    let mut head = String::from("| target |");
    let mut rule = String::from("|---|");
    for g in &groups {
        let _ = write!(head, " RSS MiB, {g} |");
        rule.push_str("---:|");
    }
    for g in &groups {
        let _ = write!(head, " threads, {g} |");
        rule.push_str("---:|");
    }
    for w in &metas {
        let _ = write!(head, " CPU µs/op, {w} |");
        rule.push_str("---:|");
    }
    let mut out = format!("{head}\n{rule}\n");
    let dash = || "–".to_string();
    for row in &rows {
        let mut line = format!("| {} |", row.target);
        for (_, rss, _) in &row.groups {
            let _ = write!(line, " {} |", rss.map_or_else(dash, fmt_mib));
        }
        for (_, _, threads) in &row.groups {
            let _ = write!(line, " {} |", threads.map_or_else(dash, fmt_count));
        }
        for (_, us) in &row.cpu_us_per_op {
            let _ = write!(line, " {} |", us.map_or_else(dash, fmt_us));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The goals table and a one-line tally per goal.
pub fn goals_table(r: &RunReport) -> String {
    let mut out = String::from(
        "| goal | subject | baseline | workload | ratio | range | needed | verdict |\n\
         |---|---|---|---|---:|---:|---:|---|\n",
    );
    for g in &r.goals {
        let noisy = g
            .ratio_range
            .is_some_and(|(lo, hi)| lo < g.min_ratio && g.min_ratio <= hi);
        let verdict = match (&g.note, g.verdict) {
            (Some(note), v) => format!("{}: {}", v.as_str(), note),
            (None, v) if noisy => format!("{} (the range crosses it: noise decides)", v.as_str()),
            (None, v) => v.as_str().to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | ≥ {:.2} | {} |",
            cell(&g.goal),
            g.subject,
            g.baseline,
            g.workload,
            fmt_ratio(g.ratio),
            g.ratio_range
                .map_or("–".into(), |(a, b)| format!("{a:.2}–{b:.2}")),
            g.min_ratio,
            cell(&verdict)
        );
    }
    out.push('\n');
    let mut goals: Vec<&str> = Vec::new();
    for g in &r.goals {
        if !goals.contains(&g.goal.as_str()) {
            goals.push(&g.goal);
        }
    }
    for goal in goals {
        let rows: Vec<_> = r.goals.iter().filter(|g| g.goal == goal).collect();
        let met = rows.iter().filter(|g| g.verdict == Verdict::Met).count();
        let measured = rows
            .iter()
            .filter(|g| g.verdict != Verdict::NotMeasured)
            .count();
        let unmeasured = rows.len() - measured;
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let tally = if measured == 0 {
            "not measured".to_string()
        } else if met == measured && unmeasured == 0 {
            format!("**met** ({met} of {measured})")
        } else if met == measured {
            format!("**met where measured** ({met} of {measured}; {unmeasured} not measured)")
        } else {
            format!(
                "**not met**: met on {met} of {measured} measured workload{}{}",
                plural(measured),
                if unmeasured > 0 {
                    format!(" ({unmeasured} not measured)")
                } else {
                    String::new()
                }
            )
        };
        let noisy = rows
            .iter()
            .filter(|g| {
                g.ratio_range
                    .is_some_and(|(lo, hi)| lo < g.min_ratio && g.min_ratio <= hi)
            })
            .count();
        let noise = if noisy > 0 {
            format!("; on {noisy} of them the samples' range crosses the target")
        } else {
            String::new()
        };
        let _ = writeln!(out, "- {goal}: {tally}{noise}");
    }
    out
}

/// The failed samples, one line per (target, workload, message) with the
/// rounds it happened in.
pub fn failures_list(r: &RunReport) -> String {
    let mut seen: Vec<(&str, &str, &str, Vec<u32>)> = Vec::new();
    for s in r.samples.iter() {
        let Some(e) = s.error.as_deref() else {
            continue;
        };
        match seen
            .iter_mut()
            .find(|k| k.0 == s.target && k.1 == s.workload && k.2 == e)
        {
            Some(k) => k.3.push(s.round + 1),
            None => seen.push((&s.target, &s.workload, e, vec![s.round + 1])),
        }
    }
    let mut out = String::new();
    for (target, workload, e, rounds) in seen {
        let rounds: Vec<String> = rounds.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "- {target} / {workload} (round{} {}): {}",
            if rounds.len() == 1 { "" } else { "s" },
            rounds.join(", "),
            cell(e)
        );
    }
    out
}

/// The part of docs/benchmarks.md a run generates (`--update-docs`):
/// the header, targets, results and goals, one heading level down.
pub fn docs_section(r: &RunReport) -> String {
    let mut out = String::new();
    out.push_str(&header(r));
    out.push_str(&sections(r, "####", false));
    out
}

/// The whole `report.md`.
pub fn markdown(r: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmark run{}\n",
        if r.quick { " (quick)" } else { "" }
    );
    out.push_str(&header(r));
    out.push_str(&sections(r, "##", true));
    out
}

/// What `report.md` says before the results table.
const RESULTS_NOTE: &str = "Median of the rounds, the smallest and largest sample, and the \
     ratio of medians to native and to libfuse (higher is better everywhere); a target \
     whose every sample of a workload failed shows `failed` and why (the whole message is \
     under \"Failed samples\"). Charts: `charts/<workload>.svg`.";

/// The sections after the header that `report.md` and the docs section
/// share: targets, results, daemon figures and failed samples (each only
/// when there are any), goals. `h` is the headings' `#`s; `notes` puts
/// [`RESULTS_NOTE`] and [`DAEMON_TABLE_NOTE`] under their headings, as
/// `report.md` has them.
fn sections(r: &RunReport, h: &str, notes: bool) -> String {
    let mut out = String::new();
    let note = |out: &mut String, text: &str| {
        if notes {
            out.push_str(text);
            out.push_str("\n\n");
        }
    };
    let _ = write!(out, "\n{h} Targets\n\n");
    out.push_str(&targets_table(r));
    let _ = write!(out, "\n{h} Results\n\n");
    note(&mut out, RESULTS_NOTE);
    out.push_str(&results_table(r));
    let daemon = daemon_table(r);
    if !daemon.is_empty() {
        let _ = write!(
            out,
            "\n{h} Daemon memory, threads and CPU per operation\n\n"
        );
        note(&mut out, DAEMON_TABLE_NOTE);
        out.push_str(&daemon);
    }
    let failures = failures_list(r);
    if !failures.is_empty() {
        let _ = write!(out, "\n{h} Failed samples\n\n");
        out.push_str(&failures);
    }
    let _ = write!(out, "\n{h} Goals\n\n");
    out.push_str(&goals_table(r));
    out
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A horizontal bar chart of one workload: a bar per target at its median,
/// a whisker from min to max, the value and its ratio to native, and a
/// dashed line at native's median. A target whose every sample failed
/// gets a row saying `failed` and why (shortened; the whole reason is the
/// row's tooltip) instead of a bar.
pub fn svg(r: &RunReport, workload: &str) -> Option<String> {
    let w = r.workload(workload)?;
    let rows: Vec<_> = r
        .summary
        .iter()
        .filter(|s| s.workload == workload)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let (left, right, top, bar, gap) = (150.0, 210.0, 56.0, 22.0, 10.0);
    let plot = 420.0;
    let width = left + plot + right;
    let height = top + rows.len() as f64 * (bar + gap) + 24.0;
    let top_value = rows
        .iter()
        .filter_map(|s| s.max.or(s.median))
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |v: f64| left + plot * (v / top_value).clamp(0.0, 1.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
        xml(&w.name)
    );
    let _ = writeln!(
        out,
        r##"<text x="10" y="38" fill="#555">{} — {}; bar: median, whisker: min–max of {} round{}</text>"##,
        xml(&w.unit),
        xml(&w.description),
        r.settings.repeats,
        if r.settings.repeats == 1 { "" } else { "s" }
    );
    // A target's name, right-aligned left of its bar (or its failure).
    let name = |out: &mut String, y: f64, target: &str| {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 8.0,
            y + bar * 0.7,
            xml(target)
        );
    };
    for (i, s) in rows.iter().enumerate() {
        let y = top + i as f64 * (bar + gap);
        let Some(median) = s.median else {
            let reason = first_error(r, &s.target, workload).unwrap_or("no reason recorded");
            let _ = writeln!(out, "<g><title>{}</title>", xml(reason));
            name(&mut out, y, &s.target);
            let _ = writeln!(
                out,
                r##"<rect x="{left:.1}" y="{y:.1}" width="{plot:.1}" height="{bar:.1}" fill="#fbe9e7"/>"##
            );
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" fill="#b3261e"><tspan font-weight="bold">failed</tspan><tspan font-size="11">: {}</tspan></text>"##,
                left + 8.0,
                y + bar * 0.7,
                xml(&short_reason(reason, CHART_REASON_CHARS))
            );
            out.push_str("</g>\n");
            continue;
        };
        let color = if s.target == NATIVE {
            "#8c8c8c"
        } else if s.target.starts_with("ours") {
            "#2b6cb0"
        } else {
            "#dd8a2e"
        };
        name(&mut out, y, &s.target);
        let _ = writeln!(
            out,
            r#"<rect x="{left:.1}" y="{y:.1}" width="{:.1}" height="{bar:.1}" fill="{color}"/>"#,
            (x(median) - left).max(0.5)
        );
        if let (Some(lo), Some(hi)) = (s.min, s.max) {
            let cy = y + bar / 2.0;
            let _ = writeln!(
                out,
                r##"<path d="M{:.1} {cy:.1}H{:.1}M{:.1} {:.1}V{:.1}M{:.1} {:.1}V{:.1}" stroke="#222" stroke-width="1.2" fill="none"/>"##,
                x(lo),
                x(hi),
                x(lo),
                cy - 5.0,
                cy + 5.0,
                x(hi),
                cy - 5.0,
                cy + 5.0
            );
        }
        let label = match s.ratio_native {
            Some(rn) if s.target != NATIVE => {
                format!("{} ({rn:.2}× native)", fmt_value(median, w.metric))
            }
            _ => fmt_value(median, w.metric),
        };
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x(s.max.unwrap_or(median)).max(x(median)) + 8.0,
            y + bar * 0.7,
            xml(&label)
        );
    }
    if let Some(native) = r.row(NATIVE, workload).and_then(|s| s.median) {
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#444" stroke-dasharray="4 3"/>"##,
            x(native),
            top - 6.0,
            x(native),
            height - 18.0
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{left:.1}" y1="{:.1}" x2="{left:.1}" y2="{:.1}" stroke="#000"/>"##,
        top - 6.0,
        height - 18.0
    );
    if rows.iter().any(|s| s.median.is_some()) {
        let _ = writeln!(
            out,
            r##"<text x="{left:.1}" y="{:.1}" fill="#555">0</text><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            height - 4.0,
            left + plot,
            height - 4.0,
            xml(&fmt_value(top_value, w.metric))
        );
    }
    out.push_str("</svg>\n");
    Some(out)
}

/// Whether any target the report depends on failed (not a peer that is
/// missing or unusable, nor a mode that doesn't exist yet).
pub fn has_own_failures(r: &RunReport) -> bool {
    let ours = |name: &str| name == NATIVE || name.starts_with("ours");
    r.targets
        .iter()
        .any(|t| ours(&t.name) && t.status == TargetStatus::Failed)
        || r.samples
            .iter()
            .any(|s| ours(&s.target) && s.error.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::results::tests::{report, READS};

    #[test]
    fn formats() {
        assert_eq!(fmt_value(1_234_567.0, Metric::Iops), "1.23M");
        assert_eq!(fmt_value(45_678.0, Metric::Iops), "45.7k");
        assert_eq!(fmt_value(4_567.0, Metric::Iops), "4.57k");
        assert_eq!(fmt_value(456.4, Metric::Iops), "456");
        assert_eq!(fmt_value(1834.4, Metric::Bw), "1834");
        assert_eq!(fmt_value(12.34, Metric::Bw), "12.3");
        assert_eq!(fmt_ratio(None), "–");
        assert_eq!(fmt_ratio(Some(1.234)), "1.23");
        assert_eq!(fmt_duration(1290.0), "21 min 30 s");
        assert_eq!(fmt_duration(42.4), "42 s");
        assert_eq!(
            short_start_line(
                "FUSE-BENCH-DAEMON READY transport=dev pid=12 mountpoint=/m threads=2"
            ),
            "transport=dev threads=2"
        );
    }

    #[test]
    fn daemon_table() {
        let mut r = report(&[
            ("native", "read", &[100.0]),
            ("ours:dev/sync", "read", &[50.0]),
            ("ours:dev/sync", "stat", &[40.0]),
            ("libfuse", "read", &[40.0]),
        ]);
        r.workloads[1].kind = crate::bench::config::WorkloadKind::Meta;
        r.workloads[1].meta = Some("stat".into());
        for s in r.samples.iter_mut().filter(|s| s.target == "ours:dev/sync") {
            s.daemon = Some(DaemonSample {
                rss_peak_kib: Some(if s.workload == "read" {
                    12 * 1024 + 512
                } else {
                    3 * 1024
                }),
                threads: Some(2),
                cpu_secs: Some(0.25),
                cpu_us_per_op: (s.workload == "stat").then_some(7.256),
            });
        }
        let t = super::daemon_table(&r);
        assert_eq!(
            t,
            "| target | RSS MiB, data | RSS MiB, metadata | threads, data | threads, metadata | \
             CPU µs/op, stat |\n|---|---:|---:|---:|---:|---:|\n\
             | ours:dev/sync | 12.5 | 3.0 | 2 | 2 | 7.26 |\n"
        );
        let md = markdown(&r);
        assert!(
            md.contains("## Daemon memory, threads and CPU per operation"),
            "{md}"
        );
        assert!(docs_section(&r).contains("#### Daemon memory"));
        assert_eq!(
            daemon_note(r.samples[1].daemon.as_ref().unwrap()),
            "   (daemon: RSS 12.5 MiB, 2 threads, CPU 0.25 s)"
        );
        assert_eq!(fmt_us(123.4), "123");
        assert_eq!(fmt_count(2.5), "2.5");
    }

    /// What a failed libfuse sample of `stat` says in the tests (with
    /// characters XML must escape).
    const STAT_FAILURE: &str = "\"fio\" failed (exit status: 1): <stdin> & fio: io_u error on \
         file /srv/fuse-rs/target/bench/work/mnt/data-1024m-256m/bench.data: Invalid argument: \
         write offset=0, buflen=4096";

    #[test]
    fn markdown_has_every_part() {
        let mut r = report(&[READS.as_slice(), &[("native", "stat", &[200.0])]].concat());
        r.samples.push(crate::bench::results::Sample::failed(
            "libfuse",
            "stat",
            0,
            STAT_FAILURE.into(),
            "2026-01-01T00:00:00Z".into(),
            None,
        ));
        r.summarize();
        r.evaluate_goals(&[crate::bench::config::Goal {
            text: "faster than libfuse".into(),
            subject: "ours:dev/sync".into(),
            baseline: "libfuse".into(),
            workloads: vec!["*".into()],
            min_ratio: 1.1,
        }]);
        let md = markdown(&r);
        assert!(
            md.contains("| read (IOPS) | native | 110 | 100–120 | 3 | 1.00 | 2.50 |"),
            "{md}"
        );
        assert!(
            md.contains("|  | ours:dev/sync | 55 | 50–60 | 3 | 0.50 | 1.25 |"),
            "{md}"
        );
        assert!(md.contains("| fuser | unusable |"), "{md}");
        assert!(md.contains(
            "| faster than libfuse | ours:dev/sync | libfuse | read | 1.25 | 1.00–1.50 | ≥ 1.10 | \
             met (the range crosses it: noise decides) |"
        ), "{md}");
        assert!(
            md.contains("- faster than libfuse: **met where measured** (1 of 1; 1 not measured)"),
            "{md}"
        );
        assert!(
            !md.contains("Daemon memory"),
            "no daemon figures, no table: {md}"
        );
        let svg = svg(&r, "read").unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("ours:dev/sync"));
        assert!(svg.contains("0.50× native"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(!svg.contains("failed"), "{svg}");
        r.workloads
            .push(crate::bench::results::tests::workload("write", "data"));
        assert!(
            crate::bench::report::svg(&r, "write").is_none(),
            "no samples, no chart"
        );
        assert!(!has_own_failures(&r), "only a peer failed");

        // The target that failed `stat` has a row saying so, with the
        // reason, in the table and on the chart.
        let short = "\"fio\" failed (exit status: 1): <stdin> & fio: io_u error on file \
                     …/bench.data: Invalid argument: write offset=0, buflen=4096";
        let cut = |n: usize| format!("{}…", short.chars().take(n - 1).collect::<String>());
        assert_eq!(short_reason(STAT_FAILURE, 200), short);
        assert!(
            md.contains(&format!(
                "|  | libfuse | failed: {} | – | 0 (1 failed) | – | – |",
                cut(TABLE_REASON_CHARS)
            )),
            "{md}"
        );
        assert!(
            md.contains(&format!("- libfuse / stat (round 1): {STAT_FAILURE}")),
            "the whole reason in the failures list: {md}"
        );
        let svg = crate::bench::report::svg(&r, "stat").unwrap();
        assert!(svg.contains(">native</text>"), "{svg}");
        assert!(svg.contains(">libfuse</text>"), "{svg}");
        assert!(
            svg.contains(&format!(
                "<tspan font-weight=\"bold\">failed</tspan><tspan font-size=\"11\">: {}</tspan>",
                xml(&cut(CHART_REASON_CHARS))
            )),
            "{svg}"
        );
        assert!(
            svg.contains(
                "&quot;fio&quot; failed (exit status: 1): &lt;stdin&gt; &amp; fio: io_u error on"
            ),
            "{svg}"
        );
        assert!(
            svg.contains("<title>&quot;fio&quot; failed")
                && svg.contains("/srv/fuse-rs/target/bench/work/mnt/data-1024m-256m/bench.data"),
            "the whole reason is the row's tooltip: {svg}"
        );
        assert!(
            !svg.contains("<stdin>") && !svg.contains("\"fio\""),
            "{svg}"
        );
        let mut rest = svg.as_str();
        while let Some(i) = rest.find('&') {
            rest = &rest[i + 1..];
            assert!(
                ["amp;", "lt;", "gt;", "quot;"]
                    .iter()
                    .any(|e| rest.starts_with(e)),
                "a bare & in {svg}"
            );
        }
    }

    #[test]
    fn failure_reasons_are_shortened() {
        assert_eq!(
            short_reason("starting \"/a/b/fio\": No such file or directory", 80),
            "starting \"…/fio\": No such file or directory"
        );
        assert_eq!(
            short_reason(
                "a  multi-line\nreason at /x/y/z/ and err=22/file:io_u.c",
                80
            ),
            "a multi-line reason at …/z and err=22/file:io_u.c",
            "one line; only absolute paths are cut"
        );
        assert_eq!(short_reason("/tmp", 80), "/tmp", "not much of a path");
        assert_eq!(short_reason("één twee drie", 9), "één twee…");
        assert_eq!(short_reason("one two three", 8), "one two…");
        assert_eq!(short_reason("one two three", 13), "one two three");
    }
}
