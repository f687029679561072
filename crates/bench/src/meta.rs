//! Metadata workloads (`fuse-bench-meta`): file create, readdir, readdir
//! with stat, stat and file delete over a directory of `files` entries,
//! with results written as fio-shaped JSON so that the harness treats them
//! like fio's.
//!
//! fio has no readdir engine, and its `filecreate`, `filestat` and
//! `filedelete` engines spend most of their time in fio's own per-file
//! bookkeeping (on this project's machines, fio's `filestat` managed about
//! 26,000 stats/s on native ext4 where a plain `fstatat` loop does over
//! 300,000/s, and `filedelete` 4,600 unlinks/s where a loop does 120,000/s):
//! they would measure fio, not the file system. These loops make one
//! system call per operation and nothing else.
//!
//! - [`Kind::Create`]: `openat(O_CREAT|O_EXCL|O_WRONLY)` + `close` of
//!   `f.0` … `f.N-1` (count-based: the run lasts as long as it takes).
//! - [`Kind::Readdir`]: open the directory, `getdents64` until the end,
//!   close; again and again, for a ramp (discarded) and a measured window.
//!   Entries per second (`.` and `..` not counted).
//! - [`Kind::ReaddirStat`]: the same, with `fstatat` of every entry (what
//!   `ls -l` does). Entries per second.
//! - [`Kind::Stat`]: `fstatat` of the N files in a fixed shuffled order,
//!   again and again, for a ramp and a measured window. With attribute
//!   caching, most of these are answered by the kernel's cache.
//! - [`Kind::StatUncached`]: the same with `statx(AT_STATX_FORCE_SYNC)`,
//!   which makes a FUSE kernel ask the daemon (GETATTR) on every call: the
//!   round trip of one small request (a no-op hint for local file systems).
//! - [`Kind::Delete`]: `unlinkat` of the N files (count-based).
//! - [`Kind::FirstList`]: one pass of the readdir-stat loop over a
//!   directory the file system hasn't been asked about since it was
//!   mounted (or since its caches were dropped): what `ls -l`, `find`,
//!   `du` or `git status` pay first. Count-based (one pass, timed whole);
//!   entries per second. The caller lays the directory out beforehand.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// One of the metadata workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Create N empty files.
    Create,
    /// List the directory with getdents64, repeatedly.
    Readdir,
    /// List the directory and stat every entry, repeatedly.
    ReaddirStat,
    /// Stat the N files, repeatedly.
    Stat,
    /// Stat the N files with `AT_STATX_FORCE_SYNC`, repeatedly.
    StatUncached,
    /// Delete the N files.
    Delete,
    /// List a directory seen for the first time and stat every entry,
    /// once.
    FirstList,
}

impl Kind {
    /// The workload's name (also the fio-shaped job name).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Readdir => "readdir",
            Kind::ReaddirStat => "readdir-stat",
            Kind::Stat => "stat",
            Kind::StatUncached => "stat-uncached",
            Kind::Delete => "delete",
            Kind::FirstList => "first-list",
        }
    }

    /// Whether the workload runs for a ramp and a measured window (rather
    /// than a fixed number of operations).
    pub fn time_based(self) -> bool {
        matches!(
            self,
            Kind::Readdir | Kind::ReaddirStat | Kind::Stat | Kind::StatUncached
        )
    }

    /// Whether the workload changes the directory (reported as writes).
    pub fn writes(self) -> bool {
        matches!(self, Kind::Create | Kind::Delete)
    }
}

/// How to run a workload.
#[derive(Debug, Clone)]
pub struct Options {
    /// The directory worked in.
    pub dir: std::path::PathBuf,
    /// Number of files (`f.0` … `f.N-1`).
    pub files: usize,
    /// Time-based workloads: time run first and discarded.
    pub ramp: Duration,
    /// Time-based workloads: the measured window.
    pub runtime: Duration,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Which workload.
    pub kind: Kind,
    /// Operations in the measured window (entries for the readdir kinds).
    pub ops: u64,
    /// Length of the measured window.
    pub elapsed: Duration,
    /// Directory passes in the measured window (readdir kinds, stat).
    pub passes: u64,
    /// Operations of the ramp before the window (time-based kinds): with
    /// `ops`, everything the process did, for a cost per operation
    /// measured from outside it.
    pub ramp_ops: u64,
    /// Latency of single operations, when each was timed (count-based kinds).
    pub latency: Option<Latency>,
}

impl Outcome {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ops as f64 / secs
        } else {
            0.0
        }
    }
}

/// Latency statistics of single operations, in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Latency {
    /// Smallest.
    pub min: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
    /// (percentile, value) for 50, 90, 99, 99.9.
    pub percentiles: Vec<(f64, u64)>,
}

impl Latency {
    /// Statistics of `samples` (nanoseconds); `None` if empty.
    pub fn from_samples(mut samples: Vec<u64>) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let sum: u128 = samples.iter().map(|&s| s as u128).sum();
        let pct = |p: f64| {
            // Nearest rank.
            let rank = ((p / 100.0) * n as f64).ceil() as usize;
            samples[rank.clamp(1, n) - 1]
        };
        Some(Latency {
            min: samples[0],
            max: samples[n - 1],
            mean: sum as f64 / n as f64,
            percentiles: [50.0, 90.0, 99.0, 99.9]
                .iter()
                .map(|&p| (p, pct(p)))
                .collect(),
        })
    }
}

/// The name of file `i`.
pub fn file_name(i: usize) -> CString {
    CString::new(format!("f.{i}")).expect("no NUL in a formatted number")
}

use fuse_server::sys::cvt;

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid C string; the returned fd is owned below.
    let fd = cvt(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
    .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))?;
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn create_at(dir: &OwnedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: `dir` is an open directory and `name` a valid C string.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just opened here; closed once.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

fn unlink_at(dir: &OwnedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: `dir` is an open directory and `name` a valid C string.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }).map(|_| ())
}

fn stat_at(dir: libc::c_int, name: *const libc::c_char) -> io::Result<()> {
    // SAFETY: `st` is plain old data for fstatat to fill in; the caller
    // passes an open directory fd and a NUL-terminated name.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    cvt(unsafe { libc::fstatat(dir, name, &mut st, libc::AT_SYMLINK_NOFOLLOW) }).map(|_| ())
}

fn statx_sync(dir: libc::c_int, name: *const libc::c_char) -> io::Result<()> {
    // SAFETY: `st` is plain old data for statx to fill in; the caller
    // passes an open directory fd and a NUL-terminated name.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    cvt(unsafe {
        libc::statx(
            dir,
            name,
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_FORCE_SYNC,
            libc::STATX_BASIC_STATS,
            &mut st,
        )
    })
    .map(|_| ())
}

/// A `getdents64` buffer, 8-byte aligned.
struct DentBuf(Vec<u64>);

impl DentBuf {
    const BYTES: usize = 32 * 1024;

    fn new() -> Self {
        DentBuf(vec![0; Self::BYTES / 8])
    }

    /// One `getdents64`: the number of bytes filled, 0 at the end.
    fn fill(&mut self, fd: libc::c_int) -> io::Result<usize> {
        // SAFETY: the buffer is writable for BYTES bytes.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                self.0.as_mut_ptr() as *mut libc::c_void,
                Self::BYTES,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: `len` <= BYTES, within the Vec's allocation of u64s.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, len) }
    }
}

/// The names (with their NUL) of the `linux_dirent64` records in `buf`:
/// `d_ino` (8), `d_off` (8), `d_reclen` (2), `d_type` (1), then the name.
/// Stops at a malformed record.
pub fn dirent_names(buf: &[u8]) -> impl Iterator<Item = &CStr> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let rec = buf.get(pos..)?;
        let reclen = u16::from_ne_bytes([*rec.get(16)?, *rec.get(17)?]) as usize;
        if reclen < 20 || reclen > rec.len() {
            return None;
        }
        pos += reclen;
        CStr::from_bytes_until_nul(&rec[19..reclen]).ok()
    })
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// One pass over the directory: entries seen (without `.` and `..`).
fn readdir_pass(dir: &Path, buf: &mut DentBuf, stat: bool) -> io::Result<u64> {
    let fd = open_dir(dir)?;
    let mut entries = 0;
    loop {
        let n = buf.fill(fd.as_raw_fd())?;
        if n == 0 {
            return Ok(entries);
        }
        for name in dirent_names(buf.bytes(n)) {
            if is_dot(name) {
                continue;
            }
            if stat {
                stat_at(fd.as_raw_fd(), name.as_ptr())
                    .map_err(|e| io::Error::new(e.kind(), format!("stat of {name:?}: {e}")))?;
            }
            entries += 1;
        }
    }
}

/// A small deterministic PRNG (xorshift64*), for the stat order.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        let r = seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
        items.swap(i, (r % (i as u64 + 1)) as usize);
    }
}

/// What [`timed`] counted.
struct Timed {
    ops: u64,
    passes: u64,
    elapsed: Duration,
    ramp_ops: u64,
}

impl Timed {
    /// The outcome of a time-based `kind`: its operations were not timed
    /// one by one, so no latency.
    fn outcome(self, kind: Kind) -> Outcome {
        Outcome {
            kind,
            ops: self.ops,
            elapsed: self.elapsed,
            passes: self.passes,
            ramp_ops: self.ramp_ops,
            latency: None,
        }
    }
}

/// Runs `step` (which returns operations done) for the ramp, then for the
/// measured window; returns the window's ops, passes and length, and the
/// ramp's ops.
fn timed(opts: &Options, mut step: impl FnMut() -> io::Result<u64>) -> io::Result<Timed> {
    let start = Instant::now();
    let mut ramp_ops = 0;
    while start.elapsed() < opts.ramp {
        ramp_ops += step()?;
    }
    let start = Instant::now();
    let (mut ops, mut passes) = (0, 0);
    loop {
        ops += step()?;
        passes += 1;
        let elapsed = start.elapsed();
        if elapsed >= opts.runtime {
            return Ok(Timed {
                ops,
                passes,
                elapsed,
                ramp_ops,
            });
        }
    }
}

/// Runs one workload.
pub fn run(kind: Kind, opts: &Options) -> io::Result<Outcome> {
    let names: Vec<CString> = (0..opts.files).map(file_name).collect();
    match kind {
        Kind::Create | Kind::Delete => {
            let dir = open_dir(&opts.dir)?;
            let mut lat = Vec::with_capacity(names.len());
            let start = Instant::now();
            for name in &names {
                let t = Instant::now();
                let r = if kind == Kind::Create {
                    create_at(&dir, name)
                } else {
                    unlink_at(&dir, name)
                };
                lat.push(t.elapsed().as_nanos() as u64);
                r.map_err(|e| {
                    io::Error::new(e.kind(), format!("{} of {name:?}: {e}", kind.name()))
                })?;
            }
            let elapsed = start.elapsed();
            Ok(Outcome {
                kind,
                ops: names.len() as u64,
                elapsed,
                passes: 1,
                ramp_ops: 0,
                latency: Latency::from_samples(lat),
            })
        }
        Kind::FirstList => {
            let mut buf = DentBuf::new();
            let start = Instant::now();
            let ops = readdir_pass(&opts.dir, &mut buf, true)?;
            let elapsed = start.elapsed();
            if ops != opts.files as u64 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("listed {ops} entries, expected {}", opts.files),
                ));
            }
            Ok(Outcome {
                kind,
                ops,
                elapsed,
                passes: 1,
                ramp_ops: 0,
                latency: None,
            })
        }
        Kind::Readdir | Kind::ReaddirStat => {
            let mut buf = DentBuf::new();
            let stat = kind == Kind::ReaddirStat;
            let t = timed(opts, || readdir_pass(&opts.dir, &mut buf, stat))?;
            Ok(t.outcome(kind))
        }
        Kind::Stat | Kind::StatUncached => {
            if names.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "stat needs at least one file",
                ));
            }
            let dir = open_dir(&opts.dir)?;
            let mut order = names.iter().map(|n| n.as_ptr()).collect::<Vec<_>>();
            shuffle(&mut order, 0x9e37_79b9_7f4a_7c15);
            let stat = if kind == Kind::Stat {
                stat_at
            } else {
                statx_sync
            };
            let t = timed(opts, || {
                for &name in &order {
                    stat(dir.as_raw_fd(), name)?;
                }
                Ok(order.len() as u64)
            })?;
            Ok(t.outcome(kind))
        }
    }
}

/// The outcome as fio's JSON output (`--output-format=json`) has it: one
/// job named after the workload, its operations per second as `iops` of
/// `read` (listing, stat) or `write` (create, delete), latencies in
/// nanoseconds, runtimes in milliseconds. A `bench` object carries what fio
/// has no field for.
pub fn fio_json(outcome: &Outcome, opts: &Options) -> serde_json::Value {
    use serde_json::json;
    let runtime_ms = outcome.elapsed.as_millis() as u64;
    let lat = match &outcome.latency {
        Some(l) => json!({
            "min": l.min,
            "max": l.max,
            "mean": l.mean,
            "percentile": l.percentiles.iter()
                .map(|(p, v)| (format!("{p:.6}"), json!(v)))
                .collect::<serde_json::Map<_, _>>(),
        }),
        None => {
            let mean = if outcome.ops > 0 {
                outcome.elapsed.as_nanos() as f64 / outcome.ops as f64
            } else {
                0.0
            };
            json!({ "mean": mean })
        }
    };
    let active = json!({
        "io_bytes": 0,
        "bw_bytes": 0,
        "iops": outcome.ops_per_sec(),
        "runtime": runtime_ms,
        "total_ios": outcome.ops,
        "lat_ns": lat,
    });
    let idle = json!({
        "io_bytes": 0, "bw_bytes": 0, "iops": 0.0, "runtime": 0, "total_ios": 0,
        "lat_ns": { "mean": 0.0 },
    });
    let (read, write) = if outcome.kind.writes() {
        (idle.clone(), active)
    } else {
        (active, idle.clone())
    };
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "fio version": concat!("fuse-bench-meta-", env!("CARGO_PKG_VERSION")),
        "timestamp": timestamp,
        "jobs": [{
            "jobname": outcome.kind.name(),
            "groupid": 0,
            "error": 0,
            "read": read,
            "write": write,
            "trim": idle,
            "job_runtime": runtime_ms,
            "bench": {
                "kind": outcome.kind.name(),
                "directory": opts.dir.display().to_string(),
                "files": opts.files,
                "passes": outcome.passes,
                "ramp_ms": if outcome.kind.time_based() { opts.ramp.as_millis() as u64 } else { 0 },
                "ramp_ops": outcome.ramp_ops,
                "elapsed_ns": outcome.elapsed.as_nanos() as u64,
            },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(dir: &Path, files: usize) -> Options {
        Options {
            dir: dir.to_path_buf(),
            files,
            ramp: Duration::from_millis(20),
            runtime: Duration::from_millis(50),
        }
    }

    #[test]
    fn full_cycle_on_a_real_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let o = opts(tmp.path(), 100);
        let c = run(Kind::Create, &o).unwrap();
        assert_eq!(c.ops, 100);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 100);
        assert!(c.latency.as_ref().unwrap().min <= c.latency.as_ref().unwrap().max);
        // Creating again fails (O_EXCL): the workload never measures a no-op.
        assert!(run(Kind::Create, &o).is_err());
        for kind in [
            Kind::Readdir,
            Kind::ReaddirStat,
            Kind::Stat,
            Kind::StatUncached,
        ] {
            let r = run(kind, &o).unwrap();
            assert!(r.passes >= 1, "{kind:?}");
            assert_eq!(r.ops, 100 * r.passes, "{kind:?}: whole passes of 100");
            assert!(
                r.ramp_ops >= 100 && r.ramp_ops % 100 == 0,
                "{kind:?}: ramp passes"
            );
            assert!(r.elapsed >= o.runtime);
        }
        let first = run(Kind::FirstList, &o).unwrap();
        assert_eq!((first.ops, first.passes, first.ramp_ops), (100, 1, 0));
        // A directory that doesn't hold the N files is an error, not a
        // quick pass.
        assert!(run(Kind::FirstList, &opts(tmp.path(), 101)).is_err());
        let d = run(Kind::Delete, &o).unwrap();
        assert_eq!(d.ops, 100);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        assert!(run(Kind::Stat, &o).is_err(), "stat of missing files fails");
    }

    #[test]
    fn dirent_parsing() {
        // Two records: "." (reclen 24) and "abc" (reclen 24), then garbage.
        let mut buf = vec![0u8; 72];
        for (off, name) in [(0usize, &b"."[..]), (24, &b"abc"[..])] {
            buf[off + 16..off + 18].copy_from_slice(&24u16.to_ne_bytes());
            buf[off + 19..off + 19 + name.len()].copy_from_slice(name);
        }
        buf[48 + 16..48 + 18].copy_from_slice(&200u16.to_ne_bytes());
        let names: Vec<_> = dirent_names(&buf).map(|n| n.to_bytes().to_vec()).collect();
        assert_eq!(names, vec![b".".to_vec(), b"abc".to_vec()]);
        assert!(is_dot(c"."));
        assert!(is_dot(c".."));
        assert!(!is_dot(c"..."));
    }

    #[test]
    fn latency_percentiles() {
        let l = Latency::from_samples((1..=1000).collect()).unwrap();
        assert_eq!((l.min, l.max), (1, 1000));
        assert!((l.mean - 500.5).abs() < 1e-9);
        assert_eq!(l.percentiles[0], (50.0, 500));
        assert_eq!(l.percentiles[2], (99.0, 990));
        assert!(Latency::from_samples(vec![]).is_none());
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<usize> = (0..1000).collect();
        shuffle(&mut v, 42);
        assert_ne!(v, (0..1000).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn fio_shaped_json() {
        let o = opts(Path::new("/x"), 10);
        let out = Outcome {
            kind: Kind::Stat,
            ops: 5000,
            elapsed: Duration::from_millis(500),
            passes: 500,
            ramp_ops: 2000,
            latency: None,
        };
        let j = fio_json(&out, &o);
        let job = &j["jobs"][0];
        assert_eq!(job["jobname"], "stat");
        assert!((job["read"]["iops"].as_f64().unwrap() - 10_000.0).abs() < 1e-6);
        assert_eq!(job["write"]["iops"].as_f64().unwrap(), 0.0);
        assert_eq!(job["read"]["runtime"], 500);
        assert_eq!(job["bench"]["ramp_ops"], 2000);
        assert!((job["read"]["lat_ns"]["mean"].as_f64().unwrap() - 100_000.0).abs() < 1e-6);
        let create = Outcome {
            kind: Kind::Create,
            latency: Latency::from_samples(vec![1, 2, 3]),
            ..out
        };
        let j = fio_json(&create, &o);
        assert!(j["jobs"][0]["write"]["iops"].as_f64().unwrap() > 0.0);
        assert_eq!(
            j["jobs"][0]["write"]["lat_ns"]["percentile"]["50.000000"],
            2
        );
    }
}
