//! Async runtimes and file IO for FUSE servers.
//!
//! - [`RuntimeType`] picks a single-threaded runtime: plain tokio (file IO is a blocking
//!   syscall on the calling thread) or tokio with a per-thread io_uring driven by tokio's
//!   reactor (file IO is submitted in batches and never blocks). [`Runtime`] runs either.
//! - [`File`] offers positioned reads and writes on owned buffers ([`IoBuf`],
//!   [`IoBufMut`], [`BufResult`]) and vectored ones in as few syscalls as the kernel
//!   allows: one `preadv`/`pwritev` or one `IORING_OP_READV`/`WRITEV` per [`IOV_MAX`]
//!   buffers, with short transfers resubmitted.
//! - [`copy_file`] and [`copy_file_fds`] copy a whole file or block device by the fastest
//!   path for the case: `copy_file_range`, a deep batched io_uring pipeline, or a
//!   read/write loop.
//!
//! ```no_run
//! use async_io::{File, RuntimeType};
//!
//! let rt = RuntimeType::IoUring.build()?;
//! rt.block_on(async {
//!     let f = File::open("/etc/hostname").await?;
//!     let (r, buf) = f.read_at(Vec::with_capacity(4096), 0).await;
//!     println!("{} bytes: {:?}", r?, String::from_utf8_lossy(&buf));
//!     Ok::<_, std::io::Error>(())
//! })?;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```
//!
//! The design (driver, ownership, batching) and measured figures are in `docs/async-io.md`.

mod buf;
mod copy;
mod driver;
mod file;
mod runtime;
mod sys;

pub use buf::{AlignedBuf, BufResult, IoBuf, IoBufMut, DIRECT_IO_ALIGN};
pub use copy::{copy_file, copy_file_fds, copy_ordered, CopyMethod, CopyOptions, CopyReport};
pub use driver::DriverStats;
pub use file::{join_all, File, Metadata, OpenOptions};
pub use runtime::{
    run_solo, solo, spawn_local, uring_available, Builder, Runtime, RuntimeType, SharedRing,
    DEFAULT_RING_ENTRIES,
};
pub use sys::IOV_MAX;
pub use tokio::task::JoinHandle;

use std::io;

/// Errors at this crate's boundaries (building runtimes, copying files). Positioned IO
/// on [`File`] returns plain [`io::Error`]s, as `std` does.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `io_uring_setup` failed: the kernel lacks io_uring, it is disabled
    /// (`kernel.io_uring_disabled`, seccomp), or memory for the ring is short.
    #[error("io_uring is not available: {0}")]
    UringUnavailable(#[source] io::Error),
    /// The tokio runtime (or its reactor registration) could not be created.
    #[error("cannot build the runtime: {0}")]
    Runtime(#[source] io::Error),
    /// [`RuntimeType::from_str`](std::str::FromStr::from_str) got an unknown name.
    #[error("unknown runtime type {0:?} (expected \"tokio\" or \"uring\")")]
    UnknownRuntimeType(String),
    /// A syscall failed; `what` says what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path or offset involved.
        what: String,
        /// The error from the kernel.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// The underlying OS error number, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::UringUnavailable(e) | Error::Runtime(e) | Error::Io { source: e, .. } => {
                e.raw_os_error()
            }
            Error::UnknownRuntimeType(_) => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::UringUnavailable(s) | Error::Runtime(s) | Error::Io { source: s, .. } => {
                s.kind()
            }
            Error::UnknownRuntimeType(_) => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}
