//! Booting the guest under qemu and collecting what its tests print.

use super::*;

/// Parses `test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured;
/// 2 filtered out; finished in 0.01s` anywhere in a console line.
pub(super) fn parse_test_result(line: &str) -> Option<LibtestCounts> {
    let rest = &line[line.find("test result: ")? + "test result: ".len()..];
    let (_, rest) = rest.split_once(". ")?;
    Some(LibtestCounts::parse(rest))
}

/// What the FUSE INIT probe reported.
pub(super) struct Probe {
    /// The line after `XTASK-PROBE: `.
    pub(super) line: String,
    /// FUSE major version.
    pub(super) major: u32,
    /// FUSE minor version.
    pub(super) minor: u32,
    /// INIT offers `FUSE_OVER_IO_URING` (bit 41).
    pub(super) over_io_uring: bool,
    /// INIT offers `FUSE_HAS_IO_URING_BUFPOOL` (bit 43).
    pub(super) bufpool: bool,
}

/// Parses `kernel FUSE 7.46, over_io_uring=1, bufpool=1 (...)`.
pub(super) fn parse_probe(line: &str) -> Option<Probe> {
    let rest = line.strip_prefix("kernel FUSE ")?;
    let (version, rest) = rest.split_once(',')?;
    let (major, minor) = version.trim().split_once('.')?;
    let flag = |name: &str| {
        let at = rest.find(&format!("{name}="))? + name.len() + 1;
        Some(rest[at..].starts_with('1'))
    };
    Some(Probe {
        line: line.to_string(),
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        over_io_uring: flag("over_io_uring")?,
        bufpool: flag("bufpool")?,
    })
}

/// One executable's run in the guest.
pub(super) struct ExeRun {
    /// Its name in the plan.
    pub(super) name: String,
    /// Its exit status (`None` if the guest never reported it).
    pub(super) status: Option<i32>,
    /// libtest's counts, if it printed them.
    pub(super) counts: Option<LibtestCounts>,
    /// Host time between its start and result lines.
    pub(super) secs: f64,
}

/// What the guest's console showed.
#[derive(Default)]
pub(super) struct VmRun {
    /// When qemu was started.
    pub(super) spawned: Option<Instant>,
    /// When `/init` said it was up.
    pub(super) booted: Option<Instant>,
    /// When `/init` said all was run.
    pub(super) done: Option<Instant>,
    /// When qemu exited (or was killed).
    pub(super) ended: Option<Instant>,
    /// `XTASK-VM-BOOTED`'s text.
    pub(super) booted_line: Option<String>,
    /// The probe's report.
    pub(super) probe: Option<Probe>,
    /// The probe's failure line, if it printed one.
    pub(super) probe_failure: Option<String>,
    /// The executables, in the order they ran.
    pub(super) exes: Vec<ExeRun>,
    /// Start time of the executable running now.
    pub(super) running: Option<Instant>,
    /// `Some(reason)` if the run was cut short (timeout).
    pub(super) killed: Option<String>,
    /// qemu's exit status, as text.
    pub(super) qemu_status: Option<String>,
    /// The first `Kernel panic` line, if the guest kernel panicked.
    pub(super) panic: Option<String>,
    /// Every console line.
    pub(super) console: Vec<String>,
    /// The `XTASK-MEMORY:` lines of `--measure-memory` (their text after
    /// the marker).
    pub(super) memory: Vec<String>,
}

impl VmRun {
    /// Digests one console line.
    pub(super) fn line(&mut self, line: &str) {
        let now = Instant::now();
        if let Some(rest) = after(line, "XTASK-VM-BOOTED: ") {
            self.booted = Some(now);
            self.booted_line = Some(rest.to_string());
        } else if let Some(rest) = after(line, "XTASK-VM-START: ") {
            self.running = Some(now);
            self.exes.push(ExeRun {
                name: rest.trim().to_string(),
                status: None,
                counts: None,
                secs: 0.0,
            });
        } else if let Some(rest) = after(line, "XTASK-VM-RESULT: ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(status)) = (words.next(), words.next()) {
                let secs = self
                    .running
                    .take()
                    .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
                if let Some(e) = self.exes.iter_mut().rev().find(|e| e.name == name) {
                    e.status = status.parse().ok();
                    e.secs = secs;
                }
            }
        } else if let Some(rest) = after(line, "XTASK-MEMORY: ") {
            self.memory.push(rest.trim().to_string());
        } else if after(line, "XTASK-VM-DONE").is_some() {
            self.done = Some(now);
        } else if let Some(rest) = after(line, "XTASK-PROBE: ") {
            match parse_probe(rest.trim()) {
                Some(p) => self.probe = Some(p),
                None => self.probe_failure = Some(rest.trim().to_string()),
            }
        } else if let Some(rest) = after(line, "Kernel panic - ") {
            self.panic.get_or_insert_with(|| rest.trim().to_string());
        } else if let Some(c) = parse_test_result(line) {
            if let Some(e) = self.exes.last_mut() {
                if e.status.is_none() {
                    e.counts = Some(c);
                }
            }
        }
    }

    /// The name of the executable that started but never reported.
    pub(super) fn unfinished(&self) -> Option<&str> {
        self.exes
            .iter()
            .rev()
            .find(|e| e.status.is_none())
            .map(|e| e.name.as_str())
    }

    /// Boot, run and shutdown durations.
    pub(super) fn timings(&self) -> Vec<(&'static str, f64)> {
        let span = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(b.duration_since(a).as_secs_f64()),
            _ => None,
        };
        let mut t = Vec::new();
        if let Some(s) = span(self.spawned, self.booted) {
            t.push(("boot", s));
        }
        if let Some(s) = span(self.booted, self.done.or(self.ended)) {
            t.push(("run", s));
        }
        if let Some(s) = span(self.done, self.ended) {
            t.push(("shutdown", s));
        }
        t
    }
}

/// The text after `marker` in `line`, if `marker` is there.
pub(super) fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// A console line without `\r`, escape sequences and other control
/// characters (SeaBIOS clears the screen, for one).
pub(super) fn clean(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\u{1b}' => {
                // ESC [ ... letter, or ESC + one character.
                if let Some(next) = chars.next() {
                    if next == '[' {
                        for c in chars.by_ref() {
                            if c.is_ascii_alphabetic() {
                                break;
                            }
                        }
                    }
                }
            }
            '\t' => out.push(ch),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// qemu, killed when dropped (an error or panic must not leave it running).
pub(super) struct Qemu(pub(super) Child);

impl Qemu {
    /// Gives up on the guest: says why (`msg`), keeps it as what ended
    /// `vm`, and kills qemu.
    pub(super) fn give_up(&mut self, vm: &mut VmRun, msg: String) {
        println!("test-in-vm: {msg}");
        vm.killed = Some(msg);
        let _ = self.0.kill();
    }

    /// Waits for qemu to end and keeps in `vm` when and how it did.
    pub(super) fn reap(&mut self, vm: &mut VmRun) -> Result<std::process::ExitStatus> {
        let status = self.0.wait()?;
        vm.ended = Some(Instant::now());
        vm.qemu_status = Some(status.to_string());
        Ok(status)
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A console event from the reader threads.
pub(super) enum Event {
    /// One line of qemu's stdout (the guest's serial console) or stderr.
    Line(String),
    /// One of the two streams ended.
    Eof,
}

/// The qemu command both kinds of boot start from: `args`' CPUs and
/// memory, no display and no network, the kernel `vmlinuz` with `initrd`
/// and the command line `append`, and the console on stdout (piped, as
/// stderr is, for [`spawn_qemu`]).
pub(super) fn qemu_command(args: &VmArgs, vmlinuz: &Path, initrd: &Path, append: &str) -> Command {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-cpu", "max"])
        .args(["-smp", &args.cpus.to_string()])
        .args(["-m", &args.memory.to_string()])
        .args(["-nographic", "-nic", "none"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Starts qemu (`line` is its command as shown) with its console logged
/// to `log`: the process, its output lines (stdout and stderr as they
/// come), the log file, and the run's record with the start time.
pub(super) fn spawn_qemu(
    cmd: &mut Command,
    line: &str,
    log: &Path,
) -> Result<(Qemu, mpsc::Receiver<Event>, fs::File, VmRun)> {
    let log_file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let vm = VmRun {
        spawned: Some(Instant::now()),
        ..VmRun::default()
    };
    let mut qemu = Qemu(
        cmd.spawn()
            .with_context(|| format!("cannot start `{line}`"))?,
    );
    let (tx, rx) = mpsc::channel();
    forward(qemu.0.stdout.take().expect("piped stdout"), tx.clone());
    forward(qemu.0.stderr.take().expect("piped stderr"), tx);
    Ok((qemu, rx, log_file, vm))
}

/// Forwards the lines of `stream` as [`Event`]s.
pub(super) fn forward(stream: impl Read + Send + 'static, tx: mpsc::Sender<Event>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(Event::Line(clean(&buf))).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

/// Boots the guest and follows its console until it powers off, dies or
/// runs out of time.
pub(super) fn boot(args: &VmArgs, vmlinuz: &Path, initrd: &Path, log: &Path) -> Result<VmRun> {
    let mut append = BASE_APPEND.to_string();
    if let Some(extra) = &args.extra_append {
        append.push(' ');
        append.push_str(extra);
    }
    let mut cmd = qemu_command(args, vmlinuz, initrd, &append);
    cmd.arg("-no-reboot");
    let line = display(&cmd);
    println!("$ {line}");
    println!(
        "timeout: {} s; console log: {}",
        args.timeout,
        log.display()
    );
    let (mut qemu, rx, mut log_file, mut vm) = spawn_qemu(&mut cmd, &line, log)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut open_streams = 2;
    while open_streams > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Line(l)) => {
                let _ = writeln!(log_file, "{l}");
                if !args.quiet || l.contains("XTASK-") {
                    println!("vm| {l}");
                }
                vm.line(&l);
                vm.console.push(l);
            }
            Ok(Event::Eof) => open_streams -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let what = match (vm.booted, vm.unfinished()) {
                    (None, _) => "the guest had not finished booting".to_string(),
                    (Some(_), Some(name)) => format!("`{name}` was running"),
                    (Some(_), None) => "between executables".to_string(),
                };
                let msg = format!(
                    "timed out after {} s ({what}); qemu killed (raise --timeout if the run \
                     is just slow)",
                    args.timeout
                );
                qemu.give_up(&mut vm, msg);
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    qemu.reap(&mut vm)?;
    Ok(vm)
}
