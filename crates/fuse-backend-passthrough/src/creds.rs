//! Per-thread credentials: acting as the caller of a request.
//!
//! Linux keeps credentials per thread; the libc wrappers of `setgroups`
//! and `setresuid` change every thread of the process (glibc broadcasts
//! them), so this module uses the raw system calls, which change only the
//! calling thread:
//!
//! - `setfsuid`/`setfsgid` set the ids used for file system access
//!   checks and for the owner of new files. Leaving fsuid 0 drops the
//!   file system capabilities (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
//!   `CAP_FOWNER`, `CAP_FSETID`, `CAP_MKNOD`, ...) from the effective set;
//!   going back to 0 raises them again.
//! - `SYS_setgroups` sets the thread's supplementary groups, read from
//!   `/proc/<tid>/status` of the caller's thread (`Groups:`).
//!
//! Each thread remembers the identity it has (a `thread_local`), so a
//! switch happens only when a request comes from a different identity than
//! the thread's previous one. Requests from root with group 0 (the common
//! case) on a thread that already acts as root cost no system call.
//!
//! Each serving thread also gets its own file system context
//! (`unshare(CLONE_FS)`) with umask 0, once: the kernel has already applied
//! the caller's umask to the modes it sends, and the process's umask is
//! never changed.

use crate::sys::{self, errno, StackPath};
use fuse_server::Context;
use std::cell::RefCell;
use std::io;
use std::os::fd::AsFd;

/// Which identity a thread acts with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    uid: u32,
    gid: u32,
    /// Supplementary groups (for root: the process's own).
    groups: Vec<u32>,
}

struct ThreadState {
    /// `unshare(CLONE_FS)` and `umask(0)` were done on this thread.
    fs_private: bool,
    /// The thread acts as the process (fsuid 0, fsgid 0, the process's
    /// groups). False on a new thread: a thread inherits the credentials of
    /// the thread that started it, which may have been acting as a caller
    /// (a worker starting another worker while serving a user's request),
    /// so its first request sets every id for real.
    is_root: bool,
    /// The identity in force when `is_root` is false.
    current: Identity,
    /// Scratch identity read from /proc, reused across requests.
    wanted: Identity,
    /// Scratch buffer for `/proc/<tid>/status`.
    status: Vec<u8>,
}

thread_local! {
    static STATE: RefCell<ThreadState> = const {
        RefCell::new(ThreadState {
            fs_private: false,
            is_root: false,
            // No caller has this identity: the first switch always happens.
            current: Identity { uid: u32::MAX, gid: u32::MAX, groups: Vec::new() },
            wanted: Identity { uid: 0, gid: 0, groups: Vec::new() },
            status: Vec::new(),
        })
    };
}

/// Switches threads between the process's identity and callers'.
#[derive(Debug)]
pub(crate) struct Creds {
    /// Switching is possible and wanted (the process runs as root).
    enabled: bool,
    /// `FUSE_ALLOW_IDMAP` was agreed: the kernel sends no caller ids
    /// ([`fuse_abi::INVALID_UIDGID`]) except in requests that create an
    /// inode, and has checked permissions itself (`default_permissions`,
    /// which the flag requires).
    idmap: std::sync::atomic::AtomicBool,
    /// The process's supplementary groups, restored when acting as root.
    root_groups: Vec<u32>,
}

fn set_fsuid(uid: u32) {
    // SAFETY: setfsuid has no memory arguments; it changes this thread only.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) };
}

fn set_fsgid(gid: u32) {
    // SAFETY: as for setfsuid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) };
}

fn current_fsuid() -> u32 {
    // SAFETY: an invalid id (-1) only queries the current value.
    unsafe { libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) as u32 }
}

fn set_groups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: `groups` is valid for `len` gid_t values; the raw call
    // changes this thread only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            groups.len() as libc::c_long,
            groups.as_ptr(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Creds {
    /// Switching enabled if `wanted` and the process runs as root.
    pub(crate) fn new(wanted: bool) -> Self {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let root_groups = process_groups().unwrap_or_default();
        Self {
            enabled: wanted && root,
            idmap: std::sync::atomic::AtomicBool::new(false),
            root_groups,
        }
    }

    /// Records that `FUSE_ALLOW_IDMAP` was agreed (see [`Creds::caller`]).
    pub(crate) fn set_idmap(&self, on: bool) {
        self.idmap.store(on, std::sync::atomic::Ordering::Release);
    }

    /// Whether requests run with their callers' credentials.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Makes the calling thread act as the caller of `ctx` (and gives it
    /// umask 0). Fails with `EOVERFLOW` for an unmapped caller id, except
    /// with `FUSE_ALLOW_IDMAP`: then the kernel sends no caller ids in
    /// requests that don't create an inode (it can't tell which mount's
    /// idmapping applies to them) and has checked the caller's permission
    /// itself (`default_permissions`), so the thread acts as the process.
    /// Requests that create an inode use [`Creds::creator`].
    pub(crate) fn caller(&self, ctx: &Context) -> io::Result<()> {
        self.act_as(ctx, false)
    }

    /// [`Creds::caller`] for a request that creates an inode (MKNOD,
    /// MKDIR, SYMLINK, CREATE, TMPFILE): its ids are the new inode's owner,
    /// on an idmapped mount already mapped by the kernel into the file
    /// system's ids; without them (`EOVERFLOW`) nothing is created.
    pub(crate) fn creator(&self, ctx: &Context) -> io::Result<()> {
        self.act_as(ctx, true)
    }

    fn act_as(&self, ctx: &Context, creating: bool) -> io::Result<()> {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            if !s.fs_private {
                make_fs_private()?;
                s.fs_private = true;
            }
            if !self.enabled {
                return Ok(());
            }
            if ctx.uid == fuse_abi::INVALID_UIDGID || ctx.gid == fuse_abi::INVALID_UIDGID {
                if !creating && self.idmap.load(std::sync::atomic::Ordering::Acquire) {
                    self.to_root(&mut s);
                    return Ok(());
                }
                return Err(errno(libc::EOVERFLOW));
            }
            if ctx.uid == 0 && ctx.gid == 0 {
                self.to_root(&mut s);
                return Ok(());
            }
            let ThreadState { wanted, status, .. } = &mut *s;
            wanted.uid = ctx.uid;
            wanted.gid = ctx.gid;
            wanted.groups.clear();
            if ctx.pid != 0 {
                // A caller that is gone has no groups to read: act with none.
                if let Err(e) = read_groups(ctx.pid, status, &mut wanted.groups) {
                    unreadable_proc_once("callers' supplementary groups", &e);
                }
            }
            if !s.is_root && s.current == s.wanted {
                return Ok(());
            }
            self.switch(&mut s)
        })
    }

    /// Makes the calling thread act as the process itself (root).
    pub(crate) fn root(&self) {
        if !self.enabled {
            return;
        }
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            if !s.is_root {
                self.to_root(&mut s);
            }
        })
    }

    fn to_root(&self, s: &mut ThreadState) {
        if s.is_root {
            return;
        }
        set_fsuid(0);
        set_fsgid(0);
        if let Err(e) = set_groups(&self.root_groups) {
            tracing::warn!("restoring the supplementary groups: {e}");
        }
        s.is_root = true;
    }

    /// Switches to `s.wanted` (which then becomes `s.current`).
    fn switch(&self, s: &mut ThreadState) -> io::Result<()> {
        let to = &s.wanted;
        let uid = to.uid;
        if let Err(e) = set_groups(&to.groups) {
            s.is_root = false;
            self.to_root(s);
            return Err(e);
        }
        set_fsgid(to.gid);
        set_fsuid(uid);
        if current_fsuid() != uid {
            // Could not switch: go back to a known state and refuse.
            s.is_root = false;
            self.to_root(s);
            return Err(errno(libc::EPERM));
        }
        std::mem::swap(&mut s.current, &mut s.wanted);
        s.is_root = false;
        Ok(())
    }
}

/// Runs `f` with file system uid 0 (and so the process's file system
/// capabilities, `CAP_DAC_READ_SEARCH` among them) on this thread, then
/// restores the thread's file system uid. For the daemon's own
/// bookkeeping while a thread acts as a caller: reopening a known inode
/// from its file handle (`open_by_handle_at` needs the capability).
pub(crate) fn with_fs_caps<T>(f: impl FnOnce() -> T) -> T {
    // A thread known to act as the process needs no switch (and no
    // system call to ask).
    if STATE.with(|s| s.borrow().is_root) {
        return f();
    }
    let prev = current_fsuid();
    if prev == 0 {
        return f();
    }
    set_fsuid(0);
    let r = f();
    set_fsuid(prev);
    r
}

/// Gives this thread its own umask (0), cwd and root: `unshare(CLONE_FS)`.
fn make_fs_private() -> io::Result<()> {
    // SAFETY: unshare(CLONE_FS) only affects this thread's fs_struct.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: umask has no preconditions; after the unshare it is this thread's.
    unsafe { libc::umask(0) };
    Ok(())
}

/// The process's supplementary groups.
fn process_groups() -> io::Result<Vec<u32>> {
    // SAFETY: a size query with a null list.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut groups = vec![0u32; n as usize];
    // SAFETY: `groups` has room for `n` ids.
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(n as usize);
    Ok(groups)
}

/// Warns once per process when `/proc/<tid>/status` of a caller can't be
/// read for a reason other than the caller being gone (ENOENT, ESRCH):
/// a sandbox that hides /proc would otherwise go unnoticed, each request
/// quietly served without what the read gives (`what`).
pub(crate) fn unreadable_proc_once(what: &str, e: &io::Error) {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) {
        return;
    }
    if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!("reading a caller's /proc/<tid>/status for {what}: {e}");
    }
}

/// Reads the `Groups:` line of `/proc/<tid>/status` into `out`.
fn read_groups(tid: u32, buf: &mut Vec<u8>, out: &mut Vec<u32>) -> io::Result<()> {
    let path = StackPath::new(b"/proc/", tid as u64, b"/status");
    let fd = sys::open(path.as_cstr(), libc::O_RDONLY, 0)?;
    if buf.len() < 4096 {
        buf.try_reserve(4096 - buf.len())
            .map_err(|_| errno(libc::ENOMEM))?;
        buf.resize(4096, 0);
    }
    let mut len = 0;
    loop {
        if len == buf.len() {
            let more = buf.len();
            buf.try_reserve(more).map_err(|_| errno(libc::ENOMEM))?;
            buf.resize(buf.len() + more, 0);
        }
        let n = sys::read(fd.as_fd(), &mut buf[len..])?;
        if n == 0 {
            break;
        }
        len += n;
        // The Groups line comes early; stop once it is complete.
        if let Some(line) = find_groups_line(&buf[..len]) {
            return parse_groups(line, out);
        }
    }
    match find_groups_line(&buf[..len]) {
        Some(line) => parse_groups(line, out),
        None => Ok(()),
    }
}

/// The numbers of a complete `Groups:` line, if `status` has one.
fn find_groups_line(status: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\nGroups:";
    let at = status.windows(KEY.len()).position(|w| w == KEY)?;
    let rest = &status[at + KEY.len()..];
    let end = rest.iter().position(|&b| b == b'\n')?;
    Some(&rest[..end])
}

fn parse_groups(line: &[u8], out: &mut Vec<u32>) -> io::Result<()> {
    for word in line.split(|&b| b == b' ' || b == b'\t') {
        if word.is_empty() {
            continue;
        }
        let mut v: u32 = 0;
        for &d in word {
            if !d.is_ascii_digit() {
                return Err(errno(libc::EINVAL));
            }
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add((d - b'0') as u32))
                .ok_or_else(|| errno(libc::EINVAL))?;
        }
        out.try_reserve(1).map_err(|_| errno(libc::ENOMEM))?;
        out.push(v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(uid: u32, gid: u32) -> Context {
        Context {
            unique: 1,
            nodeid: 1,
            uid,
            gid,
            pid: 0,
        }
    }

    /// A worker that starts another worker while it acts as a caller
    /// passes that caller's fsuid on to the new thread; the new thread must
    /// not take itself for root (it once created a root caller's file as
    /// `nobody`). Runs in threads of its own, so no other test's thread
    /// changes identity.
    #[test]
    fn a_thread_started_while_acting_as_a_caller_starts_over_needs_root() {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "needs root (CI runs as root)"
        );
        let creds = Creds::new(true);
        assert!(creds.enabled());
        std::thread::scope(|outer| {
            outer
                .spawn(|| {
                    creds.caller(&ctx(65534, 65534)).unwrap();
                    assert_eq!(current_fsuid(), 65534);
                    std::thread::scope(|inner| {
                        inner
                            .spawn(|| {
                                assert_eq!(current_fsuid(), 65534, "inherited from its parent");
                                creds.caller(&ctx(0, 0)).unwrap();
                                assert_eq!(current_fsuid(), 0, "a root caller acts as root");
                            })
                            .join()
                            .unwrap();
                        inner
                            .spawn(|| {
                                creds.root();
                                assert_eq!(current_fsuid(), 0, "root() on a new thread");
                            })
                            .join()
                            .unwrap();
                    });
                    creds.root();
                    assert_eq!(current_fsuid(), 0);
                })
                .join()
                .unwrap();
        });
    }

    #[test]
    fn parses_the_groups_line() {
        let status = b"Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 1000 \nNgid:\t0\n";
        let line = find_groups_line(status).unwrap();
        let mut out = Vec::new();
        parse_groups(line, &mut out).unwrap();
        assert_eq!(out, [4, 24, 27, 1000]);
        assert!(find_groups_line(b"Name:\tx\nGroups:\t1 2").is_none());
        let mut out = Vec::new();
        parse_groups(find_groups_line(b"x\nGroups:\t\n").unwrap(), &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn reads_our_own_groups() {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        read_groups(tid, &mut buf, &mut out).unwrap();
        let mut expected = process_groups().unwrap();
        expected.sort();
        out.sort();
        assert_eq!(out, expected);
    }
}
