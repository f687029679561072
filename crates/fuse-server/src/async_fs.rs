//! The asynchronous [`AsyncFileSystem`] trait, and the adapter that serves
//! a synchronous [`FileSystem`] through it.
//!
//! The server has one dispatch, written against [`AsyncFileSystem`]. A
//! synchronous file system goes through [`SyncFs`], whose futures are
//! [`FsFuture::Ready`] values: no allocation, and the dispatch completes at
//! its first poll, so the synchronous transports drive it without an
//! executor.

pub use crate::filesystem::AsyncFileSystem;
use crate::filesystem::FileSystem;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

/// The future an [`AsyncFileSystem`] method returns: a value that is ready
/// at once (no allocation) or a boxed future.
///
/// The boxed future need not be `Send`: a connection is served thread by
/// thread (each serving thread reads its own `/dev/fuse` fd or ring), so a
/// file system may use thread-bound I/O such as an io_uring owned by the
/// serving thread (`async-io`'s io_uring runtime). Serving tasks are
/// therefore local tasks (`spawn_local`).
pub enum FsFuture<'a, T> {
    /// A result available at once; `None` once taken.
    Ready(Option<io::Result<T>>),
    /// A result still being computed.
    Pending(Pin<Box<dyn Future<Output = io::Result<T>> + 'a>>),
}

impl<'a, T> FsFuture<'a, T> {
    /// A future that is ready with `result`.
    pub fn ready(result: io::Result<T>) -> Self {
        FsFuture::Ready(Some(result))
    }

    /// Boxes `future`.
    pub fn boxed(future: impl Future<Output = io::Result<T>> + 'a) -> Self {
        FsFuture::Pending(Box::pin(future))
    }
}

// The value is moved out, never pinned in place.
impl<T> Unpin for FsFuture<'_, T> {}

impl<T> Future for FsFuture<'_, T> {
    type Output = io::Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            FsFuture::Ready(value) => Poll::Ready(
                value
                    .take()
                    .unwrap_or_else(|| Err(io::Error::other("FsFuture polled after completion"))),
            ),
            FsFuture::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

/// Serves a synchronous [`FileSystem`] as an [`AsyncFileSystem`]: every
/// method calls the synchronous one and returns its result ready.
pub struct SyncFs(pub Arc<dyn FileSystem>);

impl AsyncFileSystem for SyncFs {
    fn sync_fs(&self) -> Option<&dyn FileSystem> {
        Some(&*self.0)
    }
}
