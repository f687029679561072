//! Replays the committed corpus (seeds and every regression input) of each
//! fuzz target through its harness, and a few thousand deterministic
//! mutations of the dispatch seeds: `cargo test -p fuse-fuzz` checks the
//! fuzzers' properties without libFuzzer. The dispatch harness needs root
//! for its fence (a private tmpfs and a chroot); without root it warns and
//! uses a plain temporary directory.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect()
}

fn structured<T: for<'a> arbitrary::Arbitrary<'a>>(data: &[u8]) -> Option<T> {
    T::arbitrary_take_rest(arbitrary::Unstructured::new(data)).ok()
}

/// xorshift, for deterministic mutations.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn dispatch_corpus_and_mutations() {
    let seeds = corpus("dispatch");
    assert!(seeds.len() >= 5, "the dispatch corpus has seeds");
    for (path, data) in &seeds {
        eprintln!("dispatch {}", path.display());
        fuse_fuzz::dispatch::run(data);
    }
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for i in 0..1500 {
        let (_, seed) = &seeds[i % seeds.len()];
        let mut data = seed.clone();
        for _ in 0..1 + next(&mut x) % 8 {
            let at = (next(&mut x) as usize) % data.len();
            data[at] = next(&mut x) as u8;
        }
        data.truncate(1 + (next(&mut x) as usize) % data.len());
        fuse_fuzz::dispatch::run(&data);
    }
}

#[test]
fn decode_corpus() {
    let seeds = corpus("decode");
    assert!(!seeds.is_empty());
    for (_, data) in &seeds {
        fuse_fuzz::decode::run(data);
    }
    let mut x = 7u64;
    for i in 0..20000 {
        let mut data = seeds[i % seeds.len()].1.clone();
        let at = (next(&mut x) as usize) % data.len();
        data[at] = next(&mut x) as u8;
        fuse_fuzz::decode::run(&data);
    }
}

#[test]
fn encoder_corpora() {
    let mut x = 99u64;
    for target in ["replies", "dirent_buf", "notify", "init_negotiation"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(target);
        let mut inputs: Vec<Vec<u8>> = if dir.is_dir() {
            corpus(target).into_iter().map(|(_, d)| d).collect()
        } else {
            Vec::new()
        };
        for _ in 0..3000 {
            let len = (next(&mut x) % 600) as usize;
            inputs.push((0..len).map(|_| next(&mut x) as u8).collect());
        }
        for data in &inputs {
            match target {
                "replies" => {
                    if let Some(i) = structured(data) {
                        fuse_fuzz::encoders::replies(&i)
                    }
                }
                "dirent_buf" => {
                    if let Some(i) = structured(data) {
                        fuse_fuzz::encoders::dirent_buf(&i)
                    }
                }
                "notify" => {
                    if let Some(i) = structured(data) {
                        fuse_fuzz::encoders::notify(&i)
                    }
                }
                _ => {
                    if let Some(i) = structured(data) {
                        fuse_fuzz::encoders::init_negotiation(&i)
                    }
                }
            }
        }
    }
}
