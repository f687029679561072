//! Kernel FUSE passthrough (Linux 6.9+): backing files registered on the
//! connection, so the kernel serves READ, WRITE, splice and mmap of an open
//! file from the backing file without asking the daemon.
//!
//! The pieces:
//!
//! - [`BackingFiles`]: what a transport implements over the connection's
//!   `/dev/fuse` descriptor (`FUSE_DEV_IOC_BACKING_OPEN` and
//!   `FUSE_DEV_IOC_BACKING_CLOSE`). The transport installs it on the
//!   [`crate::Server`] before INIT ([`crate::Server::set_backing_files`]);
//!   the server hands it to the file system once, before the file system's
//!   `init`, through [`crate::FileSystem::attach_backing_files`] (a defaulted
//!   method: file systems that don't care need not know).
//! - [`BackingId`]: one registered backing file. It closes itself on the
//!   device it came from when dropped, so a file system keeps it as long
//!   as opens may still name it and drops it at the last release.
//! - The file system asks for [`fuse_abi::InitFlags::PASSTHROUGH`] in its
//!   `init` and sets [`crate::InitConfig::max_stack_depth`] (1 when the
//!   backing files are on a plain file system, 2 when they are on a
//!   stacked one such as overlayfs); an OPEN or CREATE reply then carries
//!   [`fuse_abi::FopenFlags::PASSTHROUGH`] and [`crate::Opened::backing_id`].
//!
//! The kernel allows registering only to a process with `CAP_SYS_ADMIN` in
//! the initial user namespace; elsewhere `open_backing` fails with `EPERM`
//! and the file system serves READ and WRITE itself.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// The kernel's `FILESYSTEM_MAX_STACK_DEPTH`: the largest
/// `max_stack_depth` a FUSE server may ask for (the kernel turns
/// passthrough off for anything larger, and for 0).
pub const FILESYSTEM_MAX_STACK_DEPTH: u32 = 2;

/// Registers and unregisters backing files on one FUSE connection.
///
/// Implemented by transports over `/dev/fuse` (the ioctls always go to a
/// descriptor of the connection, whichever way requests travel). Object
/// safe; file systems hold it as an `Arc<dyn BackingFiles>`. Once the
/// connection has ended, both methods fail (`ENOTCONN`): the kernel has
/// dropped every backing file with the connection.
pub trait BackingFiles: Send + Sync {
    /// `FUSE_DEV_IOC_BACKING_OPEN`: registers the open file `fd` (a regular
    /// file; an `O_PATH` descriptor will do) and returns its backing id
    /// (> 0). The kernel keeps its own reference to the file and records
    /// the calling thread's credentials, which passthrough I/O then runs
    /// with. Errors: `EPERM` without `CAP_SYS_ADMIN` in the initial user
    /// namespace or when INIT did not agree to passthrough, `ELOOP` when
    /// the file's file system is stacked at least as deep as the
    /// negotiated `max_stack_depth`, `EINVAL`/`EISDIR` for a file that is
    /// not regular.
    fn open_backing(&self, fd: BorrowedFd<'_>) -> io::Result<i32>;

    /// `FUSE_DEV_IOC_BACKING_CLOSE`: unregisters `id`. Files the kernel
    /// already opened with it keep working (the kernel holds its own
    /// reference until their last close).
    fn close_backing(&self, id: i32) -> io::Result<()>;
}

/// A backing file registered on a connection: closed (unregistered) on
/// the device it came from when dropped.
///
/// Put [`BackingId::id`] into [`crate::Opened::backing_id`] with
/// [`fuse_abi::FopenFlags::PASSTHROUGH`]. Keep the `BackingId` while an OPEN
/// reply naming it may still be on its way to the kernel: the kernel looks
/// the id up when it processes the reply, and an id closed before that
/// makes the open fail.
pub struct BackingId {
    id: i32,
    files: Arc<dyn BackingFiles>,
}

impl BackingId {
    /// Registers `fd` on `files`' connection.
    pub fn open(files: &Arc<dyn BackingFiles>, fd: BorrowedFd<'_>) -> io::Result<Self> {
        let id = files.open_backing(fd)?;
        if id <= 0 {
            // The kernel never hands out 0 or negative ids; don't keep one.
            return Err(io::Error::other(format!(
                "FUSE_DEV_IOC_BACKING_OPEN returned backing id {id}"
            )));
        }
        Ok(Self {
            id,
            files: files.clone(),
        })
    }

    /// An id registered on `files`' connection by an earlier server of it
    /// (live upgrade, [`crate::takeover`]): owned, and closed, from now on
    /// as if registered here. `None` for an id that can't be one (<= 0).
    pub fn adopt(files: &Arc<dyn BackingFiles>, id: i32) -> Option<Self> {
        (id > 0).then(|| Self {
            id,
            files: files.clone(),
        })
    }

    /// The id for [`crate::Opened::backing_id`].
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Closes the id now and reports the kernel's answer (dropping it
    /// closes it too, logging a failure at debug level).
    pub fn close(mut self) -> io::Result<()> {
        let id = std::mem::take(&mut self.id);
        self.files.close_backing(id)
    }
}

impl Drop for BackingId {
    fn drop(&mut self) {
        // 0: already closed by `close`.
        if self.id > 0 {
            if let Err(e) = self.files.close_backing(self.id) {
                tracing::debug!(backing_id = self.id, "closing a backing id: {e}");
            }
        }
    }
}

impl fmt::Debug for BackingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BackingId").field(&self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Fake {
        next: Mutex<i32>,
        open: Mutex<Vec<i32>>,
    }

    impl BackingFiles for Fake {
        fn open_backing(&self, _fd: BorrowedFd<'_>) -> io::Result<i32> {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            self.open.lock().unwrap().push(*next);
            Ok(*next)
        }

        fn close_backing(&self, id: i32) -> io::Result<()> {
            let mut open = self.open.lock().unwrap();
            let i = open
                .iter()
                .position(|&x| x == id)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            open.remove(i);
            Ok(())
        }
    }

    #[test]
    fn backing_id_closes_itself_once() {
        let fake = Arc::new(Fake::default());
        let files: Arc<dyn BackingFiles> = fake.clone();
        let stdin = std::io::stdin();
        let a = BackingId::open(&files, stdin.as_fd()).unwrap();
        let b = BackingId::open(&files, stdin.as_fd()).unwrap();
        assert_eq!((a.id(), b.id()), (1, 2));
        assert_eq!(*fake.open.lock().unwrap(), [1, 2]);
        drop(a);
        assert_eq!(*fake.open.lock().unwrap(), [2]);
        b.close().unwrap();
        assert!(fake.open.lock().unwrap().is_empty());
        // Only the fake's own reference is left: nothing leaked.
        assert_eq!(Arc::strong_count(&fake), 2);
        drop(files);
        assert_eq!(Arc::strong_count(&fake), 1);
    }
}
