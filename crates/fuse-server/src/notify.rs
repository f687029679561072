//! Reverse notifications: messages the server sends the kernel unasked
//! (invalidate an inode or a name, store or retrieve cache pages, wake a
//! poller, resend requests, bump the epoch, prune inodes).

use fuse_abi::{
    InitFlags, NotifyCode, NotifyDeleteOut, NotifyInvalEntryFlags, NotifyInvalEntryOut,
    NotifyInvalInodeOut, NotifyPollWakeupOut, NotifyPruneOut, NotifyRetrieveOut, NotifyStoreOut,
    OutHeader,
};
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use zerocopy::IntoBytes;

/// Where notifications go: the transport writes each one, header and body,
/// to `/dev/fuse` in one `writev`.
pub trait NotificationSink: Send + Sync {
    /// Writes one notification made of `parts`.
    fn send_notification(&self, parts: &[IoSlice<'_>]) -> io::Result<()>;
}

/// Sends notifications on a connection. Operations the kernel's protocol
/// version lacks fail with `ENOSYS` without writing anything.
pub struct Notifier {
    sink: Arc<dyn NotificationSink>,
    /// What INIT agreed on, shared with the server when it made this
    /// notifier ([`crate::Server::notifier`]): a notifier made before
    /// INIT is answered (a `FuseDevTask` serves INIT itself, after its
    /// owner took the notifier) works once it is.
    negotiated: Arc<OnceLock<crate::Negotiated>>,
    next_retrieve: AtomicU64,
}

fn enosys(what: &str, minor: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} needs a newer FUSE protocol than 7.{minor}"),
    )
}

impl Notifier {
    /// A notifier writing to `sink`, for a connection that negotiated
    /// `negotiated` (`None`: not initialized yet, every call fails).
    pub fn new(sink: Arc<dyn NotificationSink>, negotiated: Option<crate::Negotiated>) -> Self {
        let cell = OnceLock::new();
        if let Some(n) = negotiated {
            let _ = cell.set(n);
        }
        Self::following(sink, Arc::new(cell))
    }

    /// A notifier writing to `sink` whose protocol is what `negotiated`
    /// holds when a notification is sent (the server's own cell).
    pub(crate) fn following(
        sink: Arc<dyn NotificationSink>,
        negotiated: Arc<OnceLock<crate::Negotiated>>,
    ) -> Self {
        Self {
            sink,
            negotiated,
            next_retrieve: AtomicU64::new(1),
        }
    }

    /// The protocol minor version the connection negotiated (`None`
    /// before INIT), which says what notifications the kernel takes.
    pub fn protocol_minor(&self) -> Option<u32> {
        self.negotiated.get().map(|n| n.minor)
    }

    fn require(&self, what: &str, minor: u32) -> io::Result<&crate::Negotiated> {
        let n = self.negotiated.get().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "connection not initialized")
        })?;
        if n.minor < minor {
            return Err(enosys(what, n.minor));
        }
        Ok(n)
    }

    fn send(&self, code: NotifyCode, body: &[&[u8]]) -> io::Result<()> {
        let len = size_of::<OutHeader>() + body.iter().map(|b| b.len()).sum::<usize>();
        let header = OutHeader {
            len: len as u32,
            error: code as i32,
            unique: 0,
        };
        let mut parts = Vec::with_capacity(body.len() + 1);
        parts.push(IoSlice::new(header.as_bytes()));
        parts.extend(body.iter().map(|b| IoSlice::new(b)));
        self.sink.send_notification(&parts)
    }

    /// Invalidates cached data of `ino` from `offset` for `len` bytes
    /// (`len` 0: to the end; `offset` negative: only the attributes).
    pub fn inval_inode(&self, ino: u64, offset: i64, len: i64) -> io::Result<()> {
        self.require("inval_inode", 12)?;
        let out = NotifyInvalInodeOut {
            ino,
            off: offset,
            len,
        };
        self.send(NotifyCode::InvalInode, &[out.as_bytes()])
    }

    /// Invalidates the name `name` in directory `parent`; with
    /// `expire_only` the entry is only marked expired (needs
    /// `FUSE_HAS_EXPIRE_ONLY`).
    pub fn inval_entry(&self, parent: u64, name: &[u8], expire_only: bool) -> io::Result<()> {
        let n = self.require("inval_entry", 12)?;
        if expire_only && !n.kernel.flags.contains(InitFlags::HAS_EXPIRE_ONLY) {
            return Err(enosys("inval_entry with expire_only", n.minor));
        }
        let flags = if expire_only {
            NotifyInvalEntryFlags::EXPIRE_ONLY
        } else {
            NotifyInvalEntryFlags::empty()
        };
        let out = NotifyInvalEntryOut {
            parent,
            namelen: name_len(name)?,
            flags: flags.bits(),
        };
        self.send(NotifyCode::InvalEntry, &[out.as_bytes(), name, b"\0"])
    }

    /// Tells the kernel that `name` in `parent`, node `child`, was deleted.
    pub fn delete(&self, parent: u64, child: u64, name: &[u8]) -> io::Result<()> {
        self.require("delete", 18)?;
        let out = NotifyDeleteOut {
            parent,
            child,
            namelen: name_len(name)?,
            padding: 0,
        };
        self.send(NotifyCode::Delete, &[out.as_bytes(), name, b"\0"])
    }

    /// Stores `data` in the page cache of `ino` at `offset`.
    pub fn store(&self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.require("store", 15)?;
        let size =
            u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let out = NotifyStoreOut {
            nodeid: ino,
            offset,
            size,
            padding: 0,
        };
        self.send(NotifyCode::Store, &[out.as_bytes(), data])
    }

    /// Asks the kernel for `size` bytes of the page cache of `ino` at
    /// `offset`; the answer arrives as a NOTIFY_REPLY request whose
    /// `unique` is the returned id ([`crate::FileSystem::retrieve_reply`]).
    pub fn retrieve(&self, ino: u64, offset: u64, size: u32) -> io::Result<u64> {
        self.require("retrieve", 15)?;
        let notify_unique = self.next_retrieve.fetch_add(1, Ordering::Relaxed);
        let out = NotifyRetrieveOut {
            notify_unique,
            nodeid: ino,
            offset,
            size,
            padding: 0,
        };
        self.send(NotifyCode::Retrieve, &[out.as_bytes()])?;
        Ok(notify_unique)
    }

    /// Wakes the poller that registered kernel handle `kh`.
    pub fn poll_wakeup(&self, kh: u64) -> io::Result<()> {
        self.require("poll", 11)?;
        self.send(NotifyCode::Poll, &[NotifyPollWakeupOut { kh }.as_bytes()])
    }

    /// Asks the kernel to resend every request it is waiting on (needs
    /// `FUSE_HAS_RESEND`).
    pub fn resend(&self) -> io::Result<()> {
        let n = self.require("resend", 40)?;
        if !n.kernel.flags.contains(InitFlags::HAS_RESEND) {
            return Err(enosys("resend", n.minor));
        }
        self.send(NotifyCode::Resend, &[])
    }

    /// Increments the connection's epoch, invalidating every cached name.
    pub fn inc_epoch(&self) -> io::Result<()> {
        self.require("inc_epoch", 44)?;
        self.send(NotifyCode::IncEpoch, &[])
    }

    /// Asks the kernel to drop unused cached inodes among `nodeids`.
    pub fn prune(&self, nodeids: &[u64]) -> io::Result<()> {
        self.require("prune", 45)?;
        let count =
            u32::try_from(nodeids.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let out = NotifyPruneOut {
            count,
            padding: 0,
            spare: 0,
        };
        self.send(NotifyCode::Prune, &[out.as_bytes(), nodeids.as_bytes()])
    }
}

fn name_len(name: &[u8]) -> io::Result<u32> {
    if name.is_empty() || name.contains(&0) || name.len() > 1024 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(name.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::{negotiate, InitConfig, InitOutcome, KernelInit};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Capture(Mutex<Vec<Vec<u8>>>);

    impl NotificationSink for Capture {
        fn send_notification(&self, parts: &[IoSlice<'_>]) -> io::Result<()> {
            self.0
                .lock()
                .unwrap()
                .push(parts.iter().flat_map(|p| p.iter().copied()).collect());
            Ok(())
        }
    }

    fn notifier(minor: u32, flags: InitFlags) -> (Arc<Capture>, Notifier) {
        let k = KernelInit {
            major: 7,
            minor,
            max_readahead: 0,
            flags,
            max_pages_limit: 256,
        };
        let InitOutcome::Agreed { negotiated, .. } = negotiate(&k, &InitConfig::default()) else {
            panic!()
        };
        let cap = Arc::new(Capture::default());
        (cap.clone(), Notifier::new(cap, Some(negotiated)))
    }

    #[test]
    fn inval_entry_is_header_struct_name_nul() {
        let (cap, n) = notifier(46, InitFlags::INIT_EXT);
        n.inval_entry(1, b"abc", false).unwrap();
        let msg = cap.0.lock().unwrap().pop().unwrap();
        assert_eq!(msg.len(), 16 + 16 + 4);
        assert_eq!(u32::from_ne_bytes(msg[0..4].try_into().unwrap()), 36);
        assert_eq!(
            i32::from_ne_bytes(msg[4..8].try_into().unwrap()),
            NotifyCode::InvalEntry as i32
        );
        assert_eq!(&msg[32..], b"abc\0");
        assert!(
            n.inval_entry(1, b"abc", true).is_err(),
            "expire_only needs the kernel flag"
        );
        assert!(n.inval_entry(1, b"a/\0b", false).is_err());
    }

    #[test]
    fn version_gates() {
        let (_, n) = notifier(43, InitFlags::INIT_EXT);
        assert!(n.inc_epoch().is_err());
        assert!(n.prune(&[2, 3]).is_err());
        assert!(n.resend().is_err());
        let (cap, n) = notifier(46, InitFlags::INIT_EXT | InitFlags::HAS_RESEND);
        n.inc_epoch().unwrap();
        n.prune(&[2, 3]).unwrap();
        n.resend().unwrap();
        let msgs = cap.0.lock().unwrap();
        assert_eq!(msgs[1].len(), 16 + 16 + 16);
        assert_eq!(msgs[2].len(), 16);
        let (_, n) = notifier(46, InitFlags::INIT_EXT);
        assert!(n.resend().is_err(), "resend needs FUSE_HAS_RESEND");
        assert!(Notifier::new(Arc::new(Capture::default()), None)
            .inval_inode(1, 0, 0)
            .is_err());
    }

    #[test]
    fn retrieve_ids_increase() {
        let (_, n) = notifier(46, InitFlags::INIT_EXT);
        let a = n.retrieve(5, 0, 4096).unwrap();
        let b = n.retrieve(5, 0, 4096).unwrap();
        assert!(b > a);
    }
}
