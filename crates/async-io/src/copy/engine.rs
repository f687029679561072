//! The batched io_uring copy ([`Engine`]): `queue_depth` slots, each carrying one block's
//! buffer through read -> write -> next block, all in flight at once (the parent
//! module's docs say when it runs). Apart because it is a state machine of its own,
//! driven by polling on the runtime's ring or on a private one.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use io_uring::{opcode, types};

use super::plan::{round_up, Job};
use super::{fault_fd, read_error, write_error, CopyReport};
use crate::buf::AlignedBuf;
use crate::driver::{Driver, Op};
use crate::file::cqe_count;
use crate::Error;

/// What an in-flight read or write owns: the fd and the block's buffer.
type RwOp = Op<(Arc<OwnedFd>, AlignedBuf)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Reading,
    /// Read complete, write not started (ordered mode: waiting for its turn).
    ReadDone,
    Writing,
}

/// One pipeline slot: a buffer carried through read -> write for one block at a time.
struct Slot {
    phase: Phase,
    op: Option<RwOp>,
    buf: Option<AlignedBuf>,
    /// Sequence number of the block (file order).
    seq: u64,
    off: u64,
    /// Bytes this block should contain.
    want: usize,
    /// Bytes read (Reading) or written (Writing) so far.
    done: usize,
    /// Bytes of data the block holds after the read.
    data: usize,
    /// Bytes to write (data padded for direct IO).
    wlen: usize,
}

/// The batched io_uring copy: see the module docs.
pub(super) struct Engine<'a> {
    driver: Rc<Driver>,
    job: &'a Job,
    blocks: Box<dyn Iterator<Item = (u64, usize)> + 'a>,
    next_seq: u64,
    /// Ordered mode: the sequence number whose write goes next.
    next_write: u64,
    write_in_flight: bool,
    exhausted: bool,
    slots: Vec<Slot>,
    pub(super) eof: Option<u64>,
    fault_fd: Option<Arc<OwnedFd>>,
    report: CopyReport,
}

impl<'a> Engine<'a> {
    pub(super) fn new(driver: &Rc<Driver>, job: &'a Job) -> Engine<'a> {
        let fault_fd = job
            .fault
            .fail_read_block
            .and_then(|_| fault_fd().ok())
            .map(Arc::new);
        let slots = (0..job.queue_depth)
            .map(|_| Slot {
                phase: Phase::Idle,
                op: None,
                buf: None,
                seq: 0,
                off: 0,
                want: 0,
                done: 0,
                data: 0,
                wlen: 0,
            })
            .collect();
        Engine {
            driver: driver.clone(),
            job,
            blocks: Box::new(job.blocks()),
            next_seq: 0,
            next_write: 0,
            write_in_flight: false,
            exhausted: false,
            slots,
            eof: None,
            fault_fd,
            report: CopyReport::default(),
        }
    }

    pub(super) fn report(&self) -> CopyReport {
        self.report.clone()
    }

    /// Drives every slot until nothing moves; `Ready` when all blocks are copied or on the
    /// first error (the caller then drops the engine, which cancels what is in flight).
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        loop {
            let mut progressed = false;
            for i in 0..self.slots.len() {
                progressed |= self.step(i, cx)?;
            }
            if self.exhausted && self.slots.iter().all(|s| s.phase == Phase::Idle) {
                return Poll::Ready(Ok(()));
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    fn next_block(&mut self) -> Option<(u64, usize)> {
        if self.exhausted {
            return None;
        }
        match self.blocks.next() {
            Some((off, len)) if self.eof.is_none_or(|e| off < e) => Some((off, len)),
            _ => {
                self.exhausted = true;
                None
            }
        }
    }

    /// Moves slot `i` forward if it can. Returns whether anything changed.
    fn step(&mut self, i: usize, cx: &mut Context<'_>) -> Result<bool, Error> {
        match self.slots[i].phase {
            Phase::Idle => {
                let Some((off, want)) = self.next_block() else {
                    return Ok(false);
                };
                let seq = self.next_seq;
                self.next_seq += 1;
                let s = &mut self.slots[i];
                s.seq = seq;
                s.off = off;
                s.want = want;
                s.done = 0;
                s.data = 0;
                if s.buf.is_none() {
                    s.buf = Some(AlignedBuf::zeroed(self.job.block));
                }
                self.submit_read(i);
                Ok(true)
            }
            Phase::Reading | Phase::Writing => {
                let s = &mut self.slots[i];
                let op = s.op.as_mut().expect("an op while reading or writing");
                let Poll::Ready((done, (_fd, buf))) = std::pin::Pin::new(op).poll(cx) else {
                    return Ok(false);
                };
                s.op = None;
                s.buf = Some(buf);
                if s.phase == Phase::Reading {
                    self.on_read(i, done.res)?;
                } else {
                    self.on_write(i, done.res)?;
                }
                Ok(true)
            }
            Phase::ReadDone => {
                let s = &self.slots[i];
                if self.job.ordered && (s.seq != self.next_write || self.write_in_flight) {
                    return Ok(false);
                }
                self.start_write(i);
                Ok(true)
            }
        }
    }

    fn submit_read(&mut self, i: usize) {
        let job = self.job;
        let s = &mut self.slots[i];
        let io_len = round_up(s.want, job.align);
        let mut buf = s.buf.take().expect("slot buffer");
        let fd = match (&self.fault_fd, job.fault.fail_read_block) {
            (Some(bad), Some(k)) if k == s.seq => bad.clone(),
            _ => job.src.fd_arc().clone(),
        };
        // SAFETY: the offset stays inside `buf`'s allocation (the full
        // slice is all of it): `done < io_len <= capacity`.
        let ptr = unsafe { buf.as_full_mut_slice().as_mut_ptr().add(s.done) };
        let sqe = opcode::Read::new(types::Fd(fd.as_raw_fd()), ptr, (io_len - s.done) as u32)
            .offset(s.off + s.done as u64)
            .build();
        // SAFETY: the SQE points into `buf`'s heap memory (`io_len - done` bytes from `done`,
        // inside its capacity) and at `fd`; the op owns both until its CQE.
        s.op = Some(unsafe { self.driver.submit(sqe, (fd, buf)) });
        s.phase = Phase::Reading;
        self.report.reads += 1;
    }

    fn on_read(&mut self, i: usize, res: i32) -> Result<(), Error> {
        let job = self.job;
        let s = &mut self.slots[i];
        let n = match cqe_count(res) {
            None => {
                self.submit_read(i);
                return Ok(());
            }
            Some(Err(e)) => return Err(read_error(s.off + s.done as u64, e)),
            Some(Ok(n)) => n,
        };
        s.done += n;
        let complete = if s.done >= s.want {
            true
        } else if n == 0 || (job.direct && s.done % job.align != 0) {
            // End of file (an O_DIRECT read ends unaligned only there).
            let at = s.off + s.done as u64;
            self.eof = Some(self.eof.map_or(at, |e| e.min(at)));
            true
        } else {
            false
        };
        if !complete {
            self.report.resubmits += 1;
            self.submit_read(i);
            return Ok(());
        }
        let s = &mut self.slots[i];
        s.data = s.done.min(s.want);
        if let Some(e) = self.eof {
            s.data = s.data.min(e.saturating_sub(s.off) as usize);
        }
        s.phase = Phase::ReadDone;
        Ok(())
    }

    fn start_write(&mut self, i: usize) {
        let job = self.job;
        let s = &mut self.slots[i];
        if s.data == 0 {
            s.phase = Phase::Idle;
            if job.ordered {
                self.next_write += 1;
            }
            return;
        }
        s.wlen = job.write_len(s.off, s.data);
        s.done = 0;
        if s.wlen > s.data {
            let (d, w) = (s.data, s.wlen);
            s.buf.as_mut().expect("slot buffer").as_full_mut_slice()[d..w].fill(0);
        }
        self.write_in_flight = true;
        self.submit_write(i);
    }

    fn submit_write(&mut self, i: usize) {
        let s = &mut self.slots[i];
        let mut buf = s.buf.take().expect("slot buffer");
        let fd = self.job.dst.fd_arc().clone();
        // SAFETY: the offset stays inside `buf`'s allocation (the full
        // slice is all of it): `done < wlen <= capacity`.
        let ptr = unsafe { buf.as_full_mut_slice().as_mut_ptr().add(s.done) };
        let sqe = opcode::Write::new(types::Fd(fd.as_raw_fd()), ptr, (s.wlen - s.done) as u32)
            .offset(s.off + s.done as u64)
            .build();
        // SAFETY: the SQE points into `buf`'s heap memory and at `fd`, both owned by the op.
        s.op = Some(unsafe { self.driver.submit(sqe, (fd, buf)) });
        s.phase = Phase::Writing;
        self.report.writes += 1;
    }

    fn on_write(&mut self, i: usize, res: i32) -> Result<(), Error> {
        let s = &mut self.slots[i];
        let at = s.off + s.done as u64;
        let n = match cqe_count(res) {
            None => {
                self.submit_write(i);
                return Ok(());
            }
            Some(Err(e)) => return Err(write_error(at, e)),
            Some(Ok(0)) => return Err(write_error(at, io::ErrorKind::WriteZero.into())),
            Some(Ok(n)) => n,
        };
        s.done += n;
        if s.done < s.wlen {
            self.report.resubmits += 1;
            self.submit_write(i);
            return Ok(());
        }
        self.report.bytes += s.data as u64;
        s.phase = Phase::Idle;
        self.write_in_flight = false;
        if self.job.ordered {
            self.next_write += 1;
        }
        Ok(())
    }
}
