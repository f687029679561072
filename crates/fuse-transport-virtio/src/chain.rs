//! One descriptor chain as a [`Transaction`]: the readable buffers hold the
//! request, the writable ones receive the reply.
//!
//! The guest's virtio-fs driver lays a request out as `fuse_in_header`,
//! the arguments, then (WRITE) the data pages; and the reply's room as
//! `fuse_out_header`, the out arguments, then (READ) the data pages. The
//! transaction reads the headers and arguments into memory of its own
//! (the guest could change them while they are parsed); the data of a
//! WRITE is written to the backing file straight from the guest's pages
//! ([`GuestReader`]), the data of a READ read straight into them
//! ([`GuestWriter`]). Every other reply is built in the thread's reply
//! buffer and copied into the chain.

use crate::guest::{DataStats, GuestReader, GuestWriter, Segments};
use fuse_abi::{InHeader, Opcode, OutHeader, WriteIn};
use fuse_server::io::{AlignedBuf, ZeroCopyReader, ZeroCopyWriter};
use fuse_server::{RawRequest, Transaction};
use std::io;
use zerocopy::{FromBytes, IntoBytes};

const IN_HEADER: usize = size_of::<InHeader>();
const OUT_HEADER: usize = size_of::<OutHeader>();
const WRITE_HEADERS: usize = IN_HEADER + size_of::<WriteIn>();

/// Memory a queue thread reuses from request to request.
pub struct Buffers {
    /// The request's headers and arguments, copied out of the chain.
    pub request: Vec<u8>,
    /// Where replies are built (at least [`fuse_server::Negotiated::max_reply_size`]).
    pub reply: AlignedBuf,
    /// The chain's readable buffers.
    pub readable: Segments,
    /// The chain's writable buffers.
    pub writable: Segments,
}

impl Buffers {
    /// Buffers for requests and replies of up to `max_size` bytes of data.
    pub fn new(max_size: usize) -> io::Result<Self> {
        Ok(Self {
            request: Vec::new(),
            reply: AlignedBuf::new(max_size.max(fuse_server::init::PAGE_SIZE))?,
            readable: Segments::new(),
            writable: Segments::new(),
        })
    }

    /// Makes sure the reply buffer holds `size` bytes.
    pub fn reserve_reply(&mut self, size: usize) -> io::Result<()> {
        if self.reply.len() < size {
            self.reply = AlignedBuf::new(size)?;
        }
        Ok(())
    }
}

/// Why a chain carries no request the server can be given.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// Fewer readable bytes than a `fuse_in_header`.
    #[error("request of {0} bytes is shorter than fuse_in_header")]
    Short(usize),
    /// A readable buffer after a writable one (the spec forbids it).
    #[error("readable descriptor after a writable one")]
    Order,
    /// A descriptor outside guest memory.
    #[error(transparent)]
    Bad(#[from] crate::guest::BadDescriptor),
}

/// What the request is, from its header: enough to route it.
#[derive(Debug, Clone, Copy)]
pub struct Peek {
    /// The header.
    pub header: InHeader,
}

/// One request and its reply room, lent to [`fuse_server::Server::handle`].
pub struct ChainTransaction<'a> {
    request: &'a [u8],
    reply: &'a mut AlignedBuf,
    writable: &'a Segments,
    /// A WRITE's data, read from guest memory.
    data_in: Option<GuestReader<'a>>,
    /// Bytes of the reply buffer that stand for a WRITE's data in the
    /// request view (the server decodes but doesn't read them).
    data_in_len: usize,
    /// A READ's destination in guest memory.
    data_out: Option<GuestWriter<'a>>,
    /// Bytes the reply took in the chain (header included): the used
    /// length given back to the guest.
    used: u32,
}

impl<'a> ChainTransaction<'a> {
    /// Reads the request header from `bufs.readable` and prepares the
    /// transaction: copies the headers and arguments into
    /// `bufs.request`, and makes a WRITE's data and a READ's destination
    /// point at guest memory. `max_request` bounds the copy (a longer
    /// request fails to decode and gets `EINVAL`).
    pub fn new(bufs: &'a mut Buffers, max_request: usize) -> Result<(Self, Peek), ChainError> {
        let Buffers {
            request,
            reply,
            readable,
            writable,
        } = bufs;
        let total = readable.len();
        if total < IN_HEADER {
            return Err(ChainError::Short(total));
        }
        request.clear();
        request.resize(IN_HEADER, 0);
        readable.copy_out(0, &mut request[..]);
        let header = InHeader::read_from_bytes(&request[..IN_HEADER])
            .map_err(|_| ChainError::Short(total))?;
        let peek = Peek { header };

        // A WRITE's data stays in guest memory: only its headers are
        // copied, and the reader writes the rest to the file. (The kernel
        // adds no extensions to WRITE; one that carries some is copied
        // whole like any other request.)
        let zero_copy_write = header.opcode == Opcode::Write as u32
            && header.total_extlen == 0
            && total >= WRITE_HEADERS
            && header.len as usize == total;
        let (data_in, data_in_len) = if zero_copy_write {
            request.resize(WRITE_HEADERS, 0);
            readable.copy_out(IN_HEADER, &mut request[IN_HEADER..]);
            let write = WriteIn::read_from_bytes(&request[IN_HEADER..WRITE_HEADERS])
                .map_err(|_| ChainError::Short(total))?;
            // More data than the WRITE says is ignored; less makes the
            // request fail to decode (EINVAL), as on /dev/fuse.
            let data = (total - WRITE_HEADERS).min(write.size as usize);
            let reader = GuestReader::new(readable, WRITE_HEADERS, WRITE_HEADERS + data);
            (Some(reader), data.min(reply.len()))
        } else {
            let len = total.min(max_request.max(IN_HEADER));
            request.resize(len, 0);
            readable.copy_out(IN_HEADER, &mut request[IN_HEADER..]);
            (None, 0)
        };

        let data_out = (header.opcode == Opcode::Read as u32)
            .then(|| GuestWriter::new(writable, OUT_HEADER, usize::MAX));
        Ok((
            Self {
                request: &request[..],
                reply,
                writable,
                data_in,
                data_in_len,
                data_out,
                used: 0,
            },
            peek,
        ))
    }

    /// How a WRITE's or READ's data moved between guest memory and the
    /// file (`None` for other requests).
    pub fn data_stats(&self) -> Option<DataStats> {
        match (&self.data_in, &self.data_out) {
            (Some(r), _) => Some(r.stats()),
            (_, Some(w)) => Some(w.stats()),
            _ => None,
        }
    }

    /// The used length to report for the chain: what the reply wrote (0
    /// for a request without reply).
    pub fn used_len(&self) -> u32 {
        self.used
    }
}

impl Transaction for ChainTransaction<'_> {
    fn request(&self) -> RawRequest<'_> {
        match &self.data_in {
            // The data stays in guest memory; the view stands for it with
            // as many bytes of the reply buffer, which the server decodes
            // past (it takes the data from `zero_copy_reader`).
            Some(_) => RawRequest {
                header: &self.request[..IN_HEADER],
                op_header: Some(&self.request[IN_HEADER..WRITE_HEADERS]),
                payload: &self.reply[..self.data_in_len],
            },
            None => RawRequest::contiguous(self.request),
        }
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        &mut self.reply[..]
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        let room = self.writable.len();
        if room < OUT_HEADER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("reply room of {room} bytes holds no fuse_out_header"),
            ));
        }
        let (error, body_len) = match &self.data_out {
            // A READ's data is in the chain already: its length is what
            // the writer moved there.
            Some(w) if error == 0 => (0, body_len.min(w.written())),
            _ if error != 0 => (error, 0),
            _ if OUT_HEADER + body_len > room => {
                tracing::warn!(
                    unique,
                    body_len,
                    room,
                    "reply larger than the guest's buffers: EIO"
                );
                (-libc::EIO, 0)
            }
            _ => {
                let body = &self.reply[..body_len.min(self.reply.len())];
                self.writable.copy_in(OUT_HEADER, body);
                (0, body.len())
            }
        };
        let header = OutHeader {
            len: (OUT_HEADER + body_len) as u32,
            error,
            unique,
        };
        self.writable.copy_in(0, header.as_bytes());
        self.used = header.len;
        Ok(())
    }

    fn zero_copy_writer(&mut self) -> Option<&mut dyn ZeroCopyWriter> {
        self.data_out.as_mut().map(|w| w as &mut dyn ZeroCopyWriter)
    }

    fn zero_copy_reader(&mut self) -> Option<&mut dyn ZeroCopyReader> {
        self.data_in.as_mut().map(|r| r as &mut dyn ZeroCopyReader)
    }
}
