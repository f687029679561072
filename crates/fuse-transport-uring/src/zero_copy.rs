//! Zero copy (Linux 7.3, `FUSE_URING_ZERO_COPY`): READ and WRITE data
//! moved between the kernel's pages and the backing file by fixed-buffer
//! io_uring operations, never mapped or copied by the daemon.
//!
//! On a queue added with `FUSE_URING_ZERO_COPY`, every entry names a slot
//! of its ring's registered buffer table in its REGISTER (entry *i* of a
//! ring: slot [`FIRST_ENTRY_SLOT`]` + i`; the table is sparse, the pool at
//! slot 0 when registered). For a READ or WRITE of a file opened with
//! `FOPEN_IO_URING_ZERO_COPY`, the kernel registers the request's pages
//! (page cache folios, or the user's pages for direct IO) at that slot and
//! sets `FUSE_URING_ENT_ZERO_COPY` on the entry. The request's
//! [`ZeroCopyEntry`] then answers `write_from_file` with `READ_FIXED` from
//! the backing descriptor into the slot, and `read_to_file` with
//! `WRITE_FIXED` from the slot, both on the ring the entry came through
//! (buffer tables are per ring), `addr` being the offset in the request's
//! data. The kernel unregisters the slot at the entry's commit.
//!
//! Each fixed operation is waited for before the file system's call
//! returns ([`FixedRing::run`]): the pages belong to the request until its
//! commit, and the short-count contract of [`fuse_server::io`] holds as
//! for `pread`/`pwrite`. Completions of other entries that arrive
//! meanwhile are kept for the serving loop. So nothing is in flight on a
//! slot when an entry is committed, and none when the ring is closed; the
//! ring's buffer table (with any slot the kernel left registered when the
//! connection was aborted while a request was held) goes with the ring.
//!
//! The memory methods of the writer and reader work too, through a bounce
//! memfd of the ring thread (counted in
//! [`crate::UringStats::zero_copy_copied_bytes`]): a file system that
//! computes its data, or a backing file that refuses the request's
//! memory (`O_DIRECT` wants aligned buffers; the user's pages of a direct
//! read may not be), still gets correct answers, at the price of a copy.

use crate::queue::{wait, Ring};
use crate::stats::Counters;
use fuse_server::io::{clamped_transfer, AlignedBuf, ZeroCopyReader, ZeroCopyWriter};
use io_uring::{opcode, types};
use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

/// `user_data` of the fixed-buffer operation a ring thread waits for (at
/// most one at a time per ring).
pub(crate) const FIXED_OP_USER_DATA: u64 = u64::MAX - 1;

/// The first slot of a ring's buffer table given to an entry: slot 0 is
/// the pool's ([`crate::cmd::POOL_BUF_INDEX`], empty when the pool isn't
/// registered).
pub(crate) const FIRST_ENTRY_SLOT: usize = 1;

/// io_uring's largest buffer table (`IORING_MAX_REG_BUFFERS`).
pub(crate) const MAX_TABLE_SLOTS: usize = 16384;

/// The ring a thread's entries came through, lent to their zero-copy
/// transactions for fixed-buffer operations while the serving loop
/// doesn't use it.
///
/// It holds the ring by pointer: the serving loop and the transactions
/// (in async mode, tasks the loop polls) take turns, each through
/// [`FixedRing::with`], which refuses a nested use instead of making a
/// second mutable reference.
pub(crate) struct FixedRing {
    ring: *mut Ring,
    in_use: Cell<bool>,
    /// Completions for the serving loop reaped while waiting for a fixed
    /// operation.
    others: RefCell<Vec<(u64, i32)>>,
}

thread_local! {
    /// The ring thread's bounce memfd (made on first use).
    static BOUNCE: OnceCell<OwnedFd> = const { OnceCell::new() };
}

impl FixedRing {
    /// Lends `ring`.
    ///
    /// # Safety
    ///
    /// `ring` must stay valid for the life of the `FixedRing`, and nothing
    /// may use it other than through [`FixedRing::with`] meanwhile.
    /// `others`: where completions for the serving loop go (a vector to
    /// reuse; see [`FixedRing::into_others`]).
    pub(crate) unsafe fn new(ring: *mut Ring, others: Vec<(u64, i32)>) -> Self {
        Self {
            ring,
            in_use: Cell::new(false),
            others: RefCell::new(others),
        }
    }

    /// The completions kept for the serving loop, with the vector given
    /// to [`FixedRing::new`].
    pub(crate) fn into_others(self) -> Vec<(u64, i32)> {
        self.others.into_inner()
    }

    /// Runs `f` on the ring; `EDEADLK` if it is already in use further up
    /// the stack (a file system calling back into a transaction from
    /// within another's fixed operation: can't happen, but is refused
    /// rather than trusted).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Ring) -> R) -> io::Result<R> {
        if self.in_use.replace(true) {
            return Err(io::Error::from_raw_os_error(libc::EDEADLK));
        }
        struct Release<'a>(&'a Cell<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _release = Release(&self.in_use);
        // SAFETY: `new`'s contract, and `in_use` makes this the only
        // reference made through this `FixedRing` until `f` returns.
        Ok(f(unsafe { &mut *self.ring }))
    }

    /// Moves the completions reaped for the serving loop to `out`.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) fn take_others(&self, out: &mut Vec<(u64, i32)>) {
        out.append(&mut self.others.borrow_mut());
    }

    /// Submits `sqe` and waits for its completion; the bytes it moved.
    fn run(&self, sqe: io_uring::squeue::Entry) -> io::Result<usize> {
        let sqe: io_uring::squeue::Entry128 = sqe.user_data(FIXED_OP_USER_DATA).into();
        let res = self.with(|ring| -> io::Result<i32> {
            let mut pushed = false;
            for _ in 0..3 {
                // SAFETY: the SQE points at no memory of ours: a fixed
                // buffer slot and a descriptor the caller keeps open
                // until this returns (we wait for the completion).
                if unsafe { ring.submission().push(&sqe) }.is_ok() {
                    pushed = true;
                    break;
                }
                crate::queue::submit(ring)?;
            }
            if !pushed {
                return Err(io::Error::other("the io_uring submission queue stays full"));
            }
            let mut others = self.others.borrow_mut();
            loop {
                wait(ring)?;
                let mut res = None;
                for c in ring.completion() {
                    if c.user_data() == FIXED_OP_USER_DATA {
                        res = Some(c.result());
                    } else {
                        others.push((c.user_data(), c.result()));
                    }
                }
                if let Some(res) = res {
                    return Ok(res);
                }
            }
        })??;
        if res < 0 {
            return Err(io::Error::from_raw_os_error(-res));
        }
        Ok(res as usize)
    }

    /// The thread's bounce memfd.
    fn bounce(&self) -> io::Result<BorrowedFd<'_>> {
        let raw = BOUNCE.with(|cell| -> io::Result<RawFd> {
            if let Some(fd) = cell.get() {
                return Ok(fd.as_raw_fd());
            }
            // SAFETY: a constant, NUL-terminated name.
            let fd =
                unsafe { libc::memfd_create(c"fuse-zero-copy-bounce".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            Ok(cell.get_or_init(|| fd).as_raw_fd())
        })?;
        // SAFETY: the descriptor stays open until this thread ends, and
        // a `FixedRing` is used on its ring's thread only.
        Ok(unsafe { BorrowedFd::borrow_raw(raw) })
    }
}

/// Which way a zero-copy request's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// READ: into the request's pages (a writer).
    Read,
    /// WRITE: out of the request's pages (a reader).
    Write,
}

/// A zero-copy READ's destination or WRITE's source: the request's pages,
/// registered at `slot` of the ring's buffer table.
pub(crate) struct ZeroCopyEntry {
    fixed: *const FixedRing,
    counters: *const Counters,
    /// `None`: the entry has no slot (never so: entries are made only
    /// with one); every transfer then fails with EIO rather than name
    /// another slot.
    slot: Option<u16>,
    direction: Direction,
    /// The request's byte count (the registered buffer's length).
    size: usize,
    /// Bytes moved so far (written, or consumed).
    done: usize,
    /// A bounce transfer failed after the file system was told it
    /// worked (`commit` has no way to say so): the reply is this error.
    failed: Cell<Option<i32>>,
    /// `spare()`'s memory.
    spare: Vec<u8>,
    /// `unconsumed()`'s copy of the data: the offset it starts at, and
    /// the bytes.
    copied: OnceCell<(usize, Vec<u8>)>,
}

// SAFETY: a `ZeroCopyEntry` lives in a transaction served on the ring
// thread that made it (never handed to another thread: lock waits, the
// only requests answered elsewhere, are neither READ nor WRITE); the
// pointers lead to that thread's `FixedRing` and the session's counters,
// which outlive every transaction.
unsafe impl Send for ZeroCopyEntry {}

impl ZeroCopyEntry {
    /// # Safety
    ///
    /// `fixed` and `counters` must outlive the entry, which must be used
    /// on the ring's thread only.
    pub(crate) unsafe fn new(
        fixed: *const FixedRing,
        counters: *const Counters,
        slot: Option<u16>,
        direction: Direction,
        size: usize,
    ) -> Self {
        Self {
            fixed,
            counters,
            slot,
            direction,
            size,
            done: 0,
            failed: Cell::new(slot.is_none().then_some(libc::EIO)),
            spare: Vec::new(),
            copied: OnceCell::new(),
        }
    }

    pub(crate) fn direction(&self) -> Direction {
        self.direction
    }

    /// Bytes moved.
    pub(crate) fn done(&self) -> usize {
        self.done
    }

    /// The errno of a failed bounce transfer the file system couldn't be
    /// told of.
    pub(crate) fn failed(&self) -> Option<i32> {
        self.failed.get()
    }

    fn fixed(&self) -> &FixedRing {
        // SAFETY: `new`'s contract.
        unsafe { &*self.fixed }
    }

    fn counters(&self) -> &Counters {
        // SAFETY: `new`'s contract.
        unsafe { &*self.counters }
    }

    /// Moves `len` bytes between `fd` at `offset` and the request's pages
    /// at `at`: into the pages (`READ_FIXED`) for [`Direction::Read`], out
    /// of them (`WRITE_FIXED`) for [`Direction::Write`].
    fn run_fixed(
        &self,
        way: Direction,
        fd: BorrowedFd<'_>,
        offset: u64,
        at: usize,
        len: usize,
    ) -> io::Result<usize> {
        let slot = self.slot()?;
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let fd = types::Fd(fd.as_raw_fd());
        // `addr` is an offset into the registered pages, which start at 0.
        let sqe = match way {
            Direction::Read => opcode::ReadFixed::new(fd, at as *mut u8, len, slot)
                .offset(offset)
                .build(),
            Direction::Write => opcode::WriteFixed::new(fd, at as *const u8, len, slot)
                .offset(offset)
                .build(),
        };
        self.fixed().run(sqe)
    }

    fn slot(&self) -> io::Result<u16> {
        self.slot
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EIO))
    }

    /// [`Self::run_fixed`] until all `len` bytes moved between the bounce
    /// memfd (from its start) and the request's pages at `at`; a transfer
    /// that moves nothing is `EIO`.
    fn run_fixed_all(
        &self,
        way: Direction,
        memfd: BorrowedFd<'_>,
        at: usize,
        len: usize,
    ) -> io::Result<()> {
        let mut moved = 0;
        while moved < len {
            let n = self.run_fixed(way, memfd, moved as u64, at + moved, len - moved)?;
            if n == 0 {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            moved += n;
        }
        Ok(())
    }

    /// Copies `data` into the request's pages after the bytes written
    /// (READ), through the bounce memfd. All or an error.
    fn bounce_in(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let memfd = self.fixed().bounce()?;
        write_all_at(memfd, data, 0)?;
        self.run_fixed_all(Direction::Read, memfd, self.done, data.len())?;
        self.done += data.len();
        self.counters()
            .zero_copy_copied_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Copies `len` bytes of the request's pages at `at` (WRITE) into
    /// `out`, through the bounce memfd.
    fn bounce_out(&self, at: usize, out: &mut [u8]) -> io::Result<()> {
        let memfd = self.fixed().bounce()?;
        self.run_fixed_all(Direction::Write, memfd, at, out.len())?;
        let mut got = 0;
        while got < out.len() {
            let n = fuse_server::io::pread(memfd, &mut out[got..], got as u64)?;
            if n == 0 {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            got += n;
        }
        self.counters()
            .zero_copy_copied_bytes
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn moved(&self, n: usize) {
        self.counters()
            .zero_copy_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl ZeroCopyWriter for ZeroCopyEntry {
    fn available(&self) -> usize {
        match self.direction {
            Direction::Read => self.size - self.done,
            Direction::Write => 0,
        }
    }

    fn written(&self) -> usize {
        self.done
    }

    fn write_from_file(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        count: usize,
    ) -> io::Result<usize> {
        clamped_transfer(count, self.available(), |count| {
            match self.run_fixed(Direction::Read, fd, offset, self.done, count) {
                Ok(n) => {
                    self.done += n;
                    self.moved(n);
                    Ok(n)
                }
                // The backing file refuses this memory (O_DIRECT and the
                // user's unaligned pages): through aligned memory instead.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let mut buf = AlignedBuf::new(count)?;
                    let n = fuse_server::io::pread(fd, &mut buf, offset)?;
                    self.bounce_in(&buf[..n])?;
                    Ok(n)
                }
                Err(e) => Err(e),
            }
        })
    }

    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() > self.available() {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        self.bounce_in(data)
    }

    fn spare(&mut self) -> &mut [u8] {
        let available = self.available();
        self.spare.resize(available, 0);
        &mut self.spare[..available]
    }

    fn commit(&mut self, n: usize) {
        let n = n.min(self.spare.len()).min(self.available());
        let data = std::mem::take(&mut self.spare);
        if let Err(e) = self.bounce_in(&data[..n]) {
            tracing::warn!("zero-copy READ: copying the reply's data into the request failed: {e}");
            self.failed.set(Some(e.raw_os_error().unwrap_or(libc::EIO)));
        }
        self.spare = data;
    }

    fn is_zero_copy(&self) -> bool {
        true
    }
}

impl ZeroCopyReader for ZeroCopyEntry {
    fn remaining(&self) -> usize {
        match self.direction {
            Direction::Write => self.size - self.done,
            Direction::Read => 0,
        }
    }

    fn read_to_file(&mut self, fd: BorrowedFd<'_>, offset: u64, count: usize) -> io::Result<usize> {
        clamped_transfer(count, self.remaining(), |count| {
            let n = match self.run_fixed(Direction::Write, fd, offset, self.done, count) {
                Ok(n) => {
                    self.moved(n);
                    n
                }
                // As for READ: the backing file wants aligned memory.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let mut buf = AlignedBuf::new(count)?;
                    self.bounce_out(self.done, &mut buf[..count])?;
                    fuse_server::io::pwrite(fd, &buf[..count], offset)?
                }
                Err(e) => return Err(e),
            };
            self.done += n;
            Ok(n)
        })
    }

    fn unconsumed(&self) -> &[u8] {
        let (start, bytes) = self.copied.get_or_init(|| {
            let mut bytes = vec![0u8; self.remaining()];
            if let Err(e) = self.bounce_out(self.done, &mut bytes) {
                tracing::warn!("zero-copy WRITE: copying the request's data failed: {e}");
                self.failed.set(Some(e.raw_os_error().unwrap_or(libc::EIO)));
                bytes.clear();
            }
            (self.done, bytes)
        });
        bytes.get(self.done - start..).unwrap_or(&[])
    }

    fn consume(&mut self, n: usize) {
        self.done += n.min(self.remaining());
    }

    fn is_zero_copy(&self) -> bool {
        true
    }
}

/// `pwrite`s all of `data` to `fd` at `offset`.
fn write_all_at(fd: BorrowedFd<'_>, data: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match fuse_server::io::pwrite(fd, &data[done..], offset + done as u64)? {
            0 => return Err(io::Error::from_raw_os_error(libc::EIO)),
            n => done += n,
        }
    }
    Ok(())
}
