//! Ring plumbing: creating an io_uring with 128-byte SQEs, registering
//! the pool and the zero-copy buffer table, submitting, waiting and
//! reaping completions.
//!
//! Apart from `queue.rs` because none of it knows about entries: the
//! session's setup ring and the zero-copy operations use it too.

use super::Ring;
use crate::cmd;
use crate::sys::Mapping;
use io_uring::IoUring;
use std::io;
use std::time::Duration;

/// Registers a sparse buffer table of `slots` slots with `ring`: the pool
/// mapping `pool` (if registered) at [`cmd::POOL_BUF_INDEX`], every other
/// slot empty (`{NULL, 0}`), for the kernel to register zero-copy
/// requests' pages in.
pub(super) fn register_table(ring: &Ring, pool: Option<&Mapping>, slots: usize) -> io::Result<()> {
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iovs = vec![empty; slots.max(1)];
    if let Some(pool) = pool {
        iovs[cmd::POOL_BUF_INDEX as usize] = libc::iovec {
            iov_base: pool.as_ptr().cast(),
            iov_len: pool.len(),
        };
    }
    // SAFETY: as in `register_pool`; the empty slots name no memory.
    unsafe { ring.submitter().register_buffers(&iovs) }
}

/// Registers the pool mapping `region` as slot [`cmd::POOL_BUF_INDEX`] of
/// `ring`'s buffer table (the ring's only registered buffer).
pub(crate) fn register_pool(ring: &Ring, region: &Mapping) -> io::Result<()> {
    let iov = libc::iovec {
        iov_base: region.as_ptr().cast(),
        iov_len: region.len(),
    };
    // SAFETY: the region is mapped for as long as the session lives, and
    // the ring threads' rings are closed before it goes (`run`), as is the
    // setup ring (which unregisters it at once).
    unsafe { ring.submitter().register_buffers(&[iov]) }
}

/// Creates a ring with 128-byte SQEs, trying the cheaper task-run modes
/// first.
pub fn build_ring(entries: u32, defer_taskrun: bool) -> io::Result<Ring> {
    build_ring_with_cq(entries, entries.saturating_mul(2), defer_taskrun)
}

/// The kernel's largest completion queue (`IORING_MAX_CQ_ENTRIES`).
pub(super) const MAX_CQ_ENTRIES: u32 = 2 * 32768;

/// [`build_ring`] with a completion queue of `cq` entries.
pub(super) fn build_ring_with_cq(entries: u32, cq: u32, defer_taskrun: bool) -> io::Result<Ring> {
    if defer_taskrun {
        match IoUring::builder()
            .dontfork()
            .setup_cqsize(cq)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(entries)
        {
            Ok(ring) => return Ok(ring),
            Err(e) => tracing::debug!("io_uring without DEFER_TASKRUN: {e}"),
        }
    }
    match IoUring::builder()
        .dontfork()
        .setup_cqsize(cq)
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(entries)
    {
        Ok(ring) => Ok(ring),
        Err(e) => {
            tracing::debug!("io_uring without COOP_TASKRUN: {e}");
            IoUring::builder()
                .dontfork()
                .setup_cqsize(cq)
                .build(entries)
        }
    }
}

/// Submits what is queued (EINTR retried).
pub fn submit(ring: &mut Ring) -> io::Result<()> {
    loop {
        match ring.submit() {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            // The completion queue is full: the caller reaps first.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
            Err(e) => return Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
        }
    }
}

/// Submits and waits for at least one completion.
pub(crate) fn wait(ring: &mut Ring) -> io::Result<()> {
    match ring.submit_and_wait(1) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            // Out of kernel memory for the moment: try again shortly.
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
    }
}

pub(super) fn wait_timeout(ring: &mut Ring, timeout: Duration) -> io::Result<()> {
    let ts = io_uring::types::Timespec::from(timeout);
    let args = io_uring::types::SubmitArgs::new().timespec(&ts);
    match ring.submitter().submit_with_args(1, &args) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINTR | libc::EBUSY | libc::ETIME)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
    }
}

/// Takes every completion off the queue.
pub(crate) fn reap(ring: &mut Ring) -> Vec<(u64, i32)> {
    let mut out = Vec::new();
    reap_into(ring, &mut out);
    out
}

/// Appends the completions waiting in `ring` to `out` (the serving loops
/// keep one vector, so that reaping allocates nothing once it has grown).
pub(crate) fn reap_into(ring: &mut Ring, out: &mut Vec<(u64, i32)>) {
    out.extend(ring.completion().map(|c| (c.user_data(), c.result())));
}
