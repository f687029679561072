//! The [`Server`]: one dispatch from a transport's request to a file
//! system's method and back to the transport's reply memory.

mod dispatch;
mod reply;
mod transaction;

pub use transaction::{Outcome, RequestCounters, Transaction};

use crate::async_fs::{AsyncFileSystem, SyncFs};
use crate::backing::BackingFiles;
use crate::filesystem::FileSystem;
use crate::init::{InitConfig, Negotiated};
use crate::notify::{NotificationSink, Notifier};
use crate::opcode_table::opcode_info_raw;
use crate::recovery::{Attempt, RequestJournal, Resent};
use crate::request::DecodeOptions;
use crate::request_log;
use crate::types::*;
use fuse_abi::InitFlags;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

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
        let ctx = Context::of_request(&header);
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
