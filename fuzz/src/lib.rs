//! Harnesses of the fuzz targets in `fuzz_targets/`, shared with the
//! corpus replay test (`tests/corpus.rs`) and the capture tool
//! (`src/bin/fuse-capture.rs`).
//!
//! - [`dispatch`]: arbitrary bytes as a stream of requests (each as long as
//!   its header's `len` says, as `/dev/fuse` delivers them) through
//!   [`fuse_server::Server::handle`] into a [`fuse_backend_passthrough::PassthroughFs`]
//!   over a scratch directory, checking every reply and that nothing
//!   outside the served directory was read, changed or even looked at.
//! - [`decode`]: arbitrary bytes through decoding, contiguous and split as
//!   io_uring carries them, and every decoded request through the
//!   kernel-side encoder and back.
//! - [`encoders`]: the reply encoders with arbitrary inputs (entries and
//!   attributes through the dispatch, directory entry buffers,
//!   notifications, INIT negotiation).
//!
//! See `fuzz/README.md` for the commands.

pub mod decode;
pub mod dispatch;
pub mod encoders;
pub mod scratch;
pub mod tx;
