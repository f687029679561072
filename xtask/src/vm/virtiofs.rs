//! `cargo xtask test-in-vm --virtiofs`: the guest mounts `-t virtiofs` a
//! directory that `passthroughfs --vhost-user` serves on the host.
//!
//! 1. **build**: the daemon (`cargo build -p fusewire-passthroughfs`, for the host)
//!    and the guest's checker (`xtask/vm-virtiofs.c`, `gcc -static`).
//! 2. **initramfs**: busybox, the usual `/init` (`xtask/vm-init.sh`), the
//!    checker, and a plan that mounts `-t virtiofs` and runs it in the
//!    phase the kernel command line names (`xtask.phase=`).
//! 3. **daemon**: `passthroughfs -f --vhost-user SOCKET --tag vfs
//!    SHARED`, confined as by default (namespace, Landlock, seccomp
//!    kill), where SHARED (`target/vm/virtiofs/shared`)
//!    holds a file the host wrote (`from-host.bin`).
//! 4. **boot 1 (check)**: qemu with the guest's memory in a shared memfd
//!    (`memory-backend-memfd,share=on`, which vhost-user needs) and a
//!    `vhost-user-fs-pci` device on the daemon's socket. The guest runs
//!    the checker: file operations, the host's file, random reads and
//!    writes against a model (buffered and `O_DIRECT`), and leaves files
//!    whose sizes and FNV-1a hashes it prints; the host compares them with
//!    what SHARED holds once the guest powered off. Then the operations
//!    the host's mount suite covers (`crates/fuse-backend-passthrough/tests`):
//!    xattrs (set, get, list, remove, the XATTR_CREATE/REPLACE errors,
//!    ENODATA, ERANGE, symlinks), setattr (modes with set-id bits, chown
//!    as root, truncate and ftruncate both ways, utimensat with explicit
//!    times, UTIME_NOW and UTIME_OMIT), renameat2 RENAME_NOREPLACE and
//!    RENAME_EXCHANGE and rename over a file, hard-link counts, O_APPEND,
//!    fallocate (plain, PUNCH_HOLE|KEEP_SIZE reading back zeros) and
//!    SEEK_DATA/SEEK_HOLE, copy_file_range, O_TMPFILE with linkat, FIFOs,
//!    sockets and device nodes, statx, telldir/seekdir and a listing of a
//!    directory that changes meanwhile, a shared writable mapping (msync,
//!    read back with pread and O_DIRECT, and the reverse), processes
//!    writing disjoint ranges of one file and appending to another, and
//!    lock waits between processes (fcntl F_SETLKW with F_GETLK naming the
//!    holder, OFD locks, flock): the waiter must be seen asleep in its
//!    system call and get the lock only after the release. A feature the
//!    backing file system lacks is a `SKIP:` line, which the summary
//!    lists. Then pjdfstest (the host's, with the libraries it links, and
//!    `xtask/pjdfstest.toml`) runs on the mount.
//! 5. **boot 2 (reconnect, reboot, kill)**: a new qemu against the same
//!    daemon, which must have waited for it: the files of boot 1 must be
//!    there. The guest then reboots (same qemu, same connection: the
//!    driver starts a new session with a new INIT) and finds them again.
//!    Then the guest writes 1 MiB blocks in a loop and the host kills the
//!    daemon (SIGKILL) under that load. The guest's requests then never
//!    complete; what must not happen is a hang on the host: the guest's
//!    init (which doesn't touch the mount) powers off and qemu must exit.
//!
//! The run fails if a checker exits non-zero, a hash differs, the daemon
//! exits before it is killed, or qemu doesn't exit in time.

use super::*;
use std::collections::BTreeMap;

/// The tag the device and the guest's mount use.
const TAG: &str = "vfs";
/// The guest's checker.
const CHECKER_SOURCE: &str = include_str!("../../vm-virtiofs.c");
/// Where the checker lies in the guest.
const GUEST_CHECKER: &str = "/xtask/vm-virtiofs";
/// The file the host seeds: its size and pattern seed (the checker knows
/// both).
const FROM_HOST: (&str, usize, u64) = ("from-host.bin", 5 * 1024 * 1024 + 77, 1);
/// The file the guest leaves: its size and pattern seed.
const FROM_GUEST: (&str, usize, u64) = ("from-guest.bin", 3 * 1024 * 1024 + 123, 2);
/// Seconds of guest load before the host kills the daemon.
const LOAD_SECS: u64 = 3;
/// Seconds qemu gets to exit once the guest powered off (or the host
/// gave up waiting for it).
const EXIT_SECS: u64 = 60;

/// Seconds qemu gets to exit on its own once the guest powered off after
/// the daemon was killed (it then waits for the dead backend: see
/// [`boot_virtiofs`]).
const KILLED_EXIT_SECS: u64 = 15;

/// Kernel parameter of the bench boots: the request interrupts of both
/// virtio-fs devices go to vCPU 0. The kernel spreads the managed
/// interrupts of devices over the vCPUs (the first device's to one, the
/// second's to the other), and they can't be moved from user space; a
/// benchmark woken through another vCPU than its own waits longer, so
/// one daemon would be measured with that handicap. The guest pins each
/// run to its device's interrupt vCPU (the plan's `request_irq_cpu`).
const SAME_CPU_INTERRUPTS: &str = "isolcpus=managed_irq,1";

/// Seconds the guest gets to reach `/init` (it takes about 3 under TCG).
const BOOT_SECS: u64 = 90;
/// Boots tried while the guest doesn't reach `/init`.
const BOOT_ATTEMPTS: u32 = 3;

/// The plan `/init` sources (`xtask/vm-init.sh`'s `run_test` reports each
/// step).
const PLAN: &str = r#"# Generated by `cargo xtask test-in-vm --virtiofs`.
phase=$(sed -n 's/.*xtask\.phase=\([a-z]*\).*/\1/p' /proc/cmdline)
mkdir -p /mnt/vfs
run_test virtiofs-mount / mount -t virtiofs vfs /mnt/vfs
grep virtiofs /proc/mounts
# The vCPU that takes the request interrupts of the virtio-fs device
# tagged $1 (/sys/fs/virtiofs/N/tag names it, its `device` link the
# virtio device whose "-requests.0" line /proc/interrupts has).
request_irq_cpu() {
	for d in /sys/fs/virtiofs/*; do
		[ "$(cat "$d/tag" 2>/dev/null)" = "$1" ] || continue
		dev=$(basename "$(readlink -f "$d/device")")
		irq=$(grep " $dev-requests.0\$" /proc/interrupts | cut -d: -f1 | tr -d ' ')
		[ -n "$irq" ] && cut -d, -f1 "/proc/irq/$irq/effective_affinity_list" | cut -d- -f1
	done
}
case $phase in
check)
	run_test virtiofs-check / /xtask/vm-virtiofs check /mnt/vfs
	mkdir -p /mnt/vfs/pjd
	run_test virtiofs-pjdfstest /mnt/vfs/pjd env NO_COLOR=1 RUST_BACKTRACE=0 \
		/xtask/pjdfstest -c /xtask/pjdfstest.toml -p /mnt/vfs/pjd
	run_test virtiofs-umount / umount /mnt/vfs
	;;
kill)
	# The first time: the files of the check boot, then a reboot within
	# the same qemu (the same vhost-user connection). The marker on the
	# shared directory says which time this is.
	if [ ! -e /mnt/vfs/reboot-marker ]; then
		run_test virtiofs-reconnect / /xtask/vm-virtiofs reconnect /mnt/vfs
		echo rebooting > /mnt/vfs/reboot-marker
		umount /mnt/vfs
		echo "XTASK-VIRTIOFS-REBOOTING"
		reboot -f
	fi
	run_test virtiofs-after-reboot / rm /mnt/vfs/reboot-marker
	run_test virtiofs-reconnect-again / /xtask/vm-virtiofs reconnect /mnt/vfs
	/xtask/vm-virtiofs load /mnt/vfs &
	echo "XTASK-VIRTIOFS-LOADING"
	# The host kills the daemon during the load; this shell doesn't touch
	# the mount, so it goes on and powers off (skipping the sync of
	# /init, which would wait for the dead daemon).
	sleep 25
	echo "XTASK-VIRTIOFS-ALIVE: $(cut -d' ' -f1 /proc/uptime)"
	echo "XTASK-VM-DONE: $(cut -d' ' -f1 /proc/uptime)"
	poweroff -f
	;;
bench)
	# Two devices, two daemons: each workload runs on one mount then the
	# other, the order swapped every round, so each pair of runs is
	# seconds apart.
	secs=$(sed -n 's/.*xtask\.secs=\([0-9]*\).*/\1/p' /proc/cmdline)
	rounds=$(sed -n 's/.*xtask\.rounds=\([0-9]*\).*/\1/p' /proc/cmdline)
	workloads=$(sed -n 's/.*xtask\.workloads=\([a-z0-9,-]*\).*/\1/p' /proc/cmdline | tr , ' ')
	mkdir -p /mnt/peer
	run_test virtiofs-mount-peer / mount -t virtiofs peer /mnt/peer
	run_test virtiofs-prepare / sh -c \
		'/xtask/vm-virtiofs prepare /mnt/vfs && /xtask/vm-virtiofs prepare /mnt/peer'
	# Each mount's runs are pinned to the vCPU its device's request
	# queue interrupts (both vCPU 0: isolcpus=managed_irq,1), so a
	# completion wakes the benchmark on its own vCPU, the same for both
	# daemons.
	cpu_vfs=$(request_irq_cpu vfs)
	cpu_peer=$(request_irq_cpu peer)
	echo "bench: vfs runs on CPU ${cpu_vfs:-?}, peer on CPU ${cpu_peer:-?} (their request interrupts')"
	r=0
	while [ "$r" -lt "${rounds:-3}" ]; do
		r=$((r + 1))
		for w in $workloads; do
			if [ $((r % 2)) -eq 1 ]; then order="vfs peer"; else order="peer vfs"; fi
			for m in $order; do
				eval "cpu=\$cpu_$m"
				taskset -c "${cpu:-0}" /xtask/vm-virtiofs bench "/mnt/$m" "${secs:-2}" "$m" "$w" ||
					echo "FAIL: bench $m $w"
			done
		done
	done
	echo "XTASK-VIRTIOFS-BENCH-DONE"
	# Where each device's interrupts went (a device whose queue interrupts
	# another vCPU than the benchmark's wakes it later).
	grep -E 'CPU|virtio' /proc/interrupts
	umount /mnt/vfs /mnt/peer
	;;
syscount)
	# Both daemons run under strace: each workload a fixed number of
	# times on each mount (vm-virtiofs.c syscount).
	mib=$(sed -n 's/.*xtask\.mib=\([0-9]*\).*/\1/p' /proc/cmdline)
	mkdir -p /mnt/peer
	run_test virtiofs-mount-peer / mount -t virtiofs peer /mnt/peer
	cpu_vfs=$(request_irq_cpu vfs)
	cpu_peer=$(request_irq_cpu peer)
	run_test virtiofs-syscount / sh -c \
		"taskset -c ${cpu_vfs:-0} /xtask/vm-virtiofs syscount /mnt/vfs vfs ${mib:-32} && taskset -c ${cpu_peer:-0} /xtask/vm-virtiofs syscount /mnt/peer peer ${mib:-32}"
	umount /mnt/vfs /mnt/peer
	;;
*)
	echo "xtask-vm: no xtask.phase= on the command line"
	;;
esac
"#;

/// The guest's `/etc`: pjdfstest switches to `nobody` and `daemon`, each
/// with its primary group (xtask/pjdfstest.toml).
const GUEST_ETC: &[(&str, &str)] = &[
    (
        "passwd",
        "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\n\
         nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ),
    ("group", "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n"),
    (
        "nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files\n",
    ),
];

/// Where pjdfstest and its configuration lie in the guest.
const GUEST_PJDFSTEST: (&str, &str) = ("/xtask/pjdfstest", "/xtask/pjdfstest.toml");

/// The daemon, killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs the virtio-fs test; errors end the run.
pub(super) fn run_virtiofs(args: &VmArgs) -> Result<()> {
    let started = Instant::now();
    let mut timings: Vec<(&str, f64)> = Vec::new();
    let vm_dir = target_dir().join("vm");
    let run_dir = vm_dir.join("virtiofs");
    fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let _lock = lock(&vm_dir.join("run-virtiofs.lock"))?;
    ensure_apt_packages(HOST_PACKAGES)?;

    println!("\n--> kernel");
    let t = Instant::now();
    let kernel = find_kernel(args)?;
    println!("kernel: {} ({})", kernel.vmlinuz.display(), kernel.about);
    timings.push(("kernel", t.elapsed().as_secs_f64()));

    println!("\n--> build");
    let t = Instant::now();
    let daemon_exe = build_daemon(args.release)?;
    let checker = build_checker(&run_dir)?;
    crate::test::ensure_pjdfstest()?;
    let (pjdfstest, version) =
        crate::test::pjdfstest_binary().context("pjdfstest is not installed")?;
    println!("pjdfstest: {} ({version})", pjdfstest.display());
    timings.push(("build", t.elapsed().as_secs_f64()));

    println!("\n--> initramfs");
    let t = Instant::now();
    let initrd = initramfs(&run_dir, &checker, Some(&pjdfstest))?;
    timings.push(("initramfs", t.elapsed().as_secs_f64()));

    println!("\n--> daemon");
    let shared = fresh_shared_dir(&run_dir)?;
    let socket = run_dir.join("vhost-user-fs.sock");
    let daemon_log = run_dir.join("daemon.log");
    // The per-request data lines: how each WRITE reached the file.
    let cmd = our_daemon(
        args,
        &daemon_exe,
        &socket,
        &shared,
        "info,fuse_transport_virtio::data=debug",
    );
    let mut daemon = start_daemon(cmd, &socket, &daemon_log)?;

    let mut problems = Vec::new();
    println!("\n--> boot 1: file operations and data integrity");
    let log1 = run_dir.join("console-check.log");
    let (vm1, mut notes) = boot_virtiofs(
        args,
        (&kernel.vmlinuz, &initrd),
        &[(&socket, TAG)],
        "check",
        "",
        &log1,
        None,
    )?;
    timings.extend(vm1.timings());
    problems.extend(steps_ok(
        &vm1,
        &[
            "virtiofs-mount",
            "virtiofs-check",
            "virtiofs-pjdfstest",
            "virtiofs-umount",
        ],
    ));
    let pjd = pjdfstest_report(&vm1);
    problems.extend(compare_hashes(&vm1, &shared));
    problems.extend(check_write_path(&daemon_log));
    if let Ok(Some(status)) = daemon.0.try_wait() {
        problems.push(format!(
            "the daemon exited when the first VM disconnected ({status}); it must wait for \
             the next"
        ));
    }

    println!("\n--> boot 2: reconnect, then the daemon killed under load");
    let log2 = run_dir.join("console-kill.log");
    let t = Instant::now();
    let (vm2, notes2) = boot_virtiofs(
        args,
        (&kernel.vmlinuz, &initrd),
        &[(&socket, TAG)],
        "kill",
        "",
        &log2,
        Some(&mut daemon),
    )?;
    timings.push(("boot 2", t.elapsed().as_secs_f64()));
    notes.extend(notes2);
    problems.extend(steps_ok(
        &vm2,
        &[
            "virtiofs-mount",
            "virtiofs-reconnect",
            "virtiofs-after-reboot",
            "virtiofs-reconnect-again",
        ],
    ));
    let boots = vm2
        .console
        .iter()
        .filter(|l| l.contains("XTASK-VM-BOOTED"))
        .count();
    if boots != 2 {
        problems.push(format!("boot 2: the guest booted {boots} times, not twice"));
    }
    if !vm2
        .console
        .iter()
        .any(|l| l.contains("XTASK-VIRTIOFS-ALIVE"))
    {
        problems.push("boot 2: the guest didn't go on after the daemon was killed".into());
    }
    if !vm2
        .console
        .iter()
        .any(|l| l.contains("XTASK-VIRTIOFS-LOAD: "))
    {
        problems.push("boot 2: the load wrote nothing before the kill".into());
    }

    // The same checks with the daemon's queue threads running async
    // handlers (`--runtime tokio|uring`): their own code paths for
    // concurrent requests and lock waits. A run given --daemon-arg serves
    // as the caller chose and makes none.
    let mut runtime_boots = Vec::new();
    if args.daemon_arg.is_empty() {
        for (runtime, timing) in [("tokio", "boot tokio"), ("uring", "boot uring")] {
            println!("\n--> boot with --runtime {runtime}: file operations and pjdfstest");
            let t = Instant::now();
            let shared = fresh_shared_dir(&run_dir)?;
            let log = run_dir.join(format!("console-check-{runtime}.log"));
            let daemon_log = run_dir.join(format!("daemon-{runtime}.log"));
            let mut cmd = our_daemon(args, &daemon_exe, &socket, &shared, "info");
            cmd.args(["--runtime", runtime]);
            let _daemon = start_daemon(cmd, &socket, &daemon_log)?;
            let (vm, n) = boot_virtiofs(
                args,
                (&kernel.vmlinuz, &initrd),
                &[(&socket, TAG)],
                "check",
                "",
                &log,
                None,
            )?;
            timings.push((timing, t.elapsed().as_secs_f64()));
            notes.extend(n.into_iter().map(|n| format!("--runtime {runtime}: {n}")));
            let label = |p: String| format!("--runtime {runtime}: {p}");
            problems.extend(
                steps_ok(
                    &vm,
                    &[
                        "virtiofs-mount",
                        "virtiofs-check",
                        "virtiofs-pjdfstest",
                        "virtiofs-umount",
                    ],
                )
                .into_iter()
                .map(label),
            );
            problems.extend(compare_hashes(&vm, &shared).into_iter().map(label));
            runtime_boots.push((runtime, vm, log));
        }
    } else {
        println!(
            "\n(no boots with --runtime tokio|uring: --daemon-arg chose the daemon's options)"
        );
    }

    println!("\n==> test-in-vm --virtiofs summary");
    println!("kernel:  {} ({})", kernel.vmlinuz.display(), kernel.about);
    println!("daemon log: {}", daemon_log.display());
    for (vm, log) in [(&vm1, &log1), (&vm2, &log2)] {
        print_steps(vm, "");
        if let Some(k) = &vm.killed {
            problems.push(k.clone());
        }
        println!("console: {}", log.display());
    }
    println!("pjdfstest in the guest: {pjd}");
    print_guest_skips(&vm1, "");
    for (runtime, vm, log) in &runtime_boots {
        print_steps(vm, &format!(" ({runtime})"));
        if let Some(k) = &vm.killed {
            problems.push(format!("--runtime {runtime}: {k}"));
        }
        println!("console: {}", log.display());
        println!(
            "pjdfstest in the guest, --runtime {runtime}: {}",
            pjdfstest_report(vm)
        );
        print_guest_skips(vm, &format!(" (--runtime {runtime})"));
    }
    for n in &notes {
        println!("note: {n}");
    }
    print_timings(&timings, started.elapsed().as_secs_f64());
    if !problems.is_empty() {
        for p in &problems {
            println!("problem: {p}");
        }
        bail!("{}", problems.join("; "));
    }
    println!("test-in-vm --virtiofs: ok");
    Ok(())
}

/// How many checks the guest skipped, then each (its `SKIP: ...` line),
/// `suffix` after "skipped".
fn print_guest_skips(vm: &VmRun, suffix: &str) {
    let skips = guest_skips(vm);
    println!("guest checks skipped{suffix}: {}", skips.len());
    for skipped in skips {
        println!("guest skipped{suffix}: {skipped}");
    }
}

/// One line per step the guest ran: its name, how it ended, how long it
/// took, then `suffix`.
fn print_steps(vm: &VmRun, suffix: &str) {
    for e in &vm.exes {
        let result = match e.status {
            Some(0) => "ok".to_string(),
            Some(s) => format!("exit {s}"),
            None => "no exit".to_string(),
        };
        println!("{:<24} {result:>8} {:>6.1} s{suffix}", e.name, e.secs);
    }
}

/// `run_dir/shared`, emptied, with the file the guest checks
/// ([`FROM_HOST`]): the directory a check boot's daemon serves.
fn fresh_shared_dir(run_dir: &Path) -> Result<PathBuf> {
    let shared = run_dir.join("shared");
    if shared.exists() {
        fs::remove_dir_all(&shared).with_context(|| format!("removing {}", shared.display()))?;
    }
    fs::create_dir_all(&shared)?;
    fs::write(shared.join(FROM_HOST.0), pattern(FROM_HOST.1, FROM_HOST.2))?;
    Ok(shared)
}

/// The virtiofsd version the benchmark compares with.
const VIRTIOFSD_VERSION: &str = "^1.14";

/// The benchmark's workloads, in the order the guest runs them.
pub(super) const WORKLOADS: &[&str] = &[
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
pub(super) fn run_virtiofs_bench(args: &VmArgs) -> Result<()> {
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

/// virtiofsd on `socket`, serving `shared` with `--cache cache`, honouring
/// the guest's O_DIRECT (virtiofsd drops it by default) and confining
/// nothing, as our daemon.
fn virtiofsd_command(virtiofsd: &Path, socket: &Path, shared: &Path, cache: &str) -> Command {
    let mut cmd = Command::new(virtiofsd);
    cmd.arg("--socket-path")
        .arg(socket)
        .arg("--shared-dir")
        .arg(shared)
        .args(["--sandbox", "none", "--allow-direct-io", "--cache", cache]);
    cmd
}

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
fn syscall_counts(
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

/// The median of `v` (which must not be empty).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
        let _ = writeln!(t, "| {w} | {:.2}x | {} |", median(&ratios), each.join(", "));
    }
    t
}

/// `--virtiofsd`, else one under `target/tools` (installed there with
/// `cargo install` if missing: it needs libseccomp-dev and libcap-ng-dev).
fn find_virtiofsd(args: &VmArgs) -> Result<PathBuf> {
    if let Some(p) = &args.virtiofsd {
        return Ok(p.clone());
    }
    let root = target_dir().join("tools");
    let exe = root.join("bin/virtiofsd");
    if exe.is_file() {
        return Ok(exe);
    }
    ensure_apt_packages(&["libseccomp-dev", "libcap-ng-dev", "pkg-config"])?;
    let mut cmd = cargo();
    cmd.args(["install", "--locked", "--root"])
        .arg(&root)
        .args(["virtiofsd", "--version", VIRTIOFSD_VERSION]);
    run_cmd(&mut cmd)?;
    Ok(exe)
}

/// Builds the guest's checker (`gcc -static`) in `run_dir`.
fn build_checker(run_dir: &Path) -> Result<PathBuf> {
    let checker = run_dir.join("vm-virtiofs");
    let source = run_dir.join("vm-virtiofs.c");
    fs::write(&source, CHECKER_SOURCE)?;
    run_cmd(
        Command::new("gcc")
            .args(["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&checker)
            .arg(&source),
    )?;
    Ok(checker)
}

/// `cargo build -p fusewire-passthroughfs` for the host; the executable.
fn build_daemon(release: bool) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args([
        "build",
        "-p",
        "fusewire-passthroughfs",
        "--bin",
        "passthroughfs",
    ])
    .current_dir(crate::workspace_root());
    if release {
        cmd.arg("--release");
    }
    run_cmd(&mut cmd)?;
    let exe = target_dir()
        .join(if release { "release" } else { "debug" })
        .join("passthroughfs");
    if !exe.is_file() {
        bail!("cargo built no {}", exe.display());
    }
    Ok(exe)
}

/// The shared libraries `ldd` lists for `exe` (the loader included).
fn shared_libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .context("running ldd")?;
    if !out.status.success() {
        bail!("ldd {} failed", exe.display());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// The initramfs: busybox, `/init`, the checker, pjdfstest with its
/// libraries and configuration, and [`PLAN`].
fn initramfs(run_dir: &Path, checker: &Path, pjdfstest: Option<&Path>) -> Result<PathBuf> {
    let staging = run_dir.join("initramfs");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    for dir in [
        "bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "tmp", "root", "run",
        "mnt", "xtask",
    ] {
        fs::create_dir_all(staging.join(dir))?;
    }
    install(&staging, Path::new(BUSYBOX), Path::new(BUSYBOX))?;
    fs::write(staging.join("init"), INIT_SCRIPT)?;
    fs::set_permissions(staging.join("init"), fs::Permissions::from_mode(0o755))?;
    for (name, text) in GUEST_ETC {
        fs::write(staging.join("etc").join(name), text)?;
    }
    install(&staging, checker, Path::new(GUEST_CHECKER))?;
    if let Some(pjdfstest) = pjdfstest {
        install(&staging, pjdfstest, Path::new(GUEST_PJDFSTEST.0))?;
        for lib in shared_libraries(pjdfstest)? {
            install(&staging, &lib, &lib)?;
        }
        fs::copy(
            crate::workspace_root().join("xtask/pjdfstest.toml"),
            staging.join(GUEST_PJDFSTEST.1.trim_start_matches('/')),
        )?;
    }
    fs::write(staging.join("xtask/plan.sh"), PLAN)?;
    let initrd = run_dir.join("initrd.gz");
    pack(&staging, &initrd)?;
    fs::remove_dir_all(&staging)?;
    Ok(initrd)
}

/// Our daemon's options for no confinement at all (its defaults over
/// vhost-user confine it: namespace, Landlock, seccomp kill).
const UNCONFINED: [&str; 6] = [
    "--sandbox",
    "none",
    "--landlock",
    "off",
    "--seccomp",
    "none",
];

/// `passthroughfs --vhost-user` on `socket`, serving `shared`, with
/// `--daemon-arg`s, logging at `rust_log`.
fn our_daemon(args: &VmArgs, exe: &Path, socket: &Path, shared: &Path, rust_log: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("-f")
        .arg("--vhost-user")
        .arg(socket)
        .args(["--tag", TAG])
        .args(&args.daemon_arg)
        .arg(shared)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| rust_log.into()),
        );
    cmd
}

/// Starts the daemon `cmd` (its output to `log`) and waits for it to
/// listen on `socket`.
fn start_daemon(mut cmd: Command, socket: &Path, log: &Path) -> Result<Daemon> {
    let _ = fs::remove_file(socket);
    let log_file = fs::File::create(log)?;
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    let line = display(&cmd);
    println!("$ {line} (log: {})", log.display());
    let mut daemon = Daemon(cmd.spawn().with_context(|| format!("starting `{line}`"))?);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if let Some(status) = daemon.0.try_wait()? {
            bail!(
                "`{line}` exited ({status}) before listening; its log:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            bail!("`{line}` didn't listen on {} in 30 s", socket.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(daemon)
}

/// [`boot_once`], again (at most [`BOOT_ATTEMPTS`] times in all) while
/// the guest doesn't boot: TCG now and then leaves the guest kernel hung
/// or crashed early in its boot (before `/init`, so before any request),
/// which says nothing about the transport. The daemon takes the next
/// connection as it would after any VM.
fn boot_virtiofs(
    args: &VmArgs,
    image: (&Path, &Path),
    devices: &[(&Path, &str)],
    phase: &str,
    extra_append: &str,
    log: &Path,
    mut kill: Option<&mut Daemon>,
) -> Result<(VmRun, Vec<String>)> {
    let mut all_notes = Vec::new();
    for attempt in 1..=BOOT_ATTEMPTS {
        let (vm, notes) = boot_once(
            args,
            image,
            devices,
            phase,
            extra_append,
            log,
            kill.as_deref_mut(),
        )?;
        all_notes.extend(notes);
        if vm.booted.is_some() || attempt == BOOT_ATTEMPTS {
            return Ok((vm, all_notes));
        }
        let kept = log.with_extension(format!("boot-{attempt}.log"));
        let _ = fs::rename(log, &kept);
        let note = format!(
            "{phase}: the guest didn't boot (attempt {attempt} of {BOOT_ATTEMPTS}; its \
             console is in {}); booting again",
            kept.display()
        );
        println!("test-in-vm: {note}");
        all_notes.push(note);
    }
    bail!("{phase}: no boot attempt left")
}

/// [`boot_once`] with daemons that serve one VM each (virtiofsd, ours
/// with `--once`): `start` starts them (again) before every boot, since
/// a boot that failed ended their connection. Boots again while the guest
/// doesn't reach `/init`, as [`boot_virtiofs`]; returns the last boot and
/// its daemons.
fn boot_with_fresh_daemons(
    args: &VmArgs,
    image: (&Path, &Path),
    devices: &[(&Path, &str)],
    (phase, extra_append): (&str, &str),
    log: &Path,
    start: &mut dyn FnMut() -> Result<Vec<Daemon>>,
) -> Result<(VmRun, Vec<Daemon>)> {
    for attempt in 1..=BOOT_ATTEMPTS {
        let daemons = start()?;
        let (vm, _) = boot_once(args, image, devices, phase, extra_append, log, None)?;
        if vm.booted.is_some() || attempt == BOOT_ATTEMPTS {
            return Ok((vm, daemons));
        }
        let kept = log.with_extension(format!("boot-{attempt}.log"));
        let _ = fs::rename(log, &kept);
        println!(
            "test-in-vm: {phase}: the guest didn't boot (attempt {attempt} of {BOOT_ATTEMPTS}; \
             its console is in {}); booting again with fresh daemons",
            kept.display()
        );
    }
    bail!("{phase}: no boot attempt left")
}

/// Boots the guest in `phase` with a virtio-fs device per `(socket, tag)`
/// and follows its
/// console until qemu exits. With `kill`, the daemon is killed
/// [`LOAD_SECS`] after the guest said its load started; the notes say
/// what became of qemu then.
///
/// qemu (7.2) doesn't exit on its own when the guest powers off after the
/// backend died: stopping the device asks the backend for the queues'
/// state and waits for the answer on the closed socket. It still answers
/// SIGTERM (and exits 0): the host isn't hung. A qemu that doesn't end
/// then either is a failure.
fn boot_once(
    args: &VmArgs,
    (vmlinuz, initrd): (&Path, &Path),
    devices: &[(&Path, &str)],
    phase: &str,
    extra_append: &str,
    log: &Path,
    mut kill: Option<&mut Daemon>,
) -> Result<(VmRun, Vec<String>)> {
    // tsc=reliable: see `BASE_APPEND`.
    let append =
        format!("console=ttyS0 panic=-1 quiet tsc=reliable xtask.phase={phase} {extra_append}");
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-cpu", "max"])
        .args(["-smp", &args.cpus.to_string()])
        .args(["-m", &args.memory.to_string()])
        .args(["-nographic", "-nic", "none"])
        // The kill phase reboots the guest once (a new session on the same
        // connection); elsewhere a reboot ends the run (a panic, with
        // `panic=-1`).
        .args(if phase == "kill" {
            &[][..]
        } else {
            &["-no-reboot"][..]
        })
        .args([
            "-object",
            &format!("memory-backend-memfd,id=mem,size={}M,share=on", args.memory),
            "-numa",
            "node,memdev=mem",
        ])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (i, (socket, tag)) in devices.iter().enumerate() {
        cmd.arg("-chardev")
            .arg(format!("socket,id=vfs{i},path={}", utf8(socket)?))
            .arg("-device")
            .arg(format!(
                "vhost-user-fs-pci,chardev=vfs{i},tag={tag},queue-size=1024"
            ));
    }
    let line = display(&cmd);
    println!("$ {line}");
    let (mut qemu, rx, mut log_file, mut vm) = spawn_qemu(&mut cmd, &line, log)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let boot_deadline = Instant::now() + Duration::from_secs(BOOT_SECS);
    let mut kill_at: Option<Instant> = None;
    let mut killed_daemon = false;
    let mut notes = Vec::new();
    let mut exit_by: Option<Instant> = None;
    let mut open_streams = 2;
    while open_streams > 0 {
        let now = Instant::now();
        if let (Some(at), Some(daemon)) = (kill_at, kill.as_deref_mut()) {
            if now >= at {
                println!("test-in-vm: killing the daemon (SIGKILL) under the guest's load");
                if let Ok(Some(status)) = daemon.0.try_wait() {
                    println!("test-in-vm: the daemon had exited already ({status})");
                }
                let _ = daemon.0.kill();
                let _ = daemon.0.wait();
                killed_daemon = true;
                kill_at = None;
                exit_by = Some(now + Duration::from_secs(args.timeout.min(120)));
            }
        }
        // Until the guest says it booted, the boot's own deadline.
        let boot_by = vm.booted.is_none().then_some(boot_deadline);
        let until = [Some(deadline), kill_at, exit_by, boot_by]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(deadline);
        match rx.recv_timeout(until.saturating_duration_since(now)) {
            Ok(Event::Line(l)) => {
                let _ = writeln!(log_file, "{l}");
                if !args.quiet || l.contains("XTASK-") || l.contains("FAIL") {
                    println!("vm| {l}");
                }
                if l.contains("XTASK-VIRTIOFS-LOADING") && kill.is_some() {
                    kill_at = Some(Instant::now() + Duration::from_secs(LOAD_SECS));
                }
                if l.contains("XTASK-VM-DONE") {
                    let secs = if killed_daemon {
                        KILLED_EXIT_SECS
                    } else {
                        EXIT_SECS
                    };
                    exit_by = Some(Instant::now() + Duration::from_secs(secs));
                }
                vm.line(&l);
                vm.console.push(l);
            }
            Ok(Event::Eof) => open_streams -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if exit_by.is_some_and(|t| now >= t) {
                    let msg = if vm.done.is_some() {
                        format!(
                            "qemu didn't exit within {} s of the guest's power-off",
                            if killed_daemon {
                                KILLED_EXIT_SECS
                            } else {
                                EXIT_SECS
                            }
                        )
                    } else {
                        "the guest didn't power off after the daemon was killed".to_string()
                    };
                    println!("test-in-vm: {msg}");
                    println!("{}", threads_of(qemu.0.id()));
                    let ended = terminate(&mut qemu.0);
                    println!("test-in-vm: SIGTERM to qemu: {ended}");
                    match (
                        killed_daemon,
                        vm.done.is_some(),
                        ended.starts_with("exited"),
                    ) {
                        // The backend is gone: qemu's vhost-user-fs
                        // device waits for its answer at power-off. The
                        // host isn't hung as long as qemu ends on SIGTERM.
                        (true, true, true) => notes.push(format!(
                            "{msg}: qemu's vhost-user-fs waits for the dead backend at \
                             power-off; it ended on SIGTERM"
                        )),
                        _ => vm.killed = Some(format!("{phase}: {msg} (SIGTERM: {ended})")),
                    }
                    let _ = qemu.0.kill();
                    break;
                }
                if vm.booted.is_none() && now >= boot_deadline {
                    let msg =
                        format!("{phase}: the guest didn't boot in {BOOT_SECS} s; qemu killed");
                    println!("test-in-vm: {msg}");
                    // Where qemu waits says whether it is the guest or
                    // the device (a vhost-user reply that never came).
                    println!("{}", threads_of(qemu.0.id()));
                    vm.killed = Some(msg);
                    let _ = qemu.0.kill();
                    break;
                }
                if now >= deadline {
                    let msg = format!("{phase}: timed out after {} s; qemu killed", args.timeout);
                    println!("test-in-vm: {msg}");
                    vm.killed = Some(msg);
                    let _ = qemu.0.kill();
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = qemu.0.wait()?;
    vm.ended = Some(Instant::now());
    vm.qemu_status = Some(status.to_string());
    println!("qemu: {status}");
    Ok((vm, notes))
}

/// The state and kernel wait channel of each thread of process `pid`.
fn threads_of(pid: u32) -> String {
    let mut out = format!("threads of {pid}:");
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out + " (gone)";
    };
    for t in tasks.flatten() {
        let p = t.path();
        let read = |f: &str| fs::read_to_string(p.join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
            .unwrap_or_default();
        let _ = write!(
            out,
            "\n  {} {} {state} wchan={}",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan")
        );
    }
    out
}

/// Sends SIGTERM and waits up to 15 s: what became of the process.
fn terminate(child: &mut Child) -> String {
    // SAFETY: kill(2) on our own child's pid, which it still is: it has
    // not been waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    match wait_for_exit(child, Duration::from_secs(15)) {
        Some(status) => format!("exited ({status})"),
        None => "still running after 15 s".to_string(),
    }
}

/// The daemon's data lines (`fuse_transport_virtio::data` at debug): every
/// 1 MiB WRITE must have gone to the file in one `pwritev` from guest
/// memory, and there must be at least one.
fn check_write_path(log: &Path) -> Vec<String> {
    let text = fs::read_to_string(log).unwrap_or_default();
    let field = |line: &str, name: &str| -> Option<u64> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        line[at..].split_whitespace().next()?.parse().ok()
    };
    let mut big = 0;
    let mut problems = Vec::new();
    for line in text.lines().filter(|l| l.contains("op=\"WRITE\"")) {
        if field(line, "bytes") != Some(1 << 20) {
            continue;
        }
        big += 1;
        if field(line, "calls") != Some(1) || field(line, "bounced") != Some(0) {
            problems.push(format!("a 1 MiB WRITE took more than one pwritev: {line}"));
        }
    }
    for line in text.lines().filter(|l| l.contains("data path:")) {
        println!("daemon: {}", &line[line.find("data path:").unwrap_or(0)..]);
    }
    if big == 0 {
        problems.push("the daemon logged no 1 MiB WRITE (is max_pages below 256?)".into());
    } else if problems.is_empty() {
        println!("daemon: {big} WRITEs of 1 MiB, each one pwritev from the guest's pages");
    }
    problems
}

/// pjdfstest's summary line in the guest, and the tests it said failed.
fn pjdfstest_report(vm: &VmRun) -> String {
    let summary = vm
        .console
        .iter()
        .rev()
        .find_map(|l| after(l, "Summary:").map(|s| format!("Summary:{s}")))
        .unwrap_or_else(|| "no summary".to_string());
    let failed: Vec<&str> = vm
        .console
        .iter()
        .map(|l| l.trim_end())
        .filter(|l| l.ends_with(" FAILED") || l.ends_with(" PASSED UNEXPECTEDLY"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if failed.is_empty() {
        summary
    } else {
        format!("{summary}; failed: {}", failed.join(", "))
    }
}

/// What the checker skipped in the guest (its `SKIP: ...` lines): features
/// the backing file system lacks.
fn guest_skips(vm: &VmRun) -> Vec<&str> {
    vm.console
        .iter()
        .filter_map(|l| after(l, "SKIP: "))
        .map(str::trim_end)
        .collect()
}

/// Problems with the steps `names` of a boot: each must have run and
/// exited 0.
fn steps_ok(vm: &VmRun, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter_map(|name| match vm.exes.iter().find(|e| e.name == *name) {
            Some(e) if e.status == Some(0) => None,
            Some(e) => Some(format!(
                "{name}: {}",
                e.status
                    .map_or("no exit status".to_string(), |s| format!("exit {s}"))
            )),
            None => Some(format!("{name} didn't run")),
        })
        .collect()
}

/// Compares the files the guest reported (`XTASK-VIRTIOFS-HASH: NAME SIZE
/// HASH`) with the shared directory; also checks the guest's file
/// against the pattern it was made from.
fn compare_hashes(vm: &VmRun, shared: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut reported = BTreeMap::new();
    for l in &vm.console {
        if let Some(rest) = after(l, "XTASK-VIRTIOFS-HASH: ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [name, size, hash] = w[..] {
                reported.insert(name.to_string(), (size.to_string(), hash.to_string()));
            }
        }
    }
    for name in ["model.bin", FROM_GUEST.0, "d/f2"] {
        let Some((size, hash)) = reported.get(name) else {
            problems.push(format!("the guest reported no hash of {name}"));
            continue;
        };
        match fs::read(shared.join(name)) {
            Ok(data) => {
                let (s, h) = (data.len().to_string(), format!("{:016x}", fnv1a(&data)));
                if (&s, &h) != (size, hash) {
                    problems.push(format!(
                        "{name}: the guest saw {size} bytes, hash {hash}; the host has {s} \
                         bytes, hash {h}"
                    ));
                } else {
                    println!("host: {name} matches the guest ({s} bytes, {h})");
                }
            }
            Err(e) => problems.push(format!("{name} on the host: {e}")),
        }
    }
    match fs::read(shared.join(FROM_GUEST.0)) {
        Ok(data) if data == pattern(FROM_GUEST.1, FROM_GUEST.2) => {}
        Ok(_) => problems.push(format!(
            "{} isn't the pattern the guest wrote",
            FROM_GUEST.0
        )),
        Err(e) => problems.push(format!("{}: {e}", FROM_GUEST.0)),
    }
    let link = fs::read_link(shared.join("link"));
    if !link.as_ref().is_ok_and(|t| t == Path::new("d/f2")) {
        problems.push(format!("the guest's symlink on the host: {link:?}"));
    }
    match fs::metadata(shared.join("d/f2")) {
        Ok(m) if m.permissions().mode() & 0o7777 == 0o640 => {}
        other => problems.push(format!("d/f2's mode on the host: {other:?}")),
    }
    problems
}

/// The checker's pattern: `len` bytes of xorshift64* words from `seed`.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(len);
    let mut word = 0u64;
    for i in 0..len {
        if i % 8 == 0 {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            word = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
        }
        out.push((word >> (8 * (i % 8))) as u8);
    }
    out
}

/// 64-bit FNV-1a, as the checker computes it.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_and_hash_match_the_checker() {
        // The checker (xtask/vm-virtiofs.c) on the host printed these for
        // its file of seed 2.
        let data = pattern(FROM_GUEST.1, FROM_GUEST.2);
        assert_eq!(format!("{:016x}", fnv1a(&data)), "7bc28095694a9696");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
