//! Kernel passthrough (`FUSE_PASSTHROUGH`, Linux 6.9+): the kernel serves
//! READ, WRITE, splice and mmap of an open regular file straight from the
//! backing file, without asking the daemon.
//!
//! One backing id per inode: the first open of an inode registers the
//! descriptor it opened (`FUSE_DEV_IOC_BACKING_OPEN`), later opens reuse
//! the id, and the release of the last open closes it. The kernel binds a
//! FUSE inode to one backing file while any passthrough file of it is open
//! and refuses (the user's open(2) fails with EIO) an open of the same
//! inode that is not passthrough or names another backing file, and a
//! passthrough open of an inode that has cached (non-passthrough) files
//! open. So the io mode is decided per inode, not per open:
//!
//! - an inode with passthrough opens keeps answering with its id;
//! - an inode with daemon-served (fallback) opens keeps being served by
//!   the daemon until they are all released;
//! - otherwise the open registers a new id, or falls back if the kernel
//!   refuses it (logged once per reason; `EPERM` turns passthrough off for
//!   the connection, since it means the process may not use it at all).
//!
//! With `FUSE_HANDLE_KILLPRIV_V2`, files with set-user-ID, or set-group-ID
//! with group execute, are served by the daemon: the kernel then leaves
//! clearing those bits on write to the daemon's WRITE, which passthrough
//! never sends. (Without it the kernel clears them itself before a
//! passthrough write, with a SETATTR, as for any write.)

use crate::inode::IdMap;
use fuse_server::{BackingFiles, BackingId};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// How an inode's open files do their I/O.
struct InodeIo {
    /// The backing id of its passthrough opens; `None`: its opens are
    /// served by the daemon.
    backing: Option<BackingId>,
    /// Open handles counted here.
    opens: u64,
}

#[derive(Default)]
struct State {
    /// Inodes with open handles, by node id.
    inodes: IdMap<InodeIo>,
    /// Which inode each counted handle belongs to.
    handles: IdMap<u64>,
}

/// An open being answered: what it counted, undone if its handle is never
/// made ([`Passthrough::abandon`]).
#[must_use]
pub(crate) struct Ticket {
    nodeid: u64,
    /// The backing id the reply carries (0: none).
    pub backing_id: i32,
}

/// Counts of what passthrough did, for tests and diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassthroughStats {
    /// INIT agreed to passthrough and the connection can register backing
    /// files (it turns off again if the kernel refuses with `EPERM`).
    pub active: bool,
    /// Backing ids registered now (one per inode with passthrough opens).
    pub live_backing_ids: u64,
    /// Backing ids registered since the mount.
    pub registered: u64,
    /// Opens (OPEN, CREATE, TMPFILE) answered with a backing id.
    pub passthrough_opens: u64,
    /// Opens of regular files served by the daemon while passthrough was
    /// wanted (the kernel refused, or the inode was in daemon mode).
    pub fallback_opens: u64,
    /// Why passthrough is off, or why the last refused open fell back.
    pub reason: Option<String>,
}

/// The passthrough state of one [`crate::PassthroughFs`].
pub(crate) struct Passthrough {
    /// Wanted by the configuration.
    wanted: bool,
    files: OnceLock<Arc<dyn BackingFiles>>,
    /// INIT agreed and no `EPERM` since.
    active: AtomicBool,
    state: Mutex<State>,
    registered: AtomicU64,
    passthrough_opens: AtomicU64,
    fallback_opens: AtomicU64,
    reason: Mutex<Option<String>>,
    /// Errnos already logged (a bit per errno below 64, bit 63 for others).
    logged: AtomicU64,
    /// Backing ids of an earlier process (live upgrade), by node id,
    /// waiting for the connection's registry ([`Passthrough::attach`]).
    adopted: Mutex<Vec<(u64, i32)>>,
}

/// One inode's passthrough state as a live upgrade moves it: its node id,
/// backing id (0: served by the daemon), and counted opens.
pub(crate) type SavedInodeIo = (u64, i32, u64);

impl Passthrough {
    pub(crate) fn new(wanted: bool) -> Self {
        Self {
            wanted,
            files: OnceLock::new(),
            active: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            registered: AtomicU64::new(0),
            passthrough_opens: AtomicU64::new(0),
            fallback_opens: AtomicU64::new(0),
            reason: Mutex::new(None),
            logged: AtomicU64::new(0),
            adopted: Mutex::new(Vec::new()),
        }
    }

    /// The state a live upgrade moves: every inode with counted opens, and
    /// which inode each counted handle belongs to.
    pub(crate) fn save(&self) -> (Vec<SavedInodeIo>, Vec<(u64, u64)>) {
        let state = self.state();
        let mut inodes: Vec<SavedInodeIo> = state
            .inodes
            .iter()
            .map(|(&n, io)| (n, io.backing.as_ref().map_or(0, BackingId::id), io.opens))
            .collect();
        inodes.sort_unstable();
        let mut handles: Vec<(u64, u64)> = state.handles.iter().map(|(&f, &n)| (f, n)).collect();
        handles.sort_unstable();
        (inodes, handles)
    }

    /// Takes back an inode's state from an earlier process (before INIT
    /// is resumed): its backing id is adopted once the connection's
    /// registry is attached.
    pub(crate) fn restore_inode(&self, nodeid: u64, backing_id: i32, opens: u64) {
        self.state().inodes.insert(
            nodeid,
            InodeIo {
                backing: None,
                opens,
            },
        );
        if backing_id > 0 {
            self.adopted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((nodeid, backing_id));
        }
    }

    /// Takes back which inode a counted handle belongs to.
    pub(crate) fn restore_handle(&self, fh: u64, nodeid: u64) {
        self.state().handles.insert(fh, nodeid);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The transport's registry (before INIT); backing ids taken over from
    /// an earlier process are owned through it from now on.
    pub(crate) fn attach(&self, files: Arc<dyn BackingFiles>) {
        let adopted = std::mem::take(&mut *self.adopted.lock().unwrap_or_else(|e| e.into_inner()));
        let mut state = self.state();
        for (nodeid, id) in adopted {
            if let Some(io) = state.inodes.get_mut(&nodeid) {
                io.backing = BackingId::adopt(&files, id);
            }
        }
        drop(state);
        let _ = self.files.set(files);
    }

    /// Whether to ask for `FUSE_PASSTHROUGH` at INIT: wanted, a registry
    /// is there, and the process may register backing files. Records why
    /// not otherwise.
    pub(crate) fn can_ask(&self) -> bool {
        if !self.wanted {
            return false;
        }
        if self.files.get().is_none() {
            self.set_reason(
                "the transport cannot register backing files (no /dev/fuse descriptor)".into(),
            );
            return false;
        }
        if let Err(why) = may_register() {
            self.set_reason(why);
            return false;
        }
        true
    }

    /// Whether the daemon wants passthrough at all (the configuration).
    pub(crate) fn wanted(&self) -> bool {
        self.wanted
    }

    /// INIT is done: passthrough is on if it was agreed.
    pub(crate) fn set_active(&self, on: bool) {
        self.active.store(on, Ordering::Release);
    }

    /// Passthrough is in use for new opens.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    pub(crate) fn set_reason(&self, why: String) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// Decides the io mode of a new open of the regular file `nodeid`
    /// whose backing descriptor is `fd` (`daemon_only`, asked only when a
    /// new id would be registered: the file must be served by the daemon,
    /// e.g. it is set-user-ID with `FUSE_HANDLE_KILLPRIV_V2`). Counts the
    /// open; the
    /// caller then [`bind`](Self::bind)s it to its handle or
    /// [`abandon`](Self::abandon)s it. `None` when passthrough is off:
    /// nothing to count.
    pub(crate) fn open(
        &self,
        nodeid: u64,
        fd: BorrowedFd<'_>,
        daemon_only: impl FnOnce() -> bool,
    ) -> Option<Ticket> {
        if !self.wanted || self.files.get().is_none() {
            return None;
        }
        let mut state = self.state();
        if let Some(io) = state.inodes.get_mut(&nodeid) {
            // Even after passthrough turned off (EPERM), an inode the kernel
            // holds in passthrough mode must get its id.
            io.opens += 1;
            let backing_id = io.backing.as_ref().map_or(0, BackingId::id);
            drop(state);
            self.count(backing_id);
            return Some(Ticket { nodeid, backing_id });
        }
        if !self.active() {
            return None;
        }
        let backing = if daemon_only() {
            None
        } else {
            self.register(fd)
        };
        let backing_id = backing.as_ref().map_or(0, BackingId::id);
        state.inodes.insert(nodeid, InodeIo { backing, opens: 1 });
        drop(state);
        self.count(backing_id);
        Some(Ticket { nodeid, backing_id })
    }

    fn count(&self, backing_id: i32) {
        if backing_id > 0 {
            self.passthrough_opens.fetch_add(1, Ordering::Relaxed);
        } else {
            self.fallback_opens.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Registers `fd`; on refusal logs (once per errno) and returns `None`.
    fn register(&self, fd: BorrowedFd<'_>) -> Option<BackingId> {
        let files = self.files.get()?;
        match BackingId::open(files, fd) {
            Ok(id) => {
                self.registered.fetch_add(1, Ordering::Relaxed);
                Some(id)
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                let why = refusal_reason(&e);
                let bit = 1u64 << (errno as u32).min(63);
                if self.logged.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                    tracing::warn!(
                        "kernel passthrough refused ({why}): serving READ and WRITE of such \
                         files in the daemon (logged once)"
                    );
                }
                if errno == libc::EPERM {
                    // The process may not register backing files at all.
                    self.set_active(false);
                }
                self.set_reason(why);
                None
            }
        }
    }

    /// The open got handle `fh`.
    pub(crate) fn bind(&self, ticket: Ticket, fh: u64) {
        self.state().handles.insert(fh, ticket.nodeid);
    }

    /// The open's handle could not be made: uncount it.
    pub(crate) fn abandon(&self, ticket: Ticket) {
        let dropped = {
            let mut state = self.state();
            uncount(&mut state, ticket.nodeid)
        };
        drop(dropped);
    }

    /// Handle `fh` was released: uncounts it; the inode's backing id is
    /// closed with its last open.
    pub(crate) fn release(&self, fh: u64) {
        let dropped = {
            let mut state = self.state();
            match state.handles.remove(&fh) {
                Some(nodeid) => uncount(&mut state, nodeid),
                None => None,
            }
        };
        // FUSE_DEV_IOC_BACKING_CLOSE outside the lock.
        drop(dropped);
    }

    /// The connection ended: every id is closed, every count dropped.
    pub(crate) fn clear(&self) {
        let old = std::mem::take(&mut *self.state());
        drop(old);
        self.set_active(false);
    }

    pub(crate) fn stats(&self) -> PassthroughStats {
        let live = self
            .state()
            .inodes
            .values()
            .filter(|io| io.backing.is_some())
            .count() as u64;
        PassthroughStats {
            active: self.active(),
            live_backing_ids: live,
            registered: self.registered.load(Ordering::Relaxed),
            passthrough_opens: self.passthrough_opens.load(Ordering::Relaxed),
            fallback_opens: self.fallback_opens.load(Ordering::Relaxed),
            reason: self
                .reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

/// Drops one open of `nodeid`; returns its backing id if that was the last.
fn uncount(state: &mut State, nodeid: u64) -> Option<BackingId> {
    let io = state.inodes.get_mut(&nodeid)?;
    io.opens = io.opens.saturating_sub(1);
    if io.opens > 0 {
        return None;
    }
    state.inodes.remove(&nodeid).and_then(|io| io.backing)
}

/// What a refused `FUSE_DEV_IOC_BACKING_OPEN` means.
fn refusal_reason(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) => format!(
            "FUSE_DEV_IOC_BACKING_OPEN: {e}: the daemon lacks CAP_SYS_ADMIN in the initial user \
             namespace, or INIT did not agree to passthrough"
        ),
        Some(libc::ELOOP) => format!(
            "FUSE_DEV_IOC_BACKING_OPEN: {e}: the backing file's file system is stacked as deep \
             as the max_stack_depth agreed at INIT (an overlayfs or FUSE mount under the source)"
        ),
        Some(libc::EINVAL | libc::EISDIR) => {
            format!("FUSE_DEV_IOC_BACKING_OPEN: {e}: not a regular file")
        }
        _ => format!("FUSE_DEV_IOC_BACKING_OPEN: {e}"),
    }
}

/// `CAP_SYS_ADMIN`'s bit number (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;

/// Whether this process may register backing files: the kernel wants
/// `CAP_SYS_ADMIN` in the initial user namespace.
fn may_register() -> Result<(), String> {
    if !in_initial_user_namespace() {
        return Err(
            "the daemon runs in a user namespace: the kernel lets only CAP_SYS_ADMIN in \
                    the initial user namespace register backing files"
                .into(),
        );
    }
    match effective_caps() {
        Some(caps) if caps & (1 << CAP_SYS_ADMIN) == 0 => {
            Err("the daemon lacks CAP_SYS_ADMIN, which registering backing files needs".into())
        }
        _ => Ok(()),
    }
}

/// The initial user namespace maps every id to itself
/// (`/proc/self/uid_map` is `0 0 4294967295`).
fn in_initial_user_namespace() -> bool {
    match std::fs::read_to_string("/proc/self/uid_map") {
        Ok(map) => {
            let fields: Vec<&str> = map.split_whitespace().collect();
            fields == ["0", "0", "4294967295"]
        }
        // No /proc: assume so; the ioctl will tell.
        Err(_) => true,
    }
}

/// The effective capability set (`CapEff:` of `/proc/self/status`).
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// The `max_stack_depth` for backing files under the directory `fd`: 2
/// when it is on a stacked file system (overlayfs, ecryptfs, FUSE), else 1
/// (which lets the mount itself be a layer of an overlayfs).
pub(crate) fn stack_depth_for(fd: BorrowedFd<'_>) -> u32 {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    const ECRYPTFS_SUPER_MAGIC: i64 = 0xf15f;
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    match crate::sys::fstatfs(fd) {
        // `f_type` is not an i64 on every architecture.
        #[allow(clippy::unnecessary_cast)]
        Ok(st) => match st.f_type as i64 {
            OVERLAYFS_SUPER_MAGIC | ECRYPTFS_SUPER_MAGIC | FUSE_SUPER_MAGIC => 2,
            _ => 1,
        },
        Err(_) => 1,
    }
}

/// Whether a file with `mode` must be served by the daemon when the daemon
/// clears privileges on WRITE (`FUSE_HANDLE_KILLPRIV_V2`): set-user-ID, or
/// set-group-ID with group execute.
pub(crate) fn privileged_mode(mode: u32) -> bool {
    mode & libc::S_ISUID != 0
        || mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[derive(Default)]
    struct Fake {
        next: Mutex<i32>,
        open: Mutex<Vec<i32>>,
        refuse: Mutex<Option<i32>>,
    }

    impl BackingFiles for Fake {
        fn open_backing(&self, _fd: BorrowedFd<'_>) -> io::Result<i32> {
            if let Some(errno) = *self.refuse.lock().unwrap() {
                return Err(io::Error::from_raw_os_error(errno));
            }
            let mut next = self.next.lock().unwrap();
            *next += 1;
            self.open.lock().unwrap().push(*next);
            Ok(*next)
        }

        fn close_backing(&self, id: i32) -> io::Result<()> {
            let mut open = self.open.lock().unwrap();
            let i = open.iter().position(|&x| x == id).expect("open id");
            open.remove(i);
            Ok(())
        }
    }

    /// A passthrough on a fake kernel, and a file to open through it.
    fn setup() -> (Arc<Fake>, Passthrough, std::fs::File) {
        let fake = Arc::new(Fake::default());
        let p = Passthrough::new(true);
        p.attach(fake.clone());
        p.set_active(true);
        let file = std::fs::File::open("/proc/self/status").unwrap();
        (fake, p, file)
    }

    #[test]
    fn one_id_per_inode_closed_at_the_last_release() {
        let (fake, p, file) = setup();
        let fd = file.as_fd();
        let a = p.open(10, fd, || false).unwrap();
        let b = p.open(10, fd, || false).unwrap();
        let c = p.open(11, fd, || false).unwrap();
        assert_eq!((a.backing_id, b.backing_id, c.backing_id), (1, 1, 2));
        p.bind(a, 100);
        p.bind(b, 101);
        p.bind(c, 102);
        assert_eq!(p.stats().live_backing_ids, 2);
        p.release(100);
        assert_eq!(*fake.open.lock().unwrap(), [1, 2]);
        p.release(101);
        assert_eq!(*fake.open.lock().unwrap(), [2]);
        // An unknown handle (a directory, a fallback-free mount) is ignored.
        p.release(555);
        p.release(102);
        assert!(fake.open.lock().unwrap().is_empty());
        let s = p.stats();
        assert_eq!(
            (s.live_backing_ids, s.registered, s.passthrough_opens),
            (0, 2, 3)
        );
    }

    #[test]
    fn refused_and_daemon_only_inodes_stay_in_daemon_mode_while_open() {
        let (fake, p, file) = setup();
        let fd = file.as_fd();
        *fake.refuse.lock().unwrap() = Some(libc::ELOOP);
        let a = p.open(10, fd, || false).unwrap();
        assert_eq!(a.backing_id, 0);
        // The kernel would take it now, but the inode has a cached open:
        // a passthrough open would fail with EIO.
        *fake.refuse.lock().unwrap() = None;
        let b = p.open(10, fd, || false).unwrap();
        assert_eq!(b.backing_id, 0);
        p.bind(a, 1);
        p.abandon(b);
        p.release(1);
        // All closed: the next open tries again.
        let c = p.open(10, fd, || false).unwrap();
        assert_eq!(c.backing_id, 1);
        p.bind(c, 2);
        // Daemon-only opens of an inode already in passthrough still get
        // its id (the kernel insists); of another inode they don't.
        assert_eq!(p.open(10, fd, || true).unwrap().backing_id, 1);
        assert_eq!(p.open(12, fd, || true).unwrap().backing_id, 0);
        assert!(p.active());
        let s = p.stats();
        assert_eq!((s.fallback_opens, s.passthrough_opens), (3, 2));
        assert!(s.reason.unwrap().contains("stacked"));
    }

    #[test]
    fn eperm_turns_passthrough_off() {
        let (fake, p, file) = setup();
        *fake.refuse.lock().unwrap() = Some(libc::EPERM);
        let t = p.open(10, file.as_fd(), || false).unwrap();
        assert_eq!(t.backing_id, 0);
        p.bind(t, 1);
        assert!(!p.active());
        assert!(p.open(11, file.as_fd(), || false).is_none());
        p.release(1);
        assert_eq!(p.stats().fallback_opens, 1);
    }
}
