//! What a hung test run was doing, written down before the watchdog kills
//! it, and the FUSE connections that would keep its killed processes alive.
//!
//! A test that hangs in a FUSE request leaves nothing in its output to say
//! where: the state of its threads (kernel stack, system call, wait
//! channel) does, with where its descriptors lead (who still holds a
//! `/dev/fuse`). And a process that is its own file system's daemon can't
//! finish dying while one of its threads waits for an answer from the
//! daemon threads already gone: the kernel keeps the request until the
//! connection is aborted.
//!
//! Every `/proc` read here runs on a thread of its own with a deadline:
//! some `/proc` files of a process stuck in a FUSE request block their
//! reader.

use super::*;
use std::collections::BTreeSet;

/// How long one `/proc` read may take before it is given up.
const READ_PATIENCE: Duration = Duration::from_secs(1);

/// How long killed processes get to go before their connections are
/// aborted.
const DYING_PATIENCE: Duration = Duration::from_secs(10);

/// `path`'s text, or why there is none (`(unreadable: ...)`, `(blocked)`).
fn read_with_deadline(path: String) -> String {
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("xtask-proc-read".into())
        .spawn(move || {
            let _ = tx.send(fs::read(&path));
        });
    if let Err(e) = reader {
        return format!("(no thread to read with: {e})");
    }
    // A reader that blocks is left behind: it ends with the process.
    match rx.recv_timeout(READ_PATIENCE) {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).trim_end().to_string(),
        Ok(Err(e)) => format!("(unreadable: {e})"),
        Err(_) => "(blocked)".into(),
    }
}

/// Where the descriptors of process `pid` lead (`3 -> /dev/fuse`, ...),
/// read from the first of its threads that shows them: a process whose
/// main thread has exited (a zombie leader with threads left) shows its
/// table only under its threads' directories. Bounded like every read
/// here.
fn descriptors(pid: u32, tids: &[u32]) -> String {
    let (tx, rx) = mpsc::channel();
    let tids = tids.to_vec();
    let reader = std::thread::Builder::new()
        .name("xtask-proc-fds".into())
        .spawn(move || {
            for tid in tids {
                let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task/{tid}/fd")) else {
                    continue;
                };
                let mut fds: Vec<(u32, String)> = dir
                    .flatten()
                    .filter_map(|e| {
                        let fd = e.file_name().to_str()?.parse().ok()?;
                        let target = fs::read_link(e.path()).ok()?;
                        Some((fd, target.display().to_string()))
                    })
                    .collect();
                if fds.is_empty() {
                    continue;
                }
                fds.sort_unstable();
                let listed: Vec<String> = fds
                    .iter()
                    .map(|(fd, target)| format!("{fd} -> {target}"))
                    .collect();
                let _ = tx.send(format!("(thread {tid}'s table) {}", listed.join(", ")));
                return;
            }
            let _ = tx.send("none".into());
        });
    if let Err(e) = reader {
        return format!("(no thread to read with: {e})");
    }
    rx.recv_timeout(READ_PATIENCE)
        .unwrap_or_else(|_| "(blocked)".into())
}

/// `pid` and every process under it, parents first.
pub(super) fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if all.contains(&p) {
            continue;
        }
        all.push(p);
        todo.extend(libtest::children(p));
    }
    all
}

/// The threads of the processes in `tree`: for each, its name, state, wait
/// channel, system call (number and arguments) and kernel stack; then the
/// FUSE connections with requests waiting.
pub(super) fn describe(tree: &[u32]) -> String {
    let mut out = String::new();
    for &pid in tree {
        let cmd = read_with_deadline(format!("/proc/{pid}/comm"));
        let _ = writeln!(out, "process {pid} ({cmd})");
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            let _ = writeln!(out, "  (gone)");
            continue;
        };
        let mut tids: Vec<u32> = tasks
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .collect();
        tids.sort_unstable();
        for &tid in &tids {
            let at = |file: &str| read_with_deadline(format!("/proc/{pid}/task/{tid}/{file}"));
            let status = at("status");
            let state = status
                .lines()
                .find_map(|l| l.strip_prefix("State:"))
                .map_or("?", str::trim)
                .to_string();
            let _ = writeln!(
                out,
                "  thread {tid} {} [{state}] wchan {} syscall {}",
                at("comm"),
                at("wchan"),
                at("syscall")
            );
            for frame in at("stack").lines() {
                let _ = writeln!(out, "    {frame}");
            }
        }
        let fds = descriptors(pid, &tids);
        let _ = writeln!(out, "  descriptors: {fds}");
    }
    let waiting = fuse_connections()
        .into_iter()
        .filter_map(|c| {
            let n = read_with_deadline(format!("/sys/fs/fuse/connections/{c}/waiting"));
            (n != "0").then(|| format!("{c}: {n}"))
        })
        .collect::<Vec<_>>();
    let _ = writeln!(
        out,
        "FUSE connections with requests waiting: {}",
        if waiting.is_empty() {
            "none".to_string()
        } else {
            waiting.join(", ")
        }
    );
    out
}

/// The FUSE connections (`/sys/fs/fuse/connections` entries) of the
/// mounts the processes of `tree` see, but for the host's.
pub(super) fn fuse_connections_seen_by(tree: &[u32]) -> BTreeSet<u32> {
    let mut seen = BTreeSet::new();
    for &pid in tree {
        let mountinfo = read_with_deadline(format!("/proc/{pid}/mountinfo"));
        seen.extend(fuse_minors_in(&mountinfo));
    }
    seen
}

/// The device minors of the FUSE mounts in a `mountinfo` text (the minor
/// is the mount's connection number), but for those that came from the
/// host's namespace (`master:N`): the run's own.
fn fuse_minors_in(mountinfo: &str) -> Vec<u32> {
    super::mounts::parse_fuse_mounts(mountinfo)
        .into_iter()
        .filter(|m| !m.from_host)
        .filter_map(|m| m.minor)
        .collect()
}

/// The connection numbers under `/sys/fs/fuse/connections`.
fn fuse_connections() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/sys/fs/fuse/connections") else {
        return Vec::new();
    };
    let mut all: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    all.sort_unstable();
    all
}

/// Whether process `pid` is still there and not a zombie.
fn alive(pid: u32) -> bool {
    let stat = read_with_deadline(format!("/proc/{pid}/status"));
    stat.lines()
        .find_map(|l| l.strip_prefix("State:"))
        .is_some_and(|s| !s.trim_start().starts_with('Z') && !s.trim_start().starts_with('X'))
}

/// After the processes of `tree` were killed: if any is still there after
/// [`DYING_PATIENCE`] (a thread waiting on a connection whose daemon
/// threads are gone), aborts `connections` so that it can end. Returns
/// what it did, for the log.
pub(super) fn abort_if_stuck(tree: &[u32], connections: &BTreeSet<u32>) -> Option<String> {
    let deadline = Instant::now() + DYING_PATIENCE;
    let stuck = loop {
        let stuck: Vec<u32> = tree.iter().copied().filter(|&p| alive(p)).collect();
        if stuck.is_empty() || Instant::now() >= deadline {
            break stuck;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if stuck.is_empty() {
        return None;
    }
    let mut aborted = Vec::new();
    for c in connections {
        let path = format!("/sys/fs/fuse/connections/{c}/abort");
        if fs::write(&path, "1").is_ok() {
            aborted.push(c.to_string());
        }
    }
    Some(format!(
        "processes {stuck:?} were still there {} s after the kill; aborted FUSE connections: {}",
        DYING_PATIENCE.as_secs(),
        if aborted.is_empty() {
            "none".to_string()
        } else {
            aborted.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_mounts_are_found_by_their_minor() {
        let mountinfo = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
40 22 0:52 / /tmp/a rw,nosuid - fuse.passthrough src rw,user_id=0
41 22 0:53 / /tmp/b rw - fuse fusewire rw
42 22 0:54 / /proc/x rw - proc proc rw
43 22 0:55 / /tmp/c rw shared:7 - fuseblk dev rw
44 22 0:56 / /tmp/d rw master:3 - fuse.passthroughfs host rw";
        assert_eq!(fuse_minors_in(mountinfo), [52, 53, 55]);
    }

    #[test]
    fn a_sleeping_process_is_described_thread_by_thread() {
        let mut child = Command::new("sleep").arg("100").spawn().unwrap();
        // The kernel names the process after closing its close-on-exec
        // descriptors, which is when spawn returns.
        let named = format!("/proc/{}/comm", child.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        while read_with_deadline(named.clone()) != "sleep" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let tree = process_tree(child.id());
        let text = describe(&tree);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            text.contains(&format!("process {} (sleep)", child.id())),
            "{text}"
        );
        assert!(
            text.contains(&format!("thread {} sleep [", child.id())),
            "{text}"
        );
        assert!(text.contains("descriptors: (thread"), "{text}");
    }
}
