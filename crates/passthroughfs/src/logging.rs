//! The daemon's log: standard error (colours only on a terminal, and not
//! with `NO_COLOR`), or syslog once a background daemon has detached from
//! the terminal that started it.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_subscriber::fmt::MakeWriter;

/// Set once the daemon logs to syslog instead of standard error.
static TO_SYSLOG: AtomicBool = AtomicBool::new(false);

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
        .with_ansi(ansi)
        .with_writer(LogWriter)
        .init();
}

/// From now on, log lines go to syslog (facility daemon, tagged
/// `passthroughfs[PID]`): the background daemon's standard error is
/// about to be closed.
pub fn log_to_syslog() {
    connect_syslog();
    TO_SYSLOG.store(true, Ordering::Release);
}

/// Connects to syslog now (`LOG_NDELAY`) rather than at the first line:
/// a confined daemon can't reach `/dev/log` later (see
/// [`crate::sandbox`]).
pub fn connect_syslog() {
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

/// The subscriber's writer: standard error, or a line for syslog.
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
    /// A priority and the line, sent when the event is written out.
    Syslog(libc::c_int, Vec<u8>),
}

impl Sink {
    fn new(priority: libc::c_int) -> Sink {
        if TO_SYSLOG.load(Ordering::Acquire) {
            Sink::Syslog(priority, Vec::new())
        } else {
            Sink::Stderr
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Stderr => std::io::stderr().write(buf),
            Sink::Syslog(_, line) => {
                line.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stderr => std::io::stderr().flush(),
            Sink::Syslog(..) => Ok(()),
        }
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
