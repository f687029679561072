//! The two paths that block their thread: `copy_file_range(2)` over the extents and the
//! sequential `pread`/`pwrite` loop (on an io_uring runtime the caller runs them on
//! tokio's blocking pool). Apart from the batched engine: they are plain loops over
//! syscalls and share none of its state.

use std::io;
use std::os::fd::AsFd;

use super::plan::{round_up, Job};
use super::{fault_fd, read_error, write_error, CopyReport};
use crate::buf::AlignedBuf;
use crate::{sys, Error};

pub(super) enum CfrError {
    /// Refused before any byte moved (another path may do it).
    Unsupported(Error),
    Failed(Error),
}

/// `copy_file_range` over the extents. Returns the end of file if it came early.
pub(super) fn cfr_copy(job: &Job, rep: &mut CopyReport) -> Result<Option<u64>, CfrError> {
    let (src, dst) = (job.src.as_fd(), job.dst.as_fd());
    let mut first = true;
    for &(start, end) in &job.extents {
        let mut off = start;
        while off < end {
            rep.writes += 1;
            if off != start {
                rep.resubmits += 1;
            }
            match sys::copy_file_range(src, off, dst, off, (end - off) as usize) {
                Ok(0) => return Ok(Some(off)),
                Ok(n) => {
                    off += n as u64;
                    rep.bytes += n as u64;
                    first = false;
                }
                Err(e) => {
                    let err = Error::io(format!("copy_file_range at offset {off}"), e);
                    let refused = matches!(
                        err.raw_os_error(),
                        Some(libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS)
                    );
                    return Err(if first && refused {
                        CfrError::Unsupported(err)
                    } else {
                        CfrError::Failed(err)
                    });
                }
            }
        }
    }
    Ok(None)
}

/// The sequential `pread`/`pwrite` loop. Returns the end of file if it came early.
pub(super) fn rw_copy(job: &Job, rep: &mut CopyReport) -> Result<Option<u64>, Error> {
    let mut buf = AlignedBuf::zeroed(job.block);
    let bad = match job.fault.fail_read_block {
        Some(_) => Some(fault_fd().map_err(|e| Error::io("opening the fault fd", e))?),
        None => None,
    };
    for (idx, (off, want)) in job.blocks().enumerate() {
        let io_len = round_up(want, job.align);
        let src_fd = match (&bad, job.fault.fail_read_block) {
            (Some(b), Some(k)) if k == idx as u64 => b.as_fd(),
            _ => job.src.as_fd(),
        };
        let mut done = 0;
        let mut eof = false;
        while done < want {
            rep.reads += 1;
            if done > 0 {
                rep.resubmits += 1;
            }
            let at = off + done as u64;
            let n = sys::pread(src_fd, &mut buf.as_full_mut_slice()[done..io_len], at)
                .map_err(|e| read_error(at, e))?;
            if n == 0 {
                eof = true;
                break;
            }
            done += n;
            if job.direct && done < want && done % job.align != 0 {
                eof = true;
                break;
            }
        }
        let data = done.min(want);
        if data > 0 {
            let wlen = job.write_len(off, data);
            buf.as_full_mut_slice()[data..wlen].fill(0);
            let mut w = 0;
            while w < wlen {
                rep.writes += 1;
                if w > 0 {
                    rep.resubmits += 1;
                }
                let at = off + w as u64;
                let n = sys::pwrite(job.dst.as_fd(), &buf.as_full_mut_slice()[w..wlen], at)
                    .map_err(|e| write_error(at, e))?;
                if n == 0 {
                    return Err(write_error(at, io::ErrorKind::WriteZero.into()));
                }
                w += n;
            }
            rep.bytes += data as u64;
        }
        if eof {
            return Ok(Some(off + data as u64));
        }
    }
    Ok(None)
}
