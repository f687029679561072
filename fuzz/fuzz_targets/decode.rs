//! Arbitrary bytes through request decoding; see `fuse_fuzz::decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuse_fuzz::decode::run(data));
