//! Attributes the way a file system thinks of them: a [`FileType`], a
//! permission mode, [`SystemTime`]s; converted to the wire's split
//! seconds and nanoseconds ([`fuse_abi::Attr`]) with `From`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// A regular file.
    RegularFile,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A block device node.
    BlockDevice,
    /// A character device node.
    CharDevice,
    /// A FIFO (named pipe).
    NamedPipe,
    /// A Unix domain socket.
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits of a mode.
    pub const fn mode_bits(self) -> u32 {
        match self {
            FileType::RegularFile => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The type of a mode (its `S_IFMT` bits); `None` for none of them.
    pub const fn from_mode(mode: u32) -> Option<Self> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::RegularFile,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFIFO => FileType::NamedPipe,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The directory entry type (`DT_*`) READDIR and READDIRPLUS entries
    /// carry ([`crate::DirentSink::add`]).
    pub const fn dirent_type(self) -> u32 {
        (match self {
            FileType::RegularFile => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::BlockDevice => libc::DT_BLK,
            FileType::CharDevice => libc::DT_CHR,
            FileType::NamedPipe => libc::DT_FIFO,
            FileType::Socket => libc::DT_SOCK,
        }) as u32
    }
}

/// A node's attributes, for [`crate::Entry::attr`] and
/// [`crate::AttrReply::attr`] (`attr.into()`).
///
/// [`FileAttr::new`] fills what a simple file system rarely cares about
/// (times now, one link, owned by root, a 4096-byte block size); change
/// the fields that matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    /// The inode number stat(2) shows (usually the node id).
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: SystemTime,
    /// Last modification of the contents.
    pub mtime: SystemTime,
    /// Last change of the attributes.
    pub ctime: SystemTime,
    /// What the node is.
    pub kind: FileType,
    /// Permission bits (`0o7777`: set-user-ID, set-group-ID, sticky, rwx).
    pub perm: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node (`libc::makedev`).
    pub rdev: u64,
    /// Preferred I/O size.
    pub blksize: u32,
}

impl FileAttr {
    /// A node `ino` of type `kind` with permissions `perm`: size 0, times
    /// now, one link (two for a directory), owned by uid 0 and gid 0.
    pub fn new(ino: u64, kind: FileType, perm: u32) -> Self {
        let now = SystemTime::now();
        Self {
            ino,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            kind,
            perm: perm & 0o7777,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    /// Sets the size, and the blocks it takes (rounded up to 512 bytes).
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = size;
        self.blocks = size.div_ceil(512);
        self
    }

    /// The mode: type and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | (self.perm & 0o7777)
    }
}

/// Seconds and nanoseconds since the epoch; times before it are clamped
/// to it (the wire's seconds are unsigned).
fn split(t: SystemTime) -> (u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    (d.as_secs(), d.subsec_nanos())
}

impl From<FileAttr> for fuse_abi::Attr {
    fn from(a: FileAttr) -> Self {
        let (atime, atimensec) = split(a.atime);
        let (mtime, mtimensec) = split(a.mtime);
        let (ctime, ctimensec) = split(a.ctime);
        fuse_abi::Attr {
            ino: a.ino,
            size: a.size,
            blocks: a.blocks,
            atime,
            mtime,
            ctime,
            atimensec,
            mtimensec,
            ctimensec,
            mode: a.mode(),
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: encode_rdev(a.rdev),
            blksize: a.blksize,
            flags: 0,
        }
    }
}

/// The wire's 32-bit device number (the kernel's `new_encode_dev`) of a
/// 64-bit `dev_t`.
fn encode_rdev(rdev: u64) -> u32 {
    let major = libc::major(rdev);
    let minor = libc::minor(rdev);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_round_trip_through_modes() {
        for kind in [
            FileType::RegularFile,
            FileType::Directory,
            FileType::Symlink,
            FileType::BlockDevice,
            FileType::CharDevice,
            FileType::NamedPipe,
            FileType::Socket,
        ] {
            assert_eq!(FileType::from_mode(kind.mode_bits() | 0o644), Some(kind));
        }
        assert_eq!(FileType::from_mode(0o644), None);
        assert_eq!(FileType::Directory.dirent_type(), libc::DT_DIR as u32);
    }

    #[test]
    fn converts_to_the_wire() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let attr = FileAttr {
            atime: t,
            mtime: t,
            ctime: t,
            rdev: libc::makedev(8, 1),
            ..FileAttr::new(42, FileType::RegularFile, 0o4755).with_size(1000)
        };
        let wire: fuse_abi::Attr = attr.into();
        assert_eq!(wire.ino, 42);
        assert_eq!(wire.size, 1000);
        assert_eq!(wire.blocks, 2);
        assert_eq!(wire.mode, libc::S_IFREG | 0o4755);
        assert_eq!((wire.mtime, wire.mtimensec), (1_700_000_000, 123_456_789));
        assert_eq!(wire.nlink, 1);
        assert_eq!(
            wire.rdev, 0x801,
            "major 8, minor 1 as the kernel encodes it"
        );
        let before_epoch: fuse_abi::Attr = FileAttr {
            atime: UNIX_EPOCH - Duration::from_secs(5),
            ..attr
        }
        .into();
        assert_eq!((before_epoch.atime, before_epoch.atimensec), (0, 0));
    }
}
