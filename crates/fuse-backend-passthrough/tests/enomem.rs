//! Allocation failure is an ENOMEM reply, not an abort: a test-only global
//! allocator fails, on the armed thread, every allocation above a
//! threshold; requests whose handling needs a buffer (GETXATTR, LISTXATTR,
//! READLINK, READDIR, READDIRPLUS) are answered with ENOMEM, and the same
//! requests work again once memory is back. Also the regression test of
//! the dispatch fuzzer's first finding: a GETXATTR or LISTXATTR asking
//! for up to 4 GiB made the daemon allocate that much.

use fuse_abi::{InHeader, InitFlags, InitIn};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::wire::encode_request;
use fuse_server::{DecodeOptions, Operation, RawRequest, ReadArgs, Server, Transaction};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io;
use std::sync::Arc;

/// Fails allocations larger than `LIMIT` on threads that armed it, and
/// records the largest allocation they asked for.
struct FailingAlloc;

// All per thread: tests run in parallel threads, and one test lifting its
// limit must not lift another's.
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn armed() -> bool {
    ARMED.try_with(Cell::get).unwrap_or(false)
}

/// Records a request for `size` bytes on an armed thread; whether it must fail.
fn over_limit(size: usize) -> bool {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    size > LIMIT.try_with(Cell::get).unwrap_or(usize::MAX)
}

// SAFETY: defers to the system allocator, or returns null (a failure).
unsafe impl GlobalAlloc for FailingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if armed() && over_limit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if armed() && over_limit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if armed() && over_limit(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: FailingAlloc = FailingAlloc;

/// Runs `f` with allocations above `limit` failing on this thread;
/// returns its result and the largest allocation it asked for.
fn with_limit<T>(limit: usize, f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    LIMIT.with(|l| l.set(limit));
    ARMED.with(|a| a.set(true));
    let r = f();
    ARMED.with(|a| a.set(false));
    LIMIT.with(|l| l.set(usize::MAX));
    (r, LARGEST.with(Cell::get))
}

struct Tx {
    request: Vec<u8>,
    reply: Vec<u8>,
    sent: Option<(i32, usize)>,
}

impl Transaction for Tx {
    fn request(&self) -> RawRequest<'_> {
        RawRequest::contiguous(&self.request)
    }
    fn reply_buffer(&mut self) -> &mut [u8] {
        &mut self.reply
    }
    fn send_reply(&mut self, _unique: u64, error: i32, body_len: usize) -> io::Result<()> {
        self.sent = Some((error, body_len));
        Ok(())
    }
}

fn send(server: &Server, nodeid: u64, op: &Operation<'_>) -> (i32, Vec<u8>) {
    send_limited(server, nodeid, op, usize::MAX).0
}

/// Sends `op` with allocations above `limit` failing while the server
/// handles it; returns the reply and the largest allocation asked for.
fn send_limited(
    server: &Server,
    nodeid: u64,
    op: &Operation<'_>,
    limit: usize,
) -> ((i32, Vec<u8>), usize) {
    let h = InHeader {
        unique: 9,
        nodeid,
        ..InHeader::default()
    };
    let opts = DecodeOptions {
        minor: 46,
        setxattr_ext: true,
    };
    let mut tx = Tx {
        request: encode_request(h, op, opts),
        reply: vec![0; 1 << 20],
        sent: None,
    };
    let (r, largest) = with_limit(limit, || server.handle(&mut tx));
    r.expect("in-memory transaction");
    let (error, len) = tx.sent.expect("a reply");
    ((error, tx.reply[..len].to_vec()), largest)
}

fn setup() -> (tempfile::TempDir, Server, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("file"), b"data").unwrap();
    std::os::unix::fs::symlink("file", src.join("link")).unwrap();
    for i in 0..50 {
        std::fs::write(src.join(format!("entry-{i}")), b"").unwrap();
    }
    let fs = Arc::new(PassthroughFs::new(src, PassthroughConfig::default()).unwrap());
    let server = Server::new(fs);
    let init = InitIn {
        major: 7,
        minor: 46,
        max_readahead: 65536,
        flags: (InitFlags::INIT_EXT
            | InitFlags::MAX_PAGES
            | InitFlags::DO_READDIRPLUS
            | InitFlags::SETXATTR_EXT)
            .low(),
        flags2: 0,
        unused: [0; 11],
    };
    let (e, _) = send(&server, 0, &Operation::Init(init));
    assert_eq!(e, 0);
    let lookup = |name: &std::ffi::CStr| {
        let (e, body) = send(&server, 1, &Operation::Lookup { name });
        assert_eq!(e, 0);
        u64::from_ne_bytes(body[..8].try_into().unwrap())
    };
    let file = lookup(c"file");
    let link = lookup(c"link");
    (dir, server, file, link)
}

fn opendir(server: &Server) -> u64 {
    let (e, body) = send(server, 1, &Operation::Opendir(Default::default()));
    assert_eq!(e, 0);
    u64::from_ne_bytes(body[..8].try_into().unwrap())
}

#[test]
fn requests_needing_memory_get_enomem_and_work_again_after() {
    let (_dir, server, file, link) = setup();
    let fh = opendir(&server);
    let listing = |plus: bool| {
        let args = ReadArgs {
            fh,
            offset: 0,
            size: 4096,
            ..ReadArgs::default()
        };
        if plus {
            Operation::Readdirplus(args)
        } else {
            Operation::Readdir(args)
        }
    };
    let cases: Vec<(&str, u64, Operation<'_>)> = vec![
        (
            "getxattr",
            file,
            Operation::Getxattr {
                name: c"user.x",
                size: 60000,
            },
        ),
        ("listxattr", file, Operation::Listxattr { size: 60000 }),
        ("readlink", link, Operation::Readlink),
        ("readdir", 1, listing(false)),
        ("readdirplus", 1, listing(true)),
    ];
    for (what, nodeid, op) in &cases {
        // Small bookkeeping allocations succeed; the buffers (a 4097-byte
        // link target, a 32 KiB directory buffer, 60000-byte xattr
        // buffers) fail.
        let ((e, _), _) = send_limited(&server, *nodeid, op, 4096);
        assert_eq!(e, -libc::ENOMEM, "{what} without memory");
    }
    // Memory is back: the same requests succeed (or fail for their own
    // reasons: the file has no such xattr).
    for (what, nodeid, op) in &cases {
        let (e, _) = send(&server, *nodeid, op);
        assert!(
            e == 0 || (*what == "getxattr" && e == -libc::ENODATA),
            "{what} after: {e}"
        );
    }
}

#[test]
fn huge_xattr_sizes_allocate_no_more_than_a_reply_can_carry() {
    let (_dir, server, file, _) = setup();
    for size in [u32::MAX, u32::MAX - 1, 1 << 30, 70000] {
        let ((e, _), largest) =
            send_limited(&server, file, &Operation::Listxattr { size }, usize::MAX);
        assert_eq!(e, 0, "listxattr size {size}");
        assert!(
            largest <= 128 << 10,
            "listxattr of size {size} allocated {largest} bytes"
        );
        let ((e, _), largest) = send_limited(
            &server,
            file,
            &Operation::Getxattr {
                name: c"user.none",
                size,
            },
            usize::MAX,
        );
        assert_eq!(e, -libc::ENODATA, "getxattr size {size}");
        assert!(
            largest <= 128 << 10,
            "getxattr of size {size} allocated {largest} bytes"
        );
    }
}

#[test]
fn aligned_buffers_fail_with_enomem() {
    let e = fuse_server::AlignedBuf::new(usize::MAX / 2).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    let e = fuse_server::AlignedBuf::new(usize::MAX - 4000).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
}
