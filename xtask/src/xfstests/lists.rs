//! The test lists in `xtask/xfstests/`: which tests `cargo xtask test` runs
//! in which mode (`curated.txt`) and which tests are left out and why
//! (`excluded.txt`).
//!
//! Both are plain text, one test per line, `#` starts a comment:
//!
//! ```text
//! # curated.txt: TEST MODE...   (modes: dev, uring, uring-pool, or all)
//! generic/001  all
//! generic/002  dev
//! # excluded.txt: TEST [MODE...] # reason   (no mode: every mode)
//! generic/020  # needs 1000 xattrs; ext4 holds about 110
//! ```

use super::Mode;
use crate::text::read_text;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::Path;

/// `xtask/xfstests/curated.txt` under the workspace root.
const CURATED: &str = "xtask/xfstests/curated.txt";
/// `xtask/xfstests/excluded.txt` under the workspace root.
const EXCLUDED: &str = "xtask/xfstests/excluded.txt";

/// Fails unless `name` looks like an xfstests test (`generic/001`).
pub fn check_name(name: &str) -> Result<()> {
    let ok = name.split_once('/').is_some_and(|(group, num)| {
        !group.is_empty()
            && group
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && !num.is_empty()
            && num.bytes().all(|b| b.is_ascii_digit())
    });
    if !ok {
        bail!("`{name}` is not a test name like generic/001");
    }
    Ok(())
}

/// Parses a mode list (`all` or mode names).
fn parse_modes(words: &[&str], what: &str) -> Result<Vec<Mode>> {
    let mut modes = Vec::new();
    for w in words {
        if *w == "all" {
            modes.extend(Mode::ALL);
        } else {
            modes.push(Mode::from_name(w).with_context(|| {
                format!("{what}: unknown mode `{w}` (dev, uring, uring-pool, all)")
            })?);
        }
    }
    modes.sort_by_key(|m| Mode::ALL.iter().position(|a| a == m));
    modes.dedup();
    Ok(modes)
}

/// The curated lists.
pub struct Curated {
    /// Each test and the modes it runs in, in file order.
    entries: Vec<(String, Vec<Mode>)>,
}

impl Curated {
    /// Reads `xtask/xfstests/curated.txt`.
    pub fn load(root: &Path) -> Result<Self> {
        Self::parse(&read_text(&root.join(CURATED))?).with_context(|| format!("in {CURATED}"))
    }

    /// Parses the text of `curated.txt`.
    fn parse(text: &str) -> Result<Self> {
        let mut entries: Vec<(String, Vec<Mode>)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let what = format!("line {}", n + 1);
            check_name(words[0]).context(what.clone())?;
            if words.len() < 2 {
                bail!("{what}: {} has no modes", words[0]);
            }
            if entries.iter().any(|(t, _)| t == words[0]) {
                bail!("{what}: {} is listed twice", words[0]);
            }
            entries.push((words[0].to_string(), parse_modes(&words[1..], &what)?));
        }
        Ok(Curated { entries })
    }

    /// The tests of `mode`, in file order. One ring per queue
    /// (`uring-one-ring`, run only when named) has no list of its own and
    /// runs the `uring` one: the same transport and data path.
    pub fn tests(&self, mode: Mode) -> Vec<String> {
        let listed = match mode {
            Mode::UringOneRing => Mode::Uring,
            m => m,
        };
        self.entries
            .iter()
            .filter(|(_, modes)| modes.contains(&listed))
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Fails if a curated test is also excluded in the same mode.
    pub fn check_against(&self, excluded: &Excluded) -> Result<()> {
        for (t, modes) in &self.entries {
            for &m in modes {
                if let Some(reason) = excluded.reason(t, m) {
                    bail!(
                        "{t} is curated for {} but excluded there ({reason})",
                        m.name()
                    );
                }
            }
        }
        Ok(())
    }
}

/// The tests left out, with their reasons.
pub struct Excluded {
    /// Test, modes (empty: all), reason.
    entries: Vec<(String, Vec<Mode>, String)>,
}

impl Excluded {
    /// Reads `xtask/xfstests/excluded.txt`.
    pub fn load(root: &Path) -> Result<Self> {
        Self::parse(&read_text(&root.join(EXCLUDED))?).with_context(|| format!("in {EXCLUDED}"))
    }

    /// Parses the text of `excluded.txt`; every entry needs a reason.
    fn parse(text: &str) -> Result<Self> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let (spec, reason) = match line.split_once('#') {
                Some((s, r)) => (s.trim(), r.trim()),
                None => (line.trim(), ""),
            };
            if spec.is_empty() {
                continue;
            }
            let what = format!("line {}", n + 1);
            let words: Vec<&str> = spec.split_whitespace().collect();
            check_name(words[0]).context(what.clone())?;
            if reason.is_empty() {
                bail!("{what}: {} has no reason (`# why`)", words[0]);
            }
            let modes = parse_modes(&words[1..], &what)?;
            entries.push((words[0].to_string(), modes, reason.to_string()));
        }
        Ok(Excluded { entries })
    }

    /// Why `test` is excluded in `mode`, if it is.
    pub fn reason(&self, test: &str, mode: Mode) -> Option<&str> {
        self.entries
            .iter()
            .find(|(t, modes, _)| t == test && (modes.is_empty() || modes.contains(&mode)))
            .map(|(_, _, r)| r.as_str())
    }
}

impl Excluded {
    /// Whether `test` must never run in `mode` (its reason starts with
    /// `danger:`, e.g. it fills the file system, which is the machine's).
    pub fn is_dangerous(&self, test: &str, mode: Mode) -> bool {
        self.reason(test, mode)
            .is_some_and(|r| r.starts_with("danger:"))
    }
}

/// Every test of the generic group in the built tree, in order.
pub fn whole_group(tree: &Path) -> Result<Vec<String>> {
    let dir = tree.join("tests/generic");
    let mut tests: Vec<String> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|n| format!("generic/{n}"))
        .collect();
    tests.sort();
    Ok(tests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_curated() {
        let c = Curated::parse("# c\ngeneric/001 all\ngeneric/002 dev # x\n\n").unwrap();
        assert_eq!(c.tests(Mode::Dev), ["generic/001", "generic/002"]);
        assert_eq!(c.tests(Mode::Uring), ["generic/001"]);
        assert_eq!(c.tests(Mode::UringOneRing), ["generic/001"]);
        assert!(Curated::parse("generic/001\n").is_err());
        assert!(Curated::parse("generic/001 dev\ngeneric/001 uring\n").is_err());
        assert!(Curated::parse("generic/001 fast\n").is_err());
    }

    #[test]
    fn parses_excluded() {
        let e = Excluded::parse("generic/020 # too many xattrs\ngeneric/030 uring # flaky: x\n")
            .unwrap();
        assert_eq!(
            e.reason("generic/020", Mode::UringPool),
            Some("too many xattrs")
        );
        assert_eq!(e.reason("generic/030", Mode::Uring), Some("flaky: x"));
        assert_eq!(e.reason("generic/030", Mode::Dev), None);
        assert!(Excluded::parse("generic/020\n").is_err());
    }

    #[test]
    fn curated_and_excluded_must_not_overlap() {
        let c = Curated::parse("generic/001 all\n").unwrap();
        let e = Excluded::parse("generic/001 uring # no\n").unwrap();
        assert!(c.check_against(&e).is_err());
    }

    #[test]
    fn test_names() {
        assert!(check_name("generic/001").is_ok());
        assert!(check_name("generic/").is_err());
        assert!(check_name("generic/00a").is_err());
        assert!(check_name("../x/1").is_err());
    }
}
