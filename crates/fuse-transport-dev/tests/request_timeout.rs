//! Request timeouts (`FUSE_REQUEST_TIMEOUT`, protocol 7.43) on the real
//! kernel: a file system that asks for one in INIT gets it negotiated,
//! and a request its handler never answers ends in the kernel's abort of
//! the connection: the waiting client gets an error instead of hanging in
//! D state, and the session ends. Needs root (it mounts) and a kernel that
//! offers the flag (Linux 6.14+); elsewhere it fails with that reason.

mod common;

use common::{mount_session, mountpoint, require_root};
use fuse_abi::{Attr, InitFlags, ROOT_ID};
use fuse_server::{AttrReply, Context, Entry, FileSystem, InitConfig, KernelInit, Server, Session};
use std::ffi::CStr;
use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The timeout asked for, in seconds.
const TIMEOUT_SECS: u16 = 1;

/// A root directory whose LOOKUP of `stall` is never answered until
/// [`Stalling::release`] (the test's stand-in for a server that hangs).
#[derive(Default)]
struct Stalling {
    /// Whether the kernel offered `FUSE_REQUEST_TIMEOUT`.
    offered: Mutex<Option<bool>>,
    released: Mutex<bool>,
    wake: Condvar,
}

impl Stalling {
    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.wake.notify_all();
    }
}

impl FileSystem for Stalling {
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        let offered = kernel.flags.contains(InitFlags::REQUEST_TIMEOUT);
        *self.offered.lock().unwrap() = Some(offered);
        if offered {
            config.flags |= InitFlags::REQUEST_TIMEOUT;
            config.request_timeout = TIMEOUT_SECS;
        }
        Ok(())
    }

    fn lookup(&self, _ctx: &Context, _parent: u64, name: &CStr) -> io::Result<Entry> {
        if name.to_bytes() == b"stall" {
            let mut released = self.released.lock().unwrap();
            while !*released {
                released = self.wake.wait(released).unwrap();
            }
        }
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }

    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        if ino != ROOT_ID {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(AttrReply {
            attr: Attr {
                ino,
                mode: libc::S_IFDIR | 0o755,
                nlink: 2,
                ..Attr::default()
            },
            timeout: Duration::from_secs(1),
        })
    }
}

#[test]
fn an_unanswered_request_ends_in_the_kernels_abort() {
    require_root();
    let (_dir, mnt) = mountpoint();
    let fs = Arc::new(Stalling::default());
    let session = mount_session(Server::new(fs.clone()), &mnt);
    if *fs.offered.lock().unwrap() != Some(true) {
        session.stop();
        session.unmount().unwrap();
        let _ = session.wait();
        panic!(
            "this kernel doesn't offer FUSE_REQUEST_TIMEOUT, which the test needs (Linux 6.14+)"
        );
    }
    assert_eq!(
        session.server().negotiated().unwrap().request_timeout,
        TIMEOUT_SECS
    );
    // The client, on a thread of its own: it hangs if the timeout fails.
    let (tx, rx) = mpsc::channel();
    let stalled = mnt.join("stall");
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::metadata(&stalled).map(|_| ()));
    });
    // The kernel checks for expired requests every few seconds (15 at
    // most); this bound only keeps a broken kernel from hanging the test.
    let result = rx.recv_timeout(Duration::from_secs(300));
    // Whatever happened, the handler may go now (it answers a dead
    // connection) and the mount must not stay behind.
    fs.release();
    let err = match result {
        Ok(r) => r.expect_err("the stalled lookup can't have succeeded"),
        Err(e) => {
            let _ = session.unmount();
            panic!("the kernel didn't abort the stalled request: {e}");
        }
    };
    // The kernel aborts the connection: the waiter gets ECONNABORTED.
    assert_eq!(err.raw_os_error(), Some(libc::ECONNABORTED), "{err}");
    // The connection is gone: later requests fail at once.
    let later = std::fs::metadata(&mnt).unwrap_err();
    assert_eq!(later.raw_os_error(), Some(libc::ENOTCONN), "{later}");
    // The session ends by itself (the kernel dropped the connection).
    session.wait().unwrap();
    session.unmount().unwrap();
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(mnt.to_str().unwrap()),
        "the aborted mount was left behind"
    );
}
