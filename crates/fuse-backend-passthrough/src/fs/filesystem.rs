//! `impl FileSystem for PassthroughFs`: INIT's negotiation, DESTROY,
//! and every other operation forwarded to the inherent method of the same
//! name in the module of its concern.
//!
//! Apart from `mod.rs` because it is the trait's one long list; the
//! passthrough's state and helpers stay there.

use super::*;

// The operations live in the child modules by concern (`lookup`, `attr`,
// `file`, `dir`, `xattr`, `locking`); the operations after `forward` are
// forwarded to the inherent methods of the same name there, their
// signatures taken from fuse-server's operation list.
fuse_server::impl_file_system! {
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

        // Not in the operation list (a trait method with a default).
        fn batch_forget(&self, ctx: &Context, items: fuse_server::request::ForgetList<'_>) {
            PassthroughFs::batch_forget(self, ctx, items)
        }

        fn statfs(&self, _ctx: &Context, ino: u64) -> io::Result<Kstatfs> {
            self.creds.root();
            let inode = self.inodes.get(ino)?;
            let pfd = inode.file.path_fd()?;
            Self::statfs_of(pfd.as_fd())
        }

        fn interrupt(&self, _ctx: &Context, unique: u64) {
            #[cfg(feature = "fault-injection")]
            if crate::fault::interrupts_dropped() {
                tracing::debug!(unique, "INTERRUPT dropped (fault hook)");
                return;
            }
            self.waits.interrupt(unique);
        }

        fn stop_waits(&self) {
            self.waits.stop();
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
    }
    forward {
        lookup, forget, getattr, setattr, readlink, symlink, mknod, mkdir, unlink, rmdir, rename, link, open, read, write, release, fsync, setxattr, getxattr, listxattr, removexattr, flush, opendir, readdir, readdirplus, releasedir, fsyncdir, getlk, setlk, access, create, fallocate, lseek, copy_file_range, tmpfile, statx
    }
}
