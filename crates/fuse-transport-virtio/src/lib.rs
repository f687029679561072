//! virtio-fs: a vhost-user-fs device backend that serves a virtual
//! machine's FUSE requests with a [`fuse_server::Server`], the same
//! dispatch and file systems as the `/dev/fuse` and io_uring transports.
//!
//! A front end (QEMU's `vhost-user-fs-pci`, cloud-hypervisor's `--fs`)
//! connects to a Unix socket and shares the guest's memory; the guest's
//! virtio-fs driver puts each FUSE request in a descriptor chain of a
//! request queue, FORGETs on the hiprio queue. A thread per queue pops
//! the chains and hands each to [`fuse_server::Server::handle`] as a
//! [`ChainTransaction`]: the request's headers are copied out of guest
//! memory and parsed from the copy; a WRITE's data goes from the guest's
//! pages to the backing file in one `pwritev`, a READ's from the file
//! into the guest's pages in one `preadv` (up to 1024 buffers a call), no
//! bounce buffer between. A request that may wait for as long as another
//! process decides (SETLKW) is served on a thread of its own, so the
//! holder's unlock, which comes through the same queue, is served
//! meanwhile.
//!
//! Not offered: the DAX window (the device has no shared memory region,
//! so a guest's `-o dax` mount is refused by its driver), migration
//! (no dirty-page log), packed queues.
//!
//! ```no_run
//! use fuse_server::{FileSystem, Server};
//! use fuse_transport_virtio::{VirtioConfig, VirtioServe};
//! use std::sync::Arc;
//!
//! struct Empty;
//! impl FileSystem for Empty {}
//!
//! let serve = VirtioServe::bind("/tmp/vfs.sock".as_ref(), VirtioConfig::default()).unwrap();
//! // One front-end connection; `serve.run` would take the next ones too.
//! serve
//!     .serve_one(Arc::new(|| Ok(Arc::new(Server::new(Arc::new(Empty))))))
//!     .unwrap();
//! ```

#![deny(missing_docs)]

#[cfg(feature = "async")]
mod async_queue;
mod backend;
pub mod chain;
pub mod guest;

pub use backend::{
    DataCounters, ServerFactory, VirtioConfig, VirtioFsBackend, VirtioRuntime, TAG_LEN,
};
pub use chain::{Buffers, ChainTransaction};

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

/// Errors of the vhost-user socket and connection.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket could not be made.
    #[error("vhost-user socket {path}: {source}")]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// What failed.
        source: vhost::vhost_user::Error,
    },
    /// The connection failed (not a disconnect).
    #[error("vhost-user connection: {0}")]
    Connection(String),
    /// The backend could not be made (bad configuration, no server).
    #[error("vhost-user-fs backend: {0}")]
    Backend(#[from] io::Error),
}

/// A vhost-user-fs socket, serving one front-end connection after
/// another until [`VirtioServe::stop`].
pub struct VirtioServe {
    path: PathBuf,
    config: VirtioConfig,
    listener: Mutex<Listener>,
    /// The listener's descriptor, for [`VirtioServe::stop`] to shut down
    /// while a thread holds the listener in `accept`.
    listener_fd: std::os::fd::RawFd,
    stopped: AtomicBool,
    current: Mutex<Option<ShutdownHandle>>,
}

impl VirtioServe {
    /// Listens at `path` (an old socket file there is replaced).
    pub fn bind(path: &Path, config: VirtioConfig) -> Result<Self, Error> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let listener = Listener::new(path, true).map_err(|source| Error::Socket {
            path: path.to_owned(),
            source,
        })?;
        let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        Ok(Self {
            path: path.to_owned(),
            config,
            listener: Mutex::new(listener),
            listener_fd,
            stopped: AtomicBool::new(false),
            current: Mutex::new(None),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration.
    pub fn config(&self) -> &VirtioConfig {
        &self.config
    }

    /// Waits for a front end, serves it until it disconnects (the VM shut
    /// down, or its vhost-user device went away), then ends the guest
    /// session (the file system's `destroy`). A guest that reboots while
    /// connected starts a new session with a new server from `factory`.
    pub fn serve_one(&self, factory: Arc<ServerFactory>) -> Result<(), Error> {
        let backend = Arc::new(VirtioFsBackend::new(self.config.clone(), factory)?);
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let mut daemon = VhostUserDaemon::new("vhost-user-fs".into(), backend.clone(), mem)
            .map_err(|e| Error::Connection(e.to_string()))?;
        {
            let mut listener = self.listener.lock().unwrap_or_else(|e| e.into_inner());
            daemon
                .start(&mut listener)
                .map_err(|e| Error::Connection(e.to_string()))?;
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
        if self.stopped.load(Ordering::Acquire) {
            // The connection that woke the accept up (see `stop`), or a
            // front end too late: dropped unserved.
            daemon.request_shutdown();
        } else {
            tracing::info!(socket = %self.path.display(), "front end connected");
        }
        let result = daemon.wait();
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // The queue threads end with the connection.
        for handler in daemon.get_epoll_handlers() {
            handler.send_exit_event();
        }
        backend.finish();
        match result {
            Ok(()) => {
                tracing::info!("front end disconnected");
                Ok(())
            }
            Err(e) if is_disconnect(&e) => {
                tracing::info!("front end disconnected ({e})");
                Ok(())
            }
            Err(e) if self.stopped.load(Ordering::Acquire) => {
                tracing::debug!("connection ended by stop: {e}");
                Ok(())
            }
            Err(e) => Err(Error::Connection(e.to_string())),
        }
    }

    /// Serves front ends one after the other (a VM restarted, QEMU
    /// reconnecting) until [`VirtioServe::stop`]. A connection that fails
    /// is logged and the next one awaited.
    pub fn run(&self, factory: Arc<ServerFactory>) -> Result<(), Error> {
        while !self.stopped.load(Ordering::Acquire) {
            match self.serve_one(factory.clone()) {
                Ok(()) => {}
                Err(Error::Backend(e)) => return Err(Error::Backend(e)),
                Err(e) if self.stopped.load(Ordering::Acquire) => {
                    tracing::debug!("after stop: {e}")
                }
                Err(e) => tracing::warn!("{e}; waiting for the next front end"),
            }
        }
        Ok(())
    }

    /// Ends serving: drops the current connection and makes a waiting
    /// [`VirtioServe::run`] or [`VirtioServe::serve_one`] return. Safe from
    /// any thread, more than once.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(h) = &*self.current.lock().unwrap_or_else(|e| e.into_inner()) {
            h.shutdown();
        }
        // Wake a thread blocked in accept: it sees the flag and returns.
        // Shutting the listening socket down makes accept fail (EINVAL)
        // where the socket's path can't be reached (a process confined in a
        // mount namespace of its own); the connect does it elsewhere.
        // SAFETY: the listener this descriptor belongs to lives as long as
        // `self`.
        unsafe { libc::shutdown(self.listener_fd, libc::SHUT_RDWR) };
        if let Ok(s) = UnixStream::connect(&self.path) {
            drop(s);
        }
    }
}

impl Drop for VirtioServe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The front end went away: the normal end of a connection.
fn is_disconnect(e: &vhost_user_backend::Error) -> bool {
    use vhost::vhost_user::Error as E;
    matches!(
        e,
        vhost_user_backend::Error::HandleRequest(
            E::Disconnected | E::PartialMessage | E::SocketBroken(_)
        )
    )
}
