//! The `pjdfstest` step: pjdfstest against passthroughfs and the memfs example.

use super::*;

/// statfs `f_type` of a FUSE mount (`FUSE_SUPER_MAGIC`).
pub(super) const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// How long the daemon may take to mount, and to exit after SIGTERM.
pub(super) const DAEMON_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs pjdfstest on a passthroughfs mount and on a mount of the memfs
/// example (or, with `--native` or `XTASK_PJDFSTEST_NATIVE=1`, only on a
/// plain directory for comparison). Both mounts are always tested; their
/// counts are added to the totals, and the step fails if either run did.
///
/// The passthrough daemon is `target/release/passthroughfs` unless
/// `XTASK_PASSTHROUGHFS` names another one; it is run as `DAEMON
/// --allow-other --default-permissions SOURCE MOUNTPOINT`, must stay in
/// the foreground and must unmount and exit on SIGTERM. memfs
/// (`crates/fuse-transport-dev/examples/memfs.rs`, built here) does the
/// same as `memfs MOUNTPOINT` (it mounts with those options itself), with
/// its own configuration, `xtask/pjdfstest-memfs.toml`, whose
/// `expected_failures` (none now) would name the tests it can't pass and
/// say why.
pub(super) fn step_pjdfstest(ctx: &mut Ctx) -> Result<Outcome> {
    let (pjdfstest, version) =
        pjdfstest_binary().context("pjdfstest is not installed (run the setup step)")?;
    println!("pjdfstest: {} ({version})", pjdfstest.display());
    let native = ctx.args.native
        || std::env::var("XTASK_PJDFSTEST_NATIVE").is_ok_and(|v| !v.is_empty() && v != "0");
    let config = ctx.root.join("xtask/pjdfstest.toml");
    if native {
        // Short paths: some tests bind UNIX sockets (108-byte path limit).
        let dir = short_tempdir("pjd-")?;
        println!("native run in {} (no FUSE)", dir.path().display());
        let mut counts = Counts::default();
        let result = run_pjdfstest(&pjdfstest, &config, dir.path(), &mut counts);
        report_pjdfstest(ctx, "a plain directory", counts);
        result?;
        return Ok(Outcome::Done);
    }

    let mut failures = Vec::new();
    let mut counts = Counts::default();
    let result = pjdfstest_passthrough(&pjdfstest, &config, &mut counts);
    report_pjdfstest(ctx, "passthroughfs", counts);
    if let Err(e) = result {
        failures.push(format!("passthroughfs: {}", one_line(&e)));
    }
    println!();
    let config = ctx.root.join("xtask/pjdfstest-memfs.toml");
    let mut counts = Counts::default();
    let result = pjdfstest_memfs(&ctx.root, &pjdfstest, &config, &mut counts);
    report_pjdfstest(ctx, "memfs", counts);
    if let Err(e) = result {
        failures.push(format!("memfs: {}", one_line(&e)));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(Outcome::Done)
}

/// Adds one run's counts to the totals and prints them.
pub(super) fn report_pjdfstest(ctx: &mut Ctx, what: &str, counts: Counts) {
    ctx.counts.add(counts);
    if counts.seen {
        println!(
            "pjdfstest on {what}: {} passed, {} failed, {} skipped",
            counts.passed, counts.failed, counts.skipped
        );
    }
}

/// pjdfstest on a passthroughfs mount of an empty directory.
pub(super) fn pjdfstest_passthrough(
    pjdfstest: &Path,
    config: &Path,
    counts: &mut Counts,
) -> Result<()> {
    // Another daemon with the same command line can be compared by
    // naming it in XTASK_PASSTHROUGHFS (e.g. a wrapper for libfuse's
    // passthrough_ll).
    let daemon = std::env::var_os("XTASK_PASSTHROUGHFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("release/passthroughfs"));
    if !daemon.is_file() {
        bail!("{} does not exist (run the build step)", daemon.display());
    }
    // Short paths: some tests bind UNIX sockets (108-byte path limit).
    let mountpoint = short_tempdir("pjd-")?;
    let source = short_tempdir("pjd-src-")?;
    let logs = tempfile::Builder::new().prefix("pjd-log-").tempdir()?;
    let mut cmd = Command::new(&daemon);
    cmd.args(["--foreground", "--allow-other", "--default-permissions"])
        .arg(source.path());
    let mount = DaemonMount::start("passthroughfs", cmd, mountpoint.path(), logs.path())?;
    let result = run_pjdfstest(pjdfstest, config, mountpoint.path(), counts);
    // `mount` is gone before `source` and `mountpoint` are removed.
    stop_after(result, mount)
}

/// pjdfstest on a mount of the memfs example, built first (the build step
/// builds no examples).
pub(super) fn pjdfstest_memfs(
    root: &Path,
    pjdfstest: &Path,
    config: &Path,
    counts: &mut Counts,
) -> Result<()> {
    run_cmd(
        cargo()
            .args(["build", "--release", "-p", "fusewire-transport-dev"])
            .args(["--example", "memfs"])
            .current_dir(root),
    )?;
    let daemon = target_dir().join("release/examples/memfs");
    let mountpoint = short_tempdir("pjd-mem-")?;
    let logs = tempfile::Builder::new().prefix("pjd-log-").tempdir()?;
    let cmd = Command::new(&daemon);
    let mount = DaemonMount::start("memfs", cmd, mountpoint.path(), logs.path())?;
    let result = run_pjdfstest(pjdfstest, config, mountpoint.path(), counts);
    stop_after(result, mount)
}

/// Stops the daemon whatever pjdfstest's `result` was; reports
/// pjdfstest's failure first if both failed.
pub(super) fn stop_after(result: Result<()>, mount: DaemonMount) -> Result<()> {
    match (result, mount.stop()) {
        (Err(e), Err(stop)) => {
            println!("also: {}", one_line(&stop));
            Err(e)
        }
        (result, stop) => result.and(stop),
    }
}

/// A fresh directory `/tmp/PREFIXxxxxxx`, mode 0755 (pjdfstest switches to
/// other users, who must be able to reach the test directory).
pub(super) fn short_tempdir(prefix: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .context("creating a directory in /tmp")?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// Runs pjdfstest in `dir`, echoing its output; stores its counts in
/// `counts` and fails (naming the failed tests) if any test failed.
///
/// A test that fails is run once more, alone. One that passes then is
/// counted as passed and reported as flaky, by name, in the log and the
/// summary line; one that fails again fails the step. The one seen,
/// `open::etxtbsy` (about 1 run in 7), is no race with the machine: the
/// passthrough's `FUSE_ATOMIC_O_TRUNC` lets the daemon truncate a running
/// executable on `open(O_RDONLY | O_TRUNC)` before the kernel refuses it
/// with `ETXTBSY`, and the program's death then lets the open succeed
/// (docs/testing.md, "The pjdfstest retry"). The retry can go once the
/// passthrough stops asking for `FUSE_ATOMIC_O_TRUNC`.
pub(super) fn run_pjdfstest(
    pjdfstest: &Path,
    config: &Path,
    dir: &Path,
    counts: &mut Counts,
) -> Result<()> {
    let first = run_pjdfstest_once(pjdfstest, config, dir, &[], counts);
    let failed = match first {
        Err(PjdFailure::Tests(failed)) if !failed.is_empty() => failed,
        Err(PjdFailure::Tests(_)) => bail!("pjdfstest reported failures but named none"),
        Err(PjdFailure::Other(e)) => return Err(e),
        Ok(()) => return Ok(()),
    };
    println!(
        "pjdfstest: running the {} failed test(s) once more, alone: {}",
        failed.len(),
        failed.join(", ")
    );
    let mut again = Counts::default();
    let mut still_failing = Vec::new();
    let mut flaky = Vec::new();
    for name in &failed {
        match run_pjdfstest_once(
            pjdfstest,
            config,
            dir,
            std::slice::from_ref(name),
            &mut again,
        ) {
            Ok(()) if again.passed >= 1 => flaky.push(name.clone()),
            Ok(()) => still_failing.push(format!("{name} (not run again)")),
            Err(PjdFailure::Tests(_)) => still_failing.push(name.clone()),
            Err(PjdFailure::Other(e)) => return Err(e),
        }
    }
    counts.failed -= flaky.len() as u64;
    counts.passed += flaky.len() as u64;
    if !flaky.is_empty() {
        println!(
            "pjdfstest: FLAKY (failed once, passed when run again): {}",
            flaky.join(", ")
        );
    }
    if !still_failing.is_empty() {
        bail!(
            "pjdfstest: {} passed, {} failed, {} skipped: {}",
            counts.passed,
            counts.failed,
            counts.skipped,
            still_failing.join(", ")
        );
    }
    Ok(())
}

/// Why a pjdfstest run failed.
pub(super) enum PjdFailure {
    /// These tests failed.
    Tests(Vec<String>),
    /// It didn't run properly.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for PjdFailure {
    fn from(e: anyhow::Error) -> Self {
        PjdFailure::Other(e)
    }
}

impl From<std::io::Error> for PjdFailure {
    fn from(e: std::io::Error) -> Self {
        PjdFailure::Other(e.into())
    }
}

/// One pjdfstest run (of the tests whose names contain one of `only`, or
/// all; its `--exact` wants names longer than the ones it prints).
pub(super) fn run_pjdfstest_once(
    pjdfstest: &Path,
    config: &Path,
    dir: &Path,
    only: &[String],
    counts: &mut Counts,
) -> std::result::Result<(), PjdFailure> {
    let mut cmd = Command::new(pjdfstest);
    cmd.arg("-c").arg(config).arg("-p").arg(dir);
    cmd.args(only);
    cmd.current_dir(dir)
        .env("NO_COLOR", "1")
        // A failure's message says enough; backtraces would triple the log.
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped());
    let line = display(&cmd);
    println!("$ {line}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let mut failed_tests = Vec::new();
    let mut summary = None;
    let stdout = child.stdout.take().expect("piped stdout");
    for l in BufReader::new(stdout).lines() {
        let l = strip_ansi(&l.context("reading pjdfstest's output")?);
        println!("{l}");
        let t = l.trim_end();
        if t.ends_with(" FAILED") || t.ends_with(" PASSED UNEXPECTEDLY") {
            if let Some(name) = t.split_whitespace().next() {
                failed_tests.push(name.to_string());
            }
        }
        if let Some(s) = parse_pjdfstest_summary(t) {
            summary = Some(s);
        }
    }
    let status = child.wait()?;
    let Some(summary) = summary else {
        return Err(anyhow::anyhow!("pjdfstest printed no summary ({status})").into());
    };
    *counts = summary;
    if counts.failed > 0 {
        println!("failed pjdfstest tests ({}):", failed_tests.len());
        for t in &failed_tests {
            println!("  {t}");
        }
        let mut list = failed_tests
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if failed_tests.len() > 10 {
            list.push_str(", ...");
        }
        println!(
            "pjdfstest: {} passed, {} failed, {} skipped: {list}",
            counts.passed, counts.failed, counts.skipped
        );
        return Err(PjdFailure::Tests(failed_tests));
    }
    if !status.success() {
        return Err(
            anyhow::anyhow!("pjdfstest exited with {status} although no test failed").into(),
        );
    }
    Ok(())
}

/// Parses `Summary: 0 failed, 15 skipped, 383 passed, 0 expected failures, 398 total`.
pub(super) fn parse_pjdfstest_summary(line: &str) -> Option<Counts> {
    let rest = line.strip_prefix("Summary:")?;
    let mut c = Counts {
        seen: true,
        ..Counts::default()
    };
    for part in rest.split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let n: u64 = n.parse().ok()?;
        match what {
            "failed" => c.failed = n,
            // Expected failures (a configuration's `expected_failures`)
            // did not pass: they count as skipped.
            "skipped" | "expected" => c.skipped += n,
            "passed" => c.passed = n,
            _ => {}
        }
    }
    Some(c)
}

/// A running FUSE daemon (passthroughfs, memfs) and its mount. Dropping
/// it (also on an error or a panic) stops the daemon and makes sure no
/// mount is left.
pub(super) struct DaemonMount {
    /// The daemon's name, for messages.
    name: &'static str,
    /// The daemon; `None` once it has been waited for.
    child: Option<Child>,
    /// Where it is mounted.
    mountpoint: PathBuf,
    /// The file holding the daemon's stdout and stderr.
    log: PathBuf,
}

impl DaemonMount {
    /// Starts `cmd MOUNTPOINT` (its stdout and stderr going to a log in
    /// `log_dir`) and waits until the mount answers.
    pub(super) fn start(
        name: &'static str,
        mut cmd: Command,
        mountpoint: &Path,
        log_dir: &Path,
    ) -> Result<Self> {
        // As mountinfo will show it (no symlinks).
        let mountpoint = mountpoint.canonicalize()?;
        let log = log_dir.join(format!("{name}.log"));
        let log_file = fs::File::create(&log)?;
        cmd.arg(&mountpoint)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        let line = display(&cmd);
        println!("$ {line} &   (log: {})", log.display());
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{line}`"))?;
        let mut mount = Self {
            name,
            child: Some(child),
            mountpoint,
            log,
        };
        mount.wait_mounted()?;
        Ok(mount)
    }

    /// Polls until the mountpoint is a FUSE mount whose statfs answers.
    fn wait_mounted(&mut self) -> Result<()> {
        let deadline = Instant::now() + DAEMON_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("daemon not yet waited for");
            if let Some(status) = child.try_wait()? {
                self.child = None;
                self.print_log();
                bail!(
                    "{} exited before mounting ({status}); its log is above",
                    self.name
                );
            }
            if is_fuse_mounted(&self.mountpoint) {
                // Mounted: statfs goes to the daemon and must answer in time.
                let left = deadline.saturating_duration_since(Instant::now());
                match statfs_type(&self.mountpoint, left.max(Duration::from_secs(1))) {
                    Some(Ok(t)) if t == FUSE_SUPER_MAGIC => {
                        println!("mounted: {} (FUSE)", self.mountpoint.display());
                        return Ok(());
                    }
                    Some(Ok(t)) => bail!(
                        "{} has f_type {t:#x}, not FUSE ({FUSE_SUPER_MAGIC:#x})",
                        self.mountpoint.display()
                    ),
                    // A file system without `statfs` (the README's minimal
                    // one) answers ENOSYS: it answered, and mountinfo says FUSE.
                    Some(Err(e)) if e.raw_os_error() == Some(libc::ENOSYS) => {
                        println!("mounted: {} (FUSE, no statfs)", self.mountpoint.display());
                        return Ok(());
                    }
                    Some(Err(e)) => {
                        self.print_log();
                        bail!("statfs({}) failed: {e}", self.mountpoint.display());
                    }
                    None => {
                        self.print_log();
                        bail!(
                            "the mount at {} does not answer statfs",
                            self.mountpoint.display()
                        );
                    }
                }
            }
            if Instant::now() >= deadline {
                self.print_log();
                bail!(
                    "{} did not mount {} within {} s",
                    self.name,
                    self.mountpoint.display(),
                    DAEMON_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Prints the daemon's log.
    fn print_log(&self) {
        let mut text = String::new();
        let _ = fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut text));
        println!("---- {} log ({}) ----", self.name, self.log.display());
        print!("{text}");
        if !text.is_empty() && !text.ends_with('\n') {
            println!();
        }
        println!("---- end of log ----");
    }

    /// Stops the daemon with SIGTERM and checks it unmounted and exited with 0.
    pub(super) fn stop(mut self) -> Result<()> {
        let status = self.terminate();
        let leftover = self.force_unmount();
        match status {
            Some(s) if s.signal().is_some() => {
                self.print_log();
                bail!("{} died after SIGTERM ({s})", self.name);
            }
            Some(s) if !s.success() => {
                println!("note: {} exited with {s} after SIGTERM", self.name);
            }
            None => {
                self.print_log();
                bail!(
                    "{} did not exit within {} s of SIGTERM",
                    self.name,
                    DAEMON_TIMEOUT.as_secs()
                );
            }
            _ => {}
        }
        if leftover {
            bail!(
                "{} exited but left its mount behind (lazily unmounted)",
                self.name
            );
        }
        println!(
            "{} stopped, {} unmounted",
            self.name,
            self.mountpoint.display()
        );
        Ok(())
    }

    /// Sends SIGTERM and waits up to [`DAEMON_TIMEOUT`]; SIGKILL after that.
    /// Returns the exit status if it exited on its own.
    fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // The Child has not been waited for, so its PID cannot have been
        // reused: it is still our (possibly zombie) child.
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
        // SAFETY: kill has no memory-safety preconditions; pid is our child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + DAEMON_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        println!(
            "{} ignored SIGTERM for {} s: killing it",
            self.name,
            DAEMON_TIMEOUT.as_secs()
        );
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// `umount -l` if the mount is still there; returns whether it was.
    fn force_unmount(&self) -> bool {
        if !is_fuse_mounted(&self.mountpoint) {
            return false;
        }
        println!("{} is still mounted: umount -l", self.mountpoint.display());
        if let Err(e) = run_cmd(Command::new("umount").arg("-l").arg(&self.mountpoint)) {
            println!("warning: {}", one_line(&e));
        }
        true
    }
}

impl Drop for DaemonMount {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.terminate();
        }
        self.force_unmount();
    }
}

/// Whether `/proc/self/mountinfo` lists a FUSE mount at `path`. (Reading
/// mountinfo never blocks, unlike a statfs on a mount whose daemon is stuck.)
pub(super) fn is_fuse_mounted(path: &Path) -> bool {
    mounts()
        .iter()
        .any(|m| m.mount_point == path && (m.fstype == "fuse" || m.fstype.starts_with("fuse.")))
}

/// statfs `f_type` of `path`, from a helper thread so that a hung daemon
/// cannot hang us: `None` if there is no answer within `timeout`.
pub(super) fn statfs_type(path: &Path, timeout: Duration) -> Option<std::io::Result<i64>> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: an all-zero statfs is a valid value of a plain C struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: path is NUL-terminated and st is a valid out pointer.
        let r = unsafe { libc::statfs(path.as_ptr(), &mut st) };
        let result = if r == 0 {
            #[allow(clippy::unnecessary_cast)]
            Ok(st.f_type as i64)
        } else {
            Err(std::io::Error::last_os_error())
        };
        let _ = tx.send(result);
    });
    rx.recv_timeout(timeout).ok()
}
