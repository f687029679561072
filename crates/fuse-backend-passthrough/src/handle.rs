//! Open files and directories (the handles the kernel passes back), and
//! the directory stream each open directory keeps.

use crate::crash_table::{CrashTable, NO_SLOT};
use crate::inode::IdMap;
use crate::sys::{self, errno};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// An open file or directory of the backing tree.
pub(crate) struct Handle {
    /// Shared so that an io_uring operation in flight keeps it open
    /// (`async_io::File`), even after RELEASE removed the handle.
    fd: Arc<OwnedFd>,
    /// The node id it was opened for.
    pub nodeid: u64,
    /// The flags the backing file was opened with.
    pub flags: i32,
    /// A directory's stream position and buffer (`None` for files).
    pub dir: Option<Mutex<DirStream>>,
    /// The backing file refused `RWF_NOWAIT` (`EOPNOTSUPP`): async READs
    /// don't try it again on this handle.
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
    pub no_nowait: AtomicBool,
    /// Its slot in the crash table (`crash_table::NO_SLOT`: none).
    pub crash_slot: AtomicU32,
    /// The kernel passthrough backing id its open was counted with (0:
    /// served by the daemon; -1: not counted, passthrough off), kept in
    /// the crash table.
    pub passthrough_id: i32,
}

impl Handle {
    /// An open file.
    pub(crate) fn file(fd: OwnedFd, nodeid: u64, flags: i32) -> Self {
        Self {
            fd: Arc::new(fd),
            nodeid,
            flags,
            dir: None,
            no_nowait: AtomicBool::new(false),
            crash_slot: AtomicU32::new(NO_SLOT),
            passthrough_id: -1,
        }
    }

    /// An open directory.
    pub(crate) fn dir(fd: OwnedFd, nodeid: u64, flags: i32) -> Self {
        Self {
            fd: Arc::new(fd),
            nodeid,
            flags,
            dir: Some(Mutex::new(DirStream::new())),
            no_nowait: AtomicBool::new(false),
            crash_slot: AtomicU32::new(NO_SLOT),
            passthrough_id: -1,
        }
    }

    /// The open descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The open descriptor, shared (for IO that may outlive the request).
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
    pub(crate) fn shared_fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }
}

const SHARDS: usize = 16;

/// Open handles by number, in shards so that READ and WRITE on different
/// handles never wait for one lock: a lookup takes one shard's read lock
/// for as long as it takes to clone an `Arc`.
pub(crate) struct HandleTable {
    shards: [RwLock<IdMap<Arc<Handle>>>; SHARDS],
    next: AtomicU64,
    /// The crash table, with crash recovery.
    crash: OnceLock<Arc<CrashTable>>,
}

impl HandleTable {
    pub(crate) fn new() -> Self {
        Self {
            shards: std::array::from_fn(|_| RwLock::new(IdMap::default())),
            // 0 means "no handle" (zero-message opens).
            next: AtomicU64::new(1),
            crash: OnceLock::new(),
        }
    }

    /// Keeps the open handles in `table` from now on (crash recovery).
    pub(crate) fn set_crash_table(&self, table: Arc<CrashTable>) -> bool {
        self.crash.set(table).is_ok()
    }

    /// Puts back handle `fh` of a crashed process, kept in crash table
    /// slot `slot`.
    pub(crate) fn restore_crashed(&self, fh: u64, handle: Handle, slot: u32) -> io::Result<()> {
        handle.crash_slot.store(slot, Ordering::Release);
        self.restore(fh, handle, fh + 1)
    }

    fn shard(&self, fh: u64) -> &RwLock<IdMap<Arc<Handle>>> {
        &self.shards[(fh as usize) % SHARDS]
    }

    /// Adds a handle; returns its number.
    pub(crate) fn insert(&self, handle: Handle) -> io::Result<u64> {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(fh).write().unwrap_or_else(|e| e.into_inner());
        shard.try_reserve(1).map_err(|_| errno(libc::ENOMEM))?;
        if let Some(table) = self.crash.get() {
            // In the request's journal record first, in the table second:
            // a resend closes the handle its note names, if the table kept
            // it, before running again. A crash between the two leaves
            // nothing to close; the other order kept a handle nobody held
            // until the unmount. The number is marked taken before it is
            // noted, so a later process never makes a handle of that
            // number: a note names a handle the kernel never got, or none.
            table.take_handle_number(fh);
            fuse_server::recovery::note(fh + 1);
            #[cfg(feature = "fault-injection")]
            crate::fault::on_handle_noted(fh);
            let slot = table.add_handle(
                fh,
                handle.nodeid,
                handle.flags,
                handle.dir.is_some(),
                handle.passthrough_id,
            );
            handle.crash_slot.store(slot, Ordering::Release);
            #[cfg(feature = "fault-injection")]
            crate::fault::on_handle_made(fh);
        }
        shard.insert(fh, Arc::new(handle));
        Ok(fh)
    }

    /// The handle `fh`.
    pub(crate) fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        self.shard(fh)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
    }

    /// Removes the handle `fh` (its descriptor closes when the last
    /// request using it is done).
    pub(crate) fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        let removed = self
            .shard(fh)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh);
        if let (Some(table), Some(h)) = (self.crash.get(), &removed) {
            let slot = h.crash_slot.swap(NO_SLOT, Ordering::AcqRel);
            if slot != NO_SLOT {
                table.free_handle(slot);
            }
        }
        removed
    }

    /// Open handles.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Every handle, by number.
    pub(crate) fn all(&self) -> Vec<(u64, Arc<Handle>)> {
        let mut all: Vec<(u64, Arc<Handle>)> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|(&fh, h)| (fh, h.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|(fh, _)| *fh);
        all
    }

    /// Numbers later handles from `first` at least (crash recovery: the
    /// numbers a dead process may have used are not used again).
    pub(crate) fn number_from(&self, first: u64) {
        self.next.fetch_max(first, Ordering::AcqRel);
    }

    /// The number the next handle gets.
    pub(crate) fn next_fh(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// Puts back handle `fh` of an earlier process (live upgrade); later
    /// handles are numbered from `next` at least.
    pub(crate) fn restore(&self, fh: u64, handle: Handle, next: u64) -> io::Result<()> {
        let mut shard = self.shard(fh).write().unwrap_or_else(|e| e.into_inner());
        shard.try_reserve(1).map_err(|_| errno(libc::ENOMEM))?;
        shard.insert(fh, Arc::new(handle));
        self.next.fetch_max(next.max(fh + 1), Ordering::AcqRel);
        Ok(())
    }

    /// Drops every handle.
    pub(crate) fn clear(&self) {
        for s in &self.shards {
            let old = std::mem::take(&mut *s.write().unwrap_or_else(|e| e.into_inner()));
            if let Some(table) = self.crash.get() {
                for h in old.values() {
                    let slot = h.crash_slot.swap(NO_SLOT, Ordering::AcqRel);
                    if slot != NO_SLOT {
                        table.free_handle(slot);
                    }
                }
            }
            drop(old);
        }
    }
}

/// The size of a directory stream's getdents64 buffer.
const DIR_BUF_SIZE: usize = 32 * 1024;

/// A stream position no request names (cookies beyond `i64::MAX` are the
/// end and never seek): the next read seeks to the cookie it is given.
const UNKNOWN_POS: u64 = u64::MAX;

/// A directory stream: entries read with getdents64 and not yet handed
/// out, and the cookie the next entry follows.
///
/// Cookies are the backing file system's `d_off` values: an entry's cookie
/// is the position right after it, which `lseek` accepts to resume there.
pub(crate) struct DirStream {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The cookie of the position the stream is at (0: the start;
    /// [`UNKNOWN_POS`]: not known, the next read seeks).
    pos: u64,
}

/// One entry of a directory stream.
pub(crate) struct DirEntry<'a> {
    pub ino: u64,
    /// The cookie to resume after this entry.
    pub off: u64,
    pub dtype: u8,
    /// The name, without its NUL.
    pub name: &'a [u8],
    /// The name as a C string.
    pub cname: &'a std::ffi::CStr,
}

impl DirStream {
    fn new() -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            end: 0,
            pos: 0,
        }
    }

    /// Forgets the buffered entries and the position, so that the next
    /// read seeks to the cookie it is given: the descriptor was moved
    /// behind the stream's back (LSEEK), or what was read can't be trusted.
    pub(crate) fn invalidate(&mut self) {
        self.start = 0;
        self.end = 0;
        self.pos = UNKNOWN_POS;
    }

    /// Hands out entries after cookie `offset` to `emit` until it returns
    /// `false` (the entry it was given stays for the next call) or the
    /// directory ends. `fd` is the directory's open descriptor. On an
    /// error (of `emit` too) the entries handed out before stay handed
    /// out and the stream stands right after them.
    pub(crate) fn read(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        mut emit: impl FnMut(&DirEntry<'_>) -> io::Result<bool>,
    ) -> io::Result<()> {
        if !self.fill(fd, offset)? {
            return Ok(());
        }
        loop {
            if !self.refill(fd)? {
                return Ok(());
            }
            let Some((entry, reclen)) = parse_dirent(&self.buf[self.start..self.end]) else {
                // A record we can't read: drop the buffer, and read again
                // from the cookie of the next request (which meets it again
                // rather than skipping what followed it).
                tracing::warn!("malformed getdents64 record");
                self.invalidate();
                return Err(errno(libc::EIO));
            };
            let off = entry.off;
            if !emit(&entry)? {
                return Ok(());
            }
            self.start += reclen;
            self.pos = off;
        }
    }

    /// The entries after cookie `offset` that the stream holds read, as
    /// raw `linux_dirent64` records ([`dirents`] parses them), without
    /// handing any out: a [`Self::read`] from `offset` hands out these
    /// first. Where fewer than half a buffer's worth are held, they are
    /// topped up first (one `getdents64` after them), so that what a reply
    /// takes is there in one piece; not where the reads so far put less
    /// than half a buffer in (`end`): `getdents64` fills what it is given
    /// unless the directory ends, so a small directory costs no read that
    /// finds nothing. Empty at the end of the directory.
    pub(crate) fn peek(&mut self, fd: BorrowedFd<'_>, offset: u64) -> io::Result<&[u8]> {
        if !self.fill(fd, offset)? {
            return Ok(&[]);
        }
        if self.end >= DIR_BUF_SIZE / 2 && self.end - self.start < DIR_BUF_SIZE / 2 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            // The directory's position is after the last record held, so
            // what this reads follows it.
            self.end += sys::getdents64(fd, &mut self.buf[self.end..])?;
        }
        Ok(&self.buf[self.start..self.end])
    }

    /// Makes the stream stand at cookie `offset` (seeking unless it does)
    /// with entries buffered (reading them unless it has some); `false` at
    /// the end of the directory.
    fn fill(&mut self, fd: BorrowedFd<'_>, offset: u64) -> io::Result<bool> {
        if offset > i64::MAX as u64 {
            // Beyond any position: the end.
            return Ok(false);
        }
        if offset != self.pos {
            sys::lseek(fd, offset as i64, libc::SEEK_SET)?;
            self.start = 0;
            self.end = 0;
            self.pos = offset;
        }
        if self.buf.is_empty() {
            self.buf
                .try_reserve_exact(DIR_BUF_SIZE)
                .map_err(|_| errno(libc::ENOMEM))?;
            self.buf.resize(DIR_BUF_SIZE, 0);
        }
        self.refill(fd)
    }

    /// Reads the next entries unless some are buffered; `false` at the end
    /// of the directory.
    fn refill(&mut self, fd: BorrowedFd<'_>) -> io::Result<bool> {
        if self.start >= self.end {
            let n = sys::getdents64(fd, &mut self.buf)?;
            self.start = 0;
            self.end = n;
        }
        Ok(self.end > self.start)
    }
}

/// The entries of raw `linux_dirent64` records `b` (from
/// [`DirStream::peek`]), each with its record, up to the first that can't
/// be read.
pub(crate) fn dirents(mut b: &[u8]) -> impl Iterator<Item = (DirEntry<'_>, &[u8])> {
    std::iter::from_fn(move || {
        let (entry, reclen) = parse_dirent(b)?;
        let (record, rest) = b.split_at(reclen);
        b = rest;
        Some((entry, record))
    })
}

/// Parses the `linux_dirent64` at the start of `b`; returns it and its
/// record length.
fn parse_dirent(b: &[u8]) -> Option<(DirEntry<'_>, usize)> {
    const HEAD: usize = 19;
    if b.len() < HEAD {
        return None;
    }
    let ino = u64::from_ne_bytes(b[0..8].try_into().ok()?);
    let off = u64::from_ne_bytes(b[8..16].try_into().ok()?);
    let reclen = u16::from_ne_bytes(b[16..18].try_into().ok()?) as usize;
    let dtype = b[18];
    if reclen < HEAD || reclen > b.len() {
        return None;
    }
    let name_area = &b[HEAD..reclen];
    let len = name_area.iter().position(|&c| c == 0)?;
    let cname = std::ffi::CStr::from_bytes_with_nul(&name_area[..=len]).ok()?;
    Some((
        DirEntry {
            ino,
            off,
            dtype,
            name: &name_area[..len],
            cname,
        },
        reclen,
    ))
}

/// A lock owner's open file description of an inode, holding the owner's
/// OFD locks (POSIX locks of one process through the mount).
pub(crate) struct LockCtx {
    pub fd: OwnedFd,
    /// The pid the owner last locked with (reported by GETLK).
    pub pid: AtomicU32,
    /// The open files (file handles) the owner locked through. An OFD
    /// lock's owner is its open file, whose close sends no unlock and no
    /// FLUSH owner of its own: the RELEASE of the last of these handles
    /// ends the context and with it the locks.
    pub fhs: std::sync::Mutex<Vec<u64>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dirents() {
        let mut rec = vec![0u8; 24];
        rec[0..8].copy_from_slice(&7u64.to_ne_bytes());
        rec[8..16].copy_from_slice(&99u64.to_ne_bytes());
        rec[16..18].copy_from_slice(&24u16.to_ne_bytes());
        rec[18] = 8;
        rec[19..22].copy_from_slice(b"abc");
        let (e, len) = parse_dirent(&rec).unwrap();
        assert_eq!(
            (e.ino, e.off, e.dtype, e.name, len),
            (7, 99, 8, &b"abc"[..], 24)
        );
        rec[16..18].copy_from_slice(&200u16.to_ne_bytes());
        assert!(parse_dirent(&rec).is_none());
        assert!(parse_dirent(&rec[..10]).is_none());
    }

    #[test]
    fn handle_numbers_start_at_one_and_are_found_again() {
        let t = HandleTable::new();
        let fd = sys::open(c"/", libc::O_PATH, 0).unwrap();
        let fh = t.insert(Handle::file(fd, 1, 0)).unwrap();
        assert_eq!(fh, 1);
        assert_eq!(t.get(fh).unwrap().nodeid, 1);
        assert_eq!(t.len(), 1);
        assert!(t.remove(fh).is_some());
        assert!(t.get(fh).is_none());
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn peek_hands_out_nothing_and_tops_up_what_it_holds() {
        // Long names, so that one getdents64 fills the buffer and the
        // stream runs low after half of it.
        let base = tempfile::tempdir().unwrap();
        let long = "n".repeat(200);
        for i in 0..400 {
            std::fs::write(base.path().join(format!("{long}{i:03}")), b"").unwrap();
        }
        let fd: std::os::fd::OwnedFd = std::fs::File::open(base.path()).unwrap().into();
        let h = Handle::dir(fd, fuse_abi::ROOT_ID, libc::O_RDONLY | libc::O_DIRECTORY);
        let mut stream = h.dir.as_ref().unwrap().lock().unwrap();
        let names =
            |b: &[u8]| -> Vec<Vec<u8>> { dirents(b).map(|(e, _)| e.name.to_vec()).collect() };
        // Each peek shows what the next read hands out first, in order,
        // and at least half a buffer of it while the directory has more.
        let mut listed = Vec::new();
        let mut offset = 0;
        loop {
            let peeked = names(stream.peek(h.fd(), offset).unwrap());
            if peeked.is_empty() {
                break;
            }
            let held: usize = dirents(stream.peek(h.fd(), offset).unwrap())
                .map(|(_, r)| r.len())
                .sum();
            if listed.len() + peeked.len() < 402 {
                assert!(held >= DIR_BUF_SIZE / 2, "topped up: {held} bytes held");
            }
            let mut got = Vec::new();
            stream
                .read(h.fd(), offset, |e| {
                    if got.len() == 100 {
                        return Ok(false);
                    }
                    got.push(e.name.to_vec());
                    offset = e.off;
                    Ok(true)
                })
                .unwrap();
            let n = got.len().min(peeked.len());
            assert_eq!(got[..n], peeked[..n], "read hands out what peek showed");
            listed.extend(got);
        }
        assert_eq!(listed.len(), 402, "every name once, `.` and `..` too");
        listed.sort();
        listed.dedup();
        assert_eq!(listed.len(), 402);
    }

    // From the readdir contract tests (tests/readdir_contract.rs), which
    // use the public API only: this one drives the private directory stream.
    #[test]
    fn readdir_stream_keeps_the_entry_its_callback_failed_on() {
        use test_support::errno_of;
        // The callback the READDIR(PLUS) handlers give the stream fails when
        // a READDIRPLUS lookup fails (an error the backing file system makes,
        // not one a test can provoke as any user): the handler then answers
        // with that error if the reply is empty and with the reply otherwise
        // (see the removal tests above). Here: the stream itself, whose
        // failed entry must come first in the next call.
        let base = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::fs::write(base.path().join(format!("f{i}")), b"").unwrap();
        }
        let fd: std::os::fd::OwnedFd = std::fs::File::open(base.path()).unwrap().into();
        let h = Handle::dir(fd, fuse_abi::ROOT_ID, libc::O_RDONLY | libc::O_DIRECTORY);
        let mut stream = h.dir.as_ref().unwrap().lock().unwrap();
        let mut full = Vec::new();
        stream
            .read(h.fd(), 0, |e| {
                full.push((e.name.to_vec(), e.off));
                Ok(true)
            })
            .unwrap();
        assert_eq!(full.len(), 12);
        for fail_at in [0, 1, 5, 11] {
            let start = if fail_at == 0 { 0 } else { full[0].1 };
            let mut got = Vec::new();
            let r = stream.read(h.fd(), start, |e| {
                if got.len() + usize::from(start != 0) == fail_at {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                got.push((e.name.to_vec(), e.off));
                Ok(true)
            });
            assert_eq!(errno_of(r), libc::EIO);
            let resume = got.last().map_or(start, |e| e.1);
            let mut next = None;
            stream
                .read(h.fd(), resume, |e| {
                    next = Some((e.name.to_vec(), e.off));
                    Ok(false)
                })
                .unwrap();
            assert_eq!(
                next.as_ref(),
                Some(&full[fail_at]),
                "the failed entry comes next"
            );
        }
    }
}
