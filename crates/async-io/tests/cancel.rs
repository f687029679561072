//! Cancellation safety: futures dropped while the kernel still owns their buffers.
//!
//! The buffers are canary buffers: guard bytes on both sides of the region handed to the
//! kernel, checked when the buffer is finally dropped, and a drop counter. A buffer freed
//! too early would be reported by the allocator or show up as a canary mismatch; a buffer
//! never freed shows up in the counter.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_io::{
    copy_file, AlignedBuf, CopyMethod, CopyOptions, File, IoBuf, IoBufMut, RuntimeType,
};
use common::{pattern, runtime, scratch};

/// A page, so the region the kernel sees is page-aligned (O_DIRECT works).
const GUARD: usize = 4096;
const CANARY: u8 = 0xA5;

#[derive(Default)]
struct Tally {
    dropped: AtomicUsize,
    corrupt: AtomicUsize,
}

struct CanaryBuf {
    mem: AlignedBuf,
    cap: usize,
    len: usize,
    tally: Arc<Tally>,
}

impl CanaryBuf {
    fn new(cap: usize, tally: &Arc<Tally>) -> CanaryBuf {
        CanaryBuf {
            mem: AlignedBuf::from_slice(&vec![CANARY; cap + 2 * GUARD]),
            cap,
            len: 0,
            tally: tally.clone(),
        }
    }
    fn data(&self) -> &[u8] {
        &self.mem[GUARD..GUARD + self.len]
    }
}

impl Drop for CanaryBuf {
    fn drop(&mut self) {
        let ok = self.mem[..GUARD].iter().all(|&b| b == CANARY)
            && self.mem[GUARD + self.cap..].iter().all(|&b| b == CANARY);
        if !ok {
            self.tally.corrupt.fetch_add(1, Ordering::SeqCst);
        }
        self.tally.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: the aligned heap buffer never moves; GUARD..GUARD+len is initialised (all of it is).
unsafe impl IoBuf for CanaryBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.mem[GUARD..].as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len
    }
}

// SAFETY: GUARD..GUARD+cap is writable memory of the buffer.
unsafe impl IoBufMut for CanaryBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.mem[GUARD..].as_mut_ptr()
    }
    fn bytes_total(&self) -> usize {
        self.cap
    }
    unsafe fn set_init(&mut self, n: usize) {
        self.len = n;
    }
}

/// A read that can never complete by itself (an empty pipe), dropped while in flight: the
/// buffer stays with the driver until the cancel's CQE, then is freed intact.
#[test]
fn dropped_pipe_read_keeps_its_buffer_until_the_cqe() {
    let rt = runtime(RuntimeType::IoUring);
    let tally = Arc::new(Tally::default());
    let (r, w) = common::pipe();
    let f = File::from(r);
    rt.block_on(async {
        let fut = f.read_at(CanaryBuf::new(4096, &tally), 0);
        let t = tokio::time::timeout(Duration::from_millis(20), fut).await;
        assert!(t.is_err(), "the read must still be pending");
    });
    // Dropped by the timeout while in flight: not freed yet (or freed after a cancel CQE).
    let abandoned = rt.uring_stats().abandoned;
    assert_eq!(abandoned, 1);
    common::wait_idle(&rt, "operations never completed");
    assert_eq!(
        tally.dropped.load(Ordering::SeqCst),
        1,
        "freed once the CQE came"
    );
    assert_eq!(tally.corrupt.load(Ordering::SeqCst), 0);
    // The data written now is not eaten by the cancelled read, and the runtime still works.
    use std::io::Write;
    let mut w = w;
    w.write_all(b"after").unwrap();
    let got = rt.block_on(async {
        let (r, b) = f.read_at(CanaryBuf::new(100, &tally), 0).await;
        assert_eq!(r.unwrap(), 5);
        b.data().to_vec()
    });
    assert_eq!(got, b"after");
    assert_eq!(tally.dropped.load(Ordering::SeqCst), 2);
    assert_eq!(tally.corrupt.load(Ordering::SeqCst), 0);
}

/// Many disk reads (O_DIRECT, so they really go to the device) dropped right after
/// submission, with vectored ones among them; then the same runtime keeps working.
#[test]
fn dropped_disk_reads_and_vectored_ops() {
    let dir = scratch();
    let data = pattern(16 << 20, 5);
    let path = common::make_file(dir.path(), "big", &data);
    let rt = runtime(RuntimeType::IoUring);
    let tally = Arc::new(Tally::default());
    let mut started = 0;
    for round in 0..20 {
        rt.block_on(async {
            let f = common::open_direct_read(&path).await;
            let mut futs = Vec::new();
            for i in 0..16u64 {
                let f = f.clone();
                let tally = tally.clone();
                futs.push(async_io::spawn_local(async move {
                    if i % 4 == 0 {
                        let bufs: Vec<CanaryBuf> =
                            (0..8).map(|_| CanaryBuf::new(128 << 10, &tally)).collect();
                        let _ = f.readv_at(bufs, i << 20).await;
                    } else {
                        let _ = f.read_at(CanaryBuf::new(1 << 20, &tally), i << 20).await;
                    }
                }));
                started += if i % 4 == 0 { 8 } else { 1 };
            }
            // Let the SQEs go out, then abort every task mid-flight.
            tokio::task::yield_now().await;
            if round % 2 == 0 {
                tokio::task::yield_now().await;
            }
            for h in futs {
                h.abort();
            }
        });
    }
    common::wait_idle(&rt, "operations never completed");
    assert_eq!(
        tally.dropped.load(Ordering::SeqCst),
        started,
        "every buffer freed exactly once"
    );
    assert_eq!(tally.corrupt.load(Ordering::SeqCst), 0);
    // Now check real reads still work on this runtime.
    rt.block_on(async {
        let f = File::open(&path).await.unwrap();
        let (r, b) = f.read_exact_at(Vec::with_capacity(1 << 20), 3 << 20).await;
        r.unwrap();
        assert_eq!(&b[..], &data[3 << 20..4 << 20]);
    });
    assert_eq!(rt.uring_in_flight(), 0);
}

/// Dropping the runtime with operations that would never complete returns (the driver
/// cancels them) and frees their buffers intact.
#[test]
fn runtime_drop_with_reads_in_flight() {
    let tally = Arc::new(Tally::default());
    let (r, _w) = common::pipe();
    let f = File::from(r);
    {
        let rt = runtime(RuntimeType::IoUring);
        for _ in 0..5 {
            let f = f.clone();
            let tally = tally.clone();
            rt.spawn_local(async move {
                let _ = f.read_at(CanaryBuf::new(4096, &tally), 0).await;
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while rt.uring_in_flight() < 5 {
            assert!(Instant::now() < deadline, "the reads were never submitted");
            rt.block_on(async { tokio::time::sleep(Duration::from_millis(2)).await });
        }
        assert_eq!(rt.uring_in_flight(), 5);
        assert_eq!(tally.dropped.load(Ordering::SeqCst), 0);
    }
    assert_eq!(tally.dropped.load(Ordering::SeqCst), 5);
    assert_eq!(tally.corrupt.load(Ordering::SeqCst), 0);
}

/// A batched copy dropped half-way: its reads and writes are cancelled or run out, the
/// buffers come back, and the runtime copies fine afterwards.
#[test]
fn dropped_copy_then_the_runtime_still_works() {
    let dir = scratch();
    let data = pattern(64 << 20, 11);
    let src = common::make_file(dir.path(), "src", &data);
    let rt = runtime(RuntimeType::IoUring);
    let mut o = CopyOptions::default();
    o.method = CopyMethod::Batched;
    o.direct = true;
    o.queue_depth = 16;
    rt.block_on(async {
        let r = tokio::time::timeout(
            Duration::from_millis(3),
            copy_file(&src, dir.path().join("dst"), &o),
        )
        .await;
        assert!(
            r.is_err(),
            "a 64 MiB direct copy should take longer than 3 ms"
        );
    });
    assert!(rt.uring_stats().abandoned > 0);
    common::wait_idle(&rt, "operations never completed");
    let rep = rt
        .block_on(copy_file(&src, dir.path().join("dst2"), &o))
        .unwrap();
    assert_eq!(rep.len, data.len() as u64);
    assert!(std::fs::read(dir.path().join("dst2")).unwrap() == data);
}
