//! async-io microbenchmark: vectored writes and reads on both runtimes against one call
//! per buffer and against raw `pwritev`/`preadv`, and whole-file copies against `cp`,
//! `std::fs::copy` and a 128 KiB read/write loop (cached and `O_DIRECT`).
//!
//! Configurations are alternated within each round and every figure is the median of the
//! rounds, so drift on a shared machine hits all of them alike. `--json FILE` writes every
//! sample. `--probe NAME` runs one small workload for `strace -c -f` and exits.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use async_io::{
    copy_file, join_all, AlignedBuf, CopyMethod, CopyOptions, File, OpenOptions, Runtime,
    RuntimeType,
};
use clap::Parser;
use serde_json::{json, Value};

const PAGE: usize = 4096;

#[derive(Parser, Debug)]
#[command(about = "async-io microbenchmark (vectored IO and whole-file copy)")]
struct Args {
    /// Write every figure (and every sample) as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Scratch directory (on the file system to measure; ext4 under target/ by default).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rounds of the vectored benchmark (medians over rounds).
    #[arg(long, default_value_t = 9)]
    rounds: usize,
    /// Rounds of the copy benchmark.
    #[arg(long, default_value_t = 5)]
    copy_rounds: usize,
    /// Size of the copied file in MiB.
    #[arg(long, default_value_t = 1024)]
    copy_mib: u64,
    /// Skip the vectored IO part.
    #[arg(long)]
    skip_vectored: bool,
    /// Skip the copy part.
    #[arg(long)]
    skip_copy: bool,
    /// Run one workload for strace and exit: writev-tokio, writev-uring, write-per-buffer-tokio,
    /// write-per-buffer-uring, readv-tokio, readv-uring, copy-cached-tokio, copy-cached-uring,
    /// copy-direct-uring, copy-direct-tokio.
    #[arg(long)]
    probe: Option<String>,
    /// Operations per probe (vectored probes).
    #[arg(long, default_value_t = 100)]
    probe_iters: usize,
    /// Probes: set the io_uring runtime's ring up with DEFER_TASKRUN.
    #[arg(long)]
    defer_taskrun: bool,
}

fn main() {
    let args = Args::parse();
    let dir = args.dir.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/async-io-bench"
        ))
    });
    std::fs::create_dir_all(&dir).expect("create the scratch dir");
    if let Some(p) = &args.probe {
        probe(p, &dir, &args);
        return;
    }
    if let Err(e) = RuntimeType::IoUring.check_available() {
        eprintln!("io_uring unavailable: {e}; this benchmark needs it");
        std::process::exit(1);
    }
    let mut report = json!({
        "date": date(),
        "machine": machine(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "dir": dir.display().to_string(),
    });
    let mut targets = Vec::new();
    let mut text = String::new();
    let m = &report["machine"];
    let _ = writeln!(
        text,
        "{} | {} | {} CPUs | load average {}\n",
        m["kernel"].as_str().unwrap_or(""),
        m["cpu"].as_str().unwrap_or(""),
        m["cpus"],
        m["loadavg_at_start"].as_str().unwrap_or("")
    );
    if !args.skip_vectored {
        let (v, t) = vectored(&dir, args.rounds, &mut text);
        report["vectored"] = v;
        targets.extend(t);
    }
    if !args.skip_copy {
        let (v, t) = copies(&dir, args.copy_rounds, args.copy_mib, &mut text);
        report["copy"] = v;
        targets.extend(t);
    }
    report["loadavg_at_end"] = json!(loadavg());
    if !targets.is_empty() {
        let _ = writeln!(text, "\nTargets (ratios within this run):");
        for t in &targets {
            let _ = writeln!(
                text,
                "  {:<58} {:>7.2}x  (want {} {:.2}x)  {}",
                t["name"].as_str().unwrap_or(""),
                t["ratio"].as_f64().unwrap_or(0.0),
                t["cmp"].as_str().unwrap_or(""),
                t["threshold"].as_f64().unwrap_or(0.0),
                if t["met"].as_bool() == Some(true) {
                    "MET"
                } else {
                    "NOT MET"
                }
            );
        }
        report["targets"] = Value::Array(targets);
    }
    print!("{text}");
    if let Some(path) = &args.json {
        let s = serde_json::to_string_pretty(&report).expect("serialise the report");
        std::fs::write(path, s).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        println!("\nJSON written to {}", path.display());
    }
}

fn date() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn machine() -> Value {
    let uname = Command::new("uname")
        .arg("-srm")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    json!({ "kernel": uname, "cpu": cpu, "cpus": cpus, "loadavg_at_start": loadavg() })
}

/// The 1/5/15-minute load averages (other work on a shared machine skews absolute figures).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The order to run `len` configurations in during round `round`: in turn
/// forwards and backwards, so that none always runs first.
fn round_order(len: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// Samples `len` configurations for `rounds` rounds, each once a round in
/// [`round_order`], `run(i)` measuring configuration `i`: each one's
/// samples, and their medians.
fn sample_rounds(
    len: usize,
    rounds: usize,
    mut run: impl FnMut(usize) -> f64,
) -> (Vec<Vec<f64>>, Vec<f64>) {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); len];
    for round in 0..rounds {
        for i in round_order(len, round) {
            samples[i].push(run(i));
        }
    }
    let medians = samples.iter().map(|s| median(s)).collect();
    (samples, medians)
}

/// Reads `path` through once, so that its data is in the page cache.
fn warm_page_cache(path: &Path) {
    let mut sink = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut sink))
        .unwrap_or_else(|e| panic!("reading {} into the page cache: {e}", path.display()));
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    if s.is_empty() {
        return f64::NAN;
    }
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

fn target(name: &str, ratio: f64, cmp: &str, threshold: f64) -> Value {
    let met = match cmp {
        ">=" => ratio >= threshold,
        _ => ratio <= threshold,
    };
    json!({ "name": name, "ratio": ratio, "cmp": cmp, "threshold": threshold, "met": met })
}

// ---------------------------------------------------------------------------------------
// Vectored IO
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VConf {
    /// libc pwritev/preadv straight from the benchmark, no runtime.
    Raw,
    /// File::writev_at / readv_at on a tokio runtime.
    TokioVectored,
    /// One File::write_at / read_at per buffer on a tokio runtime (one syscall each).
    TokioPerBuffer,
    /// File::writev_at / readv_at on an io_uring runtime (one READV/WRITEV SQE).
    UringVectored,
    /// One write_at / read_at SQE per buffer on io_uring, all submitted together.
    UringPerBuffer,
    /// A bare ring, no runtime: one READV/WRITEV SQE and io_uring_enter(submit, wait 1).
    /// The floor for any io_uring runtime.
    UringBare,
}

impl VConf {
    const ALL: [VConf; 6] = [
        VConf::Raw,
        VConf::TokioVectored,
        VConf::TokioPerBuffer,
        VConf::UringVectored,
        VConf::UringPerBuffer,
        VConf::UringBare,
    ];
    fn name(self) -> &'static str {
        match self {
            VConf::Raw => "raw pwritev/preadv",
            VConf::TokioVectored => "tokio vectored",
            VConf::TokioPerBuffer => "tokio one call per buffer",
            VConf::UringVectored => "uring vectored (1 SQE)",
            VConf::UringPerBuffer => "uring one SQE per buffer",
            VConf::UringBare => "bare io_uring READV/WRITEV + enter(wait 1)",
        }
    }
    fn key(self) -> &'static str {
        match self {
            VConf::Raw => "raw",
            VConf::TokioVectored => "tokio_vectored",
            VConf::TokioPerBuffer => "tokio_per_buffer",
            VConf::UringVectored => "uring_vectored",
            VConf::UringPerBuffer => "uring_per_buffer",
            VConf::UringBare => "uring_bare",
        }
    }
}

struct VBench {
    bare: std::cell::RefCell<io_uring::IoUring>,
    tokio: Runtime,
    uring: Runtime,
    file: File,
    std_file: std::fs::File,
}

impl VBench {
    /// Runs `iters` operations of `nbufs` page buffers; returns ns per operation.
    fn run(&self, conf: VConf, op: Op, nbufs: usize, iters: usize) -> f64 {
        let mut bufs: Vec<Vec<u8>> = (0..nbufs)
            .map(|i| vec![(i % 251) as u8 | 1; PAGE])
            .collect();
        match conf {
            VConf::Raw => {
                let fd = self.std_file.as_raw_fd();
                let mut iov: Vec<libc::iovec> = bufs
                    .iter_mut()
                    .map(|b| libc::iovec {
                        iov_base: b.as_mut_ptr().cast(),
                        iov_len: b.len(),
                    })
                    .collect();
                let t = Instant::now();
                for _ in 0..iters {
                    // SAFETY: the iovecs point into `bufs`, alive and unaliased for the call.
                    let n = unsafe {
                        match op {
                            Op::Write => libc::pwritev(fd, iov.as_ptr(), nbufs as i32, 0),
                            Op::Read => libc::preadv(fd, iov.as_mut_ptr(), nbufs as i32, 0),
                        }
                    };
                    assert_eq!(n as usize, nbufs * PAGE, "raw {op:?}");
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            }
            VConf::UringBare => {
                let fd = io_uring::types::Fd(self.std_file.as_raw_fd());
                let iov: Vec<libc::iovec> = bufs
                    .iter_mut()
                    .map(|b| libc::iovec {
                        iov_base: b.as_mut_ptr().cast(),
                        iov_len: b.len(),
                    })
                    .collect();
                let mut ring = self.bare.borrow_mut();
                let t = Instant::now();
                for _ in 0..iters {
                    let sqe = match op {
                        Op::Write => {
                            io_uring::opcode::Writev::new(fd, iov.as_ptr(), nbufs as u32).build()
                        }
                        Op::Read => {
                            io_uring::opcode::Readv::new(fd, iov.as_ptr(), nbufs as u32).build()
                        }
                    };
                    // SAFETY: the iovecs and buffers outlive the operation: we wait for its CQE.
                    unsafe { ring.submission().push(&sqe) }.expect("queue has room");
                    ring.submit_and_wait(1).expect("io_uring_enter");
                    let cqe = ring.completion().next().expect("a CQE");
                    assert_eq!(cqe.result() as usize, nbufs * PAGE, "bare {op:?}");
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            }
            VConf::TokioVectored | VConf::UringVectored => {
                let rt = if conf == VConf::TokioVectored {
                    &self.tokio
                } else {
                    &self.uring
                };
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        let (r, b) = match op {
                            Op::Write => self.file.writev_at(bufs, 0).await,
                            Op::Read => self.file.readv_at(bufs, 0).await,
                        };
                        assert_eq!(r.expect("vectored io"), nbufs * PAGE);
                        bufs = b;
                    }
                    t.elapsed().as_nanos() as f64 / iters as f64
                })
            }
            VConf::TokioPerBuffer => self.tokio.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    for (i, b) in bufs.iter_mut().enumerate() {
                        let owned = std::mem::take(b);
                        let (r, back) = match op {
                            Op::Write => self.file.write_at(owned, (i * PAGE) as u64).await,
                            Op::Read => self.file.read_at(owned, (i * PAGE) as u64).await,
                        };
                        assert_eq!(r.expect("per-buffer io"), PAGE);
                        *b = back;
                    }
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            }),
            VConf::UringPerBuffer => self.uring.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    let futs: Vec<_> = bufs
                        .drain(..)
                        .enumerate()
                        .map(|(i, b)| {
                            let f = &self.file;
                            async move {
                                match op {
                                    Op::Write => f.write_at(b, (i * PAGE) as u64).await,
                                    Op::Read => f.read_at(b, (i * PAGE) as u64).await,
                                }
                            }
                        })
                        .collect();
                    for (r, b) in join_all(futs).await {
                        assert_eq!(r.expect("per-buffer SQE"), PAGE);
                        bufs.push(b);
                    }
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            }),
        }
    }
}

fn vectored(dir: &Path, rounds: usize, text: &mut String) -> (Value, Vec<Value>) {
    let path = dir.join("vectored.dat");
    std::fs::write(&path, vec![7u8; 256 * PAGE]).expect("create the vectored test file");
    let std_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open the test file");
    warm_page_cache(&path);
    let b = VBench {
        bare: std::cell::RefCell::new(io_uring::IoUring::new(8).expect("bare ring")),
        tokio: RuntimeType::Tokio.build().expect("tokio runtime"),
        uring: RuntimeType::IoUring.build().expect("io_uring runtime"),
        file: File::from(std_file.try_clone().expect("dup")),
        std_file,
    };
    let mut results = Vec::new();
    let mut targets = Vec::new();
    let _ = writeln!(
        text,
        "Vectored IO, {PAGE}-byte buffers, cached file on {} (median of {rounds} rounds, \u{b5}s per call)",
        dir.display()
    );
    let _ = writeln!(
        text,
        "{:<6} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>9} {:>9} {:>9}",
        "op",
        "bufs",
        "raw",
        "tokio-v",
        "tokio-1x",
        "uring-v",
        "uring-1x",
        "bare-ring",
        "tok 1x/v",
        "tok v/raw",
        "ur v/raw",
        "ur 1x/v"
    );
    for op in [Op::Write, Op::Read] {
        for nbufs in [1usize, 16, 256] {
            let iters = (16384 / nbufs).max(100);
            // Warm-up (also faults the buffers in).
            for c in VConf::ALL {
                b.run(c, op, nbufs, iters / 10 + 1);
            }
            let (samples, med) = sample_rounds(VConf::ALL.len(), rounds, |i| {
                b.run(VConf::ALL[i], op, nbufs, iters)
            });
            let m = |c: VConf| med[VConf::ALL.iter().position(|&x| x == c).expect("conf")];
            let tok_speedup = m(VConf::TokioPerBuffer) / m(VConf::TokioVectored);
            let tok_vs_raw = m(VConf::TokioVectored) / m(VConf::Raw);
            let ur_vs_raw = m(VConf::UringVectored) / m(VConf::Raw);
            let ur_speedup = m(VConf::UringPerBuffer) / m(VConf::UringVectored);
            let opname = match op {
                Op::Write => "write",
                Op::Read => "read",
            };
            let _ = writeln!(
                text,
                "{:<6} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {:>8.2}x {:>8.2}x {:>8.2}x {:>8.2}x",
                opname,
                nbufs,
                m(VConf::Raw) / 1e3,
                m(VConf::TokioVectored) / 1e3,
                m(VConf::TokioPerBuffer) / 1e3,
                m(VConf::UringVectored) / 1e3,
                m(VConf::UringPerBuffer) / 1e3,
                m(VConf::UringBare) / 1e3,
                tok_speedup,
                tok_vs_raw,
                ur_vs_raw,
                ur_speedup,
            );
            for (i, c) in VConf::ALL.iter().enumerate() {
                results.push(json!({
                    "op": opname, "buffers": nbufs, "buffer_size": PAGE, "config": c.key(),
                    "description": c.name(), "iterations": iters,
                    "median_ns": med[i], "samples_ns": samples[i],
                }));
            }
            results.push(json!({
                "op": opname, "buffers": nbufs, "ratios": {
                    "tokio_per_buffer_over_vectored": tok_speedup,
                    "tokio_vectored_over_raw": tok_vs_raw,
                    "uring_vectored_over_raw": ur_vs_raw,
                    "uring_per_buffer_over_vectored": ur_speedup,
                    "uring_vectored_over_bare_ring": m(VConf::UringVectored) / m(VConf::UringBare),
                    "bare_ring_over_raw": m(VConf::UringBare) / m(VConf::Raw),
                }
            }));
            if nbufs == 256 {
                let (speed_min, name) = match op {
                    Op::Write => (5.0, "write"),
                    Op::Read => (3.0, "read"),
                };
                targets.push(target(
                    &format!("tokio 256x4K {name}: one call per buffer / vectored"),
                    tok_speedup,
                    ">=",
                    speed_min,
                ));
                targets.push(target(
                    &format!("tokio 256x4K {name}: vectored / raw"),
                    tok_vs_raw,
                    "<=",
                    1.3,
                ));
                targets.push(target(
                    &format!("uring 256x4K {name}: vectored / raw"),
                    ur_vs_raw,
                    "<=",
                    1.2,
                ));
            }
        }
    }
    let _ = writeln!(
        text,
        "(tok 1x/v, ur 1x/v: speed-up of one vectored call over one call/SQE per buffer; v/raw: time relative to raw pwritev/preadv)"
    );
    (Value::Array(results), targets)
}

// ---------------------------------------------------------------------------------------
// Copy
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum CConf {
    Cp,
    StdCopy,
    Loop128k {
        direct: bool,
    },
    Ours {
        rt: RuntimeType,
        method: CopyMethod,
        direct: bool,
        qd: usize,
    },
}

impl CConf {
    fn name(&self) -> String {
        match self {
            CConf::Cp => "cp".into(),
            CConf::StdCopy => "std::fs::copy".into(),
            CConf::Loop128k { direct: false } => "128 KiB read/write loop".into(),
            CConf::Loop128k { direct: true } => "128 KiB read/write loop O_DIRECT".into(),
            CConf::Ours {
                rt,
                method,
                direct,
                qd,
            } => {
                let d = if *direct { " O_DIRECT" } else { "" };
                let q =
                    if *method == CopyMethod::Batched || (*direct && *method == CopyMethod::Auto) {
                        format!(" qd{qd}")
                    } else {
                        String::new()
                    };
                format!("copy_file {method} on {rt}{d}{q}")
            }
        }
    }
    fn direct(&self) -> bool {
        matches!(
            self,
            CConf::Loop128k { direct: true } | CConf::Ours { direct: true, .. }
        )
    }
}

/// A plain loop: read 128 KiB, write it, until EOF.
fn loop_copy(src: &Path, dst: &Path, direct: bool) -> std::io::Result<u64> {
    let flags = if direct { libc::O_DIRECT } else { 0 };
    let mut s = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(src)?;
    let mut d = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(flags)
        .open(dst)?;
    let mut buf = AlignedBuf::zeroed(128 << 10);
    let mut total = 0;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        d.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok(total)
}

struct CBench {
    tokio: Runtime,
    uring: Runtime,
}

impl CBench {
    fn run(&self, conf: &CConf, src: &Path, dst: &Path) -> (f64, u64) {
        let _ = std::fs::remove_file(dst);
        let t = Instant::now();
        let n = match conf {
            CConf::Cp => {
                let st = Command::new("cp")
                    .arg(src)
                    .arg(dst)
                    .status()
                    .expect("run cp");
                assert!(st.success(), "cp failed");
                std::fs::metadata(dst).expect("cp output").len()
            }
            CConf::StdCopy => std::fs::copy(src, dst).expect("std::fs::copy"),
            CConf::Loop128k { direct } => loop_copy(src, dst, *direct).expect("loop copy"),
            CConf::Ours {
                rt,
                method,
                direct,
                qd,
            } => {
                let mut o = CopyOptions::default();
                o.method = *method;
                o.direct = *direct;
                o.queue_depth = *qd;
                let r = match rt {
                    RuntimeType::Tokio => &self.tokio,
                    RuntimeType::IoUring => &self.uring,
                };
                r.block_on(copy_file(src, dst, &o)).expect("copy_file").len
            }
        };
        let secs = t.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(dst);
        (secs, n)
    }
}

fn make_source(path: &Path, mib: u64) {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == mib << 20) {
        return;
    }
    let mut f = std::fs::File::create(path).expect("create the copy source");
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for w in chunk.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&chunk).expect("write the copy source");
    }
    f.sync_all().expect("sync the copy source");
}

fn drop_caches_of(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        // SAFETY: plain syscall on an open fd.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn copies(dir: &Path, rounds: usize, mib: u64, text: &mut String) -> (Value, Vec<Value>) {
    let src = dir.join(format!("copy-src-{mib}M"));
    let dst = dir.join("copy-dst");
    make_source(&src, mib);
    let b = CBench {
        tokio: RuntimeType::Tokio.build().expect("tokio runtime"),
        uring: RuntimeType::IoUring.build().expect("io_uring runtime"),
    };
    let ours = |rt, method, direct, qd| CConf::Ours {
        rt,
        method,
        direct,
        qd,
    };
    let cached = vec![
        CConf::Cp,
        CConf::StdCopy,
        CConf::Loop128k { direct: false },
        ours(RuntimeType::IoUring, CopyMethod::Auto, false, 32),
        ours(RuntimeType::Tokio, CopyMethod::Auto, false, 32),
        ours(RuntimeType::IoUring, CopyMethod::Batched, false, 32),
        ours(RuntimeType::Tokio, CopyMethod::ReadWrite, false, 32),
    ];
    let direct = vec![
        CConf::Loop128k { direct: true },
        ours(RuntimeType::IoUring, CopyMethod::ReadWrite, true, 1),
        ours(RuntimeType::IoUring, CopyMethod::Auto, true, 8),
        ours(RuntimeType::IoUring, CopyMethod::Auto, true, 32),
        ours(RuntimeType::IoUring, CopyMethod::Auto, true, 64),
        ours(RuntimeType::Tokio, CopyMethod::Auto, true, 32),
    ];
    let mut results = Vec::new();
    let mut targets = Vec::new();
    let _ = writeln!(
        text,
        "\nCopy of a {mib} MiB file on {} (median of {rounds} rounds; MiB/s, and time relative to the first row)",
        dir.display()
    );
    for (label, confs) in [
        ("cached (source in the page cache)", &cached),
        ("O_DIRECT (source and destination)", &direct),
    ] {
        let _ = writeln!(text, "  {label}:");
        let is_direct = confs[0].direct();
        if !is_direct {
            warm_page_cache(&src);
        }
        let (samples, med) = sample_rounds(confs.len(), rounds, |i| {
            if is_direct {
                drop_caches_of(&src);
            }
            // Start each run with the disk quiet: earlier copies' dirty pages are gone
            // with their files, but flush whatever else is pending.
            // SAFETY: sync(2) has no preconditions.
            unsafe { libc::sync() };
            std::thread::sleep(Duration::from_millis(50));
            let (secs, n) = b.run(&confs[i], &src, &dst);
            assert_eq!(n, mib << 20, "{} copied {n} bytes", confs[i].name());
            secs
        });
        for (i, c) in confs.iter().enumerate() {
            let mibs = mib as f64 / med[i];
            let _ = writeln!(
                text,
                "    {:<44} {:>8.3} s {:>8.0} MiB/s  {:>6.2}x",
                c.name(),
                med[i],
                mibs,
                med[0] / med[i]
            );
            results.push(json!({
                "mode": if is_direct { "direct" } else { "cached" },
                "config": c.name(), "size_mib": mib, "median_s": med[i], "mib_per_s": mibs,
                "speedup_over_first_row": med[0] / med[i], "samples_s": samples[i],
            }));
        }
        let find = |pred: &dyn Fn(&CConf) -> bool| confs.iter().position(pred).map(|i| med[i]);
        if is_direct {
            let base = find(&|c| matches!(c, CConf::Loop128k { direct: true })).expect("loop");
            let best = find(&|c| {
                matches!(
                    c,
                    CConf::Ours {
                        rt: RuntimeType::IoUring,
                        method: CopyMethod::Auto,
                        qd: 32,
                        ..
                    }
                )
            })
            .expect("ours");
            targets.push(target(
                "O_DIRECT copy (uring, qd32) speed / 128 KiB O_DIRECT loop",
                base / best,
                ">=",
                1.7,
            ));
        } else {
            let cp = find(&|c| matches!(c, CConf::Cp)).expect("cp");
            for rt in RuntimeType::ALL {
                let ours = find(&|c| matches!(c, CConf::Ours { rt: r, method: CopyMethod::Auto, .. } if *r == rt))
                    .expect("ours");
                targets.push(target(
                    &format!("cached copy (auto, {rt}) speed / cp"),
                    cp / ours,
                    ">=",
                    0.9,
                ));
            }
        }
    }
    (Value::Array(results), targets)
}

// ---------------------------------------------------------------------------------------
// strace probes
// ---------------------------------------------------------------------------------------

fn probe(name: &str, dir: &Path, args: &Args) {
    let path = dir.join("probe.dat");
    std::fs::write(&path, vec![7u8; 256 * PAGE]).expect("probe file");
    let iters = args.probe_iters;
    let kind = if name.ends_with("uring") {
        RuntimeType::IoUring
    } else {
        RuntimeType::Tokio
    };
    let rt = async_io::Builder::new(kind)
        .defer_taskrun(args.defer_taskrun)
        .build()
        .expect("runtime");
    let t = Instant::now();
    match name {
        "writev-tokio" | "writev-uring" | "readv-tokio" | "readv-uring" => rt.block_on(async {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .await
                .expect("open");
            let mut bufs: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; PAGE]).collect();
            for _ in 0..iters {
                let (r, b) = if name.starts_with("writev") {
                    f.writev_at(bufs, 0).await
                } else {
                    f.readv_at(bufs, 0).await
                };
                assert_eq!(r.expect("io"), 256 * PAGE);
                bufs = b;
            }
        }),
        "write-per-buffer-tokio" | "write-per-buffer-uring" => rt.block_on(async {
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .await
                .expect("open");
            let mut bufs: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; PAGE]).collect();
            for _ in 0..iters {
                let futs: Vec<_> = bufs
                    .drain(..)
                    .enumerate()
                    .map(|(i, b)| {
                        let f = &f;
                        async move { f.write_at(b, (i * PAGE) as u64).await }
                    })
                    .collect();
                for (r, b) in join_all(futs).await {
                    r.expect("write");
                    bufs.push(b);
                }
            }
        }),
        "copy-cached-tokio" | "copy-cached-uring" | "copy-direct-tokio" | "copy-direct-uring" => {
            let src = dir.join(format!("copy-src-{}M", args.copy_mib));
            make_source(&src, args.copy_mib);
            let mut o = CopyOptions::default();
            o.direct = name.contains("direct");
            let rep = rt
                .block_on(copy_file(&src, dir.join("probe-dst"), &o))
                .expect("copy");
            eprintln!("probe {name}: {rep:?}");
            let _ = std::fs::remove_file(dir.join("probe-dst"));
        }
        other => {
            eprintln!("unknown probe {other}");
            std::process::exit(2);
        }
    }
    eprintln!(
        "probe {name}: {iters} iterations in {:?}; ring {:?}",
        t.elapsed(),
        rt.uring_stats()
    );
}
