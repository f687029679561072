//! The [`Server`]: one dispatch from a transport's request to a file
//! system's method and back to the transport's reply memory.

use crate::args::*;
use crate::async_fs::{AsyncFileSystem, SyncFs};
use crate::backing::BackingFiles;
use crate::filesystem::FileSystem;
use crate::init::{negotiate, InitConfig, InitOutcome, KernelInit, Negotiated};
use crate::io::{DirentBuf, SliceReader, SliceWriter, ZeroCopyReader, ZeroCopyWriter};
use crate::notify::{NotificationSink, Notifier};
use crate::opcode_table::opcode_info_raw;
use crate::recovery::{self, Attempt, RequestJournal, Resent};
use crate::request::{decode, DecodeOptions, Operation, RawRequest};
use crate::request_log;
use crate::types::*;
use fuse_abi::{
    AttrOut, BmapOut, CopyFileRangeOut, FopenFlags, GetxattrOut, InitFlags, IoctlOut, LkOut,
    LseekOut, Opcode, PollOut, StatfsOut, StatxOut, WriteOut,
};
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use zerocopy::{Immutable, IntoBytes};

/// One request a transport received, with the memory its reply goes into.
///
/// A transport implements this over its own buffers: a `/dev/fuse` read
/// buffer and reply buffer, a ring entry's header and payload, or a pool
/// buffer at the offset the kernel reported. The server reads the request,
/// lets the file system fill [`Transaction::reply_buffer`] (READ data goes
/// straight there), and calls [`Transaction::send_reply`] once.
pub trait Transaction: Send {
    /// The request's bytes.
    fn request(&self) -> RawRequest<'_>;

    /// Memory for the reply body (what follows `fuse_out_header`). It must
    /// hold at least [`Negotiated::max_reply_size`] bytes once INIT is done,
    /// and 4096 before. It may share memory with the request's payload: the
    /// server doesn't read the request once it asked for this.
    fn reply_buffer(&mut self) -> &mut [u8];

    /// Sends the reply: a `fuse_out_header` with `unique`, `error` (0 or a
    /// negative errno) and the length, then the first `body_len` bytes of
    /// [`Transaction::reply_buffer`].
    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()>;

    /// The request is a READ whose data the transport moves itself (FUSE
    /// over io_uring zero copy, see [`crate::io`]): the server answers it
    /// through this writer instead of [`Transaction::reply_buffer`], and
    /// the reply's body length is what was written.
    fn zero_copy_writer(&mut self) -> Option<&mut dyn ZeroCopyWriter> {
        None
    }

    /// The request is a WRITE whose data the transport moves itself: the
    /// server answers it from this reader instead of the request's bytes
    /// (which hold no data then).
    fn zero_copy_reader(&mut self) -> Option<&mut dyn ZeroCopyReader> {
        None
    }

    /// The request came through a queue that moves READ and WRITE data of
    /// files opened with [`fuse_abi::FopenFlags::IO_URING_ZERO_COPY`]
    /// itself. Elsewhere the server takes that flag off an open's reply.
    fn zero_copy_queue(&self) -> bool {
        false
    }
}

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A reply was sent.
    Replied,
    /// The request takes no reply (FORGET, INTERRUPT, ...).
    NoReply,
    /// The request was unreadable and dropped with a log line.
    Dropped,
    /// The reply could not be delivered because the kernel no longer waits
    /// for it (the request was interrupted or the connection aborted).
    ReplyNotDelivered,
    /// DESTROY was answered: the connection is over.
    Destroyed,
}

/// Counts of requests per opcode.
///
/// Every request bumps one, from whichever thread serves it: the counts are
/// kept in shards, a thread's own, each on cache lines of its own, so that
/// threads on different CPUs don't take the same line from each other on
/// every request; reading sums the shards.
pub struct RequestCounters {
    shards: Box<[CounterShard]>,
}

/// How many shards [`RequestCounters`] keeps (threads share them round
/// robin beyond that).
const COUNTER_SHARDS: usize = 8;

/// One thread's counts: 64 opcodes and one slot for every other.
#[repr(align(128))]
struct CounterShard([AtomicU64; 65]);

/// The shard of the calling thread.
fn counter_shard() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % COUNTER_SHARDS;
    }
    SHARD.with(|s| *s)
}

impl Default for RequestCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestCounters {
    /// All counts zero.
    pub fn new() -> Self {
        Self {
            shards: (0..COUNTER_SHARDS)
                .map(|_| CounterShard(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Counts one request with `opcode` (every opcode from 64 up shares
    /// one slot).
    pub fn bump(&self, opcode: u32) {
        let slot = (opcode as usize).min(64);
        self.shards[counter_shard()].0[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests seen with `opcode`.
    pub fn get(&self, opcode: Opcode) -> u64 {
        let slot = opcode as usize;
        if slot >= 64 {
            return 0;
        }
        self.shards
            .iter()
            .map(|s| s.0[slot].load(Ordering::Relaxed))
            .sum()
    }

    /// Every opcode with a non-zero count.
    pub fn snapshot(&self) -> Vec<(Opcode, u64)> {
        Opcode::ALL
            .iter()
            .filter_map(|&op| {
                let n = self.get(op);
                (n > 0).then_some((op, n))
            })
            .collect()
    }
}

/// The protocol engine for one FUSE connection, shared by all of a
/// transport's threads or tasks.
pub struct Server {
    fs: Arc<dyn AsyncFileSystem>,
    init_config: InitConfig,
    /// Shared with the notifiers made from this server.
    negotiated: Arc<OnceLock<Negotiated>>,
    destroyed: AtomicBool,
    waits_stopped: AtomicBool,
    counters: RequestCounters,
    backing_files: OnceLock<Arc<dyn BackingFiles>>,
    request_log: AtomicBool,
    journal: OnceLock<RequestJournal>,
}

impl Server {
    /// A server for a synchronous file system.
    pub fn new(fs: Arc<dyn FileSystem>) -> Self {
        Self::new_async(Arc::new(SyncFs(fs)))
    }

    /// A server for an asynchronous file system.
    pub fn new_async(fs: Arc<dyn AsyncFileSystem>) -> Self {
        Self {
            fs,
            init_config: InitConfig::default(),
            negotiated: Arc::new(OnceLock::new()),
            destroyed: AtomicBool::new(false),
            waits_stopped: AtomicBool::new(false),
            counters: RequestCounters::new(),
            backing_files: OnceLock::new(),
            request_log: AtomicBool::new(false),
            journal: OnceLock::new(),
        }
    }

    /// Keeps a request journal (crash recovery, see [`crate::recovery`]):
    /// each request is recorded before the file system sees it and its
    /// reply before it is written, and a request the kernel resends after
    /// a serving process died is replayed, undone or run again as that
    /// module says. Only for transports that carry a request on one thread
    /// from read to reply. Set once; `false` if one was set already.
    pub fn set_request_journal(&self, journal: RequestJournal) -> bool {
        self.journal.set(journal).is_ok()
    }

    /// Sets what the server asks for at INIT before the file system adjusts
    /// it (a transport adds `FUSE_OVER_IO_URING` here, for example).
    pub fn with_init_config(mut self, config: InitConfig) -> Self {
        self.init_config = config;
        self
    }

    /// Turns the request log on or off (off by default): with it, every
    /// request is logged in one line once it is answered, like libfuse's
    /// `-d` but compact. Every transport's requests go through
    /// [`Server::handle_async`], so all of them are logged: `/dev/fuse`
    /// workers, a `FuseDevTask`, io_uring rings.
    ///
    /// The line is a [`tracing`] event at INFO with the target
    /// `fuse_request`, so a subscriber's filter decides whether it goes
    /// anywhere: `RUST_LOG=fuse_request=off` silences it,
    /// `RUST_LOG=warn,fuse_request=info` shows it beside warnings only.
    ///
    /// It says the request's `unique`, the opcode (its name in the
    /// [opcode table](crate::opcode_table) without `FUSE_`), the node id
    /// and the arguments that matter for the opcode (names quoted and
    /// escaped, any byte that isn't UTF-8 as `\xNN`; handle, offset and
    /// size for READ and WRITE; flags for OPEN and CREATE; ...), then the
    /// result: `ok` with what the reply says (its size in bytes, the node
    /// id of an entry, the handle of an open, the count of a write), the
    /// errno by name and number, `no reply` (FORGET, INTERRUPT, ...), or
    /// `malformed` for a request that could not be decoded; and the time
    /// from receipt to the reply in microseconds:
    ///
    /// ```text
    /// unique=4 LOOKUP node=1 name="hello.txt" -> ok node=2 (58 µs)
    /// unique=8 LOOKUP node=1 name="nope" -> ENOENT errno=2 (12 µs)
    /// unique=12 READ node=2 fh=0 offset=0 size=4096 -> ok 14 bytes (19 µs)
    /// unique=16 FORGET node=2 nlookup=1 -> no reply (3 µs)
    /// unique=20 MKDIR node=1 -> malformed, EINVAL errno=22 (4 µs)
    /// ```
    ///
    /// Off, it costs each request one relaxed load of a flag. On, a
    /// request whose line the subscriber would not take (its filter is
    /// asked first) costs nothing more either; one it takes is decoded a
    /// second time and formatted, which slows a busy mount down: it is
    /// for finding out what the kernel asks and what the file system
    /// answers, not for production. [`Server::set_request_log`] turns it
    /// on or off while serving.
    ///
    /// ```
    /// use fuse_server::{FileSystem, Server};
    /// use std::sync::Arc;
    ///
    /// struct Empty;
    /// impl FileSystem for Empty {}
    ///
    /// let server = Server::new(Arc::new(Empty)).with_request_log(true);
    /// assert!(server.request_log());
    /// ```
    pub fn with_request_log(mut self, on: bool) -> Self {
        *self.request_log.get_mut() = on;
        self
    }

    /// The request log is on ([`Server::with_request_log`]).
    pub fn request_log(&self) -> bool {
        self.request_log.load(Ordering::Relaxed)
    }

    /// Turns the request log ([`Server::with_request_log`]) on or off
    /// while serving (a daemon might toggle it on a signal); requests
    /// already being handled keep the setting they started with.
    pub fn set_request_log(&self, on: bool) {
        self.request_log.store(on, Ordering::Relaxed);
    }

    /// The INIT wishes in force before the file system's `init`.
    pub fn init_config(&self) -> &InitConfig {
        &self.init_config
    }

    /// Installs the connection's backing file registry (kernel
    /// passthrough). A transport over `/dev/fuse` calls this before INIT;
    /// at INIT the server hands it to the file system
    /// ([`crate::FileSystem::attach_backing_files`]), before the file
    /// system's `init`. Returns false (and keeps the first) if one was
    /// installed already.
    pub fn set_backing_files(&self, files: Arc<dyn BackingFiles>) -> bool {
        self.backing_files.set(files).is_ok()
    }

    /// The connection's backing file registry, if the transport installed
    /// one.
    pub fn backing_files(&self) -> Option<&Arc<dyn BackingFiles>> {
        self.backing_files.get()
    }

    /// The file system.
    pub fn filesystem(&self) -> &Arc<dyn AsyncFileSystem> {
        &self.fs
    }

    /// Records what INIT settled for a connection another server answered
    /// it on ([`Server::resume`] checks it first); `false` if the server
    /// had its own already.
    pub(crate) fn set_negotiated(&self, negotiated: Negotiated) -> bool {
        self.negotiated.set(negotiated).is_ok()
    }

    /// The result of INIT, once it happened.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.get()
    }

    /// The payload buffer size of a FUSE-over-io_uring entry, computed as
    /// the kernel's `fuse_uring_create()` does; `None` before INIT.
    pub fn uring_payload_size(&self) -> Option<usize> {
        self.negotiated().map(Negotiated::uring_payload_size)
    }

    /// DESTROY was received.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// The connection is over (DESTROY, unmount or abort): tells the file
    /// system through its `destroy`, once.
    pub fn finish(&self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            self.fs.destroy();
        }
    }

    /// The session is stopping: has the file system end its lock waits
    /// (and any it starts from now on) with `EINTR`, once
    /// ([`FileSystem::stop_waits`]). Every transport's `Session::stop`
    /// calls this before it waits for its threads, which a waiting request
    /// would otherwise hold forever.
    pub fn stop_waits(&self) {
        if !self.waits_stopped.swap(true, Ordering::AcqRel) {
            self.fs.stop_waits();
        }
    }

    /// Requests seen per opcode.
    pub fn counters(&self) -> &RequestCounters {
        &self.counters
    }

    /// A notifier sending through `sink` (the transport's `/dev/fuse`).
    pub fn notifier(&self, sink: Arc<dyn NotificationSink>) -> Notifier {
        Notifier::following(sink, self.negotiated.clone())
    }

    pub(crate) fn decode_options(&self) -> DecodeOptions {
        match self.negotiated() {
            Some(n) => DecodeOptions {
                minor: n.minor,
                setxattr_ext: n.flags.contains(InitFlags::SETXATTR_EXT),
            },
            None => DecodeOptions::default(),
        }
    }

    /// Handles one request on the calling thread: decode, call the file
    /// system, reply. A synchronous file system completes without waiting
    /// for anything; an asynchronous one is driven to completion here.
    pub fn handle(&self, tx: &mut dyn Transaction) -> io::Result<Outcome> {
        block_on(self.handle_async(tx))
    }

    /// Handles one request: decode, call the file system, reply (and log
    /// it, with [`Server::with_request_log`]).
    pub async fn handle_async(&self, tx: &mut dyn Transaction) -> io::Result<Outcome> {
        if let Some(journal) = self.journal.get() {
            return self.handle_journaled(journal, tx).await;
        }
        self.handle_unjournaled(tx).await
    }

    async fn handle_unjournaled(&self, tx: &mut dyn Transaction) -> io::Result<Outcome> {
        if self.request_log.load(Ordering::Relaxed) && request_log::enabled() {
            return request_log::handle_logged(self, tx).await;
        }
        self.dispatch(tx).await
    }

    /// A request under a [`RequestJournal`]: a resent one is replayed or
    /// undone first, as its previous attempt was recorded.
    async fn handle_journaled(
        &self,
        journal: &RequestJournal,
        tx: &mut dyn Transaction,
    ) -> io::Result<Outcome> {
        let Ok(header) = tx.request().in_header() else {
            return self.handle_unjournaled(tx).await;
        };
        let (unique, opcode) = (header.unique, header.opcode);
        let expects_reply = opcode_info_raw(opcode).is_none_or(|i| i.expects_reply());
        if !expects_reply {
            return self.handle_unjournaled(tx).await;
        }
        let ctx = Context {
            unique,
            nodeid: header.nodeid,
            uid: header.uid,
            gid: header.gid,
            pid: header.pid,
        };
        let mut attempt = Attempt::First;
        if unique & fuse_abi::UNIQUE_RESEND != 0 {
            let (resent, a) = journal.take_previous(unique);
            attempt = a;
            match resent {
                Resent::Replay { error, body } => {
                    tracing::debug!(unique, opcode, error, "resent request: replaying its reply");
                    let _scope = journal.begin(unique, opcode, attempt);
                    let buf = tx.reply_buffer();
                    if body.len() > buf.len() {
                        return self.reply_error(tx, unique, libc::EIO);
                    }
                    buf[..body.len()].copy_from_slice(&body);
                    return self.send(tx, unique, error, body.len());
                }
                Resent::ForgetThenRun(nodeids) => {
                    tracing::debug!(
                        unique,
                        references = nodeids.len(),
                        "resent request: the lookup references its first attempt handed \
                         to a reply never sent are given back"
                    );
                    for nodeid in nodeids {
                        let _ = self.fs.forget(&ctx, nodeid, 1).await;
                    }
                }
                Resent::Run => {}
            }
        }
        let _scope = journal.begin(unique, opcode, attempt);
        self.handle_unjournaled(tx).await
    }

    /// The dispatch: decode, call the file system, reply.
    pub(crate) async fn dispatch(&self, tx: &mut dyn Transaction) -> io::Result<Outcome> {
        // Asked before the request is borrowed: a zero-copy WRITE is read
        // from the reader, not from the request's bytes.
        let zero_copy_write = tx.zero_copy_reader().is_some();
        let raw = tx.request();
        let header = match raw.in_header() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("dropping request: {e}");
                return Ok(Outcome::Dropped);
            }
        };
        self.counters.bump(header.opcode);
        let unique = header.unique;
        let expects_reply = opcode_info_raw(header.opcode).is_none_or(|i| i.expects_reply());
        let req = match decode(raw, self.decode_options()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(unique, opcode = header.opcode, "malformed request: {e}");
                if !expects_reply {
                    return Ok(Outcome::Dropped);
                }
                return self.reply_error(tx, unique, e.errno());
            }
        };
        let ctx = Context {
            unique,
            nodeid: header.nodeid,
            uid: header.uid,
            gid: header.gid,
            pid: header.pid,
        };
        let ino = header.nodeid;
        let fs = &*self.fs;

        let op = req.op;
        if self.negotiated().is_none() && !matches!(op, Operation::Init(_)) {
            tracing::warn!(unique, opcode = header.opcode, "request before INIT");
            if !expects_reply {
                return Ok(Outcome::Dropped);
            }
            return self.reply_error(tx, unique, libc::EIO);
        }

        match op {
            Operation::Init(init) => self.handle_init(tx, unique, &init),
            Operation::Destroy => {
                self.finish();
                let _ = self.reply_result(tx, unique, Ok(0));
                Ok(Outcome::Destroyed)
            }
            Operation::Forget { nlookup } => {
                let _ = fs.forget(&ctx, ino, nlookup).await;
                Ok(Outcome::NoReply)
            }
            Operation::BatchForget(items) => {
                let _ = fs.batch_forget(&ctx, items).await;
                Ok(Outcome::NoReply)
            }
            Operation::Interrupt { unique: target } => {
                fs.interrupt(&ctx, target).await.ok();
                Ok(Outcome::NoReply)
            }
            Operation::NotifyReply { offset, data } => {
                fs.retrieve_reply(&ctx, ino, unique, offset, data)
                    .await
                    .ok();
                Ok(Outcome::NoReply)
            }
            Operation::Lookup { name } => {
                let r = fs.lookup(&ctx, ino, name).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Getattr { fh } => {
                let r = fs.getattr(&ctx, ino, fh).await;
                self.reply_struct(tx, unique, r.map(|a| attr_out(&a)))
            }
            Operation::Setattr(args) => {
                let r = fs.setattr(&ctx, ino, &args).await;
                self.reply_struct(tx, unique, r.map(|a| attr_out(&a)))
            }
            Operation::Readlink => {
                let r = fs.readlink(&ctx, ino).await;
                self.reply_bytes(tx, unique, r)
            }
            Operation::Symlink { name, target } => {
                let r = fs.symlink(&ctx, ino, name, target).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Mknod { name, args } => {
                let r = fs.mknod(&ctx, ino, name, &args).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Mkdir { name, args } => {
                let r = fs.mkdir(&ctx, ino, name, &args).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Unlink { name } => {
                let r = fs.unlink(&ctx, ino, name).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Rmdir { name } => {
                let r = fs.rmdir(&ctx, ino, name).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Rename(args) => {
                let r = fs.rename(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Link { oldnodeid, newname } => {
                let r = fs.link(&ctx, oldnodeid, ino, newname).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Open(args) => {
                let r = fs.open(&ctx, ino, &args).await;
                self.reply_open(tx, &ctx, r, false).await
            }
            Operation::Opendir(args) => {
                let r = fs.opendir(&ctx, ino, &args).await;
                self.reply_open(tx, &ctx, r, true).await
            }
            Operation::Read(args) => {
                if let Some(out) = tx.zero_copy_writer() {
                    let r = fs.read(&ctx, ino, &args, out).await;
                    let len = out.written();
                    return self.reply_result(tx, unique, r.map(|_| len));
                }
                let buf = tx.reply_buffer();
                let size = (args.size as usize).min(buf.len());
                let mut out = SliceWriter::new(&mut buf[..size]);
                let r = fs.read(&ctx, ino, &args, &mut out).await;
                let len = out.written();
                self.reply_result(tx, unique, r.map(|_| len))
            }
            Operation::Write { args, data } => {
                let r = match zero_copy_write {
                    true => match tx.zero_copy_reader() {
                        Some(input) => fs.write(&ctx, ino, &args, input).await,
                        None => Err(io::Error::from_raw_os_error(libc::EIO)),
                    },
                    false => {
                        let mut input = SliceReader::new(data);
                        fs.write(&ctx, ino, &args, &mut input).await
                    }
                };
                let r = r.and_then(|n| {
                    u32::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EIO))
                });
                self.reply_struct(tx, unique, r.map(|size| WriteOut { size, padding: 0 }))
            }
            Operation::Statfs => {
                let r = fs.statfs(&ctx, ino).await;
                self.reply_struct(tx, unique, r.map(|st| StatfsOut { st }))
            }
            Operation::Release(args) => {
                let r = fs.release(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Releasedir(args) => {
                let r = fs.releasedir(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Fsync(args) => {
                let r = fs.fsync(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Fsyncdir(args) => {
                let r = fs.fsyncdir(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Setxattr(args) => {
                let r = fs.setxattr(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Getxattr { name, size } => {
                let r = fs.getxattr(&ctx, ino, name, size).await;
                self.reply_xattr(tx, unique, size, r)
            }
            Operation::Listxattr { size } => {
                let r = fs.listxattr(&ctx, ino, size).await;
                self.reply_xattr(tx, unique, size, r)
            }
            Operation::Removexattr { name } => {
                let r = fs.removexattr(&ctx, ino, name).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Flush(args) => {
                let r = fs.flush(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Readdir(args) => {
                let buf = tx.reply_buffer();
                let size = (args.size as usize).min(buf.len());
                let mut out = DirentBuf::new(&mut buf[..size]);
                let r = fs.readdir(&ctx, ino, &args, &mut out).await;
                let len = out.len();
                self.reply_result(tx, unique, r.map(|_| len))
            }
            Operation::Readdirplus(args) => {
                let buf = tx.reply_buffer();
                let size = (args.size as usize).min(buf.len());
                let mut out = DirentBuf::new(&mut buf[..size]);
                let r = fs.readdirplus(&ctx, ino, &args, &mut out).await;
                let len = out.len();
                self.reply_readdirplus(tx, &ctx, r.map(|_| len)).await
            }
            Operation::Getlk(args) => {
                let r = fs.getlk(&ctx, ino, &args).await;
                self.reply_struct(tx, unique, r.map(|lk| LkOut { lk }))
            }
            Operation::Setlk { args, sleep } => {
                let r = fs.setlk(&ctx, ino, &args, sleep).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Access { mask } => {
                let r = fs.access(&ctx, ino, mask).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Create { name, args } => {
                let r = fs.create(&ctx, ino, name, &args).await;
                self.reply_create(tx, &ctx, r).await
            }
            Operation::Tmpfile(args) => {
                let r = fs.tmpfile(&ctx, ino, &args).await;
                self.reply_create(tx, &ctx, r).await
            }
            Operation::Bmap { block, blocksize } => {
                let r = fs.bmap(&ctx, ino, blocksize, block).await;
                self.reply_struct(tx, unique, r.map(|block| BmapOut { block }))
            }
            Operation::Ioctl(args) => {
                let out_size = args.out_size as usize;
                let r = fs.ioctl(&ctx, ino, &args).await;
                match r {
                    Ok(reply) if reply.data.len() > out_size => {
                        tracing::warn!(
                            unique,
                            "ioctl reply of {} bytes exceeds out_size {out_size}",
                            reply.data.len()
                        );
                        self.reply_error(tx, unique, libc::EIO)
                    }
                    Ok(reply) => {
                        let head = IoctlOut {
                            result: reply.result,
                            flags: 0,
                            in_iovs: 0,
                            out_iovs: 0,
                        };
                        self.reply_parts(tx, unique, &[head.as_bytes(), &reply.data])
                    }
                    Err(e) => self.reply_error(tx, unique, errno_of(&e)),
                }
            }
            Operation::Poll(args) => {
                let r = fs.poll(&ctx, ino, &args).await;
                self.reply_struct(
                    tx,
                    unique,
                    r.map(|revents| PollOut {
                        revents,
                        padding: 0,
                    }),
                )
            }
            Operation::Fallocate(args) => {
                let r = fs.fallocate(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Lseek(args) => {
                let r = fs.lseek(&ctx, ino, &args).await;
                self.reply_struct(tx, unique, r.map(|offset| LseekOut { offset }))
            }
            Operation::CopyFileRange { args, wide } => {
                let r = fs.copy_file_range(&ctx, ino, &args).await;
                if wide {
                    self.reply_struct(
                        tx,
                        unique,
                        r.map(|bytes_copied| CopyFileRangeOut { bytes_copied }),
                    )
                } else {
                    // The 32-bit reply can't say more than u32::MAX; the caller loops.
                    let r = r.map(|n| WriteOut {
                        size: n.min(u32::MAX as u64) as u32,
                        padding: 0,
                    });
                    self.reply_struct(tx, unique, r)
                }
            }
            Operation::Setupmapping(args) => {
                let r = fs.setupmapping(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Removemapping(ranges) => {
                let r = fs.removemapping(&ctx, ino, ranges).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Syncfs => {
                let r = fs.syncfs(&ctx, ino).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Statx(args) => {
                let r = fs.statx(&ctx, ino, &args).await;
                self.reply_struct(
                    tx,
                    unique,
                    r.map(|s| {
                        let (attr_valid, attr_valid_nsec) = split_timeout(s.timeout);
                        StatxOut {
                            attr_valid,
                            attr_valid_nsec,
                            flags: 0,
                            spare: [0; 2],
                            stat: s.statx,
                        }
                    }),
                )
            }
            Operation::CuseInit(_) => self.reply_error(tx, unique, libc::ENOSYS),
        }
    }

    fn handle_init(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        init: &fuse_abi::InitIn,
    ) -> io::Result<Outcome> {
        let mut kernel = KernelInit::from_init_in(init);
        if let Some(limit) = crate::init::read_max_pages_limit() {
            kernel.max_pages_limit = limit;
        }
        if self.negotiated().is_some() {
            tracing::warn!("second INIT on an initialized connection");
            return self.reply_error(tx, unique, libc::EIO);
        }
        let mut config = self.init_config;
        if let Some(files) = self.backing_files.get() {
            self.fs.attach_backing_files(files.clone());
        }
        if let Err(e) = self.fs.init(&kernel, &mut config) {
            tracing::error!("file system refused INIT: {e}");
            return self.reply_error(tx, unique, errno_of(&e));
        }
        match negotiate(&kernel, &config) {
            InitOutcome::Agreed {
                negotiated,
                reply,
                reply_len,
            } => {
                tracing::debug!(
                    kernel_minor = kernel.minor,
                    kernel_flags = format_args!("{:#x}", kernel.flags.bits()),
                    flags = format_args!("{:#x}", negotiated.flags.bits()),
                    max_write = negotiated.max_write,
                    max_pages = negotiated.max_pages,
                    max_stack_depth = negotiated.max_stack_depth,
                    "INIT negotiated"
                );
                let _ = self.negotiated.set(negotiated);
                self.reply_parts(tx, unique, &[&reply.as_bytes()[..reply_len]])
            }
            InitOutcome::MajorOnly(reply) => {
                tracing::info!(
                    kernel_major = kernel.major,
                    "kernel speaks a newer major version; answering with ours"
                );
                self.reply_parts(tx, unique, &[&reply.as_bytes()[..8]])
            }
            InitOutcome::Refused(errno) => {
                tracing::error!(
                    major = kernel.major,
                    minor = kernel.minor,
                    "kernel protocol too old"
                );
                self.reply_error(tx, unique, errno)
            }
        }
    }

    fn send(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        error: i32,
        len: usize,
    ) -> io::Result<Outcome> {
        if self.journal.get().is_some() && !recovery::entries_saved() {
            recovery::save_reply(error, &tx.reply_buffer()[..len]);
        }
        match tx.send_reply(unique, error, len) {
            Ok(()) => Ok(Outcome::Replied),
            // ENOENT: the kernel no longer waits for this request (interrupted).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                tracing::debug!(unique, "reply not delivered: request gone");
                Ok(Outcome::ReplyNotDelivered)
            }
            Err(e) => Err(e),
        }
    }

    fn reply_error(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        errno: i32,
    ) -> io::Result<Outcome> {
        self.send(tx, unique, -errno, 0)
    }

    /// A reply whose body (of `len` bytes) is already in the reply buffer.
    fn reply_result(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        r: io::Result<usize>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(len) => self.send(tx, unique, 0, len),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    fn reply_parts(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        parts: &[&[u8]],
    ) -> io::Result<Outcome> {
        let buf = tx.reply_buffer();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > buf.len() {
            tracing::warn!(
                unique,
                total,
                capacity = buf.len(),
                "reply larger than the reply buffer"
            );
            return self.reply_error(tx, unique, libc::EIO);
        }
        let mut at = 0;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.send(tx, unique, 0, total)
    }

    fn reply_struct<T: IntoBytes + Immutable>(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        r: io::Result<T>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(value) => self.reply_parts(tx, unique, &[value.as_bytes()]),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    fn reply_bytes(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        r: io::Result<Vec<u8>>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(data) => self.reply_parts(tx, unique, &[&data]),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    fn reply_xattr(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        size: u32,
        r: io::Result<XattrReply>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(XattrReply::Size(n)) => self.reply_struct(
                tx,
                unique,
                Ok(GetxattrOut {
                    size: n,
                    padding: 0,
                }),
            ),
            Ok(XattrReply::Data(data)) if size == 0 => self.reply_struct(
                tx,
                unique,
                Ok(GetxattrOut {
                    size: data.len() as u32,
                    padding: 0,
                }),
            ),
            Ok(XattrReply::Data(data)) if data.len() > size as usize => {
                self.reply_error(tx, unique, libc::ERANGE)
            }
            Ok(XattrReply::Data(data)) => self.reply_parts(tx, unique, &[&data]),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    /// Replies with an entry; if the kernel never gets it, the lookup
    /// reference it carried is dropped at once.
    async fn reply_entry(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<Entry>,
    ) -> io::Result<Outcome> {
        let entry = match r {
            Ok(entry) => entry,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        let outcome = self.reply_parts(tx, ctx.unique, &[entry.to_entry_out().as_bytes()]);
        if !matches!(outcome, Ok(Outcome::Replied)) && entry.nodeid != 0 {
            let _ = self.fs.forget(ctx, entry.nodeid, 1).await;
        }
        outcome
    }

    /// Replies with an open handle; if the kernel never gets it, the handle
    /// is released at once.
    async fn reply_open(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<Opened>,
        dir: bool,
    ) -> io::Result<Outcome> {
        let opened = match r {
            Ok(o) => o,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        let open_out = zero_copy_checked(tx, &opened).to_open_out();
        let outcome = self.reply_parts(tx, ctx.unique, &[open_out.as_bytes()]);
        if !matches!(outcome, Ok(Outcome::Replied)) {
            self.release_unclaimed(ctx, ctx.nodeid, &opened, dir).await;
        }
        outcome
    }

    async fn reply_create(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<(Entry, Opened)>,
    ) -> io::Result<Outcome> {
        let (entry, opened) = match r {
            Ok(v) => v,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        let open_out = zero_copy_checked(tx, &opened).to_open_out();
        let outcome = self.reply_parts(
            tx,
            ctx.unique,
            &[entry.to_entry_out().as_bytes(), open_out.as_bytes()],
        );
        if !matches!(outcome, Ok(Outcome::Replied)) {
            self.release_unclaimed(ctx, entry.nodeid, &opened, false)
                .await;
            if entry.nodeid != 0 {
                let _ = self.fs.forget(ctx, entry.nodeid, 1).await;
            }
        }
        outcome
    }

    async fn release_unclaimed(&self, ctx: &Context, ino: u64, opened: &Opened, dir: bool) {
        let args = ReleaseArgs {
            fh: opened.fh,
            ..ReleaseArgs::default()
        };
        let r = if dir {
            self.fs.releasedir(ctx, ino, &args).await
        } else {
            self.fs.release(ctx, ino, &args).await
        };
        if let Err(e) = r {
            tracing::debug!(
                ino,
                fh = opened.fh,
                "releasing an undelivered handle failed: {e}"
            );
        }
    }

    /// Replies to READDIRPLUS; if the kernel never gets the entries, their
    /// lookup references are dropped at once.
    async fn reply_readdirplus(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<usize>,
    ) -> io::Result<Outcome> {
        let len = match r {
            Ok(len) => len,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        if self.journal.get().is_some() {
            recovery::save_entries(&direntplus_nodeids(&tx.reply_buffer()[..len]));
        }
        let outcome = self.send(tx, ctx.unique, 0, len);
        if !matches!(outcome, Ok(Outcome::Replied)) {
            let nodeids = direntplus_nodeids(&tx.reply_buffer()[..len]);
            for nodeid in nodeids {
                let _ = self.fs.forget(ctx, nodeid, 1).await;
            }
        }
        outcome
    }
}

/// `opened` as the kernel may get it: `FOPEN_IO_URING_ZERO_COPY` only
/// through a queue with zero copy, and never next to `FOPEN_PASSTHROUGH`
/// (the kernel fails such an open with EIO: the flag is outside its
/// passthrough mask).
fn zero_copy_checked(tx: &dyn Transaction, opened: &Opened) -> Opened {
    let mut o = *opened;
    if !tx.zero_copy_queue() || o.flags.contains(FopenFlags::PASSTHROUGH) {
        o.flags.remove(FopenFlags::IO_URING_ZERO_COPY);
    }
    o
}

/// The node ids of the entries in a READDIRPLUS reply body.
fn direntplus_nodeids(mut body: &[u8]) -> Vec<u64> {
    use zerocopy::FromBytes;
    let mut ids = Vec::new();
    while let Ok((rec, _)) = fuse_abi::Direntplus::read_from_prefix(body) {
        if rec.entry_out.nodeid != 0 {
            ids.push(rec.entry_out.nodeid);
        }
        let size = fuse_abi::direntplus_size(rec.dirent.namelen as usize);
        if size > body.len() {
            break;
        }
        body = &body[size..];
    }
    ids
}

fn attr_out(a: &AttrReply) -> AttrOut {
    let (attr_valid, attr_valid_nsec) = split_timeout(a.timeout);
    AttrOut {
        attr_valid,
        attr_valid_nsec,
        dummy: 0,
        attr: a.attr,
    }
}

/// The errno a reply carries for `e`: its OS error if it has a valid one,
/// else `EIO`.
pub fn errno_of(e: &io::Error) -> i32 {
    match e.raw_os_error() {
        // The kernel refuses a reply error of -512 or lower (its internal
        // codes start there), and the caller would then wait forever.
        Some(n) if n > 0 && n < 512 => n,
        _ => match e.kind() {
            io::ErrorKind::OutOfMemory => libc::ENOMEM,
            io::ErrorKind::NotFound => libc::ENOENT,
            io::ErrorKind::PermissionDenied => libc::EACCES,
            io::ErrorKind::InvalidInput => libc::EINVAL,
            _ => libc::EIO,
        },
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on this thread. A future that is ready at
/// once (every synchronous file system's) costs one poll and no allocation.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    if let Poll::Ready(v) = future
        .as_mut()
        .poll(&mut TaskContext::from_waker(Waker::noop()))
    {
        return v;
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
