//! `PassthroughFs`: a directory of the local file system served through
//! FUSE, and the `passthroughfs` daemon (`src/main.rs`).
//!
//! ```no_run
//! use std::sync::Arc;
//! use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
//! use fuse_server::{Server, Session};
//! use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
//!
//! let fs = Arc::new(PassthroughFs::new("/srv/data", PassthroughConfig::default())?);
//! let options = MountOptions {
//!     allow_other: true,
//!     default_permissions: true,
//!     ..MountOptions::default()
//! };
//! let session = DevSession::mount(Server::new(fs), "/mnt/data".as_ref(), &options, SessionConfig::default())?;
//! session.wait()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Design
//!
//! - **Inodes** (the internal `inode` module): each node id the kernel
//!   knows is an `O_PATH` descriptor of the backing file, keyed by
//!   (`st_dev`, `st_ino`, mount id) so that hard links and repeated lookups
//!   give one node id, with an exact lookup count; node ids are a counter
//!   (the root is 1) and are never reused. How an inode holds its file is
//!   one small type (`InodeFile`), so that it can hold a file handle
//!   (`name_to_handle_at`) instead of a descriptor later, for trees with
//!   more files than the descriptor limit.
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
//! - **Directories**: each open directory keeps a getdents64 buffer and
//!   the cookie it stands at; cookies are the backing file system's
//!   `d_off`, and a request at another cookie seeks there. READDIRPLUS
//!   looks up every entry but `.` and `..` (sent with node id 0, as
//!   libfuse does), and forgets an entry at once when the reply is full.
//! - **Zero-message opens** ([`PassthroughConfig::no_open`]): READ, WRITE
//!   and READDIR with handle 0 use one descriptor per inode, opened on
//!   first use and closed with the inode.
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
mod creds;
mod fs;
mod handle;
mod inode;
mod sys;

pub use config::{CachePolicy, PassthroughConfig};
pub use fs::{attr_from_statx, PassthroughError, PassthroughFs};
