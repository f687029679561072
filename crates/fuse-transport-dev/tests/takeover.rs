//! Handing a served mount over (live upgrade, `fuse_transport_dev::takeover`)
//! while clients use it: the transport's part. Both sessions live in this
//! process and share one file system object, so what is tested is the
//! connection's way from one session to the other (pause, the socket
//! exchange with the descriptor, resume with the negotiated state,
//! release without unmounting), under load: no client sees an error. The
//! connection moves between worker-thread sessions (`DevSession`) and tasks
//! on tokio runtimes (`FuseDevTask` and a sibling) in both directions.
//! Moving a file system's own state is the file system's (the
//! passthrough's tests).

mod common;

use common::{current_thread_runtime, require_root, run_local};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::Server;
use fuse_transport_dev::takeover::{self, Handover, Pausable};
use fuse_transport_dev::{DevSession, FuseDevTask, MountOptions, SessionConfig, TaskConfig};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn options() -> MountOptions {
    MountOptions::default()
}

fn mounted(mnt: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mnt.to_string_lossy();
    text.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|p| p == want))
}

/// Writers that each rewrite and check their own file until `stop`; the
/// first error any of them sees.
fn start_clients(
    mnt: PathBuf,
    n: usize,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<Result<(), String>>> {
    test_support::load::clients(n, &stop, &rounds, move |t| {
        let (mnt, path) = (mnt.clone(), mnt.join(format!("client-{t}")));
        Ok(move |i: u64| -> std::io::Result<()> {
            let data: Vec<u8> = (0..65536u32)
                .map(|k| (k as u64 * 31 + i + t as u64) as u8)
                .collect();
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            f.write_all(&data)?;
            f.seek(SeekFrom::Start(0))?;
            let mut back = Vec::new();
            f.read_to_end(&mut back)?;
            if back != data {
                return Err(std::io::Error::other("read back other bytes"));
            }
            // New names too: LOOKUP, CREATE, UNLINK.
            let other = mnt.join(format!("client-{t}-{}", i % 8));
            std::fs::write(&other, b"x")?;
            std::fs::remove_file(&other)?;
            Ok(())
        })
    })
}

fn wait_for_rounds(rounds: &AtomicU64, more: u64) {
    let start = rounds.load(Ordering::Relaxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while rounds.load(Ordering::Relaxed) < start + more {
        assert!(
            std::time::Instant::now() < deadline,
            "the clients made no progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A test's temporary directory with its mountpoint `mnt` in it. Dropped
/// (a test ends, or panics: a session handed over to nobody leaves a dead
/// mount), it detaches a mount still on `mnt` before the directory goes,
/// so that a failing test leaves no mount behind.
struct TestDir {
    dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl TestDir {
    fn new() -> TestDir {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        TestDir { dir, mnt }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let path = std::ffi::CString::new(self.mnt.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid path; a lazy unmount of our own mount.
            let r = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            eprintln!(
                "detached the mount left on {} ({})",
                self.mnt.display(),
                if r == 0 {
                    "done".to_string()
                } else {
                    std::io::Error::last_os_error().to_string()
                }
            );
        }
    }
}

/// A passthrough of a fresh `src`, to be mounted at `mnt` (both in the
/// returned directory).
fn passthrough_dirs() -> (TestDir, PathBuf, PathBuf, Arc<PassthroughFs>) {
    require_root();
    let dir = TestDir::new();
    let src = dir.path().join("src");
    let mnt = dir.mnt.clone();
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let fs = Arc::new(PassthroughFs::new(&src, PassthroughConfig::default()).unwrap());
    (dir, src, mnt, fs)
}

/// A passthrough of a fresh `src` mounted at `mnt` (both in the returned
/// directory) by a session with `config`.
fn mount_passthrough(
    config: SessionConfig,
) -> (
    TestDir,
    std::path::PathBuf,
    std::path::PathBuf,
    Arc<PassthroughFs>,
    DevSession,
) {
    let (dir, src, mnt, fs) = passthrough_dirs();
    let session =
        DevSession::mount(Server::new(fs.clone()), &mnt, &options(), config).expect("mount");
    (dir, src, mnt, fs, session)
}

/// Runs the future `work` makes on a thread of its own, in a
/// current-thread tokio runtime's `LocalSet` (the tasks' request futures
/// are local, so the future is made there).
fn on_a_runtime_thread<F: std::future::Future<Output = ()>>(
    work: impl FnOnce() -> F + Send + 'static,
) {
    std::thread::spawn(move || {
        run_local(&current_thread_runtime(), work());
    });
}

/// Serves a taken-over connection (paused, see
/// `FuseDevTask::resume_paused`) with tasks, see [`run_tasks`].
fn resume_tasks(server: Server, r: takeover::Received) -> std::io::Result<Arc<FuseDevTask>> {
    run_tasks(move || {
        FuseDevTask::resume_paused(
            server,
            r.dev_fd,
            r.mountpoint,
            &r.negotiated,
            TaskConfig::default(),
        )
    })
}

/// Runs the task `make` makes on a current-thread tokio runtime and a
/// sibling on another, each thread its own runtime.
fn run_tasks(
    make: impl FnOnce() -> Result<FuseDevTask, fuse_transport_dev::SessionError> + Send + 'static,
) -> std::io::Result<Arc<FuseDevTask>> {
    let (tx, rx) = std::sync::mpsc::channel();
    on_a_runtime_thread(move || async move {
        match make().map(Arc::new) {
            Ok(task) => {
                let _ = tx.send(Ok(task.clone()));
                task.run_shared().await.expect("the task failed");
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let task = rx.recv().unwrap()?;
    let sibling = task.sibling()?;
    on_a_runtime_thread(move || async move {
        let task = sibling.into_task().expect("the sibling");
        task.run().await.expect("the sibling failed");
    });
    Ok(task)
}

#[test]
fn a_mount_moves_between_sessions_and_tasks_under_load_without_a_client_error() {
    let (dir, _, _, fs, session) = mount_passthrough(SessionConfig::default().threads(2));
    let mut session: Arc<dyn Pausable> = Arc::new(session);
    let mnt = session.mountpoint().to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let clients = start_clients(mnt.clone(), 4, stop.clone(), rounds.clone());
    wait_for_rounds(&rounds, 20);

    let socket = dir.path().join("takeover.sock");
    for upgrade in 0..20 {
        let listener = UnixListener::bind(&socket).unwrap();
        let old = offer_once(session, listener);
        // The new side: tasks after worker threads, and back.
        let fs2 = fs.clone();
        let prepare = move |h: Handover| -> std::io::Result<Arc<dyn Pausable>> {
            let r = h.into_parts()?;
            assert!(r.fs_state.is_empty() && r.fs_fds.is_empty());
            if upgrade % 2 == 0 {
                return Ok(resume_tasks(Server::new_async(fs2), r)?);
            }
            Ok(Arc::new(
                DevSession::resume_paused(
                    Server::new(fs2),
                    r.dev_fd,
                    r.mountpoint,
                    &r.negotiated,
                    SessionConfig::default().threads(2),
                )
                .map_err(|e| std::io::Error::other(e.to_string()))?,
            ))
        };
        let new = takeover::take_over(&socket, takeover::DEFAULT_TIMEOUT, prepare)
            .unwrap_or_else(|e| panic!("upgrade {upgrade}: {e}"));
        let (old_session, handed) = old.join().unwrap();
        assert!(handed, "upgrade {upgrade}: the old session kept the mount");
        // The old session ends without unmounting.
        old_session.wait().unwrap();
        assert!(old_session.is_released());
        drop(old_session);
        assert!(mounted(&mnt), "upgrade {upgrade}: the mount went away");
        std::fs::remove_file(&socket).unwrap();
        session = new;
        wait_for_rounds(&rounds, 20);
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap().expect("a client saw an error");
    }
    session.stop();
    session.wait().unwrap();
    assert!(!mounted(&mnt));
}

/// Serves one takeover request on `listener` in a thread; its result.
fn offer_once(
    session: Arc<dyn Pausable>,
    listener: UnixListener,
) -> std::thread::JoinHandle<(Arc<dyn Pausable>, bool)> {
    offer_once_within(session, listener, takeover::DEFAULT_TIMEOUT)
}

/// [`offer_once`], waiting at most `timeout` for the new side.
fn offer_once_within(
    session: Arc<dyn Pausable>,
    listener: UnixListener,
    timeout: std::time::Duration,
) -> std::thread::JoinHandle<(Arc<dyn Pausable>, bool)> {
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let negotiated = *session.server().negotiated().unwrap();
        let mountpoint = session.mountpoint().to_path_buf();
        let handed = takeover::offer(session.as_ref(), &stream, timeout, |dev| {
            Ok(Handover::new(&negotiated, &mountpoint, dev, b"", vec![]))
        })
        .expect("offer");
        (session, handed)
    })
}

/// The session an offer that was refused or called off gave back (it was
/// not handed over), checked to still serve `mnt` by writing `name`.
fn kept(
    old: std::thread::JoinHandle<(Arc<dyn Pausable>, bool)>,
    mnt: &Path,
    name: &str,
) -> Arc<dyn Pausable> {
    let (session, handed) = old.join().unwrap();
    assert!(!handed, "{name}: the session was handed over");
    still_served(mnt, name);
    session
}

fn still_served(mnt: &Path, name: &str) {
    std::fs::write(mnt.join(name), name.as_bytes()).expect("the old session still serves");
    assert_eq!(std::fs::read(mnt.join(name)).unwrap(), name.as_bytes());
}

#[test]
fn refused_takeovers_leave_the_old_session_serving() {
    let (dir, src, _, _, session) = mount_passthrough(SessionConfig::default());
    let mut session: Arc<dyn Pausable> = Arc::new(session);
    let mnt = session.mountpoint().to_path_buf();
    let socket = dir.path().join("takeover.sock");

    // Another version of the exchange: refused before any pause.
    let listener = UnixListener::bind(&socket).unwrap();
    let old = offer_once(session, listener);
    let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    takeover::write_line(&stream, "fuse-takeover-hello 99").unwrap();
    let answer = takeover::read_line(&stream).unwrap();
    assert!(
        answer.starts_with("refused ") && answer.contains("99"),
        "{answer}"
    );
    session = kept(old, &mnt, "after-version");
    std::fs::remove_file(&socket).unwrap();

    // A new daemon that would negotiate differently (it asks for the
    // writeback cache the connection doesn't have): it refuses, with the
    // reason, and the old session serves on.
    let listener = UnixListener::bind(&socket).unwrap();
    let old = offer_once(session, listener);
    // A file system of its own, as a new process would have.
    let fs2 = Arc::new(PassthroughFs::new(&src, PassthroughConfig::default()).unwrap());
    let err = takeover::take_over(&socket, takeover::DEFAULT_TIMEOUT, move |h| {
        let r = h.into_parts()?;
        let mut init = *Server::new(fs2.clone()).init_config();
        init.flags |= fuse_abi::InitFlags::WRITEBACK_CACHE;
        init.flags.remove(fuse_abi::InitFlags::NO_OPEN_SUPPORT);
        let server = Server::new(fs2).with_init_config(init);
        DevSession::resume_paused(
            server,
            r.dev_fd,
            r.mountpoint,
            &r.negotiated,
            SessionConfig::default(),
        )
        .map(Arc::new)
        .map_err(|e| std::io::Error::other(e.to_string()))
    })
    .map(|_| ())
    .unwrap_err();
    assert!(err.to_string().contains("negotiate differently"), "{err}");
    session = kept(old, &mnt, "after-refusal");
    std::fs::remove_file(&socket).unwrap();

    // Nobody answers: the new daemon goes away mid-way.
    let listener = UnixListener::bind(&socket).unwrap();
    let old = offer_once(session, listener);
    let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let hello = format!("fuse-takeover-hello {}", takeover::TAKEOVER_VERSION);
    takeover::write_line(&stream, &hello).unwrap();
    let h = takeover::recv_handover(&stream).unwrap();
    drop(h);
    drop(stream);
    session = kept(old, &mnt, "after-hangup");

    // A new daemon that hangs after the hand-over: the old session waits
    // the timeout, calls it off, and serves again; the new side then
    // finds itself refused, not told to go.
    std::fs::remove_file(&socket).unwrap();
    let listener = UnixListener::bind(&socket).unwrap();
    let old = offer_once_within(session, listener, std::time::Duration::from_millis(500));
    let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    takeover::write_line(&stream, &hello).unwrap();
    let h = takeover::recv_handover(&stream).unwrap();
    session = kept(old, &mnt, "after-timeout");
    // Its "ready" comes too late (the socket may be closed already).
    let _ = takeover::write_line(&stream, "ready");
    let answer = takeover::read_line(&stream).unwrap();
    assert!(answer.starts_with("refused "), "{answer}");
    drop(h);
    drop(stream);
    still_served(&mnt, "after-late-ready");

    session.stop();
    session.wait().unwrap();
    assert!(!mounted(&mnt));
}

/// A takeover while a client waits for a lock is refused (the waiting
/// request can't be answered before the hand-over), with the reason; the
/// session serves on, and once the lock is granted a pause works.
fn lock_waits_refuse_the_takeover(session: Arc<dyn Pausable>, dir: &Path) {
    use std::os::fd::AsRawFd;
    let mnt = session.mountpoint().to_path_buf();
    let path = mnt.join("locked");
    std::fs::write(&path, b"x").unwrap();
    let holder = std::fs::File::open(&path).unwrap();
    // Taken without waiting (SETLK, not SETLKW): a blocking flock is
    // itself a lock wait to the session, counted until just after its
    // reply reached us, so the first refused pause below could be this
    // one's and the waiter's request not yet sent.
    assert_eq!(
        // SAFETY: `holder` is an open File that outlives the call; flock
        // takes no pointers.
        unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            // SAFETY: as above.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }
        })
    };
    // Pauses succeed until the waiter's request reaches the session.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let refusal = loop {
        match session.pause() {
            Ok(()) => session.unpause().unwrap(),
            Err(e) => break e,
        }
        assert!(std::time::Instant::now() < deadline, "no lock wait seen");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(refusal.kind(), std::io::ErrorKind::WouldBlock, "{refusal}");
    assert!(refusal.to_string().contains("wait for locks"), "{refusal}");
    still_served(&mnt, "while-waiting");

    // The whole exchange: the new side hears why.
    let socket = dir.join("locks.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let old = offer_once(session, listener);
    let err = takeover::take_over(
        &socket,
        takeover::DEFAULT_TIMEOUT,
        |_| -> std::io::Result<Arc<DevSession>> {
            panic!("the serving side handed over during a lock wait")
        },
    )
    .map(|_| ())
    .unwrap_err();
    assert!(err.to_string().contains("wait for locks"), "{err}");
    let (session, handed) = old.join().unwrap();
    assert!(!handed);

    drop(holder);
    assert_eq!(waiter.join().unwrap(), 0, "the waiter got no lock");
    // The reply reaches the client just before the session counts the
    // wait as over.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Err(e) = session.pause() {
        assert!(
            std::time::Instant::now() < deadline,
            "no pause once the lock was granted: {e}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    session.unpause().unwrap();
    still_served(&mnt, "after-the-lock");
    session.stop();
    session.wait().unwrap();
    assert!(!mounted(&mnt));
}

#[test]
fn lock_waits_refuse_the_takeover_of_worker_threads() {
    let (dir, _, _, _, session) = mount_passthrough(SessionConfig::default());
    lock_waits_refuse_the_takeover(Arc::new(session), dir.path());
}

#[test]
fn lock_waits_refuse_the_takeover_of_tasks() {
    let (dir, _, mnt, fs) = passthrough_dirs();
    let task = run_tasks(move || {
        FuseDevTask::mount(
            Server::new_async(fs),
            &mnt,
            &options(),
            TaskConfig::default(),
        )
    })
    .unwrap();
    lock_waits_refuse_the_takeover(task, dir.path());
}
