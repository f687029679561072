//! `direct_read_load`: a small load generator for the transport's memory
//! measurement (`cargo xtask test-in-vm --measure-memory`, see
//! `docs/fuse-uring-performance.md`).
//!
//! ```text
//! direct_read_load FILE [--threads N] [--seconds S] [--block BYTES]
//!                       [--pattern rand-read|seq-read|seq-write]
//!                       [--watch PID] [--interval-ms MS] [--no-pin]
//! ```
//!
//! `N` threads (default: 16 per online CPU) each open FILE with `O_DIRECT`
//! and read `BYTES`-sized blocks (default 1 MiB) at random block-aligned
//! offsets for `S` seconds (default 10); with `seq-read` / `seq-write`,
//! each thread reads or writes its own share of the file's blocks in
//! order, from its start again at its end (every thread is one request
//! at a time: `N` is the queue depth). Thread `i` is pinned to the `i`-th
//! online CPU (round robin), so every CPU, and with it every FUSE-over-
//! io_uring queue, gets the same number of readers. With `--watch PID` it
//! samples `VmRSS` and `VmSize` of process `PID` from `/proc/PID/status`
//! every `MS` milliseconds (default 100) while the load runs.
//!
//! Prints one line of `key=value` pairs: the load (`pattern`, `threads`,
//! `block`, `seconds`, `reads` (the operations, writes too), `mib_s`) and, with `--watch`, the watched process's
//! memory in KiB: `rss_idle_kib` (before the load), `rss_peak_kib`
//! (`VmHWM` after the load: the kernel's own high-water mark),
//! `rss_steady_kib` (median of the samples of the second half of the run),
//! `vmsize_kib` (the largest `VmSize` sampled) and `samples`.
//! Exits 1 (with a message) if a read fails or comes back short.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The command line.
struct Args {
    file: String,
    threads: Option<usize>,
    seconds: f64,
    block: usize,
    watch: Option<u32>,
    interval: Duration,
    pin: bool,
    pattern: Pattern,
}

/// What each thread does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    RandRead,
    SeqRead,
    SeqWrite,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::RandRead => "rand-read",
            Pattern::SeqRead => "seq-read",
            Pattern::SeqWrite => "seq-write",
        }
    }
}

const USAGE: &str = "usage: direct_read_load FILE [--threads N] [--seconds S] [--block BYTES] \
                     [--pattern rand-read|seq-read|seq-write] [--watch PID] [--interval-ms MS] \
                     [--no-pin]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        file: String::new(),
        threads: None,
        seconds: 10.0,
        block: 1 << 20,
        watch: None,
        interval: Duration::from_millis(100),
        pin: true,
        pattern: Pattern::RandRead,
    };
    let mut it = std::env::args().skip(1);
    let mut file = None;
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let bad = |name: &str, v: &str| format!("{name}: not a valid value: {v}");
        match a.as_str() {
            "--threads" => {
                let v = value("--threads")?;
                args.threads = Some(v.parse().map_err(|_| bad("--threads", &v))?);
            }
            "--seconds" => {
                let v = value("--seconds")?;
                args.seconds = v.parse().map_err(|_| bad("--seconds", &v))?;
            }
            "--block" => {
                let v = value("--block")?;
                args.block = v.parse().map_err(|_| bad("--block", &v))?;
            }
            "--watch" => {
                let v = value("--watch")?;
                args.watch = Some(v.parse().map_err(|_| bad("--watch", &v))?);
            }
            "--interval-ms" => {
                let v = value("--interval-ms")?;
                args.interval =
                    Duration::from_millis(v.parse().map_err(|_| bad("--interval-ms", &v))?);
            }
            "--no-pin" => args.pin = false,
            "--pattern" => {
                let v = value("--pattern")?;
                args.pattern = [Pattern::RandRead, Pattern::SeqRead, Pattern::SeqWrite]
                    .into_iter()
                    .find(|p| p.name() == v)
                    .ok_or_else(|| bad("--pattern", &v))?;
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            s if file.is_none() => file = Some(s.to_string()),
            s => return Err(format!("unexpected argument {s}\n{USAGE}")),
        }
    }
    args.file = file.ok_or_else(|| USAGE.to_string())?;
    if args.block == 0 || args.block % 4096 != 0 {
        return Err("--block must be a positive multiple of 4096 (O_DIRECT)".into());
    }
    if !(args.seconds > 0.0 && args.seconds < 1e6) {
        return Err("--seconds must be positive".into());
    }
    Ok(args)
}

/// The online CPUs (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<usize>().ok()),
        }
    }
    if cpus.is_empty() {
        cpus.push(0);
    }
    cpus
}

/// Pins the calling thread to `cpu` (best effort).
fn pin_to(cpu: usize) {
    if cpu >= 1024 {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays inside it
    // for cpu < 1024; sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// `VmRSS`, `VmHWM` and `VmSize` of `pid` in KiB.
#[derive(Clone, Copy, Default)]
struct Status {
    rss: u64,
    hwm: u64,
    size: u64,
}

fn status(pid: u32) -> Option<Status> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut s = Status::default();
    for line in text.lines() {
        let field = |name: &str| -> Option<u64> {
            line.strip_prefix(name)?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        };
        if let Some(v) = field("VmRSS:") {
            s.rss = v;
        } else if let Some(v) = field("VmHWM:") {
            s.hwm = v;
        } else if let Some(v) = field("VmSize:") {
            s.size = v;
        }
    }
    Some(s)
}

/// Thread `share` of `shares`: block-aligned `O_DIRECT` operations of
/// `pattern` from when `start` opens until `stop`; returns those that
/// completed before `stop`.
#[allow(clippy::too_many_arguments)]
fn reader(
    file: File,
    pattern: Pattern,
    blocks: u64,
    block: usize,
    share: u64,
    shares: u64,
    start: &Barrier,
    stop: &AtomicBool,
) -> Result<u64, String> {
    // O_DIRECT wants an aligned buffer: over-allocate and take an aligned
    // window.
    let mut raw = vec![0u8; block + 4096];
    let skip = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[skip..skip + block];
    buf.fill(share as u8);
    let mut x = (share + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // The thread's own blocks, for the sequential patterns.
    let per = (blocks / shares.max(1)).max(1);
    let first = (share * per).min(blocks - 1);
    let mut next = 0u64;
    let mut reads = 0;
    start.wait();
    while !stop.load(Ordering::Relaxed) {
        let index = match pattern {
            Pattern::RandRead => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % blocks
            }
            Pattern::SeqRead | Pattern::SeqWrite => {
                let i = (first + next % per).min(blocks - 1);
                next += 1;
                i
            }
        };
        let offset = index * block as u64;
        let n = if pattern == Pattern::SeqWrite {
            file.write_at(buf, offset)
                .map_err(|e| format!("write of {block} bytes at {offset}: {e}"))?
        } else {
            file.read_at(buf, offset)
                .map_err(|e| format!("read of {block} bytes at {offset}: {e}"))?
        };
        if n != block {
            return Err(format!("short transfer at {offset}: {n} of {block} bytes"));
        }
        if !stop.load(Ordering::Relaxed) {
            reads += 1;
        }
    }
    Ok(reads)
}

fn run(args: Args) -> Result<String, String> {
    let cpus = online_cpus();
    let threads = args.threads.unwrap_or(16 * cpus.len()).max(1);
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(args.pattern == Pattern::SeqWrite)
            .custom_flags(libc::O_DIRECT)
            .open(&args.file)
            .map_err(|e| format!("opening {} with O_DIRECT: {e}", args.file))
    };
    let size = open()?
        .metadata()
        .map_err(|e| format!("stat {}: {e}", args.file))?
        .len();
    let blocks = size / args.block as u64;
    if blocks == 0 {
        return Err(format!(
            "{} ({size} bytes) is smaller than one block of {}",
            args.file, args.block
        ));
    }
    let idle = match args.watch {
        Some(pid) => Some(status(pid).ok_or_else(|| format!("cannot read /proc/{pid}/status"))?),
        None => None,
    };

    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let failure = Arc::new(std::sync::Mutex::new(None::<String>));
    let length = Duration::from_secs_f64(args.seconds);
    // Every reader opens its file first (opens go through FUSE too); the
    // clock starts when all are ready.
    let ready = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let file = open()?;
        let cpu = args.pin.then(|| cpus[t % cpus.len()]);
        let (stop, total, failure) = (stop.clone(), total.clone(), failure.clone());
        let ready = ready.clone();
        let (block, pattern) = (args.block, args.pattern);
        let handle = std::thread::Builder::new()
            .name(format!("reader-{t}"))
            .stack_size(256 << 10)
            .spawn(move || {
                if let Some(cpu) = cpu {
                    pin_to(cpu);
                }
                match reader(
                    file,
                    pattern,
                    blocks,
                    block,
                    t as u64,
                    threads as u64,
                    &ready,
                    &stop,
                ) {
                    Ok(n) => {
                        total.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        failure
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            })
            .map_err(|e| format!("starting reader {t}: {e}"))?;
        handles.push(handle);
    }

    ready.wait();
    let start = Instant::now();
    let deadline = start + length;
    // Sample the watched process while the load runs.
    let mut samples: Vec<(Duration, Status)> = Vec::new();
    loop {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(pid) = args.watch {
            if let Some(s) = status(pid) {
                samples.push((now - start, s));
            }
        }
        std::thread::sleep(args.interval.min(deadline - now));
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    if let Some(e) = failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(e);
    }
    let reads = total.load(Ordering::Relaxed);
    let mib_s = reads as f64 * args.block as f64 / (1 << 20) as f64 / length.as_secs_f64();
    let mut line = format!(
        "pattern={} threads={threads} cpus={} block={} seconds={} reads={reads} mib_s={mib_s:.1}",
        args.pattern.name(),
        cpus.len(),
        args.block,
        args.seconds
    );
    if let (Some(pid), Some(idle)) = (args.watch, idle) {
        let after = status(pid).unwrap_or_default();
        let mut steady: Vec<u64> = samples
            .iter()
            .filter(|(at, _)| *at >= length / 2)
            .map(|(_, s)| s.rss)
            .collect();
        steady.sort_unstable();
        let median = steady.get(steady.len() / 2).copied().unwrap_or(after.rss);
        // The largest of a figure over the samples and the end.
        let most = |of: fn(&Status) -> u64| {
            let all = samples.iter().map(|(_, s)| s).chain([&after]);
            all.map(of).max().unwrap_or(0)
        };
        let peak = most(|s| s.hwm);
        let vmsize = most(|s| s.size);
        line.push_str(&format!(
            " rss_idle_kib={} rss_peak_kib={peak} rss_steady_kib={median} vmsize_kib={vmsize} samples={}",
            idle.rss,
            samples.len()
        ));
    }
    Ok(line)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("direct_read_load: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("direct_read_load: error: {e}");
            ExitCode::FAILURE
        }
    }
}
