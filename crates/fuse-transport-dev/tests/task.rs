//! `FuseDevTask`: the same tiny file system served as a task on tokio
//! runtimes (multi-threaded and current-thread), and one mount served by
//! tasks on two threads. Needs root.

mod common;

use common::*;
use fuse_server::Server;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn serve_and_read(runtime: tokio::runtime::Runtime) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    run_local(&runtime, async {
        let task = mount_task(Server::new(Arc::new(Hello::default())), dir.path());
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
    });
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
    run_local(&current_thread_runtime(), async {
        let task = mount_task(Server::new(Arc::new(Hello::default())), dir.path());
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
    });
}

#[test]
fn a_sibling_on_another_thread_shares_the_mount_and_stops_with_it() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(Hello::default());
    run_local(&current_thread_runtime(), async {
        let task = mount_task(Server::new(fs.clone()), dir.path());
        let handle = task.handle();
        let sibling = task.sibling().unwrap();
        let sibling_thread = std::thread::spawn(move || {
            run_local(&current_thread_runtime(), async move {
                sibling.into_task().unwrap().run().await
            })
        });
        let mnt = task.mountpoint().to_path_buf();
        let running = tokio::task::spawn_local(task.run());
        // Opens from four threads at once (every open is an OPEN request)
        // until both tasks have answered some, for at most 20 s.
        let seen = fs.clone();
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while seen.open_threads.lock().unwrap().len() < 2
                && std::time::Instant::now() < deadline
            {
                let readers: Vec<_> = (0..4)
                    .map(|_| {
                        let mnt = mnt.clone();
                        std::thread::spawn(move || {
                            for _ in 0..50 {
                                assert_eq!(std::fs::read(mnt.join("hello")).unwrap(), CONTENT);
                            }
                        })
                    })
                    .collect();
                for r in readers {
                    r.join().unwrap();
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(
            fs.open_threads.lock().unwrap().len(),
            2,
            "both tasks' threads answered OPENs"
        );
        assert_eq!(fs.destroys.load(Ordering::Relaxed), 0);
        // The first task's handle stops both.
        handle.stop();
        running.await.unwrap().unwrap();
        sibling_thread.join().unwrap().unwrap();
    });
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
    assert_eq!(
        fs.destroys.load(Ordering::Relaxed),
        1,
        "the file system is told once, by the last task to end"
    );
}

/// A task held as an `Arc<dyn Session>` the way the daemons hold every
/// transport: it runs (with a sibling) on threads of its own, serves,
/// and `Session::stop` from here ends both, `Session::wait` returning
/// once they have, with the mount gone.
#[test]
fn a_task_is_a_session_stopped_and_waited_for_from_another_thread() {
    use fuse_server::Session;
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(Hello::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let mountpoint = dir.path().to_path_buf();
    let server = Server::new(fs.clone());
    let first = std::thread::spawn(move || {
        run_local(&current_thread_runtime(), async move {
            let task = Arc::new(mount_task(server, &mountpoint));
            tx.send(task.clone()).unwrap();
            task.run_shared().await
        })
    });
    let task = rx.recv().unwrap();
    let sibling = task.sibling().unwrap();
    let second = std::thread::spawn(move || {
        run_local(&current_thread_runtime(), async move {
            sibling.into_task().unwrap().run().await
        })
    });
    let session: Arc<dyn Session> = task;
    assert_eq!(std::fs::read(dir.path().join("hello")).unwrap(), CONTENT);
    // Wait for the sibling to be made (its thread runs on its own).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !session.transport().ends_with("2 threads") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        session.transport(),
        "/dev/fuse, a task on a tokio runtime on each of 2 threads"
    );
    session.stop();
    session.wait().unwrap();
    assert!(!fuse_transport_dev::is_fuse_mount(dir.path()).unwrap());
    // The last task to end told the file system, once, before wait returned.
    assert_eq!(fs.destroys.load(Ordering::Relaxed), 1);
    first.join().unwrap().unwrap();
    second.join().unwrap().unwrap();
}
