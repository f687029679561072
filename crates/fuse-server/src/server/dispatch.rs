//! The dispatch: decoding a transport's request, calling the file
//! system's method for its operation, and replying; INIT's negotiation
//! among them.
//!
//! Apart from `server.rs` because it is the one long match over every
//! operation; the server's state and its entry points stay there.

use super::reply::attr_out;
use super::{errno_of, Outcome, Server, Transaction};
use crate::args::*;
use crate::init::{negotiate, InitOutcome, KernelInit};
use crate::io::{DirentBuf, SliceReader, SliceWriter, ZeroCopyWriter};
use crate::opcode_table::opcode_info_raw;
use crate::request::{decode, Operation};
use crate::types::*;
use fuse_abi::{
    BmapOut, CopyFileRangeOut, IoctlOut, LkOut, LseekOut, PollOut, StatfsOut, StatxOut, WriteOut,
};
use std::io;
use zerocopy::IntoBytes;

impl Server {
    /// The dispatch: decode, call the file system, reply.
    pub(crate) async fn dispatch(&self, tx: &mut dyn Transaction) -> io::Result<Outcome> {
        // Asked before the request is borrowed: a zero-copy WRITE is read
        // from the reader, not from the request's bytes.
        let zero_copy_write = tx.zero_copy_reader().is_some();
        let raw = tx.request();
        let header = match raw.in_header() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("dropping request: {e}");
                return Ok(Outcome::Dropped);
            }
        };
        self.counters.bump(header.opcode);
        let unique = header.unique;
        let expects_reply = opcode_info_raw(header.opcode).is_none_or(|i| i.expects_reply());
        let req = match decode(raw, self.decode_options()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(unique, opcode = header.opcode, "malformed request: {e}");
                if !expects_reply {
                    return Ok(Outcome::Dropped);
                }
                return self.reply_error(tx, unique, e.errno());
            }
        };
        let ctx = Context::of_request(&header);
        let ino = header.nodeid;
        let fs = &*self.fs;

        let op = req.op;
        if self.negotiated().is_none() && !matches!(op, Operation::Init(_)) {
            tracing::warn!(unique, opcode = header.opcode, "request before INIT");
            if !expects_reply {
                return Ok(Outcome::Dropped);
            }
            return self.reply_error(tx, unique, libc::EIO);
        }

        match op {
            Operation::Init(init) => self.handle_init(tx, unique, &init),
            Operation::Destroy => {
                self.finish();
                let _ = self.reply_result(tx, unique, Ok(0));
                Ok(Outcome::Destroyed)
            }
            Operation::Forget { nlookup } => {
                let _ = fs.forget(&ctx, ino, nlookup).await;
                Ok(Outcome::NoReply)
            }
            Operation::BatchForget(items) => {
                let _ = fs.batch_forget(&ctx, items).await;
                Ok(Outcome::NoReply)
            }
            Operation::Interrupt { unique: target } => {
                fs.interrupt(&ctx, target).await.ok();
                Ok(Outcome::NoReply)
            }
            Operation::NotifyReply { offset, data } => {
                fs.retrieve_reply(&ctx, ino, unique, offset, data)
                    .await
                    .ok();
                Ok(Outcome::NoReply)
            }
            Operation::Lookup { name } => {
                let r = fs.lookup(&ctx, ino, name).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Getattr { fh } => {
                let r = fs.getattr(&ctx, ino, fh).await;
                self.reply_struct(tx, unique, r.map(|a| attr_out(&a)))
            }
            Operation::Setattr(args) => {
                let r = fs.setattr(&ctx, ino, &args).await;
                self.reply_struct(tx, unique, r.map(|a| attr_out(&a)))
            }
            Operation::Readlink => {
                let r = fs.readlink(&ctx, ino).await;
                self.reply_bytes(tx, unique, r)
            }
            Operation::Symlink { name, target } => {
                let r = fs.symlink(&ctx, ino, name, target).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Mknod { name, args } => {
                let r = fs.mknod(&ctx, ino, name, &args).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Mkdir { name, args } => {
                let r = fs.mkdir(&ctx, ino, name, &args).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Unlink { name } => {
                let r = fs.unlink(&ctx, ino, name).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Rmdir { name } => {
                let r = fs.rmdir(&ctx, ino, name).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Rename(args) => {
                let r = fs.rename(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Link { oldnodeid, newname } => {
                let r = fs.link(&ctx, oldnodeid, ino, newname).await;
                self.reply_entry(tx, &ctx, r).await
            }
            Operation::Open(args) => {
                let r = fs.open(&ctx, ino, &args).await;
                self.reply_open(tx, &ctx, r, false).await
            }
            Operation::Opendir(args) => {
                let r = fs.opendir(&ctx, ino, &args).await;
                self.reply_open(tx, &ctx, r, true).await
            }
            Operation::Read(args) => {
                if let Some(out) = tx.zero_copy_writer() {
                    let r = fs.read(&ctx, ino, &args, out).await;
                    let len = out.written();
                    return self.reply_result(tx, unique, r.map(|_| len));
                }
                let buf = tx.reply_buffer();
                let size = (args.size as usize).min(buf.len());
                let mut out = SliceWriter::new(&mut buf[..size]);
                let r = fs.read(&ctx, ino, &args, &mut out).await;
                let len = out.written();
                self.reply_result(tx, unique, r.map(|_| len))
            }
            Operation::Write { args, data } => {
                let r = match zero_copy_write {
                    true => match tx.zero_copy_reader() {
                        Some(input) => fs.write(&ctx, ino, &args, input).await,
                        None => Err(io::Error::from_raw_os_error(libc::EIO)),
                    },
                    false => {
                        let mut input = SliceReader::new(data);
                        fs.write(&ctx, ino, &args, &mut input).await
                    }
                };
                let r = r.and_then(|n| {
                    u32::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EIO))
                });
                self.reply_struct(tx, unique, r.map(|size| WriteOut { size, padding: 0 }))
            }
            Operation::Statfs => {
                let r = fs.statfs(&ctx, ino).await;
                self.reply_struct(tx, unique, r.map(|st| StatfsOut { st }))
            }
            Operation::Release(args) => {
                let r = fs.release(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Releasedir(args) => {
                let r = fs.releasedir(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Fsync(args) => {
                let r = fs.fsync(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Fsyncdir(args) => {
                let r = fs.fsyncdir(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Setxattr(args) => {
                let r = fs.setxattr(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Getxattr { name, size } => {
                let r = fs.getxattr(&ctx, ino, name, size).await;
                self.reply_xattr(tx, unique, size, r)
            }
            Operation::Listxattr { size } => {
                let r = fs.listxattr(&ctx, ino, size).await;
                self.reply_xattr(tx, unique, size, r)
            }
            Operation::Removexattr { name } => {
                let r = fs.removexattr(&ctx, ino, name).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Flush(args) => {
                let r = fs.flush(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Readdir(args) => {
                let buf = tx.reply_buffer();
                let size = (args.size as usize).min(buf.len());
                let mut out = DirentBuf::new(&mut buf[..size]);
                let r = fs.readdir(&ctx, ino, &args, &mut out).await;
                let len = out.len();
                self.reply_result(tx, unique, r.map(|_| len))
            }
            Operation::Readdirplus(args) => {
                let buf = tx.reply_buffer();
                let size = (args.size as usize).min(buf.len());
                let mut out = DirentBuf::new(&mut buf[..size]);
                let r = fs.readdirplus(&ctx, ino, &args, &mut out).await;
                let len = out.len();
                self.reply_readdirplus(tx, &ctx, r.map(|_| len)).await
            }
            Operation::Getlk(args) => {
                let r = fs.getlk(&ctx, ino, &args).await;
                self.reply_struct(tx, unique, r.map(|lk| LkOut { lk }))
            }
            Operation::Setlk { args, sleep } => {
                let r = fs.setlk(&ctx, ino, &args, sleep).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Access { mask } => {
                let r = fs.access(&ctx, ino, mask).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Create { name, args } => {
                let r = fs.create(&ctx, ino, name, &args).await;
                self.reply_create(tx, &ctx, r).await
            }
            Operation::Tmpfile(args) => {
                let r = fs.tmpfile(&ctx, ino, &args).await;
                self.reply_create(tx, &ctx, r).await
            }
            Operation::Bmap { block, blocksize } => {
                let r = fs.bmap(&ctx, ino, blocksize, block).await;
                self.reply_struct(tx, unique, r.map(|block| BmapOut { block }))
            }
            Operation::Ioctl(args) => {
                let out_size = args.out_size as usize;
                let r = fs.ioctl(&ctx, ino, &args).await;
                match r {
                    Ok(reply) if reply.data.len() > out_size => {
                        tracing::warn!(
                            unique,
                            "ioctl reply of {} bytes exceeds out_size {out_size}",
                            reply.data.len()
                        );
                        self.reply_error(tx, unique, libc::EIO)
                    }
                    Ok(reply) => {
                        let head = IoctlOut {
                            result: reply.result,
                            flags: 0,
                            in_iovs: 0,
                            out_iovs: 0,
                        };
                        self.reply_parts(tx, unique, &[head.as_bytes(), &reply.data])
                    }
                    Err(e) => self.reply_error(tx, unique, errno_of(&e)),
                }
            }
            Operation::Poll(args) => {
                let r = fs.poll(&ctx, ino, &args).await;
                self.reply_struct(
                    tx,
                    unique,
                    r.map(|revents| PollOut {
                        revents,
                        padding: 0,
                    }),
                )
            }
            Operation::Fallocate(args) => {
                let r = fs.fallocate(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Lseek(args) => {
                let r = fs.lseek(&ctx, ino, &args).await;
                self.reply_struct(tx, unique, r.map(|offset| LseekOut { offset }))
            }
            Operation::CopyFileRange { args, wide } => {
                let r = fs.copy_file_range(&ctx, ino, &args).await;
                if wide {
                    self.reply_struct(
                        tx,
                        unique,
                        r.map(|bytes_copied| CopyFileRangeOut { bytes_copied }),
                    )
                } else {
                    // The 32-bit reply can't say more than u32::MAX; the caller loops.
                    let r = r.map(|n| WriteOut {
                        size: n.min(u32::MAX as u64) as u32,
                        padding: 0,
                    });
                    self.reply_struct(tx, unique, r)
                }
            }
            Operation::Setupmapping(args) => {
                let r = fs.setupmapping(&ctx, ino, &args).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Removemapping(ranges) => {
                let r = fs.removemapping(&ctx, ino, ranges).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Syncfs => {
                let r = fs.syncfs(&ctx, ino).await;
                self.reply_result(tx, unique, r.map(|_| 0))
            }
            Operation::Statx(args) => {
                let r = fs.statx(&ctx, ino, &args).await;
                self.reply_struct(
                    tx,
                    unique,
                    r.map(|s| {
                        let (attr_valid, attr_valid_nsec) = split_timeout(s.timeout);
                        StatxOut {
                            attr_valid,
                            attr_valid_nsec,
                            flags: 0,
                            spare: [0; 2],
                            stat: s.statx,
                        }
                    }),
                )
            }
            Operation::CuseInit(_) => self.reply_error(tx, unique, libc::ENOSYS),
        }
    }

    pub(super) fn handle_init(
        &self,
        tx: &mut dyn Transaction,
        unique: u64,
        init: &fuse_abi::InitIn,
    ) -> io::Result<Outcome> {
        let mut kernel = KernelInit::from_init_in(init);
        if let Some(limit) = crate::init::read_max_pages_limit() {
            kernel.max_pages_limit = limit;
        }
        if self.negotiated().is_some() {
            tracing::warn!("second INIT on an initialized connection");
            return self.reply_error(tx, unique, libc::EIO);
        }
        let mut config = self.init_config;
        if let Some(files) = self.backing_files.get() {
            self.fs.attach_backing_files(files.clone());
        }
        if let Err(e) = self.fs.init(&kernel, &mut config) {
            tracing::error!("file system refused INIT: {e}");
            return self.reply_error(tx, unique, errno_of(&e));
        }
        match negotiate(&kernel, &config) {
            InitOutcome::Agreed {
                negotiated,
                reply,
                reply_len,
            } => {
                tracing::debug!(
                    kernel_minor = kernel.minor,
                    kernel_flags = format_args!("{:#x}", kernel.flags.bits()),
                    flags = format_args!("{:#x}", negotiated.flags.bits()),
                    max_write = negotiated.max_write,
                    max_pages = negotiated.max_pages,
                    max_stack_depth = negotiated.max_stack_depth,
                    "INIT negotiated"
                );
                let _ = self.negotiated.set(negotiated);
                self.reply_parts(tx, unique, &[&reply.as_bytes()[..reply_len]])
            }
            InitOutcome::MajorOnly(reply) => {
                tracing::info!(
                    kernel_major = kernel.major,
                    "kernel speaks a newer major version; answering with ours"
                );
                self.reply_parts(tx, unique, &[&reply.as_bytes()[..8]])
            }
            InitOutcome::Refused(errno) => {
                tracing::error!(
                    major = kernel.major,
                    minor = kernel.minor,
                    "kernel protocol too old"
                );
                self.reply_error(tx, unique, errno)
            }
        }
    }
}
