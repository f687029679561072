//! Planning a copy: the source's data extents (`SEEK_DATA`/`SEEK_HOLE`), the blocks they
//! split into, and the [`Job`] that carries them, with the endpoints and settings, to
//! whichever path does the work. Apart from the paths because all three read it and
//! none of them changes it.

use std::io;
use std::os::fd::AsFd;

use super::Fault;
use crate::file::File;
use crate::sys;

pub(super) fn round_up(x: usize, align: usize) -> usize {
    x.div_ceil(align) * align
}

/// The data extents of `src` in `[0, size)`, widened to `align` (for `O_DIRECT`).
pub(super) fn data_extents(src: &File, size: u64, align: usize) -> io::Result<Vec<(u64, u64)>> {
    let fd = src.as_fd();
    let a = align as u64;
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut pos = 0;
    while pos < size {
        let start = match sys::lseek_whence(fd, pos, libc::SEEK_DATA) {
            Ok(Some(s)) => s,
            Ok(None) => break, // only a hole until the end
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // SEEK_DATA unsupported: all data.
                return Ok(vec![(0, size)]);
            }
            Err(e) => return Err(e),
        };
        if start >= size {
            break;
        }
        let end = sys::lseek_whence(fd, start, libc::SEEK_HOLE)?
            .unwrap_or(size)
            .min(size);
        let s = start / a * a;
        let e = (end.div_ceil(a) * a).min(size);
        match out.last_mut() {
            Some(last) if last.1 >= s => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
        pos = end.max(start + 1);
    }
    Ok(out)
}

/// Everything a copy path needs (cheap to clone; `File`s share their fds).
#[derive(Clone)]
pub(super) struct Job {
    pub(super) src: File,
    pub(super) dst: File,
    pub(super) direct: bool,
    pub(super) align: usize,
    pub(super) block: usize,
    pub(super) queue_depth: usize,
    pub(super) ordered: bool,
    /// A block device destination's size (padded direct writes must not pass it).
    pub(super) dst_limit: Option<u64>,
    pub(super) fault: Fault,
    pub(super) extents: Vec<(u64, u64)>,
}

impl Job {
    /// The blocks to copy, in order: `(offset, length)`.
    pub(super) fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let block = self.block as u64;
        self.extents.iter().flat_map(move |&(start, end)| {
            (0..(end - start).div_ceil(block)).map(move |i| {
                let off = start + i * block;
                (off, (end - off).min(block) as usize)
            })
        })
    }

    /// The length to write for `data` bytes at `off`: padded to the alignment with direct
    /// IO, but never past a block device's end.
    pub(super) fn write_len(&self, off: u64, data: usize) -> usize {
        let mut w = round_up(data, self.align);
        if let Some(limit) = self.dst_limit {
            w = w.min(limit.saturating_sub(off) as usize).max(data);
        }
        w
    }
}
