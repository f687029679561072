//! The socket's life: a front end that connects and goes away ends a
//! connection, not the serving; `stop` ends it from another thread.

use fuse_server::{FileSystem, Server};
use fuse_transport_virtio::{ServerFactory, VirtioConfig, VirtioServe};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Empty;
impl FileSystem for Empty {}

/// A factory that counts the servers it made (one per connection, made
/// when the backend for it waits).
fn counting_factory() -> (Arc<ServerFactory>, Arc<AtomicUsize>) {
    let made = Arc::new(AtomicUsize::new(0));
    let m = made.clone();
    let factory: Arc<ServerFactory> = Arc::new(move || {
        m.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(Server::new(Arc::new(Empty))))
    });
    (factory, made)
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn front_ends_come_and_go_until_stop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vfs.sock");
    let serve = Arc::new(VirtioServe::bind(&path, VirtioConfig::default()).unwrap());
    let (factory, made) = counting_factory();
    let runner = {
        let serve = serve.clone();
        std::thread::spawn(move || serve.run(factory))
    };
    // Two front ends in turn, each hanging up at once: each connection
    // ends, and a new backend (with a new server) waits for the next.
    for n in 1..=2 {
        let stream = UnixStream::connect(&path).unwrap();
        drop(stream);
        wait_for("the next connection's backend", || {
            made.load(Ordering::SeqCst) > n
        });
    }
    assert!(!runner.is_finished(), "a disconnect doesn't end serving");
    serve.stop();
    wait_for("run to return", || runner.is_finished());
    runner.join().unwrap().unwrap();
    drop(serve);
    assert!(!path.exists(), "the socket file is removed");
}

#[test]
fn a_bad_configuration_is_refused_at_bind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vfs.sock");
    let config = VirtioConfig::default().request_queues(0);
    assert!(VirtioServe::bind(&path, config).is_err());
    let config = VirtioConfig::default().tag(Some("x".repeat(37)));
    assert!(VirtioServe::bind(&path, config).is_err());
    let config = VirtioConfig::default().max_queue_size(1000);
    assert!(VirtioServe::bind(&path, config).is_err());
}
