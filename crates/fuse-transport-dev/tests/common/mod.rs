//! A tiny read-only file system shared by the serving tests: a root
//! directory holding one file, `hello`.
#![allow(dead_code)]

use fuse_abi::{Attr, FopenFlags, ROOT_ID};
use fuse_server::*;
use std::ffi::CStr;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub const CONTENT: &[u8] = b"hello, world\n";

#[derive(Default)]
pub struct Hello {
    pub lookups: AtomicU64,
    pub forgets: AtomicU64,
    /// `destroy` calls (the end of the connection).
    pub destroys: AtomicU64,
    /// The threads that answered OPEN.
    pub open_threads: std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>,
}

fn attr(ino: u64) -> Attr {
    let (mode, size, nlink) = if ino == ROOT_ID {
        (libc::S_IFDIR | 0o755, 0, 2)
    } else {
        (libc::S_IFREG | 0o644, CONTENT.len() as u64, 1)
    };
    Attr {
        ino,
        mode,
        size,
        nlink,
        blksize: 4096,
        ..Attr::default()
    }
}

impl FileSystem for Hello {
    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        if parent != ROOT_ID || name.to_bytes() != b"hello" {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.lookups.fetch_add(1, Ordering::Relaxed);
        Ok(Entry {
            nodeid: 2,
            generation: 1,
            attr: attr(2),
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
        })
    }

    fn destroy(&self) {
        self.destroys.fetch_add(1, Ordering::Relaxed);
    }

    fn forget(&self, _ctx: &Context, _ino: u64, nlookup: u64) {
        self.forgets.fetch_add(nlookup, Ordering::Relaxed);
    }

    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: attr(ino),
            timeout: Duration::from_secs(1),
        })
    }

    fn open(&self, _ctx: &Context, _ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        self.open_threads
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        Ok(Opened {
            fh: 7,
            flags: FopenFlags::KEEP_CACHE,
            backing_id: 0,
        })
    }

    fn read(
        &self,
        _ctx: &Context,
        _ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        out.write_all(&CONTENT[args.range_in(CONTENT.len())])
    }

    fn release(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }

    fn opendir(&self, _ctx: &Context, _ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        Ok(Opened::default())
    }

    fn readdir(
        &self,
        _ctx: &Context,
        _ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        let entries: [(u64, u32, &[u8]); 3] = [
            (1, libc::DT_DIR as u32, b"."),
            (1, libc::DT_DIR as u32, b".."),
            (2, libc::DT_REG as u32, b"hello"),
        ];
        for (i, (ino, dtype, name)) in entries.iter().enumerate().skip(args.offset as usize) {
            if !out.add(*ino, i as u64 + 1, *dtype, name) {
                break;
            }
        }
        Ok(())
    }

    fn releasedir(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }
}

pub use test_support::require_root;

use fuse_transport_dev::{DevSession, FuseDevTask, MountOptions, SessionConfig, TaskConfig};
use std::path::{Path, PathBuf};

/// A fresh temporary directory holding an empty mountpoint, `mnt`.
pub fn mountpoint() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("creating the mountpoint");
    (dir, mnt)
}

/// `server` mounted at `mnt` by a [`DevSession`] with the default options
/// and configuration; fails the test, with the error, if it can't be.
pub fn mount_session(server: Server, mnt: &Path) -> DevSession {
    DevSession::mount(
        server,
        mnt,
        &MountOptions::default(),
        SessionConfig::default(),
    )
    .unwrap_or_else(|e| panic!("mounting a session at {}: {e}", mnt.display()))
}

/// `server` mounted at `mnt` by a [`FuseDevTask`] with the default options
/// and configuration; fails the test, with the error, if it can't be.
pub fn mount_task(server: Server, mnt: &Path) -> FuseDevTask {
    FuseDevTask::mount(server, mnt, &MountOptions::default(), TaskConfig::default())
        .unwrap_or_else(|e| panic!("mounting a task at {}: {e}", mnt.display()))
}

/// A current-thread tokio runtime with its I/O and timers.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
}

/// Runs `work` to its end on `runtime` inside a `LocalSet` (a task's
/// request futures are local to its thread).
pub fn run_local<F: std::future::Future>(runtime: &tokio::runtime::Runtime, work: F) -> F::Output {
    tokio::task::LocalSet::new().block_on(runtime, work)
}
