//! Answering the kernel's INIT: during mount(2) where the kernel offers
//! synchronous INIT, on the old path after it elsewhere. Apart from the
//! session because it runs before any worker exists, and `FuseDevTask`
//! and the supervisor use it too.

use super::{install_wake_handler, request_opcode, SessionConfig, SessionError};
use crate::backing::DevBackingFiles;
use crate::dev::{self, DevTransaction};
use crate::mount::{InitAnswer, InitMode, Mount, MountOptions, SyncInit};
use fuse_server::{AlignedBuf, Server};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
// Only the documentation's links name them.
#[cfg(doc)]
use {super::DevSession, crate::mount::MountError};

/// Mounts `mountpoint` with synchronous INIT where the kernel offers it,
/// INIT answered during mount(2) by `server`, which is then dropped: for
/// a program whose serving file system can't exist yet when it mounts (a
/// daemon that mounts, then confines itself, then opens its source).
/// `server` stands in for the serving one: built the same way, so that it
/// answers INIT as that one would. Returns the mount and, if INIT was
/// answered, what it settled, for the serving server to take up with
/// [`DevSession::from_initialized_mount`] or
/// `FuseDevTask::from_initialized_mount`. `None`: a kernel without
/// synchronous INIT, or a mount through `fusermount3`; INIT then waits on
/// the mount's descriptor, for [`DevSession::from_mount`] or
/// `FuseDevTask::from_mount`. An INIT `server` refuses fails the mount
/// ([`MountError::InitRefused`]). `wake_signal` is as in
/// [`SessionConfig::wake_signal`]; its do-nothing handler is installed.
pub fn init_during_mount(
    server: Server,
    mountpoint: &Path,
    options: &MountOptions,
    wake_signal: i32,
) -> Result<(Mount, Option<fuse_server::Negotiated>), SessionError> {
    install_wake_handler(wake_signal);
    let config = SessionConfig::default().wake_signal(wake_signal);
    let (mount, server, _master) =
        mount_answering_init(server, mountpoint, options, &config, false)?;
    Ok((mount, server.negotiated().copied()))
}

/// Keeps `fd` as the session descriptor that `server`'s backing files
/// (kernel passthrough) are registered on. The registry holds it weakly,
/// so it never outlives the session: the caller keeps what this returns.
pub(crate) fn keep_as_master(server: &Server, fd: OwnedFd) -> Arc<OwnedFd> {
    let master = Arc::new(fd);
    server.set_backing_files(Arc::new(DevBackingFiles::new(Arc::downgrade(&master))));
    master
}

/// Mounts with synchronous INIT where the kernel offers it, answering INIT
/// with `server` during mount(2), or on the old path after it on this
/// thread if `answer_pending_here` (else the caller does): the mount, the server
/// (its backing-file registry installed) and the session descriptor the
/// registry holds (weakly: the caller keeps it).
pub(crate) fn mount_answering_init(
    server: Server,
    mountpoint: &Path,
    options: &MountOptions,
    config: &SessionConfig,
    answer_pending_here: bool,
) -> Result<(Mount, Arc<Server>, Arc<OwnedFd>), SessionError> {
    let server = Arc::new(server);
    // The descriptor backing files are registered on (the registry holds
    // it weakly and is set once): made by whoever answers INIT, kept as
    // the session's.
    let kept: Mutex<Option<Arc<OwnedFd>>> = Mutex::new(None);
    let keep = |fd: BorrowedFd<'_>| -> io::Result<Arc<OwnedFd>> {
        let master = keep_as_master(&server, fd.try_clone_to_owned()?);
        *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(master.clone());
        Ok(master)
    };
    let answer = |fd: BorrowedFd<'_>, stop: &AtomicBool| -> io::Result<InitAnswer> {
        // Registered once a request came: only then is this descriptor a
        // connection (mount(2) may still fail, and fall back to
        // fusermount3's descriptor).
        let mut registered = false;
        let mut on_request = || -> io::Result<()> {
            if !registered {
                keep(fd)?;
                registered = true;
            }
            Ok(())
        };
        serve_init_until(&server, fd, Some((stop, &mut on_request))).map_err(|e| match e {
            SessionError::Init(e) => e,
            other => io::Error::other(other.to_string()),
        })
    };
    let init = SyncInit {
        answer: &answer,
        wake_signal: config.wake_signal,
    };
    let (mount, mode) = Mount::new_with_sync_init(mountpoint, options, &init)?;
    let master = match mode {
        InitMode::Answered => kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                SessionError::Init(io::Error::other("INIT answered on no descriptor"))
            })?,
        InitMode::Pending => {
            let master = keep(mount.dev_fd()).map_err(SessionError::Init)?;
            if answer_pending_here {
                serve_init(&server, master.as_fd())?;
            }
            master
        }
    };
    if mode == InitMode::Answered {
        tracing::debug!(
            mountpoint = %mount.mountpoint().display(),
            "INIT answered during mount(2) (synchronous INIT)"
        );
    }
    Ok((mount, server, master))
}

/// Reads and answers requests on `fd` until INIT is done.
pub(crate) fn serve_init(server: &Server, fd: BorrowedFd<'_>) -> Result<(), SessionError> {
    serve_init_until(server, fd, None).map(drop)
}

/// Called before each request is handled.
type OnRequest<'a> = &'a mut dyn FnMut() -> io::Result<()>;

/// [`serve_init`], returning early (with an error) once `stop` is set and
/// a read is interrupted.
fn serve_init_until(
    server: &Server,
    fd: BorrowedFd<'_>,
    mut stop: Option<(&AtomicBool, OnRequest<'_>)>,
) -> Result<InitAnswer, SessionError> {
    let default = fuse_server::InitConfig::default();
    let size = (default.max_write as usize + 2 * AlignedBuf::ALIGN).max(fuse_abi::MIN_READ_BUFFER);
    let mut request = AlignedBuf::new(size).map_err(SessionError::Init)?;
    let mut reply = AlignedBuf::new(AlignedBuf::ALIGN).map_err(SessionError::Init)?;
    while server.negotiated().is_none() {
        let n = match dev::read_request(fd, &mut request) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::ENOENT)
                ) =>
            {
                if stop
                    .as_ref()
                    .is_some_and(|(s, _)| s.load(Ordering::Acquire))
                {
                    return Err(SessionError::Init(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "mount(2) ended before INIT",
                    )));
                }
                continue;
            }
            Err(e) => return Err(SessionError::Init(e)),
        };
        if let Some((_, on_request)) = stop.as_mut() {
            // Not fatal: mount(2) waits (uninterruptibly) for this answer.
            if let Err(e) = on_request() {
                tracing::warn!("no backing files on this connection: {e}");
            }
        }
        let mut tx = Noting {
            tx: DevTransaction {
                fd,
                request: &request[..n],
                reply: &mut reply,
            },
            error: 0,
        };
        server.handle(&mut tx).map_err(SessionError::Init)?;
        // During mount(2) a refused INIT ends it: the kernel fails the
        // mount, and nothing follows on this descriptor.
        if stop.is_some()
            && request_opcode(&request[..n]) == fuse_abi::Opcode::Init as u32
            && server.negotiated().is_none()
            && tx.error < 0
        {
            return Ok(InitAnswer::Refused(io::Error::from_raw_os_error(-tx.error)));
        }
    }
    Ok(InitAnswer::Accepted)
}

/// A [`DevTransaction`] that notes the error its reply carried.
struct Noting<'a> {
    tx: DevTransaction<'a>,
    error: i32,
}

impl fuse_server::Transaction for Noting<'_> {
    fn request(&self) -> fuse_server::RawRequest<'_> {
        self.tx.request()
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        self.tx.reply_buffer()
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        self.error = error;
        self.tx.send_reply(unique, error, body_len)
    }
}
