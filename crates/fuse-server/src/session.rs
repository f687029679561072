//! The seam between a daemon and a transport: a running session behind
//! one trait object, whichever transport serves it.

use crate::notify::Notifier;
use crate::server::Server;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A mount being served by a transport (`/dev/fuse` worker threads, an
/// io_uring ring per queue, a task on an async runtime, ...).
///
/// A daemon picks the transport at run time and holds the result as a
/// `Box<dyn Session>` or `Arc<dyn Session>`.
pub trait Session: Send + Sync {
    /// A short description of the transport in use, e.g.
    /// `"/dev/fuse, 4 threads"` or `"io_uring, 2 queues, buffer pools"`.
    fn transport(&self) -> String;

    /// Where the file system is mounted.
    fn mountpoint(&self) -> &Path;

    /// The protocol engine serving the mount.
    fn server(&self) -> &Arc<Server>;

    /// Ends serving: unmounts and makes every worker return. Safe to call
    /// from any thread, more than once.
    fn stop(&self);

    /// Waits until every worker has returned (after [`Session::stop`] or an
    /// unmount from outside), and unmounts if still mounted. Returns the
    /// first worker error.
    fn wait(&self) -> io::Result<()>;

    /// A notifier for the connection, for a file system that must tell
    /// the kernel about changes no reply carries (see [`Notifier`]);
    /// `None` once the session has ended or where the transport has none.
    /// It holds the connection's descriptor: drop it when the session ends.
    fn notifier(&self) -> Option<Notifier> {
        None
    }
}
