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
        let driver = current_driver();
        let mut done = 0;
        let mut result = Ok(());
        while done < total {
            let len = (total - done).min(MAX_RW_COUNT);
            let r = match &driver {
                Some(d) => {
                    // SAFETY: `done + len <= bytes_total()` bytes from `stable_mut_ptr()`.
                    let (r, b) = unsafe {
                        let ptr = buf.stable_mut_ptr().add(done);
                        self.uring_rw(d, Dir::Read, buf, ptr, len, pos + done as u64)
                    }
                    .await;
                    buf = b;
                    r
                }
                None => {
                    // SAFETY: `done + len <= bytes_total()` writable bytes.
                    unsafe {
                        sys::pread_raw(
                            self.raw(),
                            buf.stable_mut_ptr().add(done),
                            len,
                            pos + done as u64,
                        )
                    }
                }
            };
            match r {
                Ok(0) => {
                    result = Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("end of file after {done} of {total} bytes"),
                    ));
                    break;
                }
                Ok(n) => done += n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
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
    pub async fn write_all_at<B: IoBuf>(&self, mut buf: B, pos: u64) -> BufResult<(), B> {
        let total = buf.bytes_init();
        let driver = current_driver();
        let mut done = 0;
        while done < total {
            let len = (total - done).min(MAX_RW_COUNT);
            let r = match &driver {
                Some(d) => {
                    // SAFETY: `done + len <= bytes_init()` bytes; a write only reads them.
                    let (r, b) = unsafe {
                        let ptr = (buf.stable_ptr() as *mut u8).add(done);
                        self.uring_rw(d, Dir::Write, buf, ptr, len, pos + done as u64)
                    }
                    .await;
                    buf = b;
                    r
                }
                None => {
                    // SAFETY: `done + len <= bytes_init()` readable bytes.
                    unsafe {
                        sys::pwrite_raw(
                            self.raw(),
                            buf.stable_ptr().add(done),
                            len,
                            pos + done as u64,
                        )
                    }
                }
            };
            match r {
                Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), buf),
                Ok(n) => done += n,
                Err(e) => return (Err(e), buf),
            }
        }
        (Ok(()), buf)
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
