//! An in-memory [`Transaction`] and the request stream format.

use fuse_server::{RawRequest, Transaction};
use std::io;

/// A transaction over one request's bytes (in an allocation of exactly
/// their size, so that AddressSanitizer catches any read past the request)
/// and a reply buffer, recording the reply.
pub struct MemTx<'a> {
    request: &'a [u8],
    /// How the request is split (`None`: contiguous, as `/dev/fuse`).
    split: Option<usize>,
    reply: &'a mut [u8],
    /// `(unique, error, body length)` of the reply, once sent.
    pub sent: Option<(u64, i32, usize)>,
    /// Make `send_reply` fail with this errno (an interrupted request).
    pub fail_with: Option<i32>,
}

impl<'a> MemTx<'a> {
    /// A transaction for `request`, replying into `reply`.
    pub fn new(request: &'a [u8], reply: &'a mut [u8]) -> Self {
        Self {
            request,
            split: None,
            reply,
            sent: None,
            fail_with: None,
        }
    }

    /// The request as io_uring carries it: the header, then `op_len` bytes
    /// of the opcode's fixed argument apart, then the rest.
    pub fn split_at(mut self, op_len: usize) -> Self {
        self.split = Some(op_len);
        self
    }

    /// The reply body.
    pub fn body(&self) -> &[u8] {
        match self.sent {
            Some((_, _, len)) => &self.reply[..len],
            None => &[],
        }
    }
}

impl Transaction for MemTx<'_> {
    fn request(&self) -> RawRequest<'_> {
        match self.split {
            None => RawRequest::contiguous(self.request),
            Some(op_len) => {
                let h = self.request.len().min(40);
                let (header, rest) = self.request.split_at(h);
                let op = op_len.min(rest.len());
                let (op_header, payload) = rest.split_at(op);
                RawRequest {
                    header,
                    op_header: Some(op_header),
                    payload,
                }
            }
        }
    }

    fn reply_buffer(&mut self) -> &mut [u8] {
        self.reply
    }

    fn send_reply(&mut self, unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        assert!(self.sent.is_none(), "a request was answered twice");
        assert!(
            body_len <= self.reply.len(),
            "reply body of {body_len} bytes exceeds the reply buffer ({})",
            self.reply.len()
        );
        assert!(
            error <= 0 && error > -512,
            "reply error {error} is not 0 or a negative errno the kernel takes (above -512)"
        );
        assert!(
            error == 0 || body_len == 0,
            "an error reply carries a body of {body_len} bytes"
        );
        if let Some(errno) = self.fail_with {
            return Err(io::Error::from_raw_os_error(errno));
        }
        self.sent = Some((unique, error, body_len));
        Ok(())
    }
}

/// Splits a stream of requests as `/dev/fuse` would deliver them: each is
/// as long as its header's `len`; a header that claims less than a header
/// or more than is left takes the rest of the stream (and is then
/// malformed, which is tested too).
pub fn split_requests(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = if data.len() >= 4 {
            u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize
        } else {
            data.len()
        };
        let take = if len < 40 || len > data.len() {
            data.len()
        } else {
            len
        };
        out.push(&data[..take]);
        data = &data[take..];
    }
    out
}
