//! The serving daemon's takeover socket (`--takeover-socket`): bound so
//! that its path appears only once it listens, by a daemon that may be
//! confined where the path is out of its reach.
//!
//! `bind(2)` creates the socket file, `listen(2)` comes after it: a new
//! daemon (or a test) that sees the file in between and connects gets
//! `ECONNREFUSED`. The serving daemon removes the file while it answers
//! one takeover and binds it again if that one failed, so the window
//! opened on every failed takeover. The socket is therefore bound and
//! listening under a temporary name in the same directory, then renamed
//! into place (`rename(2)` is atomic): whoever finds the path can connect.
//!
//! The socket's directory is opened before the daemon confines itself
//! ([`SocketPlace::open`]); afterwards (in its own mount namespace and
//! root, under Landlock) every operation on the socket's names goes
//! through that descriptor: renames and removals with `renameat`/
//! `unlinkat` on it, binds and connects (which take a path only) relative
//! to it as the working directory of the one thread that does them
//! ([`SocketPlace::enter`]; `unshare(CLONE_FS)` keeps that directory that
//! thread's own). The Landlock ruleset allows making and removing a
//! socket in that directory and nothing else there.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Where the takeover socket lives: its directory (held open) and its
/// name there.
#[derive(Debug)]
pub(crate) struct SocketPlace {
    /// The socket's directory (`O_PATH`).
    dir: OwnedFd,
    /// The socket's file name in it.
    name: CString,
    /// A name of this process for the socket while it isn't in place.
    temporary: CString,
    /// The path as given, for messages.
    path: PathBuf,
}

impl SocketPlace {
    /// Opens the directory of `path` (while the daemon can still reach
    /// it).
    pub(crate) fn open(path: &Path) -> io::Result<SocketPlace> {
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: no file name for the socket", path.display()),
            )
        })?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let dir_c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
        // SAFETY: a NUL-terminated path; the new descriptor is owned below.
        let fd = unsafe {
            libc::open(
                dir_c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("opening the socket's directory {}: {e}", dir.display()),
            ));
        }
        let c = |s: OsString| {
            CString::new(s.as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))
        };
        Ok(SocketPlace {
            // SAFETY: opened above, ours alone.
            dir: unsafe { OwnedFd::from_raw_fd(fd) },
            name: c(name.to_os_string())?,
            temporary: c(format!(".takeover-{}", std::process::id()).into())?,
            path: path.to_path_buf(),
        })
    }

    /// The socket's directory (for the Landlock rule).
    pub(crate) fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The path as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the socket's directory this thread's working directory, and
    /// this thread's alone (`unshare(CLONE_FS)`): [`SocketPlace::bind`]
    /// names the socket relative to it. Call once, on the thread that binds.
    pub(crate) fn enter(&self) -> io::Result<()> {
        // SAFETY: unshare takes only flags; CLONE_FS affects this thread.
        let unshared = unsafe { libc::unshare(libc::CLONE_FS) } == 0;
        // SAFETY: fchdir to a descriptor we hold.
        if !unshared || unsafe { libc::fchdir(self.dir.as_raw_fd()) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "entering the takeover socket's directory {}: {e}",
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Binds the socket for takeover requests, listening before its name
    /// exists, and replacing a socket file nobody listens on any more;
    /// refused if a daemon listens there. On a thread that
    /// [entered](SocketPlace::enter) the socket's directory.
    pub(crate) fn bind(&self) -> io::Result<UnixListener> {
        self.bind_with(|| {})
    }

    /// [`SocketPlace::bind`], calling `listening` once the socket listens
    /// under its temporary name and before it is renamed into place (the
    /// tests hold that window open with it).
    pub(crate) fn bind_with(&self, listening: impl FnOnce()) -> io::Result<UnixListener> {
        let name = Path::new(std::ffi::OsStr::from_bytes(self.name.as_bytes()));
        let temporary = Path::new(std::ffi::OsStr::from_bytes(self.temporary.as_bytes()));
        if UnixStream::connect(name).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another daemon listens on {}", self.path.display()),
            ));
        }
        // Left by a process of this id that died in the window.
        let _ = self.unlink(&self.temporary);
        let listener = UnixListener::bind(temporary).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "binding {} in {} (to rename it to the socket's name): {e}",
                    temporary.display(),
                    self.path.parent().unwrap_or(Path::new(".")).display()
                ),
            )
        })?;
        listening();
        let fd = self.dir.as_raw_fd();
        // SAFETY: two NUL-terminated names in our directory.
        if unsafe { libc::renameat(fd, self.temporary.as_ptr(), fd, self.name.as_ptr()) } != 0 {
            let e = io::Error::last_os_error();
            let _ = self.unlink(&self.temporary);
            return Err(e);
        }
        Ok(listener)
    }

    /// Removes the socket's name (while a takeover is answered).
    pub(crate) fn remove(&self) -> io::Result<()> {
        self.unlink(&self.name)
    }

    fn unlink(&self, name: &CString) -> io::Result<()> {
        // SAFETY: a NUL-terminated name in our directory.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own (each test enters a directory: its
    /// working directory must not leak into other tests).
    fn on_own_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn the_path_appears_only_once_the_socket_listens() {
        on_own_thread(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("takeover.sock");
            let place = SocketPlace::open(&path).unwrap();
            place.enter().unwrap();
            let mut held_open = false;
            let listener = place
                .bind_with(|| {
                    // The window between listen and rename: the socket
                    // listens (a connection is queued) and its path isn't
                    // there yet, so nobody can see the file before it
                    // accepts connections.
                    held_open = true;
                    assert!(!path.exists(), "the socket's path exists before the rename");
                    let temporary = dir.path().join(format!(".takeover-{}", std::process::id()));
                    UnixStream::connect(temporary)
                        .expect("the socket listens before it is renamed");
                })
                .unwrap();
            assert!(held_open);
            // Once the path is there, connecting to it works at once.
            let _client = UnixStream::connect(&path).expect("connecting to the renamed socket");
            listener.accept().unwrap();
            listener.accept().unwrap();
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                1,
                "the temporary name is gone"
            );
            place.remove().unwrap();
            assert!(!path.exists());
        });
    }

    #[test]
    fn a_dead_socket_file_is_replaced_and_a_live_one_refused() {
        on_own_thread(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("takeover.sock");
            // A socket file whose listener is gone (a daemon that died).
            drop(UnixListener::bind(&path).unwrap());
            assert!(path.exists());
            let place = SocketPlace::open(&path).unwrap();
            place.enter().unwrap();
            let listener = place.bind().expect("a dead socket file is replaced");
            let err = place.bind().unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
            assert!(err.to_string().contains("another daemon listens"), "{err}");
            // The refused attempt left the live socket in place.
            let _client = UnixStream::connect(&path).unwrap();
            listener.accept().unwrap();
        });
    }

    #[test]
    fn the_socket_is_bound_through_its_directory_not_its_path() {
        let cwd = std::env::current_dir().unwrap();
        on_own_thread(|| {
            // The directory is reached by its descriptor once opened: a
            // confined daemon can't reach it by path any more. Here it is
            // renamed away after the open.
            let top = tempfile::tempdir().unwrap();
            let before = top.path().join("before");
            std::fs::create_dir(&before).unwrap();
            let place = SocketPlace::open(&before.join("takeover.sock")).unwrap();
            let after = top.path().join("after");
            std::fs::rename(&before, &after).unwrap();
            place.enter().unwrap();
            let listener = place.bind().unwrap();
            let _client = UnixStream::connect(after.join("takeover.sock")).unwrap();
            listener.accept().unwrap();
        });
        // The working directory changed for that thread only.
        assert_eq!(std::env::current_dir().unwrap(), cwd);
    }
}
