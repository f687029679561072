//! The backend driven as a guest's virtio-fs driver drives it: requests
//! laid out in guest memory as descriptor chains (headers, arguments,
//! data pages scattered over two memory regions), the queue kicked, the
//! replies read back from the used ring and the guest's buffers; served
//! by `PassthroughFs` over a temporary directory.

use fuse_abi::{
    AttrOut, EntryOut, InHeader, InitFlags, InitIn, InitOut, OpenOut, OutHeader, WriteOut,
};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::wire::encode_request;
use fuse_server::*;
use fuse_transport_virtio::{VirtioConfig, VirtioFsBackend, VirtioRuntime};
use std::sync::Arc;
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{
    Address, Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap,
};
use vmm_sys_util::epoll::EventSet;
use zerocopy::FromBytes;

const QUEUE_SIZE: u16 = 1024;
const PAGE: usize = 4096;
/// Two guest memory regions, adjacent in guest addresses but separate
/// host mappings: a buffer across the boundary is two host pieces.
const REGION: u64 = 32 << 20;

/// A guest's side of the device: its memory, the two queues (hiprio and
/// one request queue) and a bump allocator for buffers.
struct Guest {
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    backend: Arc<VirtioFsBackend>,
    vrings: Vec<VringRwLock>,
    /// Each queue's descriptor table, avail ring and used ring.
    rings: [[GuestAddress; 3]; 2],
    next_buf: u64,
    used_seen: [u16; 2],
    unique: u64,
    /// The descriptor index the next submission's chains start at (a
    /// chain still in flight keeps its descriptors).
    desc_base: u16,
}

/// A request laid out in guest memory, not sent yet.
struct Request {
    unique: u64,
    readable: Vec<Buf>,
    writable: Vec<Buf>,
    /// The reply room after the out header.
    out: Vec<Buf>,
}

/// One buffer of a chain: guest address and length.
#[derive(Clone, Copy)]
struct Buf {
    addr: GuestAddress,
    len: usize,
}

impl Guest {
    fn new(root: &std::path::Path) -> Self {
        Self::with_runtime(root, None)
    }

    /// A guest whose device serves with sync handlers (`None`) or as
    /// tasks on a runtime of that type, `PassthroughFs` through its
    /// `AsyncFileSystem` then.
    fn with_runtime(root: &std::path::Path, runtime: Option<VirtioRuntime>) -> Self {
        let mem = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), REGION as usize),
            (GuestAddress(REGION), REGION as usize),
        ])
        .unwrap();
        let mem = GuestMemoryAtomic::new(mem);
        let root = root.to_owned();
        let factory = Arc::new(move || {
            let fs = Arc::new(
                PassthroughFs::new(&root, PassthroughConfig::default())
                    .map_err(std::io::Error::other)?,
            );
            Ok(Arc::new(match runtime {
                None => Server::new(fs),
                Some(_) => Server::new_async(fs),
            }))
        });
        let config = VirtioConfig::default().runtime(runtime);
        let backend = Arc::new(VirtioFsBackend::new(config, factory).unwrap());
        backend.update_memory(mem.clone()).unwrap();
        let queue_at = [GuestAddress(0), GuestAddress(0x10_0000)];
        let mut vrings = Vec::new();
        let mut rings = [[GuestAddress(0); 3]; 2];
        for (q, at) in queue_at.into_iter().enumerate() {
            let m = mem.memory();
            let mock = MockSplitQueue::create(&*m, at, QUEUE_SIZE);
            let vring = VringRwLock::new(mem.clone(), QUEUE_SIZE).unwrap();
            rings[q] = [mock.desc_table_addr(), mock.avail_addr(), mock.used_addr()];
            vring.set_queue_size(QUEUE_SIZE);
            vring
                .set_queue_info(
                    mock.desc_table_addr().0,
                    mock.avail_addr().0,
                    mock.used_addr().0,
                )
                .unwrap();
            vring.set_queue_ready(true);
            vring.set_enabled(true);
            vrings.push(vring);
        }
        Self {
            mem,
            backend,
            vrings,
            rings,
            next_buf: 0x20_0000,
            used_seen: [0; 2],
            unique: 0,
            desc_base: 0,
        }
    }

    /// A buffer of `len` bytes at `addr` or the next free address.
    fn alloc_at(&mut self, addr: Option<u64>, len: usize) -> Buf {
        let addr = addr.unwrap_or_else(|| {
            let a = self.next_buf;
            self.next_buf += (len as u64).next_multiple_of(PAGE as u64) + PAGE as u64;
            a
        });
        Buf {
            addr: GuestAddress(addr),
            len,
        }
    }

    fn alloc(&mut self, len: usize) -> Buf {
        self.alloc_at(None, len)
    }

    fn write(&self, buf: Buf, data: &[u8]) {
        assert!(data.len() <= buf.len);
        self.mem.memory().write_slice(data, buf.addr).unwrap();
    }

    fn read(&self, buf: Buf) -> Vec<u8> {
        let mut v = vec![0; buf.len];
        self.mem.memory().read_slice(&mut v, buf.addr).unwrap();
        v
    }

    /// Puts the chain `readable` + `writable` on queue `q`, kicks it, and
    /// returns the used length the backend reported.
    fn submit(&mut self, q: usize, readable: &[Buf], writable: &[Buf]) -> u32 {
        let mut used = self.submit_many(q, &[(readable.to_vec(), writable.to_vec())]);
        self.wait_used(q, &mut used, 1);
        assert_eq!(used.len(), 1, "one chain given back");
        assert_eq!(used[0].0, 0, "the chain's head");
        used[0].1
    }

    /// Puts the chains on queue `q` at once (their descriptors one after
    /// the other from `desc_base`, their heads in the next avail slots),
    /// kicks it once, and returns the used ring's new entries so far:
    /// (head, used length).
    fn submit_many(&mut self, q: usize, chains: &[(Vec<Buf>, Vec<Buf>)]) -> Vec<(u32, u32)> {
        let [desc, avail, _] = self.rings[q];
        let m = self.mem.memory();
        let mut at = self.desc_base;
        let mut avail_idx: u16 = m.read_obj(avail.unchecked_add(2)).unwrap();
        for (readable, writable) in chains {
            let head = at;
            let n = (readable.len() + writable.len()) as u16;
            let bufs = readable
                .iter()
                .map(|b| (b, 0))
                .chain(writable.iter().map(|b| (b, VRING_DESC_F_WRITE)));
            for (i, (b, flags)) in bufs.enumerate() {
                let i = i as u16;
                let next = if i + 1 < n { VRING_DESC_F_NEXT } else { 0 };
                let d = RawDescriptor::from(Descriptor::new(
                    b.addr.0,
                    b.len as u32,
                    (flags | next) as u16,
                    head + i + 1,
                ));
                m.write_obj(d, desc.unchecked_add(16 * (head + i) as u64))
                    .unwrap();
            }
            at += n;
            let slot = avail_idx % QUEUE_SIZE;
            m.write_obj(head, avail.unchecked_add(4 + 2 * slot as u64))
                .unwrap();
            avail_idx = avail_idx.wrapping_add(1);
        }
        m.write_obj(avail_idx, avail.unchecked_add(2)).unwrap();
        drop(m);
        self.backend
            .handle_event(0, EventSet::IN, &self.vrings[q..q + 1], q)
            .unwrap();
        self.new_used(q)
    }

    /// Adds the used entries of queue `q` that come until `used` has `n`
    /// (at most a minute): a request that may wait (SETLKW) comes back
    /// from a thread of its own, maybe after the kick was handled.
    fn wait_used(&mut self, q: usize, used: &mut Vec<(u32, u32)>, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while used.len() < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
            used.extend(self.new_used(q));
        }
    }

    /// The used ring's entries of queue `q` not seen yet: (head, used
    /// length).
    fn new_used(&mut self, q: usize) -> Vec<(u32, u32)> {
        let used = self.rings[q][2];
        let m = self.mem.memory();
        let used_idx: u16 = m.read_obj(used.unchecked_add(2)).unwrap();
        let mut out = Vec::new();
        while self.used_seen[q] != used_idx {
            let slot = (self.used_seen[q] % QUEUE_SIZE) as u64;
            let id: u32 = m.read_obj(used.unchecked_add(4 + 8 * slot)).unwrap();
            let len: u32 = m.read_obj(used.unchecked_add(8 + 8 * slot)).unwrap();
            out.push((id, len));
            self.used_seen[q] = self.used_seen[q].wrapping_add(1);
        }
        out
    }

    /// Lays out `op` to node `nodeid` for the request queue, split as the
    /// guest's driver splits it (header, arguments, then `data` as its own
    /// buffers), with a reply room of a header buffer and `out`.
    fn request(&mut self, nodeid: u64, op: &Operation<'_>, data: &[Buf], out: &[Buf]) -> Request {
        self.unique += 2;
        let header = InHeader {
            unique: self.unique,
            nodeid,
            ..InHeader::default()
        };
        let mut bytes = encode_request(header, op, DecodeOptions::default());
        if let Operation::Write { args, .. } = op {
            // encode_request says the size of the data it was given (none):
            // the WRITE says the size of the data in `data`.
            let at = size_of::<InHeader>() + std::mem::offset_of!(fuse_abi::WriteIn, size);
            bytes[at..at + 4].copy_from_slice(&args.size.to_ne_bytes());
        }
        let data_len: usize = data.iter().map(|b| b.len).sum();
        // encode_request counts no data we keep apart: the header's len
        // says the whole request.
        let total = (bytes.len() + data_len) as u32;
        bytes[..4].copy_from_slice(&total.to_ne_bytes());
        let h = self.alloc(size_of::<InHeader>());
        self.write(h, &bytes[..size_of::<InHeader>()]);
        let mut readable = vec![h];
        if bytes.len() > size_of::<InHeader>() {
            let args = self.alloc(bytes.len() - size_of::<InHeader>());
            self.write(args, &bytes[size_of::<InHeader>()..]);
            readable.push(args);
        }
        readable.extend_from_slice(data);
        let oh = self.alloc(size_of::<OutHeader>());
        let mut writable = vec![oh];
        writable.extend_from_slice(out);
        Request {
            unique: self.unique,
            readable,
            writable,
            out: out.to_vec(),
        }
    }

    /// Puts `r` alone on the request queue and kicks it, without waiting:
    /// the used ring's new entries so far.
    fn send(&mut self, r: &Request) -> Vec<(u32, u32)> {
        self.submit_many(1, &[(r.readable.clone(), r.writable.clone())])
    }

    /// The out header the backend wrote for `r`.
    fn reply_header(&self, r: &Request) -> OutHeader {
        OutHeader::read_from_bytes(&self.read(r.writable[0])).unwrap()
    }

    /// Sends the requests at once on the request queue; their out headers
    /// and reply bodies, in the order given.
    fn call_many(&mut self, reqs: &[Request]) -> Vec<(OutHeader, Vec<u8>)> {
        let chains: Vec<_> = reqs
            .iter()
            .map(|r| (r.readable.clone(), r.writable.clone()))
            .collect();
        let mut used = self.submit_many(1, &chains);
        self.wait_used(1, &mut used, reqs.len());
        assert_eq!(used.len(), reqs.len(), "every chain given back");
        reqs.iter()
            .map(|r| {
                let out_header = self.reply_header(r);
                assert_eq!(out_header.unique, r.unique);
                assert!(
                    used.iter().any(|&(_, len)| len == out_header.len),
                    "used length is the reply's"
                );
                let mut body: Vec<u8> = r.out.iter().flat_map(|&b| self.read(b)).collect();
                body.truncate(out_header.len as usize - size_of::<OutHeader>());
                (out_header, body)
            })
            .collect()
    }

    /// Sends `op` to node `nodeid` on the request queue (see
    /// [`Guest::request`]); the out header and the reply body.
    fn call(
        &mut self,
        nodeid: u64,
        op: &Operation<'_>,
        data: &[Buf],
        out: &[Buf],
    ) -> (OutHeader, Vec<u8>) {
        let req = self.request(nodeid, op, data, out);
        self.call_many(&[req]).remove(0)
    }

    fn init(&mut self) -> InitOut {
        let (op, out) = self.init_op();
        let (h, body) = self.call(0, &op, &[], &[out]);
        assert_eq!(h.error, 0);
        InitOut::read_from_prefix(&body).unwrap().0
    }

    /// CREATE of the regular file `name` (mode 0644 less `umask`, opened
    /// for reading and writing) in the root directory, which must succeed.
    fn create(&mut self, name: &[u8], umask: u32) -> (EntryOut, OpenOut) {
        let name = cstr(name);
        let create = Operation::Create {
            name: &name,
            args: CreateArgs {
                flags: libc::O_RDWR as u32,
                mode: libc::S_IFREG | 0o644,
                umask,
                ..CreateArgs::default()
            },
        };
        let out = self.alloc(size_of::<EntryOut>() + size_of::<OpenOut>());
        let (h, body) = self.call(ROOT_ID, &create, &[], &[out]);
        assert_eq!(h.error, 0, "CREATE");
        let (entry, rest) = EntryOut::read_from_prefix(&body).unwrap();
        (entry, OpenOut::read_from_bytes(rest).unwrap())
    }

    /// An INIT as the guest's driver sends it, and the room for its reply.
    fn init_op(&mut self) -> (Operation<'static>, Buf) {
        let flags = InitFlags::INIT_EXT
            | InitFlags::MAX_PAGES
            | InitFlags::BIG_WRITES
            | InitFlags::ASYNC_READ
            | InitFlags::PARALLEL_DIROPS;
        let init = InitIn {
            major: 7,
            minor: 46,
            max_readahead: 1 << 20,
            flags: flags.low(),
            flags2: flags.high(),
            unused: [0; 11],
        };
        let out = self.alloc(size_of::<InitOut>());
        (Operation::Init(init), out)
    }

    /// `count` pages for data, every other page (so no two are adjacent)
    /// and one across the boundary between the memory regions.
    fn scattered_pages(&mut self, count: usize) -> Vec<Buf> {
        let mut pages = vec![self.alloc_at(Some(REGION - PAGE as u64 / 2), PAGE)];
        for _ in 1..count {
            let p = self.alloc(PAGE);
            self.next_buf += PAGE as u64;
            pages.push(p);
        }
        pages
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn cstr(s: &[u8]) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

/// A file `lk` in a new directory (kept in `dir`), looked up and opened
/// read-write twice (handles A and B, for two lock owners) by a guest
/// served with `runtime`.
struct LockFile {
    g: Guest,
    dir: tempfile::TempDir,
    node: u64,
    fh_a: u64,
    fh_b: u64,
}

fn lock_file(runtime: Option<VirtioRuntime>) -> LockFile {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lk"), b"locked").unwrap();
    let mut g = Guest::with_runtime(dir.path(), runtime);
    g.init();
    let name = cstr(b"lk");
    let out = g.alloc(size_of::<EntryOut>());
    let (h, body) = g.call(ROOT_ID, &Operation::Lookup { name: &name }, &[], &[out]);
    assert_eq!(h.error, 0);
    let node = EntryOut::read_from_bytes(&body).unwrap().nodeid;
    let mut open = || {
        let out = g.alloc(size_of::<OpenOut>());
        let op = Operation::Open(OpenArgs {
            flags: libc::O_RDWR as u32,
            ..OpenArgs::default()
        });
        let (h, body) = g.call(node, &op, &[], &[out]);
        assert_eq!(h.error, 0, "OPEN");
        OpenOut::read_from_bytes(&body).unwrap().fh
    };
    let (fh_a, fh_b) = (open(), open());
    LockFile {
        g,
        dir,
        node,
        fh_a,
        fh_b,
    }
}

/// Owner 1 (handle `fh_a`) takes a write lock on the whole file, then
/// owner 2's SETLKW (handle `fh_b`) is sent alone: nothing comes back
/// while the lock is held. The SETLKW's request.
fn a_holds_b_waits(g: &mut Guest, node: u64, fh_a: u64, fh_b: u64) -> Request {
    let (h, _) = g.call(node, &setlk(fh_a, 1, libc::F_WRLCK, false), &[], &[]);
    assert_eq!(h.error, 0, "A takes the lock");
    let wait = g.request(node, &setlk(fh_b, 2, libc::F_WRLCK, true), &[], &[]);
    let used = g.send(&wait);
    assert!(
        used.is_empty(),
        "the SETLKW was answered while the lock was held"
    );
    wait
}

/// SETLK (SETLKW with `sleep`) of a POSIX lock of `r#type` over the
/// whole file open as `fh`, for `owner` (its process id the owner's too).
fn setlk(fh: u64, owner: u64, r#type: i32, sleep: bool) -> Operation<'static> {
    Operation::Setlk {
        args: LockArgs {
            fh,
            owner,
            lock: FileLock {
                start: 0,
                end: i64::MAX as u64,
                r#type: r#type as u32,
                pid: owner as u32,
            },
            flock: false,
        },
        sleep,
    }
}

#[test]
fn init_lookup_getattr_write_read_forget_through_chains() {
    serve_a_session(None);
}

#[test]
fn the_same_as_tasks_on_a_tokio_runtime() {
    serve_a_session(Some(VirtioRuntime::Tokio));
}

#[test]
fn the_same_as_tasks_on_an_io_uring_runtime() {
    serve_a_session(Some(VirtioRuntime::IoUring));
}

fn serve_a_session(runtime: Option<VirtioRuntime>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello"), b"hello, guest\n").unwrap();
    let mut g = Guest::with_runtime(dir.path(), runtime);

    let init = g.init();
    assert_eq!(init.major, 7);
    assert!(init.max_write >= 1 << 20, "max_write {}", init.max_write);

    let name = cstr(b"hello");
    let out = g.alloc(size_of::<EntryOut>());
    let (h, body) = g.call(ROOT_ID, &Operation::Lookup { name: &name }, &[], &[out]);
    assert_eq!(h.error, 0);
    let entry = EntryOut::read_from_bytes(&body).unwrap();
    assert_eq!(entry.attr.size, 13);
    assert_ne!(entry.nodeid, 0);

    let out = g.alloc(size_of::<AttrOut>());
    let (h, body) = g.call(entry.nodeid, &Operation::Getattr { fh: None }, &[], &[out]);
    assert_eq!(h.error, 0);
    assert_eq!(AttrOut::read_from_bytes(&body).unwrap().attr.size, 13);

    let (entry, open) = g.create(b"big", 0o022);

    // A 1 MiB WRITE in 256 scattered guest pages, one of them across the
    // two memory regions.
    let data = pattern(1 << 20, 7);
    let pages = g.scattered_pages(256);
    for (page, chunk) in pages.iter().zip(data.chunks(PAGE)) {
        g.write(*page, chunk);
    }
    let write = Operation::Write {
        args: WriteArgs {
            fh: open.fh,
            offset: 0,
            size: data.len() as u32,
            ..WriteArgs::default()
        },
        data: &[],
    };
    let out = g.alloc(size_of::<WriteOut>());
    let (h, body) = g.call(entry.nodeid, &write, &pages, &[out]);
    assert_eq!(h.error, 0, "WRITE");
    assert_eq!(WriteOut::read_from_bytes(&body).unwrap().size, 1 << 20);
    assert!(
        std::fs::read(dir.path().join("big")).unwrap() == data,
        "the backing file holds the guest's pages in order"
    );
    // One pwritev straight from the guest's 257 pieces (256 pages, one
    // split across the regions), nothing through a buffer of ours.
    assert_eq!(
        g.backend.data_counters().get(true),
        [1, 1 << 20, 1, 0],
        "[requests, bytes, pwritev, bounced]"
    );

    // READ it back into other scattered pages, from offset 4000 (so the
    // data doesn't start on a page of the file).
    let pages = g.scattered_pages(256);
    let read = Operation::Read(ReadArgs {
        fh: open.fh,
        offset: 4000,
        size: 1 << 20,
        ..ReadArgs::default()
    });
    let (h, body) = g.call(entry.nodeid, &read, &[], &pages);
    assert_eq!(h.error, 0, "READ");
    assert_eq!(body.len(), (1 << 20) - 4000, "short at end of file");
    assert!(
        body == data[4000..],
        "the guest's pages hold the file's bytes"
    );

    // FORGET on the hiprio queue: no reply, nothing written back.
    let mut bytes = encode_request(
        InHeader {
            unique: 1000,
            nodeid: entry.nodeid,
            ..InHeader::default()
        },
        &Operation::Forget { nlookup: 1 },
        DecodeOptions::default(),
    );
    bytes.truncate(bytes.len());
    let req = g.alloc(bytes.len());
    g.write(req, &bytes);
    assert_eq!(g.submit(0, &[req], &[]), 0);
    assert_eq!(
        g.backend.server().counters().get(fuse_abi::Opcode::Forget),
        1
    );
}

#[test]
fn bad_chains_get_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = Guest::new(dir.path());
    g.init();

    // Too short for a header: given back with nothing written.
    let req = g.alloc(10);
    let reply = g.alloc(64);
    assert_eq!(g.submit(1, &[req], &[reply]), 0);

    // A buffer outside guest memory: given back with nothing written.
    let outside = Buf {
        addr: GuestAddress(2 * REGION + PAGE as u64),
        len: 64,
    };
    assert_eq!(g.submit(1, &[outside], &[reply]), 0);

    // A WRITE that says more data than its chain carries: EINVAL.
    let (entry, open) = g.create(b"f", 0);
    let page = g.alloc(PAGE);
    let write = Operation::Write {
        args: WriteArgs {
            fh: open.fh,
            size: 2 * PAGE as u32,
            ..WriteArgs::default()
        },
        data: &[],
    };
    let out = g.alloc(size_of::<WriteOut>());
    let (h, _) = g.call(entry.nodeid, &write, &[page], &[out]);
    assert_eq!(h.error, -libc::EINVAL);
    assert_eq!(std::fs::metadata(dir.path().join("f")).unwrap().len(), 0);

    // A reply room too small for the reply: EIO in the header.
    let name = cstr(b"f");
    let out = g.alloc(8);
    let (h, _) = g.call(ROOT_ID, &Operation::Lookup { name: &name }, &[], &[out]);
    assert_eq!(h.error, -libc::EIO);

    // A readable buffer after a writable one: dropped.
    let hdr = g.alloc(size_of::<InHeader>());
    assert_eq!(g.submit(1, &[], &[reply, hdr]), 0);
}

#[test]
fn a_second_init_starts_a_new_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = Guest::new(dir.path());
    g.init();
    let first = g.backend.server();
    // The guest rebooted: its driver sends INIT again and gets an answer
    // from a fresh server (the old one ended: its file system destroyed).
    let again = g.init();
    assert_eq!(again.major, 7);
    assert!(first.is_destroyed());
    assert!(!Arc::ptr_eq(&first, &g.backend.server()));
    let name = cstr(b"nothing");
    let out = g.alloc(size_of::<EntryOut>());
    let (h, _) = g.call(ROOT_ID, &Operation::Lookup { name: &name }, &[], &[out]);
    assert_eq!(h.error, -libc::ENOENT);
}

#[test]
fn a_waiting_lock_doesnt_hold_up_the_unlock_popped_with_it() {
    // Popped together: B's SETLKW waits for A's lock on a thread of its
    // own while A's unlock, the next chain, is served; both are answered.
    // (Served on the queue's thread, or awaited there before the next
    // chain, the SETLKW would hold the queue and the unlock behind it
    // would never come.)
    let LockFile {
        mut g,
        dir: _dir,
        node,
        fh_a,
        fh_b,
    } = lock_file(Some(VirtioRuntime::Tokio));
    let take = setlk(fh_a, 1, libc::F_WRLCK, false);
    let (h, _) = g.call(node, &take, &[], &[]);
    assert_eq!(h.error, 0, "A takes the lock");
    let (h, _) = g.call(node, &setlk(fh_b, 2, libc::F_WRLCK, false), &[], &[]);
    assert_eq!(h.error, -libc::EAGAIN, "B can't have it now");

    let wait = g.request(node, &setlk(fh_b, 2, libc::F_WRLCK, true), &[], &[]);
    let unlock = g.request(node, &setlk(fh_a, 1, libc::F_UNLCK, false), &[], &[]);
    let replies = g.call_many(&[wait, unlock]);
    assert_eq!(replies[0].0.error, 0, "B's SETLKW got the lock");
    assert_eq!(replies[1].0.error, 0, "A's unlock");
    let (h, _) = g.call(node, &take, &[], &[]);
    assert_eq!(h.error, -libc::EAGAIN, "now B holds it");
}

/// B's SETLKW waits for A's lock, and A's unlock comes later, in a chain
/// of its own (as from a guest: the waiter's request is sent, then the
/// holder lets go): the SETLKW must not hold the queue, or the unlock is
/// never served and both wait forever.
fn a_waiting_lock_doesnt_hold_the_queue(runtime: Option<VirtioRuntime>) {
    let LockFile {
        mut g,
        dir: _dir,
        node,
        fh_a,
        fh_b,
    } = lock_file(runtime);
    let wait = a_holds_b_waits(&mut g, node, fh_a, fh_b);
    // A's unlock, in chains of their own (the SETLKW's descriptors are
    // still the device's).
    g.desc_base = 100;
    let unlock = g.request(node, &setlk(fh_a, 1, libc::F_UNLCK, false), &[], &[]);
    let mut used = g.send(&unlock);
    assert!(!used.is_empty(), "the unlock wasn't served");
    g.wait_used(1, &mut used, 2);
    assert_eq!(used.len(), 2, "the SETLKW never came back after the unlock");
    for (r, what) in [(&wait, "B's SETLKW"), (&unlock, "A's unlock")] {
        let h = g.reply_header(r);
        assert_eq!((h.unique, h.error), (r.unique, 0), "{what}");
    }
    g.desc_base = 0;
    let (h, _) = g.call(node, &setlk(fh_a, 1, libc::F_WRLCK, false), &[], &[]);
    assert_eq!(h.error, -libc::EAGAIN, "now B holds it");
}

/// A new session (the guest rebooted: INIT again) ends the old one's lock
/// waits: the SETLKW comes back with an error instead of waiting for a
/// holder that is gone.
#[test]
fn a_new_session_ends_the_lock_waits_of_the_old() {
    let LockFile {
        mut g,
        dir,
        node,
        fh_a,
        fh_b,
    } = lock_file(None);
    let wait = a_holds_b_waits(&mut g, node, fh_a, fh_b);
    // Its thread waits on the backing file: /proc/locks lists the wait.
    let ino =
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir.path().join("lk")).unwrap());
    // (A reading may miss the line when another process's lock goes
    // meanwhile: the kernel resumes the list by position each page. Only
    // a line seen counts, so one sighting is enough.)
    let waiting = || {
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .any(|l| l.contains("->") && l.contains(&format!(":{ino} ")))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = waiting();
    while !seen && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        seen = waiting();
    }
    assert!(seen, "the SETLKW isn't waiting on the backing file");
    g.desc_base = 100;
    let old = g.backend.server();
    let (op, out) = g.init_op();
    let init = g.request(0, &op, &[], &[out]);
    let mut used = g.send(&init);
    assert!(old.is_destroyed());
    g.wait_used(1, &mut used, 2);
    assert_eq!(used.len(), 2, "the old session's SETLKW never came back");
    let h = g.reply_header(&init);
    assert_eq!((h.unique, h.error), (init.unique, 0), "INIT");
    let h = g.reply_header(&wait);
    assert_eq!((h.unique, h.error), (wait.unique, -libc::EINTR), "SETLKW");
}

#[test]
fn a_waiting_lock_doesnt_hold_the_queue_sync() {
    a_waiting_lock_doesnt_hold_the_queue(None);
}

#[test]
fn a_waiting_lock_doesnt_hold_the_queue_tokio() {
    a_waiting_lock_doesnt_hold_the_queue(Some(VirtioRuntime::Tokio));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 150, ..Default::default() })]

    /// Arbitrary requests in arbitrarily split chains, after INIT: never a
    /// panic, every chain given back, and a reply (if any) fits the room
    /// the guest gave and echoes the request's unique.
    #[test]
    fn arbitrary_chains_get_errors_not_panics(
        opcode in proptest::prop_oneof![0u32..60, proptest::prelude::Just(15u32), proptest::prelude::Just(16u32), proptest::prelude::Just(26u32)],
        nodeid in proptest::prop_oneof![proptest::prelude::Just(1u64), 0u64..5],
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        true_len in proptest::prelude::any::<bool>(),
        cuts in proptest::collection::vec(0usize..400, 0..4),
        room in proptest::collection::vec(0usize..6000, 0..4),
        outside in proptest::prelude::any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"data").unwrap();
        let mut g = Guest::new(dir.path());
        g.init();
        let len = if true_len { 40 + body.len() as u32 } else { body.len() as u32 ^ 0x55 };
        let header = InHeader { len, opcode, unique: 4242, nodeid, ..InHeader::default() };
        let mut bytes = zerocopy::IntoBytes::as_bytes(&header).to_vec();
        bytes.extend_from_slice(&body);
        // The request cut into buffers where `cuts` say.
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < bytes.len()).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut readable = Vec::new();
        let mut from = 0;
        for to in cuts.into_iter().chain([bytes.len()]) {
            if to > from {
                let b = g.alloc(to - from);
                g.write(b, &bytes[from..to]);
                readable.push(b);
                from = to;
            }
        }
        let mut writable: Vec<Buf> = room.iter().filter(|&&n| n > 0).map(|&n| g.alloc(n)).collect();
        if outside {
            writable.push(Buf { addr: GuestAddress(4 * REGION), len: 64 });
        }
        let total: usize = writable.iter().map(|b| b.len).sum();
        let used = g.submit(1, &readable, &writable) as usize;
        proptest::prop_assert!(used <= total, "used {} of {} bytes of room", used, total);
        if used > 0 {
            proptest::prop_assert!(used >= size_of::<OutHeader>());
            // The header may span the first buffers.
            let room: Vec<u8> = writable.iter().take(3).flat_map(|&b| g.read(b)).collect();
            let h = OutHeader::read_from_prefix(&room).unwrap().0;
            proptest::prop_assert_eq!(h.unique, 4242);
            proptest::prop_assert_eq!(h.len as usize, used);
            proptest::prop_assert!(h.error <= 0 && h.error > -512);
        }
    }
}
