//! Helpers of the unit tests in `src/` (the crash-recovery and handle
//! tests): a request context of the calling user and an error's errno.
//! The readdir contract tests, under `tests/`, keep their own copy.

use fuse_server::Context;
use std::io;

pub(crate) fn ctx() -> Context {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Context {
        uid,
        gid,
        ..Context::default()
    }
}

pub(crate) fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("an error").raw_os_error().expect("an errno")
}
