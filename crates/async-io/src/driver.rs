//! The per-thread io_uring driver.
//!
//! # Shape
//!
//! One [`Driver`] owns one ring and a table of operations (a slab indexed by the low 32
//! bits of each SQE's `user_data`; the next 31 bits carry a generation so a stale cancel
//! can never hit a reused slot, and the top bit, [`DRIVER_KEY`], marks the driver's own
//! SQEs, so that a ring shared with another user's uring commands ([`crate::SharedRing`])
//! can tell whose each completion is). An operation is an [`Op<T>`] future: creating it pushes
//! an SQE into the submission queue and parks `T` (the owned buffers, iovec arrays, path
//! strings and a clone of the fd the SQE points at) in the future.
//!
//! # Batching
//!
//! Pushing an SQE does not enter the kernel. It marks a flush as pending and wakes the
//! driver task once; every SQE pushed before that task runs (the rest of the current
//! scheduler tick: other tasks, the rest of a `join`) goes to the kernel in the same
//! `io_uring_enter`. Only a full submission queue forces an early submit.
//!
//! # Completions
//!
//! The ring signals an eventfd (`IORING_REGISTER_EVENTFD`) for every CQE. The eventfd is
//! registered with tokio's reactor through `AsyncFd`, so the same thread's epoll wait
//! covers the ring and every other fd the application watches (later: /dev/fuse). The
//! driver task drains the eventfd, reaps the completion queue, stores each result in its
//! slot and wakes the waiting future. Completions that the kernel finished inline during
//! the submit (page-cache hits) are reaped right after the submit, without a round trip
//! through epoll.
//!
//! # Ownership and cancellation
//!
//! While the kernel may still touch an operation's memory, that memory is owned by the
//! driver: by the `Op` future while it lives, and by the slot (`Lifecycle::Ignored`) once
//! the future is dropped early. Dropping an in-flight `Op` also queues an
//! `IORING_OP_ASYNC_CANCEL` for it, but the buffers are freed only when the operation's
//! own CQE arrives. Dropping the driver cancels whatever is still in flight and waits for
//! every CQE before the ring and the memory go away.
//!
//! # Standalone use
//!
//! [`Driver::block_on`] runs a future that only waits for this driver's operations on the
//! calling thread, waiting in `io_uring_enter`: this is how a tokio-runtime thread (where
//! file IO blocks by contract) still gets a batched, deep-queue copy from a private ring.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Submitter};

use crate::sys;

/// `user_data` of SQEs whose completion nobody waits for (cancel requests).
const UNTRACKED: u64 = u64::MAX;

/// Set in the `user_data` of every SQE the driver makes itself (its operations and
/// [`UNTRACKED`]). An SQE pushed onto a shared ring by its other user (see
/// [`crate::SharedRing`]) has it clear, and its completion is handed back to that user
/// instead of an operation slot.
pub(crate) const DRIVER_KEY: u64 = 1 << 63;

/// Generations are 31 bits wide, so that a key never loses [`DRIVER_KEY`].
const GENERATION_MASK: u32 = 0x7fff_ffff;

/// The ring itself: 64-byte SQEs, or 128-byte ones (`IORING_SETUP_SQE128`) when the ring
/// is shared with uring commands that need them (FUSE over io_uring).
enum Ring {
    Sqe64(IoUring),
    Sqe128(IoUring<squeue::Entry128, cqueue::Entry>),
}

/// Runs `$body` with `$r` bound to the ring, whichever its SQE size.
macro_rules! with_ring {
    ($ring:expr, $r:ident => $body:expr) => {
        match $ring {
            Ring::Sqe64($r) => $body,
            Ring::Sqe128($r) => $body,
        }
    };
}

impl Ring {
    /// Pushes `sqe` (converted to 128 bytes on a SQE128 ring).
    ///
    /// # Safety
    /// As `SubmissionQueue::push`: the SQE's pointers and fds stay valid until its CQE.
    unsafe fn push(&mut self, sqe: &squeue::Entry) -> Result<(), squeue::PushError> {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                Ring::Sqe64(r) => r.submission().push(sqe),
                Ring::Sqe128(r) => r.submission().push(&squeue::Entry128::from(sqe.clone())),
            }
        }
    }

    fn sq_is_empty(&mut self) -> bool {
        with_ring!(self, r => r.submission().is_empty())
    }

    /// `(cq_overflow, taskrun)` flags of the submission queue.
    fn sq_flags(&mut self) -> (bool, bool) {
        with_ring!(self, r => {
            let sq = r.submission();
            (sq.cq_overflow(), sq.taskrun())
        })
    }

    fn submitter(&self) -> Submitter<'_> {
        with_ring!(self, r => r.submitter())
    }

    /// Takes every CQE off the completion queue into `out` as `(user_data, result)`.
    fn drain_cq(&mut self, out: &mut Vec<(u64, i32)>) {
        with_ring!(self, r => out.extend(r.completion().map(|c| (c.user_data(), c.result()))))
    }
}

/// The result of one completed SQE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
    /// `cqe.res`: a count or `-errno`.
    pub res: i32,
}

impl Completion {
    /// The result as a count or an `io::Error`.
    pub fn into_result(self) -> io::Result<u32> {
        if self.res < 0 {
            Err(io::Error::from_raw_os_error(-self.res))
        } else {
            Ok(self.res as u32)
        }
    }
}

enum Lifecycle {
    /// Pushed (maybe not yet submitted); no waker yet.
    Submitted,
    /// Polled at least once and pending.
    Waiting(Waker),
    /// The CQE arrived; the `Op` will pick it up.
    Completed(Completion),
    /// The `Op` was dropped before its CQE: the driver keeps its data alive until the CQE.
    Ignored(#[allow(dead_code)] Box<dyn Any>),
}

struct Slot {
    generation: u32,
    state: Option<Lifecycle>,
}

/// A slab of operation slots with generation counters.
#[derive(Default)]
struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
}

impl Slab {
    fn insert(&mut self, state: Lifecycle) -> u64 {
        self.live += 1;
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    state: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.state = Some(state);
        DRIVER_KEY | (u64::from(slot.generation) << 32) | u64::from(idx)
    }

    /// The slot of `key` if `key` is a driver key of the slot's current generation.
    fn slot_mut(&mut self, key: u64) -> Option<&mut Slot> {
        if key & DRIVER_KEY == 0 {
            return None;
        }
        let slot = self.slots.get_mut((key & 0xffff_ffff) as usize)?;
        if u64::from(slot.generation) != (key & !DRIVER_KEY) >> 32 {
            return None;
        }
        Some(slot)
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Lifecycle> {
        self.slot_mut(key)?.state.as_mut()
    }

    fn remove(&mut self, key: u64) -> Option<Lifecycle> {
        let idx = (key & 0xffff_ffff) as u32;
        let slot = self.slot_mut(key)?;
        let state = slot.state.take()?;
        slot.generation = slot.generation.wrapping_add(1) & GENERATION_MASK;
        self.free.push(idx);
        self.live -= 1;
        Some(state)
    }
}

struct Inner {
    ring: Ring,
    ops: Slab,
    /// Operations of the driver whose CQE has not been reaped yet (abandoned ones
    /// included): what [`Driver::in_flight`] reports, kept as a count so that a caller
    /// may ask on every turn of its loop.
    awaiting: usize,
    /// Completions of SQEs pushed by the ring's other user (`user_data` without
    /// [`DRIVER_KEY`]), waiting to be taken ([`Driver::take_foreign`]).
    foreign: Vec<(u64, i32)>,
    /// Woken when `foreign` gets a completion.
    foreign_waker: Option<Waker>,
    /// Reaped CQEs being dispatched (kept, so that reaping allocates nothing).
    scratch: Vec<(u64, i32)>,
    /// The driver task's waker, woken once per batch of pushes.
    flush_waker: Option<Waker>,
    flush_pending: bool,
}

/// Counters for tests and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DriverStats {
    /// `io_uring_enter` calls made to submit or wait.
    pub enters: u64,
    /// SQEs handed to the kernel.
    pub sqes: u64,
    /// CQEs reaped.
    pub cqes: u64,
    /// Operations whose future was dropped before their CQE.
    pub abandoned: u64,
    /// Times the completion queue had overflowed into the kernel's overflow list.
    pub cq_overflows: u64,
}

/// How to build a [`Driver`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DriverOptions {
    /// Submission queue slots (rounded up to a power of two).
    pub entries: u32,
    /// Least completion queue size (it is at least twice `entries` and 1024 anyway).
    pub cq_entries: u32,
    /// Register an eventfd signalled on every completion.
    pub with_eventfd: bool,
    /// `DEFER_TASKRUN` where the kernel allows it.
    pub defer_taskrun: bool,
    /// 128-byte SQEs (`IORING_SETUP_SQE128`), for sharing the ring with uring commands.
    pub sqe128: bool,
}

/// Builds a ring with `S`-sized SQEs.
fn build<S: squeue::EntryMarker>(
    cq: u32,
    entries: u32,
    defer_taskrun: bool,
) -> io::Result<IoUring<S, cqueue::Entry>> {
    // DEFER_TASKRUN (optional, see `Builder::defer_taskrun`): completions that need this
    // thread's context wait on a local list until we enter with GETEVENTS, instead of
    // interrupting the thread. The kernel still signals the eventfd when such work is
    // queued, and TASKRUN_FLAG (IORING_SQ_TASKRUN) tells `reap_locked` an enter is due.
    // It requires SINGLE_ISSUER, which the thread-bound driver satisfies. Kernels before
    // 6.1 refuse these flags: fall back to a plain ring.
    let plain = || IoUring::builder().setup_cqsize(cq).build(entries);
    if defer_taskrun {
        IoUring::builder()
            .setup_cqsize(cq)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(entries)
            .or_else(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    plain()
                } else {
                    Err(e)
                }
            })
    } else {
        plain()
    }
}

/// One io_uring ring with its operation table. See the module docs.
pub(crate) struct Driver {
    inner: RefCell<Inner>,
    stats: Cell<DriverStats>,
    eventfd: Option<OwnedFd>,
}

impl Driver {
    /// A ring with `entries` submission slots (rounded up to a power of two; the completion
    /// queue gets twice as many, at least 1024). With `with_eventfd`, an eventfd is
    /// registered to be signalled on every completion (see [`Driver::eventfd`]). With
    /// `defer_taskrun`, the ring is set up with `DEFER_TASKRUN` where the kernel allows it.
    pub fn new(entries: u32, with_eventfd: bool, defer_taskrun: bool) -> io::Result<Driver> {
        Driver::with_options(DriverOptions {
            entries,
            with_eventfd,
            defer_taskrun,
            ..DriverOptions::default()
        })
    }

    /// [`Driver::new`] with every option.
    pub fn with_options(o: DriverOptions) -> io::Result<Driver> {
        let DriverOptions {
            entries,
            cq_entries,
            with_eventfd,
            defer_taskrun,
            sqe128,
        } = o;
        // A roomy completion queue: buffered writes complete from io-wq workers in bursts,
        // and CQEs beyond it go through the kernel's slower overflow list.
        let cq = (entries.next_power_of_two() * 2).max(1024).max(cq_entries);
        if sqe128 {
            return Driver::finish(
                Ring::Sqe128(build(cq, entries, defer_taskrun)?),
                with_eventfd,
            );
        }
        Driver::finish(
            Ring::Sqe64(build(cq, entries, defer_taskrun)?),
            with_eventfd,
        )
    }

    fn finish(ring: Ring, with_eventfd: bool) -> io::Result<Driver> {
        let eventfd = if with_eventfd {
            let efd = sys::eventfd()?;
            ring.submitter().register_eventfd(efd.as_raw_fd())?;
            Some(efd)
        } else {
            None
        };
        Ok(Driver {
            inner: RefCell::new(Inner {
                ring,
                ops: Slab::default(),
                awaiting: 0,
                foreign: Vec::new(),
                foreign_waker: None,
                scratch: Vec::new(),
                flush_waker: None,
                flush_pending: false,
            }),
            stats: Cell::new(DriverStats::default()),
            eventfd,
        })
    }

    /// The eventfd the ring signals, if one was registered.
    pub fn eventfd(&self) -> Option<&OwnedFd> {
        self.eventfd.as_ref()
    }

    /// Counters since the driver was created.
    pub fn stats(&self) -> DriverStats {
        self.stats.get()
    }

    /// Operations whose CQE has not been reaped yet (including abandoned ones).
    pub fn in_flight(&self) -> usize {
        self.inner.borrow().awaiting
    }

    fn bump(&self, f: impl FnOnce(&mut DriverStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Queues `sqe` and returns the future of its completion, which owns `data` until the
    /// kernel is done with it.
    ///
    /// # Safety
    /// Every pointer in `sqe` must point into memory owned by `data` (heap memory that does
    /// not move when `data` moves) or into memory that outlives the operation, and every fd
    /// in it must be kept open by `data` or outlive the operation.
    pub unsafe fn submit<T: 'static>(self: &Rc<Self>, sqe: squeue::Entry, data: T) -> Op<T> {
        let key = {
            let mut inner = self.inner.borrow_mut();
            inner.awaiting += 1;
            inner.ops.insert(Lifecycle::Submitted)
        };
        self.push(sqe.user_data(key));
        Op {
            driver: self.clone(),
            key,
            data: Some(data),
        }
    }

    /// Pushes an SQE, submitting first if the queue is full, and schedules a flush.
    fn push(&self, sqe: squeue::Entry) {
        let mut deferred = Deferred::default();
        let waker = {
            let mut inner = self.inner.borrow_mut();
            loop {
                // SAFETY: the SQE's pointers are valid per `submit`'s contract (or it is a
                // cancel request without pointers).
                let pushed = unsafe { inner.ring.push(&sqe) }.is_ok();
                if pushed {
                    break;
                }
                // The submission queue is full: hand it to the kernel now.
                if let Err(e) = self.submit_locked(&mut inner, 0, &mut deferred) {
                    tracing::error!("io_uring submit with a full queue failed: {e}");
                }
            }
            if inner.flush_pending {
                None
            } else {
                inner.flush_pending = true;
                inner.flush_waker.clone()
            }
        };
        deferred.run();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Submits queued SQEs (and waits for `wait` completions), then reaps. Wakers and
    /// abandoned buffers are handed back through `deferred` so they run outside the borrow.
    fn submit_locked(
        &self,
        inner: &mut Inner,
        wait: usize,
        deferred: &mut Deferred,
    ) -> io::Result<()> {
        self.submit_locked_for(inner, wait, None, deferred)
            .map(|_| ())
    }

    /// [`Driver::submit_locked`], sleeping at most `timeout` (if given) for the `wait`
    /// completions; returns `false` if it gave up for the timeout.
    fn submit_locked_for(
        &self,
        inner: &mut Inner,
        wait: usize,
        timeout: Option<Duration>,
        deferred: &mut Deferred,
    ) -> io::Result<bool> {
        let ts = timeout.map(|t| {
            types::Timespec::new()
                .sec(t.as_secs())
                .nsec(t.subsec_nanos())
        });
        // While this thread sleeps in the ring for completions, which it
        // reaps itself, the eventfd (there for a reactor that waits
        // elsewhere) would be signalled for each for nothing: quiet it
        // for the system call (IORING_CQ_EVENTFD_DISABLED, a flag in the
        // shared ring), and speak again before reaping, so that what comes
        // after the reap signals as before.
        let quiet = wait > 0 && self.eventfd.is_some();
        loop {
            if quiet {
                with_ring!(&mut inner.ring, r => r.completion().disable_eventfd());
            }
            let r = match &ts {
                Some(ts) if wait > 0 => {
                    let args = types::SubmitArgs::new().timespec(ts);
                    inner.ring.submitter().submit_with_args(wait, &args)
                }
                _ => inner.ring.submitter().submit_and_wait(wait),
            };
            if quiet {
                with_ring!(&mut inner.ring, r => r.completion().enable_eventfd());
            }
            self.bump(|s| s.enters += 1);
            match r {
                Ok(n) => {
                    self.bump(|s| s.sqes += n as u64);
                    self.reap_locked(inner, deferred);
                    // The kernel consumes every SQE unless it runs out of memory; if some are
                    // left, go again as long as it makes progress.
                    if n == 0 || inner.ring.sq_is_empty() {
                        return Ok(true);
                    }
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // The timeout passed with fewer than `wait` completions (the SQEs
                    // were submitted all the same).
                    Some(libc::ETIME) if ts.is_some() => {
                        self.reap_locked(inner, deferred);
                        return Ok(false);
                    }
                    // The completion queue overflowed (the kernel keeps the CQEs, NODROP) or
                    // the kernel is short of memory: make room and retry.
                    Some(libc::EBUSY) | Some(libc::EAGAIN) => {
                        if self.reap_locked(inner, deferred) == 0 {
                            // Nothing to reap yet: wait for a completion.
                            let _ = inner.ring.submitter().submit_and_wait(1);
                        }
                    }
                    _ => return Err(e),
                },
            }
        }
    }

    /// Moves every available CQE into its slot, including completions the kernel deferred
    /// to this thread (DEFER_TASKRUN) and CQEs it parked on its overflow list when the
    /// completion queue was full (their eventfd signal has already fired, so they must be
    /// fetched now or never). Returns how many were reaped.
    ///
    /// It enters again while the ring's flags say work is left and the last enter brought
    /// completions, not until the flags clear: deferred work the kernel queues again
    /// each time it runs (seen with FUSE-over-io_uring commands while a session stopped
    /// under load) keeps `IORING_SQ_TASKRUN` set until this thread has done something
    /// else, and looping on the flag alone spun for ever at 100% CPU, never returning
    /// to the loop that would do it. The caller's next enter runs the rest.
    fn reap_locked(&self, inner: &mut Inner, deferred: &mut Deferred) -> usize {
        let mut n = self.reap_ring(inner, deferred);
        loop {
            let (overflow, taskrun) = inner.ring.sq_flags();
            if !overflow && !taskrun {
                break;
            }
            // An enter with GETEVENTS (the io-uring crate adds it when it sees either flag)
            // runs deferred completions and moves overflowed CQEs into the queue.
            self.bump(|s| {
                s.enters += 1;
                s.cq_overflows += u64::from(overflow);
            });
            match inner.ring.submitter().submit_and_wait(0) {
                Ok(k) => self.bump(|s| s.sqes += k as u64),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => {
                    tracing::error!("io_uring enter for completions failed: {e}");
                    break;
                }
            }
            let more = self.reap_ring(inner, deferred);
            n += more;
            if more == 0 {
                break;
            }
        }
        n
    }

    fn reap_ring(&self, inner: &mut Inner, deferred: &mut Deferred) -> usize {
        let mut cqes = std::mem::take(&mut inner.scratch);
        inner.ring.drain_cq(&mut cqes);
        let n = cqes.len();
        let Inner {
            ops,
            awaiting,
            foreign,
            foreign_waker,
            ..
        } = inner;
        for (key, res) in cqes.drain(..) {
            if key == UNTRACKED {
                continue;
            }
            if key & DRIVER_KEY == 0 {
                // Not ours: the shared ring's other user's (a uring command).
                foreign.push((key, res));
                if let Some(w) = foreign_waker.take() {
                    deferred.wakers.push(w);
                }
                continue;
            }
            let done = Completion { res };
            match ops.get_mut(key) {
                Some(state @ (Lifecycle::Submitted | Lifecycle::Waiting(_))) => {
                    *awaiting -= 1;
                    if let Lifecycle::Waiting(w) =
                        std::mem::replace(state, Lifecycle::Completed(done))
                    {
                        deferred.wakers.push(w);
                    }
                }
                Some(Lifecycle::Ignored(_)) => {
                    *awaiting -= 1;
                    if let Some(Lifecycle::Ignored(data)) = ops.remove(key) {
                        deferred.garbage.push(data);
                    }
                }
                Some(Lifecycle::Completed(_)) | None => {
                    tracing::error!("io_uring CQE for unknown or completed operation {key:#x}");
                }
            }
        }
        inner.scratch = cqes;
        self.bump(|s| s.cqes += n as u64);
        n
    }

    /// Submits whatever is queued and reaps what has completed. Called by the driver task.
    pub fn flush(&self) {
        let mut deferred = Deferred::default();
        {
            let mut inner = self.inner.borrow_mut();
            inner.flush_pending = false;
            if !inner.ring.sq_is_empty() {
                if let Err(e) = self.submit_locked(&mut inner, 0, &mut deferred) {
                    tracing::error!("io_uring submit failed: {e}");
                }
            } else {
                self.reap_locked(&mut inner, &mut deferred);
            }
        }
        deferred.run();
    }

    /// Whether the ring has 128-byte SQEs (built with [`DriverOptions::sqe128`]).
    pub fn is_sqe128(&self) -> bool {
        matches!(self.inner.borrow().ring, Ring::Sqe128(_))
    }

    /// Runs `f` on the ring itself, if it has 128-byte SQEs (`EINVAL` otherwise), for
    /// the ring's other user: see [`crate::SharedRing::with_ring`] for the rules.
    /// `EDEADLK` if the driver is in use further up the stack.
    pub fn with_ring128<R>(
        &self,
        f: impl FnOnce(&mut IoUring<squeue::Entry128, cqueue::Entry>) -> R,
    ) -> io::Result<R> {
        let mut inner = self
            .inner
            .try_borrow_mut()
            .map_err(|_| io::Error::from_raw_os_error(libc::EDEADLK))?;
        match &mut inner.ring {
            Ring::Sqe128(r) => Ok(f(r)),
            Ring::Sqe64(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    /// Moves the completions of SQEs the driver didn't make (see [`DRIVER_KEY`]) to `out`.
    pub fn take_foreign(&self, out: &mut Vec<(u64, i32)>) {
        out.append(&mut self.inner.borrow_mut().foreign);
    }

    /// Ready when a completion of an SQE the driver didn't make waits to be taken;
    /// otherwise `cx`'s waker is woken when one is reaped.
    pub fn poll_foreign(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.inner.borrow_mut();
        if !inner.foreign.is_empty() {
            return Poll::Ready(());
        }
        match &inner.foreign_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => inner.foreign_waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Submits everything queued, waits in `io_uring_enter` until at least `wait`
    /// completions are there (0: none), and reaps them: the driver's own go to their
    /// operations (waking their tasks), the others to [`Driver::take_foreign`].
    pub fn enter(&self, wait: usize) -> io::Result<()> {
        self.enter_for(wait, None).map(|_| ())
    }

    /// [`Driver::enter`], sleeping at most `timeout` (if given) for the `wait`
    /// completions; `Ok(false)` if it gave up for the timeout (what came is reaped).
    /// Needs `IORING_FEAT_EXT_ARG` (Linux 5.11) for a timeout.
    pub fn enter_for(&self, wait: usize, timeout: Option<Duration>) -> io::Result<bool> {
        let mut deferred = Deferred::default();
        let r = {
            let mut inner = self.inner.borrow_mut();
            self.submit_locked_for(&mut inner, wait, timeout, &mut deferred)
        };
        deferred.run();
        r
    }

    /// Registers the waker of the task that calls [`Driver::flush`].
    pub fn set_flush_waker(&self, waker: &Waker) {
        let mut inner = self.inner.borrow_mut();
        match &inner.flush_waker {
            Some(w) if w.will_wake(waker) => {}
            _ => inner.flush_waker = Some(waker.clone()),
        }
    }

    /// Runs `fut` to completion on the calling thread, submitting its operations in
    /// batches and sleeping in `io_uring_enter` until one completes.
    ///
    /// `fut` must only wait for operations of this driver (or be woken by something
    /// else that does not need this thread to make progress).
    pub fn block_on<F: Future>(self: &Rc<Self>, fut: F) -> F::Output {
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Release);
            }
        }
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(fut);
        loop {
            if flag.0.swap(false, Ordering::AcqRel) {
                if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                    return v;
                }
            }
            let mut deferred = Deferred::default();
            {
                let mut inner = self.inner.borrow_mut();
                inner.flush_pending = false;
                let woken = flag.0.load(Ordering::Acquire);
                let wait = usize::from(!woken && inner.ops.live > 0);
                if wait > 0 || !inner.ring.sq_is_empty() {
                    if let Err(e) = self.submit_locked(&mut inner, wait, &mut deferred) {
                        tracing::error!("io_uring submit failed: {e}");
                    }
                } else if !woken {
                    // Nothing in flight and nobody woke us: the future waits for something
                    // this driver does not deliver. Give the CPU away and poll again.
                    drop(inner);
                    std::thread::yield_now();
                    flag.0.store(true, Ordering::Release);
                }
            }
            deferred.run();
        }
    }

    /// Queues a cancel request for the operation `key` (its CQE is ignored).
    fn cancel(&self, key: u64) {
        let sqe = opcode::AsyncCancel::new(key).build().user_data(UNTRACKED);
        self.push(sqe);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Every `Op` holds an `Rc<Driver>`, so whatever is still in the table was abandoned:
        // ask the kernel to cancel it and wait for every CQE before the memory goes away.
        let inner = self.inner.get_mut();
        if inner.ops.live == 0 {
            return;
        }
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(UNTRACKED);
        // SAFETY: a cancel request carries no pointers.
        while unsafe { inner.ring.push(&cancel) }.is_err() {
            let _ = inner.ring.submitter().submit();
        }
        let mut garbage = Vec::new();
        while inner.ops.live > 0 {
            match inner.ring.submitter().submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => {
                    // We cannot know when the kernel is done with the memory: leak it rather
                    // than risk a write into freed memory.
                    tracing::error!(
                        "io_uring wait during driver shutdown failed: {e}; leaking buffers"
                    );
                    for slot in inner.ops.slots.drain(..) {
                        std::mem::forget(slot);
                    }
                    return;
                }
            }
            let mut cqes = Vec::new();
            inner.ring.drain_cq(&mut cqes);
            for (key, _) in cqes {
                if key != UNTRACKED {
                    let ops = &mut inner.ops;
                    if let Some(Lifecycle::Ignored(data)) = ops.remove(key) {
                        garbage.push(data);
                    }
                }
            }
        }
        drop(garbage);
    }
}

/// Work collected under the driver's borrow and run after it is released: waking tasks
/// and dropping abandoned buffers may run arbitrary code.
#[derive(Default)]
struct Deferred {
    wakers: Vec<Waker>,
    garbage: Vec<Box<dyn Any>>,
}

impl Deferred {
    fn run(self) {
        for w in self.wakers {
            w.wake();
        }
        drop(self.garbage);
    }
}

/// The future of one io_uring operation. Resolves to the completion and the data that was
/// handed in; see [`Driver::submit`].
pub(crate) struct Op<T: 'static> {
    driver: Rc<Driver>,
    key: u64,
    data: Option<T>,
}

impl<T: 'static> Unpin for Op<T> {}

impl<T: 'static> Future for Op<T> {
    type Output = (Completion, T);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut inner = this.driver.inner.borrow_mut();
        let Some(state) = inner.ops.get_mut(this.key) else {
            panic!("io_uring Op polled after completion");
        };
        match state {
            Lifecycle::Completed(done) => {
                let done = *done;
                inner.ops.remove(this.key);
                drop(inner);
                let data = this.data.take().expect("Op data present until completion");
                Poll::Ready((done, data))
            }
            Lifecycle::Waiting(w) if w.will_wake(cx.waker()) => Poll::Pending,
            state => {
                *state = Lifecycle::Waiting(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<T: 'static> Drop for Op<T> {
    fn drop(&mut self) {
        let Some(data) = self.data.take() else {
            return; // completed and consumed
        };
        let mut inner = self.driver.inner.borrow_mut();
        match inner.ops.get_mut(self.key) {
            Some(Lifecycle::Completed(_)) => {
                inner.ops.remove(self.key);
                drop(inner);
                drop(data);
            }
            Some(state) => {
                // In flight: the kernel may still read or write `data`'s memory. Park it in
                // the slot until the CQE arrives, and ask the kernel to cancel.
                *state = Lifecycle::Ignored(Box::new(data));
                drop(inner);
                self.driver.bump(|s| s.abandoned += 1);
                self.driver.cancel(self.key);
            }
            None => {
                tracing::error!("io_uring Op {:#x} dropped with no slot", self.key);
                std::mem::forget(data);
            }
        }
    }
}
