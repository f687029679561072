//! The repository names no package registry's web host: the crate
//! registry is called "the crate registry" in prose, comments and
//! messages. `Cargo.lock` is the exception (Cargo writes the registry's
//! source URL into it).

use std::path::Path;
use std::process::Command;

/// The crate registry's host, put together here so that this file does not
/// name it either.
fn crate_registry_host() -> String {
    ["crates", "io"].join(".")
}

/// The tracked files (`git ls-files`) under `root`, or `None` when `root` is
/// not a git checkout (a source archive).
fn tracked_files(root: &Path) -> Option<Vec<String>> {
    if !root.join(".git").exists() {
        return None;
    }
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("running git ls-files in {}: {e}", root.display()));
    assert!(
        out.status.success(),
        "git ls-files in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        out.stdout
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect(),
    )
}

/// Whether `haystack` holds `needle` (ASCII), whatever the case.
fn contains_ignoring_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[test]
fn contains_ignoring_case_finds_any_spelling() {
    assert!(contains_ignoring_case(
        b"see Example.ORG here",
        b"example.org"
    ));
    assert!(!contains_ignoring_case(b"example org", b"example.org"));
    assert!(!contains_ignoring_case(b"", b"x"));
}

#[test]
fn no_tracked_file_but_cargo_lock_names_the_crate_registry_host() {
    let root = crate::workspace_root();
    let files = tracked_files(&root).unwrap_or_else(|| {
        panic!(
            "{} is not a git checkout: there is no list of tracked files to check",
            root.display()
        )
    });
    assert!(!files.is_empty(), "git ls-files listed nothing");
    let host = crate_registry_host();
    let mut naming = Vec::new();
    for name in files.iter().filter(|n| n.as_str() != "Cargo.lock") {
        let path = root.join(name);
        // Symlinks are checked where they point; a file deleted in the
        // working tree (not yet committed) has nothing to check.
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => continue,
            Err(e) => panic!("reading {name}: {e}"),
        };
        if contains_ignoring_case(&bytes, host.as_bytes()) {
            naming.push(name.clone());
        }
    }
    assert!(
        naming.is_empty(),
        "these tracked files name the crate registry's host; say \"the crate registry\" \
         instead: {naming:?}"
    );
}
