//! The benchmark's syscall counts: both daemons again under `strace -ff`,
//! their traces split at the guest's phase markers, and the tables of
//! syscalls per operation and of the 1 MiB writes. Apart from the
//! benchmark: its own boot, and the strace parsing it alone needs.

use super::*;
use std::collections::BTreeMap;

/// MiB the guest writes in 1 MiB `O_DIRECT` writes for [`syscall_counts`].
const SYSCOUNT_MIB: u32 = 32;

/// The syscalls each daemon makes per guest operation: both daemons
/// again, each under `strace -ff` (every syscall of every thread, with the
/// paths of descriptors), and a guest (`vm-virtiofs syscount`) that runs
/// each workload a fixed number of times on each mount, every phase after
/// a LOOKUP of a name that doesn't exist (`.xtask-phase-NAME`), which the
/// trace shows as an argument of the daemon's syscalls. Both daemons exit
/// when the guest's qemu disconnects (ours with `--once`), and strace
/// with them. Returns two tables: the syscalls that wrote the 1 MiB
/// writes to the file, and the syscalls per operation of each phase.
pub(super) fn syscall_counts(
    args: &VmArgs,
    image: (&Path, &Path),
    (ours, virtiofsd): (&Path, &Path),
    virtiofsd_version: &str,
    base: &Path,
) -> Result<String> {
    ensure_apt_packages(&["strace"])?;
    let run_dir = target_dir().join("vm/virtiofs");
    let trace_dir = run_dir.join("strace");
    let traced = |name: &str, daemon: Command| {
        let mut cmd = Command::new("strace");
        cmd.args(["-ff", "-ttt", "-qq", "-y", "-e", "signal=none", "-o"])
            .arg(trace_dir.join(name))
            .arg("--")
            .arg(daemon.get_program())
            .args(daemon.get_args());
        for (k, v) in daemon.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd
    };
    let (ours_dir, peer_dir) = (base.join("syscount-ours"), base.join("syscount-peer"));
    let ours_socket = run_dir.join("syscount-ours.sock");
    let peer_socket = run_dir.join("syscount-virtiofsd.sock");
    // Fresh traces and directories for each boot.
    let mut start = || -> Result<Vec<Daemon>> {
        for dir in [&trace_dir, &ours_dir, &peer_dir] {
            if dir.exists() {
                fs::remove_dir_all(dir)?;
            }
            fs::create_dir_all(dir)?;
        }
        let mut ours_cmd = our_daemon(args, ours, &ours_socket, &ours_dir, "warn");
        // Unconfined, as virtiofsd runs here (`--sandbox none`): the
        // figures compare the serving paths, not the sandboxes.
        ours_cmd
            .args(UNCONFINED)
            .args(["--cache", &args.bench_cache, "--once"]);
        Ok(vec![
            start_daemon(
                traced("ours", ours_cmd),
                &ours_socket,
                &run_dir.join("syscount-passthroughfs.log"),
            )?,
            start_daemon(
                traced(
                    "virtiofsd",
                    virtiofsd_command(virtiofsd, &peer_socket, &peer_dir, &args.bench_cache),
                ),
                &peer_socket,
                &run_dir.join("syscount-virtiofsd.log"),
            )?,
        ])
    };
    let (vm, mut daemons) = boot_with_fresh_daemons(
        args,
        image,
        &[(&ours_socket, TAG), (&peer_socket, "peer")],
        (
            "syscount",
            &format!("{SAME_CPU_INTERRUPTS} xtask.mib={SYSCOUNT_MIB}"),
        ),
        &run_dir.join("console-syscount.log"),
        &mut start,
    )?;
    let mut problems = steps_ok(
        &vm,
        &["virtiofs-mount", "virtiofs-mount-peer", "virtiofs-syscount"],
    );
    if let Some(k) = &vm.killed {
        problems.push(k.clone());
    }
    // Both exit once qemu is gone; strace then writes its last lines.
    for (name, daemon) in ["ours", "virtiofsd"].into_iter().zip(&mut daemons) {
        if wait_for_exit(&mut daemon.0, Duration::from_secs(30)).is_none() {
            problems.push(format!("{name} didn't exit in 30 s after the guest's qemu"));
        }
    }
    drop(daemons);
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    let ours_trace = Trace::read(&trace_dir, "ours")?;
    let peer_trace = Trace::read(&trace_dir, "virtiofsd")?;
    // ops[(label, phase)]: operations the guest made in the phase.
    let mut ops: BTreeMap<(String, String), u64> = BTreeMap::new();
    for l in &vm.console {
        let Some(rest) = after(l, "XTASK-VIRTIOFS-SYSCOUNT: ") else {
            continue;
        };
        if let [label, phase, n] = rest.split_whitespace().collect::<Vec<_>>()[..] {
            if let Ok(n) = n.parse() {
                ops.insert((label.into(), phase.into()), n);
            }
        }
    }
    let mut t = format!(
        "\nSyscalls that wrote the guest's {SYSCOUNT_MIB} `O_DIRECT` 1 MiB writes to the \
         file (`strace -ff -y` on each daemon, the calls on the file in that phase):\n\n\
         | daemon | syscalls | buffers per call | bytes |\n|---|---|---|---|\n"
    );
    for (label, trace) in [
        ("passthroughfs", &ours_trace),
        (virtiofsd_version, &peer_trace),
    ] {
        let writes = trace.file_writes("seq-write-1m", "syscount.bin>");
        let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
        let mut iovcnts: BTreeMap<u64, usize> = BTreeMap::new();
        let mut bytes = 0u64;
        for w in &writes {
            *by_name.entry(w.name).or_default() += 1;
            if let Some(n) = w.buffers {
                *iovcnts.entry(n).or_default() += 1;
            }
            bytes += w.bytes;
        }
        let _ = writeln!(
            t,
            "| {label} | {} | {} | {bytes} |",
            listed(by_name.iter().map(|(k, v)| format!("{v} {k}"))),
            listed(iovcnts.iter().map(|(k, v)| format!("{v} of {k}"))),
        );
    }
    let _ = writeln!(
        t,
        "\nSyscalls per guest operation (all of the daemon's threads, --cache {}; \
         the four most frequent, per operation, in the last two columns):\n\n\
         | workload | ours | virtiofsd | ours: most frequent | virtiofsd: most frequent |\n\
         |---|---|---|---|---|",
        args.bench_cache
    );
    for phase in SYSCOUNT_PHASES {
        let per_op = |trace: &Trace, label: &str| {
            let n = ops.get(&(label.to_string(), phase.to_string())).copied()?;
            let counts = trace.counts(phase)?;
            let total: u64 = counts.values().sum();
            let mut top: Vec<(&&str, &u64)> = counts.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let top = listed(
                top.iter()
                    .take(4)
                    .map(|(k, v)| format!("{k} {:.2}", **v as f64 / n.max(1) as f64)),
            );
            Some((total as f64 / n.max(1) as f64, top))
        };
        let show = |r: &Option<(f64, String)>| match r {
            Some((v, _)) => format!("{v:.2}"),
            None => "no result".into(),
        };
        let top = |r: &Option<(f64, String)>| r.as_ref().map(|r| r.1.clone()).unwrap_or_default();
        let (a, b) = (per_op(&ours_trace, TAG), per_op(&peer_trace, "peer"));
        let _ = writeln!(
            t,
            "| {phase} | {} | {} | {} | {} |",
            show(&a),
            show(&b),
            top(&a),
            top(&b)
        );
    }
    Ok(t)
}

/// The phases of `vm-virtiofs syscount`, in order.
const SYSCOUNT_PHASES: &[&str] = &[
    "seq-write-1m",
    "rand-write-4k",
    "rand-read-4k",
    "create-stat-unlink",
    "stat",
    "readdir",
];

/// `items` joined with commas, or `-`.
fn listed(items: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = items.collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(", ")
    }
}

/// The syscalls that may write file data.
const WRITE_SYSCALLS: &[&str] = &[
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "io_uring_enter",
    "copy_file_range",
    "splice",
    "sendfile",
];

/// A daemon's `strace -ff` trace, split at the guest's phase markers.
struct Trace {
    /// The syscall lines of each phase.
    lines: BTreeMap<String, Vec<String>>,
}

impl Trace {
    /// Reads `dir/prefix.PID` (one file per thread). A thread's syscalls
    /// after a line naming `.xtask-phase-NAME` belong to NAME until the
    /// next marker; the guest makes one request at a time, so a phase's
    /// requests are served between its marker and the next one, whichever
    /// thread serves them.
    fn read(dir: &Path, prefix: &str) -> Result<Self> {
        let mut trace = Trace {
            lines: BTreeMap::new(),
        };
        // Every thread's lines with strace's timestamps (-ttt) merged in
        // order, so a marker seen by one thread starts the phase for all.
        let mut all: Vec<(f64, String)> = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !file_name.starts_with(&format!("{prefix}.")) {
                continue;
            }
            for l in fs::read_to_string(&path)?.lines() {
                let Some((stamp, rest)) = l.split_once(' ') else {
                    continue;
                };
                if let Ok(stamp) = stamp.parse::<f64>() {
                    all.push((stamp, rest.to_string()));
                }
            }
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut phase: Option<String> = None;
        for (_, l) in all {
            if let Some(i) = l.find(".xtask-phase-") {
                let name: String = l[i + ".xtask-phase-".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                phase = Some(name);
            }
            let Some(p) = &phase else { continue };
            if syscall_name(&l).is_some() {
                trace.lines.entry(p.clone()).or_default().push(l);
            }
        }
        Ok(trace)
    }

    /// How often each syscall was made in `phase` (`None`: no such phase).
    fn counts(&self, phase: &str) -> Option<BTreeMap<&str, u64>> {
        let mut counts = BTreeMap::new();
        for l in self.lines.get(phase)? {
            if let Some(name) = syscall_name(l) {
                *counts.entry(name).or_default() += 1;
            }
        }
        Some(counts)
    }

    /// The syscalls of `phase` that wrote file data to a descriptor whose
    /// path (`-y` prints `fd</path>`) `marker` ends.
    fn file_writes(&self, phase: &str, marker: &str) -> Vec<FileWrite> {
        let mut calls = Vec::new();
        for l in self.lines.get(phase).into_iter().flatten() {
            let Some((name, rest)) = l.split_once('(') else {
                continue;
            };
            let Some(name) = WRITE_SYSCALLS.iter().copied().find(|n| *n == name) else {
                continue;
            };
            if !rest.contains(marker) {
                continue;
            }
            let Some((args, ret)) = rest.rsplit_once(") = ") else {
                continue;
            };
            let bytes = ret
                .split_whitespace()
                .next()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            // pwritev(fd, [...], IOVCNT, ...): the number after the array.
            let vectored = matches!(name, "writev" | "pwritev" | "pwritev2");
            let buffers = vectored
                .then(|| args.rsplit_once("], "))
                .flatten()
                .and_then(|(_, tail)| tail.split(',').next()?.trim().parse().ok());
            calls.push(FileWrite {
                name,
                buffers,
                bytes,
            });
        }
        calls
    }
}

/// The syscall a strace line records (`name(args) = ret`); `None` for
/// strace's own lines (`+++ exited`, `--- SIG...`).
fn syscall_name(line: &str) -> Option<&str> {
    let (name, _) = line.split_once('(')?;
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

/// One syscall that wrote file data.
struct FileWrite {
    /// The syscall's name.
    name: &'static str,
    /// Its iovec count (the vectored ones).
    buffers: Option<u64>,
    /// What it returned (bytes written).
    bytes: u64,
}
