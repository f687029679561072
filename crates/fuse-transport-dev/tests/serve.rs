//! Serves a tiny read-only file system through a real mount and reads it
//! back through the kernel. Needs root (CI runs as root); fails with the
//! reason otherwise.

mod common;

use common::*;
use fuse_server::*;
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[test]
fn serves_a_mount_through_the_kernel() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(Hello::default());
    let server = Server::new(fs.clone());
    let config = SessionConfig::default().threads(2);
    let session = DevSession::mount(server, dir.path(), &MountOptions::default(), config).unwrap();
    let mnt = session.mountpoint().to_path_buf();

    let meta = std::fs::metadata(mnt.join("hello")).unwrap();
    assert_eq!(meta.len(), CONTENT.len() as u64);
    assert_eq!(meta.ino(), 2);
    assert_eq!(std::fs::read(mnt.join("hello")).unwrap(), CONTENT);
    let names: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["hello"]);
    assert_eq!(
        std::fs::metadata(mnt.join("nope"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOENT)
    );

    let counters = session.server().counters();
    assert!(counters.get(fuse_abi::Opcode::Lookup) >= 1);
    assert!(counters.get(fuse_abi::Opcode::Read) >= 1);

    session.stop();
    session.wait().unwrap();
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
    // The kernel forgets everything it looked up when the connection ends;
    // no FORGET arrives after an unmount, so only check that we never got
    // more forgets than lookups.
    assert!(fs.forgets.load(Ordering::Relaxed) <= fs.lookups.load(Ordering::Relaxed));
}

#[test]
fn external_unmount_ends_the_workers() {
    let (dir, session) = hello_as_root();
    fuse_transport_dev::unmount_path(dir.path(), false).unwrap();
    session.wait().unwrap();
    assert_eq!(session.worker_count(), 0);
    assert!(session.server().is_destroyed());
}

/// After an unmount from outside, the session must not unmount the path
/// again as it ends: a mount made there meanwhile is somebody else's (seen:
/// xfstests cycling a scratch mount took down the new mount).
#[test]
fn ending_after_an_external_unmount_leaves_a_new_mount_alone() {
    let (dir, session) = hello_as_root();
    fuse_transport_dev::unmount_path(dir.path(), false).unwrap();
    let status = test_support::command("mount")
        .args(["-t", "tmpfs", "newcomer"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "mount -t tmpfs: {status}");
    session.wait().unwrap();
    drop(session);
    let fstype = mount_type(dir.path());
    // Clean up before asserting.
    let _ = fuse_transport_dev::unmount_path(dir.path(), false);
    assert_eq!(
        fstype.as_deref(),
        Some("tmpfs"),
        "the tmpfs mounted after the external unmount is gone"
    );
}

/// [`Hello`] mounted on `dir` with default options, serving.
fn mount_hello(dir: &std::path::Path) -> DevSession {
    let session = mount_session(Server::new(Arc::new(Hello::default())), dir);
    std::fs::metadata(session.mountpoint().join("hello")).unwrap();
    session
}

/// Fails the test unless we are root; then [`mount_hello`] on a fresh
/// temporary directory.
fn hello_as_root() -> (tempfile::TempDir, DevSession) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let session = mount_hello(dir.path());
    (dir, session)
}

/// The file system type of the topmost mount on `path`, from mountinfo.
fn mount_type(path: &std::path::Path) -> Option<String> {
    test_support::mountinfo::mounts_at(path)
        .pop()
        .map(|m| m.fstype)
}

#[test]
fn stop_ends_workers_even_when_the_mount_is_busy() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::new(Arc::new(Hello::default()));
    let config = SessionConfig::default().threads(3);
    let session = DevSession::mount(server, dir.path(), &MountOptions::default(), config).unwrap();
    // An open file keeps the mount busy: the unmount is lazy and the
    // connection stays up, so only the wake signal ends the workers.
    let open = std::fs::File::open(session.mountpoint().join("hello")).unwrap();
    let started = std::time::Instant::now();
    session.stop();
    session.wait().unwrap();
    assert_eq!(session.worker_count(), 0);
    // Without the wake the workers would block in read(2) for good; a
    // minute only bounds a busy machine's scheduling.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    drop(open);
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
}

#[test]
fn transport_counts_its_worker_threads() {
    require_root();
    for (workers, want) in [
        (1, "/dev/fuse, 1 worker thread"),
        (2, "/dev/fuse, 2 worker threads"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::new(Arc::new(Hello::default()));
        let config = SessionConfig::default()
            .threads(workers)
            .max_threads(workers);
        let session =
            DevSession::mount(server, dir.path(), &MountOptions::default(), config).unwrap();
        assert_eq!(session.transport(), want);
        session.stop();
        session.wait().unwrap();
    }
}
