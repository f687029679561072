//! `--seccomp kill|log`: an allow list of the system calls serving makes,
//! compiled by rust-vmm's `seccompiler` (as virtiofsd's and Firecracker's
//! filters are) and synchronized to every thread.
//!
//! Under `kill` a call outside the list raises SIGSYS (the filter's trap
//! action); the handler writes the call's name to standard error and ends
//! the process (status 159, 128 + SIGSYS). Under `log` the kernel logs
//! the call (audit log, `dmesg`) and lets it run: the way to find what a
//! new mode needs.

#[cfg(target_arch = "x86_64")]
#[path = "syscall_names.rs"]
mod syscall_names;

use crate::Failure;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

use super::SeccompMode;

/// What the serving mode needs beyond the common calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    /// FUSE over io_uring, or io_uring file IO (`--runtime uring`).
    pub uring: bool,
    /// `--vhost-user`: the VMM's socket and the guest's memory.
    pub vhost_user: bool,
    /// `--takeover-socket`: binding, accepting and renaming the socket.
    pub takeover: bool,
}

/// Calls every mode makes: file operations on SOURCE, threads, signals,
/// memory, polling, the source watch (fanotify), the unmount at stop.
const COMMON: &[libc::c_long] = &[
    // Files.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_lseek,
    libc::SYS_ioctl,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_sync_file_range,
    libc::SYS_syncfs,
    libc::SYS_ftruncate,
    libc::SYS_truncate,
    libc::SYS_fallocate,
    libc::SYS_fadvise64,
    libc::SYS_getdents64,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchmodat2,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_copy_file_range,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_vmsplice,
    libc::SYS_sendfile,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_umask,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_eventfd2,
    libc::SYS_memfd_create,
    // The source watch.
    libc::SYS_fanotify_init,
    libc::SYS_fanotify_mark,
    // Polling and waiting.
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    // sched_getcpu(3) (the listing helpers pick the pool on the other
    // half of the CPUs) where neither the vDSO nor rseq answers it.
    libc::SYS_getcpu,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    // Threads, memory, signals, identity.
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_wait4,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_membarrier,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_getgroups,
    libc::SYS_setgroups,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_capget,
    libc::SYS_prctl,
    libc::SYS_getrandom,
    libc::SYS_getrlimit,
    libc::SYS_prlimit64,
    libc::SYS_uname,
    // The inode limit's default, sized to the memory (read-only).
    libc::SYS_sysinfo,
    // The unmount at stop (without an unmounter: --sandbox none).
    libc::SYS_umount2,
    // Syslog (its socket is connected before confining; glibc reconnects
    // after a syslog restart).
    libc::SYS_connect,
    libc::SYS_sendto,
];

/// io_uring: the rings, their registered buffers (pinned), and the
/// runtime's own ring.
const URING: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_mlock,
    libc::SYS_munlock,
];

/// A socket server: the vhost-user socket, the takeover socket.
const SOCKETS: &[libc::c_long] = &[
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvfrom,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_unlink,
];

/// A rule matching when argument `arg` (32 bits) equals `value`.
fn arg_is(arg: u8, value: u64) -> Result<SeccompRule, Failure> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| Failure(format!("--seccomp: {e}")))
}

/// The filter's rules for `features`: the allow list, plus calls allowed
/// with some arguments only (signals to this process only, Unix sockets
/// only).
fn rules(features: Features) -> Result<BTreeMap<i64, Vec<SeccompRule>>, Failure> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut allow = |calls: &[libc::c_long]| {
        for &nr in calls {
            rules.insert(nr, Vec::new());
        }
    };
    allow(COMMON);
    if features.uring {
        allow(URING);
    }
    if features.vhost_user || features.takeover {
        allow(SOCKETS);
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    rules.insert(libc::SYS_kill, vec![arg_is(0, pid)?]);
    rules.insert(libc::SYS_tgkill, vec![arg_is(0, pid)?]);
    rules.insert(libc::SYS_socket, vec![arg_is(0, libc::AF_UNIX as u64)?]);
    // Each serving thread's own umask (the backend's creds.rs).
    rules.insert(libc::SYS_unshare, vec![arg_is(0, libc::CLONE_FS as u64)?]);
    if features.vhost_user || features.takeover {
        rules.insert(libc::SYS_socketpair, vec![arg_is(0, libc::AF_UNIX as u64)?]);
    }
    Ok(rules)
}

/// The compiled filter.
fn program(mode: SeccompMode, features: Features) -> Result<BpfProgram, Failure> {
    let mismatch = match mode {
        SeccompMode::Kill => SeccompAction::Trap,
        _ => SeccompAction::Log,
    };
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| Failure(format!("--seccomp: {e:?}")))?;
    let filter = SeccompFilter::new(rules(features)?, mismatch, SeccompAction::Allow, arch)
        .map_err(|e| Failure(format!("--seccomp: {e}")))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| Failure(format!("--seccomp: {e}")))
}

/// Writes `bytes` to standard error (from the signal handler: no lock).
fn write_stderr(bytes: &[u8]) {
    // SAFETY: a valid buffer.
    unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
}

/// SIGSYS from the filter's trap: says which call, then ends the process.
extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // siginfo_t for SIGSYS: after si_signo, si_errno, si_code and padding
    // (16 bytes) come `void *si_call_addr` and `int si_syscall`.
    // SAFETY: the kernel passes a valid siginfo_t.
    let nr = unsafe { *(info.cast::<u8>().add(24).cast::<libc::c_int>()) } as libc::c_long;
    let mut buf = [0u8; 160];
    let mut at = 0;
    let mut put = |b: &[u8]| {
        let take = b.len().min(buf.len() - at);
        buf[at..at + take].copy_from_slice(&b[..take]);
        at += take;
    };
    put(b"passthroughfs: seccomp: system call ");
    #[cfg(target_arch = "x86_64")]
    let name = syscall_names::name(nr);
    #[cfg(not(target_arch = "x86_64"))]
    let name: Option<&str> = None;
    if let Some(name) = name {
        put(name.as_bytes());
        put(b" ");
    }
    put(b"(");
    put(fuse_server::sys::Decimal::new(nr.unsigned_abs()).as_bytes());
    put(b") is not allowed: the daemon exits (--seccomp kill)\n");
    write_stderr(&buf[..at]);
    // SAFETY: ends the process; exit_group is in every allow list.
    unsafe { libc::syscall(libc::SYS_exit_group, 128 + libc::SIGSYS) };
}

/// Installs the SIGSYS handler (for `kill`) and the filter on every
/// thread.
pub fn install(mode: SeccompMode, features: Features) -> Result<(), Failure> {
    let program = program(mode, features)?;
    if mode == SeccompMode::Kill {
        // SAFETY: a handler that only writes and exits.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigsys as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0 {
                return Err(Failure(format!(
                    "--seccomp kill: installing the SIGSYS handler: {}",
                    std::io::Error::last_os_error()
                )));
            }
        }
    }
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| Failure(format!("--seccomp: installing the filter: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_compiles() {
        for uring in [false, true] {
            for vhost_user in [false, true] {
                let f = Features {
                    uring,
                    vhost_user,
                    takeover: false,
                };
                for mode in [SeccompMode::Kill, SeccompMode::Log] {
                    assert!(!program(mode, f).unwrap().is_empty());
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn calls_are_named() {
        assert_eq!(syscall_names::name(libc::SYS_execve), Some("execve"));
        assert_eq!(syscall_names::name(100_000), None);
    }
}
