//! Decoding a request's bytes into a typed [`Operation`].
//!
//! Decoding validates every length against the bytes at hand and never
//! panics: a request that is too short, has a name without its NUL, or
//! claims more data than it carries is a [`DecodeError`], which the server
//! answers with an errno.

use crate::args::*;
use crate::opcode_table::{opcode_info_raw, DataArg, OpcodeInfo};
use fuse_abi::{
    AccessMask, BatchForgetIn, BmapIn, CreateIn, CuseInitIn, FallocateIn, FlushIn, ForgetIn,
    ForgetOne, FsyncFlags, FsyncIn, GetattrFlags, GetattrIn, GetxattrIn, InHeader, InitIn,
    InterruptIn, IoctlFlags, IoctlIn, LinkIn, LkFlags, LkIn, LseekIn, MkdirIn, MknodIn,
    NotifyRetrieveIn, Opcode, OpenIn, OpenInFlags, PollFlags, PollIn, ReadFlags, ReadIn,
    ReleaseFlags, ReleaseIn, RemovemappingIn, RemovemappingOne, Rename2In, RenameFlags, RenameIn,
    SetattrIn, SetattrValid, SetupmappingIn, SetxattrFlags, SetxattrIn, StatxIn, WriteFlags,
    WriteIn,
};
use std::ffi::CStr;
use std::marker::PhantomData;
use zerocopy::{FromBytes, IntoBytes};

/// Why a request could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the request header.
    #[error("request of {0} bytes is shorter than the 40-byte header")]
    ShortHeader(usize),
    /// The header's length disagrees with the bytes received.
    #[error("header says {header} bytes but {actual} arrived")]
    LengthMismatch {
        /// `fuse_in_header.len`.
        header: u32,
        /// Bytes received.
        actual: usize,
    },
    /// An argument is cut short.
    #[error("{opcode}: argument {what} needs {need} bytes, {have} left")]
    Short {
        /// The operation.
        opcode: &'static str,
        /// Which argument.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// A name is not NUL-terminated within the request.
    #[error("{opcode}: name without a terminating NUL")]
    BadName {
        /// The operation.
        opcode: &'static str,
    },
    /// The extension area is larger than the request.
    #[error("extension area of {0} bytes exceeds the request")]
    BadExtensions(usize),
    /// The opcode is not known.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u32),
}

impl DecodeError {
    /// The errno the reply carries.
    pub fn errno(&self) -> i32 {
        match self {
            DecodeError::UnknownOpcode(_) => libc::ENOSYS,
            DecodeError::LengthMismatch { .. } | DecodeError::ShortHeader(_) => libc::EIO,
            _ => libc::EINVAL,
        }
    }
}

/// The bytes of one request, as a transport holds them.
#[derive(Debug, Clone, Copy)]
pub struct RawRequest<'a> {
    /// The `fuse_in_header` (at least 40 bytes; extra bytes are ignored).
    pub header: &'a [u8],
    /// Where the opcode's fixed argument struct is, when the transport
    /// keeps it apart from the rest (io_uring's `op_in` area); `None` when
    /// it leads `payload` (`/dev/fuse`).
    pub op_header: Option<&'a [u8]>,
    /// The remaining arguments (all of them for `/dev/fuse`), followed by
    /// the request extensions.
    pub payload: &'a [u8],
}

impl<'a> RawRequest<'a> {
    /// A request read whole from `/dev/fuse`: header, then arguments.
    pub fn contiguous(bytes: &'a [u8]) -> Self {
        let split = bytes.len().min(size_of::<InHeader>());
        let (header, payload) = bytes.split_at(split);
        Self {
            header,
            op_header: None,
            payload,
        }
    }

    /// Reads the header.
    pub fn in_header(&self) -> Result<InHeader, DecodeError> {
        InHeader::read_from_prefix(self.header)
            .map(|(h, _)| h)
            .map_err(|_| DecodeError::ShortHeader(self.header.len()))
    }
}

/// A list of fixed-size records in request memory, read without any
/// alignment requirement.
#[derive(Clone, Copy)]
pub struct PodList<'a, T> {
    bytes: &'a [u8],
    _marker: PhantomData<T>,
}

impl<T> std::fmt::Debug for PodList<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodList")
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl<T> PartialEq for PodList<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl<'a, T: FromBytes + Copy> PodList<'a, T> {
    /// The records in `bytes` (whose length is a multiple of the record size).
    pub fn new(bytes: &'a [u8]) -> Self {
        let whole = bytes.len() - bytes.len() % size_of::<T>().max(1);
        Self {
            bytes: &bytes[..whole],
            _marker: PhantomData,
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.bytes.len() / size_of::<T>().max(1)
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records, copied out one by one.
    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        let bytes = self.bytes;
        bytes
            .chunks_exact(size_of::<T>().max(1))
            .filter_map(|chunk| T::read_from_bytes(chunk).ok())
    }
}

/// The entries of a BATCH_FORGET.
pub type ForgetList<'a> = PodList<'a, ForgetOne>;

/// A decoded request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request<'a> {
    /// The header.
    pub header: InHeader,
    /// The operation and its arguments.
    pub op: Operation<'a>,
    /// The request extensions (`total_extlen`), undecoded.
    pub extensions: &'a [u8],
}

impl Request<'_> {
    /// The opcode, if known.
    pub fn opcode(&self) -> Option<Opcode> {
        Opcode::from_u32(self.header.opcode)
    }
}

/// An operation with its typed arguments; names and data borrow the
/// request's memory. One variant per opcode, except where two opcodes
/// differ only in a flag (RENAME/RENAME2, SETLK/SETLKW,
/// COPY_FILE_RANGE/COPY_FILE_RANGE_64); the argument structs are
/// documented in [`crate::args`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operation<'a> {
    /// LOOKUP: look `name` up in the directory `nodeid`.
    Lookup {
        /// The name to look up.
        name: &'a CStr,
    },
    /// FORGET: drop `nlookup` lookup references of `nodeid` (no reply).
    Forget {
        /// How many references to drop.
        nlookup: u64,
    },
    /// GETATTR: the attributes of `nodeid`.
    Getattr {
        /// The open file to ask, when the kernel names one.
        fh: Option<u64>,
    },
    /// SETATTR: change the attributes of `nodeid`.
    Setattr(SetattrArgs),
    /// READLINK: the target of the symlink `nodeid`.
    Readlink,
    /// SYMLINK: make a symlink `name` to `target` in the directory `nodeid`.
    Symlink {
        /// The new entry's name.
        name: &'a CStr,
        /// What the symlink points to.
        target: &'a CStr,
    },
    /// MKNOD: make a node `name` in the directory `nodeid`.
    Mknod {
        /// The new entry's name.
        name: &'a CStr,
        /// Its mode, device number and the caller's umask.
        args: MknodArgs,
    },
    /// MKDIR: make a directory `name` in the directory `nodeid`.
    Mkdir {
        /// The new entry's name.
        name: &'a CStr,
        /// Its mode and the caller's umask.
        args: MkdirArgs,
    },
    /// UNLINK: remove `name` from the directory `nodeid`.
    Unlink {
        /// The entry to remove.
        name: &'a CStr,
    },
    /// RMDIR: remove the directory `name` from the directory `nodeid`.
    Rmdir {
        /// The directory to remove.
        name: &'a CStr,
    },
    /// RENAME and RENAME2 (flags 0 for RENAME).
    Rename(RenameArgs<'a>),
    /// LINK: make `newname` in the directory `nodeid` a hard link to
    /// `oldnodeid`.
    Link {
        /// The node to link to.
        oldnodeid: u64,
        /// The new entry's name.
        newname: &'a CStr,
    },
    /// OPEN: open the file `nodeid`.
    Open(OpenArgs),
    /// READ: read from an open file.
    Read(ReadArgs),
    /// WRITE: write `data` to an open file.
    Write {
        /// Where and how.
        args: WriteArgs,
        /// The bytes to write (`args.size` of them).
        data: &'a [u8],
    },
    /// STATFS: file system statistics.
    Statfs,
    /// RELEASE: the last reference to an open file is gone.
    Release(ReleaseArgs),
    /// FSYNC: sync an open file.
    Fsync(FsyncArgs),
    /// SETXATTR: set an extended attribute.
    Setxattr(SetxattrArgs<'a>),
    /// GETXATTR: an extended attribute's value (or its size, with `size` 0).
    Getxattr {
        /// The attribute's name.
        name: &'a CStr,
        /// The largest value the caller takes; 0 asks for the size.
        size: u32,
    },
    /// LISTXATTR: the names of the extended attributes (or their size).
    Listxattr {
        /// The largest list the caller takes; 0 asks for the size.
        size: u32,
    },
    /// REMOVEXATTR: remove an extended attribute.
    Removexattr {
        /// The attribute's name.
        name: &'a CStr,
    },
    /// FLUSH: an open file's descriptor is being closed.
    Flush(FlushArgs),
    /// INIT: the kernel's offer that starts the connection.
    Init(InitIn),
    /// OPENDIR: open the directory `nodeid`.
    Opendir(OpenArgs),
    /// READDIR: list an open directory.
    Readdir(ReadArgs),
    /// RELEASEDIR: the last reference to an open directory is gone.
    Releasedir(ReleaseArgs),
    /// FSYNCDIR: sync an open directory.
    Fsyncdir(FsyncArgs),
    /// GETLK: test for a lock.
    Getlk(LockArgs),
    /// SETLK and SETLKW (`sleep`).
    Setlk {
        /// The lock to take or release.
        args: LockArgs,
        /// Wait until it can be taken (SETLKW).
        sleep: bool,
    },
    /// ACCESS: check the caller's access to `nodeid`.
    Access {
        /// The access to check (`R_OK`, `W_OK`, `X_OK`; `F_OK` is 0).
        mask: AccessMask,
    },
    /// CREATE: make and open a file `name` in the directory `nodeid`.
    Create {
        /// The new file's name.
        name: &'a CStr,
        /// Its open flags, mode and the caller's umask.
        args: CreateArgs,
    },
    /// INTERRUPT: the caller of request `unique` got a signal (no reply).
    Interrupt {
        /// The interrupted request.
        unique: u64,
    },
    /// BMAP: map a block of the file (block device backed file systems).
    Bmap {
        /// The block in the file.
        block: u64,
        /// The block size.
        blocksize: u32,
    },
    /// DESTROY: the connection is ending.
    Destroy,
    /// IOCTL: an ioctl(2) on an open file.
    Ioctl(IoctlArgs<'a>),
    /// POLL: poll(2) on an open file.
    Poll(PollArgs),
    /// NOTIFY_REPLY: the page cache data a RETRIEVE notification asked for
    /// (no reply).
    NotifyReply {
        /// The file offset of `data`.
        offset: u64,
        /// The data.
        data: &'a [u8],
    },
    /// BATCH_FORGET: drop lookup references of many nodes (no reply).
    BatchForget(ForgetList<'a>),
    /// FALLOCATE: allocate or punch a range of an open file.
    Fallocate(FallocateArgs),
    /// READDIRPLUS: list an open directory with each entry's attributes.
    Readdirplus(ReadArgs),
    /// LSEEK: `SEEK_DATA` / `SEEK_HOLE` in an open file.
    Lseek(LseekArgs),
    /// COPY_FILE_RANGE and COPY_FILE_RANGE_64 (`wide`: 64-bit reply).
    CopyFileRange {
        /// The ranges to copy between.
        args: CopyFileRangeArgs,
        /// COPY_FILE_RANGE_64: the reply carries a 64-bit count.
        wide: bool,
    },
    /// SETUPMAPPING: DAX, map a range of a file into the DAX window.
    Setupmapping(SetupmappingIn),
    /// REMOVEMAPPING: DAX, remove mappings from the DAX window.
    Removemapping(PodList<'a, RemovemappingOne>),
    /// SYNCFS: sync the file system.
    Syncfs,
    /// TMPFILE: make an unnamed temporary file in the directory `nodeid`.
    Tmpfile(CreateArgs),
    /// STATX: statx(2) attributes of `nodeid`.
    Statx(StatxArgs),
    /// CUSE_INIT: initialize a character device (CUSE).
    CuseInit(CuseInitIn),
}

/// What decoding needs to know of the negotiated protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The negotiated minor version (older kernels send shorter structs).
    pub minor: u32,
    /// `FUSE_SETXATTR_EXT` was negotiated: SETXATTR carries the extended struct.
    pub setxattr_ext: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            minor: fuse_abi::KERNEL_MINOR_VERSION,
            setxattr_ext: false,
        }
    }
}

/// A request's arguments, split and length-checked by the opcode's
/// [`ArgShape`](crate::opcode_table::ArgShape): the fixed struct's bytes, the names, the data.
struct Args<'a> {
    fixed: &'a [u8],
    fixed_size: usize,
    names: [&'a CStr; 2],
    data: &'a [u8],
}

impl<'a> Args<'a> {
    /// Splits the arguments the way `shape` says, in wire order: the fixed
    /// struct (from `op_header` when the transport keeps it apart), the
    /// names, then the data whose length the fixed struct gives.
    fn split(
        info: &OpcodeInfo,
        op_header: Option<&'a [u8]>,
        mut rest: &'a [u8],
        opts: &DecodeOptions,
    ) -> Result<Self, DecodeError> {
        let shape = &info.args;
        let short = |what, need, have| DecodeError::Short {
            opcode: info.name,
            what,
            need,
            have,
        };
        let mut args = Args {
            fixed: &[],
            fixed_size: 0,
            names: [c""; 2],
            data: &[],
        };
        if let Some(fixed) = &shape.fixed {
            let src = op_header.unwrap_or(rest);
            let len = fixed
                .wire_len(opts, src.len())
                .map_err(|need| short(fixed.name, need, src.len()))?;
            args.fixed = &src[..len];
            args.fixed_size = fixed.size;
            if op_header.is_none() {
                rest = &rest[len..];
            }
        }
        for slot in args.names.iter_mut().take(shape.names as usize) {
            let name = CStr::from_bytes_until_nul(rest)
                .map_err(|_| DecodeError::BadName { opcode: info.name })?;
            rest = &rest[name.to_bytes_with_nul().len()..];
            *slot = name;
        }
        let (what, len) = match shape.data {
            DataArg::None => return Ok(args),
            DataArg::Bytes { what, count_at } => (what, args.count(count_at)),
            DataArg::Records {
                what,
                count_at,
                record,
            } => (what, args.count(count_at).saturating_mul(record)),
        };
        if rest.len() < len {
            return Err(short(what, len, rest.len()));
        }
        args.data = &rest[..len];
        Ok(args)
    }

    /// The `u32` at `at` in the fixed struct (0 beyond the bytes sent).
    fn count(&self, at: usize) -> usize {
        self.fixed
            .get(at..at + 4)
            .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// The fixed struct; the bytes an older protocol version doesn't send
    /// read as zero.
    fn fixed<T: FromBytes + IntoBytes>(&self) -> T {
        debug_assert_eq!(size_of::<T>(), self.fixed_size, "the table's struct");
        let mut value = T::new_zeroed();
        let len = self.fixed.len().min(size_of::<T>());
        value.as_mut_bytes()[..len].copy_from_slice(&self.fixed[..len]);
        value
    }

    /// The first name.
    fn name(&self) -> &'a CStr {
        self.names[0]
    }

    /// The second name.
    fn name2(&self) -> &'a CStr {
        self.names[1]
    }
}

fn read_args(r: ReadIn, minor: u32) -> ReadArgs {
    let read_flags = ReadFlags::from_bits_retain(r.read_flags);
    ReadArgs {
        fh: r.fh,
        offset: r.offset,
        size: r.size,
        read_flags,
        lock_owner: (minor >= 9 && read_flags.contains(ReadFlags::LOCKOWNER))
            .then_some(r.lock_owner),
        flags: r.flags,
    }
}

fn release_args(r: ReleaseIn) -> ReleaseArgs {
    ReleaseArgs {
        fh: r.fh,
        flags: r.flags,
        release_flags: ReleaseFlags::from_bits_retain(r.release_flags),
        lock_owner: r.lock_owner,
    }
}

fn fsync_args(f: FsyncIn) -> FsyncArgs {
    FsyncArgs {
        fh: f.fh,
        fsync_flags: FsyncFlags::from_bits_retain(f.fsync_flags),
    }
}

fn lock_args(l: LkIn) -> LockArgs {
    LockArgs {
        fh: l.fh,
        owner: l.owner,
        lock: l.lk,
        flock: LkFlags::from_bits_retain(l.lk_flags).contains(LkFlags::FLOCK),
    }
}

fn open_args(o: OpenIn) -> OpenArgs {
    OpenArgs {
        flags: o.flags,
        open_flags: OpenInFlags::from_bits_retain(o.open_flags),
    }
}

fn set_time(now: bool, set: bool, secs: u64, nsecs: u32) -> Option<SetTime> {
    if now {
        Some(SetTime::Now)
    } else if set {
        Some(SetTime::At {
            secs: secs as i64,
            nsecs,
        })
    } else {
        None
    }
}

/// Typed SETATTR arguments from the wire struct.
pub fn setattr_args(s: &SetattrIn) -> SetattrArgs {
    let v = SetattrValid::from_bits_retain(s.valid);
    SetattrArgs {
        valid: v,
        fh: v.contains(SetattrValid::FH).then_some(s.fh),
        mode: v.contains(SetattrValid::MODE).then_some(s.mode),
        uid: v.contains(SetattrValid::UID).then_some(s.uid),
        gid: v.contains(SetattrValid::GID).then_some(s.gid),
        size: v.contains(SetattrValid::SIZE).then_some(s.size),
        atime: set_time(
            v.contains(SetattrValid::ATIME_NOW),
            v.contains(SetattrValid::ATIME),
            s.atime,
            s.atimensec,
        ),
        mtime: set_time(
            v.contains(SetattrValid::MTIME_NOW),
            v.contains(SetattrValid::MTIME),
            s.mtime,
            s.mtimensec,
        ),
        ctime: v
            .contains(SetattrValid::CTIME)
            .then_some((s.ctime as i64, s.ctimensec)),
        lock_owner: v.contains(SetattrValid::LOCKOWNER).then_some(s.lock_owner),
        kill_suidgid: v.contains(SetattrValid::KILL_SUIDGID),
    }
}

/// Decodes one request.
///
/// The result borrows `raw`. Errors carry the errno to reply with; a
/// request whose header can't be read can't be answered at all.
pub fn decode<'a>(raw: RawRequest<'a>, opts: DecodeOptions) -> Result<Request<'a>, DecodeError> {
    let header = raw.in_header()?;
    let mut payload = raw.payload;
    if raw.op_header.is_none() {
        let actual = size_of::<InHeader>() + payload.len();
        if header.len as usize != actual {
            return Err(DecodeError::LengthMismatch {
                header: header.len,
                actual,
            });
        }
    }
    let extlen = header.total_extlen as usize * 8;
    if extlen > payload.len() {
        return Err(DecodeError::BadExtensions(extlen));
    }
    let extensions = &payload[payload.len() - extlen..];
    payload = &payload[..payload.len() - extlen];

    let info = opcode_info_raw(header.opcode).ok_or(DecodeError::UnknownOpcode(header.opcode))?;
    let opcode = info.opcode;
    if info.flags.reserved {
        return Err(DecodeError::UnknownOpcode(header.opcode));
    }
    let a = Args::split(&info, raw.op_header, payload, &opts)?;
    let minor = opts.minor;
    let op = match opcode {
        Opcode::Lookup => Operation::Lookup { name: a.name() },
        Opcode::Forget => Operation::Forget {
            nlookup: a.fixed::<ForgetIn>().nlookup,
        },
        Opcode::Getattr => {
            let g: GetattrIn = a.fixed();
            let fh = GetattrFlags::from_bits_retain(g.getattr_flags)
                .contains(GetattrFlags::FH)
                .then_some(g.fh);
            Operation::Getattr { fh }
        }
        Opcode::Setattr => Operation::Setattr(setattr_args(&a.fixed())),
        Opcode::Readlink => Operation::Readlink,
        Opcode::Symlink => Operation::Symlink {
            name: a.name(),
            target: a.name2(),
        },
        Opcode::Mknod => {
            let m: MknodIn = a.fixed();
            Operation::Mknod {
                name: a.name(),
                args: MknodArgs {
                    mode: m.mode,
                    rdev: m.rdev,
                    umask: m.umask,
                },
            }
        }
        Opcode::Mkdir => {
            let m: MkdirIn = a.fixed();
            Operation::Mkdir {
                name: a.name(),
                args: MkdirArgs {
                    mode: m.mode,
                    umask: m.umask,
                },
            }
        }
        Opcode::Unlink => Operation::Unlink { name: a.name() },
        Opcode::Rmdir => Operation::Rmdir { name: a.name() },
        Opcode::Rename => {
            let r: RenameIn = a.fixed();
            Operation::Rename(RenameArgs {
                name: a.name(),
                newdir: r.newdir,
                newname: a.name2(),
                flags: RenameFlags::empty(),
            })
        }
        Opcode::Rename2 => {
            let r: Rename2In = a.fixed();
            Operation::Rename(RenameArgs {
                name: a.name(),
                newdir: r.newdir,
                newname: a.name2(),
                flags: RenameFlags::from_bits_retain(r.flags),
            })
        }
        Opcode::Link => Operation::Link {
            oldnodeid: a.fixed::<LinkIn>().oldnodeid,
            newname: a.name(),
        },
        Opcode::Open => Operation::Open(open_args(a.fixed())),
        Opcode::Opendir => Operation::Opendir(open_args(a.fixed())),
        Opcode::Read => Operation::Read(read_args(a.fixed(), minor)),
        Opcode::Readdir => Operation::Readdir(read_args(a.fixed(), minor)),
        Opcode::Readdirplus => Operation::Readdirplus(read_args(a.fixed(), minor)),
        Opcode::Write => {
            let w: WriteIn = a.fixed();
            let write_flags = WriteFlags::from_bits_retain(w.write_flags);
            let args = WriteArgs {
                fh: w.fh,
                offset: w.offset,
                size: w.size,
                write_flags,
                lock_owner: write_flags
                    .contains(WriteFlags::LOCKOWNER)
                    .then_some(w.lock_owner),
                flags: w.flags,
            };
            Operation::Write { args, data: a.data }
        }
        Opcode::Statfs => Operation::Statfs,
        Opcode::Release => Operation::Release(release_args(a.fixed())),
        Opcode::Releasedir => Operation::Releasedir(release_args(a.fixed())),
        Opcode::Fsync => Operation::Fsync(fsync_args(a.fixed())),
        Opcode::Fsyncdir => Operation::Fsyncdir(fsync_args(a.fixed())),
        Opcode::Setxattr => {
            let s: SetxattrIn = a.fixed();
            Operation::Setxattr(SetxattrArgs {
                name: a.name(),
                value: a.data,
                flags: s.flags,
                setxattr_flags: SetxattrFlags::from_bits_retain(s.setxattr_flags),
            })
        }
        Opcode::Getxattr => Operation::Getxattr {
            name: a.name(),
            size: a.fixed::<GetxattrIn>().size,
        },
        Opcode::Listxattr => Operation::Listxattr {
            size: a.fixed::<GetxattrIn>().size,
        },
        Opcode::Removexattr => Operation::Removexattr { name: a.name() },
        Opcode::Flush => {
            let f: FlushIn = a.fixed();
            Operation::Flush(FlushArgs {
                fh: f.fh,
                lock_owner: f.lock_owner,
            })
        }
        Opcode::Init => Operation::Init(a.fixed()),
        Opcode::Getlk => Operation::Getlk(lock_args(a.fixed())),
        Opcode::Setlk | Opcode::Setlkw => Operation::Setlk {
            args: lock_args(a.fixed()),
            sleep: opcode == Opcode::Setlkw,
        },
        Opcode::Access => Operation::Access {
            mask: AccessMask::from_bits_retain(a.fixed::<fuse_abi::AccessIn>().mask),
        },
        Opcode::Create => Operation::Create {
            name: a.name(),
            args: create_args(a.fixed()),
        },
        Opcode::Tmpfile => Operation::Tmpfile(create_args(a.fixed())),
        Opcode::Interrupt => Operation::Interrupt {
            unique: a.fixed::<InterruptIn>().unique,
        },
        Opcode::Bmap => {
            let b: BmapIn = a.fixed();
            Operation::Bmap {
                block: b.block,
                blocksize: b.blocksize,
            }
        }
        Opcode::Destroy => Operation::Destroy,
        Opcode::Ioctl => {
            let i: IoctlIn = a.fixed();
            Operation::Ioctl(IoctlArgs {
                fh: i.fh,
                flags: IoctlFlags::from_bits_retain(i.flags),
                cmd: i.cmd,
                arg: i.arg,
                data: a.data,
                out_size: i.out_size,
            })
        }
        Opcode::Poll => {
            let p: PollIn = a.fixed();
            Operation::Poll(PollArgs {
                fh: p.fh,
                kh: p.kh,
                schedule_notify: PollFlags::from_bits_retain(p.flags)
                    .contains(PollFlags::SCHEDULE_NOTIFY),
                events: p.events,
            })
        }
        Opcode::NotifyReply => Operation::NotifyReply {
            offset: a.fixed::<NotifyRetrieveIn>().offset,
            data: a.data,
        },
        Opcode::BatchForget => {
            let _: BatchForgetIn = a.fixed();
            Operation::BatchForget(PodList::new(a.data))
        }
        Opcode::Fallocate => {
            let f: FallocateIn = a.fixed();
            Operation::Fallocate(FallocateArgs {
                fh: f.fh,
                offset: f.offset,
                length: f.length,
                mode: f.mode,
            })
        }
        Opcode::Lseek => {
            let l: LseekIn = a.fixed();
            Operation::Lseek(LseekArgs {
                fh: l.fh,
                offset: l.offset,
                whence: l.whence,
            })
        }
        Opcode::CopyFileRange | Opcode::CopyFileRange64 => Operation::CopyFileRange {
            args: a.fixed(),
            wide: opcode == Opcode::CopyFileRange64,
        },
        Opcode::Setupmapping => Operation::Setupmapping(a.fixed()),
        Opcode::Removemapping => {
            let _: RemovemappingIn = a.fixed();
            Operation::Removemapping(PodList::new(a.data))
        }
        Opcode::Syncfs => Operation::Syncfs,
        Opcode::Statx => {
            let s: StatxIn = a.fixed();
            let fh = GetattrFlags::from_bits_retain(s.getattr_flags)
                .contains(GetattrFlags::FH)
                .then_some(s.fh);
            Operation::Statx(StatxArgs {
                fh,
                sx_flags: s.sx_flags,
                sx_mask: s.sx_mask,
            })
        }
        Opcode::CuseInit => Operation::CuseInit(a.fixed()),
        // Reserved in the table: refused above.
        Opcode::CuseInitBswapReserved | Opcode::FuseInitBswapReserved => {
            return Err(DecodeError::UnknownOpcode(header.opcode))
        }
    };
    Ok(Request {
        header,
        op,
        extensions,
    })
}

fn create_args(c: CreateIn) -> CreateArgs {
    CreateArgs {
        flags: c.flags,
        mode: c.mode,
        umask: c.umask,
        open_flags: OpenInFlags::from_bits_retain(c.open_flags),
    }
}

/// The supplementary groups of a request's `FUSE_EXT_GROUPS` extension,
/// if it has one.
pub fn supplementary_groups(extensions: &[u8]) -> Option<PodList<'_, u32>> {
    let mut rest = extensions;
    while let Ok((ext, _)) = fuse_abi::ExtHeader::read_from_prefix(rest) {
        let size = ext.size as usize;
        if size < size_of::<fuse_abi::ExtHeader>() || size > rest.len() {
            return None;
        }
        if ext.r#type == fuse_abi::EXT_GROUPS {
            let body = &rest[size_of::<fuse_abi::ExtHeader>()..size];
            let (groups, list) = fuse_abi::SuppGroups::read_from_prefix(body).ok()?;
            let len = (groups.nr_groups as usize).checked_mul(4)?;
            return list.get(..len).map(PodList::new);
        }
        rest = &rest[size..];
    }
    None
}
