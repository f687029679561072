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

/// The CPUs each thread of process `pid` may run on: "NAME CPUS", CPUS
/// as `Cpus_allowed_list` gives it (`0`, `0-1`), to check pinning.
pub fn thread_allowed_cpus(pid: i32) -> Vec<String> {
    per_thread(pid.into(), |task| {
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim();
        format!("{} {cpus}", read_trimmed(task, "comm"))
    })
    .unwrap_or_default()
}

/// The nice value of each thread of process `pid`, with its name:
/// `(NAME, nice)`.
pub fn thread_nices(pid: i32) -> Vec<(String, i32)> {
    per_thread(pid.into(), |task| {
        (read_trimmed(task, "comm"), nice_of(task))
    })
    .unwrap_or_default()
}

/// The calling thread's nice value.
pub fn current_thread_nice() -> i32 {
    nice_of(Path::new("/proc/thread-self"))
}

/// The nice value of the task at `task` (a `/proc` task directory): field
/// 19 of its `stat`; `i32::MIN` where it can't be read.
fn nice_of(task: &Path) -> i32 {
    let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
    // Fields after the name start at the third (the state).
    stat_after_comm(&stat)
        .and_then(|f| f.get(19 - 3).and_then(|n| n.parse().ok()))
        .unwrap_or(i32::MIN)
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

/// A [`Command`](std::process::Command) for `program` whose child first
/// lets go of this process's FUSE sessions: between fork and exec it
/// closes its copies of every `/dev/fuse` descriptor and io_uring instance
/// (where a FUSE-over-io_uring session's commands wait) of this process.
///
/// Every spawn from a test binary that is also a FUSE daemon must go
/// through it. The kernel closes a child's close-on-exec descriptors in
/// number order during exec; closing a copy of a file on one of this
/// process's mounts sends FLUSH. If another test tore that mount down
/// after the fork (its serving threads gone, its own device descriptors
/// closed), the child's copies of the mount's device descriptors are the
/// last: the connection is alive but nobody serves it, and the exec waits
/// for the answer forever (the backend's `locks` binary hung that way
/// under load, once in ~140 runs). With the child's copies closed first,
/// the torn-down mount's connection ends (the kernel aborts it on the
/// device's last close) and the FLUSH fails at once.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    leave_fuse_sessions_behind(&mut cmd);
    cmd
}

/// Makes `cmd`'s child close its copies of this process's `/dev/fuse`
/// descriptors and io_uring instances between fork and exec, after the
/// `pre_exec` hooks added before (see [`command`]).
pub fn leave_fuse_sessions_behind(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::process::CommandExt as _;
    // Looked up before the fork: the child may only make system calls.
    let fuse_device = std::fs::metadata("/dev/fuse").ok().map(|m| m.rdev());
    // SAFETY: the closure allocates nothing and takes no lock: it only
    // makes system calls on buffers of its own stack.
    unsafe {
        cmd.pre_exec(move || {
            close_fuse_sessions(fuse_device);
            Ok(())
        })
    }
}

/// Most descriptors [`close_fuse_sessions`] looks at (it has no heap).
const MAX_DESCRIPTORS: usize = 4096;

/// In a forked child: closes the descriptors of the FUSE device (`rdev`
/// `fuse_device`) and of io_uring instances. Only system calls and stack
/// buffers: nothing that could wait on a lock another thread of the parent
/// held at the fork.
fn close_fuse_sessions(fuse_device: Option<u64>) {
    let mut fds = [0i32; MAX_DESCRIPTORS];
    let count = open_descriptors(&mut fds);
    for &fd in &fds[..count] {
        if fd > 2 && (is_device(fd, fuse_device) || is_io_uring(fd)) {
            // SAFETY: closing a descriptor of our own (the child's copy).
            unsafe { libc::close(fd) };
        }
    }
}

/// The numbers of this process's open descriptors (from `/proc/self/fd`,
/// read with getdents64 into a stack buffer), at most `fds.len()`.
fn open_descriptors(fds: &mut [i32]) -> usize {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let dir = unsafe {
        libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return 0;
    }
    let mut count = 0;
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: buf is writable for its length.
        let got = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if got <= 0 {
            break;
        }
        let mut at = 0;
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2),
        // d_type (1), d_name (NUL-terminated).
        while at + 19 <= got as usize {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen == 0 || at + reclen > got as usize {
                break;
            }
            if let Some(fd) = parse_fd(&buf[at + 19..at + reclen]) {
                if fd != dir && count < fds.len() {
                    fds[count] = fd;
                    count += 1;
                }
            }
            at += reclen;
        }
    }
    // SAFETY: ours, opened above.
    unsafe { libc::close(dir) };
    count
}

/// A descriptor number from a NUL-terminated directory entry name (`.` and
/// `..` are none).
fn parse_fd(name: &[u8]) -> Option<i32> {
    let name = &name[..name.iter().position(|&b| b == 0)?];
    if name.is_empty() {
        return None;
    }
    name.iter().try_fold(0i32, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(i32::from(b - b'0')))?
    })
}

/// Whether `fd` is the character device `rdev`. Asked with
/// `AT_STATX_DONT_SYNC`: a file on a FUSE mount then answers from its
/// cached attributes, where a plain fstat would send GETATTR to a
/// connection that may have nobody serving it (the case this is for).
fn is_device(fd: i32, rdev: Option<u64>) -> bool {
    let Some(rdev) = rdev else { return false };
    // SAFETY: plain data, filled by statx.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH; stx is
    // writable.
    let statted = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE,
            &mut stx,
        )
    } == 0;
    statted
        && u32::from(stx.stx_mode) & libc::S_IFMT == libc::S_IFCHR
        && libc::makedev(stx.stx_rdev_major, stx.stx_rdev_minor) == rdev
}

/// Whether `fd` is an io_uring instance (`/proc/self/fd/N` reads
/// `anon_inode:[io_uring]`).
fn is_io_uring(fd: i32) -> bool {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut path = [0u8; PREFIX.len() + 12];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 11];
    let mut n = fd.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[PREFIX.len() + i] = digits[len - 1 - i];
    }
    // path stays NUL-terminated: it was zeroed and has room to spare.
    const RING: &[u8] = b"anon_inode:[io_uring]";
    let mut target = [0u8; 64];
    // SAFETY: a NUL-terminated path and a writable buffer of its length.
    let got = unsafe {
        libc::readlink(
            path.as_ptr().cast(),
            target.as_mut_ptr().cast(),
            target.len(),
        )
    };
    usize::try_from(got).is_ok_and(|len| &target[..len] == RING)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd as _;

    #[test]
    fn descriptor_names_parse() {
        assert_eq!(parse_fd(b"17\0"), Some(17));
        assert_eq!(parse_fd(b"0\0\0\0"), Some(0));
        assert_eq!(parse_fd(b".\0"), None);
        assert_eq!(parse_fd(b"..\0"), None);
        assert_eq!(parse_fd(b"99999999999\0"), None);
    }

    #[test]
    fn this_process_s_descriptors_are_listed_and_told_apart() {
        let file = tempfile::tempfile().unwrap();
        let mut fds = [0i32; MAX_DESCRIPTORS];
        let count = open_descriptors(&mut fds);
        assert!(fds[..count].contains(&file.as_raw_fd()));
        assert!(fds[..count].contains(&0));
        assert!(!is_io_uring(file.as_raw_fd()));
        let null = std::fs::metadata("/dev/null").unwrap();
        let null_device = std::os::unix::fs::MetadataExt::rdev(&null);
        let null_file = std::fs::File::open("/dev/null").unwrap();
        assert!(is_device(null_file.as_raw_fd(), Some(null_device)));
        assert!(!is_device(file.as_raw_fd(), Some(null_device)));
        // An io_uring instance (struct io_uring_params is 120 bytes).
        let mut params = [0u8; 120];
        // SAFETY: params is writable for the kernel's struct.
        let ring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
        assert!(
            ring >= 0,
            "io_uring_setup: {} (this test needs io_uring)",
            std::io::Error::last_os_error()
        );
        let ring = ring as i32;
        assert!(is_io_uring(ring));
        assert!(!is_io_uring(null_file.as_raw_fd()));
        // SAFETY: ours, made above.
        unsafe { libc::close(ring) };
    }

    #[test]
    fn the_child_has_no_fuse_device_and_keeps_the_rest() {
        // Needs /dev/fuse to open (root on these machines).
        let Ok(device) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        else {
            panic!("opening /dev/fuse failed: this test needs it (run as root)");
        };
        let other = tempfile::tempfile().unwrap();
        // Both without close-on-exec, so a child keeps what it isn't made
        // to close.
        for fd in [device.as_raw_fd(), other.as_raw_fd()] {
            // SAFETY: clearing the flags of our own descriptors.
            assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
        }
        let out = command("sh")
            .arg("-c")
            .arg(format!(
                "readlink /proc/$$/fd/{}; readlink /proc/$$/fd/{} || echo closed",
                other.as_raw_fd(),
                device.as_raw_fd()
            ))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with('/'),
            "the other file was closed: {text}"
        );
        assert_eq!(lines[1], "closed", "the child kept /dev/fuse: {text}");
    }
}
