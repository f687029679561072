//! The serving daemon's takeover socket (`--takeover-socket`): bound so
//! that its path appears only once it listens.
//!
//! `bind(2)` creates the socket file, `listen(2)` comes after it: a new
//! daemon (or a test) that sees the file in between and connects gets
//! `ECONNREFUSED`. The serving daemon removes the file while it answers
//! one takeover and binds it again if that one failed, so the window
//! opened on every failed takeover. The socket is therefore bound and
//! listening under a temporary name in the same directory, then renamed
//! into place (`rename(2)` is atomic): whoever finds the path can connect.

use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Binds `path` for takeover requests, listening before the path exists,
/// and replacing a socket file nobody listens on any more; refused if a
/// daemon listens there.
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    bind_with(path, |_| {})
}

/// [`bind`], calling `listening` with the temporary path once the socket
/// listens there and before it is renamed to `path` (the tests hold that
/// window open with it).
pub(crate) fn bind_with(path: &Path, listening: impl FnOnce(&Path)) -> io::Result<UnixListener> {
    if UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("another daemon listens on {}", path.display()),
        ));
    }
    let temporary = temporary_path(path);
    // Left by a process of this id that died in the window.
    let _ = std::fs::remove_file(&temporary);
    let listener = UnixListener::bind(&temporary).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "binding {} (to rename it to the socket's path): {e}",
                temporary.display()
            ),
        )
    })?;
    listening(&temporary);
    if let Err(e) = std::fs::rename(&temporary, path) {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    Ok(listener)
}

/// Where the socket of `path` listens before it is renamed: the same
/// directory (a rename can't cross file systems), a name of this process.
fn temporary_path(path: &Path) -> PathBuf {
    let name = format!(".takeover-{}", std::process::id());
    match path.parent() {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_appears_only_once_the_socket_listens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("takeover.sock");
        let mut held_open = false;
        let listener = bind_with(&path, |temporary| {
            // The window between listen and rename: the socket listens
            // (a connection is queued) and its path isn't there yet, so
            // nobody can see the file before it accepts connections.
            held_open = true;
            assert!(!path.exists(), "the socket's path exists before the rename");
            UnixStream::connect(temporary).expect("the socket listens before it is renamed");
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
    }

    #[test]
    fn a_dead_socket_file_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("takeover.sock");
        // A socket file whose listener is gone (a daemon that died).
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let listener = bind(&path).expect("a dead socket file is replaced");
        let err = bind(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains("another daemon listens"), "{err}");
        // The refused attempt left the live socket in place.
        let _client = UnixStream::connect(&path).unwrap();
        listener.accept().unwrap();
    }
}
