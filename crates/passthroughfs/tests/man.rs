//! The man page (`examples/man.rs`, what `cargo xtask man` runs): it is
//! written where it is asked for, it is roff that man(1) reads, and it has
//! every part: NAME (one line), SYNOPSIS, the options, SIGNALS (the
//! `--help` text after the options, word for word) and ENVIRONMENT, and no
//! literal backtick. The README, `--help` and the page say the same about
//! `--auto-unmount` (`passthroughfs::cli::AUTO_UNMOUNT_HELP`).
//!
//! The example runs in this process (its source is a module here), not
//! through `cargo run`: a nested cargo inside `cargo test --workspace`
//! resolves the features of this package alone and would build much of the
//! workspace again.

#[allow(dead_code)] // its `main`
#[path = "../examples/man.rs"]
mod man_example;

use passthroughfs::cli::{AUTO_UNMOUNT_HELP, SIGNALS_HELP};
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// Runs the example with `args`.
fn run(args: &[&Path]) -> Result<std::path::PathBuf, String> {
    man_example::run(args.iter().map(|p| OsString::from(p.as_os_str())))
}

/// The text of a roff line without its escapes (fonts, `\-`, the
/// apostrophe string, `\&`).
fn unescape(line: &str) -> String {
    line.replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\fP", "")
        .replace("\\*(Aq", "'")
        .replace("\\&", "")
        .replace("\\-", "-")
        .replace("\\\\", "\\")
}

/// The words of the text lines of section `name` (up to the next `.SH`).
fn section_words(page: &str, name: &str) -> Vec<String> {
    let heading = format!(".SH {name}");
    page.lines()
        .skip_while(|l| *l != heading && *l != format!(".SH \"{name}\""))
        .skip(1)
        .take_while(|l| !l.starts_with(".SH"))
        .filter(|l| !l.starts_with('.'))
        .flat_map(|l| {
            unescape(l)
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_man_page_is_roff_with_every_section() {
    let dir = tempfile::tempdir().unwrap();
    let path = run(&[dir.path()]).unwrap();
    assert_eq!(
        path,
        dir.path().join("passthroughfs.1"),
        "a directory gets passthroughfs.1"
    );
    let page = std::fs::read_to_string(&path).unwrap();

    // Roff: control lines are man(7) macros (and the apostrophe string's
    // definition, once), the title first.
    let controls: Vec<&str> = page.lines().filter(|l| l.starts_with('.')).collect();
    let known = [
        "ie", "el", "TH", "SH", "SS", "TP", "PP", "IP", "RS", "RE", "br", "nf", "fi", "B", "I",
    ];
    for c in &controls {
        let name = c[1..].split_whitespace().next().unwrap_or("");
        assert!(
            known.contains(&name),
            "not a man(7) macro: {c:?} in\n{page}"
        );
    }
    assert_eq!(
        controls.iter().filter(|c| c.starts_with(".ie ")).count(),
        1,
        "one preamble:\n{page}"
    );
    let th = controls
        .iter()
        .find(|c| !c.starts_with(".ie") && !c.starts_with(".el"));
    assert!(
        th.is_some_and(|c| c.starts_with(".TH passthroughfs 1 ")),
        "the title comes first: {th:?}"
    );

    let sections: Vec<&str> = controls
        .iter()
        .filter_map(|c| c.strip_prefix(".SH "))
        .map(|s| s.trim_matches('"'))
        .collect();
    assert_eq!(
        sections,
        [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "MOUNT OPTIONS",
            "SIGNALS",
            "ENVIRONMENT",
            "SEE ALSO",
            "VERSION"
        ],
        "{page}"
    );
    assert!(
        !page.contains(".SH EXTRA"),
        "the signals are their own section"
    );

    let name_lines: Vec<&str> = page
        .lines()
        .skip_while(|l| *l != ".SH NAME")
        .skip(1)
        .take_while(|l| !l.starts_with(".SH"))
        .collect();
    assert_eq!(
        name_lines,
        [format!(
            "passthroughfs \\- {}",
            man_example::SUMMARY.replace('-', "\\-")
        )],
        "NAME is one line: {page}"
    );
    let description = section_words(&page, "DESCRIPTION").join(" ");
    assert!(
        description.starts_with("Serve the directory SOURCE"),
        "{description}"
    );
    assert!(
        description.contains("\"mount -t fuse.passthroughfs SOURCE MOUNTPOINT -o OPTIONS\""),
        "backtick quotes are double quotes: {description}"
    );
    assert!(!page.contains('`'), "a literal backtick:\n{page}");
    let synopsis = section_words(&page, "SYNOPSIS").join(" ");
    assert!(synopsis.starts_with("passthroughfs ["), "{synopsis}");
    assert!(synopsis.contains("SOURCE MOUNTPOINT [-o"), "{synopsis}");
    let mount_options = section_words(&page, "MOUNT OPTIONS");
    for option in [
        "allow_other",
        "auto_unmount",
        "cache=VALUE",
        "max_threads=VALUE",
        "io_uring",
    ] {
        assert!(
            mount_options.iter().any(|w| w == option),
            "{option} is not in MOUNT OPTIONS: {mount_options:?}"
        );
    }
    let environment = section_words(&page, "ENVIRONMENT");
    for var in ["RUST_LOG", "NO_COLOR", "NOTIFY_SOCKET"] {
        assert!(
            environment.iter().any(|w| w == var),
            "{var}: {environment:?}"
        );
    }
    let options = section_words(&page, "OPTIONS");
    for option in [
        "--cache",
        "--uring",
        "--runtime",
        "--threads",
        "--allow-other",
        "--help",
    ] {
        assert!(
            options
                .iter()
                .any(|w| w == option || w.starts_with(&format!("{option}="))),
            "{option} is not in OPTIONS: {options:?}"
        );
    }

    // SIGNALS says what --help says after the options, word for word.
    let help: Vec<&str> = SIGNALS_HELP
        .lines()
        .skip(1) // "Signals:", the section's heading here
        .flat_map(str::split_whitespace)
        .collect();
    assert!(help.contains(&"SIGUSR1"), "{SIGNALS_HELP}");
    assert_eq!(section_words(&page, "SIGNALS"), help, "{page}");

    let env = section_words(&page, "ENVIRONMENT").join(" ");
    assert!(env.starts_with("RUST_LOG The log level"), "{env}");
    assert!(env.contains("info (the default"), "{env}");
    assert!(env.contains("NO_COLOR Set to a non-empty value"), "{env}");

    // The path form writes there.
    let file = dir.path().join("page.1");
    assert_eq!(run(&[&file]).unwrap(), file);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        page,
        "the same page"
    );
    assert!(run(&[]).unwrap_err().contains("usage"));
    assert!(run(&[&dir.path().join("no/such/dir/page.1")])
        .unwrap_err()
        .contains("writing"));

    render_with_man(&path);
}

/// The words of `text`, without Markdown's backticks and bold marks.
fn words(text: &str) -> Vec<String> {
    text.replace(['`', '*'], "")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Whether `words` holds `run` as consecutive words.
fn holds(words: &[String], run: &[String]) -> bool {
    words.windows(run.len()).any(|w| w == run)
}

#[test]
fn readme_help_and_man_page_say_the_same_about_auto_unmount() {
    let want = words(AUTO_UNMOUNT_HELP);
    assert!(want.len() > 20, "{AUTO_UNMOUNT_HELP}");

    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme =
        std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    assert!(
        holds(&words(&readme), &want),
        "the README's auto_unmount paragraph must say, word for word:\n{AUTO_UNMOUNT_HELP}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_passthroughfs"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(holds(&words(&help), &want), "--help:\n{help}");

    let dir = tempfile::tempdir().unwrap();
    let page = std::fs::read_to_string(run(&[dir.path()]).unwrap()).unwrap();
    let options = section_words(&page, "OPTIONS");
    assert!(
        holds(&options, &want),
        "the man page's OPTIONS: {options:?}"
    );
}

/// `man -l` renders the page, without troff warnings, with the signals in
/// it; skipped (saying why) where man(1) isn't installed.
fn render_with_man(path: &Path) {
    let out = match Command::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(path)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("skipped `man -l`: man is not installed (apt-get install man-db)");
            return;
        }
        Err(e) => panic!("running man: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "man -l failed ({}): {stderr}",
        out.status
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("warning") || l.contains("error")),
        "man -l: {stderr}"
    );
    // man may embolden with overstrikes when it thinks it writes to a
    // terminal: drop them.
    let text = strip_overstrike(&stdout);
    for needle in [
        "NAME",
        "SIGNALS",
        "SIGINT (Ctrl-C), SIGTERM, SIGHUP",
        "SIGUSR1",
        "ENVIRONMENT",
        "RUST_LOG",
        "NO_COLOR",
        "--uring",
        "--cache",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} is not in man's output:\n{text}"
        );
    }
}

/// `text` without backspace overstrikes (`X\bX` for bold, `_\bX` for
/// underline).
fn strip_overstrike(text: &str) -> String {
    let mut out: Vec<char> = Vec::new();
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.into_iter().collect()
}
