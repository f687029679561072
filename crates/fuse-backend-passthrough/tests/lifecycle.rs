//! Mount life cycle: lookup counts returning to zero, unmounting, two
//! mounts at once, the cache/open modes, and that no test leaves a mount
//! behind (even one that panics while mounted). Needs root (CI runs as root).

mod common;

use common::*;
use fuse_backend_passthrough::{CachePolicy, PassthroughConfig};
use fuse_server::Session;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};

/// Creates, stats, renames, links and removes things; closes everything.
fn workload(t: &TestMount) {
    fs::create_dir_all(t.m("a/b/c")).unwrap();
    for i in 0..50 {
        fs::write(t.m(&format!("a/b/f{i}")), format!("{i}")).unwrap();
    }
    std::os::unix::fs::symlink("b", t.m("a/l")).unwrap();
    fs::hard_link(t.m("a/b/f1"), t.m("a/h")).unwrap();
    fs::rename(t.m("a/b/f2"), t.m("a/b/c/f2")).unwrap();
    fs::remove_file(t.m("a/b/f3")).unwrap();
    for e in fs::read_dir(t.m("a/b")).unwrap() {
        let e = e.unwrap();
        lmeta(&e.path());
    }
    let _ = fs::read(t.m("a/b/c/f2")).unwrap();
    assert!(fs::metadata(t.m("nothing")).is_err());
}

#[test]
fn lookup_counts_return_to_zero_after_eviction_needs_root() {
    let t = TestMount::with(PassthroughConfig::default(), test_options());
    workload(&t);
    // An open file keeps its inode.
    let f = File::open(t.m("a/h")).unwrap();
    assert!(t.fs.lookup_refs() > 0);
    drop_caches();
    assert!(
        t.fs.lookup_refs() >= 1,
        "the open file's inode is still known"
    );
    drop(f);
    assert_refs_return_to_zero(&t.fs);
    assert_eq!(t.fs.handle_count(), 0, "every handle released");
    assert!(t.count(fuse_abi::Opcode::Forget) + t.count(fuse_abi::Opcode::BatchForget) > 0);
}

#[test]
fn unmount_drops_everything_without_forgets() {
    let mut t = TestMount::with(PassthroughConfig::default(), test_options());
    workload(&t);
    let server = t.session().server().clone();
    let refs = t.fs.lookup_refs();
    assert!(refs > 0);
    let forgets = |s: &fuse_server::Server| {
        s.counters().get(fuse_abi::Opcode::Forget) + s.counters().get(fuse_abi::Opcode::BatchForget)
    };
    let before = forgets(&server);
    t.unmount();
    let after = forgets(&server);
    // Linux ends the connection before it evicts the inodes of an
    // unmounted FUSE file system: no FORGET arrives for what the kernel
    // still held. The file system's destroy() drops it all instead.
    eprintln!(
        "lookup refs at unmount: {refs}; FORGETs during unmount: {}",
        after - before
    );
    assert!(server.is_destroyed());
    assert_eq!(t.fs.lookup_refs(), 0);
    assert_eq!(t.fs.inode_count(), 1);
    assert_eq!(t.fs.handle_count(), 0);
}

#[test]
fn two_mounts_at_once() {
    let a = TestMount::new();
    let b = TestMount::same_source(&a, uncached());
    let other = TestMount::new();
    fs::write(a.m("x"), b"written through a").unwrap();
    assert_eq!(fs::read(b.m("x")).unwrap(), b"written through a");
    fs::write(b.m("y"), b"through b").unwrap();
    assert_eq!(fs::read(a.m("y")).unwrap(), b"through b");
    assert!(!other.m("x").exists());
    fs::write(other.m("x"), b"other").unwrap();
    assert_eq!(fs::read(a.m("x")).unwrap(), b"written through a");
    assert_eq!(lmeta(&a.m("x")).ino(), lmeta(&b.m("x")).ino());
    // Unmounting one leaves the others serving.
    let mut b = b;
    b.unmount();
    assert_eq!(fs::read(a.m("y")).unwrap(), b"through b");
    assert_eq!(fs::read(other.m("x")).unwrap(), b"other");
}

#[test]
fn zero_message_opens() {
    let config = uncached().no_open(true).no_opendir(true);
    let t = TestMount::with(config, test_options());
    fs::write(t.m("f"), b"first").unwrap();
    for i in 0..5 {
        fs::write(t.m(&format!("g{i}")), format!("{i}")).unwrap();
        assert_eq!(
            fs::read(t.m(&format!("g{i}"))).unwrap(),
            format!("{i}").as_bytes()
        );
    }
    // O_TRUNC without an OPEN arrives as SETATTR.
    let mut f = open_truncated(&t.m("f"));
    f.write_all(b"2nd").unwrap();
    drop(f);
    assert_eq!(fs::read(t.s("f")).unwrap(), b"2nd");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(t.m("f"))
        .unwrap();
    f.write_all_at(b"X", 1).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::read(t.s("f")).unwrap(), b"2Xd");
    assert_eq!(fs::read_dir(&t.mnt).unwrap().count(), 6);
    assert_eq!(fs::read_dir(&t.mnt).unwrap().count(), 6);
    // The kernel stops sending OPEN/OPENDIR after the first ENOSYS.
    assert!(
        t.count(fuse_abi::Opcode::Open) <= 1,
        "OPEN: {}",
        t.count(fuse_abi::Opcode::Open)
    );
    assert!(t.count(fuse_abi::Opcode::Opendir) <= 1);
    // RELEASE never comes with zero-message opens: no handle may be kept.
    assert_eq!(t.fs.handle_count(), 0);
    assert!(t.count(fuse_abi::Opcode::Read) >= 1);
}

#[test]
fn writeback_cache() {
    let config = PassthroughConfig::default().writeback(true);
    let t = TestMount::with(config, test_options());
    // Write-only opens, partial pages, appends.
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(t.m("w"))
        .unwrap();
    f.write_all(&pattern(10_000, 11)).unwrap();
    f.write_all_at(b"middle", 5000).unwrap();
    drop(f);
    let mut f = OpenOptions::new().append(true).open(t.m("w")).unwrap();
    f.write_all(b"tail").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut want = pattern(10_000, 11);
    want[5000..5006].copy_from_slice(b"middle");
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(t.s("w")).unwrap(), want);
    assert_eq!(lmeta(&t.m("w")).len(), want.len() as u64);
    assert_eq!(fs::read(t.m("w")).unwrap(), want);
    // Truncate and times still work.
    let f = OpenOptions::new().write(true).open(t.m("w")).unwrap();
    f.set_len(3).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::read(t.s("w")).unwrap(), &want[..3]);
}

#[test]
fn cache_policies() {
    for cache in [CachePolicy::Never, CachePolicy::Auto, CachePolicy::Always] {
        let config = PassthroughConfig::default().cache(cache);
        let t = TestMount::with(config, test_options());
        fs::write(t.m("f"), b"abc").unwrap();
        assert_eq!(fs::read(t.m("f")).unwrap(), b"abc");
        fs::create_dir(t.m("d")).unwrap();
        fs::write(t.m("d/x"), b"").unwrap();
        assert_eq!(fs::read_dir(t.m("d")).unwrap().count(), 1);
        std::os::unix::fs::symlink("f", t.m("l")).unwrap();
        assert_eq!(fs::read_link(t.m("l")).unwrap().to_str(), Some("f"));
        assert_eq!(fs::read(t.s("f")).unwrap(), b"abc", "{cache:?}");
        if cache == CachePolicy::Never {
            // Changes below show at once.
            fs::write(t.s("f"), b"changed below").unwrap();
            assert_eq!(fs::read(t.m("f")).unwrap(), b"changed below");
            assert_eq!(lmeta(&t.m("f")).len(), 13);
        }
    }
}

#[test]
fn many_threads_read_and_write_concurrently() {
    let t = TestMount::new();
    let data = pattern(1 << 20, 12);
    std::thread::scope(|s| {
        for i in 0..8 {
            let (t, data) = (&t, &data);
            s.spawn(move || {
                let name = format!("c{i}");
                for _ in 0..5 {
                    fs::write(t.m(&name), data).unwrap();
                    assert_eq!(&fs::read(t.m(&name)).unwrap(), data);
                }
            });
        }
    });
    assert_eq!(fs::read(t.s("c7")).unwrap(), data);
}

/// Mounts, then panics: run in a child process by
/// [`no_mount_left_behind_after_a_panic`].
#[test]
#[ignore = "helper process of no_mount_left_behind_after_a_panic"]
fn helper_panics_while_mounted() {
    if std::env::var_os("PT_PANIC_HELPER").is_none() {
        return;
    }
    let t = TestMount::new();
    fs::write(t.m("f"), b"x").unwrap();
    let _open = File::open(t.m("f")).unwrap();
    panic!("deliberate panic with {} mounted", t.mnt.display());
}

#[test]
fn no_mount_left_behind_after_a_panic() {
    require_root();
    let child = test_support::command(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_panics_while_mounted",
            "--ignored",
            "--test-threads=1",
        ])
        .env("PT_PANIC_HELPER", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Read while the child runs (its pid can't be reused before we reap it).
    let mark = wait_for_mark(pid);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the helper should have panicked: {text}"
    );
    assert!(text.contains("deliberate panic"), "{text}");
    // The helper's mount carried its pid and start time in the fsname:
    // none is left.
    let mark = mark.expect("the helper's start time");
    let left = mounts_with_exact_source(&format!("{FSNAME_PREFIX}-{mark}"));
    assert!(left.is_empty(), "mounts left behind: {left:#?}");
}

fn wait_for_mark(pid: u32) -> Option<String> {
    process_start_time(pid).map(|t| format!("{pid}-{t}"))
}

#[test]
fn no_mounts_of_finished_test_processes() {
    require_root();
    // Test mounts carry their process's pid and start time: one whose
    // process is gone was left behind (by this run's earlier test
    // binaries, or a killed run).
    let stale: Vec<String> = mounts_with_source(FSNAME_PREFIX)
        .into_iter()
        .filter(|l| {
            let source = l
                .split(" - ")
                .nth(1)
                .and_then(|s| s.split(' ').nth(1))
                .unwrap_or("");
            let mut parts = source.rsplit('-');
            let start = parts.next().and_then(|p| p.parse::<u64>().ok());
            let pid = parts.next().and_then(|p| p.parse::<u32>().ok());
            match (pid, start) {
                (Some(pid), Some(start)) => process_start_time(pid) != Some(start),
                _ => true,
            }
        })
        .collect();
    for l in &stale {
        if let Some(mp) = l.split(' ').nth(4) {
            let _ = fuse_transport_dev::unmount_path(std::path::Path::new(mp), true);
        }
    }
    assert!(
        stale.is_empty(),
        "stale test mounts (detached here, which under `cargo xtask test` is the runner's own \
         mount namespace only: on the host, `umount -l` each): {stale:#?}"
    );
}

/// A child forked while this process serves a mount, whose exec comes only
/// after that mount was torn down (another test finished meanwhile): the
/// exec closes the child's copy of a file on the mount, which sends FLUSH.
/// `test_support::command` has the child close its copies of the
/// session's device descriptors first, so the torn-down connection ends and
/// the FLUSH fails at once. With a plain `Command` the child's copies kept
/// the connection alive with nobody serving it, and the exec waited
/// forever (the `locks` binary hung that way under load).
#[test]
fn a_child_execs_after_the_mount_it_inherited_was_torn_down() {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::CommandExt as _;
    require_root();
    let t = TestMount::new();
    fs::write(t.m("f"), b"x").unwrap();
    let connection = fs::metadata(&t.mnt).unwrap().dev() & 0xff;
    let open = File::open(t.m("f")).unwrap();
    // `forked`: the child says it is between fork and exec; `gate`: it
    // waits there until the mount is gone.
    let (forked_read, forked_write) = pipe();
    let (gate_read, gate_write) = pipe();
    let mut cmd = std::process::Command::new("true");
    let file = open.as_raw_fd();
    // SAFETY: the hook only duplicates a descriptor and reads and writes
    // pipes (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            // The mount's file at the child's lowest descriptor number:
            // exec closes it before any copy of the session's devices.
            if libc::dup3(file, 3, libc::O_CLOEXEC) != 3 {
                return Err(std::io::Error::last_os_error());
            }
            let mut byte = [1u8];
            libc::write(forked_write, byte.as_ptr().cast(), 1);
            libc::read(gate_read, byte.as_mut_ptr().cast(), 1);
            Ok(())
        });
    }
    // After the gate, as in a child that was slow to get there.
    test_support::leave_fuse_sessions_behind(&mut cmd);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let spawner = std::thread::spawn(move || {
        // spawn returns once the exec is done.
        let status = cmd.spawn().and_then(|mut child| child.wait());
        let _ = done_tx.send(status);
    });
    let mut byte = [0u8];
    // SAFETY: our pipe; a one-byte buffer.
    let forked = unsafe { libc::read(forked_read, byte.as_mut_ptr().cast(), 1) };
    assert_eq!(forked, 1, "the child never reached its pre-exec hook");
    // The mount goes as a finished test's does: its file closed, its
    // session stopped, unmounted.
    drop(open);
    drop(t);
    // SAFETY: our pipe; a one-byte buffer.
    unsafe { libc::write(gate_write, byte.as_ptr().cast(), 1) };
    let status = match done_rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(status) => status,
        Err(_) => {
            // Let the child go before failing, so nothing is left waiting.
            let _ = fs::write(format!("/sys/fs/fuse/connections/{connection}/abort"), "1");
            panic!("the child's exec still waits 60 s after the mount was torn down");
        }
    };
    spawner.join().unwrap();
    assert!(status.unwrap().success());
    for fd in [forked_read, forked_write, gate_read, gate_write] {
        // SAFETY: ours, from pipe() below.
        unsafe { libc::close(fd) };
    }
}

/// A pipe's (read, write) ends, close-on-exec.
fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (fds[0], fds[1])
}
