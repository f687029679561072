//! The FUSE protocol engine: typed request decoding, the [`FileSystem`] and
//! [`AsyncFileSystem`] traits, INIT negotiation, one dispatch, reply
//! encoding and notifications.
//!
//! The pieces meet at trait objects:
//!
//! - a backend implements [`FileSystem`] (synchronous) or
//!   [`AsyncFileSystem`] and is held as an `Arc<dyn …>`;
//! - a transport (`/dev/fuse`, io_uring, …) hands each request to
//!   [`Server::handle`] or [`Server::handle_async`] as a
//!   `&mut dyn` [`Transaction`]: the request's bytes and the memory its reply
//!   goes into;
//! - the server decodes the request into an [`Operation`] (validating every
//!   length; bad input gets an errno, never a panic), calls the backend with
//!   typed arguments, and encodes the reply into the transport's memory.
//!   READ data goes from the backing file straight into that memory
//!   through a [`ZeroCopyWriter`].
//!
//! There is one dispatch, written against [`AsyncFileSystem`]; a synchronous
//! backend runs through [`SyncFs`], whose futures are ready at once, so the
//! synchronous path allocates nothing and never waits on an executor.

#![deny(missing_docs)]

pub mod args;
pub mod async_fs;
pub mod attr;
pub mod backing;
pub mod errno;
pub mod filesystem;
pub mod init;
pub mod io;
pub mod notify;
pub mod opcode_table;
mod operations;
pub mod prune;
pub mod recovery;
pub mod request;
mod request_log;
pub mod server;
pub mod session;
pub mod sys;
pub mod takeover;
pub mod types;
pub mod wire;

pub use args::*;
pub use async_fs::{AsyncFileSystem, FsFuture, SyncFs};
pub use attr::{FileAttr, FileType};
pub use backing::{BackingFiles, BackingId, FILESYSTEM_MAX_STACK_DEPTH};
pub use filesystem::{enosys, FileSystem};
/// The root's node id (1).
pub use fuse_abi::ROOT_ID;
/// The protocol types that the traits' signatures, the argument structs
/// and the replies name, so a file system needs no `fuse-abi` dependency
/// of its own (`Kstatfs` for `statfs`, `RenameFlags` for `rename`, ...).
pub use fuse_abi::{
    AccessMask, Attr, FileLock, FopenFlags, FsyncFlags, IoctlFlags, Kstatfs, OpenInFlags,
    ReadFlags, ReleaseFlags, RemovemappingOne, RenameFlags, SetattrValid, SetupmappingIn,
    SetxattrFlags, Statx, WriteFlags,
};
pub use init::{InitConfig, KernelInit, Negotiated};
pub use io::{
    AlignedBuf, DirentBuf, DirentPlusSink, DirentSink, SliceReader, SliceWriter, ZeroCopyReader,
    ZeroCopyWriter,
};
pub use notify::{NotificationSink, Notifier};
pub use opcode_table::{opcode_info, OpcodeInfo, ReplyShape};
pub use prune::{PruneSource, PruneStats, Pruner};
pub use request::{
    decode, DecodeError, DecodeOptions, ForgetList, Operation, PodList, RawRequest, Request,
};
pub use server::{block_on, errno_of, Outcome, RequestCounters, Server, Transaction};
pub use session::Session;
pub use types::*;
