//! Whole-file copy on real files and a loop block device, on both runtimes and every path.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use async_io::{
    copy_file, copy_file_fds, copy_ordered, CopyMethod, CopyOptions, File, OpenOptions, RuntimeType,
};
use common::{pattern, runtime, scratch};

const METHODS: [CopyMethod; 4] = [
    CopyMethod::Auto,
    CopyMethod::CopyFileRange,
    CopyMethod::Batched,
    CopyMethod::ReadWrite,
];

fn opts(method: CopyMethod, block: usize, qd: usize, direct: bool) -> CopyOptions {
    let mut o = CopyOptions::default();
    o.method = method;
    o.block_size = block;
    o.queue_depth = qd;
    o.direct = direct;
    o
}

fn same_content(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[test]
fn sizes_methods_and_runtimes() {
    let dir = scratch();
    let sizes = [
        0usize,
        1,
        4095,
        4096,
        4097,
        65_537,
        1_000_003,
        (5 << 20) + 17,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        let src = common::make_file(dir.path(), &format!("src{i}"), &pattern(size, i as u64));
        for kind in RuntimeType::ALL {
            let rt = runtime(kind);
            for method in METHODS {
                // Small blocks so even the small files need several in flight.
                for (block, qd) in [(1 << 20, 32), (4096 * 3, 5)] {
                    let dst = dir.path().join(format!("dst-{i}-{kind}-{method}-{block}"));
                    // A stale, longer destination must end up exactly the source.
                    std::fs::write(&dst, vec![0xFF; size + 10_000]).unwrap();
                    let rep = rt
                        .block_on(copy_file(&src, &dst, &opts(method, block, qd, false)))
                        .unwrap_or_else(|e| panic!("{kind} {method} size {size}: {e}"));
                    assert_eq!(rep.len, size as u64);
                    assert_eq!(rep.bytes, size as u64);
                    assert!(
                        same_content(&src, &dst),
                        "{kind} {method} size {size} block {block}"
                    );
                    let used = rep.method.unwrap();
                    if method == CopyMethod::Auto {
                        assert_eq!(
                            used,
                            CopyMethod::CopyFileRange,
                            "Auto on regular cached files"
                        );
                    } else {
                        assert_eq!(used, method);
                    }
                }
            }
        }
    }
}

#[test]
fn direct_io_copy_on_ext4() {
    let dir = scratch();
    for (i, size) in [0usize, 1, 4095, 4096, 8193, (3 << 20) + 4096 * 5 + 77]
        .into_iter()
        .enumerate()
    {
        let src = common::make_file(
            dir.path(),
            &format!("src{i}"),
            &pattern(size, 40 + i as u64),
        );
        for kind in RuntimeType::ALL {
            let rt = runtime(kind);
            for method in [CopyMethod::Auto, CopyMethod::Batched, CopyMethod::ReadWrite] {
                let dst = dir.path().join(format!("dst-{i}-{kind}-{method}"));
                let rep = rt
                    .block_on(copy_file(&src, &dst, &opts(method, 64 << 10, 8, true)))
                    .unwrap_or_else(|e| panic!("O_DIRECT copy {kind} {method} size {size}: {e}"));
                assert_eq!(rep.len, size as u64);
                assert!(same_content(&src, &dst), "{kind} {method} size {size}");
                if method == CopyMethod::Auto {
                    assert_eq!(
                        rep.method,
                        Some(CopyMethod::Batched),
                        "direct copies use the ring"
                    );
                }
            }
        }
    }
}

#[test]
fn copy_between_open_files_and_ordered_copy() {
    let dir = scratch();
    let data = pattern((2 << 20) + 333, 3);
    let src = common::make_file(dir.path(), "src", &data);
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        rt.block_on(async {
            let s = File::open(&src).await.unwrap();
            let dpath = dir.path().join(format!("fd-{kind}"));
            std::fs::write(&dpath, vec![1u8; 5 << 20]).unwrap();
            let d = OpenOptions::new().write(true).open(&dpath).await.unwrap();
            for method in METHODS {
                let rep = copy_file_fds(&s, &d, &opts(method, 256 << 10, 4, false))
                    .await
                    .unwrap();
                assert_eq!(rep.len, data.len() as u64);
                assert!(std::fs::read(&dpath).unwrap() == data, "{kind} {method}");
            }
            for method in [CopyMethod::Batched, CopyMethod::ReadWrite, CopyMethod::Auto] {
                let o = dir.path().join(format!("ordered-{kind}-{method}"));
                let rep = copy_ordered(&src, &o, &opts(method, 64 << 10, 16, false))
                    .await
                    .unwrap();
                assert_eq!(rep.len, data.len() as u64);
                assert!(same_content(&src, &o));
            }
        });
    }
}

/// A reader tailing the destination of an ordered copy only ever sees a prefix of the
/// source: never a zero-filled gap where a later block landed first.
#[test]
fn ordered_copy_never_shows_holes_to_a_tailing_reader() {
    let dir = scratch();
    // No zero bytes in the source, so any zero seen by the tailer is a hole.
    let data: Vec<u8> = pattern(24 << 20, 77).into_iter().map(|b| b | 1).collect();
    let src = common::make_file(dir.path(), "src", &data);
    for kind in RuntimeType::ALL {
        for direct in [false, true] {
            let dst = dir.path().join(format!("tail-{kind}-{direct}"));
            std::fs::File::create(&dst).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            let tailer = {
                let dst = dst.clone();
                let stop = stop.clone();
                let data = data.clone();
                std::thread::spawn(move || {
                    let mut looks = 0;
                    let mut partial = 0;
                    loop {
                        // One last look after the copy ends, so every run checks something.
                        let last = stop.load(std::sync::atomic::Ordering::Acquire);
                        // The last 2 MiB below the current size: where a block written out of
                        // order would leave a hole (16 blocks of 64 KiB in flight).
                        use std::os::unix::fs::FileExt;
                        let f = std::fs::File::open(&dst).unwrap();
                        let size = f.metadata().unwrap().len() as usize;
                        let n = size.min(data.len());
                        let from = n.saturating_sub(2 << 20);
                        let mut got = vec![0u8; n - from];
                        let k = f.read_at(&mut got, from as u64).unwrap();
                        if let Some(bad) = got[..k]
                            .iter()
                            .zip(&data[from..from + k])
                            .position(|(a, b)| a != b)
                        {
                            panic!(
                                "tailer saw a byte not from the source at {} (size {size})",
                                from + bad
                            );
                        }
                        looks += 1;
                        if n > 0 && n < data.len() {
                            partial += 1;
                        }
                        if looks == 1 {
                            let _ = started_tx.send(());
                        }
                        if last {
                            break;
                        }
                    }
                    (looks, partial)
                })
            };
            started_rx.recv().unwrap();
            let rt = runtime(kind);
            let mut o = opts(CopyMethod::Batched, 64 << 10, 16, direct);
            o.preallocate = true;
            let rep = rt.block_on(copy_ordered(&src, &dst, &o)).unwrap();
            stop.store(true, std::sync::atomic::Ordering::Release);
            let (looks, partial) = tailer.join().unwrap();
            assert_eq!(rep.len, data.len() as u64);
            assert!(same_content(&src, &dst));
            eprintln!(
                "{kind} direct={direct}: the tailer looked {looks} times, {partial} mid-copy"
            );
        }
    }
}

#[test]
fn sparse_multi_gib_file() {
    let dir = scratch();
    let src = dir.path().join("sparse");
    let size: u64 = 6 << 30;
    let extents: [(u64, usize); 4] = [
        (0, 100_000),
        ((1 << 30) + 12_345, 3 << 20),
        (3 << 30, 4096),
        (size - 10, 10),
    ];
    {
        let f = std::fs::File::create(&src).unwrap();
        f.set_len(size).unwrap();
        use std::os::unix::fs::FileExt;
        for (i, &(off, len)) in extents.iter().enumerate() {
            f.write_all_at(&pattern(len, 500 + i as u64), off).unwrap();
        }
    }
    let src_blocks = std::fs::metadata(&src).unwrap().blocks();
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        for method in METHODS {
            for direct in [false, true] {
                if direct && method == CopyMethod::CopyFileRange {
                    continue;
                }
                let dst = dir.path().join(format!("sparse-{kind}-{method}-{direct}"));
                let t = Instant::now();
                let rep = rt
                    .block_on(copy_file(&src, &dst, &opts(method, 1 << 20, 32, direct)))
                    .unwrap_or_else(|e| panic!("{kind} {method} direct={direct}: {e}"));
                let took = t.elapsed();
                let md = std::fs::metadata(&dst).unwrap();
                assert_eq!(md.len(), size);
                assert_eq!(rep.len, size);
                assert!(rep.extents >= 3, "{rep:?}");
                // Holes stay holes: allocation near the source's, not 6 GiB.
                assert!(
                    md.blocks() <= src_blocks + 2 * 2048,
                    "{kind} {method}: {} blocks vs source {src_blocks}",
                    md.blocks()
                );
                check_sparse_copy(&dst, size, &extents);
                eprintln!(
                    "sparse 6 GiB copy, {kind} {method} direct={direct}: {took:?}, {} data bytes, {} blocks",
                    rep.bytes,
                    md.blocks()
                );
                std::fs::remove_file(&dst).unwrap();
            }
        }
    }
    // keep_holes off: the holes are read as zeros and written (on a smaller file).
    let small = dir.path().join("sparse-small");
    {
        let f = std::fs::File::create(&small).unwrap();
        f.set_len(64 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"middle", 30 << 20).unwrap();
    }
    let rt = runtime(RuntimeType::IoUring);
    let mut o = opts(CopyMethod::Batched, 1 << 20, 8, false);
    o.keep_holes = false;
    let dst = dir.path().join("dense");
    let rep = rt.block_on(copy_file(&small, &dst, &o)).unwrap();
    assert_eq!(rep.bytes, 64 << 20);
    assert!(same_content(&small, &dst));
}

/// Compares a copied sparse file to the extents it should hold, reading only around them
/// and a sample of the holes.
fn check_sparse_copy(dst: &Path, size: u64, extents: &[(u64, usize)]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(dst).unwrap();
    for (i, &(off, len)) in extents.iter().enumerate() {
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, off).unwrap();
        assert!(buf == pattern(len, 500 + i as u64), "extent {i} at {off}");
    }
    for probe in [
        200_000u64,
        1 << 29,
        (2 << 30) + 7,
        (5 << 30) + 99,
        size - 4096 - 10,
    ] {
        let mut buf = vec![1u8; 4096];
        f.read_exact_at(&mut buf, probe).unwrap();
        assert!(
            buf.iter().all(|&b| b == 0),
            "hole at {probe} reads as zeros"
        );
    }
}

#[test]
fn errors_are_reported_not_hidden() {
    let dir = scratch();
    let src = common::make_file(dir.path(), "src", &pattern(100_000, 1));
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        rt.block_on(async {
            // A source open write-only: the first read fails with EBADF on every path.
            let wo = OpenOptions::new().write(true).open(&src).await.unwrap();
            let d = File::create(dir.path().join(format!("d-{kind}")))
                .await
                .unwrap();
            for method in METHODS {
                let e = copy_file_fds(&wo, &d, &opts(method, 4096, 4, false))
                    .await
                    .unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{kind} {method}: {e}");
            }
            // A directory is neither a file nor a block device.
            let e = copy_file(dir.path(), dir.path().join("x"), &CopyOptions::default())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
            // Same file: refused before the destination is truncated.
            let e = copy_file(&src, &src, &CopyOptions::default())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("same file"), "{e}");
            assert_eq!(std::fs::metadata(&src).unwrap().len(), 100_000);
            // A missing source names the path.
            let e = copy_file(
                dir.path().join("nope"),
                dir.path().join("y"),
                &CopyOptions::default(),
            )
            .await
            .unwrap_err();
            assert!(e.to_string().contains("nope"), "{e}");
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
            // O_APPEND destinations are refused (positioned writes would misplace blocks).
            let app = OpenOptions::new()
                .write(true)
                .append(true)
                .create(true)
                .open(dir.path().join(format!("app-{kind}")))
                .await
                .unwrap();
            let s = File::open(&src).await.unwrap();
            let e = copy_file_fds(&s, &app, &CopyOptions::default())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("O_APPEND"), "{e}");
        });
    }
}

/// A loop device over a file under the target dir. Detached on drop.
struct LoopDev {
    dev: PathBuf,
}

impl LoopDev {
    fn new(backing: &Path) -> Result<LoopDev, String> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .map_err(|e| format!("running losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup -f --show failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        Ok(LoopDev { dev })
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// Block device copies both ways. Needs real root and loop devices (`needs_root`: the user
/// namespace run leaves it out and counts it as skipped); without them it fails with the
/// reason.
#[test]
fn block_device_copy_needs_root() {
    let dir = scratch();
    let backing = dir.path().join("backing.img");
    let dev_size: u64 = 48 << 20;
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(dev_size)
        .unwrap();
    let lo = match LoopDev::new(&backing) {
        Ok(lo) => lo,
        Err(why) => panic!("block_device_copy needs a loop device (real root): {why}"),
    };
    let data = pattern((20 << 20) + 4096 * 3 + 100, 99);
    let src = common::make_file(dir.path(), "src", &data);
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        for method in [CopyMethod::Auto, CopyMethod::Batched, CopyMethod::ReadWrite] {
            for direct in [false, true] {
                // File -> device: the device keeps its size; its head holds the data.
                let rep = rt
                    .block_on(copy_file(&src, &lo.dev, &opts(method, 1 << 20, 16, direct)))
                    .unwrap_or_else(|e| {
                        panic!(
                            "file -> {} ({kind} {method} direct={direct}): {e}",
                            lo.dev.display()
                        )
                    });
                if method == CopyMethod::Auto {
                    assert_eq!(rep.method, Some(CopyMethod::Batched));
                }
                let mut head = vec![0u8; data.len()];
                {
                    use std::os::unix::fs::FileExt;
                    let d = std::fs::File::open(&lo.dev).unwrap();
                    d.read_exact_at(&mut head, 0).unwrap();
                }
                assert!(
                    head == data,
                    "device head after {kind} {method} direct={direct}"
                );
                // Device -> file: the whole device, BLKGETSIZE64 bytes.
                let out = dir
                    .path()
                    .join(format!("from-dev-{kind}-{method}-{direct}"));
                let rep = rt
                    .block_on(copy_file(&lo.dev, &out, &opts(method, 1 << 20, 16, direct)))
                    .unwrap_or_else(|e| {
                        panic!("{} -> file ({kind} {method}): {e}", lo.dev.display())
                    });
                assert_eq!(rep.len, dev_size);
                let got = std::fs::read(&out).unwrap();
                assert_eq!(got.len() as u64, dev_size);
                assert!(got[..data.len()] == data[..]);
                std::fs::remove_file(&out).unwrap();
            }
        }
        // Too big for the device: refused before writing.
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(dev_size + 1)
            .unwrap();
        let e = rt
            .block_on(copy_file(&big, &lo.dev, &CopyOptions::default()))
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    }
}
