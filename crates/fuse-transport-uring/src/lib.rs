//! Serve a FUSE file system over io_uring (`FUSE_OVER_IO_URING`, Linux
//! 6.14+), with the kernel's buffer pools, registered with the rings, and
//! zero copy where it offers them (Linux 7.3, `FUSE_HAS_IO_URING_BUFPOOL`,
//! `FUSE_URING_ZERO_COPY`).
//!
//! [`UringSession`] mounts, answers INIT over `/dev/fuse`, and then serves
//! requests from one io_uring per thread, with threads pinned to the CPU of
//! their kernel queue (the kernel has a queue per possible CPU and sends
//! each request to the queue of the CPU it was issued on). Synchronous
//! handlers run on several threads per queue by default, each with one
//! entry, so that a queue serves several requests at once
//! ([`UringConfig::threads_per_queue`]); async handlers serve a queue's
//! entries concurrently on one thread ([`UringConfig::runtime`]). `/dev/fuse` stays in use for what the
//! kernel still sends there (FORGET, BATCH_FORGET, INTERRUPT) and for
//! notifications. Where io_uring can't be used the session falls back, step
//! by step, and says why ([`UringSession::mode`],
//! [`UringSession::fallback_reason`]).
//!
//! Kernel passthrough works the same way as over `/dev/fuse`: the backing
//! file ioctls (`FUSE_DEV_IOC_BACKING_OPEN`/`CLOSE`) go to the session's
//! `/dev/fuse` descriptor, whose registry the inner `DevSession` installs
//! on the server before INIT ([`fuse_server::Server::backing_files`]);
//! OPEN and CREATE then come through the rings and READ and WRITE of
//! passed-through files don't come at all.
//!
//! Signals: the ring threads need none (a stop closes the rings), but the
//! inner `DevSession` that serves `/dev/fuse` installs its process-wide
//! do-nothing handler for `SIGRTMIN() + 4` (the default
//! `fuse_transport_dev::SessionConfig::wake_signal`, which `UringConfig`
//! does not change) to wake its workers on a stop; the application must
//! not handle, block or send that signal (see `fuse_transport_dev`'s
//! crate docs).
//!
//! ```no_run
//! use std::sync::Arc;
//! use fuse_server::{FileSystem, Server, Session};
//! use fuse_transport_dev::MountOptions;
//! use fuse_transport_uring::{UringConfig, UringSession};
//!
//! struct Empty;
//! impl FileSystem for Empty {}
//!
//! let server = Server::new(Arc::new(Empty));
//! let session = UringSession::mount(
//!     server,
//!     "/mnt/x".as_ref(),
//!     &MountOptions::default(),
//!     UringConfig::default(),
//! )?;
//! println!("{}", session.transport());
//! session.wait()?; // until unmounted
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The kernel's protocol, as this crate uses it
//!
//! - **Entries.** Each entry is a `fuse_uring_req_header` (288 bytes:
//!   `in_out[128]`, `op_in[128]`, `fuse_uring_ent_in_out`) and, without a
//!   pool, a payload buffer of at least the ring's `max_payload_sz`
//!   (`max(8192, max_write, max_pages * PAGE_SIZE)`). REGISTER passes both as
//!   two iovecs (`sqe->addr`, `sqe->len == 2`) on a ring created with
//!   `IORING_SETUP_SQE128`; the command stays in the kernel until a request
//!   arrives.
//! - **Requests.** The kernel writes the `fuse_in_header` to `in_out`, the
//!   opcode's first argument (its fixed struct, if not empty) to `op_in`,
//!   and every other argument (names, WRITE data, extensions) to the payload
//!   buffer; `ent_in_out.payload_sz` is the number of payload bytes,
//!   `commit_id` the request's unique, and with a pool `offset` the payload
//!   buffer's offset in the queue's pool. `in_header.len` counts all of it,
//!   so the `op_in` length is `len - 40 - payload_sz`.
//! - **Replies.** The server writes a `fuse_out_header` (unique, error) to
//!   `in_out` and the body length to `ent_in_out.payload_sz`, the body to
//!   the same payload buffer, and submits COMMIT_AND_FETCH with the
//!   `commit_id`; that one SQE hands the reply in and waits for the next
//!   request.
//! - **Ready.** Until every queue (`num_possible_cpus()` of them) has an
//!   entry waiting, the kernel keeps new requests blocked (not even on
//!   `/dev/fuse`); then it switches the connection to the rings. A refused
//!   REGISTER turns io_uring off for the connection (requests go to
//!   `/dev/fuse` again).
//! - **Pools.** ADD_QUEUE creates a queue, ADD_BUFPOOL gives it one region
//!   (`uaddr`, 32-bit `len`) that the kernel cuts into `len /
//!   max_payload_sz` buffers; both must come before the queue's first
//!   REGISTER, and pooled entries register with a `{NULL, 0}` payload iovec.
//!   The kernel takes a buffer for a request only if it has payload or out
//!   arguments (`offset` is 0 otherwise, and meaningless), keeps it while
//!   the entry is in user space, and reuses or frees it at the commit.
//!   A request that finds no free buffer waits in the kernel.
//! - **Registered pools.** ADD_BUFPOOL with `IORING_URING_CMD_FIXED` and a
//!   `buf_index` makes the queue's pool registered: the kernel imports
//!   payloads through that slot of the buffer table of the ring whose
//!   command holds the entry (pages pinned once instead of per request),
//!   so every ring serving the queue registers the pool's memory there,
//!   from the same addresses, and every REGISTER and COMMIT_AND_FETCH of
//!   the queue carries the flag and the index (a REGISTER without them
//!   turns io_uring off for the connection). This transport maps all
//!   queues' pools as one region, registers it as slot 0 of every ring,
//!   and tries that on its setup ring first ([`UringConfig::registered_pools`]).
//! - **Zero copy.** ADD_QUEUE with `FUSE_URING_ZERO_COPY` (pools only,
//!   `CAP_SYS_ADMIN` only) makes each REGISTER name an empty slot of its
//!   ring's buffer table (`ent_zero_copy_buf_index`); for a READ or WRITE
//!   of a file opened with `FOPEN_IO_URING_ZERO_COPY` the kernel registers
//!   the request's pages there and flags the entry
//!   (`FUSE_URING_ENT_ZERO_COPY`; a READ then has no pool buffer, a
//!   WRITE's pool buffer holds no data). The server moves the data with
//!   `READ_FIXED`/`WRITE_FIXED` on that ring (`addr` = offset in the
//!   request's data), waits for them, replies with the byte count, and the
//!   kernel unregisters the slot at the commit. This transport registers a
//!   sparse table per ring (the pool or nothing at slot 0, entry *i* at
//!   *1 + i*), and offers the request to the file system as a
//!   [`fuse_server::io::ZeroCopyWriter`] / `ZeroCopyReader` whose
//!   `write_from_file` / `read_to_file` are those operations
//!   ([`UringConfig::zero_copy`], [`UringStats::zero_copy_bytes`]); the
//!   server takes `FOPEN_IO_URING_ZERO_COPY` off opens elsewhere, and off
//!   any open with `FOPEN_PASSTHROUGH` (the kernel refuses the pair).
//! - **Teardown.** An unmount or abort stops the queues: entries waiting in
//!   the kernel complete with `-ENOTCONN`, entries in user space are
//!   released and their commits fail with `-ENOTCONN`. Closing a ring
//!   cancels its waiting commands (`IO_URING_F_CANCEL`; the kernel frees
//!   those entries). `IORING_OP_ASYNC_CANCEL` doesn't reach uring commands.

pub mod config;
pub mod stats;

mod cmd;
mod fault;
mod queue;
mod session;
mod sys;
mod zero_copy;

/// Ring primitives for the transport's own kernel probe
/// (`tests/owner_change.rs`, which drives a connection's rings by hand):
/// not a supported API.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod probe {
    pub use crate::cmd::{commit_and_fetch, register};
    pub use crate::queue::{build_ring, submit, Ring};
    pub use crate::sys::possible_cpus;
}

pub use config::{
    default_threads_per_queue, UringConfig, UringMode, UringRuntime, DEFAULT_RING_NICE,
};
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use fault::UringFault;
pub use session::{UringError, UringSession};
pub use stats::{TransportMemory, UringStats};
