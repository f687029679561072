//! The `dispatch` target: a stream of requests through the server into a
//! [`PassthroughFs`] over the fenced scratch directory.

use crate::scratch::Scratch;
use crate::tx::{split_requests, MemTx};
use fuse_abi::{InHeader, InitFlags, InitIn, Opcode};
use fuse_backend_passthrough::{KillPrivV2, PassthroughConfig, PassthroughFs};
use fuse_server::wire::encode_request;
use fuse_server::{Context, DecodeOptions, FileSystem, Operation, Outcome, Server};
use std::sync::Arc;
use std::time::Duration;
use zerocopy::FromBytes;

/// Opcodes whose requests may change the served tree: after an input
/// with any of them, the tree is put back.
const MUTATING: &[Opcode] = &[
    Opcode::Setattr,
    Opcode::Symlink,
    Opcode::Mknod,
    Opcode::Mkdir,
    Opcode::Unlink,
    Opcode::Rmdir,
    Opcode::Rename,
    Opcode::Rename2,
    Opcode::Link,
    Opcode::Open,
    Opcode::Write,
    Opcode::Setxattr,
    Opcode::Removexattr,
    Opcode::Create,
    Opcode::Fallocate,
    Opcode::CopyFileRange,
    Opcode::CopyFileRange64,
    Opcode::Tmpfile,
];

/// The reply buffer: what the transports give after INIT (1 MiB bodies).
const REPLY_SIZE: usize = 1 << 20;

/// The INIT a current kernel sends (7.46, offering everything the
/// passthrough may ask for), used when an input doesn't start with one.
pub fn default_init() -> Vec<u8> {
    let flags = InitFlags::ASYNC_READ
        | InitFlags::POSIX_LOCKS
        | InitFlags::ATOMIC_O_TRUNC
        | InitFlags::BIG_WRITES
        | InitFlags::FLOCK_LOCKS
        | InitFlags::DO_READDIRPLUS
        | InitFlags::READDIRPLUS_AUTO
        | InitFlags::ASYNC_DIO
        | InitFlags::WRITEBACK_CACHE
        | InitFlags::NO_OPEN_SUPPORT
        | InitFlags::PARALLEL_DIROPS
        | InitFlags::HANDLE_KILLPRIV_V2
        | InitFlags::CACHE_SYMLINKS
        | InitFlags::NO_OPENDIR_SUPPORT
        | InitFlags::MAX_PAGES
        | InitFlags::INIT_EXT
        | InitFlags::SETXATTR_EXT
        | InitFlags::DIRECT_IO_ALLOW_MMAP;
    let init = InitIn {
        major: 7,
        minor: 46,
        max_readahead: 128 << 10,
        flags: flags.low(),
        flags2: flags.high(),
        unused: [0; 11],
    };
    encode_request(
        InHeader {
            unique: 1,
            ..InHeader::default()
        },
        &Operation::Init(init),
        DecodeOptions::default(),
    )
}

/// Which passthrough options an input runs with, from its first byte.
fn config_for(pick: u8) -> PassthroughConfig {
    PassthroughConfig::default()
        .attr_timeout(Duration::ZERO)
        .entry_timeout(Duration::ZERO)
        .no_open(pick & 1 != 0)
        .no_opendir(pick & 2 != 0)
        .writeback(pick & 4 != 0)
        .killpriv_v2(if pick & 8 != 0 {
            KillPrivV2::On
        } else {
            KillPrivV2::Off
        })
        .readdirplus(pick & 16 == 0)
        .file_handles(pick & 32 == 0)
}

/// Runs one input: the first byte picks the passthrough's options
/// (zero-message opens, writeback cache, readdirplus, file handles, ...),
/// the rest is a stream of requests as `/dev/fuse` delivers them (an INIT
/// is sent first unless the stream starts with one). Panics on any broken
/// property: see the crate docs.
pub fn run(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let mut scratch = Scratch::get();
    let config = config_for(pick);
    scratch.enter();
    let dirty = run_fenced(&scratch, config, body);
    scratch.leave();
    scratch.check_outside();
    if dirty && scratch.src_changed() {
        scratch.reset_src();
    }
}

thread_local! {
    static REPLY: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; REPLY_SIZE]);
}

fn run_fenced(scratch: &Scratch, config: PassthroughConfig, data: &[u8]) -> bool {
    let fs = Arc::new(
        PassthroughFs::new(scratch.src_path(), config)
            .expect("PassthroughFs over the scratch tree"),
    );
    let server = Server::new(fs.clone());
    let mut requests: Vec<Vec<u8>> = split_requests(data)
        .into_iter()
        .map(<[u8]>::to_vec) // each in an allocation of exactly its size
        .collect();
    let starts_with_init = requests
        .first()
        .and_then(|r| InHeader::read_from_prefix(r).ok())
        .is_some_and(|(h, _)| h.opcode == Opcode::Init as u32);
    if !starts_with_init {
        requests.insert(0, default_init());
    }
    REPLY.with(|reply| {
        let mut reply = reply.borrow_mut();
        for mut request in requests {
            // A lock wait would block forever: no other thread releases it.
            if let Ok((h, _)) = InHeader::read_from_prefix(&request) {
                if h.opcode == Opcode::Setlkw as u32 {
                    request[4..8].copy_from_slice(&(Opcode::Setlk as u32).to_ne_bytes());
                }
            }
            handle_one(scratch, &server, &request, &mut reply);
            if server.is_destroyed() {
                break;
            }
        }
    });
    // Requests switched this thread to their callers' file system ids; a
    // request of the daemon's own (root's) switches it back for the
    // harness's own work.
    let _ = FileSystem::getattr(&*fs, &Context::default(), fuse_abi::ROOT_ID, None);
    server.finish();
    assert_eq!(fs.lookup_refs(), 0, "lookup references left after DESTROY");
    assert_eq!(fs.inode_count(), 1, "inodes left after DESTROY");
    assert_eq!(fs.handle_count(), 0, "handles left after DESTROY");
    MUTATING.iter().any(|&op| server.counters().get(op) > 0)
}

fn handle_one(scratch: &Scratch, server: &Server, request: &[u8], reply: &mut [u8]) {
    let header = InHeader::read_from_prefix(request).ok().map(|(h, _)| h);
    let mut tx = MemTx::new(request, reply);
    let outcome = server
        .handle(&mut tx)
        .expect("the in-memory transaction never fails");
    if std::env::var_os("FUSE_FUZZ_VERBOSE").is_some() {
        eprintln!(
            "opcode {:?} -> {outcome:?} {:?}",
            header.map(|h| h.opcode),
            tx.sent.map(|s| (s.1, s.2))
        );
    }
    match tx.sent {
        Some((unique, error, _)) => {
            let h = header.expect("a reply to a request without a header");
            assert_eq!(unique, h.unique, "the reply's unique is the request's");
            assert!(
                matches!(outcome, Outcome::Replied | Outcome::Destroyed),
                "{outcome:?} with a reply"
            );
            if error == 0 {
                check_reply(scratch, h.opcode, tx.body());
            }
        }
        None => assert!(
            !matches!(outcome, Outcome::Replied),
            "Replied without a reply"
        ),
    }
}

/// Checks that a successful reply names nothing outside the served tree.
fn check_reply(scratch: &Scratch, opcode: u32, body: &[u8]) {
    // (A read of the canary's content is caught by its access time, see
    // `Scratch::check_outside`; searching every reply body for it would
    // cost more than the rest of the harness.)
    // Other replies carrying bytes of the backing files: readlink, xattrs.
    if [Opcode::Readlink, Opcode::Getxattr, Opcode::Listxattr]
        .iter()
        .any(|&op| op as u32 == opcode)
    {
        scratch.check_body(body);
    }
    let Some(op) = Opcode::from_u32(opcode) else {
        return;
    };
    let ino_ok = |ino: u64, dirent: bool| {
        assert!(
            !scratch.is_forbidden_ino(ino, dirent),
            "ESCAPE: a {op:?} reply names inode {ino} outside the served tree"
        )
    };
    match op {
        Opcode::Lookup
        | Opcode::Mknod
        | Opcode::Mkdir
        | Opcode::Symlink
        | Opcode::Link
        | Opcode::Create
        | Opcode::Tmpfile => {
            if let Ok((e, _)) = fuse_abi::EntryOut::read_from_prefix(body) {
                ino_ok(e.attr.ino, false);
            }
        }
        Opcode::Getattr | Opcode::Setattr => {
            if let Ok((a, _)) = fuse_abi::AttrOut::read_from_prefix(body) {
                ino_ok(a.attr.ino, false);
            }
        }
        Opcode::Statx => {
            if let Ok((s, _)) = fuse_abi::StatxOut::read_from_prefix(body) {
                ino_ok(s.stat.ino, false);
            }
        }
        Opcode::Readdir => {
            let mut rest = body;
            while let Ok((d, _)) = fuse_abi::Dirent::read_from_prefix(rest) {
                let size = fuse_abi::dirent_size(d.namelen as usize);
                let name = rest.get(24..24 + d.namelen as usize).unwrap_or(&[]);
                ino_ok(d.ino, name == b"..");
                if size == 0 || size > rest.len() {
                    break;
                }
                rest = &rest[size..];
            }
        }
        Opcode::Readdirplus => {
            let mut rest = body;
            while let Ok((d, _)) = fuse_abi::Direntplus::read_from_prefix(rest) {
                let size = fuse_abi::direntplus_size(d.dirent.namelen as usize);
                let head = size_of::<fuse_abi::Direntplus>();
                let name = rest
                    .get(head..head + d.dirent.namelen as usize)
                    .unwrap_or(&[]);
                ino_ok(d.dirent.ino, name == b"..");
                if d.entry_out.nodeid != 0 {
                    ino_ok(d.entry_out.attr.ino, false);
                }
                if size == 0 || size > rest.len() {
                    break;
                }
                rest = &rest[size..];
            }
        }
        _ => {}
    }
}
