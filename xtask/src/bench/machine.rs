//! What a run records about the machine: CPU, cores, memory, kernel, git
//! revision, date.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The machine a run ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model (`model name` of /proc/cpuinfo).
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cores: usize,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The workspace's git revision (read from `.git`, without running git).
    pub git_revision: Option<String>,
    /// Host name.
    pub hostname: String,
    /// fio's version.
    pub fio_version: Option<String>,
    /// Whether FUSE over io_uring was enabled (`enable_uring`).
    pub fuse_enable_uring: Option<String>,
}

impl Machine {
    /// Gathers the facts; unknown ones are "unknown" or `None`.
    pub fn detect(root: &Path) -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        Machine {
            cpu_model: read("/proc/cpuinfo")
                .and_then(|t| cpu_model(&t))
                .unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_bytes: read("/proc/meminfo")
                .and_then(|t| mem_total(&t))
                .unwrap_or(0),
            kernel: read("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|| "unknown".into()),
            git_revision: git_revision(&root.join(".git")),
            hostname: read("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            fio_version: std::process::Command::new("fio")
                .arg("--version")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
            fuse_enable_uring: read("/sys/module/fuse/parameters/enable_uring")
                .map(|s| s.trim().to_string()),
        }
    }

    /// One line for reports.
    pub fn one_line(&self) -> String {
        format!(
            "{}, {} cores, {:.1} GiB, Linux {}, git {}",
            self.cpu_model,
            self.cores,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.kernel,
            self.git_revision
                .as_deref()
                .map_or("unknown", |r| &r[..r.len().min(12)])
        )
    }
}

/// The 1-minute load average (first field of /proc/loadavg).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The first `model name` of /proc/cpuinfo.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// `MemTotal` of /proc/meminfo, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The commit `HEAD` points at, read from the git directory's files
/// (`HEAD`, the ref it names, or `packed-refs`).
pub fn git_revision(git_dir: &Path) -> Option<String> {
    // A worktree or submodule has a `.git` file pointing elsewhere.
    let git_dir = match std::fs::read_to_string(git_dir) {
        Ok(text) => {
            let target = text.trim().strip_prefix("gitdir:")?.trim();
            git_dir.parent()?.join(target)
        }
        Err(_) => git_dir.to_path_buf(),
    };
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    let head = head.trim();
    let Some(reference) = head.strip_prefix("ref:") else {
        return is_hash(head).then(|| head.to_string());
    };
    let reference = reference.trim();
    if let Ok(hash) = std::fs::read_to_string(git_dir.join(reference)) {
        let hash = hash.trim();
        return is_hash(hash).then(|| hash.to_string());
    }
    let packed = std::fs::read_to_string(git_dir.join("packed-refs")).ok()?;
    packed_ref(&packed, reference)
}

/// The hash of `reference` in a `packed-refs` file.
pub fn packed_ref(packed: &str, reference: &str) -> Option<String> {
    packed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| l.split_once(' '))
        .find(|(_, name)| name.trim() == reference)
        .map(|(hash, _)| hash.to_string())
        .filter(|h| is_hash(h))
}

fn is_hash(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Seconds since the epoch, now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// (year, month, day, hour, minute, second) in UTC of a Unix time.
pub fn civil_utc(unix: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (unix / 86400) as i64;
    let secs = (unix % 86400) as u32;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, secs / 3600, secs / 60 % 60, secs % 60)
}

/// `2026-11-30T06:40:12Z`.
pub fn iso_utc(unix: u64) -> String {
    let (y, mo, d, h, mi, s) = civil_utc(unix);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `20261130-064012`, for directory names.
pub fn stamp_utc(unix: u64) -> String {
    let (y, mo, d, h, mi, s) = civil_utc(unix);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(iso_utc(4_102_444_799), "2099-12-31T23:59:59Z");
        assert_eq!(stamp_utc(1_700_000_000), "20231114-221320");
    }

    #[test]
    fn proc_files() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("nothing"), None);
        assert_eq!(
            mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn git_refs() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).unwrap();
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(git_revision(&git), None);
        std::fs::write(
            git.join("packed-refs"),
            format!("# pack-refs with: peeled\n{b} refs/heads/other\n{a} refs/heads/main\n^{b}\n"),
        )
        .unwrap();
        assert_eq!(git_revision(&git), Some(a.clone()));
        std::fs::write(git.join("refs/heads/main"), format!("{b}\n")).unwrap();
        assert_eq!(git_revision(&git), Some(b.clone()));
        std::fs::write(git.join("HEAD"), format!("{a}\n")).unwrap();
        assert_eq!(git_revision(&git), Some(a));
        assert_eq!(git_revision(&dir.path().join("missing")), None);
    }
}
