//! Third-party sources the tooling builds (xfstests, libfuse): an
//! environment variable naming a `.tar.gz` or a source tree, by default the
//! tarball in `<workspace>/../shared/vendor/`, and where neither exists a
//! clone of upstream (left to the caller, which knows what to clone).

use crate::test::run_cmd;
use anyhow::{bail, Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder of vendored tarballs, relative to the workspace root.
pub const VENDOR_DIR: &str = "../shared/vendor";

/// Where a third-party source comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `.tar.gz` holding one top-level folder.
    Tarball(PathBuf),
    /// A source tree, used where it is.
    Tree(PathBuf),
    /// Neither: the caller clones upstream.
    Clone,
}

impl Source {
    /// A line naming this source, for a stamp file next to what was built
    /// from it (a tarball by path, size and mtime; a tree by path; a clone
    /// by `clone`, which says what was cloned).
    pub fn stamp(&self, clone: &str) -> Result<String> {
        Ok(match self {
            Source::Tarball(t) => {
                let m = std::fs::metadata(t).with_context(|| format!("{}", t.display()))?;
                format!(
                    "tarball {} size {} mtime {}\n",
                    t.canonicalize()?.display(),
                    m.len(),
                    m.mtime()
                )
            }
            Source::Tree(d) => format!("tree {}\n", d.canonicalize()?.display()),
            Source::Clone => format!("git {clone}\n"),
        })
    }
}

/// Whether `name` matches `pattern`, which may hold one `*` (any run of
/// characters, including none).
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}

/// The tarball in `dir` whose name matches `pattern` (one `*` at most);
/// the last by name if there are several.
pub fn find_tarball(dir: &Path, pattern: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| matches(pattern, &e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// The source named by the environment variable `var` (a `.tar.gz` or a
/// directory; relative to the workspace `root`), else the tarball matching
/// `pattern` in `root/../shared/vendor`, else [`Source::Clone`]. `what`
/// prefixes the line saying that a clone is needed.
pub fn source(var: &str, root: &Path, pattern: &str, what: &str) -> Result<Source> {
    if let Some(src) = std::env::var_os(var) {
        let src = PathBuf::from(src);
        let src = if src.is_relative() {
            root.join(src)
        } else {
            src
        };
        if src.is_dir() {
            return Ok(Source::Tree(src));
        }
        if src.is_file() {
            return Ok(Source::Tarball(src));
        }
        bail!("{var}={} is neither a file nor a directory", src.display());
    }
    let dir = root.join(VENDOR_DIR);
    if let Some(tarball) = find_tarball(&dir, pattern) {
        return Ok(Source::Tarball(tarball));
    }
    println!(
        "{what}: no {pattern} in {} (set {var} to use another copy): cloning upstream",
        dir.display()
    );
    Ok(Source::Clone)
}

/// Unpacks `tarball` into `dest` (which must exist).
pub fn unpack(tarball: &Path, dest: &Path) -> Result<()> {
    run_cmd(
        Command::new("tar")
            .arg("-xzf")
            .arg(tarball)
            .arg("-C")
            .arg(dest),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tarball_patterns() {
        assert!(matches("libfuse-*.tar.gz", "libfuse-e8d407ce.tar.gz"));
        assert!(!matches("libfuse-*.tar.gz", "libfuse.tar.gz"));
        assert!(!matches("libfuse-*.tar.gz", "xfstests-63a29724.tar.gz"));
        assert!(matches("x.tar.gz", "x.tar.gz"));
        assert!(!matches("x.tar.gz", "y.tar.gz"));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(find_tarball(dir.path(), "a-*.tar.gz"), None);
        for n in ["a-1.tar.gz", "a-2.tar.gz", "b-3.tar.gz"] {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("a-9.tar.gz")).unwrap();
        assert_eq!(
            find_tarball(dir.path(), "a-*.tar.gz"),
            Some(dir.path().join("a-2.tar.gz"))
        );
        assert_eq!(
            find_tarball(dir.path(), "b-3.tar.gz"),
            Some(dir.path().join("b-3.tar.gz"))
        );
    }
}
