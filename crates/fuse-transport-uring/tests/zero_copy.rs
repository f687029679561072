//! Zero copy (Linux 7.3, `FUSE_URING_ZERO_COPY`), on the kernel that has
//! it: every test is a `vm_` test, run by `cargo xtask test-in-vm`.
//!
//! The passthrough (`fuse_backend_passthrough::PassthroughFs`, kernel
//! passthrough off, so the daemon serves READ and WRITE) is checked
//! against a reference model with random reads, writes and truncates of
//! 1 byte to 4 MiB at unaligned offsets, buffered, `O_DIRECT` and through
//! `mmap`, on the synchronous ring threads and on both async runtimes;
//! the counters prove that the kernel handed the requests over with zero
//! copy and that the daemon copied none of their bytes. A file system that
//! computes its data (the tests' `MemFs`) is served through the bounce
//! buffer. Stopping and unmounting under load, kernel passthrough next to
//! zero copy, and the fallback of a daemon without `CAP_SYS_ADMIN`.

mod common;

use common::*;
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs, ZeroCopyPolicy};
use fuse_server::{Server, Session};
use fuse_transport_uring::{UringConfig, UringMode, UringRuntime, UringSession};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const MIB: usize = 1 << 20;

/// A passthrough of a fresh directory, served over io_uring.
struct PtMount {
    session: UringSession,
    mnt: PathBuf,
    src: PathBuf,
    _dir: tempfile::TempDir,
}

/// [`mount_passthrough`] with the default io_uring configuration, checked
/// to serve with zero copy.
fn zero_copy_mount(pt: PassthroughConfig) -> PtMount {
    let m = mount_passthrough(UringConfig::default(), pt);
    assert_zero_copy(&m.session);
    m
}

fn mount_passthrough(config: UringConfig, pt: PassthroughConfig) -> PtMount {
    require_root_and_uring();
    init_logging();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let fs = Arc::new(PassthroughFs::new(&src, pt).expect("PassthroughFs::new"));
    let server = if config.runtime.is_some() {
        Server::new_async(fs)
    } else {
        Server::new(fs)
    };
    let session = UringSession::mount(
        server,
        &mnt,
        &fuse_transport_dev::MountOptions::default(),
        config,
    )
    .expect("mounting through the io_uring transport");
    PtMount {
        session,
        mnt,
        src,
        _dir: dir,
    }
}

/// The daemon serves READ and WRITE (no kernel passthrough), every file
/// with zero copy (`O_DIRECT` opens too, whatever the backing file
/// system).
fn served_by_the_daemon() -> PassthroughConfig {
    PassthroughConfig::default()
        .passthrough(false)
        .zero_copy(ZeroCopyPolicy::Always)
}

/// Fails (with the reason) unless every queue has zero copy.
fn assert_zero_copy(session: &UringSession) {
    assert!(
        matches!(
            session.mode(),
            UringMode::Pools {
                zero_copy: true,
                ..
            }
        ),
        "no zero copy: {} ({:?}); this test needs Linux 7.3 and CAP_SYS_ADMIN (cargo xtask test-in-vm)",
        session.mode(),
        session.fallback_reason()
    );
}

fn stop(session: UringSession, mnt: &Path) {
    session.stop();
    let session = within(Duration::from_secs(60), "stop and wait", move || {
        session.wait().expect("session ended cleanly");
        session
    });
    drop(session);
    assert!(!mounted(mnt), "{} still mounted", mnt.display());
}

fn mounted(mnt: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mnt.to_string_lossy();
    text.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|p| p == want))
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// 1 byte to `max`, log-uniform: as many small sizes as large ones.
    fn size(&mut self, max: usize) -> usize {
        let bits = self.below(max.ilog2() as u64 + 1) as u32;
        (1 + self.below(1u64 << bits) as usize).min(max)
    }
}

/// Random reads, writes and truncates of one file through the mount,
/// checked against a model: buffered, `O_DIRECT` and `mmap` reads.
fn model_run(mnt: &Path, seed: u64, ops: usize) {
    let path = mnt.join(format!("model-{seed}"));
    let open = |direct: bool| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&path)
            .unwrap_or_else(|e| panic!("opening {} (direct {direct}): {e}", path.display()))
    };
    let buffered = open(false);
    let direct = open(true);
    let mut model: Vec<u8> = Vec::new();
    let mut rng = Rng(seed | 1);
    for op in 0..ops {
        let f = if rng.below(3) == 0 {
            &direct
        } else {
            &buffered
        };
        let what = rng.below(10);
        let limit = (model.len() + MIB) as u64;
        match what {
            0..=3 => {
                let len = rng.size(4 * MIB);
                let at = rng.below(limit) as usize;
                let data = pattern(rng.next(), len);
                f.write_all_at(&data, at as u64)
                    .unwrap_or_else(|e| panic!("op {op}: write {len} at {at}: {e}"));
                if model.len() < at + len {
                    model.resize(at + len, 0);
                }
                model[at..at + len].copy_from_slice(&data);
            }
            4..=7 => {
                let len = rng.size(4 * MIB);
                let at = rng.below(limit) as usize;
                let mut got = vec![0u8; len];
                let n = read_at_most(f, &mut got, at as u64)
                    .unwrap_or_else(|e| panic!("op {op}: read {len} at {at}: {e}"));
                let want = model.get(at..(at + len).min(model.len())).unwrap_or(&[]);
                assert_eq!(n, want.len(), "op {op}: read {len} at {at}: byte count");
                assert!(
                    got[..n] == *want,
                    "op {op}: read {len} at {at} (direct {}): other bytes than written",
                    std::ptr::eq(f, &direct)
                );
            }
            8 => {
                let len = rng.below(limit) as usize;
                f.set_len(len as u64)
                    .unwrap_or_else(|e| panic!("op {op}: truncate to {len}: {e}"));
                model.resize(len, 0);
            }
            _ => mmap_matches(&buffered, &model, op),
        }
    }
    mmap_matches(&buffered, &model, ops);
    drop((buffered, direct));
    // Once more from a fresh open, after dropping the page cache.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    let back = std::fs::read(&path).unwrap();
    assert!(
        back == model,
        "the file differs from the model after a reopen"
    );
}

/// Reads up to `buf.len()` bytes at `at`, until the end of the file.
fn read_at_most(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], at + n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The file read through a shared read-only mapping equals the model.
fn mmap_matches(f: &File, model: &[u8], op: usize) {
    use std::os::fd::AsRawFd;
    if model.is_empty() {
        // Nothing to map (mmap of 0 bytes is EINVAL): the file is empty.
        assert_eq!(
            f.metadata().unwrap().len(),
            0,
            "op {op}: the file isn't empty"
        );
        return;
    }
    // SAFETY: a new read-only mapping of the file, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            model.len(),
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "op {op}: mmap");
    // SAFETY: `model.len()` bytes are mapped, and the file is that long.
    let mapped = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), model.len()) };
    let same = mapped == model;
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, model.len()) };
    assert!(same, "op {op}: the mapped file differs from the model");
}

/// The model run and four writers of 3 MiB files on a passthrough with
/// `config`; the counters show zero copy, and no copied byte.
fn passthrough_with_zero_copy(config: UringConfig) {
    let m = mount_passthrough(config, served_by_the_daemon());
    assert_zero_copy(&m.session);
    assert_eq!(m.session.fallback_reason(), None);
    assert!(
        m.session.transport().contains("zero copy"),
        "{}",
        m.session.transport()
    );
    model_run(&m.mnt, 0x5eed, 300);
    parallel_write_and_verify(&m.mnt, 4, 3 * MIB, 2);
    let stats = m.session.stats();
    eprintln!("{stats:?}");
    assert!(stats.zero_copy_reads > 0, "no zero-copy READ: {stats:?}");
    assert!(stats.zero_copy_writes > 0, "no zero-copy WRITE: {stats:?}");
    assert!(stats.zero_copy_bytes > 0, "{stats:?}");
    assert_eq!(
        stats.zero_copy_copied_bytes, 0,
        "the daemon copied payload bytes of zero-copy requests: {stats:?}"
    );
    assert_eq!(stats.bad_requests, 0, "{stats:?}");
    // The source has what was written.
    let written = std::fs::read(m.src.join("model-24301")).unwrap();
    assert_eq!(
        written,
        std::fs::read(m.mnt.join("model-24301")).unwrap(),
        "the source and the mount differ"
    );
    stop(m.session, &m.mnt);
}

test_support::test_cases! {
    vm_zero_copy_passthrough_matches_a_model => passthrough_with_zero_copy(UringConfig::default());
    vm_zero_copy_passthrough_matches_a_model_with_unregistered_pools =>
        passthrough_with_zero_copy(UringConfig::default().registered_pools(false));
    vm_zero_copy_passthrough_matches_a_model_on_a_tokio_runtime =>
        passthrough_with_zero_copy(UringConfig::default().runtime(UringRuntime::Tokio));
    vm_zero_copy_passthrough_matches_a_model_on_an_io_uring_runtime =>
        passthrough_with_zero_copy(UringConfig::default().runtime(UringRuntime::IoUring));
}

#[test]
fn vm_zero_copy_for_a_file_system_that_computes_its_data() {
    // MemFs answers READ with `write_all` and WRITE with `unconsumed`:
    // through the transport's bounce buffer, correct, and counted.
    let mut fs = MemFs::default();
    fs.zero_copy = true;
    let m = mount_fs(fs, UringConfig::default());
    assert_zero_copy(&m.session);
    model_run(&m.mnt, 0xfeed, 150);
    parallel_write_and_verify(&m.mnt, 4, 3 * MIB, 2);
    let stats = m.session.stats();
    eprintln!("{stats:?}");
    assert!(
        stats.zero_copy_reads > 0 && stats.zero_copy_writes > 0,
        "{stats:?}"
    );
    assert!(stats.zero_copy_copied_bytes > 0, "{stats:?}");
    let Mounted { session, mnt, .. } = m;
    stop(session, &mnt);
}

#[test]
fn vm_zero_copy_auto_policy_follows_the_backing_file_system() {
    // ZeroCopyPolicy::Auto: buffered opens always; O_DIRECT opens only on
    // a backing file system with RWF_NOWAIT (io_uring completes its reads
    // inline there; elsewhere each would go to an io_uring worker).
    let m = zero_copy_mount(PassthroughConfig::default().passthrough(false));
    std::fs::write(m.src.join("f"), pattern(7, 4 * MIB)).unwrap();
    let nowait = {
        let f = File::open(m.src.join("f")).unwrap();
        let mut b = [0u8; 1];
        let iov = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: 1,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: one iovec over `b`.
        let r = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, 0, libc::RWF_NOWAIT) };
        r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EOPNOTSUPP)
    };
    let reads = |m: &PtMount| m.session.stats().zero_copy_reads;
    let before = reads(&m);
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(m.mnt.join("f"))
        .unwrap();
    let mut buf = vec![0u8; MIB];
    read_at_most(&direct, &mut buf, 0).unwrap();
    drop(direct);
    let after_direct = reads(&m);
    eprintln!(
        "backing RWF_NOWAIT: {nowait}; O_DIRECT zero-copy READs: {}",
        after_direct - before
    );
    assert_eq!(
        after_direct > before,
        nowait,
        "O_DIRECT reads zero-copied: {}, backing RWF_NOWAIT: {nowait}",
        after_direct > before
    );
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    let back = std::fs::read(m.mnt.join("f")).unwrap();
    assert!(back == pattern(7, 4 * MIB));
    assert!(
        reads(&m) > after_direct,
        "buffered reads were not zero-copied"
    );
    stop(m.session, &m.mnt);
}

#[test]
fn vm_zero_copy_without_it_copies() {
    // The same passthrough on queues without zero copy: its opens lose
    // the flag, nothing is zero-copied.
    let m = mount_passthrough(
        UringConfig::default().zero_copy(false),
        served_by_the_daemon(),
    );
    assert!(matches!(
        m.session.mode(),
        UringMode::Pools {
            zero_copy: false,
            ..
        }
    ));
    model_run(&m.mnt, 0xc0de, 60);
    let stats = m.session.stats();
    assert_eq!(
        stats.zero_copy_reads + stats.zero_copy_writes,
        0,
        "{stats:?}"
    );
    stop(m.session, &m.mnt);
}

#[test]
fn vm_zero_copy_next_to_kernel_passthrough() {
    // Kernel passthrough on: its opens carry FOPEN_PASSTHROUGH and never
    // the zero-copy flag (the kernel would fail the open with EIO).
    let m = zero_copy_mount(PassthroughConfig::default().passthrough(true));
    model_run(&m.mnt, 0xbeef, 60);
    stop(m.session, &m.mnt);
}

#[test]
fn vm_zero_copy_stop_while_four_writers_run() {
    let m = zero_copy_mount(served_by_the_daemon());
    let writers = start_writers(&m.mnt, 4, 4);
    assert_all_writing(&writers);
    let stats = m.session.stats();
    assert!(stats.zero_copy_writes > 0, "{stats:?}");
    stop(m.session, &m.mnt);
    writers_stopped_by_the_end_of_the_connection(writers, Duration::from_secs(60));
}

#[test]
fn vm_zero_copy_lazy_unmount_while_four_writers_run() {
    // Files opened before a lazy unmount keep the connection: the writers
    // finish and read back through it, and once the last file is closed
    // the kernel ends the connection and the session ends by itself.
    let m = mount_passthrough(
        UringConfig::default().runtime(UringRuntime::Tokio),
        served_by_the_daemon(),
    );
    assert_zero_copy(&m.session);
    writers_across_a_lazy_unmount(&m.mnt, 200);
    let stats = m.session.stats();
    assert!(stats.zero_copy_writes > 0, "{stats:?}");
    let session = m.session;
    within(Duration::from_secs(60), "the session to end", move || {
        session.wait().expect("session ended cleanly");
    });
}

/// Sets or clears `CAP_SYS_ADMIN` in the calling thread's effective set
/// (capabilities are per thread; threads it starts inherit them).
fn set_sys_admin(on: bool) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget with a v3 header and two data structs, as it wants.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    const CAP_SYS_ADMIN: u32 = 21;
    let bit = 1u32 << CAP_SYS_ADMIN;
    if on {
        data[0].effective |= bit;
    } else {
        data[0].effective &= !bit;
    }
    // SAFETY: as above.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

#[test]
fn vm_zero_copy_falls_back_without_cap_sys_admin() {
    require_root_and_uring();
    init_logging();
    // On a thread of its own: it drops CAP_SYS_ADMIN after mounting (which
    // needs it), serves without it, and takes it back to unmount.
    std::thread::spawn(|| {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(&mnt).unwrap();
        let fs = Arc::new(PassthroughFs::new(&src, served_by_the_daemon()).unwrap());
        let mount =
            fuse_transport_dev::Mount::new(&mnt, &fuse_transport_dev::MountOptions::default())
                .expect("mount");
        set_sys_admin(false);
        let session = UringSession::from_mount(Server::new(fs), mount, UringConfig::default())
            .expect("serving the mount");
        set_sys_admin(true);
        let mode = session.mode();
        let reason = session.fallback_reason().map(str::to_string);
        eprintln!("mode {mode}, reason {reason:?}");
        assert!(
            matches!(
                mode,
                UringMode::Pools {
                    zero_copy: false,
                    ..
                }
            ),
            "{mode}"
        );
        let reason = reason.expect("a fallback reason");
        assert!(reason.contains("CAP_SYS_ADMIN"), "{reason}");
        model_run(&mnt, 0xabc, 40);
        let stats = session.stats();
        assert_eq!(stats.zero_copy_reads + stats.zero_copy_writes, 0);
        stop(session, &mnt);
    })
    .join()
    .expect("the test thread");
}
