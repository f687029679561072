//! The thread that reads the group's events and passes the changes on to
//! the kernel ([`Reader`], [`watch_loop`]). Apart because it is the one
//! part that runs on a thread of its own: it reaches the watcher's tables
//! only through [`Shared`].

use super::events::{parse_events, Event};
use super::{Shared, SourceWatcher, COALESCE};
use crate::sys;
use fuse_server::Notifier;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The thread that reads a group's events and passes them on; dropping it
/// stops the thread.
pub(super) struct Reader {
    /// Written to stop the thread.
    stop: OwnedFd,
    /// Set when the thread is left behind ([`Reader::stop`] gave up on
    /// it): checked before each notification, so a thread whose
    /// notification was blocked sends nothing more once that one returns.
    abandoned: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Closed by the thread as it ends.
    ended: std::sync::mpsc::Receiver<()>,
}

/// How long dropping a [`Reader`] waits for its thread. A notification
/// can block in the kernel on a directory lock held by a request that
/// nobody answers any more (the session stopped first): such a thread is
/// left behind (it ends when the connection does) rather than hanging the
/// shutdown.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// How long [`SourceWatcher::stop_reading`] waits for the thread. It is
/// called while the session still serves (a pause for a live upgrade or
/// a stop), so a notification blocked on a directory lock returns once
/// the request holding the lock is answered, however busy the machine:
/// this bound is for a request that never is (a backing file system that
/// hangs), not for a slow one. A thread left behind would go on holding
/// the connection (its notifier) after the session was handed over or
/// stopped; with nobody serving any more, a notification blocked then
/// never returns, and neither does a client holding that lock.
const PAUSE_WAIT: Duration = Duration::from_secs(120);

impl SourceWatcher {
    /// Starts the thread that reads the group's events and passes them on
    /// through `notifier` (held weakly: the notifier holds the connection
    /// open); a thread already reading is stopped first (it passed changes
    /// on through another notifier).
    pub(crate) fn start_reading(&self, notifier: Weak<Notifier>) -> io::Result<()> {
        let mut slot = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        drop(slot.take());
        let stop = sys::eventfd()?;
        let stop_read = stop.try_clone()?;
        let abandoned = Arc::new(AtomicBool::new(false));
        let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
        let thread = {
            let group = self.group.clone();
            let shared = self.shared.clone();
            let abandoned = abandoned.clone();
            std::thread::Builder::new()
                .name("source-watch".into())
                .spawn(move || {
                    watch_loop(&group, &stop_read, &abandoned, &shared, &notifier);
                    drop(ended_tx);
                })?
        };
        *slot = Some(Reader {
            stop,
            abandoned,
            thread: Some(thread),
            ended,
        });
        Ok(())
    }

    /// Stops the thread that reads the group, keeping the group and its
    /// marks: changes made meanwhile queue in the group until a thread
    /// reads it again, here or in the process a live upgrade moves it to.
    /// (A notification the thread sends may wait for a directory lock that
    /// a client holds until its request is answered: a session pauses only
    /// once this thread is stopped.)
    ///
    /// Call it while the session still answers requests: the thread
    /// finishes the batch of events it read, and this waits for it, also
    /// for a notification blocked on a directory lock (up to
    /// [`PAUSE_WAIT`]; a thread given up on then sends nothing more).
    pub(crate) fn stop_reading(&self) {
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut reader) = reader {
            reader.stop(PAUSE_WAIT);
        }
    }
}

impl Reader {
    /// Asks the thread to stop (it finishes the batch of events it read,
    /// so none is lost) and waits up to `wait` for it to end; a thread
    /// still blocked in a notification then is left behind (logged), and
    /// sends nothing more once that notification returns.
    fn stop(&mut self, wait: Duration) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        let Some(t) = self.thread.take() else {
            return;
        };
        let deadline = Instant::now() + wait;
        let mut warned = false;
        loop {
            let step = STOP_WAIT.min(deadline.saturating_duration_since(Instant::now()));
            match self.ended.recv_timeout(step) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if !warned {
                        tracing::info!(
                            "source watch: waiting for a notification blocked in the kernel \
                             (a directory lock held by a request still being answered)"
                        );
                        warned = true;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    self.abandoned.store(true, Ordering::Release);
                    tracing::warn!(
                        "source watch: a notification to the kernel is still blocked after \
                         {wait:?}; leaving its thread behind (the rest of its batch of \
                         changes is not passed on)"
                    );
                    return;
                }
                _ => {
                    let _ = t.join();
                    return;
                }
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop(STOP_WAIT);
    }
}

/// Reads events until stopped, passing changes on to the kernel.
fn watch_loop(
    group: &OwnedFd,
    stop: &OwnedFd,
    abandoned: &AtomicBool,
    shared: &Shared,
    notifier: &Weak<Notifier>,
) {
    // Before each notification: the one before may have blocked for long
    // (a directory lock), and a thread left behind meanwhile sends nothing
    // more (the session may have been handed over or stopped, and a
    // notification sent with nobody serving never returns).
    let stopped = || abandoned.load(Ordering::Acquire);
    let mut buf = vec![0u8; 64 << 10];
    let mut events = Vec::new();
    // Files changed in this batch: node id -> whether the data changed.
    let mut changed: HashMap<u64, bool> = HashMap::new();
    let own_pid = std::process::id() as i32;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: group.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::warn!("source watch: poll: {}", io::Error::last_os_error());
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        // SAFETY: reading into our buffer.
        let n = unsafe {
            libc::read(
                group.as_fd().as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
                continue;
            }
            tracing::warn!("source watch: reading events: {e}");
            return;
        }
        events.clear();
        let file_events = parse_events(&buf[..n as usize], own_pid, &mut events);
        // Gone with the connection: nothing to tell any more.
        let Some(notifier) = notifier.upgrade() else {
            return;
        };
        for event in events.drain(..) {
            if stopped() {
                return;
            }
            match event {
                Event::Overflow => {
                    shared.overflows.fetch_add(1, Ordering::Relaxed);
                    {
                        let _files = shared.files();
                        shared.missed_change(None);
                    }
                    tracing::warn!(
                        "source watch: events lost (queue full); every cached name expires"
                    );
                    if let Err(e) = notifier.inc_epoch() {
                        tracing::warn!("source watch: expiring cached names: {e}");
                    }
                    // And every watched file's attributes and data.
                    let mut files: Vec<u64> = Vec::new();
                    {
                        let table = shared.files();
                        files.extend(table.all().map(|(node, _)| node));
                        shared.all_by_number(&mut |node| files.push(node));
                    }
                    changed.extend(files.into_iter().map(|node| (node, true)));
                }
                Event::Changed { file, data } => {
                    let files = shared.files();
                    let mut note = |nodeid| *changed.entry(nodeid).or_default() |= data;
                    let in_table = files.nodes_of(&file, &mut note);
                    let by_number = shared.nodes_by_number(&file, &mut note);
                    if !in_table && !by_number {
                        // Counted under the table's lock (see `missed`).
                        shared.missed_change(Some(file.digest()));
                    }
                }
                Event::Name { dir, name } => {
                    let mut dirs = Vec::new();
                    shared.dirs().nodes_of(&dir, |nodeid| dirs.push(nodeid));
                    for nodeid in dirs {
                        if stopped() {
                            return;
                        }
                        shared.invalidations.fetch_add(1, Ordering::Relaxed);
                        // ENOENT: the kernel has no such name cached.
                        if let Err(e) = notifier.inval_entry(nodeid, &name, false) {
                            if e.raw_os_error() != Some(libc::ENOENT) {
                                tracing::debug!(nodeid, "source watch: invalidating a name: {e}");
                            }
                        }
                    }
                }
            }
        }
        // The daemon's own writes raise events too (skipped above): a
        // thread woken per write would cost a context switch each.
        let coalesce = file_events;
        for (nodeid, data) in changed.drain() {
            if stopped() {
                return;
            }
            shared.file_invalidations.fetch_add(1, Ordering::Relaxed);
            // Offset 0: the cached data too; -1: only the attributes.
            let offset = if data { 0 } else { -1 };
            // ENOENT: the kernel has no such inode cached any more.
            if let Err(e) = notifier.inval_inode(nodeid, offset, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    tracing::debug!(nodeid, "source watch: invalidating a file: {e}");
                }
            }
        }
        drop(notifier);
        if coalesce {
            std::thread::sleep(COALESCE);
        }
    }
}
