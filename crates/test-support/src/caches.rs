//! Dropping the kernel's dentry and inode caches without pulling them
//! from under a test that counts what the kernel keeps, in this process
//! or another (two suites on one machine): a test holds
//! [`kernel_keeps`]'s guard from its lookups to its count, and
//! [`drop_kernel_caches`] waits for every such guard, here and elsewhere.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::{RwLock, RwLockReadGuard};

/// Within the process: keepers share it, a drop takes it alone.
static CACHE_DROPS: RwLock<()> = RwLock::new(());

/// Across processes: the same, with `flock(2)` on this file.
const LOCK_FILE: &str = "/tmp/fusewire-kernel-caches.lock";

/// The lock file, flocked `how`; `None` if it can't be (then only this
/// process is ordered).
fn flocked(how: libc::c_int) -> Option<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .ok()?;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Some(file);
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Held while a test relies on the kernel keeping what it looked up: no
/// test of any process drops the caches meanwhile (memory pressure
/// aside).
pub struct KernelKeeps {
    _here: RwLockReadGuard<'static, ()>,
    _elsewhere: Option<File>,
}

/// Until the guard drops, no test drops the kernel's caches. Drop it
/// before calling [`drop_kernel_caches`], which would wait for it.
pub fn kernel_keeps() -> KernelKeeps {
    let here = CACHE_DROPS.read().unwrap_or_else(|e| e.into_inner());
    KernelKeeps {
        _here: here,
        _elsewhere: flocked(libc::LOCK_SH),
    }
}

/// Evicts unused dentries and inodes (the kernel then sends FORGETs),
/// once no [`kernel_keeps`] guard is held. Needs real root.
pub fn drop_kernel_caches() -> io::Result<()> {
    let _here = CACHE_DROPS.write().unwrap_or_else(|e| e.into_inner());
    let _elsewhere = flocked(libc::LOCK_EX);
    std::fs::write("/proc/sys/vm/drop_caches", "2")
}
