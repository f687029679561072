//! Inode identity: a node id the kernel holds always names the file it was
//! made for, even after the backing file system gave that file's inode
//! number to a new file.
//!
//! The sequence that broke it: the kernel holds a node for a file (a cached
//! dentry, an open descriptor, a process's working directory), the file is
//! removed behind the mount, and the backing file system (ext4 reuses a
//! freed number at once) gives its inode number to a new file. A lookup of
//! the new name matched the old node by (device, inode number, mount) and
//! answered with it; the kernel then used the old node, whose file handle
//! is stale: ESTALE on open, EINVAL, "Is a directory" for a regular file,
//! ENOENT when creating inside a directory that exists.
//!
//! Each case here removes a file or directory the kernel still references
//! (through an `O_PATH` descriptor of the test, which pins the kernel's
//! node but sends nothing to the daemon), makes new ones until the backing
//! file system reuses the inode number (checked with statx), and uses the
//! new one through the mount in every way: stat, open, read and write,
//! readdir(plus) of its directory, create inside. The descriptor cache is
//! one descriptor small, so the old file is not held open by the daemon and
//! its number is free to be reused.
//!
//! On ext4 with file handles (a one-group image on a loop device, where
//! the freed number is the next one handed out) the number is reused and
//! the test requires it. Held by `O_PATH` descriptor (the mode in a user namespace, or with
//! file handles off), the daemon's descriptor keeps the old inode alive, so
//! its number cannot be reused: the test requires that. tmpfs hands out
//! increasing numbers and doesn't reuse them; the uses must work there all
//! the same.

mod common;

use common::*;
use fuse_backend_passthrough::PassthroughConfig;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a test entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

fn make(path: &Path, kind: Kind) {
    match kind {
        Kind::File => fs::write(path, b"old contents").unwrap(),
        Kind::Dir => fs::create_dir(path).unwrap(),
    }
}

fn remove(path: &Path, kind: Kind) {
    match kind {
        Kind::File => fs::remove_file(path).unwrap(),
        Kind::Dir => fs::remove_dir(path).unwrap(),
    }
}

/// `open(path, O_PATH)`: pins the kernel's dentry and inode of `path` (so
/// its node stays referenced) without sending OPEN to the daemon.
fn open_path(path: &Path) -> OwnedFd {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(path)
        .unwrap_or_else(|e| panic!("O_PATH open of {}: {e}", path.display()))
        .into()
}

/// Names and attributes are cached for a minute (the kernel keeps its
/// nodes); every GETATTR reaches the daemon; the descriptor cache holds
/// one descriptor, so the daemon holds no removed file open.
fn config(file_handles: bool) -> PassthroughConfig {
    PassthroughConfig::default()
        .entry_timeout(Duration::from_secs(60))
        .attr_timeout(Duration::ZERO)
        .file_handles(file_handles)
        .fd_cache_size(1)
}

/// How the backing file system treats a freed inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    /// It must be reused (ext4 with file handles).
    Required,
    /// It must not be (the daemon holds the old inode by descriptor).
    Impossible,
    /// Either (tmpfs doesn't reuse numbers soon).
    Either,
}

/// Removes `d/old` (of kind `old`) behind the kernel's back while the
/// kernel holds its node, makes entries of kind `new` until one gets the
/// old inode number (or 300 were made), then uses the last one through
/// the mount. Returns whether the number was reused.
fn reused_number_case(t: &TestMount, old: Kind, new: Kind, reuse: Reuse) -> bool {
    let what = format!("{old:?} replaced by {new:?}");
    fs::create_dir(t.s("d")).unwrap();
    make(&t.s("d/old"), old);
    let pin = open_path(&t.m("d/old"));
    let ino = lmeta(&t.m("d/old")).ino();
    assert_eq!(
        ino,
        lmeta(&t.s("d/old")).ino(),
        "{what}: the mount shows the backing ino"
    );
    // A GETATTR of the directory puts its descriptor in the one-slot cache,
    // so the daemon keeps nothing of `old` open.
    lmeta(&t.m("d"));
    remove(&t.s("d/old"), old);

    let mut reused = false;
    let mut name = String::new();
    for i in 0..300 {
        name = format!("new{i}");
        make(&t.s(&format!("d/{name}")), new);
        if lmeta(&t.s(&format!("d/{name}"))).ino() == ino {
            reused = true;
            break;
        }
    }
    match reuse {
        Reuse::Required => assert!(
            reused,
            "{what}: the backing file system did not reuse inode number {ino} in 300 \
             tries; this test needs it to (ext4 does at once)"
        ),
        Reuse::Impossible => assert!(
            !reused,
            "{what}: inode number {ino} was reused although the daemon holds the old \
             inode by descriptor"
        ),
        Reuse::Either => {}
    }

    let rel = format!("d/{name}");
    let m = t.m(&rel);
    // stat
    let meta = fs::symlink_metadata(&m)
        .unwrap_or_else(|e| panic!("{what}: lstat of the new {new:?} through the mount: {e}"));
    assert_eq!(
        meta.ino(),
        lmeta(&t.s(&rel)).ino(),
        "{what}: ino of the new entry"
    );
    assert_eq!(
        meta.is_dir(),
        new == Kind::Dir,
        "{what}: the mount shows the new entry's type"
    );
    match new {
        Kind::File => {
            // open, write, read back
            let mut f = fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&m)
                .unwrap_or_else(|e| panic!("{what}: opening the new file for writing: {e}"));
            f.write_all(b"new contents")
                .unwrap_or_else(|e| panic!("{what}: writing the new file: {e}"));
            drop(f);
            let mut back = String::new();
            fs::File::open(&m)
                .unwrap_or_else(|e| panic!("{what}: opening the new file for reading: {e}"))
                .read_to_string(&mut back)
                .unwrap_or_else(|e| panic!("{what}: reading the new file: {e}"));
            assert_eq!(back, "new contents", "{what}: read back through the mount");
            assert_eq!(
                fs::read(t.s(&rel)).unwrap(),
                b"new contents",
                "{what}: the write reached the backing file"
            );
        }
        Kind::Dir => {
            // create inside, list it, open what was made
            fs::write(m.join("inner"), b"inside").unwrap_or_else(|e| {
                panic!("{what}: creating a file inside the new directory: {e}")
            });
            fs::create_dir(m.join("sub"))
                .unwrap_or_else(|e| panic!("{what}: mkdir inside the new directory: {e}"));
            let mut names: Vec<String> = fs::read_dir(&m)
                .unwrap_or_else(|e| panic!("{what}: listing the new directory: {e}"))
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            assert_eq!(
                names,
                ["inner", "sub"],
                "{what}: listing of the new directory"
            );
            assert_eq!(fs::read(m.join("inner")).unwrap(), b"inside");
            assert!(
                t.s(&rel).join("inner").is_file(),
                "{what}: reached the backing tree"
            );
        }
    }
    // readdir(plus) of the parent: every entry's attributes through the mount.
    let mut listed = 0;
    for e in fs::read_dir(t.m("d")).unwrap() {
        let e = e.unwrap();
        let through = fs::symlink_metadata(e.path())
            .unwrap_or_else(|err| panic!("{what}: lstat of {:?} after readdir: {err}", e.path()));
        let backing = lmeta(&t.s("d").join(e.file_name()));
        assert_eq!(through.ino(), backing.ino(), "{what}: {:?}", e.file_name());
        assert_eq!(
            through.is_dir(),
            backing.is_dir(),
            "{what}: {:?}",
            e.file_name()
        );
        listed += 1;
    }
    assert!(listed >= 1, "{what}: the parent lists the new entry");
    drop(pin);
    reused
}

/// Every pairing of old and new kinds, each in a fresh mount over a
/// directory made by `source` (which returns the directory and a guard).
fn all_cases<G>(file_handles: bool, reuse: Reuse, source: impl Fn() -> (PathBuf, G)) {
    for (old, new) in [
        (Kind::File, Kind::File),
        (Kind::File, Kind::Dir),
        (Kind::Dir, Kind::File),
        (Kind::Dir, Kind::Dir),
    ] {
        let (src, guard) = source();
        let t = TestMount::of_source(&src, config(file_handles), test_options());
        assert_eq!(
            t.fs.uses_file_handles(),
            file_handles,
            "file handle mode: {:?}",
            t.fs.file_handle_fallback()
        );
        let reused = reused_number_case(&t, old, new, reuse);
        eprintln!("{old:?} -> {new:?}: inode number reused: {reused}");
        drop(t);
        drop(guard);
    }
}

/// A fresh directory on the host's ext4 (`/tmp` here; checked), whose
/// allocator may or may not reuse a number soon: for the descriptor mode,
/// where reuse must not happen.
fn ext4_source() -> (PathBuf, tempfile::TempDir) {
    let dir = test_support::tmp_dir("pt-identity-");
    chmod(dir.path(), 0o755);
    // SAFETY: statfs is plain data; all-zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let c = c(dir.path());
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    assert_eq!(
        st.f_type, 0xEF53,
        "/tmp must be on ext4 for this test (it needs inode number reuse)"
    );
    (dir.path().to_path_buf(), dir)
}

/// An ext4 file system of one block group on a loop device, mounted for
/// the test (unmounted and removed on drop). With one group, ext4 hands a
/// freed inode number out again at once, to files and directories alike
/// (on a large file system, its allocator may place a new directory in
/// another group than the one the removed entry was in).
struct LoopExt4 {
    dir: Option<tempfile::TempDir>,
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let c = c(&dir.path().join("mnt"));
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Runs `cmd` (the program `program`), which must succeed (`what` says
/// what failed if not).
fn run_ok(cmd: &mut std::process::Command, program: &str, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn loop_ext4_source() -> (PathBuf, LoopExt4) {
    let dir = test_support::tmp_dir("pt-identity-ext4-");
    let image = dir.path().join("image");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    fs::File::create(&image).unwrap().set_len(32 << 20).unwrap();
    let mut mkfs = test_support::command("mkfs.ext4");
    mkfs.args(["-q", "-F", "-b", "4096", "-N", "1024"])
        .arg(&image);
    run_ok(&mut mkfs, "mkfs.ext4 (package e2fsprogs)", "mkfs.ext4");
    let mut mount = test_support::command("mount");
    mount.args(["-o", "loop"]).arg(&image).arg(&mnt);
    run_ok(
        &mut mount,
        "mount",
        "mounting an ext4 image on a loop device (needs real root)",
    );
    chmod(&mnt, 0o755);
    (mnt, LoopExt4 { dir: Some(dir) })
}

test_support::test_cases! {
    reused_inode_number_with_file_handles_on_ext4_needs_root =>
        all_cases(true, Reuse::Required, loop_ext4_source);
    reused_inode_number_with_file_handles_on_tmpfs_needs_root =>
        all_cases(true, Reuse::Either, || tmpfs_source("pt-identity-tmpfs-"));
    inode_numbers_held_by_descriptor_are_never_reused_on_ext4 =>
        all_cases(false, Reuse::Impossible, ext4_source);
    inode_numbers_held_by_descriptor_on_tmpfs => all_cases(false, Reuse::Impossible, || tmpfs_source("pt-identity-tmpfs-"));
}
