//! Serving until the user stops the daemon: [`serve_until_signal`].
//!
//! A daemon in the foreground should unmount cleanly on Ctrl-C (SIGINT),
//! SIGTERM (`kill`, systemd) and SIGHUP (its terminal went away). Doing
//! that takes a signal handler, a way out of it (a self-pipe) and a thread
//! that stops the session, which every daemon would otherwise write again.

use fuse_server::Session;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The signals that stop the session.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The byte [`serve_until_signal`] writes to wake its watcher when the
/// session ended without a signal (signals write their number, never 0).
const WAKE: u8 = 0;

/// Waits until `session` ends, stopping it on the first SIGINT (Ctrl-C),
/// SIGTERM or SIGHUP; returns what [`Session::wait`] returns.
///
/// The session ends either way: unmounted from outside (`umount`,
/// `fusermount3 -u`), or stopped here on a signal (it unmounts, and
/// requests in progress are answered first). The handlers are installed
/// for the duration of the call only; once a signal has started the stop,
/// the previous handlers are back, so a second Ctrl-C while the stop
/// waits for a stuck request ends the process the default way (the mount
/// is then left for `umount` to remove). A signal the process ignores
/// (SIGHUP under `nohup`) stays ignored. The handlers use `SA_RESTART`,
/// so a signal doesn't make the file system's own system calls fail with
/// `EINTR`.
///
/// One call at a time per process: a second waits for the first.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use fuse_server::{FileSystem, Server};
/// # use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
/// # struct Empty;
/// # impl FileSystem for Empty {}
/// let server = Server::new(Arc::new(Empty));
/// let session = DevSession::mount(server, "/mnt/x".as_ref(), &MountOptions::default(), SessionConfig::default())?;
/// fuse_transport_dev::serve_until_signal(&session)?; // until Ctrl-C or an unmount
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serve_until_signal<S: Session + ?Sized>(session: &S) -> io::Result<()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let pipe = self_pipe()?;
    // Bytes of an earlier call (its wake byte) mean nothing now.
    while read_byte(&pipe.read).is_some() {}
    let handlers = Handlers::install()?;
    std::thread::scope(|scope| {
        let watcher = std::thread::Builder::new()
            .name("signals".into())
            .spawn_scoped(scope, || {
                let byte = wait_byte(&pipe.read);
                if byte != WAKE {
                    // A second signal now gets the default action.
                    handlers.restore();
                    tracing::info!(signal = byte, "stopping on signal");
                    session.stop();
                }
            });
        let watcher = match watcher {
            Ok(watcher) => watcher,
            Err(e) => {
                handlers.restore();
                return Err(e);
            }
        };
        let result = session.wait();
        // Unmounted without a signal: the watcher still waits.
        write_byte(pipe.write.as_raw_fd(), WAKE);
        if watcher.join().is_err() {
            tracing::warn!("the signal watcher panicked");
        }
        handlers.restore();
        result
    })
}

/// The pipe signal handlers write to, created once per process and never
/// closed: a handler running late on another thread must never write to
/// a descriptor number that was closed and reused.
struct SelfPipe {
    read: OwnedFd,
    write: OwnedFd,
}

/// The write end of the [`SelfPipe`], for the handler (-1 until created).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

fn self_pipe() -> io::Result<&'static SelfPipe> {
    static PIPE: OnceLock<SelfPipe> = OnceLock::new();
    if let Some(pipe) = PIPE.get() {
        return Ok(pipe);
    }
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let pipe = unsafe {
        SelfPipe {
            read: OwnedFd::from_raw_fd(fds[0]),
            write: OwnedFd::from_raw_fd(fds[1]),
        }
    };
    // Only callers holding ONE_AT_A_TIME get here, so nobody else sets it.
    let pipe = PIPE.get_or_init(|| pipe);
    PIPE_WRITE.store(pipe.write.as_raw_fd(), Ordering::Release);
    Ok(pipe)
}

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe calls here: write(2), and errno kept for the
    // code this signal interrupted.
    // SAFETY: __errno_location returns this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    let fd = PIPE_WRITE.load(Ordering::Acquire);
    if fd >= 0 {
        write_byte(fd, signal as u8);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

/// Writes one byte, dropping it if the pipe is full (a byte is waiting).
fn write_byte(fd: RawFd, byte: u8) {
    // SAFETY: `byte` is valid for a one-byte read; a bad `fd` is EBADF.
    unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
}

/// One byte from the non-blocking pipe, if there is one.
fn read_byte(fd: &OwnedFd) -> Option<u8> {
    let mut byte = 0u8;
    // SAFETY: `byte` is valid for a one-byte write.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut byte).cast(), 1) };
    (n == 1).then_some(byte)
}

/// Waits for the next byte.
fn wait_byte(fd: &OwnedFd) -> u8 {
    loop {
        if let Some(byte) = read_byte(fd) {
            return byte;
        }
        let mut pollfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; an EINTR only repeats the loop.
        unsafe { libc::poll(&mut pollfd, 1, -1) };
    }
}

/// The handlers [`serve_until_signal`] replaced, to put back.
struct Handlers {
    previous: Mutex<Vec<(libc::c_int, libc::sigaction)>>,
}

impl Handlers {
    /// Installs [`on_signal`] for every signal of [`SIGNALS`] the process
    /// doesn't ignore.
    fn install() -> io::Result<Self> {
        let handlers = Self {
            previous: Mutex::new(Vec::new()),
        };
        for signal in SIGNALS {
            // SAFETY: a zeroed sigaction is valid; the handler only calls
            // async-signal-safe functions.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if old.sa_sigaction == libc::SIG_IGN {
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(signal, &action, &mut old) != 0 {
                    let e = io::Error::last_os_error();
                    handlers.restore();
                    return Err(e);
                }
                handlers
                    .previous
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((signal, old));
            }
        }
        Ok(handlers)
    }

    /// Puts the previous handlers back (once; later calls do nothing).
    fn restore(&self) {
        let previous =
            std::mem::take(&mut *self.previous.lock().unwrap_or_else(|e| e.into_inner()));
        for (signal, old) in previous {
            // SAFETY: `old` is what sigaction returned for this signal.
            unsafe { libc::sigaction(signal, &old, std::ptr::null_mut()) };
        }
    }
}
