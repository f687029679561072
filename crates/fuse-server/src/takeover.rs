//! Continuing a live connection in another server (live upgrade): what the
//! server part of a hand-over needs.
//!
//! A FUSE connection lives as long as any `/dev/fuse` descriptor of it is
//! open, so a serving process can pass its descriptor to a new process
//! (over a Unix socket, `SCM_RIGHTS`; `fuse_transport_dev::takeover`) and
//! exit without the mount going away. The new process's [`Server`] has not
//! seen the kernel's INIT, and never will: the old one answered it. So the
//! old server writes down what INIT settled ([`Negotiated::to_state`]),
//! and the new one takes it over with [`Server::resume`], which runs the
//! file system's own `init` against the same kernel offer and refuses (with
//! the reason, leaving the old daemon serving) if this build would have
//! agreed to something else: the kernel keeps the old agreement, and a file
//! system that assumes another (a writeback cache it doesn't get, say)
//! would answer wrongly.
//!
//! ## The state text (version 1)
//!
//! Line-based, `key=value`, after a first line `fuse-negotiated 1`:
//! `kernel.major`, `kernel.minor`, `kernel.max_readahead`,
//! `kernel.flags` (hexadecimal, both halves, unknown bits kept),
//! `kernel.max_pages_limit`, `minor`, `flags` (hexadecimal), `max_write`,
//! `max_pages`, `max_readahead`, `time_gran`, `max_background`,
//! `congestion_threshold`, `max_stack_depth`, `request_timeout`. Unknown
//! keys are refused (a newer writer), as is another version; every key
//! must be there.

use crate::init::{negotiate, InitOutcome, KernelInit, Negotiated};
use crate::server::Server;
use fuse_abi::InitFlags;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;

/// A file system's own part of a live upgrade: what it writes down for a
/// new process and how it takes that back there. The transport moves the
/// connection and what INIT settled; this moves the rest (the node table,
/// open handles, ...), as bytes in a format of the file system's own and
/// descriptors they refer to by position (`fuse_transport_dev::takeover`
/// sends them over the socket with the connection's).
///
/// A file system that keeps nothing across requests needs no state:
/// return nothing from `save_state` and accept nothing in
/// `restore_state`. Version the format, and refuse another version or a
/// state of another source with the reason: the old daemon then serves on.
pub trait LiveState: Send + Sync {
    /// What a new process needs to answer for this one, taken while the
    /// session is paused (no request is being answered): state bytes and
    /// the descriptors they refer to.
    fn save_state(&self) -> io::Result<(Vec<u8>, Vec<std::os::fd::OwnedFd>)>;
    /// Takes [`LiveState::save_state`]'s output back, in a file system that
    /// has served nothing yet; an error refuses the takeover.
    fn restore_state(&self, state: &[u8], fds: Vec<std::os::fd::OwnedFd>) -> io::Result<()>;
    /// The new session serves (notifications can be sent): drop what the
    /// kernel may have cached on the old process's word, start watches.
    fn resumed(&self) {}
}

/// The version of [`Negotiated::to_state`]'s text.
pub const NEGOTIATED_STATE_VERSION: u32 = 1;

const HEADER: &str = "fuse-negotiated";

/// Why a state text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not a negotiated state text at all.
    #[error("not a FUSE negotiated state (first line {0:?})")]
    NotState(String),
    /// Another version of the format.
    #[error(
        "negotiated state version {found}, this build reads version {NEGOTIATED_STATE_VERSION}"
    )]
    Version {
        /// The version found.
        found: String,
    },
    /// A line that isn't `key=value`, an unknown key, or a value that
    /// doesn't parse.
    #[error("negotiated state: {0}")]
    Bad(String),
    /// A key that must be there isn't.
    #[error("negotiated state: {0} is missing")]
    Missing(&'static str),
}

impl Negotiated {
    /// What INIT settled, as the documented text of this module.
    pub fn to_state(&self) -> String {
        let k = &self.kernel;
        let mut s = format!("{HEADER} {NEGOTIATED_STATE_VERSION}\n");
        let mut line = |key: &str, value: String| {
            let _ = writeln!(s, "{key}={value}");
        };
        line("kernel.major", k.major.to_string());
        line("kernel.minor", k.minor.to_string());
        line("kernel.max_readahead", k.max_readahead.to_string());
        line("kernel.flags", format!("{:#x}", k.flags.bits()));
        line("kernel.max_pages_limit", k.max_pages_limit.to_string());
        line("minor", self.minor.to_string());
        line("flags", format!("{:#x}", self.flags.bits()));
        line("max_write", self.max_write.to_string());
        line("max_pages", self.max_pages.to_string());
        line("max_readahead", self.max_readahead.to_string());
        line("time_gran", self.time_gran.to_string());
        line("max_background", self.max_background.to_string());
        line(
            "congestion_threshold",
            self.congestion_threshold.to_string(),
        );
        line("max_stack_depth", self.max_stack_depth.to_string());
        line("request_timeout", self.request_timeout.to_string());
        s
    }

    /// Reads [`Negotiated::to_state`]'s text.
    pub fn from_state(text: &str) -> Result<Self, StateError> {
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        let version = first
            .strip_prefix(HEADER)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or_else(|| StateError::NotState(first.chars().take(40).collect()))?;
        if version != NEGOTIATED_STATE_VERSION.to_string() {
            return Err(StateError::Version {
                found: version.chars().take(20).collect(),
            });
        }
        const KEYS: [&str; 15] = [
            "kernel.major",
            "kernel.minor",
            "kernel.max_readahead",
            "kernel.flags",
            "kernel.max_pages_limit",
            "minor",
            "flags",
            "max_write",
            "max_pages",
            "max_readahead",
            "time_gran",
            "max_background",
            "congestion_threshold",
            "max_stack_depth",
            "request_timeout",
        ];
        let mut values = BTreeMap::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| StateError::Bad(format!("line {line:?} is not key=value")))?;
            let key = KEYS
                .iter()
                .find(|k| **k == key)
                .ok_or_else(|| StateError::Bad(format!("unknown key {key:?}")))?;
            values.insert(*key, value);
        }
        fn num<T: TryFrom<u64>>(
            values: &BTreeMap<&'static str, &str>,
            key: &'static str,
        ) -> Result<T, StateError> {
            let v = values.get(key).ok_or(StateError::Missing(key))?;
            let n = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse::<u64>(),
            }
            .map_err(|_| StateError::Bad(format!("{key}={v:?} is not a number")))?;
            T::try_from(n).map_err(|_| StateError::Bad(format!("{key}={v} is out of range")))
        }
        Ok(Negotiated {
            kernel: KernelInit {
                major: num(&values, "kernel.major")?,
                minor: num(&values, "kernel.minor")?,
                max_readahead: num(&values, "kernel.max_readahead")?,
                flags: InitFlags::from_bits_retain(num(&values, "kernel.flags")?),
                max_pages_limit: num(&values, "kernel.max_pages_limit")?,
            },
            minor: num(&values, "minor")?,
            flags: InitFlags::from_bits_retain(num(&values, "flags")?),
            max_write: num(&values, "max_write")?,
            max_pages: num(&values, "max_pages")?,
            max_readahead: num(&values, "max_readahead")?,
            time_gran: num(&values, "time_gran")?,
            max_background: num(&values, "max_background")?,
            congestion_threshold: num(&values, "congestion_threshold")?,
            max_stack_depth: num(&values, "max_stack_depth")?,
            request_timeout: num(&values, "request_timeout")?,
        })
    }
}

impl Server {
    /// Takes over a connection whose INIT another server answered with
    /// `negotiated` (see the module docs): the file system's `init` runs
    /// against the same kernel offer, and this server then serves as if it
    /// had answered INIT itself. Fails, changing nothing the kernel sees,
    /// if this server would have agreed to other flags or limits, or if it
    /// already serves a connection.
    pub fn resume(&self, negotiated: &Negotiated) -> io::Result<()> {
        if self.negotiated().is_some() {
            return Err(io::Error::other("the server already serves a connection"));
        }
        let mut config = *self.init_config();
        if let Some(files) = self.backing_files() {
            self.filesystem().attach_backing_files(files.clone());
        }
        self.filesystem()
            .init(&negotiated.kernel, &mut config)
            .map_err(|e| io::Error::new(e.kind(), format!("the file system refused: {e}")))?;
        let ours = match negotiate(&negotiated.kernel, &config) {
            InitOutcome::Agreed { negotiated, .. } => negotiated,
            _ => {
                return Err(io::Error::other(
                    "this server would not agree to the kernel's INIT",
                ))
            }
        };
        let mut differences = Vec::new();
        if ours.flags != negotiated.flags {
            let added = ours.flags & !negotiated.flags;
            let dropped = negotiated.flags & !ours.flags;
            differences.push(format!(
                "flags (this build would add {:#x} and drop {:#x})",
                added.bits(),
                dropped.bits()
            ));
        }
        let limits = [
            ("minor", ours.minor as u64, negotiated.minor as u64),
            (
                "max_write",
                ours.max_write as u64,
                negotiated.max_write as u64,
            ),
            (
                "max_pages",
                ours.max_pages as u64,
                negotiated.max_pages as u64,
            ),
            (
                "max_readahead",
                ours.max_readahead as u64,
                negotiated.max_readahead as u64,
            ),
            (
                "time_gran",
                ours.time_gran as u64,
                negotiated.time_gran as u64,
            ),
            (
                "max_stack_depth",
                ours.max_stack_depth as u64,
                negotiated.max_stack_depth as u64,
            ),
        ];
        for (name, mine, theirs) in limits {
            if mine != theirs {
                differences.push(format!("{name} ({mine}, the connection has {theirs})"));
            }
        }
        if !differences.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "this server would negotiate differently from the connection it takes over: {}",
                    differences.join(", ")
                ),
            ));
        }
        if !self.set_negotiated(*negotiated) {
            return Err(io::Error::other("the server already serves a connection"));
        }
        tracing::info!(
            flags = format_args!("{:#x}", negotiated.flags.bits()),
            max_write = negotiated.max_write,
            "took up a connection whose INIT another server answered (a takeover, or a stand-in during mount(2))"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::InitConfig;

    fn sample() -> Negotiated {
        let kernel = KernelInit {
            major: 7,
            minor: 45,
            max_readahead: 131072,
            flags: InitFlags::from_bits_retain(0x7_ffff_ffff_ffff),
            max_pages_limit: 256,
        };
        match negotiate(&kernel, &InitConfig::default()) {
            InitOutcome::Agreed { negotiated, .. } => negotiated,
            _ => panic!("not agreed"),
        }
    }

    #[test]
    fn negotiated_state_round_trips() {
        let n = sample();
        let text = n.to_state();
        assert!(text.starts_with("fuse-negotiated 1\n"), "{text}");
        assert_eq!(Negotiated::from_state(&text), Ok(n));
    }

    #[test]
    fn other_states_are_refused_with_the_reason() {
        let text = sample().to_state();
        assert!(matches!(
            Negotiated::from_state(&text.replace("fuse-negotiated 1", "fuse-negotiated 2")),
            Err(StateError::Version { .. })
        ));
        assert!(matches!(
            Negotiated::from_state("hello"),
            Err(StateError::NotState(_))
        ));
        assert!(matches!(
            Negotiated::from_state(&format!("{text}surprise=1\n")),
            Err(StateError::Bad(_))
        ));
        let without: String = text
            .lines()
            .filter(|l| !l.starts_with("max_write="))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            Negotiated::from_state(&without),
            Err(StateError::Missing("max_write"))
        );
        assert!(matches!(
            Negotiated::from_state(&text.replace("max_pages=", "max_pages=99999999")),
            Err(StateError::Bad(_))
        ));
    }
}
