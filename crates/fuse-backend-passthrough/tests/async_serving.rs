//! The mount suite's core through the kernel, with `PassthroughFs` served
//! through its `AsyncFileSystem` by a `FuseDevTask`, on the tokio and the
//! io_uring runtime, each with the thread pool off and on: file data,
//! metadata, readdir, rename, xattrs, `O_DIRECT`, mmap, concurrent
//! writers, lock waits; then the same over FUSE over io_uring in async mode
//! on the io_uring runtime, with two rings per queue and with one. Needs
//! root (CI runs as root) and, for the io_uring modes, `enable_uring`; fails with the
//! reason otherwise.

mod async_support;

use async_io::RuntimeType;
use async_support::*;
use fuse_abi::Opcode;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// One test per mode: `tokio::NAME`, `tokio_pool::NAME`, `uring::NAME`,
/// `uring_pool::NAME`, `tokio_2threads::NAME`, `uring_pool_2threads::NAME`
/// (over `/dev/fuse`), `uring_transport::NAME` and `uring_one_ring::NAME`
/// (FUSE over io_uring on the io_uring runtime, two rings and one ring per
/// queue), each calling `NAME(mode)`.
macro_rules! per_mode {
    ($($name:ident),* $(,)?) => {
        per_mode!(@modules [$($name),*]
            tokio 0, tokio_pool 1, uring 2, uring_pool 3, tokio_2threads 4,
            uring_pool_2threads 5, uring_transport 6, uring_one_ring 7);
    };
    // The names travel as one token tree: a module's tests repeat them
    // inside the repetition over the modules.
    (@modules $names:tt $($module:ident $mode:literal),*) => {
        $(per_mode!(@module $module $mode $names);)*
    };
    (@module $module:ident $mode:literal [$($name:ident),*]) => {
        mod $module {
            $(#[test] fn $name() { super::$name(super::Mode::ALL[$mode]) })*
        }
    };
}

per_mode!(
    file_data,
    metadata_and_setattr,
    readdir_lists_every_entry_once,
    rename_and_flags,
    xattrs,
    o_direct,
    mmap_shared,
    concurrent_writers,
    lock_waits_do_not_stall_the_mount,
    lookups_are_forgotten,
);

fn assert_same_meta(t: &AsyncMount, name: &str) {
    let a = lmeta(&t.m(name));
    let b = lmeta(&t.s(name));
    assert_eq!(
        (a.mode(), a.uid(), a.gid(), a.nlink(), a.ino()),
        (b.mode(), b.uid(), b.gid(), b.nlink(), b.ino()),
        "{name}"
    );
    if !a.is_dir() {
        assert_eq!((a.size(), a.blocks()), (b.size(), b.blocks()), "{name}");
    }
    assert_eq!(
        (a.mtime(), a.mtime_nsec()),
        (b.mtime(), b.mtime_nsec()),
        "{name}: mtime"
    );
}

/// Checks that READ and WRITE took the path the mode says: the pool (on
/// tokio with the pool, or for `O_DIRECT` with the pool), io_uring (on the
/// io_uring runtime otherwise: `O_DIRECT` at once, buffered READs that
/// miss the page cache; buffered WRITEs and page cache hits are inline
/// there), or inline (tokio without the pool).
///
/// `cold`: some READs missed the page cache (they go to the pool on
/// tokio with the pool, to the ring on io_uring; page cache hits are
/// served inline on both).
///
/// Depends on the environment: a WRITE that must clear set-user-ID
/// (`KILL_SUIDGID`) goes to the pool or the ring like an `O_DIRECT` one,
/// and the kernel marks every WRITE so whose writer lacks `CAP_FSETID` in
/// the initial user namespace: none as root there (checked: no such
/// WRITE), every one in a user namespace (`cargo xtask test-in-userns`),
/// where buffered WRITEs then take that way, as counted.
fn assert_data_path(t: &AsyncMount, direct: bool, cold: bool) {
    let s = t.fs.async_thread_pool_stats();
    let m = t.mode;
    assert_eq!(s.enabled, m.pool);
    // Buffered WRITEs that clear set-user-ID: the pool's if it is on,
    // else the ring's on io_uring (inline on tokio).
    let kill = s.kill_suidgid_writes;
    if in_initial_user_namespace() {
        assert_eq!(kill, 0, "{m:?}: root has CAP_FSETID here: {s:?}");
    } else if kill > 0 {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "ENVIRONMENT: in a user namespace the kernel marks every WRITE KILL_SUIDGID \
                 (no CAP_FSETID in the initial user namespace): such buffered WRITEs go to \
                 the pool or the ring, and are checked as such"
            )
        });
    }
    let (kill_pool, kill_ring) = match (direct, m.pool, m.runtime) {
        (true, _, _) => (0, 0),
        (false, true, _) => (kill, 0),
        (false, false, RuntimeType::IoUring) => (0, kill),
        (false, false, RuntimeType::Tokio) => (0, 0),
    };
    let pooled = m.pool && (direct || m.runtime == RuntimeType::Tokio);
    if pooled {
        assert!(s.pool_writes > 0 && s.started > 0, "{m:?}: {s:?}");
        if direct || cold {
            assert!(s.pool_reads > 0, "{m:?}: {s:?}");
        }
        if !direct {
            assert!(s.nowait_hits > 0, "{m:?}: {s:?}");
        }
        if cold && !direct {
            assert!(s.nowait_misses > 0, "{m:?}: {s:?}");
        }
    } else {
        assert_eq!(
            (s.queued, s.pool_reads, s.pool_writes),
            (kill_pool, 0, kill_pool),
            "{m:?}: only WRITEs that clear set-user-ID go to the pool: {s:?}"
        );
    }
    // Only the async loop of FUSE over io_uring marks a request as alone
    // on its thread (`async_io::solo`), which serves an O_DIRECT READ or
    // WRITE, or a READ that missed the page cache, inline; the tests'
    // one-at-a-time requests are, mostly.
    let solo_marked = m.transport != Transport::Dev && m.runtime == RuntimeType::IoUring;
    if !solo_marked || pooled {
        assert_eq!((s.solo_reads, s.solo_writes), (0, 0), "{m:?}: {s:?}");
    }
    if m.runtime == RuntimeType::IoUring && !pooled {
        if direct {
            assert!(
                s.uring_reads + s.solo_reads > 0 && s.uring_writes + s.solo_writes > 0,
                "{m:?}: {s:?}"
            );
        } else {
            assert_eq!(
                s.uring_writes, kill_ring,
                "{m:?}: buffered WRITEs are inline, but for those that clear set-user-ID: {s:?}"
            );
            assert!(s.nowait_hits > 0, "{m:?}: {s:?}");
            // A miss alone on its thread is read inline (`solo_reads`),
            // one beside others on the ring.
            if cold {
                assert!(
                    s.uring_reads + s.solo_reads > 0 && s.nowait_misses > 0,
                    "{m:?}: {s:?}"
                );
            }
        }
    } else {
        assert_eq!((s.uring_reads, s.uring_writes), (0, 0), "{m:?}: {s:?}");
    }
}

fn file_data(mode: Mode) {
    let mut t = AsyncMount::new(mode);
    small_files_both_ways(&t);
    let data = big_file_written(&t);
    // Cold reads (written back and dropped from the page cache below).
    // SAFETY: sync has no arguments.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
    big_file_read(&t, &data);
    append_to_a(&t);
    truncate_a(&t);
    seek_and_read_big(&t, &data);
    assert_same_meta(&t, "big");
    assert_data_path(&t, false, true);
    assert_eq!(t.fs.async_thread_pool_stats().cancelled, 0);
    t.unmount();
    assert_eq!(t.fs.handle_count(), 0);
    assert_eq!(t.fs.lookup_refs(), 0);
}

fn metadata_and_setattr(mode: Mode) {
    let t = AsyncMount::new(mode);
    fs::write(t.m("f"), pattern(10_000, 2)).unwrap();
    fs::create_dir(t.m("d")).unwrap();
    std::os::unix::fs::symlink("f", t.m("l")).unwrap();
    for name in ["f", "d", "l", "."] {
        assert_same_meta(&t, name);
    }
    assert_eq!(fs::read_link(t.m("l")).unwrap(), Path::new("f"));
    for mode in [0o600, 0o4755, 0o000, 0o644] {
        fs::set_permissions(t.m("f"), fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(lmeta(&t.s("f")).mode() & 0o7777, mode);
    }
    std::os::unix::fs::chown(t.m("f"), Some(1234), Some(5678)).unwrap();
    assert_eq!(
        (lmeta(&t.s("f")).uid(), lmeta(&t.s("f")).gid()),
        (1234, 5678)
    );
    let f = OpenOptions::new().write(true).open(t.m("f")).unwrap();
    f.set_len(7).unwrap();
    assert_eq!(lmeta(&t.s("f")).len(), 7);
    f.sync_all().unwrap();
    drop(f);
    let c = CString::new(t.m("f").as_os_str().as_bytes()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 1_200_000_000,
            tv_nsec: 6,
        },
    ];
    assert_eq!(
        // SAFETY: `c` is a NUL-terminated path and `times` the two
        // timespecs utimensat reads, both live across the call.
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
    assert_eq!(lmeta(&t.s("f")).mtime(), 1_200_000_000);
    assert_same_meta(&t, "f");
    // Hard links and unlinks.
    fs::hard_link(t.m("f"), t.m("f2")).unwrap();
    assert_eq!(lmeta(&t.s("f")).nlink(), 2);
    fs::remove_file(t.m("f2")).unwrap();
    fs::remove_dir(t.m("d")).unwrap();
    assert!(!t.s("d").exists());
    let st = nix_statfs(&t.mnt);
    assert!(st > 0);
}

fn nix_statfs(p: &Path) -> u64 {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: all-zero is a valid statfs; the path is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    st.f_blocks
}

fn readdir_lists_every_entry_once(mode: Mode) {
    let t = AsyncMount::new(mode);
    fs::create_dir(t.s("dir")).unwrap();
    let mut want: Vec<String> = (0..700)
        .map(|i| format!("entry-{i:04}-{}", "x".repeat(i % 40)))
        .collect();
    for n in &want {
        fs::write(t.s("dir").join(n), b"").unwrap();
    }
    want.sort();
    for _ in 0..2 {
        let mut got: Vec<String> = fs::read_dir(t.m("dir"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        got.sort();
        assert_eq!(got, want);
    }
    // A seek back to the start (LSEEK drops the cached position) lists
    // everything again.
    let d = File::open(t.m("dir")).unwrap();
    let mut buf = vec![0u8; 4096];
    let n1 = getdents(&d, &mut buf);
    assert!(n1 > 0);
    // SAFETY: lseek on an open directory.
    assert_eq!(unsafe { libc::lseek(d.as_raw_fd(), 0, libc::SEEK_SET) }, 0);
    let mut total = 0;
    loop {
        let n = getdents(&d, &mut buf);
        if n == 0 {
            break;
        }
        total += count_dirents(&buf[..n]);
    }
    assert_eq!(total, want.len() + 2, ". and .. and every entry once");
}

fn getdents(d: &File, buf: &mut [u8]) -> usize {
    // SAFETY: the buffer is valid for its length.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            d.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
    n as usize
}

fn count_dirents(mut b: &[u8]) -> usize {
    let mut n = 0;
    while b.len() >= 19 {
        let reclen = u16::from_ne_bytes([b[16], b[17]]) as usize;
        n += 1;
        b = &b[reclen..];
    }
    n
}

fn rename_and_flags(mode: Mode) {
    let t = AsyncMount::new(mode);
    fs::write(t.m("a"), b"A").unwrap();
    fs::write(t.m("b"), b"B").unwrap();
    fs::create_dir(t.m("d")).unwrap();
    fs::rename(t.m("a"), t.m("d/a2")).unwrap();
    assert_eq!(fs::read(t.s("d/a2")).unwrap(), b"A");
    assert!(!t.s("a").exists());
    fs::rename(t.m("d/a2"), t.m("b")).unwrap();
    assert_eq!(fs::read(t.s("b")).unwrap(), b"A");
    fs::write(t.m("c"), b"C").unwrap();
    let rename2 = |a: &str, b: &str, flags| renameat2(&t.m(a), &t.m(b), flags);
    assert_eq!(rename2("b", "c", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(rename2("b", "c", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(t.s("b")).unwrap(), b"C");
    assert_eq!(fs::read(t.s("c")).unwrap(), b"A");
}

fn xattrs(mode: Mode) {
    let t = AsyncMount::new(mode);
    fs::write(t.m("f"), b"").unwrap();
    let p = CString::new(t.m("f").as_os_str().as_bytes()).unwrap();
    let value = pattern(3000, 3);
    // SAFETY: valid strings and value.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            c"user.big".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid strings, buffer of its length.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            c"user.big".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(n, 3000);
    assert_eq!(&buf[..3000], &value[..]);
    // SAFETY: as above.
    let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0);
    assert!(buf[..n as usize]
        .split(|&b| b == 0)
        .any(|s| s == b"user.big"));
    assert_eq!(
        // SAFETY: both names are NUL-terminated and live across the call.
        unsafe { libc::removexattr(p.as_ptr(), c"user.big".as_ptr()) },
        0
    );
    // SAFETY: valid strings, no buffer.
    let r = unsafe { libc::getxattr(p.as_ptr(), c"user.big".as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENODATA)
    );
}

fn o_direct(mode: Mode) {
    let t = AsyncMount::new(mode);
    let (f, data) = direct_file_written(&t);
    let mut part = Aligned::new(8192);
    for i in 0..32u64 {
        let at = (i * 7919 % 250) * 4096;
        f.read_exact_at(part.as_mut(), at).unwrap();
        assert_eq!(part.as_mut(), &data[at as usize..at as usize + 8192]);
    }
    // A read across the end of file.
    let mut back = Aligned::new(1 << 20);
    let n = f.read_at(back.as_mut(), 1 << 20).unwrap();
    assert_eq!(n, 64 << 10);
    drop(f);
    direct_file_below(&t, &data);
    assert_data_path(&t, true, false);
}

fn mmap_shared(mode: Mode) {
    let t = AsyncMount::new(mode);
    mmap_writes_through(&t.s("m"), &t.m("m"), &format!("{mode:?}"));
}

fn concurrent_writers(mode: Mode) {
    let t = AsyncMount::new(mode);
    let len = 3 << 20;
    let writers: Vec<_> = (0..4u64)
        .map(|i| {
            let path = t.m(&format!("w{i}"));
            std::thread::spawn(move || {
                let data = pattern(len, 100 + i);
                let mut f = File::create(&path).unwrap();
                for chunk in data.chunks(4096 * (i as usize + 1) + 17) {
                    f.write_all(chunk).unwrap();
                }
                f.sync_all().unwrap();
                drop(f);
                // Read back through the mount, in other pieces.
                let mut back = Vec::new();
                File::open(&path).unwrap().read_to_end(&mut back).unwrap();
                assert_eq!(back, data, "{}", path.display());
            })
        })
        .collect();
    // Meanwhile, writers to one shared file at disjoint offsets.
    let shared = t.m("shared");
    File::create(&shared).unwrap().set_len(4 << 20).unwrap();
    let sharers: Vec<_> = (0..4u64)
        .map(|i| {
            let path = shared.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new().write(true).open(&path).unwrap();
                let data = pattern(1 << 20, 200 + i);
                for (k, chunk) in data.chunks(8192).enumerate() {
                    f.write_all_at(chunk, (i << 20) + (k * 8192) as u64)
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers.into_iter().chain(sharers) {
        w.join().unwrap();
    }
    for i in 0..4u64 {
        assert_eq!(
            fs::read(t.s(&format!("w{i}"))).unwrap(),
            pattern(len, 100 + i)
        );
    }
    let below = fs::read(t.s("shared")).unwrap();
    for i in 0..4u64 {
        let at = (i << 20) as usize;
        assert_eq!(below[at..at + (1 << 20)], pattern(1 << 20, 200 + i)[..]);
    }
    assert_data_path(&t, false, false);
}

/// An open file waits for a BSD lock (`flock`) that another open file of
/// the same file holds; the holder then unlocks through the same mount.
/// With the pool the wait runs on a pool thread and the mount goes on
/// serving; without it the wait would hold the only serving thread, so
/// that the unlock could never be served: those modes check the conflict
/// with `LOCK_NB` instead.
fn lock_waits_do_not_stall_the_mount(mode: Mode) {
    let t = AsyncMount::new(mode);
    fs::write(t.m("l"), b"lock me").unwrap();
    let flock = |f: &File, op: i32| {
        // SAFETY: flock on an open file.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        }
    };
    let holder = File::open(t.m("l")).unwrap();
    assert_eq!(flock(&holder, libc::LOCK_EX), 0);
    let path = t.m("l");
    let blocking = mode.pool;
    let waiter = std::thread::spawn(move || {
        let f = File::open(path).unwrap();
        let op = if blocking {
            libc::LOCK_EX
        } else {
            libc::LOCK_EX | libc::LOCK_NB
        };
        // SAFETY: flock on an open file.
        let r = unsafe { libc::flock(f.as_raw_fd(), op) };
        (r, std::io::Error::last_os_error().raw_os_error())
    });
    if blocking {
        // The waiter waits (in the kernel and in the daemon's pool); the
        // mount goes on serving meanwhile.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(fs::read(t.m("l")).unwrap(), b"lock me");
        assert!(!waiter.is_finished(), "the lock was granted while held");
    } else {
        assert!(wait_until(Duration::from_secs(20), || waiter.is_finished()));
    }
    assert_eq!(flock(&holder, libc::LOCK_UN), 0);
    assert!(
        wait_until(Duration::from_secs(20), || waiter.is_finished()),
        "the waiting lock never came through"
    );
    let (r, errno) = waiter.join().unwrap();
    if blocking {
        assert_eq!(r, 0, "flock: errno {errno:?}");
    } else {
        assert_eq!((r, errno), (-1, Some(libc::EWOULDBLOCK)));
    }
}

fn lookups_are_forgotten(mode: Mode) {
    let mut t = AsyncMount::new(mode);
    for i in 0..50 {
        fs::write(t.m(&format!("f{i}")), b"x").unwrap();
        fs::metadata(t.m(&format!("f{i}"))).unwrap();
    }
    assert!(t.fs.lookup_refs() > 0);
    assert_refs_return_to_zero(&t.fs);
    assert_eq!(t.fs.handle_count(), 0);
    t.unmount();
    let _ = Opcode::Lookup;
}
