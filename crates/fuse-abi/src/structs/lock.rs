//! POSIX locks, BMAP, IOCTL and POLL: the operations that answer with
//! more than data or an error (a conflicting lock, a device block, ioctl
//! output, ready events). Apart from the plain file operations because
//! each has its own reply protocol.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

abi_structs! {
    /// A POSIX lock range (`struct fuse_file_lock`).
    pub struct FileLock {
        /// First byte.
        pub start: u64,
        /// Last byte (inclusive; `OFFSET_MAX` for "to the end").
        pub end: u64,
        /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
        pub r#type: u32,
        /// Thread group id of the lock holder.
        pub pid: u32,
    }

    /// GETLK, SETLK and SETLKW argument (`struct fuse_lk_in`).
    pub struct LkIn {
        /// File handle.
        pub fh: u64,
        /// Lock owner.
        pub owner: u64,
        /// The lock.
        pub lk: FileLock,
        /// [`crate::LkFlags`].
        pub lk_flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to GETLK (`struct fuse_lk_out`).
    pub struct LkOut {
        /// The conflicting lock, or `F_UNLCK`.
        pub lk: FileLock,
    }

    /// BMAP argument (`struct fuse_bmap_in`).
    pub struct BmapIn {
        /// Block in the file.
        pub block: u64,
        /// Block size.
        pub blocksize: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to BMAP (`struct fuse_bmap_out`).
    pub struct BmapOut {
        /// Block on the device.
        pub block: u64,
    }

    /// IOCTL argument (`struct fuse_ioctl_in`), followed by `in_size` bytes.
    pub struct IoctlIn {
        /// File handle.
        pub fh: u64,
        /// [`crate::IoctlFlags`].
        pub flags: u32,
        /// ioctl command.
        pub cmd: u32,
        /// ioctl argument.
        pub arg: u64,
        /// Bytes of input data.
        pub in_size: u32,
        /// Largest output.
        pub out_size: u32,
    }

    /// An iovec of a retried unrestricted ioctl (`struct fuse_ioctl_iovec`).
    pub struct IoctlIovec {
        /// Address in the caller.
        pub base: u64,
        /// Length.
        pub len: u64,
    }

    /// Reply to IOCTL (`struct fuse_ioctl_out`).
    pub struct IoctlOut {
        /// Return value of the ioctl.
        pub result: i32,
        /// [`crate::IoctlFlags`] (`FUSE_IOCTL_RETRY`).
        pub flags: u32,
        /// Number of input iovecs that follow, on retry.
        pub in_iovs: u32,
        /// Number of output iovecs that follow, on retry.
        pub out_iovs: u32,
    }

    /// POLL argument (`struct fuse_poll_in`).
    pub struct PollIn {
        /// File handle.
        pub fh: u64,
        /// Kernel handle for a later poll notification.
        pub kh: u64,
        /// [`crate::PollFlags`].
        pub flags: u32,
        /// poll(2) events wanted.
        pub events: u32,
    }

    /// Reply to POLL (`struct fuse_poll_out`).
    pub struct PollOut {
        /// poll(2) events ready.
        pub revents: u32,
        /// Padding.
        pub padding: u32,
    }
}
