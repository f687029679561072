//! Building the targets' binaries: our daemon and `passthroughfs` with
//! cargo, and the peers from their sources (libfuse's passthrough_ll with
//! gcc, fuser's example with `cargo install`, libfuse master's
//! passthrough_hp with meson and ninja). Apart because it runs once before
//! a run and shares nothing with mounting but [`Paths`].

use super::Paths;
use crate::bench::config::Peers;
use crate::vendor::{self, Source};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
