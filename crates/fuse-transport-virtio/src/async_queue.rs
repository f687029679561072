//! Async handlers ([`crate::VirtioConfig::runtime`]): each queue thread
//! runs an `async-io` runtime of its own and serves the chains it finds
//! on its queue as tasks, concurrently, with
//! [`fuse_server::Server::handle_async`].
//!
//! The thread pops every chain available, starts a task for each (with a
//! set of buffers of its own), then waits for them and gives the chains
//! back in the order they came; then it looks for more. A request that
//! waits (a thread pool) so doesn't hold up the others popped with it; one
//! that may wait indefinitely (SETLKW) goes to a thread of its own, with a
//! runtime of its own, since the request that ends its wait may come only
//! later.

use crate::backend::{give_back, pop, VirtioFsBackend, VirtioRuntime, Waiting};
use std::cell::RefCell;
use std::io;
use vhost_user_backend::VringRwLock;
use vm_memory::{GuestMemoryLoadGuard, GuestMemoryMmap};

thread_local! {
    /// The queue thread's runtime, made on its first event.
    static RUNTIME: RefCell<Option<async_io::Runtime>> = const { RefCell::new(None) };
}

/// Serves the chains waiting on `vring` (queue `queue`) as tasks on this
/// thread's runtime of type `kind`.
pub(crate) fn serve_queue(
    backend: &VirtioFsBackend,
    queue: usize,
    vring: &VringRwLock,
    mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    kind: VirtioRuntime,
) -> io::Result<()> {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(build_runtime(queue, kind)?);
        }
        match slot.as_ref() {
            Some(rt) => rt.block_on(serve(backend, queue, vring, mem, kind)),
            None => Err(io::Error::other("no runtime")),
        }
    })
}

/// A runtime of type `kind` for queue `queue`'s thread (or a thread of
/// one of its requests).
pub(crate) fn build_runtime(queue: usize, kind: VirtioRuntime) -> io::Result<async_io::Runtime> {
    let t = match kind {
        VirtioRuntime::Tokio => async_io::RuntimeType::Tokio,
        VirtioRuntime::IoUring => async_io::RuntimeType::IoUring,
    };
    async_io::Builder::new(t)
        .build()
        .map_err(|e| io::Error::other(format!("queue {queue}: the {t} runtime: {e}")))
}

async fn serve(
    backend: &VirtioFsBackend,
    queue: usize,
    vring: &VringRwLock,
    mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    kind: VirtioRuntime,
) -> io::Result<()> {
    let mut tasks = Vec::new();
    loop {
        backend.notifications_off(queue, vring)?;
        while let Some(chain) = pop(vring, mem) {
            let head = chain.head_index();
            let mut bufs = backend.take_buffers(queue)?;
            match backend.prepare(queue, &chain, &mut bufs) {
                None => {
                    give_back(queue, vring, head, 0)?;
                    backend.return_buffers(queue, bufs);
                }
                Some(prepared) => {
                    // A request that may wait indefinitely (SETLKW) goes to
                    // a thread of its own: this loop awaits its tasks
                    // before it pops more, and the request that ends the
                    // wait may come later.
                    let (prepared, mut bufs) = if prepared.waits_indefinitely() {
                        match Waiting::hand_off(queue, vring, mem, head, prepared, bufs, Some(kind))
                        {
                            None => continue,
                            Some(back) => back,
                        }
                    } else {
                        (prepared, bufs)
                    };
                    // The task keeps the guest memory mapping its buffers
                    // point into.
                    let mem = mem.clone();
                    let task = async_io::spawn_local(async move {
                        let used = prepared.serve(&mut bufs).await;
                        drop(mem);
                        (used, bufs)
                    });
                    tasks.push((head, task));
                }
            }
        }
        for (head, task) in tasks.drain(..) {
            match task.await {
                Ok((used, bufs)) => {
                    give_back(queue, vring, head, used)?;
                    backend.return_buffers(queue, bufs);
                }
                Err(e) => {
                    // A task that panicked: its chain goes back unanswered
                    // rather than never.
                    tracing::error!(queue, "a request's task failed: {e}");
                    give_back(queue, vring, head, 0)?;
                }
            }
        }
        if !backend.notifications_on(queue, vring)? {
            return Ok(());
        }
    }
}
