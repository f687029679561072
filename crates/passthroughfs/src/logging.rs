//! The daemon's log: standard error (colours only on a terminal, and not
//! with `NO_COLOR`), a file (`--log-file`), or syslog once a background
//! daemon has detached from the terminal that started it.
//!
//! The log never ends the daemon: a line that can't be written (standard
//! error a closed pipe, a full disk under the log file, no syslog socket)
//! is dropped, and the daemon serves on. [`say`] is the same for the
//! messages printed outside the log (the command's own errors).

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use tracing_subscriber::fmt::MakeWriter;

/// Set once the daemon logs to syslog instead of standard error.
static TO_SYSLOG: AtomicBool = AtomicBool::new(false);

/// `--log-file`: where every log line goes, if set (before syslog and
/// standard error).
static LOG_FILE: OnceLock<File> = OnceLock::new();

/// The syslog socket that glibc's `syslog(3)` sends to.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// Whether log lines may be coloured: standard error is a terminal and
/// `NO_COLOR` is unset or empty (<https://no-color.org>).
pub fn color_wanted() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Logs to standard error at `RUST_LOG`'s level (`default` without it),
/// coloured where [`color_wanted`].
pub fn init_logging(default: &str) {
    init_logging_with(default, color_wanted());
}

/// Like [`init_logging`], colours on or off as `ansi` says (off for a
/// daemon that goes to the background: its lines end up in syslog).
pub fn init_logging_with(default: &str, ansi: bool) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_ansi(ansi && LOG_FILE.get().is_none())
        // The subscriber would report a failed write on standard error
        // with `eprintln!`, which panics when that fails too; the writer
        // drops what it can't write instead.
        .log_internal_errors(false)
        .with_writer(LogWriter)
        .init();
}

/// `--log-file PATH`: opens PATH for appending (creating it, mode 0640)
/// and sends every log line there from now on, in the foreground and in
/// the background (instead of standard error and syslog). Call it before
/// [`init_logging_with`] (a log file gets no colours) and before the
/// daemon goes to the background (a relative PATH is the starting
/// directory's).
pub fn log_to_file(path: &Path) -> Result<(), crate::Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| crate::Failure(format!("--log-file {}: {e}", path.display())))?;
    LOG_FILE
        .set(file)
        .map_err(|_| crate::Failure("--log-file was set twice".into()))
}

/// Whether log lines go to a `--log-file`.
pub fn logs_to_file() -> bool {
    LOG_FILE.get().is_some()
}

/// From now on, log lines go to syslog (facility daemon, tagged
/// `passthroughfs[PID]`): the background daemon's standard error is
/// about to be closed. A `--log-file` stays where the lines go.
pub fn log_to_syslog() {
    connect_syslog();
    TO_SYSLOG.store(true, Ordering::Release);
}

/// Connects to syslog now (`LOG_NDELAY`) rather than at the first line:
/// a confined daemon can't reach `/dev/log` later (see
/// [`crate::sandbox`]).
pub fn connect_syslog() {
    // Whether anything listens, found out while `/dev/log` is in reach.
    syslog_listens();
    // The identity must outlive every syslog call: a static string.
    static IDENT: &std::ffi::CStr = c"passthroughfs";
    // SAFETY: IDENT is a static NUL-terminated string; openlog keeps the
    // pointer, which stays valid for the life of the process.
    unsafe {
        libc::openlog(
            IDENT.as_ptr(),
            libc::LOG_PID | libc::LOG_NDELAY,
            libc::LOG_DAEMON,
        )
    };
}

/// Whether a syslog daemon listens on [`SYSLOG_SOCKET`] (datagram or
/// stream, as `syslog(3)` tries them); without one, syslog lines are
/// lost.
///
/// Probed once (a confined daemon no longer reaches the socket by path:
/// [`connect_syslog`] probes before the confinement), then remembered.
pub fn syslog_listens() -> bool {
    use std::os::unix::net::{UnixDatagram, UnixStream};
    static LISTENS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LISTENS.get_or_init(|| {
        UnixDatagram::unbound().is_ok_and(|s| s.connect(SYSLOG_SOCKET).is_ok())
            || UnixStream::connect(SYSLOG_SOCKET).is_ok()
    })
}

/// Prints `line` (and a newline) on standard error, or nothing if that
/// fails (a closed pipe, a full disk): unlike `eprintln!`, which panics.
pub fn say(line: &str) {
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The subscriber's writer: standard error, the log file, or a line for
/// syslog.
struct LogWriter;

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Sink;

    fn make_writer(&'a self) -> Sink {
        Sink::new(libc::LOG_INFO)
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Sink {
        Sink::new(match *meta.level() {
            tracing::Level::ERROR => libc::LOG_ERR,
            tracing::Level::WARN => libc::LOG_WARNING,
            tracing::Level::INFO => libc::LOG_INFO,
            _ => libc::LOG_DEBUG,
        })
    }
}

/// Where one formatted event goes.
enum Sink {
    Stderr,
    File(&'static File),
    /// A priority and the line, sent when the event is written out.
    Syslog(libc::c_int, Vec<u8>),
}

impl Sink {
    fn new(priority: libc::c_int) -> Sink {
        if let Some(file) = LOG_FILE.get() {
            Sink::File(file)
        } else if TO_SYSLOG.load(Ordering::Acquire) {
            Sink::Syslog(priority, Vec::new())
        } else {
            Sink::Stderr
        }
    }
}

impl Write for Sink {
    /// Takes all of `buf`, whether or not it could be written: a log line
    /// lost (EPIPE, ENOSPC, EIO) must not become an error of the daemon.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Stderr => {
                let _ = std::io::stderr().lock().write_all(buf);
            }
            // One write(2) per event under O_APPEND: lines of concurrent
            // threads don't interleave.
            Sink::File(mut file) => {
                let _ = file.write_all(buf);
            }
            Sink::Syslog(_, line) => line.extend_from_slice(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Sink::Stderr = self {
            let _ = std::io::stderr().flush();
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let Sink::Syslog(priority, line) = self else {
            return;
        };
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end().replace('\0', " ");
        if let Ok(msg) = std::ffi::CString::new(text) {
            // SAFETY: both strings are NUL-terminated; "%s" takes one string.
            unsafe { libc::syslog(*priority, c"%s".as_ptr(), msg.as_ptr()) };
        }
    }
}

/// The current dispatcher, narrowed to one target: events and spans of
/// other targets are dropped. For a stand-in whose other lines would
/// repeat what the real thing logs later (the daemon's INIT stand-in keeps
/// only its `-d` request lines, target `fuse_request`).
pub fn only_target(target: &'static str) -> tracing::Dispatch {
    let inner = tracing::dispatcher::get_default(|d| d.clone());
    tracing::Dispatch::new(OnlyTarget { inner, target })
}

struct OnlyTarget {
    inner: tracing::Dispatch,
    target: &'static str,
}

impl tracing::Subscriber for OnlyTarget {
    fn register_callsite(
        &self,
        _metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Decided per event: the interest of a callsite is shared by every
        // dispatcher, and this one is short-lived.
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == self.target && self.inner.enabled(metadata)
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.inner.record(span, values)
    }

    fn record_follows_from(&self, span: &tracing::span::Id, follows: &tracing::span::Id) {
        self.inner.record_follows_from(span, follows)
    }

    fn event(&self, event: &tracing::Event<'_>) {
        self.inner.event(event)
    }

    fn enter(&self, span: &tracing::span::Id) {
        self.inner.enter(span)
    }

    fn exit(&self, span: &tracing::span::Id) {
        self.inner.exit(span)
    }

    fn clone_span(&self, id: &tracing::span::Id) -> tracing::span::Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: tracing::span::Id) -> bool {
        self.inner.try_close(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe nobody reads any more (EPIPE) costs the line, not the
    /// writer's caller: the write reports it all taken. (The daemon's
    /// tests start it with standard error such a pipe.)
    #[test]
    fn a_closed_pipe_drops_the_line() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both were just created and are owned here; the read end
        // is closed at once.
        let write_end = unsafe {
            libc::close(fds[0]);
            <File as std::os::fd::FromRawFd>::from_raw_fd(fds[1])
        };
        let file: &'static File = Box::leak(Box::new(write_end));
        assert_eq!(
            (&*file).write(b"x").unwrap_err().raw_os_error(),
            Some(libc::EPIPE),
            "the pipe is closed"
        );
        let mut sink = Sink::File(file);
        assert_eq!(sink.write(b"a line nobody reads\n").unwrap(), 20);
        assert!(sink.flush().is_ok());
    }

    /// A full disk under the log file: the same.
    #[test]
    fn a_full_log_file_drops_the_line() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap_or_else(|e| panic!("/dev/full (it answers ENOSPC) can't be opened: {e}"));
        let file: &'static File = Box::leak(Box::new(full));
        assert_eq!(
            (&*file).write(b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC),
            "/dev/full is full"
        );
        let mut sink = Sink::File(file);
        assert_eq!(
            sink.write(b"a line the disk has no room for\n").unwrap(),
            32
        );
        assert!(sink.flush().is_ok());
    }
}
