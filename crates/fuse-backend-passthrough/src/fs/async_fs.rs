//! [`AsyncFileSystem`] for [`PassthroughFs`]: serving from an `async-io`
//! runtime (a `FuseDevTask`, or a FUSE-over-io_uring queue thread in async
//! mode), with an optional blocking thread pool.
//!
//! A child module of `fs`, so it uses the synchronous implementation's
//! private helpers directly.
//!
//! ## What runs where
//!
//! Metadata operations are the synchronous ones, returned as ready
//! futures (no allocation, no executor round trip). READ and WRITE depend
//! on the runtime the request runs on ([`RuntimeType::current`]) and on the
//! pool ([`PassthroughFs::enable_async_thread_pool`]):
//!
//! | request | io_uring runtime | tokio runtime, pool off | tokio runtime, pool on |
//! |---|---|---|---|
//! | READ | `preadv2(RWF_NOWAIT)` inline; on `EAGAIN` an io_uring READ on the thread's ring (`O_DIRECT`: the io_uring READ at once) | `pread` inline | `preadv2(RWF_NOWAIT)` inline; the pool on `EAGAIN` (or where the backing file system has no `RWF_NOWAIT`) |
//! | WRITE | `pwrite` inline (into the page cache); `O_DIRECT` and `KILL_SUIDGID`: an io_uring WRITE | `pwrite` inline | the pool |
//! | `O_DIRECT` READ/WRITE, WRITE with `KILL_SUIDGID` | the pool if on, else as above | inline | the pool |
//! | LOOKUP, OPEN, CREATE | inline | inline | the pool, result in a guard |
//! | SETLKW, FSYNC, FSYNCDIR, FALLOCATE, COPY_FILE_RANGE | inline | inline | the pool |
//! | zero-copy READ/WRITE (FUSE over io_uring on Linux 7.3) | inline | inline | inline |
//!
//! On the io_uring runtime, an `O_DIRECT` READ, a buffered READ that
//! missed the page cache, and an `O_DIRECT` WRITE without `KILL_SUIDGID`,
//! that its server loop marks as alone on the thread ([`async_io::solo`]:
//! it came to an idle loop, nothing else waits) run inline as one
//! `pread`/`pwrite` instead: a request at a time then costs what it costs
//! a synchronous ring thread, and requests that overlap still overlap on
//! the ring. (The pool, where it is on, keeps its share.)
//!
//! A zero-copy READ or WRITE ([`ZeroCopyWriter::is_zero_copy`]) is the
//! transport's fixed-buffer io_uring operation on its own ring, between
//! the kernel's pages and the backing descriptor, which the transport
//! waits for: there is no memory to copy through a pool job or an owned
//! buffer, and it runs inline whatever the runtime.
//!
//! ## Buffers
//!
//! The transport lends its memory (the reply body, the WRITE payload) to
//! the request's future only by reference, and a future may be dropped at
//! any await point (a stopped session drops its request tasks). An
//! io_uring operation goes on after its future is dropped, and a pool job
//! runs to its end: neither may hold transport memory. So both work on an
//! owned, page-aligned buffer ([`OwnedBuf`], allocated with
//! [`fuse_server::AlignedBuf`], whose failure is `ENOMEM`), and the future
//! copies between it and the transport's memory while it still holds that
//! memory: one copy in user space more than the synchronous path, which
//! `pread`s straight into the reply. Page-aligned, so `O_DIRECT` does its
//! IO on it directly (no bounce buffer). Buffers are recycled per size
//! class. The inline `RWF_NOWAIT` read of a page cache hit needs no owned
//! buffer: it runs while the future is polled and reads straight into the
//! reply.

use super::PassthroughFs;
use crate::handle::Handle;
use crate::pool::{AsyncPoolStats, BlockingPool, Counters, PoolFuture, DEFAULT_MAX_THREADS};
use crate::sys::errno;
use async_io::{IoBuf, IoBufMut, RuntimeType};
use fuse_server::{
    AsyncFileSystem, Context, CopyFileRangeArgs, CreateArgs, Entry, FallocateArgs, FileSystem,
    FsFuture, FsyncArgs, LockArgs, OpenArgs, Opened, ReadArgs, ReleaseArgs, SliceReader, WriteArgs,
    ZeroCopyReader, ZeroCopyWriter,
};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The async serving state of a [`PassthroughFs`]: the pool switch, the
/// pool, and the file system's own `Arc` for the pool's jobs.
pub(crate) struct AsyncServing {
    pool_on: AtomicBool,
    pool: OnceLock<BlockingPool>,
    /// Set by `enable_async_thread_pool` (which takes `&Arc<Self>`): jobs
    /// on pool threads hold the file system by this.
    this: OnceLock<Weak<PassthroughFs>>,
    max_threads: AtomicUsize,
    counters: Arc<Counters>,
}

impl AsyncServing {
    pub(crate) fn new() -> Self {
        Self {
            pool_on: AtomicBool::new(false),
            pool: OnceLock::new(),
            this: OnceLock::new(),
            max_threads: AtomicUsize::new(DEFAULT_MAX_THREADS),
            counters: Arc::default(),
        }
    }
}

/// The pool and the file system's `Arc`, for one request.
struct Pooled<'a> {
    pool: &'a BlockingPool,
    fs: Arc<PassthroughFs>,
}

impl PassthroughFs {
    /// Turns the blocking thread pool of the asynchronous serving path on
    /// or off (off by default). It matters only when the file system is
    /// served through [`AsyncFileSystem`] (`Server::new_async`), e.g. by a
    /// `FuseDevTask` or a FUSE-over-io_uring session in async mode.
    ///
    /// With the pool on, requests that may sleep in the kernel leave the
    /// serving thread (see the module table in `docs/architecture.md`):
    /// on a tokio runtime (where file IO blocks the thread) READs that
    /// miss the page cache (`preadv2(RWF_NOWAIT)` is tried inline first),
    /// WRITEs, LOOKUP, OPEN, CREATE, lock waits and syncs; on any runtime
    /// `O_DIRECT` READ and WRITE and WRITE with `KILL_SUIDGID`. A pool job
    /// works on its own page-aligned buffer, never on the transport's.
    ///
    /// A request dropped before its job started cancels the job; a job
    /// that already runs finishes, and what its result holds (a lookup
    /// reference, an open handle) is given back if nobody claims it. A
    /// WRITE that already runs still lands: stop a `FuseDevTask` with
    /// `TaskHandle::stop` (which lets running requests finish and reply)
    /// rather than dropping its runtime, or the kernel may send such a
    /// WRITE again to whoever serves next (twice the data on an
    /// `O_APPEND` file).
    ///
    /// Threads start on demand up to [`PassthroughFs::set_async_thread_pool_size`]
    /// (64 by default) and end after 10 s without work.
    pub fn enable_async_thread_pool(self: &Arc<Self>, enabled: bool) {
        let _ = self.asyncs.this.set(Arc::downgrade(self));
        if enabled {
            self.asyncs.pool.get_or_init(|| {
                BlockingPool::new(
                    self.asyncs.max_threads.load(Ordering::Relaxed),
                    self.asyncs.counters.clone(),
                )
            });
        }
        self.asyncs.pool_on.store(enabled, Ordering::Release);
    }

    /// Whether the async thread pool is on.
    pub fn async_thread_pool_enabled(&self) -> bool {
        self.asyncs.pool_on.load(Ordering::Acquire)
    }

    /// The largest number of pool threads (at least 1; default 64).
    pub fn set_async_thread_pool_size(&self, max_threads: usize) {
        self.asyncs
            .max_threads
            .store(max_threads.max(1), Ordering::Relaxed);
        if let Some(pool) = self.asyncs.pool.get() {
            pool.set_max_threads(max_threads);
        }
    }

    /// What the async serving path and its pool did so far.
    pub fn async_thread_pool_stats(&self) -> AsyncPoolStats {
        let c = &self.asyncs.counters;
        AsyncPoolStats {
            enabled: self.async_thread_pool_enabled(),
            threads: self.asyncs.pool.get().map_or(0, BlockingPool::threads),
            queued: c.queued.load(Ordering::Relaxed),
            started: c.started.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            abandoned: c.abandoned.load(Ordering::Relaxed),
            undone: c.undone.load(Ordering::Relaxed),
            nowait_hits: c.nowait_hits.load(Ordering::Relaxed),
            nowait_misses: c.nowait_misses.load(Ordering::Relaxed),
            pool_reads: c.pool_reads.load(Ordering::Relaxed),
            pool_writes: c.pool_writes.load(Ordering::Relaxed),
            uring_reads: c.uring_reads.load(Ordering::Relaxed),
            uring_writes: c.uring_writes.load(Ordering::Relaxed),
            solo_reads: c.solo_reads.load(Ordering::Relaxed),
            solo_writes: c.solo_writes.load(Ordering::Relaxed),
            kill_suidgid_writes: c.kill_suidgid_writes.load(Ordering::Relaxed),
        }
    }

    /// The pool, if it is on.
    fn pooled(&self) -> Option<Pooled<'_>> {
        if !self.async_thread_pool_enabled() {
            return None;
        }
        let pool = self.asyncs.pool.get()?;
        let fs = self.asyncs.this.get()?.upgrade()?;
        Some(Pooled { pool, fs })
    }

    /// The pool for a request that may block, when the thread's file IO
    /// blocks (tokio) and the pool is on.
    fn pooled_if_blocking(&self) -> Option<Pooled<'_>> {
        if RuntimeType::current().file_io_blocks() {
            self.pooled()
        } else {
            None
        }
    }

    /// The body of a WRITE once its handle is known: as
    /// [`FileSystem::write`] does it (runs on a pool thread too).
    fn write_handle(
        &self,
        h: &Handle,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        self.creds.root();
        let n = match Self::write_from(h.fd(), args.offset, data) {
            Err(e) if Self::direct_tail(&e, h, args) => {
                self.write_tail_buffered(ino, args, data)?
            }
            r => r?,
        };
        if args.kill_suidgid() && self.killpriv_v2() {
            self.kill_suidgid_fd(ino, h.fd())?;
        }
        Ok(n)
    }

    /// A page cache write through a handle opened with `O_DIRECT` may be
    /// unaligned (the tail of the file): `EINVAL`, written buffered instead.
    fn direct_tail(e: &io::Error, h: &Handle, args: &WriteArgs) -> bool {
        e.raw_os_error() == Some(libc::EINVAL) && h.flags & libc::O_DIRECT != 0 && args.from_cache()
    }

    fn write_tail_buffered(
        &self,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let inode = self.inodes.get(ino)?;
        let fd = inode.file.reopen(self.proc_fd(), libc::O_WRONLY)?;
        Self::write_from(std::os::fd::AsFd::as_fd(&fd), args.offset, data)
    }

    /// READ with the pool on a tokio runtime: `RWF_NOWAIT` inline into the
    /// reply, the rest (if the page cache doesn't have it) on the pool.
    /// Reads what the page cache holds of `size` bytes at `offset`
    /// straight into the reply, without blocking (`preadv2(RWF_NOWAIT)`):
    /// `Ok(None)` when the read is complete (or reached the end of the
    /// file), `Ok(Some(done))` when the rest (after `done` bytes) needs a
    /// read that may block.
    fn read_nowait(
        &self,
        h: &Handle,
        offset: u64,
        size: usize,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<Option<usize>> {
        let mut done = 0usize;
        let mut missed = false;
        while done < size && !h.no_nowait.load(Ordering::Relaxed) {
            let dst = &mut out.spare()[..size - done];
            match crate::sys::preadv2_nowait(h.fd(), dst, offset + done as u64) {
                Ok(0) => break,
                Ok(n) => {
                    out.commit(n);
                    done += n;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => {
                        missed = true;
                        break;
                    }
                    Some(libc::EOPNOTSUPP) => {
                        h.no_nowait.store(true, Ordering::Relaxed);
                        tracing::debug!(
                            nodeid = h.nodeid,
                            "the backing file has no RWF_NOWAIT: its READs may block"
                        );
                    }
                    // What was read is returned; the error comes with the next READ.
                    _ if done > 0 => break,
                    _ => return Err(e),
                },
            }
        }
        if done < size && (missed || h.no_nowait.load(Ordering::Relaxed)) {
            self.asyncs
                .counters
                .nowait_misses
                .fetch_add(1, Ordering::Relaxed);
            return Ok(Some(done));
        }
        self.asyncs
            .counters
            .nowait_hits
            .fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }

    /// A READ that would have gone to the ring, served inline because the
    /// request is alone on its thread ([`async_io::solo`]), and counted.
    fn solo_read(
        &self,
        h: &Handle,
        offset: u64,
        size: usize,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        self.asyncs
            .counters
            .solo_reads
            .fetch_add(1, Ordering::Relaxed);
        super::read_into_reply(h.fd(), offset, size, out)
    }

    /// A buffered READ served from the page cache inline where it can
    /// ([`PassthroughFs::read_nowait`]: no copy, no hand-off), the rest by
    /// `rest(handle, offset, size, out)`: the pool, or an io_uring READ.
    fn read_nowait_then<'a, F, Fut>(
        &'a self,
        h: Arc<Handle>,
        offset: u64,
        size: usize,
        out: &'a mut dyn ZeroCopyWriter,
        rest: F,
    ) -> FsFuture<'a, ()>
    where
        F: FnOnce(Arc<Handle>, u64, usize, &'a mut dyn ZeroCopyWriter) -> Fut,
        Fut: std::future::Future<Output = io::Result<()>> + 'a,
    {
        match self.read_nowait(&h, offset, size, out) {
            Ok(None) => FsFuture::ready(Ok(())),
            Ok(Some(done)) => FsFuture::boxed(rest(h, offset + done as u64, size - done, out)),
            Err(e) => FsFuture::ready(Err(e)),
        }
    }
}

/// The rest of a buffered READ that missed the page cache on the io_uring
/// runtime: inline if the request is alone on its thread (`solo`), else an
/// io_uring READ.
async fn ring_or_solo_read(
    fs: &PassthroughFs,
    solo: bool,
    h: Arc<Handle>,
    offset: u64,
    size: usize,
    out: &mut dyn ZeroCopyWriter,
) -> io::Result<()> {
    if solo {
        return fs.solo_read(&h, offset, size, out);
    }
    uring_read(fs, h, offset, size, out).await
}

/// Reads `size` bytes at `offset` on a pool thread into its own buffer,
/// then copies them into the reply.
async fn pool_read(
    p: Pooled<'_>,
    h: Arc<Handle>,
    offset: u64,
    size: usize,
    out: &mut dyn ZeroCopyWriter,
) -> io::Result<()> {
    let mut buf = OwnedBuf::new(size)?;
    let fs = p.fs;
    fs.asyncs
        .counters
        .pool_reads
        .fetch_add(1, Ordering::Relaxed);
    let (buf, n) = p
        .pool
        .run(move || {
            fs.creds.root();
            let n = read_full(h.fd(), buf.full_mut(), offset)?;
            Ok((buf, n))
        })
        .await?;
    out.write_all(&buf.full()[..n])
}

/// Writes the request's data on a pool thread from a copy of it.
async fn pool_write(
    p: Pooled<'_>,
    h: Arc<Handle>,
    ino: u64,
    args: WriteArgs,
    data: &mut dyn ZeroCopyReader,
) -> io::Result<usize> {
    let len = data.remaining();
    let mut buf = OwnedBuf::new(len)?;
    buf.full_mut()[..len].copy_from_slice(&data.unconsumed()[..len]);
    let fs = p.fs;
    fs.asyncs
        .counters
        .pool_writes
        .fetch_add(1, Ordering::Relaxed);
    let n = p
        .pool
        .run(move || {
            let mut src = SliceReader::new(&buf.full()[..len]);
            fs.write_handle(&h, ino, &args, &mut src)
        })
        .await?;
    data.consume(n);
    Ok(n)
}

/// READ on the io_uring runtime: io_uring READs of the handle's descriptor
/// into an owned buffer, then one copy into the reply.
async fn uring_read(
    fs: &PassthroughFs,
    h: Arc<Handle>,
    offset: u64,
    size: usize,
    out: &mut dyn ZeroCopyWriter,
) -> io::Result<()> {
    fs.asyncs
        .counters
        .uring_reads
        .fetch_add(1, Ordering::Relaxed);
    let file = async_io::File::from(h.shared_fd().clone());
    let buf = OwnedBuf::new(size)?;
    let (r, buf) = file.read_exact_at(buf, offset).await;
    let n = buf.bytes_init();
    match r {
        Ok(()) => {}
        // End of file: what is there.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
        // What was read is returned; the error comes with the next READ.
        Err(_) if n > 0 => {}
        Err(e) => return Err(e),
    }
    out.write_all(&buf[..n])
}

/// WRITE on the io_uring runtime: one io_uring WRITE from a copy of the
/// request's data (a short count is returned as is, as `pwrite` would).
async fn uring_write(
    fs: &PassthroughFs,
    h: Arc<Handle>,
    ino: u64,
    args: &WriteArgs,
    data: &mut dyn ZeroCopyReader,
) -> io::Result<usize> {
    let len = data.remaining();
    if len == 0 {
        return Ok(0);
    }
    let mut buf = OwnedBuf::new(len)?;
    buf.full_mut()[..len].copy_from_slice(&data.unconsumed()[..len]);
    buf.len = len;
    fs.asyncs
        .counters
        .uring_writes
        .fetch_add(1, Ordering::Relaxed);
    let file = async_io::File::from(h.shared_fd().clone());
    let (r, _buf) = file.write_at(buf, args.offset).await;
    let n = match r {
        Ok(n) => {
            data.consume(n);
            n
        }
        Err(e) if PassthroughFs::direct_tail(&e, &h, args) => {
            fs.write_tail_buffered(ino, args, data)?
        }
        Err(e) => return Err(e),
    };
    if args.kill_suidgid() && fs.killpriv_v2() {
        fs.kill_suidgid_fd(ino, h.fd())?;
    }
    Ok(n)
}

/// Fills `buf` from `fd` at `offset` with `pread` until it is full or the
/// file ends; an error after some bytes returns those.
fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match fuse_server::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Size classes of recycled buffers: 4 KiB to 16 MiB, powers of two.
const MIN_CLASS: u32 = 12;
const CLASSES: usize = 13;

/// Recycled buffers, per size class (a buffer is a private mapping of its
/// own: making and dropping one per request would cost two system calls
/// and page faults).
static BUF_CACHE: [Mutex<Vec<fuse_server::AlignedBuf>>; CLASSES] =
    [const { Mutex::new(Vec::new()) }; CLASSES];

fn class_of(size: usize) -> Option<usize> {
    let c = size
        .max(1 << MIN_CLASS)
        .checked_next_power_of_two()?
        .trailing_zeros();
    let i = (c - MIN_CLASS) as usize;
    (i < CLASSES).then_some(i)
}

/// How many buffers of class `i` are kept: 16 small ones, 4 large ones.
fn class_keep(i: usize) -> usize {
    if i <= 4 {
        16
    } else {
        4
    }
}

/// An owned, page-aligned buffer for IO that may outlive a request's
/// future (an io_uring operation, a pool job): usable as an
/// `async_io::IoBufMut` whose capacity is the size asked for.
pub(crate) struct OwnedBuf {
    buf: Option<fuse_server::AlignedBuf>,
    /// The capacity asked for (the mapping may be larger).
    cap: usize,
    /// Initialised bytes (what a write sends, what a read filled).
    len: usize,
}

impl OwnedBuf {
    /// A buffer of `size` bytes, recycled or new; `ENOMEM` if no memory.
    pub(crate) fn new(size: usize) -> io::Result<Self> {
        let recycled = class_of(size)
            .and_then(|i| BUF_CACHE[i].lock().unwrap_or_else(|e| e.into_inner()).pop());
        let buf = match recycled {
            Some(b) => b,
            None => {
                let len = match class_of(size) {
                    Some(i) => 1usize << (i as u32 + MIN_CLASS),
                    None => size,
                };
                fuse_server::AlignedBuf::new(len)?
            }
        };
        Ok(Self {
            buf: Some(buf),
            cap: size,
            len: 0,
        })
    }

    /// All `cap` bytes.
    pub(crate) fn full(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[..self.cap],
            None => &[],
        }
    }

    /// All `cap` bytes, writable.
    pub(crate) fn full_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => &mut b[..self.cap],
            None => &mut [],
        }
    }
}

impl std::ops::Deref for OwnedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.full()[..self.len]
    }
}

impl Drop for OwnedBuf {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        if let Some(i) =
            class_of(buf.len()).filter(|&i| 1usize << (i as u32 + MIN_CLASS) == buf.len())
        {
            let mut cache = BUF_CACHE[i].lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() < class_keep(i) {
                cache.push(buf);
            }
        }
    }
}

// SAFETY: the memory is a mapping owned by the `AlignedBuf`, which doesn't
// move when the value moves; `len` bytes from its start are initialised
// (the whole mapping is: zeroed at creation).
unsafe impl IoBuf for OwnedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.full().as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len
    }
}

// SAFETY: `cap` bytes of the mapping are writable, at a stable address.
unsafe impl IoBufMut for OwnedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.full_mut().as_mut_ptr()
    }
    fn bytes_total(&self) -> usize {
        self.cap
    }
    unsafe fn set_init(&mut self, n: usize) {
        self.len = n.min(self.cap);
    }
}

/// What a pooled LOOKUP, OPEN or CREATE hands the kernel, held until the
/// request claims it.
enum Unclaimed {
    Entry(Entry),
    Opened { ino: u64, opened: Opened },
    Created { entry: Entry, opened: Opened },
}

/// A pooled LOOKUP's, OPEN's or CREATE's result in a guard: if the request
/// is dropped before it takes the result (nobody will ever send it to the
/// kernel), dropping the guard forgets the lookup reference and releases
/// the handle.
struct Claim {
    fs: Arc<PassthroughFs>,
    ctx: Context,
    what: Option<Unclaimed>,
}

impl Claim {
    fn new(fs: &Arc<PassthroughFs>, ctx: Context, what: Unclaimed) -> Self {
        Self {
            fs: fs.clone(),
            ctx,
            what: Some(what),
        }
    }

    fn take(mut self) -> Unclaimed {
        self.what.take().expect("a claim is taken once")
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some(what) = self.what.take() else { return };
        let fs = &*self.fs;
        let release = |ino: u64, opened: &Opened| {
            if opened.fh != 0 {
                let args = ReleaseArgs {
                    fh: opened.fh,
                    ..ReleaseArgs::default()
                };
                if let Err(e) = FileSystem::release(fs, &self.ctx, ino, &args) {
                    tracing::debug!(fh = opened.fh, "releasing an unclaimed handle: {e}");
                }
            }
        };
        match what {
            Unclaimed::Entry(entry) => FileSystem::forget(fs, &self.ctx, entry.nodeid, 1),
            Unclaimed::Opened { ino, opened } => release(ino, &opened),
            Unclaimed::Created { entry, opened } => {
                release(entry.nodeid, &opened);
                FileSystem::forget(fs, &self.ctx, entry.nodeid, 1);
            }
        }
        fs.asyncs.counters.undone.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            unique = self.ctx.unique,
            "undid the result of a dropped request"
        );
    }
}

/// Runs a synchronous method on the pool (with the file system's `Arc`).
fn on_pool<T: Send + 'static>(
    p: Pooled<'_>,
    f: impl FnOnce(&Arc<PassthroughFs>) -> io::Result<T> + Send + 'static,
) -> PoolFuture<T> {
    let fs = p.fs;
    p.pool.run(move || f(&fs))
}

impl AsyncFileSystem for PassthroughFs {
    /// Every operation not written out below is the synchronous one,
    /// returned ready. LSEEK among them, inline on every runtime: it takes
    /// the handle table's read lock and (for a directory) the stream's
    /// lock, never anything a pooled READ or WRITE of the same handle
    /// holds, so it never waits for one; it drops a directory's cached
    /// position and cookie.
    fn sync_fs(&self) -> Option<&dyn FileSystem> {
        Some(self)
    }

    fn lookup<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, Entry> {
        let Some(p) = self.pooled_if_blocking() else {
            return FsFuture::ready(FileSystem::lookup(self, ctx, parent, name));
        };
        let ctx = *ctx;
        let name = CString::from(name);
        let job = on_pool(p, move |fs| {
            let entry = FileSystem::lookup(&**fs, &ctx, parent, &name)?;
            Ok(Claim::new(fs, ctx, Unclaimed::Entry(entry)))
        });
        FsFuture::boxed(async move {
            match job.await?.take() {
                Unclaimed::Entry(entry) => Ok(entry),
                _ => Err(errno(libc::EIO)),
            }
        })
    }

    fn open<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a OpenArgs) -> FsFuture<'a, Opened> {
        let Some(p) = self.pooled_if_blocking().filter(|_| !self.no_open()) else {
            return FsFuture::ready(FileSystem::open(self, ctx, ino, args));
        };
        let ctx = *ctx;
        let args = *args;
        let job = on_pool(p, move |fs| {
            let opened = FileSystem::open(&**fs, &ctx, ino, &args)?;
            Ok(Claim::new(fs, ctx, Unclaimed::Opened { ino, opened }))
        });
        FsFuture::boxed(async move {
            match job.await?.take() {
                Unclaimed::Opened { opened, .. } => Ok(opened),
                _ => Err(errno(libc::EIO)),
            }
        })
    }

    fn read<'a>(
        &'a self,
        _ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn ZeroCopyWriter,
    ) -> FsFuture<'a, ()> {
        self.creds.root();
        let h = match self.handle(ino, args.fh) {
            Ok(h) => h,
            Err(e) => return FsFuture::ready(Err(e)),
        };
        let size = (args.size as usize).min(out.available());
        if size == 0 {
            return FsFuture::ready(Ok(()));
        }
        if out.is_zero_copy() {
            // The transport reads into the kernel's pages with a
            // fixed-buffer io_uring READ on its own ring and waits for it:
            // no copy and no hand-off (which would need one).
            return FsFuture::ready(super::read_into_reply(h.fd(), args.offset, size, out));
        }
        let direct = h.flags & libc::O_DIRECT != 0;
        let kind = RuntimeType::current();
        if let Some(p) = self.pooled() {
            if direct {
                return FsFuture::boxed(pool_read(p, h, args.offset, size, out));
            }
            if kind.file_io_blocks() {
                return self.read_nowait_then(h, args.offset, size, out, |h, at, n, out| {
                    pool_read(p, h, at, n, out)
                });
            }
        }
        match kind {
            // Nothing else waits on this thread (`async_io::solo`): one
            // `pread` costs less than the ring's round trip, and blocks no
            // other request.
            RuntimeType::IoUring if direct && async_io::solo() => {
                FsFuture::ready(self.solo_read(&h, args.offset, size, out))
            }
            RuntimeType::IoUring if direct => {
                FsFuture::boxed(uring_read(self, h, args.offset, size, out))
            }
            // A page cache miss goes to the ring, unless the request is
            // alone on its thread: then one `pread` that waits for the
            // disk blocks nothing else, and saves the ring's hand-off
            // (a buffered io_uring READ that misses runs on one of the
            // kernel's worker threads).
            RuntimeType::IoUring => {
                let solo = async_io::solo();
                self.read_nowait_then(h, args.offset, size, out, move |h, at, n, out| {
                    ring_or_solo_read(self, solo, h, at, n, out)
                })
            }
            RuntimeType::Tokio => {
                FsFuture::ready(super::read_into_reply(h.fd(), args.offset, size, out))
            }
        }
    }

    fn write<'a>(
        &'a self,
        _ctx: &'a Context,
        ino: u64,
        args: &'a WriteArgs,
        data: &'a mut dyn ZeroCopyReader,
    ) -> FsFuture<'a, usize> {
        self.creds.root();
        let h = match self.handle(ino, args.fh) {
            Ok(h) => h,
            Err(e) => return FsFuture::ready(Err(e)),
        };
        if data.is_zero_copy() {
            // As for READ: a fixed-buffer io_uring WRITE from the kernel's
            // pages, waited for by the transport.
            return FsFuture::ready(self.write_handle(&h, ino, args, data));
        }
        let direct = h.flags & libc::O_DIRECT != 0;
        let killpriv = args.kill_suidgid() && self.killpriv_v2();
        if killpriv {
            self.asyncs
                .counters
                .kill_suidgid_writes
                .fetch_add(1, Ordering::Relaxed);
        }
        let kind = RuntimeType::current();
        if let Some(p) = self.pooled() {
            if direct || killpriv || kind.file_io_blocks() {
                return FsFuture::boxed(pool_write(p, h, ino, *args, data));
            }
        }
        match kind {
            // A buffered write lands in the page cache: inline, as on
            // tokio, it costs one pwrite (an io_uring WRITE costs a copy
            // and a ring round trip, and the kernel may hand it to a
            // worker thread of its own anyway).
            // An O_DIRECT write alone on its thread (`async_io::solo`):
            // inline, as for READ.
            RuntimeType::IoUring if direct && !killpriv && async_io::solo() => {
                self.asyncs
                    .counters
                    .solo_writes
                    .fetch_add(1, Ordering::Relaxed);
                FsFuture::ready(self.write_handle(&h, ino, args, data))
            }
            RuntimeType::IoUring if direct || killpriv => {
                FsFuture::boxed(uring_write(self, h, ino, args, data))
            }
            RuntimeType::IoUring | RuntimeType::Tokio => {
                FsFuture::ready(self.write_handle(&h, ino, args, data))
            }
        }
    }

    fn fsync<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FsyncArgs) -> FsFuture<'a, ()> {
        let Some(p) = self.pooled_if_blocking() else {
            return FsFuture::ready(FileSystem::fsync(self, ctx, ino, args));
        };
        let (ctx, args) = (*ctx, *args);
        FsFuture::boxed(on_pool(p, move |fs| {
            FileSystem::fsync(&**fs, &ctx, ino, &args)
        }))
    }

    fn fsyncdir<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FsyncArgs) -> FsFuture<'a, ()> {
        let Some(p) = self.pooled_if_blocking() else {
            return FsFuture::ready(FileSystem::fsyncdir(self, ctx, ino, args));
        };
        let (ctx, args) = (*ctx, *args);
        FsFuture::boxed(on_pool(p, move |fs| {
            FileSystem::fsyncdir(&**fs, &ctx, ino, &args)
        }))
    }

    fn setlk<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a LockArgs,
        sleep: bool,
    ) -> FsFuture<'a, ()> {
        if !sleep {
            return FsFuture::ready(FileSystem::setlk(self, ctx, ino, args, sleep));
        }
        // A lock wait must not hold the serving thread (the request that
        // ends it, the holder's unlock, comes to the same thread) nor a
        // pool thread (any number of clients may wait): a lock that is
        // free is taken here, one that is held is waited for on a thread
        // of its own.
        self.creds.root();
        let op = match self.lock_op(ino, args) {
            Ok(Some(op)) => op,
            Ok(None) => return FsFuture::ready(Ok(())),
            Err(e) => return FsFuture::ready(Err(e)),
        };
        match op.try_now() {
            Ok(true) => FsFuture::ready(Ok(())),
            Ok(false) if op.is_unlock() => FsFuture::ready(Err(errno(libc::EAGAIN))),
            Ok(false) => FsFuture::boxed(crate::locks::wait_on_own_thread(
                self.waits(),
                ctx.unique,
                ctx.pid,
                op,
            )),
            Err(e) => FsFuture::ready(Err(e)),
        }
    }

    fn create<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a CreateArgs,
    ) -> FsFuture<'a, (Entry, Opened)> {
        let Some(p) = self.pooled_if_blocking() else {
            return FsFuture::ready(FileSystem::create(self, ctx, parent, name, args));
        };
        let ctx = *ctx;
        let args = *args;
        let name = CString::from(name);
        let job = on_pool(p, move |fs| {
            let (entry, opened) = FileSystem::create(&**fs, &ctx, parent, &name, &args)?;
            Ok(Claim::new(fs, ctx, Unclaimed::Created { entry, opened }))
        });
        FsFuture::boxed(async move {
            match job.await?.take() {
                Unclaimed::Created { entry, opened } => Ok((entry, opened)),
                _ => Err(errno(libc::EIO)),
            }
        })
    }

    fn fallocate<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a FallocateArgs,
    ) -> FsFuture<'a, ()> {
        let Some(p) = self.pooled_if_blocking() else {
            return FsFuture::ready(FileSystem::fallocate(self, ctx, ino, args));
        };
        let (ctx, args) = (*ctx, *args);
        FsFuture::boxed(on_pool(p, move |fs| {
            FileSystem::fallocate(&**fs, &ctx, ino, &args)
        }))
    }

    fn copy_file_range<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a CopyFileRangeArgs,
    ) -> FsFuture<'a, u64> {
        let Some(p) = self.pooled_if_blocking() else {
            return FsFuture::ready(FileSystem::copy_file_range(self, ctx, ino, args));
        };
        let (ctx, args) = (*ctx, *args);
        FsFuture::boxed(on_pool(p, move |fs| {
            FileSystem::copy_file_range(&**fs, &ctx, ino, &args)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffers_are_page_aligned_recycled_and_enomem_when_too_big() {
        let mut b = OwnedBuf::new(10_000).unwrap();
        let at = b.stable_mut_ptr() as usize;
        assert_eq!(at % 4096, 0);
        assert_eq!((b.bytes_total(), b.bytes_init(), b.len()), (10_000, 0, 0));
        b.full_mut()[..3].copy_from_slice(b"abc");
        // SAFETY: 3 bytes were written.
        unsafe { b.set_init(3) };
        assert_eq!(&b[..], b"abc");
        drop(b);
        // The same size class comes back from the cache.
        let b = OwnedBuf::new(9_000).unwrap();
        assert_eq!(b.stable_ptr() as usize, at);
        assert_eq!(b.bytes_total(), 9_000);
        for size in [usize::MAX / 2, 1 << 44] {
            let e = OwnedBuf::new(size).err().expect("no memory for that");
            assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{size}");
        }
    }
}
