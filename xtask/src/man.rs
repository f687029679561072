//! `cargo xtask man`: the `passthroughfs(1)` man page.
//!
//! The page comes from the daemon's clap definition (`passthroughfs::cli`)
//! through `clap_mangen`, in passthroughfs's `man` example
//! (`crates/passthroughfs/examples/man.rs`): this task runs that example
//! with `cargo run`, so the xtask itself links neither clap_mangen nor the
//! daemon's crates.

use crate::test::{cargo, run_cmd, target_dir};
use crate::text::sh_quote;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Arguments of `cargo xtask man`.
#[derive(clap::Args)]
pub struct ManArgs {
    /// Directory to write `passthroughfs.1` into [default: target/man/].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// The page's file name.
const PAGE: &str = "passthroughfs.1";

/// Writes the page and says where it is and how to read it.
pub fn run(args: &ManArgs) -> Result<()> {
    let dir = match &args.out {
        // Relative to where the task was started, not to the workspace.
        Some(dir) => {
            std::path::absolute(dir).with_context(|| format!("--out {}", dir.display()))?
        }
        None => target_dir().join("man"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let page = dir.join(PAGE);
    run_cmd(
        cargo()
            .args([
                "run",
                "-p",
                "fusewire-passthroughfs",
                "--example",
                "man",
                "--",
            ])
            .arg(&page)
            .current_dir(crate::workspace_root()),
    )?;
    let shown = shown_path(&page);
    println!("man page: {shown}");
    println!("read it:  man -l {}", shell_word(&shown));
    Ok(())
}

/// `path` relative to the current directory when it is below it.
fn shown_path(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

/// `s` as one shell word (quoted only when it needs to be).
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,=:@%".contains(c));
    if plain {
        s.to_string()
    } else {
        sh_quote(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words() {
        assert_eq!(
            shell_word("target/man/passthroughfs.1"),
            "target/man/passthroughfs.1"
        );
        assert_eq!(
            shell_word("my pages/passthroughfs.1"),
            "'my pages/passthroughfs.1'"
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
