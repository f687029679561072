//! The passthrough's part of crash recovery: its node table and open
//! handles kept in a crash table (`crash_table.rs`) as it answers,
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
//! - OPEN, OPENDIR, CREATE: the handle the first attempt made (noted in
//!   the record) is closed, then a new one is made.
//! - An `O_APPEND` WRITE (without the writeback cache, the backing file
//!   appends): the first attempt noted where the end was; the bytes found
//!   there that equal the request's are not appended again, only the rest.
//!
//! Everything else the passthrough does is idempotent when run again
//! (writes at an offset, truncates, attribute changes, reads), except
//! RENAME_EXCHANGE, which swaps back if the process died between the swap
//! and its reply being recorded, and FALLOCATE's collapse and insert
//! range. SETXATTR with `XATTR_CREATE` that finds the name (`EEXIST`) and
//! REMOVEXATTR that finds none (`ENODATA`) answer what they find.

use super::*;
use crate::crash_table::CrashTable;
use fuse_server::recovery::{attempt, Attempt, Region};
use fuse_server::ZeroCopyReader;
use std::os::fd::AsRawFd;

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
    /// Before an OPEN, OPENDIR or CREATE: on a resend the dead process had
    /// started, closes the handle its first attempt made (the handle table
    /// notes each handle's number in the request's journal record before
    /// the crash table keeps it, and no later process numbers a handle the
    /// same), which the kernel never got: the request then runs again and
    /// makes another. Without this the handle, its descriptor
    /// and its kernel passthrough backing id stayed until the unmount.
    pub(super) fn close_resent_handle(&self, ctx: &Context) {
        let Attempt::Resent {
            started: true,
            note,
        } = attempt()
        else {
            return;
        };
        let Some(h) = note.checked_sub(1).and_then(|fh| self.handles.get(fh)) else {
            return;
        };
        let fh = note - 1;
        let args = ReleaseArgs {
            fh,
            flags: h.flags as u32,
            release_flags: ReleaseFlags::empty(),
            lock_owner: 0,
        };
        let (nodeid, dir) = (h.nodeid, h.dir.is_some());
        drop(h);
        let closed = if dir {
            self.releasedir(ctx, nodeid, &args)
        } else {
            self.release(ctx, nodeid, &args)
        };
        tracing::debug!(
            fh,
            nodeid,
            ?closed,
            "resent open: the handle its first attempt made is closed"
        );
    }
}

/// Before an appending (`O_APPEND`) WRITE on `fd`: on a resend the dead
/// process had started, the bytes of `data` its first attempt appended
/// (found at the end it noted, equal to the request's): consumed from
/// `data`, their count returned, so that only the rest is appended. On
/// any other attempt, notes where the end is for a later resend; 0.
pub(super) fn append_done_before(
    fd: BorrowedFd<'_>,
    data: &mut dyn ZeroCopyReader,
) -> io::Result<usize> {
    let size = sys::statx_fd(fd, libc::STATX_SIZE)?.stx_size;
    let noted = match attempt() {
        Attempt::Resent {
            started: true,
            note,
        } if note != 0 => note - 1,
        _ => {
            // +1: a note of 0 is no note.
            fuse_server::recovery::note(size + 1);
            return Ok(0);
        }
    };
    let bytes = data.unconsumed();
    if size <= noted || bytes.len() != data.remaining() {
        return Ok(0);
    }
    let landed = ((size - noted) as usize).min(bytes.len());
    // The handle may be write-only: read through a descriptor of its own.
    let reader = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let mut there = vec![0u8; landed];
    if std::os::unix::fs::FileExt::read_exact_at(&reader, &mut there, noted).is_err() {
        return Ok(0);
    }
    if there != bytes[..landed] {
        // Someone else's bytes: this write never landed.
        return Ok(0);
    }
    tracing::debug!(landed, "resent append: its first attempt's bytes are there");
    data.consume(landed);
    fuse_server::recovery::note(size + 1);
    Ok(landed)
}

impl PassthroughFs {
    /// Keeps the node table and open handles in `region` (a
    /// `fuse_server::recovery::StateArea`'s file system region, see
    /// `crash_table.rs`) from now on, and takes back what a previous
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
        let table = Arc::new(CrashTable::open(region, (root.key.ino, root.key.dev()))?);
        let (nodes, handles) = table.records();
        self.inodes.set_crash_table(table.clone());
        self.handles.set_crash_table(table.clone());
        self.handles.number_from(table.handles_numbered_below());
        let mut done = CrashRecovery {
            nodes: self.inodes.restore_crashed(nodes),
            ..CrashRecovery::default()
        };
        self.creds.root();
        // Kernel passthrough: each inode's backing id and open count, from
        // its handles.
        let mut passthrough: std::collections::BTreeMap<u64, (i32, u64)> = Default::default();
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
                    let mut handle = handle;
                    handle.passthrough_id = h.passthrough_id;
                    self.handles.restore_crashed(h.fh, handle, h.slot)?;
                    if h.passthrough_id >= 0 {
                        let io = passthrough.entry(h.nodeid).or_insert((h.passthrough_id, 0));
                        io.1 += 1;
                        self.pt.restore_handle(h.fh, h.nodeid);
                    }
                    if !h.dir && flags & libc::O_ACCMODE != libc::O_RDONLY {
                        *lock(&inode.cold().writers) += 1;
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
        for (nodeid, (backing_id, opens)) in passthrough {
            // Adopted (owned, closed at the last release) once the session
            // attaches the connection's backing files.
            self.pt.restore_inode(nodeid, backing_id, opens);
        }
        // The previous process's source watch died with it: names and
        // attributes the kernel cached for long on its word are dropped
        // once the session can notify ([`PassthroughFs::resumed`]), since
        // nothing saw the changes made since.
        // Not where the supervisor's watch group outlived that process
        // ([`PassthroughFs::inherit_watch_group`]): it saw them.
        if done.nodes > 0 && self.cfg.source_watch_wanted() && lock(&self.inherited_watch).is_none()
        {
            self.watch_not_taken_over.store(true, Ordering::Release);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::ctx;
    use crate::PassthroughConfig;
    use fuse_server::recovery::StateArea;
    use fuse_server::SliceReader;
    use std::os::unix::fs::FileExt;
    use test_support::errno_of;

    fn mkdir_args() -> MkdirArgs {
        MkdirArgs {
            mode: 0o755,
            umask: 0,
        }
    }

    /// What the passthrough answers to requests that find what their first
    /// attempt may have done: as the module says when the dead process had
    /// started them, as always otherwise.
    #[test]
    fn a_resend_the_dead_process_had_started_finds_its_work_done() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PassthroughFs::new(dir.path(), PassthroughConfig::default()).unwrap();
        let area = StateArea::create(1 << 20).unwrap();
        let journal = area.journal();
        std::fs::create_dir(dir.path().join("made")).unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let c = ctx();
        let root = fuse_abi::ROOT_ID;

        // A name that is gone and one that exists fail as they call for.
        let fails_as_named = || {
            assert_eq!(errno_of(fs.unlink(&c, root, c"gone")), libc::ENOENT);
            assert_eq!(
                errno_of(fs.mkdir(&c, root, c"made", &mkdir_args())),
                libc::EEXIST
            );
        };

        // First attempts: the errors.
        let first = journal.begin(1, 0, Attempt::First);
        fails_as_named();
        drop(first);
        // A resend of a request the dead process never started: the same.
        let never = journal.begin(
            2 | fuse_abi::UNIQUE_RESEND,
            0,
            Attempt::Resent {
                started: false,
                note: 0,
            },
        );
        fails_as_named();
        drop(never);

        // Started: the work found done is answered as done.
        let _resent = journal.begin(
            3 | fuse_abi::UNIQUE_RESEND,
            0,
            Attempt::Resent {
                started: true,
                note: 0,
            },
        );
        fs.unlink(&c, root, c"gone").expect("UNLINK of a name gone");
        fs.rmdir(&c, root, c"gone").expect("RMDIR of a name gone");
        let rename = RenameArgs {
            newdir: root,
            name: c"gone",
            newname: c"there",
            flags: Default::default(),
        };
        fs.rename(&c, root, &rename).expect("RENAME of a name gone");
        let made = fs
            .mkdir(&c, root, c"made", &mkdir_args())
            .expect("MKDIR of a name made");
        assert_ne!(made.nodeid, 0);
        fs.forget(&c, made.nodeid, 1);
        let file = fs.lookup(&c, root, c"file").unwrap();
        let linked = fs
            .link(&c, file.nodeid, root, c"file")
            .expect("LINK to itself");
        assert_eq!(linked.nodeid, file.nodeid);
        // Another file under the name: still EEXIST.
        let other = fs.lookup(&c, root, c"made").unwrap();
        assert_eq!(
            errno_of(fs.link(&c, other.nodeid, root, c"file")),
            libc::EEXIST
        );
        fs.forget(&c, other.nodeid, 1);
        fs.forget(&c, file.nodeid, 2);
        let create = CreateArgs {
            flags: (libc::O_CREAT | libc::O_EXCL | libc::O_RDWR) as u32,
            mode: 0o644,
            umask: 0,
            open_flags: Default::default(),
        };
        let (entry, opened) = fs
            .create(&c, root, c"file", &create)
            .expect("CREATE O_EXCL");
        fs.release(
            &c,
            entry.nodeid,
            &ReleaseArgs {
                fh: opened.fh,
                ..ReleaseArgs::default()
            },
        )
        .unwrap();
        fs.forget(&c, entry.nodeid, 1);
        assert_eq!(std::fs::read(dir.path().join("file")).unwrap(), b"x");
    }

    /// A passthrough of `dir` keeping its table in `area` (file handles
    /// need `CAP_DAC_READ_SEARCH` in the initial user namespace: real root,
    /// hence the tests' `needs_root`).
    fn recovering(dir: &std::path::Path, area: &StateArea) -> (PassthroughFs, CrashRecovery) {
        let fs = PassthroughFs::new(dir, PassthroughConfig::default()).unwrap();
        let got = fs
            .recover(area.fs_region())
            .unwrap_or_else(|e| panic!("crash recovery needs file handles (real root): {e}"));
        (fs, got)
    }

    #[test]
    fn recovery_is_refused_without_file_handles() {
        let dir = tempfile::tempdir().unwrap();
        let area = StateArea::create(1 << 20).unwrap();
        let config = PassthroughConfig::default().file_handles(false);
        let fs = PassthroughFs::new(dir.path(), config).unwrap();
        let e = fs.recover(area.fs_region()).unwrap_err();
        assert!(e.to_string().contains("file handle"), "{e}");
    }

    #[test]
    fn a_resent_append_appends_only_what_did_not_land_needs_root() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, b"abc").unwrap();
        let area = StateArea::create(1 << 20).unwrap();
        let (fs, _) = recovering(dir.path(), &area);
        let journal = area.journal();
        let c = ctx();
        let log = fs.lookup(&c, fuse_abi::ROOT_ID, c"log").unwrap();
        let open = OpenArgs {
            flags: (libc::O_WRONLY | libc::O_APPEND) as u32,
            open_flags: Default::default(),
        };
        let fh = fs.open(&c, log.nodeid, &open).unwrap().fh;
        let append = |attempt: Attempt, data: &[u8]| {
            let _scope = journal.begin(7, 0, attempt);
            let args = WriteArgs {
                fh,
                size: data.len() as u32,
                ..WriteArgs::default()
            };
            fs.write(&c, log.nodeid, &args, &mut SliceReader::new(data))
                .unwrap()
        };
        let resent = |end_before: u64| Attempt::Resent {
            started: true,
            note: end_before + 1,
        };
        assert_eq!(append(Attempt::First, b"def"), 3);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        // The first attempt appended it all before the crash.
        assert_eq!(append(resent(3), b"def"), 3);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        // Part of it.
        std::fs::write(&path, b"abcde").unwrap();
        assert_eq!(append(resent(3), b"def"), 3);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        // Other bytes there: someone else's; all of it is appended.
        std::fs::write(&path, b"abcXYZ").unwrap();
        assert_eq!(append(resent(3), b"def"), 3);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcXYZdef");
        // Never started: appended.
        let never = Attempt::Resent {
            started: false,
            note: 0,
        };
        assert_eq!(append(never, b"!"), 1);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcXYZdef!");
    }

    #[test]
    fn the_table_comes_back_in_a_new_passthrough_needs_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"data").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let area = StateArea::create(1 << 20).unwrap();
        let c = ctx();
        let root = fuse_abi::ROOT_ID;
        let (old, got) = recovering(dir.path(), &area);
        assert_eq!(got, CrashRecovery::default());
        let f = old.lookup(&c, root, c"f").unwrap();
        let f2 = old.lookup(&c, root, c"f").unwrap();
        assert_eq!(f.nodeid, f2.nodeid);
        let d = old.lookup(&c, root, c"d").unwrap();
        old.forget(&c, d.nodeid, 1);
        let opened = old
            .open(
                &c,
                f.nodeid,
                &OpenArgs {
                    flags: libc::O_RDWR as u32,
                    open_flags: Default::default(),
                },
            )
            .unwrap();
        // A later handle, released: not in the table, but its number may
        // be in a request journal's note (a resend closes the handle a note
        // names), so no later process numbers a handle the same.
        let rw = OpenArgs {
            flags: libc::O_RDWR as u32,
            open_flags: Default::default(),
        };
        let later = old.open(&c, f.nodeid, &rw).unwrap();
        assert!(later.fh > opened.fh);
        let release = |fs: &PassthroughFs, fh| {
            fs.release(
                &c,
                f.nodeid,
                &ReleaseArgs {
                    fh,
                    ..ReleaseArgs::default()
                },
            )
            .unwrap()
        };
        release(&old, later.fh);
        // The process "dies": nothing of it but the area is left.
        std::mem::forget(old);

        let (new, got) = recovering(dir.path(), &area);
        assert_eq!(
            got,
            CrashRecovery {
                nodes: 1,
                handles: 1,
                handles_lost: 0
            }
        );
        // The handle reads and writes; the node has its two references.
        let mut buf = vec![0u8; 4];
        let h = new.handles.get(opened.fh).unwrap();
        let n = std::fs::File::from(h.fd().try_clone_to_owned().unwrap())
            .read_at(&mut buf, 0)
            .unwrap();
        assert_eq!(&buf[..n], b"data");
        assert_eq!(new.inodes.get(f.nodeid).unwrap().refs(), 2);
        // A new node gets a new id, a new handle a number no earlier
        // process used.
        let d = new.lookup(&c, root, c"d").unwrap();
        assert!(d.nodeid > f.nodeid);
        new.forget(&c, d.nodeid, 1);
        let again = new.open(&c, f.nodeid, &rw).unwrap();
        assert!(again.fh > later.fh, "{} reused", again.fh);
        release(&new, again.fh);
        release(&new, opened.fh);
        new.forget(&c, f.nodeid, 2);
        // Everything given back: a third process finds an empty table.
        assert_eq!(recovering(dir.path(), &area).1, CrashRecovery::default());
        // Another source is refused.
        let other = tempfile::tempdir().unwrap();
        let elsewhere = PassthroughFs::new(other.path(), PassthroughConfig::default()).unwrap();
        let e = elsewhere.recover(area.fs_region()).unwrap_err();
        assert!(e.to_string().contains("another source"), "{e}");
    }
}
