//! What a run writes out: `results.json`, `report.md` and the charts of
//! its directory, and the generated part of docs/benchmarks.md.

use super::file_safe;
use super::report;
use super::results::RunReport;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Writes `results.json`, `report.md` and the charts into `dir`.
pub(super) fn write_outputs(report: &RunReport, dir: &Path, json: bool) -> Result<()> {
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
pub(super) fn update_docs(report: &RunReport, docs: &Path) -> Result<()> {
    let text = crate::text::read_text(docs)?;
    let generated = crate::text::repo_relative(&report::docs_section(report));
    let new = splice_docs(&text, &generated).with_context(|| format!("in {}", docs.display()))?;
    std::fs::write(docs, new).with_context(|| format!("writing {}", docs.display()))?;
    println!("bench: updated {}", docs.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
