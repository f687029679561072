//! The dispatch, driven with an in-memory transaction: INIT, replies of
//! every shape, undelivered replies undone, and arbitrary bytes.

use fuse_abi::{InHeader, InitFlags, InitIn, Opcode, OutHeader};
use fuse_server::wire::encode_request;
use fuse_server::*;
use proptest::prelude::*;
use std::ffi::CStr;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_support::log::{without_latency, LogBuf};
use zerocopy::{FromBytes, IntoBytes};

/// A transaction over a byte vector, recording the reply.
struct MemTx {
    request: Vec<u8>,
    reply: Vec<u8>,
    sent: Option<(u64, i32, Vec<u8>)>,
    fail_with: Option<i32>,
}

impl MemTx {
    fn new(request: Vec<u8>) -> Self {
        Self {
            request,
            reply: vec![0; 128 << 10],
            sent: None,
            fail_with: None,
        }
    }
}

impl Transaction for MemTx {
    fn request(&self) -> RawRequest<'_> {
        RawRequest::contiguous(&self.request)
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        &mut self.reply
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        if let Some(errno) = self.fail_with {
            return Err(io::Error::from_raw_os_error(errno));
        }
        assert!(self.sent.is_none(), "replied twice");
        self.sent = Some((unique, error, self.reply[..body_len].to_vec()));
        Ok(())
    }
}

#[derive(Default)]
struct Counting {
    refs: AtomicU64,
    released: Mutex<Vec<u64>>,
}

impl FileSystem for Counting {
    fn init(&self, _k: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        config.flags |= InitFlags::DO_READDIRPLUS;
        Ok(())
    }

    fn lookup(&self, _ctx: &Context, _parent: u64, name: &CStr) -> io::Result<Entry> {
        if name.to_bytes() == b"missing" {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.refs.fetch_add(1, Ordering::SeqCst);
        Ok(Entry {
            nodeid: 42,
            attr_timeout: Duration::from_millis(1500),
            ..Entry::default()
        })
    }

    fn forget(&self, _ctx: &Context, _ino: u64, nlookup: u64) {
        self.refs.fetch_sub(nlookup, Ordering::SeqCst);
    }

    fn open(&self, _ctx: &Context, _ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        Ok(Opened {
            fh: 99,
            ..Opened::default()
        })
    }

    fn release(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        self.released.lock().unwrap().push(args.fh);
        Ok(())
    }

    fn read(
        &self,
        _ctx: &Context,
        _ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        let data = vec![b'x'; args.size as usize / 2];
        out.write_all(&data)
    }

    fn readdirplus(
        &self,
        ctx: &Context,
        ino: u64,
        _args: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        for i in 0..1000u64 {
            let entry = self.lookup(ctx, ino, c"e")?;
            if !out.add(
                &entry,
                i + 1,
                libc::DT_REG as u32,
                format!("entry-{i}").as_bytes(),
            ) {
                self.forget(ctx, entry.nodeid, 1);
                break;
            }
        }
        Ok(())
    }

    fn getxattr(
        &self,
        _ctx: &Context,
        _ino: u64,
        _name: &CStr,
        _size: u32,
    ) -> io::Result<XattrReply> {
        Ok(XattrReply::Data(b"0123456789".to_vec()))
    }
}

fn init_request() -> MemTx {
    let init = InitIn {
        major: 7,
        minor: 46,
        max_readahead: 131072,
        flags: (InitFlags::INIT_EXT
            | InitFlags::MAX_PAGES
            | InitFlags::DO_READDIRPLUS
            | InitFlags::ASYNC_READ)
            .low(),
        flags2: InitFlags::HAS_IO_URING_BUFPOOL.high(),
        unused: [0; 11],
    };
    request(1, 0, &Operation::Init(init))
}

fn initialized(fs: Arc<Counting>) -> Server {
    let server = Server::new(fs);
    let mut tx = init_request();
    assert_eq!(server.handle(&mut tx).unwrap(), Outcome::Replied);
    let (unique, error, body) = tx.sent.unwrap();
    assert_eq!((unique, error, body.len()), (1, 0, 64));
    server
}

fn request(unique: u64, nodeid: u64, op: &Operation<'_>) -> MemTx {
    let h = InHeader {
        unique,
        nodeid,
        ..InHeader::default()
    };
    MemTx::new(encode_request(
        h,
        op,
        DecodeOptions {
            minor: 46,
            setxattr_ext: false,
        },
    ))
}

#[test]
fn init_records_the_kernel_offer() {
    let server = initialized(Arc::new(Counting::default()));
    let n = server.negotiated().unwrap();
    assert!(n.kernel.flags.contains(InitFlags::HAS_IO_URING_BUFPOOL));
    assert!(n.flags.contains(InitFlags::DO_READDIRPLUS));
    assert_eq!(n.max_readahead, 131072);
    assert_eq!(server.uring_payload_size(), Some(1 << 20));
}

#[test]
fn requests_before_init_get_eio() {
    let server = Server::new(Arc::new(Counting::default()));
    let mut tx = request(5, 1, &Operation::Lookup { name: c"a" });
    server.handle(&mut tx).unwrap();
    assert_eq!(tx.sent.unwrap().1, -libc::EIO);
}

#[test]
fn replies_have_the_right_shape() {
    let fs = Arc::new(Counting::default());
    let server = initialized(fs.clone());

    let mut tx = request(2, 1, &Operation::Lookup { name: c"a" });
    server.handle(&mut tx).unwrap();
    let (unique, error, body) = tx.sent.unwrap();
    let entry = fuse_abi::EntryOut::read_from_bytes(&body).unwrap();
    assert_eq!(
        (
            unique,
            error,
            entry.nodeid,
            entry.attr_valid,
            entry.attr_valid_nsec
        ),
        (2, 0, 42, 1, 500_000_000)
    );

    let mut tx = request(3, 1, &Operation::Lookup { name: c"missing" });
    server.handle(&mut tx).unwrap();
    assert_eq!(tx.sent.unwrap().1, -libc::ENOENT);

    let mut tx = request(
        4,
        42,
        &Operation::Read(ReadArgs {
            size: 100,
            ..ReadArgs::default()
        }),
    );
    server.handle(&mut tx).unwrap();
    assert_eq!(tx.sent.unwrap().2, vec![b'x'; 50]);

    // Too small a buffer for the value; no buffer at all: the value's size.
    let getxattr = |unique, size| {
        let op = Operation::Getxattr {
            name: c"user.a",
            size,
        };
        let mut tx = request(unique, 42, &op);
        server.handle(&mut tx).unwrap();
        tx.sent.unwrap()
    };
    assert_eq!(getxattr(5, 4).1, -libc::ERANGE);
    assert_eq!(getxattr(6, 0).2, 10u64.to_ne_bytes());

    let mut tx = request(7, 42, &Operation::Unlink { name: c"a" });
    server.handle(&mut tx).unwrap();
    assert_eq!(tx.sent.unwrap().1, -libc::ENOSYS);

    let mut tx = request(8, 42, &Operation::Forget { nlookup: 1 });
    assert_eq!(server.handle(&mut tx).unwrap(), Outcome::NoReply);
    assert!(tx.sent.is_none());
    assert_eq!(fs.refs.load(Ordering::SeqCst), 0);
    assert_eq!(server.counters().get(Opcode::Lookup), 2);
}

#[test]
fn undelivered_entries_and_handles_are_undone() {
    let fs = Arc::new(Counting::default());
    let server = initialized(fs.clone());

    let mut tx = request(2, 1, &Operation::Lookup { name: c"a" });
    tx.fail_with = Some(libc::ENOENT);
    assert_eq!(server.handle(&mut tx).unwrap(), Outcome::ReplyNotDelivered);
    assert_eq!(
        fs.refs.load(Ordering::SeqCst),
        0,
        "the undelivered entry's reference was dropped"
    );

    let mut tx = request(3, 42, &Operation::Open(OpenArgs::default()));
    tx.fail_with = Some(libc::ENOENT);
    server.handle(&mut tx).unwrap();
    assert_eq!(*fs.released.lock().unwrap(), [99]);

    let mut tx = request(
        4,
        1,
        &Operation::Readdirplus(ReadArgs {
            size: 4096,
            ..ReadArgs::default()
        }),
    );
    tx.fail_with = Some(libc::ENOENT);
    server.handle(&mut tx).unwrap();
    assert_eq!(
        fs.refs.load(Ordering::SeqCst),
        0,
        "entries of an undelivered READDIRPLUS are forgotten"
    );
}

#[test]
fn full_readdirplus_buffer_keeps_one_reference_per_delivered_entry() {
    let fs = Arc::new(Counting::default());
    let server = initialized(fs.clone());
    let mut tx = request(
        4,
        1,
        &Operation::Readdirplus(ReadArgs {
            size: 4096,
            ..ReadArgs::default()
        }),
    );
    server.handle(&mut tx).unwrap();
    let body = tx.sent.unwrap().2;
    let mut rest = &body[..];
    let mut delivered = 0;
    while let Ok((rec, _)) = fuse_abi::Direntplus::read_from_prefix(rest) {
        delivered += 1;
        rest = &rest[fuse_abi::direntplus_size(rec.dirent.namelen as usize)..];
    }
    assert!(delivered > 10 && delivered < 1000);
    assert_eq!(fs.refs.load(Ordering::SeqCst), delivered);
}

/// The `fuse_out_header` a transport writes for a reply (`len`, `error`,
/// `unique`, in native byte order, 16 bytes), as the bytes the kernel reads.
fn out_header_bytes(unique: u64, error: i32, body_len: usize) -> Vec<u8> {
    let len = u32::try_from(size_of::<OutHeader>() + body_len).unwrap();
    OutHeader { len, error, unique }.as_bytes().to_vec()
}

#[test]
fn reply_header_is_what_dev_fuse_expects() {
    // The kernel (fuse_dev_do_write; the io_uring commit checks the same)
    // takes a reply whose header says its whole length, whose `unique` is
    // the request's (0 would be a notification), whose error is 0 or a
    // negative errno above -512 (-ERESTARTSYS and below are refused with
    // EINVAL, and the caller then waits forever), and which carries no body
    // when the error is not 0.
    let server = initialized(Arc::new(Counting::default()));
    let cases: Vec<(&str, MemTx, i32, usize)> = vec![
        (
            "LOOKUP",
            request(2, 1, &Operation::Lookup { name: c"a" }),
            0,
            size_of::<fuse_abi::EntryOut>(),
        ),
        (
            "LOOKUP of a missing name",
            request(3, 1, &Operation::Lookup { name: c"missing" }),
            -libc::ENOENT,
            0,
        ),
        (
            "READ",
            request(
                u64::MAX - 1,
                42,
                &Operation::Read(ReadArgs {
                    size: 100,
                    ..ReadArgs::default()
                }),
            ),
            0,
            50,
        ),
        (
            "GETXATTR into a buffer too small",
            request(
                5,
                42,
                &Operation::Getxattr {
                    name: c"user.a",
                    size: 4,
                },
            ),
            -libc::ERANGE,
            0,
        ),
        (
            "UNLINK (not implemented)",
            request(6, 42, &Operation::Unlink { name: c"a" }),
            -libc::ENOSYS,
            0,
        ),
    ];
    for (what, mut tx, want_error, want_len) in cases {
        let mut h = [0u8; 40];
        h.copy_from_slice(&tx.request[..40]);
        let (sent_to, _) = InHeader::read_from_prefix(&h).unwrap();
        assert_eq!(server.handle(&mut tx).unwrap(), Outcome::Replied, "{what}");
        let (unique, error, body) = tx.sent.unwrap();
        assert_eq!(unique, sent_to.unique, "{what}: the request's unique");
        assert_ne!(unique, 0, "{what}: unique 0 is a notification");
        assert_eq!((error, body.len()), (want_error, want_len), "{what}");
        assert!(
            error <= 0 && error > -512,
            "{what}: error {error} is outside what the kernel accepts"
        );
        if error != 0 {
            assert!(body.is_empty(), "{what}: an error reply with a body");
        }
        // The header a transport builds from the reply, byte for byte.
        let mut expected = Vec::new();
        expected.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
        expected.extend_from_slice(&error.to_ne_bytes());
        expected.extend_from_slice(&unique.to_ne_bytes());
        assert_eq!(
            out_header_bytes(unique, error, body.len()),
            expected,
            "{what}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Arbitrary bytes through decode and dispatch: never a panic, at most
    /// one reply, and a reply always echoes the request's unique.
    #[test]
    fn arbitrary_requests_through_dispatch(opcode in 0u32..60, unique in any::<u64>(), body in prop::collection::vec(any::<u8>(), 0..300)) {
        let fs = Arc::new(Counting::default());
        let server = initialized(fs);
        let h = InHeader { len: 40 + body.len() as u32, opcode, unique, nodeid: 1, ..InHeader::default() };
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let mut tx = MemTx::new(bytes);
        let outcome = server.handle(&mut tx).unwrap();
        if let Some((u, error, _)) = tx.sent {
            prop_assert_eq!(u, unique);
            // The kernel refuses errors of -512 (-ERESTARTSYS) and below.
            prop_assert!(error <= 0 && error > -512);
            prop_assert!(matches!(outcome, Outcome::Replied | Outcome::Destroyed));
        }
    }
}

#[test]
fn errors_the_kernel_would_refuse_become_eio() {
    // The kernel takes reply errors down to -511; at -512 and below (its
    // internal codes, e.g. ENOTSUPP 524 leaking from a backing file
    // system) it refuses the reply and the caller waits forever.
    for (errno, sent) in [
        (libc::ENOENT, libc::ENOENT),
        (511, 511),
        (512, libc::EIO),
        (524, libc::EIO),
        (4095, libc::EIO),
        (0, libc::EIO),
    ] {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(errno)),
            sent,
            "errno {errno}"
        );
    }
}

/// The log lines that `filter` (an `EnvFilter`) lets through while `f`
/// runs on this thread, each line's latency, checked to be a number of
/// microseconds, cut off.
fn log_lines(filter: &str, f: impl FnOnce()) -> Vec<String> {
    let log = LogBuf::default();
    tracing::subscriber::with_default(log.subscriber(filter), f);
    log.text()
        .lines()
        .map(|line| without_latency(line).trim_start().to_string())
        .collect()
}

/// The request log lines of `txs` handled by `server` in turn.
fn request_log(server: &Server, txs: Vec<MemTx>) -> Vec<String> {
    log_lines("fuse_request=info", || {
        for mut tx in txs {
            server.handle(&mut tx).unwrap();
        }
    })
}

/// `bytes` as a LOOKUP of node 1, whatever they are.
fn raw_lookup(unique: u64, name: &[u8]) -> MemTx {
    let h = InHeader {
        len: (size_of::<InHeader>() + name.len()) as u32,
        opcode: Opcode::Lookup as u32,
        unique,
        nodeid: 1,
        ..InHeader::default()
    };
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(name);
    MemTx::new(bytes)
}

#[test]
fn request_log_says_what_was_asked_and_answered() {
    let fs = Arc::new(Counting::default());
    let server = Server::new(fs.clone()).with_request_log(true);
    assert!(server.request_log());
    let lines = request_log(&server, vec![init_request()]);
    assert_eq!(
        lines,
        ["INFO fuse_request: unique=1 INIT node=0 kernel=7.46 -> ok 64 bytes"]
    );

    let read = ReadArgs {
        fh: 99,
        offset: 4096,
        size: 100,
        ..ReadArgs::default()
    };
    let forgets = [
        fuse_abi::ForgetOne {
            nodeid: 42,
            nlookup: 1,
        },
        fuse_abi::ForgetOne {
            nodeid: 42,
            nlookup: 1,
        },
    ];
    let mut undelivered = request(12, 1, &Operation::Lookup { name: c"a" });
    undelivered.fail_with = Some(libc::ENOENT);
    let lines = request_log(
        &server,
        vec![
            request(2, 1, &Operation::Lookup { name: c"a" }),
            request(3, 1, &Operation::Lookup { name: c"missing" }),
            request(4, 42, &Operation::Read(read)),
            request(
                5,
                42,
                &Operation::Open(OpenArgs {
                    flags: libc::O_RDWR as u32,
                    ..OpenArgs::default()
                }),
            ),
            request(
                6,
                42,
                &Operation::Getxattr {
                    name: c"user.a",
                    size: 0,
                },
            ),
            request(7, 42, &Operation::Forget { nlookup: 1 }),
            request(
                8,
                0,
                &Operation::BatchForget(ForgetList::new(forgets.as_bytes())),
            ),
            raw_lookup(9, b"no-nul"),
            raw_lookup(10, b"\xff\"\n\0"),
            request(
                11,
                1,
                &Operation::Rename(RenameArgs {
                    name: c"a",
                    newdir: 7,
                    newname: c"b",
                    flags: RenameFlags::NOREPLACE,
                }),
            ),
            undelivered,
        ],
    );
    let want = [
        r#"unique=2 LOOKUP node=1 name="a" -> ok node=42"#,
        r#"unique=3 LOOKUP node=1 name="missing" -> ENOENT errno=2"#,
        "unique=4 READ node=42 fh=99 offset=4096 size=100 -> ok 50 bytes",
        "unique=5 OPEN node=42 flags=0x2 -> ok fh=99",
        r#"unique=6 GETXATTR node=42 name="user.a" size=0 -> ok size=10"#,
        "unique=7 FORGET node=42 nlookup=1 -> no reply",
        "unique=8 BATCH_FORGET node=0 count=2 -> no reply",
        "unique=9 LOOKUP node=1 -> malformed, EINVAL errno=22",
        r#"unique=10 LOOKUP node=1 name="\xff\"\n" -> ok node=42"#,
        r#"unique=11 RENAME2 node=1 name="a" newdir=7 newname="b" flags=NOREPLACE -> ENOSYS errno=38"#,
        r#"unique=12 LOOKUP node=1 name="a" -> ok node=42, not delivered (request gone)"#,
    ];
    let want: Vec<String> = want
        .iter()
        .map(|l| format!("INFO fuse_request: {l}"))
        .collect();
    assert_eq!(lines, want);
}

#[test]
fn request_log_of_requests_that_cannot_be_read() {
    let server = initialized(Arc::new(Counting::default()));
    server.set_request_log(true);
    let short_forget = {
        let h = InHeader {
            len: 44,
            opcode: Opcode::Forget as u32,
            unique: 3,
            nodeid: 5,
            ..InHeader::default()
        };
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&[0; 4]);
        MemTx::new(bytes)
    };
    let unknown = {
        let h = InHeader {
            len: 40,
            opcode: 7777,
            unique: 4,
            nodeid: 1,
            ..InHeader::default()
        };
        MemTx::new(h.as_bytes().to_vec())
    };
    let lines = request_log(
        &server,
        vec![MemTx::new(vec![0; 12]), short_forget, unknown],
    );
    assert_eq!(
        lines,
        [
            "INFO fuse_request: short request of 12 bytes -> malformed, no reply",
            "INFO fuse_request: unique=3 FORGET node=5 -> malformed, no reply",
            "INFO fuse_request: unique=4 opcode=7777 node=1 -> malformed, ENOSYS errno=38",
        ]
    );
}

#[test]
fn request_log_off_or_filtered_out_logs_nothing() {
    let server = initialized(Arc::new(Counting::default()));
    let lookup = || request(2, 1, &Operation::Lookup { name: c"a" });
    assert!(!server.request_log());
    assert_eq!(request_log(&server, vec![lookup()]), Vec::<String>::new());
    server.set_request_log(true);
    let mut tx = lookup();
    let lines = log_lines("info,fuse_request=off", || {
        server.handle(&mut tx).unwrap();
    });
    assert_eq!(lines, Vec::<String>::new());
    assert_eq!(tx.sent.unwrap().1, 0, "answered all the same");
    server.set_request_log(false);
    assert_eq!(request_log(&server, vec![lookup()]), Vec::<String>::new());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Arbitrary bytes through a logging server: never a panic, exactly
    /// one line per request.
    #[test]
    fn arbitrary_requests_logged(opcode in 0u32..60, body in prop::collection::vec(any::<u8>(), 0..300)) {
        let server = initialized(Arc::new(Counting::default()));
        server.set_request_log(true);
        let h = InHeader { len: 40 + body.len() as u32, opcode, unique: 77, nodeid: 1, ..InHeader::default() };
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let lines = request_log(&server, vec![MemTx::new(bytes)]);
        prop_assert_eq!(lines.len(), 1);
        prop_assert!(lines[0].starts_with("INFO fuse_request: unique=77 "), "{}", lines[0]);
    }
}

/// A notifier taken before INIT is answered (a `FuseDevTask` answers INIT
/// itself, after its owner took the notifier) sends once INIT is done.
#[test]
fn a_notifier_taken_before_init_works_after_it() {
    struct Sent(Mutex<Vec<Vec<u8>>>);
    impl fuse_server::NotificationSink for Sent {
        fn send_notification(&self, parts: &[std::io::IoSlice<'_>]) -> io::Result<()> {
            let bytes = parts.iter().flat_map(|p| p.iter().copied()).collect();
            self.0.lock().unwrap().push(bytes);
            Ok(())
        }
    }
    let sink = Arc::new(Sent(Mutex::new(Vec::new())));
    let server = Server::new(Arc::new(Counting::default()));
    let notifier = server.notifier(sink.clone());
    assert_eq!(notifier.protocol_minor(), None);
    assert!(notifier.inval_inode(5, -1, 0).is_err());
    let mut tx = init_request();
    assert_eq!(server.handle(&mut tx).unwrap(), Outcome::Replied);
    assert_eq!(notifier.protocol_minor(), Some(46));
    notifier.inval_inode(5, -1, 0).unwrap();
    notifier.inc_epoch().unwrap();
    assert_eq!(sink.0.lock().unwrap().len(), 2);
}
