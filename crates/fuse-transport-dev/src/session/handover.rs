//! The checks and steps of handing a connection over (see
//! [`crate::takeover`]) that [`DevSession`](super::DevSession) and
//! `FuseDevTask` share: apart because they serve both transports, not the
//! worker threads alone.

use crate::mount::Mount;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Why a pause is refused while `waits` requests wait for locks.
pub(crate) fn lock_waits_refuse(waits: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("{waits} requests wait for locks; try again once they are answered"),
    )
}

/// Whether a session's mount can be handed over (a pause would be for
/// nothing otherwise): it must still be there, and releasable
/// ([`Mount::can_release`]).
pub(crate) fn can_hand_over(mount: &Mutex<Option<Mount>>) -> io::Result<()> {
    match mount.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        None => Err(io::Error::other("the session has ended")),
        Some(m) if !m.can_release() => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a mount with auto_unmount can't be handed over: its helper would unmount it when \
             this process exits",
        )),
        Some(_) => Ok(()),
    }
}

/// Gives a session's mount up ([`Mount::release`]): its session
/// descriptor. On an error the session keeps it.
pub(crate) fn release_mount(mount: &Mutex<Option<Mount>>) -> io::Result<OwnedFd> {
    let mut mount = mount.lock().unwrap_or_else(|e| e.into_inner());
    let fd = mount
        .as_mut()
        .ok_or_else(|| io::Error::other("the session has ended"))?
        .release()?;
    // Released: dropping it leaves the mount alone.
    mount.take();
    Ok(fd)
}
