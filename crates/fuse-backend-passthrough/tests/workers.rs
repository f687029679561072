//! The `/dev/fuse` worker set through a real mount: requests that block
//! in the daemon (lock waits here) start more workers, and once they are
//! done the extra workers leave again (from a second after the last one
//! started), down to the number the session starts with. One test in its
//! own process, so that the count of worker threads is this mount's
//! alone. Needs root (CI runs as root).

mod common;

use common::*;
use std::fs;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Worker threads of this process (they are named `fuse-dev`).
fn workers() -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "fuse-dev")
        .count()
}

#[test]
fn workers_started_for_blocking_requests_leave_once_idle() {
    let t = TestMount::new(); // 2 workers
    assert!(wait_until(Duration::from_secs(30), || workers() == 2));
    const BLOCKED: usize = 4;
    fs::write(t.s("locked"), b"").unwrap();
    // An exclusive flock taken on the source side: each shared flock
    // asked through the mount waits for it in the daemon, on a worker.
    let holder = fs::File::open(t.s("locked")).unwrap();
    // SAFETY: a valid descriptor.
    assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
    let waiters: Vec<_> = (0..BLOCKED)
        .map(|_| {
            let path = t.m("locked");
            std::thread::spawn(move || {
                let f = fs::File::open(path)?;
                // SAFETY: a valid descriptor.
                if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(f)
            })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(30), || workers() > BLOCKED),
        "lock waits started no workers: {} running",
        workers()
    );
    let busy = workers();
    drop(holder);
    for w in waiters {
        drop(w.join().unwrap().unwrap());
    }
    // Each request lands on an idle worker, which leaves after answering
    // while more than two are idle and none was started for a second.
    assert!(
        wait_until(Duration::from_secs(30), || {
            for _ in 0..busy {
                fs::metadata(t.m("locked")).unwrap();
            }
            workers() == 2
        }),
        "{} workers after the burst ({busy} during it); the session keeps 2",
        workers()
    );
    // The mount still serves.
    fs::write(t.m("f"), b"still serving").unwrap();
    assert_eq!(fs::read(t.s("f")).unwrap(), b"still serving");
}
