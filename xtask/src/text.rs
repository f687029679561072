//! Text helpers shared by the steps.

pub use test_support::strip_ansi;

/// The file at `path` as text; an error names the file.
pub fn read_text(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `s` quoted for a POSIX shell (`'...'`, with `'` written `'\''`).
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `text` with this workspace's absolute path taken out of every path in
/// it (`ROOT/target/x` becomes `target/x`), for what goes into the repo's
/// docs: a path of the machine that ran it means nothing to a reader.
pub fn repo_relative(text: &str) -> String {
    let root = format!("{}/", crate::workspace_root().display());
    text.replace(&root, "")
}

#[cfg(test)]
mod repo_relative_tests {
    use super::*;

    #[test]
    fn workspace_paths_become_relative() {
        let root = crate::workspace_root();
        let text = format!("run {}/target/bench/mnt and /tmp/x", root.display());
        assert_eq!(repo_relative(&text), "run target/bench/mnt and /tmp/x");
    }
}
