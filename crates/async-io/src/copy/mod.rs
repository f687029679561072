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
//!
//! # Where the code is
//!
//! Here: the public API and `copy_fds`, which plans a copy and picks its path. `plan`:
//! the extents, the blocks and the `Job` every path reads. `engine`: the batched io_uring
//! pipeline. `blocking`: `copy_file_range` and the read/write loop.

mod blocking;
mod engine;
mod plan;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;

use crate::buf::DIRECT_IO_ALIGN;
use crate::driver::Driver;
use crate::file::{File, OpenOptions};
use crate::runtime::{current_driver, uring_available};
use crate::{sys, Error};

use blocking::{cfr_copy, rw_copy, CfrError};
use engine::Engine;
use plan::{data_extents, round_up, Job};

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

impl CopyReport {
    /// Takes the data and operation counts of the path that did the work.
    fn take_counts(&mut self, path: &CopyReport) {
        self.bytes = path.bytes;
        self.reads = path.reads;
        self.writes = path.writes;
        self.resubmits = path.resubmits;
    }
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

/// Opens `/` as a directory: reading from it fails with `EISDIR` (the read fault hook).
fn fault_fd() -> io::Result<OwnedFd> {
    sys::open(c"/", libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// A failed read of the source at byte `at` (every copy path says it alike).
fn read_error(at: u64, e: io::Error) -> Error {
    Error::io(format!("reading the source at offset {at}"), e)
}

/// A failed (or, with [`io::ErrorKind::WriteZero`], empty) write of the
/// destination at byte `at`.
fn write_error(at: u64, e: io::Error) -> Error {
    Error::io(format!("writing the destination at offset {at}"), e)
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
        let r = run_blocking(on_ring.is_some(), &job, "copy_file_range task", cfr_copy).await?;
        match r {
            (Ok(e), rep) => {
                eof = e;
                report.take_counts(&rep);
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
        report.take_counts(&rep);
        report.uring_enters = rep.uring_enters;
    }
    if method == CopyMethod::ReadWrite {
        let (r, rep) =
            run_blocking(on_ring.is_some(), &job, "read/write copy task", rw_copy).await?;
        eof = r?;
        report.take_counts(&rep);
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

/// Runs the blocking copy path `copy` on `job`, with a fresh report of its
/// own: on tokio's blocking pool when this thread serves a ring (so that
/// the ring keeps serving), else right here. `what` names the task in the
/// error of a blocking task that didn't finish.
async fn run_blocking<T: Send + 'static>(
    on_ring: bool,
    job: &Job,
    what: &'static str,
    copy: fn(&Job, &mut CopyReport) -> T,
) -> Result<(T, CopyReport), Error> {
    let run = move |job: &Job| {
        let mut rep = CopyReport::default();
        let r = copy(job, &mut rep);
        (r, rep)
    };
    if on_ring {
        let job = job.clone();
        tokio::task::spawn_blocking(move || run(&job))
            .await
            .map_err(|e| Error::io(what, io::Error::other(e)))
    } else {
        Ok(run(job))
    }
}

#[cfg(test)]
mod tests;
