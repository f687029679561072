//! The worker threads of a [`DevSession`]: starting one, its loop (read a
//! request, serve it, start another worker when none is left idle, retire
//! after a burst), and the do-nothing handler of the signal that wakes
//! them from `read(2)`. Apart from the session, which only starts, wakes
//! and joins them.

use super::{request_opcode, Shared, REQUEST_OFFSET, RETIRE_AFTER};
use crate::dev::{self, DevTransaction};
use fuse_server::opcode_table::opcode_info_raw;
use fuse_server::{AlignedBuf, Outcome};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
// Only the documentation's links name them.
#[cfg(doc)]
use super::{DevSession, SessionConfig};

pub(super) fn spawn_worker(shared: &Arc<Shared>) -> io::Result<()> {
    let master = shared.master()?;
    let fd = if shared.config.clone_fd {
        match dev::clone_fd(master.as_fd()) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!("FUSE_DEV_IOC_CLONE failed ({e}); sharing the session fd");
                master.try_clone()?
            }
        }
    } else {
        master.try_clone()?
    };
    drop(master);
    let mut request = AlignedBuf::new(shared.buffer_sizes.0)?;
    if shared.config.prefault_buffers {
        request.prefault();
    }
    let reply = AlignedBuf::new(shared.buffer_sizes.1)?;
    shared.workers.fetch_add(1, Ordering::AcqRel);
    shared.idle.fetch_add(1, Ordering::AcqRel);
    shared
        .last_spawn_ms
        .store(shared.millis(), Ordering::Release);
    let worker_shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("fuse-dev".into())
        .spawn(move || {
            let shared = worker_shared;
            register_tid(&shared);
            let result = worker_loop(&shared, fd.as_fd(), request, reply);
            unregister_tid(&shared);
            // A retired worker took itself off the idle count already.
            if !matches!(result, Ok(WorkerEnd::Retired)) {
                shared.idle.fetch_sub(1, Ordering::AcqRel);
            }
            shared.workers.fetch_sub(1, Ordering::AcqRel);
            match result {
                Ok(_) => Ok(()),
                Err(e) => {
                    tracing::error!("/dev/fuse worker failed: {e}");
                    Err(e)
                }
            }
        });
    match spawned {
        Ok(handle) => {
            let mut handles = shared.handles.lock().unwrap_or_else(|e| e.into_inner());
            // Workers that retired are joined here, so their stacks go
            // back and the list doesn't grow with every burst.
            let (ended, running): (Vec<_>, Vec<_>) =
                handles.drain(..).partition(|h| h.is_finished());
            *handles = running;
            handles.push(handle);
            drop(handles);
            for h in ended {
                if let Ok(Err(e)) = h.join() {
                    tracing::debug!("a /dev/fuse worker had ended with: {e}");
                }
            }
            Ok(())
        }
        Err(e) => {
            shared.idle.fetch_sub(1, Ordering::AcqRel);
            shared.workers.fetch_sub(1, Ordering::AcqRel);
            Err(e)
        }
    }
}

fn register_tid(shared: &Shared) {
    // SAFETY: pthread_self has no preconditions.
    let tid = unsafe { libc::pthread_self() };
    shared
        .tids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tid);
}

fn unregister_tid(shared: &Shared) {
    // SAFETY: pthread_self has no preconditions.
    let tid = unsafe { libc::pthread_self() };
    let mut tids = shared.tids.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: pthread_equal only compares ids.
    tids.retain(|&t| unsafe { libc::pthread_equal(t, tid) } == 0);
}

/// How a worker ended without an error.
enum WorkerEnd {
    /// The session ended (stop, unmount, DESTROY).
    Done,
    /// More workers were idle than the session keeps: this one left, and
    /// took itself off the idle count.
    Retired,
}

fn worker_loop(
    shared: &Arc<Shared>,
    fd: BorrowedFd<'_>,
    mut request: AlignedBuf,
    mut reply: AlignedBuf,
) -> io::Result<WorkerEnd> {
    // Workers started for a burst (every worker was busy) leave once it
    // is over, down to the number the session starts with: idle workers
    // only hold memory, and a request wakes the one that waited longest,
    // so many idle workers also spread a single client's requests over
    // as many threads.
    let keep = shared.config.threads.max(1);
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return Ok(WorkerEnd::Done);
        }
        let n = match dev::read_request(fd, &mut request[REQUEST_OFFSET..]) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                // EINTR: woken (maybe to stop); ENOENT: the request was
                // interrupted before we read it.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // The connection is gone: unmounted (ENODEV) or aborted.
                Some(libc::ENODEV) => {
                    shared.unmounted.store(true, Ordering::Release);
                    // Nobody can answer a lock wait's caller any more:
                    // end the waits, or a worker blocked in one would
                    // hold the session (seen after the kernel aborted
                    // a connection on a request timeout).
                    shared.server.stop_waits();
                    return Ok(WorkerEnd::Done);
                }
                Some(libc::ECONNABORTED) => {
                    shared.server.stop_waits();
                    return Ok(WorkerEnd::Done);
                }
                _ => return Err(io::Error::new(e.kind(), format!("reading /dev/fuse: {e}"))),
            },
        };
        let opcode = request_opcode(&request[REQUEST_OFFSET..REQUEST_OFFSET + n]);
        let long_wait = opcode_info_raw(opcode).is_some_and(|i| i.waits_indefinitely());
        if long_wait {
            shared.in_long_waits.fetch_add(1, Ordering::AcqRel);
        }
        // Keep one worker waiting for requests: if this was the last idle
        // one, start another (a blocking lock must not stall the mount).
        // FORGETs never block: a FORGET storm starts no threads. Workers in
        // lock waits don't count against the limit.
        if shared.idle.fetch_sub(1, Ordering::AcqRel) == 1
            && !never_blocks(opcode)
            && shared.workers.load(Ordering::Acquire)
                < shared.config.max_threads + shared.in_long_waits.load(Ordering::Acquire)
            && !shared.stop.load(Ordering::Acquire)
        {
            if let Err(e) = spawn_worker(shared) {
                tracing::warn!("could not start another worker: {e}");
            }
        }
        let mut tx = DevTransaction {
            fd,
            request: &request[REQUEST_OFFSET..REQUEST_OFFSET + n],
            reply: &mut reply,
        };
        let outcome = shared.server.handle(&mut tx);
        if long_wait {
            shared.in_long_waits.fetch_sub(1, Ordering::AcqRel);
        }
        shared.idle.fetch_add(1, Ordering::AcqRel);
        if opcode == fuse_abi::Opcode::BatchForget as u32 && n > RELEASE_AFTER {
            // A FORGET storm's batches fill the whole buffer; give its pages
            // back rather than keep them resident for good.
            release_pages(&mut request[REQUEST_OFFSET + RELEASE_AFTER..]);
        }
        match outcome {
            Ok(Outcome::Destroyed) => return Ok(WorkerEnd::Done),
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED)) => {
                return Ok(WorkerEnd::Done)
            }
            Err(e) => tracing::warn!("writing a reply to /dev/fuse: {e}"),
        }
        // The clock is read only when there are extra idle workers at all.
        let extra_idle = shared.idle.load(Ordering::Acquire) > keep;
        if extra_idle
            && shared
                .millis()
                .saturating_sub(shared.last_spawn_ms.load(Ordering::Acquire))
                >= RETIRE_AFTER.as_millis() as u64
            && shared
                .idle
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |idle| {
                    (idle > keep).then(|| idle - 1)
                })
                .is_ok()
        {
            return Ok(WorkerEnd::Retired);
        }
    }
}

/// A request buffer's pages past this many bytes are given back to the
/// system after a BATCH_FORGET that used them (rare; WRITEs, which use
/// them often, keep them).
const RELEASE_AFTER: usize = 64 << 10;

/// Requests a worker answers without ever blocking.
fn never_blocks(opcode: u32) -> bool {
    use fuse_abi::Opcode;
    opcode == Opcode::Forget as u32
        || opcode == Opcode::BatchForget as u32
        || opcode == Opcode::Interrupt as u32
}

/// Gives the whole pages of `buf` back to the system (`MADV_DONTNEED`):
/// they read as zeros and take no memory until written again.
fn release_pages(buf: &mut [u8]) {
    let start = buf.as_ptr() as usize;
    let first = start.next_multiple_of(AlignedBuf::ALIGN);
    let end = (start + buf.len()) & !(AlignedBuf::ALIGN - 1);
    if end > first {
        // SAFETY: the range lies inside `buf`, which we borrow mutably; its
        // contents are not needed (the request was handled).
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
    }
}

/// Installs a do-nothing handler for the wake signal, without
/// `SA_RESTART`, so the signal makes a blocked `read(2)` return EINTR
/// (process-wide, see [`SessionConfig::wake_signal`]). Once per signal: a
/// session with another `wake_signal` than an earlier one gets its own.
pub(crate) fn install_wake_handler(signal: i32) {
    static INSTALLED: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if installed.contains(&signal) {
        return;
    }
    if let Err(e) = fuse_server::sys::install_interrupting_handler(signal) {
        tracing::warn!(signal, "installing the worker wake signal handler: {e}");
        return;
    }
    installed.push(signal);
    tracing::debug!(
        signal,
        rtmin_offset = signal - libc::SIGRTMIN(),
        "installed a process-wide do-nothing handler (no SA_RESTART) for the \
         /dev/fuse worker wake signal (SessionConfig::wake_signal)"
    );
}
