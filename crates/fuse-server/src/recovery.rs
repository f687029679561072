//! Crash recovery: state that outlives the serving process, and requests
//! the kernel resends.
//!
//! A FUSE connection lives while any `/dev/fuse` descriptor of it is open.
//! A supervisor that holds the descriptor (and never reads from it) keeps
//! the mount alive when the serving process dies; a new serving process
//! then continues where the dead one stopped. Two things must survive for
//! that, and both live in a [`StateArea`], a memfd the supervisor holds
//! and every serving process maps:
//!
//! - What INIT settled ([`StateArea::set_negotiated`]), for
//!   [`Server::resume`](crate::Server::resume).
//! - The file system's own table (node ids, lookup counts, open handles),
//!   in [`StateArea::fs_region`], which the file system updates as it
//!   answers (the passthrough's is `fuse_backend_passthrough::CrashTable`).
//!
//! Requests the dead process had read and not answered are still in the
//! kernel's processing queue. `FUSE_NOTIFY_RESEND` puts them back in the
//! pending queue with `FUSE_UNIQUE_RESEND` set in their `unique`; the new
//! process sends it before it reads anything. A resent request may have
//! been carried out already, so the [`RequestJournal`] (also in the area)
//! records, per serving thread, the request it is on:
//!
//! | record | written | on a resend of that request |
//! |---|---|---|
//! | started | before the file system is called; it adds the lookup references it counts for the reply ([`handed`]) and may [`note`] a value | the references handed are given back (`forget`), and the file system is called again; [`attempt`] says `Resent { started: true, note }` so it can settle what is ambiguous (an UNLINK that now finds nothing, a CREATE that now finds the file) |
//! | reply saved | just before the reply is written, replies of up to [`SAVED_REPLY_MAX`] bytes (errors included) | the saved reply is sent again, the file system is not called: the entry, handle or byte count the first attempt made is the one the kernel gets |
//! | entries handed | before a READDIRPLUS reply is written | each entry's lookup reference is given back (`forget`), then the request runs again |
//! | big reply | before any other reply is written (READ, READDIR, xattr lists: idempotent) | the request runs again |
//!
//! A record whose reply reached the kernel is never looked at again: the
//! kernel resends only what it still waits for.
//!
//! The journal is for sessions that carry each request on one thread from
//! its read to its reply (`fuse_transport_dev::DevSession`): [`attempt`],
//! [`note`] and [`handed`] talk to the current thread's record.

use crate::init::Negotiated;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// First word of a state area.
const MAGIC: u64 = u64::from_le_bytes(*b"FUSESTA1");
/// The layout version of this module's area.
pub const STATE_AREA_VERSION: u64 = 1;

const PAGE: usize = 4096;
/// Header words (of the first page).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_TOTAL: usize = 2;
const H_RECORDS: usize = 3;
const H_FS_OFFSET: usize = 4;
const H_FS_LEN: usize = 5;
const H_NEGOTIATED_LEN: usize = 6;
const H_SERVING: usize = 7;
/// The negotiated text starts at this byte of the header page.
const NEGOTIATED_AT: usize = 64;
const NEGOTIATED_MAX: usize = PAGE - NEGOTIATED_AT;

/// Bytes of one journal record.
const RECORD_SIZE: usize = 8192;
/// Largest reply body a record keeps for a replay.
pub const SAVED_REPLY_MAX: usize = 256;
const R_STATE: usize = 0;
const R_UNIQUE: usize = 1;
const R_OPCODE_ERROR: usize = 2;
const R_NOTE: usize = 3;
const R_LEN: usize = 4;
const R_HANDED: usize = 5;
const R_REPLY_AT: usize = 8;
const R_IDS_AT: usize = R_REPLY_AT + SAVED_REPLY_MAX / 8;
const R_IDS_MAX: usize = RECORD_SIZE / 8 - R_IDS_AT;

const STATE_FREE: u64 = 0;
const STATE_STARTED: u64 = 1;
const STATE_SAVED: u64 = 2;
const STATE_ENTRIES: u64 = 3;
const STATE_BIG: u64 = 4;

/// Journal records an area has: at most this many threads serve at once
/// with a record (more serve without one, their requests run again when
/// resent, warned once).
pub const JOURNAL_RECORDS: usize = 256;

/// A shared memory area (a memfd) that outlives the serving process: see
/// the module documentation.
pub struct StateArea {
    map: Arc<Mapping>,
    fd: OwnedFd,
}

struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is to a MAP_SHARED mapping of the process, tied to no
// thread; it stays mapped until Drop, which runs once, on whichever thread
// drops the last `Arc`.
unsafe impl Send for Mapping {}
// SAFETY: through `&Mapping` the memory is only read and written as
// `AtomicU64` words (`words`), apart from the negotiated text, which
// `set_negotiated` copies in once after INIT while its length word reads 0
// and readers only look at after loading a non-zero length (Acquire).
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are this mapping's, made by mmap.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Mapping {
    fn words(&self, byte_offset: usize, words: usize) -> &[AtomicU64] {
        assert!(byte_offset % 8 == 0 && byte_offset + words * 8 <= self.len);
        // SAFETY: in bounds (asserted), 8-aligned (the mapping is
        // page-aligned), and AtomicU64 has u64's layout.
        unsafe { std::slice::from_raw_parts(self.ptr.add(byte_offset).cast(), words) }
    }

    fn header(&self) -> &[AtomicU64] {
        self.words(0, NEGOTIATED_AT / 8)
    }
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl StateArea {
    /// A new, empty area with `fs_bytes` for the file system's table. The
    /// memfd is sparse: pages cost memory once written.
    pub fn create(fs_bytes: usize) -> io::Result<StateArea> {
        // SAFETY: a constant, NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"fuse-state".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let fs_offset = PAGE + JOURNAL_RECORDS * RECORD_SIZE;
        let fs_len = round_up(fs_bytes.max(PAGE), PAGE);
        let total = fs_offset + fs_len;
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), total as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Arc::new(map_shared(fd.as_fd(), total)?);
        let h = map.header();
        h[H_VERSION].store(STATE_AREA_VERSION, Ordering::Relaxed);
        h[H_TOTAL].store(total as u64, Ordering::Relaxed);
        h[H_RECORDS].store(JOURNAL_RECORDS as u64, Ordering::Relaxed);
        h[H_FS_OFFSET].store(fs_offset as u64, Ordering::Relaxed);
        h[H_FS_LEN].store(fs_len as u64, Ordering::Relaxed);
        h[H_MAGIC].store(MAGIC, Ordering::Release);
        Ok(StateArea { map, fd })
    }

    /// Maps the area of `fd` (made by [`StateArea::create`], maybe in
    /// another process). Refuses, with the reason, what isn't one or is
    /// of another layout version.
    pub fn open(fd: OwnedFd) -> io::Result<StateArea> {
        // SAFETY: `stat` is plain integers, for which all zeroes is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is owned by this call and `st` is a writable stat.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let size = st.st_size as usize;
        if size < PAGE {
            return Err(invalid(format!("state area of {size} bytes: too small")));
        }
        let map = Arc::new(map_shared(fd.as_fd(), size)?);
        let h = map.header();
        if h[H_MAGIC].load(Ordering::Acquire) != MAGIC {
            return Err(invalid("not a FUSE state area (bad magic)".into()));
        }
        let version = h[H_VERSION].load(Ordering::Relaxed);
        if version != STATE_AREA_VERSION {
            return Err(invalid(format!(
                "state area version {version}, this build reads version {STATE_AREA_VERSION}"
            )));
        }
        let total = h[H_TOTAL].load(Ordering::Relaxed) as usize;
        let records = h[H_RECORDS].load(Ordering::Relaxed) as usize;
        let fs_offset = h[H_FS_OFFSET].load(Ordering::Relaxed) as usize;
        let fs_len = h[H_FS_LEN].load(Ordering::Relaxed) as usize;
        if total != size
            || records != JOURNAL_RECORDS
            || fs_offset != PAGE + records * RECORD_SIZE
            || fs_offset.checked_add(fs_len) != Some(total)
        {
            return Err(invalid(format!(
                "state area layout doesn't add up: {size} bytes, {records} records, \
                 file system part {fs_len} bytes at {fs_offset}"
            )));
        }
        Ok(StateArea { map, fd })
    }

    /// The memfd (for a supervisor to keep and pass on).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What INIT settled, if a serving process wrote it down.
    pub fn negotiated(&self) -> io::Result<Option<Negotiated>> {
        let len = self.map.header()[H_NEGOTIATED_LEN].load(Ordering::Acquire) as usize;
        if len == 0 {
            return Ok(None);
        }
        if len > NEGOTIATED_MAX {
            return Err(invalid(format!("negotiated state of {len} bytes")));
        }
        // SAFETY: in bounds of the header page; written before the length
        // was published (Release/Acquire).
        let bytes = unsafe { std::slice::from_raw_parts(self.map.ptr.add(NEGOTIATED_AT), len) };
        let text = std::str::from_utf8(bytes).map_err(|e| invalid(e.to_string()))?;
        Negotiated::from_state(text)
            .map(Some)
            .map_err(|e| invalid(e.to_string()))
    }

    /// Writes down what INIT settled (once, after INIT was answered).
    pub fn set_negotiated(&self, negotiated: &Negotiated) -> io::Result<()> {
        let text = negotiated.to_state();
        if text.len() > NEGOTIATED_MAX {
            return Err(invalid(format!("negotiated state of {} bytes", text.len())));
        }
        let h = self.map.header();
        h[H_NEGOTIATED_LEN].store(0, Ordering::Release);
        // SAFETY: in bounds of the header page, which nobody reads while
        // the length is 0.
        unsafe {
            std::ptr::copy_nonoverlapping(
                text.as_ptr(),
                self.map.ptr.add(NEGOTIATED_AT),
                text.len(),
            )
        };
        h[H_NEGOTIATED_LEN].store(text.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Says that process `pid` serves now (after it took the connection
    /// over), for the supervisor to tell a process that failed to start
    /// from one that served.
    pub fn set_serving(&self, pid: u32) {
        self.map.header()[H_SERVING].store(pid as u64, Ordering::Release);
    }

    /// The process that last said it serves ([`StateArea::set_serving`]).
    pub fn serving(&self) -> u32 {
        self.map.header()[H_SERVING].load(Ordering::Acquire) as u32
    }

    /// The request journal. Taking it reads what the previous serving
    /// process left (the requests it was on when it died) and clears the
    /// records for this one: take it once, before serving.
    pub fn journal(&self) -> RequestJournal {
        RequestJournal::new(self.map.clone())
    }

    /// The file system's part of the area.
    pub fn fs_region(&self) -> Region {
        let h = self.map.header();
        let offset = h[H_FS_OFFSET].load(Ordering::Relaxed) as usize;
        let len = h[H_FS_LEN].load(Ordering::Relaxed) as usize;
        Region {
            map: self.map.clone(),
            offset,
            words: len / 8,
        }
    }
}

impl std::fmt::Debug for StateArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateArea")
            .field("fd", &self.fd)
            .field("bytes", &self.map.len)
            .finish()
    }
}

fn map_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
    // SAFETY: a fresh shared mapping of the whole file; checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping {
        ptr: ptr.cast(),
        len,
    })
}

/// A file system's part of a [`StateArea`]: words of shared memory, each
/// read and written atomically, that keep their values when the process
/// dies (a write done is a write kept; there is no tearing below a word).
#[derive(Clone)]
pub struct Region {
    map: Arc<Mapping>,
    offset: usize,
    words: usize,
}

impl Region {
    /// The region's words.
    pub fn words(&self) -> &[AtomicU64] {
        self.map.words(self.offset, self.words)
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("words", &self.words)
            .finish()
    }
}

/// What a request's previous serving process did with it, as the journal
/// recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Previous {
    /// The file system was called; it may or may not have acted, and had
    /// handed these lookup references ([`handed`]) to a reply that was
    /// never recorded.
    Started { note: u64, handed: Vec<u64> },
    /// The reply, about to be written.
    Saved { error: i32, body: Vec<u8> },
    /// A READDIRPLUS reply handing these node ids, about to be written.
    Entries(Vec<u64>),
    /// A large reply (of an idempotent request), about to be written.
    Big,
}

/// What the previous serving process did with a resent request; see
/// [`RequestJournal::take_previous`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resent {
    /// Send this reply (the one the first attempt made) instead of
    /// calling the file system.
    Replay {
        /// The reply's error (0 or a negated errno).
        error: i32,
        /// The reply's body.
        body: Vec<u8>,
    },
    /// Give back one lookup reference on each of these node ids (a
    /// READDIRPLUS reply that never arrived), then run the request again.
    ForgetThenRun(Vec<u64>),
    /// Run it again ([`attempt`] tells the file system what it knows).
    Run,
}

/// Which attempt at a request the current thread is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The request reaches a server for the first time (or no journal is
    /// kept).
    First,
    /// The kernel resent it after a serving process died.
    Resent {
        /// The dead process had called the file system with it: it may
        /// have acted (a name made or removed) without answering.
        started: bool,
        /// What the file system noted ([`note`]) on that attempt.
        note: u64,
    },
}

thread_local! {
    /// The journal record this thread writes, and the attempt it is on.
    static CURRENT: RefCell<Current> = const { RefCell::new(Current { record: None, attempt: Attempt::First }) };
    /// Records this thread holds in each journal, given back at its exit.
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

struct Current {
    record: Option<(Arc<JournalInner>, usize)>,
    attempt: Attempt,
}

struct Held {
    journal: Weak<JournalInner>,
    index: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(j) = self.journal.upgrade() {
            j.record(self.index)[R_STATE].store(STATE_FREE, Ordering::Release);
            j.free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.index);
        }
    }
}

/// Which attempt at its request the calling thread is on (for a file
/// system to settle what a resent request finds; see the module
/// documentation). `Attempt::First` outside a journaled request.
pub fn attempt() -> Attempt {
    CURRENT.with(|c| c.borrow().attempt)
}

/// Notes a value for a later attempt at the current request (a file size
/// before an appending write, say): a resend after a crash finds it in
/// `Attempt::Resent::note`. Does nothing outside a journaled request.
pub fn note(value: u64) {
    CURRENT.with(|c| {
        if let Some((j, i)) = &c.borrow().record {
            j.record(*i)[R_NOTE].store(value, Ordering::Release);
        }
    });
}

struct JournalInner {
    map: Arc<Mapping>,
    free: Mutex<Vec<usize>>,
    previous: Mutex<HashMap<u64, Previous>>,
    warned: AtomicU32,
}

impl JournalInner {
    fn record(&self, index: usize) -> &[AtomicU64] {
        self.map.words(PAGE + index * RECORD_SIZE, RECORD_SIZE / 8)
    }
}

/// The request journal of a [`StateArea`]: see the module documentation.
#[derive(Clone)]
pub struct RequestJournal {
    inner: Arc<JournalInner>,
}

impl std::fmt::Debug for RequestJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestJournal")
            .field("previous", &self.previous_len())
            .finish()
    }
}

impl RequestJournal {
    fn new(map: Arc<Mapping>) -> Self {
        let inner = Arc::new(JournalInner {
            map,
            free: Mutex::new((0..JOURNAL_RECORDS).rev().collect()),
            previous: Mutex::new(HashMap::new()),
            warned: AtomicU32::new(0),
        });
        let mut previous = HashMap::new();
        for i in 0..JOURNAL_RECORDS {
            let r = inner.record(i);
            let state = r[R_STATE].load(Ordering::Acquire);
            if state == STATE_FREE {
                continue;
            }
            let unique = r[R_UNIQUE].load(Ordering::Relaxed) & !fuse_abi::UNIQUE_RESEND;
            let error = (r[R_OPCODE_ERROR].load(Ordering::Relaxed) >> 32) as u32 as i32;
            let len = r[R_LEN].load(Ordering::Relaxed) as usize;
            let prev = match state {
                STATE_SAVED if len <= SAVED_REPLY_MAX => {
                    let mut body = Vec::with_capacity(len);
                    for w in &r[R_REPLY_AT..R_REPLY_AT + len.div_ceil(8)] {
                        body.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
                    }
                    body.truncate(len);
                    Previous::Saved { error, body }
                }
                STATE_ENTRIES if len <= R_IDS_MAX => Previous::Entries(
                    r[R_IDS_AT..R_IDS_AT + len]
                        .iter()
                        .map(|w| w.load(Ordering::Relaxed))
                        .collect(),
                ),
                STATE_BIG => Previous::Big,
                _ => {
                    let handed = (r[R_HANDED].load(Ordering::Relaxed) as usize).min(R_IDS_MAX);
                    Previous::Started {
                        note: r[R_NOTE].load(Ordering::Relaxed),
                        handed: r[R_IDS_AT..R_IDS_AT + handed]
                            .iter()
                            .map(|w| w.load(Ordering::Relaxed))
                            .collect(),
                    }
                }
            };
            previous.insert(unique, prev);
            r[R_STATE].store(STATE_FREE, Ordering::Release);
        }
        if !previous.is_empty() {
            tracing::info!(
                requests = previous.len(),
                "the previous serving process was on these requests when it ended"
            );
        }
        *inner.previous.lock().unwrap_or_else(|e| e.into_inner()) = previous;
        Self { inner }
    }

    /// Requests the previous serving process was on, not yet resent.
    pub fn previous_len(&self) -> usize {
        self.inner
            .previous
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// What to do with resent request `unique` (its `FUSE_UNIQUE_RESEND`
    /// bit is ignored), given what the previous process recorded. Each
    /// record is taken once.
    pub fn take_previous(&self, unique: u64) -> (Resent, Attempt) {
        let prev = self
            .inner
            .previous
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(unique & !fuse_abi::UNIQUE_RESEND));
        match prev {
            None => (
                Resent::Run,
                Attempt::Resent {
                    started: false,
                    note: 0,
                },
            ),
            Some(Previous::Started { note, handed }) => (
                if handed.is_empty() {
                    Resent::Run
                } else {
                    Resent::ForgetThenRun(handed)
                },
                Attempt::Resent {
                    started: true,
                    note,
                },
            ),
            Some(Previous::Saved { error, body }) => (
                Resent::Replay { error, body },
                Attempt::Resent {
                    started: true,
                    note: 0,
                },
            ),
            Some(Previous::Entries(ids)) => (
                Resent::ForgetThenRun(ids),
                Attempt::Resent {
                    started: true,
                    note: 0,
                },
            ),
            Some(Previous::Big) => (
                Resent::Run,
                Attempt::Resent {
                    started: true,
                    note: 0,
                },
            ),
        }
    }

    /// The record the calling thread writes (taken at its first request,
    /// given back when it exits); `None` when all are taken.
    fn thread_record(&self) -> Option<usize> {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(h) = held
                .iter()
                .find(|h| std::ptr::eq(h.journal.as_ptr(), Arc::as_ptr(&self.inner)))
            {
                return Some(h.index);
            }
            let index = self
                .inner
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            match index {
                Some(index) => {
                    held.push(Held {
                        journal: Arc::downgrade(&self.inner),
                        index,
                    });
                    Some(index)
                }
                None => {
                    if self.inner.warned.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!(
                            records = JOURNAL_RECORDS,
                            "more serving threads than journal records: \
                             requests on the others run again if resent"
                        );
                    }
                    None
                }
            }
        })
    }

    /// Starts journaling request `unique` (of `opcode`) on this thread, as
    /// `attempt`, until the scope is dropped. The server does it for each
    /// request it handles; a transport or test that calls a file system
    /// directly can do it too.
    pub fn begin(&self, unique: u64, opcode: u32, attempt: Attempt) -> JournalScope {
        let record = self.thread_record();
        if let Some(i) = record {
            let r = self.inner.record(i);
            r[R_STATE].store(STATE_FREE, Ordering::Release);
            r[R_UNIQUE].store(unique, Ordering::Relaxed);
            r[R_OPCODE_ERROR].store(opcode as u64, Ordering::Relaxed);
            r[R_NOTE].store(0, Ordering::Relaxed);
            r[R_LEN].store(0, Ordering::Relaxed);
            r[R_HANDED].store(0, Ordering::Relaxed);
            r[R_STATE].store(STATE_STARTED, Ordering::Release);
        }
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            c.record = record.map(|i| (self.inner.clone(), i));
            c.attempt = attempt;
        });
        JournalScope { _private: () }
    }
}

/// Clears the thread's record and attempt when the request is done (its
/// reply written, or dropped).
#[must_use = "the request is journaled while the scope lives"]
pub struct JournalScope {
    _private: (),
}

impl Drop for JournalScope {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            if let Some((j, i)) = c.record.take() {
                j.record(i)[R_STATE].store(STATE_FREE, Ordering::Release);
            }
            c.attempt = Attempt::First;
        });
    }
}

/// Records that the current request is about to hand one lookup reference
/// on `nodeid` to the kernel: call it right *after* counting the reference
/// where it survives a crash. If the process dies before the reply is
/// recorded, the resend gives the reference back first (`forget`), then
/// runs again. (Counted first, a crash between the two steps leaves the
/// reference counted twice, which keeps a node too long; recorded first,
/// the resend would give back a reference never counted, one the kernel
/// holds.) Does nothing outside a journaled request.
pub fn handed(nodeid: u64) {
    CURRENT.with(|c| {
        if let Some((j, i)) = &c.borrow().record {
            let r = j.record(*i);
            let n = r[R_HANDED].load(Ordering::Relaxed) as usize;
            if n < R_IDS_MAX {
                r[R_IDS_AT + n].store(nodeid, Ordering::Relaxed);
                r[R_HANDED].store(n as u64 + 1, Ordering::Release);
            }
        }
    });
}

/// Records, before it is written, the reply of the current thread's
/// journaled request: `error` and `body` (a body too large to keep marks
/// the request as one to run again).
pub(crate) fn save_reply(error: i32, body: &[u8]) {
    save_in_record(body.len(), SAVED_REPLY_MAX, STATE_SAVED, |r| {
        let opcode = r[R_OPCODE_ERROR].load(Ordering::Relaxed) & 0xffff_ffff;
        r[R_OPCODE_ERROR].store(opcode | ((error as u32 as u64) << 32), Ordering::Relaxed);
        for (k, chunk) in body.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            r[R_REPLY_AT + k].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
    });
}

/// Records, before the reply is written, the node ids a READDIRPLUS reply
/// hands to the kernel (too many to keep: the request runs again as a
/// large reply would, and an entry's reference may leak).
pub(crate) fn save_entries(nodeids: &[u64]) {
    save_in_record(nodeids.len(), R_IDS_MAX, STATE_ENTRIES, |r| {
        for (k, id) in nodeids.iter().enumerate() {
            r[R_IDS_AT + k].store(*id, Ordering::Relaxed);
        }
    });
}

/// Records `len` items of a reply in the record of the current thread's
/// journaled request, if it has one: `fill` writes them between the
/// record's `STATE_STARTED` and `saved` (the state that says what it
/// holds). More than `max` can't be kept: the record says `STATE_BIG`
/// instead, and the request runs again.
fn save_in_record(len: usize, max: usize, saved: u64, fill: impl FnOnce(&[AtomicU64])) {
    CURRENT.with(|c| {
        let c = c.borrow();
        let Some((j, i)) = &c.record else { return };
        let r = j.record(*i);
        if len > max {
            r[R_STATE].store(STATE_BIG, Ordering::Release);
            return;
        }
        r[R_STATE].store(STATE_STARTED, Ordering::Release);
        fill(r);
        r[R_LEN].store(len as u64, Ordering::Relaxed);
        r[R_STATE].store(saved, Ordering::Release);
    });
}

/// Whether the current thread is in a journaled request whose reply was
/// recorded already (READDIRPLUS's entries: `send` must not overwrite).
pub(crate) fn entries_saved() -> bool {
    CURRENT.with(|c| {
        let c = c.borrow();
        c.record
            .as_ref()
            .is_some_and(|(j, i)| j.record(*i)[R_STATE].load(Ordering::Acquire) == STATE_ENTRIES)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reopen(area: &StateArea) -> StateArea {
        StateArea::open(area.fd().try_clone_to_owned().unwrap()).unwrap()
    }

    #[test]
    fn area_round_trips_and_refuses_what_it_isnt() {
        let area = StateArea::create(1 << 20).unwrap();
        assert!(area.negotiated().unwrap().is_none());
        area.fs_region().words()[7].store(42, Ordering::Relaxed);
        let again = reopen(&area);
        assert_eq!(again.fs_region().words()[7].load(Ordering::Relaxed), 42);
        assert_eq!(again.fs_region().words().len(), (1 << 20) / 8);

        // Another version.
        area.map.header()[H_VERSION].store(9, Ordering::Relaxed);
        let e = StateArea::open(area.fd().try_clone_to_owned().unwrap()).unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
        area.map.header()[H_VERSION].store(STATE_AREA_VERSION, Ordering::Relaxed);

        // Not an area.
        // SAFETY: the name is a NUL-terminated literal.
        let raw = unsafe { libc::memfd_create(c"x".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: `raw` is the descriptor just made, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `fd` is open (owned above); no pointers are passed.
        unsafe { libc::ftruncate(fd.as_raw_fd(), 8192) };
        let e = StateArea::open(fd).unwrap_err();
        assert!(e.to_string().contains("magic"), "{e}");
    }

    #[test]
    fn a_dead_threads_records_become_what_a_resend_does() {
        let area = StateArea::create(PAGE).unwrap();
        let journal = area.journal();
        // Four requests on four threads, each stopped at another point
        // (the threads exit without their scope ending: as a crash).
        let steps: [fn(); 5] = [
            || note(77),
            || save_reply(0, b"entry-bytes"),
            || save_entries(&[5, 6, 7]),
            || save_reply(0, &[0; SAVED_REPLY_MAX + 1]),
            || {
                handed(8);
                handed(9);
            },
        ];
        for (k, step) in steps.into_iter().enumerate() {
            let j = journal.clone();
            std::thread::spawn(move || {
                let scope = j.begin(100 + k as u64, 1, Attempt::First);
                step();
                std::mem::forget(scope);
                // The thread's record would be given back at its exit; a
                // dead process gives back nothing.
                HELD.with(|h| h.borrow_mut().drain(..).for_each(std::mem::forget));
            })
            .join()
            .unwrap();
        }
        let next = reopen(&area).journal();
        assert_eq!(next.previous_len(), 5);
        let resend = |u: u64| next.take_previous(u | fuse_abi::UNIQUE_RESEND);
        assert_eq!(
            resend(100),
            (
                Resent::Run,
                Attempt::Resent {
                    started: true,
                    note: 77
                }
            )
        );
        assert_eq!(
            resend(101).0,
            Resent::Replay {
                error: 0,
                body: b"entry-bytes".to_vec()
            }
        );
        assert_eq!(resend(102).0, Resent::ForgetThenRun(vec![5, 6, 7]));
        assert_eq!(resend(103).0, Resent::Run);
        assert_eq!(resend(104).0, Resent::ForgetThenRun(vec![8, 9]));
        // Taken once; an unknown one was never started.
        assert_eq!(
            resend(101),
            (
                Resent::Run,
                Attempt::Resent {
                    started: false,
                    note: 0
                }
            )
        );
        // The records were cleared for the new process.
        assert_eq!(reopen(&area).journal().previous_len(), 0);
    }

    #[test]
    fn a_finished_request_leaves_nothing_and_threads_reuse_records() {
        let area = StateArea::create(PAGE).unwrap();
        let journal = area.journal();
        for u in 0..3 {
            let _scope = journal.begin(u, 1, Attempt::First);
            note(5);
            save_reply(-libc::ENOENT, &[]);
            assert_eq!(attempt(), Attempt::First);
        }
        let j = journal.clone();
        std::thread::spawn(move || {
            let _scope = j.begin(9, 1, Attempt::First);
        })
        .join()
        .unwrap();
        assert_eq!(
            journal.inner.free.lock().unwrap().len(),
            JOURNAL_RECORDS - 1
        );
        assert_eq!(reopen(&area).journal().previous_len(), 0);
    }
}
