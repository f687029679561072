//! Directories: OPENDIR, READDIR, READDIRPLUS, RELEASEDIR and FSYNCDIR.

use super::*;

/// What a READDIR or READDIRPLUS whose reply holds `stored` entries
/// answers for the listing's result `r`: an error before the first entry
/// is the answer; one after it ends the reply, which carries its entries.
/// (The stream stands right after them, so the next request meets the
/// error again. Answering the error would lose them: the stream moved
/// past them, and the references of READDIRPLUS entries would leak.)
pub(super) fn listing_result(r: io::Result<()>, stored: usize) -> io::Result<()> {
    match r {
        Err(e) if stored == 0 => Err(e),
        _ => Ok(()),
    }
}

impl PassthroughFs {
    pub(super) fn opendir(&self, ctx: &Context, ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        if self.agreed.no_opendir.load(Ordering::Relaxed) {
            return Err(errno(libc::ENOSYS));
        }
        self.close_resent_handle(ctx);
        let inode = self.inodes.get(ino)?;
        if !inode.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let fd = sys::openat(pfd.as_fd(), c".", flags, 0)?;
        let fh = self.handles.insert(Handle::dir(fd, ino, flags))?;
        Ok(Opened {
            fh,
            flags: self.fopen_flags(true),
            backing_id: 0,
        })
    }

    pub(super) fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        let stream = h.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        if self.cfg.no_readdir || args.size == 0 {
            // Listings are off, or the reply has no room: touch nothing.
            return Ok(());
        }
        let mut stream = lock(stream);
        let r = stream.read(h.fd(), args.offset, |e| {
            Ok(out.add(e.ino, e.off, e.dtype as u32, e.name))
        });
        listing_result(r, out.count())
    }

    pub(super) fn readdirplus(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        let stream = h.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        // Names are looked up in the directory being listed: the handle's.
        let parent = self.inodes.get(h.nodeid)?;
        if self.cfg.no_readdir || args.size == 0 {
            // Listings are off, or the reply has no room: touch nothing.
            return Ok(());
        }
        let mut stream = lock(stream);
        // The names this reply will hold, shared out to helpers where they
        // are enough (`listing`): read now, handed out below. An error
        // here is met again by the read below, which answers it.
        let shares = match self.cfg.listing_threads.unwrap_or(1) {
            threads @ 2.. => stream
                .peek(h.fd(), args.offset)
                .map(|records| listing::plan_shares(records, args.size as usize, threads))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let pool = match shares.is_empty() {
            true => None,
            false => self.listing_pool(),
        };
        let mut fill = |ahead: &mut listing::Ahead<'_>| {
            let r = stream.read(h.fd(), args.offset, |e| {
                if is_dot_or_dotdot(e.name) {
                    // No lookup (as libfuse does): a node id of 0 tells the
                    // kernel to make no dentry of it.
                    let entry = Entry {
                        attr: Attr {
                            ino: e.ino,
                            mode: (e.dtype as u32) << 12,
                            ..Attr::default()
                        },
                        ..Entry::default()
                    };
                    return Ok(out.add(&entry, e.off, e.dtype as u32, e.name));
                }
                let looked_up = match ahead.take(e.off) {
                    Some(r) => r,
                    None => self.lookup_listed(&parent, e.cname, e.ino),
                };
                match looked_up {
                    Ok(found) => {
                        if out.add(&found.entry, e.off, e.dtype as u32, e.name) {
                            found.hand_over();
                            Ok(true)
                        } else {
                            // No room: the kernel never gets this entry, and
                            // `found` gives its reference back.
                            Ok(false)
                        }
                    }
                    // Removed since it was listed: skip it.
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(true),
                    Err(err) if out.count() == 0 => Err(err),
                    Err(_) => Ok(false),
                }
            });
            listing_result(r, out.count())
        };
        match pool {
            // The reply is filled on this thread (the crash journal is
            // per thread), the helpers' shares on the pool's.
            Some(pool) => pool.in_place_scope(|scope| {
                fill(&mut listing::Ahead::start(scope, self, &parent, shares))
            }),
            None => fill(&mut listing::Ahead::none()),
        }
    }

    pub(super) fn releasedir(
        &self,
        _ctx: &Context,
        _ino: u64,
        args: &ReleaseArgs,
    ) -> io::Result<()> {
        if args.fh == 0 {
            return Ok(());
        }
        self.handles
            .remove(args.fh)
            .map(drop)
            .ok_or_else(|| errno(libc::EBADF))
    }

    pub(super) fn fsyncdir(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        self.creds.root();
        let h = self.handle(ino, args.fh)?;
        sys::fsync(h.fd(), args.datasync())
    }
}
