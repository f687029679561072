//! fsstress and fsx (from the built xfstests tree) on a passthroughfs mount.
//!
//! Per mode: a fresh backing directory is mounted through the mount helper
//! (so the daemon starts exactly as under xfstests); `fsstress -p 4 -n
//! 20000` runs in it, then `diff -r --no-dereference BACKING MOUNT` must print nothing and
//! the daemon must still be running; then `fsx` twice on its own file, with
//! O_DIRECT (`-Z -R -W -r 4096 -w 4096`) and with its default mmap reads and
//! writes, 20,000 operations each; the same checks again; then the mount is
//! unmounted and the daemon must exit.
//!
//! The seed is random (from `/dev/urandom`) and printed, or
//! `XFSTESTS_STRESS_SEED`; fsstress and both fsx runs use it.

use super::helper;
use super::{Layout, Mode};
use crate::test::{display, run_cmd};
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// fsstress processes.
const PROCS: u32 = 4;
/// fsstress operations per process.
const OPS: u32 = 20_000;
/// fsx operations per run.
const FSX_OPS: u32 = 20_000;
/// The longest a single fsstress or fsx run may take.
const RUN_LIMIT: Duration = Duration::from_secs(900);
/// The mount's source name.
const DEV: &str = "xfstests-stress";

/// The seed: `XFSTESTS_STRESS_SEED`, else random; 1 to 2^31-1 (fsstress
/// and fsx take an `int`, and fsx reads 0 as "pick one").
fn seed() -> Result<u32> {
    if let Ok(s) = std::env::var("XFSTESTS_STRESS_SEED") {
        let seed: u32 = s
            .trim()
            .parse()
            .with_context(|| format!("XFSTESTS_STRESS_SEED={s} is not a number"))?;
        if seed == 0 || seed > i32::MAX as u32 {
            bail!("XFSTESTS_STRESS_SEED={s}: must be 1 to {}", i32::MAX);
        }
        return Ok(seed);
    }
    let mut b = [0u8; 4];
    fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok((u32::from_le_bytes(b) & 0x7fff_ffff).max(1))
}

/// The fsstress/fsx run of one mode.
pub fn run(layout: &Layout, mode: Mode) -> Result<()> {
    /// Cleans up when the run ends, also on an error or a panic.
    struct Guard<'a>(&'a Layout);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            helper::cleanup(self.0);
        }
    }
    println!(
        "\n==> stress {} ({}): fsstress -p {PROCS} -n {OPS}, fsx -N {FSX_OPS} (O_DIRECT, mmap)",
        mode.name(),
        mode.daemon_flags()
    );
    let started = Instant::now();
    helper::cleanup(layout);
    let guard = Guard(layout);
    let seed = seed()?;
    println!("stress seed: {seed} (XFSTESTS_STRESS_SEED={seed} repeats it)");
    let mnt = layout.mnt.join("stress");
    let backing = layout.backing.join("stress");
    let out = layout
        .work
        .join("results")
        .join(format!("stress-{}", mode.name()));
    fs::create_dir_all(&mnt)?;
    let mnt = mnt.canonicalize()?;
    for d in [&backing, &out, &layout.state.join("logs")] {
        helper::fresh_dir(d)?;
    }
    run_cmd(
        Command::new("mount")
            .envs(layout.helper_env())
            .args(["-t", "fuse.passthroughfs-xfstests", "-o"])
            .arg(format!(
                "source={},allow_other,default_permissions{}",
                backing.display(),
                mode.mount_options()
            ))
            .arg(format!("{DEV}-{}", layout.tag))
            .arg(&mnt),
    )?;
    let daemon = helper::daemons(layout)
        .into_iter()
        .find(|d| d.mountpoint == mnt && d.alive())
        .context("the mount helper recorded no running daemon for the stress mount")?;
    println!("daemon: passthroughfs {}", daemon.pid);
    let result = (|| -> Result<()> {
        let tree = &layout.tree;
        let work = mnt.join("fsstress");
        fs::create_dir(&work)?;
        timed(
            Command::new(tree.join("ltp/fsstress"))
                .arg("-d")
                .arg(&work)
                .args(["-p", &PROCS.to_string(), "-n", &OPS.to_string()])
                .args(["-s", &seed.to_string()]),
            &out.join("fsstress.log"),
        )?;
        settle(&daemon, &backing, &mnt, "fsstress")?;
        let fsx = tree.join("ltp/fsx");
        let common = ["-q", "-N", &FSX_OPS.to_string(), "-S", &seed.to_string()];
        timed(
            Command::new(&fsx)
                .args(common)
                .args(["-Z", "-R", "-W", "-r", "4096", "-w", "4096", "-P"])
                .arg(&out)
                .arg(mnt.join("fsx.direct")),
            &out.join("fsx-direct.log"),
        )?;
        timed(
            Command::new(&fsx)
                .args(common)
                .arg("-P")
                .arg(&out)
                .arg(mnt.join("fsx.mmap")),
            &out.join("fsx-mmap.log"),
        )?;
        settle(&daemon, &backing, &mnt, "fsx")?;
        Ok(())
    })();
    if let Err(e) = result {
        println!(
            "stress {}: failed with seed {seed}; logs in {}",
            mode.name(),
            out.display()
        );
        let _ = fs::rename(layout.state.join("logs"), out.join("daemon-logs"));
        return Err(e.context(format!("seed {seed}")));
    }
    run_cmd(Command::new("umount").arg(&mnt))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if daemon.alive() {
        bail!(
            "passthroughfs {} still runs 10 s after its unmount",
            daemon.pid
        );
    }
    drop(guard);
    let _ = fs::rename(layout.state.join("logs"), out.join("daemon-logs"));
    println!(
        "stress {}: ok in {:.0} s (seed {seed})",
        mode.name(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// After a workload: the daemon must still run and the mount must show
/// exactly the backing tree.
fn settle(daemon: &helper::Daemon, backing: &Path, mnt: &Path, after: &str) -> Result<()> {
    if !daemon.alive() {
        bail!("passthroughfs {} died during {after}", daemon.pid);
    }
    let mut cmd = Command::new("diff");
    // Symlinks compared as links (fsstress makes dangling ones).
    cmd.args(["-r", "--no-dereference"]).arg(backing).arg(mnt);
    println!("$ {}", display(&cmd));
    let o = cmd
        .stderr(Stdio::piped())
        .output()
        .context("running diff")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if !o.status.success() || !text.is_empty() {
        let lines: Vec<&str> = text.lines().collect();
        for l in lines.iter().take(30) {
            println!("  {l}");
        }
        bail!(
            "after {after}: diff -r {} {} found {} line(s) of differences ({})",
            backing.display(),
            mnt.display(),
            lines.len(),
            o.status
        );
    }
    if !daemon.alive() {
        bail!(
            "passthroughfs {} died during diff -r after {after}",
            daemon.pid
        );
    }
    println!(
        "after {after}: diff -r: no differences; passthroughfs {} alive",
        daemon.pid
    );
    Ok(())
}

/// Runs `cmd` with its output in `log`, killing it after [`RUN_LIMIT`];
/// fails unless it exits with 0 (printing the end of the log).
fn timed(cmd: &mut Command, log: &PathBuf) -> Result<()> {
    let line = display(cmd);
    println!("$ {line}   (log: {})", log.display());
    let f = fs::File::create(log)?;
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if t.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "`{line}` still running after {} s: killed",
                RUN_LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("  ({:.0} s, {status})", t.elapsed().as_secs_f64());
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(20)..] {
            println!("  {l}");
        }
        bail!("`{line}` failed ({status}); log: {}", log.display());
    }
    Ok(())
}
