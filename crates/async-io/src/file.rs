//! [`File`]: positioned and vectored file IO on owned buffers, on either runtime.
//!
//! Each call looks at the thread it runs on ([`RuntimeType::current`](crate::RuntimeType::current)): inside an io_uring
//! runtime it becomes SQEs on that thread's ring; anywhere else it is the plain syscall,
//! made on the calling thread (which blocks, as [`RuntimeType::file_io_blocks`](crate::RuntimeType::file_io_blocks) says).
//!
//! Counts and short transfers:
//! - [`File::read_at`] and [`File::write_at`] are one `pread`/`pwrite` (one SQE) and may
//!   transfer less than asked, like the syscalls.
//! - [`File::read_exact_at`], [`File::write_all_at`], [`File::readv_at`] and
//!   [`File::writev_at`] resubmit the rest after a short transfer. Reads stop early only
//!   at end of file; writes only on an error (a write of 0 bytes is `WriteZero`).
//! - Vectored calls use one `preadv`/`pwritev` (one `IORING_OP_READV`/`WRITEV`) per
//!   window of up to [`IOV_MAX`] buffers. On io_uring all windows of a call are submitted
//!   together; on tokio they run one after the other.

use std::ffi::CString;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use io_uring::{opcode, types};

use crate::buf::{BufResult, IoBuf, IoBufMut};
use crate::driver::Driver;
use crate::runtime::current_driver;
use crate::sys::{self, IOV_MAX, MAX_RW_COUNT};

/// An open file (or block device) for async positioned IO.
///
/// Cheap to clone (the fd is shared); the fd closes when the last clone and the last
/// in-flight operation on it are gone, so an SQE never refers to a closed or reused fd.
#[derive(Debug, Clone)]
pub struct File {
    fd: Arc<OwnedFd>,
}

/// Options for opening a [`File`], like [`std::fs::OpenOptions`] plus `O_DIRECT`.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    append: bool,
    direct: bool,
    custom_flags: i32,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// All options off, mode `0o666` (before the umask).
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            append: false,
            direct: false,
            custom_flags: 0,
            mode: 0o666,
        }
    }
    /// Open for reading.
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    /// Create the file if it does not exist (`O_CREAT`).
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    /// Create the file, failing if it exists (`O_CREAT | O_EXCL`).
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Truncate to 0 bytes on open (`O_TRUNC`).
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    /// Append mode (`O_APPEND`; positioned writes then ignore the position, as in Linux).
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }
    /// Bypass the page cache (`O_DIRECT`): buffers, offsets and lengths must then be
    /// aligned (use [`crate::AlignedBuf`]).
    pub fn direct(&mut self, v: bool) -> &mut Self {
        self.direct = v;
        self
    }
    /// Extra `open(2)` flags, or-ed in.
    pub fn custom_flags(&mut self, flags: i32) -> &mut Self {
        self.custom_flags = flags;
        self
    }
    /// The permission bits of a created file (before the umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    fn flags(&self) -> io::Result<i32> {
        let access = match (self.read, self.write || self.append) {
            (true, false) => libc::O_RDONLY,
            (false, true) => libc::O_WRONLY,
            (true, true) => libc::O_RDWR,
            (false, false) => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        let mut flags = access | self.custom_flags | libc::O_CLOEXEC;
        if self.create_new {
            flags |= libc::O_CREAT | libc::O_EXCL;
        } else if self.create {
            flags |= libc::O_CREAT;
        }
        if self.truncate {
            flags |= libc::O_TRUNC;
        }
        if self.append {
            flags |= libc::O_APPEND;
        }
        if self.direct {
            flags |= libc::O_DIRECT;
        }
        Ok(flags)
    }

    /// Opens `path` (an `IORING_OP_OPENAT` on io_uring, `openat(2)` otherwise).
    pub async fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let flags = self.flags()?;
        let cpath = CString::new(path.as_ref().as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        match current_driver() {
            Some(driver) => {
                let sqe = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), cpath.as_ptr())
                    .flags(flags)
                    .mode(self.mode)
                    .build();
                // SAFETY: the path pointer points into `cpath`'s heap buffer, owned by the op.
                let (done, _cpath) = unsafe { driver.submit(sqe, cpath) }.await;
                let fd = done.into_result()? as RawFd;
                // SAFETY: the kernel returned a new fd that nobody else owns.
                Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
            }
            None => Ok(File::from(sys::open(&cpath, flags, self.mode)?)),
        }
    }
}

impl From<OwnedFd> for File {
    fn from(fd: OwnedFd) -> File {
        File { fd: Arc::new(fd) }
    }
}

/// Shares a descriptor the caller keeps too (no `dup`): operations in flight keep it
/// open until their completions arrive, whoever drops their `Arc` first.
impl From<Arc<OwnedFd>> for File {
    fn from(fd: Arc<OwnedFd>) -> File {
        File { fd }
    }
}

impl From<std::fs::File> for File {
    fn from(f: std::fs::File) -> File {
        File::from(OwnedFd::from(f))
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What [`File::metadata`] returns (from `statx`).
#[derive(Clone, Copy)]
pub struct Metadata {
    stx: libc::statx,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("len", &self.len())
            .field("mode", &format_args!("{:o}", self.mode()))
            .field("blocks", &self.blocks())
            .finish()
    }
}

impl Metadata {
    /// The file size in bytes (0 for a block device: see [`File::size`]).
    pub fn len(&self) -> u64 {
        self.stx.stx_size
    }
    /// Whether the size is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The full `st_mode` (type and permission bits).
    pub fn mode(&self) -> u32 {
        u32::from(self.stx.stx_mode)
    }
    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode() & libc::S_IFMT == libc::S_IFREG
    }
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode() & libc::S_IFMT == libc::S_IFDIR
    }
    /// Whether this is a block device.
    pub fn is_block_device(&self) -> bool {
        self.mode() & libc::S_IFMT == libc::S_IFBLK
    }
    /// Allocated space in 512-byte units (less than `len / 512` for a sparse file).
    pub fn blocks(&self) -> u64 {
        self.stx.stx_blocks
    }
    /// The preferred IO size of the file system.
    pub fn blksize(&self) -> u32 {
        self.stx.stx_blksize
    }
    /// The device and inode numbers (to tell whether two files are the same).
    pub fn dev_ino(&self) -> (u64, u64) {
        (
            libc::makedev(self.stx.stx_dev_major, self.stx.stx_dev_minor),
            self.stx.stx_ino,
        )
    }
    /// The device the file lives on (to tell whether two files share a file system).
    pub fn dev(&self) -> u64 {
        self.dev_ino().0
    }
    /// `O_DIRECT` alignment `(memory, offset)` when the file system reports it
    /// (`STATX_DIOALIGN`); `None` when it does not, or when `O_DIRECT` is unsupported.
    pub fn dio_alignment(&self) -> Option<(u32, u32)> {
        if self.stx.stx_mask & libc::STATX_DIOALIGN != 0 && self.stx.stx_dio_mem_align != 0 {
            Some((self.stx.stx_dio_mem_align, self.stx.stx_dio_offset_align))
        } else {
            None
        }
    }
}

/// The data an io_uring read/write owns: the fd and the buffer.
struct RwData<B> {
    _fd: Arc<OwnedFd>,
    buf: B,
}

/// The data a vectored io_uring operation owns.
struct VecData<B> {
    _fd: Arc<OwnedFd>,
    iov: IoVecs<B>,
}

/// Owned buffers plus the iovec array pointing into them, with a progress cursor.
pub(crate) struct IoVecs<B> {
    bufs: Vec<B>,
    iovs: Vec<libc::iovec>,
    /// The first iovec not yet fully transferred (earlier ones are done).
    start: usize,
    /// Bytes transferred so far.
    done: usize,
}

// SAFETY: the iovecs only point into `bufs`, which are Send; the raw pointers are not used
// from two threads at once (the struct is moved, not shared).
unsafe impl<B: Send> Send for IoVecs<B> {}

impl<B> IoVecs<B> {
    fn new(bufs: Vec<B>, iovs: Vec<libc::iovec>) -> Self {
        let mut v = IoVecs {
            bufs,
            iovs,
            start: 0,
            done: 0,
        };
        v.skip_empty();
        v
    }

    fn skip_empty(&mut self) {
        while self.start < self.iovs.len() && self.iovs[self.start].iov_len == 0 {
            self.start += 1;
        }
    }

    /// The next window of at most `IOV_MAX` iovecs still to transfer.
    fn window(&self) -> &[libc::iovec] {
        let end = self.iovs.len().min(self.start + IOV_MAX);
        &self.iovs[self.start..end]
    }

    fn is_complete(&self) -> bool {
        self.start >= self.iovs.len()
    }

    /// Records that `n` more bytes were transferred.
    fn advance(&mut self, mut n: usize) {
        self.done += n;
        while n > 0 && self.start < self.iovs.len() {
            let iov = &mut self.iovs[self.start];
            if n >= iov.iov_len {
                n -= iov.iov_len;
                self.start += 1;
            } else {
                // SAFETY: `n < iov_len`, so the new base stays inside the same buffer.
                iov.iov_base = unsafe { iov.iov_base.cast::<u8>().add(n) }.cast();
                iov.iov_len -= n;
                n = 0;
            }
        }
        self.skip_empty();
    }
}

impl<B: IoBuf> IoVecs<B> {
    fn for_write(bufs: Vec<B>) -> Self {
        let iovs = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.stable_ptr() as *mut libc::c_void,
                iov_len: b.bytes_init(),
            })
            .collect();
        IoVecs::new(bufs, iovs)
    }
}

impl<B: IoBufMut> IoVecs<B> {
    fn for_read(mut bufs: Vec<B>) -> Self {
        let iovs = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.stable_mut_ptr().cast(),
                iov_len: b.bytes_total(),
            })
            .collect();
        IoVecs::new(bufs, iovs)
    }

    /// Sets each buffer's length to what the first `self.done` bytes put into it.
    fn finish_read(self) -> Vec<B> {
        let mut left = self.done;
        let mut bufs = self.bufs;
        for b in &mut bufs {
            let n = left.min(b.bytes_total());
            // SAFETY: the kernel wrote the first `done` bytes in iovec order; `n` of them
            // landed in this buffer, and `n <= bytes_total()`.
            unsafe { b.set_init(n) };
            left -= n;
        }
        bufs
    }
}

/// Which way a transfer goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

/// `Ok(n)` or the errno of a CQE, retrying `EINTR`/`EAGAIN` (which regular files never
/// return from io_uring, but a FIFO or a socket might).
pub(crate) fn cqe_count(res: i32) -> Option<io::Result<usize>> {
    if res == -libc::EINTR || res == -libc::EAGAIN {
        None
    } else if res < 0 {
        Some(Err(io::Error::from_raw_os_error(-res)))
    } else {
        Some(Ok(res as usize))
    }
}

impl File {
    /// Opens `path` read-only.
    pub async fn open(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(path).await
    }

    /// Opens `path` write-only, creating it or truncating it.
    pub async fn create(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .await
    }

    /// The file back as an [`OwnedFd`], if this is the only handle and no operation is in
    /// flight on it; `Err(self)` otherwise.
    pub fn try_into_fd(self) -> Result<OwnedFd, File> {
        Arc::try_unwrap(self.fd).map_err(|fd| File { fd })
    }

    /// A new `std::fs::File` for the same open file (a `dup`).
    pub fn try_clone_std(&self) -> io::Result<std::fs::File> {
        Ok(std::fs::File::from(self.fd.try_clone()?))
    }

    /// The shared fd, for operations that must keep it open until their CQE.
    pub(crate) fn fd_arc(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn ufd(&self) -> types::Fd {
        types::Fd(self.raw())
    }

    /// Reads up to `buf.bytes_total()` bytes at `pos` into the start of `buf` (one `pread`
    /// or one SQE; may be short). The buffer's length becomes the count read.
    pub async fn read_at<B: IoBufMut>(&self, mut buf: B, pos: u64) -> BufResult<usize, B> {
        let len = buf.bytes_total().min(MAX_RW_COUNT);
        match current_driver() {
            Some(d) => {
                let ptr = buf.stable_mut_ptr();
                // SAFETY: `len <= bytes_total()` bytes at `stable_mut_ptr()`.
                let (r, mut buf) =
                    unsafe { self.uring_rw(&d, Dir::Read, buf, ptr, len, pos) }.await;
                if let Ok(n) = r {
                    // SAFETY: the kernel wrote `n <= len` bytes at the start.
                    unsafe { buf.set_init(n) };
                }
                (r, buf)
            }
            None => {
                // SAFETY: `len <= bytes_total()` writable bytes at `stable_mut_ptr()`.
                let r = unsafe { sys::pread_raw(self.raw(), buf.stable_mut_ptr(), len, pos) };
                if let Ok(n) = r {
                    // SAFETY: the kernel wrote `n <= len` bytes at the start.
                    unsafe { buf.set_init(n) };
                }
                (r, buf)
            }
        }
    }

    /// Fills `buf` to `buf.bytes_total()` from `pos`, resubmitting after short reads.
    /// End of file first is `UnexpectedEof` (the buffer's length is then what was read).
    pub async fn read_exact_at<B: IoBufMut>(&self, mut buf: B, pos: u64) -> BufResult<(), B> {
        let total = buf.bytes_total();
        let driver = current_driver();
        let mut done = 0;
        let mut result = Ok(());
        while done < total {
            let len = (total - done).min(MAX_RW_COUNT);
            let r = match &driver {
                Some(d) => {
                    // SAFETY: `done + len <= bytes_total()` bytes from `stable_mut_ptr()`.
                    let (r, b) = unsafe {
                        let ptr = buf.stable_mut_ptr().add(done);
                        self.uring_rw(d, Dir::Read, buf, ptr, len, pos + done as u64)
                    }
                    .await;
                    buf = b;
                    r
                }
                None => {
                    // SAFETY: `done + len <= bytes_total()` writable bytes.
                    unsafe {
                        sys::pread_raw(
                            self.raw(),
                            buf.stable_mut_ptr().add(done),
                            len,
                            pos + done as u64,
                        )
                    }
                }
            };
            match r {
                Ok(0) => {
                    result = Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("end of file after {done} of {total} bytes"),
                    ));
                    break;
                }
                Ok(n) => done += n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // SAFETY: the first `done` bytes were written by the kernel.
        unsafe { buf.set_init(done) };
        (result, buf)
    }

    /// Writes up to `buf.bytes_init()` bytes at `pos` (one `pwrite` or one SQE; may be
    /// short).
    pub async fn write_at<B: IoBuf>(&self, buf: B, pos: u64) -> BufResult<usize, B> {
        let len = buf.bytes_init().min(MAX_RW_COUNT);
        match current_driver() {
            Some(d) => {
                let ptr = buf.stable_ptr() as *mut u8;
                // SAFETY: `len <= bytes_init()` bytes at `stable_ptr()`; a write only reads.
                unsafe { self.uring_rw(&d, Dir::Write, buf, ptr, len, pos) }.await
            }
            None => {
                // SAFETY: `len <= bytes_init()` readable bytes at `stable_ptr()`.
                let r = unsafe { sys::pwrite_raw(self.raw(), buf.stable_ptr(), len, pos) };
                (r, buf)
            }
        }
    }

    /// Writes all of `buf.bytes_init()` at `pos`, resubmitting after short writes.
    pub async fn write_all_at<B: IoBuf>(&self, mut buf: B, pos: u64) -> BufResult<(), B> {
        let total = buf.bytes_init();
        let driver = current_driver();
        let mut done = 0;
        while done < total {
            let len = (total - done).min(MAX_RW_COUNT);
            let r = match &driver {
                Some(d) => {
                    // SAFETY: `done + len <= bytes_init()` bytes; a write only reads them.
                    let (r, b) = unsafe {
                        let ptr = (buf.stable_ptr() as *mut u8).add(done);
                        self.uring_rw(d, Dir::Write, buf, ptr, len, pos + done as u64)
                    }
                    .await;
                    buf = b;
                    r
                }
                None => {
                    // SAFETY: `done + len <= bytes_init()` readable bytes.
                    unsafe {
                        sys::pwrite_raw(
                            self.raw(),
                            buf.stable_ptr().add(done),
                            len,
                            pos + done as u64,
                        )
                    }
                }
            };
            match r {
                Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), buf),
                Ok(n) => done += n,
                Err(e) => return (Err(e), buf),
            }
        }
        (Ok(()), buf)
    }

    /// One io_uring READ/WRITE of `len` bytes at `ptr`, retried on `EINTR`/`EAGAIN`.
    ///
    /// # Safety
    /// `ptr..ptr+len` lies in `buf`'s stable memory: within `bytes_total()` and derived
    /// from `stable_mut_ptr()` for a read, within `bytes_init()` for a write.
    async unsafe fn uring_rw<B: IoBuf>(
        &self,
        driver: &Rc<Driver>,
        dir: Dir,
        mut buf: B,
        ptr: *mut u8,
        len: usize,
        pos: u64,
    ) -> BufResult<usize, B> {
        loop {
            let sqe = match dir {
                Dir::Read => opcode::Read::new(self.ufd(), ptr, len as u32)
                    .offset(pos)
                    .build(),
                Dir::Write => opcode::Write::new(self.ufd(), ptr, len as u32)
                    .offset(pos)
                    .build(),
            };
            let data = RwData {
                _fd: self.fd.clone(),
                buf,
            };
            // SAFETY: the SQE points into `data.buf`'s stable memory (caller's contract) and
            // at `data._fd`, both owned by the op until its CQE.
            let (done, data) = unsafe { driver.submit(sqe, data) }.await;
            buf = data.buf;
            if let Some(r) = cqe_count(done.res) {
                return (r, buf);
            }
        }
    }

    /// Reads from `pos` into `bufs` in order, filling each to its `bytes_total()`, until all
    /// are full or end of file. Returns the total count; each buffer's length becomes what
    /// it received (buffers after the end of file get length 0).
    ///
    /// One `preadv` / `IORING_OP_READV` per [`IOV_MAX`] buffers; short reads are resubmitted.
    pub async fn readv_at<B: IoBufMut>(&self, bufs: Vec<B>, pos: u64) -> BufResult<usize, Vec<B>> {
        match current_driver() {
            Some(d) if bufs.len() <= IOV_MAX => {
                // One window: no splitting, the Vec goes in and comes back as is.
                let (r, iov) = self
                    .uring_window(&d, Dir::Read, IoVecs::for_read(bufs), pos)
                    .await;
                let n = iov.done;
                (r.map(|_| n), iov.finish_read())
            }
            Some(d) => {
                let windows = split_windows(bufs)
                    .into_iter()
                    .map(IoVecs::for_read)
                    .collect();
                let (r, windows) = self.uring_vectored(&d, Dir::Read, windows, pos).await;
                let bufs = windows.into_iter().flat_map(IoVecs::finish_read).collect();
                (r, bufs)
            }
            None => {
                let mut iov = IoVecs::for_read(bufs);
                let r = self.sync_vectored(Dir::Read, &mut iov, pos);
                let n = iov.done;
                (r.map(|()| n), iov.finish_read())
            }
        }
    }

    /// Writes every buffer's `bytes_init()` bytes from `pos` in order, resubmitting after
    /// short writes. Returns the total count.
    ///
    /// One `pwritev` / `IORING_OP_WRITEV` per [`IOV_MAX`] buffers.
    pub async fn writev_at<B: IoBuf>(&self, bufs: Vec<B>, pos: u64) -> BufResult<usize, Vec<B>> {
        match current_driver() {
            Some(d) if bufs.len() <= IOV_MAX => {
                let (r, iov) = self
                    .uring_window(&d, Dir::Write, IoVecs::for_write(bufs), pos)
                    .await;
                let n = iov.done;
                (r.map(|_| n), iov.bufs)
            }
            Some(d) => {
                let windows = split_windows(bufs)
                    .into_iter()
                    .map(IoVecs::for_write)
                    .collect();
                let (r, windows) = self.uring_vectored(&d, Dir::Write, windows, pos).await;
                let bufs = windows.into_iter().flat_map(|w| w.bufs).collect();
                (r, bufs)
            }
            None => {
                let mut iov = IoVecs::for_write(bufs);
                let r = self.sync_vectored(Dir::Write, &mut iov, pos);
                let n = iov.done;
                (r.map(|()| n), iov.bufs)
            }
        }
    }

    /// The blocking vectored loop: windows of `IOV_MAX`, one after the other.
    fn sync_vectored<B>(&self, dir: Dir, iov: &mut IoVecs<B>, pos: u64) -> io::Result<()> {
        while !iov.is_complete() {
            let at = pos + iov.done as u64;
            // SAFETY: the iovecs point into the owned buffers in `iov.bufs`, with lengths
            // within each buffer's initialised (write) or total (read) size.
            let n = unsafe {
                match dir {
                    Dir::Read => sys::preadv_raw(self.raw(), iov.window(), at),
                    Dir::Write => sys::pwritev_raw(self.raw(), iov.window(), at),
                }
            }?;
            if n == 0 {
                return match dir {
                    Dir::Read => Ok(()), // end of file
                    Dir::Write => Err(io::ErrorKind::WriteZero.into()),
                };
            }
            iov.advance(n);
        }
        Ok(())
    }

    /// Transfers `windows` (consecutive in the file from `pos`), all submitted together.
    /// Returns the count of the contiguous prefix transferred: for reads, data placed after
    /// an earlier window hit end of file is dropped (`done` set to 0).
    async fn uring_vectored<B: IoBuf>(
        &self,
        driver: &Rc<Driver>,
        dir: Dir,
        windows: Vec<IoVecs<B>>,
        pos: u64,
    ) -> (io::Result<usize>, Vec<IoVecs<B>>) {
        let mut futs = Vec::with_capacity(windows.len());
        let mut sizes = Vec::with_capacity(windows.len());
        let mut at = pos;
        for iov in windows {
            let size: usize = iov.iovs.iter().map(|v| v.iov_len).sum();
            sizes.push(size);
            futs.push(self.uring_window(driver, dir, iov, at));
            at += size as u64;
        }
        let outs = join_all(futs).await;
        let mut result = Ok(());
        let mut total = 0;
        let mut short = false;
        let mut windows = Vec::with_capacity(outs.len());
        for ((r, mut iov), size) in outs.into_iter().zip(sizes) {
            if let Err(e) = r {
                if result.is_ok() {
                    result = Err(e);
                }
            }
            if short {
                iov.done = 0;
            }
            total += iov.done;
            if iov.done < size {
                short = true;
            }
            windows.push(iov);
        }
        (result.map(|()| total), windows)
    }

    /// Transfers one window (at most `IOV_MAX` iovecs) with READV/WRITEV SQEs, resubmitting
    /// the rest after a short transfer. Returns `Ok(true)` at end of file.
    async fn uring_window<B: IoBuf>(
        &self,
        driver: &Rc<Driver>,
        dir: Dir,
        mut iov: IoVecs<B>,
        pos: u64,
    ) -> (io::Result<bool>, IoVecs<B>) {
        while !iov.is_complete() {
            let w = iov.window();
            let at = pos + iov.done as u64;
            let sqe = match dir {
                Dir::Read => opcode::Readv::new(self.ufd(), w.as_ptr(), w.len() as u32)
                    .offset(at)
                    .build(),
                Dir::Write => opcode::Writev::new(self.ufd(), w.as_ptr(), w.len() as u32)
                    .offset(at)
                    .build(),
            };
            let data = VecData {
                _fd: self.fd.clone(),
                iov,
            };
            // SAFETY: the SQE points at `data.iov.iovs` (a heap array that does not move when
            // `data` moves), whose entries point into the owned buffers; the fd is `data._fd`.
            let (done, data) = unsafe { driver.submit(sqe, data) }.await;
            iov = data.iov;
            match cqe_count(done.res) {
                None => continue,
                Some(Err(e)) => return (Err(e), iov),
                Some(Ok(0)) => {
                    return match dir {
                        Dir::Read => (Ok(true), iov),
                        Dir::Write => (Err(io::ErrorKind::WriteZero.into()), iov),
                    }
                }
                Some(Ok(n)) => iov.advance(n),
            }
        }
        (Ok(false), iov)
    }

    /// `fsync(2)` (`IORING_OP_FSYNC` on io_uring).
    pub async fn sync_all(&self) -> io::Result<()> {
        self.fsync(false).await
    }

    /// `fdatasync(2)` (`IORING_OP_FSYNC` with `DATASYNC` on io_uring).
    pub async fn sync_data(&self) -> io::Result<()> {
        self.fsync(true).await
    }

    async fn fsync(&self, data_only: bool) -> io::Result<()> {
        match current_driver() {
            Some(d) => {
                let flags = if data_only {
                    types::FsyncFlags::DATASYNC
                } else {
                    types::FsyncFlags::empty()
                };
                let sqe = opcode::Fsync::new(self.ufd()).flags(flags).build();
                // SAFETY: no pointers; the fd is kept open by the op's data.
                let (done, _) = unsafe { d.submit(sqe, self.fd.clone()) }.await;
                done.into_result().map(drop)
            }
            None => sys::fsync(self.fd.as_fd(), data_only),
        }
    }

    /// `fallocate(2)` with `mode` (`0`, `libc::FALLOC_FL_KEEP_SIZE`, ...).
    /// `IORING_OP_FALLOCATE` on io_uring.
    pub async fn fallocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        match current_driver() {
            Some(d) => {
                let sqe = opcode::Fallocate::new(self.ufd(), len)
                    .offset(offset)
                    .mode(mode)
                    .build();
                // SAFETY: no pointers; the fd is kept open by the op's data.
                let (done, _) = unsafe { d.submit(sqe, self.fd.clone()) }.await;
                done.into_result().map(drop)
            }
            None => sys::fallocate(self.fd.as_fd(), mode, offset, len),
        }
    }

    /// `ftruncate(2)`. A plain syscall on both runtimes (it only changes metadata).
    pub async fn set_len(&self, len: u64) -> io::Result<()> {
        sys::ftruncate(self.fd.as_fd(), len)
    }

    /// `statx(2)` of the open file (`IORING_OP_STATX` on io_uring), including
    /// `STATX_DIOALIGN`.
    pub async fn metadata(&self) -> io::Result<Metadata> {
        let mask = libc::STATX_BASIC_STATS | libc::STATX_DIOALIGN;
        match current_driver() {
            Some(d) => {
                // SAFETY: all-zero is a valid statx (plain integers).
                let mut stx: Box<libc::statx> = Box::new(unsafe { std::mem::zeroed() });
                let sqe = opcode::Statx::new(
                    self.ufd(),
                    c"".as_ptr(),
                    (&mut *stx as *mut libc::statx).cast(),
                )
                .flags(libc::AT_EMPTY_PATH)
                .mask(mask)
                .build();
                // SAFETY: the statx buffer is a Box owned by the op; the path is static; the fd
                // is kept open by the op.
                let (done, (_, stx)) = unsafe { d.submit(sqe, (self.fd.clone(), stx)) }.await;
                done.into_result()?;
                Ok(Metadata { stx: *stx })
            }
            None => Ok(Metadata {
                stx: sys::statx_fd(self.fd.as_fd(), mask)?,
            }),
        }
    }

    /// The size in bytes: `st_size` for a regular file, `BLKGETSIZE64` for a block device.
    pub async fn size(&self) -> io::Result<u64> {
        let md = self.metadata().await?;
        if md.is_block_device() {
            sys::block_device_size(self.fd.as_fd())
        } else {
            Ok(md.len())
        }
    }

    /// Runs `f` with this file on tokio's blocking thread pool (an escape hatch for a
    /// tokio-runtime thread that must not stall on a slow disk).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn spawn_blocking<T, F>(&self, f: F) -> io::Result<T>
    where
        F: FnOnce(&std::fs::File) -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let file = self.try_clone_std()?;
        tokio::task::spawn_blocking(move || f(&file))
            .await
            .map_err(io::Error::other)?
    }

    /// Closes the file now if this is the only handle (reporting the error of `close(2)`,
    /// which drop would ignore); otherwise just drops this handle.
    pub async fn close(self) -> io::Result<()> {
        match self.try_into_fd() {
            Ok(fd) => {
                let raw = fd.into_raw_fd();
                // SAFETY: we own `raw` (taken out of the OwnedFd) and close it exactly once.
                if unsafe { libc::close(raw) } == -1 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EINTR) {
                        return Err(e);
                    }
                }
                Ok(())
            }
            Err(_shared) => Ok(()),
        }
    }
}

/// Splits `bufs` into windows of at most `IOV_MAX` buffers.
fn split_windows<B>(mut bufs: Vec<B>) -> Vec<Vec<B>> {
    if bufs.len() <= IOV_MAX {
        return vec![bufs];
    }
    let mut out = Vec::with_capacity(bufs.len().div_ceil(IOV_MAX));
    while !bufs.is_empty() {
        let rest = bufs.split_off(bufs.len().min(IOV_MAX));
        out.push(std::mem::replace(&mut bufs, rest));
    }
    out
}

/// Polls every future until all are done; outputs in input order.
pub(crate) async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outs.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}
