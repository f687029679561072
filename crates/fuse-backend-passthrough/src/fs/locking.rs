//! POSIX and BSD locks: GETLK and SETLK/SETLKW (the waiting itself is
//! `crate::locks`).

use super::*;

/// A `struct flock` for a protocol lock.
pub(super) fn to_flock(lk: &FileLock) -> io::Result<libc::flock64> {
    let start = i64::try_from(lk.start).map_err(|_| errno(libc::EINVAL))?;
    let len = if lk.end >= i64::MAX as u64 {
        0
    } else if lk.end < lk.start {
        return Err(errno(libc::EINVAL));
    } else {
        (lk.end - lk.start + 1) as i64
    };
    let l_type = match lk.r#type as i32 {
        libc::F_RDLCK => libc::F_RDLCK,
        libc::F_WRLCK => libc::F_WRLCK,
        libc::F_UNLCK => libc::F_UNLCK,
        _ => return Err(errno(libc::EINVAL)),
    };
    // SAFETY: flock64 is plain data; all-zero is valid.
    let mut fl: libc::flock64 = unsafe { std::mem::zeroed() };
    fl.l_type = l_type as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    fl.l_pid = 0;
    Ok(fl)
}

/// A protocol lock from a `struct flock`.
pub(super) fn from_flock(fl: &libc::flock64, pid: u32) -> FileLock {
    let start = fl.l_start.max(0) as u64;
    let end = if fl.l_len <= 0 {
        i64::MAX as u64
    } else {
        start.saturating_add(fl.l_len as u64 - 1)
    };
    FileLock {
        start,
        end,
        r#type: fl.l_type as u32,
        pid,
    }
}

impl PassthroughFs {
    /// The lock context of `owner` on `inode`, made if needed: an open
    /// file description of its own that holds the owner's OFD locks.
    pub(super) fn lock_ctx(&self, inode: &Inode, owner: u64, fh: u64) -> io::Result<Arc<LockCtx>> {
        let mut locks = lock(&inode.cold().locks);
        if let Some((_, ctx)) = locks.iter().find(|(o, _)| *o == owner) {
            let mut fhs = lock(&ctx.fhs);
            if !fhs.contains(&fh) {
                fhs.try_reserve(1).map_err(|_| errno(libc::ENOMEM))?;
                fhs.push(fh);
            }
            drop(fhs);
            return Ok(ctx.clone());
        }
        let fd = if inode.is_dir() {
            inode
                .file
                .reopen(self.proc_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?
        } else if inode.is_reg() {
            match inode.file.reopen(self.proc_fd(), libc::O_RDWR) {
                Ok(fd) => fd,
                Err(_) => inode.file.reopen(self.proc_fd(), libc::O_RDONLY)?,
            }
        } else {
            return Err(errno(libc::EINVAL));
        };
        locks.try_reserve(1).map_err(|_| errno(libc::ENOMEM))?;
        let ctx = Arc::new(LockCtx {
            fd,
            pid: Default::default(),
            fhs: std::sync::Mutex::new(vec![fh]),
        });
        locks.push((owner, ctx.clone()));
        Ok(ctx)
    }

    /// The lock a SETLK or SETLKW asks for, on what it is taken: the
    /// request's open file for `flock`, the owner's lock context for POSIX
    /// locks. `None`: an unlock by an owner without a context, which holds
    /// nothing to release.
    pub(crate) fn lock_op(&self, ino: u64, args: &LockArgs) -> io::Result<Option<LockOp>> {
        if args.flock {
            let op = match args.lock.r#type as i32 {
                libc::F_RDLCK => libc::LOCK_SH,
                libc::F_WRLCK => libc::LOCK_EX,
                libc::F_UNLCK => libc::LOCK_UN,
                _ => return Err(errno(libc::EINVAL)),
            };
            let handle = self.handle(ino, args.fh)?;
            return Ok(Some(LockOp::Flock { handle, op }));
        }
        let inode = self.inodes.get(ino)?;
        let lock = to_flock(&args.lock)?;
        let ctx = if lock.l_type as i32 == libc::F_UNLCK {
            let Some(ctx) = self.find_lock_ctx(&inode, args.owner) else {
                return Ok(None);
            };
            ctx
        } else {
            let ctx = self.lock_ctx(&inode, args.owner, args.fh)?;
            ctx.pid.store(args.lock.pid, Ordering::Relaxed);
            ctx
        };
        Ok(Some(LockOp::Posix { ctx, lock }))
    }

    /// The lock waits of this file system.
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // the async path's
    pub(crate) fn waits(&self) -> &Arc<Waits> {
        &self.waits
    }

    /// File handle `fh` was released: the lock contexts used only through
    /// it end (closing their descriptors releases their locks), as a
    /// native close of an open file releases its OFD locks.
    pub(super) fn release_lock_ctxs(&self, inode: &Inode, fh: u64) {
        let ended: Vec<Arc<LockCtx>> = {
            let mut locks = lock(&inode.cold().locks);
            let mut ended = Vec::new();
            let mut i = 0;
            while i < locks.len() {
                let mut fhs = lock(&locks[i].1.fhs);
                let used = fhs.contains(&fh);
                fhs.retain(|&f| f != fh);
                let done = used && fhs.is_empty();
                drop(fhs);
                if done {
                    ended.push(locks.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
            ended
        };
        // Closed outside the inode's lock list.
        drop(ended);
    }

    pub(super) fn find_lock_ctx(&self, inode: &Inode, owner: u64) -> Option<Arc<LockCtx>> {
        lock(&inode.cold().locks)
            .iter()
            .find(|(o, _)| *o == owner)
            .map(|(_, c)| c.clone())
    }
}

impl PassthroughFs {
    pub(super) fn getlk(&self, _ctx: &Context, ino: u64, args: &LockArgs) -> io::Result<FileLock> {
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let ctx = self.lock_ctx(&inode, args.owner, args.fh)?;
        let mut fl = to_flock(&args.lock)?;
        sys::fcntl_lock(ctx.fd.as_fd(), libc::F_OFD_GETLK, &mut fl)?;
        if fl.l_type as i32 == libc::F_UNLCK {
            return Ok(FileLock {
                r#type: libc::F_UNLCK as u32,
                ..args.lock
            });
        }
        // Whose lock is it? The owner that does not see a conflict in
        // that range holds it alone.
        let conflict = from_flock(&fl, 0);
        let mut pid = 0;
        let others: Vec<Arc<LockCtx>> = lock(&inode.cold().locks)
            .iter()
            .filter(|(o, _)| *o != args.owner)
            .map(|(_, c)| c.clone())
            .collect();
        for other in &others {
            let mut probe = to_flock(&FileLock {
                r#type: libc::F_WRLCK as u32,
                ..conflict
            })?;
            if sys::fcntl_lock(other.fd.as_fd(), libc::F_OFD_GETLK, &mut probe).is_ok()
                && probe.l_type as i32 == libc::F_UNLCK
            {
                pid = other.pid.load(Ordering::Relaxed);
                break;
            }
        }
        if pid == 0 {
            if let Some(first) = others.first() {
                pid = first.pid.load(Ordering::Relaxed);
            }
        }
        Ok(FileLock { pid, ..conflict })
    }

    pub(super) fn setlk(
        &self,
        ctx: &Context,
        ino: u64,
        args: &LockArgs,
        sleep: bool,
    ) -> io::Result<()> {
        self.creds.root();
        let Some(op) = self.lock_op(ino, args)? else {
            return Ok(());
        };
        if sleep && !op.is_unlock() {
            self.waits.wait(ctx.unique, ctx.pid, &op)
        } else if op.try_now()? {
            Ok(())
        } else {
            Err(errno(libc::EAGAIN))
        }
    }
}
