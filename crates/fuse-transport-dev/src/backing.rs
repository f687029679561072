//! [`DevBackingFiles`]: kernel passthrough backing files registered with
//! `FUSE_DEV_IOC_BACKING_OPEN` / `FUSE_DEV_IOC_BACKING_CLOSE` on the
//! connection's `/dev/fuse` descriptor.

use crate::dev::ioctl_reading;
use fuse_server::BackingFiles;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Weak;

/// `FUSE_DEV_IOC_BACKING_OPEN` on `dev`: registers `fd` as a backing file
/// of `dev`'s connection; returns the backing id.
pub fn backing_open(dev: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<i32> {
    let map = fuse_abi::BackingMap {
        fd: fd.as_raw_fd(),
        flags: 0,
        padding: 0,
    };
    // SAFETY: FUSE_DEV_IOC_BACKING_OPEN reads a `struct fuse_backing_map`.
    unsafe { ioctl_reading(dev, fuse_abi::ioctl::DEV_IOC_BACKING_OPEN, &map) }
}

/// `FUSE_DEV_IOC_BACKING_CLOSE` on `dev`: unregisters backing id `id`.
pub fn backing_close(dev: BorrowedFd<'_>, id: i32) -> io::Result<()> {
    let id = id as u32;
    // SAFETY: FUSE_DEV_IOC_BACKING_CLOSE reads a u32.
    unsafe { ioctl_reading(dev, fuse_abi::ioctl::DEV_IOC_BACKING_CLOSE, &id) }.map(drop)
}

/// The backing files of one connection, registered through a descriptor
/// of its `/dev/fuse` session.
///
/// It holds the descriptor weakly: a file system may keep its
/// `Arc<dyn BackingFiles>` (and `BackingId`s) longer than the session, and
/// must not keep the connection alive by that (a session ends a lazily
/// unmounted connection by closing its descriptors). Once the session's
/// descriptor is gone, both calls fail with `ENOTCONN`; the kernel dropped
/// every backing file with the connection.
pub struct DevBackingFiles<F> {
    dev: Weak<F>,
}

impl<F> DevBackingFiles<F> {
    /// Registry over the session descriptor `dev` refers to.
    pub fn new(dev: Weak<F>) -> Self {
        Self { dev }
    }
}

fn not_connected() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the /dev/fuse session has ended",
    )
}

impl<F: AsFd + Send + Sync> BackingFiles for DevBackingFiles<F> {
    fn open_backing(&self, fd: BorrowedFd<'_>) -> io::Result<i32> {
        let dev = self.dev.upgrade().ok_or_else(not_connected)?;
        backing_open(dev.as_fd(), fd)
    }

    fn close_backing(&self, id: i32) -> io::Result<()> {
        let dev = self.dev.upgrade().ok_or_else(not_connected)?;
        backing_close(dev.as_fd(), id)
    }
}
