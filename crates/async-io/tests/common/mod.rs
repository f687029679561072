//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use async_io::{File, OpenOptions, Runtime, RuntimeType};

/// A scratch directory under the target dir (ext4 here: O_DIRECT works, unlike some tmpfs).
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("async-io-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create a scratch dir under the target dir")
}

/// Builds a runtime of `kind`; io_uring missing is a failure with the reason, not a pass.
pub fn runtime(kind: RuntimeType) -> Runtime {
    match kind.build() {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a {kind} runtime on this machine: {e}"),
    }
}

/// Deterministic pseudo-random bytes (xorshift64*), never all zero.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Opens the existing file `path` for reading and writing.
pub async fn open_read_write(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .await
        .unwrap()
}

/// Opens the existing file `path` for reading with `O_DIRECT`, so that
/// reads go to the device, not the page cache.
pub async fn open_direct_read(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .direct(true)
        .open(path)
        .await
        .unwrap()
}

/// Turns `rt` until its ring has no operation in flight; fails with
/// `what` (and how many are left) after 10 s.
pub fn wait_idle(rt: &Runtime, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rt.uring_in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} ({} still in flight)",
            rt.uring_in_flight()
        );
        rt.block_on(async { tokio::time::sleep(std::time::Duration::from_millis(1)).await });
    }
}

/// Writes `data` to a new file `name` in `dir`.
pub fn make_file(dir: &std::path::Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).expect("write a fixture file");
    p
}

/// A pipe as (read end, write end), close-on-exec.
pub fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two fds pipe2 writes.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: the kernel just gave us these two fds; nobody else owns them.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}
