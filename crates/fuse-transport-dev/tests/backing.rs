//! Backing files (kernel passthrough) through both `/dev/fuse` transports:
//! the session installs a `BackingFiles` registry before INIT, the file
//! system gets it before its `init`, a `BackingId` registered with it
//! serves READ in the kernel, and after the session the registry answers
//! `ENOTCONN` (it never keeps the connection alive). Needs real root
//! (`CAP_SYS_ADMIN` in the initial user namespace).

mod common;

use common::{mount_session, mount_task, mountpoint, require_root, run_local};
use fuse_abi::{Attr, FopenFlags, InitFlags, Opcode, ROOT_ID};
use fuse_server::{
    AttrReply, BackingFiles, BackingId, Context, Entry, FileSystem, InitConfig, KernelInit,
    OpenArgs, Opened, ReadArgs, ReleaseArgs, Server, Session, ZeroCopyWriter,
};
use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const DATA: &[u8] = b"served by the kernel from the backing file\n";

/// One file, `f`, whose opens are passed through to `backing`.
struct OneFile {
    backing: PathBuf,
    files: OnceLock<Arc<dyn BackingFiles>>,
    /// Whether `attach_backing_files` came before `init`.
    attached_before_init: Mutex<Option<bool>>,
    ids: Mutex<Vec<BackingId>>,
}

impl OneFile {
    fn new(backing: PathBuf) -> Self {
        std::fs::write(&backing, DATA).unwrap();
        Self {
            backing,
            files: OnceLock::new(),
            attached_before_init: Mutex::new(None),
            ids: Mutex::new(Vec::new()),
        }
    }
}

fn attr(ino: u64) -> Attr {
    Attr {
        ino,
        mode: if ino == ROOT_ID {
            libc::S_IFDIR | 0o755
        } else {
            libc::S_IFREG | 0o644
        },
        nlink: 1,
        size: if ino == ROOT_ID { 0 } else { DATA.len() as u64 },
        blksize: 4096,
        ..Attr::default()
    }
}

impl FileSystem for OneFile {
    fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {
        let _ = self.files.set(files);
    }

    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        *self.attached_before_init.lock().unwrap() = Some(self.files.get().is_some());
        if kernel.flags.contains(InitFlags::PASSTHROUGH) {
            config.flags |= InitFlags::PASSTHROUGH;
            config.max_stack_depth = 1;
        }
        Ok(())
    }

    fn lookup(&self, _ctx: &Context, _parent: u64, name: &CStr) -> io::Result<Entry> {
        if name.to_bytes() != b"f" {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(Entry {
            nodeid: 2,
            attr: attr(2),
            ..Entry::default()
        })
    }

    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: attr(ino),
            timeout: Duration::ZERO,
        })
    }

    fn open(&self, _ctx: &Context, _ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        let files = self.files.get().expect("registry attached");
        let file = std::fs::File::open(&self.backing)?;
        let mut ids = self.ids.lock().unwrap();
        if ids.is_empty() {
            ids.push(BackingId::open(files, file.as_fd())?);
        }
        Ok(Opened {
            fh: 1,
            flags: FopenFlags::PASSTHROUGH,
            backing_id: ids[0].id(),
        })
    }

    fn read(
        &self,
        _ctx: &Context,
        _ino: u64,
        _args: &ReadArgs,
        _out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        // Passthrough: never called.
        Err(io::Error::from_raw_os_error(libc::EIO))
    }

    fn release(&self, _ctx: &Context, _ino: u64, _args: &ReleaseArgs) -> io::Result<()> {
        Ok(())
    }
}

fn require_real_root() {
    require_root();
    assert!(
        test_support::in_initial_user_namespace(),
        "kernel passthrough needs CAP_SYS_ADMIN in the initial user namespace (/proc/self/uid_map: \
         {:?})",
        std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default()
    );
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, mnt) = mountpoint();
    let backing = dir.path().join("backing");
    (dir, mnt, backing)
}

/// Reads `f` a few times; the registry and the id are checked afterwards.
fn read_through(mnt: &Path) {
    for _ in 0..3 {
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), DATA);
    }
}

fn check_after_session(fs: &OneFile) {
    assert_eq!(*fs.attached_before_init.lock().unwrap(), Some(true));
    // The session is gone: the registry doesn't keep the connection.
    let files = fs.files.get().unwrap();
    let file = std::fs::File::open(&fs.backing).unwrap();
    let err = files.open_backing(file.as_fd()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotConnected);
    let id = fs.ids.lock().unwrap().pop().unwrap();
    assert_eq!(id.close().unwrap_err().kind(), io::ErrorKind::NotConnected);
}

#[test]
fn dev_session_registers_backing_files_needs_root() {
    require_real_root();
    let (_dir, mnt, backing) = dirs();
    let fs = Arc::new(OneFile::new(backing));
    let session = mount_session(Server::new(fs.clone()), &mnt);
    assert!(session.server().backing_files().is_some());
    assert!(session.server().negotiated().unwrap().passthrough());
    read_through(&mnt);
    assert_eq!(session.server().counters().get(Opcode::Read), 0);
    assert!(session.server().counters().get(Opcode::Open) >= 3);
    // A second id for the same file, closed explicitly while connected.
    let files = fs.files.get().unwrap().clone();
    let file = std::fs::File::open(&fs.backing).unwrap();
    let extra = BackingId::open(&files, file.as_fd()).unwrap();
    assert!(extra.id() > fs.ids.lock().unwrap()[0].id());
    extra.close().unwrap();
    session.stop();
    session.wait().unwrap();
    drop(session);
    check_after_session(&fs);
}

#[test]
fn fuse_dev_task_registers_backing_files_needs_root() {
    require_real_root();
    let (_dir, mnt, backing) = dirs();
    let fs = Arc::new(OneFile::new(backing));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    run_local(&runtime, async {
        let task = mount_task(Server::new(fs.clone()), &mnt);
        let server = task.server().clone();
        assert!(server.backing_files().is_some());
        let handle = task.handle();
        let running = tokio::task::spawn_local(task.run());
        let m = mnt.clone();
        tokio::task::spawn_blocking(move || read_through(&m))
            .await
            .unwrap();
        assert!(server.negotiated().unwrap().passthrough());
        assert_eq!(server.counters().get(Opcode::Read), 0);
        handle.stop();
        running.await.unwrap().unwrap();
    });
    drop(runtime);
    assert!(!fuse_transport_dev::is_fuse_mount(&mnt).unwrap());
    check_after_session(&fs);
}
