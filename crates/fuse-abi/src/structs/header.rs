//! The frame of every message: the request and reply headers, the request
//! extensions that follow a request's arguments, and the INIT, CUSE_INIT and
//! INTERRUPT messages that set up and steer the connection. Apart because
//! they belong to no single operation.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

abi_structs! {
    /// Header of every request (`struct fuse_in_header`).
    pub struct InHeader {
        /// Total length of the request, this header included.
        pub len: u32,
        /// [`crate::Opcode`].
        pub opcode: u32,
        /// Request id, echoed in the reply.
        pub unique: u64,
        /// Node id the request is about.
        pub nodeid: u64,
        /// Caller's effective uid.
        pub uid: u32,
        /// Caller's effective gid.
        pub gid: u32,
        /// Caller's thread id.
        pub pid: u32,
        /// Length of the extensions at the end of the request, in 8-byte units.
        pub total_extlen: u16,
        /// Padding.
        pub padding: u16,
    }

    /// Header of every reply and notification (`struct fuse_out_header`).
    pub struct OutHeader {
        /// Total length of the reply, this header included.
        pub len: u32,
        /// 0 or a negative errno; a notification code for notifications.
        pub error: i32,
        /// `unique` of the request (0 for notifications).
        pub unique: u64,
    }

    /// INIT request (`struct fuse_init_in`).
    pub struct InitIn {
        /// Kernel's major version.
        pub major: u32,
        /// Kernel's minor version.
        pub minor: u32,
        /// Largest readahead the kernel will do.
        pub max_readahead: u32,
        /// Low half of the offered [`crate::InitFlags`].
        pub flags: u32,
        /// High half of the offered [`crate::InitFlags`] (with `FUSE_INIT_EXT`).
        pub flags2: u32,
        /// Unused.
        pub unused: [u32; 11],
    }

    /// INIT reply (`struct fuse_init_out`).
    pub struct InitOut {
        /// Server's major version.
        pub major: u32,
        /// Server's minor version.
        pub minor: u32,
        /// Largest readahead.
        pub max_readahead: u32,
        /// Low half of the accepted [`crate::InitFlags`].
        pub flags: u32,
        /// Largest number of background requests.
        pub max_background: u16,
        /// Number of background requests at which the kernel marks the connection congested.
        pub congestion_threshold: u16,
        /// Largest WRITE payload.
        pub max_write: u32,
        /// Timestamp granularity in nanoseconds.
        pub time_gran: u32,
        /// Largest number of pages of one request, with `FUSE_MAX_PAGES`.
        pub max_pages: u16,
        /// log2 of the DAX mapping alignment, with `FUSE_MAP_ALIGNMENT`.
        pub map_alignment: u16,
        /// High half of the accepted [`crate::InitFlags`].
        pub flags2: u32,
        /// Largest stacking depth of passthrough backing files, with `FUSE_PASSTHROUGH`.
        pub max_stack_depth: u32,
        /// Request timeout in seconds, with `FUSE_REQUEST_TIMEOUT`.
        pub request_timeout: u16,
        /// Unused.
        pub unused: [u16; 11],
    }

    /// CUSE_INIT request (`struct cuse_init_in`).
    pub struct CuseInitIn {
        /// Kernel's major version.
        pub major: u32,
        /// Kernel's minor version.
        pub minor: u32,
        /// Unused.
        pub unused: u32,
        /// [`crate::CuseInitFlags`].
        pub flags: u32,
    }

    /// CUSE_INIT reply (`struct cuse_init_out`), followed by the device info.
    pub struct CuseInitOut {
        /// Server's major version.
        pub major: u32,
        /// Server's minor version.
        pub minor: u32,
        /// Unused.
        pub unused: u32,
        /// [`crate::CuseInitFlags`].
        pub flags: u32,
        /// Largest read.
        pub max_read: u32,
        /// Largest write.
        pub max_write: u32,
        /// Character device major number.
        pub dev_major: u32,
        /// Character device minor number.
        pub dev_minor: u32,
        /// Spare.
        pub spare: [u32; 10],
    }

    /// INTERRUPT argument (`struct fuse_interrupt_in`).
    pub struct InterruptIn {
        /// `unique` of the request to interrupt.
        pub unique: u64,
    }

    /// One security context (`struct fuse_secctx`), followed by its name and value.
    pub struct Secctx {
        /// Size of the context value.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Security context extension header (`struct fuse_secctx_header`).
    pub struct SecctxHeader {
        /// Total size of all contexts, this header included.
        pub size: u32,
        /// Number of contexts.
        pub nr_secctx: u32,
    }

    /// Header of a request extension (`struct fuse_ext_header`).
    pub struct ExtHeader {
        /// Size of the extension, this header included.
        pub size: u32,
        /// Extension type ([`crate::EXT_GROUPS`], or a secctx count up to
        /// [`crate::MAX_NR_SECCTX`]).
        pub r#type: u32,
    }

    /// Supplementary groups extension (`struct fuse_supp_groups`), followed by
    /// `nr_groups` group ids.
    pub struct SuppGroups {
        /// Number of group ids that follow.
        pub nr_groups: u32,
    }
}
