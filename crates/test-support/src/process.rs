//! Looking at processes and their threads through `/proc`.

use std::path::Path;

/// The fields of `/proc/PID/stat` (or of a task's `stat`) after the
/// command name, which may hold spaces and parentheses: the state first.
fn stat_after_comm(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// The start time of process `pid` (field 22 of /proc/PID/stat), which
/// tells a process from a later one with the same (reused) pid.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_after_comm(&stat)?.get(19)?.parse().ok()
}

/// This process's mark in the names of what its tests leave behind (a
/// mount's fsname): `pid-starttime`, unique even after the pid is reused.
pub fn process_mark() -> String {
    let pid = std::process::id();
    format!("{pid}-{}", process_start_time(pid).unwrap_or(0))
}

/// Whether process `pid` is gone (or a zombie waiting for its reaper).
pub fn gone(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat_after_comm(&stat)
        .and_then(|f| f.first().copied())
        .is_none_or(|state| state == "Z")
}

/// The processes running `exe` whose command line has an argument ending
/// in `arg` (the daemons serving a mountpoint).
pub fn processes_of(exe: &Path, arg: &Path) -> Vec<i32> {
    let arg = arg.to_string_lossy().into_owned();
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<i32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let runs_exe = std::fs::read_link(entry.path().join("exe")).ok()? == exe;
            let names_arg = cmdline
                .split(|&b| b == 0)
                .any(|a| String::from_utf8_lossy(a).ends_with(&arg));
            (runs_exe && names_arg).then_some(pid)
        })
        .collect()
}

/// `read` applied to each thread's directory (`/proc/PID/task/TID`) of
/// process `pid`; `None` if the process is gone.
fn per_thread<T>(pid: i64, mut read: impl FnMut(&Path) -> T) -> Option<Vec<T>> {
    let rd = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(rd.filter_map(|e| e.ok()).map(|e| read(&e.path())).collect())
}

fn read_trimmed(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The names of a process's threads (to tell which one hangs).
pub fn thread_names(pid: u32) -> Vec<String> {
    per_thread(pid.into(), |task| read_trimmed(task, "comm")).unwrap_or_default()
}

/// What each thread of process `pid` waits in: "NAME WCHAN" (WCHAN is 0
/// for a running thread), to check where a thread is blocked.
pub fn thread_wchans(pid: i32) -> Vec<String> {
    per_thread(pid.into(), |task| {
        format!(
            "{} {}",
            read_trimmed(task, "comm"),
            std::fs::read_to_string(task.join("wchan")).unwrap_or_default()
        )
    })
    .unwrap_or_default()
}

/// Whether every thread of process `pid` is stopped (state T: SIGSTOP
/// took effect everywhere, so none of them can take a request any more).
pub fn threads_stopped(pid: i32) -> bool {
    per_thread(pid.into(), |task| {
        let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
        stat_after_comm(&stat).is_some_and(|f| f.first() == Some(&"T"))
    })
    .is_some_and(|stopped| stopped.iter().all(|&s| s))
}
