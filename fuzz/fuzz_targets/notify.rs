//! Arbitrary notifications; see `fuse_fuzz::encoders::notify`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: fuse_fuzz::encoders::NotifyInput| fuse_fuzz::encoders::notify(&input));
