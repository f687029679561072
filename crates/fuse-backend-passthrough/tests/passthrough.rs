//! Kernel passthrough (`FUSE_PASSTHROUGH`) on the host kernel: READ and
//! WRITE served by the kernel from the backing file, proven by the
//! server's request counters; data and sizes under concurrent writers,
//! truncation and shared mappings; backing ids closed at the last release;
//! the fallback when the kernel refuses; both transports.
//!
//! Registering backing files needs `CAP_SYS_ADMIN` in the initial user
//! namespace: those tests have `needs_root` in their names. In a user
//! namespace (`cargo xtask test-in-userns`) the daemon must fall back to
//! serving READ and WRITE itself and say why;
//! `passthrough_or_reported_fallback` checks whichever applies.

mod common;

use common::*;
use fuse_abi::Opcode;
use fuse_backend_passthrough::{CachePolicy, KillPrivV2, PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_uring::{UringConfig, UringSession};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Uncached attributes, kernel passthrough on.
fn pt_config() -> PassthroughConfig {
    uncached().passthrough(true)
}

/// A passthrough mount with uncached attributes and passthrough on.
fn mount() -> TestMount {
    mount_with(pt_config())
}

fn mount_with(config: PassthroughConfig) -> TestMount {
    require_passthrough_host();
    let t = TestMount::with(config, test_options());
    let stats = t.fs.passthrough_stats();
    assert!(
        stats.active,
        "passthrough is off on this host: {:?}",
        stats.reason
    );
    t
}

/// READ and WRITE requests the daemon has seen.
fn rw_requests(t: &TestMount) -> (u64, u64) {
    (t.count(Opcode::Read), t.count(Opcode::Write))
}

/// Waits for the kernel's RELEASEs (sent in the background after the last
/// close) until `n` backing ids are left.
fn assert_live_ids(t: &TestMount, n: u64) {
    let ok = wait_until(Duration::from_secs(10), || t.fs.live_backing_ids() == n);
    assert!(
        ok,
        "expected {n} live backing ids, have {} ({:?})",
        t.fs.live_backing_ids(),
        t.fs.passthrough_stats()
    );
}

fn rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

#[test]
fn read_and_write_bypass_the_daemon_needs_root() {
    let t = mount();
    let data = pattern(3 << 20, 1);
    // CREATE, then writes and reads of many sizes and offsets.
    fs::write(t.m("f"), &data).unwrap();
    assert_eq!(fs::read(t.m("f")).unwrap(), data);
    assert_eq!(fs::read(t.s("f")).unwrap(), data);
    let f = rw(&t.m("f"));
    let mut buf = vec![0u8; 10_000];
    f.read_exact_at(&mut buf, 123_457).unwrap();
    assert_eq!(buf, data[123_457..133_457]);
    f.write_all_at(b"middle", 1_000_000).unwrap();
    f.write_all_at(b"tail", data.len() as u64).unwrap();
    drop(f);
    let mut want = data.clone();
    want[1_000_000..1_000_006].copy_from_slice(b"middle");
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(t.s("f")).unwrap(), want);
    assert_eq!(fs::read(t.m("f")).unwrap(), want);
    assert_eq!(lmeta(&t.m("f")).len(), want.len() as u64);
    // O_APPEND through the kernel's passthrough.
    let mut a = OpenOptions::new().append(true).open(t.m("f")).unwrap();
    a.write_all(b"appended").unwrap();
    drop(a);
    want.extend_from_slice(b"appended");
    assert_eq!(fs::read(t.s("f")).unwrap(), want);
    assert_same_meta(&t, "f");
    // Not one READ or WRITE reached the daemon.
    assert_eq!(rw_requests(&t), (0, 0), "READ/WRITE reached the daemon");
    assert!(t.count(Opcode::Open) > 0 && t.count(Opcode::Create) > 0);
    let s = t.fs.passthrough_stats();
    assert!(s.passthrough_opens >= 5, "{s:?}");
    assert_eq!(s.fallback_opens, 0, "{s:?}");
    assert_live_ids(&t, 0);
}

#[test]
fn o_direct_is_passed_through_needs_root() {
    let t = mount();
    let f = open_direct(&t.m("d"));
    let mut buf = Aligned::new(1 << 20);
    buf.as_mut().copy_from_slice(&pattern(1 << 20, 7));
    f.write_all_at(buf.as_mut(), 4096).unwrap();
    let mut back = Aligned::new(1 << 20);
    f.read_exact_at(back.as_mut(), 4096).unwrap();
    assert_eq!(back.as_mut(), buf.as_mut());
    drop(f);
    assert_eq!(fs::read(t.s("d")).unwrap()[4096..], pattern(1 << 20, 7)[..]);
    assert_eq!(rw_requests(&t), (0, 0));
}

#[test]
fn without_passthrough_the_daemon_serves_io_needs_root() {
    // Off is the library's default.
    require_root();
    let t = TestMount::with(uncached(), test_options());
    let data = pattern(1 << 20, 2);
    fs::write(t.m("f"), &data).unwrap();
    assert_eq!(fs::read(t.m("f")).unwrap(), data);
    let (reads, writes) = rw_requests(&t);
    assert!(reads > 0 && writes > 0, "READ {reads}, WRITE {writes}");
    let s = t.fs.passthrough_stats();
    assert!(!s.active);
    assert_eq!((s.live_backing_ids, s.passthrough_opens), (0, 0));
}

/// GETXATTR requests while `writes` write(2) calls go to one open file.
fn getxattrs_for_writes(t: &TestMount, writes: u64) -> u64 {
    let f = rw(&t.m("w"));
    let before = t.count(Opcode::Getxattr);
    for i in 0..writes {
        f.write_all_at(b"x", i).unwrap();
    }
    t.count(Opcode::Getxattr) - before
}

#[test]
fn killpriv_v2_follows_kernel_passthrough_by_default_needs_root() {
    // Without FUSE_HANDLE_KILLPRIV_V2 the kernel asks for
    // security.capability before every write(2); the default asks for it
    // exactly where the daemon sees every write (no kernel passthrough).
    require_root();
    let t = TestMount::with(uncached(), test_options());
    fs::write(t.m("w"), b"").unwrap();
    // The first write finds no capability and marks the inode S_NOSEC.
    assert!(getxattrs_for_writes(&t, 20) <= 1, "daemon-served, Auto");
    drop(t);
    let t = TestMount::with(uncached().killpriv_v2(KillPrivV2::Off), test_options());
    fs::write(t.m("w"), b"").unwrap();
    assert_eq!(getxattrs_for_writes(&t, 20), 20, "daemon-served, Off");
    drop(t);
    let t = mount();
    fs::write(t.m("w"), b"").unwrap();
    assert_eq!(getxattrs_for_writes(&t, 20), 20, "passthrough, Auto");
    drop(t);
    let t = mount_with(pt_config().killpriv_v2(KillPrivV2::On));
    fs::write(t.m("w"), b"").unwrap();
    assert!(getxattrs_for_writes(&t, 20) <= 1, "passthrough, On");
}

#[test]
fn every_cache_policy_opens_in_passthrough_needs_root() {
    // FOPEN_KEEP_CACHE (cache=always) next to FOPEN_PASSTHROUGH makes the
    // kernel fail the open with EIO; FOPEN_DIRECT_IO (cache=never) would
    // send READ/WRITE to the daemon. The passthrough reply carries neither.
    for cache in [CachePolicy::Never, CachePolicy::Auto, CachePolicy::Always] {
        let t = mount_with(PassthroughConfig::default().cache(cache).passthrough(true));
        fs::write(t.m("f"), b"0123456789").unwrap();
        for _ in 0..2 {
            assert_eq!(fs::read(t.m("f")).unwrap(), b"0123456789", "{cache:?}");
        }
        assert_eq!(rw_requests(&t), (0, 0), "{cache:?}");
        assert_live_ids(&t, 0);
    }
}

#[test]
fn concurrent_writers_keep_data_and_size_needs_root() {
    let t = mount();
    const THREADS: usize = 4;
    const REGION: usize = 512 << 10;
    const CHUNK: usize = 16 << 10;
    File::create(t.m("shared")).unwrap();
    assert_live_ids(&t, 0);
    let registered = t.fs.passthrough_stats().registered;
    let mnt = t.mnt.clone();
    let opened = Arc::new(std::sync::Barrier::new(THREADS + 1));
    let writers: Vec<_> = (0..THREADS)
        .map(|i| {
            let mnt = mnt.clone();
            let opened = opened.clone();
            std::thread::spawn(move || {
                // Each writer has its own open files of the same inodes.
                let f = rw(&mnt.join("shared"));
                let mut a = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(mnt.join("log"))
                    .unwrap();
                opened.wait();
                opened.wait();
                let data = pattern(REGION, 100 + i as u64);
                // Interleave the writers' chunks across the file.
                for c in (0..REGION / CHUNK).rev() {
                    let off = (c * THREADS + i) * CHUNK;
                    f.write_all_at(&data[c * CHUNK..(c + 1) * CHUNK], off as u64)
                        .unwrap();
                }
                // Appenders on another file, each record whole.
                for n in 0..200u32 {
                    let rec = format!("{i:02}:{n:05}:{}\n", "x".repeat(48));
                    a.write_all(rec.as_bytes()).unwrap();
                }
            })
        })
        .collect();
    // Every writer has both files open: one id per inode, whatever the
    // number of opens.
    opened.wait();
    assert_eq!(t.fs.live_backing_ids(), 2);
    assert_eq!(t.fs.passthrough_stats().registered, registered + 2);
    opened.wait();
    for w in writers {
        w.join().unwrap();
    }
    let mut want = vec![0u8; THREADS * REGION];
    for i in 0..THREADS {
        let data = pattern(REGION, 100 + i as u64);
        for c in 0..REGION / CHUNK {
            let off = (c * THREADS + i) * CHUNK;
            want[off..off + CHUNK].copy_from_slice(&data[c * CHUNK..(c + 1) * CHUNK]);
        }
    }
    assert_eq!(lmeta(&t.m("shared")).len(), want.len() as u64);
    assert_eq!(fs::read(t.m("shared")).unwrap(), want);
    assert_eq!(fs::read(t.s("shared")).unwrap(), want);
    let log = fs::read_to_string(t.s("log")).unwrap();
    assert_eq!(log.len(), THREADS * 200 * 58);
    let mut seen = std::collections::HashSet::new();
    for line in log.lines() {
        assert_eq!(line.len(), 57, "torn record {line:?}");
        assert!(seen.insert(line[..8].to_string()), "duplicate {line:?}");
    }
    assert_eq!(seen.len(), THREADS * 200);
    assert_eq!(lmeta(&t.m("log")).len(), log.len() as u64);
    assert_eq!(rw_requests(&t), (0, 0));
    assert_live_ids(&t, 0);
}

#[test]
fn truncation_through_every_path_needs_root() {
    let t = mount();
    let data = pattern(100_000, 3);
    fs::write(t.m("f"), &data).unwrap();
    let size = |t: &TestMount| (lmeta(&t.m("f")).len(), lmeta(&t.s("f")).len());
    // ftruncate on a passthrough file (SETATTR with a handle).
    let mut f = rw(&t.m("f"));
    f.set_len(10_000).unwrap();
    assert_eq!(size(&t), (10_000, 10_000));
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back, data[..10_000]);
    // Growing leaves zeros; a write past the end extends.
    f.set_len(20_000).unwrap();
    f.write_all_at(b"end", 30_000).unwrap();
    assert_eq!(size(&t), (30_003, 30_003));
    let all = fs::read(t.m("f")).unwrap();
    assert_eq!(all[..10_000], data[..10_000]);
    assert!(all[10_000..30_000].iter().all(|&b| b == 0));
    assert_eq!(&all[30_000..], b"end");
    // truncate(2) by path while the file is open (SETATTR without handle):
    // the open passthrough file sees the new size at once.
    let c = c(&t.m("f"));
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 5_000) }, 0);
    assert_eq!(size(&t), (5_000, 5_000));
    let mut tail = [0u8; 100];
    assert_eq!(f.read_at(&mut tail, 4_950).unwrap(), 50);
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(b"+").unwrap();
    assert_eq!(size(&t), (5_001, 5_001));
    drop(f);
    // O_TRUNC at open (a SETATTR after the OPEN: no FUSE_ATOMIC_O_TRUNC).
    let mut g = open_truncated(&t.m("f"));
    assert_eq!(size(&t), (0, 0));
    g.write_all(b"fresh").unwrap();
    drop(g);
    assert_eq!(fs::read(t.s("f")).unwrap(), b"fresh");
    assert_eq!(fs::read(t.m("f")).unwrap(), b"fresh");
    // A truncation from outside is seen through the mount.
    fs::OpenOptions::new()
        .write(true)
        .open(t.s("f"))
        .unwrap()
        .set_len(2)
        .unwrap();
    assert_eq!(fs::read(t.m("f")).unwrap(), b"fr");
    assert_same_meta(&t, "f");
    assert_eq!(rw_requests(&t), (0, 0));
    assert!(t.count(Opcode::Setattr) >= 3);
    assert_live_ids(&t, 0);
}

#[test]
fn shared_writable_mapping_needs_root() {
    let t = mount();
    const LEN: usize = 256 << 10;
    let data = pattern(LEN, 4);
    fs::write(t.m("m"), &data).unwrap();
    let f = rw(&t.m("m"));
    let mut map = SharedMap::new(&f, LEN).expect("mmap");
    assert_eq!(map.bytes(), &data[..]);
    let mut want = data.clone();
    for page in (0..LEN).step_by(8192) {
        map.bytes()[page + 7] = 0xA5;
        want[page + 7] = 0xA5;
    }
    map.sync().expect("msync");
    // Through the mount (another open file) and in the backing directory.
    assert_eq!(fs::read(t.m("m")).unwrap(), want);
    assert_eq!(fs::read(t.s("m")).unwrap(), want);
    // A write through the mount shows in the mapping: one page cache, the
    // backing file's.
    f.write_all_at(b"written", 4096).unwrap();
    assert_eq!(&map.bytes()[4096..4103], b"written");
    // So does a write to the backing file from outside.
    let outside = rw(&t.s("m"));
    outside.write_all_at(b"outside", 100_000).unwrap();
    assert_eq!(&map.bytes()[100_000..100_007], b"outside");
    drop(map);
    drop(f);
    want[4096..4103].copy_from_slice(b"written");
    want[100_000..100_007].copy_from_slice(b"outside");
    assert_eq!(fs::read(t.m("m")).unwrap(), want);
    assert_eq!(rw_requests(&t), (0, 0));
    assert_live_ids(&t, 0);
}

#[test]
fn backing_ids_close_at_the_last_release_needs_root() {
    let t = mount();
    fs::write(t.m("a"), b"a").unwrap();
    fs::write(t.m("b"), b"b").unwrap();
    assert_live_ids(&t, 0);
    let registered = t.fs.passthrough_stats().registered;
    let a1 = File::open(t.m("a")).unwrap();
    let a2 = rw(&t.m("a"));
    let a3 = OpenOptions::new().write(true).open(t.m("a")).unwrap();
    let b1 = File::open(t.m("b")).unwrap();
    assert_live_ids(&t, 2);
    assert_eq!(t.fs.passthrough_stats().registered, registered + 2);
    drop(a1);
    drop(a2);
    // a3 still holds a's id.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(t.fs.live_backing_ids(), 2);
    drop(b1);
    assert_live_ids(&t, 1);
    a3.write_all_at(b"A", 0).unwrap();
    drop(a3);
    assert_live_ids(&t, 0);
    // Opening again registers anew.
    assert_eq!(fs::read(t.m("a")).unwrap(), b"A");
    assert_live_ids(&t, 0);
    assert_eq!(t.fs.passthrough_stats().registered, registered + 3);
    assert_eq!(rw_requests(&t), (0, 0));
    // Unmounting with files open drops every id too.
    let keep = File::open(t.m("b")).unwrap();
    assert_live_ids(&t, 1);
    let mut t = t;
    let fs = t.fs.clone();
    drop(keep);
    t.unmount();
    assert_eq!(fs.live_backing_ids(), 0);
}

#[test]
fn the_io_mode_follows_the_inode_while_it_is_open_needs_root() {
    // The kernel fails an open (EIO) that doesn't match the io mode of the
    // inode's files already open: the daemon keeps each inode in one mode
    // until its last release.
    let t = mount_with(pt_config().killpriv_v2(KillPrivV2::On));
    fs::write(t.m("p"), b"data").unwrap();
    let first = rw(&t.m("p"));
    // With FUSE_HANDLE_KILLPRIV_V2 set-user-ID files are served by the
    // daemon (it clears the bit on WRITE); but this inode is already
    // passed through, so a new open must be too.
    fs::set_permissions(t.m("p"), fs::Permissions::from_mode(0o4755)).unwrap();
    let second = File::open(t.m("p")).unwrap();
    let mut s = String::new();
    (&second).read_to_string(&mut s).unwrap();
    assert_eq!(s, "data");
    assert_eq!(rw_requests(&t), (0, 0));
    drop(first);
    drop(second);
    assert_live_ids(&t, 0);
    // Now closed: the set-user-ID file is opened in daemon mode...
    let third = File::open(t.m("p")).unwrap();
    let mut s = String::new();
    (&third).read_to_string(&mut s).unwrap();
    assert_eq!(s, "data");
    let (reads, _) = rw_requests(&t);
    assert!(reads > 0);
    // ... and stays so while open, even once the bit is gone.
    fs::set_permissions(t.m("p"), fs::Permissions::from_mode(0o755)).unwrap();
    let fourth = rw(&t.m("p"));
    fourth.write_all_at(b"D", 0).unwrap();
    assert_eq!(t.fs.live_backing_ids(), 0);
    assert!(t.count(Opcode::Write) > 0);
    drop(third);
    drop(fourth);
    let s = t.fs.passthrough_stats();
    assert_eq!(s.fallback_opens, 2, "{s:?}");
    assert_eq!(fs::read(t.s("p")).unwrap(), b"Data");
}

#[test]
fn refused_backing_files_fall_back_to_the_daemon_needs_root() {
    let t = mount();
    let _ovl = Overlay::mount(&t.s("ovl"));
    // A plain file: passed through.
    fs::write(t.m("plain"), b"plain").unwrap();
    assert_eq!(fs::read(t.m("plain")).unwrap(), b"plain");
    assert_eq!(rw_requests(&t), (0, 0));
    // Files on the overlayfs: refused (ELOOP), served by the daemon.
    assert_eq!(fs::read(t.m("ovl/low")).unwrap(), b"from the lower layer");
    let data = pattern(300_000, 5);
    fs::write(t.m("ovl/new"), &data).unwrap();
    assert_eq!(fs::read(t.m("ovl/new")).unwrap(), data);
    assert_eq!(fs::read(t.s("ovl/new")).unwrap(), data);
    let f = rw(&t.m("ovl/new"));
    f.set_len(1000).unwrap();
    f.write_all_at(b"x", 999).unwrap();
    drop(f);
    assert_eq!(lmeta(&t.m("ovl/new")).len(), 1000);
    let (reads, writes) = rw_requests(&t);
    assert!(reads > 0 && writes > 0, "READ {reads}, WRITE {writes}");
    let s = t.fs.passthrough_stats();
    assert!(s.active, "a per-file refusal keeps passthrough on: {s:?}");
    assert!(s.fallback_opens >= 4, "{s:?}");
    let reason = s.reason.clone().unwrap_or_default();
    assert!(reason.contains("stacked"), "{reason}");
    // Plain files are still passed through.
    let before = rw_requests(&t);
    assert_eq!(fs::read(t.m("plain")).unwrap(), b"plain");
    assert_eq!(rw_requests(&t), before);
    assert_live_ids(&t, 0);
}

#[test]
fn passthrough_or_reported_fallback() {
    // Runs everywhere: as real root passthrough must be on; in a user
    // namespace the daemon must fall back, say why, and serve correctly.
    require_root();
    let t = TestMount::with(pt_config(), test_options());
    let data = pattern(200_000, 6);
    fs::write(t.m("f"), &data).unwrap();
    assert_eq!(fs::read(t.m("f")).unwrap(), data);
    let s = t.fs.passthrough_stats();
    if in_initial_user_namespace() {
        assert!(s.active, "{s:?}");
        assert_eq!(rw_requests(&t), (0, 0));
    } else {
        let reason = s.reason.clone().unwrap_or_default();
        println!("kernel passthrough unavailable here: {reason}");
        assert!(!s.active);
        assert!(reason.contains("user namespace"), "{reason}");
        let (reads, writes) = rw_requests(&t);
        assert!(reads > 0 && writes > 0);
        assert_eq!(s.live_backing_ids, 0);
    }
}

/// A passthrough served over FUSE-over-io_uring.
struct UringMount {
    fs: Arc<PassthroughFs>,
    session: Option<UringSession>,
    dir: tempfile::TempDir,
}

impl UringMount {
    fn new() -> Self {
        require_passthrough_host();
        let dir = test_support::tmp_dir("pt-uring-");
        fs::create_dir(dir.path().join("src")).unwrap();
        fs::create_dir(dir.path().join("mnt")).unwrap();
        let fs = Arc::new(PassthroughFs::new(dir.path().join("src"), pt_config()).unwrap());
        let session = UringSession::mount(
            Server::new(fs.clone()),
            &dir.path().join("mnt"),
            &test_options(),
            UringConfig::default(),
        )
        .expect("mounting over io_uring");
        assert!(
            session.mode().uses_uring(),
            "not served over io_uring: {:?} (is /sys/module/fuse/parameters/enable_uring Y?)",
            session.fallback_reason()
        );
        Self {
            fs,
            session: Some(session),
            dir,
        }
    }

    fn m(&self, name: &str) -> PathBuf {
        self.dir.path().join("mnt").join(name)
    }

    fn s(&self, name: &str) -> PathBuf {
        self.dir.path().join("src").join(name)
    }

    fn session(&self) -> &UringSession {
        self.session.as_ref().unwrap()
    }
}

impl Drop for UringMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.stop();
            let _ = s.wait();
        }
        let mnt = self.dir.path().join("mnt");
        if is_mounted(&mnt) {
            let _ = fuse_transport_dev::unmount_path(&mnt, true);
        }
    }
}

#[test]
fn passthrough_over_io_uring_needs_root() {
    let u = UringMount::new();
    assert!(u.fs.passthrough_stats().active);
    let data = pattern(2 << 20, 8);
    fs::write(u.m("f"), &data).unwrap();
    assert_eq!(fs::read(u.m("f")).unwrap(), data);
    let f = rw(&u.m("f"));
    f.set_len(1 << 20).unwrap();
    f.write_all_at(b"ring", 10).unwrap();
    let mut map = SharedMap::new(&f, 1 << 20).expect("mmap");
    map.bytes()[0] = b'R';
    map.sync().expect("msync");
    drop(map);
    drop(f);
    let mut want = data[..1 << 20].to_vec();
    want[10..14].copy_from_slice(b"ring");
    want[0] = b'R';
    assert_eq!(fs::read(u.s("f")).unwrap(), want);
    let server = u.session().server();
    assert_eq!(
        (
            server.counters().get(Opcode::Read),
            server.counters().get(Opcode::Write)
        ),
        (0, 0)
    );
    // The opens themselves went through the rings.
    assert!(
        u.session().ring_requests(Opcode::Open) + u.session().ring_requests(Opcode::Create) > 0
    );
    let ok = wait_until(Duration::from_secs(10), || u.fs.live_backing_ids() == 0);
    assert!(ok, "{:?}", u.fs.passthrough_stats());
}

#[test]
fn what_still_reaches_the_daemon_needs_root() {
    use std::os::fd::AsRawFd;
    use Opcode::{Fallocate, Flush, Fsync, Getattr, Lseek, Setattr};
    let t = mount();
    fs::write(t.m("f"), pattern(1 << 20, 9)).unwrap();
    let f = rw(&t.m("f"));
    let fd = f.as_raw_fd();
    let [fsync, setattr, fallocate, lseek, getattr, flush] =
        [Fsync, Setattr, Fallocate, Lseek, Getattr, Flush].map(|op| t.count(op));
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    f.set_len(900_000).unwrap();
    assert_eq!(
        // SAFETY: `fd` is `f`'s, open for the whole test; no pointers.
        unsafe { libc::fallocate(fd, 0, 0, 1_100_000) },
        0,
        "fallocate: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: as above.
    assert_eq!(unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) }, 0);
    assert_eq!(lmeta(&t.m("f")).len(), 1_100_000);
    // sendfile (splice) from and to passthrough files.
    let g = create_rw(&t.m("g"));
    let mut off: libc::off_t = 0;
    // SAFETY: valid descriptors and offset pointer.
    let n = unsafe { libc::sendfile(g.as_raw_fd(), fd, &mut off, 65536) };
    assert_eq!(n, 65536, "sendfile: {}", std::io::Error::last_os_error());
    // copy_file_range between two files of the mount (the kernel copies
    // through splice here, with or without passthrough).
    let (mut off_in, mut off_out): (libc::loff_t, libc::loff_t) = (0, 0);
    // SAFETY: valid descriptors and offset pointers.
    let n = unsafe { libc::copy_file_range(fd, &mut off_in, g.as_raw_fd(), &mut off_out, 4096, 0) };
    assert_eq!(
        n,
        4096,
        "copy_file_range: {}",
        std::io::Error::last_os_error()
    );
    drop(g);
    drop(f);
    assert_eq!(
        fs::read(t.s("g")).unwrap(),
        fs::read(t.s("f")).unwrap()[..65536]
    );
    // Still the daemon's: fsync, setattr (size), fallocate, lseek
    // (SEEK_DATA/SEEK_HOLE), getattr, flush at close.
    assert!(t.count(Opcode::Fsync) >= fsync + 2);
    assert!(t.count(Opcode::Setattr) > setattr);
    assert!(t.count(Opcode::Fallocate) > fallocate);
    assert!(t.count(Opcode::Lseek) > lseek);
    assert!(t.count(Opcode::Getattr) > getattr);
    assert!(t.count(Opcode::Flush) > flush);
    // Never the daemon's: the data, splice included.
    assert_eq!(rw_requests(&t), (0, 0));
    assert_live_ids(&t, 0);
}

#[test]
fn tmpfile_is_passed_through_needs_root() {
    use std::os::fd::FromRawFd;
    let t = mount();
    let dir = c(&t.mnt);
    // SAFETY: a valid path; the result is checked.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o600) };
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor we own.
    let f = unsafe { File::from_raw_fd(fd) };
    let data = pattern(100_000, 10);
    f.write_all_at(&data, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
    assert_eq!(t.fs.live_backing_ids(), 1);
    drop(f);
    assert_eq!(rw_requests(&t), (0, 0));
    assert_live_ids(&t, 0);
}
