//! Live upgrade: handing a served mount to a new process without
//! unmounting it.
//!
//! A FUSE connection lives while any descriptor of it is open, so the
//! serving process can pass its `/dev/fuse` descriptor over a Unix socket
//! (`SCM_RIGHTS`) to a new daemon and exit: the mount never goes away, and
//! requests the kernel queued meanwhile are read by the new daemon.
//!
//! ## The exchange (version 2)
//!
//! The new daemon connects to the serving one's socket and says
//! `fuse-takeover-hello 2\n`. The serving daemon pauses its session
//! ([`Pausable::pause`]: [`DevSession`]'s workers, or a `FuseDevTask`'s
//! tasks, answer the requests they hold and stop reading), then sends the hand-over ([`send_handover`]): a line
//! `fuse-takeover 2 <state bytes> <descriptors>\n`, the state (the
//! mountpoint, [`fuse_server::Negotiated::to_state`]'s text, then the file
//! system's own, see [`Handover`]), and the descriptors, the connection's first, in
//! batches of at most [`FDS_PER_MESSAGE`] (each batch carries one byte).
//! The new daemon restores what it got and readies a session that doesn't
//! read yet ([`DevSession::resume_paused`], `FuseDevTask::resume_paused`),
//! then says `ready\n`, or
//! `refused <reason>\n`. On `ready` the old daemon says `go\n`, gives the
//! mount up ([`Pausable::release`]) and exits, and the new one starts
//! reading ([`Pausable::unpause`]); on anything else (a refusal, the
//! socket closing, no answer within the timeout) the old daemon says
//! `refused <reason>\n` where it can and serves again
//! ([`Pausable::unpause`]), and a new daemon that doesn't get `go`
//! releases its session untouched: the serving daemon alone decides, so
//! the two never read at once. A refusal before the pause (another
//! version, a lock wait in progress) is a `refused` line from the serving
//! daemon instead of the hand-over. Every wait of either side ends after
//! the timeout given ([`DEFAULT_TIMEOUT`]): a peer that hangs costs the
//! serving daemon at most that long paused.
//!
//! A file system moves its own state through
//! [`fuse_server::takeover::LiveState`]: [`offer_mount`] and
//! [`take_over_mount`] are the two sides for such a file system, and
//! [`offer`] and [`take_over`] the exchange underneath, for callers that
//! make the state themselves.

use crate::session::DevSession;
#[cfg(feature = "tokio")]
use crate::task::FuseDevTask;
use fuse_server::sys::cvt_retry;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// A session that can be handed to another process: [`DevSession`] (worker
/// threads) and, with the `tokio` feature, `FuseDevTask` (tasks on async
/// runtimes, the first task pausing its siblings too). [`offer`] and [`take_over`] work with either,
/// so an upgrade may also change the way the mount is served.
pub trait Pausable: fuse_server::Session {
    /// Stops reading without ending the connection: every request read is
    /// answered, and what the kernel queues meanwhile waits for the next
    /// reader. Returns once nothing reads; refused (with the reason) where
    /// that can't be done without failing a request.
    fn pause(&self) -> io::Result<()>;
    /// Serves again after a pause, or starts serving a session readied
    /// paused for a takeover.
    fn unpause(&self) -> io::Result<()>;
    /// Gives the paused connection up: the session then ends without
    /// unmounting and without telling the file system the connection
    /// ended.
    fn release(&self) -> io::Result<()>;
    /// Whether the connection was given up ([`Pausable::release`]).
    fn is_released(&self) -> bool;
    /// A duplicate of the connection's session descriptor, to hand over.
    fn connection_fd(&self) -> io::Result<OwnedFd>;
}

/// Implements [`Pausable`] for a session type whose own methods of the
/// same names do the work; `connection_fd` is how it duplicates its
/// session descriptor.
macro_rules! pausable_by_own_methods {
    ($session:ty, connection_fd: |$this:ident| $connection_fd:expr) => {
        impl Pausable for $session {
            fn pause(&self) -> io::Result<()> {
                <$session>::pause(self)
            }

            fn unpause(&self) -> io::Result<()> {
                <$session>::unpause(self)
            }

            fn release(&self) -> io::Result<()> {
                <$session>::release(self).map(drop)
            }

            fn is_released(&self) -> bool {
                <$session>::is_released(self)
            }

            fn connection_fd(&self) -> io::Result<OwnedFd> {
                let $this = self;
                $connection_fd
            }
        }
    };
}

pausable_by_own_methods!(DevSession, connection_fd: |session| {
    session.dev_fd()?.as_fd().try_clone_to_owned()
});

#[cfg(feature = "tokio")]
pausable_by_own_methods!(FuseDevTask, connection_fd: |task| FuseDevTask::connection_fd(task));

/// The version of the exchange this build speaks.
pub const TAKEOVER_VERSION: u32 = 2;

/// How long either side waits for the other, by default.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Descriptors sent per message (the kernel's `SCM_MAX_FD` is 253).
pub const FDS_PER_MESSAGE: usize = 250;

/// Largest state accepted (a node table of millions of inodes fits).
const MAX_STATE: usize = 1 << 30;
/// Largest number of descriptors accepted.
const MAX_FDS: usize = 1 << 20;

/// What moves to the new process: the session's state and the
/// descriptors it refers to by position.
///
/// The state is a line `mountpoint <hex bytes>`, then
/// `Negotiated::to_state`'s text, a line `--`, then the file system's own
/// state (its format is the file system's).
#[derive(Debug, Default)]
pub struct Handover {
    /// The state.
    pub state: Vec<u8>,
    /// The connection's descriptor first, then the file system's.
    pub fds: Vec<OwnedFd>,
}

/// A received [`Handover`], taken apart.
#[derive(Debug)]
pub struct Received {
    /// What the connection's INIT settled.
    pub negotiated: fuse_server::Negotiated,
    /// Where it is mounted.
    pub mountpoint: std::path::PathBuf,
    /// The connection's `/dev/fuse` descriptor.
    pub dev_fd: OwnedFd,
    /// The file system's state.
    pub fs_state: Vec<u8>,
    /// The file system's descriptors.
    pub fs_fds: Vec<OwnedFd>,
}

impl Handover {
    /// A hand-over of the connection `dev_fd`, mounted on `mountpoint` and
    /// negotiated as `negotiated`, with the file system's `fs_state` and
    /// descriptors.
    pub fn new(
        negotiated: &fuse_server::Negotiated,
        mountpoint: &std::path::Path,
        dev_fd: OwnedFd,
        fs_state: &[u8],
        fs_fds: Vec<OwnedFd>,
    ) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let hex: String = mountpoint
            .as_os_str()
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut state = format!("mountpoint {hex}\n").into_bytes();
        state.extend_from_slice(negotiated.to_state().as_bytes());
        state.extend_from_slice(SEPARATOR.as_bytes());
        state.extend_from_slice(fs_state);
        let mut fds = vec![dev_fd];
        fds.extend(fs_fds);
        Self { state, fds }
    }

    /// Takes a received hand-over apart, checking the session's part.
    pub fn into_parts(self) -> io::Result<Received> {
        use std::os::unix::ffi::OsStringExt;
        let text = &self.state;
        let at = find(text, SEPARATOR.as_bytes())
            .ok_or_else(|| invalid("the hand-over has no state separator"))?;
        let session = std::str::from_utf8(&text[..at])
            .map_err(|_| invalid("the session state is not text"))?;
        let (first, negotiated) = session
            .split_once('\n')
            .ok_or_else(|| invalid("the session state has no mountpoint line"))?;
        let hex = first
            .strip_prefix("mountpoint ")
            .filter(|h| h.len() % 2 == 0)
            .ok_or_else(|| invalid("the session state has no mountpoint line"))?;
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| invalid("the mountpoint is not hexadecimal"))?;
        let negotiated =
            fuse_server::Negotiated::from_state(negotiated).map_err(|e| invalid(&e.to_string()))?;
        let fs_state = text[at + SEPARATOR.len()..].to_vec();
        let mut fds = self.fds.into_iter();
        let dev_fd = fds
            .next()
            .ok_or_else(|| invalid("the hand-over has no /dev/fuse descriptor"))?;
        Ok(Received {
            negotiated,
            mountpoint: std::ffi::OsString::from_vec(bytes).into(),
            dev_fd,
            fs_state,
            fs_fds: fds.collect(),
        })
    }
}

const SEPARATOR: &str = "--\n";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Sends `h` on `stream` (see the module docs).
pub fn send_handover(stream: &UnixStream, h: &Handover) -> io::Result<()> {
    let mut w = stream;
    w.write_all(
        format!(
            "fuse-takeover {TAKEOVER_VERSION} {} {}\n",
            h.state.len(),
            h.fds.len()
        )
        .as_bytes(),
    )?;
    w.write_all(&h.state)?;
    for batch in h.fds.chunks(FDS_PER_MESSAGE) {
        let raw: Vec<RawFd> = batch.iter().map(|f| f.as_raw_fd()).collect();
        send_fds(stream, &raw)?;
    }
    Ok(())
}

/// Receives a hand-over from `stream`. Nothing is read ahead: a read
/// that took the byte a batch of descriptors rides on would drop the
/// descriptors.
pub fn recv_handover(stream: &UnixStream) -> io::Result<Handover> {
    let line = read_line(stream)?;
    if let Some(why) = line.strip_prefix("refused ") {
        return Err(io::Error::other(format!(
            "the serving daemon refused: {why}"
        )));
    }
    let mut words = line.split(' ');
    if words.next() != Some("fuse-takeover") {
        return Err(invalid(&format!("not a hand-over: {line:?}")));
    }
    let version = words.next().unwrap_or_default();
    if version != TAKEOVER_VERSION.to_string() {
        return Err(invalid(&format!(
            "hand-over version {version}, this build reads {TAKEOVER_VERSION}"
        )));
    }
    let number = |w: Option<&str>, limit: usize| -> io::Result<usize> {
        w.and_then(|w| w.parse().ok())
            .filter(|&n| n <= limit)
            .ok_or_else(|| invalid(&format!("bad hand-over header {line:?}")))
    };
    let state_len = number(words.next(), MAX_STATE)?;
    let nfds = number(words.next(), MAX_FDS)?;
    let mut state = vec![0u8; state_len];
    (&*stream).read_exact(&mut state)?;
    let mut fds = Vec::with_capacity(nfds);
    while fds.len() < nfds {
        let got = recv_fds(stream, FDS_PER_MESSAGE)?;
        if got.is_empty() {
            return Err(invalid("the hand-over ended before its descriptors"));
        }
        fds.extend(got);
    }
    if fds.len() != nfds {
        return Err(invalid("more descriptors than announced"));
    }
    Ok(Handover { state, fds })
}

/// Reads one `\n`-terminated line (without it), at most 4 KiB, a byte at
/// a time (see [`recv_handover`]).
pub fn read_line(stream: &UnixStream) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match (&*stream).read(&mut byte) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the other daemon closed the takeover socket",
                ))
            }
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if line.len() >= 4096 => return Err(invalid("a line longer than 4 KiB")),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(line).map_err(|_| invalid("a line that isn't text"))
}

/// Writes one line.
pub fn write_line(stream: &UnixStream, line: &str) -> io::Result<()> {
    let mut w = stream;
    w.write_all(format!("{line}\n").as_bytes())
}

/// A zeroed control buffer with room for `payload` bytes of control data
/// (`CMSG_SPACE`).
fn control_buffer(payload: usize) -> Vec<u8> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    vec![0u8; space]
}

/// The header of a message of one byte (`iov`) with `control` as its
/// control buffer. It holds raw pointers to both: they must outlive its
/// use in `sendmsg`/`recvmsg`.
fn one_byte_msghdr(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid value (null pointers, zero
    // lengths); the fields that matter are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    msg
}

/// `sendmsg` of one byte with `fds` attached.
fn send_fds(stream: &UnixStream, fds: &[RawFd]) -> io::Result<()> {
    let byte = [b'f'];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut _,
        iov_len: 1,
    };
    let payload = std::mem::size_of_val(fds);
    let mut control = control_buffer(payload);
    let msg = one_byte_msghdr(&mut iov, &mut control);
    // SAFETY: `iov` and `control` (which `msg` points at) outlive the call;
    // the control buffer is CMSG_SPACE(payload) bytes, so the first header
    // and its data fit.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), payload);
        cvt_retry(|| libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)).map(drop)
    }
}

/// `recvmsg` of one byte with up to `max` descriptors (close-on-exec).
fn recv_fds(stream: &UnixStream, max: usize) -> io::Result<Vec<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = control_buffer(max * size_of::<RawFd>());
    let mut msg = one_byte_msghdr(&mut iov, &mut control);
    // SAFETY: as in `send_fds`; the kernel writes at most the control
    // buffer's length of control data, and every descriptor it passes is
    // taken into an OwnedFd exactly once.
    unsafe {
        let n = cvt_retry(|| libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC))?;
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(invalid("descriptors were cut off (MSG_CTRUNC)"));
        }
        if n == 0 && fds.is_empty() {
            return Ok(Vec::new());
        }
        Ok(fds)
    }
}

/// The serving side of one takeover request arriving on `stream`: checks
/// the hello, pauses `session`, sends the hand-over that `handover` makes
/// (given a duplicate of the connection's descriptor), and waits for the
/// answer. `Ok(true)`: the new daemon serves, and this session was
/// released (the caller exits without unmounting). `Ok(false)`: refused
/// or failed on the way, and this session serves again; the reason was
/// logged and written to the new daemon where it still listens.
pub fn offer(
    session: &(impl Pausable + ?Sized),
    stream: &UnixStream,
    timeout: std::time::Duration,
    handover: impl FnOnce(OwnedFd) -> io::Result<Handover>,
) -> io::Result<bool> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let hello = read_line(stream)?;
    let expected = format!("fuse-takeover-hello {TAKEOVER_VERSION}");
    if hello != expected {
        let why = format!("this daemon speaks {expected:?}, the new one said {hello:?}");
        tracing::warn!("takeover refused: {why}");
        let _ = write_line(stream, &format!("refused {why}"));
        return Ok(false);
    }
    if let Err(e) = session.pause() {
        tracing::warn!("takeover refused: {e}");
        let _ = write_line(stream, &format!("refused {e}"));
        return Ok(false);
    }
    let result = (|| -> io::Result<bool> {
        let dev = session.connection_fd()?;
        let h = handover(dev)?;
        send_handover(stream, &h)?;
        drop(h);
        let answer = read_line(stream)?;
        if answer == "ready" {
            write_line(stream, "go")?;
            return Ok(true);
        }
        tracing::warn!(
            "the new daemon did not take over: {}",
            answer.strip_prefix("refused ").unwrap_or(&answer)
        );
        Ok(false)
    })();
    match result {
        Ok(true) => {
            session.release()?;
            tracing::info!("handed the mount over to the new daemon");
            Ok(true)
        }
        Ok(false) => {
            session.unpause()?;
            Ok(false)
        }
        Err(e) => {
            tracing::warn!("takeover failed ({e}); serving again");
            // Says why, if the new daemon still listens (nothing was sent
            // yet when the state couldn't be made).
            let _ = write_line(stream, &format!("refused {e}"));
            session.unpause()?;
            Ok(false)
        }
    }
}

/// The new daemon's side: connects to `socket`, receives the hand-over,
/// and gives it to `prepare`, which readies a paused session for it
/// ([`DevSession::resume_paused`] with a server whose file system
/// restored its state) or says why not. The answer goes to the old
/// daemon; once it says `go` the session starts serving and is returned.
/// If it doesn't (it gave up waiting, or went away), the session is
/// released untouched and the old daemon serves on.
pub fn take_over<S: Pausable + ?Sized>(
    socket: &std::path::Path,
    timeout: std::time::Duration,
    prepare: impl FnOnce(Handover) -> io::Result<std::sync::Arc<S>>,
) -> io::Result<std::sync::Arc<S>> {
    take_over_connected(connect(socket)?, timeout, prepare)
}

/// Connects to the takeover socket at `socket` (what [`take_over`] does
/// first): a daemon that confines itself connects before, where it can
/// still reach the path, and takes over later with
/// [`take_over_connected`].
pub fn connect(socket: &std::path::Path) -> io::Result<UnixStream> {
    UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "connecting to the takeover socket {}: {e}",
                socket.display()
            ),
        )
    })
}

/// [`take_over`] through a `stream` already connected to the serving
/// daemon's takeover socket ([`connect`]).
pub fn take_over_connected<S: Pausable + ?Sized>(
    stream: UnixStream,
    timeout: std::time::Duration,
    prepare: impl FnOnce(Handover) -> io::Result<std::sync::Arc<S>>,
) -> io::Result<std::sync::Arc<S>> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write_line(&stream, &format!("fuse-takeover-hello {TAKEOVER_VERSION}"))?;
    let handover = recv_handover(&stream).map_err(|e| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the serving daemon sent nothing within {timeout:?}"),
            )
        } else {
            e
        }
    })?;
    let session = match prepare(handover) {
        Ok(session) => session,
        Err(e) => {
            let _ = write_line(&stream, &format!("refused {e}"));
            return Err(e);
        }
    };
    let go = write_line(&stream, "ready").and_then(|()| read_line(&stream));
    match go {
        Ok(line) if line == "go" => {
            session.unpause()?;
            Ok(session)
        }
        other => {
            // Not ours: give the connection back untouched (no unmount).
            let _ = session.release();
            let why = match other {
                Ok(line) => line.strip_prefix("refused ").unwrap_or(&line).to_string(),
                Err(e) => e.to_string(),
            };
            Err(io::Error::other(format!(
                "the serving daemon called the takeover off: {why}"
            )))
        }
    }
}

/// [`offer`] for a session whose file system moves its state with
/// [`fuse_server::takeover::LiveState`]: the hand-over carries the
/// session's mountpoint and negotiated state and `fs`'s state.
pub fn offer_mount(
    session: &(impl Pausable + ?Sized),
    fs: &dyn fuse_server::takeover::LiveState,
    stream: &UnixStream,
    timeout: std::time::Duration,
) -> io::Result<bool> {
    let negotiated = session
        .server()
        .negotiated()
        .copied()
        .ok_or_else(|| io::Error::other("the session has not answered INIT"))?;
    let mountpoint = session.mountpoint().to_path_buf();
    offer(session, stream, timeout, |dev| {
        let (state, fds) = fs.save_state()?;
        Ok(Handover::new(&negotiated, &mountpoint, dev, &state, fds))
    })
}

/// [`take_over`] of the mount at `mountpoint` for a file system that takes
/// its state back with [`fuse_server::takeover::LiveState`]: refuses a
/// hand-over of another mountpoint, restores `fs`, and gives the rest
/// (the connection's descriptor and negotiated state) to `start`, which
/// readies a paused session on it ([`DevSession::resume_paused`], or a
/// `FuseDevTask`'s). Call `fs.resumed()` once the returned session serves.
pub fn take_over_mount<S: Pausable + ?Sized>(
    socket: &std::path::Path,
    mountpoint: &std::path::Path,
    fs: &dyn fuse_server::takeover::LiveState,
    timeout: std::time::Duration,
    start: impl FnOnce(Received) -> io::Result<std::sync::Arc<S>>,
) -> io::Result<std::sync::Arc<S>> {
    take_over_mount_connected(connect(socket)?, mountpoint, fs, timeout, start)
}

/// [`take_over_mount`] through a `stream` already connected to the
/// serving daemon's takeover socket ([`connect`]).
pub fn take_over_mount_connected<S: Pausable + ?Sized>(
    stream: UnixStream,
    mountpoint: &std::path::Path,
    fs: &dyn fuse_server::takeover::LiveState,
    timeout: std::time::Duration,
    start: impl FnOnce(Received) -> io::Result<std::sync::Arc<S>>,
) -> io::Result<std::sync::Arc<S>> {
    take_over_connected(stream, timeout, |h| {
        let mut r = h.into_parts()?;
        if r.mountpoint != mountpoint {
            return Err(io::Error::other(format!(
                "the serving daemon's mountpoint is {}, not {}",
                r.mountpoint.display(),
                mountpoint.display()
            )));
        }
        fs.restore_state(&r.fs_state, std::mem::take(&mut r.fs_fds))?;
        start(r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_crosses_a_socket_with_its_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        // More descriptors than one message carries.
        let fds: Vec<OwnedFd> = (0..FDS_PER_MESSAGE + 7)
            .map(|_| std::fs::File::open("/dev/null").unwrap().into())
            .collect();
        let h = Handover {
            state: b"fuse-negotiated 1\n--\nhello".to_vec(),
            fds,
        };
        assert!(Handover {
            state: h.state.clone(),
            fds: Vec::new()
        }
        .into_parts()
        .is_err());
        let sender = std::thread::spawn(move || send_handover(&a, &h));
        let got = recv_handover(&b).unwrap();
        sender.join().unwrap().unwrap();
        assert_eq!(got.state, b"fuse-negotiated 1\n--\nhello");
        assert_eq!(got.fds.len(), FDS_PER_MESSAGE + 7);
        // Open descriptors of /dev/null, close-on-exec.
        for fd in &got.fds {
            // SAFETY: fcntl on a descriptor we own.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
    }

    #[test]
    fn the_session_state_round_trips() {
        let kernel = fuse_server::KernelInit {
            major: 7,
            minor: 45,
            max_readahead: 131072,
            flags: fuse_abi::InitFlags::all(),
            max_pages_limit: 256,
        };
        let fuse_server::init::InitOutcome::Agreed { negotiated, .. } =
            fuse_server::init::negotiate(&kernel, &fuse_server::InitConfig::default())
        else {
            panic!("not agreed");
        };
        let dev: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let mnt = std::path::Path::new("/mnt/a b\nc");
        let h = Handover::new(&negotiated, mnt, dev, b"fs\nstate", Vec::new());
        let r = h.into_parts().unwrap();
        assert_eq!(r.negotiated, negotiated);
        assert_eq!(r.mountpoint, mnt);
        assert_eq!(r.fs_state, b"fs\nstate");
        assert!(r.fs_fds.is_empty());
    }

    #[test]
    fn bad_headers_and_refusals_are_errors_with_the_reason() {
        let v = TAKEOVER_VERSION;
        let other = format!("version {}", v + 1);
        for (text, want) in [
            ("refused busy".to_string(), "refused: busy"),
            (format!("fuse-takeover {} 0 0", v + 1), other.as_str()),
            ("hello".to_string(), "not a hand-over"),
            (format!("fuse-takeover {v} x 0"), "bad hand-over header"),
        ] {
            let (a, b) = UnixStream::pair().unwrap();
            write_line(&a, &text).unwrap();
            let err = recv_handover(&b).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        // The other side going away mid-way.
        let (a, b) = UnixStream::pair().unwrap();
        write_line(&a, &format!("fuse-takeover {v} 10 0")).unwrap();
        drop(a);
        assert!(recv_handover(&b).is_err());
    }
}
