//! INIT negotiation with arbitrary offers and wishes; see
//! `fuse_fuzz::encoders::init_negotiation`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: fuse_fuzz::encoders::InitInput| fuse_fuzz::encoders::init_negotiation(&input));
