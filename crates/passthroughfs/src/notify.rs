//! Readiness for service managers: the `sd_notify` protocol, one datagram
//! of `KEY=VALUE` lines to the Unix socket named by `NOTIFY_SOCKET` (a
//! path, or an abstract name after `@`). Without `NOTIFY_SOCKET` nothing
//! is sent.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable a service manager sets.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` (e.g. `"READY=1"`) if `NOTIFY_SOCKET` is set; a failure
/// is logged, not fatal (the daemon serves either way).
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os(NOTIFY_SOCKET) else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::warn!(
            socket = %path.to_string_lossy(),
            "cannot tell the service manager {state:?}: {e}"
        );
    }
}

/// The socket connected by [`connect_early`].
static CONNECTED: std::sync::OnceLock<UnixDatagram> = std::sync::OnceLock::new();

/// Connects to `NOTIFY_SOCKET` now, for a daemon about to be confined
/// where the socket's path (or abstract name) can't be reached; a failure
/// is logged and later sends try the path again.
pub fn connect_early() {
    let Some(path) = std::env::var_os(NOTIFY_SOCKET) else {
        return;
    };
    match address(&path).and_then(|addr| {
        let socket = UnixDatagram::unbound()?;
        socket.connect_addr(&addr)?;
        Ok(socket)
    }) {
        Ok(socket) => {
            let _ = CONNECTED.set(socket);
        }
        Err(e) => tracing::warn!(
            socket = %path.to_string_lossy(),
            "cannot connect to the service manager's socket: {e}"
        ),
    }
}

fn address(path: &std::ffi::OsStr) -> std::io::Result<SocketAddr> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None => SocketAddr::from_pathname(std::path::Path::new(path))?,
    };
    Ok(addr)
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    if let Some(socket) = CONNECTED.get() {
        socket.send(state.as_bytes())?;
        return Ok(());
    }
    let addr = address(path)?;
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

/// What the daemon sends once the mount is usable: ready, and which
/// process serves (the background child, not the process the service
/// manager started).
pub fn ready() {
    notify(&format!("READY=1\nMAINPID={}", std::process::id()));
}

/// What the daemon sends when it starts to unmount (once, however many
/// ways the stop begins).
pub fn stopping() {
    static SENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SENT.swap(true, std::sync::atomic::Ordering::AcqRel) {
        notify("STOPPING=1");
    }
}
