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
//! A request's task runs at once, in the loop, until it first waits; a
//! task that waits stays with the loop ([`Tasks`]), not spawned on the
//! runtime: its waker notes the entry, and the loop polls it again on its
//! next turn, inside the runtime's `block_on` (so the task can use the
//! runtime's timers and reactor). While no task waits, the loop sleeps in
//! the FUSE ring itself (`io_uring_enter` with `min_complete` 1, as the
//! synchronous loop does) rather than in the reactor: a request that
//! never waits (metadata, a page cache hit) costs what it costs the
//! synchronous loop. Every [`TURNS_BEFORE_YIELD`] turns the loop yields
//! to the runtime even with work at hand, so its timers, reactor and
//! spawned tasks run under a steady load too.
//!
//! ## One ring per queue ([`crate::UringConfig::one_ring`])
//!
//! On the io_uring runtime, the thread can instead run one ring: the
//! runtime is built with 128-byte SQEs (`async_io::Builder::uring_commands`)
//! and the FUSE commands go on the runtime's own ring
//! (`async_io::SharedRing`). The two kinds of completions are told apart
//! by `user_data`: the runtime's carry its top bit, the transport's
//! (entry indexes, the wake poll) never do. Whoever reaps sorts them:
//! the file IO's go to their tasks, the commands' wait for this loop. The
//! loop is the same as above with the ring swapped: while no task waits
//! it sleeps in the shared ring itself (`SharedRing::enter(1)`); while
//! tasks wait, it waits in the reactor for the ring's one eventfd (the
//! runtime's own, which also covers timers and other descriptors a file
//! system's tasks may wait for), and a read's completion wakes the read's
//! task, which writes its reply, committed on the loop's next turn, on
//! the same ring. There is no second ring and no second eventfd. And while
//! tasks wait with operations of the runtime in flight on that ring (a
//! file read), the loop sleeps in the ring too, for at most
//! [`RING_SLEEP_BOUND`]: the read's completion (or the next request) ends
//! the sleep, the loop polls the read's task and commits its reply in
//! the next `io_uring_enter`, which sleeps again. A 4 KiB `O_DIRECT` read
//! at depth 1 then costs two system calls, as on a synchronous ring
//! thread (`pread`, then commit and sleep), where waiting in the reactor
//! cost about six (three enters, two `epoll_wait`, an eventfd read).
//! Queues with buffer pools keep two rings (see `UringConfig::one_ring`):
//! a zero-copy operation waits in its ring, taking every completion off
//! it meanwhile, and pools on a shared ring hung in VM runs under load.
//!
//! Setup and teardown keep the rule that memory the kernel may touch
//! outlives the ring: the runtime (with the ring) is built before the
//! entries are registered on it, and dropped, which closes the ring and
//! cancels the entries still in the kernel, before the entries' memory
//! goes; every `SharedRing` handle goes before the runtime.
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
use super::Handshake;
use super::{reap_into, submit, QueueThread, Ring, DRAIN_TIMEOUT};
use crate::zero_copy::FixedRing;
use async_io::{RuntimeType, SharedRing};
use fuse_abi::uring::UringReqHeader;
use fuse_server::opcode_table::opcode_info_raw;
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

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

/// Entry indexes whose waiting task was woken, and the serving loop's
/// waker; shared with the tasks' wakers, which may run on any thread (a
/// thread pool job's end).
#[derive(Default)]
struct Woken {
    indexes: Mutex<Vec<usize>>,
    /// Whether `indexes` may hold something (checked without the lock on
    /// every turn of the loop).
    any: AtomicBool,
    loop_waker: Mutex<Option<Waker>>,
}

impl Woken {
    fn wake(&self, index: usize) {
        lock(&self.indexes).push(index);
        self.any.store(true, Ordering::Release);
        if let Some(w) = lock(&self.loop_waker).take() {
            w.wake();
        }
    }

    /// Moves the woken indexes to `out`.
    fn take(&self, out: &mut Vec<usize>) {
        if self.any.swap(false, Ordering::AcqRel) {
            out.append(&mut lock(&self.indexes));
        }
    }

    fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The waker of the task of one entry.
struct TaskWaker {
    index: usize,
    woken: Arc<Woken>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.woken.wake(self.index);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.wake(self.index);
    }
}

/// The tasks of requests that waited, by entry index, run by the serving
/// loop itself rather than spawned on the runtime: a task woken by a
/// completion the loop reaped runs on the loop's next turn, without the
/// loop first yielding to the runtime (which costs an `epoll_wait`, and
/// an eventfd read once the ring's eventfd has fired). Still inside the
/// runtime's `block_on`, so tasks may use its timers and reactor.
struct Tasks {
    slots: Vec<Option<Pin<Box<dyn Future<Output = ()>>>>>,
    wakers: Vec<Waker>,
    woken: Arc<Woken>,
    /// Scratch for [`Woken::take`].
    ready: Vec<usize>,
}

impl Tasks {
    fn new(entries: usize) -> Self {
        let mut tasks = Self {
            slots: Vec::new(),
            wakers: Vec::new(),
            woken: Arc::new(Woken::default()),
            ready: Vec::new(),
        };
        tasks.grow(entries);
        tasks
    }

    /// Makes room for the tasks of `entries` entries (lock waits add
    /// entries while the thread serves).
    fn grow(&mut self, entries: usize) {
        while self.slots.len() < entries {
            let index = self.slots.len();
            self.slots.push(None);
            self.wakers.push(Waker::from(Arc::new(TaskWaker {
                index,
                woken: self.woken.clone(),
            })));
        }
    }

    /// Polls `task`, the new task of entry `index`, and keeps it if it
    /// waits.
    fn start(&mut self, index: usize, mut task: Pin<Box<dyn Future<Output = ()>>>) {
        self.grow(index + 1);
        let mut cx = Context::from_waker(&self.wakers[index]);
        if task.as_mut().poll(&mut cx).is_pending() {
            self.slots[index] = Some(task);
        }
    }

    /// Polls every task woken since the last call.
    fn run_woken(&mut self) {
        let mut ready = std::mem::take(&mut self.ready);
        self.woken.take(&mut ready);
        for &index in &ready {
            let Some(task) = self.slots.get_mut(index).and_then(Option::as_mut) else {
                // Woken twice, or after it ended.
                continue;
            };
            let mut cx = Context::from_waker(&self.wakers[index]);
            if task.as_mut().poll(&mut cx).is_ready() {
                self.slots[index] = None;
            }
        }
        ready.clear();
        self.ready = ready;
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
    if kind == RuntimeType::IoUring {
        // The runtime's own ring, beside the FUSE ring.
        count_ring(thread);
    }
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
        serve_loop(
            thread,
            &Rings::Two {
                fixed: &fixed,
                efd: &efd,
            },
        )
        .await
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

/// Counts a ring opened by the thread.
fn count_ring(t: &QueueThread) {
    t.shared.counters.rings.fetch_add(1, Ordering::Relaxed);
}

/// Runs a ring thread with one ring ([`crate::UringConfig::one_ring`]):
/// builds the io_uring runtime with a ring for FUSE commands, registers
/// the entries on it, serves, and tears down in the order the module docs
/// give.
pub(super) fn run_one_ring(mut thread: QueueThread, handshake: Handshake) -> io::Result<()> {
    let (sq, cq) = thread.ring_sizes();
    let rt = match async_io::Builder::new(RuntimeType::IoUring)
        .uring_commands(true)
        .ring_entries(sq.max(async_io::DEFAULT_RING_ENTRIES))
        .cq_entries(cq)
        .defer_taskrun(thread.plan.defer_taskrun)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = handshake
                .report
                .send(Err(format!("building the io_uring runtime: {e}")));
            return Ok(());
        }
    };
    let Some(shared) = rt.shared_ring() else {
        let _ = handshake
            .report
            .send(Err("the io_uring runtime has no ring to share".into()));
        return Ok(());
    };
    count_ring(&thread);
    let rings = Rings::One(&shared);
    let registered = match rings.with(|ring| thread.register_with(ring)) {
        Ok(r) => r,
        Err(e) => Err(format!("using the runtime's ring: {e}")),
    };
    let result = match registered {
        Err(e) => {
            let _ = handshake.report.send(Err(e));
            Ok(())
        }
        // The entries are registered before any task of the runtime runs,
        // so `start` may reap the ring itself (the contract of
        // `SharedRing::with_ring`).
        Ok(()) => match rings.with(|ring| thread.start(ring, handshake)) {
            Ok(Ok(true)) => rt.block_on(serve_loop(&mut thread, &rings)),
            Ok(Ok(false)) => Ok(()),
            Ok(Err(e)) | Err(e) => Err(e),
        },
    };
    thread.note_entries_left();
    // The tasks, then the ring (the last handle to it is the runtime's),
    // then the entries' memory.
    drop(shared);
    drop(rt);
    drop(thread);
    result
}

/// The ring (or rings) the serving loop runs on.
enum Rings<'a> {
    /// The FUSE ring, lent through `fixed`, its eventfd watched by the
    /// reactor; the runtime (if io_uring) has a ring of its own.
    Two {
        fixed: &'a FixedRing,
        efd: &'a AsyncFd<RingEventFd>,
    },
    /// The runtime's ring, which carries the FUSE commands too.
    One(&'a SharedRing),
}

impl Rings<'_> {
    /// Runs `f` on the FUSE ring. `f` only pushes and submits: completions
    /// are taken by [`Rings::take`] (on a shared ring some are the
    /// runtime's).
    fn with<R>(&self, f: impl FnOnce(&mut Ring) -> R) -> io::Result<R> {
        match self {
            Rings::Two { fixed, .. } => fixed.with(f),
            // SAFETY: the transport's SQEs carry entry indexes and
            // `WAKE_USER_DATA`, below the limit, and point at memory that
            // outlives the ring (`run_one_ring` drops the runtime first);
            // the loop's closures take no completions off the ring.
            Rings::One(shared) => unsafe { shared.with_ring(f) },
        }
    }

    /// Where zero-copy operations run (none with one ring: no queue of the
    /// thread has zero copy then).
    fn fixed(&self) -> *const FixedRing {
        match self {
            Rings::Two { fixed, .. } => *fixed,
            Rings::One(_) => std::ptr::null(),
        }
    }

    /// Moves the FUSE ring's completions reaped so far to `out`.
    fn take(&self, t: &QueueThread, out: &mut Vec<(u64, i32)>) {
        match self {
            Rings::Two { fixed, .. } => fixed.take_others(out),
            Rings::One(shared) => {
                let before = out.len();
                shared.take_completions(out);
                let n = out.len() - before;
                if n > 0 {
                    t.shared
                        .counters
                        .runtime_ring_completions
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
    }

    /// Submits what is queued; with `sleep`, sleeps in the ring until a
    /// completion comes. Then reaps into `out` (and, with one ring, hands
    /// the runtime its own completions).
    fn enter(&self, t: &QueueThread, sleep: bool, out: &mut Vec<(u64, i32)>) -> io::Result<()> {
        match self {
            Rings::Two { fixed, .. } => fixed.with(|ring| -> io::Result<()> {
                if sleep {
                    // Asleep in the ring, the loop reaps what wakes it: the
                    // eventfd (for waits in the reactor) stays quiet
                    // meanwhile, and speaks again before the reap.
                    ring.completion().disable_eventfd();
                    let slept = super::wait(ring);
                    ring.completion().enable_eventfd();
                    slept?;
                } else {
                    enter(ring)?;
                }
                reap_into(ring, out);
                Ok(())
            })?,
            Rings::One(shared) => {
                shared
                    .enter(usize::from(sleep))
                    .map_err(|e| io::Error::new(e.kind(), format!("io_uring_enter: {e}")))?;
                self.take(t, out);
                Ok(())
            }
        }
    }

    /// With one ring, while some of the runtime's operations on it are in
    /// flight: submits what is queued and sleeps in the ring until a
    /// completion comes (a request, or a task's file IO) or
    /// [`RING_SLEEP_BOUND`] passes, then reaps as [`Rings::enter`] does.
    /// `false` (and nothing done) otherwise: the waiting tasks wait for
    /// something else (a thread pool job, a timer), which only the reactor
    /// sees.
    fn sleep_for_tasks(&self, t: &QueueThread, out: &mut Vec<(u64, i32)>) -> io::Result<bool> {
        let Rings::One(shared) = self else {
            return Ok(false);
        };
        if shared.runtime_in_flight() == 0 {
            return Ok(false);
        }
        shared
            .enter_for(1, RING_SLEEP_BOUND)
            .map_err(|e| io::Error::new(e.kind(), format!("io_uring_enter: {e}")))?;
        self.take(t, out);
        Ok(true)
    }

    /// Waits until the FUSE ring has completions, a task finishes, or
    /// `tick` passes.
    async fn wait(&self, finished: &Finished, woken: &Woken, tick: Option<Duration>) {
        match self {
            Rings::Two { efd, .. } => wait(efd, finished, woken, tick).await,
            Rings::One(shared) => {
                let ready = poll_fn(|cx| {
                    if tasks_ready(finished, woken, cx) {
                        return Poll::Ready(());
                    }
                    shared.poll_completions(cx)
                });
                match tick {
                    Some(d) => {
                        let _ = tokio::time::timeout(d, ready).await;
                    }
                    None => ready.await,
                }
            }
        }
    }
}

/// Idle wakes during which no request is solo after one found another
/// behind it (see [`serve_loop`]): a stream of overlapping requests is
/// served on the ring, and every so often one is tried inline again.
const SOLO_BACKOFF: u32 = 64;

async fn serve_loop(t: &mut QueueThread, rings: &Rings<'_>) -> io::Result<()> {
    let finished = Rc::new(Finished::default());
    let mut tasks = Tasks::new(t.entries.len());
    // Entries whose task runs (in user space, not committed yet).
    let mut busy = 0usize;
    let mut deadline: Option<Instant> = None;
    // Vectors that trade places with the ones filled, so that serving
    // allocates nothing once they have grown.
    let (mut batch, mut done) = (Vec::new(), Vec::new());
    // Turns of the loop since it last let the runtime run.
    let mut turns = 0u32;
    // The loop slept in the ring with nothing to do, and what woke it is
    // the next batch: a request alone in it meets an idle thread.
    let mut woke_idle = false;
    // Idle wakes left before a request may be solo again.
    let mut solo_backoff = 0u32;
    loop {
        turns += 1;
        if turns >= TURNS_BEFORE_YIELD {
            // Under a steady stream of requests and completions the loop may
            // never have to wait: let the runtime run its timers, its
            // reactor and the tasks spawned on it now and then all the same.
            yield_once().await;
            turns = 0;
        }
        // Completions a task's zero-copy operation (or, with one ring,
        // the runtime) reaped.
        take(rings, t);
        std::mem::swap(&mut batch, &mut t.pending);
        // Alone: the only request, to a loop that was idle (not one that
        // queued while the thread worked: under a stream of requests they
        // go on overlapping, as tasks).
        let idle = std::mem::take(&mut woke_idle);
        let solo = idle && busy == 0 && batch.len() == 1 && solo_backoff == 0;
        if idle && solo_backoff > 0 {
            solo_backoff -= 1;
        }
        for &completion in &batch {
            start(t, rings, &finished, &mut tasks, &mut busy, completion, solo)?;
        }
        // A request that came while the solo one blocked the thread shows
        // as the ring's pending task work (IORING_SQ_TASKRUN): the client
        // of the solo request was waiting for it, so another one overlaps.
        // Requests overlap here, then: serve them on the ring for a while.
        if solo && rings.with(|ring| ring.submission().taskrun())? {
            solo_backoff = SOLO_BACKOFF;
        }
        batch.clear();
        tasks.run_woken();
        std::mem::swap(&mut done, &mut *finished.entries.borrow_mut());
        for &(index, commit_id) in &done {
            busy -= 1;
            rings.with(|ring| t.commit(ring, index, commit_id))??;
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
                rings.with(submit)??;
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
        take(rings, t);
        if !t.pending.is_empty() {
            continue;
        }
        if busy == 0 && !t.stopping && !t.gone {
            // No task of ours runs on the runtime, so nothing but the ring
            // can bring work: wait in the ring itself, as the synchronous
            // loop does (one system call that submits the commits and
            // sleeps), not through the reactor (eventfd, epoll, enter).
            enter_into(rings, t, true)?;
            woke_idle = true;
            continue;
        }
        // Tasks wait. With one ring, those waiting for their file IO on it
        // are woken by its completions: sleep in the ring (one system call
        // that submits the commits and the tasks' IO and sleeps) rather than
        // in the reactor (enter, then epoll, eventfd read and enter again).
        // Otherwise submit the commits and run the ring's completion work.
        if !t.stopping && !t.gone && sleep_for_tasks(rings, t)? {
            // What the sleep reaped: requests (`pending`), and the tasks
            // it woke, which run when this loop next yields to the runtime.
        } else {
            enter_into(rings, t, false)?;
        }
        if !t.pending.is_empty() {
            continue;
        }
        if !finished.entries.borrow().is_empty() || tasks.woken.any() {
            continue;
        }
        let tick = (t.stopping || t.gone).then_some(Duration::from_millis(50));
        rings.wait(&finished, &tasks.woken, tick).await;
        turns = 0;
    }
}

/// Moves the FUSE ring's completions reaped so far to the thread's
/// pending ones.
fn take(rings: &Rings<'_>, t: &mut QueueThread) {
    let mut pending = std::mem::take(&mut t.pending);
    rings.take(t, &mut pending);
    t.pending = pending;
}

/// Turns of the serving loop after which it yields to the runtime even
/// with work at hand.
const TURNS_BEFORE_YIELD: u32 = 64;

/// Returns to the runtime once (waking itself first), so that it runs its
/// timers, reactor and spawned tasks before the caller goes on.
async fn yield_once() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// [`Rings::sleep_for_tasks`] into the thread's pending completions.
fn sleep_for_tasks(rings: &Rings<'_>, t: &mut QueueThread) -> io::Result<bool> {
    let mut pending = std::mem::take(&mut t.pending);
    let r = rings.sleep_for_tasks(t, &mut pending);
    t.pending = pending;
    r
}

/// How long the loop sleeps in the one ring while tasks wait
/// ([`Rings::sleep_for_tasks`]) before it looks at the reactor: the most a
/// task woken by something other than the ring (a timer, another thread)
/// can be kept waiting by that sleep. Longer than a disk read, so a task's
/// read normally ends the sleep; a sleep that runs out costs one system
/// call more than waiting in the reactor at once.
const RING_SLEEP_BOUND: Duration = Duration::from_millis(1);

/// [`Rings::enter`] into the thread's pending completions.
fn enter_into(rings: &Rings<'_>, t: &mut QueueThread, sleep: bool) -> io::Result<()> {
    let mut pending = std::mem::take(&mut t.pending);
    let r = rings.enter(t, sleep, &mut pending);
    t.pending = pending;
    r
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

/// Whether a task finished or was woken; if not, `cx`'s waker is woken when
/// one is. (The waker is registered before the check: a task woken on
/// another thread meanwhile either sees it or is seen.)
fn tasks_ready(finished: &Finished, woken: &Woken, cx: &Context<'_>) -> bool {
    *finished.waker.borrow_mut() = Some(cx.waker().clone());
    *lock(&woken.loop_waker) = Some(cx.waker().clone());
    !finished.entries.borrow().is_empty() || woken.any()
}

/// Waits until the ring's eventfd fires, a task finishes or is woken, or
/// `tick` passes.
async fn wait(
    efd: &AsyncFd<RingEventFd>,
    finished: &Finished,
    woken: &Woken,
    tick: Option<Duration>,
) {
    let ready = poll_fn(|cx| {
        if tasks_ready(finished, woken, cx) {
            return Poll::Ready(());
        }
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
    rings: &Rings<'_>,
    finished: &Rc<Finished>,
    tasks: &mut Tasks,
    busy: &mut usize,
    (user_data, res): (u64, i32),
    solo: bool,
) -> io::Result<()> {
    let Some(index) = rings.with(|ring| t.take_completion(ring, user_data, res))?? else {
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
    let (header, ent) = t.request_header(index);
    let e = &t.entries[index];
    let queue = &t.plan.queues[e.queue];
    let qid = queue.qid;
    let unique = header.map_or(ent.commit_id, |h| h.unique);
    let commit_id = ent.commit_id;
    let view = match t.locate(e, queue, header, &ent) {
        Ok(v) => v,
        Err(why) => {
            t.refuse_bad_request(index, unique, &why);
            *busy += 1;
            finished.push(index, commit_id);
            return Ok(());
        }
    };
    // SAFETY: the entry belongs to the task until its commit; `fixed`
    // outlives every task (the runtime is dropped first, in `serve`), on
    // this thread.
    let tx = unsafe { t.transaction(index, &view, rings.fixed()) };
    let qid = qid as usize;
    let opcode = view.opcode;
    if opcode_info_raw(opcode).is_some_and(|i| i.waits_indefinitely()) {
        // A lock wait holds its entry for as long as the lock is taken.
        let nodeid = header.map_or(fuse_abi::ROOT_ID, |h| h.nodeid);
        rings.with(|ring| t.keep_entries_free(ring, index, nodeid))??;
    }
    let shared = t.shared.clone();
    let finished = finished.clone();
    *busy += 1;
    let task: Pin<Box<dyn Future<Output = ()>>> = Box::pin(async move {
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
    // the task runs here at once, and is kept for the loop to poll again
    // only if it waits.
    // A request that came alone to an idle loop may block the thread
    // (`async_io::solo`): nothing else waits for it.
    if solo {
        async_io::run_solo(true, || tasks.start(index, task));
    } else {
        // Nothing to say: no thread-local write per request.
        tasks.start(index, task);
    }
    Ok(())
}
