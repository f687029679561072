//! A quick microbenchmark of the inode hot paths: LOOKUP (of a known
//! name), GETATTR (without a handle) and OPEN+RELEASE, with inodes held by
//! `O_PATH` descriptor and by file handle, on a few hot files (the
//! descriptor cache hits) and round-robin over more files than the cache
//! holds (every access opens the handle again).
//!
//! ```text
//! cargo run --release -p fusewire-backend-passthrough --example inode_latency [DIR]
//! ```
//!
//! DIR (default: a new directory under /tmp) decides the backing file
//! system. Prints the median of 5 rounds in nanoseconds per call. Run as
//! root (file handles need `CAP_DAC_READ_SEARCH`).

use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{Context, FileSystem, OpenArgs, ReleaseArgs};
use std::ffi::CString;
use std::time::Instant;

const COLD_FILES: usize = 4096;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let base = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/tmp"));
    let dir = tempfile::Builder::new()
        .prefix("inode-latency-")
        .tempdir_in(&base)
        .unwrap();
    for i in 0..COLD_FILES {
        std::fs::write(dir.path().join(format!("f{i}")), b"x").unwrap();
    }
    let names: Vec<CString> = (0..COLD_FILES)
        .map(|i| CString::new(format!("f{i}")).unwrap())
        .collect();
    let ctx = Context::default();
    println!(
        "{:<8} {:<5} {:>10} {:>10} {:>12}",
        "inodes", "set", "lookup", "getattr", "open+release"
    );
    for handles in [false, true] {
        let fs = PassthroughFs::new(
            dir.path(),
            PassthroughConfig::default().file_handles(handles),
        )
        .unwrap();
        assert_eq!(
            fs.uses_file_handles(),
            handles,
            "{:?}",
            fs.file_handle_fallback()
        );
        let ids: Vec<u64> = names
            .iter()
            .map(|n| fs.lookup(&ctx, 1, n).unwrap().nodeid)
            .collect();
        for (set, count) in [("hot", 8usize), ("cold", COLD_FILES)] {
            let iters = 20_000;
            let (mut l, mut g, mut o) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..5 {
                let t = Instant::now();
                for i in 0..iters {
                    let e = fs.lookup(&ctx, 1, &names[i % count]).unwrap();
                    fs.forget(&ctx, e.nodeid, 1);
                }
                l.push(t.elapsed().as_nanos() as f64 / iters as f64);
                let t = Instant::now();
                for i in 0..iters {
                    fs.getattr(&ctx, ids[(i * 7) % count], None).unwrap();
                }
                g.push(t.elapsed().as_nanos() as f64 / iters as f64);
                let t = Instant::now();
                for i in 0..iters {
                    let ino = ids[(i * 13) % count];
                    let open = OpenArgs {
                        flags: libc::O_RDONLY as u32,
                        ..OpenArgs::default()
                    };
                    let h = fs.open(&ctx, ino, &open).unwrap();
                    let rel = ReleaseArgs {
                        fh: h.fh,
                        ..ReleaseArgs::default()
                    };
                    fs.release(&ctx, ino, &rel).unwrap();
                }
                o.push(t.elapsed().as_nanos() as f64 / iters as f64);
            }
            println!(
                "{:<8} {:<5} {:>10.0} {:>10.0} {:>12.0}",
                if handles { "handles" } else { "fds" },
                set,
                median(l),
                median(g),
                median(o)
            );
        }
    }
}
