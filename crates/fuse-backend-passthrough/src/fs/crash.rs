//! The passthrough's part of crash recovery: its node table and open
//! handles kept in a crash table ([`crate::crash_table`]) as it answers,
//! and taken back by a new process after the old one died
//! ([`PassthroughFs::recover`]); and what a resent request that may have
//! been carried out already does here (see `fuse_server::recovery`).
//!
//! What a resend of a request the dead process had started (its journal
//! record says so; a reply it had computed is replayed by the server
//! without calling the file system) finds, and answers:
//!
//! - UNLINK, RMDIR, RENAME: the name is gone (`ENOENT`): it was done, 0.
//! - MKDIR, MKNOD, SYMLINK: the name exists (`EEXIST`): it was made, the
//!   entry of what is there now.
//! - LINK: the name exists and is the same inode: the entry.
//! - CREATE with `O_EXCL`: opened without `O_EXCL` (the kernel holds the
//!   directory locked while it waits for the answer, so no other client of
//!   the mount made the file meanwhile).
//! - SETXATTR with `XATTR_CREATE` (`EEXIST`), REMOVEXATTR (`ENODATA`): 0.
//!
//! Everything else the passthrough does is idempotent when run again
//! (writes at an offset, truncates, attribute changes, reads), except an
//! `O_APPEND` write without the writeback cache, which lands twice if the
//! process died during it, and RENAME_EXCHANGE, which swaps back if the
//! process died between the swap and its reply being recorded.

use super::*;
use crate::crash_table::CrashTable;
use fuse_server::recovery::{attempt, Attempt, Region};

/// What [`PassthroughFs::recover`] took back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CrashRecovery {
    /// Nodes the kernel holds, restored with their lookup counts.
    pub nodes: usize,
    /// Open handles opened again.
    pub handles: usize,
    /// Handles that could not be opened again (their file is gone: it was
    /// deleted while open and the dead process held its last descriptor);
    /// requests on them fail with `EBADF`.
    pub handles_lost: usize,
}

/// The current request is a resend of one the dead process had started:
/// it may have acted on it already.
pub(super) fn resent_after_start() -> bool {
    matches!(attempt(), Attempt::Resent { started: true, .. })
}

impl PassthroughFs {
    /// Keeps the node table and open handles in `region` (a
    /// `fuse_server::recovery::StateArea`'s file system region, see
    /// [`crate::crash_table`]) from now on, and takes back what a previous
    /// process kept there, if any. Call it before serving, on a
    /// passthrough that has served nothing. Refused, with the reason, where
    /// the table can't be kept (inodes held by descriptor: no file handles
    /// here) or can't be read (another version, another source).
    pub fn recover(&self, region: Region) -> io::Result<CrashRecovery> {
        if let Some(why) = self.file_handle_fallback() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "crash recovery keeps nodes by file handle, and this passthrough has none: {why}"
                ),
            ));
        }
        if !self.inodes.all().is_empty() || self.handles.len() > 0 {
            return Err(io::Error::other(
                "recover needs a passthrough that has served nothing",
            ));
        }
        let root = self.inodes.root();
        let table = Arc::new(CrashTable::open(region, (root.key.ino, root.key.dev))?);
        let (nodes, handles) = table.records();
        self.inodes.set_crash_table(table.clone());
        self.handles.set_crash_table(table.clone());
        let mut done = CrashRecovery {
            nodes: self.inodes.restore_crashed(nodes),
            ..CrashRecovery::default()
        };
        self.creds.root();
        for h in handles {
            let reopened = self.inodes.get(h.nodeid).and_then(|inode| {
                let flags =
                    h.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY);
                let fd = inode.file.reopen(self.proc_self_fd.as_fd(), flags)?;
                Ok((inode, fd, flags))
            });
            match reopened {
                Ok((inode, fd, flags)) => {
                    let handle = if h.dir {
                        Handle::dir(fd, h.nodeid, flags)
                    } else {
                        Handle::file(fd, h.nodeid, flags)
                    };
                    self.handles.restore_crashed(h.fh, handle, h.slot)?;
                    if !h.dir && flags & libc::O_ACCMODE != libc::O_RDONLY {
                        *lock(&inode.writers) += 1;
                        inode.has_writers.store(true, Ordering::Release);
                    }
                    done.handles += 1;
                }
                Err(e) => {
                    tracing::warn!(
                        fh = h.fh,
                        nodeid = h.nodeid,
                        "an open file of the crashed process can't be opened again: {e}"
                    );
                    table.free_handle(h.slot);
                    done.handles_lost += 1;
                }
            }
        }
        if done.nodes > 0 || done.handles > 0 {
            tracing::info!(
                nodes = done.nodes,
                handles = done.handles,
                handles_lost = done.handles_lost,
                "took back the crashed process's node table"
            );
        }
        Ok(done)
    }
}
