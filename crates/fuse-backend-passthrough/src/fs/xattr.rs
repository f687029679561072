//! Extended attributes: SETXATTR, GETXATTR, LISTXATTR and REMOVEXATTR.

use super::*;

/// The largest xattr value and name list Linux has (`XATTR_SIZE_MAX`,
/// `XATTR_LIST_MAX`): a GETXATTR or LISTXATTR asking for more needs no
/// bigger buffer (the kernel caps callers' sizes there too).
pub(super) const XATTR_SIZE_MAX: usize = 65536;

impl PassthroughFs {
    pub(super) fn xattr_enabled(&self) -> io::Result<()> {
        if self.cfg.xattr {
            Ok(())
        } else {
            Err(errno(libc::ENOSYS))
        }
    }
}

impl PassthroughFs {
    pub(super) fn setxattr(
        &self,
        ctx: &Context,
        ino: u64,
        args: &SetxattrArgs<'_>,
    ) -> io::Result<()> {
        self.xattr_enabled()?;
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        sys::setxattr(
            pfd.proc_path().as_cstr(),
            args.name,
            args.value,
            args.flags as i32,
        )
    }

    pub(super) fn getxattr(
        &self,
        _ctx: &Context,
        ino: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<XattrReply> {
        self.xattr_reply(ino, size, |path, buf| sys::getxattr(path, name, buf))
    }

    pub(super) fn listxattr(&self, _ctx: &Context, ino: u64, size: u32) -> io::Result<XattrReply> {
        self.xattr_reply(ino, size, sys::listxattr)
    }

    /// The reply of a GETXATTR or LISTXATTR of `ino` with the kernel's
    /// `size`: `read` (`getxattr(2)` or `listxattr(2)` on the inode's
    /// `/proc` path) asked for the size alone when `size` is 0, else for
    /// the data in a buffer of `size` bytes (at most [`XATTR_SIZE_MAX`]).
    fn xattr_reply(
        &self,
        ino: u64,
        size: u32,
        read: impl Fn(&CStr, &mut [u8]) -> io::Result<usize>,
    ) -> io::Result<XattrReply> {
        self.xattr_enabled()?;
        self.creds.root();
        let inode = self.inodes.get(ino)?;
        let pfd = inode.file.path_fd()?;
        let path = pfd.proc_path();
        if size == 0 {
            let n = read(path.as_cstr(), &mut [])?;
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = Self::reply_buf((size as usize).min(XATTR_SIZE_MAX))?;
        let n = read(path.as_cstr(), &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    pub(super) fn removexattr(&self, ctx: &Context, ino: u64, name: &CStr) -> io::Result<()> {
        self.xattr_enabled()?;
        let inode = self.inodes.get(ino)?;
        self.creds.caller(ctx)?;
        let pfd = inode.file.path_fd()?;
        sys::removexattr(pfd.proc_path().as_cstr(), name)
    }
}
