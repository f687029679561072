//! Running `cargo test` and reading what it prints: the counts of every test
//! binary, every failed test with its binary and first message, the binaries
//! that died without a result, and (for a watchdog) the tests still running.
//!
//! Cargo writes its `Running ...` lines and its errors on standard error and
//! the test binaries write their results on standard output; both go into
//! one pipe here so that each result line follows the `Running` line of its
//! binary.

use super::*;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{FromRawFd, OwnedFd};

/// One failed test (or a test binary that ended without a result).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FailedTest {
    /// The binary: `-p CRATE --test NAME` as cargo names it for a rerun,
    /// or the `Running` line's target while cargo has not named it yet.
    pub(crate) binary: String,
    /// The test's name; [`WHOLE_BINARY`] when the binary itself failed
    /// (crashed, or its harness gave no result line).
    pub(crate) test: String,
    /// The first line that says why (a panic's location and message).
    pub(crate) message: String,
}

/// The test name recorded for a binary that died without a result line.
pub(crate) const WHOLE_BINARY: &str = "(the whole binary: no result line)";

/// What one `cargo test` printed, read line by line.
#[derive(Default)]
pub(crate) struct Report {
    /// Sums of every binary's `test result:` line.
    pub(crate) counts: Counts,
    /// Every failed test, in the order the binaries ran.
    pub(crate) failed: Vec<FailedTest>,
    /// The binary running now (from cargo's last `Running` or `Doc-tests`).
    binary: Option<String>,
    /// Whether the current binary printed its `test result:` line.
    binary_done: bool,
    /// Index in `failed` of the current binary's first failure.
    binary_first_failure: usize,
    /// Tests libtest said have run for over 60 s and not yet finished.
    slow: BTreeSet<String>,
    /// The `---- NAME stdout ----` section being read.
    section: Option<Section>,
    /// Set after cargo's `error: test failed, to rerun pass ...`: the next
    /// `Caused by:` detail belongs to that binary.
    awaiting_cause: bool,
}

impl Report {
    /// Reads one line of `cargo test`'s combined output.
    pub(crate) fn line(&mut self, raw: &str) {
        let line = strip_ansi(raw);
        let trimmed = line.trim();
        if let Some(target) = trimmed
            .strip_prefix("Running ")
            .or_else(|| trimmed.strip_prefix("Doc-tests ").map(|_| trimmed))
        {
            // A new binary: the previous one, if it never gave a result,
            // is recorded when cargo says it failed (below).
            self.binary = Some(target.to_string());
            self.binary_done = false;
            self.binary_first_failure = self.failed.len();
            self.section = None;
            self.slow.clear();
            self.awaiting_cause = false;
            return;
        }
        if let Some(c) = parse_libtest_result(&line) {
            self.counts.add(c);
            self.binary_done = true;
            self.section = None;
            return;
        }
        if let Some(rerun) = trimmed
            .strip_prefix("error: test failed, to rerun pass `")
            .and_then(|r| r.strip_suffix('`'))
        {
            self.binary_failed(rerun);
            self.awaiting_cause = true;
            return;
        }
        if self.awaiting_cause {
            if let Some(cause) = trimmed.strip_prefix("Caused by:") {
                if cause.trim().is_empty() {
                    return;
                }
            }
            if !trimmed.is_empty() {
                self.awaiting_cause = false;
                if let Some(f) = self.failed.last_mut() {
                    if f.test == WHOLE_BINARY && f.message.is_empty() {
                        f.message = shorten(trimmed);
                    }
                }
            }
            return;
        }
        if let Some(name) = trimmed
            .strip_prefix("test ")
            .and_then(|r| r.strip_suffix(" has been running for over 60 seconds"))
        {
            self.slow.insert(name.to_string());
            return;
        }
        if let Some((name, result)) = trimmed
            .strip_prefix("test ")
            .and_then(|r| r.split_once(" ... "))
        {
            self.slow.remove(name);
            if result.starts_with("FAILED") {
                self.failed.push(FailedTest {
                    binary: self.binary_name(),
                    test: name.to_string(),
                    message: String::new(),
                });
            }
            return;
        }
        if let Some(name) = trimmed
            .strip_prefix("---- ")
            .and_then(|r| r.strip_suffix(" stdout ----"))
        {
            self.section = Some(Section {
                name: name.to_string(),
                location: None,
                from_panic: false,
            });
            return;
        }
        if trimmed == "failures:" || trimmed.starts_with("test result:") {
            self.section = None;
            return;
        }
        let Some(section) = &mut self.section else {
            return;
        };
        if trimmed.is_empty() || section.from_panic {
            return;
        }
        let first = self.failed[self.binary_first_failure..]
            .iter_mut()
            .find(|f| f.test == section.name);
        let Some(failure) = first else { return };
        // `thread 'NAME' (TID) panicked at FILE:LINE:COL:` then the message
        // on the next line; without a panic: the section's first line.
        if let Some(at) = panic_location(trimmed) {
            section.location = Some(at.to_string());
        } else if let Some(at) = section.location.take() {
            failure.message = shorten(&format!("{at}: {trimmed}"));
            section.from_panic = true;
        } else if failure.message.is_empty() {
            failure.message = shorten(trimmed);
        }
    }

    /// Cargo said the current binary failed: names its failures after
    /// cargo's rerun arguments, and records the binary itself when it gave
    /// no result line (it crashed or was killed).
    fn binary_failed(&mut self, rerun: &str) {
        // Without `-p` (one package selected) the arguments alone don't
        // say which crate: the `Running` line's target does.
        let rerun = if rerun.starts_with("-p ") {
            rerun.to_string()
        } else {
            format!("{rerun}: {}", self.binary_name())
        };
        for f in &mut self.failed[self.binary_first_failure..] {
            f.binary.clone_from(&rerun);
        }
        if !self.binary_done {
            self.failed.push(FailedTest {
                binary: rerun,
                test: WHOLE_BINARY.to_string(),
                message: String::new(),
            });
        }
    }

    /// The current binary as the `Running` line names it.
    fn binary_name(&self) -> String {
        self.binary
            .clone()
            .unwrap_or_else(|| "(unknown binary)".into())
    }

    /// What is running now: the binary and the tests that have run for over
    /// 60 s, for a watchdog's report.
    pub(crate) fn running_now(&self) -> String {
        let binary = self.binary_name();
        if self.slow.is_empty() {
            format!("{binary} (no test in it had run for 60 s yet)")
        } else {
            let slow: Vec<&str> = self.slow.iter().map(String::as_str).collect();
            format!("{binary}: still running: {}", slow.join(", "))
        }
    }
}

/// A failed test's `---- NAME stdout ----` section, as it is read.
struct Section {
    /// The test.
    name: String,
    /// A panic's location, once its `panicked at` line was seen.
    location: Option<String>,
    /// Whether the message came from a panic (which wins over the
    /// section's first line, a log line the test printed).
    from_panic: bool,
}

/// `FILE:LINE:COL` of a `thread 'NAME' [(TID)] panicked at FILE:LINE:COL:`.
fn panic_location(line: &str) -> Option<&str> {
    if !line.starts_with("thread '") {
        return None;
    }
    let (_, at) = line.split_once(" panicked at ")?;
    at.strip_suffix(':')
}

/// At most 240 characters of a message.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(240) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Where the output of a test run goes besides the parser.
pub(crate) enum Echo {
    /// Every line to our standard output.
    Stdout,
    /// Every line into this file (a round of `--repeat`).
    File(File),
}

/// How one `cargo test` ended.
pub(crate) struct TestRun {
    /// Its exit status; `None` when the watchdog killed it.
    pub(crate) status: Option<ExitStatus>,
    /// What its output said.
    pub(crate) report: Report,
    /// What was running when the watchdog fired.
    pub(crate) hung: Option<String>,
}

/// Runs `cmd` (a `cargo test`) with its standard output and error in one
/// pipe, feeding each line to a [`Report`] and to `echo`. `started` runs
/// right after the spawn (the user-namespace runner writes the child's maps
/// there). With a `watchdog`, a run still going after that long is reported
/// as hung, killed with every process under it, and returned with no status.
pub(crate) fn run_tests(
    cmd: &mut Command,
    mut echo: Echo,
    watchdog: Option<Duration>,
    started: impl FnOnce(&mut Child) -> Result<()>,
) -> Result<TestRun> {
    let line = display(cmd);
    match &mut echo {
        Echo::Stdout => println!("$ {line}"),
        Echo::File(f) => writeln!(f, "$ {line}")?,
    }
    let (read, write) = pipe().context("creating a pipe for cargo test's output")?;
    let mut child = cmd
        .stdout(write.try_clone()?)
        .stderr(write)
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    // The Command keeps its copies of the pipe's write end: replaced, so
    // that the pipe ends when the child and its descendants are gone.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    if let Err(e) = started(&mut child) {
        kill_tree(child.id());
        let _ = child.wait();
        return Err(e);
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(read).split(b'\n') {
            let Ok(l) = l else { break };
            if tx.send(String::from_utf8_lossy(&l).into_owned()).is_err() {
                break;
            }
        }
    });
    let deadline = watchdog.map(|w| Instant::now() + w);
    let mut report = Report::default();
    let mut hung = None;
    loop {
        let received = match deadline {
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(l) => {
                match &mut echo {
                    Echo::Stdout => println!("{l}"),
                    Echo::File(f) => writeln!(f, "{l}")?,
                }
                report.line(&l);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                hung = Some(report.running_now());
                // Written down before the kill: where each thread waits.
                let tree = hang::process_tree(child.id());
                let mut note = format!(
                    "watchdog: still running after {} s; the processes under the run:\n{}",
                    watchdog.unwrap_or_default().as_secs(),
                    hang::describe(&tree)
                );
                let connections = hang::fuse_connections_seen_by(&tree);
                kill_tree(child.id());
                if let Some(aborted) = hang::abort_if_stuck(&tree, &connections) {
                    note.push_str(&aborted);
                }
                match &mut echo {
                    Echo::Stdout => println!("{note}"),
                    Echo::File(f) => writeln!(f, "{note}")?,
                }
                break;
            }
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    Ok(TestRun {
        status: hung.is_none().then_some(status),
        report,
        hung,
    })
}

/// A pipe (read end, write end), both close-on-exec.
fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and ours alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(r), File::from(w)))
}

/// Kills `pid` (our child, not yet waited for) and every process under it:
/// each is stopped first, so none forks or is reparented away while the
/// tree is collected, then all are killed.
pub(crate) fn kill_tree(pid: u32) {
    let mut all = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        // SAFETY: kill has no memory preconditions; p is our child or was
        // listed as a child of a process we stopped, so it cannot be reaped
        // and reused meanwhile.
        unsafe { libc::kill(p as libc::pid_t, libc::SIGSTOP) };
        all.push(p);
        todo.extend(children(p));
    }
    for p in all {
        // SAFETY: as above.
        unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
    }
}

/// The children of `pid`, from every thread's `/proc/PID/task/TID/children`.
pub(super) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Prints every failed test with its binary and first message.
pub(crate) fn print_failed(failed: &[FailedTest]) {
    if failed.is_empty() {
        return;
    }
    println!("failed tests ({}):", failed.len());
    for f in failed {
        let message = if f.message.is_empty() {
            "(no message)"
        } else {
            &f.message
        };
        println!("  {} [{}]: {message}", f.test, f.binary);
    }
}

/// Parses libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; ...`.
pub(crate) fn parse_libtest_result(line: &str) -> Option<Counts> {
    let c = LibtestCounts::parse(line.trim().strip_prefix("test result: ")?);
    Some(Counts {
        passed: c.passed,
        failed: c.failed,
        skipped: c.ignored,
        seen: true,
    })
}

/// The counts of libtest's summary line (`test result: ok. 12 passed;
/// 1 failed; 3 ignored; 0 measured; 2 filtered out; finished in 0.01s`),
/// as `cargo xtask test` and `cargo xtask test-in-vm` read it.
#[derive(Default, Clone, Copy)]
pub(crate) struct LibtestCounts {
    /// Passed tests.
    pub(crate) passed: u64,
    /// Failed tests.
    pub(crate) failed: u64,
    /// Ignored tests.
    pub(crate) ignored: u64,
    /// Tests the filter left out.
    pub(crate) filtered: u64,
}

impl LibtestCounts {
    /// The counts in `summary`, the line after `test result: ` (with its
    /// `ok.`/`FAILED.` or without): in each `;`-separated part, the first
    /// number and the word after it.
    pub(crate) fn parse(summary: &str) -> Self {
        let mut c = Self::default();
        for part in summary.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let Some((n, what)) = words
                .windows(2)
                .find_map(|w| Some((w[0].parse::<u64>().ok()?, w[1])))
            else {
                continue;
            };
            match what {
                "passed" => c.passed = n,
                "failed" => c.failed = n,
                "ignored" => c.ignored = n,
                "filtered" => c.filtered = n,
                _ => {}
            }
        }
        c
    }

    /// Tests that matched the filter.
    pub(crate) fn matched(&self) -> u64 {
        self.passed + self.failed + self.ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo test --no-fail-fast` over three binaries: one passes, one has
    /// a failing test, one aborts; then the doc-tests run.
    const OUTPUT: &str = r#"    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.10s
     Running unittests src/lib.rs (target/debug/deps/alpha-0123456789abcdef)

running 2 tests
test a::one ... ok
test a::two ... ignored, needs a disk

test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/takeover.rs (target/debug/deps/takeover-0123456789abcdef)

running 3 tests
test lock_waits ... FAILED
test slow_one has been running for over 60 seconds
test slow_one ... ok
test upgrades ... FAILED

failures:

---- lock_waits stdout ----
some log line the test printed

thread 'lock_waits' (7434) panicked at crates/x/tests/takeover.rs:397:5:
the serving side handed over during a lock wait
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

---- upgrades stdout ----
Error: git failed across an upgrade

failures:
    lock_waits
    upgrades

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 61.20s

error: test failed, to rerun pass `-p fuse-transport-dev --test takeover`
     Running tests/crash.rs (target/debug/deps/crash-0123456789abcdef)

running 1 test
error: test failed, to rerun pass `--test crash`

Caused by:
  process didn't exit successfully: `target/debug/deps/crash-0123456789abcdef` (signal: 6, SIGABRT: process abort signal)
   Doc-tests alpha

running 1 test
test src/lib.rs - (line 3) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s

error: 2 targets failed:
    `-p fuse-transport-dev --test takeover`
    `--test crash`
"#;

    fn parse(text: &str) -> Report {
        let mut r = Report::default();
        for l in text.lines() {
            r.line(l);
        }
        r
    }

    #[test]
    fn counts_every_binary_and_names_every_failure() {
        let r = parse(OUTPUT);
        let c = r.counts;
        assert_eq!((c.passed, c.failed, c.skipped), (3, 2, 1));
        let takeover = "-p fuse-transport-dev --test takeover";
        assert_eq!(
            r.failed,
            [
                FailedTest {
                    binary: takeover.into(),
                    test: "lock_waits".into(),
                    message: "crates/x/tests/takeover.rs:397:5: the serving side handed over during a lock wait".into(),
                },
                FailedTest {
                    binary: takeover.into(),
                    test: "upgrades".into(),
                    message: "Error: git failed across an upgrade".into(),
                },
                FailedTest {
                    binary: "--test crash: tests/crash.rs (target/debug/deps/crash-0123456789abcdef)".into(),
                    test: WHOLE_BINARY.into(),
                    message: "process didn't exit successfully: `target/debug/deps/crash-0123456789abcdef` (signal: 6, SIGABRT: process abort signal)".into(),
                },
            ]
        );
    }

    #[test]
    fn names_the_tests_still_running() {
        let cut = OUTPUT.find("test slow_one ... ok").unwrap();
        let r = parse(&OUTPUT[..cut]);
        assert_eq!(
            r.running_now(),
            "tests/takeover.rs (target/debug/deps/takeover-0123456789abcdef): still running: slow_one"
        );
        let r = parse(&OUTPUT[..OUTPUT.find("test a::one").unwrap()]);
        assert!(r
            .running_now()
            .ends_with("(no test in it had run for 60 s yet)"));
    }

    #[test]
    fn parses_libtest_result() {
        let c = parse_libtest_result(
            "test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured; 2 filtered out; finished in 0.01s",
        )
        .unwrap();
        assert_eq!((c.passed, c.failed, c.skipped), (12, 1, 3));
        assert!(parse_libtest_result("running 3 tests").is_none());
    }

    #[test]
    fn watchdog_kills_a_hung_run_and_its_children() {
        // A "test run" whose child outlives the watchdog: the run is
        // reported hung, and the sleeping grandchild is killed too.
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo '     Running tests/hang.rs (target/debug/deps/hang-1)'; \
             echo 'test stuck has been running for over 60 seconds'; \
             sleep 1000 & echo \"sleeper $!\"; wait",
        ]);
        let run = run_tests(
            &mut cmd,
            Echo::File(log.reopen().unwrap()),
            Some(Duration::from_millis(500)),
            |_| Ok(()),
        )
        .unwrap();
        assert!(run.status.is_none());
        assert_eq!(
            run.hung.as_deref(),
            Some("tests/hang.rs (target/debug/deps/hang-1): still running: stuck")
        );
        let text = fs::read_to_string(log.path()).unwrap();
        let sleeper: u32 = text
            .lines()
            .find_map(|l| l.strip_prefix("sleeper "))
            .expect("the shell printed its sleeper's pid")
            .parse()
            .unwrap();
        // The log says where each process of the run was when it was killed.
        assert!(
            text.contains(&format!("process {sleeper} (sleep)")),
            "no state of the sleeper in the log: {text}"
        );
        // SIGKILL is delivered asynchronously: the deadline only keeps a
        // broken kill from hanging the test.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
            let alive = state
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'));
            if !alive {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sleeper {sleeper} outlived the watchdog"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
