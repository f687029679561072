//! The files under `benches/`: workloads and run settings
//! (`workloads.toml`), regression thresholds (`thresholds.toml`), speed goals
//! (`goals.toml`) and peers (`peers.toml`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// How a workload is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// A fio job file.
    Fio,
    /// A `fuse-bench-meta` workload.
    Meta,
}

/// What number a workload reports (higher is better for both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Operations (or entries, files) per second.
    Iops,
    /// MiB per second.
    Bw,
}

/// One workload of `benches/workloads.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Name, unique.
    pub name: String,
    /// How it runs.
    pub kind: WorkloadKind,
    /// fio: the job file, relative to `benches/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// meta: the `fuse-bench-meta` kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<String>,
    /// The number reported.
    pub metric: Metric,
    /// The unit shown in tables.
    pub unit: String,
    /// "data" or "metadata" (regression thresholds).
    pub group: String,
    /// Sync and drop the page, dentry and inode caches right before.
    #[serde(default)]
    pub drop_caches: bool,
    /// One line saying what it does.
    pub description: String,
}

impl Workload {
    /// Whether this is one of the metadata workloads over the shared
    /// directory (create … delete).
    pub fn is_meta(&self) -> bool {
        self.kind == WorkloadKind::Meta
    }

    /// Whether this is a first listing (`fuse-bench-meta first-list`): it
    /// runs in its own directory, laid out in the backing directory
    /// before the mount, not in the shared one that create fills.
    pub fn is_first_list(&self) -> bool {
        self.is_meta() && self.meta.as_deref() == Some(FIRST_LIST)
    }
}

/// The `fuse-bench-meta` kind of the first-listing workloads.
pub const FIRST_LIST: &str = "first-list";

impl Workload {
    /// Whether this workload works in the shared metadata directory (and
    /// needs create to have filled it).
    pub fn uses_meta_dir(&self) -> bool {
        self.is_meta() && !self.is_first_list()
    }
}

/// Run length and sizes, as written in the file (sizes as "1G", "128M").
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    runtime: f64,
    ramp: f64,
    repeats: u32,
    nrfiles: usize,
    file_size: String,
    cached_size: String,
    cold_size: String,
}

/// Run length and sizes of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Measured seconds per time-based workload.
    pub runtime: f64,
    /// Seconds run first and discarded.
    pub ramp: f64,
    /// Runs of every (target, workload).
    pub repeats: u32,
    /// Entries of the metadata directory.
    pub nrfiles: usize,
    /// Size of `bench.data` in bytes.
    pub file_size: u64,
    /// Region of `bench.data` used by the cached random workloads.
    pub cached_size: u64,
    /// Size of each cold-cache file.
    pub cold_size: u64,
}

impl TryFrom<RawSettings> for Settings {
    type Error = anyhow::Error;

    fn try_from(r: RawSettings) -> Result<Settings> {
        let s = Settings {
            runtime: r.runtime,
            ramp: r.ramp,
            repeats: r.repeats,
            nrfiles: r.nrfiles,
            file_size: parse_size(&r.file_size)?,
            cached_size: parse_size(&r.cached_size)?,
            cold_size: parse_size(&r.cold_size)?,
        };
        s.validate()?;
        Ok(s)
    }
}

impl Settings {
    /// Checks that the numbers make sense.
    pub fn validate(&self) -> Result<()> {
        if !(self.runtime > 0.0 && self.runtime.is_finite()) {
            bail!("runtime must be > 0 seconds, not {}", self.runtime);
        }
        if !(self.ramp >= 0.0 && self.ramp.is_finite()) {
            bail!("ramp must be >= 0 seconds, not {}", self.ramp);
        }
        if self.repeats == 0 {
            bail!("repeats must be at least 1");
        }
        if self.nrfiles == 0 {
            bail!("nrfiles must be at least 1");
        }
        if self.cached_size > self.file_size {
            bail!("cached_size must not exceed file_size");
        }
        for (what, n) in [
            ("file_size", self.file_size),
            ("cached_size", self.cached_size),
            ("cold_size", self.cold_size),
        ] {
            if n < 1 << 20 || n % 4096 != 0 {
                bail!("{what} must be a multiple of 4 KiB and at least 1 MiB, not {n}");
            }
        }
        Ok(())
    }
}

/// Parses a size: a number of bytes with an optional K, M, G or T suffix
/// (powers of 1024; an optional trailing "iB" or "B").
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => bail!("bad size {s:?}: unknown suffix {c:?}"),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad size {s:?}"))?;
    n.checked_mul(1u64 << shift)
        .with_context(|| format!("size {s:?} is too large"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkloadFile {
    settings: RawSettings,
    quick: RawSettings,
    workload: Vec<Workload>,
}

/// `benches/workloads.toml`.
#[derive(Debug, Clone)]
pub struct WorkloadFile {
    /// Settings of a full run.
    pub settings: Settings,
    /// Settings of `--quick`.
    pub quick: Settings,
    /// The workloads, in run order.
    pub workloads: Vec<Workload>,
}

impl WorkloadFile {
    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<WorkloadFile> {
        let raw: RawWorkloadFile = toml::from_str(text)?;
        let file = WorkloadFile {
            settings: raw.settings.try_into().context("[settings]")?,
            quick: raw.quick.try_into().context("[quick]")?,
            workloads: raw.workload,
        };
        let mut seen = std::collections::HashSet::new();
        for w in &file.workloads {
            if !seen.insert(w.name.as_str()) {
                bail!("workload {:?} is defined twice", w.name);
            }
            match w.kind {
                WorkloadKind::Fio if w.job.is_none() => {
                    bail!("fio workload {:?} has no job file", w.name)
                }
                WorkloadKind::Meta if w.meta.is_none() => {
                    bail!("meta workload {:?} has no meta kind", w.name)
                }
                _ => {}
            }
        }
        Ok(file)
    }

    /// Reads `benches/workloads.toml`.
    pub fn load(benches: &Path) -> Result<WorkloadFile> {
        load_with(benches, "workloads.toml", Self::parse)
    }
}

/// `benches/thresholds.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// Threshold of a workload named nowhere else.
    pub default: f64,
    /// Per workload group.
    #[serde(default)]
    pub groups: BTreeMap<String, f64>,
    /// Per workload.
    #[serde(default)]
    pub workloads: BTreeMap<String, f64>,
}

impl Thresholds {
    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Thresholds> {
        let t: Thresholds = toml::from_str(text)?;
        for v in std::iter::once(&t.default)
            .chain(t.groups.values())
            .chain(t.workloads.values())
        {
            if !(0.0..1.0).contains(v) {
                bail!("thresholds are fractions in [0, 1), not {v}");
            }
        }
        Ok(t)
    }

    /// Reads `benches/thresholds.toml`.
    pub fn load(benches: &Path) -> Result<Thresholds> {
        load_with(benches, "thresholds.toml", Self::parse)
    }

    /// The threshold of a workload (by name and group).
    pub fn for_workload(&self, name: &str, group: Option<&str>) -> f64 {
        self.workloads
            .get(name)
            .or_else(|| group.and_then(|g| self.groups.get(g)))
            .copied()
            .unwrap_or(self.default)
    }
}

/// One speed goal of `benches/goals.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    /// What the goal says.
    pub text: String,
    /// The target measured.
    pub subject: String,
    /// The target it is measured against.
    pub baseline: String,
    /// Workload names, or `["*"]` for every workload of the run.
    pub workloads: Vec<String>,
    /// Smallest median ratio subject / baseline that meets the goal.
    pub min_ratio: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GoalFile {
    goal: Vec<Goal>,
}

/// Parses `benches/goals.toml`'s text.
pub fn parse_goals(text: &str) -> Result<Vec<Goal>> {
    Ok(toml::from_str::<GoalFile>(text)?.goal)
}

/// Reads `benches/goals.toml`.
pub fn load_goals(benches: &Path) -> Result<Vec<Goal>> {
    load_with(benches, "goals.toml", parse_goals)
}

/// Reads `benches/<name>` and parses it with `parse`; an error names the
/// file.
fn load_with<T>(benches: &Path, name: &str, parse: impl FnOnce(&str) -> Result<T>) -> Result<T> {
    let path = benches.join(name);
    let text = crate::text::read_text(&path)?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

/// `benches/peers.toml`: where the peers come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peers {
    /// libfuse's low-level passthrough example.
    pub libfuse: LibfusePeer,
    /// fuser's passthrough example.
    pub fuser: FuserPeer,
    /// libfuse master's passthrough_hp.
    #[serde(rename = "libfuse-hp")]
    pub libfuse_hp: LibfuseHpPeer,
}

/// How to build libfuse's `passthrough_ll`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibfusePeer {
    /// The example's source as Debian's libfuse3-dev ships it (`.c`, or
    /// `.c.gz` next to it).
    pub source: String,
    /// Extra gcc flags (before `pkg-config --cflags --libs fuse3`).
    pub cflags: Vec<String>,
}

/// How to build fuser's example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuserPeer {
    /// The crate's version in the crate registry.
    pub version: String,
    /// The example's name.
    pub example: String,
}

/// Where libfuse master's `passthrough_hp` comes from and how it is built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibfuseHpPeer {
    /// The environment variable naming the source (a `.tar.gz` holding
    /// `libfuse/`, or a source tree).
    pub source_var: String,
    /// The tarball's name in `../shared/vendor/` (one `*` allowed), used
    /// when the variable is unset.
    pub tarball: String,
    /// Cloned (`git clone --depth 1`) when there is neither.
    pub upstream: String,
    /// `meson setup` options.
    pub meson_options: Vec<String>,
    /// The ninja target, also the binary's path in the build directory.
    pub target: String,
    /// Debian packages the build needs.
    pub apt_packages: Vec<String>,
}

impl Peers {
    /// Reads `benches/peers.toml`.
    pub fn load(benches: &Path) -> Result<Peers> {
        load_with(benches, "peers.toml", |text| Ok(toml::from_str(text)?))
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of
/// characters (including none) and everything else matches itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with backtracking to the last star.
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The names among `names` that match any of the comma-separated patterns
/// of `list`, in `names`' order; fails on a pattern that matches nothing.
pub fn select<'a>(names: &[&'a str], list: &str) -> Result<Vec<&'a str>> {
    let patterns: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    for p in &patterns {
        if !names.iter().any(|n| glob_match(p, n)) {
            bail!("{p:?} matches none of: {}", names.join(", "));
        }
    }
    Ok(names
        .iter()
        .copied()
        .filter(|n| patterns.iter().any(|p| glob_match(p, n)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_size("128M").unwrap(), 128 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size(" 3 MB").unwrap(), 3 << 20);
        assert!(parse_size("1X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn globs() {
        assert!(glob_match("ours:*", "ours:dev/sync"));
        assert!(glob_match("*", ""));
        assert!(glob_match("ours:*/sync", "ours:uring/sync"));
        assert!(!glob_match("ours:*/sync", "ours:uring/sync+pool"));
        assert!(glob_match("*read*", "randread-4k-cached"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("native", "native"));
        assert!(!glob_match("native", "native2"));
        let names = ["native", "ours:dev/sync", "ours:uring/sync", "libfuse"];
        assert_eq!(
            select(&names, "libfuse, ours:*").unwrap(),
            vec!["ours:dev/sync", "ours:uring/sync", "libfuse"]
        );
        assert!(select(&names, "nothing").is_err());
    }

    #[test]
    fn thresholds_pick_the_most_specific() {
        let t = Thresholds::parse(
            "default = 0.1\n[groups]\nmetadata = 0.25\n[workloads]\n\"cold\" = 0.3\n",
        )
        .unwrap();
        assert_eq!(t.for_workload("cold", Some("data")), 0.3);
        assert_eq!(t.for_workload("stat", Some("metadata")), 0.25);
        assert_eq!(t.for_workload("seqread", Some("data")), 0.1);
        assert_eq!(t.for_workload("x", None), 0.1);
        assert!(Thresholds::parse("default = 1.5").is_err());
    }

    #[test]
    fn the_repository_files_parse() {
        let benches = crate::workspace_root().join("benches");
        let w = WorkloadFile::load(&benches).unwrap();
        assert!(w.workloads.len() >= 14);
        for wl in &w.workloads {
            if let Some(job) = &wl.job {
                assert!(benches.join(job).is_file(), "{job} missing");
            }
        }
        let t = Thresholds::load(&benches).unwrap();
        assert_eq!(t.for_workload("create", Some("metadata")), 0.25);
        let goals = load_goals(&benches).unwrap();
        let names: Vec<&str> = w.workloads.iter().map(|w| w.name.as_str()).collect();
        for g in &goals {
            for wl in &g.workloads {
                assert!(wl == "*" || names.contains(&wl.as_str()), "{wl}");
            }
        }
        let peers = Peers::load(&benches).unwrap();
        assert_eq!(peers.libfuse_hp.source_var, "LIBFUSE_SRC");
        assert!(peers
            .libfuse_hp
            .meson_options
            .contains(&"-Dexamples=true".to_string()));
    }

    #[test]
    fn bad_workload_files_are_refused() {
        let settings = "[settings]\nruntime = 1.0\nramp = 0.0\nrepeats = 1\nnrfiles = 1\n\
                        file_size = \"1M\"\ncached_size = \"1M\"\ncold_size = \"1M\"\n";
        let quick = settings.replace("[settings]", "[quick]");
        let ok = format!(
            "{settings}{quick}[[workload]]\nname = \"a\"\nkind = \"fio\"\njob = \"x.fio\"\n\
             metric = \"iops\"\nunit = \"IOPS\"\ngroup = \"data\"\ndescription = \"d\"\n"
        );
        let f = WorkloadFile::parse(&ok).unwrap();
        assert_eq!(f.settings.file_size, 1 << 20);
        assert!(
            WorkloadFile::parse(&format!("{ok}{}", &ok[ok.find("[[workload]]").unwrap()..]))
                .is_err()
        );
        assert!(WorkloadFile::parse(&ok.replace("job = \"x.fio\"\n", "")).is_err());
        assert!(WorkloadFile::parse(&ok.replace("repeats = 1", "repeats = 0")).is_err());
        assert!(WorkloadFile::parse(&ok.replace("metric = \"iops\"", "metric = \"x\"")).is_err());
    }
}
