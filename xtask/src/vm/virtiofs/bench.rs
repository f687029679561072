//! `cargo xtask test-in-vm --virtiofs-bench`: our daemon against
//! virtiofsd in one guest, the ratios per workload and their table. Apart
//! from the test: it shares the daemons and the boots, not the checks.

use super::*;
use std::collections::BTreeMap;

/// Kernel parameter of the bench boots: the request interrupts of both
/// virtio-fs devices go to vCPU 0. The kernel spreads the managed
/// interrupts of devices over the vCPUs (the first device's to one, the
/// second's to the other), and they can't be moved from user space; a
/// benchmark woken through another vCPU than its own waits longer, so
/// one daemon would be measured with that handicap. The guest pins each
/// run to its device's interrupt vCPU (the plan's `request_irq_cpu`).
pub(super) const SAME_CPU_INTERRUPTS: &str = "isolcpus=managed_irq,1";

/// The benchmark's workloads, in the order the guest runs them.
pub(in crate::vm) const WORKLOADS: &[&str] = &[
    "seq-write-1m",
    "seq-read-1m",
    "rand-write-4k",
    "rand-read-4k",
    "create-stat-unlink",
    "stat",
    "readdir",
];

/// `cargo xtask test-in-vm --virtiofs-bench`: one guest with two virtio-fs
/// devices, one served by `passthroughfs --vhost-user`, the other by
/// virtiofsd, each over a tmpfs directory of its own. The guest
/// (`xtask/vm-virtiofs.c bench`) runs each workload on one mount and then
/// the other, the order swapped every round, so the two runs of a pair are
/// seconds apart on the same guest: O_DIRECT sequential 1 MiB and random
/// 4 KiB reads and writes on a 64 MiB file, create/stat/unlink, stat and
/// readdir of a 1000-file directory.
/// Prints, per workload, the median over the rounds of the ratio
/// ours/virtiofsd of operations per second, and writes the table to
/// `target/vm/virtiofs/bench.md`.
pub(in crate::vm) fn run_virtiofs_bench(args: &VmArgs) -> Result<()> {
    let started = Instant::now();
    let vm_dir = target_dir().join("vm");
    let run_dir = vm_dir.join("virtiofs");
    fs::create_dir_all(&run_dir)?;
    let _lock = lock(&vm_dir.join("run-virtiofs.lock"))?;
    ensure_apt_packages(HOST_PACKAGES)?;
    let kernel = find_kernel(args)?;
    println!("kernel: {} ({})", kernel.vmlinuz.display(), kernel.about);
    let ours = build_daemon(true)?;
    let virtiofsd = find_virtiofsd(args)?;
    let version = Command::new(&virtiofsd)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("virtiofsd: {} ({version})", virtiofsd.display());
    let checker = build_checker(&run_dir)?;
    let initrd = initramfs(&run_dir, &checker, None)?;

    // tmpfs: no disk under the daemons (a shared machine's disk is noise).
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
    let base = PathBuf::from(format!(
        "/dev/shm/xtask-virtiofs-bench-{}",
        std::process::id()
    ));
    let _remove = Remove(base.clone());
    let (ours_dir, peer_dir) = (base.join("ours"), base.join("peer"));
    fs::create_dir_all(&ours_dir)?;
    fs::create_dir_all(&peer_dir)?;
    let ours_socket = run_dir.join("bench-ours.sock");
    let peer_socket = run_dir.join("bench-virtiofsd.sock");
    // virtiofsd serves one VM: both daemons start afresh for each boot.
    let mut start = || -> Result<Vec<Daemon>> {
        let mut ours_cmd = our_daemon(args, &ours, &ours_socket, &ours_dir, "warn");
        // Unconfined, as virtiofsd runs here (`--sandbox none`): the
        // figures compare the serving paths, not the sandboxes.
        ours_cmd
            .args(UNCONFINED)
            .args(["--cache", &args.bench_cache, "--once"]);
        Ok(vec![
            start_daemon(
                ours_cmd,
                &ours_socket,
                &run_dir.join("bench-passthroughfs.log"),
            )?,
            start_daemon(
                virtiofsd_command(&virtiofsd, &peer_socket, &peer_dir, &args.bench_cache),
                &peer_socket,
                &run_dir.join("bench-virtiofsd.log"),
            )?,
        ])
    };
    let extra = format!(
        "{SAME_CPU_INTERRUPTS} xtask.secs={} xtask.rounds={} xtask.workloads={}",
        args.bench_secs,
        args.bench_rounds,
        bench_workloads(args).join(",")
    );
    let console = run_dir.join("console-bench.log");
    let (vm, daemons) = boot_with_fresh_daemons(
        args,
        (&kernel.vmlinuz, &initrd),
        &[(&ours_socket, TAG), (&peer_socket, "peer")],
        ("bench", &extra),
        &console,
        &mut start,
    )?;
    let mut problems = steps_ok(
        &vm,
        &["virtiofs-mount", "virtiofs-mount-peer", "virtiofs-prepare"],
    );
    if !vm
        .console
        .iter()
        .any(|l| l.contains("XTASK-VIRTIOFS-BENCH-DONE"))
    {
        problems.push("the guest didn't finish the workloads".into());
    }
    problems.extend(
        vm.console
            .iter()
            .filter(|l| l.contains("FAIL"))
            .map(|l| format!("guest: {l}")),
    );
    if let Some(k) = &vm.killed {
        problems.push(k.clone());
    }
    // runs[workload] = (ours, virtiofsd) operations per second, in order.
    let mut runs: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for l in &vm.console {
        let Some(rest) = after(l, "XTASK-VIRTIOFS-BENCH: ") else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        let [label, name, ops, _bytes, secs] = w[..] else {
            continue;
        };
        let (Ok(ops), Ok(secs)) = (ops.parse::<f64>(), secs.parse::<f64>()) else {
            continue;
        };
        let entry = runs.entry(name.to_string()).or_default();
        let rate = ops / secs.max(1e-9);
        if label == TAG {
            entry.0.push(rate);
        } else {
            entry.1.push(rate);
        }
    }
    drop(daemons);
    let mut table = bench_table(&runs, args, &kernel, &version);
    match syscall_counts(
        args,
        (&kernel.vmlinuz, &initrd),
        (&ours, &virtiofsd),
        &version,
        &base,
    ) {
        Ok(counts) => table.push_str(&counts),
        Err(e) => problems.push(format!("counting the daemons' syscalls: {e:#}")),
    }
    println!("\n==> virtio-fs benchmark\n{table}");
    fs::write(run_dir.join("bench.md"), &table)?;
    println!(
        "(also in {}; console {}; total {:.0} s)",
        run_dir.join("bench.md").display(),
        console.display(),
        started.elapsed().as_secs_f64()
    );
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    Ok(())
}

/// The workloads `--bench-workload` names (all of them if none), in the
/// order the guest runs them.
fn bench_workloads(args: &VmArgs) -> Vec<&'static str> {
    WORKLOADS
        .iter()
        .copied()
        .filter(|w| args.bench_workload.is_empty() || args.bench_workload.iter().any(|b| b == w))
        .collect()
}

/// The ratios table: per workload, the median of the per-round ratios
/// ours/virtiofsd of operations per second, and the ratios themselves.
fn bench_table(
    runs: &BTreeMap<String, (Vec<f64>, Vec<f64>)>,
    args: &VmArgs,
    kernel: &Kernel,
    virtiofsd: &str,
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "virtio-fs in one guest ({}, qemu TCG, {} CPUs, {} MiB) with two devices: \
         passthroughfs --vhost-user and {virtiofsd} (both --sandbox none --cache {}, \
         the guest's O_DIRECT honoured), each serving a tmpfs directory; {} rounds of \
         {} s per workload and mount, the order swapped every round. Ratio: ours / \
         virtiofsd, operations per second (above 1: ours is faster).\n",
        kernel.about, args.cpus, args.memory, args.bench_cache, args.bench_rounds, args.bench_secs
    );
    let _ = writeln!(t, "| workload | ours / virtiofsd (median) | per round |");
    let _ = writeln!(t, "|---|---|---|");
    for w in bench_workloads(args) {
        let ratios: Vec<f64> = runs
            .get(w)
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x / y.max(1e-9)).collect())
            .unwrap_or_default();
        if ratios.is_empty() {
            let _ = writeln!(t, "| {w} | no result | |");
            continue;
        }
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        let median = crate::vm::median(ratios);
        let _ = writeln!(t, "| {w} | {median:.2}x | {} |", each.join(", "));
    }
    t
}
