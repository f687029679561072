//! The daemon's start line: the [`StartLine`] it prints on standard output
//! once its mount is ready, how it is written and parsed, and the fields
//! every mode puts in it.

use super::DaemonArgs;
use std::fmt;

/// The prefix of the [`StartLine`].
pub const START_PREFIX: &str = "FUSE-BENCH-DAEMON READY";

/// The one line the daemon prints on standard output once its mount is
/// ready: [`START_PREFIX`] followed by `key=value` fields (values with
/// spaces in double quotes, `"` and `\` escaped with `\`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartLine {
    /// The fields, in order.
    pub fields: Vec<(String, String)>,
}

impl StartLine {
    /// Adds a field.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Parses a line printed by [`StartLine`]'s `Display`; `None` if it
    /// isn't one.
    pub fn parse(line: &str) -> Option<StartLine> {
        let rest = line.trim_end().strip_prefix(START_PREFIX)?;
        let mut fields = Vec::new();
        let mut chars = rest.chars().peekable();
        loop {
            while chars.next_if(|c| *c == ' ').is_some() {}
            if chars.peek().is_none() {
                return Some(StartLine { fields });
            }
            let mut key = String::new();
            for c in chars.by_ref() {
                if c == '=' {
                    break;
                }
                if c == ' ' {
                    return None;
                }
                key.push(c);
            }
            if key.is_empty() {
                return None;
            }
            let mut value = String::new();
            if chars.next_if_eq(&'"').is_some() {
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => value.push(chars.next()?),
                        c => value.push(c),
                    }
                }
            } else {
                while let Some(c) = chars.next_if(|c| *c != ' ') {
                    value.push(c);
                }
            }
            fields.push((key, value));
        }
    }
}

impl fmt::Display for StartLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(START_PREFIX)?;
        for (k, v) in &self.fields {
            if !v.is_empty() && !v.contains([' ', '"', '\\']) {
                write!(f, " {k}={v}")?;
            } else {
                write!(f, " {k}=\"")?;
                for c in v.chars() {
                    if c == '"' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("\"")?;
            }
        }
        Ok(())
    }
}

/// The fields every start line has, from the command line.
pub(super) fn base_line(args: &DaemonArgs) -> StartLine {
    StartLine::default()
        .with("transport", args.transport.as_str())
        .with("runtime", args.runtime.as_str())
}

pub(super) fn settings_fields(line: StartLine, args: &DaemonArgs) -> StartLine {
    line.with("pool", if args.fs.thread_pool { "on" } else { "off" })
        .with("cache", args.fs.cache.as_str())
        .with("writeback", if args.fs.writeback { "on" } else { "off" })
        .with(
            "readdirplus",
            if args
                .fs
                .passthrough_config()
                .is_ok_and(|c| c.readdirplus_offered())
            {
                "on"
            } else {
                "off"
            },
        )
        .with("xattr", if args.fs.no_xattr { "off" } else { "on" })
        .with(
            "kernel_passthrough",
            match (args.fs.passthrough, args.fs.no_passthrough) {
                (true, _) => "on",
                (_, true) => "off",
                // Where the kernel and the daemon's privileges allow it.
                _ => "auto",
            },
        )
        .with("pid", std::process::id())
        .with("mountpoint", args.mountpoint.display())
}

pub(super) fn announce(line: &StartLine) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // The harness waits for this line; a closed stdout is not our problem.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_line_round_trips() {
        let line = StartLine::default()
            .with("transport", "uring")
            .with("runtime", "sync")
            .with("buffers", "per-entry")
            .with("detail", "io_uring, 2 queues \"x\" \\ y")
            .with("empty", "");
        let text = line.to_string();
        assert!(text.starts_with("FUSE-BENCH-DAEMON READY transport=uring runtime=sync "));
        let parsed = StartLine::parse(&text).unwrap();
        assert_eq!(parsed, line);
        assert_eq!(parsed.get("buffers"), Some("per-entry"));
        assert_eq!(parsed.get("empty"), Some(""));
        assert_eq!(parsed.get("missing"), None);
        assert!(StartLine::parse("something else").is_none());
        assert!(StartLine::parse("FUSE-BENCH-DAEMON READY key=\"unterminated").is_none());
        assert!(StartLine::parse("FUSE-BENCH-DAEMON READY =x").is_none());
    }
}
