//! `/dev/fuse` ioctl request numbers (`FUSE_DEV_IOC_*`).
//!
//! Only the numbers live here; issuing the ioctls is a transport's job.

/// The ioctl magic of `/dev/fuse` (`FUSE_DEV_IOC_MAGIC`).
pub const DEV_IOC_MAGIC: u32 = 229;

const IOC_NONE: u32 = 0;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Linux's generic `_IOC(dir, type, nr, size)` encoding.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | (ty << 8) | nr
}

/// Clone a session onto a new `/dev/fuse` fd: `_IOR(229, 0, uint32_t)`;
/// the argument is the session's fd.
pub const DEV_IOC_CLONE: u32 = ioc(IOC_READ, DEV_IOC_MAGIC, 0, 4);

/// Register a passthrough backing file: `_IOW(229, 1, struct fuse_backing_map)`;
/// returns the backing id.
pub const DEV_IOC_BACKING_OPEN: u32 = ioc(
    IOC_WRITE,
    DEV_IOC_MAGIC,
    1,
    core::mem::size_of::<crate::BackingMap>() as u32,
);

/// Unregister a backing id: `_IOW(229, 2, uint32_t)`.
pub const DEV_IOC_BACKING_CLOSE: u32 = ioc(IOC_WRITE, DEV_IOC_MAGIC, 2, 4);

/// Ask for INIT to be processed synchronously at mount: `_IO(229, 3)`.
pub const DEV_IOC_SYNC_INIT: u32 = ioc(IOC_NONE, DEV_IOC_MAGIC, 3, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers() {
        assert_eq!(DEV_IOC_CLONE, 0x8004_e500);
        assert_eq!(DEV_IOC_BACKING_OPEN, 0x4010_e501);
        assert_eq!(DEV_IOC_BACKING_CLOSE, 0x4004_e502);
        assert_eq!(DEV_IOC_SYNC_INIT, 0x0000_e503);
    }
}
