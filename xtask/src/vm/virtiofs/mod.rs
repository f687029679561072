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
//!
//! The parts: [`daemon`] builds and starts the daemons on the host (ours
//! and virtiofsd), [`guest`] builds what the guest runs (the checker, the
//! plan, the initramfs), [`boot`](mod@boot) boots qemu against the
//! daemons' sockets and follows the console, [`results`] judges what a
//! boot left (steps, hashes, the daemon's write path, pjdfstest),
//! [`bench`](mod@bench) and [`syscount`] are `--virtiofs-bench`. This file
//! runs the test.

use super::*;

mod bench;
mod boot;
mod daemon;
mod guest;
mod results;
mod syscount;

use bench::*;
use boot::*;
use daemon::*;
use guest::*;
use results::*;
use syscount::*;

pub(super) use bench::{run_virtiofs_bench, WORKLOADS};

/// The tag the device and the guest's mount use.
const TAG: &str = "vfs";

/// The file the host seeds: its size and pattern seed (the checker knows
/// both).
const FROM_HOST: (&str, usize, u64) = ("from-host.bin", 5 * 1024 * 1024 + 77, 1);

/// The file the guest leaves: its size and pattern seed.
const FROM_GUEST: (&str, usize, u64) = ("from-guest.bin", 3 * 1024 * 1024 + 123, 2);

/// The steps of a check boot (the plan's phase `check`), each of which
/// must exit 0.
const CHECK_STEPS: &[&str] = &[
    "virtiofs-mount",
    "virtiofs-check",
    "virtiofs-pjdfstest",
    "virtiofs-umount",
];

/// Runs the virtio-fs test; errors end the run.
pub(super) fn run_virtiofs(args: &VmArgs) -> Result<()> {
    let started = Instant::now();
    let mut timings: Vec<(&str, f64)> = Vec::new();
    let vm_dir = target_dir().join("vm");
    let run_dir = vm_dir.join("virtiofs");
    let (_lock, kernel) = start_run(
        args,
        &run_dir,
        &vm_dir.join("run-virtiofs.lock"),
        &mut timings,
    )?;

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
    // Every boot of this run: the guest with the one device at `socket`,
    // in `phase`, its console logged to `log`.
    let boot = |phase: &str, log: &Path, kill: Option<&mut Daemon>| {
        boot_virtiofs(
            args,
            (&kernel.vmlinuz, &initrd),
            &[(&socket, TAG)],
            phase,
            "",
            log,
            kill,
        )
    };

    let mut problems = Vec::new();
    println!("\n--> boot 1: file operations and data integrity");
    let log1 = run_dir.join("console-check.log");
    let (vm1, mut notes) = boot("check", &log1, None)?;
    timings.extend(vm1.timings());
    problems.extend(steps_ok(&vm1, CHECK_STEPS));
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
    let (vm2, notes2) = boot("kill", &log2, Some(&mut daemon))?;
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
            let (vm, n) = boot("check", &log, None)?;
            timings.push((timing, t.elapsed().as_secs_f64()));
            notes.extend(n.into_iter().map(|n| format!("--runtime {runtime}: {n}")));
            let label = |p: String| format!("--runtime {runtime}: {p}");
            problems.extend(steps_ok(&vm, CHECK_STEPS).into_iter().map(label));
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
