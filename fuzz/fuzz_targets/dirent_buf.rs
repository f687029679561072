//! READDIR and READDIRPLUS buffers with arbitrary entries; see
//! `fuse_fuzz::encoders::dirent_buf`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: fuse_fuzz::encoders::DirentBufInput| fuse_fuzz::encoders::dirent_buf(&input));
