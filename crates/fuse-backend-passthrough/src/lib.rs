//! `PassthroughFs`: a directory of the local file system served through
//! FUSE. A library only: the `passthroughfs` daemon that serves it from the
//! command line is the `passthroughfs` crate.
//!
//! Feature `async` (on by default): `PassthroughFs` implements
//! `AsyncFileSystem` too, with its blocking thread pool
//! (`enable_async_thread_pool`) and file IO on the serving thread's
//! `async-io` runtime. Without it (`default-features = false`) the crate
//! serves through `FileSystem` only and builds neither tokio nor io-uring.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
//! use fuse_server::{Server, Session};
//! use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
//!
//! let fs = Arc::new(PassthroughFs::new("/srv/data", PassthroughConfig::default())?);
//! let options = MountOptions::default()
//!     .allow_other(true)
//!     .default_permissions(true);
//! let session = DevSession::mount(Server::new(fs), "/mnt/data".as_ref(), &options, SessionConfig::default())?;
//! session.wait()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Design
//!
//! - **Inodes** (the internal `inode` module): each node id the kernel
//!   knows is a backing file, keyed by (`st_dev`, `st_ino`, mount id) so
//!   that hard links and repeated lookups give one node id, with an exact
//!   lookup count; node ids are a counter (the root is 1) and are never
//!   reused. An inode holds its file by *file handle* (`name_to_handle_at`)
//!   where the backing file system supports them and the daemon may open
//!   them (root with `CAP_DAC_READ_SEARCH`), so a known inode needs no open
//!   descriptor and trees larger than the descriptor limit can be served;
//!   handles are opened with `open_by_handle_at` when used, and a small
//!   cache keeps the descriptors of the inodes in use. Elsewhere (in a user
//!   namespace, on file systems without handles, or with
//!   [`PassthroughConfig::file_handles`] off) each inode keeps an `O_PATH`
//!   descriptor; the log says which, and why.
//! - **Safety**: every request works relative to descriptors with `*at()`
//!   calls, `O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`; files
//!   are opened again through `/proc/self/fd/N`, which leads to the file
//!   itself and never through a symlink. Names with a `/` are refused
//!   (`EINVAL`); `.` and `..` never leave the shared tree.
//! - **Handles**: open files and directories live in a sharded table;
//!   READ and WRITE take one shard's read lock to clone an `Arc`, no
//!   global lock, and move data with one copy between the backing file
//!   and the transport's (page-aligned) buffers, so `O_DIRECT` works.
//! - **Credentials**: operations that create or change names, attributes
//!   or xattrs (MKNOD, MKDIR, SYMLINK, LINK, UNLINK, RMDIR, RENAME, CREATE,
//!   TMPFILE, OPEN, OPENDIR, SETATTR, SETXATTR, REMOVEXATTR, ACCESS) run
//!   with the caller's fsuid, fsgid and supplementary groups, switched per
//!   thread with raw system calls, only when they differ from the
//!   thread's current ones (requests from root cost nothing). The others
//!   (lookups, reads, writes, listings, locks) run as the daemon: their
//!   permissions were checked at open or by the kernel
//!   (`default_permissions`). Serving threads have their own umask of 0,
//!   since the kernel applies the caller's umask.
//! - **Locks**: POSIX locks are OFD locks on one open file description per
//!   (inode, lock owner), dropped when the owner closes the file (FLUSH);
//!   BSD locks are `flock(2)` on the handle's descriptor. A lock wait can
//!   be interrupted by the kernel's INTERRUPT.
//! - **Signals**: ending a lock wait takes a signal sent to the waiting
//!   thread, so [`PassthroughFs::new`] installs a process-wide handler
//!   that does nothing (without `SA_RESTART`) for
//!   [`PassthroughConfig::interrupt_signal`], `SIGRTMIN() + 5` by default,
//!   and logs it at debug. The application must not handle, block or send
//!   that signal; change the number if it is taken.
//! - **Directories**: each open directory keeps a getdents64 buffer and
//!   the cookie it stands at; cookies are the backing file system's
//!   `d_off`, and a request at another cookie seeks there; an LSEEK of the
//!   handle makes the stream forget both. The cookies increase where the
//!   backing file system's positions do (ext4: hash order); tmpfs lists
//!   newest first, with decreasing positions. An error after the first
//!   entry of a reply ends the reply with its entries (the next request
//!   meets it). READDIRPLUS looks up every entry but `.` and `..` (sent
//!   with node id 0, as libfuse does), in the handle's directory, and
//!   forgets an entry at once when the reply is full.
//!   [`PassthroughConfig::no_readdir`] answers every listing with no entries.
//! - **Zero-message opens** ([`PassthroughConfig::no_open`]): READ, WRITE
//!   and READDIR with handle 0 use one descriptor per inode, opened on
//!   first use and closed with the inode.
//! - **Kernel passthrough** ([`PassthroughConfig::passthrough`]; off in
//!   `Default`, on in the daemon): where the kernel offers
//!   `FUSE_PASSTHROUGH` and the daemon
//!   has `CAP_SYS_ADMIN` in the initial user namespace, OPEN and CREATE of
//!   regular files register a backing file (one id per inode, closed at
//!   its last release) and the kernel reads, writes and maps the file
//!   without asking the daemon; [`PassthroughFs::passthrough_stats`] tells
//!   what happened. Elsewhere, and for files the kernel refuses, the daemon
//!   serves READ and WRITE (logged once). `docs/passthrough.md` lists what
//!   conflicts with it.
//! - **Names changed in the source** ([`PassthroughConfig::watch_source`],
//!   on by default): under [`CachePolicy::Auto`] the directories whose
//!   names the kernel caches are watched with fanotify, every name removed
//!   or renamed in the source is passed on to the kernel
//!   (`FUSE_NOTIFY_INVAL_ENTRY`), and names are cached for a day
//!   ([`WATCHED_ENTRY_TIMEOUT`]) instead of a second; with no attribute
//!   timeout set, regular files are watched too (inode marks; a change of
//!   data or attributes by another process is passed on as
//!   `FUSE_NOTIFY_INVAL_INODE`) and their attributes cached for a day
//!   ([`WATCHED_ATTR_TIMEOUT`]). It needs a notifier
//!   ([`PassthroughFs::set_notifier`]) and protocol 7.44;
//!   [`PassthroughFs::source_watch_stats`] tells what it did.
//!   `docs/architecture.md` has the details.
//!
//! ## Lookup counts and unmounting
//!
//! The kernel sends FORGET when it evicts an inode while the connection
//! lives (memory pressure, `echo 2 > /proc/sys/vm/drop_caches`, an
//! invalidation). At unmount it does not: the connection is ended first and
//! the inodes are evicted without FORGET (checked on Linux 6.18: no FORGET
//! during unmount). [`fuse_server::FileSystem::destroy`] (called by the
//! transport when the session ends) therefore drops every inode and
//! handle; [`PassthroughFs::lookup_refs`] returns to 0 and
//! [`PassthroughFs::inode_count`] to 1 (the root) after either.

mod config;
mod crash_table;
mod creds;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault;
mod fs;
mod handle;
mod inode;
mod locks;
mod passthrough;
#[cfg(feature = "async")]
mod pool;
mod sys;
#[cfg(test)]
mod test_util;
mod watch;

/// Locks `m`; a lock poisoned by a thread that panicked while holding it
/// is taken as it is.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub use config::{
    default_listing_threads, default_max_nodes, CachePolicy, KillPrivV2, PassthroughConfig,
    ZeroCopyPolicy, MIN_NAMES_PER_LISTING_THREAD,
};
pub use crash_table::{crash_table_bytes, CRASH_TABLE_VERSION};
pub use fs::crash::CrashRecovery;
pub use fs::{attr_from_statx, PassthroughError, PassthroughFs};
pub use passthrough::PassthroughStats;
#[cfg(feature = "async")]
pub use pool::AsyncPoolStats;
pub use sys::raise_nofile_limit;
pub use watch::{SourceWatchGroup, SourceWatchStats, WATCHED_ATTR_TIMEOUT, WATCHED_ENTRY_TIMEOUT};
