//! A passthrough served through its `AsyncFileSystem` by a `FuseDevTask`
//! on an `async-io` runtime (tokio or io_uring) on a thread of its own,
//! with or without the thread pool, or by FUSE over io_uring's ring threads
//! in async mode; stopped with `TaskHandle::stop` (or the session's
//! `stop`) and unmounted (lazily as a last resort) on drop or panic.
#![allow(dead_code)]

#[path = "../common/mod.rs"]
mod common;

use async_io::RuntimeType;
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::Server;
use fuse_server::Session;
use fuse_transport_dev::{FuseDevTask, MountOptions, TaskConfig, TaskHandle};
use fuse_transport_uring::{UringConfig, UringRuntime, UringSession};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
// Each test binary uses a part of what the shared module offers.
#[allow(unused_imports)]
pub use test_support::{
    in_initial_user_namespace, is_mounted, mmap_writes_through, open_direct, pattern, require_root,
    require_uring, wait_until, Aligned,
};

/// How a test mount is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// The runtime of the serving thread.
    pub runtime: RuntimeType,
    /// `PassthroughFs::enable_async_thread_pool`.
    pub pool: bool,
    /// Serving threads: a `FuseDevTask` and `threads - 1` siblings, each
    /// on a runtime of its own (`/dev/fuse` only).
    pub threads: usize,
    /// The transport.
    pub transport: Transport,
}

/// The transport a test mount is served by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `FuseDevTask`s over `/dev/fuse`.
    Dev,
    /// FUSE over io_uring in async mode (a ring thread per queue, each
    /// running the mode's runtime): the FUSE ring, and on the io_uring
    /// runtime its own ring beside it.
    Uring,
    /// [`Transport::Uring`] on the io_uring runtime with one ring per
    /// queue (`UringConfig::one_ring`).
    UringOneRing,
}

impl Mode {
    /// Every runtime with the pool off and on, on one thread; then both
    /// runtimes on two threads (tokio without the pool, io_uring with it).
    /// Then FUSE over io_uring on the io_uring runtime, with two rings
    /// per queue and with one.
    pub const ALL: [Mode; 8] = [
        Mode::new(RuntimeType::Tokio, false, 1),
        Mode::new(RuntimeType::Tokio, true, 1),
        Mode::new(RuntimeType::IoUring, false, 1),
        Mode::new(RuntimeType::IoUring, true, 1),
        Mode::new(RuntimeType::Tokio, false, 2),
        Mode::new(RuntimeType::IoUring, true, 2),
        Mode::over_uring(false),
        Mode::over_uring(true),
    ];

    /// A mode over `/dev/fuse`.
    pub const fn new(runtime: RuntimeType, pool: bool, threads: usize) -> Self {
        Self {
            runtime,
            pool,
            threads,
            transport: Transport::Dev,
        }
    }

    /// FUSE over io_uring on the io_uring runtime, without the pool; with
    /// `one_ring`, one ring per queue.
    pub const fn over_uring(one_ring: bool) -> Self {
        Self {
            runtime: RuntimeType::IoUring,
            pool: false,
            threads: 1,
            transport: if one_ring {
                Transport::UringOneRing
            } else {
                Transport::Uring
            },
        }
    }
}

/// Fails the test unless io_uring runtimes can be built here.
pub fn require_runtime(runtime: RuntimeType) {
    if let Err(e) = runtime.check_available() {
        panic!("the {runtime} runtime is not available here: {e}");
    }
}

/// Mount options of the tests (`allow_other`, `default_permissions`).
pub fn options(fsname: &str) -> MountOptions {
    common::test_options().fsname(format!("pt-test-async-{fsname}-{}", std::process::id()))
}

#[allow(unused_imports)] // pool.rs uses the mounts alone
pub use common::{
    append_to_a, assert_refs_return_to_zero, big_file_read, big_file_written, direct_file_below,
    direct_file_written, lmeta, renameat2, seek_and_read_big, small_files_both_ways, truncate_a,
    uncached, Sides,
};

/// A `FuseDevTask` serving `server` at `mnt` on a new thread with a
/// runtime of type `runtime`; returns the task's handle once mounted.
pub fn serve_task(
    runtime: RuntimeType,
    server: Server,
    mnt: &Path,
    options: MountOptions,
) -> (TaskHandle, PathBuf, JoinHandle<io::Result<()>>) {
    serve_tasks(runtime, 1, server, mnt, options)
}

/// [`serve_task`] with `threads - 1` sibling tasks on threads (and
/// runtimes) of their own; the returned thread ends after all of them.
pub fn serve_tasks(
    runtime: RuntimeType,
    threads: usize,
    server: Server,
    mnt: &Path,
    options: MountOptions,
) -> (TaskHandle, PathBuf, JoinHandle<io::Result<()>>) {
    let (tx, rx) = mpsc::channel();
    let mnt = mnt.to_path_buf();
    let thread = std::thread::Builder::new()
        .name(format!("serve-{runtime}"))
        .spawn(move || {
            let rt = runtime.build().map_err(io::Error::from)?;
            rt.block_on(async move {
                let task = match FuseDevTask::mount(server, &mnt, &options, TaskConfig::default()) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return Ok(());
                    }
                };
                let siblings: Vec<_> = (1..threads)
                    .map(|_| {
                        let sibling = task.sibling().expect("cloning /dev/fuse");
                        std::thread::spawn(move || -> io::Result<()> {
                            let rt = runtime.build().map_err(io::Error::from)?;
                            rt.block_on(async move {
                                let task = sibling.into_task().map_err(io::Error::other)?;
                                task.run().await
                            })
                        })
                    })
                    .collect();
                let _ = tx.send(Ok((task.handle(), task.mountpoint().to_path_buf())));
                let result = task.run().await;
                for s in siblings {
                    s.join().expect("a sibling's thread panicked")?;
                }
                result
            })
        })
        .expect("starting the serving thread");
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok((handle, mnt))) => (handle, mnt, thread),
        Ok(Err(e)) => panic!("mounting: {e}"),
        Err(e) => panic!("the serving thread did not mount: {e}"),
    }
}

/// A passthrough over a fresh backing directory served asynchronously.
pub struct AsyncMount {
    /// The file system.
    pub fs: Arc<PassthroughFs>,
    /// The backing directory.
    pub src: PathBuf,
    /// The mountpoint.
    pub mnt: PathBuf,
    /// How it is served.
    pub mode: Mode,
    handle: Option<TaskHandle>,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// Over io_uring: the session.
    session: Option<UringSession>,
    dir: Option<tempfile::TempDir>,
}

impl Sides for AsyncMount {
    fn sides(&self) -> (&Path, &Path) {
        (&self.src, &self.mnt)
    }
}

impl AsyncMount {
    /// A mount with [`uncached`] options.
    pub fn new(mode: Mode) -> Self {
        Self::with(mode, uncached())
    }

    /// A mount with `config`.
    pub fn with(mode: Mode, config: PassthroughConfig) -> Self {
        require_root();
        require_runtime(mode.runtime);
        let s = test_support::shared_scratch("pt-async-");
        Self::over(mode, config, s.dir, s.src, s.mnt)
    }

    /// A mount of an existing `src` (the directory `dir` holds `mnt`).
    pub fn over(
        mode: Mode,
        config: PassthroughConfig,
        dir: tempfile::TempDir,
        src: PathBuf,
        mnt: PathBuf,
    ) -> Self {
        let fs = Arc::new(PassthroughFs::new(&src, config).expect("PassthroughFs::new"));
        fs.enable_async_thread_pool(mode.pool);
        let server = Server::new_async(fs.clone());
        if mode.transport != Transport::Dev {
            require_uring();
            let config = UringConfig::default()
                .runtime(UringRuntime::from(mode.runtime))
                .one_ring(mode.transport == Transport::UringOneRing);
            let session = UringSession::mount(server, &mnt, &options("m"), config)
                .unwrap_or_else(|e| panic!("mounting over io_uring: {e}"));
            assert!(
                session.mode().uses_uring(),
                "not served over io_uring: {:?}",
                session.fallback_reason()
            );
            if mode.transport == Transport::UringOneRing {
                let t = session.transport();
                assert!(t.contains("whose ring carries the FUSE commands"), "{t}");
            }
            return Self {
                fs,
                src,
                mnt,
                mode,
                handle: None,
                thread: None,
                session: Some(session),
                dir: Some(dir),
            };
        }
        let (handle, mnt, thread) =
            serve_tasks(mode.runtime, mode.threads, server, &mnt, options("m"));
        Self {
            fs,
            src,
            mnt,
            mode,
            handle: Some(handle),
            thread: Some(thread),
            session: None,
            dir: Some(dir),
        }
    }

    /// Stops the task (it lets running requests finish, unmounts, and
    /// calls the file system's `destroy`) and waits for its thread.
    pub fn unmount(&mut self) {
        if let Some(s) = self.session.take() {
            s.stop();
            s.wait().expect("the io_uring session ended with an error");
        }
        if let Some(h) = self.handle.take() {
            h.stop();
        }
        if let Some(t) = self.thread.take() {
            let ended = test_support::wait_until(Duration::from_secs(30), || t.is_finished());
            assert!(ended, "the serving task did not end after stop");
            t.join()
                .expect("the serving thread panicked")
                .expect("serving ended with an error");
        }
        assert!(!is_mounted(&self.mnt), "still mounted after stop");
    }
}

impl Drop for AsyncMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.stop();
            let _ = s.wait();
        }
        if let Some(h) = self.handle.take() {
            h.stop();
        }
        if let Some(t) = self.thread.take() {
            if test_support::wait_until(Duration::from_secs(10), || t.is_finished()) {
                let _ = t.join();
            }
        }
        test_support::detach(&self.mnt);
        if let Some(dir) = self.dir.take() {
            test_support::remove_unless_mounted(dir, &self.mnt);
        }
    }
}
