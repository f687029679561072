//! Positioned and vectored IO on real files, on both runtimes, checked against
//! `pread`/`pwrite` through std (`FileExt`).

mod common;

use std::os::unix::fs::FileExt;

use async_io::{AlignedBuf, File, OpenOptions, RuntimeType, DIRECT_IO_ALIGN, IOV_MAX};
use common::{pattern, runtime, scratch};
use proptest::prelude::*;

/// Buffer counts around the interesting edges: none, few, across IOV_MAX, several windows.
fn buffer_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        4 => prop::collection::vec(0usize..9000, 0..20),
        2 => prop::collection::vec(0usize..600, IOV_MAX - 3..IOV_MAX + 40),
        1 => prop::collection::vec(0usize..300, 2 * IOV_MAX + 1..2 * IOV_MAX + 60),
    ]
}

/// What preadv must return: the file from `pos`, spread over the buffers in order.
fn expected_read(file: &[u8], pos: usize, sizes: &[usize]) -> (usize, Vec<Vec<u8>>) {
    let mut at = pos.min(file.len());
    let mut out = Vec::new();
    for &s in sizes {
        let end = (at + s).min(file.len());
        out.push(file[at..end].to_vec());
        at = end;
    }
    (out.iter().map(Vec::len).sum(), out)
}

fn check_readv(kind: RuntimeType, file_len: usize, pos: usize, sizes: &[usize]) {
    let dir = scratch();
    let data = pattern(file_len, file_len as u64 ^ pos as u64);
    let path = common::make_file(dir.path(), "f", &data);
    let rt = runtime(kind);
    rt.block_on(async {
        let f = File::open(&path).await.unwrap();
        // Garbage-filled buffers: a read must set each length exactly.
        let bufs: Vec<Vec<u8>> = sizes
            .iter()
            .map(|&s| {
                let mut v = Vec::with_capacity(s);
                v.resize(s, 0xEE);
                v
            })
            .collect();
        let (r, bufs) = f.readv_at(bufs, pos as u64).await;
        let n = r.unwrap();
        let (want_n, want) = expected_read(&data, pos, sizes);
        assert_eq!(n, want_n, "{kind}: count for file {file_len} at {pos}");
        assert_eq!(bufs.len(), sizes.len());
        for (i, (got, want)) in bufs.iter().zip(&want).enumerate() {
            assert_eq!(got, want, "{kind}: buffer {i} of {}", sizes.len());
        }
        // The same through std's pread, as a cross-check of the model.
        let std = std::fs::File::open(&path).unwrap();
        let mut all = vec![0u8; sizes.iter().sum()];
        let mut got = 0;
        while got < all.len() {
            let k = std.read_at(&mut all[got..], (pos + got) as u64).unwrap();
            if k == 0 {
                break;
            }
            got += k;
        }
        assert_eq!(got, n);
        assert_eq!(&all[..n], &bufs.concat()[..]);
    });
}

fn check_writev(kind: RuntimeType, file_len: usize, pos: usize, sizes: &[usize]) {
    let dir = scratch();
    let initial = pattern(file_len, 7);
    let path = common::make_file(dir.path(), "f", &initial);
    let bufs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| pattern(s, i as u64 + 100))
        .collect();
    let mut model = initial.clone();
    let total: usize = sizes.iter().sum();
    if model.len() < pos + total {
        model.resize(pos + total, 0);
    }
    model[pos..pos + total].copy_from_slice(&bufs.concat());
    let rt = runtime(kind);
    rt.block_on(async {
        let f = OpenOptions::new().write(true).open(&path).await.unwrap();
        let (r, back) = f.writev_at(bufs.clone(), pos as u64).await;
        assert_eq!(r.unwrap(), total, "{kind}");
        assert_eq!(
            back, bufs,
            "{kind}: the buffers come back unchanged, in order"
        );
    });
    let mut expected_len = initial.len().max(pos + total);
    if total == 0 {
        // Writing nothing does not extend the file.
        expected_len = initial.len();
        model.truncate(expected_len);
    }
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), expected_len, "{kind}: size");
    assert!(got == model, "{kind}: file content after writev");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn readv_matches_pread(file_len in 0usize..120_000, pos_frac in 0.0f64..1.2, sizes in buffer_sizes()) {
        let pos = (file_len as f64 * pos_frac) as usize;
        for kind in RuntimeType::ALL {
            check_readv(kind, file_len, pos, &sizes);
        }
    }

    #[test]
    fn writev_matches_pwrite(file_len in 0usize..60_000, pos in 0usize..80_000, sizes in buffer_sizes()) {
        for kind in RuntimeType::ALL {
            check_writev(kind, file_len, pos, &sizes);
        }
    }
}

#[test]
fn readv_eof_in_the_middle_of_a_vector_and_beyond_iov_max() {
    for kind in RuntimeType::ALL {
        // 2500 buffers of 100 bytes from a 123_456-byte file: EOF in buffer 1234 of window 2.
        check_readv(kind, 123_456, 0, &[100; 2500]);
        // EOF exactly at a window boundary.
        check_readv(kind, IOV_MAX * 10, 0, &[10; 3 * IOV_MAX]);
        // Reading entirely past EOF.
        check_readv(kind, 1000, 5000, &[10; 1500]);
        // Empty vectors and empty buffers.
        check_readv(kind, 1000, 0, &[]);
        check_readv(kind, 1000, 0, &[0, 0, 5, 0, 7]);
    }
}

#[test]
fn read_exact_and_write_all() {
    let dir = scratch();
    let data = pattern(100_000, 1);
    let path = common::make_file(dir.path(), "f", &data);
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        rt.block_on(async {
            let f = common::open_read_write(&path).await;
            let (r, buf) = f.read_exact_at(Vec::with_capacity(50_000), 25_000).await;
            r.unwrap();
            assert_eq!(&buf[..], &data[25_000..75_000]);
            let (r, buf) = f.read_exact_at(Vec::with_capacity(50_000), 75_000).await;
            assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
            assert_eq!(
                &buf[..],
                &data[75_000..],
                "{kind}: what was read before EOF"
            );
            let (r, n) = f.read_at(Vec::with_capacity(10), 200_000).await;
            assert_eq!(r.unwrap(), 0);
            assert!(n.is_empty());
            let (r, _) = f.write_all_at(b"xyz".to_vec(), 99_999).await;
            r.unwrap();
            let (r, n) = f.write_at(&b"static"[..], 5).await;
            assert_eq!(r.unwrap(), 6);
            assert_eq!(n, b"static");
            f.sync_data().await.unwrap();
            f.sync_all().await.unwrap();
            assert_eq!(f.size().await.unwrap(), 100_002);
        });
        std::fs::write(&path, &data).unwrap();
    }
}

#[test]
fn direct_io_with_aligned_buffers() {
    let dir = scratch();
    let path = dir.path().join("direct");
    for kind in RuntimeType::ALL {
        let rt = runtime(kind);
        rt.block_on(async {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .direct(true)
                .open(&path)
                .await
                .unwrap_or_else(|e| panic!("O_DIRECT open under the target dir failed: {e}"));
            let bufs: Vec<AlignedBuf> = (0..300)
                .map(|i| AlignedBuf::from_slice(&pattern(DIRECT_IO_ALIGN, i)))
                .collect();
            let (r, bufs) = f.writev_at(bufs, 4096 * 3).await;
            assert_eq!(r.unwrap(), 300 * 4096, "{kind}: O_DIRECT writev");
            let rb: Vec<AlignedBuf> = (0..310).map(|_| AlignedBuf::with_capacity(4096)).collect();
            let (r, rb) = f.readv_at(rb, 4096 * 3).await;
            assert_eq!(
                r.unwrap(),
                300 * 4096,
                "{kind}: O_DIRECT readv, EOF after 300"
            );
            for (a, b) in bufs.iter().zip(&rb) {
                assert_eq!(&a[..], &b[..]);
            }
            assert!(rb[300..].iter().all(|b| b.is_empty()));
            // Unaligned memory with O_DIRECT is refused by the kernel, on both runtimes alike.
            let mut v = Vec::with_capacity(4096 + 1);
            v.resize(4097, 1u8);
            let (r, _) = f.write_at(v.split_off(1), 0).await;
            if let Err(e) = r {
                assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
            }
        });
    }
}

/// io_uring short transfers: a pipe hands out what is there, so a READV gets a partial
/// count and the rest must be resubmitted (regular files only come up short at EOF).
#[test]
fn uring_resubmits_short_vectored_transfers() {
    let rt = runtime(RuntimeType::IoUring);
    let (r, w) = common::pipe();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut w = w;
        for chunk in pattern(30_000, 9).chunks(1000) {
            w.write_all(chunk).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    let got = rt.block_on(async {
        let f = File::from(std::os::fd::OwnedFd::from(r));
        let bufs: Vec<Vec<u8>> = (0..3).map(|_| Vec::with_capacity(10_000)).collect();
        let (r, bufs) = f.readv_at(bufs, 0).await;
        assert_eq!(r.unwrap(), 30_000);
        bufs.concat()
    });
    writer.join().unwrap();
    assert_eq!(got, pattern(30_000, 9));
    assert!(
        rt.uring_stats().sqes > 3,
        "several READV SQEs: {:?}",
        rt.uring_stats()
    );

    // Writes: a 64 KiB pipe drained slowly takes a 1 MiB WRITEV in pieces.
    let (r, w) = common::pipe();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut r = r;
        let mut all = Vec::new();
        r.read_to_end(&mut all).unwrap();
        all
    });
    let data = pattern(1 << 20, 3);
    rt.block_on(async {
        let f = File::from(std::os::fd::OwnedFd::from(w));
        let bufs: Vec<Vec<u8>> = data.chunks(4096).map(<[u8]>::to_vec).collect();
        let (r, _) = f.writev_at(bufs, 0).await;
        assert_eq!(r.unwrap(), 1 << 20);
    });
    assert_eq!(reader.join().unwrap(), data);
}
