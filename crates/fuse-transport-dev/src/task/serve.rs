//! The serving side of a [`FuseDevTask`]: its run (answering INIT, then
//! reading requests and running each as a local task, counting the ones
//! that may wait for a lock), the end of a run, and the non-blocking read.
//! Apart from the task's construction and its pause, which only set up and
//! steer this loop.

use super::{FuseDevTask, READ_OR_ERROR};
use crate::dev::{self, DevTransaction};
use crate::session::request_opcode;
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{AlignedBuf, Outcome};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::sync::Semaphore;
// Only the documentation's links name it.
#[cfg(doc)]
use fuse_server::Session;

/// Offset of the request in its buffer; see the `/dev/fuse` session.
const REQUEST_OFFSET: usize = AlignedBuf::ALIGN - 80;

impl FuseDevTask {
    /// Serves until the mount goes away or the task is stopped, then
    /// waits for the requests in flight and unmounts.
    pub async fn run(self) -> io::Result<()> {
        self.run_ref().await
    }

    /// [`FuseDevTask::run`] for a task shared as a [`Session`]: the same,
    /// while other threads hold the task to stop it and wait for it.
    pub async fn run_shared(self: Arc<Self>) -> io::Result<()> {
        self.run_ref().await
    }

    async fn run_ref(&self) -> io::Result<()> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(io::Error::other("FuseDevTask::run called twice"));
        }
        let limit = Arc::new(Semaphore::new(self.config.max_in_flight.max(1)));
        let pool: Arc<Mutex<Vec<(AlignedBuf, AlignedBuf)>>> = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        let result = self.serve(&limit, &pool, &mut tasks).await;
        while let Some(joined) = tasks.join_next().await {
            if let Err(e) = joined {
                tracing::error!("a request task failed: {e}");
            }
        }
        // This task's reading ends the mount's: its siblings see the
        // connection go away (or the shared stop flag) and end too.
        self.state.stop.store(true, Ordering::Release);
        self.state.wake.notify_waiters();
        self.end_task(!self.state.released.load(Ordering::Acquire));
        if let Err(e) = self.unmount() {
            tracing::warn!("unmounting {}: {e}", self.mountpoint.display());
        }
        if let Err(e) = &result {
            self.state
                .lock_ended()
                .error
                .get_or_insert_with(|| io::Error::new(e.kind(), e.to_string()));
        }
        self.ended();
        result
    }

    /// This task no longer serves. When `finished` (its `run` ended, so
    /// the connection is over or stopped), the last of the mount's tasks
    /// to end tells the file system.
    pub(super) fn end_task(&self, finished: bool) {
        if self.counted.swap(false, Ordering::AcqRel) {
            // Under the lock `Session::wait` checks the count with, so that
            // it can't see the last task gone before the file system was
            // told.
            let _ended = self.state.lock_ended();
            let last = self.state.tasks.fetch_sub(1, Ordering::AcqRel) == 1;
            if last && finished {
                self.server.finish();
            }
        }
        self.state.ended_changed.notify_all();
    }

    /// Tells [`Session::wait`] that this task is over (and, for the first
    /// task, that its mount is unmounted).
    pub(super) fn ended(&self) {
        if !self.sibling {
            self.state.lock_ended().owner = true;
        }
        self.state.ended_changed.notify_all();
    }

    async fn serve(
        &self,
        limit: &Arc<Semaphore>,
        pool: &Arc<Mutex<Vec<(AlignedBuf, AlignedBuf)>>>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> io::Result<()> {
        if !self.serve_init().await? {
            return Ok(());
        }
        loop {
            if self.state.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            if self.state.paused.load(Ordering::SeqCst) {
                self.park(tasks).await;
                continue;
            }
            let permit = tokio::select! {
                permit = limit.clone().acquire_owned() => permit.map_err(io::Error::other)?,
                _ = self.state.wake.notified() => continue,
            };
            let (mut request, reply) = match pool.lock().unwrap_or_else(|e| e.into_inner()).pop() {
                Some(bufs) => bufs,
                None => self.new_buffers()?,
            };
            let n = tokio::select! {
                n = read_async(&self.fd, &mut request[REQUEST_OFFSET..]) => n,
                _ = self.state.wake.notified() => {
                    pool.lock().unwrap_or_else(|e| e.into_inner()).push((request, reply));
                    continue;
                }
            };
            let n = match n {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR | libc::ENOENT) => {
                        pool.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((request, reply));
                        continue;
                    }
                    Some(libc::ENODEV | libc::ECONNABORTED) => {
                        // Nobody can answer a lock wait's caller any
                        // more: end the waits, or the request tasks
                        // joined below would never finish.
                        self.server.stop_waits();
                        if let Some(mount) = self
                            .mount
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .as_mut()
                        {
                            // The unmount at the end then touches only a
                            // mount the kernel aborted, and says so.
                            mount.connection_ended();
                        }
                        return Ok(());
                    }
                    _ => return Err(io::Error::new(e.kind(), format!("reading /dev/fuse: {e}"))),
                },
            };
            // Counted before the pause flag is looked at again, so that a
            // pause sees either the lock wait or this task not parked.
            let opcode = request_opcode(&request[REQUEST_OFFSET..REQUEST_OFFSET + n]);
            let long_wait = opcode_info_raw(opcode).is_some_and(|i| i.waits_indefinitely());
            if long_wait {
                self.state.long_waits.fetch_add(1, Ordering::SeqCst);
            }
            let server = self.server.clone();
            let fd = self.fd.clone();
            let pool = pool.clone();
            let handle = self.handle();
            let state = self.state.clone();
            tasks.spawn_local(async move {
                let mut reply = reply;
                let mut tx = DevTransaction {
                    fd: fd.get_ref().as_fd(),
                    request: &request[REQUEST_OFFSET..REQUEST_OFFSET + n],
                    reply: &mut reply,
                };
                match server.handle_async(&mut tx).await {
                    Ok(Outcome::Destroyed) => handle.stop(),
                    Ok(_) => {}
                    Err(e)
                        if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) =>
                    {
                        handle.stop()
                    }
                    Err(e) => tracing::warn!("writing a reply to /dev/fuse: {e}"),
                }
                if long_wait {
                    state.long_waits.fetch_sub(1, Ordering::SeqCst);
                }
                pool.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((request, reply));
                drop(permit);
            });
            // Reap finished request tasks so the set doesn't grow.
            while let Some(done) = tasks.try_join_next() {
                if let Err(e) = done {
                    tracing::error!("a request task failed: {e}");
                }
            }
        }
    }

    /// Answers requests inline until INIT is done, so every buffer of the
    /// main loop is sized from the negotiated limits. Returns false if the
    /// task was stopped or the connection ended first.
    async fn serve_init(&self) -> io::Result<bool> {
        if self.sibling {
            return Ok(self.wait_for_init().await);
        }
        let d = fuse_server::InitConfig::default();
        let mut request =
            AlignedBuf::new(REQUEST_OFFSET + d.max_write as usize + 2 * AlignedBuf::ALIGN)?;
        let mut reply = AlignedBuf::new(AlignedBuf::ALIGN)?;
        while self.server.negotiated().is_none() {
            let n = tokio::select! {
                n = read_async(&self.fd, &mut request[REQUEST_OFFSET..]) => n,
                _ = self.state.wake.notified() => return Ok(false),
            };
            let n = match n {
                Ok(n) => n,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) => {
                    return Ok(false)
                }
                Err(e) => return Err(e),
            };
            let mut tx = DevTransaction {
                fd: self.fd.get_ref().as_fd(),
                request: &request[REQUEST_OFFSET..REQUEST_OFFSET + n],
                reply: &mut reply,
            };
            self.server.handle_async(&mut tx).await?;
        }
        self.state.init_done.notify_waiters();
        Ok(true)
    }

    /// A sibling reads nothing before INIT is answered (by the first task),
    /// so its buffers are sized from the negotiated limits. False if the
    /// mount stopped first.
    async fn wait_for_init(&self) -> bool {
        loop {
            let init = self.state.init_done.notified();
            let stop = self.state.wake.notified();
            tokio::pin!(init, stop);
            init.as_mut().enable();
            stop.as_mut().enable();
            if self.state.stop.load(Ordering::Acquire) {
                return false;
            }
            if self.server.negotiated().is_some() {
                return true;
            }
            tokio::select! {
                _ = init => {}
                _ = stop => {}
            }
        }
    }

    fn new_buffers(&self) -> io::Result<(AlignedBuf, AlignedBuf)> {
        let n = self
            .server
            .negotiated()
            .ok_or_else(|| io::Error::other("serving before INIT"))?;
        Ok((
            AlignedBuf::new(REQUEST_OFFSET + n.max_request_size())?,
            AlignedBuf::new(n.max_reply_size())?,
        ))
    }
}

async fn read_async(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let mut guard = fd.ready(READ_OR_ERROR).await?;
        match guard.try_io(|inner| dev::read_request(inner.get_ref().as_fd(), buf)) {
            Ok(result) => return result,
            Err(_would_block) => continue,
        }
    }
}
