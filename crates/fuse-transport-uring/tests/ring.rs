//! Mounts the in-memory test file system through the io_uring transport
//! and drives it through the kernel.
//!
//! Host tests (Linux 6.14+ with `enable_uring` Y; the 6.18 CI host has no
//! buffer pools, so they run the per-entry path there) fail — never pass —
//! when FUSE over io_uring is off. Tests named `vm_*` need a kernel offering
//! `FUSE_HAS_IO_URING_BUFPOOL` (Linux 7.3, run by `cargo xtask test-in-vm`)
//! and fail with that reason elsewhere; the host run skips them.

mod common;

use common::*;
use fuse_abi::{InitFlags, Opcode};
use fuse_server::Session;
use fuse_transport_uring::{UringConfig, UringFault, UringMode, UringSession};
use std::path::Path;
use std::time::Duration;

const MIB: usize = 1 << 20;

fn kernel_flags(session: &UringSession) -> InitFlags {
    session
        .server()
        .negotiated()
        .expect("INIT is done")
        .kernel
        .flags
}

/// Fails with the reason unless requests go through io_uring.
fn assert_uring(session: &UringSession) {
    assert!(
        session.mode().uses_uring(),
        "the session fell back to /dev/fuse: {}",
        session.fallback_reason().unwrap_or("no reason given")
    );
}

/// The mode of a session with the default pools where the kernel has
/// buffer pools (and the tests run as root: `CAP_IPC_LOCK`).
const FOUR_REGISTERED_BUFFERS: UringMode = UringMode::Pools {
    bufs_per_queue: 4,
    registered: true,
    zero_copy: true,
};

/// As root, with FUSE over io_uring switched on: a mount with the default
/// configuration, checked to be served over io_uring.
fn mounted_over_uring() -> Mounted {
    require_root_and_uring();
    let m = mount(UringConfig::default());
    assert_uring(&m.session);
    m
}

fn end(m: Mounted) {
    let Mounted { session, mnt, .. } = m;
    session.stop();
    let session = within(Duration::from_secs(60), "stop and wait", move || {
        session.wait().expect("session ended cleanly");
        session
    });
    assert!(
        !is_mounted(&mnt),
        "{} is still mounted after the session ended",
        mnt.display()
    );
    drop(session);
}

use test_support::is_mounted;

/// Read and write requests all went through the rings: none were served
/// by a `/dev/fuse` worker.
fn assert_io_went_through_the_ring(session: &UringSession) {
    let counters = session.server().counters();
    for op in [Opcode::Write, Opcode::Read] {
        let all = counters.get(op);
        let ring = session.ring_requests(op);
        assert!(all > 0, "no {op:?} requests at all");
        assert_eq!(
            ring, all,
            "{op:?}: {all} requests in all, {ring} of them through the rings: the rest went over /dev/fuse"
        );
    }
    let stats = session.stats();
    assert!(stats.ring_requests() > 0);
    assert_eq!(stats.bad_requests, 0, "bad ring requests: {stats:?}");
}

#[test]
fn ring_serves_four_parallel_writers_with_verified_content() {
    let m = mounted_over_uring();
    parallel_write_and_verify(&m.mnt, 4, 5 * MIB, 2);
    // Directory operations go through the ring too.
    std::fs::create_dir(m.mnt.join("dir")).unwrap();
    std::fs::write(m.mnt.join("dir/small"), b"small").unwrap();
    assert_eq!(std::fs::read(m.mnt.join("dir/small")).unwrap(), b"small");
    let mut names: Vec<_> = std::fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["dir", "file-0", "file-1", "file-2", "file-3"]);
    std::fs::remove_file(m.mnt.join("dir/small")).unwrap();
    assert!(m.session.ring_requests(Opcode::Lookup) > 0);
    assert!(m.session.ring_requests(Opcode::Unlink) > 0);
    end(m);
}

#[test]
fn reads_and_writes_go_through_the_ring_not_dev_fuse() {
    let m = mounted_over_uring();
    let path = m.mnt.join("through-the-ring");
    write_and_verify(&path, 7, 3 * MIB, MIB).unwrap();
    write_and_verify(&path, 8, 2 * MIB + 12345, 65536).unwrap();
    assert_io_went_through_the_ring(&m.session);
    let stats = m.session.stats();
    assert!(stats.requests_per_queue.iter().any(|&n| n > 0), "{stats:?}");
    // The session says what it does.
    let transport = m.session.transport();
    assert!(transport.starts_with("io_uring"), "{transport}");
    end(m);
}

#[test]
fn mode_follows_the_kernels_offer() {
    let m = mounted_over_uring();
    let stats = m.session.stats();
    if kernel_flags(&m.session).contains(InitFlags::HAS_IO_URING_BUFPOOL) {
        // Registered: the tests run as root (`CAP_IPC_LOCK`).
        assert_eq!(m.session.mode(), FOUR_REGISTERED_BUFFERS);
        assert_eq!(stats.pooled_queues, stats.requests_per_queue.len());
        assert_eq!(m.session.fallback_reason(), None);
    } else {
        // The 6.18 host: per-entry payload buffers, no pool calls made.
        assert_eq!(m.session.mode(), UringMode::PerEntry);
        assert_eq!(stats.bufpools_added, 0);
        assert_eq!(stats.pooled_queues, 0);
        assert!(m
            .session
            .fallback_reason()
            .is_some_and(|r| r.contains("FUSE_HAS_IO_URING_BUFPOOL")));
    }
    end(m);
}

#[test]
fn zero_pool_buffers_means_a_payload_buffer_per_entry() {
    require_root_and_uring();
    let config = UringConfig::default()
        .bufs_per_queue(0)
        .entries_per_queue(3);
    let m = mount(config);
    assert_eq!(m.session.mode(), UringMode::PerEntry);
    assert_eq!(m.session.fallback_reason(), None, "no fallback: asked for");
    let payload = m.session.server().uring_payload_size().unwrap();
    let queues = m.session.stats().requests_per_queue.len();
    let mem = m.session.memory();
    assert!(
        mem.reserved >= queues * 3 * payload,
        "{mem:?}: expected at least {queues} queues x 3 entries x {payload} bytes"
    );
    parallel_write_and_verify(&m.mnt, 4, 2 * MIB, 1);
    assert_io_went_through_the_ring(&m.session);
    end(m);
}

#[test]
fn one_thread_can_serve_every_queue() {
    require_root_and_uring();
    let config = UringConfig::default()
        .threads(1)
        .pin_threads(false)
        .defer_taskrun(false);
    let m = mount(config);
    assert_uring(&m.session);
    parallel_write_and_verify(&m.mnt, 4, 2 * MIB, 1);
    assert_io_went_through_the_ring(&m.session);
    assert!(m.session.transport().contains("on 1 thread,"));
    end(m);
}

#[test]
fn turned_off_serves_over_dev_fuse_and_says_why() {
    require_root_and_uring();
    let m = mount(UringConfig::default().enabled(false));
    assert_eq!(m.session.mode(), UringMode::DevFuse);
    assert!(m
        .session
        .fallback_reason()
        .is_some_and(|r| r.contains("turned off")));
    write_and_verify(&m.mnt.join("f"), 1, 2 * MIB, MIB).unwrap();
    assert_eq!(m.session.stats().ring_requests(), 0);
    assert!(m.session.server().counters().get(Opcode::Write) > 0);
    assert!(m.session.transport().starts_with("/dev/fuse"));
    end(m);
}

/// A fallback after INIT agreed to io_uring: the kernel holds new requests
/// until the ring is ready, so the fallback must switch it back to
/// `/dev/fuse` or the mount hangs.
fn falls_back_after_init(fault: UringFault, reason: &'static str) {
    require_root_and_uring();
    let m = mount(UringConfig::default().fault(fault));
    assert_eq!(m.session.mode(), UringMode::DevFuse);
    let why = m.session.fallback_reason().unwrap_or_default().to_string();
    assert!(why.contains(reason), "fallback reason: {why}");
    assert!(m.session.server().negotiated().unwrap().over_io_uring());
    let mnt = m.mnt.clone();
    within(
        Duration::from_secs(30),
        "I/O after the fallback",
        move || {
            parallel_write_and_verify(&mnt, 4, 2 * MIB, 1);
        },
    );
    assert_eq!(m.session.stats().ring_requests(), 0);
    assert!(m.session.server().counters().get(Opcode::Write) > 0);
    assert_eq!(m.session.memory().reserved, 0, "{:?}", m.session.stats());
    end(m);
}

#[test]
fn refused_register_falls_back_to_dev_fuse() {
    falls_back_after_init(
        UringFault::RefuseRegister,
        "refused FUSE_IO_URING_CMD_REGISTER",
    );
}

#[test]
fn failed_ring_setup_falls_back_to_dev_fuse() {
    falls_back_after_init(UringFault::FailThreadSetup, "injected setup failure");
}

/// A bug in the transport that takes a ring thread down (here an
/// injected panic outside the file system's `catch_unwind`) must not leave
/// its queue without entries, where every later request issued on its CPU
/// would wait forever: the session stops, the client that was waiting gets
/// an error, and the mount goes.
#[test]
fn a_ring_thread_that_panics_stops_the_session_instead_of_hanging_its_queue() {
    require_root_and_uring();
    let m = mount(UringConfig::default().fault(UringFault::PanicInRingThread));
    assert!(
        matches!(
            m.session.mode(),
            UringMode::PerEntry | UringMode::Pools { .. }
        ),
        "not over io_uring: {:?} ({:?})",
        m.session.mode(),
        m.session.fallback_reason()
    );
    let file = m.mnt.join("x");
    let client = std::thread::spawn(move || std::fs::metadata(file));
    let Mounted { session, mnt, .. } = m;
    let (session, ended) = within(
        Duration::from_secs(60),
        "the session's end after a ring thread panicked",
        move || {
            let ended = session.wait();
            (session, ended)
        },
    );
    let err = ended.expect_err("a panicked ring thread is an error of the session");
    assert!(err.to_string().contains("panicked"), "{err}");
    let stat = within(
        Duration::from_secs(60),
        "the waiting client's answer",
        move || client.join().expect("the client thread"),
    );
    assert!(stat.is_err(), "the client's stat succeeded: {stat:?}");
    assert!(!is_mounted(&mnt), "{} is still mounted", mnt.display());
    drop(session);
}

#[test]
fn unmount_from_outside_ends_the_session_and_frees_the_buffers() {
    let m = mounted_over_uring();
    std::fs::write(m.mnt.join("x"), b"x").unwrap();
    assert!(m.session.memory().reserved > 0);
    fuse_transport_dev::unmount_path(&m.mnt, false).expect("umount");
    let Mounted { session, mnt, .. } = m;
    let session = within(Duration::from_secs(30), "wait after unmount", move || {
        session.wait().expect("clean end");
        session
    });
    assert_eq!(session.memory().reserved, 0, "mappings left after wait");
    assert!(!is_mounted(&mnt));
}

#[test]
fn stop_while_four_writers_run_neither_hangs_nor_crashes() {
    let m = mounted_over_uring();
    stop_while_four_writers_run(m);
}

/// Four writers at work on `m`, and its session ended under them: once
/// it ended the connection is gone, and every writer stops with that
/// error soon.
fn stop_while_four_writers_run(m: Mounted) {
    let writers = start_writers(&m.mnt, 4, 4);
    assert_all_writing(&writers);
    end(m);
    writers_stopped_by_the_end_of_the_connection(writers, Duration::from_secs(60));
}

#[test]
fn lazy_unmount_from_outside_while_four_writers_run() {
    let m = mounted_over_uring();
    writers_across_a_lazy_unmount(&m.mnt, 100);
    // The last file closed: the kernel ends the connection, the rings
    // return their entries and the session ends by itself.
    let Mounted { session, .. } = m;
    within(
        Duration::from_secs(30),
        "wait after lazy unmount",
        move || {
            session.wait().expect("clean end");
        },
    );
}

#[test]
fn a_panicking_file_system_does_not_take_a_queue_down() {
    let m = mounted_over_uring();
    every_queue_survives_a_panic(&m.mnt);
    end(m);
}

/// The daemon process of the daemon-exit tests: this test binary run again
/// with only this test selected and the mountpoint in the environment.
/// Without that environment it does nothing (it is `#[ignore]`d anyway).
#[test]
#[ignore = "helper process of the daemon-exit tests, run by them"]
fn helper_daemon_process() {
    let Some(dir) = std::env::var_os(DAEMON_AT) else {
        return;
    };
    let bufs = std::env::var(DAEMON_BUFS)
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(4);
    init_logging();
    let mut fs = MemFs::default();
    fs.zero_copy = std::env::var_os(DAEMON_ZERO_COPY).is_some();
    let server = fuse_server::Server::new(std::sync::Arc::new(fs));
    let session = UringSession::mount(
        server,
        Path::new(&dir),
        &fuse_transport_dev::MountOptions::default(),
        UringConfig::default().bufs_per_queue(bufs),
    )
    .expect("daemon: mount");
    println!("\n{DAEMON_READY}{:?}", session.mode());
    // Serve until killed.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

const DAEMON_AT: &str = "FUSE_URING_TEST_DAEMON_AT";
const DAEMON_READY: &str = "DAEMON-READY ";
const DAEMON_BUFS: &str = "FUSE_URING_TEST_DAEMON_BUFS";
/// Set: the daemon's files ask for zero copy.
const DAEMON_ZERO_COPY: &str = "FUSE_URING_TEST_DAEMON_ZERO_COPY";

/// The helper daemon process and its mountpoint: killed, reaped and its
/// (then dead) mount taken away on drop, also when a test fails half-way
/// (an orphaned daemon would keep the test run's output open, and hang it).
struct HelperDaemon {
    child: std::process::Child,
    mnt: std::path::PathBuf,
}

impl Drop for HelperDaemon {
    fn drop(&mut self) {
        // Not yet reaped before this wait, so the pid is still our child's.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if is_mounted(&self.mnt) {
            let _ = fuse_transport_dev::unmount_path(&self.mnt, true);
        }
    }
}

/// Kills the daemon (SIGKILL) while four writers run on its mount: the
/// kernel tears the rings down with the process; the writers must get
/// errors, not hang. Returns the mode the daemon reported.
fn daemon_exit_while_four_writers_run(bufs: usize) -> String {
    daemon_exit_while_four_writers_run_with(bufs, false)
}

fn daemon_exit_while_four_writers_run_with(bufs: usize, zero_copy: bool) -> String {
    require_root_and_uring();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().canonicalize().unwrap();
    let mut command = test_support::command(std::env::current_exe().unwrap());
    if zero_copy {
        command.env(DAEMON_ZERO_COPY, "1");
    }
    let child = command
        .args([
            "--ignored",
            "--exact",
            "helper_daemon_process",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(DAEMON_AT, &mnt)
        .env(DAEMON_BUFS, bufs.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut daemon = HelperDaemon {
        child,
        mnt: mnt.clone(),
    };
    let stdout = daemon.child.stdout.take().unwrap();
    let child_pid = daemon.child.id().to_string();
    let watchdog = {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let pid = child_pid.clone();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_secs(25))
            {
                eprintln!("the daemon is slow to start; where it waits:");
                dump_tasks(&pid);
            }
        });
        tx
    };
    let mode = within(Duration::from_secs(30), "the daemon to start", move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            // libtest may have printed `test helper_daemon_process ... `
            // on the same line before the marker.
            if let Some(at) = line.find(DAEMON_READY) {
                return line[at + DAEMON_READY.len()..].trim().to_string();
            }
        }
        panic!("the daemon ended before it was ready");
    });
    drop(watchdog);
    let writers = start_writers(&mnt, 4, 4);
    assert_all_writing(&writers);
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    writers_stopped_by_the_end_of_the_connection(writers, Duration::from_secs(60));
    // The mount is dead (ENOTCONN) now; take it away.
    fuse_transport_dev::unmount_path(&mnt, true).expect("umount -l of the dead mount");
    assert!(!is_mounted(&mnt));
    mode
}

#[test]
fn daemon_exit_while_four_writers_run_neither_hangs_nor_crashes() {
    let mode = daemon_exit_while_four_writers_run(4);
    assert!(mode != "DevFuse", "the daemon served over /dev/fuse");
}

// ---- Linux 7.3 (buffer pools), run inside the VM ----

#[test]
fn vm_daemon_exit_while_four_writers_run_with_zero_copy() {
    // The daemon dies holding zero-copy requests whose pages are in its
    // rings' buffer tables: the kernel tears the rings (and tables) down
    // with the process.
    let mode = daemon_exit_while_four_writers_run_with(4, true);
    assert!(
        mode.contains("zero_copy: true"),
        "needs Linux 7.3 and CAP_SYS_ADMIN: the daemon served in mode {mode}"
    );
}

#[test]
fn vm_daemon_exit_while_four_writers_run_with_pools() {
    let mode = daemon_exit_while_four_writers_run(1);
    assert!(
        mode.starts_with("Pools"),
        "needs a kernel offering FUSE_HAS_IO_URING_BUFPOOL: the daemon served in mode {mode}"
    );
}

/// Mounts and fails unless the kernel offers buffer pools.
fn mount_needing_pools(config: UringConfig) -> Mounted {
    require_root_and_uring();
    let m = mount(config);
    if !kernel_flags(&m.session).contains(InitFlags::HAS_IO_URING_BUFPOOL) {
        let minor = m
            .session
            .server()
            .negotiated()
            .map_or(0, |n| n.kernel.minor);
        end(m);
        panic!(
            "needs a kernel offering FUSE_HAS_IO_URING_BUFPOOL (Linux 7.3, protocol 7.46; this one speaks 7.{minor}): run it with `cargo xtask test-in-vm`"
        );
    }
    assert_uring(&m.session);
    m
}

fn pooled_writers(bufs: usize) {
    pooled_writers_with(bufs, true);
}

fn pooled_writers_with(bufs: usize, registered: bool) {
    let m = mount_needing_pools(
        UringConfig::default()
            .bufs_per_queue(bufs)
            .registered_pools(registered),
    );
    let expected = if bufs == 0 {
        UringMode::PerEntry
    } else {
        UringMode::Pools {
            bufs_per_queue: bufs,
            registered,
            // Root in the VM: CAP_SYS_ADMIN.
            zero_copy: true,
        }
    };
    assert_eq!(m.session.mode(), expected);
    if bufs > 0 {
        // Turned off is no fallback; registered, there is none either.
        assert_eq!(m.session.fallback_reason(), None);
        let transport = m.session.transport();
        assert_eq!(
            transport.contains("registered buffer pools"),
            registered,
            "{transport}"
        );
    }
    // Four writers of 3 MiB files against at most `bufs` buffers per queue:
    // requests wait in the kernel for a free buffer.
    parallel_write_and_verify(&m.mnt, 4, 3 * MIB, 3);
    assert_io_went_through_the_ring(&m.session);
    let stats = m.session.stats();
    if bufs > 0 {
        assert_eq!(
            stats.bufpools_added as usize,
            stats.requests_per_queue.len()
        );
        assert!(stats.pooled_requests > 0, "{stats:?}");
    } else {
        assert_eq!(stats.bufpools_added, 0);
        assert_eq!(stats.pooled_requests, 0);
    }
    end(m);
}

test_support::test_cases! {
    vm_pools_with_0_buffers_per_queue_serve_four_writers => pooled_writers(0);
    vm_pools_with_1_buffer_per_queue_serve_four_writers => pooled_writers(1);
    vm_pools_with_4_buffers_per_queue_serve_four_writers => pooled_writers(4);
    vm_unregistered_pools_serve_four_writers => pooled_writers_with(4, false);
}

#[test]
fn vm_registered_pools_with_1_buffer_per_queue_serve_four_writers() {
    // Every request waits for the one buffer of its queue, imported
    // through the ring that holds its entry.
    pooled_writers_with(1, true);
}

#[test]
fn vm_pools_are_really_used() {
    let m = mount_needing_pools(
        UringConfig::default()
            .bufs_per_queue(4)
            .entries_per_queue(8),
    );
    assert_eq!(m.session.mode(), FOUR_REGISTERED_BUFFERS);
    parallel_write_and_verify(&m.mnt, 4, 3 * MIB, 2);
    assert_io_went_through_the_ring(&m.session);
    let stats = m.session.stats();
    let queues = stats.requests_per_queue.len();
    assert_eq!(stats.bufpools_added as usize, queues, "{stats:?}");
    assert_eq!(stats.pooled_queues, queues);
    assert!(stats.pooled_requests > 0, "{stats:?}");
    let (Some(min), Some(max)) = (stats.pool_offset_min, stats.pool_offset_max) else {
        panic!("no pool offsets seen: {stats:?}");
    };
    let buf = m.session.server().uring_payload_size().unwrap() as u32;
    assert!(min <= max);
    assert_eq!(min % buf, 0, "offsets are whole buffers");
    assert!(max < 4 * buf, "offset {max} beyond 4 buffers of {buf}");
    // Memory: the headers and one pool; no per-entry payload buffers.
    let mem = stats.memory;
    let pool = queues * 4 * buf as usize;
    assert!(mem.reserved >= pool, "{mem:?}");
    assert!(
        mem.reserved < pool + queues * 8 * 4096 + 65536,
        "more than the pool and the entry headers mapped: {mem:?}"
    );
    end(m);
}

#[test]
fn vm_stop_while_four_writers_run_with_pools() {
    stop_while_four_writers_run(mount_needing_pools(
        UringConfig::default().bufs_per_queue(1),
    ));
}

#[test]
fn vm_pooled_memory_is_a_fraction_of_per_entry_memory() {
    let run = |bufs: usize| {
        let m = mount_needing_pools(
            UringConfig::default()
                .bufs_per_queue(bufs)
                .entries_per_queue(8),
        );
        parallel_write_and_verify(&m.mnt, 4, 3 * MIB, 2);
        let mem = m.session.memory();
        end(m);
        mem
    };
    let per_entry = run(0);
    let pooled = run(1);
    eprintln!("per-entry {per_entry:?}, pooled (1 buffer per queue) {pooled:?}");
    assert!(
        pooled.reserved * 3 <= per_entry.reserved,
        "pooled {pooled:?} vs per-entry {per_entry:?}"
    );
}
