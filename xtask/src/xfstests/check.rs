//! Running xfstests' `check` on a list of tests in one mode, and reading
//! what it says.
//!
//! `check` prints one line per test: the name, then the outcome (`3s ...
//! 2s` for a pass, `[not run] why`, `- output mismatch (see ...)`,
//! `[failed, exit status N]...`), and failed tests' diffs indented below.
//! The line is written in two parts (the name when the test starts, the
//! rest when it ends), which is how a test that hangs is noticed: one that
//! takes longer than the time limit is killed (`check`'s whole process
//! group, then the mounts and daemons, see [`helper::cleanup`]), counted as
//! hung, and `check` starts again with the tests after it.

use super::helper;
use super::lists::Excluded;
use super::{Layout, Mode};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The outcome of one test.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Passed, in this many seconds (as `check` measured).
    Pass(u64),
    /// xfstests decided not to run it, for this reason.
    NotRun(String),
    /// Failed; what `check` said.
    Fail(String),
    /// Killed after the time limit (seconds).
    Hung(u64),
    /// Failed (first outcome here), then passed when run again alone.
    Flaky(String),
    /// Not run by us at all, for this reason (`danger:` in excluded.txt).
    Skipped(String),
}

impl Status {
    /// Whether the test counts as failed.
    pub fn failed(&self) -> bool {
        matches!(self, Status::Fail(_) | Status::Hung(_))
    }
}

/// The outcomes of one run of a list, in the list's order.
pub struct Results {
    /// Each test and its outcome.
    pub tests: Vec<(String, Status)>,
    /// Where `check` put its results (RESULT_BASE) and the daemons' logs.
    pub dir: PathBuf,
}

/// The names of the backing "devices" (mount sources) of the two mounts,
/// followed by the run's [`Layout::tag`].
const TEST_DEV: &str = "xfstests-test";
/// See [`TEST_DEV`].
const SCRATCH_DEV: &str = "xfstests-scratch";

/// Runs `tests` in `mode` with results in `results/<mode>/`.
pub fn run_tests(
    layout: &Layout,
    mode: Mode,
    tests: &[String],
    timeout: Duration,
) -> Result<Results> {
    run_tests_in(layout, mode, tests, timeout, &layout.results(mode))
}

/// Runs `tests` in `mode`, results in `dir` (made fresh), under a
/// per-test time limit. Whatever happens, nothing stays mounted and no
/// daemon keeps running.
fn run_tests_in(
    layout: &Layout,
    mode: Mode,
    tests: &[String],
    timeout: Duration,
    dir: &Path,
) -> Result<Results> {
    /// Cleans up when the run ends, also on an error or a panic.
    struct Guard<'a>(&'a Layout);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            helper::cleanup(self.0);
        }
    }
    let stale = helper::cleanup(layout);
    if !stale.is_empty() {
        println!("(left over from an earlier run; cleaned up)");
    }
    let guard = Guard(layout);
    let test_dir = layout.mnt.join("test");
    let scratch_mnt = layout.mnt.join("scratch");
    let backing_test = layout.backing.join("test");
    let backing_scratch = layout.backing.join("scratch");
    for d in [&test_dir, &scratch_mnt] {
        fs::create_dir_all(d)?;
    }
    for d in [
        &backing_test,
        &backing_scratch,
        dir,
        &layout.state.join("logs"),
    ] {
        helper::fresh_dir(d)?;
    }
    let config = dir.join("local.config");
    let opts = format!("allow_other,default_permissions{}", mode.mount_options());
    fs::write(
        &config,
        format!(
            "# Written by cargo xtask xfstests (mode {mode}: passthroughfs {flags}).\n\
             export FSTYP=fuse\n\
             export FUSE_SUBTYP=.passthroughfs-xfstests\n\
             export TEST_DEV={TEST_DEV}-{tag}\n\
             export TEST_DIR={test_dir}\n\
             export SCRATCH_DEV={SCRATCH_DEV}-{tag}\n\
             export SCRATCH_MNT={scratch_mnt}\n\
             export TEST_FS_MOUNT_OPTS=\"-o source={backing_test},{opts}\"\n\
             export MOUNT_OPTIONS=\"-o source={backing_scratch},{opts}\"\n\
             export RESULT_BASE={dir}\n\
             export {daemon_var}={daemon}\n\
             export {state_var}={state}\n",
            mode = mode.name(),
            flags = mode.daemon_flags(),
            test_dir = test_dir.canonicalize()?.display(),
            scratch_mnt = scratch_mnt.canonicalize()?.display(),
            backing_test = backing_test.display(),
            backing_scratch = backing_scratch.display(),
            dir = dir.display(),
            tag = layout.tag,
            daemon_var = layout.helper_env()[0].0,
            daemon = layout.helper_env()[0].1.display(),
            state_var = layout.helper_env()[1].0,
            state = layout.helper_env()[1].1.display(),
        ),
    )?;
    println!(
        "xfstests {}: {} test(s); backing directories in {} ({}), results in {}",
        mode.name(),
        tests.len(),
        layout.backing.display(),
        fs_type(&layout.backing),
        dir.display()
    );

    let mut results = Vec::new();
    let mut remaining = tests.to_vec();
    let log_path = dir.join("check.log");
    while !remaining.is_empty() {
        let run = check_once(layout, &config, &remaining, timeout, &log_path)?;
        let hung = run.hung.clone();
        for (name, status) in run.results {
            if remaining.contains(&name) && !results.iter().any(|(n, _)| *n == name) {
                results.push((name, status));
            }
        }
        match hung {
            Some(name) => {
                println!(
                    "\nxfstests: {name} still running after {} s: killed; carrying on with the rest",
                    timeout.as_secs()
                );
                helper::cleanup(layout);
                if !name.is_empty() {
                    results.push((name.clone(), Status::Hung(timeout.as_secs())));
                }
                let done: Vec<&String> = results.iter().map(|(n, _)| n).collect();
                let at = remaining.iter().position(|t| *t == name);
                remaining = match at {
                    Some(i) => remaining[i + 1..].to_vec(),
                    // Hung outside any test (mounting before the first):
                    // give up on the rest rather than loop.
                    None => Vec::new(),
                };
                remaining.retain(|t| !done.contains(&t));
            }
            None => break,
        }
    }
    for t in tests {
        if !results.iter().any(|(n, _)| n == t) {
            results.push((t.clone(), Status::Fail("check reported no outcome".into())));
        }
    }
    // Keep the input order.
    results.sort_by_key(|(n, _)| tests.iter().position(|t| t == n));

    drop(guard);
    let logs = dir.join("daemon-logs");
    let _ = fs::rename(layout.state.join("logs"), &logs);
    fs::create_dir_all(layout.state.join("logs"))?;
    let helper_log = layout.state.join("helper.log");
    let _ = fs::rename(&helper_log, dir.join("helper.log"));
    check_served_in_mode(&logs, mode)?;
    Ok(Results {
        tests: results,
        dir: dir.to_path_buf(),
    })
}

/// The file system type of `dir`, for the log (the backing directories
/// should be on a disk file system such as ext4, not tmpfs).
fn fs_type(dir: &Path) -> String {
    Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Fails unless every daemon whose log is in `logs` served in `mode` (so a
/// `--uring` daemon that fell back to `/dev/fuse` is noticed).
fn check_served_in_mode(logs: &Path, mode: Mode) -> Result<()> {
    let mut served = 0;
    for entry in fs::read_dir(logs).into_iter().flatten().flatten() {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("passthroughfs serving")) {
            served += 1;
            if !line.contains(mode.serving_marker()) {
                bail!(
                    "a daemon of mode {} did not serve as asked ({}): {line}",
                    mode.name(),
                    entry.path().display()
                );
            }
        }
    }
    if served == 0 {
        println!("note: no daemon logged serving in {}", logs.display());
    }
    Ok(())
}

/// Runs in the new mount namespace: lazily unmounts every FUSE mount there
/// (copies of the machine's; the originals are not touched), then `check`.
const CHECK_SCRIPT: &str = r#"
awk '{ for (i = 7; $i != "-"; i++); t = $(i + 1)
       if (t == "fuse" || t == "fuseblk" || t ~ /^fuse\./) print $5 }' /proc/self/mountinfo |
	sort -r | while read -r m; do
		case $m in *\\*) ;; *) umount -l -- "$m" ;; esac
	done
exec ./check "$@" 2>&1
"#;

/// What one `check` process did.
struct CheckRun {
    /// Outcomes it printed.
    results: Vec<(String, Status)>,
    /// The test it was killed in (empty: before any test), if it hung.
    hung: Option<String>,
}

/// Runs `check` once on `tests`, echoing its output (and appending it to
/// `log_path`), killing it if a test outlives `timeout`.
fn check_once(
    layout: &Layout,
    config: &Path,
    tests: &[String],
    timeout: Duration,
    log_path: &Path,
) -> Result<CheckRun> {
    let mut log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)?;
    // In a mount namespace of its own, without the machine's other FUSE
    // mounts: xfs_io and df stat every mount they see, and would hang on
    // anybody's FUSE mount whose daemon is stuck. Our mounts are made in
    // there too, so they also end with it at the latest.
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "bash", "-c"])
        .arg(CHECK_SCRIPT)
        .arg("check")
        .args(tests)
        .current_dir(&layout.tree)
        .env("HOST_OPTIONS", config)
        .env("PATH", check_path(layout))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // Its own process group, so that a hung test can be killed with
        // everything it started.
        .process_group(0);
    println!(
        "$ (cd {} && HOST_OPTIONS={} ./check {})",
        layout.tree.display(),
        config.display(),
        if tests.len() > 8 {
            format!("{} ... ({} tests)", tests[..8].join(" "), tests.len())
        } else {
            tests.join(" ")
        }
    );
    let mut child = cmd.spawn().context("cannot start xfstests' check")?;
    let pgid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    // Not joined: a process that escaped the group may keep the pipe open.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });

    let mut parser = Parser::default();
    let mut current: Option<(String, Instant)> = None;
    let mut last_output = Instant::now();
    let mut hung = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(chunk) => {
                last_output = Instant::now();
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&chunk);
                let _ = out.flush();
                let _ = log.write_all(&chunk);
                parser.feed(&chunk);
                match parser.running() {
                    Some(name) if current.as_ref().is_none_or(|(c, _)| *c != name) => {
                        current = Some((name, Instant::now()));
                    }
                    Some(_) => {}
                    None => current = None,
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let late = match &current {
            Some((name, started)) => (started.elapsed() > timeout).then(|| name.clone()),
            None => (last_output.elapsed() > timeout).then(String::new),
        };
        if let Some(name) = late {
            // SAFETY: kill has no memory-safety preconditions; the group is
            // check's own (process_group(0)) and check is not yet reaped.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            hung = Some(name);
            break;
        }
        if let Ok(Some(_)) = child.try_wait() {
            // check is gone; drain what is still in the pipe.
            while let Ok(chunk) = rx.recv_timeout(Duration::from_millis(200)) {
                let _ = std::io::stdout().write_all(&chunk);
                let _ = log.write_all(&chunk);
                parser.feed(&chunk);
            }
            break;
        }
    }
    if hung.is_some() {
        // Unblock anything stuck on a FUSE request before reaping.
        helper::cleanup(layout);
    }
    let status = child.wait()?;
    parser.finish();
    if hung.is_none() && parser.results.is_empty() && !tests.is_empty() {
        println!("xfstests: check exited ({status}) without running a test");
    }
    Ok(CheckRun {
        results: parser.into_results(),
        hung,
    })
}

/// `check`'s PATH: [`Layout::path_dir`], then ours.
fn check_path(layout: &Layout) -> std::ffi::OsString {
    let mut dirs = vec![layout.path_dir()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into()),
    ));
    std::env::join_paths(dirs).expect("PATH entries without colons")
}

/// Reads `check`'s output as it comes.
#[derive(Default)]
struct Parser {
    /// The line not yet ended.
    partial: Vec<u8>,
    /// Outcomes so far.
    results: Vec<(String, Status)>,
    /// The tests of its `Failures:` line.
    failures: Vec<String>,
}

impl Parser {
    /// Takes more output.
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                self.line(&line);
            } else {
                self.partial.push(b);
            }
        }
    }

    /// The test whose line has started but not ended: the one running.
    fn running(&self) -> Option<String> {
        let line = String::from_utf8_lossy(&self.partial);
        test_name(&line).map(|(name, _)| name.to_string())
    }

    /// One whole line.
    fn line(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("Failures:") {
            self.failures
                .extend(rest.split_whitespace().map(str::to_string));
            return;
        }
        let Some((name, rest)) = test_name(line) else {
            return;
        };
        let status = classify(rest);
        self.results.retain(|(n, _)| n != name);
        self.results.push((name.to_string(), status));
    }

    /// The end of the output.
    fn finish(&mut self) {
        if !self.partial.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
            // A test cut off mid-line (check died) has no outcome.
            if test_name(&line).is_some_and(|(_, rest)| !rest.trim().is_empty()) {
                self.line(&line);
            }
        }
    }

    /// The outcomes, with the `Failures:` line having the last word.
    fn into_results(mut self) -> Vec<(String, Status)> {
        for f in &self.failures {
            for (n, s) in &mut self.results {
                if n == f && !s.failed() {
                    *s = Status::Fail("listed under Failures".into());
                }
            }
        }
        self.results
    }
}

/// `generic/001` and the rest, if `line` starts with a test name followed
/// by a space or the end.
fn test_name(line: &str) -> Option<(&str, &str)> {
    let end = line.find(' ').unwrap_or(line.len());
    let (name, rest) = line.split_at(end);
    let (group, num) = name.split_once('/')?;
    let ok = !group.is_empty()
        && group
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && !num.is_empty()
        && num.bytes().all(|b| b.is_ascii_digit());
    ok.then_some((name, rest))
}

/// The outcome in the rest of a test's line.
fn classify(rest: &str) -> Status {
    let rest = rest.trim();
    if let Some(i) = rest.find("[not run]") {
        return Status::NotRun(rest[i + "[not run]".len()..].trim().to_string());
    }
    if rest.contains("[expunged]") {
        return Status::NotRun("expunged".into());
    }
    // "3s ...  2s" (the previous run's time, then this one's) or "2s".
    let last = rest.rsplit(' ').next().unwrap_or("");
    let head = rest[..rest.len() - last.len()].trim();
    let secs = last.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
    let head_ok = head.is_empty()
        || head
            .strip_suffix("...")
            .and_then(|h| h.trim().strip_suffix('s'))
            .is_some_and(|n| n.parse::<u64>().is_ok());
    match secs {
        Some(s) if head_ok => Status::Pass(s),
        _ => Status::Fail(rest.to_string()),
    }
}

/// Runs each failed or hung test once more, alone; one that passes then
/// becomes [`Status::Flaky`].
pub fn retry_failed(
    layout: &Layout,
    mode: Mode,
    results: &mut Results,
    timeout: Duration,
) -> Result<()> {
    let failed: Vec<String> = results
        .tests
        .iter()
        .filter(|(_, s)| s.failed())
        .map(|(n, _)| n.clone())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    println!(
        "xfstests {}: running the {} failed test(s) once more, alone: {}",
        mode.name(),
        failed.len(),
        failed.join(" ")
    );
    for name in failed {
        let dir = layout.work.join("results").join(format!(
            "{}-retry-{}",
            mode.name(),
            name.replace('/', "-")
        ));
        let again = run_tests_in(layout, mode, std::slice::from_ref(&name), timeout, &dir)?;
        if let Some((_, Status::Pass(_))) = again.tests.first() {
            for (n, s) in &mut results.tests {
                if *n == name {
                    let first = describe(s);
                    println!(
                        "xfstests {}: FLAKY: {name} failed ({first}), then passed alone",
                        mode.name()
                    );
                    *s = Status::Flaky(first);
                }
            }
        }
    }
    Ok(())
}

/// A short description of an outcome.
fn describe(s: &Status) -> String {
    match s {
        Status::Pass(secs) => format!("pass ({secs} s)"),
        Status::NotRun(why) => format!("notrun: {why}"),
        Status::Fail(what) => format!("FAIL: {what}"),
        Status::Hung(secs) => format!("HUNG (killed after {secs} s)"),
        Status::Flaky(first) => format!("flaky (first {first})"),
        Status::Skipped(why) => format!("skipped: {why}"),
    }
}

/// Counts and the tests that did not pass, for the log.
pub fn summary(mode: Mode, results: &Results) -> String {
    let mut s = String::new();
    let count = |f: fn(&Status) -> bool| results.tests.iter().filter(|(_, st)| f(st)).count();
    let passed = count(|s| matches!(s, Status::Pass(_) | Status::Flaky(_)));
    let notrun = count(|s| matches!(s, Status::NotRun(_)));
    let failed = count(Status::failed);
    let _ = writeln!(
        s,
        "\nxfstests {}: {passed} passed, {failed} failed, {notrun} not run (of {})",
        mode.name(),
        results.tests.len()
    );
    for (n, st) in &results.tests {
        if !matches!(st, Status::Pass(_)) {
            let _ = writeln!(s, "  {n}: {}", describe(st));
        }
    }
    s
}

/// Fails if a test failed, naming each with its `.out.bad`, `.full` and
/// daemon log files.
pub fn require_passed(_layout: &Layout, mode: Mode, results: &Results) -> Result<()> {
    let failed: Vec<&(String, Status)> = results.tests.iter().filter(|(_, s)| s.failed()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    let mut msg = format!("{} of {} failed:", failed.len(), mode.name());
    for (name, status) in &failed {
        let _ = write!(msg, "\n    {name}: {}", describe(status));
        let base = results.dir.join(name);
        for ext in ["out.bad", "full", "dmesg"] {
            let p = PathBuf::from(format!("{}.{ext}", base.display()));
            if p.exists() {
                let _ = write!(msg, "\n      {}", p.display());
            }
        }
        let log = results
            .dir
            .join("daemon-logs")
            .join(format!("{}.log", name.replace('/', "-")));
        if log.exists() {
            let _ = write!(msg, "\n      {} (daemon)", log.display());
        }
    }
    println!("{msg}");
    let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
    bail!(
        "xfstests {}: {} failed: {} (files under {})",
        mode.name(),
        names.len(),
        names.join(" "),
        results.dir.display()
    )
}

/// Failed or hung tests that `excluded.txt` gives no reason for.
pub fn unexplained_failures(results: &Results, mode: Mode, excluded: &Excluded) -> Vec<String> {
    results
        .tests
        .iter()
        .filter(|(n, s)| s.failed() && excluded.reason(n, mode).is_none())
        .map(|(n, _)| n.clone())
        .collect()
}

/// The `--full` report (Markdown): totals per mode, then every test.
pub fn full_report(tables: &[(Mode, Results)], excluded: &Excluded) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| mode | pass | fail | notrun | hung | skipped | unexplained failures |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for (mode, r) in tables {
        let count = |f: &dyn Fn(&Status) -> bool| r.tests.iter().filter(|(_, s)| f(s)).count();
        let un = unexplained_failures(r, *mode, excluded);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            mode.name(),
            count(&|s| matches!(s, Status::Pass(_) | Status::Flaky(_))),
            count(&|s| matches!(s, Status::Fail(_))),
            count(&|s| matches!(s, Status::NotRun(_))),
            count(&|s| matches!(s, Status::Hung(_))),
            count(&|s| matches!(s, Status::Skipped(_))),
            if un.is_empty() {
                "0".to_string()
            } else {
                un.join(" ")
            },
        );
    }
    let mut by_test: BTreeMap<&str, Vec<(Mode, &Status)>> = BTreeMap::new();
    for (mode, r) in tables {
        for (n, st) in &r.tests {
            by_test.entry(n.as_str()).or_default().push((*mode, st));
        }
    }
    let _ = writeln!(s);
    let mut header = "| test |".to_string();
    let mut rule = "|---|".to_string();
    for (mode, _) in tables {
        let _ = write!(header, " {} |", mode.name());
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{header} why |\n{rule}---|");
    for (name, row) in by_test {
        let mut line = format!("| {name} |");
        let mut why = String::new();
        for (mode, st) in &row {
            let cell = match st {
                Status::Pass(secs) => format!("pass {secs}s"),
                Status::Flaky(_) => "flaky".into(),
                Status::NotRun(reason) => {
                    if why.is_empty() {
                        why = reason.replace('|', "\\|");
                    }
                    "notrun".into()
                }
                Status::Fail(_) => "FAIL".into(),
                Status::Hung(_) => "HUNG".into(),
                Status::Skipped(reason) => {
                    why = reason.replace('|', "\\|");
                    "skipped".into()
                }
            };
            let _ = write!(line, " {cell} |");
            if st.failed() {
                if let Some(r) = excluded.reason(name, *mode) {
                    why = r.replace('|', "\\|");
                } else if why.is_empty() {
                    why = "unexplained".into();
                }
            }
        }
        let _ = writeln!(s, "{line} {why} |");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_outcomes() {
        assert_eq!(classify(" 3s ...  2s"), Status::Pass(2));
        assert_eq!(classify("        0s"), Status::Pass(0));
        assert_eq!(
            classify("       [not run] this test requires a valid $SCRATCH_DEV"),
            Status::NotRun("this test requires a valid $SCRATCH_DEV".into())
        );
        assert!(classify("[failed, exit status 1]- output mismatch (see x)").failed());
        assert!(classify(" 2s ... - output mismatch (see /r/generic/020.out.bad)").failed());
        assert!(classify(" 3s ... _check_dmesg: something found (see x)").failed());
    }

    #[test]
    fn parses_a_run() {
        let mut p = Parser::default();
        p.feed(b"FSTYP -- fuse\n\ngeneric/001  3s ...");
        assert_eq!(p.running().as_deref(), Some("generic/001"));
        p.feed(b"  3s\ngeneric/002       [not run] no\ngeneric/020  - output mismatch (see x)\n");
        p.feed(b"    --- a\n    +++ b\ngeneric/100 ");
        assert_eq!(p.running().as_deref(), Some("generic/100"));
        p.feed(b" 18s ...  16s\nRan: generic/001 generic/002 generic/020 generic/100\n");
        p.feed(b"Failures: generic/020 generic/100\n");
        p.finish();
        let r = p.into_results();
        assert_eq!(r[0], ("generic/001".into(), Status::Pass(3)));
        assert!(matches!(r[1].1, Status::NotRun(_)));
        assert!(r[2].1.failed());
        // The Failures line wins.
        assert!(r[3].1.failed());
    }
}
