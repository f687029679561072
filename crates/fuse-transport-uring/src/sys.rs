//! System helpers, each raw syscall wrapped once: anonymous mappings,
//! eventfds, CPU lists and affinity, the FUSE module switch.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;

/// The kernel's switch for FUSE over io_uring.
pub const ENABLE_URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// The page size the mappings are rounded to.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// An anonymous private mapping, unmapped on drop.
///
/// The transport shares this memory with the kernel: the kernel reads and
/// writes it through user addresses while a ring entry is in the kernel.
/// Access discipline (who may touch which bytes when) is kept by the ring
/// code; this type only owns the mapping.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent
// access to its bytes is coordinated by the users (see the type's docs).
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (rounded up to whole pages, at least one page),
    /// zeroed, without reserving swap: pages cost memory once touched.
    pub fn new(len: usize) -> io::Result<Self> {
        let page = page_size();
        let len = len
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: an anonymous mapping at an address the kernel picks; the
        // result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, len })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the mapping currently resident in memory (`mincore(2)`).
    pub fn resident(&self) -> io::Result<usize> {
        let page = page_size();
        let pages = self.len / page;
        let mut vec = vec![0u8; pages];
        // SAFETY: the range is our mapping; `vec` holds one byte per page.
        let rc = unsafe { libc::mincore(self.ptr.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|&&b| b & 1 != 0).count() * page)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped in `new` and nothing else unmaps it.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            tracing::warn!(
                "munmap of {} bytes failed: {}",
                self.len,
                io::Error::last_os_error()
            );
        }
    }
}

/// An eventfd that wakes a ring thread.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter (makes the fd readable).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64.
        let n = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if n != 8 {
            tracing::debug!("eventfd write: {}", io::Error::last_os_error());
        }
    }

    /// Resets the counter (non-blocking read).
    pub fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
    }

    /// The raw descriptor (for a poll SQE).
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The possible CPUs (`/sys/devices/system/cpu/possible`), the set the
/// kernel's FUSE ring has one queue per (`num_possible_cpus()`).
pub fn possible_cpus() -> io::Result<Vec<usize>> {
    let path = Path::new("/sys/devices/system/cpu/possible");
    match std::fs::read_to_string(path) {
        Ok(text) => parse_cpu_list(&text)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("cannot parse {}: {text:?}", path.display()),
                )
            }),
        Err(e) => {
            // SAFETY: sysconf has no preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
            if n > 0 {
                Ok((0..n as usize).collect())
            } else {
                Err(io::Error::new(
                    e.kind(),
                    format!("reading {}: {e}", path.display()),
                ))
            }
        }
    }
}

/// Restricts the calling thread to `cpus` (`sched_setaffinity(2)`).
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= max {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `cpu` is below the set's capacity.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the set is live and sized.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The FUSE module's `enable_uring` switch: `Some(true)` for `Y`,
/// `Some(false)` for `N`, `None` when the kernel has no such switch.
pub fn uring_module_switch() -> Option<bool> {
    let text = std::fs::read_to_string(ENABLE_URING_PARAM).ok()?;
    Some(matches!(text.trim(), "Y" | "y" | "1"))
}

/// Writes the whole of `bytes` to `/dev/fuse` descriptor `fd` in one
/// `write` (a notification: the kernel takes it whole or not at all).
pub fn write_dev(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: reading `bytes.len()` bytes from a live slice.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::other(format!(
            "short write to /dev/fuse: {n} of {} bytes",
            bytes.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert!(!possible_cpus().unwrap().is_empty());
    }

    #[test]
    fn mapping_is_zeroed_and_counts_resident_pages() {
        let m = Mapping::new(3 * 4096 + 1).unwrap();
        assert_eq!(m.len(), 4 * 4096);
        assert_eq!(m.resident().unwrap(), 0);
        // SAFETY: the first byte is inside our mapping.
        unsafe { m.as_ptr().write(7) };
        assert_eq!(m.resident().unwrap(), 4096);
    }

    #[test]
    fn eventfd_signals() {
        let e = EventFd::new().unwrap();
        e.signal();
        e.drain();
        e.drain();
    }
}
