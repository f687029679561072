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
//!   window of up to [`IOV_MAX`](crate::IOV_MAX) buffers. On io_uring all windows of a
//!   call are submitted together; on tokio they run one after the other.
//!
//! Here: [`File`], [`Metadata`] and the calls that are one operation on either runtime
//! (open, sync, fallocate, statx, close). `options`: [`OpenOptions`]. `rw`: positioned IO
//! on one buffer. `vectored`: the vectored calls and their iovec bookkeeping.

mod options;
mod rw;
mod vectored;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use io_uring::{opcode, types};

use crate::runtime::current_driver;
use crate::sys;

pub use options::OpenOptions;
pub use vectored::join_all;

/// An open file (or block device) for async positioned IO.
///
/// Cheap to clone (the fd is shared); the fd closes when the last clone and the last
/// in-flight operation on it are gone, so an SQE never refers to a closed or reused fd.
#[derive(Debug, Clone)]
pub struct File {
    fd: Arc<OwnedFd>,
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
