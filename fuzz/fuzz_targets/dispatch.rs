//! Arbitrary request streams through the dispatch into a PassthroughFs
//! over a fenced scratch directory; see `fuse_fuzz::dispatch`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuse_fuzz::dispatch::run(data));
