//! Load for the live upgrade and crash recovery tests: clients that
//! check what they read, shell loops (fio, git) that must not fail, and
//! the daemon's own count of the nodes it holds.

#![allow(dead_code)] // each test binary uses its part

use super::daemon::Daemon;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Clients that each rewrite and check a file, create, rename and remove
/// names, until `stop`; the first error one saw.
pub fn clients(
    mnt: &Path,
    n: usize,
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<Result<(), String>>> {
    let mnt = mnt.to_path_buf();
    test_support::load::clients(n, stop, rounds, move |t| {
        let dir = mnt.join(format!("client-{t}"));
        std::fs::create_dir(&dir).map_err(|e| format!("client {t}: mkdir: {e}"))?;
        Ok(move |i: u64| -> std::io::Result<()> {
            let data: Vec<u8> = (0..100_000u32)
                .map(|k| (k as u64 * 7 + i + t as u64) as u8)
                .collect();
            let a = dir.join(format!("f-{}", i % 5));
            let b = dir.join(format!("g-{}", i % 5));
            std::fs::write(&a, &data)?;
            std::fs::rename(&a, &b)?;
            if std::fs::read(&b)? != data {
                return Err(std::io::Error::other("read back other bytes"));
            }
            if i % 3 == 0 {
                std::fs::remove_file(&b)?;
            }
            let listed = std::fs::read_dir(&dir)?.count();
            if listed > 10 {
                return Err(std::io::Error::other(format!("{listed} names")));
            }
            Ok(())
        })
    })
}

pub fn progress(rounds: &AtomicU64, more: u64) {
    let start = rounds.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(120);
    while rounds.load(Ordering::Relaxed) < start + more {
        assert!(Instant::now() < deadline, "the clients made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last "file system state" line of `daemon` once it contains every
/// one of `wants` (asked for with SIGUSR1, after dropping the kernel's
/// dentries and inodes with `drop_caches`), within 60 s.
pub fn fs_state_with(daemon: &Daemon, wants: &[&str], drop_caches: bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if drop_caches {
            let _ = test_support::drop_kernel_caches();
        }
        daemon.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(100));
        let log = daemon.stderr();
        let state = log
            .lines()
            .rev()
            .find(|l| l.contains("file system state"))
            .unwrap_or_default()
            .to_string();
        if wants.iter().all(|w| state.contains(w)) {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "no {wants:?} in the daemon's state (backing ids need kernel passthrough: root \
             in the initial user namespace): {state}"
        );
    }
}

/// Runs `cmd` in `dir` (a shell line) again and again until `stop`; the
/// first failure, with its output.
pub fn loop_command(
    dir: &Path,
    line: &'static str,
    stop: &Arc<AtomicBool>,
    runs: &Arc<AtomicU64>,
) -> std::thread::JoinHandle<Result<(), String>> {
    let (dir, stop, runs) = (dir.to_path_buf(), stop.clone(), runs.clone());
    std::thread::spawn(move || {
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(line)
                .env("I", i.to_string())
                .current_dir(&dir)
                .output()
                .map_err(|e| format!("{line}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "run {i} of {line:?}: {}\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            runs.fetch_add(1, Ordering::Relaxed);
            i += 1;
        }
        Ok(())
    })
}

/// fio (4 MiB of random 4 KiB writes, each block verified with crc32c
/// while writing and at the end: a failed verify fails fio) and a loop of
/// `git add/commit` with `git fsck --strict` every fifth round, each run
/// again and again in a directory of `mnt` until [`FioAndGit::finish`].
pub struct FioAndGit {
    fio: std::thread::JoinHandle<Result<(), String>>,
    git: std::thread::JoinHandle<Result<(), String>>,
    git_dir: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    /// Runs of either loop so far.
    pub runs: Arc<AtomicU64>,
}

fn git_in(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git (the tests need it)");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

impl FioAndGit {
    /// Starts both loops, and waits until they ran 4 times.
    pub fn start(mnt: &Path) -> FioAndGit {
        let fio_dir = mnt.join("fio");
        let git_dir = mnt.join("repo");
        std::fs::create_dir(&fio_dir).unwrap();
        std::fs::create_dir(&git_dir).unwrap();
        git_in(&git_dir, &["init", "-q"]);
        git_in(&git_dir, &["config", "user.email", "t@example.invalid"]);
        git_in(&git_dir, &["config", "user.name", "t"]);
        let stop = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(AtomicU64::new(0));
        let fio = loop_command(
            &fio_dir,
            "fio --name=v --filename=data --size=4M --rw=randwrite --bs=4k --ioengine=psync \
             --verify=crc32c --verify_backlog=64 --verify_fatal=1 --do_verify=1 \
             --output=/dev/null",
            &stop,
            &runs,
        );
        let git = loop_command(
            &git_dir,
            "echo \"$I\" > f-$((I % 7)) && git add -A && git commit -qm \"c$I\" && \
             if [ $((I % 5)) = 0 ]; then git fsck --strict --no-progress; fi",
            &stop,
            &runs,
        );
        progress(&runs, 4);
        FioAndGit {
            fio,
            git,
            git_dir,
            stop,
            runs,
        }
    }

    /// Stops both loops; panics (saying `across`) if either failed, or if
    /// a last `git fsck --strict` does.
    pub fn finish(self, across: &str) {
        self.stop.store(true, Ordering::Relaxed);
        self.fio
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("fio failed across {across}: {e}"));
        self.git
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("git failed across {across}: {e}"));
        git_in(&self.git_dir, &["fsck", "--strict", "--no-progress"]);
    }
}
