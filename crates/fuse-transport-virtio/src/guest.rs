//! Guest memory as the transport's memory: a descriptor chain's buffers
//! resolved to host addresses once, and the reader and writer that move
//! file data straight between them and a backing file (`preadv` /
//! `pwritev`, one call per up to [`IOV_MAX`] buffers).
//!
//! The guest may write its buffers while the daemon reads them: bytes the
//! server parses are copied out first ([`Segments::copy_out`]) and parsed
//! from the copy, never from guest memory; file data is only handed to
//! the kernel (`preadv`/`pwritev`), which copies it once.

use fuse_server::io::{clamped_transfer, AlignedBuf, ZeroCopyReader, ZeroCopyWriter};
use std::cell::OnceCell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// The most buffers one `preadv`/`pwritev` takes (Linux's `UIO_MAXIOV`).
pub const IOV_MAX: usize = 1024;

/// One buffer of a descriptor chain, at its host address.
#[derive(Debug, Clone, Copy)]
struct Segment {
    ptr: *mut u8,
    len: usize,
}

/// The readable or the writable buffers of one descriptor chain, in chain
/// order, as host memory.
///
/// The addresses stay valid while the guest memory mapping they were
/// resolved in is alive: the owner keeps that mapping (a
/// `GuestMemoryLoadGuard`) for as long as it keeps the segments.
#[derive(Debug, Default)]
pub struct Segments {
    segs: Vec<Segment>,
    total: usize,
}

// SAFETY: the segments are plain addresses of guest memory, which is
// shared with the guest anyway; every access goes through the methods
// below, which copy or hand the addresses to the kernel.
unsafe impl Send for Segments {}
// SAFETY: as for `Send`: shared access only reads the addresses.
unsafe impl Sync for Segments {}

/// A descriptor points outside guest memory, or the chain is longer than
/// the address space.
#[derive(Debug, thiserror::Error)]
#[error("descriptor at guest address {addr:#x} ({len} bytes) is outside guest memory")]
pub struct BadDescriptor {
    /// The guest address.
    pub addr: u64,
    /// The descriptor's length.
    pub len: u32,
}

impl Segments {
    /// No buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties the list, keeping its allocation.
    pub fn clear(&mut self) {
        self.segs.clear();
        self.total = 0;
    }

    /// Appends the buffer of `len` bytes at guest address `addr`, split
    /// where it crosses guest memory regions.
    pub fn push(
        &mut self,
        mem: &GuestMemoryMmap,
        addr: GuestAddress,
        len: u32,
    ) -> Result<(), BadDescriptor> {
        let bad = || BadDescriptor { addr: addr.0, len };
        if len == 0 {
            return Ok(());
        }
        let mut got = 0usize;
        for slice in GuestMemoryBackend::get_slices(mem, addr, len as usize) {
            let slice = slice.map_err(|_| bad())?;
            got += slice.len();
            self.segs.push(Segment {
                ptr: slice.ptr_guard_mut().as_ptr(),
                len: slice.len(),
            });
        }
        if got != len as usize {
            return Err(bad());
        }
        self.total = self.total.checked_add(got).ok_or_else(bad)?;
        Ok(())
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.total
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Calls `f` with each piece of `[offset, offset + len)` (clipped to
    /// the segments) as a host pointer and length, in order.
    fn for_each(
        &self,
        mut offset: usize,
        mut len: usize,
        mut f: impl FnMut(*mut u8, usize) -> bool,
    ) {
        for seg in &self.segs {
            if len == 0 {
                return;
            }
            if offset >= seg.len {
                offset -= seg.len;
                continue;
            }
            let n = (seg.len - offset).min(len);
            // SAFETY: `offset < seg.len`, so the pointer stays inside the segment.
            if !f(unsafe { seg.ptr.add(offset) }, n) {
                return;
            }
            offset = 0;
            len -= n;
        }
    }

    /// Copies bytes from offset `offset` into `dst`; returns how many
    /// (fewer when the segments end first).
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> usize {
        let mut done = 0;
        self.for_each(offset, dst.len(), |ptr, n| {
            // SAFETY: `ptr` has `n` bytes of guest memory (see `for_each`);
            // `dst[done..done + n]` is in bounds since the pieces add up to
            // at most `dst.len()`. Guest memory never overlaps our buffers.
            unsafe { copy_volatile(ptr, dst[done..].as_mut_ptr(), n) };
            done += n;
            true
        });
        done
    }

    /// Copies `src` to offset `offset`; returns how many bytes fit.
    pub fn copy_in(&self, offset: usize, src: &[u8]) -> usize {
        let mut done = 0;
        self.for_each(offset, src.len(), |ptr, n| {
            // SAFETY: as in `copy_out`, the other way round.
            unsafe { copy_volatile(src[done..].as_ptr(), ptr, n) };
            done += n;
            true
        });
        done
    }

    /// The `iovec`s of `[offset, offset + len)`, at most [`IOV_MAX`] of
    /// them, into `out` (cleared first).
    fn iovecs(&self, offset: usize, len: usize, out: &mut Vec<libc::iovec>) {
        out.clear();
        self.for_each(offset, len, |ptr, n| {
            out.push(libc::iovec {
                iov_base: ptr.cast(),
                iov_len: n,
            });
            out.len() < IOV_MAX
        });
    }
}

/// Copies `n` bytes one way between guest memory and ours. Guest memory
/// may change under us (the guest owns it), so it is copied with volatile
/// accesses: the compiler may assume nothing about it.
///
/// # Safety
///
/// `src` readable and `dst` writable for `n` bytes, not overlapping.
unsafe fn copy_volatile(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract; the slices are transient and the
    // memory is only read/written through vm-memory's volatile copy.
    unsafe {
        let slice = vm_memory::VolatileSlice::new(src as *mut u8, n);
        let dst = std::slice::from_raw_parts_mut(dst, n);
        slice.copy_to(dst);
    }
}

/// `preadv(2)`/`pwritev(2)` on `fd` at `offset`, retried on EINTR.
fn vectored(
    fd: BorrowedFd<'_>,
    iov: &[libc::iovec],
    offset: u64,
    write: bool,
) -> io::Result<usize> {
    // SAFETY: each iovec points at guest memory that stays mapped for the
    // call (see `Segments`); the kernel checks the addresses.
    unsafe { fuse_server::sys::pvectored(fd, iov, offset, write) }
}

/// `fd` was opened with `O_DIRECT` (whose transfers need aligned memory).
fn is_direct(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

/// Guest memory is page aligned but a guest's buffer within it need not
/// be: an `O_DIRECT` backing file refuses such memory with `EINVAL`, and
/// the transfer then goes through an aligned buffer of ours.
fn refused_alignment(e: &io::Error, fd: BorrowedFd<'_>) -> bool {
    e.raw_os_error() == Some(libc::EINVAL) && is_direct(fd)
}

/// Moves `span` (offset, bytes) of `segs` to the file at `offset`
/// (`to_file`) or from it, and counts it in `stats`: vectored straight on
/// guest memory (`iov` is the caller's reusable iovec array), or through an
/// aligned buffer of ours where the file refuses the guest's alignment
/// (`O_DIRECT`).
fn move_data(
    segs: &Segments,
    iov: &mut Vec<libc::iovec>,
    stats: &mut DataStats,
    span: (usize, usize),
    fd: BorrowedFd<'_>,
    offset: u64,
    to_file: bool,
) -> io::Result<usize> {
    let (at, count) = span;
    segs.iovecs(at, count, iov);
    match vectored(fd, iov, offset, to_file) {
        Ok(n) => {
            let n = n.min(count);
            stats.vectored(n, iov.len());
            Ok(n)
        }
        Err(e) if refused_alignment(&e, fd) => {
            let mut buf = AlignedBuf::new(count)?;
            let n = if to_file {
                let got = segs.copy_out(at, &mut buf[..count]);
                fuse_server::io::pwrite(fd, &buf[..got], offset)?
            } else {
                let n = fuse_server::io::pread(fd, &mut buf[..count], offset)?;
                segs.copy_in(at, &buf[..n]);
                n
            };
            stats.bounced(n);
            Ok(n)
        }
        Err(e) => Err(e),
    }
}

/// What a reader or writer did: how the data moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataStats {
    /// Bytes moved.
    pub bytes: u64,
    /// `preadv`/`pwritev` calls straight on guest memory.
    pub calls: u32,
    /// The most guest buffers one such call took.
    pub buffers: u32,
    /// Transfers that went through a buffer of the daemon's (an `O_DIRECT`
    /// file refusing the guest's alignment, or a file system that used the
    /// memory methods).
    pub bounced: u32,
}

impl DataStats {
    fn vectored(&mut self, bytes: usize, buffers: usize) {
        self.bytes += bytes as u64;
        self.calls += 1;
        self.buffers = self.buffers.max(buffers as u32);
    }

    fn bounced(&mut self, bytes: usize) {
        self.bytes += bytes as u64;
        self.bounced += 1;
    }
}

/// A WRITE's data: the readable buffers of a chain after the request's
/// headers, written to the backing file with `pwritev` straight from
/// guest memory.
pub struct GuestReader<'a> {
    segs: &'a Segments,
    start: usize,
    pos: usize,
    end: usize,
    iov: Vec<libc::iovec>,
    stats: DataStats,
    /// A copy of the whole data (`start..end`), made on the first
    /// `unconsumed`, for a file system that writes the bytes itself.
    bounce: OnceCell<Vec<u8>>,
}

// SAFETY: the iovecs point at guest memory (see `Segments`); the reader is
// used by one thread at a time.
unsafe impl Send for GuestReader<'_> {}

impl<'a> GuestReader<'a> {
    /// The bytes `[start, end)` of `segs` (clipped to them).
    pub fn new(segs: &'a Segments, start: usize, end: usize) -> Self {
        let end = end.min(segs.len());
        let start = start.min(end);
        Self {
            segs,
            start,
            pos: start,
            end,
            iov: Vec::new(),
            stats: DataStats::default(),
            bounce: OnceCell::new(),
        }
    }

    /// How the data moved so far.
    pub fn stats(&self) -> DataStats {
        self.stats
    }
}

impl ZeroCopyReader for GuestReader<'_> {
    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn read_to_file(&mut self, fd: BorrowedFd<'_>, offset: u64, count: usize) -> io::Result<usize> {
        clamped_transfer(count, self.remaining(), |count| {
            let n = move_data(
                self.segs,
                &mut self.iov,
                &mut self.stats,
                (self.pos, count),
                fd,
                offset,
                true,
            )?;
            self.pos += n;
            Ok(n)
        })
    }

    fn unconsumed(&self) -> &[u8] {
        let all = self.bounce.get_or_init(|| {
            let mut v = vec![0u8; self.end - self.start];
            let n = self.segs.copy_out(self.start, &mut v);
            v.truncate(n);
            v
        });
        all.get(self.pos - self.start..).unwrap_or(&[])
    }

    fn consume(&mut self, n: usize) {
        let n = n.min(self.remaining());
        self.pos += n;
        if n > 0 {
            self.stats.bounced(n);
        }
    }

    fn is_zero_copy(&self) -> bool {
        true
    }
}

/// A READ's destination: the writable buffers of a chain after the
/// `fuse_out_header`, filled from the backing file with `preadv` straight
/// into guest memory.
pub struct GuestWriter<'a> {
    segs: &'a Segments,
    start: usize,
    capacity: usize,
    written: usize,
    iov: Vec<libc::iovec>,
    stats: DataStats,
    /// For `spare`/`commit`: the file system fills this, `commit` copies
    /// it to the guest.
    bounce: Vec<u8>,
}

// SAFETY: as for `GuestReader`.
unsafe impl Send for GuestWriter<'_> {}

impl<'a> GuestWriter<'a> {
    /// Writes into `segs` from offset `start`, at most `limit` bytes.
    pub fn new(segs: &'a Segments, start: usize, limit: usize) -> Self {
        let start = start.min(segs.len());
        Self {
            segs,
            start,
            capacity: (segs.len() - start).min(limit),
            written: 0,
            iov: Vec::new(),
            stats: DataStats::default(),
            bounce: Vec::new(),
        }
    }

    /// How the data moved so far.
    pub fn stats(&self) -> DataStats {
        self.stats
    }
}

impl ZeroCopyWriter for GuestWriter<'_> {
    fn available(&self) -> usize {
        self.capacity - self.written
    }

    fn written(&self) -> usize {
        self.written
    }

    fn write_from_file(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        count: usize,
    ) -> io::Result<usize> {
        clamped_transfer(count, self.available(), |count| {
            let n = move_data(
                self.segs,
                &mut self.iov,
                &mut self.stats,
                (self.start + self.written, count),
                fd,
                offset,
                false,
            )?;
            self.written += n;
            Ok(n)
        })
    }

    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() > self.available() {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        self.segs.copy_in(self.start + self.written, data);
        self.written += data.len();
        self.stats.bounced(data.len());
        Ok(())
    }

    fn spare(&mut self) -> &mut [u8] {
        let n = self.available();
        self.bounce.clear();
        self.bounce.resize(n, 0);
        &mut self.bounce
    }

    fn commit(&mut self, n: usize) {
        let n = n.min(self.available()).min(self.bounce.len());
        self.segs
            .copy_in(self.start + self.written, &self.bounce[..n]);
        self.written += n;
        if n > 0 {
            self.stats.bounced(n);
        }
        self.bounce.clear();
    }

    fn is_zero_copy(&self) -> bool {
        true
    }
}
