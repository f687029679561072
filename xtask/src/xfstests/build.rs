//! Getting and building xfstests, and its test users.
//!
//! The source is `XFSTESTS_SRC` (a `.tar.gz` that unpacks into `xfstests/`,
//! or a source tree, which is built where it is), by default
//! `<workspace>/../shared/vendor/xfstests-63a29724.tar.gz`, and, when that
//! is absent, a clone of upstream at [`COMMIT`]. Tarballs and clones are
//! built under the work directory (`build/xfstests`); a `STAMP` file there
//! names what was built, so a later run with the same source does not
//! build again.

use super::Layout;
use crate::test::{display, run_cmd};
use crate::vendor::{self, Source};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// The xfstests commit the lists in `xtask/xfstests/` are for.
pub const COMMIT: &str = "63a29724a85f1999e49bf0a9bf0d22643b6116e5";

/// The tarball's name in `../shared/vendor/` ([`vendor::VENDOR_DIR`]).
const TARBALL: &str = "xfstests-63a29724.tar.gz";

/// Upstream repositories, tried in order when there is no tarball.
const UPSTREAMS: &[&str] = &[
    "https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git",
    "https://github.com/kdave/xfstests.git",
];

/// `XFSTESTS_SRC`, else the tarball next to the workspace, else a clone.
fn source(root: &Path) -> Result<Source> {
    vendor::source("XFSTESTS_SRC", root, TARBALL, "xfstests")
}

/// Makes sure `layout.tree` holds a built xfstests (fsstress, fsx, check).
pub fn ensure_built(layout: &Layout) -> Result<()> {
    let src = source(&layout.root)?;
    let tree = match &src {
        Source::Tree(dir) => {
            // Built in place: make's own checks keep a rebuild quick.
            println!("xfstests: building the tree {} in place", dir.display());
            // The cached build (if any) is no longer what build/xfstests is.
            let _ = fs::remove_file(layout.work.join("build/STAMP"));
            make(dir, &layout.work.join("build-make.log"))?;
            dir.clone()
        }
        Source::Tarball(_) | Source::Clone => {
            let stamp_file = layout.work.join("build/STAMP");
            let stamp = src.stamp(COMMIT)?;
            let built = fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp);
            let is_link = layout.tree.symlink_metadata().is_ok_and(|m| m.is_symlink());
            if built && !is_link && is_built(&layout.tree) {
                println!("xfstests: built in {} (cached)", layout.tree.display());
            } else {
                fresh_build(layout, &src)?;
                fs::write(&stamp_file, &stamp)?;
            }
            layout.tree.clone()
        }
    };
    if !is_built(&tree) {
        bail!(
            "{}: no ltp/fsstress, ltp/fsx or check after building",
            tree.display()
        );
    }
    if tree != layout.tree {
        // `check` and the stress runs look in layout.tree.
        let link = &layout.tree;
        let _ = fs::remove_file(link);
        if link.exists() {
            fs::remove_dir_all(link)?;
        }
        fs::create_dir_all(link.parent().expect("tree has a parent"))?;
        std::os::unix::fs::symlink(&tree, link)?;
    }
    Ok(())
}

/// Whether `tree` has the programs a run uses.
fn is_built(tree: &Path) -> bool {
    ["check", "ltp/fsstress", "ltp/fsx", "src/xfsctl"]
        .iter()
        .all(|p| tree.join(p).is_file())
}

/// Unpacks (or clones) into a fresh `build/` and runs make.
fn fresh_build(layout: &Layout, src: &Source) -> Result<()> {
    let build = layout.work.join("build");
    if build.symlink_metadata().is_ok() {
        fs::remove_dir_all(&build)
            .or_else(|_| fs::remove_file(&build))
            .with_context(|| format!("removing {}", build.display()))?;
    }
    let partial = layout.work.join("build.partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)?;
    }
    fs::create_dir_all(&partial)?;
    match src {
        Source::Tarball(t) => {
            println!("xfstests: unpacking {}", t.display());
            vendor::unpack(t, &partial)?;
        }
        Source::Clone => clone(&partial.join("xfstests"))?,
        Source::Tree(_) => unreachable!("trees are built in place"),
    }
    let tree = partial.join("xfstests");
    if !tree.join("check").is_file() {
        bail!("the xfstests sources have no xfstests/check");
    }
    make(&tree, &partial.join("make.log"))?;
    fs::rename(&partial, &build)?;
    println!("xfstests: built in {}", layout.tree.display());
    Ok(())
}

/// Clones upstream into `dest` and checks out [`COMMIT`].
fn clone(dest: &Path) -> Result<()> {
    let mut last = None;
    for url in UPSTREAMS {
        if dest.exists() {
            fs::remove_dir_all(dest)?;
        }
        let result =
            run_cmd(Command::new("git").args(["clone", "-q", url]).arg(dest)).and_then(|()| {
                run_cmd(
                    Command::new("git")
                        .arg("-C")
                        .arg(dest)
                        .args(["checkout", "-q", COMMIT]),
                )
            });
        match result {
            Ok(()) => return Ok(()),
            Err(e) => {
                println!("xfstests: {url}: {e:#}");
                last = Some(e);
            }
        }
    }
    Err(last.expect("at least one upstream")).context("cloning xfstests")
}

/// `make -j<cpus>` in `tree`, its output in `log` (the end of it printed if
/// it fails).
fn make(tree: &Path, log: &Path) -> Result<()> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new("make");
    cmd.arg(format!("-j{jobs}"))
        .current_dir(tree)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    println!(
        "$ (cd {} && {})   (log: {})",
        tree.display(),
        display(&cmd),
        log.display()
    );
    let status = cmd.status().context("cannot start make")?;
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for l in tail.iter().rev() {
            println!("  {l}");
        }
        bail!(
            "building xfstests failed ({status}); log: {}",
            log.display()
        );
    }
    Ok(())
}

/// xfstests' test users and group (README: fsgqa, 123456-fsgqa, fsgqa2,
/// group fsgqa), added where missing.
pub fn ensure_users() -> Result<()> {
    for (user, home) in [("fsgqa", true), ("fsgqa2", false), ("123456-fsgqa", false)] {
        if exists("passwd", user) {
            continue;
        }
        let mut cmd = Command::new("useradd");
        if home {
            cmd.arg("-m");
        }
        // Names starting with digits need --badname on Debian.
        if user.starts_with(|c: char| c.is_ascii_digit()) {
            cmd.arg("--badname");
        }
        run_cmd(cmd.arg(user))?;
    }
    if !exists("group", "fsgqa") {
        run_cmd(Command::new("groupadd").arg("fsgqa"))?;
    }
    Ok(())
}

/// Whether `getent DB NAME` finds an entry.
fn exists(db: &str, name: &str) -> bool {
    Command::new("getent")
        .args([db, name])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
