//! [`OpenOptions`]: the flags and mode of a [`File`] to open, and the open itself
//! (`IORING_OP_OPENAT` or `openat(2)`). Apart from [`File`] because it is a builder of
//! its own that touches none of `File`'s IO.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use io_uring::{opcode, types};

use super::File;
use crate::runtime::current_driver;
use crate::sys;

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
