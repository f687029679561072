//! Whole-file copy: [`copy_file`], [`copy_file_fds`], [`copy_ordered`].
//!
//! # Paths, and why
//!
//! - `copy_file_range(2)` for two regular files without `O_DIRECT`: the kernel copies
//!   page to page (or shares extents on file systems that can), no data crosses into user
//!   space. It was the fastest cached copy measured here; `cp` uses it too. On an
//!   io_uring runtime it runs on tokio's blocking pool so the ring thread keeps serving.
//!   `EXDEV`/`EINVAL`/`EOPNOTSUPP`/`ENOSYS` before the first byte fall back to the next
//!   path.
//! - The batched io_uring pipeline for `O_DIRECT` and block devices: `queue_depth` slots,
//!   each carrying one `block_size` buffer through read -> write -> next block, all slots
//!   in flight at once and out of order; every SQE of a scheduler tick goes to the kernel
//!   in one `io_uring_enter`. No registered buffers. On a tokio runtime (where file IO
//!   blocks by contract) the same pipeline runs on a private ring, blocking the thread.
//! - A `pread`/`pwrite` loop when io_uring is unavailable (or asked for).
//!
//! # Common rules
//!
//! - The source's size is taken once at the start (`st_size`, or `BLKGETSIZE64` for a
//!   block device); a source that turns out shorter ends the copy at its end of file.
//! - Sparse regular sources are copied extent by extent (`SEEK_DATA`/`SEEK_HOLE`), so the
//!   holes stay holes in a regular destination, whatever the path.
//! - A regular destination is truncated to 0 first (holes must read as zeros), optionally
//!   preallocated per extent with `fallocate` (`EOPNOTSUPP` is ignored), and truncated to
//!   the exact size at the end (an `O_DIRECT` tail is written padded to the alignment).
//! - Short reads and writes are resubmitted; the first error stops the copy, cancels the
//!   operations in flight and is returned.
//! - Nothing is synced: call [`File::sync_all`] on the destination if you need that.
//! - With `ordered`, writes reach the destination strictly in file order, one at a time
//!   (reads still run ahead), and preallocation keeps the size: a reader tailing the
//!   destination never sees a hole where data will land.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use io_uring::{opcode, types};

use crate::buf::{AlignedBuf, DIRECT_IO_ALIGN};
use crate::driver::{Driver, Op};
use crate::file::{cqe_count, File, OpenOptions};
use crate::runtime::{current_driver, uring_available};
use crate::{sys, Error};

/// Which copy path to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyMethod {
    /// Pick per case (see the module docs): `copy_file_range` for regular files without
    /// direct IO, else the batched io_uring copy, else the read/write loop.
    Auto,
    /// `copy_file_range(2)`, in the kernel.
    CopyFileRange,
    /// Deep queue of io_uring reads and writes, submitted in batches.
    Batched,
    /// A sequential `pread`/`pwrite` loop with one `block_size` buffer.
    ReadWrite,
}

impl std::fmt::Display for CopyMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CopyMethod::Auto => "auto",
            CopyMethod::CopyFileRange => "copy_file_range",
            CopyMethod::Batched => "batched",
            CopyMethod::ReadWrite => "read_write",
        })
    }
}

/// Settings for [`copy_file`]. Build with `CopyOptions::default()` and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CopyOptions {
    /// Bytes per read and write (rounded up to [`DIRECT_IO_ALIGN`] with direct IO).
    /// Default 1 MiB.
    pub block_size: usize,
    /// Blocks in flight in the batched copy (1..=1024). Default 32.
    pub queue_depth: usize,
    /// Open both files with `O_DIRECT` ([`copy_file`]), or treat the fds as direct
    /// ([`copy_file_fds`]; also detected from their status flags).
    pub direct: bool,
    /// Force a path instead of [`CopyMethod::Auto`].
    pub method: CopyMethod,
    /// Preallocate a regular destination with `fallocate` (ignored where unsupported).
    /// Default true.
    pub preallocate: bool,
    /// Keep writes in file order (see the module docs). Default false.
    pub ordered: bool,
    /// Copy only the data extents of a sparse regular source into a regular destination,
    /// leaving holes. Default true.
    pub keep_holes: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            block_size: 1 << 20,
            queue_depth: 32,
            direct: false,
            method: CopyMethod::Auto,
            preallocate: true,
            ordered: false,
            keep_holes: true,
        }
    }
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyReport {
    /// Bytes of data copied (holes skipped in a sparse copy are not counted).
    pub bytes: u64,
    /// The destination's final size.
    pub len: u64,
    /// The path that did the work (never [`CopyMethod::Auto`]).
    pub method: Option<CopyMethod>,
    /// Data extents copied (1 for a file without holes, 0 for an empty one).
    pub extents: usize,
    /// Read operations issued (syscalls or SQEs), including resubmissions.
    pub reads: u64,
    /// Write operations issued (syscalls or SQEs), including resubmissions.
    pub writes: u64,
    /// Reads or writes resubmitted after a short transfer.
    pub resubmits: u64,
    /// `io_uring_enter` calls made by the batched path.
    pub uring_enters: u64,
    /// Whether `copy_file_range` was refused and another path took over.
    pub fell_back: bool,
}

/// Test hooks: make a read fail with a real kernel error, or pretend the source is larger.
#[derive(Debug, Default, Clone)]
pub(crate) struct Fault {
    /// The batched/read-write paths read block number N (0-based) from a directory fd,
    /// which the kernel fails with `EISDIR`.
    pub fail_read_block: Option<u64>,
    /// Use this as the source size instead of the real one.
    pub size_override: Option<u64>,
}

/// Copies the file (or block device) at `src` to `dst`, creating or truncating `dst`
/// (a block device is overwritten in place). A created file gets `src`'s permission bits.
///
/// On an io_uring runtime this never blocks the thread (`copy_file_range` runs on the
/// blocking pool); on a tokio runtime it blocks the calling thread, as all file IO there.
pub async fn copy_file(
    src: impl AsRef<Path>,
    dst: impl AsRef<Path>,
    opts: &CopyOptions,
) -> Result<CopyReport, Error> {
    copy_paths(src.as_ref(), dst.as_ref(), opts, &Fault::default()).await
}

/// Like [`copy_file`] with [`CopyOptions::ordered`] set: the destination only ever grows
/// at its end, so a concurrent reader tailing it sees a prefix of the source.
pub async fn copy_ordered(
    src: impl AsRef<Path>,
    dst: impl AsRef<Path>,
    opts: &CopyOptions,
) -> Result<CopyReport, Error> {
    let mut o = opts.clone();
    o.ordered = true;
    copy_paths(src.as_ref(), dst.as_ref(), &o, &Fault::default()).await
}

/// Copies everything from the open `src` to the open `dst` (both regular files or block
/// devices; `src` readable, `dst` writable, offsets explicit, file positions untouched).
/// A regular `dst` is truncated first and ends with exactly the copied size.
pub async fn copy_file_fds(
    src: &File,
    dst: &File,
    opts: &CopyOptions,
) -> Result<CopyReport, Error> {
    copy_fds(src, dst, opts, &Fault::default()).await
}

pub(crate) async fn copy_paths(
    src: &Path,
    dst: &Path,
    opts: &CopyOptions,
    fault: &Fault,
) -> Result<CopyReport, Error> {
    let sp = src.display();
    let dp = dst.display();
    let src_meta = std::fs::metadata(src).map_err(|e| Error::io(format!("stat {sp}"), e))?;
    let dst_meta = match std::fs::metadata(dst) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(format!("stat {dp}"), e)),
    };
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if let Some(m) = &dst_meta {
        if m.dev() == src_meta.dev() && m.ino() == src_meta.ino() {
            return Err(Error::io(
                format!("copy {sp} to {dp}"),
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "source and destination are the same file",
                ),
            ));
        }
    }
    let dst_is_blk = dst_meta
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    let src_file = OpenOptions::new()
        .read(true)
        .direct(opts.direct)
        .open(src)
        .await
        .map_err(|e| Error::io(format!("open {sp}"), e))?;
    let mut oo = OpenOptions::new();
    oo.write(true).direct(opts.direct);
    if !dst_is_blk {
        oo.create(true)
            .truncate(true)
            .mode(src_meta.mode() & 0o7777);
    }
    let dst_file = oo
        .open(dst)
        .await
        .map_err(|e| Error::io(format!("open {dp}"), e))?;
    copy_fds(&src_file, &dst_file, opts, fault).await
}

/// The kind of an endpoint.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Regular,
    Block,
}

async fn kind_of(f: &File, what: &str) -> Result<(Kind, crate::file::Metadata), Error> {
    let md = f
        .metadata()
        .await
        .map_err(|e| Error::io(format!("statx {what}"), e))?;
    let kind = if md.is_file() {
        Kind::Regular
    } else if md.is_block_device() {
        Kind::Block
    } else {
        return Err(Error::io(
            format!("copy {what}"),
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or block device",
            ),
        ));
    };
    Ok((kind, md))
}

pub(crate) async fn copy_fds(
    src: &File,
    dst: &File,
    opts: &CopyOptions,
    fault: &Fault,
) -> Result<CopyReport, Error> {
    let (src_kind, src_md) = kind_of(src, "source").await?;
    let (dst_kind, dst_md) = kind_of(dst, "destination").await?;
    if src_md.dev_ino() == dst_md.dev_ino() {
        return Err(Error::io(
            "copy",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "source and destination are the same file",
            ),
        ));
    }
    let size = match fault.size_override {
        Some(s) => s,
        None if src_kind == Kind::Block => sys::block_device_size(src.as_fd())
            .map_err(|e| Error::io("BLKGETSIZE64 on the source", e))?,
        None => src_md.len(),
    };
    let dst_limit = if dst_kind == Kind::Block {
        let cap = sys::block_device_size(dst.as_fd())
            .map_err(|e| Error::io("BLKGETSIZE64 on the destination", e))?;
        if cap < size {
            return Err(Error::io(
                format!("copy {size} bytes onto a {cap}-byte block device"),
                io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        Some(cap)
    } else {
        None
    };
    let flag_direct = |f: &File| {
        sys::get_status_flags(f.as_fd())
            .map(|fl| fl & libc::O_DIRECT != 0)
            .unwrap_or(false)
    };
    let direct = opts.direct || flag_direct(src) || flag_direct(dst);
    if sys::get_status_flags(dst.as_fd()).is_ok_and(|fl| fl & libc::O_APPEND != 0) {
        // pwrite ignores the offset on an O_APPEND fd: out-of-order blocks would land in
        // the wrong place.
        return Err(Error::io(
            "copy",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the destination is open with O_APPEND",
            ),
        ));
    }
    let align = if direct { DIRECT_IO_ALIGN } else { 1 };
    let block = round_up(opts.block_size.max(1), align);
    let queue_depth = opts.queue_depth.clamp(1, 1024);

    if dst_kind == Kind::Regular {
        dst.set_len(0)
            .await
            .map_err(|e| Error::io("truncating the destination", e))?;
    }

    // Data extents of the source.
    let sparse = opts.keep_holes
        && src_kind == Kind::Regular
        && dst_kind == Kind::Regular
        && fault.size_override.is_none()
        && src_md.blocks().saturating_mul(512) < size;
    let extents = if sparse {
        data_extents(src, size, align)
            .map_err(|e| Error::io("SEEK_DATA/SEEK_HOLE on the source", e))?
    } else if size > 0 {
        vec![(0, size)]
    } else {
        Vec::new()
    };

    if opts.preallocate && dst_kind == Kind::Regular {
        let mode = if opts.ordered {
            libc::FALLOC_FL_KEEP_SIZE
        } else {
            0
        };
        for &(start, end) in &extents {
            match dst.fallocate(mode, start, end - start).await {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
                    ) =>
                {
                    tracing::debug!("fallocate unsupported on the destination: {e}");
                    break;
                }
                Err(e) => {
                    return Err(Error::io(
                        format!("fallocate {start}..{end} on the destination"),
                        e,
                    ))
                }
            }
        }
    }

    let job = Job {
        src: src.clone(),
        dst: dst.clone(),
        direct,
        align,
        block,
        queue_depth,
        ordered: opts.ordered,
        dst_limit,
        fault: fault.clone(),
        extents,
    };

    let both_regular = src_kind == Kind::Regular && dst_kind == Kind::Regular;
    let mut method = match opts.method {
        CopyMethod::Auto if both_regular && !direct => CopyMethod::CopyFileRange,
        CopyMethod::Auto if uring_available().is_ok() => CopyMethod::Batched,
        CopyMethod::Auto => CopyMethod::ReadWrite,
        m => m,
    };
    let mut report = CopyReport {
        extents: job.extents.len(),
        ..CopyReport::default()
    };
    let on_ring = current_driver();

    let mut eof = None;
    if method == CopyMethod::CopyFileRange {
        let r = match &on_ring {
            Some(_) => {
                let job2 = job.clone();
                tokio::task::spawn_blocking(move || {
                    let mut rep = CopyReport::default();
                    let r = cfr_copy(&job2, &mut rep);
                    (r, rep)
                })
                .await
                .map_err(|e| Error::io("copy_file_range task", io::Error::other(e)))?
            }
            None => {
                let mut rep = CopyReport::default();
                let r = cfr_copy(&job, &mut rep);
                (r, rep)
            }
        };
        match r {
            (Ok(e), rep) => {
                eof = e;
                report.bytes = rep.bytes;
                report.reads = rep.reads;
                report.writes = rep.writes;
                report.resubmits = rep.resubmits;
            }
            (Err(CfrError::Unsupported(e)), _) if opts.method == CopyMethod::Auto => {
                tracing::debug!("copy_file_range refused ({e}); falling back");
                report.fell_back = true;
                method = if uring_available().is_ok() {
                    CopyMethod::Batched
                } else {
                    CopyMethod::ReadWrite
                };
            }
            (Err(CfrError::Unsupported(e) | CfrError::Failed(e)), _) => return Err(e),
        }
    }
    if method == CopyMethod::Batched {
        uring_available()?;
        let (r, rep) = match on_ring {
            Some(ref driver) => {
                let before = driver.stats().enters;
                let mut engine = Engine::new(driver, &job);
                let r = std::future::poll_fn(|cx| engine.poll(cx)).await;
                let mut rep = engine.report();
                rep.uring_enters = driver.stats().enters - before;
                (r.map(|()| engine.eof), rep)
            }
            None => {
                let entries = (queue_depth as u32 * 2).next_power_of_two().clamp(8, 4096);
                let driver =
                    Rc::new(Driver::new(entries, false, false).map_err(Error::UringUnavailable)?);
                let mut engine = Engine::new(&driver, &job);
                let r = driver.block_on(std::future::poll_fn(|cx| engine.poll(cx)));
                let eof = engine.eof;
                let mut rep = engine.report();
                drop(engine); // cancels what is in flight on error
                rep.uring_enters = driver.stats().enters;
                (r.map(|()| eof), rep)
            }
        };
        eof = r?;
        report.bytes = rep.bytes;
        report.reads = rep.reads;
        report.writes = rep.writes;
        report.resubmits = rep.resubmits;
        report.uring_enters = rep.uring_enters;
    }
    if method == CopyMethod::ReadWrite {
        let r = match &on_ring {
            Some(_) => {
                let job2 = job.clone();
                tokio::task::spawn_blocking(move || {
                    let mut rep = CopyReport::default();
                    let r = rw_copy(&job2, &mut rep);
                    (r, rep)
                })
                .await
                .map_err(|e| Error::io("read/write copy task", io::Error::other(e)))?
            }
            None => {
                let mut rep = CopyReport::default();
                let r = rw_copy(&job, &mut rep);
                (r, rep)
            }
        };
        let rep = r.1;
        eof = r.0?;
        report.bytes = rep.bytes;
        report.reads = rep.reads;
        report.writes = rep.writes;
        report.resubmits = rep.resubmits;
    }
    report.method = Some(method);
    let len = eof.map_or(size, |e| e.min(size));
    report.len = len;
    if dst_kind == Kind::Regular {
        dst.set_len(len)
            .await
            .map_err(|e| Error::io(format!("truncating the destination to {len}"), e))?;
    }
    Ok(report)
}

fn round_up(x: usize, align: usize) -> usize {
    x.div_ceil(align) * align
}

/// The data extents of `src` in `[0, size)`, widened to `align` (for `O_DIRECT`).
fn data_extents(src: &File, size: u64, align: usize) -> io::Result<Vec<(u64, u64)>> {
    let fd = src.as_fd();
    let a = align as u64;
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut pos = 0;
    while pos < size {
        let start = match sys::lseek_whence(fd, pos, libc::SEEK_DATA) {
            Ok(Some(s)) => s,
            Ok(None) => break, // only a hole until the end
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // SEEK_DATA unsupported: all data.
                return Ok(vec![(0, size)]);
            }
            Err(e) => return Err(e),
        };
        if start >= size {
            break;
        }
        let end = sys::lseek_whence(fd, start, libc::SEEK_HOLE)?
            .unwrap_or(size)
            .min(size);
        let s = start / a * a;
        let e = (end.div_ceil(a) * a).min(size);
        match out.last_mut() {
            Some(last) if last.1 >= s => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
        pos = end.max(start + 1);
    }
    Ok(out)
}

/// Everything a copy path needs (cheap to clone; `File`s share their fds).
#[derive(Clone)]
struct Job {
    src: File,
    dst: File,
    direct: bool,
    align: usize,
    block: usize,
    queue_depth: usize,
    ordered: bool,
    /// A block device destination's size (padded direct writes must not pass it).
    dst_limit: Option<u64>,
    fault: Fault,
    extents: Vec<(u64, u64)>,
}

impl Job {
    /// The blocks to copy, in order: `(offset, length)`.
    fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let block = self.block as u64;
        self.extents.iter().flat_map(move |&(start, end)| {
            (0..(end - start).div_ceil(block)).map(move |i| {
                let off = start + i * block;
                (off, (end - off).min(block) as usize)
            })
        })
    }

    /// The length to write for `data` bytes at `off`: padded to the alignment with direct
    /// IO, but never past a block device's end.
    fn write_len(&self, off: u64, data: usize) -> usize {
        let mut w = round_up(data, self.align);
        if let Some(limit) = self.dst_limit {
            w = w.min(limit.saturating_sub(off) as usize).max(data);
        }
        w
    }
}

enum CfrError {
    /// Refused before any byte moved (another path may do it).
    Unsupported(Error),
    Failed(Error),
}

/// `copy_file_range` over the extents. Returns the end of file if it came early.
fn cfr_copy(job: &Job, rep: &mut CopyReport) -> Result<Option<u64>, CfrError> {
    let (src, dst) = (job.src.as_fd(), job.dst.as_fd());
    let mut first = true;
    for &(start, end) in &job.extents {
        let mut off = start;
        while off < end {
            rep.writes += 1;
            if off != start {
                rep.resubmits += 1;
            }
            match sys::copy_file_range(src, off, dst, off, (end - off) as usize) {
                Ok(0) => return Ok(Some(off)),
                Ok(n) => {
                    off += n as u64;
                    rep.bytes += n as u64;
                    first = false;
                }
                Err(e) => {
                    let err = Error::io(format!("copy_file_range at offset {off}"), e);
                    let refused = matches!(
                        err.raw_os_error(),
                        Some(libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS)
                    );
                    return Err(if first && refused {
                        CfrError::Unsupported(err)
                    } else {
                        CfrError::Failed(err)
                    });
                }
            }
        }
    }
    Ok(None)
}

/// Opens `/` as a directory: reading from it fails with `EISDIR` (the read fault hook).
fn fault_fd() -> io::Result<OwnedFd> {
    sys::open(c"/", libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// The sequential `pread`/`pwrite` loop. Returns the end of file if it came early.
fn rw_copy(job: &Job, rep: &mut CopyReport) -> Result<Option<u64>, Error> {
    let mut buf = AlignedBuf::zeroed(job.block);
    let bad = match job.fault.fail_read_block {
        Some(_) => Some(fault_fd().map_err(|e| Error::io("opening the fault fd", e))?),
        None => None,
    };
    for (idx, (off, want)) in job.blocks().enumerate() {
        let io_len = round_up(want, job.align);
        let src_fd = match (&bad, job.fault.fail_read_block) {
            (Some(b), Some(k)) if k == idx as u64 => b.as_fd(),
            _ => job.src.as_fd(),
        };
        let mut done = 0;
        let mut eof = false;
        while done < want {
            rep.reads += 1;
            if done > 0 {
                rep.resubmits += 1;
            }
            let n = sys::pread(
                src_fd,
                &mut buf.as_full_mut_slice()[done..io_len],
                off + done as u64,
            )
            .map_err(|e| {
                Error::io(
                    format!("reading the source at offset {}", off + done as u64),
                    e,
                )
            })?;
            if n == 0 {
                eof = true;
                break;
            }
            done += n;
            if job.direct && done < want && done % job.align != 0 {
                eof = true;
                break;
            }
        }
        let data = done.min(want);
        if data > 0 {
            let wlen = job.write_len(off, data);
            buf.as_full_mut_slice()[data..wlen].fill(0);
            let mut w = 0;
            while w < wlen {
                rep.writes += 1;
                if w > 0 {
                    rep.resubmits += 1;
                }
                let n = sys::pwrite(
                    job.dst.as_fd(),
                    &buf.as_full_mut_slice()[w..wlen],
                    off + w as u64,
                )
                .map_err(|e| {
                    Error::io(
                        format!("writing the destination at offset {}", off + w as u64),
                        e,
                    )
                })?;
                if n == 0 {
                    return Err(Error::io(
                        format!("writing the destination at offset {}", off + w as u64),
                        io::ErrorKind::WriteZero.into(),
                    ));
                }
                w += n;
            }
            rep.bytes += data as u64;
        }
        if eof {
            return Ok(Some(off + data as u64));
        }
    }
    Ok(None)
}

/// What an in-flight read or write owns: the fd and the block's buffer.
type RwOp = Op<(Arc<OwnedFd>, AlignedBuf)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Reading,
    /// Read complete, write not started (ordered mode: waiting for its turn).
    ReadDone,
    Writing,
}

/// One pipeline slot: a buffer carried through read -> write for one block at a time.
struct Slot {
    phase: Phase,
    op: Option<RwOp>,
    buf: Option<AlignedBuf>,
    /// Sequence number of the block (file order).
    seq: u64,
    off: u64,
    /// Bytes this block should contain.
    want: usize,
    /// Bytes read (Reading) or written (Writing) so far.
    done: usize,
    /// Bytes of data the block holds after the read.
    data: usize,
    /// Bytes to write (data padded for direct IO).
    wlen: usize,
}

/// The batched io_uring copy: see the module docs.
struct Engine<'a> {
    driver: Rc<Driver>,
    job: &'a Job,
    blocks: Box<dyn Iterator<Item = (u64, usize)> + 'a>,
    next_seq: u64,
    /// Ordered mode: the sequence number whose write goes next.
    next_write: u64,
    write_in_flight: bool,
    exhausted: bool,
    slots: Vec<Slot>,
    eof: Option<u64>,
    fault_fd: Option<Arc<OwnedFd>>,
    report: CopyReport,
}

impl<'a> Engine<'a> {
    fn new(driver: &Rc<Driver>, job: &'a Job) -> Engine<'a> {
        let fault_fd = job
            .fault
            .fail_read_block
            .and_then(|_| fault_fd().ok())
            .map(Arc::new);
        let slots = (0..job.queue_depth)
            .map(|_| Slot {
                phase: Phase::Idle,
                op: None,
                buf: None,
                seq: 0,
                off: 0,
                want: 0,
                done: 0,
                data: 0,
                wlen: 0,
            })
            .collect();
        Engine {
            driver: driver.clone(),
            job,
            blocks: Box::new(job.blocks()),
            next_seq: 0,
            next_write: 0,
            write_in_flight: false,
            exhausted: false,
            slots,
            eof: None,
            fault_fd,
            report: CopyReport::default(),
        }
    }

    fn report(&self) -> CopyReport {
        self.report.clone()
    }

    /// Drives every slot until nothing moves; `Ready` when all blocks are copied or on the
    /// first error (the caller then drops the engine, which cancels what is in flight).
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        loop {
            let mut progressed = false;
            for i in 0..self.slots.len() {
                progressed |= self.step(i, cx)?;
            }
            if self.exhausted && self.slots.iter().all(|s| s.phase == Phase::Idle) {
                return Poll::Ready(Ok(()));
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    fn next_block(&mut self) -> Option<(u64, usize)> {
        if self.exhausted {
            return None;
        }
        match self.blocks.next() {
            Some((off, len)) if self.eof.is_none_or(|e| off < e) => Some((off, len)),
            _ => {
                self.exhausted = true;
                None
            }
        }
    }

    /// Moves slot `i` forward if it can. Returns whether anything changed.
    fn step(&mut self, i: usize, cx: &mut Context<'_>) -> Result<bool, Error> {
        match self.slots[i].phase {
            Phase::Idle => {
                let Some((off, want)) = self.next_block() else {
                    return Ok(false);
                };
                let seq = self.next_seq;
                self.next_seq += 1;
                let s = &mut self.slots[i];
                s.seq = seq;
                s.off = off;
                s.want = want;
                s.done = 0;
                s.data = 0;
                if s.buf.is_none() {
                    s.buf = Some(AlignedBuf::zeroed(self.job.block));
                }
                self.submit_read(i);
                Ok(true)
            }
            Phase::Reading | Phase::Writing => {
                let s = &mut self.slots[i];
                let op = s.op.as_mut().expect("an op while reading or writing");
                let Poll::Ready((done, (_fd, buf))) = std::pin::Pin::new(op).poll(cx) else {
                    return Ok(false);
                };
                s.op = None;
                s.buf = Some(buf);
                if s.phase == Phase::Reading {
                    self.on_read(i, done.res)?;
                } else {
                    self.on_write(i, done.res)?;
                }
                Ok(true)
            }
            Phase::ReadDone => {
                let s = &self.slots[i];
                if self.job.ordered && (s.seq != self.next_write || self.write_in_flight) {
                    return Ok(false);
                }
                self.start_write(i);
                Ok(true)
            }
        }
    }

    fn submit_read(&mut self, i: usize) {
        let job = self.job;
        let s = &mut self.slots[i];
        let io_len = round_up(s.want, job.align);
        let mut buf = s.buf.take().expect("slot buffer");
        let fd = match (&self.fault_fd, job.fault.fail_read_block) {
            (Some(bad), Some(k)) if k == s.seq => bad.clone(),
            _ => job.src.fd_arc().clone(),
        };
        // SAFETY: the offset stays inside `buf`'s allocation (the full
        // slice is all of it): `done < io_len <= capacity`.
        let ptr = unsafe { buf.as_full_mut_slice().as_mut_ptr().add(s.done) };
        let sqe = opcode::Read::new(types::Fd(fd.as_raw_fd()), ptr, (io_len - s.done) as u32)
            .offset(s.off + s.done as u64)
            .build();
        // SAFETY: the SQE points into `buf`'s heap memory (`io_len - done` bytes from `done`,
        // inside its capacity) and at `fd`; the op owns both until its CQE.
        s.op = Some(unsafe { self.driver.submit(sqe, (fd, buf)) });
        s.phase = Phase::Reading;
        self.report.reads += 1;
    }

    fn on_read(&mut self, i: usize, res: i32) -> Result<(), Error> {
        let job = self.job;
        let s = &mut self.slots[i];
        let n = match cqe_count(res) {
            None => {
                self.submit_read(i);
                return Ok(());
            }
            Some(Err(e)) => {
                return Err(Error::io(
                    format!("reading the source at offset {}", s.off + s.done as u64),
                    e,
                ))
            }
            Some(Ok(n)) => n,
        };
        s.done += n;
        let complete = if s.done >= s.want {
            true
        } else if n == 0 || (job.direct && s.done % job.align != 0) {
            // End of file (an O_DIRECT read ends unaligned only there).
            let at = s.off + s.done as u64;
            self.eof = Some(self.eof.map_or(at, |e| e.min(at)));
            true
        } else {
            false
        };
        if !complete {
            self.report.resubmits += 1;
            self.submit_read(i);
            return Ok(());
        }
        let s = &mut self.slots[i];
        s.data = s.done.min(s.want);
        if let Some(e) = self.eof {
            s.data = s.data.min(e.saturating_sub(s.off) as usize);
        }
        s.phase = Phase::ReadDone;
        Ok(())
    }

    fn start_write(&mut self, i: usize) {
        let job = self.job;
        let s = &mut self.slots[i];
        if s.data == 0 {
            s.phase = Phase::Idle;
            if job.ordered {
                self.next_write += 1;
            }
            return;
        }
        s.wlen = job.write_len(s.off, s.data);
        s.done = 0;
        if s.wlen > s.data {
            let (d, w) = (s.data, s.wlen);
            s.buf.as_mut().expect("slot buffer").as_full_mut_slice()[d..w].fill(0);
        }
        self.write_in_flight = true;
        self.submit_write(i);
    }

    fn submit_write(&mut self, i: usize) {
        let s = &mut self.slots[i];
        let mut buf = s.buf.take().expect("slot buffer");
        let fd = self.job.dst.fd_arc().clone();
        // SAFETY: the offset stays inside `buf`'s allocation (the full
        // slice is all of it): `done < wlen <= capacity`.
        let ptr = unsafe { buf.as_full_mut_slice().as_mut_ptr().add(s.done) };
        let sqe = opcode::Write::new(types::Fd(fd.as_raw_fd()), ptr, (s.wlen - s.done) as u32)
            .offset(s.off + s.done as u64)
            .build();
        // SAFETY: the SQE points into `buf`'s heap memory and at `fd`, both owned by the op.
        s.op = Some(unsafe { self.driver.submit(sqe, (fd, buf)) });
        s.phase = Phase::Writing;
        self.report.writes += 1;
    }

    fn on_write(&mut self, i: usize, res: i32) -> Result<(), Error> {
        let s = &mut self.slots[i];
        let at = s.off + s.done as u64;
        let n = match cqe_count(res) {
            None => {
                self.submit_write(i);
                return Ok(());
            }
            Some(Err(e)) => {
                return Err(Error::io(
                    format!("writing the destination at offset {at}"),
                    e,
                ))
            }
            Some(Ok(0)) => {
                return Err(Error::io(
                    format!("writing the destination at offset {at}"),
                    io::ErrorKind::WriteZero.into(),
                ))
            }
            Some(Ok(n)) => n,
        };
        s.done += n;
        if s.done < s.wlen {
            self.report.resubmits += 1;
            self.submit_write(i);
            return Ok(());
        }
        self.report.bytes += s.data as u64;
        s.phase = Phase::Idle;
        self.write_in_flight = false;
        if self.job.ordered {
            self.next_write += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
