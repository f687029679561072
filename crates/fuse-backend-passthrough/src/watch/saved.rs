//! What a live upgrade carries of the source watch to the next process:
//! the fanotify group and what the watcher knows of its marks
//! ([`SavedWatch`]). Apart because only a takeover uses it.

use super::{Quiet, SourceWatcher};
use crate::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Weak};

/// A source watch as a live upgrade moves it from one process to the next
/// ([`SourceWatcher::save`], [`SourceWatcher::restore`]): the group, whose
/// marks live as long as any process holds it, and what the watcher knows
/// of them.
pub(crate) struct SavedWatch {
    /// A duplicate of the fanotify group's descriptor.
    pub(crate) group: OwnedFd,
    /// The group reports files' own handles.
    pub(crate) watches_files: bool,
    /// The group may place filesystem-wide marks.
    pub(crate) privileged: bool,
    /// Marked directories: node id and the digest of its fanotify id.
    pub(crate) dirs: Vec<(u64, u64)>,
    /// Watched regular files: node id, digest, and how a filesystem-wide
    /// mark watches it (`None`: by a mark of its own; kept in the file's
    /// inode, [`FileWatch`](super::FileWatch), so [`SourceWatcher::save`]
    /// leaves it `None` for the caller to fill in and
    /// [`SourceWatcher::restore`] leaves it for the caller to set).
    pub(crate) files: Vec<(u64, u64, Option<Quiet>)>,
    /// By device number: whether a filesystem-wide mark watches that file
    /// system's files.
    pub(crate) filesystems: Vec<(u64, bool)>,
}

impl SourceWatcher {
    /// The watch as a live upgrade moves it to another process: the group
    /// and what the watcher knows of its marks. Call it with the thread
    /// stopped ([`SourceWatcher::stop_reading`]) and no request served.
    pub(crate) fn save(&self) -> io::Result<SavedWatch> {
        let mut dirs: Vec<(u64, u64)> = self
            .shared
            .dirs()
            .by_node
            .iter()
            .map(|(&n, &d)| (n, d))
            .collect();
        dirs.sort_unstable();
        let mut files: Vec<(u64, u64, Option<Quiet>)> = self
            .shared
            .files()
            .all()
            .map(|(n, d)| (n, d, None))
            .collect();
        // Files watched by number are in no table: their inodes say, and
        // their digests are made from their handles (the next process
        // keeps them in its table).
        if let Some(nodes) = self.shared.file_nodes.get().and_then(Weak::upgrade) {
            let _table = self.shared.files();
            nodes.all_watched_by_number(&mut |nodeid, id| {
                if let Some(fid) = self.known_fid(id) {
                    files.push((nodeid, fid.digest(), None));
                }
            });
        }
        files.sort_unstable_by_key(|&(n, _, _)| n);
        let mut filesystems: Vec<(u64, bool)> = self
            .filesystems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&dev, &marked)| (dev, marked))
            .collect();
        filesystems.sort_unstable();
        Ok(SavedWatch {
            group: self.group.as_fd().try_clone_to_owned()?,
            watches_files: self.watches_files,
            privileged: self.privileged,
            dirs,
            files,
            filesystems,
        })
    }

    /// Takes over a watch another process saved ([`SourceWatcher::save`]),
    /// its marks being for the same node ids here (the caller leaves out
    /// nodes it doesn't have); nothing reads it until
    /// [`SourceWatcher::start_reading`]. Fails on a descriptor that isn't
    /// an fanotify group (asked of `proc_self_fd`, `/proc/self/fd`).
    pub(crate) fn restore(saved: SavedWatch, proc_self_fd: BorrowedFd<'_>) -> io::Result<Self> {
        let name = std::ffi::CString::new(saved.group.as_raw_fd().to_string())
            .map_err(io::Error::other)?;
        let mut buf = [0u8; 64];
        let n = sys::readlinkat(proc_self_fd, &name, &mut buf)?;
        let what = &buf[..n];
        if what != b"anon_inode:[fanotify]" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the source watch's descriptor is {:?}, not an fanotify group",
                    String::from_utf8_lossy(what)
                ),
            ));
        }
        let watcher =
            Self::with_group(Arc::new(saved.group), saved.watches_files, saved.privileged);
        {
            let mut dirs = watcher.shared.dirs();
            for (node, digest) in saved.dirs {
                dirs.insert_digest(node, digest, true);
            }
        }
        {
            // Remembered both ways: the next process may hold a file by
            // descriptor that this one held by handle.
            let mut files = watcher.shared.files();
            for (node, digest, _) in saved.files {
                files.insert_digest(node, digest, true);
            }
        }
        watcher
            .filesystems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(saved.filesystems);
        Ok(watcher)
    }
}
