//! Prints this crate's view of the protocol as lines of text, for
//! `cargo xtask abi-check HEADER` to compare with what a C compiler makes of
//! a kernel `fuse.h`:
//!
//! ```text
//! struct fuse_attr size 88 align 8
//! struct fuse_attr ino offset 0 size 8
//! const FUSE_LOOKUP 1
//! # UringBufpool size 16 align 8 (Rust only)
//! ```
//!
//! A `struct` line gives a struct's size and alignment, a field line a
//! field's offset and size (size 0: a flexible array member), a `const` line
//! the value of a C constant expression. Lines starting with `#` are
//! comments (types with no C name of their own).

use bitflags::Flags;
use fuse_abi::layout::LAYOUTS;
use fuse_abi::uring::{self, CmdFlags, EntFlags, UringCmd};
use fuse_abi::*;

fn main() {
    for s in LAYOUTS {
        if s.c_name.is_empty() {
            println!(
                "# {} size {} align {} (Rust only; checked through its container)",
                s.rust_name, s.size, s.align
            );
            for f in s.fields {
                println!(
                    "# {} {} offset {} size {}",
                    s.rust_name, f.c_name, f.offset, f.size
                );
            }
            continue;
        }
        println!("{} size {} align {}", s.c_name, s.size, s.align);
        for f in s.fields {
            println!(
                "{} {} offset {} size {}",
                s.c_name, f.c_name, f.offset, f.size
            );
        }
    }
    for (name, value) in constants() {
        println!("const {name} {value}");
    }
}

/// Every constant of the crate that `fuse.h` defines, by its C name (or a
/// C expression without spaces), with the crate's value.
fn constants() -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut add = |name: &str, value: u64| out.push((name.to_owned(), value));

    add("FUSE_KERNEL_VERSION", KERNEL_VERSION.into());
    add("FUSE_KERNEL_MINOR_VERSION", KERNEL_MINOR_VERSION.into());
    add("FUSE_ROOT_ID", ROOT_ID);
    add("FUSE_MIN_READ_BUFFER", MIN_READ_BUFFER as u64);
    add("FUSE_COMPAT_ENTRY_OUT_SIZE", COMPAT_ENTRY_OUT_SIZE as u64);
    add("FUSE_COMPAT_ATTR_OUT_SIZE", COMPAT_ATTR_OUT_SIZE as u64);
    add("FUSE_COMPAT_MKNOD_IN_SIZE", COMPAT_MKNOD_IN_SIZE as u64);
    add("FUSE_COMPAT_WRITE_IN_SIZE", COMPAT_WRITE_IN_SIZE as u64);
    add("FUSE_COMPAT_STATFS_SIZE", COMPAT_STATFS_SIZE as u64);
    add(
        "FUSE_COMPAT_SETXATTR_IN_SIZE",
        COMPAT_SETXATTR_IN_SIZE as u64,
    );
    add("FUSE_COMPAT_INIT_OUT_SIZE", COMPAT_INIT_OUT_SIZE as u64);
    add(
        "FUSE_COMPAT_22_INIT_OUT_SIZE",
        COMPAT_22_INIT_OUT_SIZE as u64,
    );
    add("CUSE_INIT_INFO_MAX", CUSE_INIT_INFO_MAX as u64);
    add("FUSE_IOCTL_MAX_IOV", IOCTL_MAX_IOV as u64);
    add("FUSE_UNIQUE_RESEND", UNIQUE_RESEND);
    add("FUSE_INVALID_UIDGID", INVALID_UIDGID.into());
    add("FUSE_MAX_NR_SECCTX", MAX_NR_SECCTX.into());
    add("FUSE_EXT_GROUPS", EXT_GROUPS.into());
    add("FUSE_NAME_OFFSET", NAME_OFFSET as u64);
    add("FUSE_NAME_OFFSET_DIRENTPLUS", NAME_OFFSET_DIRENTPLUS as u64);
    // The header defines it with the kernel's PAGE_SIZE; abi-check compiles
    // it with a PAGE_SIZE of 4096.
    add(
        "FUSE_REMOVEMAPPING_MAX_ENTRY",
        removemapping_max_entry(4096) as u64,
    );
    for len in [0, 1, 8, 9] {
        add(&format!("FUSE_REC_ALIGN({len})"), rec_align(len) as u64);
        add(&format!("FUSE_DIRENT_ALIGN({len})"), rec_align(len) as u64);
    }

    for &op in Opcode::ALL {
        add(op.kernel_name(), u32::from(op).into());
    }
    for &code in NotifyCode::ALL {
        let name = match code {
            NotifyCode::Poll => "FUSE_NOTIFY_POLL",
            NotifyCode::InvalInode => "FUSE_NOTIFY_INVAL_INODE",
            NotifyCode::InvalEntry => "FUSE_NOTIFY_INVAL_ENTRY",
            NotifyCode::Store => "FUSE_NOTIFY_STORE",
            NotifyCode::Retrieve => "FUSE_NOTIFY_RETRIEVE",
            NotifyCode::Delete => "FUSE_NOTIFY_DELETE",
            NotifyCode::Resend => "FUSE_NOTIFY_RESEND",
            NotifyCode::IncEpoch => "FUSE_NOTIFY_INC_EPOCH",
            NotifyCode::Prune => "FUSE_NOTIFY_PRUNE",
        };
        add(name, u32::from(code).into());
    }
    for &ext in ExtType::ALL {
        let name = match ext {
            ExtType::MaxNrSecctx => "FUSE_MAX_NR_SECCTX",
            ExtType::Groups => "FUSE_EXT_GROUPS",
        };
        add(name, u32::from(ext).into());
    }

    add("FUSE_DEV_IOC_MAGIC", ioctl::DEV_IOC_MAGIC.into());
    add("FUSE_DEV_IOC_CLONE", ioctl::DEV_IOC_CLONE.into());
    add(
        "FUSE_DEV_IOC_BACKING_OPEN",
        ioctl::DEV_IOC_BACKING_OPEN.into(),
    );
    add(
        "FUSE_DEV_IOC_BACKING_CLOSE",
        ioctl::DEV_IOC_BACKING_CLOSE.into(),
    );
    add("FUSE_DEV_IOC_SYNC_INIT", ioctl::DEV_IOC_SYNC_INIT.into());

    add(
        "FUSE_URING_IN_OUT_HEADER_SZ",
        uring::IN_OUT_HEADER_SZ as u64,
    );
    add("FUSE_URING_OP_IN_OUT_SZ", uring::OP_IN_OUT_SZ as u64);
    for (name, cmd) in [
        ("FUSE_IO_URING_CMD_INVALID", UringCmd::Invalid),
        ("FUSE_IO_URING_CMD_REGISTER", UringCmd::Register),
        (
            "FUSE_IO_URING_CMD_COMMIT_AND_FETCH",
            UringCmd::CommitAndFetch,
        ),
        ("FUSE_IO_URING_CMD_ADD_QUEUE", UringCmd::AddQueue),
        ("FUSE_IO_URING_CMD_ADD_BUFPOOL", UringCmd::AddBufpool),
    ] {
        // An exhaustive match, so that a new command breaks the build here.
        match cmd {
            UringCmd::Invalid
            | UringCmd::Register
            | UringCmd::CommitAndFetch
            | UringCmd::AddQueue
            | UringCmd::AddBufpool => add(name, (cmd as u32).into()),
        }
    }

    flags::<InitFlags>(&mut add, "FUSE_");
    add("FUSE_DIRECT_IO_RELAX", InitFlags::DIRECT_IO_RELAX.bits());
    flags::<FopenFlags>(&mut add, "FOPEN_");
    flags::<SetattrValid>(&mut add, "FATTR_");
    flags::<ReleaseFlags>(&mut add, "FUSE_RELEASE_");
    flags::<GetattrFlags>(&mut add, "FUSE_GETATTR_");
    flags::<LkFlags>(&mut add, "FUSE_LK_");
    flags::<WriteFlags>(&mut add, "FUSE_WRITE_");
    add("FUSE_WRITE_KILL_PRIV", WriteFlags::KILL_PRIV.bits().into());
    flags::<ReadFlags>(&mut add, "FUSE_READ_");
    flags::<IoctlFlags>(&mut add, "FUSE_IOCTL_");
    flags::<PollFlags>(&mut add, "FUSE_POLL_");
    flags::<FsyncFlags>(&mut add, "FUSE_FSYNC_");
    flags::<AttrFlags>(&mut add, "FUSE_ATTR_");
    flags::<OpenInFlags>(&mut add, "FUSE_OPEN_");
    flags::<SetxattrFlags>(&mut add, "FUSE_SETXATTR_");
    flags::<NotifyInvalEntryFlags>(&mut add, "FUSE_");
    flags::<CuseInitFlags>(&mut add, "CUSE_");
    flags::<SetupmappingFlags>(&mut add, "FUSE_SETUPMAPPING_FLAG_");
    flags::<EntFlags>(&mut add, "FUSE_URING_ENT_");
    flags::<CmdFlags>(&mut add, "FUSE_URING_");
    // `AccessMask` and `RenameFlags` are access(2)'s and renameat2(2)'s,
    // not fuse.h's.
    out
}

/// Adds every named flag of a family, C name = prefix + Rust name (except
/// `IoctlFlags::BIT32`, which is `FUSE_IOCTL_32BIT`).
fn flags<F>(add: &mut impl FnMut(&str, u64), prefix: &str)
where
    F: Flags,
    F::Bits: Into<u64>,
{
    for flag in F::FLAGS {
        let name = match flag.name() {
            "" => continue,
            "BIT32" if prefix == "FUSE_IOCTL_" => "32BIT",
            name => name,
        };
        add(&format!("{prefix}{name}"), flag.value().bits().into());
    }
}
