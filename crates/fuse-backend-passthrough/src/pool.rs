//! The blocking thread pool of the asynchronous serving path
//! (`PassthroughFs::enable_async_thread_pool`).
//!
//! A serving thread runs an async runtime and must not sleep in a system
//! call that waits for a disk or a slow file system below: every other
//! request of the thread would wait too. Such calls go to this pool
//! instead, as jobs; the request's future waits for the job's result.
//!
//! ## Jobs and dropped requests
//!
//! A job is a closure and a [`Slot`] its result goes into. Its life:
//!
//! - **queued**: not started. If the request's future ([`PoolFuture`]) is
//!   dropped now (a stopped session, a takeover that drops the requests it
//!   had read), the job is cancelled and never runs.
//! - **running**: a pool thread runs it. It can't be stopped: it finishes,
//!   and if nobody waits for its result any more the result is dropped on
//!   the pool thread. Results that hold something (a lookup reference, an
//!   open handle) are wrapped in a guard whose `Drop` gives it back (see
//!   `async_fs`), so a dropped request leaks nothing.
//! - **done**: the result waits in the slot until the future takes it; a
//!   future dropped now drops the result (and so runs its guard).
//!
//! What a running job can't undo, it does: a WRITE that already runs lands
//! in the file even if its request is gone. If the kernel sends that
//! request again (a new daemon that took the connection over and asked
//! for the pending requests again), it lands twice, which an `O_APPEND`
//! file shows as duplicated data. Stopping the serving task through its
//! state flag (`fuse_transport_dev::TaskHandle::stop`) avoids that: the task
//! reads no new request and lets the ones it runs finish and reply, so the
//! kernel has nothing left to send again.
//!
//! ## Threads
//!
//! Threads start on demand, when a job is queued and no thread is idle, up
//! to a maximum (64 by default), and end after [`IDLE_TIMEOUT`] without
//! work. A thread that can't be started leaves the job to the running
//! ones; with none running, the job fails with the spawn error.

use crate::lock;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// How long a pool thread waits for work before it ends.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default largest number of pool threads.
pub(crate) const DEFAULT_MAX_THREADS: usize = 64;

/// What the asynchronous serving path and its thread pool did so far
/// ([`crate::PassthroughFs::async_thread_pool_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AsyncPoolStats {
    /// The pool is on ([`crate::PassthroughFs::enable_async_thread_pool`]).
    pub enabled: bool,
    /// Pool threads alive now.
    pub threads: usize,
    /// Jobs handed to the pool.
    pub queued: u64,
    /// Jobs a pool thread started.
    pub started: u64,
    /// Jobs whose request was dropped before they started: they never ran.
    pub cancelled: u64,
    /// Jobs that finished after their request was dropped (their result
    /// was dropped, its guard undid it).
    pub abandoned: u64,
    /// Lookup references and handles that pooled LOOKUP, OPEN and CREATE
    /// made for a request that was dropped, given back by their guards.
    pub undone: u64,
    /// READs answered inline by `preadv2(RWF_NOWAIT)` (page cache hits).
    pub nowait_hits: u64,
    /// READs that went to the pool after `RWF_NOWAIT` would have blocked
    /// (`EAGAIN`) or wasn't supported (`EOPNOTSUPP`).
    pub nowait_misses: u64,
    /// READs served on the pool (misses, `O_DIRECT`).
    pub pool_reads: u64,
    /// WRITEs served on the pool.
    pub pool_writes: u64,
    /// READs served by io_uring on the serving thread's ring.
    pub uring_reads: u64,
    /// WRITEs served by io_uring on the serving thread's ring.
    pub uring_writes: u64,
    /// READs served inline on the io_uring runtime that would have gone to
    /// its ring (`O_DIRECT` ones, buffered ones that missed the page
    /// cache) because nothing else waited on the thread
    /// ([`async_io::solo`]: the async loop of FUSE over io_uring says so
    /// of a request alone on an idle ring thread).
    pub solo_reads: u64,
    /// `O_DIRECT` WRITEs served inline so (see `solo_reads`).
    pub solo_writes: u64,
    /// WRITEs that clear set-user-ID and set-group-ID (`KILL_SUIDGID`,
    /// with `FUSE_HANDLE_KILLPRIV_V2` agreed): they go to the pool or the
    /// ring, never inline, like `O_DIRECT` ones. The kernel marks a WRITE
    /// so when its writer lacks `CAP_FSETID` in the initial user
    /// namespace: every WRITE of a user other than root, and of root in a
    /// user namespace.
    pub kill_suidgid_writes: u64,
}

/// Counters shared by the pool and its slots.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) queued: AtomicU64,
    pub(crate) started: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) undone: AtomicU64,
    pub(crate) nowait_hits: AtomicU64,
    pub(crate) nowait_misses: AtomicU64,
    pub(crate) pool_reads: AtomicU64,
    pub(crate) pool_writes: AtomicU64,
    pub(crate) uring_reads: AtomicU64,
    pub(crate) uring_writes: AtomicU64,
    pub(crate) solo_reads: AtomicU64,
    pub(crate) solo_writes: AtomicU64,
    pub(crate) kill_suidgid_writes: AtomicU64,
}

type Job = Box<dyn FnOnce() + Send>;

struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    shutdown: bool,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    max_threads: AtomicUsize,
    counters: Arc<Counters>,
}

/// Threads that run blocking jobs for async request handlers.
pub(crate) struct BlockingPool {
    inner: Arc<Inner>,
}

impl BlockingPool {
    /// A pool of at most `max_threads` threads (none started yet).
    pub(crate) fn new(max_threads: usize, counters: Arc<Counters>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    jobs: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                    shutdown: false,
                }),
                work: Condvar::new(),
                max_threads: AtomicUsize::new(max_threads.max(1)),
                counters,
            }),
        }
    }

    /// Sets the largest number of threads (at least 1); running threads
    /// beyond it end once idle.
    pub(crate) fn set_max_threads(&self, n: usize) {
        self.inner.max_threads.store(n.max(1), Ordering::Relaxed);
    }

    /// Pool threads alive now.
    pub(crate) fn threads(&self) -> usize {
        lock(&self.inner.state).threads
    }

    /// Runs `f` on a pool thread; the future yields its result. Dropping
    /// the future before the job started cancels it (it never runs); after
    /// that, the job finishes and its result is dropped where it ends up
    /// (see the module docs). A panic in `f` is `EIO`.
    pub(crate) fn run<T, F>(&self, f: F) -> PoolFuture<T>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let slot = Slot::queued(self.inner.counters.clone());
        let job_slot = slot.clone();
        let job: Job = Box::new(move || job_slot.run(f));
        self.inner.counters.queued.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.submit(job) {
            // No thread to run it: the job was taken back, nothing ran.
            slot.fail_unrun(e);
        }
        PoolFuture { slot }
    }

    fn submit(&self, job: Job) -> io::Result<()> {
        let mut st = lock(&self.inner.state);
        st.jobs.push_back(job);
        if st.idle < st.jobs.len() && st.threads < self.inner.max_threads.load(Ordering::Relaxed) {
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name("pt-pool".into())
                .spawn(move || worker(inner));
            match spawned {
                Ok(_) => {
                    st.threads += 1;
                    st.idle += 1;
                }
                Err(e) if st.threads == 0 => {
                    st.jobs.pop_back();
                    tracing::warn!("starting a pool thread: {e}");
                    return Err(e);
                }
                Err(e) => tracing::debug!("starting another pool thread: {e}"),
            }
        }
        drop(st);
        self.inner.work.notify_one();
        Ok(())
    }
}

/// Runs `f` on a new thread of its own (named `name`), for a job that may
/// wait indefinitely (a lock wait) and so must take no pool thread; the
/// future yields its result, as [`BlockingPool::run`]'s does. A thread that
/// can't be started is `ENOLCK` (no lock can be waited for).
pub(crate) fn run_on_own_thread<T, F>(name: &str, counters: Arc<Counters>, f: F) -> PoolFuture<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let slot = Slot::queued(counters);
    let job_slot = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .stack_size(256 << 10)
        .spawn(move || job_slot.run(f));
    if let Err(e) = spawned {
        tracing::warn!("starting a thread for a lock wait: {e}");
        slot.fail_unrun(io::Error::from_raw_os_error(libc::ENOLCK));
    }
    PoolFuture { slot }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        // Threads end once the queue is empty; nobody is joined (the last
        // reference to the file system may be dropped on a pool thread).
        lock(&self.inner.state).shutdown = true;
        self.inner.work.notify_all();
    }
}

fn worker(inner: Arc<Inner>) {
    loop {
        let job = {
            let mut st = lock(&inner.state);
            loop {
                if st.threads > inner.max_threads.load(Ordering::Relaxed) && st.jobs.is_empty() {
                    break None;
                }
                if let Some(job) = st.jobs.pop_front() {
                    st.idle -= 1;
                    break Some(job);
                }
                if st.shutdown {
                    break None;
                }
                let (guard, timeout) = inner
                    .work
                    .wait_timeout(st, IDLE_TIMEOUT)
                    .unwrap_or_else(|e| e.into_inner());
                st = guard;
                if timeout.timed_out() && st.jobs.is_empty() {
                    break None;
                }
            }
        };
        let Some(job) = job else {
            let mut st = lock(&inner.state);
            st.threads -= 1;
            st.idle -= 1;
            return;
        };
        job();
        lock(&inner.state).idle += 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Running,
    /// The future was dropped before the job started.
    Cancelled,
    /// The future was dropped while the job ran.
    Abandoned,
    Done,
}

struct SlotInner<T> {
    phase: Phase,
    value: Option<io::Result<T>>,
    waker: Option<Waker>,
}

/// Where a job's result waits for its future.
struct Slot<T> {
    inner: Mutex<SlotInner<T>>,
    counters: Arc<Counters>,
}

impl<T> Slot<T> {
    /// The slot of a job not started yet.
    fn queued(counters: Arc<Counters>) -> Arc<Self> {
        Arc::new(Slot {
            inner: Mutex::new(SlotInner {
                phase: Phase::Queued,
                value: None,
                waker: None,
            }),
            counters,
        })
    }

    /// Ends a job that will never run (no thread could take it) with
    /// `error`; its future has not been polled yet, so nobody waits.
    fn fail_unrun(&self, error: io::Error) {
        let mut s = lock(&self.inner);
        s.phase = Phase::Done;
        s.value = Some(Err(error));
    }

    /// Runs the job on a pool thread, unless its future is gone.
    fn run(&self, f: impl FnOnce() -> io::Result<T>) {
        {
            let mut s = lock(&self.inner);
            if s.phase != Phase::Queued {
                return;
            }
            s.phase = Phase::Running;
        }
        self.counters.started.fetch_add(1, Ordering::Relaxed);
        let value =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
                tracing::error!("a pool job panicked; its request gets EIO");
                Err(io::Error::from_raw_os_error(libc::EIO))
            });
        let mut s = lock(&self.inner);
        if s.phase == Phase::Abandoned {
            drop(s);
            self.counters.abandoned.fetch_add(1, Ordering::Relaxed);
            // Nobody takes it: its guard (if any) gives back what it holds.
            drop(value);
            return;
        }
        s.phase = Phase::Done;
        s.value = Some(value);
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The result of a job handed to the [`BlockingPool`].
pub(crate) struct PoolFuture<T> {
    slot: Arc<Slot<T>>,
}

impl<T> Future for PoolFuture<T> {
    type Output = io::Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = lock(&self.slot.inner);
        if let Some(v) = s.value.take() {
            return Poll::Ready(v);
        }
        if s.phase == Phase::Done {
            return Poll::Ready(Err(io::Error::other("pool job polled after completion")));
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for PoolFuture<T> {
    fn drop(&mut self) {
        let mut s = lock(&self.slot.inner);
        match s.phase {
            Phase::Queued => {
                s.phase = Phase::Cancelled;
                drop(s);
                self.slot.counters.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            Phase::Running => s.phase = Phase::Abandoned,
            _ => {
                // A result nobody took: drop it here, outside the lock.
                let value = s.value.take();
                drop(s);
                drop(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn wait<T>(mut fut: PoolFuture<T>) -> io::Result<T> {
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = Pin::new(&mut fut).poll(&mut cx) {
                return v;
            }
            while !flag.0.swap(false, Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    #[test]
    fn jobs_run_and_results_come_back() {
        let pool = BlockingPool::new(4, Arc::default());
        let futs: Vec<_> = (0..20).map(|i| pool.run(move || Ok(i * 2))).collect();
        let sum: i32 = futs.into_iter().map(|f| wait(f).unwrap()).sum();
        assert_eq!(sum, (0..20).map(|i| i * 2).sum());
        assert!(pool.threads() <= 4);
    }

    #[test]
    fn a_dropped_future_cancels_a_queued_job_and_abandons_a_running_one() {
        let counters = Arc::new(Counters::default());
        let pool = BlockingPool::new(1, counters.clone());
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (dropped_tx, dropped_rx) = mpsc::channel();
        struct Guard(mpsc::Sender<&'static str>);
        impl Drop for Guard {
            fn drop(&mut self) {
                let _ = self.0.send("dropped");
            }
        }
        let running = pool.run(move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            Ok(Guard(dropped_tx))
        });
        started_rx.recv().unwrap();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran2 = ran.clone();
        let queued = pool.run(move || {
            ran2.store(true, Ordering::SeqCst);
            Ok(())
        });
        drop(queued);
        drop(running);
        release_tx.send(()).unwrap();
        // The running job's result is dropped on the pool thread.
        assert_eq!(
            dropped_rx.recv_timeout(Duration::from_secs(10)),
            Ok("dropped")
        );
        // A later job runs; the cancelled one never did.
        wait(pool.run(|| Ok(()))).unwrap();
        assert!(!ran.load(Ordering::SeqCst));
        assert_eq!(counters.cancelled.load(Ordering::Relaxed), 1);
        assert_eq!(counters.abandoned.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_panicking_job_is_eio() {
        let pool = BlockingPool::new(1, Arc::default());
        let r: io::Result<()> = wait(pool.run(|| panic!("boom")));
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
        wait(pool.run(|| Ok(()))).unwrap();
    }
}
