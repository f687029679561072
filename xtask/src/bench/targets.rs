//! The targets: native, our daemon in each mode, and the peers (libfuse's
//! passthrough_ll, libfuse master's passthrough_hp in three modes, fuser's
//! passthrough example): building them, mounting them, and making sure no
//! mount is ever left behind.

use super::config::Peers;
use crate::test::wait_for_exit;
use crate::text::strip_ansi;
use crate::vendor::{self, Source};
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Our daemon's transports, runtimes and pool switch, in report order.
pub const TRANSPORTS: [&str; 2] = ["dev", "uring"];
/// See [`TRANSPORTS`].
pub const RUNTIMES: [&str; 3] = ["sync", "tokio", "uring"];

/// Exit status of `fuse-bench-daemon` for a mode that doesn't exist yet.
const EXIT_NOT_AVAILABLE: i32 = 3;

/// The file in the backing directory whose contents prove that a mount
/// shows the backing directory.
pub const MARKER: &str = ".fuse-bench-marker";

/// What a target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    /// The backing directory itself.
    Native,
    /// `fuse-bench-daemon` in one mode.
    Ours {
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
    },
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

/// The environment variable that makes libfuse (master) log its INIT
/// negotiation: one `FUSE_INIT: FUSE_CAP_…` line per capability, then
/// `FUSE_INIT: io_uring=on` (or `io_uring=off:<why>`) and the scalars.
const HP_INIT_STATUS: &str = "FUSE_INIT_STATUS";

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
            TargetKind::Ours {
                transport,
                runtime,
                pool,
                kpt,
                one_ring,
            } => format!(
                "fuse-bench-daemon, transport {transport}, runtime {runtime}{}{}{}; the run's \
                 settings as --cache <policy>, --writeback, --no-xattr",
                if *pool {
                    ", READ/WRITE thread pool"
                } else {
                    ""
                },
                if *kpt {
                    ", kernel passthrough (READ/WRITE bypass the daemon)"
                } else {
                    ""
                },
                if *one_ring {
                    ", one ring per queue (the runtime's ring carries the FUSE commands)"
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
    for (transport, runtime, pool, kpt) in modes {
        v.push(TargetSpec {
            name: ours_name(transport, runtime, pool, kpt),
            kind: TargetKind::Ours {
                transport,
                runtime,
                pool,
                kpt,
                one_ring: false,
            },
        });
    }
    // FUSE over io_uring with one ring per queue (`--uring-one-ring`).
    v.push(TargetSpec {
        name: ONE_RING_TARGET.into(),
        kind: TargetKind::Ours {
            transport: "uring",
            runtime: "uring",
            pool: false,
            kpt: false,
            one_ring: true,
        },
    });
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

/// Builds `fuse-bench-daemon` and `fuse-bench-meta` (release).
pub fn build_ours(paths: &Paths) -> Result<(PathBuf, PathBuf)> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "bench",
            "--bin",
            "fuse-bench-daemon",
            "--bin",
            "fuse-bench-meta",
        ])
        .current_dir(&paths.root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of fuse-bench-daemon and fuse-bench-meta failed ({status})");
    }
    let release = paths.target_dir.join("release");
    Ok((
        release.join("fuse-bench-daemon"),
        release.join("fuse-bench-meta"),
    ))
}

/// Builds `passthroughfs` (release).
pub fn build_passthroughfs(paths: &Paths) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_quiet(
        Command::new(cargo)
            .args([
                "build",
                "--release",
                "-p",
                "fusewire-passthroughfs",
                "--bin",
                "passthroughfs",
            ])
            .current_dir(&paths.root),
        "cargo build of passthroughfs",
    )?;
    Ok(paths.target_dir.join("release").join("passthroughfs"))
}

fn newer(a: &Path, b: &Path) -> bool {
    let m = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    matches!((m(a), m(b)), (Some(a), Some(b)) if a > b)
}

/// Runs a command, returning its stdout, or an error with the tail of its
/// output.
fn run_quiet(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = text.lines().rev().take(6).collect();
    Err(format!(
        "{what} failed ({}): {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
    ))
}

/// Builds libfuse's passthrough_ll with gcc from the example source
/// Debian's libfuse3-dev ships (unpacking a `.c.gz` first).
pub fn build_libfuse(paths: &Paths, peers: &Peers) -> Result<PathBuf, String> {
    let out_dir = paths.peers.join("libfuse");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let src = PathBuf::from(&peers.libfuse.source);
    let gz = PathBuf::from(format!("{}.gz", src.display()));
    let dir = src.parent().unwrap_or(Path::new("/")).to_path_buf();
    let (source, include) = if src.is_file() {
        (src.clone(), dir.clone())
    } else if gz.is_file() {
        // Unpack the example and the headers next to it.
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let p = entry.map_err(|e| e.to_string())?.path();
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if let Some(plain) = name.strip_suffix(".gz") {
                if plain == src.file_name().unwrap_or_default().to_string_lossy()
                    || plain.ends_with(".h")
                {
                    let text = run_quiet(
                        Command::new("gzip").arg("-dc").arg(&p),
                        &format!("unpacking {}", p.display()),
                    )?;
                    std::fs::write(out_dir.join(plain), text).map_err(|e| e.to_string())?;
                }
            }
        }
        (
            out_dir.join(src.file_name().unwrap_or_default()),
            out_dir.clone(),
        )
    } else {
        return Err(format!(
            "{} (or .gz) not found: install libfuse3-dev (apt-get install libfuse3-dev)",
            src.display()
        ));
    };
    let bin = out_dir.join("passthrough_ll");
    if bin.is_file() && newer(&bin, &source) {
        return Ok(bin);
    }
    let flags = run_quiet(
        Command::new("pkg-config").args(["--cflags", "--libs", "fuse3"]),
        "pkg-config --cflags --libs fuse3",
    )?;
    run_quiet(
        Command::new("gcc")
            .args(&peers.libfuse.cflags)
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&bin)
            .arg(&source)
            .args(flags.split_whitespace()),
        "gcc passthrough_ll.c",
    )?;
    Ok(bin)
}

/// Builds fuser's example from the crate registry's package with `cargo install
/// --example` (needs the registry the first time; cached afterwards).
pub fn build_fuser(paths: &Paths, peers: &Peers) -> Result<PathBuf, String> {
    let v = &peers.fuser.version;
    let root = paths.peers.join(format!("fuser-{v}"));
    let bin = root.join("bin").join(&peers.fuser.example);
    if bin.is_file() {
        return Ok(bin);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_quiet(
        Command::new(cargo)
            .arg("install")
            .arg(format!("fuser@{v}"))
            .args(["--example", &peers.fuser.example, "--root"])
            .arg(&root)
            .arg("--target-dir")
            .arg(paths.peers.join("fuser-build"))
            .current_dir(&paths.peers),
        &format!("cargo install fuser@{v} --example {}", peers.fuser.example),
    )?;
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("cargo install did not produce {}", bin.display()))
    }
}

/// Builds libfuse master's `passthrough_hp` with meson and ninja under
/// `target/bench-peers/libfuse-hp/` from the source of [`vendor::source`]
/// (`LIBFUSE_SRC`, else the vendored tarball, else a shallow clone),
/// installing the packages the build needs first. A `STAMP` file names the
/// source the binary was built from; the build runs again only when the
/// binary is missing or the source is another one.
pub fn build_libfuse_hp(paths: &Paths, peers: &Peers) -> Result<PathBuf, String> {
    let hp = &peers.libfuse_hp;
    let dir = paths.peers.join("libfuse-hp");
    let build = dir.join("build");
    let bin = build.join(&hp.target);
    let src = vendor::source(&hp.source_var, &paths.root, &hp.tarball, "libfuse-hp")
        .map_err(|e| format!("{e:#}"))?;
    let stamp = src
        .stamp(&format!("clone --depth 1 {}", hp.upstream))
        .map_err(|e| format!("{e:#}"))?;
    let stamp_file = dir.join("STAMP");
    if bin.is_file() && std::fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp) {
        return Ok(bin);
    }
    let packages: Vec<&str> = hp.apt_packages.iter().map(String::as_str).collect();
    crate::test::ensure_apt_packages(&packages).map_err(|e| format!("{e:#}"))?;
    let fresh = |p: &Path| -> Result<(), String> {
        if p.exists() {
            std::fs::remove_dir_all(p).map_err(|e| format!("removing {}: {e}", p.display()))?;
        }
        Ok(())
    };
    let _ = std::fs::remove_file(&stamp_file);
    let unpacked = dir.join("src");
    let tree = match &src {
        Source::Tree(tree) => tree.clone(),
        Source::Tarball(t) => {
            fresh(&unpacked)?;
            std::fs::create_dir_all(&unpacked).map_err(|e| e.to_string())?;
            vendor::unpack(t, &unpacked).map_err(|e| format!("{e:#}"))?;
            unpacked.join("libfuse")
        }
        Source::Clone => {
            fresh(&unpacked)?;
            std::fs::create_dir_all(&unpacked).map_err(|e| e.to_string())?;
            let dest = unpacked.join("libfuse");
            run_quiet(
                Command::new("git")
                    .args(["clone", "-q", "--depth", "1", &hp.upstream])
                    .arg(&dest),
                &format!("git clone --depth 1 {}", hp.upstream),
            )?;
            dest
        }
    };
    if !tree.join("meson.build").is_file() {
        return Err(format!(
            "{} has no meson.build (is it a libfuse source tree?)",
            tree.display()
        ));
    }
    fresh(&build)?;
    run_quiet(
        Command::new("meson")
            .arg("setup")
            .arg(&build)
            .arg(&tree)
            .args(&hp.meson_options),
        "meson setup (libfuse)",
    )?;
    run_quiet(
        Command::new("ninja").arg("-C").arg(&build).arg(&hp.target),
        &format!("ninja {}", hp.target),
    )?;
    if !bin.is_file() {
        return Err(format!("ninja did not produce {}", bin.display()));
    }
    std::fs::write(&stamp_file, &stamp).map_err(|e| format!("{}: {e}", stamp_file.display()))?;
    Ok(bin)
}

/// How FUSE targets are configured for a run (the same for all of them).
#[derive(Debug, Clone)]
pub struct MountSettings {
    /// Cache policy (`never`, `auto`, `always`).
    pub cache: String,
    /// Writeback cache.
    pub writeback: bool,
    /// Serve extended attributes.
    pub xattr: bool,
    /// Extra arguments for our daemon.
    pub daemon_args: Vec<String>,
}

/// A program and its arguments.
pub type CommandLine = (PathBuf, Vec<String>);

/// The command serving `spec` (none for native); `Err` if its binary is
/// missing.
pub fn command_for(
    spec: &TargetSpec,
    bins: &Binaries,
    paths: &Paths,
    ms: &MountSettings,
) -> Result<Option<CommandLine>, String> {
    let backing = paths.backing.display().to_string();
    let mnt = paths.mnt.display().to_string();
    Ok(match &spec.kind {
        TargetKind::Native => None,
        TargetKind::Ours {
            transport,
            runtime,
            pool,
            kpt,
            one_ring,
        } => {
            let mut args: Vec<String> = vec![
                "--transport".into(),
                transport.to_string(),
                "--runtime".into(),
                runtime.to_string(),
                "--cache".into(),
                ms.cache.clone(),
            ];
            if *pool {
                args.push("--thread-pool".into());
            }
            if *one_ring {
                args.push("--uring-one-ring".into());
            }
            // The daemon's default is kernel passthrough where available:
            // without it, every READ and WRITE goes through the transport
            // and runtime being measured.
            args.push(
                if *kpt {
                    "--passthrough"
                } else {
                    "--no-passthrough"
                }
                .into(),
            );
            if ms.writeback {
                args.push("--writeback".into());
            }
            if !ms.xattr {
                args.push("--no-xattr".into());
            }
            args.extend(ms.daemon_args.iter().cloned());
            args.push(backing);
            args.push(mnt);
            Some((bins.daemon.clone(), args))
        }
        TargetKind::Libfuse => {
            let bin = match &bins.libfuse {
                Some(Ok(b)) => b.clone(),
                Some(Err(e)) => return Err(e.clone()),
                None => return Err("not built".into()),
            };
            let mut opts = format!(
                "clone_fd,source={backing},cache={},{}",
                ms.cache,
                if ms.xattr { "xattr" } else { "no_xattr" }
            );
            if ms.writeback {
                opts.push_str(",writeback");
            }
            Some((bin, vec!["-f".into(), "-o".into(), opts, mnt]))
        }
        TargetKind::LibfuseHp(mode) => {
            let bin = match &bins.libfuse_hp {
                Some(Ok(b)) => b.clone(),
                Some(Err(e)) => return Err(e.clone()),
                None => return Err("not built".into()),
            };
            // Only the cache policy maps: "never" to --nocache, the others
            // to its own cache. It has no writeback switch (the writeback
            // cache follows its cache) and no xattr switch.
            let mut args: Vec<String> = vec!["--foreground".into()];
            if *mode != HpMode::Kpt {
                args.push("--nopassthrough".into());
            }
            if *mode == HpMode::Uring {
                args.push("-o".into());
                args.push("io_uring".into());
            }
            if ms.cache == "never" {
                args.push("--nocache".into());
            }
            args.push(backing);
            args.push(mnt);
            Some((bin, args))
        }
        TargetKind::Fuser => {
            let bin = match &bins.fuser {
                Some(Ok(b)) => b.clone(),
                Some(Err(e)) => return Err(e.clone()),
                None => return Err("not built".into()),
            };
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
            Some((
                bin,
                vec![
                    "--n-threads".into(),
                    threads.to_string(),
                    "--clone-fd".into(),
                    mnt,
                ],
            ))
        }
        TargetKind::Passthroughfs { uring, confined } => {
            let bin = match &bins.passthroughfs {
                Some(Ok(b)) => b.clone(),
                Some(Err(e)) => return Err(e.clone()),
                None => return Err("not built".into()),
            };
            // Kernel passthrough off, as for fuse-bench-daemon: READ and
            // WRITE then go through the daemon and its filter.
            let mut args: Vec<String> = vec![
                "--foreground".into(),
                "--no-passthrough".into(),
                "--cache".into(),
                ms.cache.clone(),
            ];
            if *uring {
                args.push("--uring".into());
            }
            if !*confined {
                for a in [
                    "--sandbox",
                    "none",
                    "--landlock",
                    "off",
                    "--seccomp",
                    "none",
                ] {
                    args.push(a.into());
                }
            }
            if ms.writeback {
                args.push("--writeback".into());
            }
            if !ms.xattr {
                args.push("--no-xattr".into());
            }
            args.push(backing);
            args.push(mnt);
            Some((bin, args))
        }
    })
}

/// A command line as one string.
pub fn display_command(bin: &Path, args: &[String]) -> String {
    let name = bin.file_name().map_or_else(
        || bin.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    std::iter::once(name)
        .chain(args.iter().map(|a| {
            if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Decodes the octal escapes (`\040`) of /proc/self/mountinfo.
pub fn unescape_mount_path(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

/// (mountpoint, file system type) of every mount in a mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<(PathBuf, String)> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mountpoint = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            Some((unescape_mount_path(mountpoint), fstype.to_string()))
        })
        .collect()
}

/// The mounts of this process's namespace.
pub fn mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The file system type mounted at `path`, if any (the topmost mount).
pub fn mounted(path: &Path) -> Option<String> {
    mounts()
        .into_iter()
        .rev()
        .find(|(p, _)| p == path)
        .map(|(_, t)| t)
}

fn umount2(path: &Path, flags: libc::c_int) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Unmounts everything mounted at `path` (a plain unmount, then a lazy one
/// as the last resort). Returns what it had to do, for the log.
pub fn force_unmount(path: &Path) -> Vec<String> {
    let mut done = Vec::new();
    for _ in 0..8 {
        let Some(fstype) = mounted(path) else { break };
        match umount2(path, 0) {
            Ok(()) => done.push(format!("unmounted {} ({fstype})", path.display())),
            Err(e) => match umount2(path, libc::MNT_DETACH) {
                Ok(()) => done.push(format!(
                    "lazily unmounted {} ({fstype}; plain unmount: {e})",
                    path.display()
                )),
                Err(e2) => {
                    done.push(format!("cannot unmount {}: {e2}", path.display()));
                    break;
                }
            },
        }
    }
    done
}

/// Unmounts whatever an earlier, interrupted run left under `dir`.
pub fn sweep_stale_mounts(dir: &Path) -> Vec<String> {
    let mut done = Vec::new();
    let mut stale: Vec<PathBuf> = mounts()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(dir))
        .collect();
    stale.sort();
    stale.dedup();
    for p in stale.into_iter().rev() {
        done.extend(force_unmount(&p));
    }
    done
}

/// Why a target didn't start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// Our daemon said the mode doesn't exist yet.
    NotAvailable(String),
    /// It mounted something that isn't the backing directory.
    Unusable(String),
    /// Anything else.
    Failed(String),
}

/// A running target. Dropping it stops it and makes sure nothing stays
/// mounted.
pub struct Running {
    child: Option<Child>,
    mnt: PathBuf,
    /// The directory workloads use (the mountpoint, or the backing
    /// directory for native).
    pub root: PathBuf,
    /// Our daemon's start line.
    pub start_line: Option<String>,
    log: PathBuf,
    stopped: bool,
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>();
    v[v.len().saturating_sub(lines)..].join(" / ")
}

/// Starts `spec` and waits until its mount shows the backing directory.
pub fn start(
    spec: &TargetSpec,
    command: Option<CommandLine>,
    paths: &Paths,
    marker_token: &str,
    log: &Path,
    timeout: Duration,
) -> Result<Running, StartError> {
    let Some((bin, args)) = command else {
        return Ok(Running {
            child: None,
            mnt: paths.mnt.clone(),
            root: paths.backing.clone(),
            start_line: None,
            log: log.to_path_buf(),
            stopped: true,
        });
    };
    if let Some(fstype) = mounted(&paths.mnt) {
        let done = force_unmount(&paths.mnt);
        if mounted(&paths.mnt).is_some() {
            return Err(StartError::Failed(format!(
                "{} is still mounted ({fstype}): {}",
                paths.mnt.display(),
                done.join("; ")
            )));
        }
    }
    std::fs::create_dir_all(&paths.mnt)
        .map_err(|e| StartError::Failed(format!("creating {}: {e}", paths.mnt.display())))?;
    let stdout_path = log.with_extension("stdout");
    let open = |p: &Path| {
        File::create(p).map_err(|e| StartError::Failed(format!("creating {}: {e}", p.display())))
    };
    let hp = match spec.kind {
        TargetKind::LibfuseHp(mode) => Some(mode),
        _ => None,
    };
    let mut cmd = Command::new(&bin);
    if hp.is_some() {
        // libfuse logs its INIT negotiation, which says whether the mode
        // asked for is the mode it got.
        cmd.env(HP_INIT_STATUS, "1");
    }
    let child = cmd
        .args(&args)
        .stdin(Stdio::null())
        .stdout(open(&stdout_path)?)
        .stderr(open(log)?)
        // Its own process group: a Ctrl-C at the terminal reaches the
        // harness, which then stops the daemon in order.
        .process_group(0)
        .spawn()
        .map_err(|e| StartError::Failed(format!("starting {}: {e}", bin.display())))?;
    let mut running = Running {
        child: Some(child),
        mnt: paths.mnt.clone(),
        root: paths.mnt.clone(),
        start_line: None,
        log: log.to_path_buf(),
        stopped: false,
    };
    let ours = matches!(spec.kind, TargetKind::Ours { .. });
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = running
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            running.child = None;
            let why = strip_ansi(&tail(log, 3));
            let _ = force_unmount(&paths.mnt);
            running.stopped = true;
            return Err(if hp == Some(HpMode::Uring) {
                // Whatever stops it, the uring mode is what can't start here.
                StartError::NotAvailable(format!("exited during start ({status}): {why}"))
            } else if ours && status.code() == Some(EXIT_NOT_AVAILABLE) {
                let why = why
                    .rsplit(" / ")
                    .next()
                    .unwrap_or(&why)
                    .trim_start_matches("fuse-bench-daemon: error: ")
                    .trim_start_matches("not available yet: ")
                    .to_string();
                StartError::NotAvailable(why)
            } else {
                StartError::Failed(format!("exited during start ({status}): {why}"))
            });
        }
        if ours && running.start_line.is_none() {
            let mut text = String::new();
            if let Ok(mut f) = File::open(&stdout_path) {
                let _ = f.read_to_string(&mut text);
            }
            running.start_line = text
                .lines()
                .find(|l| l.starts_with("FUSE-BENCH-DAEMON READY"))
                .map(str::to_string);
        }
        let fuse_mounted = mounted(&paths.mnt).is_some_and(|t| t.starts_with("fuse"));
        if fuse_mounted && (!ours || running.start_line.is_some()) {
            match std::fs::read_to_string(paths.mnt.join(MARKER)) {
                Ok(t) if t.trim() == marker_token => {
                    let Some(mode) = hp else {
                        return Ok(running);
                    };
                    // The INIT status is logged before INIT is answered, so
                    // it is complete once the mount serves.
                    let log_text = std::fs::read_to_string(log).unwrap_or_default();
                    return match hp_mode_check(mode, &HpInit::parse(&log_text)) {
                        Ok(line) => {
                            running.start_line = line;
                            Ok(running)
                        }
                        Err(why) => {
                            running.stop_quietly();
                            Err(StartError::NotAvailable(why))
                        }
                    };
                }
                other => {
                    let mut names: Vec<String> = std::fs::read_dir(&paths.mnt)
                        .map(|d| {
                            d.filter_map(|e| e.ok())
                                .map(|e| e.file_name().to_string_lossy().into_owned())
                                .collect()
                        })
                        .unwrap_or_default();
                    names.sort();
                    let found = match other {
                        Ok(_) => "a different marker".to_string(),
                        Err(e) => format!("no marker ({e})"),
                    };
                    let mut why = format!(
                        "it mounts, but the mount is not the backing directory: {found}; its root \
                         lists [{}]",
                        names.join(", ")
                    );
                    if spec.kind == TargetKind::Fuser {
                        why.push_str(
                            " — fuser's passthrough example serves one fixed file (/etc/profile, \
                             through FUSE_PASSTHROUGH) and takes no source directory, so no \
                             workload can run on it",
                        );
                    }
                    running.stop_quietly();
                    return Err(StartError::Unusable(why));
                }
            }
        }
        if Instant::now() >= deadline {
            running.stop_quietly();
            return Err(StartError::Failed(format!(
                "not ready after {} s: {}",
                timeout.as_secs(),
                strip_ansi(&tail(log, 3))
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What libfuse (master) logged of its INIT negotiation with
/// `FUSE_INIT_STATUS` set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HpInit {
    /// Whether there was any `FUSE_INIT:` line.
    pub logged: bool,
    /// The capabilities negotiated (`FUSE_CAP_…`).
    pub caps: Vec<String>,
    /// `on`, or `off:<why>`.
    pub io_uring: Option<String>,
    /// `key=value` scalars other than io_uring, in log order.
    pub scalars: Vec<(String, String)>,
    /// libfuse's own line when the ring failed to start.
    pub uring_failure: Option<String>,
}

impl HpInit {
    /// Reads the status lines out of a daemon's log.
    pub fn parse(log: &str) -> HpInit {
        let mut init = HpInit::default();
        for line in log.lines() {
            let line = line.trim();
            if line.starts_with("fuse: failed to start io-uring") {
                init.uring_failure = Some(line.to_string());
            }
            let Some(rest) = line.strip_prefix("FUSE_INIT: ") else {
                continue;
            };
            init.logged = true;
            let rest = rest.trim();
            match rest.split_once('=') {
                Some(("io_uring", v)) => init.io_uring = Some(v.to_string()),
                Some((k, v)) => init.scalars.push((k.to_string(), v.to_string())),
                None => init.caps.push(rest.to_string()),
            }
        }
        init
    }

    fn cap(&self, name: &str) -> bool {
        self.caps.iter().any(|c| c == name)
    }

    fn scalar(&self, key: &str) -> Option<&str> {
        self.scalars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Whether passthrough_hp runs in `mode`, from its INIT status: the start
/// line to record (`None` when it logged none), or why the mode is not
/// available. `--nopassthrough` still negotiates `FUSE_PASSTHROUGH` (it
/// just never opens a backing file), so kernel passthrough is on only in
/// the kpt mode; io_uring silently falls back to /dev/fuse when the ring
/// can't start, which this turns into "not available".
pub fn hp_mode_check(mode: HpMode, init: &HpInit) -> Result<Option<String>, String> {
    if !init.logged {
        return match mode {
            HpMode::Dev => Ok(None),
            _ => Err(format!(
                "it logged no INIT status ({HP_INIT_STATUS}=1; a libfuse older than master?), so \
                 whether it runs in the {} mode can't be told",
                mode.name()
            )),
        };
    }
    let uring = init.io_uring.as_deref().unwrap_or("unknown");
    let kpt = mode == HpMode::Kpt && init.cap("FUSE_CAP_PASSTHROUGH");
    match mode {
        HpMode::Uring if uring != "on" => {
            return Err(format!(
                "FUSE over io_uring did not start (io_uring={uring}{}); it would serve /dev/fuse",
                init.uring_failure
                    .as_deref()
                    .map_or(String::new(), |l| format!("; {l}"))
            ))
        }
        HpMode::Kpt if !kpt => {
            return Err(
                "the kernel did not grant FUSE_PASSTHROUGH; it would serve READ and WRITE itself"
                    .into(),
            )
        }
        HpMode::Dev if uring == "on" => {
            return Err("it turned FUSE over io_uring on without being asked to".into())
        }
        _ => {}
    }
    let onoff = |b: bool| if b { "on" } else { "off" };
    let mut line = format!(
        "LIBFUSE-HP INIT mode={} io_uring={} kernel_passthrough={} writeback_cache={} \
         readdirplus={} splice={}",
        mode.name(),
        if uring == "on" { "on" } else { "off" },
        onoff(kpt),
        onoff(init.cap("FUSE_CAP_WRITEBACK_CACHE")),
        onoff(init.cap("FUSE_CAP_READDIRPLUS")),
        onoff(init.cap("FUSE_CAP_SPLICE_READ")),
    );
    if let (Some(major), Some(minor)) = (init.scalar("proto_major"), init.scalar("proto_minor")) {
        line.push_str(&format!(" proto={major}.{minor}"));
    }
    for key in ["max_write", "max_readahead"] {
        if let Some(v) = init.scalar(key) {
            line.push_str(&format!(" {key}={v}"));
        }
    }
    Ok(Some(line))
}

impl Running {
    /// Stops the target: SIGTERM to the daemon (only while it is still our
    /// un-reaped child, so its PID can't belong to anyone else), a wait,
    /// then unmounting (lazily as the last resort) and SIGKILL. Returns
    /// what had to be forced, for the log; empty when the daemon unmounted
    /// and exited by itself.
    pub fn stop(&mut self) -> Vec<String> {
        if self.stopped {
            return Vec::new();
        }
        self.stopped = true;
        let mut forced = Vec::new();
        if let Some(mut child) = self.child.take() {
            // try_wait() == None: the child is alive and not reaped, so its
            // PID is still this process's child.
            if let Ok(None) = child.try_wait() {
                // SAFETY: kill(2) on our own un-reaped child's PID.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                if wait_for_exit(&mut child, Duration::from_secs(10)).is_none() {
                    forced.push("daemon ignored SIGTERM for 10 s".to_string());
                    forced.extend(force_unmount(&self.mnt));
                    if wait_for_exit(&mut child, Duration::from_secs(5)).is_none() {
                        if let Ok(None) = child.try_wait() {
                            // SAFETY: as above; still our un-reaped child.
                            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
                        }
                        let _ = child.wait();
                        forced.push("killed the daemon".into());
                    }
                }
            }
        }
        forced.extend(force_unmount(&self.mnt));
        forced
    }

    fn stop_quietly(&mut self) {
        let _ = self.stop();
    }

    /// The daemon's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The daemon's PID while it runs and is our un-reaped child (so the
    /// PID is still its own); `None` for native.
    pub fn pid(&mut self) -> Option<u32> {
        let child = self.child.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Whether the daemon is still running (always true for native).
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            None => self.stopped || self.root != self.mnt,
            Some(c) => matches!(c.try_wait(), Ok(None)),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for line in self.stop() {
            eprintln!("bench: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parsing() {
        let text = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    99 22 0:55 / /tmp/a\\040b rw,nosuid - fuse.fuse-bench src rw,user_id=0\n\
                    100 22 0:56 / /x rw master:2 shared:3 - fuse /dev/fuse rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(
            m,
            vec![
                (PathBuf::from("/"), "ext4".to_string()),
                (PathBuf::from("/tmp/a b"), "fuse.fuse-bench".to_string()),
                (PathBuf::from("/x"), "fuse".to_string()),
            ]
        );
        assert_eq!(unescape_mount_path("a\\134b\\011"), PathBuf::from("a\\b\t"));
        assert_eq!(
            unescape_mount_path("trailing\\04"),
            PathBuf::from("trailing\\04")
        );
    }

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
        assert_eq!(all.len(), 1 + 2 * 3 + 2 * 2 + 2 + 1 + 1 + 3 + 1 + 4);
    }

    #[test]
    fn commands_are_fair() {
        let paths = Paths::new(Path::new("/w"), Path::new("/w/target"));
        let bins = Binaries {
            daemon: "/w/target/release/fuse-bench-daemon".into(),
            meta: "/m".into(),
            libfuse: Some(Ok("/p/passthrough_ll".into())),
            libfuse_hp: Some(Ok("/p/passthrough_hp".into())),
            fuser: Some(Err("no network".into())),
            passthroughfs: Some(Ok("/w/target/release/passthroughfs".into())),
        };
        let ms = MountSettings {
            cache: "auto".into(),
            writeback: true,
            xattr: false,
            daemon_args: vec!["--threads".into(), "4".into()],
        };
        let all = all_targets();
        let find = |n: &str| all.iter().find(|t| t.name == n).unwrap();
        assert_eq!(command_for(find("native"), &bins, &paths, &ms), Ok(None));
        let (_, args) = command_for(find("ours:dev/sync+kpt"), &bins, &paths, &ms)
            .unwrap()
            .unwrap();
        assert!(args.contains(&"--passthrough".to_string()));
        assert!(!all.iter().any(|t| t.name.ends_with("sync+pool")));
        let (bin, args) = command_for(find("ours:uring/tokio+pool"), &bins, &paths, &ms)
            .unwrap()
            .unwrap();
        assert_eq!(
            display_command(&bin, &args),
            "fuse-bench-daemon --transport uring --runtime tokio --cache auto --thread-pool \
             --no-passthrough --writeback --no-xattr --threads 4 /w/target/bench/work/backing /w/target/bench/work/mnt"
        );
        let (bin, args) = command_for(find(ONE_RING_TARGET), &bins, &paths, &ms)
            .unwrap()
            .unwrap();
        assert_eq!(
            display_command(&bin, &args),
            "fuse-bench-daemon --transport uring --runtime uring --cache auto --uring-one-ring \
             --no-passthrough --writeback --no-xattr --threads 4 /w/target/bench/work/backing /w/target/bench/work/mnt"
        );
        // The two passthroughfs targets differ only in the confinement.
        let (bin, args) = command_for(find("pfs:uring+open"), &bins, &paths, &ms)
            .unwrap()
            .unwrap();
        assert_eq!(
            display_command(&bin, &args),
            "passthroughfs --foreground --no-passthrough --cache auto --uring --sandbox none \
             --landlock off --seccomp none --writeback --no-xattr /w/target/bench/work/backing \
             /w/target/bench/work/mnt"
        );
        let (bin, args) = command_for(find("pfs:uring"), &bins, &paths, &ms)
            .unwrap()
            .unwrap();
        assert_eq!(
            display_command(&bin, &args),
            "passthroughfs --foreground --no-passthrough --cache auto --uring --writeback \
             --no-xattr /w/target/bench/work/backing /w/target/bench/work/mnt"
        );
        let (bin, args) = command_for(find("libfuse"), &bins, &paths, &ms)
            .unwrap()
            .unwrap();
        assert_eq!(
            display_command(&bin, &args),
            "passthrough_ll -f -o clone_fd,source=/w/target/bench/work/backing,cache=auto,no_xattr,writeback \
             /w/target/bench/work/mnt"
        );
        let hp = |name: &str, ms: &MountSettings| {
            let (bin, args) = command_for(find(name), &bins, &paths, ms).unwrap().unwrap();
            display_command(&bin, &args)
        };
        assert_eq!(
            hp("libfuse-hp:dev", &ms),
            "passthrough_hp --foreground --nopassthrough /w/target/bench/work/backing \
             /w/target/bench/work/mnt"
        );
        assert_eq!(
            hp("libfuse-hp:uring", &ms),
            "passthrough_hp --foreground --nopassthrough -o io_uring \
             /w/target/bench/work/backing /w/target/bench/work/mnt"
        );
        assert_eq!(
            hp("libfuse-hp:kpt", &ms),
            "passthrough_hp --foreground /w/target/bench/work/backing /w/target/bench/work/mnt"
        );
        // Only "never" maps: hp's cache is all or nothing.
        let never = MountSettings {
            cache: "never".into(),
            ..ms.clone()
        };
        assert_eq!(
            hp("libfuse-hp:uring", &never),
            "passthrough_hp --foreground --nopassthrough -o io_uring --nocache \
             /w/target/bench/work/backing /w/target/bench/work/mnt"
        );
        let (_, args) = command_for(find("libfuse"), &bins, &paths, &never)
            .unwrap()
            .unwrap();
        assert!(args[2].contains("cache=never"));
        let unbuilt = Binaries {
            libfuse_hp: Some(Err("meson failed".into())),
            ..bins.clone()
        };
        assert_eq!(
            command_for(find("libfuse-hp:kpt"), &unbuilt, &paths, &ms),
            Err("meson failed".to_string())
        );
        assert_eq!(
            command_for(find("fuser"), &bins, &paths, &ms),
            Err("no network".to_string())
        );
    }

    /// As libfuse master logs it with FUSE_INIT_STATUS=1 (trimmed).
    const HP_LOG: &str = "FUSE_INIT: FUSE_CAP_ASYNC_READ\n\
                          FUSE_INIT: FUSE_CAP_SPLICE_READ\n\
                          FUSE_INIT: FUSE_CAP_READDIRPLUS\n\
                          FUSE_INIT: FUSE_CAP_WRITEBACK_CACHE\n\
                          FUSE_INIT: FUSE_CAP_PASSTHROUGH\n\
                          FUSE_INIT: FUSE_CAP_OVER_IO_URING\n\
                          FUSE_INIT: io_uring=on\n\
                          FUSE_INIT: proto_major=7\n\
                          FUSE_INIT: proto_minor=45\n\
                          FUSE_INIT: max_readahead=131072\n\
                          FUSE_INIT: max_write=4194304\n\
                          FUSE_INIT: max_background=0\n";

    #[test]
    fn hp_modes_are_checked() {
        let on = HpInit::parse(HP_LOG);
        assert!(on.logged);
        assert_eq!(on.io_uring.as_deref(), Some("on"));
        assert_eq!(
            hp_mode_check(HpMode::Uring, &on).unwrap().unwrap(),
            "LIBFUSE-HP INIT mode=uring io_uring=on kernel_passthrough=off writeback_cache=on \
             readdirplus=on splice=on proto=7.45 max_write=4194304 max_readahead=131072"
        );
        let failed = HP_LOG
            .replace("FUSE_INIT: FUSE_CAP_OVER_IO_URING\n", "")
            .replace(
                "io_uring=on",
                "io_uring=off:start_failed:Operation not permitted",
            )
            + "fuse: failed to start io-uring: Operation not permitted\n";
        let off = HpInit::parse(&failed);
        let why = hp_mode_check(HpMode::Uring, &off).unwrap_err();
        assert!(why.contains("io_uring=off:start_failed"), "{why}");
        assert!(why.contains("failed to start io-uring"), "{why}");
        assert!(hp_mode_check(HpMode::Dev, &off)
            .unwrap()
            .unwrap()
            .contains("mode=dev io_uring=off kernel_passthrough=off"));
        assert!(hp_mode_check(HpMode::Dev, &on).is_err());
        assert!(hp_mode_check(HpMode::Kpt, &off)
            .unwrap()
            .unwrap()
            .contains("kernel_passthrough=on"));
        let no_kpt = HpInit::parse(&failed.replace("FUSE_INIT: FUSE_CAP_PASSTHROUGH\n", ""));
        assert!(hp_mode_check(HpMode::Kpt, &no_kpt).is_err());
        let silent = HpInit::parse("some other line\n");
        assert!(!silent.logged);
        assert_eq!(hp_mode_check(HpMode::Dev, &silent), Ok(None));
        assert!(hp_mode_check(HpMode::Uring, &silent).is_err());
    }

    #[test]
    fn strips_colors() {
        assert_eq!(strip_ansi("\u{1b}[33m WARN\u{1b}[0m x"), " WARN x");
    }
}
