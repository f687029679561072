//! The `decode` target: arbitrary bytes through request decoding.

use crate::tx::split_requests;
use fuse_abi::InHeader;
use fuse_server::wire::{encode_args, encode_request};
use fuse_server::{decode as decode_request, DecodeOptions, RawRequest};

/// Runs one input: the first byte picks the protocol minor version and
/// whether `FUSE_SETXATTR_EXT` was negotiated, the second where an
/// io_uring transport would split the fixed argument from the rest; the
/// rest is a stream of requests.
///
/// Each request is decoded contiguous and split (never a panic, never a
/// read past the request: each is copied into an allocation of its exact
/// size); a request that decodes is encoded again the way the kernel
/// does and must decode to the same operation, contiguous and split as a
/// ring entry carries it (the fixed struct in the 128-byte `op_in` area).
pub fn run(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let opts = DecodeOptions {
        minor: (data[0] & 0x3f) as u32,
        setxattr_ext: data[0] & 0x40 != 0,
    };
    let split = data[1] as usize;
    for request in split_requests(&data[2..]) {
        let request = request.to_vec();
        let first = decode_request(RawRequest::contiguous(&request), opts);
        let h = request.len().min(40);
        let rest = &request[h..];
        let op = split.min(rest.len());
        let raw = RawRequest {
            header: &request[..h],
            op_header: Some(&rest[..op]),
            payload: &rest[op..],
        };
        let _ = decode_request(raw, opts);
        let Ok(req) = first else { continue };
        // Old minor versions carry shorter structs the encoder doesn't
        // make; the round trip holds from 7.12 (the oldest served) on.
        if opts.minor < 12 {
            continue;
        }
        let header = InHeader {
            total_extlen: 0,
            ..req.header
        };
        let again = encode_request(header, &req.op, opts);
        let second = decode_request(RawRequest::contiguous(&again), opts)
            .unwrap_or_else(|e| panic!("re-encoded {:?} does not decode: {e}", req.op));
        assert_eq!(second.op, req.op, "contiguous round trip");
        let args = encode_args(&req.op, opts);
        let mut op_in = [0u8; fuse_abi::uring::OP_IN_OUT_SZ];
        assert!(
            args.op_header.len() <= op_in.len(),
            "fixed struct fits op_in"
        );
        op_in[..args.op_header.len()].copy_from_slice(&args.op_header);
        let payload = args.payload.clone();
        let raw = RawRequest {
            header: &again[..40],
            op_header: Some(&op_in),
            payload: &payload,
        };
        let third = decode_request(raw, opts)
            .unwrap_or_else(|e| panic!("{:?} split as io_uring does not decode: {e}", req.op));
        assert_eq!(third.op, req.op, "split round trip");
    }
}
