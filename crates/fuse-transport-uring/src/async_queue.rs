//! A ring thread in async mode ([`crate::UringConfig::runtime`]): the
//! thread runs an `async-io` runtime (tokio, or tokio with the thread's own
//! io_uring for file IO) and serves every request of its queues as a local
//! task calling [`fuse_server::Server::handle_async`], so the entries of a
//! queue are served concurrently: while one request waits (an io_uring
//! read of the backing file, a job on the file system's thread pool, a
//! timer), the thread answers the others.
//!
//! ## How the FUSE ring meets the runtime
//!
//! The FUSE ring (SQE128 uring commands on `/dev/fuse`) stays separate
//! from the runtime's own ring. An eventfd registered with the FUSE ring
//! (`IORING_REGISTER_EVENTFD`) and watched by the runtime's reactor wakes
//! the serving loop when the kernel has completions for it; with
//! `DEFER_TASKRUN` the kernel signals it when completion work is queued,
//! and the loop's `io_uring_enter(GETEVENTS)` runs that work. The loop:
//!
//! 1. takes the completions: a request in an entry becomes a task (at
//!    most one per entry, the entry stays in user space until its task
//!    ends); the wake poll (the session's stop) and errors are handled as
//!    in the synchronous loop;
//! 2. pushes a COMMIT_AND_FETCH for every entry whose task finished (the
//!    task wrote its reply into the entry and queued the entry's index);
//! 3. submits everything in one `io_uring_enter` that also reaps;
//! 4. waits for the eventfd or a finished task.
//!
//! A request's task runs at once, in the loop, until it first waits; only
//! a task that waits goes to the runtime. While no task waits, the loop
//! sleeps in the FUSE ring itself (`io_uring_enter` with `min_complete`
//! 1, as the synchronous loop does) rather than in the reactor: a request
//! that never waits (metadata, a page cache hit) costs what it costs the
//! synchronous loop.
//!
//! ## Memory
//!
//! A task reads its request from, and writes its reply into, its entry's
//! own memory (header, `op_in`, payload or pool buffer), through the same
//! raw views the synchronous
//! [`RingTransaction`](super::transaction::RingTransaction) has. The entry belongs to
//! the task from its CQE until the task ends and its commit is pushed; the
//! kernel touches it again only after the commit. Tasks only touch that
//! memory while they are polled: anything that outlives a task's future
//! (an io_uring read of a backing file, a thread pool job) works on a
//! buffer of its own, never on an entry (the file system's contract, see
//! `fuse_backend_passthrough::PassthroughFs`). So a task may be dropped at
//! any time: the runtime, with every task, is dropped before the FUSE
//! ring is closed and before the entries' memory is unmapped.
//!
//! ## Stopping
//!
//! On [`fuse_server::Session::stop`] the loop starts no new request, lets
//! the running tasks finish and commits their replies (for up to 5 s),
//! then returns; closing the ring cancels the entries waiting in the
//! kernel, as in the synchronous loop. A request whose task still runs
//! after that is dropped unanswered (the session's `wait` aborts the
//! connection, which fails it).

use super::transaction::write_reply;
use super::{reap_into, submit, QueueThread, Ring, DRAIN_TIMEOUT};
use crate::zero_copy::FixedRing;
use async_io::RuntimeType;
use fuse_abi::uring::UringReqHeader;
use fuse_abi::InHeader;
use fuse_server::opcode_table::opcode_info_raw;
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use zerocopy::FromBytes;

/// Entries whose task finished, and the waker of the serving loop.
#[derive(Default)]
struct Finished {
    /// `(entry index, commit id)` of entries ready to commit.
    entries: RefCell<Vec<(usize, u64)>>,
    waker: RefCell<Option<Waker>>,
}

impl Finished {
    fn push(&self, index: usize, commit_id: u64) {
        self.entries.borrow_mut().push((index, commit_id));
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// The eventfd registered with the FUSE ring, for the reactor.
struct RingEventFd(crate::sys::EventFd);

impl AsRawFd for RingEventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.raw()
    }
}

/// Serves the thread's queues with async handlers on a runtime of type
/// `kind` until stopped or the connection is gone.
pub(super) fn serve(
    thread: &mut QueueThread,
    ring: &mut Ring,
    kind: RuntimeType,
) -> io::Result<()> {
    let rt = async_io::Builder::new(kind)
        .build()
        .map_err(|e| io::Error::other(format!("building the {kind} runtime: {e}")))?;
    let efd = crate::sys::EventFd::new()?;
    ring.submitter().register_eventfd(efd.raw()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("registering an eventfd with the ring: {e}"),
        )
    })?;
    // From here on the ring is used through `fixed` only: by the loop, and
    // by tasks' zero-copy operations (see `zero_copy.rs`), in turns.
    // SAFETY: `ring` outlives `fixed`, which is dropped after the runtime
    // (and with it every task) and before `ring` is used again below.
    let fixed = unsafe { FixedRing::new(ring as *mut Ring, Vec::new()) };
    let result = rt.block_on(async {
        // SAFETY: `RingEventFd` owns the eventfd and always returns the same
        // descriptor, open until the `AsyncFd` (which owns it) is dropped.
        let efd = unsafe { AsyncFd::register_with_interest(RingEventFd(efd), Interest::READABLE) }
            .map_err(io::Error::from)?;
        serve_loop(thread, &fixed, &efd).await
    });
    // Every task (and the transport memory views it holds) goes first;
    // the ring and the entries' memory after, in `queue::run`.
    drop(rt);
    drop(fixed);
    if let Err(e) = ring.submitter().unregister_eventfd() {
        tracing::debug!("unregistering the ring's eventfd: {e}");
    }
    result
}

async fn serve_loop(
    t: &mut QueueThread,
    fixed: &FixedRing,
    efd: &AsyncFd<RingEventFd>,
) -> io::Result<()> {
    let finished = Rc::new(Finished::default());
    // Entries whose task runs (in user space, not committed yet).
    let mut busy = 0usize;
    let mut deadline: Option<Instant> = None;
    // Vectors that trade places with the ones filled, so that serving
    // allocates nothing once they have grown.
    let (mut batch, mut done) = (Vec::new(), Vec::new());
    loop {
        // Completions a task's zero-copy operation reaped while waiting.
        fixed.take_others(&mut t.pending);
        std::mem::swap(&mut batch, &mut t.pending);
        for &(user_data, res) in &batch {
            start(t, fixed, &finished, &mut busy, user_data, res)?;
        }
        batch.clear();
        std::mem::swap(&mut done, &mut *finished.entries.borrow_mut());
        for &(index, commit_id) in &done {
            busy -= 1;
            fixed.with(|ring| t.commit(ring, index, commit_id))??;
        }
        done.clear();
        if t.shared.stop.load(Ordering::Acquire) {
            t.stopping = true;
        }
        if t.stopping && !t.gone {
            let late = *deadline.get_or_insert_with(|| Instant::now() + DRAIN_TIMEOUT);
            if busy == 0 || Instant::now() >= late {
                if busy > 0 {
                    tracing::warn!(
                        busy,
                        "stopping with requests still running; they are dropped"
                    );
                }
                // Hand in the replies written so far; closing the ring then
                // cancels the entries waiting in the kernel.
                fixed.with(submit)??;
                return Ok(());
            }
        }
        if t.gone {
            if t.in_flight == 0 && busy == 0 {
                return Ok(());
            }
            let late = *deadline.get_or_insert_with(|| Instant::now() + DRAIN_TIMEOUT);
            if Instant::now() >= late {
                tracing::warn!(
                    entries = t.in_flight,
                    busy,
                    "ring entries not returned after the connection ended; closing the ring"
                );
                return Ok(());
            }
        }
        fixed.take_others(&mut t.pending);
        if !t.pending.is_empty() {
            continue;
        }
        if busy == 0 && !t.stopping && !t.gone {
            // No task of ours runs on the runtime, so nothing but the ring
            // can bring work: wait in the ring itself, as the synchronous
            // loop does (one system call that submits the commits and
            // sleeps), not through the reactor (eventfd, epoll, enter).
            fixed.with(|ring| -> io::Result<()> {
                super::wait(ring)?;
                reap_into(ring, &mut t.pending);
                Ok(())
            })??;
            continue;
        }
        // Submit the commits and run the ring's completion work.
        fixed.with(|ring| -> io::Result<()> {
            enter(ring)?;
            reap_into(ring, &mut t.pending);
            Ok(())
        })??;
        if !t.pending.is_empty() {
            continue;
        }
        if !finished.entries.borrow().is_empty() {
            continue;
        }
        let tick = (t.stopping || t.gone).then_some(Duration::from_millis(50));
        wait(efd, &finished, tick).await;
    }
}

/// `io_uring_enter` submitting what is queued and, with `GETEVENTS`,
/// running the ring's deferred completion work (`DEFER_TASKRUN`) without
/// waiting for anything.
fn enter(ring: &mut Ring) -> io::Result<()> {
    let to_submit = ring.submission().len() as u32;
    loop {
        // SAFETY: no argument pointer; every SQE queued points at memory
        // that outlives the ring (see `QueueThread::push`).
        let r = unsafe {
            ring.submitter().enter::<libc::sigset_t>(
                to_submit,
                0,
                io_uring::EnterFlags::GETEVENTS.bits(),
                None,
            )
        };
        match r {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            // The completion queue is full or memory is short: reap first.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => return Ok(()),
            Err(e) => return Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
        }
    }
}

/// Waits until the ring's eventfd fires, a task finishes, or `tick` passes.
async fn wait(efd: &AsyncFd<RingEventFd>, finished: &Finished, tick: Option<Duration>) {
    let ready = poll_fn(|cx| {
        if !finished.entries.borrow().is_empty() {
            return Poll::Ready(());
        }
        *finished.waker.borrow_mut() = Some(cx.waker().clone());
        match efd.poll_read_ready(cx) {
            Poll::Ready(Ok(mut guard)) => {
                guard.get_inner().0.drain();
                guard.clear_ready();
                Poll::Ready(())
            }
            Poll::Ready(Err(e)) => {
                tracing::error!("watching the ring's eventfd: {e}");
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    });
    match tick {
        Some(d) => {
            let _ = tokio::time::timeout(d, ready).await;
        }
        None => ready.await,
    }
}

/// Handles one completion: a request becomes a task.
fn start(
    t: &mut QueueThread,
    fixed: &FixedRing,
    finished: &Rc<Finished>,
    busy: &mut usize,
    user_data: u64,
    res: i32,
) -> io::Result<()> {
    let Some(index) = fixed.with(|ring| t.take_completion(ring, user_data, res))?? else {
        return Ok(());
    };
    if t.stopping {
        // No new request once stopping: it stays unanswered (the session
        // aborts the connection at the end, which fails it).
        return Ok(());
    }
    if let Some(commit_id) = t.answer_kick(index) {
        // One of our kicks (see `Kicker`): answered without a task.
        *busy += 1;
        finished.push(index, commit_id);
        return Ok(());
    }
    let e = &t.entries[index];
    let entry_header = e.header;
    let queue = &t.plan.queues[e.queue];
    let qid = queue.qid;
    // SAFETY: the entry's CQE arrived, so the kernel leaves its header
    // alone until it is committed; the header is 8-byte aligned.
    let (in_out, ent) = unsafe {
        (
            std::ptr::read(std::ptr::addr_of!((*entry_header).in_out)),
            std::ptr::read(std::ptr::addr_of!((*entry_header).ring_ent_in_out)),
        )
    };
    let header = InHeader::read_from_prefix(&in_out).ok().map(|(h, _)| h);
    let unique = header.map_or(ent.commit_id, |h| h.unique);
    let commit_id = ent.commit_id;
    let view = match t.locate(e, queue, header, &ent) {
        Ok(v) => v,
        Err(why) => {
            t.shared
                .counters
                .bad_requests
                .fetch_add(1, Ordering::Relaxed);
            if std::mem::replace(&mut t.logged_bad, true) {
                tracing::debug!(qid, unique, "bad ring request: {why}");
            } else {
                tracing::warn!(qid, unique, "bad ring request: {why}");
            }
            write_reply(entry_header, unique, -libc::EIO, 0);
            *busy += 1;
            finished.push(index, commit_id);
            return Ok(());
        }
    };
    // SAFETY: the entry belongs to the task until its commit; `fixed`
    // outlives every task (the runtime is dropped first, in `serve`), on
    // this thread.
    let tx = unsafe { t.transaction(index, &view, fixed) };
    let qid = qid as usize;
    let opcode = view.opcode;
    if opcode_info_raw(opcode).is_some_and(|i| i.waits_indefinitely()) {
        // A lock wait holds its entry for as long as the lock is taken.
        let nodeid = header.map_or(fuse_abi::ROOT_ID, |h| h.nodeid);
        fixed.with(|ring| t.keep_entries_free(ring, index, nodeid))??;
    }
    let shared = t.shared.clone();
    let finished = finished.clone();
    *busy += 1;
    let mut task = Box::pin(async move {
        let mut tx = tx;
        let header: *mut UringReqHeader = tx.header;
        let result = {
            let mut fut = pin!(shared.server.handle_async(&mut tx));
            let mut panicked = false;
            poll_fn(|cx| {
                if panicked {
                    return Poll::Ready(None);
                }
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    fut.as_mut().poll(cx)
                })) {
                    Ok(Poll::Ready(r)) => Poll::Ready(Some(r)),
                    Ok(Poll::Pending) => Poll::Pending,
                    Err(_) => {
                        panicked = true;
                        Poll::Ready(None)
                    }
                }
            })
            .await
        };
        shared.counters.request(qid, opcode);
        if !tx.replied {
            // No reply (an unreadable request, an opcode that takes none, a
            // panic): the entry must go back all the same.
            write_reply(header, unique, -libc::EIO, 0);
        }
        match result {
            Some(Ok(_)) => {}
            Some(Err(err)) => tracing::debug!(unique, "handling a ring request: {err}"),
            None => tracing::error!(
                unique,
                opcode,
                "the file system panicked; the request gets EIO"
            ),
        }
        finished.push(index, commit_id);
    });
    // Most requests (metadata, page cache hits) finish without waiting:
    // run the task here at once, and hand it to the runtime only if it
    // waits. A future registers the waker of its latest poll, so the
    // runtime's first poll of the spawned task replaces this one's.
    if task
        .as_mut()
        .poll(&mut std::task::Context::from_waker(Waker::noop()))
        .is_pending()
    {
        async_io::spawn_local(task);
    }
    Ok(())
}
