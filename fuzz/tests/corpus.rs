//! Replays the committed corpus (seeds and every regression input) of each
//! fuzz target through its harness, and a few thousand deterministic
//! mutations of the dispatch seeds: `cargo test -p fuse-fuzz` checks the
//! fuzzers' properties without libFuzzer. The dispatch harness needs root
//! for its fence (a private tmpfs and a chroot); without root it warns and
//! uses a plain temporary directory.
//!
//! A replay of nothing checks nothing: every target's corpus directory
//! must exist and hold at least [`MIN_SEEDS`] inputs, and every committed
//! input of a structured target must still decode as that target's input
//! (one that no longer does tests nothing and must be regenerated).

use std::path::{Path, PathBuf};

/// The fewest committed inputs a target's corpus may have.
const MIN_SEEDS: usize = 5;

/// The committed inputs of `target` (`fuzz/corpus/TARGET/`, without the
/// `.tmp*` files a fuzzer run leaves), sorted; fails unless there are at
/// least [`MIN_SEEDS`].
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the {target} corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    assert!(
        files.len() >= MIN_SEEDS,
        "the {target} corpus {} holds {} inputs, fewer than {MIN_SEEDS}: a replay of \
         (almost) nothing checks nothing (fuzz/README.md says how to make one)",
        dir.display(),
        files.len()
    );
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

/// Replays the corpus of a structured target through `run`: every
/// committed input must decode as a `T`; then `random` inputs of arbitrary
/// bytes (seeded by `seed`), most of which decode too.
fn replay<T: for<'a> arbitrary::Arbitrary<'a>>(target: &str, seed: u64, run: impl Fn(&T)) {
    for (path, data) in corpus(target) {
        let input = structured::<T>(&data).unwrap_or_else(|| {
            panic!(
                "{}: no longer decodes as a {target} input (its type changed?): it tests \
                 nothing",
                path.display()
            )
        });
        run(&input);
    }
    let mut x = seed;
    let random = 3000;
    let mut decoded = 0;
    for _ in 0..random {
        let len = (next(&mut x) % 600) as usize;
        let data: Vec<u8> = (0..len).map(|_| next(&mut x) as u8).collect();
        if let Some(input) = structured::<T>(&data) {
            run(&input);
            decoded += 1;
        }
    }
    assert!(
        decoded * 2 >= random,
        "{target}: only {decoded} of {random} random inputs decoded"
    );
}

#[test]
fn replies_corpus() {
    replay("replies", 99, fuse_fuzz::encoders::replies);
}

#[test]
fn dirent_buf_corpus() {
    replay("dirent_buf", 100, fuse_fuzz::encoders::dirent_buf);
}

#[test]
fn notify_corpus() {
    replay("notify", 101, fuse_fuzz::encoders::notify);
}

#[test]
fn init_negotiation_corpus() {
    replay(
        "init_negotiation",
        102,
        fuse_fuzz::encoders::init_negotiation,
    );
}
