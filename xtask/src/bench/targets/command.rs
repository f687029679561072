//! The command line serving each target: our daemon's and every peer's
//! arguments for the run's settings. Apart because it is pure (no process,
//! no mount), so the fairness of the settings across targets is tested here.

use super::{Binaries, HpMode, Paths, TargetKind, TargetSpec};
use std::path::{Path, PathBuf};

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
        TargetKind::Ours(m) => {
            let mut args: Vec<String> = vec![
                "--transport".into(),
                m.transport.to_string(),
                "--runtime".into(),
                m.runtime.to_string(),
                "--cache".into(),
                ms.cache.clone(),
            ];
            if m.pool {
                args.push("--thread-pool".into());
            }
            if m.one_ring {
                args.push("--uring-one-ring".into());
            }
            if m.nice0 {
                args.push("--uring-nice".into());
                args.push("0".into());
            }
            if m.listing1 {
                args.push("--listing-threads".into());
                args.push("1".into());
            }
            if m.unpinned {
                args.push("--uring-unpinned".into());
            }
            // The daemon's default is kernel passthrough where available:
            // without it, every READ and WRITE goes through the transport
            // and runtime being measured.
            args.push(
                if m.kpt {
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
                args.extend(crate::UNCONFINED.map(String::from));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::targets::{all_targets, ONE_RING_TARGET};

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
}
