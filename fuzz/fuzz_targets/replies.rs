//! Every reply shape with arbitrary file system answers and reply buffer
//! sizes; see `fuse_fuzz::encoders::replies`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: fuse_fuzz::encoders::RepliesInput| fuse_fuzz::encoders::replies(&input));
