//! `FuseDevTask`: the same tiny file system served as a task on tokio
//! runtimes (multi-threaded and current-thread). Needs root.

mod common;

use common::*;
use fuse_server::Server;
use fuse_transport_dev::{FuseDevTask, MountOptions, TaskConfig};
use std::sync::Arc;

fn serve_and_read(runtime: tokio::runtime::Runtime) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let local = tokio::task::LocalSet::new();
    runtime.block_on(local.run_until(async {
        let server = Server::new(Arc::new(Hello::default()));
        let task = FuseDevTask::mount(
            server,
            dir.path(),
            &MountOptions::default(),
            TaskConfig::default(),
        )
        .unwrap();
        let mnt = task.mountpoint().to_path_buf();
        let handle = task.handle();
        let server = task.server().clone();
        let running = tokio::task::spawn_local(task.run());
        // The file system is read from a blocking thread: this runtime's
        // threads serve it.
        let read = tokio::task::spawn_blocking(move || {
            let mut all = Vec::new();
            for _ in 0..20 {
                all.push(std::fs::read(mnt.join("hello")).unwrap());
            }
            let names: Vec<_> = std::fs::read_dir(&mnt)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            (all, names)
        })
        .await
        .unwrap();
        assert!(read.0.iter().all(|c| c == CONTENT));
        assert_eq!(read.1, ["hello"]);
        assert!(server.counters().get(fuse_abi::Opcode::Read) >= 1);
        handle.stop();
        running.await.unwrap().unwrap();
    }));
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
}

#[test]
fn task_serves_on_a_multi_thread_runtime() {
    serve_and_read(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
}

#[test]
fn task_serves_on_a_current_thread_runtime() {
    serve_and_read(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
}

#[test]
fn task_ends_when_unmounted_from_outside() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    rt.block_on(local.run_until(async {
        let server = Server::new(Arc::new(Hello::default()));
        let task = FuseDevTask::mount(
            server,
            dir.path(),
            &MountOptions::default(),
            TaskConfig::default(),
        )
        .unwrap();
        let mnt = task.mountpoint().to_path_buf();
        let running = tokio::task::spawn_local(task.run());
        tokio::task::spawn_blocking(move || {
            std::fs::metadata(mnt.join("hello")).unwrap();
            fuse_transport_dev::unmount_path(&mnt, false).unwrap();
        })
        .await
        .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), running)
            .await
            .expect("task ended")
            .unwrap()
            .unwrap();
    }));
}
