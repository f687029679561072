//! Encoding requests the way the kernel does: the inverse of
//! [`crate::decode`], for tests, fuzzing corpora and tools that stand in for
//! the kernel.

use crate::args::*;
use crate::request::{DecodeOptions, Operation};
use fuse_abi::*;
use std::ffi::CStr;
use zerocopy::IntoBytes;

/// The opcode a request for `op` carries (generated from the opcode table).
pub use crate::opcode_table::opcode_of;

/// A request's arguments, split as FUSE over io_uring carries them: the
/// opcode's fixed struct (the first argument) and the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedArgs {
    /// The fixed struct (may be empty).
    pub op_header: Vec<u8>,
    /// Names, data and arrays that follow.
    pub payload: Vec<u8>,
}

fn cstr(out: &mut Vec<u8>, s: &CStr) {
    out.extend_from_slice(s.to_bytes_with_nul());
}

fn read_in(a: &ReadArgs) -> ReadIn {
    ReadIn {
        fh: a.fh,
        offset: a.offset,
        size: a.size,
        read_flags: a.read_flags.bits(),
        lock_owner: a.lock_owner.unwrap_or(0),
        flags: a.flags,
        padding: 0,
    }
}

fn release_in(a: &ReleaseArgs) -> ReleaseIn {
    ReleaseIn {
        fh: a.fh,
        flags: a.flags,
        release_flags: a.release_flags.bits(),
        lock_owner: a.lock_owner,
    }
}

fn lk_in(a: &LockArgs) -> LkIn {
    LkIn {
        fh: a.fh,
        owner: a.owner,
        lk: a.lock,
        lk_flags: if a.flock { LkFlags::FLOCK.bits() } else { 0 },
        padding: 0,
    }
}

fn create_in(a: &CreateArgs) -> CreateIn {
    CreateIn {
        flags: a.flags,
        mode: a.mode,
        umask: a.umask,
        open_flags: a.open_flags.bits(),
    }
}

fn time_parts(t: Option<SetTime>) -> (u64, u32) {
    match t {
        Some(SetTime::At { secs, nsecs }) => (secs as u64, nsecs),
        _ => (0, 0),
    }
}

/// The wire struct of SETATTR arguments.
pub fn setattr_in(a: &SetattrArgs) -> SetattrIn {
    // Keep the raw bits and add those the fields imply.
    let mut valid = a.valid;
    let mut set = |flag: SetattrValid, on: bool| {
        if on {
            valid.insert(flag)
        }
    };
    set(SetattrValid::FH, a.fh.is_some());
    set(SetattrValid::MODE, a.mode.is_some());
    set(SetattrValid::UID, a.uid.is_some());
    set(SetattrValid::GID, a.gid.is_some());
    set(SetattrValid::SIZE, a.size.is_some());
    set(
        SetattrValid::ATIME,
        matches!(a.atime, Some(SetTime::At { .. })),
    );
    set(SetattrValid::ATIME_NOW, a.atime == Some(SetTime::Now));
    set(
        SetattrValid::MTIME,
        matches!(a.mtime, Some(SetTime::At { .. })),
    );
    set(SetattrValid::MTIME_NOW, a.mtime == Some(SetTime::Now));
    set(SetattrValid::CTIME, a.ctime.is_some());
    set(SetattrValid::LOCKOWNER, a.lock_owner.is_some());
    set(SetattrValid::KILL_SUIDGID, a.kill_suidgid);
    let (atime, atimensec) = time_parts(a.atime);
    let (mtime, mtimensec) = time_parts(a.mtime);
    let (ctime, ctimensec) = a.ctime.map_or((0, 0), |(s, n)| (s as u64, n));
    SetattrIn {
        valid: valid.bits(),
        padding: 0,
        fh: a.fh.unwrap_or(0),
        size: a.size.unwrap_or(0),
        lock_owner: a.lock_owner.unwrap_or(0),
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: a.mode.unwrap_or(0),
        unused4: 0,
        uid: a.uid.unwrap_or(0),
        gid: a.gid.unwrap_or(0),
        unused5: 0,
    }
}

/// Encodes the arguments of `op` as the kernel would for a connection
/// that negotiated `opts`.
pub fn encode_args(op: &Operation<'_>, opts: DecodeOptions) -> EncodedArgs {
    let mut header = Vec::new();
    let mut payload = Vec::new();
    let h = &mut header;
    let p = &mut payload;
    match op {
        Operation::Lookup { name }
        | Operation::Unlink { name }
        | Operation::Rmdir { name }
        | Operation::Removexattr { name } => cstr(p, name),
        Operation::Forget { nlookup } => {
            h.extend_from_slice(ForgetIn { nlookup: *nlookup }.as_bytes())
        }
        Operation::Getattr { fh } => {
            let g = GetattrIn {
                getattr_flags: if fh.is_some() {
                    GetattrFlags::FH.bits()
                } else {
                    0
                },
                dummy: 0,
                fh: fh.unwrap_or(0),
            };
            h.extend_from_slice(g.as_bytes());
        }
        Operation::Setattr(a) => h.extend_from_slice(setattr_in(a).as_bytes()),
        Operation::Readlink | Operation::Statfs | Operation::Destroy | Operation::Syncfs => {
            if matches!(op, Operation::Syncfs) {
                h.extend_from_slice(SyncfsIn::default().as_bytes());
            }
        }
        Operation::Symlink { name, target } => {
            cstr(p, name);
            cstr(p, target);
        }
        Operation::Mknod { name, args } => {
            h.extend_from_slice(
                MknodIn {
                    mode: args.mode,
                    rdev: args.rdev,
                    umask: args.umask,
                    padding: 0,
                }
                .as_bytes(),
            );
            cstr(p, name);
        }
        Operation::Mkdir { name, args } => {
            h.extend_from_slice(
                MkdirIn {
                    mode: args.mode,
                    umask: args.umask,
                }
                .as_bytes(),
            );
            cstr(p, name);
        }
        Operation::Rename(a) => {
            if a.flags.is_empty() {
                h.extend_from_slice(RenameIn { newdir: a.newdir }.as_bytes());
            } else {
                h.extend_from_slice(
                    Rename2In {
                        newdir: a.newdir,
                        flags: a.flags.bits(),
                        padding: 0,
                    }
                    .as_bytes(),
                );
            }
            cstr(p, a.name);
            cstr(p, a.newname);
        }
        Operation::Link { oldnodeid, newname } => {
            h.extend_from_slice(
                LinkIn {
                    oldnodeid: *oldnodeid,
                }
                .as_bytes(),
            );
            cstr(p, newname);
        }
        Operation::Open(a) | Operation::Opendir(a) => h.extend_from_slice(
            OpenIn {
                flags: a.flags,
                open_flags: a.open_flags.bits(),
            }
            .as_bytes(),
        ),
        Operation::Read(a) | Operation::Readdir(a) | Operation::Readdirplus(a) => {
            h.extend_from_slice(read_in(a).as_bytes())
        }
        Operation::Write { args, data } => {
            let w = WriteIn {
                fh: args.fh,
                offset: args.offset,
                size: data.len() as u32,
                write_flags: args.write_flags.bits(),
                lock_owner: args.lock_owner.unwrap_or(0),
                flags: args.flags,
                padding: 0,
            };
            h.extend_from_slice(w.as_bytes());
            p.extend_from_slice(data);
        }
        Operation::Release(a) | Operation::Releasedir(a) => {
            h.extend_from_slice(release_in(a).as_bytes())
        }
        Operation::Fsync(a) | Operation::Fsyncdir(a) => h.extend_from_slice(
            FsyncIn {
                fh: a.fh,
                fsync_flags: a.fsync_flags.bits(),
                padding: 0,
            }
            .as_bytes(),
        ),
        Operation::Setxattr(a) => {
            let s = SetxattrIn {
                size: a.value.len() as u32,
                flags: a.flags,
                setxattr_flags: a.setxattr_flags.bits(),
                padding: 0,
            };
            let len = if opts.setxattr_ext {
                size_of::<SetxattrIn>()
            } else {
                COMPAT_SETXATTR_IN_SIZE
            };
            h.extend_from_slice(&s.as_bytes()[..len]);
            cstr(p, a.name);
            p.extend_from_slice(a.value);
        }
        Operation::Getxattr { name, size } => {
            h.extend_from_slice(
                GetxattrIn {
                    size: *size,
                    padding: 0,
                }
                .as_bytes(),
            );
            cstr(p, name);
        }
        Operation::Listxattr { size } => h.extend_from_slice(
            GetxattrIn {
                size: *size,
                padding: 0,
            }
            .as_bytes(),
        ),
        Operation::Flush(a) => h.extend_from_slice(
            FlushIn {
                fh: a.fh,
                unused: 0,
                padding: 0,
                lock_owner: a.lock_owner,
            }
            .as_bytes(),
        ),
        Operation::Init(i) => h.extend_from_slice(i.as_bytes()),
        Operation::Getlk(a) | Operation::Setlk { args: a, .. } => {
            h.extend_from_slice(lk_in(a).as_bytes())
        }
        Operation::Access { mask } => h.extend_from_slice(
            AccessIn {
                mask: mask.bits(),
                padding: 0,
            }
            .as_bytes(),
        ),
        Operation::Create { name, args } => {
            h.extend_from_slice(create_in(args).as_bytes());
            cstr(p, name);
        }
        Operation::Tmpfile(args) => h.extend_from_slice(create_in(args).as_bytes()),
        Operation::Interrupt { unique } => {
            h.extend_from_slice(InterruptIn { unique: *unique }.as_bytes())
        }
        Operation::Bmap { block, blocksize } => h.extend_from_slice(
            BmapIn {
                block: *block,
                blocksize: *blocksize,
                padding: 0,
            }
            .as_bytes(),
        ),
        Operation::Ioctl(a) => {
            let i = IoctlIn {
                fh: a.fh,
                flags: a.flags.bits(),
                cmd: a.cmd,
                arg: a.arg,
                in_size: a.data.len() as u32,
                out_size: a.out_size,
            };
            h.extend_from_slice(i.as_bytes());
            p.extend_from_slice(a.data);
        }
        Operation::Poll(a) => {
            let flags = if a.schedule_notify {
                PollFlags::SCHEDULE_NOTIFY.bits()
            } else {
                0
            };
            h.extend_from_slice(
                PollIn {
                    fh: a.fh,
                    kh: a.kh,
                    flags,
                    events: a.events,
                }
                .as_bytes(),
            );
        }
        Operation::NotifyReply { offset, data } => {
            let n = NotifyRetrieveIn {
                offset: *offset,
                size: data.len() as u32,
                ..NotifyRetrieveIn::default()
            };
            h.extend_from_slice(n.as_bytes());
            p.extend_from_slice(data);
        }
        Operation::BatchForget(list) => {
            h.extend_from_slice(
                BatchForgetIn {
                    count: list.len() as u32,
                    dummy: 0,
                }
                .as_bytes(),
            );
            for item in list.iter() {
                p.extend_from_slice(item.as_bytes());
            }
        }
        Operation::Fallocate(a) => {
            let f = FallocateIn {
                fh: a.fh,
                offset: a.offset,
                length: a.length,
                mode: a.mode,
                padding: 0,
            };
            h.extend_from_slice(f.as_bytes());
        }
        Operation::Lseek(a) => h.extend_from_slice(
            LseekIn {
                fh: a.fh,
                offset: a.offset,
                whence: a.whence,
                padding: 0,
            }
            .as_bytes(),
        ),
        Operation::CopyFileRange { args, .. } => h.extend_from_slice(args.as_bytes()),
        Operation::Setupmapping(s) => h.extend_from_slice(s.as_bytes()),
        Operation::Removemapping(list) => {
            h.extend_from_slice(
                RemovemappingIn {
                    count: list.len() as u32,
                }
                .as_bytes(),
            );
            for item in list.iter() {
                p.extend_from_slice(item.as_bytes());
            }
        }
        Operation::Statx(a) => {
            let s = StatxIn {
                getattr_flags: if a.fh.is_some() {
                    GetattrFlags::FH.bits()
                } else {
                    0
                },
                reserved: 0,
                fh: a.fh.unwrap_or(0),
                sx_flags: a.sx_flags,
                sx_mask: a.sx_mask,
            };
            h.extend_from_slice(s.as_bytes());
        }
        Operation::CuseInit(c) => h.extend_from_slice(c.as_bytes()),
    }
    EncodedArgs {
        op_header: header,
        payload,
    }
}

/// Encodes a whole request as `/dev/fuse` delivers it: `fuse_in_header`
/// (with `len` and `opcode` filled in from `op`), then the arguments.
pub fn encode_request(header: InHeader, op: &Operation<'_>, opts: DecodeOptions) -> Vec<u8> {
    let args = encode_args(op, opts);
    let len = size_of::<InHeader>() + args.op_header.len() + args.payload.len();
    let header = InHeader {
        len: len as u32,
        opcode: opcode_of(op) as u32,
        ..header
    };
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&args.op_header);
    out.extend_from_slice(&args.payload);
    out
}
