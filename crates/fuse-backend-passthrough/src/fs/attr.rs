//! Attributes: GETATTR, SETATTR, STATX and ACCESS.

use super::*;

/// Converts a statx(2) result to the protocol's attributes.
pub fn attr_from_statx(st: &libc::statx) -> Attr {
    Attr {
        ino: st.stx_ino,
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: st.stx_atime.tv_sec as u64,
        mtime: st.stx_mtime.tv_sec as u64,
        ctime: st.stx_ctime.tv_sec as u64,
        atimensec: st.stx_atime.tv_nsec,
        mtimensec: st.stx_mtime.tv_nsec,
        ctimensec: st.stx_ctime.tv_nsec,
        mode: st.stx_mode as u32,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        rdev: sys::encode_dev(st.stx_rdev_major, st.stx_rdev_minor),
        blksize: st.stx_blksize,
        flags: 0,
    }
}

impl PassthroughFs {
    /// A SETATTR whose mode only clears the set-user-ID bit (and
    /// set-group-ID with group execute), sent for a caller who doesn't own
    /// the file: the kernel's kill-priv on write or truncate (without
    /// `HANDLE_KILLPRIV_V2`), which the VFS does with its own authority. On
    /// a truncate the new size comes in the same SETATTR.
    pub(super) fn is_kernel_priv_kill(
        &self,
        ctx: &Context,
        pfd: &impl AsFd,
        args: &SetattrArgs,
        mode: u32,
    ) -> io::Result<bool> {
        let mode_and_size_only = args.uid.is_none()
            && args.gid.is_none()
            && args.atime.is_none()
            && args.mtime.is_none();
        if !mode_and_size_only || ctx.uid == 0 {
            return Ok(false);
        }
        let st = sys::statx_fd(pfd.as_fd(), libc::STATX_MODE | libc::STATX_UID)?;
        let current = st.stx_mode as u32 & 0o7777;
        Ok(st.stx_uid != ctx.uid
            && current != mode & 0o7777
            && killed_mode(current) == mode & 0o7777)
    }
}

/// The mode without set-user-ID, and without set-group-ID if the group
/// may execute (as the VFS clears them on write, truncate and chown).
pub(super) fn killed_mode(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        m &= !libc::S_ISGID;
    }
    m
}

impl PassthroughFs {
    pub(super) fn getattr(
        &self,
        _ctx: &Context,
        ino: u64,
        fh: Option<u64>,
    ) -> io::Result<AttrReply> {
        self.creds.root();
        let (st, timeout) = match fh {
            Some(fh) if fh != 0 => {
                let timeout = self.attr_timeout_of_node(ino);
                let h = self.handles.get(fh).ok_or_else(|| errno(libc::EBADF))?;
                (sys::statx_fd(h.fd(), libc::STATX_BASIC_STATS)?, timeout)
            }
            _ => {
                let inode = self.inodes.get(ino)?;
                let timeout = self.attr_timeout_of(&inode, true);
                let pfd = inode.file.path_fd()?;
                (
                    sys::statx_fd(pfd.as_fd(), libc::STATX_BASIC_STATS)?,
                    timeout,
                )
            }
        };
        Ok(AttrReply {
            attr: attr_from_statx(&st),
            timeout,
        })
    }

    pub(super) fn setattr(
        &self,
        ctx: &Context,
        ino: u64,
        args: &SetattrArgs,
    ) -> io::Result<AttrReply> {
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let h = match args.fh {
            Some(fh) if fh != 0 => self.handles.get(fh),
            // Zero-message opens: the caller's open file is the inode's.
            Some(_) if self.no_open() => self.lazy_handle(&inode).ok(),
            _ => None,
        };
        let pfd = inode.file.path_fd()?;
        if args.uid.is_some() || args.gid.is_some() {
            sys::fchown_fd(
                pfd.as_fd(),
                args.uid.unwrap_or(u32::MAX),
                args.gid.unwrap_or(u32::MAX),
            )?;
        }
        let chmod = |mode: u32| match &h {
            Some(h) => sys::fchmod(h.fd(), mode & 0o7777),
            None => sys::chmod_path(pfd.proc_path().as_cstr(), mode & 0o7777),
        };
        // The kernel clears set-id bits when someone other than the owner
        // writes or truncates: that chmod is the VFS's, not the caller's
        // (which would fail with EPERM). It runs with the daemon's
        // authority, after the truncation the caller may or may not do.
        let kernel_kill = match args.mode {
            Some(mode) => self.is_kernel_priv_kill(ctx, &pfd, args, mode)?,
            None => false,
        };
        if let Some(mode) = args.mode.filter(|_| !kernel_kill) {
            chmod(mode)?;
        }
        if let Some(size) = args.size {
            match &h {
                Some(h) if h.flags & libc::O_ACCMODE != libc::O_RDONLY => {
                    sys::ftruncate(h.fd(), size)?
                }
                _ => sys::truncate_path(pfd.proc_path().as_cstr(), size)?,
            }
        }
        if let Some(mode) = args.mode.filter(|_| kernel_kill) {
            self.creds.root();
            chmod(mode)?;
        }
        if args.atime.is_some() || args.mtime.is_some() {
            let ts = |t: Option<SetTime>| match t {
                None => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(SetTime::Now) => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(SetTime::At { secs, nsecs }) => libc::timespec {
                    tv_sec: secs,
                    tv_nsec: nsecs as i64,
                },
            };
            let times = [ts(args.atime), ts(args.mtime)];
            if self.writeback() {
                // With the writeback cache the kernel keeps the times and
                // flushes them as any writer (it checked the caller).
                self.creds.root();
            }
            match &h {
                Some(h) => sys::futimens(h.fd(), &times)?,
                None => sys::utimens_fd(pfd.as_fd(), &times)?,
            }
        }
        if args.kill_suidgid && args.mode.is_none() && self.killpriv_v2() && inode.is_reg() {
            let st = sys::statx_fd(pfd.as_fd(), libc::STATX_MODE)?;
            let mode = st.stx_mode as u32 & 0o7777;
            if killed_mode(mode) != mode {
                self.creds.root();
                sys::chmod_path(pfd.proc_path().as_cstr(), killed_mode(mode))?;
            }
        }
        let timeout = self.attr_timeout_of(&inode, true);
        let st = match &h {
            Some(h) => sys::statx_fd(h.fd(), libc::STATX_BASIC_STATS)?,
            None => sys::statx_fd(pfd.as_fd(), libc::STATX_BASIC_STATS)?,
        };
        Ok(AttrReply {
            attr: attr_from_statx(&st),
            timeout,
        })
    }

    pub(super) fn access(&self, ctx: &Context, ino: u64, mask: AccessMask) -> io::Result<()> {
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        sys::faccess_fd(pfd.as_fd(), (mask.bits() & 7) as i32)
    }

    pub(super) fn statx(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &StatxArgs,
    ) -> io::Result<StatxReply> {
        self.creds.root();
        let flags = libc::AT_EMPTY_PATH
            | libc::AT_SYMLINK_NOFOLLOW
            | (args.sx_flags as i32 & libc::AT_STATX_SYNC_TYPE);
        let (st, timeout) = match args.fh {
            Some(fh) if fh != 0 => {
                let timeout = self.attr_timeout_of_node(ino);
                let h = self.handles.get(fh).ok_or_else(|| errno(libc::EBADF))?;
                (
                    sys::statx(h.fd(), sys::EMPTY, flags, args.sx_mask)?,
                    timeout,
                )
            }
            _ => {
                let inode = self.inodes.get(ino)?;
                let timeout = self.attr_timeout_of(&inode, true);
                let pfd = inode.file.path_fd()?;
                (
                    sys::statx(pfd.as_fd(), sys::EMPTY, flags, args.sx_mask)?,
                    timeout,
                )
            }
        };
        Ok(StatxReply {
            statx: fuse_server::statx_from_libc(&st),
            timeout,
        })
    }
}
