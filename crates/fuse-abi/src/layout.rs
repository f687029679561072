//! A table of every protocol struct's C name, size, alignment and field
//! offsets, as this crate lays them out.
//!
//! `cargo xtask abi-check HEADER` prints this table (through the
//! `abi-layout` example), compiles a C program against a kernel `fuse.h`
//! that prints the same facts with `sizeof`/`offsetof`, and compares the two.

use crate::uring::{UringBufpool, UringCmdArg, UringCmdReq, UringEntInOut, UringReqHeader};
use crate::*;
use core::mem::{align_of, offset_of, size_of};

/// One field of a protocol struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// The field's C designator, e.g. `"ino"` or `"bufpool.uaddr"`.
    pub c_name: &'static str,
    /// Offset from the start of the struct.
    pub offset: usize,
    /// Size of the field; 0 for a flexible array member (`char name[]`),
    /// which C cannot take the `sizeof` of and which the Rust types omit
    /// (its offset is then the Rust type's size).
    pub size: usize,
}

/// One protocol struct.
///
/// `c_name` is empty for the two Rust-only types standing for the anonymous
/// struct and union of `struct fuse_uring_cmd_req` ([`UringBufpool`],
/// [`UringCmdArg`]); their C counterparts are checked through the
/// designators of `struct fuse_uring_cmd_req` (`bufpool.uaddr`,
/// `ent_zero_copy_buf_index`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StructLayout {
    /// The C type, e.g. `"struct fuse_attr"`.
    pub c_name: &'static str,
    /// The Rust type's name.
    pub rust_name: &'static str,
    /// `size_of`.
    pub size: usize,
    /// `align_of`.
    pub align: usize,
    /// Every field, in declaration order.
    pub fields: &'static [FieldLayout],
}

/// The size of the field a projection closure points at.
const fn field_size<T, F>(_project: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// The size of what an accessor returns (for the union members of
/// [`UringCmdArg`], which are accessors rather than fields).
const fn returned_size<T, R>(_accessor: fn(&T) -> R) -> usize {
    size_of::<R>()
}

/// `layout!("struct fuse_x" => X { field, field => "c_name", ... } + [extra, ...])`:
/// a [`StructLayout`] whose fields are the listed Rust fields (designated by
/// their own name unless a C name is given), then the extra [`FieldLayout`]s.
macro_rules! layout {
    (
        $c:literal => $ty:ident { $( $f:ident $(=> $fc:literal)? ),* $(,)? }
        $( + [ $($extra:expr),* $(,)? ] )?
    ) => {
        StructLayout {
            c_name: $c,
            rust_name: stringify!($ty),
            size: size_of::<$ty>(),
            align: align_of::<$ty>(),
            fields: &[
                $(
                    FieldLayout {
                        c_name: c_name!(stringify!($f) $(, $fc)?),
                        offset: offset_of!($ty, $f),
                        size: field_size(|v: &$ty| &v.$f),
                    },
                )*
                $( $($extra,)* )?
            ],
        }
    };
}

/// The explicit C name if there is one, else the Rust one.
macro_rules! c_name {
    ($rust:expr) => {
        $rust
    };
    ($rust:expr, $c:literal) => {
        $c
    };
}

/// A field of a nested struct, e.g. `dirent.namelen`.
macro_rules! nested {
    ($ty:ident, $c:literal, $($path:ident).+) => {
        FieldLayout {
            c_name: $c,
            offset: offset_of!($ty, $($path).+),
            size: field_size(|v: &$ty| &v.$($path).+),
        }
    };
}

/// A field of the struct a union member holds, e.g. `bufpool.len`: the
/// union is field `$union` of `$outer`, and holds a `$inner` there.
macro_rules! union_member_field {
    ($outer:ident . $union:ident as $inner:ident, $c:literal, $f:ident) => {
        FieldLayout {
            c_name: $c,
            offset: offset_of!($outer, $union) + offset_of!($inner, $f),
            size: field_size(|v: &$inner| &v.$f),
        }
    };
}

/// A trailing flexible array member the Rust type omits: it starts where
/// the Rust type ends.
macro_rules! flexible {
    ($ty:ident, $c:literal) => {
        FieldLayout {
            c_name: $c,
            offset: size_of::<$ty>(),
            size: 0,
        }
    };
}

/// Every protocol struct of this crate, in the header's order.
pub const LAYOUTS: &[StructLayout] = &[
    layout!("struct fuse_attr" => Attr {
        ino, size, blocks, atime, mtime, ctime, atimensec, mtimensec, ctimensec, mode, nlink,
        uid, gid, rdev, blksize, flags,
    }),
    layout!("struct fuse_sx_time" => SxTime { tv_sec, tv_nsec, reserved => "__reserved" }),
    layout!("struct fuse_statx" => Statx {
        mask, blksize, attributes, nlink, uid, gid, mode, spare0 => "__spare0", ino, size,
        blocks, attributes_mask, atime, btime, ctime, mtime, rdev_major, rdev_minor, dev_major,
        dev_minor, spare2 => "__spare2",
    }),
    layout!("struct fuse_kstatfs" => Kstatfs {
        blocks, bfree, bavail, files, ffree, bsize, namelen, frsize, padding, spare,
    }),
    layout!("struct fuse_file_lock" => FileLock { start, end, r#type => "type", pid }),
    layout!("struct fuse_entry_out" => EntryOut {
        nodeid, generation, entry_valid, attr_valid, entry_valid_nsec, attr_valid_nsec, attr,
    }),
    layout!("struct fuse_forget_in" => ForgetIn { nlookup }),
    layout!("struct fuse_forget_one" => ForgetOne { nodeid, nlookup }),
    layout!("struct fuse_batch_forget_in" => BatchForgetIn { count, dummy }),
    layout!("struct fuse_getattr_in" => GetattrIn { getattr_flags, dummy, fh }),
    layout!("struct fuse_attr_out" => AttrOut { attr_valid, attr_valid_nsec, dummy, attr }),
    layout!("struct fuse_statx_in" => StatxIn { getattr_flags, reserved, fh, sx_flags, sx_mask }),
    layout!("struct fuse_statx_out" => StatxOut {
        attr_valid, attr_valid_nsec, flags, spare, stat,
    }),
    layout!("struct fuse_mknod_in" => MknodIn { mode, rdev, umask, padding }),
    layout!("struct fuse_mkdir_in" => MkdirIn { mode, umask }),
    layout!("struct fuse_rename_in" => RenameIn { newdir }),
    layout!("struct fuse_rename2_in" => Rename2In { newdir, flags, padding }),
    layout!("struct fuse_link_in" => LinkIn { oldnodeid }),
    layout!("struct fuse_setattr_in" => SetattrIn {
        valid, padding, fh, size, lock_owner, atime, mtime, ctime, atimensec, mtimensec,
        ctimensec, mode, unused4, uid, gid, unused5,
    }),
    layout!("struct fuse_open_in" => OpenIn { flags, open_flags }),
    layout!("struct fuse_create_in" => CreateIn { flags, mode, umask, open_flags }),
    layout!("struct fuse_open_out" => OpenOut { fh, open_flags, backing_id }),
    layout!("struct fuse_release_in" => ReleaseIn { fh, flags, release_flags, lock_owner }),
    layout!("struct fuse_flush_in" => FlushIn { fh, unused, padding, lock_owner }),
    layout!("struct fuse_read_in" => ReadIn {
        fh, offset, size, read_flags, lock_owner, flags, padding,
    }),
    layout!("struct fuse_write_in" => WriteIn {
        fh, offset, size, write_flags, lock_owner, flags, padding,
    }),
    layout!("struct fuse_write_out" => WriteOut { size, padding }),
    layout!("struct fuse_statfs_out" => StatfsOut { st }),
    layout!("struct fuse_fsync_in" => FsyncIn { fh, fsync_flags, padding }),
    layout!("struct fuse_setxattr_in" => SetxattrIn { size, flags, setxattr_flags, padding }),
    layout!("struct fuse_getxattr_in" => GetxattrIn { size, padding }),
    layout!("struct fuse_getxattr_out" => GetxattrOut { size, padding }),
    layout!("struct fuse_lk_in" => LkIn { fh, owner, lk, lk_flags, padding }),
    layout!("struct fuse_lk_out" => LkOut { lk }),
    layout!("struct fuse_access_in" => AccessIn { mask, padding }),
    layout!("struct fuse_init_in" => InitIn { major, minor, max_readahead, flags, flags2, unused }),
    layout!("struct fuse_init_out" => InitOut {
        major, minor, max_readahead, flags, max_background, congestion_threshold, max_write,
        time_gran, max_pages, map_alignment, flags2, max_stack_depth, request_timeout, unused,
    }),
    layout!("struct cuse_init_in" => CuseInitIn { major, minor, unused, flags }),
    layout!("struct cuse_init_out" => CuseInitOut {
        major, minor, unused, flags, max_read, max_write, dev_major, dev_minor, spare,
    }),
    layout!("struct fuse_interrupt_in" => InterruptIn { unique }),
    layout!("struct fuse_bmap_in" => BmapIn { block, blocksize, padding }),
    layout!("struct fuse_bmap_out" => BmapOut { block }),
    layout!("struct fuse_ioctl_in" => IoctlIn { fh, flags, cmd, arg, in_size, out_size }),
    layout!("struct fuse_ioctl_iovec" => IoctlIovec { base, len }),
    layout!("struct fuse_ioctl_out" => IoctlOut { result, flags, in_iovs, out_iovs }),
    layout!("struct fuse_poll_in" => PollIn { fh, kh, flags, events }),
    layout!("struct fuse_poll_out" => PollOut { revents, padding }),
    layout!("struct fuse_notify_poll_wakeup_out" => NotifyPollWakeupOut { kh }),
    layout!("struct fuse_fallocate_in" => FallocateIn { fh, offset, length, mode, padding }),
    layout!("struct fuse_in_header" => InHeader {
        len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding,
    }),
    layout!("struct fuse_out_header" => OutHeader { len, error, unique }),
    layout!("struct fuse_dirent" => Dirent {
        ino, off, namelen, r#type => "type",
    } + [flexible!(Dirent, "name")]),
    layout!("struct fuse_direntplus" => Direntplus { entry_out, dirent } + [
        nested!(Direntplus, "dirent.ino", dirent.ino),
        nested!(Direntplus, "dirent.off", dirent.off),
        nested!(Direntplus, "dirent.namelen", dirent.namelen),
        nested!(Direntplus, "dirent.type", dirent.r#type),
        FieldLayout {
            c_name: "dirent.name",
            offset: offset_of!(Direntplus, dirent) + size_of::<Dirent>(),
            size: 0,
        },
    ]),
    layout!("struct fuse_notify_inval_inode_out" => NotifyInvalInodeOut { ino, off, len }),
    layout!("struct fuse_notify_inval_entry_out" => NotifyInvalEntryOut { parent, namelen, flags }),
    layout!("struct fuse_notify_delete_out" => NotifyDeleteOut { parent, child, namelen, padding }),
    layout!("struct fuse_notify_store_out" => NotifyStoreOut { nodeid, offset, size, padding }),
    layout!("struct fuse_notify_retrieve_out" => NotifyRetrieveOut {
        notify_unique, nodeid, offset, size, padding,
    }),
    layout!("struct fuse_notify_retrieve_in" => NotifyRetrieveIn {
        dummy1, offset, size, dummy2, dummy3, dummy4,
    }),
    layout!("struct fuse_notify_prune_out" => NotifyPruneOut { count, padding, spare }),
    layout!("struct fuse_backing_map" => BackingMap { fd, flags, padding }),
    layout!("struct fuse_lseek_in" => LseekIn { fh, offset, whence, padding }),
    layout!("struct fuse_lseek_out" => LseekOut { offset }),
    layout!("struct fuse_copy_file_range_in" => CopyFileRangeIn {
        fh_in, off_in, nodeid_out, fh_out, off_out, len, flags,
    }),
    layout!("struct fuse_copy_file_range_out" => CopyFileRangeOut { bytes_copied }),
    layout!("struct fuse_setupmapping_in" => SetupmappingIn { fh, foffset, len, flags, moffset }),
    layout!("struct fuse_removemapping_in" => RemovemappingIn { count }),
    layout!("struct fuse_removemapping_one" => RemovemappingOne { moffset, len }),
    layout!("struct fuse_syncfs_in" => SyncfsIn { padding }),
    layout!("struct fuse_secctx" => Secctx { size, padding }),
    layout!("struct fuse_secctx_header" => SecctxHeader { size, nr_secctx }),
    layout!("struct fuse_ext_header" => ExtHeader { size, r#type => "type" }),
    layout!("struct fuse_supp_groups" => SuppGroups {
        nr_groups,
    } + [flexible!(SuppGroups, "groups")]),
    layout!("struct fuse_uring_ent_in_out" => UringEntInOut {
        flags, commit_id, payload_sz, offset, reserved,
    }),
    layout!("struct fuse_uring_req_header" => UringReqHeader { in_out, op_in, ring_ent_in_out } + [
        nested!(UringReqHeader, "ring_ent_in_out.flags", ring_ent_in_out.flags),
        nested!(UringReqHeader, "ring_ent_in_out.commit_id", ring_ent_in_out.commit_id),
        nested!(UringReqHeader, "ring_ent_in_out.payload_sz", ring_ent_in_out.payload_sz),
        nested!(UringReqHeader, "ring_ent_in_out.offset", ring_ent_in_out.offset),
        nested!(UringReqHeader, "ring_ent_in_out.reserved", ring_ent_in_out.reserved),
    ]),
    layout!("struct fuse_uring_cmd_req" => UringCmdReq { flags, commit_id, qid, padding } + [
        // The anonymous union is the Rust field `arg`; C names its members directly.
        FieldLayout {
            c_name: "bufpool",
            offset: offset_of!(UringCmdReq, arg),
            size: returned_size(UringCmdArg::bufpool),
        },
        union_member_field!(UringCmdReq.arg as UringBufpool, "bufpool.uaddr", uaddr),
        union_member_field!(UringCmdReq.arg as UringBufpool, "bufpool.len", len),
        union_member_field!(UringCmdReq.arg as UringBufpool, "bufpool.reserved", reserved),
        FieldLayout {
            c_name: "ent_zero_copy_buf_index",
            // `UringCmdArg::ent_zero_copy_buf_index` reads the union's first bytes.
            offset: offset_of!(UringCmdReq, arg),
            size: returned_size(UringCmdArg::ent_zero_copy_buf_index),
        },
    ]),
    // Rust-only types for the anonymous struct and union inside
    // `fuse_uring_cmd_req`; C checks them through the designators above.
    layout!("" => UringBufpool { uaddr, len, reserved }),
    layout!("" => UringCmdArg {} + [
        FieldLayout {
            c_name: "bufpool",
            offset: 0,
            size: returned_size(UringCmdArg::bufpool),
        },
        FieldLayout {
            c_name: "ent_zero_copy_buf_index",
            offset: 0,
            size: returned_size(UringCmdArg::ent_zero_copy_buf_index),
        },
    ]),
];
