//! The mount helper `mount.fuse.passthroughfs` and cleaning up after it.
//!
//! xfstests with `FSTYP=fuse` and `FUSE_SUBTYP=.passthroughfs` mounts with
//! `mount -t fuse.passthroughfs -o source=DIR,... NAME MOUNTPOINT`; mount(8)
//! hands that to `/sbin/mount.fuse.passthroughfs`, generated from
//! `mount.fuse.passthroughfs.sh` (next to this file) with the daemon's path
//! and the state directory filled in. The script records every daemon it
//! starts in `STATE/daemons/PID` (the process's start time and its
//! mountpoint), which is how [`cleanup`] finds and stops them safely (a PID
//! alone may have been reused).

use super::Layout;
use crate::test::{mounts, run_cmd};
use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The script, with `@DAEMON@` and `@STATE@` still to fill in.
const TEMPLATE: &str = include_str!("mount.fuse.passthroughfs.sh");

/// A `df` for `check`'s PATH, with `@MNT@` still to fill in.
const DF_TEMPLATE: &str = include_str!("df.sh");

/// Where mount(8) looks for the helper of type `fuse.passthroughfs`.
pub const INSTALLED: &str = "/sbin/mount.fuse.passthroughfs";

/// Writes the helper under the work directory and installs it (only
/// rewriting the installed copy when it differs).
pub fn install(layout: &Layout) -> Result<()> {
    fs::create_dir_all(&layout.mnt)?;
    for p in [&layout.daemon, &layout.state, &layout.mnt] {
        let s = p.to_string_lossy();
        if s.contains(['\'', ' ', ',', '\n']) {
            bail!("{s}: the mount helper needs paths without quotes, spaces or commas");
        }
    }
    fs::create_dir_all(layout.state.join("daemons"))?;
    fs::create_dir_all(layout.state.join("logs"))?;
    let script = TEMPLATE
        .replace("@DAEMON@", &layout.daemon.to_string_lossy())
        .replace("@STATE@", &layout.state.to_string_lossy());
    fs::create_dir_all(layout.path_dir())?;
    write_executable(
        &layout.path_dir().join("df"),
        &DF_TEMPLATE.replace("@MNT@", &layout.mnt.canonicalize()?.to_string_lossy()),
    )?;
    let generated = layout.work.join("mount.fuse.passthroughfs");
    write_executable(&generated, &script)?;
    if fs::read_to_string(INSTALLED).ok().as_deref() != Some(script.as_str()) {
        let tmp = PathBuf::from(format!("{INSTALLED}.xtask-new"));
        write_executable(&tmp, &script)?;
        fs::rename(&tmp, INSTALLED).with_context(|| format!("installing {INSTALLED}"))?;
        println!(
            "mount helper: installed {INSTALLED} (from {})",
            generated.display()
        );
    } else {
        println!("mount helper: {INSTALLED} is up to date");
    }
    Ok(())
}

/// Writes `text` to `path` with mode 0755.
fn write_executable(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// A daemon the helper started, from its `STATE/daemons/PID` file.
pub struct Daemon {
    /// Its PID.
    pub pid: libc::pid_t,
    /// Field 22 of `/proc/PID/stat` when it started.
    starttime: String,
    /// The mountpoint it was started for.
    pub mountpoint: PathBuf,
    /// The state file.
    file: PathBuf,
}

impl Daemon {
    /// Whether this very process (same PID and start time) is still running
    /// (a zombie is not).
    pub fn alive(&self) -> bool {
        match proc_stat(self.pid) {
            Some((state, start)) => start == self.starttime && state != "Z",
            None => false,
        }
    }

    /// Sends `signal` if the process is still this daemon.
    fn signal(&self, signal: libc::c_int) {
        if self.alive() {
            // SAFETY: kill has no memory-safety preconditions; the PID was
            // checked to be the daemon just before.
            unsafe { libc::kill(self.pid, signal) };
        }
    }
}

/// The state field and the start time of `/proc/PID/stat`.
fn proc_stat(pid: libc::pid_t) -> Option<(String, String)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &text[text.rfind(") ")? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields.first()?.to_string(), fields.get(19)?.to_string()))
}

/// The daemons the helper recorded (whether or not they still run).
pub fn daemons(layout: &Layout) -> Vec<Daemon> {
    let Ok(dir) = fs::read_dir(layout.state.join("daemons")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let file = entry.path();
        let Some(pid) = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let text = fs::read_to_string(&file).unwrap_or_default();
        let mut words = text.split_whitespace();
        let (Some(starttime), Some(mountpoint)) = (words.next(), words.next()) else {
            let _ = fs::remove_file(&file);
            continue;
        };
        out.push(Daemon {
            pid,
            starttime: starttime.to_string(),
            mountpoint: PathBuf::from(mountpoint),
            file,
        });
    }
    out
}

/// Mount points under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mounts()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.dedup();
    found
}

/// Unmounts whatever is mounted under the work directory's mount points
/// (lazily: it never waits for a daemon) and stops every daemon the helper
/// started: they get 10 s to exit on their own once unmounted, then
/// SIGTERM, then SIGKILL. Returns a line for each thing it had to do (none
/// after a clean run).
pub fn cleanup(layout: &Layout) -> Vec<String> {
    let mut notes = Vec::new();
    let Ok(mnt) = layout.mnt.canonicalize() else {
        return notes;
    };
    for _ in 0..20 {
        let left = mounts_under(&mnt);
        if left.is_empty() {
            break;
        }
        for p in left {
            notes.push(format!("left mounted: {} (umount -l)", p.display()));
            if let Err(e) = run_cmd(Command::new("umount").arg("-l").arg(&p)) {
                println!("warning: {e:#}");
            }
        }
    }
    let daemons = daemons(layout);
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemons.iter().any(Daemon::alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGKILL, "SIGKILL")] {
        let alive: Vec<&Daemon> = daemons.iter().filter(|d| d.alive()).collect();
        if alive.is_empty() {
            break;
        }
        for d in &alive {
            notes.push(format!(
                "passthroughfs {} (for {}) still running: {name}",
                d.pid,
                d.mountpoint.display()
            ));
            d.signal(signal);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive.iter().any(|d| d.alive()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for d in &daemons {
        if !d.alive() {
            let _ = fs::remove_file(&d.file);
        } else {
            notes.push(format!("passthroughfs {} survived SIGKILL", d.pid));
        }
    }
    if !mounts_under(&mnt).is_empty() {
        notes.push(format!("mounts remain under {}", mnt.display()));
    }
    for n in &notes {
        println!("cleanup: {n}");
    }
    notes
}

/// Removes everything in `dir` (made fresh) without crossing into mounts
/// (there must be none: [`cleanup`] runs first).
pub fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        if let Ok(canon) = dir.canonicalize() {
            if !mounts_under(&canon).is_empty() {
                bail!("{} still has mounts under it", dir.display());
            }
        }
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    Ok(())
}
