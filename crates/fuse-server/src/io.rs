//! Zero-copy data paths between a backing file and transport memory, and
//! the directory entry writers of READDIR and READDIRPLUS.
//!
//! A transport lends the server its memory: the request's bytes and the
//! reply's body. The data of a READ goes from the backing file straight
//! into the reply body ([`ZeroCopyWriter`]), the data of a WRITE from the
//! request straight into the backing file ([`ZeroCopyReader`]), so each is
//! one copy in user space.
//!
//! ## Zero copy (FUSE over io_uring, Linux 7.3)
//!
//! On an io_uring queue with zero copy, the kernel lends a READ or WRITE of
//! a file opened with [`fuse_abi::FopenFlags::IO_URING_ZERO_COPY`] as
//! pages registered in the ring's buffer table, not as bytes in transport
//! memory. The transport then offers a writer or reader whose
//! [`ZeroCopyWriter::is_zero_copy`] / [`ZeroCopyReader::is_zero_copy`] is
//! true: `write_from_file` and `read_to_file` move the data between the
//! backing file and those pages with fixed-buffer io_uring reads and
//! writes, and the daemon never maps or copies it. So a file system that
//! answers READ and WRITE by naming a descriptor and an offset gets zero
//! copy by opening its files with that flag, and nothing else. The memory
//! methods (`spare`/`commit`, `write_all`, `unconsumed`/`consume`) still
//! work on such a writer or reader, through a bounce buffer of the
//! transport's: correct, but a copy more than the ordinary path.
//!
//! ## Short-count contract
//!
//! Like `pread(2)`/`pwrite(2)`, each file transfer moves *up to* the bytes
//! asked for and returns how many it moved:
//! - a writer's `write_from_file` returns 0 only at end of file (or when
//!   `count` is 0 or the writer is full); any other short count means the
//!   caller may call again for the rest;
//! - a reader's `read_to_file` returns 0 only when `count` is 0 or the
//!   reader is empty; a short count means the file accepted fewer bytes;
//! - on error nothing is consumed from a reader and nothing is committed to
//!   a writer; bytes moved by earlier calls stay moved.

use crate::types::Entry;
use fuse_abi::{Dirent, Direntplus};
use std::io;
use std::os::fd::BorrowedFd;
use zerocopy::IntoBytes;

/// Destination of a READ reply's data: transport memory the data is read into.
pub trait ZeroCopyWriter: Send {
    /// Bytes that can still be written.
    fn available(&self) -> usize;

    /// Bytes written so far.
    fn written(&self) -> usize;

    /// Reads up to `count` bytes of `fd` at `offset` into the reply
    /// (`pread`); see the module's short-count contract.
    fn write_from_file(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        count: usize,
    ) -> io::Result<usize>;

    /// Appends `data`; fails with `ENOBUFS` (writing nothing) if it doesn't fit.
    fn write_all(&mut self, data: &[u8]) -> io::Result<()>;

    /// The unwritten memory, for a caller that fills it itself (an async
    /// read, a computed buffer); follow with [`ZeroCopyWriter::commit`].
    fn spare(&mut self) -> &mut [u8];

    /// Marks `n` bytes of [`ZeroCopyWriter::spare`] as written.
    fn commit(&mut self, n: usize);

    /// The transport moves file data itself (see the module's "Zero
    /// copy"): `write_from_file` is the path without a copy, and the
    /// memory methods go through a bounce buffer.
    fn is_zero_copy(&self) -> bool {
        false
    }
}

/// Source of a WRITE request's data: transport memory the data is written from.
pub trait ZeroCopyReader: Send {
    /// Bytes not consumed yet.
    fn remaining(&self) -> usize;

    /// Writes up to `count` bytes to `fd` at `offset` (`pwrite`); see the
    /// module's short-count contract.
    fn read_to_file(&mut self, fd: BorrowedFd<'_>, offset: u64, count: usize) -> io::Result<usize>;

    /// The unconsumed bytes, for a caller that writes them itself; follow
    /// with [`ZeroCopyReader::consume`].
    fn unconsumed(&self) -> &[u8];

    /// Marks `n` bytes as consumed.
    fn consume(&mut self, n: usize);

    /// The transport moves file data itself (see the module's "Zero
    /// copy"): `read_to_file` is the path without a copy, and
    /// `unconsumed` goes through a bounce buffer.
    fn is_zero_copy(&self) -> bool {
        false
    }
}

/// One file transfer of a [`ZeroCopyWriter::write_from_file`] or
/// [`ZeroCopyReader::read_to_file`], by the module's short-count contract:
/// `count` is cut to `left` (what the writer can still take, what the
/// reader still holds), and where nothing is left to move the answer is 0
/// at once; otherwise `transfer` moves up to the cut count and returns how
/// many bytes it moved. For the transports' writers and readers, so that
/// each of them keeps only its own way of moving the bytes.
#[inline]
pub fn clamped_transfer(
    count: usize,
    left: usize,
    transfer: impl FnOnce(usize) -> io::Result<usize>,
) -> io::Result<usize> {
    match count.min(left) {
        0 => Ok(0),
        count => transfer(count),
    }
}

/// A [`ZeroCopyWriter`] over one contiguous slice of transport memory.
#[derive(Debug)]
pub struct SliceWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceWriter<'a> {
    /// A writer that fills `buf` from its start.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, len: 0 }
    }
}

impl ZeroCopyWriter for SliceWriter<'_> {
    fn available(&self) -> usize {
        self.buf.len() - self.len
    }

    fn written(&self) -> usize {
        self.len
    }

    fn write_from_file(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        count: usize,
    ) -> io::Result<usize> {
        clamped_transfer(count, self.available(), |count| {
            let n = pread(fd, &mut self.buf[self.len..self.len + count], offset)?;
            self.len += n;
            Ok(n)
        })
    }

    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() > self.available() {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        self.buf[self.len..self.len + data.len()].copy_from_slice(data);
        self.len += data.len();
        Ok(())
    }

    fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    fn commit(&mut self, n: usize) {
        self.len = (self.len + n).min(self.buf.len());
    }
}

/// A [`ZeroCopyReader`] over one contiguous slice of transport memory.
#[derive(Debug)]
pub struct SliceReader<'a> {
    buf: &'a [u8],
}

impl<'a> SliceReader<'a> {
    /// A reader of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
}

impl ZeroCopyReader for SliceReader<'_> {
    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn read_to_file(&mut self, fd: BorrowedFd<'_>, offset: u64, count: usize) -> io::Result<usize> {
        clamped_transfer(count, self.buf.len(), |count| {
            let n = pwrite(fd, &self.buf[..count], offset)?;
            self.buf = &self.buf[n..];
            Ok(n)
        })
    }

    fn unconsumed(&self) -> &[u8] {
        self.buf
    }

    fn consume(&mut self, n: usize) {
        self.buf = &self.buf[n.min(self.buf.len())..];
    }
}

// The positioned I/O the zero-copy paths use; they live with the rest of
// the system-call plumbing.
pub use crate::sys::{pread, pwrite};

/// Where READDIR puts its entries.
pub trait DirentSink: Send {
    /// Adds an entry; returns `false` (adding nothing) when it doesn't fit,
    /// which ends the reply. `cookie` is the offset the kernel passes back
    /// to continue *after* this entry: non-zero and increasing.
    fn add(&mut self, ino: u64, cookie: u64, dtype: u32, name: &[u8]) -> bool;

    /// Number of entries added.
    fn count(&self) -> usize;
}

/// Where READDIRPLUS puts its entries.
pub trait DirentPlusSink: Send {
    /// Adds an entry with its [`Entry`]; returns `false` (adding nothing)
    /// when it doesn't fit. An entry that was not added never reaches the
    /// kernel: the caller must drop the lookup reference it took for it.
    fn add(&mut self, entry: &Entry, cookie: u64, dtype: u32, name: &[u8]) -> bool;

    /// Number of entries added.
    fn count(&self) -> usize;
}

/// Writes `fuse_dirent` / `fuse_direntplus` records into a reply body.
#[derive(Debug)]
pub struct DirentBuf<'a> {
    buf: &'a mut [u8],
    len: usize,
    count: usize,
}

impl<'a> DirentBuf<'a> {
    /// Records go into `buf` (the reply body, already limited to the size
    /// the kernel asked for).
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self {
            buf,
            len: 0,
            count: 0,
        }
    }

    /// Bytes used.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entry added yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, head: &[u8], name: &[u8]) -> bool {
        let rec = fuse_abi::rec_align(head.len() + name.len());
        if name.is_empty() || self.buf.len() - self.len < rec {
            return false;
        }
        let dst = &mut self.buf[self.len..self.len + rec];
        dst[..head.len()].copy_from_slice(head);
        dst[head.len()..head.len() + name.len()].copy_from_slice(name);
        dst[head.len() + name.len()..].fill(0);
        self.len += rec;
        self.count += 1;
        true
    }
}

/// The `fuse_dirent` header of the entry `name` (`None` if its length
/// doesn't fit the header's field).
fn dirent(ino: u64, cookie: u64, dtype: u32, name: &[u8]) -> Option<Dirent> {
    Some(Dirent {
        ino,
        off: cookie,
        namelen: u32::try_from(name.len()).ok()?,
        r#type: dtype,
    })
}

impl DirentSink for DirentBuf<'_> {
    fn add(&mut self, ino: u64, cookie: u64, dtype: u32, name: &[u8]) -> bool {
        let Some(head) = dirent(ino, cookie, dtype, name) else {
            return false;
        };
        self.push(head.as_bytes(), name)
    }

    fn count(&self) -> usize {
        self.count
    }
}

impl DirentPlusSink for DirentBuf<'_> {
    fn add(&mut self, entry: &Entry, cookie: u64, dtype: u32, name: &[u8]) -> bool {
        let Some(dirent) = dirent(entry.attr.ino, cookie, dtype, name) else {
            return false;
        };
        let head = Direntplus {
            entry_out: entry.to_entry_out(),
            dirent,
        };
        self.push(head.as_bytes(), name)
    }

    fn count(&self) -> usize {
        self.count
    }
}

/// A zeroed, page-aligned buffer: transport memory that `O_DIRECT` I/O
/// can use directly. Allocation failure is an `ENOMEM` error, not an
/// abort.
///
/// It is an anonymous memory mapping of its own: its pages take no memory
/// until first written (a worker's 1 MiB request buffer costs what its
/// requests used of it, not 1 MiB), and they go back to the system when
/// it is dropped.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain owned memory.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// The alignment of every buffer.
    pub const ALIGN: usize = 4096;

    /// A zeroed buffer of `len` bytes (at least 1) starting at a page boundary.
    pub fn new(len: usize) -> io::Result<Self> {
        let len = len.max(1);
        let enomem = || io::Error::from_raw_os_error(libc::ENOMEM);
        let map_len = Self::map_len(len).ok_or_else(enomem)?;
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(enomem());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<u8>()).ok_or_else(enomem)?;
        Ok(Self { ptr, len })
    }

    /// Writes every page once, so none is faulted in later (when the
    /// kernel copies into it, say).
    pub fn prefault(&mut self) {
        for at in (0..self.len).step_by(Self::ALIGN) {
            // SAFETY: in bounds of the mapping; a volatile write so that it
            // isn't optimized away.
            unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(at), 0) };
        }
    }

    /// The mapping's length: `len` rounded up to whole pages.
    fn map_len(len: usize) -> Option<usize> {
        len.checked_next_multiple_of(Self::ALIGN)
            .filter(|&l| l <= isize::MAX as usize)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a buffer holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialized (zeroed) bytes we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Some(map_len) = Self::map_len(self.len) {
            // SAFETY: the mapping made in `new`, with this length, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), map_len) };
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn dirent_records_are_aligned_and_stop_when_full() {
        let mut mem = [0xffu8; 64];
        let mut buf = DirentBuf::new(&mut mem);
        assert!(DirentSink::add(&mut buf, 5, 1, 4, b"a"));
        assert_eq!(buf.len(), 32);
        assert!(DirentSink::add(&mut buf, 6, 2, 8, b"01234567"));
        assert_eq!(buf.len(), 64);
        assert!(!DirentSink::add(&mut buf, 7, 3, 8, b"x"));
        assert_eq!(DirentSink::count(&buf), 2);
        assert_eq!(&mem[24..32], &[b'a', 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        let b = AlignedBuf::new(10000).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(
            AlignedBuf::new(usize::MAX - 10).unwrap_err().raw_os_error(),
            Some(libc::ENOMEM)
        );
    }

    #[test]
    fn direntplus_does_not_fit_a_small_buffer() {
        let mut mem = [0u8; 150];
        let mut buf = DirentBuf::new(&mut mem);
        assert!(!DirentPlusSink::add(
            &mut buf,
            &Entry::default(),
            1,
            4,
            b"a"
        ));
        assert!(buf.is_empty());
    }

    #[test]
    fn slice_writer_and_reader_move_file_data() {
        let file = tempfile_in_tmp();
        let mut src = SliceReader::new(b"hello world");
        assert_eq!(src.read_to_file(file.as_fd(), 0, 100).unwrap(), 11);
        assert_eq!(src.remaining(), 0);
        let mut mem = [0u8; 8];
        let mut w = SliceWriter::new(&mut mem);
        assert_eq!(w.write_from_file(file.as_fd(), 6, 100).unwrap(), 5);
        assert_eq!(w.write_from_file(file.as_fd(), 11, 100).unwrap(), 0);
        assert!(w.write_all(b"1234").is_err());
        w.write_all(b"!!!").unwrap();
        assert_eq!(&mem, b"world!!!");
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("fuse-server-io-{}", std::process::id()));
        let f = test_support::create_rw(&path);
        std::fs::remove_file(&path).unwrap();
        f
    }
}
