//! The reply encoder targets: INIT negotiation, directory entry buffers,
//! notifications, and every reply shape through the dispatch with a file
//! system whose answers come from the input.

use crate::dispatch::default_init;
use crate::tx::MemTx;
use arbitrary::Arbitrary;
use fuse_abi::{Attr, FopenFlags, InHeader, InitFlags, InitIn, Opcode, OutHeader};
use fuse_server::init::{negotiate, InitOutcome};
use fuse_server::wire::encode_request;
use fuse_server::*;
use std::ffi::CStr;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zerocopy::FromBytes;

/// Input of the `init_negotiation` target.
#[derive(Debug, Arbitrary)]
pub struct InitInput {
    major: u32,
    minor: u32,
    max_readahead: u32,
    flags: u32,
    flags2: u32,
    max_pages_limit: u16,
    wanted_flags: u64,
    max_write: u32,
    wanted_readahead: u32,
    max_background: u16,
    congestion_threshold: u16,
    time_gran: u32,
    max_pages: u16,
    map_alignment: u16,
    max_stack_depth: u32,
    request_timeout: u16,
    /// Bytes of the INIT request's argument the kernel sends (old kernels
    /// send 16).
    init_len: u8,
}

/// Negotiates with an arbitrary kernel offer and server wishes, directly
/// and through the dispatch; checks what was agreed.
pub fn init_negotiation(input: &InitInput) {
    let init = InitIn {
        major: input.major,
        minor: input.minor,
        max_readahead: input.max_readahead,
        flags: input.flags,
        flags2: input.flags2,
        unused: [0; 11],
    };
    let mut kernel = KernelInit::from_init_in(&init);
    kernel.max_pages_limit = input.max_pages_limit;
    let wanted = InitConfig::default()
        .flags(InitFlags::from_bits_retain(input.wanted_flags))
        .max_write(input.max_write)
        .max_readahead(input.wanted_readahead)
        .max_background(input.max_background)
        .congestion_threshold(input.congestion_threshold)
        .time_gran(input.time_gran)
        .max_pages(input.max_pages)
        .map_alignment(input.map_alignment)
        .max_stack_depth(input.max_stack_depth)
        .request_timeout(input.request_timeout);
    match negotiate(&kernel, &wanted) {
        InitOutcome::Agreed {
            negotiated: n,
            reply,
            reply_len,
        } => {
            assert!(kernel.major == 7 && kernel.minor >= 12);
            assert!(reply_len <= size_of::<fuse_abi::InitOut>());
            assert!(n.minor <= fuse_abi::KERNEL_MINOR_VERSION && n.minor <= kernel.minor);
            assert_eq!(n.flags.bits() & !(wanted.flags & kernel.flags).bits(), 0);
            if !n.flags.contains(InitFlags::INIT_EXT) {
                assert_eq!(n.flags.high(), 0, "high flags without INIT_EXT");
            }
            assert_eq!(reply.flags, n.flags.low());
            assert_eq!(reply.flags2, n.flags.high());
            assert!(n.max_pages >= 1);
            if n.flags.contains(InitFlags::MAX_PAGES) {
                assert!(n.max_pages <= kernel.max_pages_limit.max(1));
            }
            assert!(n.max_write >= 4096);
            assert!(n.max_readahead <= kernel.max_readahead);
            assert!((1..=1_000_000_000).contains(&n.time_gran));
            assert!(n.uring_payload_size() >= fuse_abi::MIN_READ_BUFFER);
            assert!(n.uring_payload_size() >= n.max_write as usize);
            assert!(n.max_request_size() >= 80 + n.max_write as usize);
            assert!(n.max_reply_size() >= n.max_pages as usize * 4096);
        }
        InitOutcome::MajorOnly(out) => {
            assert!(kernel.major > 7);
            assert_eq!((out.major, out.minor), (7, fuse_abi::KERNEL_MINOR_VERSION));
        }
        InitOutcome::Refused(errno) => {
            assert!(kernel.major < 7 || kernel.minor < 12);
            assert_eq!(errno, libc::EPROTO);
        }
    }
    // The same INIT through the dispatch, cut to the length the input says.
    let mut request = encode_request(
        InHeader {
            unique: 1,
            ..InHeader::default()
        },
        &Operation::Init(init),
        DecodeOptions::default(),
    );
    request.truncate(40 + (input.init_len as usize).min(64));
    let len = request.len() as u32;
    request[..4].copy_from_slice(&len.to_ne_bytes());
    let server = Server::new(Arc::new(Answers::default())).with_init_config(wanted);
    let mut reply = vec![0u8; 4096];
    let mut tx = MemTx::new(&request, &mut reply);
    server.handle(&mut tx).expect("in-memory transaction");
    let (unique, error, body) = tx.sent.expect("INIT is answered");
    assert_eq!(unique, 1);
    if error == 0 {
        assert!(
            body == 8 || body == 24 || body == 64,
            "INIT reply of {body} bytes"
        );
    }
}

/// One directory entry to add.
#[derive(Debug, Arbitrary)]
pub struct DirentInput {
    ino: u64,
    cookie: u64,
    dtype: u32,
    name: Vec<u8>,
    nodeid: u64,
    attr_ino: u64,
    timeout_nanos: u64,
}

/// Input of the `dirent_buf` target.
#[derive(Debug, Arbitrary)]
pub struct DirentBufInput {
    buf_len: u16,
    plus: bool,
    entries: Vec<DirentInput>,
}

/// Fills a READDIR or READDIRPLUS buffer of arbitrary size with arbitrary
/// entries until one doesn't fit; the records must stay inside the
/// buffer, be aligned, and parse back to exactly the entries accepted.
pub fn dirent_buf(input: &DirentBufInput) {
    let mut mem = vec![0xa5u8; input.buf_len as usize];
    let mut accepted = Vec::new();
    let len = {
        let mut buf = DirentBuf::new(&mut mem);
        for e in &input.entries {
            let ok = if input.plus {
                let entry = Entry {
                    nodeid: e.nodeid,
                    generation: 0,
                    attr: Attr {
                        ino: e.attr_ino,
                        ..Attr::default()
                    },
                    attr_timeout: Duration::from_nanos(e.timeout_nanos),
                    entry_timeout: Duration::from_nanos(e.timeout_nanos),
                };
                DirentPlusSink::add(&mut buf, &entry, e.cookie, e.dtype, &e.name)
            } else {
                DirentSink::add(&mut buf, e.ino, e.cookie, e.dtype, &e.name)
            };
            if !ok {
                break;
            }
            assert!(!e.name.is_empty(), "an empty name was accepted");
            accepted.push(e);
        }
        let count = if input.plus {
            DirentPlusSink::count(&buf)
        } else {
            DirentSink::count(&buf)
        };
        assert_eq!(count, accepted.len());
        buf.len()
    };
    assert!(len <= mem.len(), "records past the buffer");
    assert_eq!(len % 8, 0, "records are 8-byte aligned");
    let mut rest = &mem[..len];
    for e in &accepted {
        let (dirent, head) = if input.plus {
            let (d, _) = fuse_abi::Direntplus::read_from_prefix(rest).expect("a direntplus record");
            assert_eq!(d.entry_out.nodeid, e.nodeid);
            assert_eq!(d.dirent.ino, e.attr_ino);
            (d.dirent, size_of::<fuse_abi::Direntplus>())
        } else {
            let (d, _) = fuse_abi::Dirent::read_from_prefix(rest).expect("a dirent record");
            assert_eq!(d.ino, e.ino);
            (d, size_of::<fuse_abi::Dirent>())
        };
        assert_eq!((dirent.off, dirent.r#type), (e.cookie, e.dtype));
        assert_eq!(dirent.namelen as usize, e.name.len());
        let size = fuse_abi::rec_align(head + e.name.len());
        assert_eq!(&rest[head..head + e.name.len()], &e.name[..]);
        assert!(
            rest[head + e.name.len()..size].iter().all(|&b| b == 0),
            "padding is zero"
        );
        rest = &rest[size..];
    }
    assert!(rest.is_empty(), "bytes after the last record");
}

/// One notification to send.
#[derive(Debug, Arbitrary)]
pub enum NotifyOp {
    /// `inval_inode`.
    InvalInode(u64, i64, i64),
    /// `inval_entry`.
    InvalEntry(u64, Vec<u8>, bool),
    /// `delete`.
    Delete(u64, u64, Vec<u8>),
    /// `store`.
    Store(u64, u64, Vec<u8>),
    /// `retrieve`.
    Retrieve(u64, u64, u32),
    /// `poll_wakeup`.
    PollWakeup(u64),
    /// `resend`.
    Resend,
    /// `inc_epoch`.
    IncEpoch,
    /// `prune`.
    Prune(Vec<u64>),
}

/// Input of the `notify` target.
#[derive(Debug, Arbitrary)]
pub struct NotifyInput {
    initialized: bool,
    minor: u8,
    kernel_flags: u64,
    ops: Vec<NotifyOp>,
}

#[derive(Default)]
struct Capture(Mutex<Vec<Vec<u8>>>);

impl NotificationSink for Capture {
    fn send_notification(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
        let msg = parts.iter().flat_map(|p| p.iter().copied()).collect();
        self.0.lock().unwrap().push(msg);
        Ok(())
    }
}

/// Sends arbitrary notifications on a connection of arbitrary version:
/// each message is one header with the right length, code and unique 0;
/// names are checked (a bad one sends nothing); retrieve ids increase.
pub fn notify(input: &NotifyInput) {
    let negotiated = input.initialized.then(|| {
        let k = KernelInit {
            major: 7,
            minor: 12 + (input.minor as u32 % 35),
            max_readahead: 0,
            flags: InitFlags::from_bits_retain(input.kernel_flags) | InitFlags::INIT_EXT,
            max_pages_limit: 256,
        };
        match negotiate(&k, &InitConfig::default()) {
            InitOutcome::Agreed { negotiated, .. } => negotiated,
            other => panic!("{other:?}"),
        }
    });
    let sink = Arc::new(Capture::default());
    let n = Notifier::new(sink.clone(), negotiated);
    let mut last_retrieve = 0;
    for op in &input.ops {
        let before = sink.0.lock().unwrap().len();
        let (r, code, name) = match op {
            NotifyOp::InvalInode(i, o, l) => (n.inval_inode(*i, *o, *l), 2, None),
            NotifyOp::InvalEntry(p, name, e) => (n.inval_entry(*p, name, *e), 3, Some(name)),
            NotifyOp::Delete(p, c, name) => (n.delete(*p, *c, name), 6, Some(name)),
            NotifyOp::Store(i, o, d) => (n.store(*i, *o, d), 4, None),
            NotifyOp::Retrieve(i, o, s) => {
                let r = n.retrieve(*i, *o, *s);
                if let Ok(id) = r {
                    assert!(id > last_retrieve, "retrieve ids increase");
                    last_retrieve = id;
                }
                (r.map(drop), 5, None)
            }
            NotifyOp::PollWakeup(kh) => (n.poll_wakeup(*kh), 1, None),
            NotifyOp::Resend => (n.resend(), 7, None),
            NotifyOp::IncEpoch => (n.inc_epoch(), 8, None),
            NotifyOp::Prune(ids) => (n.prune(ids), 9, None),
        };
        let msgs = sink.0.lock().unwrap();
        match r {
            Err(_) => assert_eq!(msgs.len(), before, "a failed notification was sent"),
            Ok(()) => {
                assert_eq!(msgs.len(), before + 1, "one message per notification");
                let msg = &msgs[before];
                let (h, _) = OutHeader::read_from_prefix(msg).expect("a header");
                assert_eq!(h.len as usize, msg.len(), "header length");
                assert_eq!((h.unique, h.error), (0, code), "unique 0 and the code");
                if let Some(name) = name {
                    assert!(!name.is_empty() && name.len() <= 1024 && !name.contains(&0));
                    assert!(msg.ends_with(b"\0"));
                    assert_eq!(&msg[msg.len() - 1 - name.len()..msg.len() - 1], &name[..]);
                }
            }
        }
    }
}

/// What the file system of the `replies` target answers.
#[derive(Debug, Clone, Arbitrary)]
pub struct Answer {
    errno: Option<i32>,
    nodeid: u64,
    generation: u64,
    attr_ino: u64,
    size: u64,
    mode: u32,
    timeout_secs: u64,
    timeout_nanos: u32,
    fh: u64,
    open_flags: u32,
    data: Vec<u8>,
    xattr_size_only: Option<u32>,
    ioctl_result: i32,
    names: Vec<(u64, Vec<u8>)>,
    value: u64,
}

/// Input of the `replies` target.
#[derive(Debug, Arbitrary)]
pub struct RepliesInput {
    answer: Answer,
    /// The request (after an INIT), as raw bytes after the header.
    opcode: u8,
    nodeid: u64,
    body: Vec<u8>,
    reply_len: u32,
    /// The reply can't be delivered (interrupted): what was handed out must be undone.
    undelivered: bool,
}

/// A file system whose every answer is the input's, counting the lookup
/// references and handles it hands out.
#[derive(Default)]
pub struct Answers {
    answer: Option<Answer>,
    refs: Mutex<i64>,
    /// Handles handed out and not released yet.
    handles: Mutex<Vec<u64>>,
}

impl Answers {
    fn answer(&self) -> io::Result<&Answer> {
        let a = self
            .answer
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        match a.errno {
            Some(e) => Err(io::Error::from_raw_os_error(e)),
            None => Ok(a),
        }
    }

    fn timeout(a: &Answer) -> Duration {
        Duration::new(a.timeout_secs, a.timeout_nanos % 1_000_000_000)
    }

    fn attr(a: &Answer) -> Attr {
        Attr {
            ino: a.attr_ino,
            size: a.size,
            mode: a.mode,
            ..Attr::default()
        }
    }

    fn entry(&self) -> io::Result<Entry> {
        let a = self.answer()?;
        if a.nodeid != 0 {
            *self.refs.lock().unwrap() += 1;
        }
        Ok(Entry {
            nodeid: a.nodeid,
            generation: a.generation,
            attr: Self::attr(a),
            attr_timeout: Self::timeout(a),
            entry_timeout: Self::timeout(a),
        })
    }

    fn opened(&self) -> io::Result<Opened> {
        let a = self.answer()?;
        self.handles.lock().unwrap().push(a.fh);
        Ok(Opened {
            fh: a.fh,
            flags: FopenFlags::from_bits_retain(a.open_flags),
            backing_id: 0,
        })
    }

    /// A RELEASE of `fh` (one the request names, or an undelivered one).
    fn forget_handle(&self, fh: u64) {
        let mut handles = self.handles.lock().unwrap();
        if let Some(i) = handles.iter().position(|&h| h == fh) {
            handles.swap_remove(i);
        }
    }

    fn attr_reply(&self) -> io::Result<AttrReply> {
        let a = self.answer()?;
        Ok(AttrReply {
            attr: Self::attr(a),
            timeout: Self::timeout(a),
        })
    }

    fn xattr(&self) -> io::Result<XattrReply> {
        let a = self.answer()?;
        Ok(match a.xattr_size_only {
            Some(n) => XattrReply::Size(n),
            None => XattrReply::Data(a.data.clone()),
        })
    }
}

impl FileSystem for Answers {
    fn lookup(&self, _: &Context, _: u64, _: &CStr) -> io::Result<Entry> {
        self.entry()
    }
    fn forget(&self, _: &Context, _: u64, n: u64) {
        *self.refs.lock().unwrap() -= n.min(1 << 20) as i64;
    }
    fn getattr(&self, _: &Context, _: u64, _: Option<u64>) -> io::Result<AttrReply> {
        self.attr_reply()
    }
    fn setattr(&self, _: &Context, _: u64, _: &SetattrArgs) -> io::Result<AttrReply> {
        self.attr_reply()
    }
    fn readlink(&self, _: &Context, _: u64) -> io::Result<Vec<u8>> {
        Ok(self.answer()?.data.clone())
    }
    fn symlink(&self, _: &Context, _: u64, _: &CStr, _: &CStr) -> io::Result<Entry> {
        self.entry()
    }
    fn mknod(&self, _: &Context, _: u64, _: &CStr, _: &MknodArgs) -> io::Result<Entry> {
        self.entry()
    }
    fn mkdir(&self, _: &Context, _: u64, _: &CStr, _: &MkdirArgs) -> io::Result<Entry> {
        self.entry()
    }
    fn link(&self, _: &Context, _: u64, _: u64, _: &CStr) -> io::Result<Entry> {
        self.entry()
    }
    fn open(&self, _: &Context, _: u64, _: &OpenArgs) -> io::Result<Opened> {
        self.opened()
    }
    fn opendir(&self, _: &Context, _: u64, _: &OpenArgs) -> io::Result<Opened> {
        self.opened()
    }
    fn release(&self, _: &Context, _: u64, args: &ReleaseArgs) -> io::Result<()> {
        self.forget_handle(args.fh);
        Ok(())
    }
    fn releasedir(&self, _: &Context, _: u64, args: &ReleaseArgs) -> io::Result<()> {
        self.forget_handle(args.fh);
        Ok(())
    }
    fn create(&self, _: &Context, _: u64, _: &CStr, _: &CreateArgs) -> io::Result<(Entry, Opened)> {
        let e = self.entry()?;
        Ok((e, self.opened()?))
    }
    fn tmpfile(&self, _: &Context, _: u64, _: &CreateArgs) -> io::Result<(Entry, Opened)> {
        let e = self.entry()?;
        Ok((e, self.opened()?))
    }
    fn read(
        &self,
        _: &Context,
        _: u64,
        _: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        let a = self.answer()?;
        let n = a.data.len().min(out.available());
        out.write_all(&a.data[..n])
    }
    fn write(
        &self,
        _: &Context,
        _: u64,
        _: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let a = self.answer()?;
        let n = (a.value as usize).min(data.remaining());
        data.consume(n);
        Ok(if a.value > u32::MAX as u64 {
            a.value as usize
        } else {
            n
        })
    }
    fn getxattr(&self, _: &Context, _: u64, _: &CStr, _: u32) -> io::Result<XattrReply> {
        self.xattr()
    }
    fn listxattr(&self, _: &Context, _: u64, _: u32) -> io::Result<XattrReply> {
        self.xattr()
    }
    fn readdir(
        &self,
        _: &Context,
        _: u64,
        _: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        let a = self.answer()?;
        for (i, (ino, name)) in a.names.iter().enumerate() {
            if !out.add(*ino, i as u64 + 1, 8, name) {
                break;
            }
        }
        Ok(())
    }
    fn readdirplus(
        &self,
        _: &Context,
        _: u64,
        _: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        let a = self.answer()?.clone();
        for (i, (_, name)) in a.names.iter().enumerate() {
            let entry = self.entry()?;
            if !out.add(&entry, i as u64 + 1, 8, name) {
                if entry.nodeid != 0 {
                    *self.refs.lock().unwrap() -= 1;
                }
                break;
            }
        }
        Ok(())
    }
    fn ioctl(&self, _: &Context, _: u64, _: &IoctlArgs<'_>) -> io::Result<IoctlReply> {
        let a = self.answer()?;
        Ok(IoctlReply {
            result: a.ioctl_result,
            data: a.data.clone(),
        })
    }
    fn bmap(&self, _: &Context, _: u64, _: u32, _: u64) -> io::Result<u64> {
        Ok(self.answer()?.value)
    }
    fn lseek(&self, _: &Context, _: u64, _: &LseekArgs) -> io::Result<u64> {
        Ok(self.answer()?.value)
    }
    fn copy_file_range(&self, _: &Context, _: u64, _: &CopyFileRangeArgs) -> io::Result<u64> {
        Ok(self.answer()?.value)
    }
    fn poll(&self, _: &Context, _: u64, _: &PollArgs) -> io::Result<u32> {
        Ok(self.answer()?.value as u32)
    }
}

/// One request of arbitrary opcode and body (after an INIT) into a file
/// system answering the input's values, with a reply buffer of arbitrary
/// size: the reply fits the buffer, echoes the unique, has the shape the
/// opcode table says, and carries the answer's values; an undelivered
/// reply leaves no lookup reference and no handle behind.
pub fn replies(input: &RepliesInput) {
    let fs = Arc::new(Answers {
        answer: Some(input.answer.clone()),
        ..Answers::default()
    });
    let server = Server::new(fs.clone());
    let mut reply = vec![0u8; 4096];
    let init = default_init();
    server
        .handle(&mut MemTx::new(&init, &mut reply))
        .expect("in-memory transaction");
    let opcode = input.opcode as u32 % 54;
    let h = InHeader {
        len: (40 + input.body.len()) as u32,
        opcode,
        unique: 77,
        nodeid: input.nodeid,
        ..InHeader::default()
    };
    let mut request = zerocopy::IntoBytes::as_bytes(&h).to_vec();
    request.extend_from_slice(&input.body);
    // Up to 64 KiB: every shape fits, and zeroing stays cheap. The buffer
    // has exactly this size, so AddressSanitizer sees any write past it.
    let reply_len = (input.reply_len as usize) % ((64 << 10) + 1);
    let mut reply = vec![0u8; reply_len];
    let mut tx = MemTx::new(&request, &mut reply);
    if input.undelivered {
        tx.fail_with = Some(libc::ENOENT);
    }
    let outcome = server.handle(&mut tx).expect("in-memory transaction");
    if input.undelivered {
        assert!(tx.sent.is_none());
        if matches!(outcome, Outcome::ReplyNotDelivered) {
            assert_eq!(
                *fs.refs.lock().unwrap(),
                0,
                "an undelivered entry kept its reference"
            );
            assert!(
                fs.handles.lock().unwrap().is_empty(),
                "an undelivered handle was not released"
            );
        }
        return;
    }
    let Some((unique, error, len)) = tx.sent else {
        return;
    };
    assert_eq!(unique, 77);
    if error != 0 {
        return;
    }
    let body = tx.body();
    let a = &input.answer;
    let Some(op) = Opcode::from_u32(opcode) else {
        return;
    };
    let info = opcode_info(op);
    if !info.has_out_args() {
        assert_eq!(len, 0, "{op:?} has no out arguments");
    }
    match op {
        Opcode::Lookup | Opcode::Mkdir | Opcode::Mknod | Opcode::Symlink | Opcode::Link => {
            let (e, _) = fuse_abi::EntryOut::read_from_prefix(body).expect("entry_out");
            assert_eq!(len, size_of::<fuse_abi::EntryOut>());
            assert_eq!(
                (e.nodeid, e.generation, e.attr.ino),
                (a.nodeid, a.generation, a.attr_ino)
            );
            assert_eq!(
                (e.entry_valid, e.entry_valid_nsec),
                (a.timeout_secs, a.timeout_nanos % 1_000_000_000)
            );
            assert_eq!(*fs.refs.lock().unwrap(), (a.nodeid != 0) as i64);
        }
        Opcode::Getattr | Opcode::Setattr => {
            let (o, _) = fuse_abi::AttrOut::read_from_prefix(body).expect("attr_out");
            assert_eq!(
                (o.attr.ino, o.attr.size, o.attr.mode),
                (a.attr_ino, a.size, a.mode)
            );
            assert_eq!(o.attr_valid, a.timeout_secs);
        }
        Opcode::Open | Opcode::Opendir => {
            let (o, _) = fuse_abi::OpenOut::read_from_prefix(body).expect("open_out");
            // FOPEN_IO_URING_ZERO_COPY only goes out through a zero-copy
            // queue, which this transaction is not.
            let zero_copy = fuse_abi::FopenFlags::IO_URING_ZERO_COPY.bits();
            assert_eq!((o.fh, o.open_flags), (a.fh, a.open_flags & !zero_copy));
        }
        Opcode::Create | Opcode::Tmpfile => {
            let (e, rest) = fuse_abi::EntryOut::read_from_prefix(body).expect("entry_out");
            let (o, _) = fuse_abi::OpenOut::read_from_prefix(rest).expect("open_out");
            assert_eq!((e.nodeid, o.fh), (a.nodeid, a.fh));
        }
        Opcode::Readlink | Opcode::Read => assert_eq!(body, &a.data[..len]),
        Opcode::Getxattr | Opcode::Listxattr if body.len() == 8 => {
            if let Some(n) = a.xattr_size_only {
                assert_eq!(u32::from_ne_bytes(body[..4].try_into().unwrap()), n);
            }
        }
        _ => {}
    }
}
