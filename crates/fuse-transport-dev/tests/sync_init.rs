//! Synchronous INIT (`FUSE_DEV_IOC_SYNC_INIT`, Linux 6.18) on the real
//! kernel: [`DevSession::mount`] answers INIT while mount(2) waits for it,
//! so the mount it returns is usable at once, and an INIT the file system
//! refuses fails the mount itself. Needs root (it mounts) and a kernel
//! with the ioctl (these machines' 6.18 has it): without, each test fails
//! with the reason rather than passing unchecked.

mod common;

use common::{
    current_thread_runtime, mount_session, mount_task, mountpoint, require_root, run_local, Hello,
};
use fuse_server::{FileSystem, InitConfig, KernelInit, Server, Session};
use fuse_transport_dev::{DevSession, MountError, MountOptions, SessionConfig, SessionError};
use std::io;
use std::sync::{Arc, Mutex};
use test_support::{is_mounted as mounted, kernel_offers_sync_init};

/// Fails the test unless we are root (it mounts) and, with the reason,
/// where the kernel has no synchronous INIT.
fn require_root_and_sync_init() {
    require_root();
    if let Err(reason) = kernel_offers_sync_init() {
        panic!("{reason}");
    }
}

/// [`Hello`], recording the name of the thread that answered INIT.
#[derive(Default)]
struct Recording {
    hello: Hello,
    init_thread: Mutex<Option<String>>,
}

impl FileSystem for Recording {
    fn init(&self, _kernel: &KernelInit, _config: &mut InitConfig) -> io::Result<()> {
        *self.init_thread.lock().unwrap() = Some(
            std::thread::current()
                .name()
                .unwrap_or("(unnamed)")
                .to_owned(),
        );
        Ok(())
    }

    fn lookup(
        &self,
        ctx: &fuse_server::Context,
        parent: u64,
        name: &std::ffi::CStr,
    ) -> io::Result<fuse_server::Entry> {
        self.hello.lookup(ctx, parent, name)
    }

    fn getattr(
        &self,
        ctx: &fuse_server::Context,
        ino: u64,
        fh: Option<u64>,
    ) -> io::Result<fuse_server::AttrReply> {
        self.hello.getattr(ctx, ino, fh)
    }
}

#[test]
fn mount_returns_after_init_was_answered_during_it() {
    require_root_and_sync_init();
    let (_dir, mnt) = mountpoint();
    let fs = Arc::new(Recording::default());
    let session = mount_session(Server::new(fs.clone()), &mnt);
    // INIT was answered while mount(2) ran, on the thread made for it, not
    // on this one (which was inside mount(2)); the old path answers it
    // here, after mount(2).
    assert_eq!(
        fs.init_thread.lock().unwrap().as_deref(),
        Some("fuse-sync-init")
    );
    // Usable at once: the root and its file, with no wait for anything.
    let root = std::fs::metadata(&mnt).unwrap();
    assert!(root.is_dir());
    assert_eq!(
        std::fs::metadata(mnt.join("hello")).unwrap().len(),
        common::CONTENT.len() as u64
    );
    session.stop();
    session.unmount().unwrap();
    session.wait().unwrap();
    assert!(!mounted(&mnt), "the mount was left behind");
}

/// Names of this process's threads (`/proc/self/task/*/comm`).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

#[test]
fn mount_returns_with_the_thread_that_answered_init_gone() {
    // A caller that confines itself right after mounting (a new mount
    // namespace, Landlock) first checks no other thread runs. `join`
    // returns before the kernel has finished the thread's exit (a thread
    // spawned and joined in a loop is still listed about every other
    // time): the mount waits until it left.
    require_root_and_sync_init();
    for round in 0..20 {
        let (_dir, mnt) = mountpoint();
        let (mut mount, negotiated) = fuse_transport_dev::init_during_mount(
            Server::new(Arc::new(Hello::default())),
            &mnt,
            &MountOptions::default(),
            SessionConfig::default().wake_signal,
        )
        .unwrap();
        let names = thread_names();
        assert!(negotiated.is_some(), "round {round}: INIT after the mount");
        mount.unmount().unwrap();
        assert!(
            !names.iter().any(|name| name == "fuse-sync-init"),
            "round {round}: the INIT thread is still listed after the mount: {names:?}"
        );
    }
}

/// Refuses INIT with `EACCES`.
struct Refusing;

impl FileSystem for Refusing {
    fn init(&self, _kernel: &KernelInit, _config: &mut InitConfig) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EACCES))
    }
}

#[test]
fn an_init_error_fails_the_mount() {
    require_root_and_sync_init();
    let (_dir, mnt) = mountpoint();
    let result = DevSession::mount(
        Server::new(Arc::new(Refusing)),
        &mnt,
        &MountOptions::default(),
        SessionConfig::default(),
    );
    let err = match result {
        Ok(session) => {
            session.stop();
            let _ = session.unmount();
            panic!("a refused INIT mounted");
        }
        Err(err) => err,
    };
    // mount(2) itself failed, and the error says why: the errno INIT was
    // answered with (the kernel's own is ENOTCONN).
    match &err {
        SessionError::Mount(MountError::InitRefused { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EACCES), "{err}")
        }
        other => panic!("expected mount(2) to fail on the refused INIT, got: {other}"),
    }
    assert!(!mounted(&mnt), "a failed mount was left behind");
    // The mountpoint is an ordinary directory again.
    assert!(std::fs::metadata(&mnt).unwrap().is_dir());
}

#[test]
fn a_mount_refused_before_init_returns_its_error() {
    require_root_and_sync_init();
    let (_dir, mnt) = mountpoint();
    // The kernel refuses an option it doesn't know before it sends INIT:
    // the thread waiting to answer INIT must be stopped, not left hanging
    // (this call would never return).
    let result = DevSession::mount(
        Server::new(Arc::new(Hello::default())),
        &mnt,
        &MountOptions::default().extra(["no_such_fuse_option"]),
        SessionConfig::default(),
    );
    match result {
        Err(SessionError::Mount(MountError::Mount { source, .. })) => {
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL), "{source}")
        }
        Err(other) => panic!("expected mount(2) to fail with EINVAL, got: {other}"),
        Ok(session) => {
            session.stop();
            let _ = session.unmount();
            panic!("an unknown option mounted");
        }
    }
    assert!(!mounted(&mnt), "a failed mount was left behind");
}

#[cfg(feature = "tokio")]
#[test]
fn a_task_mount_returns_after_init_was_answered_during_it() {
    require_root_and_sync_init();
    let (_dir, mnt) = mountpoint();
    let fs = Arc::new(Recording::default());
    run_local(&current_thread_runtime(), async {
        let task = mount_task(Server::new(fs.clone()), &mnt);
        // Answered during mount(2), before the task ever ran.
        assert_eq!(
            fs.init_thread.lock().unwrap().as_deref(),
            Some("fuse-sync-init")
        );
        let handle = task.handle();
        let running = tokio::task::spawn_local(task.run());
        let path = mnt.clone();
        let len = tokio::task::spawn_blocking(move || {
            std::fs::metadata(path.join("hello")).map(|m| m.len())
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(len, common::CONTENT.len() as u64);
        handle.stop();
        running.await.unwrap().unwrap();
    });
    assert!(!mounted(&mnt), "the mount was left behind");
}
