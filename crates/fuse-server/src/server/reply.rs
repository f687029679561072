//! Reply helpers: writing a reply's header and body into the
//! transaction's memory and sending it, and the replies that do more than
//! copy a struct (entries, opens, creates, READDIRPLUS, which account for
//! the lookups and opens the kernel may never see).
//!
//! Apart from `server.rs` and `dispatch.rs` because every operation's
//! arm ends in one of them.

use super::{errno_of, Outcome, Server, Transaction};
use crate::args::*;
use crate::recovery;
use crate::types::*;
use fuse_abi::{AttrOut, FopenFlags, GetxattrOut};
use std::io;
use zerocopy::{Immutable, IntoBytes};

impl Server {
    pub(super) fn send(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        error: i32,
        len: usize,
    ) -> io::Result<Outcome> {
        if self.journal.get().is_some() && !recovery::entries_saved() {
            recovery::save_reply(error, &tx.reply_buffer()[..len]);
        }
        match tx.send_reply(unique, error, len) {
            Ok(()) => Ok(Outcome::Replied),
            // ENOENT: the kernel no longer waits for this request (interrupted).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                tracing::debug!(unique, "reply not delivered: request gone");
                Ok(Outcome::ReplyNotDelivered)
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn reply_error(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        errno: i32,
    ) -> io::Result<Outcome> {
        self.send(tx, unique, -errno, 0)
    }

    /// A reply whose body (of `len` bytes) is already in the reply buffer.
    pub(super) fn reply_result(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        r: io::Result<usize>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(len) => self.send(tx, unique, 0, len),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    pub(super) fn reply_parts(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        parts: &[&[u8]],
    ) -> io::Result<Outcome> {
        let buf = tx.reply_buffer();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > buf.len() {
            tracing::warn!(
                unique,
                total,
                capacity = buf.len(),
                "reply larger than the reply buffer"
            );
            return self.reply_error(tx, unique, libc::EIO);
        }
        let mut at = 0;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.send(tx, unique, 0, total)
    }

    pub(super) fn reply_struct<T: IntoBytes + Immutable>(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        r: io::Result<T>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(value) => self.reply_parts(tx, unique, &[value.as_bytes()]),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    pub(super) fn reply_bytes(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        r: io::Result<Vec<u8>>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(data) => self.reply_parts(tx, unique, &[&data]),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    pub(super) fn reply_xattr(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        size: u32,
        r: io::Result<XattrReply>,
    ) -> io::Result<Outcome> {
        match r {
            Ok(XattrReply::Size(n)) => self.reply_struct(
                tx,
                unique,
                Ok(GetxattrOut {
                    size: n,
                    padding: 0,
                }),
            ),
            Ok(XattrReply::Data(data)) if size == 0 => self.reply_struct(
                tx,
                unique,
                Ok(GetxattrOut {
                    size: data.len() as u32,
                    padding: 0,
                }),
            ),
            Ok(XattrReply::Data(data)) if data.len() > size as usize => {
                self.reply_error(tx, unique, libc::ERANGE)
            }
            Ok(XattrReply::Data(data)) => self.reply_parts(tx, unique, &[&data]),
            Err(e) => self.reply_error(tx, unique, errno_of(&e)),
        }
    }

    /// Replies with an entry; if the kernel never gets it, the lookup
    /// reference it carried is dropped at once.
    pub(super) async fn reply_entry(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<Entry>,
    ) -> io::Result<Outcome> {
        let entry = match r {
            Ok(entry) => entry,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        let outcome = self.reply_parts(tx, ctx.unique, &[entry.to_entry_out().as_bytes()]);
        if !matches!(outcome, Ok(Outcome::Replied)) && entry.nodeid != 0 {
            let _ = self.fs.forget(ctx, entry.nodeid, 1).await;
        }
        outcome
    }

    /// Replies with an open handle; if the kernel never gets it, the handle
    /// is released at once.
    pub(super) async fn reply_open(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<Opened>,
        dir: bool,
    ) -> io::Result<Outcome> {
        let opened = match r {
            Ok(o) => o,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        let open_out = zero_copy_checked(tx, &opened).to_open_out();
        let outcome = self.reply_parts(tx, ctx.unique, &[open_out.as_bytes()]);
        if !matches!(outcome, Ok(Outcome::Replied)) {
            self.release_unclaimed(ctx, ctx.nodeid, &opened, dir).await;
        }
        outcome
    }

    pub(super) async fn reply_create(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<(Entry, Opened)>,
    ) -> io::Result<Outcome> {
        let (entry, opened) = match r {
            Ok(v) => v,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        let open_out = zero_copy_checked(tx, &opened).to_open_out();
        let outcome = self.reply_parts(
            tx,
            ctx.unique,
            &[entry.to_entry_out().as_bytes(), open_out.as_bytes()],
        );
        if !matches!(outcome, Ok(Outcome::Replied)) {
            self.release_unclaimed(ctx, entry.nodeid, &opened, false)
                .await;
            if entry.nodeid != 0 {
                let _ = self.fs.forget(ctx, entry.nodeid, 1).await;
            }
        }
        outcome
    }

    pub(super) async fn release_unclaimed(
        &self,
        ctx: &Context,
        ino: u64,
        opened: &Opened,
        dir: bool,
    ) {
        let args = ReleaseArgs {
            fh: opened.fh,
            ..ReleaseArgs::default()
        };
        let r = if dir {
            self.fs.releasedir(ctx, ino, &args).await
        } else {
            self.fs.release(ctx, ino, &args).await
        };
        if let Err(e) = r {
            tracing::debug!(
                ino,
                fh = opened.fh,
                "releasing an undelivered handle failed: {e}"
            );
        }
    }

    /// Replies to READDIRPLUS; if the kernel never gets the entries, their
    /// lookup references are dropped at once.
    pub(super) async fn reply_readdirplus(
        &self,
        tx: &mut dyn Transaction,
        ctx: &Context,
        r: io::Result<usize>,
    ) -> io::Result<Outcome> {
        let len = match r {
            Ok(len) => len,
            Err(e) => return self.reply_error(tx, ctx.unique, errno_of(&e)),
        };
        if self.journal.get().is_some() {
            recovery::save_entries(&direntplus_nodeids(&tx.reply_buffer()[..len]));
        }
        let outcome = self.send(tx, ctx.unique, 0, len);
        if !matches!(outcome, Ok(Outcome::Replied)) {
            let nodeids = direntplus_nodeids(&tx.reply_buffer()[..len]);
            for nodeid in nodeids {
                let _ = self.fs.forget(ctx, nodeid, 1).await;
            }
        }
        outcome
    }
}

/// `opened` as the kernel may get it: `FOPEN_IO_URING_ZERO_COPY` only
/// through a queue with zero copy, and never next to `FOPEN_PASSTHROUGH`
/// (the kernel fails such an open with EIO: the flag is outside its
/// passthrough mask).
pub(super) fn zero_copy_checked(tx: &dyn Transaction, opened: &Opened) -> Opened {
    let mut o = *opened;
    if !tx.zero_copy_queue() || o.flags.contains(FopenFlags::PASSTHROUGH) {
        o.flags.remove(FopenFlags::IO_URING_ZERO_COPY);
    }
    o
}

/// The node ids of the entries in a READDIRPLUS reply body.
pub(super) fn direntplus_nodeids(mut body: &[u8]) -> Vec<u64> {
    use zerocopy::FromBytes;
    let mut ids = Vec::new();
    while let Ok((rec, _)) = fuse_abi::Direntplus::read_from_prefix(body) {
        if rec.entry_out.nodeid != 0 {
            ids.push(rec.entry_out.nodeid);
        }
        let size = fuse_abi::direntplus_size(rec.dirent.namelen as usize);
        if size > body.len() {
            break;
        }
        body = &body[size..];
    }
    ids
}

pub(super) fn attr_out(a: &AttrReply) -> AttrOut {
    let (attr_valid, attr_valid_nsec) = split_timeout(a.timeout);
    AttrOut {
        attr_valid,
        attr_valid_nsec,
        dummy: 0,
        attr: a.attr,
    }
}
