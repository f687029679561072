//! Fault injection through the internal hooks: a read that fails with a real kernel error
//! at a chosen block, and a source that ends before the size the copy was told.

use super::*;
use crate::runtime::Runtime;
use crate::RuntimeType;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("async-io-unit-")
        .tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target"))
        .expect("scratch dir under the target dir")
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8 | 1).collect()
}

/// Copies `src` to `dst` on `rt` with `method` (64 KiB blocks, 16 in
/// flight), through the fault hooks of `fault`.
fn copy(
    rt: &Runtime,
    src: &Path,
    dst: &Path,
    method: CopyMethod,
    direct: bool,
    fault: &Fault,
) -> Result<CopyReport, Error> {
    let opts = CopyOptions {
        method,
        block_size: 65536,
        queue_depth: 16,
        direct,
        ..CopyOptions::default()
    };
    rt.block_on(copy_paths(src, dst, &opts, fault))
}

fn wait_idle(rt: &Runtime) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rt.uring_in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "operations never completed"
        );
        rt.block_on(async { tokio::time::sleep(std::time::Duration::from_millis(1)).await });
    }
}

/// The read of block 5 fails (EISDIR from the kernel) while up to 16 blocks are in flight:
/// the copy returns that error, names the offset, and leaves nothing running.
#[test]
fn read_error_mid_batch_is_returned_and_cancels_the_rest() {
    let dir = scratch();
    let src = dir.path().join("src");
    std::fs::write(&src, data(64 * 65536 + 5)).unwrap();
    for kind in RuntimeType::ALL {
        let rt = kind.build().unwrap();
        for method in [CopyMethod::Batched, CopyMethod::ReadWrite] {
            for direct in [false, true] {
                let fault = Fault {
                    fail_read_block: Some(5),
                    size_override: None,
                };
                let dst = dir.path().join(format!("dst-{kind}-{method}-{direct}"));
                let e = copy(&rt, &src, &dst, method, direct, &fault).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EISDIR), "{kind} {method}: {e}");
                assert!(
                    e.to_string().contains(&format!("offset {}", 5 * 65536)),
                    "{kind} {method}: {e}"
                );
                wait_idle(&rt);
                // The runtime still copies fine.
                let rep = copy(&rt, &src, &dst, method, direct, &Fault::default()).unwrap();
                assert_eq!(rep.len, 64 * 65536 + 5);
                assert!(std::fs::read(&dst).unwrap() == std::fs::read(&src).unwrap());
            }
        }
    }
}

/// The copy is told the source has 10 MiB more than it has: reads past the end return 0
/// in the middle of a batch; the copy ends at the real end and the destination is exact.
#[test]
fn eof_in_the_middle_of_a_batch() {
    let dir = scratch();
    for (i, real) in [0usize, 1, 65536 * 3, 65536 * 3 + 4097, (1 << 20) + 123]
        .into_iter()
        .enumerate()
    {
        let src = dir.path().join(format!("src{i}"));
        std::fs::write(&src, data(real)).unwrap();
        for kind in RuntimeType::ALL {
            let rt = kind.build().unwrap();
            for method in [
                CopyMethod::Batched,
                CopyMethod::ReadWrite,
                CopyMethod::CopyFileRange,
            ] {
                for direct in [false, true] {
                    if direct && method == CopyMethod::CopyFileRange {
                        continue;
                    }
                    let fault = Fault {
                        fail_read_block: None,
                        size_override: Some(real as u64 + (10 << 20)),
                    };
                    let dst = dir.path().join(format!("dst{i}-{kind}-{method}-{direct}"));
                    let rep = copy(&rt, &src, &dst, method, direct, &fault)
                        .unwrap_or_else(|e| panic!("{kind} {method} real={real}: {e}"));
                    assert_eq!(rep.len, real as u64, "{kind} {method} direct={direct}");
                    assert_eq!(rep.bytes, real as u64, "{kind} {method} direct={direct}");
                    assert!(
                        std::fs::read(&dst).unwrap() == data(real),
                        "{kind} {method} real={real}"
                    );
                    wait_idle(&rt);
                }
            }
        }
    }
}

#[test]
fn blocks_cover_extents_exactly() {
    let f = std::fs::File::open("/dev/null").unwrap();
    let job = Job {
        src: File::from(f.try_clone().unwrap()),
        dst: File::from(f),
        direct: false,
        align: 1,
        block: 10,
        queue_depth: 1,
        ordered: false,
        dst_limit: None,
        fault: Fault::default(),
        extents: vec![(0, 25), (40, 50), (100, 101)],
    };
    let b: Vec<_> = job.blocks().collect();
    assert_eq!(b, vec![(0, 10), (10, 10), (20, 5), (40, 10), (100, 1)]);
    let job = Job {
        align: 4096,
        dst_limit: Some(4096 + 512),
        ..job
    };
    assert_eq!(job.write_len(0, 100), 4096);
    assert_eq!(job.write_len(4096, 100), 512, "clamped to the device end");
}
