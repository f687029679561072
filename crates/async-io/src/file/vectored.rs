//! Vectored positioned IO: [`File::readv_at`] and [`File::writev_at`] over owned
//! buffers, split into windows of [`IOV_MAX`] iovecs, with the short-transfer
//! resubmission that advances the iovec cursor. On io_uring all windows of a call are
//! submitted together ([`join_all`]); on tokio they run one after the other. Apart from
//! the single-buffer calls because the iovec bookkeeping is its own seam.

use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use io_uring::opcode;

use super::{cqe_count, Dir, File};
use crate::buf::{BufResult, IoBuf, IoBufMut};
use crate::driver::Driver;
use crate::runtime::current_driver;
use crate::sys::{self, IOV_MAX};

/// The data a vectored io_uring operation owns.
struct VecData<B> {
    _fd: Arc<OwnedFd>,
    iov: IoVecs<B>,
}

/// Owned buffers plus the iovec array pointing into them, with a progress cursor.
pub(crate) struct IoVecs<B> {
    bufs: Vec<B>,
    iovs: Vec<libc::iovec>,
    /// The first iovec not yet fully transferred (earlier ones are done).
    start: usize,
    /// Bytes transferred so far.
    done: usize,
}

// SAFETY: the iovecs only point into `bufs`, which are Send; the raw pointers are not used
// from two threads at once (the struct is moved, not shared).
unsafe impl<B: Send> Send for IoVecs<B> {}

impl<B> IoVecs<B> {
    fn new(bufs: Vec<B>, iovs: Vec<libc::iovec>) -> Self {
        let mut v = IoVecs {
            bufs,
            iovs,
            start: 0,
            done: 0,
        };
        v.skip_empty();
        v
    }

    fn skip_empty(&mut self) {
        while self.start < self.iovs.len() && self.iovs[self.start].iov_len == 0 {
            self.start += 1;
        }
    }

    /// The next window of at most `IOV_MAX` iovecs still to transfer.
    fn window(&self) -> &[libc::iovec] {
        let end = self.iovs.len().min(self.start + IOV_MAX);
        &self.iovs[self.start..end]
    }

    fn is_complete(&self) -> bool {
        self.start >= self.iovs.len()
    }

    /// Records that `n` more bytes were transferred.
    fn advance(&mut self, mut n: usize) {
        self.done += n;
        while n > 0 && self.start < self.iovs.len() {
            let iov = &mut self.iovs[self.start];
            if n >= iov.iov_len {
                n -= iov.iov_len;
                self.start += 1;
            } else {
                // SAFETY: `n < iov_len`, so the new base stays inside the same buffer.
                iov.iov_base = unsafe { iov.iov_base.cast::<u8>().add(n) }.cast();
                iov.iov_len -= n;
                n = 0;
            }
        }
        self.skip_empty();
    }
}

impl<B: IoBuf> IoVecs<B> {
    fn for_write(bufs: Vec<B>) -> Self {
        let iovs = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.stable_ptr() as *mut libc::c_void,
                iov_len: b.bytes_init(),
            })
            .collect();
        IoVecs::new(bufs, iovs)
    }
}

impl<B: IoBufMut> IoVecs<B> {
    fn for_read(mut bufs: Vec<B>) -> Self {
        let iovs = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.stable_mut_ptr().cast(),
                iov_len: b.bytes_total(),
            })
            .collect();
        IoVecs::new(bufs, iovs)
    }

    /// Sets each buffer's length to what the first `self.done` bytes put into it.
    fn finish_read(self) -> Vec<B> {
        let mut left = self.done;
        let mut bufs = self.bufs;
        for b in &mut bufs {
            let n = left.min(b.bytes_total());
            // SAFETY: the kernel wrote the first `done` bytes in iovec order; `n` of them
            // landed in this buffer, and `n <= bytes_total()`.
            unsafe { b.set_init(n) };
            left -= n;
        }
        bufs
    }
}

impl File {
    /// Reads from `pos` into `bufs` in order, filling each to its `bytes_total()`, until all
    /// are full or end of file. Returns the total count; each buffer's length becomes what
    /// it received (buffers after the end of file get length 0).
    ///
    /// One `preadv` / `IORING_OP_READV` per [`IOV_MAX`] buffers; short reads are resubmitted.
    pub async fn readv_at<B: IoBufMut>(&self, bufs: Vec<B>, pos: u64) -> BufResult<usize, Vec<B>> {
        match current_driver() {
            Some(d) if bufs.len() <= IOV_MAX => {
                // One window: no splitting, the Vec goes in and comes back as is.
                let (r, iov) = self
                    .uring_window(&d, Dir::Read, IoVecs::for_read(bufs), pos)
                    .await;
                let n = iov.done;
                (r.map(|_| n), iov.finish_read())
            }
            Some(d) => {
                let windows = split_windows(bufs)
                    .into_iter()
                    .map(IoVecs::for_read)
                    .collect();
                let (r, windows) = self.uring_vectored(&d, Dir::Read, windows, pos).await;
                let bufs = windows.into_iter().flat_map(IoVecs::finish_read).collect();
                (r, bufs)
            }
            None => {
                let mut iov = IoVecs::for_read(bufs);
                let r = self.sync_vectored(Dir::Read, &mut iov, pos);
                let n = iov.done;
                (r.map(|()| n), iov.finish_read())
            }
        }
    }

    /// Writes every buffer's `bytes_init()` bytes from `pos` in order, resubmitting after
    /// short writes. Returns the total count.
    ///
    /// One `pwritev` / `IORING_OP_WRITEV` per [`IOV_MAX`] buffers.
    pub async fn writev_at<B: IoBuf>(&self, bufs: Vec<B>, pos: u64) -> BufResult<usize, Vec<B>> {
        match current_driver() {
            Some(d) if bufs.len() <= IOV_MAX => {
                let (r, iov) = self
                    .uring_window(&d, Dir::Write, IoVecs::for_write(bufs), pos)
                    .await;
                let n = iov.done;
                (r.map(|_| n), iov.bufs)
            }
            Some(d) => {
                let windows = split_windows(bufs)
                    .into_iter()
                    .map(IoVecs::for_write)
                    .collect();
                let (r, windows) = self.uring_vectored(&d, Dir::Write, windows, pos).await;
                let bufs = windows.into_iter().flat_map(|w| w.bufs).collect();
                (r, bufs)
            }
            None => {
                let mut iov = IoVecs::for_write(bufs);
                let r = self.sync_vectored(Dir::Write, &mut iov, pos);
                let n = iov.done;
                (r.map(|()| n), iov.bufs)
            }
        }
    }

    /// The blocking vectored loop: windows of `IOV_MAX`, one after the other.
    fn sync_vectored<B>(&self, dir: Dir, iov: &mut IoVecs<B>, pos: u64) -> io::Result<()> {
        while !iov.is_complete() {
            let at = pos + iov.done as u64;
            // SAFETY: the iovecs point into the owned buffers in `iov.bufs`, with lengths
            // within each buffer's initialised (write) or total (read) size.
            let n = unsafe {
                match dir {
                    Dir::Read => sys::preadv_raw(self.raw(), iov.window(), at),
                    Dir::Write => sys::pwritev_raw(self.raw(), iov.window(), at),
                }
            }?;
            if n == 0 {
                return match dir {
                    Dir::Read => Ok(()), // end of file
                    Dir::Write => Err(io::ErrorKind::WriteZero.into()),
                };
            }
            iov.advance(n);
        }
        Ok(())
    }

    /// Transfers `windows` (consecutive in the file from `pos`), all submitted together.
    /// Returns the count of the contiguous prefix transferred: for reads, data placed after
    /// an earlier window hit end of file is dropped (`done` set to 0).
    async fn uring_vectored<B: IoBuf>(
        &self,
        driver: &Rc<Driver>,
        dir: Dir,
        windows: Vec<IoVecs<B>>,
        pos: u64,
    ) -> (io::Result<usize>, Vec<IoVecs<B>>) {
        let mut futs = Vec::with_capacity(windows.len());
        let mut sizes = Vec::with_capacity(windows.len());
        let mut at = pos;
        for iov in windows {
            let size: usize = iov.iovs.iter().map(|v| v.iov_len).sum();
            sizes.push(size);
            futs.push(self.uring_window(driver, dir, iov, at));
            at += size as u64;
        }
        let outs = join_all(futs).await;
        let mut result = Ok(());
        let mut total = 0;
        let mut short = false;
        let mut windows = Vec::with_capacity(outs.len());
        for ((r, mut iov), size) in outs.into_iter().zip(sizes) {
            if let Err(e) = r {
                if result.is_ok() {
                    result = Err(e);
                }
            }
            if short {
                iov.done = 0;
            }
            total += iov.done;
            if iov.done < size {
                short = true;
            }
            windows.push(iov);
        }
        (result.map(|()| total), windows)
    }

    /// Transfers one window (at most `IOV_MAX` iovecs) with READV/WRITEV SQEs, resubmitting
    /// the rest after a short transfer. Returns `Ok(true)` at end of file.
    async fn uring_window<B: IoBuf>(
        &self,
        driver: &Rc<Driver>,
        dir: Dir,
        mut iov: IoVecs<B>,
        pos: u64,
    ) -> (io::Result<bool>, IoVecs<B>) {
        while !iov.is_complete() {
            let w = iov.window();
            let at = pos + iov.done as u64;
            let sqe = match dir {
                Dir::Read => opcode::Readv::new(self.ufd(), w.as_ptr(), w.len() as u32)
                    .offset(at)
                    .build(),
                Dir::Write => opcode::Writev::new(self.ufd(), w.as_ptr(), w.len() as u32)
                    .offset(at)
                    .build(),
            };
            let data = VecData {
                _fd: self.fd.clone(),
                iov,
            };
            // SAFETY: the SQE points at `data.iov.iovs` (a heap array that does not move when
            // `data` moves), whose entries point into the owned buffers; the fd is `data._fd`.
            let (done, data) = unsafe { driver.submit(sqe, data) }.await;
            iov = data.iov;
            match cqe_count(done.res) {
                None => continue,
                Some(Err(e)) => return (Err(e), iov),
                Some(Ok(0)) => {
                    return match dir {
                        Dir::Read => (Ok(true), iov),
                        Dir::Write => (Err(io::ErrorKind::WriteZero.into()), iov),
                    }
                }
                Some(Ok(n)) => iov.advance(n),
            }
        }
        (Ok(false), iov)
    }
}

/// Splits `bufs` into windows of at most `IOV_MAX` buffers.
fn split_windows<B>(mut bufs: Vec<B>) -> Vec<Vec<B>> {
    if bufs.len() <= IOV_MAX {
        return vec![bufs];
    }
    let mut out = Vec::with_capacity(bufs.len().div_ceil(IOV_MAX));
    while !bufs.is_empty() {
        let rest = bufs.split_off(bufs.len().min(IOV_MAX));
        out.push(std::mem::replace(&mut bufs, rest));
    }
    out
}

/// Polls every future until all are done; outputs in input order.
///
/// The futures run inside the one task that awaits this (no spawning, so they need not
/// be `'static` or `Send`): on an io_uring runtime the SQEs they submit in one poll go to
/// the kernel in the same `io_uring_enter`. The vectored calls submit their windows this
/// way.
///
/// ```
/// use async_io::{join_all, RuntimeType};
///
/// let rt = RuntimeType::Tokio.build()?;
/// let outs = rt.block_on(join_all(vec![std::future::ready(1), std::future::ready(2)]));
/// assert_eq!(outs, [1, 2]);
/// # Ok::<_, async_io::Error>(())
/// ```
pub async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outs.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}
