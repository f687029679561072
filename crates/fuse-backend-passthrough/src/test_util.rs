//! Helpers of the unit tests in `src/` (the crash-recovery tests): a
//! request context of the calling user. The tests under `tests/` keep
//! their own copy (`common::own_context`).

use fuse_server::Context;

pub(crate) fn ctx() -> Context {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Context {
        uid,
        gid,
        ..Context::default()
    }
}
