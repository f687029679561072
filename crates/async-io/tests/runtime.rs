//! RuntimeType parsing and properties, building runtimes, local tasks, and the io_uring
//! driver's batching (many SQEs, one io_uring_enter).

mod common;

use std::str::FromStr;

use async_io::{spawn_local, Builder, File, OpenOptions, RuntimeType};
use common::{pattern, runtime, scratch};

/// `solo` says what the innermost `run_solo` around it said, `false`
/// outside any, and comes back after a nested call, also one that panics.
#[test]
fn solo_is_scoped_to_run_solo() {
    assert!(!async_io::solo());
    async_io::run_solo(true, || {
        assert!(async_io::solo());
        async_io::run_solo(false, || assert!(!async_io::solo()));
        assert!(async_io::solo());
        let unwound = std::panic::catch_unwind(|| async_io::run_solo(false, || panic!("inside")));
        assert!(unwound.is_err());
        assert!(async_io::solo(), "not restored after a panic");
    });
    assert!(!async_io::solo());
    // Per thread: another thread sees its own.
    async_io::run_solo(true, || {
        std::thread::spawn(|| assert!(!async_io::solo()))
            .join()
            .unwrap();
    });
}

#[test]
fn runtime_type_names_and_properties() {
    assert_eq!(RuntimeType::from_str("tokio").unwrap(), RuntimeType::Tokio);
    assert_eq!(
        RuntimeType::from_str("uring").unwrap(),
        RuntimeType::IoUring
    );
    assert_eq!(
        RuntimeType::from_str("io_uring").unwrap(),
        RuntimeType::IoUring
    );
    assert_eq!(
        RuntimeType::from_str("IO_URING").unwrap(),
        RuntimeType::IoUring
    );
    let err = RuntimeType::from_str("epoll").unwrap_err();
    assert!(err.to_string().contains("epoll"), "{err}");
    for kind in RuntimeType::ALL {
        assert_eq!(kind.to_string().parse::<RuntimeType>().unwrap(), kind);
    }
    assert!(RuntimeType::Tokio.file_io_blocks());
    assert!(!RuntimeType::IoUring.file_io_blocks());
    RuntimeType::Tokio.check_available().unwrap();
    RuntimeType::IoUring
        .check_available()
        .unwrap_or_else(|e| panic!("io_uring must be available on these machines: {e}"));
}

#[test]
fn both_runtimes_run_local_tasks_and_timers() {
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        assert_eq!(rt.runtime_type(), kind);
        assert_eq!(
            RuntimeType::current(),
            RuntimeType::Tokio,
            "outside block_on"
        );
        let h = rt.spawn_local(async move { RuntimeType::current() });
        let (a, b) = rt.block_on(async {
            let shared = std::rc::Rc::new(5); // !Send is fine on a local task
            let inner = spawn_local(async move { *shared + 1 });
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            (h.await.unwrap(), inner.await.unwrap())
        });
        assert_eq!(a, kind);
        assert_eq!(b, 6);
    }
}

/// Many operations started in one tick reach the kernel in one io_uring_enter.
#[test]
fn uring_batches_a_tick_of_submissions_into_one_enter() {
    let dir = scratch();
    let data = pattern(64 * 4096, 2);
    let path = common::make_file(dir.path(), "f", &data);
    let rt = runtime(RuntimeType::IoUring);
    rt.block_on(async {
        let f = File::open(&path).await.unwrap();
        let before = rt.uring_stats();
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let f = f.clone();
                spawn_local(async move {
                    let (r, b) = f.read_at(Vec::with_capacity(4096), i * 4096).await;
                    assert_eq!(r.unwrap(), 4096);
                    b
                })
            })
            .collect();
        let mut bufs = Vec::new();
        for t in tasks {
            bufs.push(t.await.unwrap());
        }
        assert_eq!(bufs.concat(), data);
        let after = rt.uring_stats();
        let enters = after.enters - before.enters;
        let sqes = after.sqes - before.sqes;
        assert_eq!(sqes, 64);
        assert!(
            enters <= 2,
            "64 reads from 64 tasks took {enters} io_uring_enter calls"
        );
    });
}

/// A ring much smaller than one tick's submissions: the driver submits early when the
/// queue fills; and more operations in flight than the completion queue holds (1024), so
/// CQEs go through the kernel's overflow list. Nothing is lost.
#[test]
fn small_ring_with_many_operations() {
    let dir = scratch();
    let path = dir.path().join("f");
    let rt = Builder::new(RuntimeType::IoUring)
        .ring_entries(4)
        .build()
        .unwrap();
    rt.block_on(async {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&path)
            .await
            .unwrap();
        let tasks: Vec<_> = (0..2500u64)
            .map(|i| {
                let f = f.clone();
                spawn_local(async move {
                    let (r, _) = f.write_all_at(pattern(1000, i), i * 1000).await;
                    r.unwrap();
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let got = std::fs::read(&path).unwrap();
    let want: Vec<u8> = (0..2500u64).flat_map(|i| pattern(1000, i)).collect();
    assert_eq!(got, want);
    assert_eq!(rt.uring_in_flight(), 0);
    eprintln!("small ring: {:?}", rt.uring_stats());
}

#[test]
fn open_errors_and_metadata() {
    let dir = scratch();
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        rt.block_on(async {
            let e = File::open(dir.path().join("missing")).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{kind}");
            let e = OpenOptions::new().open(dir.path()).await.unwrap_err();
            assert_eq!(
                e.raw_os_error(),
                Some(libc::EINVAL),
                "{kind}: no access mode"
            );
            let p = dir.path().join(format!("new-{kind}"));
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .open(&p)
                .await
                .unwrap();
            let md = f.metadata().await.unwrap();
            assert!(md.is_file() && !md.is_dir() && !md.is_block_device());
            assert_eq!(md.mode() & 0o777, 0o640 & !umask());
            assert!(md.is_empty());
            f.fallocate(0, 0, 1 << 20).await.unwrap();
            assert_eq!(f.metadata().await.unwrap().len(), 1 << 20);
            f.set_len(10).await.unwrap();
            assert_eq!(f.size().await.unwrap(), 10);
            let e = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
            f.close().await.unwrap();
            let d = File::open(dir.path()).await.unwrap();
            assert!(d.metadata().await.unwrap().is_dir());
        });
    }
}

fn umask() -> u32 {
    // SAFETY: umask is always safe; we put the old value back at once.
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    old
}

/// More completions at once than the completion queue holds (1024): 1100 one-byte pipe
/// reads wait, then one write satisfies them all. The CQEs beyond the queue go to the
/// kernel's overflow list; the driver must fetch them or the tasks hang.
#[test]
fn completion_queue_overflow_is_drained() {
    // Both ring setups. Without DEFER_TASKRUN the 1100 completions are posted at once and
    // overflow; with it the kernel hands them over in small batches (it may not overflow).
    for defer in [false, true] {
        cq_overflow_case(defer);
    }
}

fn cq_overflow_case(defer: bool) {
    let rt = Builder::new(RuntimeType::IoUring)
        .ring_entries(64)
        .defer_taskrun(defer)
        .build()
        .unwrap();
    let (r, w) = common::pipe();
    let f = File::from(r);
    let tasks: Vec<_> = (0..1100)
        .map(|_| {
            let f = f.clone();
            rt.spawn_local(async move {
                let (r, b) = f.read_at(Vec::with_capacity(1), 0).await;
                assert_eq!(r.unwrap(), 1);
                b[0]
            })
        })
        .collect();
    // Turn the runtime until every task has submitted its read (they all wait on the pipe).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rt.uring_in_flight() < 1100 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} reads submitted",
            rt.uring_in_flight()
        );
        rt.block_on(async { tokio::time::sleep(std::time::Duration::from_millis(5)).await });
    }
    assert_eq!(rt.uring_in_flight(), 1100);
    use std::io::Write;
    let mut w = w;
    let data: Vec<u8> = (0..1100u32).map(|i| (i % 251) as u8).collect();
    w.write_all(&data).unwrap();
    let mut got: Vec<u8> = rt.block_on(async {
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.unwrap());
        }
        got
    });
    got.sort_unstable();
    let mut want = data;
    want.sort_unstable();
    assert_eq!(got, want);
    let st = rt.uring_stats();
    eprintln!("overflow test (defer_taskrun {defer}): {st:?}");
    if !defer {
        assert!(st.cq_overflows > 0, "expected the CQ to overflow: {st:?}");
    }
}

/// The optional DEFER_TASKRUN ring: buffered and O_DIRECT IO, a batched copy, and a
/// dropped in-flight read all behave as on the default ring.
#[test]
fn defer_taskrun_ring_works() {
    use async_io::{copy_file, AlignedBuf, CopyMethod, CopyOptions};
    let dir = scratch();
    let data = pattern(8 << 20, 4);
    let src = common::make_file(dir.path(), "src", &data);
    let rt = Builder::new(RuntimeType::IoUring)
        .defer_taskrun(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let f = common::open_read_write(&src).await;
        let bufs: Vec<Vec<u8>> = (0..300).map(|i| pattern(4096, i)).collect();
        let (r, bufs) = f.writev_at(bufs, 4096).await;
        assert_eq!(r.unwrap(), 300 * 4096);
        let d = common::open_direct_read(&src).await;
        let rb: Vec<AlignedBuf> = (0..300).map(|_| AlignedBuf::with_capacity(4096)).collect();
        let (r, rb) = d.readv_at(rb, 4096).await;
        assert_eq!(r.unwrap(), 300 * 4096);
        for (a, b) in bufs.iter().zip(&rb) {
            assert_eq!(&a[..], &b[..]);
        }
        let mut o = CopyOptions::default();
        o.method = CopyMethod::Batched;
        o.direct = true;
        o.queue_depth = 8;
        let rep = copy_file(&src, dir.path().join("dst"), &o).await.unwrap();
        assert_eq!(rep.len, 8 << 20);
        // A read that never completes, dropped in flight.
        let (r, _w) = common::pipe();
        let p = File::from(r);
        let t = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            p.read_at(Vec::with_capacity(10), 0),
        )
        .await;
        assert!(t.is_err());
    });
    assert!(std::fs::read(&src).unwrap() == std::fs::read(dir.path().join("dst")).unwrap());
    common::wait_idle(&rt, "the cancelled read never completed");
}

/// When `io_uring_setup` fails (here: blocked by a seccomp filter returning ENOSYS, as a
/// container runtime might), building an io_uring runtime is an `UringUnavailable` error
/// with the errno, not a panic, and the tokio runtime still works. Runs in a child process
/// because the availability probe is cached per process and seccomp cannot be undone.
#[test]
fn uring_unavailable_is_an_error_not_a_panic() {
    const CHILD: &str = "ASYNC_IO_SECCOMP_CHILD";
    if std::env::var_os(CHILD).is_some() {
        block_io_uring_setup();
        let e = RuntimeType::IoUring.build().unwrap_err();
        assert!(matches!(e, async_io::Error::UringUnavailable(_)), "{e:?}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSYS));
        assert!(e.to_string().contains("io_uring is not available"), "{e}");
        assert!(RuntimeType::IoUring.check_available().is_err());
        assert!(async_io::uring_available().is_err());
        let rt = RuntimeType::Tokio.build().unwrap();
        rt.block_on(async {
            let f = File::open("/proc/self/stat").await.unwrap();
            let (r, _) = f.read_at(Vec::with_capacity(64), 0).await;
            assert!(r.unwrap() > 0);
        });
        println!("CHILD-OK");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "uring_unavailable_is_an_error_not_a_panic",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Installs a seccomp filter on this thread that fails `io_uring_setup` with ENOSYS.
fn block_io_uring_setup() {
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let prog = [
        // seccomp_data.nr is at offset 0.
        SockFilter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        SockFilter {
            code: JEQ_K,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        SockFilter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        SockFilter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let fprog = SockFprog {
        len: prog.len() as u16,
        filter: prog.as_ptr(),
    };
    // SAFETY: plain prctl calls; `fprog` points at a valid filter program for the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let r = libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const SockFprog,
        );
        assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
    }
}
