//! Serve a FUSE file system over `/dev/fuse`.
//!
//! - [`mount`]: mounting with mount(2) when privileged (also inside a user
//!   namespace) and with `fusermount3` otherwise; unmounting explicitly and
//!   on drop.
//! - [`DevSession`]: worker threads, each reading requests on its own fd
//!   (`FUSE_DEV_IOC_CLONE`) into buffers sized from the negotiated
//!   `max_write`, handing them to a [`fuse_server::Server`], and writing
//!   each reply with one `writev`. It implements [`fuse_server::Session`].
//! - [`DevBackingFiles`]: kernel passthrough backing files registered
//!   on the connection (`FUSE_DEV_IOC_BACKING_OPEN`/`CLOSE`); both
//!   sessions install one on their [`fuse_server::Server`] before INIT.
//! - `FuseDevTask` (feature `tokio`): the same, as a task on the
//!   application's own tokio runtime, each request its own task.
//! - [`serve_until_signal`]: waits for a session (of any transport),
//!   stopping it on Ctrl-C, SIGTERM or SIGHUP.
//!
//! ## Signals
//!
//! A [`DevSession`] installs a process-wide signal handler: for
//! [`SessionConfig::wake_signal`] (`SIGRTMIN() + 4` by default), a handler
//! that does nothing, without `SA_RESTART`, installed when the first
//! session with that signal starts and logged at debug. Stopping a session
//! sends it to the worker threads, whose blocking `read(2)` on `/dev/fuse`
//! then returns `EINTR`. The application must leave that signal alone: no
//! handler of its own, not blocked in the threads that start sessions,
//! never sent by it; pick another number in the config if it is taken.
//! [`serve_until_signal`] installs handlers for SIGINT, SIGTERM and SIGHUP
//! for the duration of its call only.
//!
//! `examples/hello.rs` (one read-only file) and `examples/memfs.rs` (an
//! in-memory file system) are complete daemons to start from.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fuse_server::{FileSystem, Server, Session};
//! use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
//!
//! struct Empty;
//! impl FileSystem for Empty {}
//!
//! let server = Server::new(Arc::new(Empty));
//! let session = DevSession::mount(server, "/mnt/x".as_ref(), &MountOptions::default(), SessionConfig::default())?;
//! session.wait()?; // until unmounted
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod backing;
pub mod dev;
pub mod mount;
pub mod session;
pub mod signal;
pub mod supervise;
pub mod takeover;
#[cfg(feature = "tokio")]
pub mod task;

pub use backing::DevBackingFiles;
pub use dev::DevTransaction;
pub use mount::{
    is_fuse_mount, mount_id_at, unmount_path, InitAnswer, InitMode, Mount, MountError, MountMethod,
    MountOptions, SyncInit, UnmountFn,
};
pub use session::{init_during_mount, DevSession, SessionConfig, SessionError};
pub use signal::serve_until_signal;
#[cfg(feature = "tokio")]
pub use task::{FuseDevSibling, FuseDevTask, TaskConfig, TaskHandle};

/// The README's code compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
