//! The per-request log ([`crate::Server::with_request_log`], whose docs
//! show the lines): one line per request, written as a `tracing` event at
//! INFO with the target `fuse_request` once the request is answered (or
//! known to take no answer).
//!
//! The line is made here and nowhere else: the request's side from the
//! opcode table and one function over the decoded [`Operation`]
//! ([`OpArgs`]), the reply's side from what the dispatch hands the
//! transport ([`LoggedTx`] sits between the two), so the dispatch itself
//! knows nothing of it.

use crate::opcode_table::opcode_info_raw;
use crate::request::{decode, DecodeOptions, Operation, RawRequest};
use crate::server::{Outcome, Server, Transaction};
use fuse_abi::{CopyFileRangeOut, EntryOut, GetxattrOut, OpenOut, WriteOut};
use std::fmt;
use std::io;
use std::time::Instant;
use zerocopy::FromBytes;

/// Names and symlink targets longer than this are cut (the line says how
/// long they were).
const MAX_NAME: usize = 128;

/// Whether a request log line would go anywhere (the subscriber's filter
/// for the `fuse_request` target at INFO).
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "fuse_request", tracing::Level::INFO)
}

/// Handles one request through the dispatch and logs it.
pub(crate) async fn handle_logged(
    server: &Server,
    tx: &mut dyn Transaction,
) -> io::Result<Outcome> {
    let start = Instant::now();
    // The request is described before the dispatch: once the reply buffer
    // is asked for, the request's memory may be overwritten.
    let request = RequestLine::new(tx.request(), server.decode_options());
    let mut logged = LoggedTx {
        inner: tx,
        body: request.body,
        sent: None,
    };
    let outcome = server.dispatch(&mut logged).await;
    let elapsed = logged.sent.map_or_else(
        || start.elapsed(),
        |s| s.at.saturating_duration_since(start),
    );
    let result = ResultLine {
        malformed: request.malformed,
        sent: logged.sent,
        outcome: &outcome,
    };
    tracing::info!(
        target: "fuse_request",
        "{} -> {result} ({} µs)",
        request.head,
        elapsed.as_micros()
    );
    outcome
}

/// What a request's line says of the request.
struct RequestLine {
    /// `unique=… OPCODE node=… arguments…`.
    head: String,
    /// How to read the reply body.
    body: BodyKind,
    /// The request could not be decoded.
    malformed: bool,
}

impl RequestLine {
    fn new(raw: RawRequest<'_>, opts: DecodeOptions) -> Self {
        let header = match raw.in_header() {
            Ok(h) => h,
            Err(_) => {
                return Self {
                    head: format!("short request of {} bytes", raw.header.len()),
                    body: BodyKind::Bytes,
                    malformed: true,
                }
            }
        };
        let mut head = format!("unique={} ", header.unique);
        match opcode_info_raw(header.opcode) {
            Some(info) => head.push_str(info.short_name()),
            None => head.push_str(&format!("opcode={}", header.opcode)),
        }
        head.push_str(&format!(" node={}", header.nodeid));
        match decode(raw, opts) {
            Ok(req) => {
                head.push_str(&OpArgs(&req.op).to_string());
                Self {
                    head,
                    body: BodyKind::of(&req.op),
                    malformed: false,
                }
            }
            Err(_) => Self {
                head,
                body: BodyKind::Bytes,
                malformed: true,
            },
        }
    }
}

/// The arguments of an operation that matter when reading a log, each
/// with a leading space: ` name="foo"`, ` fh=3 offset=0 size=4096`.
struct OpArgs<'a>(&'a Operation<'a>);

impl fmt::Display for OpArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Operation as O;
        match self.0 {
            O::Lookup { name } | O::Unlink { name } | O::Rmdir { name } => {
                write!(f, " name={}", Name(name.to_bytes()))
            }
            O::Forget { nlookup } => write!(f, " nlookup={nlookup}"),
            O::Getattr { fh } => write_fh(f, *fh),
            O::Setattr(a) => {
                write!(f, " valid={}", Flags(a.valid))?;
                write_fh(f, a.fh)?;
                match a.size {
                    Some(size) => write!(f, " size={size}"),
                    None => Ok(()),
                }
            }
            O::Readlink | O::Statfs | O::Destroy | O::Syncfs => Ok(()),
            O::Symlink { name, target } => write!(
                f,
                " name={} target={}",
                Name(name.to_bytes()),
                Name(target.to_bytes())
            ),
            O::Mknod { name, args } => write!(
                f,
                " name={} mode={:#o} rdev={:#x}",
                Name(name.to_bytes()),
                args.mode,
                args.rdev
            ),
            O::Mkdir { name, args } => {
                write!(f, " name={} mode={:#o}", Name(name.to_bytes()), args.mode)
            }
            O::Rename(a) => {
                write!(
                    f,
                    " name={} newdir={} newname={}",
                    Name(a.name.to_bytes()),
                    a.newdir,
                    Name(a.newname.to_bytes())
                )?;
                if a.flags.is_empty() {
                    Ok(())
                } else {
                    write!(f, " flags={}", Flags(a.flags))
                }
            }
            O::Link { oldnodeid, newname } => {
                write!(f, " oldnode={oldnodeid} name={}", Name(newname.to_bytes()))
            }
            O::Open(a) | O::Opendir(a) => write!(f, " flags={:#x}", a.flags),
            O::Read(a) | O::Readdir(a) | O::Readdirplus(a) => {
                write!(f, " fh={} offset={} size={}", a.fh, a.offset, a.size)
            }
            O::Write { args, .. } => write!(
                f,
                " fh={} offset={} size={}",
                args.fh, args.offset, args.size
            ),
            O::Release(a) | O::Releasedir(a) => write!(f, " fh={}", a.fh),
            O::Fsync(a) | O::Fsyncdir(a) => {
                write!(f, " fh={}", a.fh)?;
                if a.datasync() {
                    f.write_str(" datasync")?;
                }
                Ok(())
            }
            O::Setxattr(a) => write!(
                f,
                " name={} size={} flags={:#x}",
                Name(a.name.to_bytes()),
                a.value.len(),
                a.flags
            ),
            O::Getxattr { name, size } => {
                write!(f, " name={} size={size}", Name(name.to_bytes()))
            }
            O::Listxattr { size } => write!(f, " size={size}"),
            O::Removexattr { name } => write!(f, " name={}", Name(name.to_bytes())),
            O::Flush(a) => write!(f, " fh={}", a.fh),
            O::Init(init) => write!(f, " kernel={}.{}", init.major, init.minor),
            O::CuseInit(init) => write!(f, " kernel={}.{}", init.major, init.minor),
            O::Getlk(a) | O::Setlk { args: a, .. } => write!(
                f,
                " fh={} type={} start={} end={}{}",
                a.fh,
                a.lock.r#type,
                a.lock.start,
                a.lock.end,
                if a.flock { " flock" } else { "" }
            ),
            O::Access { mask } => write!(f, " mask={:#o}", mask.bits()),
            O::Create { name, args } => write!(
                f,
                " name={} flags={:#x} mode={:#o}",
                Name(name.to_bytes()),
                args.flags,
                args.mode
            ),
            O::Tmpfile(args) => write!(f, " flags={:#x} mode={:#o}", args.flags, args.mode),
            O::Interrupt { unique } => write!(f, " target={unique}"),
            O::Bmap { block, blocksize } => write!(f, " block={block} blocksize={blocksize}"),
            O::Ioctl(a) => write!(
                f,
                " fh={} cmd={:#x} in={} out={}",
                a.fh,
                a.cmd,
                a.data.len(),
                a.out_size
            ),
            O::Poll(a) => write!(f, " fh={} events={:#x}", a.fh, a.events),
            O::NotifyReply { offset, data } => {
                write!(f, " offset={offset} size={}", data.len())
            }
            O::BatchForget(items) => write!(f, " count={}", items.len()),
            O::Fallocate(a) => write!(
                f,
                " fh={} offset={} length={} mode={:#x}",
                a.fh, a.offset, a.length, a.mode
            ),
            O::Lseek(a) => write!(f, " fh={} offset={} whence={}", a.fh, a.offset, a.whence),
            O::CopyFileRange { args: a, .. } => write!(
                f,
                " fh={} offset={} to node={} fh={} offset={} len={}",
                a.fh_in, a.off_in, a.nodeid_out, a.fh_out, a.off_out, a.len
            ),
            O::Setupmapping(a) => write!(
                f,
                " fh={} offset={} len={} moffset={}",
                a.fh, a.foffset, a.len, a.moffset
            ),
            O::Removemapping(ranges) => write!(f, " count={}", ranges.len()),
            O::Statx(a) => {
                write_fh(f, a.fh)?;
                write!(f, " mask={:#x}", a.sx_mask)
            }
        }
    }
}

fn write_fh(f: &mut fmt::Formatter<'_>, fh: Option<u64>) -> fmt::Result {
    match fh {
        Some(fh) => write!(f, " fh={fh}"),
        None => Ok(()),
    }
}

/// A name as the kernel sent it, quoted: UTF-8 shown as text (with
/// quotes, backslashes and control characters escaped), any other byte as
/// `\xNN`; cut after [`MAX_NAME`] bytes.
struct Name<'a>(&'a [u8]);

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = &self.0[..self.0.len().min(MAX_NAME)];
        f.write_str("\"")?;
        for chunk in shown.utf8_chunks() {
            for c in chunk.valid().chars() {
                write!(f, "{}", c.escape_debug())?;
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        f.write_str("\"")?;
        if shown.len() < self.0.len() {
            write!(f, "...({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// Flags by name, joined with `|` (`MODE|SIZE`), bits without a name in
/// hex; `0` for none.
struct Flags<F>(F);

impl<F> fmt::Display for Flags<F>
where
    F: bitflags::Flags + Copy,
    F::Bits: fmt::LowerHex,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut named = F::empty();
        let mut first = true;
        for (name, flag) in self.0.iter_names() {
            f.write_str(if first { "" } else { "|" })?;
            f.write_str(name)?;
            named.insert(flag);
            first = false;
        }
        let rest = self.0.difference(named);
        if !rest.is_empty() || first {
            f.write_str(if first { "" } else { "|" })?;
            write!(f, "{:#x}", rest.bits())?;
        }
        Ok(())
    }
}

/// What a successful reply body of an operation holds that is worth
/// logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// Just its size in bytes.
    Bytes,
    /// A `fuse_entry_out`: the node id.
    Entry,
    /// A `fuse_entry_out` and a `fuse_open_out`: node id and handle.
    EntryOpen,
    /// A `fuse_open_out`: the handle.
    Open,
    /// A `fuse_write_out`: the count written or copied.
    Count32,
    /// A `fuse_copy_file_range_out`: the count copied.
    Count64,
    /// A `fuse_getxattr_out`: the size of a value or list.
    XattrSize,
}

impl BodyKind {
    fn of(op: &Operation<'_>) -> Self {
        use Operation as O;
        match op {
            O::Lookup { .. }
            | O::Mknod { .. }
            | O::Mkdir { .. }
            | O::Symlink { .. }
            | O::Link { .. } => BodyKind::Entry,
            O::Create { .. } | O::Tmpfile(_) => BodyKind::EntryOpen,
            O::Open(_) | O::Opendir(_) => BodyKind::Open,
            O::Write { .. } | O::CopyFileRange { wide: false, .. } => BodyKind::Count32,
            O::CopyFileRange { wide: true, .. } => BodyKind::Count64,
            O::Getxattr { size: 0, .. } | O::Listxattr { size: 0 } => BodyKind::XattrSize,
            _ => BodyKind::Bytes,
        }
    }

    /// What `body` (a successful reply's) says, read without trusting its
    /// length.
    fn detail(self, body: &[u8]) -> Detail {
        let entry = || EntryOut::read_from_prefix(body).ok().map(|(e, _)| e);
        let open_at = |at: usize| {
            body.get(at..)
                .and_then(|b| OpenOut::read_from_prefix(b).ok())
                .map(|(o, _)| o)
        };
        let detail = match self {
            BodyKind::Bytes => None,
            BodyKind::Entry => entry().map(|e| Detail::Entry { node: e.nodeid }),
            BodyKind::EntryOpen => {
                entry()
                    .zip(open_at(size_of::<EntryOut>()))
                    .map(|(e, o)| Detail::EntryOpen {
                        node: e.nodeid,
                        fh: o.fh,
                    })
            }
            BodyKind::Open => open_at(0).map(|o| Detail::Open { fh: o.fh }),
            BodyKind::Count32 => WriteOut::read_from_prefix(body)
                .ok()
                .map(|(w, _)| Detail::Count(w.size.into())),
            BodyKind::Count64 => CopyFileRangeOut::read_from_prefix(body)
                .ok()
                .map(|(c, _)| Detail::Count(c.bytes_copied)),
            BodyKind::XattrSize => GetxattrOut::read_from_prefix(body)
                .ok()
                .map(|(x, _)| Detail::XattrSize(x.size)),
        };
        detail.unwrap_or(Detail::Bytes(body.len()))
    }
}

/// What a successful reply said, as the line shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    Bytes(usize),
    Entry { node: u64 },
    EntryOpen { node: u64, fh: u64 },
    Open { fh: u64 },
    Count(u64),
    XattrSize(u32),
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Detail::Bytes(0) => f.write_str("ok"),
            Detail::Bytes(n) => write!(f, "ok {n} bytes"),
            Detail::Entry { node } => write!(f, "ok node={node}"),
            Detail::EntryOpen { node, fh } => write!(f, "ok node={node} fh={fh}"),
            Detail::Open { fh } => write!(f, "ok fh={fh}"),
            Detail::Count(n) => write!(f, "ok count={n}"),
            Detail::XattrSize(n) => write!(f, "ok size={n}"),
        }
    }
}

/// A reply the dispatch handed the transport.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// Its errno (0 for success).
    errno: i32,
    /// What the body says, for a success.
    detail: Detail,
    /// When the transport was done with it.
    at: Instant,
}

/// The transport's transaction, noting the reply on its way through.
struct LoggedTx<'a> {
    inner: &'a mut dyn Transaction,
    body: BodyKind,
    sent: Option<Sent>,
}

impl Transaction for LoggedTx<'_> {
    fn request(&self) -> crate::RawRequest<'_> {
        self.inner.request()
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        self.inner.reply_buffer()
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        let detail = if error == 0 {
            let buf = self.inner.reply_buffer();
            let body = buf.get(..body_len).unwrap_or(buf);
            self.body.detail(body)
        } else {
            Detail::Bytes(0)
        };
        let r = self.inner.send_reply(unique, error, body_len);
        self.sent = Some(Sent {
            errno: error.saturating_neg(),
            detail,
            at: Instant::now(),
        });
        r
    }

    fn zero_copy_writer(&mut self) -> Option<&mut dyn crate::io::ZeroCopyWriter> {
        self.inner.zero_copy_writer()
    }

    fn zero_copy_reader(&mut self) -> Option<&mut dyn crate::io::ZeroCopyReader> {
        self.inner.zero_copy_reader()
    }

    fn zero_copy_queue(&self) -> bool {
        self.inner.zero_copy_queue()
    }
}

/// What a request's line says of its result.
struct ResultLine<'a> {
    malformed: bool,
    sent: Option<Sent>,
    outcome: &'a io::Result<Outcome>,
}

impl fmt::Display for ResultLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.malformed {
            f.write_str("malformed, ")?;
        }
        match self.sent {
            Some(sent) if sent.errno == 0 => write!(f, "{}", sent.detail)?,
            Some(sent) => write!(f, "{}", Errno(sent.errno))?,
            // Not malformed, yet dropped: it came before INIT.
            None if !self.malformed && matches!(self.outcome, Ok(Outcome::Dropped)) => {
                f.write_str("dropped")?
            }
            None => f.write_str("no reply")?,
        }
        match self.outcome {
            Ok(Outcome::ReplyNotDelivered) => f.write_str(", not delivered (request gone)"),
            Err(e) => write!(f, ", reply failed: {e}"),
            Ok(_) => Ok(()),
        }
    }
}

/// An errno by name and number: `ENOENT errno=2`.
struct Errno(i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match crate::errno::name(self.0) {
            Some(name) => write!(f, "{name} errno={}", self.0),
            None => write!(f, "errno={}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_abi::{RenameFlags, SetattrValid};

    #[test]
    fn names_are_quoted_escaped_and_cut() {
        assert_eq!(Name(b"foo").to_string(), "\"foo\"");
        assert_eq!(Name(b"a\"b\\c\n").to_string(), r#""a\"b\\c\n""#);
        assert_eq!(Name(b"caf\xc3\xa9").to_string(), "\"café\"");
        assert_eq!(Name(b"\xff\xfeok").to_string(), r#""\xff\xfeok""#);
        assert_eq!(Name(b"").to_string(), "\"\"");
        let long = vec![b'x'; 300];
        let shown = Name(&long).to_string();
        assert!(shown.ends_with("\"...(300 bytes)"), "{shown}");
        assert_eq!(shown.matches('x').count(), MAX_NAME);
        // A cut through a multi-byte character shows its bytes.
        let mut cut = vec![b'y'; MAX_NAME - 1];
        cut.extend_from_slice("é".as_bytes());
        assert!(Name(&cut).to_string().contains("y\\xc3\""));
    }

    #[test]
    fn flags_by_name() {
        let valid = SetattrValid::MODE | SetattrValid::SIZE;
        assert_eq!(Flags(valid).to_string(), "MODE|SIZE");
        assert_eq!(Flags(SetattrValid::empty()).to_string(), "0x0");
        let odd = SetattrValid::from_bits_retain(1 | 1 << 20);
        assert_eq!(Flags(odd).to_string(), "MODE|0x100000");
        assert_eq!(Flags(RenameFlags::NOREPLACE).to_string(), "NOREPLACE");
    }

    #[test]
    fn replies_say_what_matters() {
        let entry = EntryOut {
            nodeid: 5,
            ..EntryOut::default()
        };
        let open = OpenOut {
            fh: 9,
            ..OpenOut::default()
        };
        let mut create = zerocopy::IntoBytes::as_bytes(&entry).to_vec();
        create.extend_from_slice(zerocopy::IntoBytes::as_bytes(&open));
        let entry = zerocopy::IntoBytes::as_bytes(&entry);
        assert_eq!(BodyKind::Entry.detail(entry).to_string(), "ok node=5");
        assert_eq!(
            BodyKind::EntryOpen.detail(&create).to_string(),
            "ok node=5 fh=9"
        );
        assert_eq!(BodyKind::Bytes.detail(&[0; 13]).to_string(), "ok 13 bytes");
        assert_eq!(BodyKind::Bytes.detail(&[]).to_string(), "ok");
        // A body shorter than its struct is shown by its size.
        assert_eq!(BodyKind::Entry.detail(&[1, 2]).to_string(), "ok 2 bytes");
        assert_eq!(
            BodyKind::EntryOpen.detail(entry).to_string(),
            "ok 128 bytes"
        );
        assert_eq!(Errno(libc::ENOENT).to_string(), "ENOENT errno=2");
        assert_eq!(Errno(4000).to_string(), "errno=4000");
    }
}
