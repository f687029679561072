//! A bounded inode table on the real kernel (`PassthroughConfig::max_nodes`,
//! FUSE_NOTIFY_PRUNE, protocol 7.45, Linux 6.18+): a walk over a tree
//! larger than the limit leaves at most the limit, a pruned file looked up
//! again is the same file, and pruned nodes in use (an open file, a
//! working directory) stay valid. Needs root (CI runs as root) and a
//! kernel with NOTIFY_PRUNE (these machines' 6.18 has it): without, each
//! test fails with the reason rather than passing unchecked.

mod common;

use common::*;
use fuse_abi::Opcode;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

/// The limit of these tests: well below the walk's 1,020 nodes.
const LIMIT: usize = 64;
const DIRS: usize = 20;
const FILES: usize = 50;

/// How long the pruner may take to bring the table down: generous, a
/// guard against a hang rather than a timing.
const DEADLINE: Duration = Duration::from_secs(120);

/// A mount with names and attributes uncached (every stat reaches the
/// daemon by node id, so a node dropped too early would answer ESTALE)
/// and a limit of [`LIMIT`] inodes, over a tree of `DIRS` directories of
/// `FILES` files, each holding its own path. Fails with the reason
/// where the kernel has no NOTIFY_PRUNE.
fn mount() -> TestMount {
    let t = TestMount::with(uncached().max_nodes(LIMIT), test_options());
    for d in 0..DIRS {
        fs::create_dir(t.s(&format!("d{d}"))).unwrap();
        for f in 0..FILES {
            let name = format!("d{d}/f{f}");
            fs::write(t.s(&name), &name).unwrap();
        }
    }
    // The kernel's protocol is known once the mount answered something.
    fs::metadata(&t.mnt).unwrap();
    let minor = t
        .session()
        .notifier()
        .ok()
        .and_then(|n| n.protocol_minor())
        .expect("the mount negotiated a protocol");
    assert!(
        minor >= 45,
        "this kernel speaks FUSE protocol 7.{minor}; NOTIFY_PRUNE needs 7.45 (Linux 6.18+)"
    );
    t
}

/// Stats every file of the tree through the mount.
fn walk(t: &TestMount) {
    for d in 0..DIRS {
        for e in fs::read_dir(t.m(&format!("d{d}"))).unwrap() {
            let e = e.unwrap();
            lmeta(&e.path());
        }
    }
}

/// Waits until the table is back within the limit.
fn wait_bounded(t: &TestMount) {
    let ok = wait_until(DEADLINE, || t.fs.inode_count() <= LIMIT);
    assert!(
        ok,
        "the inode table stayed above {LIMIT}: {} inodes, pruner {:?}",
        t.fs.inode_count(),
        t.fs.prune_stats()
    );
}

/// Checks every file through the mount: its content, and the inode number
/// of its backing file.
fn check_every_file(t: &TestMount) {
    for d in 0..DIRS {
        for f in 0..FILES {
            let name = format!("d{d}/f{f}");
            assert_eq!(fs::read_to_string(t.m(&name)).unwrap(), name);
            assert_eq!(lmeta(&t.m(&name)).ino(), lmeta(&t.s(&name)).ino(), "{name}");
        }
    }
}

#[test]
fn a_walk_larger_than_the_limit_leaves_a_bounded_table_needs_root() {
    let t = mount();
    assert_eq!(t.fs.max_nodes(), Some(LIMIT));
    walk(&t);
    wait_bounded(&t);
    let stats = t.fs.prune_stats().expect("a pruner runs");
    assert!(stats.off.is_none(), "pruning turned off: {stats:?}");
    assert!(stats.offered > 0, "{stats:?}");
    assert!(t.count(Opcode::Forget) + t.count(Opcode::BatchForget) > 0);
    // A second walk prunes again: the bound holds for any number of walks.
    let rounds = stats.rounds;
    walk(&t);
    wait_bounded(&t);
    assert!(t.fs.prune_stats().unwrap().rounds > rounds);
    assert_refs_return_to_zero(&t.fs);
}

#[test]
fn a_pruned_node_looked_up_again_is_the_same_file_needs_root() {
    let t = mount();
    walk(&t);
    wait_bounded(&t);
    // At most LIMIT of the 1,020 nodes are left: the others were pruned
    // and forgotten, so reading them looks them up afresh (new nodes).
    assert!(t.fs.inode_count() <= LIMIT);
    check_every_file(&t);
    wait_bounded(&t);
}

/// Kills and reaps a child on every path out of the test.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn pruned_nodes_in_use_stay_valid_needs_root() {
    let t = mount();
    // In use through the whole walk: an open file and a process's working
    // directory, both looked up first, so the coldest of the table.
    let open = File::open(t.m("d1/f1")).unwrap();
    let cwd = Reaped(
        test_support::command("sleep")
            .arg("1000")
            .current_dir(t.m("d2"))
            .spawn()
            .expect("spawning sleep"),
    );
    let proc_cwd = Path::new("/proc").join(cwd.0.id().to_string()).join("cwd");
    for _ in 0..3 {
        walk(&t);
        wait_bounded(&t);
    }
    assert!(t.fs.prune_stats().unwrap().rounds >= 3);
    // fstat is a GETATTR by node id (attributes aren't cached): the
    // daemon still serves the open file's node.
    assert_eq!(open.metadata().unwrap().ino(), lmeta(&t.s("d1/f1")).ino());
    assert_eq!(
        fs::read_to_string(proc_cwd.join("f7")).unwrap(),
        "d2/f7",
        "a lookup in the working directory's node"
    );
    assert_eq!(
        fs::metadata(&proc_cwd).unwrap().ino(),
        lmeta(&t.s("d2")).ino()
    );
    // New names in it reach the right directory.
    fs::write(proc_cwd.join("new"), b"x").unwrap();
    assert_eq!(fs::read(t.s("d2/new")).unwrap(), b"x");
    drop(open);
    drop(cwd);
    check_every_file(&t);
    assert_refs_return_to_zero(&t.fs);
}
