//! The pause and hand-over side of a [`FuseDevTask`] (see
//! [`crate::takeover`]): pausing every task of the mount, serving again,
//! giving the connection up, and a task's parking while paused. Apart from
//! the serving loop, which only parks when it sees the pause.

use super::FuseDevTask;
use crate::session::{can_hand_over, lock_waits_refuse, release_mount};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
// Only the documentation's links name them.
#[cfg(doc)]
use crate::mount::Mount;

impl FuseDevTask {
    /// Stops serving without ending the connection, to hand it over: every
    /// task (the siblings too) answers the requests it has read and parks;
    /// requests the kernel queues meanwhile wait for the next reader.
    /// Returns once all are parked. Follow with [`FuseDevTask::release`],
    /// or [`FuseDevTask::unpause`] to serve again. Refused on a sibling,
    /// while a request waits for a lock (it can't be answered in time; the
    /// pause is called off if one turns up meanwhile), and for a mount that
    /// can't be handed over ([`Mount::release`]). Never call it on a thread
    /// that runs one of the tasks: it waits for them.
    pub fn pause(&self) -> io::Result<()> {
        if self.sibling {
            return Err(io::Error::other("pause the first task, not a sibling"));
        }
        can_hand_over(&self.mount)?;
        let state = &self.state;
        let lock_waits = || {
            let waits = state.long_waits.load(Ordering::SeqCst);
            (waits > 0).then(|| lock_waits_refuse(waits))
        };
        if let Some(e) = lock_waits() {
            return Err(e);
        }
        state.paused.store(true, Ordering::SeqCst);
        match self.wait_parked(lock_waits) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.unpause()?;
                Err(e)
            }
        }
    }

    /// Waits until every task is parked, waking them to see the pause;
    /// fails if the mount stops meanwhile, or with what `give_up` says.
    fn wait_parked(&self, give_up: impl Fn() -> Option<io::Error>) -> io::Result<()> {
        let state = &self.state;
        let mut ended = state.lock_ended();
        loop {
            if state.stop.load(Ordering::Acquire) {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the session is ending",
                ));
            }
            if state.parked.load(Ordering::Acquire) == state.tasks.load(Ordering::Acquire) {
                return Ok(());
            }
            if let Some(e) = give_up() {
                return Err(e);
            }
            state.wake_all();
            ended = state
                .ended_changed
                .wait_timeout(ended, std::time::Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Serves again after [`FuseDevTask::pause`] (the hand-over failed), or
    /// starts serving a connection taken over with
    /// [`FuseDevTask::resume_paused`].
    pub fn unpause(&self) -> io::Result<()> {
        self.state.paused.store(false, Ordering::SeqCst);
        self.state.resume.notify_waiters();
        Ok(())
    }

    /// Gives the paused connection up for another process to serve: the
    /// mount's session descriptor. The mount stays (the connection lives
    /// while the descriptor is open anywhere); the tasks then end without
    /// unmounting, and the file system is not told the connection ended
    /// (its `destroy` doesn't run: the connection isn't over).
    pub fn release(&self) -> io::Result<OwnedFd> {
        let state = &self.state;
        if !state.paused.load(Ordering::Acquire) {
            return Err(io::Error::other("release needs a paused session"));
        }
        // Tasks of a session resumed paused may still be on their way to
        // parking.
        self.wait_parked(|| None)?;
        let fd = release_mount(&self.mount)?;
        state.released.store(true, Ordering::Release);
        state.stop.store(true, Ordering::Release);
        state.paused.store(false, Ordering::Release);
        state.resume.notify_waiters();
        Ok(fd)
    }

    /// A duplicate of the mount's session descriptor (the connection INIT
    /// was answered on); fails once the task gave the mount up or ended.
    pub fn connection_fd(&self) -> io::Result<OwnedFd> {
        match self
            .mount
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(mount) => mount.dev_fd().try_clone_to_owned(),
            None => Err(io::Error::other("the session has ended")),
        }
    }

    /// Paused ([`FuseDevTask::pause`], or resumed paused and not yet
    /// served).
    pub fn is_paused(&self) -> bool {
        self.state.paused.load(Ordering::Acquire)
    }

    /// The connection was handed to another process
    /// ([`FuseDevTask::release`]).
    pub fn is_released(&self) -> bool {
        self.state.released.load(Ordering::Acquire)
    }

    /// Paused for a hand-over: answers the requests this task read, then
    /// waits until the pause ends (served again, released, or stopped).
    /// If the pause is called off before every request is answered, it
    /// returns at once and the rest are answered while serving.
    pub(super) async fn park(&self, tasks: &mut tokio::task::JoinSet<()>) {
        let state = &self.state;
        let mut parked = false;
        loop {
            let resumed = state.resume.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !state.paused.load(Ordering::SeqCst) || state.stop.load(Ordering::Acquire) {
                break;
            }
            if parked {
                resumed.await;
                continue;
            }
            tokio::select! {
                joined = tasks.join_next() => match joined {
                    Some(Err(e)) => tracing::error!("a request task failed: {e}"),
                    Some(Ok(())) => {}
                    None => {
                        let _ended = state.lock_ended();
                        state.parked.fetch_add(1, Ordering::AcqRel);
                        parked = true;
                        state.ended_changed.notify_all();
                    }
                },
                _ = resumed => {}
            }
        }
        if parked {
            let _ended = state.lock_ended();
            state.parked.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
