//! The daemon with synchronous INIT (`FUSE_DEV_IOC_SYNC_INIT`, Linux
//! 6.18): INIT is answered during mount(2) by a stand-in of the file
//! system, made before the daemon confines itself, and the confined
//! serving file system takes up what it settled (`Server::resume`): the
//! log says so, and the mount serves, on `/dev/fuse` worker threads and on
//! tokio. Over io_uring INIT still comes after the mount. Needs root and a kernel with the
//! ioctl (these machines' 6.18 has it): without, each test fails with the
//! reason rather than passing unchecked.

#[path = "../../fuse-backend-passthrough/tests/common/mod.rs"]
mod common;
#[path = "support/daemon.rs"]
mod daemon;

use common::require_root;
use daemon::*;
use test_support::kernel_offers_sync_init;

/// What the serving file system logs when it takes up a connection whose
/// INIT the stand-in answered.
const TOOK_UP: &str = "a stand-in during mount(2)";

fn serves(transport: Transport, extra: &[&str]) -> String {
    let d = dirs();
    let daemon = Daemon::start(&d.src, &d.mnt, transport, extra);
    std::fs::write(d.mnt.join("f"), b"through the mount").unwrap();
    assert_eq!(
        std::fs::read(d.src.join("f")).unwrap(),
        b"through the mount"
    );
    let log = daemon.stderr();
    drop(daemon);
    assert!(!is_mounted(&d.mnt), "the mount was left behind");
    log
}

fn answered_during_mount(test: &str, extra: &[&str]) {
    require_root();
    if let Err(reason) = kernel_offers_sync_init() {
        panic!("{test}: {reason}");
    }
    let log = serves(Transport::Dev, extra);
    assert!(log.contains(TOOK_UP), "{log}");
}

#[test]
fn the_daemon_answers_init_during_mount() {
    answered_during_mount("the_daemon_answers_init_during_mount", &[]);
}

#[test]
fn the_daemon_on_tokio_answers_init_during_mount() {
    answered_during_mount(
        "the_daemon_on_tokio_answers_init_during_mount",
        &["--runtime", "tokio"],
    );
}

#[test]
fn over_io_uring_init_comes_after_the_mount() {
    require_root();
    let log = serves(Transport::Uring, &[]);
    assert!(!log.contains(TOOK_UP), "{log}");
}
