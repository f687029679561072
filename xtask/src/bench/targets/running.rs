//! Starting a target and waiting until its mount shows the backing
//! directory, then watching and stopping it: the process and mount
//! lifetime of one target, apart from how its command line is made.

use super::hp_init::{hp_mode_check, HpInit, HP_INIT_STATUS};
use super::mount::{force_unmount, mounted};
use super::{CommandLine, HpMode, Paths, TargetKind, TargetSpec, MARKER};
use crate::test::wait_for_exit;
use crate::text::strip_ansi;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Exit status of `fuse-bench-daemon` for a mode that doesn't exist yet.
const EXIT_NOT_AVAILABLE: i32 = 3;

/// Why a target didn't start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// Our daemon said the mode doesn't exist yet.
    NotAvailable(String),
    /// It mounted something that isn't the backing directory.
    Unusable(String),
    /// Anything else.
    Failed(String),
}

/// A running target. Dropping it stops it and makes sure nothing stays
/// mounted.
pub struct Running {
    child: Option<Child>,
    mnt: PathBuf,
    /// The directory workloads use (the mountpoint, or the backing
    /// directory for native).
    pub root: PathBuf,
    /// Our daemon's start line.
    pub start_line: Option<String>,
    log: PathBuf,
    stopped: bool,
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>();
    v[v.len().saturating_sub(lines)..].join(" / ")
}

/// Starts `spec` and waits until its mount shows the backing directory.
pub fn start(
    spec: &TargetSpec,
    command: Option<CommandLine>,
    paths: &Paths,
    marker_token: &str,
    log: &Path,
    timeout: Duration,
) -> Result<Running, StartError> {
    let Some((bin, args)) = command else {
        return Ok(Running {
            child: None,
            mnt: paths.mnt.clone(),
            root: paths.backing.clone(),
            start_line: None,
            log: log.to_path_buf(),
            stopped: true,
        });
    };
    if let Some(fstype) = mounted(&paths.mnt) {
        let done = force_unmount(&paths.mnt);
        if mounted(&paths.mnt).is_some() {
            return Err(StartError::Failed(format!(
                "{} is still mounted ({fstype}): {}",
                paths.mnt.display(),
                done.join("; ")
            )));
        }
    }
    std::fs::create_dir_all(&paths.mnt)
        .map_err(|e| StartError::Failed(format!("creating {}: {e}", paths.mnt.display())))?;
    let stdout_path = log.with_extension("stdout");
    let open = |p: &Path| {
        File::create(p).map_err(|e| StartError::Failed(format!("creating {}: {e}", p.display())))
    };
    let hp = match spec.kind {
        TargetKind::LibfuseHp(mode) => Some(mode),
        _ => None,
    };
    let mut cmd = Command::new(&bin);
    if hp.is_some() {
        // libfuse logs its INIT negotiation, which says whether the mode
        // asked for is the mode it got.
        cmd.env(HP_INIT_STATUS, "1");
    }
    let child = cmd
        .args(&args)
        .stdin(Stdio::null())
        .stdout(open(&stdout_path)?)
        .stderr(open(log)?)
        // Its own process group: a Ctrl-C at the terminal reaches the
        // harness, which then stops the daemon in order.
        .process_group(0)
        .spawn()
        .map_err(|e| StartError::Failed(format!("starting {}: {e}", bin.display())))?;
    let mut running = Running {
        child: Some(child),
        mnt: paths.mnt.clone(),
        root: paths.mnt.clone(),
        start_line: None,
        log: log.to_path_buf(),
        stopped: false,
    };
    let ours = matches!(spec.kind, TargetKind::Ours(_));
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = running
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            running.child = None;
            let why = strip_ansi(&tail(log, 3));
            let _ = force_unmount(&paths.mnt);
            running.stopped = true;
            return Err(if hp == Some(HpMode::Uring) {
                // Whatever stops it, the uring mode is what can't start here.
                StartError::NotAvailable(format!("exited during start ({status}): {why}"))
            } else if ours && status.code() == Some(EXIT_NOT_AVAILABLE) {
                let why = why
                    .rsplit(" / ")
                    .next()
                    .unwrap_or(&why)
                    .trim_start_matches("fuse-bench-daemon: error: ")
                    .trim_start_matches("not available yet: ")
                    .to_string();
                StartError::NotAvailable(why)
            } else {
                StartError::Failed(format!("exited during start ({status}): {why}"))
            });
        }
        if ours && running.start_line.is_none() {
            let mut text = String::new();
            if let Ok(mut f) = File::open(&stdout_path) {
                let _ = f.read_to_string(&mut text);
            }
            running.start_line = text
                .lines()
                .find(|l| l.starts_with("FUSE-BENCH-DAEMON READY"))
                .map(str::to_string);
        }
        let fuse_mounted = mounted(&paths.mnt).is_some_and(|t| t.starts_with("fuse"));
        if fuse_mounted && (!ours || running.start_line.is_some()) {
            match std::fs::read_to_string(paths.mnt.join(MARKER)) {
                Ok(t) if t.trim() == marker_token => {
                    let Some(mode) = hp else {
                        return Ok(running);
                    };
                    // The INIT status is logged before INIT is answered, so
                    // it is complete once the mount serves.
                    let log_text = std::fs::read_to_string(log).unwrap_or_default();
                    return match hp_mode_check(mode, &HpInit::parse(&log_text)) {
                        Ok(line) => {
                            running.start_line = line;
                            Ok(running)
                        }
                        Err(why) => {
                            running.stop_quietly();
                            Err(StartError::NotAvailable(why))
                        }
                    };
                }
                other => {
                    let mut names: Vec<String> = std::fs::read_dir(&paths.mnt)
                        .map(|d| {
                            d.filter_map(|e| e.ok())
                                .map(|e| e.file_name().to_string_lossy().into_owned())
                                .collect()
                        })
                        .unwrap_or_default();
                    names.sort();
                    let found = match other {
                        Ok(_) => "a different marker".to_string(),
                        Err(e) => format!("no marker ({e})"),
                    };
                    let mut why = format!(
                        "it mounts, but the mount is not the backing directory: {found}; its root \
                         lists [{}]",
                        names.join(", ")
                    );
                    if spec.kind == TargetKind::Fuser {
                        why.push_str(
                            " — fuser's passthrough example serves one fixed file (/etc/profile, \
                             through FUSE_PASSTHROUGH) and takes no source directory, so no \
                             workload can run on it",
                        );
                    }
                    running.stop_quietly();
                    return Err(StartError::Unusable(why));
                }
            }
        }
        if Instant::now() >= deadline {
            running.stop_quietly();
            return Err(StartError::Failed(format!(
                "not ready after {} s: {}",
                timeout.as_secs(),
                strip_ansi(&tail(log, 3))
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Running {
    /// Stops the target: SIGTERM to the daemon (only while it is still our
    /// un-reaped child, so its PID can't belong to anyone else), a wait,
    /// then unmounting (lazily as the last resort) and SIGKILL. Returns
    /// what had to be forced, for the log; empty when the daemon unmounted
    /// and exited by itself.
    pub fn stop(&mut self) -> Vec<String> {
        if self.stopped {
            return Vec::new();
        }
        self.stopped = true;
        let mut forced = Vec::new();
        if let Some(mut child) = self.child.take() {
            // try_wait() == None: the child is alive and not reaped, so its
            // PID is still this process's child.
            if let Ok(None) = child.try_wait() {
                // SAFETY: kill(2) on our own un-reaped child's PID.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                if wait_for_exit(&mut child, Duration::from_secs(10)).is_none() {
                    forced.push("daemon ignored SIGTERM for 10 s".to_string());
                    forced.extend(force_unmount(&self.mnt));
                    if wait_for_exit(&mut child, Duration::from_secs(5)).is_none() {
                        if let Ok(None) = child.try_wait() {
                            // SAFETY: as above; still our un-reaped child.
                            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
                        }
                        let _ = child.wait();
                        forced.push("killed the daemon".into());
                    }
                }
            }
        }
        forced.extend(force_unmount(&self.mnt));
        forced
    }

    fn stop_quietly(&mut self) {
        let _ = self.stop();
    }

    /// The daemon's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The daemon's PID while it runs and is our un-reaped child (so the
    /// PID is still its own); `None` for native.
    pub fn pid(&mut self) -> Option<u32> {
        let child = self.child.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Whether the daemon is still running (always true for native).
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            None => self.stopped || self.root != self.mnt,
            Some(c) => matches!(c.try_wait(), Ok(None)),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for line in self.stop() {
            eprintln!("bench: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colors() {
        assert_eq!(strip_ansi("\u{1b}[33m WARN\u{1b}[0m x"), " WARN x");
    }
}
