//! Pins fuse-abi's layout to what gcc makes of the kernel's `fuse.h`.
//!
//! The numbers below were printed by a C program compiled with gcc 12 on
//! x86_64 against `linux-7.3-rc7/fuse.h` (protocol 7.46), using `sizeof`,
//! `_Alignof` and `offsetof`. Sizes and offsets are the same on every Linux
//! ABI (the header pads its structs explicitly); alignments are checked on
//! 64-bit targets only, since 32-bit x86 aligns `uint64_t` members to 4.
//!
//! `cargo xtask abi-check HEADER` does the same comparison against any
//! header, live; these tests keep the crate honest without a C compiler.

use core::mem::{align_of, offset_of, size_of};
use fuse_abi::layout::{StructLayout, LAYOUTS};
use fuse_abi::uring::{UringBufpool, UringCmdArg, UringCmdReq, UringEntInOut, UringReqHeader};
use fuse_abi::*;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// `(C designator, offset, size)`; size 0 marks a flexible array member.
type Fields = &'static [(&'static str, usize, usize)];

/// `(C struct, size, align, fields)` as gcc lays them out, in the header's
/// order. The two entries without `struct` are the Rust-only types for the
/// anonymous struct and union of `struct fuse_uring_cmd_req` (gcc's
/// `__typeof__(((struct fuse_uring_cmd_req *)0)->bufpool)` and the union at
/// offset 24), keyed by their Rust names.
const GCC: &[(&str, usize, usize, Fields)] = &[
    (
        "struct fuse_attr",
        88,
        8,
        &[
            ("ino", 0, 8),
            ("size", 8, 8),
            ("blocks", 16, 8),
            ("atime", 24, 8),
            ("mtime", 32, 8),
            ("ctime", 40, 8),
            ("atimensec", 48, 4),
            ("mtimensec", 52, 4),
            ("ctimensec", 56, 4),
            ("mode", 60, 4),
            ("nlink", 64, 4),
            ("uid", 68, 4),
            ("gid", 72, 4),
            ("rdev", 76, 4),
            ("blksize", 80, 4),
            ("flags", 84, 4),
        ],
    ),
    (
        "struct fuse_sx_time",
        16,
        8,
        &[("tv_sec", 0, 8), ("tv_nsec", 8, 4), ("__reserved", 12, 4)],
    ),
    (
        "struct fuse_statx",
        256,
        8,
        &[
            ("mask", 0, 4),
            ("blksize", 4, 4),
            ("attributes", 8, 8),
            ("nlink", 16, 4),
            ("uid", 20, 4),
            ("gid", 24, 4),
            ("mode", 28, 2),
            ("__spare0", 30, 2),
            ("ino", 32, 8),
            ("size", 40, 8),
            ("blocks", 48, 8),
            ("attributes_mask", 56, 8),
            ("atime", 64, 16),
            ("btime", 80, 16),
            ("ctime", 96, 16),
            ("mtime", 112, 16),
            ("rdev_major", 128, 4),
            ("rdev_minor", 132, 4),
            ("dev_major", 136, 4),
            ("dev_minor", 140, 4),
            ("__spare2", 144, 112),
        ],
    ),
    (
        "struct fuse_kstatfs",
        80,
        8,
        &[
            ("blocks", 0, 8),
            ("bfree", 8, 8),
            ("bavail", 16, 8),
            ("files", 24, 8),
            ("ffree", 32, 8),
            ("bsize", 40, 4),
            ("namelen", 44, 4),
            ("frsize", 48, 4),
            ("padding", 52, 4),
            ("spare", 56, 24),
        ],
    ),
    (
        "struct fuse_file_lock",
        24,
        8,
        &[
            ("start", 0, 8),
            ("end", 8, 8),
            ("type", 16, 4),
            ("pid", 20, 4),
        ],
    ),
    (
        "struct fuse_entry_out",
        128,
        8,
        &[
            ("nodeid", 0, 8),
            ("generation", 8, 8),
            ("entry_valid", 16, 8),
            ("attr_valid", 24, 8),
            ("entry_valid_nsec", 32, 4),
            ("attr_valid_nsec", 36, 4),
            ("attr", 40, 88),
        ],
    ),
    ("struct fuse_forget_in", 8, 8, &[("nlookup", 0, 8)]),
    (
        "struct fuse_forget_one",
        16,
        8,
        &[("nodeid", 0, 8), ("nlookup", 8, 8)],
    ),
    (
        "struct fuse_batch_forget_in",
        8,
        4,
        &[("count", 0, 4), ("dummy", 4, 4)],
    ),
    (
        "struct fuse_getattr_in",
        16,
        8,
        &[("getattr_flags", 0, 4), ("dummy", 4, 4), ("fh", 8, 8)],
    ),
    (
        "struct fuse_attr_out",
        104,
        8,
        &[
            ("attr_valid", 0, 8),
            ("attr_valid_nsec", 8, 4),
            ("dummy", 12, 4),
            ("attr", 16, 88),
        ],
    ),
    (
        "struct fuse_statx_in",
        24,
        8,
        &[
            ("getattr_flags", 0, 4),
            ("reserved", 4, 4),
            ("fh", 8, 8),
            ("sx_flags", 16, 4),
            ("sx_mask", 20, 4),
        ],
    ),
    (
        "struct fuse_statx_out",
        288,
        8,
        &[
            ("attr_valid", 0, 8),
            ("attr_valid_nsec", 8, 4),
            ("flags", 12, 4),
            ("spare", 16, 16),
            ("stat", 32, 256),
        ],
    ),
    (
        "struct fuse_mknod_in",
        16,
        4,
        &[
            ("mode", 0, 4),
            ("rdev", 4, 4),
            ("umask", 8, 4),
            ("padding", 12, 4),
        ],
    ),
    (
        "struct fuse_mkdir_in",
        8,
        4,
        &[("mode", 0, 4), ("umask", 4, 4)],
    ),
    ("struct fuse_rename_in", 8, 8, &[("newdir", 0, 8)]),
    (
        "struct fuse_rename2_in",
        16,
        8,
        &[("newdir", 0, 8), ("flags", 8, 4), ("padding", 12, 4)],
    ),
    ("struct fuse_link_in", 8, 8, &[("oldnodeid", 0, 8)]),
    (
        "struct fuse_setattr_in",
        88,
        8,
        &[
            ("valid", 0, 4),
            ("padding", 4, 4),
            ("fh", 8, 8),
            ("size", 16, 8),
            ("lock_owner", 24, 8),
            ("atime", 32, 8),
            ("mtime", 40, 8),
            ("ctime", 48, 8),
            ("atimensec", 56, 4),
            ("mtimensec", 60, 4),
            ("ctimensec", 64, 4),
            ("mode", 68, 4),
            ("unused4", 72, 4),
            ("uid", 76, 4),
            ("gid", 80, 4),
            ("unused5", 84, 4),
        ],
    ),
    (
        "struct fuse_open_in",
        8,
        4,
        &[("flags", 0, 4), ("open_flags", 4, 4)],
    ),
    (
        "struct fuse_create_in",
        16,
        4,
        &[
            ("flags", 0, 4),
            ("mode", 4, 4),
            ("umask", 8, 4),
            ("open_flags", 12, 4),
        ],
    ),
    (
        "struct fuse_open_out",
        16,
        8,
        &[("fh", 0, 8), ("open_flags", 8, 4), ("backing_id", 12, 4)],
    ),
    (
        "struct fuse_release_in",
        24,
        8,
        &[
            ("fh", 0, 8),
            ("flags", 8, 4),
            ("release_flags", 12, 4),
            ("lock_owner", 16, 8),
        ],
    ),
    (
        "struct fuse_flush_in",
        24,
        8,
        &[
            ("fh", 0, 8),
            ("unused", 8, 4),
            ("padding", 12, 4),
            ("lock_owner", 16, 8),
        ],
    ),
    (
        "struct fuse_read_in",
        40,
        8,
        &[
            ("fh", 0, 8),
            ("offset", 8, 8),
            ("size", 16, 4),
            ("read_flags", 20, 4),
            ("lock_owner", 24, 8),
            ("flags", 32, 4),
            ("padding", 36, 4),
        ],
    ),
    (
        "struct fuse_write_in",
        40,
        8,
        &[
            ("fh", 0, 8),
            ("offset", 8, 8),
            ("size", 16, 4),
            ("write_flags", 20, 4),
            ("lock_owner", 24, 8),
            ("flags", 32, 4),
            ("padding", 36, 4),
        ],
    ),
    (
        "struct fuse_write_out",
        8,
        4,
        &[("size", 0, 4), ("padding", 4, 4)],
    ),
    ("struct fuse_statfs_out", 80, 8, &[("st", 0, 80)]),
    (
        "struct fuse_fsync_in",
        16,
        8,
        &[("fh", 0, 8), ("fsync_flags", 8, 4), ("padding", 12, 4)],
    ),
    (
        "struct fuse_setxattr_in",
        16,
        4,
        &[
            ("size", 0, 4),
            ("flags", 4, 4),
            ("setxattr_flags", 8, 4),
            ("padding", 12, 4),
        ],
    ),
    (
        "struct fuse_getxattr_in",
        8,
        4,
        &[("size", 0, 4), ("padding", 4, 4)],
    ),
    (
        "struct fuse_getxattr_out",
        8,
        4,
        &[("size", 0, 4), ("padding", 4, 4)],
    ),
    (
        "struct fuse_lk_in",
        48,
        8,
        &[
            ("fh", 0, 8),
            ("owner", 8, 8),
            ("lk", 16, 24),
            ("lk_flags", 40, 4),
            ("padding", 44, 4),
        ],
    ),
    ("struct fuse_lk_out", 24, 8, &[("lk", 0, 24)]),
    (
        "struct fuse_access_in",
        8,
        4,
        &[("mask", 0, 4), ("padding", 4, 4)],
    ),
    (
        "struct fuse_init_in",
        64,
        4,
        &[
            ("major", 0, 4),
            ("minor", 4, 4),
            ("max_readahead", 8, 4),
            ("flags", 12, 4),
            ("flags2", 16, 4),
            ("unused", 20, 44),
        ],
    ),
    (
        "struct fuse_init_out",
        64,
        4,
        &[
            ("major", 0, 4),
            ("minor", 4, 4),
            ("max_readahead", 8, 4),
            ("flags", 12, 4),
            ("max_background", 16, 2),
            ("congestion_threshold", 18, 2),
            ("max_write", 20, 4),
            ("time_gran", 24, 4),
            ("max_pages", 28, 2),
            ("map_alignment", 30, 2),
            ("flags2", 32, 4),
            ("max_stack_depth", 36, 4),
            ("request_timeout", 40, 2),
            ("unused", 42, 22),
        ],
    ),
    (
        "struct cuse_init_in",
        16,
        4,
        &[
            ("major", 0, 4),
            ("minor", 4, 4),
            ("unused", 8, 4),
            ("flags", 12, 4),
        ],
    ),
    (
        "struct cuse_init_out",
        72,
        4,
        &[
            ("major", 0, 4),
            ("minor", 4, 4),
            ("unused", 8, 4),
            ("flags", 12, 4),
            ("max_read", 16, 4),
            ("max_write", 20, 4),
            ("dev_major", 24, 4),
            ("dev_minor", 28, 4),
            ("spare", 32, 40),
        ],
    ),
    ("struct fuse_interrupt_in", 8, 8, &[("unique", 0, 8)]),
    (
        "struct fuse_bmap_in",
        16,
        8,
        &[("block", 0, 8), ("blocksize", 8, 4), ("padding", 12, 4)],
    ),
    ("struct fuse_bmap_out", 8, 8, &[("block", 0, 8)]),
    (
        "struct fuse_ioctl_in",
        32,
        8,
        &[
            ("fh", 0, 8),
            ("flags", 8, 4),
            ("cmd", 12, 4),
            ("arg", 16, 8),
            ("in_size", 24, 4),
            ("out_size", 28, 4),
        ],
    ),
    (
        "struct fuse_ioctl_iovec",
        16,
        8,
        &[("base", 0, 8), ("len", 8, 8)],
    ),
    (
        "struct fuse_ioctl_out",
        16,
        4,
        &[
            ("result", 0, 4),
            ("flags", 4, 4),
            ("in_iovs", 8, 4),
            ("out_iovs", 12, 4),
        ],
    ),
    (
        "struct fuse_poll_in",
        24,
        8,
        &[
            ("fh", 0, 8),
            ("kh", 8, 8),
            ("flags", 16, 4),
            ("events", 20, 4),
        ],
    ),
    (
        "struct fuse_poll_out",
        8,
        4,
        &[("revents", 0, 4), ("padding", 4, 4)],
    ),
    ("struct fuse_notify_poll_wakeup_out", 8, 8, &[("kh", 0, 8)]),
    (
        "struct fuse_fallocate_in",
        32,
        8,
        &[
            ("fh", 0, 8),
            ("offset", 8, 8),
            ("length", 16, 8),
            ("mode", 24, 4),
            ("padding", 28, 4),
        ],
    ),
    (
        "struct fuse_in_header",
        40,
        8,
        &[
            ("len", 0, 4),
            ("opcode", 4, 4),
            ("unique", 8, 8),
            ("nodeid", 16, 8),
            ("uid", 24, 4),
            ("gid", 28, 4),
            ("pid", 32, 4),
            ("total_extlen", 36, 2),
            ("padding", 38, 2),
        ],
    ),
    (
        "struct fuse_out_header",
        16,
        8,
        &[("len", 0, 4), ("error", 4, 4), ("unique", 8, 8)],
    ),
    (
        "struct fuse_dirent",
        24,
        8,
        &[
            ("ino", 0, 8),
            ("off", 8, 8),
            ("namelen", 16, 4),
            ("type", 20, 4),
            ("name", 24, 0),
        ],
    ),
    (
        "struct fuse_direntplus",
        152,
        8,
        &[
            ("entry_out", 0, 128),
            ("dirent", 128, 24),
            ("dirent.ino", 128, 8),
            ("dirent.off", 136, 8),
            ("dirent.namelen", 144, 4),
            ("dirent.type", 148, 4),
            ("dirent.name", 152, 0),
        ],
    ),
    (
        "struct fuse_notify_inval_inode_out",
        24,
        8,
        &[("ino", 0, 8), ("off", 8, 8), ("len", 16, 8)],
    ),
    (
        "struct fuse_notify_inval_entry_out",
        16,
        8,
        &[("parent", 0, 8), ("namelen", 8, 4), ("flags", 12, 4)],
    ),
    (
        "struct fuse_notify_delete_out",
        24,
        8,
        &[
            ("parent", 0, 8),
            ("child", 8, 8),
            ("namelen", 16, 4),
            ("padding", 20, 4),
        ],
    ),
    (
        "struct fuse_notify_store_out",
        24,
        8,
        &[
            ("nodeid", 0, 8),
            ("offset", 8, 8),
            ("size", 16, 4),
            ("padding", 20, 4),
        ],
    ),
    (
        "struct fuse_notify_retrieve_out",
        32,
        8,
        &[
            ("notify_unique", 0, 8),
            ("nodeid", 8, 8),
            ("offset", 16, 8),
            ("size", 24, 4),
            ("padding", 28, 4),
        ],
    ),
    (
        "struct fuse_notify_retrieve_in",
        40,
        8,
        &[
            ("dummy1", 0, 8),
            ("offset", 8, 8),
            ("size", 16, 4),
            ("dummy2", 20, 4),
            ("dummy3", 24, 8),
            ("dummy4", 32, 8),
        ],
    ),
    (
        "struct fuse_notify_prune_out",
        16,
        8,
        &[("count", 0, 4), ("padding", 4, 4), ("spare", 8, 8)],
    ),
    (
        "struct fuse_backing_map",
        16,
        8,
        &[("fd", 0, 4), ("flags", 4, 4), ("padding", 8, 8)],
    ),
    (
        "struct fuse_lseek_in",
        24,
        8,
        &[
            ("fh", 0, 8),
            ("offset", 8, 8),
            ("whence", 16, 4),
            ("padding", 20, 4),
        ],
    ),
    ("struct fuse_lseek_out", 8, 8, &[("offset", 0, 8)]),
    (
        "struct fuse_copy_file_range_in",
        56,
        8,
        &[
            ("fh_in", 0, 8),
            ("off_in", 8, 8),
            ("nodeid_out", 16, 8),
            ("fh_out", 24, 8),
            ("off_out", 32, 8),
            ("len", 40, 8),
            ("flags", 48, 8),
        ],
    ),
    (
        "struct fuse_copy_file_range_out",
        8,
        8,
        &[("bytes_copied", 0, 8)],
    ),
    (
        "struct fuse_setupmapping_in",
        40,
        8,
        &[
            ("fh", 0, 8),
            ("foffset", 8, 8),
            ("len", 16, 8),
            ("flags", 24, 8),
            ("moffset", 32, 8),
        ],
    ),
    ("struct fuse_removemapping_in", 4, 4, &[("count", 0, 4)]),
    (
        "struct fuse_removemapping_one",
        16,
        8,
        &[("moffset", 0, 8), ("len", 8, 8)],
    ),
    ("struct fuse_syncfs_in", 8, 8, &[("padding", 0, 8)]),
    (
        "struct fuse_secctx",
        8,
        4,
        &[("size", 0, 4), ("padding", 4, 4)],
    ),
    (
        "struct fuse_secctx_header",
        8,
        4,
        &[("size", 0, 4), ("nr_secctx", 4, 4)],
    ),
    (
        "struct fuse_ext_header",
        8,
        4,
        &[("size", 0, 4), ("type", 4, 4)],
    ),
    (
        "struct fuse_supp_groups",
        4,
        4,
        &[("nr_groups", 0, 4), ("groups", 4, 0)],
    ),
    (
        "struct fuse_uring_ent_in_out",
        32,
        8,
        &[
            ("flags", 0, 8),
            ("commit_id", 8, 8),
            ("payload_sz", 16, 4),
            ("offset", 20, 4),
            ("reserved", 24, 8),
        ],
    ),
    (
        "struct fuse_uring_req_header",
        288,
        8,
        &[
            ("in_out", 0, 128),
            ("op_in", 128, 128),
            ("ring_ent_in_out", 256, 32),
            ("ring_ent_in_out.flags", 256, 8),
            ("ring_ent_in_out.commit_id", 264, 8),
            ("ring_ent_in_out.payload_sz", 272, 4),
            ("ring_ent_in_out.offset", 276, 4),
            ("ring_ent_in_out.reserved", 280, 8),
        ],
    ),
    (
        "struct fuse_uring_cmd_req",
        40,
        8,
        &[
            ("flags", 0, 8),
            ("commit_id", 8, 8),
            ("qid", 16, 2),
            ("padding", 18, 6),
            ("bufpool", 24, 16),
            ("bufpool.uaddr", 24, 8),
            ("bufpool.len", 32, 4),
            ("bufpool.reserved", 36, 4),
            ("ent_zero_copy_buf_index", 24, 2),
        ],
    ),
    (
        "UringBufpool",
        16,
        8,
        &[("uaddr", 0, 8), ("len", 8, 4), ("reserved", 12, 4)],
    ),
    (
        "UringCmdArg",
        16,
        8,
        &[("bufpool", 0, 16), ("ent_zero_copy_buf_index", 0, 2)],
    ),
];

/// The `LAYOUTS` entry for a key of [`GCC`].
fn layout_for(key: &str) -> Option<&'static StructLayout> {
    LAYOUTS.iter().find(|s| {
        if key.starts_with("struct ") {
            s.c_name == key
        } else {
            s.c_name.is_empty() && s.rust_name == key
        }
    })
}

#[test]
fn layouts_match_gcc() {
    for &(key, size, align, fields) in GCC {
        let layout = layout_for(key).unwrap_or_else(|| panic!("LAYOUTS lacks {key}"));
        assert_eq!(layout.size, size, "size of {key}");
        if cfg!(target_pointer_width = "64") {
            assert_eq!(layout.align, align, "align of {key}");
        }
        let actual: Vec<_> = layout
            .fields
            .iter()
            .map(|f| (f.c_name, f.offset, f.size))
            .collect();
        assert_eq!(actual, fields, "fields of {key}");
    }
    assert_eq!(
        LAYOUTS.len(),
        GCC.len(),
        "LAYOUTS has entries gcc's table lacks"
    );
}

#[test]
fn layouts_are_consistent() {
    let mut c_names = BTreeSet::new();
    let mut rust_names = BTreeSet::new();
    for s in LAYOUTS {
        assert!(rust_names.insert(s.rust_name), "{} twice", s.rust_name);
        if !s.c_name.is_empty() {
            assert!(c_names.insert(s.c_name), "{} twice", s.c_name);
            assert!(
                s.c_name.starts_with("struct fuse_") || s.c_name.starts_with("struct cuse_"),
                "{}",
                s.c_name
            );
        }
        assert!(
            s.size % s.align == 0,
            "{}: size not a multiple of align",
            s.rust_name
        );
        let mut fields = BTreeSet::new();
        for f in s.fields {
            assert!(
                fields.insert(f.c_name),
                "{}: {} twice",
                s.rust_name,
                f.c_name
            );
            assert!(
                f.offset + f.size <= s.size,
                "{}: {} ends past the struct",
                s.rust_name,
                f.c_name
            );
            assert!(!f.c_name.starts_with("r#"), "{}: {}", s.rust_name, f.c_name);
        }
    }
}

/// Asserts a type's size, alignment (64-bit targets) and field offsets.
macro_rules! pin {
    (
        $ty:ident: size $size:literal align $align:literal
        { $( $($f:ident).+ @ $off:literal ),* $(,)? }
    ) => {
        assert_eq!(size_of::<$ty>(), $size, "size of {}", stringify!($ty));
        if cfg!(target_pointer_width = "64") {
            assert_eq!(align_of::<$ty>(), $align, "align of {}", stringify!($ty));
        }
        $(
            assert_eq!(
                offset_of!($ty, $($f).+),
                $off,
                "offset of {}.{}",
                stringify!($ty),
                stringify!($($f).+)
            );
        )*
    };
}

#[test]
fn rust_types_are_pinned() {
    pin!(Attr: size 88 align 8 {
        ino @ 0, size @ 8, blocks @ 16, atime @ 24, mtime @ 32, ctime @ 40, atimensec @ 48,
        mtimensec @ 52, ctimensec @ 56, mode @ 60, nlink @ 64, uid @ 68, gid @ 72, rdev @ 76,
        blksize @ 80, flags @ 84,
    });
    pin!(SxTime: size 16 align 8 { tv_sec @ 0, tv_nsec @ 8, reserved @ 12 });
    pin!(Statx: size 256 align 8 {
        mask @ 0, blksize @ 4, attributes @ 8, nlink @ 16, uid @ 20, gid @ 24, mode @ 28,
        spare0 @ 30, ino @ 32, size @ 40, blocks @ 48, attributes_mask @ 56, atime @ 64,
        btime @ 80, ctime @ 96, mtime @ 112, rdev_major @ 128, rdev_minor @ 132,
        dev_major @ 136, dev_minor @ 140, spare2 @ 144,
    });
    pin!(Kstatfs: size 80 align 8 {
        blocks @ 0, bfree @ 8, bavail @ 16, files @ 24, ffree @ 32, bsize @ 40, namelen @ 44,
        frsize @ 48, padding @ 52, spare @ 56,
    });
    pin!(FileLock: size 24 align 8 { start @ 0, end @ 8, r#type @ 16, pid @ 20 });
    pin!(EntryOut: size 128 align 8 {
        nodeid @ 0, generation @ 8, entry_valid @ 16, attr_valid @ 24, entry_valid_nsec @ 32,
        attr_valid_nsec @ 36, attr @ 40,
    });
    pin!(ForgetIn: size 8 align 8 { nlookup @ 0 });
    pin!(ForgetOne: size 16 align 8 { nodeid @ 0, nlookup @ 8 });
    pin!(BatchForgetIn: size 8 align 4 { count @ 0, dummy @ 4 });
    pin!(GetattrIn: size 16 align 8 { getattr_flags @ 0, dummy @ 4, fh @ 8 });
    pin!(AttrOut: size 104 align 8 { attr_valid @ 0, attr_valid_nsec @ 8, dummy @ 12, attr @ 16 });
    pin!(StatxIn: size 24 align 8 {
        getattr_flags @ 0, reserved @ 4, fh @ 8, sx_flags @ 16, sx_mask @ 20,
    });
    pin!(StatxOut: size 288 align 8 {
        attr_valid @ 0, attr_valid_nsec @ 8, flags @ 12, spare @ 16, stat @ 32,
    });
    pin!(MknodIn: size 16 align 4 { mode @ 0, rdev @ 4, umask @ 8, padding @ 12 });
    pin!(MkdirIn: size 8 align 4 { mode @ 0, umask @ 4 });
    pin!(RenameIn: size 8 align 8 { newdir @ 0 });
    pin!(Rename2In: size 16 align 8 { newdir @ 0, flags @ 8, padding @ 12 });
    pin!(LinkIn: size 8 align 8 { oldnodeid @ 0 });
    pin!(SetattrIn: size 88 align 8 {
        valid @ 0, padding @ 4, fh @ 8, size @ 16, lock_owner @ 24, atime @ 32, mtime @ 40,
        ctime @ 48, atimensec @ 56, mtimensec @ 60, ctimensec @ 64, mode @ 68, unused4 @ 72,
        uid @ 76, gid @ 80, unused5 @ 84,
    });
    pin!(OpenIn: size 8 align 4 { flags @ 0, open_flags @ 4 });
    pin!(CreateIn: size 16 align 4 { flags @ 0, mode @ 4, umask @ 8, open_flags @ 12 });
    pin!(OpenOut: size 16 align 8 { fh @ 0, open_flags @ 8, backing_id @ 12 });
    pin!(ReleaseIn: size 24 align 8 { fh @ 0, flags @ 8, release_flags @ 12, lock_owner @ 16 });
    pin!(FlushIn: size 24 align 8 { fh @ 0, unused @ 8, padding @ 12, lock_owner @ 16 });
    pin!(ReadIn: size 40 align 8 {
        fh @ 0, offset @ 8, size @ 16, read_flags @ 20, lock_owner @ 24, flags @ 32,
        padding @ 36,
    });
    pin!(WriteIn: size 40 align 8 {
        fh @ 0, offset @ 8, size @ 16, write_flags @ 20, lock_owner @ 24, flags @ 32,
        padding @ 36,
    });
    pin!(WriteOut: size 8 align 4 { size @ 0, padding @ 4 });
    pin!(StatfsOut: size 80 align 8 { st @ 0 });
    pin!(FsyncIn: size 16 align 8 { fh @ 0, fsync_flags @ 8, padding @ 12 });
    pin!(SetxattrIn: size 16 align 4 { size @ 0, flags @ 4, setxattr_flags @ 8, padding @ 12 });
    pin!(GetxattrIn: size 8 align 4 { size @ 0, padding @ 4 });
    pin!(GetxattrOut: size 8 align 4 { size @ 0, padding @ 4 });
    pin!(LkIn: size 48 align 8 { fh @ 0, owner @ 8, lk @ 16, lk_flags @ 40, padding @ 44 });
    pin!(LkOut: size 24 align 8 { lk @ 0 });
    pin!(AccessIn: size 8 align 4 { mask @ 0, padding @ 4 });
    pin!(InitIn: size 64 align 4 {
        major @ 0, minor @ 4, max_readahead @ 8, flags @ 12, flags2 @ 16, unused @ 20,
    });
    pin!(InitOut: size 64 align 4 {
        major @ 0, minor @ 4, max_readahead @ 8, flags @ 12, max_background @ 16,
        congestion_threshold @ 18, max_write @ 20, time_gran @ 24, max_pages @ 28,
        map_alignment @ 30, flags2 @ 32, max_stack_depth @ 36, request_timeout @ 40,
        unused @ 42,
    });
    pin!(CuseInitIn: size 16 align 4 { major @ 0, minor @ 4, unused @ 8, flags @ 12 });
    pin!(CuseInitOut: size 72 align 4 {
        major @ 0, minor @ 4, unused @ 8, flags @ 12, max_read @ 16, max_write @ 20,
        dev_major @ 24, dev_minor @ 28, spare @ 32,
    });
    pin!(InterruptIn: size 8 align 8 { unique @ 0 });
    pin!(BmapIn: size 16 align 8 { block @ 0, blocksize @ 8, padding @ 12 });
    pin!(BmapOut: size 8 align 8 { block @ 0 });
    pin!(IoctlIn: size 32 align 8 {
        fh @ 0, flags @ 8, cmd @ 12, arg @ 16, in_size @ 24, out_size @ 28,
    });
    pin!(IoctlIovec: size 16 align 8 { base @ 0, len @ 8 });
    pin!(IoctlOut: size 16 align 4 { result @ 0, flags @ 4, in_iovs @ 8, out_iovs @ 12 });
    pin!(PollIn: size 24 align 8 { fh @ 0, kh @ 8, flags @ 16, events @ 20 });
    pin!(PollOut: size 8 align 4 { revents @ 0, padding @ 4 });
    pin!(NotifyPollWakeupOut: size 8 align 8 { kh @ 0 });
    pin!(FallocateIn: size 32 align 8 { fh @ 0, offset @ 8, length @ 16, mode @ 24, padding @ 28 });
    pin!(InHeader: size 40 align 8 {
        len @ 0, opcode @ 4, unique @ 8, nodeid @ 16, uid @ 24, gid @ 28, pid @ 32,
        total_extlen @ 36, padding @ 38,
    });
    pin!(OutHeader: size 16 align 8 { len @ 0, error @ 4, unique @ 8 });
    pin!(Dirent: size 24 align 8 { ino @ 0, off @ 8, namelen @ 16, r#type @ 20 });
    pin!(Direntplus: size 152 align 8 {
        entry_out @ 0, dirent @ 128, dirent.ino @ 128, dirent.off @ 136, dirent.namelen @ 144,
        dirent.r#type @ 148,
    });
    pin!(NotifyInvalInodeOut: size 24 align 8 { ino @ 0, off @ 8, len @ 16 });
    pin!(NotifyInvalEntryOut: size 16 align 8 { parent @ 0, namelen @ 8, flags @ 12 });
    pin!(NotifyDeleteOut: size 24 align 8 { parent @ 0, child @ 8, namelen @ 16, padding @ 20 });
    pin!(NotifyStoreOut: size 24 align 8 { nodeid @ 0, offset @ 8, size @ 16, padding @ 20 });
    pin!(NotifyRetrieveOut: size 32 align 8 {
        notify_unique @ 0, nodeid @ 8, offset @ 16, size @ 24, padding @ 28,
    });
    pin!(NotifyRetrieveIn: size 40 align 8 {
        dummy1 @ 0, offset @ 8, size @ 16, dummy2 @ 20, dummy3 @ 24, dummy4 @ 32,
    });
    pin!(NotifyPruneOut: size 16 align 8 { count @ 0, padding @ 4, spare @ 8 });
    pin!(BackingMap: size 16 align 8 { fd @ 0, flags @ 4, padding @ 8 });
    pin!(LseekIn: size 24 align 8 { fh @ 0, offset @ 8, whence @ 16, padding @ 20 });
    pin!(LseekOut: size 8 align 8 { offset @ 0 });
    pin!(CopyFileRangeIn: size 56 align 8 {
        fh_in @ 0, off_in @ 8, nodeid_out @ 16, fh_out @ 24, off_out @ 32, len @ 40, flags @ 48,
    });
    pin!(CopyFileRangeOut: size 8 align 8 { bytes_copied @ 0 });
    pin!(SetupmappingIn: size 40 align 8 {
        fh @ 0, foffset @ 8, len @ 16, flags @ 24, moffset @ 32,
    });
    pin!(RemovemappingIn: size 4 align 4 { count @ 0 });
    pin!(RemovemappingOne: size 16 align 8 { moffset @ 0, len @ 8 });
    pin!(SyncfsIn: size 8 align 8 { padding @ 0 });
    pin!(Secctx: size 8 align 4 { size @ 0, padding @ 4 });
    pin!(SecctxHeader: size 8 align 4 { size @ 0, nr_secctx @ 4 });
    pin!(ExtHeader: size 8 align 4 { size @ 0, r#type @ 4 });
    pin!(SuppGroups: size 4 align 4 { nr_groups @ 0 });
    pin!(UringEntInOut: size 32 align 8 {
        flags @ 0, commit_id @ 8, payload_sz @ 16, offset @ 20, reserved @ 24,
    });
    pin!(UringReqHeader: size 288 align 8 {
        in_out @ 0, op_in @ 128, ring_ent_in_out @ 256, ring_ent_in_out.flags @ 256,
        ring_ent_in_out.commit_id @ 264, ring_ent_in_out.payload_sz @ 272,
        ring_ent_in_out.offset @ 276, ring_ent_in_out.reserved @ 280,
    });
    pin!(UringCmdReq: size 40 align 8 {
        flags @ 0, commit_id @ 8, qid @ 16, padding @ 18, arg @ 24,
    });
    pin!(UringBufpool: size 16 align 8 { uaddr @ 0, len @ 8, reserved @ 12 });
    pin!(UringCmdArg: size 16 align 8 {});
    // The union's members, through the accessors of its bytes.
    let arg = UringCmdArg::from_ent_zero_copy_buf_index(0x0102);
    assert_eq!(arg.bytes[..2], 0x0102u16.to_ne_bytes());
    assert_eq!(arg.bytes[2..], [0; 14]);
    // Flexible array members start where the fixed parts end.
    assert_eq!(NAME_OFFSET, 24);
    assert_eq!(NAME_OFFSET_DIRENTPLUS, 152);
}

/// The Linux 7.3 `fuse.h`: `$FUSE_ABI_REFERENCE_H` (`cargo xtask test`
/// sets it to the header its abi-check step used, from Debian's
/// `linux-libc-dev` when the workspace has no `../shared/reference` next
/// to it), else the reference copy next to the workspace; panics if
/// neither can be read.
fn header_text() -> String {
    let path = std::env::var_os("FUSE_ABI_REFERENCE_H")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/reference/linux-7.3-rc7/fuse.h")
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the reference header {}: {e}; this test compares LAYOUTS \
             with it and must not pass without it (set FUSE_ABI_REFERENCE_H to a \
             Linux 7.3 fuse.h, or run `cargo xtask test`, which finds one)",
            path.display()
        )
    })
}

/// The header without its comments (line breaks kept).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        let (start, end_marker) = match (block, line) {
            (Some(b), Some(l)) if l < b => (l, "\n"),
            (Some(b), _) => (b, "*/"),
            (None, Some(l)) => (l, "\n"),
            (None, None) => break,
        };
        out.push_str(&rest[..start]);
        let end = rest[start + 2..]
            .find(end_marker)
            .map_or(rest.len(), |e| start + 2 + e + end_marker.len());
        out.extend(rest[start..end].chars().filter(|&c| c == '\n'));
        out.push(' ');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `(struct name, field designators)` of every `struct fuse_*`/`struct cuse_*`
/// definition. Members of a named inner struct are `name.member`, members
/// of an anonymous union are unprefixed.
fn header_structs(text: &str) -> Vec<(String, Vec<String>)> {
    let text = strip_comments(text);
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim_end();
        if !((trimmed.starts_with("struct fuse_") || trimmed.starts_with("struct cuse_"))
            && trimmed.ends_with('{'))
        {
            continue;
        }
        let name = trimmed.trim_end_matches('{').trim().to_owned();
        let body = braced(&text[start + trimmed.len() - 1..]);
        out.push((name, fields(body, "")));
    }
    out
}

/// The text inside the braces that open `text`.
fn braced(text: &str) -> &str {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[1..i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces in the header");
}

/// The field designators of a struct or union body.
fn fields(body: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ';' if depth == 0 => {
                let decl = body[start..i].trim();
                start = i + 1;
                if let (Some(open), Some(close)) = (decl.find('{'), decl.rfind('}')) {
                    let inner = braced(&decl[open..=close]);
                    let name = decl[close + 1..].trim();
                    if name.is_empty() {
                        out.extend(fields(inner, prefix));
                    } else {
                        out.push(format!("{prefix}{name}"));
                        out.extend(fields(inner, &format!("{prefix}{name}.")));
                    }
                } else if !decl.is_empty() {
                    let decl = decl.split('[').next().unwrap_or(decl).trim_end();
                    let name = decl
                        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or(decl);
                    out.push(format!("{prefix}{name}"));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_header_struct_and_field_is_in_layouts() {
    let text = header_text();
    let structs = header_structs(&text);
    assert!(
        structs.len() > 70,
        "parsed only {} structs from the header",
        structs.len()
    );
    let mut missing = Vec::new();
    for (name, fields) in &structs {
        let Some(layout) = LAYOUTS.iter().find(|s| s.c_name == name) else {
            missing.push(name.clone());
            continue;
        };
        for field in fields {
            if !layout.fields.iter().any(|f| f.c_name == field) {
                missing.push(format!("{name} {field}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "LAYOUTS lacks, from fuse.h: {missing:?}"
    );
    let in_header: BTreeSet<&str> = structs.iter().map(|(n, _)| n.as_str()).collect();
    for s in LAYOUTS.iter().filter(|s| !s.c_name.is_empty()) {
        assert!(
            in_header.contains(s.c_name),
            "{} is not in fuse.h",
            s.c_name
        );
    }
}

#[test]
fn header_parser_sees_nested_and_anonymous_members() {
    let text = "struct fuse_x {\n\tuint64_t a; /* a\n b */\n\tunion {\n\t\tstruct {\n\
                \t\t\tuint64_t uaddr; // base\n\t\t} bufpool;\n\t\tuint16_t idx;\n\t};\n\
                \tchar name[];\n};\n/* struct fuse_y {\n */\n";
    let structs = header_structs(text);
    assert_eq!(structs.len(), 1);
    assert_eq!(structs[0].0, "struct fuse_x");
    assert_eq!(
        structs[0].1,
        ["a", "bufpool", "bufpool.uaddr", "idx", "name"]
    );
}
