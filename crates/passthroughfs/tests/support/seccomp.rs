//! Refusing io_uring to one child process only: a seccomp filter installed
//! between fork and exec makes `io_uring_setup(2)` fail with `EPERM` in
//! that process (and nowhere else: unlike the `enable_uring` switch or the
//! `kernel.io_uring_disabled` sysctl, which every other test on the machine
//! would see).
#![allow(dead_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Which `io_uring_setup` calls the child gets refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every one: the daemon's probe for io_uring fails before INIT.
    All,
    /// Those asking for more than this many submission entries: the
    /// daemon's probe (2 entries) and its one-shot setup ring (4) are made,
    /// the ring threads' rings (16 with 8 entries per queue) are not.
    LargerThan(u32),
}

// Classic BPF, as `linux/filter.h` and `linux/seccomp.h` define it:
// BPF_LD | BPF_W | BPF_ABS (0x00 | 0x00 | 0x20), BPF_JMP | BPF_JEQ | BPF_K
// (0x05 | 0x10 | 0x00), BPF_JMP | BPF_JGT | BPF_K, BPF_RET | BPF_K.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGT_K: u16 = 0x25;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
// Offsets in `struct seccomp_data`: nr, arch, then the arguments (the low
// half of a 64-bit argument comes first on a little-endian machine).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_ARG0_LOW: u32 = 16;

/// The `AUDIT_ARCH_*` of this build: syscall numbers mean something else
/// under another one.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: `io_uring_setup` (as `refusal` says) fails with EPERM,
/// everything else is allowed.
fn program(refusal: Refusal) -> Vec<libc::sock_filter> {
    // Each test jumps to the last instruction (allow) when it fails.
    let mut p = vec![
        insn(BPF_LD_W_ABS, 0, 0, DATA_ARCH),
        insn(BPF_JMP_JEQ_K, 0, u8::MAX, AUDIT_ARCH),
        insn(BPF_LD_W_ABS, 0, 0, DATA_NR),
        insn(BPF_JMP_JEQ_K, 0, u8::MAX, libc::SYS_io_uring_setup as u32),
    ];
    if let Refusal::LargerThan(entries) = refusal {
        p.push(insn(BPF_LD_W_ABS, 0, 0, DATA_ARG0_LOW));
        p.push(insn(BPF_JMP_JGT_K, 0, u8::MAX, entries));
    }
    p.push(insn(
        BPF_RET_K,
        0,
        0,
        SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ));
    p.push(insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
    let allow = p.len() - 1;
    for (i, ins) in p.iter_mut().enumerate() {
        if ins.jf == u8::MAX {
            ins.jf = (allow - i - 1) as u8;
        }
    }
    p
}

/// Makes `cmd`'s process (and what it starts) run under the filter.
pub fn refuse_io_uring(cmd: &mut Command, refusal: Refusal) {
    let filter = program(refusal);
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes two prctl calls on memory it owns (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || {
            // Lets an unprivileged filter in; root keeps its privileges.
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
