//! [`RuntimeType`], [`Runtime`] and the per-thread context that tells the file API which
//! runtime it runs on.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::OnceLock;
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::{JoinHandle, LocalSet};

use crate::driver::{Driver, DriverOptions, DriverStats};
use crate::{sys, Error};

/// Default submission queue size of a runtime's ring.
pub const DEFAULT_RING_ENTRIES: u32 = 256;

/// Which runtime serves file IO on a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuntimeType {
    /// A current-thread tokio runtime. File IO is a plain blocking syscall on the calling
    /// thread (`pread`, `preadv`, ...): cheap for page-cache hits, but it stalls every other
    /// task on the thread while the disk works.
    Tokio,
    /// A current-thread tokio runtime whose reactor also drives a per-thread io_uring: file
    /// IO is submitted to the ring in batches and never blocks the thread.
    IoUring,
}

impl RuntimeType {
    /// Both types, in a fixed order (handy for tests and benchmarks).
    pub const ALL: [RuntimeType; 2] = [RuntimeType::Tokio, RuntimeType::IoUring];

    /// Whether file IO blocks the calling thread on this runtime (true for
    /// [`RuntimeType::Tokio`], false for [`RuntimeType::IoUring`]). A server that must keep
    /// serving while a slow read runs should move file IO off the thread when this is true.
    pub fn file_io_blocks(self) -> bool {
        match self {
            RuntimeType::Tokio => true,
            RuntimeType::IoUring => false,
        }
    }

    /// Whether this runtime type can be built here. For [`RuntimeType::IoUring`] this probes
    /// `io_uring_setup` once per process and reports why it failed (not compiled in, disabled
    /// by `kernel.io_uring_disabled`, blocked by seccomp, out of memory...).
    pub fn check_available(self) -> Result<(), Error> {
        match self {
            RuntimeType::Tokio => Ok(()),
            RuntimeType::IoUring => uring_available(),
        }
    }

    /// Builds a runtime of this type with default settings.
    pub fn build(self) -> Result<Runtime, Error> {
        Builder::new(self).build()
    }

    /// The runtime type serving file IO on the current thread: [`RuntimeType::IoUring`]
    /// inside [`Runtime::block_on`] of an io_uring runtime, [`RuntimeType::Tokio`]
    /// everywhere else.
    pub fn current() -> RuntimeType {
        if current_driver().is_some() {
            RuntimeType::IoUring
        } else {
            RuntimeType::Tokio
        }
    }

    /// The canonical name (`"tokio"`, `"uring"`).
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeType::Tokio => "tokio",
            RuntimeType::IoUring => "uring",
        }
    }
}

impl fmt::Display for RuntimeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RuntimeType {
    type Err = Error;

    /// Accepts `tokio`, `uring`, `io_uring` and `io-uring` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "tokio" => Ok(RuntimeType::Tokio),
            "uring" | "io_uring" | "io-uring" | "iouring" => Ok(RuntimeType::IoUring),
            _ => Err(Error::UnknownRuntimeType(s.to_owned())),
        }
    }
}

/// Probes `io_uring_setup` once per process. `Err(Error::UringUnavailable)` carries the
/// errno (`ENOSYS`: not in this kernel; `EPERM`: disabled by sysctl or seccomp).
pub fn uring_available() -> Result<(), Error> {
    // The probe's outcome: Ok, or the errno (or, without one, the message).
    static PROBE: OnceLock<Result<(), Result<i32, String>>> = OnceLock::new();
    let r = PROBE.get_or_init(|| match io_uring::IoUring::new(2) {
        Ok(_) => Ok(()),
        Err(e) => Err(e.raw_os_error().ok_or_else(|| e.to_string())),
    });
    match r {
        Ok(()) => Ok(()),
        Err(Ok(errno)) => Err(Error::UringUnavailable(io::Error::from_raw_os_error(
            *errno,
        ))),
        Err(Err(msg)) => Err(Error::UringUnavailable(io::Error::other(msg.clone()))),
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Driver>>> = const { RefCell::new(None) };
    static SOLO: Cell<bool> = const { Cell::new(false) };
}

/// Whether the code running now is all the work its thread has: the
/// server loop that polls it said so with [`run_solo`] (no other request
/// waits on the thread, none is queued for it, it was idle until this one
/// came). A blocking system call made now then delays no other request,
/// and a short file read or write may cost less made inline than as an
/// io_uring operation, whose round trip through the ring (submit, sleep,
/// wake, reap) costs more than the call itself when nothing else overlaps
/// it. `false` wherever no loop said so.
pub fn solo() -> bool {
    SOLO.with(Cell::get)
}

/// Runs `f` with [`solo`] answering `solo` (the previous answer comes back
/// afterwards, also if `f` panics). For server loops: call it around the
/// first poll of a request's future, with `true` only when nothing else
/// waits on this thread.
pub fn run_solo<R>(solo: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SOLO.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SOLO.with(|s| s.replace(solo)));
    f()
}

/// The io_uring driver of the runtime running on this thread, if any.
pub(crate) fn current_driver() -> Option<Rc<Driver>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `driver` the current one until the guard drops (restoring the previous one).
pub(crate) fn enter(driver: Option<Rc<Driver>>) -> EnterGuard {
    let prev = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), driver));
    EnterGuard { prev }
}

/// Restores the previous current driver on drop.
pub(crate) struct EnterGuard {
    prev: Option<Rc<Driver>>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// Settings for a [`Runtime`].
#[derive(Debug, Clone)]
pub struct Builder {
    kind: RuntimeType,
    ring_entries: u32,
    cq_entries: u32,
    defer_taskrun: bool,
    uring_commands: bool,
}

impl Builder {
    /// Settings for a runtime of type `kind`, with defaults.
    pub fn new(kind: RuntimeType) -> Builder {
        Builder {
            kind,
            ring_entries: DEFAULT_RING_ENTRIES,
            cq_entries: 0,
            defer_taskrun: false,
            uring_commands: false,
        }
    }

    /// The io_uring submission queue size (rounded up to a power of two by the kernel; the
    /// completion queue is twice as large). More SQEs than this in one tick are submitted
    /// in several `io_uring_enter` calls. Ignored for [`RuntimeType::Tokio`].
    pub fn ring_entries(mut self, entries: u32) -> Builder {
        self.ring_entries = entries.max(2);
        self
    }

    /// Whether to set the ring up with `IORING_SETUP_DEFER_TASKRUN` (+ `SINGLE_ISSUER`,
    /// `TASKRUN_FLAG`; ignored by kernels before 6.1). Default false.
    ///
    /// With it, completions that need this thread (`O_DIRECT` bios, io-wq results,
    /// poll-driven reads) wait until the driver asks for them instead of interrupting the
    /// thread. Measured here (`strace -c`, 1 GiB `O_DIRECT` copy): the ~1 `EINTR` out of
    /// `epoll_wait` per disk completion (1450-1900 per copy) disappears, but the total stays
    /// about the same (7.8k-9.8k syscalls without, 8.1k with), and every buffered write,
    /// which ext4 hands to io-wq, needs an extra `io_uring_enter` to fetch its completion
    /// (2 enters per `writev_at` instead of 1). Buffered IO is the
    /// common FUSE case, hence off by default. Ignored for [`RuntimeType::Tokio`].
    pub fn defer_taskrun(mut self, on: bool) -> Builder {
        self.defer_taskrun = on;
        self
    }

    /// The least completion queue size of the ring (it is at least twice
    /// [`Builder::ring_entries`] and 1024 anyway). A ring shared with uring commands
    /// ([`Builder::uring_commands`]) wants room for a completion of every command it may
    /// have in flight. Ignored for [`RuntimeType::Tokio`].
    pub fn cq_entries(mut self, entries: u32) -> Builder {
        self.cq_entries = entries;
        self
    }

    /// Whether to build the ring with 128-byte SQEs (`IORING_SETUP_SQE128`), so that
    /// another user on the same thread can submit uring commands that need them (FUSE
    /// over io_uring's) on the runtime's own ring, through [`Runtime::shared_ring`]. The
    /// runtime's own operations work the same either way. Default false. Ignored for
    /// [`RuntimeType::Tokio`].
    pub fn uring_commands(mut self, on: bool) -> Builder {
        self.uring_commands = on;
        self
    }

    /// Builds the runtime. For [`RuntimeType::IoUring`] this fails with
    /// [`Error::UringUnavailable`] when the ring cannot be set up.
    pub fn build(self) -> Result<Runtime, Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let local = LocalSet::new();
        let driver = match self.kind {
            RuntimeType::Tokio => None,
            RuntimeType::IoUring => {
                uring_available()?;
                let driver = Rc::new(
                    Driver::with_options(DriverOptions {
                        entries: self.ring_entries,
                        cq_entries: self.cq_entries,
                        with_eventfd: true,
                        defer_taskrun: self.defer_taskrun,
                        sqe128: self.uring_commands,
                    })
                    .map_err(Error::UringUnavailable)?,
                );
                let efd = driver
                    .eventfd()
                    .expect("driver built with an eventfd")
                    .try_clone()
                    .map_err(Error::Runtime)?;
                let afd = {
                    let _ctx = rt.enter();
                    // SAFETY: an OwnedFd always returns the same fd, open until it is dropped,
                    // and the AsyncFd owns it.
                    unsafe { AsyncFd::register_with_interest(efd, Interest::READABLE) }
                        .map_err(|e| Error::Runtime(e.into()))?
                };
                local.spawn_local(drive(driver.clone(), afd));
                Some(driver)
            }
        };
        Ok(Runtime {
            local,
            driver,
            rt,
            kind: self.kind,
        })
    }
}

/// The driver task: submits each tick's SQEs in one `io_uring_enter`, and reaps
/// completions whenever the ring's eventfd becomes readable.
async fn drive(driver: Rc<Driver>, efd: AsyncFd<std::os::fd::OwnedFd>) {
    poll_fn(|cx| {
        driver.set_flush_waker(cx.waker());
        loop {
            driver.flush();
            match efd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    // Reset the counter, then forget the readiness (tokio only clears it if
                    // no new event arrived meanwhile) and reap again.
                    match sys::eventfd_read(std::os::fd::AsFd::as_fd(efd.get_ref())) {
                        Ok(_) => {}
                        Err(e) => tracing::error!("reading the io_uring eventfd: {e}"),
                    }
                    guard.clear_ready();
                }
                Poll::Ready(Err(e)) => {
                    tracing::error!("io_uring eventfd watch failed: {e}; driver stops");
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// A single-threaded runtime of one [`RuntimeType`]: a current-thread tokio runtime with a
/// [`LocalSet`] (so `!Send` tasks can be spawned), plus, for io_uring, this thread's ring.
///
/// Everything runs on the thread that calls [`Runtime::block_on`]; a server uses one
/// runtime per thread.
pub struct Runtime {
    // Field order is drop order: the tasks (and the futures they own) go first, then the
    // ring (which waits for the kernel to return every buffer), then the reactor.
    local: LocalSet,
    driver: Option<Rc<Driver>>,
    rt: tokio::runtime::Runtime,
    kind: RuntimeType,
}

impl Runtime {
    /// The type of this runtime.
    pub fn runtime_type(&self) -> RuntimeType {
        self.kind
    }

    /// Runs `fut` to completion on this thread, together with the tasks spawned with
    /// [`Runtime::spawn_local`] or [`spawn_local`].
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        let _guard = enter(self.driver.clone());
        self.rt.block_on(self.local.run_until(fut))
    }

    /// Spawns a `!Send` task on this runtime; it runs while [`Runtime::block_on`] runs.
    pub fn spawn_local<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.local.spawn_local(fut)
    }

    /// The underlying tokio runtime handle (for `Send` tasks and the blocking pool).
    pub fn tokio_handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }

    /// io_uring operations not yet completed by the kernel (including those whose future was
    /// dropped). Always 0 on a tokio runtime.
    pub fn uring_in_flight(&self) -> usize {
        self.driver.as_ref().map_or(0, |d| d.in_flight())
    }

    /// Counters of this runtime's ring (all zero on a tokio runtime).
    pub fn uring_stats(&self) -> DriverStats {
        self.driver.as_ref().map(|d| d.stats()).unwrap_or_default()
    }

    /// The runtime's ring, for submitting uring commands on it: `Some` on an io_uring
    /// runtime built with [`Builder::uring_commands`], `None` otherwise.
    pub fn shared_ring(&self) -> Option<SharedRing> {
        self.driver
            .as_ref()
            .filter(|d| d.is_sqe128())
            .map(|d| SharedRing { driver: d.clone() })
    }
}

/// An io_uring runtime's ring lent to another user on the same thread (FUSE over
/// io_uring's serving loop), which submits its own SQEs there and gets their completions
/// back, so that one ring carries both its commands and the runtime's file IO. From
/// [`Runtime::shared_ring`].
///
/// - The user's SQEs carry a `user_data` below [`SharedRing::USER_DATA_LIMIT`]; the
///   runtime's own have the top bit set. Completions are sorted by that bit when reaped,
///   by whoever reaps: the runtime's driver task (woken by the ring's eventfd, through
///   tokio's reactor), [`SharedRing::enter`], or an operation that waits. The user's are
///   kept until [`SharedRing::take_completions`].
/// - It holds the runtime's ring open: drop it before the runtime, and before the memory
///   that commands in flight point at (closing the ring cancels uring commands; the ring
///   closes when the runtime and every `SharedRing` are gone and the runtime's own
///   operations are done).
/// - `!Send`: the ring is used on the runtime's thread only (`SINGLE_ISSUER`).
#[derive(Clone)]
pub struct SharedRing {
    driver: Rc<Driver>,
}

impl SharedRing {
    /// `user_data` of the user's SQEs must be below this (the runtime's own SQEs have
    /// the top bit set).
    pub const USER_DATA_LIMIT: u64 = crate::driver::DRIVER_KEY;

    /// Runs `f` on the ring itself: to register files or buffers, and to push SQEs
    /// (which the next [`SharedRing::enter`], or any submit of the runtime, hands to the
    /// kernel). `EDEADLK` if the runtime's driver is in use further up the stack.
    ///
    /// # Safety
    ///
    /// `f` must not take completions off the completion queue (they may be the runtime's:
    /// use [`SharedRing::take_completions`]) except while no operation of the runtime is
    /// in flight, must push only SQEs whose `user_data` is below
    /// [`SharedRing::USER_DATA_LIMIT`], and must keep the memory and descriptors every
    /// pushed SQE names valid until its completion or until the ring is closed. It must
    /// not unregister the eventfd, the runtime's way of seeing completions.
    pub unsafe fn with_ring<R>(
        &self,
        f: impl FnOnce(&mut io_uring::IoUring<io_uring::squeue::Entry128>) -> R,
    ) -> io::Result<R> {
        self.driver.with_ring128(f)
    }

    /// Submits everything queued (the user's SQEs and the runtime's), sleeps in
    /// `io_uring_enter` until at least `wait` completions are there (0: doesn't sleep,
    /// but still runs the ring's deferred completion work), and reaps: the runtime's
    /// completions wake their tasks (which run when the runtime next polls them), the
    /// user's wait for [`SharedRing::take_completions`].
    pub fn enter(&self, wait: usize) -> io::Result<()> {
        self.driver.enter(wait)
    }

    /// [`SharedRing::enter`] that sleeps at most `timeout` for the `wait` completions;
    /// `Ok(false)` if the timeout passed first (what came meanwhile is reaped all the
    /// same). For a loop that sleeps in the ring while the runtime's tasks wait for
    /// their operations on it, and must still look at the runtime's other sources of
    /// wake-ups (timers, other threads) now and then.
    pub fn enter_for(&self, wait: usize, timeout: std::time::Duration) -> io::Result<bool> {
        self.driver.enter_for(wait, Some(timeout))
    }

    /// Operations of the runtime on this ring whose completion has not been reaped yet.
    pub fn runtime_in_flight(&self) -> usize {
        self.driver.in_flight()
    }

    /// Moves the completions of the user's SQEs reaped so far to `out`, as
    /// `(user_data, result)`.
    pub fn take_completions(&self, out: &mut Vec<(u64, i32)>) {
        self.driver.take_foreign(out)
    }

    /// Waits until a completion of the user's SQEs has been reaped (by the runtime's
    /// driver task, which the ring's eventfd wakes).
    pub async fn completions_ready(&self) {
        poll_fn(|cx| self.poll_completions(cx)).await
    }

    /// Ready when a completion of the user's SQEs has been reaped and waits for
    /// [`SharedRing::take_completions`]; otherwise `cx`'s waker is woken when one is.
    pub fn poll_completions(&self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        self.driver.poll_foreign(cx)
    }

    /// Counters of the ring (the runtime's own submissions and every completion).
    pub fn stats(&self) -> DriverStats {
        self.driver.stats()
    }
}

impl fmt::Debug for SharedRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRing").finish_non_exhaustive()
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime").field("kind", &self.kind).finish()
    }
}

/// Spawns a `!Send` task on the runtime running on this thread.
///
/// # Panics
/// Outside [`Runtime::block_on`] (or any tokio `LocalSet`).
pub fn spawn_local<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    tokio::task::spawn_local(fut)
}
