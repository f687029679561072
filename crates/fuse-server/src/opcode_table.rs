//! The opcode table: one row per opcode with its number and name, the
//! shape of its arguments, the shape of its reply and its flags.
//!
//! Everything that needs to know something about an opcode in general (not
//! what to do with it) reads it here: the decoder takes each request's
//! length checks from the row's [`ArgShape`] ([`crate::decode`]), naming
//! ([`opcode_of`], [`Operation`]'s `Display`, the opcode in a
//! [`crate::DecodeError`]) comes from the row, the transports ask it whether
//! a reply carries out arguments or a request may wait indefinitely, and
//! the tests build requests of every opcode from it.
//!
//! Adding an opcode is its variant in `fuse_abi::Opcode`, one row here (the
//! `match`es generated from the table are exhaustive, so a missing row does
//! not compile), its arm in [`crate::decode`] (the typed [`Operation`] from
//! the already length-checked arguments) and its arm in the dispatch
//! (`Server::handle_async`).

use crate::request::Operation;
use fuse_abi::*;
use std::fmt;
use std::mem::offset_of;

/// What a reply to an opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyShape {
    /// The kernel expects no reply (FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY).
    None,
    /// Only the header: the operation has no out arguments (UNLINK, FSYNC, ...).
    Empty,
    /// The header and out arguments (a struct, data, or both).
    OutArgs,
}

/// How many bytes of an opcode's fixed argument struct a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixedLen {
    /// Always the whole struct.
    Full,
    /// `size` bytes when the negotiated minor version is below `minor`
    /// (the struct grew in that version), the whole struct from it on.
    BeforeMinor {
        /// The minor version that introduced the whole struct.
        minor: u32,
        /// The size before it.
        size: usize,
    },
    /// `size` bytes unless `FUSE_SETXATTR_EXT` was negotiated
    /// ([`crate::DecodeOptions::setxattr_ext`]), the whole struct with it.
    UnlessSetxattrExt {
        /// The size without the extension.
        size: usize,
    },
    /// At least `min` bytes and as many more as the request has, up to the
    /// whole struct (INIT: kernels before 7.36 send only 16 bytes).
    AtLeast {
        /// The fewest bytes accepted.
        min: usize,
    },
    /// The kernel sends the struct, but nothing in it is read, so a request
    /// without it is accepted too (SYNCFS's padding).
    Unread,
}

/// An opcode's fixed argument struct (its first argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedArg {
    /// The kernel's name of the struct, e.g. `fuse_write_in`.
    pub name: &'static str,
    /// Its size in this protocol version.
    pub size: usize,
    /// How many bytes of it a request carries.
    pub len: FixedLen,
}

impl FixedArg {
    /// The number of bytes a request must carry (`Err`: how many it needs
    /// when it has fewer), given `have` bytes where the struct sits.
    pub const fn wire_len(&self, opts: &crate::DecodeOptions, have: usize) -> Result<usize, usize> {
        let need = match self.len {
            FixedLen::Full => self.size,
            FixedLen::BeforeMinor { minor, size } => {
                if opts.minor < minor {
                    size
                } else {
                    self.size
                }
            }
            FixedLen::UnlessSetxattrExt { size } => {
                if opts.setxattr_ext {
                    self.size
                } else {
                    size
                }
            }
            FixedLen::AtLeast { min } => {
                if have < min {
                    return Err(min);
                }
                if have < self.size {
                    have
                } else {
                    self.size
                }
            }
            FixedLen::Unread => 0,
        };
        if have < need {
            Err(need)
        } else {
            Ok(need)
        }
    }
}

/// Data that follows an opcode's fixed struct and names, its length given
/// by a `u32` count in the fixed struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataArg {
    /// No data (whatever follows is ignored).
    None,
    /// `count` bytes.
    Bytes {
        /// What the data is, for error messages (`write data`).
        what: &'static str,
        /// The offset of the `u32` byte count in the fixed struct.
        count_at: usize,
    },
    /// `count` records of `record` bytes each.
    Records {
        /// What the records are, for error messages.
        what: &'static str,
        /// The offset of the `u32` record count in the fixed struct.
        count_at: usize,
        /// The size of one record.
        record: usize,
    },
}

/// The arguments of an opcode, in the order they follow the header: the
/// fixed struct, NUL-terminated names, then data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgShape {
    /// The fixed struct, if the opcode has one.
    pub fixed: Option<FixedArg>,
    /// How many NUL-terminated names follow it (0, 1 or 2).
    pub names: u8,
    /// The data after the names.
    pub data: DataArg,
}

impl ArgShape {
    /// No arguments.
    pub const NONE: ArgShape = ArgShape {
        fixed: None,
        names: 0,
        data: DataArg::None,
    };

    /// `names` names and nothing else.
    pub const fn names(names: u8) -> ArgShape {
        ArgShape {
            names,
            ..Self::NONE
        }
    }

    /// A fixed struct `T`, whole, called `name` by the kernel.
    pub const fn fixed<T>(name: &'static str) -> ArgShape {
        ArgShape {
            fixed: Some(FixedArg {
                name,
                size: size_of::<T>(),
                len: FixedLen::Full,
            }),
            ..Self::NONE
        }
    }

    /// The same, with the fixed struct's length rule `len`.
    pub const fn len(mut self, len: FixedLen) -> ArgShape {
        if let Some(fixed) = &mut self.fixed {
            fixed.len = len;
        }
        self
    }

    /// The same, followed by `names` names.
    pub const fn then_names(mut self, names: u8) -> ArgShape {
        self.names = names;
        self
    }

    /// The same, followed by `data`.
    pub const fn then_data(mut self, data: DataArg) -> ArgShape {
        self.data = data;
        self
    }
}

/// What is special about an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpcodeFlags {
    /// See [`OpcodeInfo::waits_indefinitely`].
    pub waits_indefinitely: bool,
    /// A number the protocol reserves (a byte-swapped INIT): decoded as an
    /// unknown opcode.
    pub reserved: bool,
}

impl OpcodeFlags {
    /// Nothing special.
    pub const NONE: OpcodeFlags = OpcodeFlags {
        waits_indefinitely: false,
        reserved: false,
    };
    /// [`OpcodeFlags::waits_indefinitely`].
    pub const WAITS: OpcodeFlags = OpcodeFlags {
        waits_indefinitely: true,
        reserved: false,
    };
    /// [`OpcodeFlags::reserved`].
    pub const RESERVED: OpcodeFlags = OpcodeFlags {
        waits_indefinitely: false,
        reserved: true,
    };
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode (its number is `opcode as u32`).
    pub opcode: Opcode,
    /// The kernel's name, e.g. `FUSE_LOOKUP`.
    pub name: &'static str,
    /// The arguments a request carries.
    pub args: ArgShape,
    /// What the reply carries.
    pub reply: ReplyShape,
    /// What is special about it.
    pub flags: OpcodeFlags,
}

impl OpcodeInfo {
    /// The wire number.
    pub const fn number(&self) -> u32 {
        self.opcode as u32
    }

    /// The name without the kernel's `FUSE_` prefix (`LOOKUP`, `RENAME2`;
    /// `CUSE_INIT` keeps its prefix), as the request log
    /// ([`crate::Server::with_request_log`]) prints it.
    pub fn short_name(&self) -> &'static str {
        self.name.strip_prefix("FUSE_").unwrap_or(self.name)
    }

    /// The reply carries out arguments (a body after the header).
    pub const fn has_out_args(&self) -> bool {
        matches!(self.reply, ReplyShape::OutArgs)
    }

    /// The kernel waits for a reply.
    pub const fn expects_reply(&self) -> bool {
        !matches!(self.reply, ReplyShape::None)
    }

    /// The request may wait for as long as something outside the file
    /// system decides: SETLKW (a blocking `fcntl` lock or `flock`) waits
    /// until another process lets go. A transport must not let such
    /// requests take the threads or queue slots the rest of the mount needs
    /// (the request that ends the wait, an unlock, comes through the same
    /// mount), and a stop ends them ([`crate::Server::stop_waits`]).
    pub const fn waits_indefinitely(&self) -> bool {
        self.flags.waits_indefinitely
    }
}

impl fmt::Display for OpcodeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// Declares the table: one row per opcode,
/// `Opcode: reply, arguments, flags, [the Operation pattern it encodes];`
/// (reserved opcodes have no operation). Generates [`TABLE`],
/// [`opcode_info`] and [`opcode_of`].
macro_rules! opcode_table {
    ($(
        $op:ident: $reply:ident, $args:expr, $flags:ident
            $(, [$pat:pat $(if $guard:expr)?])? ;
    )*) => {
        /// Every row, in the order of `Opcode::ALL`.
        pub const TABLE: &[OpcodeInfo] = &[$( opcode_info(Opcode::$op) ),*];

        /// The row of `opcode`.
        pub const fn opcode_info(opcode: Opcode) -> OpcodeInfo {
            match opcode {
                $( Opcode::$op => OpcodeInfo {
                    opcode: Opcode::$op,
                    name: Opcode::$op.kernel_name(),
                    args: $args,
                    reply: ReplyShape::$reply,
                    flags: OpcodeFlags::$flags,
                }, )*
            }
        }

        /// The opcode a request for `op` carries.
        pub fn opcode_of(op: &Operation<'_>) -> Opcode {
            match op {
                $( $( $pat $(if $guard)? => Opcode::$op, )? )*
            }
        }
    };
}

const fn bytes(what: &'static str, count_at: usize) -> DataArg {
    DataArg::Bytes { what, count_at }
}

const fn records<T>(what: &'static str, count_at: usize) -> DataArg {
    DataArg::Records {
        what,
        count_at,
        record: size_of::<T>(),
    }
}

use ArgShape as A;

opcode_table! {
    Lookup: OutArgs, A::names(1), NONE, [Operation::Lookup { .. }];
    Forget: None, A::fixed::<ForgetIn>("fuse_forget_in"), NONE, [Operation::Forget { .. }];
    Getattr: OutArgs, A::fixed::<GetattrIn>("fuse_getattr_in"), NONE, [Operation::Getattr { .. }];
    Setattr: OutArgs, A::fixed::<SetattrIn>("fuse_setattr_in"), NONE, [Operation::Setattr(_)];
    Readlink: OutArgs, A::NONE, NONE, [Operation::Readlink];
    Symlink: OutArgs, A::names(2), NONE, [Operation::Symlink { .. }];
    Mknod: OutArgs,
        A::fixed::<MknodIn>("fuse_mknod_in")
            .len(FixedLen::BeforeMinor { minor: 12, size: COMPAT_MKNOD_IN_SIZE })
            .then_names(1),
        NONE, [Operation::Mknod { .. }];
    Mkdir: OutArgs, A::fixed::<MkdirIn>("fuse_mkdir_in").then_names(1), NONE,
        [Operation::Mkdir { .. }];
    Unlink: Empty, A::names(1), NONE, [Operation::Unlink { .. }];
    Rmdir: Empty, A::names(1), NONE, [Operation::Rmdir { .. }];
    // RENAME carries no flags; an operation with flags needs RENAME2.
    Rename: Empty, A::fixed::<RenameIn>("fuse_rename_in").then_names(2), NONE,
        [Operation::Rename(a) if a.flags.is_empty()];
    Link: OutArgs, A::fixed::<LinkIn>("fuse_link_in").then_names(1), NONE, [Operation::Link { .. }];
    Open: OutArgs, A::fixed::<OpenIn>("fuse_open_in"), NONE, [Operation::Open(_)];
    Read: OutArgs,
        A::fixed::<ReadIn>("fuse_read_in").len(FixedLen::BeforeMinor { minor: 9, size: 24 }),
        NONE, [Operation::Read(_)];
    Write: OutArgs,
        A::fixed::<WriteIn>("fuse_write_in")
            .len(FixedLen::BeforeMinor { minor: 9, size: COMPAT_WRITE_IN_SIZE })
            .then_data(bytes("write data", offset_of!(WriteIn, size))),
        NONE, [Operation::Write { .. }];
    Statfs: OutArgs, A::NONE, NONE, [Operation::Statfs];
    Release: Empty, A::fixed::<ReleaseIn>("fuse_release_in"), NONE, [Operation::Release(_)];
    Fsync: Empty, A::fixed::<FsyncIn>("fuse_fsync_in"), NONE, [Operation::Fsync(_)];
    Setxattr: Empty,
        A::fixed::<SetxattrIn>("fuse_setxattr_in")
            .len(FixedLen::UnlessSetxattrExt { size: COMPAT_SETXATTR_IN_SIZE })
            .then_names(1)
            .then_data(bytes("xattr value", offset_of!(SetxattrIn, size))),
        NONE, [Operation::Setxattr(_)];
    Getxattr: OutArgs, A::fixed::<GetxattrIn>("fuse_getxattr_in").then_names(1), NONE,
        [Operation::Getxattr { .. }];
    Listxattr: OutArgs, A::fixed::<GetxattrIn>("fuse_getxattr_in"), NONE,
        [Operation::Listxattr { .. }];
    Removexattr: Empty, A::names(1), NONE, [Operation::Removexattr { .. }];
    Flush: Empty, A::fixed::<FlushIn>("fuse_flush_in"), NONE, [Operation::Flush(_)];
    Init: OutArgs, A::fixed::<InitIn>("fuse_init_in").len(FixedLen::AtLeast { min: 16 }), NONE,
        [Operation::Init(_)];
    Opendir: OutArgs, A::fixed::<OpenIn>("fuse_open_in"), NONE, [Operation::Opendir(_)];
    Readdir: OutArgs,
        A::fixed::<ReadIn>("fuse_read_in").len(FixedLen::BeforeMinor { minor: 9, size: 24 }),
        NONE, [Operation::Readdir(_)];
    Releasedir: Empty, A::fixed::<ReleaseIn>("fuse_release_in"), NONE, [Operation::Releasedir(_)];
    Fsyncdir: Empty, A::fixed::<FsyncIn>("fuse_fsync_in"), NONE, [Operation::Fsyncdir(_)];
    Getlk: OutArgs, A::fixed::<LkIn>("fuse_lk_in"), NONE, [Operation::Getlk(_)];
    Setlk: Empty, A::fixed::<LkIn>("fuse_lk_in"), NONE, [Operation::Setlk { sleep: false, .. }];
    Setlkw: Empty, A::fixed::<LkIn>("fuse_lk_in"), WAITS, [Operation::Setlk { sleep: true, .. }];
    Access: Empty, A::fixed::<AccessIn>("fuse_access_in"), NONE, [Operation::Access { .. }];
    Create: OutArgs,
        A::fixed::<CreateIn>("fuse_create_in")
            .len(FixedLen::BeforeMinor { minor: 12, size: size_of::<OpenIn>() })
            .then_names(1),
        NONE, [Operation::Create { .. }];
    Interrupt: None, A::fixed::<InterruptIn>("fuse_interrupt_in"), NONE,
        [Operation::Interrupt { .. }];
    Bmap: OutArgs, A::fixed::<BmapIn>("fuse_bmap_in"), NONE, [Operation::Bmap { .. }];
    Destroy: Empty, A::NONE, NONE, [Operation::Destroy];
    Ioctl: OutArgs,
        A::fixed::<IoctlIn>("fuse_ioctl_in")
            .then_data(bytes("ioctl data", offset_of!(IoctlIn, in_size))),
        NONE, [Operation::Ioctl(_)];
    Poll: OutArgs, A::fixed::<PollIn>("fuse_poll_in"), NONE, [Operation::Poll(_)];
    NotifyReply: None,
        A::fixed::<NotifyRetrieveIn>("fuse_notify_retrieve_in")
            .then_data(bytes("retrieve data", offset_of!(NotifyRetrieveIn, size))),
        NONE, [Operation::NotifyReply { .. }];
    BatchForget: None,
        A::fixed::<BatchForgetIn>("fuse_batch_forget_in").then_data(records::<ForgetOne>(
            "fuse_forget_one array",
            offset_of!(BatchForgetIn, count),
        )),
        NONE, [Operation::BatchForget(_)];
    Fallocate: Empty, A::fixed::<FallocateIn>("fuse_fallocate_in"), NONE, [Operation::Fallocate(_)];
    Readdirplus: OutArgs,
        A::fixed::<ReadIn>("fuse_read_in").len(FixedLen::BeforeMinor { minor: 9, size: 24 }),
        NONE, [Operation::Readdirplus(_)];
    Rename2: Empty, A::fixed::<Rename2In>("fuse_rename2_in").then_names(2), NONE,
        [Operation::Rename(_)];
    Lseek: OutArgs, A::fixed::<LseekIn>("fuse_lseek_in"), NONE, [Operation::Lseek(_)];
    CopyFileRange: OutArgs, A::fixed::<CopyFileRangeIn>("fuse_copy_file_range_in"), NONE,
        [Operation::CopyFileRange { wide: false, .. }];
    Setupmapping: Empty, A::fixed::<SetupmappingIn>("fuse_setupmapping_in"), NONE,
        [Operation::Setupmapping(_)];
    Removemapping: Empty,
        A::fixed::<RemovemappingIn>("fuse_removemapping_in").then_data(
            records::<RemovemappingOne>(
                "fuse_removemapping_one array",
                offset_of!(RemovemappingIn, count),
            ),
        ),
        NONE, [Operation::Removemapping(_)];
    Syncfs: Empty, A::fixed::<SyncfsIn>("fuse_syncfs_in").len(FixedLen::Unread), NONE,
        [Operation::Syncfs];
    Tmpfile: OutArgs, A::fixed::<CreateIn>("fuse_create_in"), NONE, [Operation::Tmpfile(_)];
    Statx: OutArgs, A::fixed::<StatxIn>("fuse_statx_in"), NONE, [Operation::Statx(_)];
    CopyFileRange64: OutArgs, A::fixed::<CopyFileRangeIn>("fuse_copy_file_range_in"), NONE,
        [Operation::CopyFileRange { wide: true, .. }];
    CuseInit: OutArgs, A::fixed::<CuseInitIn>("cuse_init_in"), NONE, [Operation::CuseInit(_)];
    CuseInitBswapReserved: OutArgs, A::NONE, RESERVED;
    FuseInitBswapReserved: OutArgs, A::NONE, RESERVED;
}

/// The rows of the wire opcodes below 64 (every opcode but CUSE_INIT), by
/// opcode: every request looks its row up here (one load) instead of
/// running [`opcode_info`]'s match.
static BY_WIRE_OPCODE: [Option<OpcodeInfo>; 64] = {
    let mut rows = [None; 64];
    let mut i = 0;
    while i < TABLE.len() {
        let code = TABLE[i].opcode as usize;
        if code < rows.len() {
            rows[code] = Some(TABLE[i]);
        }
        i += 1;
    }
    rows
};

/// The row of a wire opcode, if it is known.
pub fn opcode_info_raw(opcode: u32) -> Option<OpcodeInfo> {
    match BY_WIRE_OPCODE.get(opcode as usize) {
        Some(row) => *row,
        None => Opcode::from_u32(opcode).map(opcode_info),
    }
}

impl fmt::Display for Operation<'_> {
    /// The kernel's name of the operation's opcode (`FUSE_RENAME2` for a
    /// rename with flags).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(opcode_info(opcode_of(self)).name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_covers_every_opcode() {
        assert_eq!(TABLE.len(), Opcode::ALL.len());
        for (row, &op) in TABLE.iter().zip(Opcode::ALL) {
            assert_eq!(*row, opcode_info(op));
            assert_eq!(row.opcode, op);
            assert_eq!(row.number(), op as u32);
            assert_eq!(row.name, op.kernel_name());
            assert_eq!(row.to_string(), op.kernel_name());
            assert!(!row.short_name().is_empty() && row.name.ends_with(row.short_name()));
            // Only reserved numbers lack arguments and an operation.
            if let Some(fixed) = row.args.fixed {
                assert!(fixed.size > 0 && fixed.name.ends_with("_in"), "{op:?}");
                assert!(!row.flags.reserved);
            }
            if row.args.data != DataArg::None {
                assert!(row.args.fixed.is_some(), "{op:?}: a count needs a struct");
            }
        }
        assert_eq!(opcode_info(Opcode::Lookup).short_name(), "LOOKUP");
        assert_eq!(opcode_info(Opcode::CuseInit).short_name(), "CUSE_INIT");
        assert!(!opcode_info(Opcode::Forget).expects_reply());
        assert!(!opcode_info(Opcode::Unlink).has_out_args());
        assert!(opcode_info(Opcode::Unlink).expects_reply());
        assert!(opcode_info(Opcode::Read).has_out_args());
        assert_eq!(opcode_info_raw(7), None);
        let waiting: Vec<Opcode> = Opcode::ALL
            .iter()
            .copied()
            .filter(|&op| opcode_info(op).waits_indefinitely())
            .collect();
        assert_eq!(waiting, [Opcode::Setlkw]);
    }

    #[test]
    fn operations_name_their_opcodes() {
        let rename = |flags| {
            Operation::Rename(crate::RenameArgs {
                name: c"a",
                newdir: 1,
                newname: c"b",
                flags,
            })
        };
        assert_eq!(rename(RenameFlags::empty()).to_string(), "FUSE_RENAME");
        assert_eq!(rename(RenameFlags::NOREPLACE).to_string(), "FUSE_RENAME2");
        assert_eq!(Operation::Statfs.to_string(), "FUSE_STATFS");
        assert_eq!(opcode_of(&Operation::Syncfs), Opcode::Syncfs);
    }
}
