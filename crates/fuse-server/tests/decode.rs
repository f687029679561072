//! Request decoding: byte-exact fixtures, round trips through the kernel-side
//! encoder, and arbitrary bytes for every opcode (never a panic).

use fuse_abi::{InHeader, InitFlags, InitIn, Opcode};
use fuse_server::opcode_table::DataArg;
use fuse_server::wire::{self, encode_args, encode_request, opcode_of};
use fuse_server::*;
use proptest::prelude::*;
use std::ffi::CString;
use zerocopy::IntoBytes;

fn header(unique: u64, nodeid: u64) -> InHeader {
    InHeader {
        unique,
        nodeid,
        uid: 1000,
        gid: 1000,
        pid: 4242,
        ..InHeader::default()
    }
}

fn opts() -> DecodeOptions {
    DecodeOptions {
        minor: 46,
        setxattr_ext: true,
    }
}

#[test]
fn lookup_fixture_is_byte_exact() {
    #[rustfmt::skip]
    let bytes: [u8; 44] = [
        44, 0, 0, 0,  1, 0, 0, 0,                   // len 44, opcode LOOKUP
        7, 0, 0, 0, 0, 0, 0, 0,                     // unique 7
        1, 0, 0, 0, 0, 0, 0, 0,                     // nodeid 1
        0xe8, 3, 0, 0,  0xe8, 3, 0, 0,  0x92, 0x10, 0, 0, // uid 1000 gid 1000 pid 4242
        0, 0, 0, 0,                                 // total_extlen, padding
        b'f', b'o', b'o', 0,
    ];
    let req = decode(RawRequest::contiguous(&bytes), opts()).unwrap();
    assert_eq!(req.header.unique, 7);
    assert_eq!(req.header.pid, 4242);
    assert_eq!(req.op, Operation::Lookup { name: c"foo" });
    assert_eq!(encode_request(header(7, 1), &req.op, opts()), bytes);
}

#[test]
fn write_fixture_is_byte_exact() {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&[85, 0, 0, 0, 16, 0, 0, 0]); // len 40+40+5, WRITE
    bytes.extend_from_slice(&9u64.to_ne_bytes());
    bytes.extend_from_slice(&5u64.to_ne_bytes());
    bytes.extend_from_slice(&[0; 16]);
    bytes.extend_from_slice(&3u64.to_ne_bytes()); // fh
    bytes.extend_from_slice(&4096u64.to_ne_bytes()); // offset
    bytes.extend_from_slice(&5u32.to_ne_bytes()); // size
    bytes.extend_from_slice(&2u32.to_ne_bytes()); // write_flags: LOCKOWNER
    bytes.extend_from_slice(&77u64.to_ne_bytes()); // lock_owner
    bytes.extend_from_slice(&(libc::O_RDWR as u32).to_ne_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(b"hello");
    let req = decode(RawRequest::contiguous(&bytes), opts()).unwrap();
    let Operation::Write { args, data } = req.op else {
        panic!("{:?}", req.op)
    };
    assert_eq!(
        (args.fh, args.offset, args.size, args.lock_owner),
        (3, 4096, 5, Some(77))
    );
    assert_eq!(data, b"hello");
    assert_eq!(req.header.nodeid, 5);
}

#[test]
fn init_from_an_old_kernel_is_short() {
    let init = InitIn {
        major: 7,
        minor: 31,
        max_readahead: 65536,
        flags: 0x1234,
        flags2: 0,
        unused: [0; 11],
    };
    let mut bytes = Vec::new();
    let h = InHeader {
        len: 56,
        opcode: Opcode::Init as u32,
        unique: 1,
        ..InHeader::default()
    };
    bytes.extend_from_slice(h.as_bytes());
    bytes.extend_from_slice(&init.as_bytes()[..16]);
    let req = decode(RawRequest::contiguous(&bytes), DecodeOptions::default()).unwrap();
    assert_eq!(req.op, Operation::Init(init));
    let k = KernelInit::from_init_in(&init);
    assert_eq!(k.flags, InitFlags::from_bits_retain(0x1234));
}

#[test]
fn split_requests_decode_like_contiguous_ones() {
    let ops = [
        Operation::Read(ReadArgs {
            fh: 1,
            offset: 2,
            size: 3,
            ..ReadArgs::default()
        }),
        Operation::Lookup { name: c"x" },
        Operation::Write {
            args: WriteArgs {
                fh: 9,
                size: 3,
                ..WriteArgs::default()
            },
            data: b"abc",
        },
        Operation::Rename(RenameArgs {
            name: c"a",
            newdir: 4,
            newname: c"b",
            flags: fuse_abi::RenameFlags::NOREPLACE,
        }),
    ];
    for op in ops {
        let args = encode_args(&op, opts());
        let h = InHeader {
            opcode: opcode_of(&op) as u32,
            unique: 3,
            ..InHeader::default()
        };
        let mut op_in = [0u8; fuse_abi::uring::OP_IN_OUT_SZ];
        op_in[..args.op_header.len()].copy_from_slice(&args.op_header);
        let raw = RawRequest {
            header: h.as_bytes(),
            op_header: Some(&op_in),
            payload: &args.payload,
        };
        assert_eq!(decode(raw, opts()).unwrap().op, op);
    }
}

#[test]
fn malformed_requests_get_errnos() {
    let ok = encode_request(header(1, 1), &Operation::Lookup { name: c"abc" }, opts());
    // Cut the name's NUL: the header length no longer matches.
    let cut = &ok[..ok.len() - 1];
    assert_eq!(
        decode(RawRequest::contiguous(cut), opts())
            .unwrap_err()
            .errno(),
        libc::EIO
    );
    // Fix the length but drop the NUL: a bad name.
    let mut no_nul = cut.to_vec();
    no_nul[0] -= 1;
    assert_eq!(
        decode(RawRequest::contiguous(&no_nul), opts())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    // A header shorter than 40 bytes.
    assert!(matches!(
        decode(RawRequest::contiguous(&ok[..39]), opts()),
        Err(DecodeError::ShortHeader(_))
    ));
    // An unknown opcode.
    let mut unknown = ok.clone();
    unknown[4] = 7;
    assert_eq!(
        decode(RawRequest::contiguous(&unknown), opts())
            .unwrap_err()
            .errno(),
        libc::ENOSYS
    );
    // A WRITE claiming more data than it carries.
    let w = Operation::Write {
        args: WriteArgs::default(),
        data: b"abcd",
    };
    let mut bytes = encode_request(header(1, 1), &w, opts());
    bytes[56] = 200; // fuse_write_in.size
    assert_eq!(
        decode(RawRequest::contiguous(&bytes), opts())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    // Extensions larger than the request.
    let mut ext = ok.clone();
    ext[36] = 100;
    assert!(matches!(
        decode(RawRequest::contiguous(&ext), opts()),
        Err(DecodeError::BadExtensions(_))
    ));
}

#[test]
fn supplementary_groups_extension() {
    let mut ext = Vec::new();
    ext.extend_from_slice(
        fuse_abi::ExtHeader {
            size: 24,
            r#type: fuse_abi::EXT_GROUPS,
        }
        .as_bytes(),
    );
    ext.extend_from_slice(&2u32.to_ne_bytes());
    ext.extend_from_slice(&10u32.to_ne_bytes());
    ext.extend_from_slice(&20u32.to_ne_bytes());
    ext.extend_from_slice(&[0; 4]);
    let groups: Vec<u32> = fuse_server::request::supplementary_groups(&ext)
        .unwrap()
        .iter()
        .collect();
    assert_eq!(groups, [10, 20]);
    assert!(fuse_server::request::supplementary_groups(&ext[..12]).is_none());
}

/// A request of `opcode` shaped the way its row in the opcode table says:
/// the whole fixed struct (from `fixed`), `names`, then `data` (whole
/// records of it for a record array) with the count patched in.
fn shaped_body(opcode: Opcode, fixed: &[u8], names: &[String], data: &[u8]) -> Vec<u8> {
    let shape = opcode_info(opcode).args;
    let size = shape.fixed.map_or(0, |f| f.size);
    let mut body = fixed[..size].to_vec();
    for name in names.iter().take(shape.names as usize) {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
    }
    let (count_at, count, data) = match shape.data {
        DataArg::None => return body,
        DataArg::Bytes { count_at, .. } => (count_at, data.len(), data),
        DataArg::Records {
            count_at, record, ..
        } => {
            let whole = &data[..data.len() / record * record];
            (count_at, whole.len() / record, whole)
        }
    };
    body[count_at..count_at + 4].copy_from_slice(&(count as u32).to_ne_bytes());
    body.extend_from_slice(data);
    body
}

fn request_bytes(h: InHeader, body: &[u8]) -> Vec<u8> {
    let h = InHeader {
        len: (40 + body.len()) as u32,
        ..h
    };
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

fn plausible_request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(Opcode::ALL.to_vec()),
        any::<(u64, u64, u32, u32)>(),
        prop::collection::vec(any::<u8>(), 200),
        prop::collection::vec("[a-zA-Z0-9._-]{1,24}", 2),
        prop::collection::vec(any::<u8>(), 0..96),
    )
        .prop_map(|(opcode, (unique, nodeid, uid, gid), fixed, names, data)| {
            let body = shaped_body(opcode, &fixed, &names, &data);
            let h = InHeader {
                opcode: opcode as u32,
                unique,
                nodeid,
                uid,
                gid,
                ..InHeader::default()
            };
            request_bytes(h, &body)
        })
}

/// Every opcode's table row matches its decoder: a request of exactly the
/// row's shape decodes (except the reserved numbers), and one cut anywhere
/// inside its fixed struct, a name or its data is refused with the
/// argument the row names.
#[test]
fn the_table_shapes_every_decoder() {
    let names = ["a".to_string(), "bc".to_string()];
    let data = [7u8; 32];
    for row in fuse_server::opcode_table::TABLE {
        let op = row.opcode;
        let body = shaped_body(op, &[0; 200], &names, &data);
        let h = InHeader {
            opcode: op as u32,
            ..InHeader::default()
        };
        let bytes = request_bytes(h, &body);
        let result = decode(RawRequest::contiguous(&bytes), opts());
        if row.flags.reserved {
            assert_eq!(result, Err(DecodeError::UnknownOpcode(op as u32)));
            continue;
        }
        let req = result.unwrap_or_else(|e| panic!("{op:?}: {e}"));
        // A RENAME2 without flags (the zeroed struct) encodes as RENAME.
        let encodes_as = match op {
            Opcode::Rename2 => Opcode::Rename,
            op => op,
        };
        assert_eq!(wire::opcode_of(&req.op), encodes_as, "{op:?}");
        assert_eq!(req.op.to_string(), encodes_as.kernel_name());
        let Some(fixed) = row.args.fixed else {
            continue;
        };
        // The fewest bytes of the struct a request must carry.
        let Err(need) = fixed.wire_len(&opts(), 0) else {
            continue; // SYNCFS: nothing in the struct is read.
        };
        let bytes = request_bytes(h, &body[..need - 1]);
        match decode(RawRequest::contiguous(&bytes), opts()) {
            Err(DecodeError::Short { what, opcode, .. }) => {
                assert_eq!((what, opcode), (fixed.name, row.name))
            }
            other => panic!("{op:?} cut in its fixed struct: {other:?}"),
        }
        if row.args.names > 0 || row.args.data != DataArg::None {
            let bytes = request_bytes(h, &body[..body.len() - 1]);
            let cut = decode(RawRequest::contiguous(&bytes), opts());
            assert!(
                matches!(
                    cut,
                    Err(DecodeError::Short { .. } | DecodeError::BadName { .. })
                ),
                "{op:?} cut at its end: {cut:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes behind a header with any opcode never panic.
    #[test]
    fn arbitrary_bytes_never_panic(opcode in prop_oneof![0u32..64, Just(4096u32), any::<u32>()],
                                   body in prop::collection::vec(any::<u8>(), 0..400),
                                   extlen in 0u16..8,
                                   fix_len in any::<bool>(),
                                   minor in 0u32..50,
                                   ext in any::<bool>()) {
        let len = if fix_len { 40 + body.len() as u32 } else { body.len() as u32 };
        let h = InHeader { len, opcode, total_extlen: extlen, ..InHeader::default() };
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let _ = decode(RawRequest::contiguous(&bytes), DecodeOptions { minor, setxattr_ext: ext });
        let split = body.len().min(64);
        let raw = RawRequest { header: h.as_bytes(), op_header: Some(&body[..split]), payload: &body[split..] };
        let _ = decode(raw, DecodeOptions { minor, setxattr_ext: ext });
    }

    /// Whatever decodes re-encodes to a request that decodes the same.
    #[test]
    fn decode_encode_round_trip(bytes in plausible_request()) {
        let first = decode(RawRequest::contiguous(&bytes), opts());
        if let Ok(req) = first {
            let again = encode_request(req.header, &req.op, opts());
            let second = decode(RawRequest::contiguous(&again), opts()).expect("re-encoded request decodes");
            prop_assert_eq!(req.op, second.op);
            prop_assert_eq!(req.header.unique, second.header.unique);
        }
    }

    /// Names survive encoding exactly.
    #[test]
    fn names_round_trip(a in "[^\u{0}/]{1,64}", b in "[^\u{0}/]{1,64}", newdir in any::<u64>()) {
        let a = CString::new(a).unwrap();
        let b = CString::new(b).unwrap();
        let op = Operation::Rename(RenameArgs { name: &a, newdir, newname: &b, flags: fuse_abi::RenameFlags::EXCHANGE });
        let bytes = encode_request(header(5, 9), &op, opts());
        prop_assert_eq!(decode(RawRequest::contiguous(&bytes), opts()).unwrap().op, op);
    }
}

#[test]
fn plausible_requests_mostly_decode() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = plausible_request();
    let mut ok = 0;
    for _ in 0..500 {
        let bytes = strategy.new_tree(&mut runner).unwrap().current();
        ok += decode(RawRequest::contiguous(&bytes), opts()).is_ok() as u32;
    }
    assert!(
        ok > 400,
        "only {ok} of 500 plausible requests decoded: the round trip test would test little"
    );
}
