//! File IO: opening and releasing files, READ, WRITE, FSYNC, FLUSH,
//! FALLOCATE, LSEEK and COPY_FILE_RANGE.

use super::*;

/// Reads up to `size` bytes at `offset` from `fd` straight into the reply
/// (`pread` on this thread), until the file ends. An error after some bytes
/// returns those; the error comes with the next READ.
pub(super) fn read_into_reply(
    fd: BorrowedFd<'_>,
    mut offset: u64,
    size: usize,
    out: &mut dyn ZeroCopyWriter,
) -> io::Result<()> {
    let mut left = size;
    let mut done = 0usize;
    while left > 0 {
        match out.write_from_file(fd, offset, left) {
            Ok(0) => break,
            Ok(n) => {
                offset += n as u64;
                left = left.saturating_sub(n);
                done += n;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl PassthroughFs {
    /// The reply to an open of a regular file with handle `fh` and backing
    /// id `backing_id` (0: served by the daemon). A passthrough open
    /// carries only `FOPEN_PASSTHROUGH`: the kernel refuses it next to
    /// `FOPEN_KEEP_CACHE` (the user's open fails), and `FOPEN_DIRECT_IO`
    /// would send READ and WRITE to the daemon again; passthrough I/O
    /// bypasses FUSE's page cache anyway.
    ///
    /// With `zero_copy` ([`PassthroughFs::zero_copy_wanted`]), a file the
    /// daemon serves asks for zero copy (`FOPEN_IO_URING_ZERO_COPY`): on
    /// an io_uring queue with zero copy (Linux 7.3) its READ and WRITE data
    /// then moves between the kernel's pages and the backing file without
    /// passing through the daemon, since READ and WRITE name the backing
    /// descriptor (`write_from_file` / `read_to_file`). The server takes
    /// the flag off where the queue has no zero copy; never next to
    /// `FOPEN_PASSTHROUGH`, which the kernel refuses.
    pub(super) fn file_opened(&self, fh: u64, backing_id: i32, zero_copy: bool) -> Opened {
        if backing_id > 0 {
            Opened {
                fh,
                flags: FopenFlags::PASSTHROUGH,
                backing_id,
            }
        } else {
            let mut flags = self.fopen_flags(false);
            if zero_copy {
                flags |= FopenFlags::IO_URING_ZERO_COPY;
            }
            Opened {
                fh,
                flags,
                backing_id: 0,
            }
        }
    }

    /// Whether an open of `inode` with `flags` (its descriptor `fd`, if
    /// there is one to probe) asks for zero copy, by
    /// [`PassthroughConfig::zero_copy`].
    pub(super) fn zero_copy_wanted(
        &self,
        inode: &Inode,
        fd: Option<BorrowedFd<'_>>,
        flags: i32,
    ) -> bool {
        match self.cfg.zero_copy {
            ZeroCopyPolicy::Never => false,
            ZeroCopyPolicy::Always => true,
            ZeroCopyPolicy::Auto => {
                let direct = flags & libc::O_DIRECT != 0 || self.cfg.cache == CachePolicy::Never;
                !direct || self.supports_nowait(inode.key.dev(), fd)
            }
        }
    }

    /// Whether the backing file system `dev` supports `RWF_NOWAIT` (so
    /// io_uring completes its reads and writes inline): a
    /// `preadv2(RWF_NOWAIT)` of one aligned page (`O_DIRECT` descriptors
    /// want one) on a readable descriptor of it says, once per file
    /// system; `EOPNOTSUPP` is no. Unknown (nothing readable to probe yet)
    /// counts as no.
    fn supports_nowait(&self, dev: u64, fd: Option<BorrowedFd<'_>>) -> bool {
        if let Some(&known) = lock(&self.nowait_devices).get(&dev) {
            return known;
        }
        let Some(fd) = fd else {
            return false;
        };
        let Ok(mut page) = fuse_server::AlignedBuf::new(4096) else {
            return false;
        };
        let supported = match sys::preadv2_nowait(fd, &mut page, 0) {
            Ok(_) => true,
            Err(e) => match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => false,
                // Not cached: the page wasn't there, but RWF_NOWAIT was
                // understood.
                Some(libc::EAGAIN) => true,
                // Write-only, or another error: ask again next time.
                _ => return false,
            },
        };
        tracing::debug!(dev, supported, "backing file system RWF_NOWAIT support");
        lock(&self.nowait_devices).insert(dev, supported);
        supported
    }

    /// Inserts the handle of the regular file `inode` opened as `fd` and
    /// answers the open, passed through when possible. `mode`: the file's
    /// mode if known (else it is read when a backing id would be made).
    /// Runs with the daemon's credentials (backing ids record them).
    ///
    /// A writable handle counts as a writer of the file
    /// ([`PassthroughFs::writer_opened`]) until released; `writer_counted`:
    /// the caller counted it already (CREATE, before its entry).
    pub(super) fn open_file(
        &self,
        inode: &Inode,
        fd: OwnedFd,
        flags: i32,
        mode: Option<u32>,
        writer_counted: bool,
    ) -> io::Result<Opened> {
        let writer = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writer && !writer_counted {
            self.writer_opened(inode, true);
        }
        let zero_copy = self.zero_copy_wanted(inode, Some(fd.as_fd()), flags);
        let ticket = self.pt.open(inode.nodeid, fd.as_fd(), || {
            // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves clearing
            // set-user-ID on write to the daemon's WRITE, which passthrough
            // never sends: such files are served by the daemon. (Without
            // it the kernel clears the bits itself, passthrough or not.)
            if !self.killpriv_v2() {
                return false;
            }
            let mode = mode.or_else(|| {
                sys::statx_fd(fd.as_fd(), libc::STATX_MODE)
                    .ok()
                    .map(|st| st.stx_mode as u32)
            });
            // Unknown: let the daemon serve it.
            mode.is_none_or(passthrough::privileged_mode)
        });
        let mut handle = Handle::file(fd, inode.nodeid, flags);
        handle.passthrough_id = ticket.as_ref().map_or(-1, |t| t.backing_id);
        match self.handles.insert(handle) {
            Ok(fh) => {
                let backing_id = ticket.as_ref().map_or(0, |t| t.backing_id);
                if let Some(t) = ticket {
                    self.pt.bind(t, fh);
                }
                Ok(self.file_opened(fh, backing_id, zero_copy))
            }
            Err(e) => {
                if let Some(t) = ticket {
                    self.pt.abandon(t);
                }
                if writer {
                    self.writer_closed(inode.nodeid);
                }
                Err(e)
            }
        }
    }

    /// Clears set-user-ID and set-group-ID (if group-executable) of the
    /// open file `fd` of node `ino`, for a WRITE whose reply can't carry
    /// the new mode: the kernel is told to drop the attributes it cached.
    pub(super) fn kill_suidgid_fd(&self, ino: u64, fd: BorrowedFd<'_>) -> io::Result<()> {
        let st = sys::statx_fd(fd, libc::STATX_MODE)?;
        let mode = st.stx_mode as u32 & 0o7777;
        let new = killed_mode(mode);
        if new != mode {
            self.creds.root();
            sys::fchmod(fd, new)?;
            self.attributes_changed(ino);
        }
        Ok(())
    }

    /// Tells the kernel that the attributes it cached of `ino` are stale
    /// (an INVAL_INODE of the attributes only), if a notifier was given.
    fn attributes_changed(&self, ino: u64) {
        let notifier = lock(&self.notifier).clone();
        if let Some(n) = notifier {
            if let Err(e) = n.inval_inode(ino, -1, 0) {
                tracing::debug!(ino, error = %e, "attribute invalidation not sent");
            }
        }
    }

    /// Writes all of `data` to `fd` at `offset`, stopping at a short count.
    pub(super) fn write_from(
        fd: BorrowedFd<'_>,
        mut offset: u64,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let left = data.remaining();
            if left == 0 {
                return Ok(total);
            }
            match data.read_to_file(fd, offset, left) {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    total += n;
                    offset += n as u64;
                    if n < left {
                        return Ok(total);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) if total > 0 => return Ok(total),
                Err(e) => return Err(e),
            }
        }
    }
}

impl PassthroughFs {
    pub(super) fn open(&self, ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        if self.no_open() {
            return Err(errno(libc::ENOSYS));
        }
        self.close_resent_handle(ctx);
        let inode = self.inodes.get(ino)?;
        if !inode.is_reg() {
            return Err(errno(if inode.is_dir() {
                libc::EISDIR
            } else {
                libc::EINVAL
            }));
        }
        self.creds.caller(ctx)?;
        let (flags, promoted) = self.backing_open_flags(args.flags);
        let fd = match inode.file.reopen(self.proc_fd(), flags) {
            Err(e) if promoted && e.raw_os_error() == Some(libc::EACCES) => {
                // Write-only for the caller (the kernel checked that); the
                // writeback cache needs to read too.
                self.creds.root();
                inode.file.reopen(self.proc_fd(), flags)?
            }
            r => r?,
        };
        if args.kill_suidgid() && self.killpriv_v2() {
            self.kill_suidgid_fd(ino, fd.as_fd())?;
        }
        // Backing ids are registered with the daemon's credentials.
        self.creds.root();
        self.open_file(&inode, fd, flags, None, false)
    }

    pub(super) fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        read_into_reply(h.fd(), args.offset, args.size as usize, out)
    }

    pub(super) fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        // An appending write lands wherever the end is: a resend must not
        // append again what its first attempt did (crash recovery).
        let appended_before = if h.flags & libc::O_APPEND != 0 && self.inodes.keeps_crash_table() {
            super::crash::append_done_before(h.fd(), data)?
        } else {
            0
        };
        if appended_before > 0 && data.remaining() == 0 {
            return Ok(appended_before);
        }
        let n = match Self::write_from(h.fd(), args.offset, data) {
            // A page cache write through a handle opened with O_DIRECT may
            // be unaligned (the tail of the file): write it buffered.
            Err(e)
                if e.raw_os_error() == Some(libc::EINVAL)
                    && h.flags & libc::O_DIRECT != 0
                    && args.from_cache() =>
            {
                let inode = self.inodes.get(ino)?;
                let fd = inode.file.reopen(self.proc_fd(), libc::O_WRONLY)?;
                Self::write_from(fd.as_fd(), args.offset, data)?
            }
            r => r?,
        };
        if args.kill_suidgid() && self.killpriv_v2() {
            self.kill_suidgid_fd(ino, h.fd())?;
        }
        Ok(appended_before + n)
    }

    pub(super) fn release(&self, _ctx: &Context, ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        if args.fh == 0 {
            return Ok(());
        }
        if args.release_flags.contains(ReleaseFlags::FLOCK_UNLOCK) {
            // The descriptor may live on while a request still uses it.
            // Unlocked before the handle leaves the table, so that once
            // the handle count no longer has it, its flock is gone too (a
            // client's close returns before the kernel sends this).
            if let Some(h) = self.handles.get(args.fh) {
                let _ = sys::flock(h.fd(), libc::LOCK_UN);
            }
        }
        let h = self
            .handles
            .remove(args.fh)
            .ok_or_else(|| errno(libc::EBADF))?;
        if h.flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.writer_closed(h.nodeid);
        }
        // The last release of a passthrough inode closes its backing id.
        self.pt.release(args.fh);
        if let Ok(inode) = self.inodes.get(ino) {
            self.release_lock_ctxs(&inode, args.fh);
        }
        Ok(())
    }

    pub(super) fn fsync(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        sys::fsync(h.fd(), args.datasync())
    }

    pub(super) fn flush(&self, _ctx: &Context, ino: u64, args: &FlushArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        // A close releases the closing process's POSIX locks on the file:
        // drop the owner's lock context (its descriptor holds them).
        if let Ok(inode) = self.inodes.get(ino) {
            let ctx = {
                let mut locks = lock(&inode.cold().locks);
                locks
                    .iter()
                    .position(|(o, _)| *o == args.lock_owner)
                    .map(|i| locks.swap_remove(i))
            };
            drop(ctx);
        }
        sys::close_dup(h.fd())
    }

    pub(super) fn fallocate(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &FallocateArgs,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        sys::fallocate(h.fd(), args.mode as i32, args.offset, args.length)
    }

    pub(super) fn lseek(&self, _ctx: &Context, ino: u64, args: &LseekArgs) -> io::Result<u64> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        // The kernel's loff_t on the wire: a negative offset is the backing
        // file system's to refuse (ENXIO for SEEK_DATA/SEEK_HOLE, EINVAL for
        // SEEK_SET), as natively (xfstests generic/448).
        let offset = args.offset as i64;
        let Some(stream) = &h.dir else {
            return sys::lseek(h.fd(), offset, args.whence as i32);
        };
        // A directory's descriptor moves under its stream: what the stream
        // buffered and the cookie it stands at are stale after this.
        let mut stream = lock(stream);
        stream.invalidate();
        sys::lseek(h.fd(), offset, args.whence as i32)
    }

    pub(super) fn copy_file_range(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &CopyFileRangeArgs,
    ) -> io::Result<u64> {
        self.creds.root();
        let hin = self.handle(ino, args.fh_in)?;
        let hout = self.handle(args.nodeid_out, args.fh_out)?;
        let flags = u32::try_from(args.flags).map_err(|_| errno(libc::EINVAL))?;
        let len = usize::try_from(args.len).unwrap_or(usize::MAX);
        let n = sys::copy_file_range(hin.fd(), args.off_in, hout.fd(), args.off_out, len, flags)?;
        Ok(n as u64)
    }
}
