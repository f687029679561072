//! The targets: native, our daemon in each mode, and the peers (libfuse's
//! passthrough_ll, libfuse master's passthrough_hp in three modes, fuser's
//! passthrough example): building them, mounting them, and making sure no
//! mount is ever left behind.
//!
//! Kept here: what the targets are (their kinds, names and order), where a
//! run keeps its files and which binaries it uses. The rest lives beside
//! it: [`build`] (building our binaries and the peers), [`command`] (the
//! command line serving each target), [`mount`] (mountinfo and
//! unmounting), [`running`] (starting, watching and stopping a target) and
//! [`hp_init`] (checking which mode libfuse master's passthrough_hp got).

mod build;
mod command;
mod hp_init;
mod mount;
mod running;

pub use build::{build_fuser, build_libfuse, build_libfuse_hp, build_ours, build_passthroughfs};
pub use command::{command_for, display_command, CommandLine, MountSettings};
pub use mount::sweep_stale_mounts;
pub use running::{start, Running, StartError};

use std::path::{Path, PathBuf};

/// Our daemon's transports, runtimes and pool switch, in report order.
pub const TRANSPORTS: [&str; 2] = ["dev", "uring"];
/// See [`TRANSPORTS`].
pub const RUNTIMES: [&str; 3] = ["sync", "tokio", "uring"];

/// The file in the backing directory whose contents prove that a mount
/// shows the backing directory.
pub const MARKER: &str = ".fuse-bench-marker";

/// A mode of `fuse-bench-daemon`: what it is served with (the flags off
/// by default).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OursMode {
    /// `--transport`.
    transport: &'static str,
    /// `--runtime`.
    runtime: &'static str,
    /// `--thread-pool`.
    pool: bool,
    /// `--passthrough` (required to be on), else `--no-passthrough`.
    kpt: bool,
    /// `--uring-one-ring`: the io_uring runtime's ring carries the
    /// FUSE commands too (one ring per queue).
    one_ring: bool,
    /// `--uring-unpinned`: the ring threads are free to run on any
    /// CPU instead of their queue's.
    unpinned: bool,
    /// `--uring-nice 0`: the ring threads at the nice value of the
    /// daemon's other threads rather than the transport's default.
    nice0: bool,
    /// `--listing-threads 1`: a READDIRPLUS reply's lookups on the
    /// serving thread alone, without helpers.
    listing1: bool,
}

/// What a target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    /// The backing directory itself.
    Native,
    /// `fuse-bench-daemon` in one mode.
    Ours(OursMode),
    /// libfuse's passthrough_ll.
    Libfuse,
    /// libfuse master's passthrough_hp in one mode.
    LibfuseHp(HpMode),
    /// fuser's passthrough example.
    Fuser,
    /// The `passthroughfs` daemon (crates/passthroughfs), which confines
    /// itself where `fuse-bench-daemon` doesn't: the cost of confinement
    /// is `pfs:<transport>` against `pfs:<transport>+open`.
    Passthroughfs {
        /// `--uring`, else /dev/fuse.
        uring: bool,
        /// At its default confinement (namespace sandbox, Landlock,
        /// seccomp kill); `false`: `--sandbox none --landlock off
        /// --seccomp none`.
        confined: bool,
    },
}

/// The modes passthrough_hp runs in, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpMode {
    /// `/dev/fuse`, READ and WRITE served by the daemon (`--nopassthrough`).
    Dev,
    /// FUSE over io_uring (`--nopassthrough -o io_uring`).
    Uring,
    /// Kernel passthrough (its default): READ and WRITE bypass the daemon.
    Kpt,
}

impl HpMode {
    /// Every mode, in report order.
    pub const ALL: [HpMode; 3] = [HpMode::Dev, HpMode::Uring, HpMode::Kpt];

    /// The mode's part of the target name (`libfuse-hp:<mode>`).
    pub fn name(self) -> &'static str {
        match self {
            HpMode::Dev => "dev",
            HpMode::Uring => "uring",
            HpMode::Kpt => "kpt",
        }
    }
}

/// A target by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// Its name in reports.
    pub name: String,
    /// What it is.
    pub kind: TargetKind,
}

impl TargetSpec {
    /// One line saying what it is.
    pub fn about(&self) -> String {
        match &self.kind {
            TargetKind::Native => "the backing directory itself (ext4), no FUSE".into(),
            TargetKind::Ours(m) => format!(
                "fuse-bench-daemon, transport {}, runtime {}{}{}{}{}{}{}; the run's \
                 settings as --cache <policy>, --writeback, --no-xattr",
                m.transport,
                m.runtime,
                if m.pool {
                    ", READ/WRITE thread pool"
                } else {
                    ""
                },
                if m.kpt {
                    ", kernel passthrough (READ/WRITE bypass the daemon)"
                } else {
                    ""
                },
                if m.one_ring {
                    ", one ring per queue (the runtime's ring carries the FUSE commands)"
                } else {
                    ""
                },
                if m.unpinned {
                    ", ring threads not pinned to their queues' CPUs"
                } else {
                    ""
                },
                if m.nice0 {
                    ", ring threads at nice 0 (not the transport's default)"
                } else {
                    ""
                },
                if m.listing1 {
                    ", a listing's lookups on the serving thread alone (no helpers)"
                } else {
                    ""
                }
            ),
            TargetKind::Libfuse => "libfuse 3.14 example passthrough_ll (C, /dev/fuse, clone_fd); \
                                    the run's settings as -o cache=<policy>, -o xattr|no_xattr, \
                                    -o writeback"
                .into(),
            TargetKind::LibfuseHp(mode) => format!(
                "libfuse master example passthrough_hp (C++, {}); cache never: --nocache (0 s \
                 timeouts, no keep_cache, no writeback cache); auto and always: its own cache \
                 (86400 s timeouts, keep_cache, cache_readdir{}); no writeback switch (it \
                 follows the cache) and no xattr switch (always served); always \
                 default_permissions; max_write 4 MiB",
                match mode {
                    HpMode::Dev => "/dev/fuse, --nopassthrough",
                    HpMode::Uring => "FUSE over io_uring, -o io_uring --nopassthrough",
                    HpMode::Kpt =>
                        "/dev/fuse, kernel passthrough (its default; READ/WRITE bypass the daemon)",
                },
                match mode {
                    HpMode::Kpt => "; no writeback cache: it excludes kernel passthrough",
                    _ => ", writeback cache",
                }
            ),
            TargetKind::Fuser => "fuser's passthrough example (Rust, /dev/fuse); takes none of \
                                  the run's cache, writeback or xattr settings"
                .into(),
            TargetKind::Passthroughfs { uring, confined } => format!(
                "passthroughfs, {}, no kernel passthrough, {}; the run's settings as --cache \
                 <policy>, --writeback, --no-xattr",
                if *uring {
                    "FUSE over io_uring (--uring)"
                } else {
                    "/dev/fuse"
                },
                if *confined {
                    "confined at its defaults (namespace sandbox, Landlock, seccomp kill)"
                } else {
                    "not confined (--sandbox none --landlock off --seccomp none)"
                }
            ),
        }
    }

    /// Whether it is a FUSE mount.
    pub fn is_fuse(&self) -> bool {
        self.kind != TargetKind::Native
    }
}

/// The target of FUSE over io_uring on the io_uring runtime with one ring
/// per queue (the daemon's `--uring-one-ring`).
pub const ONE_RING_TARGET: &str = "ours:uring/uring+onering";

/// The target of FUSE over io_uring with synchronous ring threads left
/// free to run on any CPU (the daemon's `--uring-unpinned`).
pub const UNPINNED_TARGET: &str = "ours:uring/sync+unpinned";

/// The targets of FUSE over io_uring with the ring threads at nice 0
/// (the daemon's `--uring-nice 0`), synchronous and with one ring: beside
/// the defaults, what the ring threads' nice value does.
pub const NICE0_TARGETS: [&str; 2] = ["ours:uring/sync+nice0", "ours:uring/uring+onering+nice0"];

/// The default modes of both transports with a READDIRPLUS reply's
/// lookups on the serving thread alone (the daemon's `--listing-threads
/// 1`): beside the defaults, what the listing helpers do.
pub const LISTING1_TARGETS: [&str; 2] = ["ours:dev/sync+list1", "ours:uring/sync+list1"];

/// The report name of one of our modes: `ours:<transport>/<runtime>`, then
/// `+pool` and `+kpt` (kernel passthrough).
pub fn ours_name(transport: &str, runtime: &str, pool: bool, kpt: bool) -> String {
    format!(
        "ours:{transport}/{runtime}{}{}",
        if pool { "+pool" } else { "" },
        if kpt { "+kpt" } else { "" }
    )
}

/// Every target, in report order: native; our modes (every transport ×
/// runtime, then the async runtimes with the thread pool, then the sync
/// runtimes with kernel passthrough); libfuse; libfuse-hp in its modes
/// (dev, uring, kpt); fuser. There is no
/// `sync+pool`: the backend's pool serves the async path, and synchronous
/// workers already block on threads of their own.
pub fn all_targets() -> Vec<TargetSpec> {
    let mut v = vec![TargetSpec {
        name: "native".into(),
        kind: TargetKind::Native,
    }];
    let mut modes = Vec::new();
    for pool in [false, true] {
        for transport in TRANSPORTS {
            for runtime in RUNTIMES {
                if pool && runtime == "sync" {
                    continue;
                }
                modes.push((transport, runtime, pool, false));
            }
        }
    }
    for transport in TRANSPORTS {
        modes.push((transport, "sync", false, true));
    }
    let mut ours: Vec<(String, OursMode)> = modes
        .into_iter()
        .map(|(transport, runtime, pool, kpt)| {
            let mode = OursMode {
                transport,
                runtime,
                pool,
                kpt,
                ..OursMode::default()
            };
            (ours_name(transport, runtime, pool, kpt), mode)
        })
        .collect();
    // FUSE over io_uring with one ring per queue (`--uring-one-ring`), and
    // synchronous ring threads not pinned to their queues' CPUs
    // (`--uring-unpinned`).
    let uring_variants = [
        (ONE_RING_TARGET, "uring", true, false, false),
        (UNPINNED_TARGET, "sync", false, true, false),
        (NICE0_TARGETS[0], "sync", false, false, true),
        (NICE0_TARGETS[1], "uring", true, false, true),
    ];
    for (name, runtime, one_ring, unpinned, nice0) in uring_variants {
        let mode = OursMode {
            transport: "uring",
            runtime,
            one_ring,
            unpinned,
            nice0,
            ..OursMode::default()
        };
        ours.push((name.into(), mode));
    }
    for (name, transport) in LISTING1_TARGETS.into_iter().zip(TRANSPORTS) {
        let mode = OursMode {
            transport,
            runtime: "sync",
            listing1: true,
            ..OursMode::default()
        };
        ours.push((name.into(), mode));
    }
    v.extend(ours.into_iter().map(|(name, mode)| TargetSpec {
        name,
        kind: TargetKind::Ours(mode),
    }));
    v.push(TargetSpec {
        name: "libfuse".into(),
        kind: TargetKind::Libfuse,
    });
    for mode in HpMode::ALL {
        v.push(TargetSpec {
            name: format!("libfuse-hp:{}", mode.name()),
            kind: TargetKind::LibfuseHp(mode),
        });
    }
    v.push(TargetSpec {
        name: "fuser".into(),
        kind: TargetKind::Fuser,
    });
    for transport in TRANSPORTS {
        for confined in [true, false] {
            v.push(TargetSpec {
                name: pfs_name(transport, confined),
                kind: TargetKind::Passthroughfs {
                    uring: transport == "uring",
                    confined,
                },
            });
        }
    }
    v
}

/// The report name of passthroughfs on `transport`: `pfs:<transport>`,
/// then `+open` when not confined.
pub fn pfs_name(transport: &str, confined: bool) -> String {
    format!("pfs:{transport}{}", if confined { "" } else { "+open" })
}

/// Where things live during a run.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The workspace root.
    pub root: PathBuf,
    /// `benches/`.
    pub benches: PathBuf,
    /// Cargo's target directory.
    pub target_dir: PathBuf,
    /// The backing directory every target serves (`target/bench/work/backing`).
    pub backing: PathBuf,
    /// The mountpoint (`target/bench/work/mnt`).
    pub mnt: PathBuf,
    /// Where the peers are built (`target/bench-peers`).
    pub peers: PathBuf,
}

impl Paths {
    /// The layout under `target_dir`.
    pub fn new(root: &Path, target_dir: &Path) -> Paths {
        let work = target_dir.join("bench").join("work");
        Paths {
            root: root.to_path_buf(),
            benches: root.join("benches"),
            target_dir: target_dir.to_path_buf(),
            backing: work.join("backing"),
            mnt: work.join("mnt"),
            peers: target_dir.join("bench-peers"),
        }
    }
}

/// The binaries a run uses; a peer that could not be built has the reason.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `fuse-bench-daemon`.
    pub daemon: PathBuf,
    /// `fuse-bench-meta`.
    pub meta: PathBuf,
    /// libfuse's passthrough_ll.
    pub libfuse: Option<Result<PathBuf, String>>,
    /// libfuse master's passthrough_hp.
    pub libfuse_hp: Option<Result<PathBuf, String>>,
    /// fuser's example.
    pub fuser: Option<Result<PathBuf, String>>,
    /// `passthroughfs` (release).
    pub passthroughfs: Option<Result<PathBuf, String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names() {
        let all = all_targets();
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names[0], "native");
        assert!(names.contains(&"ours:dev/sync"));
        assert!(names.contains(&"ours:uring/tokio+pool"));
        assert!(names.contains(&"ours:dev/sync+kpt"));
        assert!(names.contains(&"ours:uring/sync+kpt"));
        assert!(names.contains(&ONE_RING_TARGET));
        assert!(names.contains(&UNPINNED_TARGET));
        assert!(NICE0_TARGETS.iter().all(|t| names.contains(t)));
        assert!(LISTING1_TARGETS.iter().all(|t| names.contains(t)));
        assert_eq!(
            &names[names.len() - 9..],
            &[
                "libfuse",
                "libfuse-hp:dev",
                "libfuse-hp:uring",
                "libfuse-hp:kpt",
                "fuser",
                "pfs:dev",
                "pfs:dev+open",
                "pfs:uring",
                "pfs:uring+open"
            ]
        );
        assert_eq!(
            all.len(),
            1 + 2 * 3 + 2 * 2 + 2 + 1 + 1 + 2 + 2 + 1 + 3 + 1 + 4
        );
    }
}
