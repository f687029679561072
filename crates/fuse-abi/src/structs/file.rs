//! Operations on an open file: OPEN and CREATE, RELEASE, FLUSH, READ,
//! WRITE, FSYNC, FALLOCATE, LSEEK, COPY_FILE_RANGE, the kernel passthrough
//! backing map and the DAX mappings. Apart because they all address a
//! file handle.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

abi_structs! {
    /// OPEN and OPENDIR argument (`struct fuse_open_in`).
    pub struct OpenIn {
        /// open(2) flags.
        pub flags: u32,
        /// [`crate::OpenInFlags`].
        pub open_flags: u32,
    }

    /// CREATE argument (`struct fuse_create_in`), followed by the name.
    pub struct CreateIn {
        /// open(2) flags.
        pub flags: u32,
        /// File type and permission bits.
        pub mode: u32,
        /// The caller's umask.
        pub umask: u32,
        /// [`crate::OpenInFlags`].
        pub open_flags: u32,
    }

    /// Reply to OPEN, OPENDIR and (after the entry) CREATE (`struct fuse_open_out`).
    pub struct OpenOut {
        /// File handle.
        pub fh: u64,
        /// [`crate::FopenFlags`].
        pub open_flags: u32,
        /// Backing file id for `FOPEN_PASSTHROUGH`.
        pub backing_id: i32,
    }

    /// RELEASE and RELEASEDIR argument (`struct fuse_release_in`).
    pub struct ReleaseIn {
        /// File handle.
        pub fh: u64,
        /// open(2) flags of the file.
        pub flags: u32,
        /// [`crate::ReleaseFlags`].
        pub release_flags: u32,
        /// Lock owner.
        pub lock_owner: u64,
    }

    /// FLUSH argument (`struct fuse_flush_in`).
    pub struct FlushIn {
        /// File handle.
        pub fh: u64,
        /// Unused.
        pub unused: u32,
        /// Padding.
        pub padding: u32,
        /// Lock owner.
        pub lock_owner: u64,
    }

    /// READ, READDIR and READDIRPLUS argument (`struct fuse_read_in`).
    pub struct ReadIn {
        /// File handle.
        pub fh: u64,
        /// Offset (a directory cookie for READDIR).
        pub offset: u64,
        /// Number of bytes wanted.
        pub size: u32,
        /// [`crate::ReadFlags`].
        pub read_flags: u32,
        /// Lock owner, with `FUSE_READ_LOCKOWNER`.
        pub lock_owner: u64,
        /// open(2) flags of the file.
        pub flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// WRITE argument (`struct fuse_write_in`), followed by the data.
    pub struct WriteIn {
        /// File handle.
        pub fh: u64,
        /// Offset.
        pub offset: u64,
        /// Number of bytes of data that follow.
        pub size: u32,
        /// [`crate::WriteFlags`].
        pub write_flags: u32,
        /// Lock owner, with `FUSE_WRITE_LOCKOWNER`.
        pub lock_owner: u64,
        /// open(2) flags of the file.
        pub flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to WRITE (`struct fuse_write_out`).
    pub struct WriteOut {
        /// Bytes written.
        pub size: u32,
        /// Padding.
        pub padding: u32,
    }

    /// FSYNC and FSYNCDIR argument (`struct fuse_fsync_in`).
    pub struct FsyncIn {
        /// File handle.
        pub fh: u64,
        /// [`crate::FsyncFlags`].
        pub fsync_flags: u32,
        /// Padding.
        pub padding: u32,
    }

    /// FALLOCATE argument (`struct fuse_fallocate_in`).
    pub struct FallocateIn {
        /// File handle.
        pub fh: u64,
        /// Offset.
        pub offset: u64,
        /// Length.
        pub length: u64,
        /// fallocate(2) mode.
        pub mode: u32,
        /// Padding.
        pub padding: u32,
    }

    /// LSEEK argument (`struct fuse_lseek_in`).
    pub struct LseekIn {
        /// File handle.
        pub fh: u64,
        /// Offset.
        pub offset: u64,
        /// `SEEK_*` whence.
        pub whence: u32,
        /// Padding.
        pub padding: u32,
    }

    /// Reply to LSEEK (`struct fuse_lseek_out`).
    pub struct LseekOut {
        /// The resulting offset.
        pub offset: u64,
    }

    /// COPY_FILE_RANGE and COPY_FILE_RANGE_64 argument (`struct fuse_copy_file_range_in`).
    pub struct CopyFileRangeIn {
        /// Source file handle.
        pub fh_in: u64,
        /// Source offset.
        pub off_in: u64,
        /// Node id of the destination.
        pub nodeid_out: u64,
        /// Destination file handle.
        pub fh_out: u64,
        /// Destination offset.
        pub off_out: u64,
        /// Bytes to copy.
        pub len: u64,
        /// copy_file_range(2) flags.
        pub flags: u64,
    }

    /// Reply to COPY_FILE_RANGE_64 (`struct fuse_copy_file_range_out`).
    pub struct CopyFileRangeOut {
        /// Bytes copied.
        pub bytes_copied: u64,
    }

    /// Argument of `FUSE_DEV_IOC_BACKING_OPEN` (`struct fuse_backing_map`).
    pub struct BackingMap {
        /// The backing file's descriptor.
        pub fd: i32,
        /// Flags (none defined).
        pub flags: u32,
        /// Padding.
        pub padding: u64,
    }

    /// SETUPMAPPING argument (`struct fuse_setupmapping_in`), DAX only.
    pub struct SetupmappingIn {
        /// An open file handle.
        pub fh: u64,
        /// Offset in the file.
        pub foffset: u64,
        /// Length of the mapping.
        pub len: u64,
        /// [`crate::SetupmappingFlags`].
        pub flags: u64,
        /// Offset in the DAX window.
        pub moffset: u64,
    }

    /// REMOVEMAPPING header (`struct fuse_removemapping_in`), followed by
    /// `count` [`RemovemappingOne`].
    pub struct RemovemappingIn {
        /// Number of entries that follow.
        pub count: u32,
    }

    /// One range of a REMOVEMAPPING (`struct fuse_removemapping_one`).
    pub struct RemovemappingOne {
        /// Offset in the DAX window.
        pub moffset: u64,
        /// Length.
        pub len: u64,
    }
}
