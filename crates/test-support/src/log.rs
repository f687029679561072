//! Capturing what a test's log writer writes, and reading fuse-server's
//! request log lines in it.

use std::io;
use std::sync::{Arc, Mutex};

/// A log writer into a shared buffer: clones write to the same bytes, so a
/// test hands one to a `tracing` subscriber ([`LogBuf::subscriber`]) and
/// reads the lines through another.
#[derive(Clone, Default)]
pub struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl LogBuf {
    /// A `tracing` subscriber that writes the events `filter` (an
    /// `EnvFilter` directive) lets through into this buffer, as plain
    /// lines: no colours, no times.
    pub fn subscriber(&self, filter: &str) -> impl tracing::Subscriber + Send + Sync + 'static {
        let sink = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .without_time()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .finish()
    }

    /// Everything written so far; panics unless it is UTF-8 (as what a
    /// `tracing` formatter writes is).
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).expect("the log is not UTF-8")
    }

    /// The lines written so far.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_string).collect()
    }
}

impl io::Write for LogBuf {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A line of fuse-server's request log without the latency that ends it,
/// ` (N µs)`; panics unless it ends with one whose N is a whole number.
pub fn without_latency(line: &str) -> &str {
    let (rest, latency) = line
        .rsplit_once(" (")
        .unwrap_or_else(|| panic!("no latency: {line}"));
    let micros = latency
        .strip_suffix(" µs)")
        .unwrap_or_else(|| panic!("no latency: {line}"));
    assert!(micros.parse::<u64>().is_ok(), "latency: {line}");
    rest
}

/// `s` without terminal colour sequences (`ESC [ ... m`, as `tracing` and
/// pjdfstest write them).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
