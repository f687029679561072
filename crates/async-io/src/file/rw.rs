//! Positioned IO on one owned buffer: [`File::read_at`], [`File::write_at`] and the
//! loops that resubmit after a short transfer ([`File::read_exact_at`],
//! [`File::write_all_at`]), on either runtime. Apart from the vectored calls, whose
//! iovec bookkeeping is of its own.

use std::io;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;

use io_uring::opcode;

use super::{cqe_count, Dir, File};
use crate::buf::{BufResult, IoBuf, IoBufMut};
use crate::driver::Driver;
use crate::runtime::current_driver;
use crate::sys::{self, MAX_RW_COUNT};

/// The data an io_uring read/write owns: the fd and the buffer.
struct RwData<B> {
    _fd: Arc<OwnedFd>,
    buf: B,
}

impl File {
    /// Reads up to `buf.bytes_total()` bytes at `pos` into the start of `buf` (one `pread`
    /// or one SQE; may be short). The buffer's length becomes the count read.
    pub async fn read_at<B: IoBufMut>(&self, mut buf: B, pos: u64) -> BufResult<usize, B> {
        let len = buf.bytes_total().min(MAX_RW_COUNT);
        match current_driver() {
            Some(d) => {
                let ptr = buf.stable_mut_ptr();
                // SAFETY: `len <= bytes_total()` bytes at `stable_mut_ptr()`.
                let (r, mut buf) =
                    unsafe { self.uring_rw(&d, Dir::Read, buf, ptr, len, pos) }.await;
                if let Ok(n) = r {
                    // SAFETY: the kernel wrote `n <= len` bytes at the start.
                    unsafe { buf.set_init(n) };
                }
                (r, buf)
            }
            None => {
                // SAFETY: `len <= bytes_total()` writable bytes at `stable_mut_ptr()`.
                let r = unsafe { sys::pread_raw(self.raw(), buf.stable_mut_ptr(), len, pos) };
                if let Ok(n) = r {
                    // SAFETY: the kernel wrote `n <= len` bytes at the start.
                    unsafe { buf.set_init(n) };
                }
                (r, buf)
            }
        }
    }

    /// Fills `buf` to `buf.bytes_total()` from `pos`, resubmitting after short reads.
    /// End of file first is `UnexpectedEof` (the buffer's length is then what was read).
    pub async fn read_exact_at<B: IoBufMut>(&self, mut buf: B, pos: u64) -> BufResult<(), B> {
        let total = buf.bytes_total();
        let base = buf.stable_mut_ptr();
        // SAFETY: `total` bytes from `stable_mut_ptr()` are all of `buf`'s capacity.
        let (done, result, mut buf) =
            unsafe { self.transfer_all(Dir::Read, buf, base, total, pos) }.await;
        // SAFETY: the first `done` bytes were written by the kernel.
        unsafe { buf.set_init(done) };
        (result, buf)
    }

    /// Writes up to `buf.bytes_init()` bytes at `pos` (one `pwrite` or one SQE; may be
    /// short).
    pub async fn write_at<B: IoBuf>(&self, buf: B, pos: u64) -> BufResult<usize, B> {
        let len = buf.bytes_init().min(MAX_RW_COUNT);
        match current_driver() {
            Some(d) => {
                let ptr = buf.stable_ptr() as *mut u8;
                // SAFETY: `len <= bytes_init()` bytes at `stable_ptr()`; a write only reads.
                unsafe { self.uring_rw(&d, Dir::Write, buf, ptr, len, pos) }.await
            }
            None => {
                // SAFETY: `len <= bytes_init()` readable bytes at `stable_ptr()`.
                let r = unsafe { sys::pwrite_raw(self.raw(), buf.stable_ptr(), len, pos) };
                (r, buf)
            }
        }
    }

    /// Writes all of `buf.bytes_init()` at `pos`, resubmitting after short writes.
    pub async fn write_all_at<B: IoBuf>(&self, buf: B, pos: u64) -> BufResult<(), B> {
        let total = buf.bytes_init();
        let base = buf.stable_ptr() as *mut u8;
        // SAFETY: `total` initialised bytes from `stable_ptr()`; a write only reads them.
        let (_, result, buf) =
            unsafe { self.transfer_all(Dir::Write, buf, base, total, pos) }.await;
        (result, buf)
    }

    /// The loop of [`File::read_exact_at`] and [`File::write_all_at`]: moves the `total`
    /// bytes at `base` from or to `pos` (`dir`), resubmitting after short transfers, on
    /// the runtime's ring or with `pread`/`pwrite`. Returns how many bytes moved and the
    /// first failure; a transfer of nothing is `UnexpectedEof` for a read (end of file)
    /// and `WriteZero` for a write.
    ///
    /// # Safety
    /// `base..base+total` lies in `buf`'s stable memory: within `bytes_total()` and
    /// derived from `stable_mut_ptr()` for a read, within `bytes_init()` for a write.
    async unsafe fn transfer_all<B: IoBuf>(
        &self,
        dir: Dir,
        mut buf: B,
        base: *mut u8,
        total: usize,
        pos: u64,
    ) -> (usize, io::Result<()>, B) {
        let driver = current_driver();
        let mut done = 0;
        while done < total {
            let len = (total - done).min(MAX_RW_COUNT);
            let at = pos + done as u64;
            // SAFETY: `done < total`: inside the caller's range.
            let ptr = unsafe { base.add(done) };
            let r = match &driver {
                Some(d) => {
                    // SAFETY: `ptr..ptr + len` lies in the caller's range of `buf`'s stable
                    // memory (`done + len <= total`).
                    let (r, b) = unsafe { self.uring_rw(d, dir, buf, ptr, len, at) }.await;
                    buf = b;
                    r
                }
                // SAFETY: as above: `len` bytes at `ptr`, writable for a read (the
                // caller's contract), only read by a write.
                None => unsafe {
                    match dir {
                        Dir::Read => sys::pread_raw(self.raw(), ptr, len, at),
                        Dir::Write => sys::pwrite_raw(self.raw(), ptr, len, at),
                    }
                },
            };
            match r {
                Ok(0) => {
                    let e = match dir {
                        Dir::Read => io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("end of file after {done} of {total} bytes"),
                        ),
                        Dir::Write => io::ErrorKind::WriteZero.into(),
                    };
                    return (done, Err(e), buf);
                }
                Ok(n) => done += n,
                Err(e) => return (done, Err(e), buf),
            }
        }
        (done, Ok(()), buf)
    }

    /// One io_uring READ/WRITE of `len` bytes at `ptr`, retried on `EINTR`/`EAGAIN`.
    ///
    /// # Safety
    /// `ptr..ptr+len` lies in `buf`'s stable memory: within `bytes_total()` and derived
    /// from `stable_mut_ptr()` for a read, within `bytes_init()` for a write.
    async unsafe fn uring_rw<B: IoBuf>(
        &self,
        driver: &Rc<Driver>,
        dir: Dir,
        mut buf: B,
        ptr: *mut u8,
        len: usize,
        pos: u64,
    ) -> BufResult<usize, B> {
        loop {
            let sqe = match dir {
                Dir::Read => opcode::Read::new(self.ufd(), ptr, len as u32)
                    .offset(pos)
                    .build(),
                Dir::Write => opcode::Write::new(self.ufd(), ptr, len as u32)
                    .offset(pos)
                    .build(),
            };
            let data = RwData {
                _fd: self.fd.clone(),
                buf,
            };
            // SAFETY: the SQE points into `data.buf`'s stable memory (caller's contract) and
            // at `data._fd`, both owned by the op until its CQE.
            let (done, data) = unsafe { driver.submit(sqe, data) }.await;
            buf = data.buf;
            if let Some(r) = cqe_count(done.res) {
                return (r, buf);
            }
        }
    }
}
