//! Blocking locks (SETLKW: `fcntl(F_SETLKW)` and `flock` without
//! `LOCK_NB` through the mount) and what ends their waits.
//!
//! A lock wait lasts as long as another process holds the lock, so it must
//! neither hold the daemon (a stop waits for every request to finish) nor
//! its serving threads (the holder's unlock comes through the same mount).
//! The pieces:
//!
//! - [`LockOp`]: the lock a request asks for, prepared on the serving
//!   thread and owned, so the wait can run on a thread of its own. The async
//!   path first tries it without waiting; only a lock that is taken costs a
//!   thread ([`PassthroughFs`](crate::PassthroughFs)'s `AsyncFileSystem`
//!   setlk), never a serving or pool thread.
//! - [`Waits`]: the threads in a wait, by request. INTERRUPT from the kernel
//!   ([`Waits::interrupt`], sent when the waiting process gets a signal) and
//!   the session's stop ([`Waits::stop`], through `FileSystem::stop_waits`)
//!   end a wait with `EINTR`: a flag, then a signal (without `SA_RESTART`)
//!   that makes the blocking call return. A signal that lands between the
//!   flag check and the blocking call would be lost, so the interrupter
//!   sends it again while the waiter is still registered; and an INTERRUPT
//!   that arrives before its request started waiting (another thread read
//!   it first) is remembered for a while, so the wait ends as soon as it
//!   starts.
//! - A watchdog thread runs while any request waits ([`watchdog`]): every
//!   [`WATCH_EVERY`] it signals again every wait already ended but not
//!   left, and ends the wait of a request whose process has a signal
//!   pending that would have made the kernel send INTERRUPT. The kernel
//!   doesn't send one over FUSE-over-io_uring for a signal that comes
//!   after a ring entry was assigned the request and before it was handed
//!   to the daemon (`fuse_uring_prepare_send` sets `FR_SENT` without
//!   looking at `FR_INTERRUPTED`, which `fuse_dev_do_read` does), and a
//!   killed process would then wait, unkillable, until the lock is free.
//! - A wait whose request was dropped (a stopped async session) is
//!   interrupted, and a lock it took anyway is given back ([`LockHeld`]):
//!   nobody was told it is held.

use crate::handle::{Handle, LockCtx};
use crate::lock;
use crate::sys::{self, errno};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A lock a request asks for, with what it is taken on.
pub(crate) enum LockOp {
    /// `flock(2)` on the request's open file (`LOCK_SH`, `LOCK_EX` or
    /// `LOCK_UN`, without `LOCK_NB`).
    Flock { handle: Arc<Handle>, op: i32 },
    /// An OFD lock on the lock owner's own open file description (the
    /// owner's POSIX locks).
    Posix {
        ctx: Arc<LockCtx>,
        lock: libc::flock64,
    },
}

impl LockOp {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            LockOp::Flock { handle, .. } => handle.fd(),
            LockOp::Posix { ctx, .. } => ctx.fd.as_fd(),
        }
    }

    /// An unlock (which never waits).
    pub(crate) fn is_unlock(&self) -> bool {
        match self {
            LockOp::Flock { op, .. } => *op == libc::LOCK_UN,
            LockOp::Posix { lock, .. } => lock.l_type as i32 == libc::F_UNLCK,
        }
    }

    /// Takes the lock if that needs no wait: `Ok(false)` when it is held
    /// by someone else (`EAGAIN`).
    pub(crate) fn try_now(&self) -> io::Result<bool> {
        let r = match self {
            LockOp::Flock { op, .. } => sys::flock(self.fd(), op | libc::LOCK_NB),
            LockOp::Posix { lock, .. } => {
                let mut fl = *lock;
                sys::fcntl_lock(self.fd(), libc::F_OFD_SETLK, &mut fl)
            }
        };
        match r {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits for the lock (one blocking call; `EINTR` when signalled).
    fn wait_once(&self) -> io::Result<()> {
        match self {
            LockOp::Flock { op, .. } => sys::flock(self.fd(), *op),
            LockOp::Posix { lock, .. } => {
                let mut fl = *lock;
                sys::fcntl_lock(self.fd(), libc::F_OFD_SETLKW, &mut fl)
            }
        }
    }

    /// Gives back the lock this op took.
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
    fn release(&self) {
        let r = match self {
            LockOp::Flock { .. } => sys::flock(self.fd(), libc::LOCK_UN),
            LockOp::Posix { lock, .. } => {
                let mut fl = *lock;
                fl.l_type = libc::F_UNLCK as libc::c_short;
                sys::fcntl_lock(self.fd(), libc::F_OFD_SETLK, &mut fl)
            }
        };
        if let Err(e) = r {
            tracing::warn!("giving back a lock nobody waits for any more: {e}");
        }
    }
}

/// A lock taken by a wait whose request may be gone: given back on drop
/// unless [`LockHeld::claim`]ed.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
pub(crate) struct LockHeld(Option<LockOp>);

impl LockHeld {
    /// The request's reply reports the lock: keep it.
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
    pub(crate) fn claim(mut self) {
        self.0 = None;
    }
}

impl Drop for LockHeld {
    fn drop(&mut self) {
        if let Some(op) = self.0.take() {
            tracing::debug!("a lock was taken for a request that is gone; giving it back");
            op.release();
        }
    }
}

/// A thread waiting for a lock.
struct Waiter {
    unique: u64,
    /// The thread id of the process the request is for (0: unknown).
    requester: u32,
    thread: libc::pthread_t,
    interrupted: Arc<AtomicBool>,
}

/// How often the [`watchdog`] looks at the waits.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// INTERRUPTs remembered for requests that weren't waiting yet.
const RECENT_INTERRUPTS: usize = 256;

/// How often, and how far apart, an interrupter sends its signal again
/// while the waiter hasn't left its wait (a signal sent just before the
/// waiter entered the blocking call is lost).
const RESIGNAL: (usize, Duration) = (200, Duration::from_millis(2));

#[derive(Default)]
struct WaitList {
    waiters: Vec<Waiter>,
    /// Interrupted requests not (yet) seen waiting, oldest first.
    recent: VecDeque<u64>,
    /// The [`watchdog`] runs (it ends once no request waits).
    watched: bool,
}

/// The threads in a lock wait, and what ends their waits.
pub(crate) struct Waits {
    /// Shared with the [`watchdog`].
    list: Arc<Mutex<WaitList>>,
    /// The session is stopping: every wait ends, none starts.
    stopping: AtomicBool,
    /// The signal that makes a blocking call return `EINTR`.
    signal: i32,
}

impl Waits {
    /// Waits interrupted with `signal`, for which a handler that does
    /// nothing is installed (without `SA_RESTART`).
    pub(crate) fn new(signal: i32) -> Self {
        install_interrupt_handler(signal);
        Self {
            list: Arc::default(),
            stopping: AtomicBool::new(false),
            signal,
        }
    }

    /// Waits for `op` on this thread, for request `unique` of thread
    /// `requester` (the request's pid; 0 if unknown), until the lock is
    /// taken or the wait is interrupted (`EINTR`).
    pub(crate) fn wait(&self, unique: u64, requester: u32, op: &LockOp) -> io::Result<()> {
        let interrupted = Arc::new(AtomicBool::new(false));
        {
            let mut list = lock(&self.list);
            if let Some(i) = list.recent.iter().position(|&u| u == unique) {
                list.recent.remove(i);
                return Err(errno(libc::EINTR));
            }
            list.waiters
                .try_reserve(1)
                .map_err(|_| errno(libc::ENOMEM))?;
            list.waiters.push(Waiter {
                unique,
                requester,
                // SAFETY: pthread_self has no preconditions.
                thread: unsafe { libc::pthread_self() },
                interrupted: interrupted.clone(),
            });
            if !list.watched {
                let (shared, signal) = (self.list.clone(), self.signal);
                match std::thread::Builder::new()
                    .name("pt-lock-watch".into())
                    .stack_size(64 << 10)
                    .spawn(move || watchdog(&shared, signal))
                {
                    Ok(_) => list.watched = true,
                    Err(e) => tracing::warn!("starting the lock wait watchdog: {e}"),
                }
            }
        }
        tracing::debug!(unique, requester, "lock wait starts");
        let result = loop {
            if interrupted.load(Ordering::Acquire) || self.stopping.load(Ordering::Acquire) {
                break Err(errno(libc::EINTR));
            }
            match op.wait_once() {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                r => break r,
            }
        };
        lock(&self.list)
            .waiters
            .retain(|w| !Arc::ptr_eq(&w.interrupted, &interrupted));
        result
    }

    /// Ends the wait of request `unique` with `EINTR` (the kernel's
    /// INTERRUPT). If it isn't waiting yet, it won't wait when it starts.
    pub(crate) fn interrupt(&self, unique: u64) {
        let found = {
            let mut list = lock(&self.list);
            let mut found = false;
            for w in list.waiters.iter().filter(|w| w.unique == unique) {
                w.interrupted.store(true, Ordering::Release);
                found = true;
            }
            if !found {
                if list.recent.len() == RECENT_INTERRUPTS {
                    list.recent.pop_front();
                }
                list.recent.push_back(unique);
            }
            found
        };
        if found {
            self.signal_until_gone(|w| w.unique == unique);
        }
    }

    /// Ends every wait with `EINTR`, and every wait that starts from now
    /// on: the session is stopping.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let waiting = {
            let list = lock(&self.list);
            for w in &list.waiters {
                w.interrupted.store(true, Ordering::Release);
            }
            list.waiters.len()
        };
        if waiting > 0 {
            tracing::debug!(waiting, "stopping: ending lock waits");
            self.signal_until_gone(|_| true);
        }
    }

    /// Signals the waiters `pick` selects until they have left their wait
    /// (or a bounded number of times).
    fn signal_until_gone(&self, pick: impl Fn(&Waiter) -> bool) {
        for round in 0..RESIGNAL.0 {
            {
                let list = lock(&self.list);
                let mut any = false;
                for w in list.waiters.iter().filter(|w| pick(w)) {
                    any = true;
                    // SAFETY: a waiter leaves the list (under this lock)
                    // before its thread returns from `wait`, so the thread
                    // is alive.
                    unsafe { libc::pthread_kill(w.thread, self.signal) };
                }
                if !any {
                    return;
                }
            }
            if round + 1 < RESIGNAL.0 {
                std::thread::sleep(RESIGNAL.1);
            }
        }
        tracing::debug!("a lock waiter did not leave its wait after being signalled");
    }
}

/// While requests wait for locks: every [`WATCH_EVERY`], signals again
/// each waiter whose wait was ended but which hasn't left it (a signal
/// that came just before its blocking call, and every one sent since,
/// were used up before it), and ends the wait of each request whose
/// requester has a signal pending that the kernel would have sent an
/// INTERRUPT for (see the module docs). Ends once no request waits.
fn watchdog(list: &Mutex<WaitList>, signal: i32) {
    let mut told = false;
    loop {
        std::thread::sleep(WATCH_EVERY);
        let asking: Vec<(u32, Arc<AtomicBool>)> = {
            let mut list = lock(list);
            if list.waiters.is_empty() {
                list.watched = false;
                return;
            }
            for w in list
                .waiters
                .iter()
                .filter(|w| w.interrupted.load(Ordering::Acquire))
            {
                // SAFETY: a waiter leaves the list (under this lock)
                // before its thread returns from `wait`.
                unsafe { libc::pthread_kill(w.thread, signal) };
            }
            list.waiters
                .iter()
                .filter(|w| w.requester != 0 && !w.interrupted.load(Ordering::Acquire))
                .map(|w| (w.requester, w.interrupted.clone()))
                .collect()
        };
        // Read without the lock: INTERRUPTs and new waits go on meanwhile.
        let signalled: Vec<Arc<AtomicBool>> = asking
            .into_iter()
            .filter(|(tid, _)| has_signal_pending(*tid))
            .map(|(_, flag)| flag)
            .collect();
        if signalled.is_empty() {
            continue;
        }
        let list = lock(list);
        for w in list
            .waiters
            .iter()
            .filter(|w| signalled.iter().any(|f| Arc::ptr_eq(f, &w.interrupted)))
        {
            if !std::mem::replace(&mut told, true) {
                tracing::info!(
                    unique = w.unique,
                    requester = w.requester,
                    "a process waiting for a lock has a signal pending and no INTERRUPT \
                     came for its request (FUSE over io_uring doesn't send one for a signal \
                     that comes before the request reaches the daemon): its wait ends"
                );
            } else {
                tracing::debug!(
                    unique = w.unique,
                    "lock wait ended: its requester is signalled"
                );
            }
            w.interrupted.store(true, Ordering::Release);
            // SAFETY: as above.
            unsafe { libc::pthread_kill(w.thread, signal) };
        }
    }
}

/// Whether thread `tid` has a signal pending that it neither blocks nor
/// ignores: its own, or its process's if it is the only thread (the
/// kernel wakes one thread for a process-wide signal; a fatal one is made
/// every thread's own). Such a signal woke the thread's wait for its
/// request, and the kernel sends INTERRUPT for it. `false` where
/// `/proc/<tid>/status` can't be read (the thread is in another PID
/// namespace, say).
fn has_signal_pending(tid: u32) -> bool {
    let status = match std::fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(status) => status,
        Err(e) => {
            crate::creds::unreadable_proc_once("a lock waiter's pending signals", &e);
            return false;
        }
    };
    signal_pending_in(&status)
}

/// [`has_signal_pending`] of a `/proc/<tid>/status` text.
fn signal_pending_in(status: &str) -> bool {
    let field = |name: &str| -> Option<&str> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let mask = |name: &str| field(name).and_then(|v| u64::from_str_radix(v, 16).ok());
    let (Some(own), Some(shared), Some(blocked), Some(ignored)) = (
        mask("SigPnd"),
        mask("ShdPnd"),
        mask("SigBlk"),
        mask("SigIgn"),
    ) else {
        return false;
    };
    let alone = field("Threads") == Some("1");
    let pending = own | if alone { shared } else { 0 };
    pending & !blocked & !ignored != 0
}

#[cfg(feature = "async")]
/// Runs `op`'s wait for request `unique` of thread `requester` on a thread
/// of its own; the future yields the lock, given back if nobody claims it
/// (the request was dropped meanwhile). Dropping the future ends the wait.
pub(crate) fn wait_on_own_thread(
    waits: &Arc<Waits>,
    unique: u64,
    requester: u32,
    op: LockOp,
) -> LockWaitFuture {
    let thread_waits = waits.clone();
    // Counters of their own: lock waits are no pool jobs.
    let counters = Arc::default();
    let inner = crate::pool::run_on_own_thread("pt-lock-wait", counters, move || {
        thread_waits.wait(unique, requester, &op)?;
        Ok(LockHeld(Some(op)))
    });
    LockWaitFuture {
        inner,
        waits: waits.clone(),
        unique,
        done: false,
    }
}

#[cfg(feature = "async")]
/// The result of [`wait_on_own_thread`].
pub(crate) struct LockWaitFuture {
    inner: crate::pool::PoolFuture<LockHeld>,
    waits: Arc<Waits>,
    unique: u64,
    done: bool,
}

#[cfg(feature = "async")]
impl std::future::Future for LockWaitFuture {
    type Output = io::Result<()>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match std::pin::Pin::new(&mut self.inner).poll(cx) {
            std::task::Poll::Ready(r) => {
                self.done = true;
                std::task::Poll::Ready(r.map(LockHeld::claim))
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

#[cfg(feature = "async")]
impl Drop for LockWaitFuture {
    fn drop(&mut self) {
        if !self.done {
            // Nobody waits for the answer: end the wait (a lock it takes
            // anyway is given back by its `LockHeld`).
            self.waits.interrupt(self.unique);
        }
    }
}

/// Installs a do-nothing handler for `signal` without `SA_RESTART`, so
/// that the signal makes a blocking lock wait return `EINTR`
/// (process-wide: see `PassthroughConfig::interrupt_signal`).
fn install_interrupt_handler(signal: i32) {
    if let Err(e) = fuse_server::sys::install_interrupting_handler(signal) {
        tracing::warn!(signal, "installing the lock interrupt handler: {e}");
        return;
    }
    tracing::debug!(
        signal,
        rtmin_offset = signal - libc::SIGRTMIN(),
        "installed a process-wide do-nothing handler (no SA_RESTART) for the \
         lock wait interrupt signal (PassthroughConfig::interrupt_signal)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn posix_op(fd: OwnedFd) -> LockOp {
        // SAFETY: plain data; all-zero is valid.
        let mut lock: libc::flock64 = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        LockOp::Posix {
            ctx: Arc::new(LockCtx {
                fd,
                pid: Default::default(),
                fhs: Default::default(),
            }),
            lock,
        }
    }

    fn open(path: &std::path::Path) -> OwnedFd {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
            .into()
    }

    /// Two open file descriptions of one file: the first takes the lock,
    /// the second waits for it.
    fn held_and_waiting() -> (tempfile::TempDir, LockOp, LockOp) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let holder = posix_op(open(&path));
        assert!(holder.try_now().unwrap());
        let waiter = posix_op(open(&path));
        assert!(!waiter.try_now().unwrap(), "the lock is held");
        (dir, holder, waiter)
    }

    fn wait_until_waiting(waits: &Waits, n: usize) {
        while lock(&waits.list).waiters.len() < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn interrupt_ends_a_wait_with_eintr() {
        let (_dir, _holder, waiter) = held_and_waiting();
        let waits = Arc::new(Waits::new(libc::SIGRTMIN() + 5));
        let w = waits.clone();
        let t = std::thread::spawn(move || w.wait(7, 0, &waiter));
        wait_until_waiting(&waits, 1);
        waits.interrupt(8);
        waits.interrupt(7);
        let r = t.join().unwrap();
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR));
        assert!(lock(&waits.list).waiters.is_empty());
    }

    #[test]
    fn an_interrupt_before_the_wait_ends_it_at_once() {
        let (_dir, _holder, waiter) = held_and_waiting();
        let waits = Waits::new(libc::SIGRTMIN() + 5);
        waits.interrupt(9);
        let r = waits.wait(9, 0, &waiter);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR));
        assert!(
            lock(&waits.list).recent.is_empty(),
            "the interrupt was used up"
        );
    }

    #[test]
    fn stop_ends_every_wait_and_refuses_new_ones() {
        let (_dir, _holder, waiter) = held_and_waiting();
        let waiter = Arc::new(waiter);
        let waits = Arc::new(Waits::new(libc::SIGRTMIN() + 5));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (w, op) = (waits.clone(), waiter.clone());
                std::thread::spawn(move || w.wait(i, 0, &op))
            })
            .collect();
        wait_until_waiting(&waits, 4);
        waits.stop();
        for t in threads {
            let r = t.join().unwrap();
            assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR));
        }
        let r = waits.wait(99, 0, &waiter);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR));
    }

    #[test]
    fn a_pending_signal_is_read_from_proc_status() {
        let status = |pnd: &str, shd: &str, blk: &str, ign: &str, threads: u32| {
            format!(
                "Name:\tx\nThreads:\t{threads}\nSigQ:\t0/1\nSigPnd:\t{pnd}\n\
                 ShdPnd:\t{shd}\nSigBlk:\t{blk}\nSigIgn:\t{ign}\nSigCgt:\t0\n"
            )
        };
        let none = "0000000000000000";
        let sigkill = "0000000000000100";
        assert!(!signal_pending_in(&status(none, none, none, none, 1)));
        assert!(signal_pending_in(&status(sigkill, none, none, none, 4)));
        // A process-wide one counts for a process of one thread.
        assert!(signal_pending_in(&status(none, sigkill, none, none, 1)));
        assert!(!signal_pending_in(&status(none, sigkill, none, none, 2)));
        // Blocked or ignored: no INTERRUPT for it.
        assert!(!signal_pending_in(&status(sigkill, none, sigkill, none, 1)));
        assert!(!signal_pending_in(&status(sigkill, none, none, sigkill, 1)));
        assert!(!signal_pending_in("SigPnd:\tzz\n"));
    }

    /// A child process, killed and reaped when dropped.
    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            self.0.kill().unwrap();
            self.0.wait().unwrap();
        }
    }

    /// A process stopped with SIGSTOP keeps a signal sent to it pending.
    fn stopped_child(pending: Option<i32>) -> Child {
        let child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // SAFETY: signals to our own child.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap()
            .contains(") T ")
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(signal) = pending {
            // SAFETY: as above.
            unsafe { libc::kill(pid, signal) };
        }
        Child(child)
    }

    #[test]
    fn a_wait_whose_requester_has_a_signal_pending_ends_without_an_interrupt() {
        // What the watchdog does for a request whose INTERRUPT the kernel
        // never sends (see the module docs).
        let (_dir, _holder, waiter) = held_and_waiting();
        let child = stopped_child(Some(libc::SIGUSR1));
        let waits = Waits::new(libc::SIGRTMIN() + 5);
        let r = waits.wait(3, child.0.id(), &waiter);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR));
    }

    #[test]
    fn a_wait_whose_requester_has_no_signal_pending_goes_on() {
        let (_dir, _holder, waiter) = held_and_waiting();
        let child = stopped_child(None);
        let waits = Arc::new(Waits::new(libc::SIGRTMIN() + 5));
        let (w, pid) = (waits.clone(), child.0.id());
        let t = std::thread::spawn(move || w.wait(4, pid, &waiter));
        wait_until_waiting(&waits, 1);
        // Several of the watchdog's rounds: the wait goes on.
        std::thread::sleep(WATCH_EVERY * 4);
        assert!(!t.is_finished(), "the wait ended without a signal");
        waits.interrupt(4);
        let r = t.join().unwrap();
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR));
    }

    #[test]
    fn a_lock_taken_for_a_dropped_request_is_given_back() {
        let (dir, holder, waiter) = held_and_waiting();
        let waits = Arc::new(Waits::new(libc::SIGRTMIN() + 5));
        let held = waits.wait(1, 0, &holder).map(|()| LockHeld(Some(holder)));
        // The holder already had it: taking it again succeeds at once.
        drop(held.unwrap());
        // Given back: the waiter takes it without waiting.
        assert!(waiter.try_now().unwrap());
        drop(dir);
    }
}
