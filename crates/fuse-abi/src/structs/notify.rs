//! Notifications, which the server sends unasked (inval, delete, store,
//! retrieve, poll wake-up, prune), and the kernel's NOTIFY_REPLY. Apart
//! because they flow the other way from requests.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};
// Only the documentation's links name it.
#[cfg(doc)]
use super::WriteIn;

abi_structs! {
    /// POLL notification (`struct fuse_notify_poll_wakeup_out`).
    pub struct NotifyPollWakeupOut {
        /// Kernel handle from the POLL request.
        pub kh: u64,
    }

    /// INVAL_INODE notification (`struct fuse_notify_inval_inode_out`).
    pub struct NotifyInvalInodeOut {
        /// Node id.
        pub ino: u64,
        /// First byte of the data to invalidate (negative: attributes only).
        pub off: i64,
        /// Length (0 or less: to the end).
        pub len: i64,
    }

    /// INVAL_ENTRY notification (`struct fuse_notify_inval_entry_out`), followed by the name.
    pub struct NotifyInvalEntryOut {
        /// Node id of the parent.
        pub parent: u64,
        /// Length of the name.
        pub namelen: u32,
        /// [`crate::NotifyInvalEntryFlags`].
        pub flags: u32,
    }

    /// DELETE notification (`struct fuse_notify_delete_out`), followed by the name.
    pub struct NotifyDeleteOut {
        /// Node id of the parent.
        pub parent: u64,
        /// Node id of the deleted child.
        pub child: u64,
        /// Length of the name.
        pub namelen: u32,
        /// Padding.
        pub padding: u32,
    }

    /// STORE notification (`struct fuse_notify_store_out`), followed by the data.
    pub struct NotifyStoreOut {
        /// Node id.
        pub nodeid: u64,
        /// Offset.
        pub offset: u64,
        /// Bytes of data that follow.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// RETRIEVE notification (`struct fuse_notify_retrieve_out`).
    pub struct NotifyRetrieveOut {
        /// Id echoed in the kernel's NOTIFY_REPLY.
        pub notify_unique: u64,
        /// Node id.
        pub nodeid: u64,
        /// Offset.
        pub offset: u64,
        /// Bytes wanted.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// The kernel's NOTIFY_REPLY to a RETRIEVE (`struct fuse_notify_retrieve_in`),
    /// followed by the data. Same size as [`WriteIn`].
    pub struct NotifyRetrieveIn {
        /// Unused.
        pub dummy1: u64,
        /// Offset.
        pub offset: u64,
        /// Bytes of data that follow.
        pub size: u32,
        /// Unused.
        pub dummy2: u32,
        /// Unused.
        pub dummy3: u64,
        /// Unused.
        pub dummy4: u64,
    }

    /// PRUNE notification (`struct fuse_notify_prune_out`), followed by `count` node ids.
    pub struct NotifyPruneOut {
        /// Number of node ids that follow.
        pub count: u32,
        /// Padding.
        pub padding: u32,
        /// Spare.
        pub spare: u64,
    }
}
