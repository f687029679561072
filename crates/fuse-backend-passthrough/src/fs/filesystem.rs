//! `impl FileSystem for PassthroughFs`: INIT's negotiation, DESTROY,
//! and every other operation forwarded to the inherent method of the same
//! name in the module of its concern.
//!
//! Apart from `mod.rs` because it is the trait's one long list; the
//! passthrough's state and helpers stay there.

use super::*;

// The operations live in the child modules by concern (`lookup`, `attr`,
// `file`, `dir`, `xattr`, `locking`); their trait methods forward to the
// inherent methods of the same name there.
impl FileSystem for PassthroughFs {
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        self.kernel_minor.store(kernel.minor, Ordering::Release);
        self.start_watch();
        self.start_pruner(false);
        // No FUSE_ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC in OPEN
        // and checks write access for the truncation (ETXTBSY for a file
        // being executed) only after the open, so a refused open(O_RDONLY |
        // O_TRUNC) of a running executable emptied it. Without it, O_TRUNC
        // of an existing file is a SETATTR after the kernel's checks.
        let mut want = InitFlags::POSIX_LOCKS | InitFlags::FLOCK_LOCKS;
        if self.cfg.readdirplus_offered() {
            want |= InitFlags::DO_READDIRPLUS | InitFlags::READDIRPLUS_AUTO;
        }
        if self.cfg.writeback {
            want |= InitFlags::WRITEBACK_CACHE;
        }
        if self.cfg.xattr {
            want |= InitFlags::SETXATTR_EXT;
        }
        match self.cfg.cache {
            CachePolicy::Never => want |= InitFlags::DIRECT_IO_ALLOW_MMAP,
            // AUTO_INVAL_DATA: cached data goes when the attributes show
            // the file changed, so it may be kept across opens.
            CachePolicy::Auto | CachePolicy::Always => {
                want |= InitFlags::CACHE_SYMLINKS | InitFlags::AUTO_INVAL_DATA
            }
        }
        if self.cfg.no_open {
            want |= InitFlags::NO_OPEN_SUPPORT;
        }
        if self.cfg.no_opendir {
            want |= InitFlags::NO_OPENDIR_SUPPORT;
        }
        want |= self.passthrough_init(kernel, config);
        if let Some(seconds) = self.cfg.request_timeout {
            if kernel.flags.contains(InitFlags::REQUEST_TIMEOUT) {
                want |= InitFlags::REQUEST_TIMEOUT;
                config.request_timeout = seconds;
            } else {
                tracing::warn!(
                    "the kernel offers no request timeout (FUSE_REQUEST_TIMEOUT, Linux 6.14+): \
                     requests are not timed out"
                );
            }
        }
        if self.cfg.allow_idmap {
            if kernel.flags.contains(InitFlags::ALLOW_IDMAP) {
                want |= InitFlags::ALLOW_IDMAP;
            } else {
                tracing::warn!(
                    "the kernel offers no idmapped mounts (FUSE_ALLOW_IDMAP, Linux 6.12+): \
                     mount_setattr(MOUNT_ATTR_IDMAP) on this mount will fail"
                );
            }
        }
        self.creds.set_idmap(
            want.contains(InitFlags::ALLOW_IDMAP) && kernel.flags.contains(InitFlags::ALLOW_IDMAP),
        );
        let agreed = (config.flags | want) & kernel.flags;
        let passthrough =
            agreed.contains(InitFlags::PASSTHROUGH) && !agreed.contains(InitFlags::WRITEBACK_CACHE);
        let killpriv_v2 = match self.cfg.killpriv_v2 {
            KillPrivV2::On => true,
            KillPrivV2::Off => false,
            // Exact only where the daemon sees every write.
            KillPrivV2::Auto => !passthrough,
        };
        if killpriv_v2 {
            want |= InitFlags::HANDLE_KILLPRIV_V2;
        }
        config.flags |= want;
        let got = config.flags & kernel.flags;
        self.pt.set_active(passthrough);
        if passthrough {
            tracing::info!(
                max_stack_depth = config.max_stack_depth,
                "kernel passthrough on: the kernel reads and writes open files' backing files"
            );
        }
        self.agreed
            .writeback
            .store(got.contains(InitFlags::WRITEBACK_CACHE), Ordering::Relaxed);
        self.agreed.killpriv_v2.store(
            got.contains(InitFlags::HANDLE_KILLPRIV_V2),
            Ordering::Relaxed,
        );
        self.agreed
            .no_open
            .store(got.contains(InitFlags::NO_OPEN_SUPPORT), Ordering::Relaxed);
        self.agreed.no_opendir.store(
            got.contains(InitFlags::NO_OPENDIR_SUPPORT),
            Ordering::Relaxed,
        );
        if self.cfg.writeback && !self.writeback() {
            tracing::warn!("the kernel does not offer the writeback cache");
        }
        if (self.cfg.no_open && !got.contains(InitFlags::NO_OPEN_SUPPORT))
            || (self.cfg.no_opendir && !got.contains(InitFlags::NO_OPENDIR_SUPPORT))
        {
            tracing::warn!("the kernel does not offer zero-message opens; opening normally");
        }
        tracing::debug!(
            flags = format_args!("{:#x}", got.bits()),
            caller_credentials = self.creds.enabled(),
            "passthrough INIT"
        );
        Ok(())
    }

    fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {
        self.pt.attach(files);
    }

    fn destroy(&self) {
        if self.pt.wanted() {
            let s = self.pt.stats();
            tracing::info!(
                passthrough_opens = s.passthrough_opens,
                daemon_opens = s.fallback_opens,
                backing_ids = s.registered,
                "kernel passthrough at unmount"
            );
        }
        if let Some(s) = self.prune_stats().filter(|s| s.rounds > 0) {
            // What the bound did, for the suites that run with a small one.
            tracing::info!(
                limit = s.limit,
                rounds = s.rounds,
                offered = s.offered,
                "inode table bound at unmount"
            );
        }
        // Backing ids first, while the connection can still close them.
        self.pt.clear();
        self.handles.clear();
        self.inodes.clear();
    }

    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        PassthroughFs::lookup(self, _ctx, parent, name)
    }

    fn forget(&self, _ctx: &Context, ino: u64, nlookup: u64) {
        PassthroughFs::forget(self, _ctx, ino, nlookup)
    }

    fn batch_forget(&self, ctx: &Context, items: fuse_server::request::ForgetList<'_>) {
        PassthroughFs::batch_forget(self, ctx, items)
    }

    fn getattr(&self, _ctx: &Context, ino: u64, fh: Option<u64>) -> io::Result<AttrReply> {
        PassthroughFs::getattr(self, _ctx, ino, fh)
    }

    fn setattr(&self, ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        PassthroughFs::setattr(self, ctx, ino, args)
    }

    fn readlink(&self, _ctx: &Context, ino: u64) -> io::Result<Vec<u8>> {
        PassthroughFs::readlink(self, _ctx, ino)
    }

    fn symlink(&self, ctx: &Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        PassthroughFs::symlink(self, ctx, parent, name, target)
    }

    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MknodArgs,
    ) -> io::Result<Entry> {
        PassthroughFs::mknod(self, ctx, parent, name, args)
    }

    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        PassthroughFs::mkdir(self, ctx, parent, name, args)
    }

    fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::unlink(self, ctx, parent, name)
    }

    fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::rmdir(self, ctx, parent, name)
    }

    fn rename(&self, ctx: &Context, parent: u64, args: &RenameArgs<'_>) -> io::Result<()> {
        PassthroughFs::rename(self, ctx, parent, args)
    }

    fn link(&self, ctx: &Context, ino: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        PassthroughFs::link(self, ctx, ino, newparent, newname)
    }

    fn open(&self, ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        PassthroughFs::open(self, ctx, ino, args)
    }

    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        PassthroughFs::read(self, _ctx, ino, args, out)
    }

    fn write(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        PassthroughFs::write(self, _ctx, ino, args, data)
    }

    fn statfs(&self, _ctx: &Context, ino: u64) -> io::Result<Kstatfs> {
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        Self::statfs_of(pfd.as_fd())
    }

    fn release(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        PassthroughFs::release(self, _ctx, _ino, args)
    }

    fn fsync(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        PassthroughFs::fsync(self, _ctx, ino, args)
    }

    fn setxattr(&self, ctx: &Context, ino: u64, args: &SetxattrArgs<'_>) -> io::Result<()> {
        PassthroughFs::setxattr(self, ctx, ino, args)
    }

    fn getxattr(&self, _ctx: &Context, ino: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        PassthroughFs::getxattr(self, _ctx, ino, name, size)
    }

    fn listxattr(&self, _ctx: &Context, ino: u64, size: u32) -> io::Result<XattrReply> {
        PassthroughFs::listxattr(self, _ctx, ino, size)
    }

    fn removexattr(&self, ctx: &Context, ino: u64, name: &CStr) -> io::Result<()> {
        PassthroughFs::removexattr(self, ctx, ino, name)
    }

    fn flush(&self, _ctx: &Context, ino: u64, args: &FlushArgs) -> io::Result<()> {
        PassthroughFs::flush(self, _ctx, ino, args)
    }

    fn opendir(&self, ctx: &Context, ino: u64, _args: &OpenArgs) -> io::Result<Opened> {
        PassthroughFs::opendir(self, ctx, ino, _args)
    }

    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        PassthroughFs::readdir(self, _ctx, ino, args, out)
    }

    fn readdirplus(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        PassthroughFs::readdirplus(self, _ctx, ino, args, out)
    }

    fn releasedir(&self, _ctx: &Context, _ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        PassthroughFs::releasedir(self, _ctx, _ino, args)
    }

    fn fsyncdir(&self, _ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        PassthroughFs::fsyncdir(self, _ctx, ino, args)
    }

    fn getlk(&self, _ctx: &Context, ino: u64, args: &LockArgs) -> io::Result<FileLock> {
        PassthroughFs::getlk(self, _ctx, ino, args)
    }

    fn setlk(&self, ctx: &Context, ino: u64, args: &LockArgs, sleep: bool) -> io::Result<()> {
        PassthroughFs::setlk(self, ctx, ino, args, sleep)
    }

    fn access(&self, ctx: &Context, ino: u64, mask: AccessMask) -> io::Result<()> {
        PassthroughFs::access(self, ctx, ino, mask)
    }

    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        PassthroughFs::create(self, ctx, parent, name, args)
    }

    fn interrupt(&self, _ctx: &Context, unique: u64) {
        self.waits.interrupt(unique);
    }

    fn stop_waits(&self) {
        self.waits.stop();
    }

    fn fallocate(&self, _ctx: &Context, ino: u64, args: &FallocateArgs) -> io::Result<()> {
        PassthroughFs::fallocate(self, _ctx, ino, args)
    }

    fn lseek(&self, _ctx: &Context, ino: u64, args: &LseekArgs) -> io::Result<u64> {
        PassthroughFs::lseek(self, _ctx, ino, args)
    }

    fn copy_file_range(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &CopyFileRangeArgs,
    ) -> io::Result<u64> {
        PassthroughFs::copy_file_range(self, _ctx, ino, args)
    }

    fn syncfs(&self, _ctx: &Context, ino: u64) -> io::Result<()> {
        self.creds.root();
        let inode = match self.inodes.get(ino) {
            Ok(i) if i.is_dir() || i.is_reg() => i,
            _ => self.inodes.root().clone(),
        };
        let flags = if inode.is_dir() {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else {
            libc::O_RDONLY | libc::O_NONBLOCK
        };
        let fd = inode.file.reopen(self.proc_fd(), flags)?;
        sys::syncfs(fd.as_fd())
    }

    fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        PassthroughFs::tmpfile(self, ctx, parent, args)
    }

    fn statx(&self, _ctx: &Context, ino: u64, args: &StatxArgs) -> io::Result<StatxReply> {
        PassthroughFs::statx(self, _ctx, ino, args)
    }
}
