//! The Linux FUSE kernel protocol, version 7.46, as plain data types.
//!
//! This crate is a transcription of the kernel's `include/uapi/linux/fuse.h`
//! (Linux 7.3) and nothing else: `#[repr(C)]` structs with [`zerocopy`]
//! derives so they can be read from and written to byte buffers without
//! `unsafe`, the opcodes and notification codes as enums, every flag family as
//! a [`bitflags`] type, the FUSE-over-io_uring section ([`uring`]) and the
//! `/dev/fuse` ioctl numbers ([`ioctl`]). It performs no I/O and no
//! allocation.
//!
//! Naming: a kernel `struct fuse_foo_bar` is `FooBar` here (e.g.
//! `fuse_entry_out` is [`EntryOut`]); field names are the kernel's, without
//! leading underscores. Flags drop their family prefix: `FUSE_ASYNC_READ` is
//! [`InitFlags::ASYNC_READ`], `FOPEN_KEEP_CACHE` is [`FopenFlags::KEEP_CACHE`].
//!
//! Every struct's size and every field's offset is pinned by the crate's
//! tests, and `cargo xtask abi-check HEADER` compares them against a C
//! compiler's view of a kernel header (see [`layout`]).

#![no_std]

pub mod flags;
pub mod ioctl;
pub mod layout;
// Before `uring`, which declares its command enum with `wire_enum!`.
#[macro_use]
pub mod opcode;
pub mod structs;
pub mod uring;

pub use flags::*;
pub use opcode::*;
pub use structs::*;

/// Major version of the protocol (`FUSE_KERNEL_VERSION`).
pub const KERNEL_VERSION: u32 = 7;

/// Minor version of the protocol this crate describes (`FUSE_KERNEL_MINOR_VERSION`).
pub const KERNEL_MINOR_VERSION: u32 = 46;

/// Node id of the root inode (`FUSE_ROOT_ID`).
pub const ROOT_ID: u64 = 1;

/// The smallest buffer the kernel accepts for reading a request from
/// `/dev/fuse` (`FUSE_MIN_READ_BUFFER`).
pub const MIN_READ_BUFFER: usize = 8192;

/// Size of `fuse_entry_out` before protocol 7.9 (`FUSE_COMPAT_ENTRY_OUT_SIZE`).
pub const COMPAT_ENTRY_OUT_SIZE: usize = 120;
/// Size of `fuse_attr_out` before protocol 7.9 (`FUSE_COMPAT_ATTR_OUT_SIZE`).
pub const COMPAT_ATTR_OUT_SIZE: usize = 96;
/// Size of `fuse_mknod_in` before protocol 7.12 (`FUSE_COMPAT_MKNOD_IN_SIZE`).
pub const COMPAT_MKNOD_IN_SIZE: usize = 8;
/// Size of `fuse_write_in` before protocol 7.9 (`FUSE_COMPAT_WRITE_IN_SIZE`).
pub const COMPAT_WRITE_IN_SIZE: usize = 24;
/// Size of `fuse_statfs_out` before protocol 7.4 (`FUSE_COMPAT_STATFS_SIZE`).
pub const COMPAT_STATFS_SIZE: usize = 48;
/// Size of `fuse_setxattr_in` without `FUSE_SETXATTR_EXT` (`FUSE_COMPAT_SETXATTR_IN_SIZE`).
pub const COMPAT_SETXATTR_IN_SIZE: usize = 8;
/// Size of `fuse_init_out` before protocol 7.5 (`FUSE_COMPAT_INIT_OUT_SIZE`).
pub const COMPAT_INIT_OUT_SIZE: usize = 8;
/// Size of `fuse_init_out` before protocol 7.23 (`FUSE_COMPAT_22_INIT_OUT_SIZE`).
pub const COMPAT_22_INIT_OUT_SIZE: usize = 24;

/// Largest CUSE device info string (`CUSE_INIT_INFO_MAX`).
pub const CUSE_INIT_INFO_MAX: usize = 4096;

/// Largest number of iovecs (in + out) of a retried ioctl (`FUSE_IOCTL_MAX_IOV`).
pub const IOCTL_MAX_IOV: usize = 256;

/// Bit of `fuse_in_header.unique` that marks a resent request (`FUSE_UNIQUE_RESEND`).
pub const UNIQUE_RESEND: u64 = 1 << 63;

/// The uid/gid the kernel sends when an id-mapped mount has no mapping for
/// the caller (`FUSE_INVALID_UIDGID`).
pub const INVALID_UIDGID: u32 = u32::MAX;

/// Largest `nr_secctx` of a security context header (`FUSE_MAX_NR_SECCTX`);
/// extension types up to this value are security context headers.
pub const MAX_NR_SECCTX: u32 = 31;

/// Extension type of the supplementary groups extension (`FUSE_EXT_GROUPS`).
pub const EXT_GROUPS: u32 = 32;

/// Offset of the name in a `fuse_dirent` (`FUSE_NAME_OFFSET`).
pub const NAME_OFFSET: usize = core::mem::size_of::<Dirent>();

/// Offset of the name in a `fuse_direntplus` (`FUSE_NAME_OFFSET_DIRENTPLUS`).
pub const NAME_OFFSET_DIRENTPLUS: usize = core::mem::size_of::<Direntplus>();

/// Rounds a record length up to 8 bytes (`FUSE_REC_ALIGN`, `FUSE_DIRENT_ALIGN`).
pub const fn rec_align(len: usize) -> usize {
    (len + 7) & !7
}

/// Size of a `fuse_dirent` record holding a name of `namelen` bytes
/// (`FUSE_DIRENT_SIZE`).
pub const fn dirent_size(namelen: usize) -> usize {
    rec_align(NAME_OFFSET + namelen)
}

/// Size of a `fuse_direntplus` record holding a name of `namelen` bytes
/// (`FUSE_DIRENTPLUS_SIZE`).
pub const fn direntplus_size(namelen: usize) -> usize {
    rec_align(NAME_OFFSET_DIRENTPLUS + namelen)
}

/// Number of `fuse_removemapping_one` entries that fit one page
/// (`FUSE_REMOVEMAPPING_MAX_ENTRY` for a page of `page_size` bytes).
pub const fn removemapping_max_entry(page_size: usize) -> usize {
    page_size / core::mem::size_of::<RemovemappingOne>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirent_sizes_round_to_eight() {
        assert_eq!(NAME_OFFSET, 24);
        assert_eq!(NAME_OFFSET_DIRENTPLUS, 152);
        assert_eq!(dirent_size(0), 24);
        assert_eq!(dirent_size(1), 32);
        assert_eq!(dirent_size(8), 32);
        assert_eq!(dirent_size(9), 40);
        assert_eq!(direntplus_size(1), 160);
        assert_eq!(removemapping_max_entry(4096), 256);
    }
}
