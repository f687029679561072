//! `PassthroughFs` called directly, without a mount: what the kernel
//! never sends (names with `/`, `.` and `..`, unknown node ids and
//! handles), exact lookup counts, and readdirplus entries that don't fit.
//! These need no root and no /dev/fuse.

mod common;

use common::{errno_of, own_context as ctx};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{
    CopyFileRangeArgs, DirentPlusSink, Entry, FileSystem, LockArgs, LseekArgs, MkdirArgs, OpenArgs,
    ReadArgs, ReleaseArgs, SliceReader, SliceWriter, WriteArgs,
};
use std::fs;

const ROOT: u64 = fuse_abi::ROOT_ID;

fn setup() -> (tempfile::TempDir, PassthroughFs) {
    let dir = tempfile::tempdir().unwrap();
    let fs = PassthroughFs::new(dir.path(), PassthroughConfig::default()).unwrap();
    (dir, fs)
}

/// [`setup`] with `n` empty files, `{prefix}0` and on, in the source.
fn setup_with_files(n: usize, prefix: &str) -> (tempfile::TempDir, PassthroughFs) {
    let (dir, fs) = setup();
    for i in 0..n {
        fs::write(dir.path().join(format!("{prefix}{i}")), b"").unwrap();
    }
    (dir, fs)
}

/// READ's (and READDIR's) arguments: `size` bytes of handle `fh` from
/// `offset`.
fn read_args(fh: u64, offset: u64, size: u32) -> ReadArgs {
    ReadArgs {
        fh,
        offset,
        size,
        ..ReadArgs::default()
    }
}

/// OPEN's arguments with `flags` (`O_RDONLY`, ...).
fn open_args(flags: i32) -> OpenArgs {
    OpenArgs {
        flags: flags as u32,
        ..OpenArgs::default()
    }
}

#[test]
fn names_with_a_slash_or_empty_are_rejected() {
    let (dir, fs) = setup();
    fs::create_dir(dir.path().join("a")).unwrap();
    fs::write(dir.path().join("a/b"), b"").unwrap();
    for name in [c"a/b", c"/etc", c"", c"a/"] {
        assert_eq!(
            errno_of(fs.lookup(&ctx(), ROOT, name)),
            libc::EINVAL,
            "{name:?}"
        );
        assert_eq!(
            errno_of(fs.mkdir(
                &ctx(),
                ROOT,
                name,
                &MkdirArgs {
                    mode: 0o755,
                    umask: 0
                }
            )),
            libc::EINVAL
        );
        assert_eq!(errno_of(fs.unlink(&ctx(), ROOT, name)), libc::EINVAL);
    }
    assert!(dir.path().join("a/b").exists());
    assert_eq!(fs.lookup_refs(), 0);
}

#[test]
fn dot_and_dotdot_never_leave_the_tree() {
    let (dir, fs) = setup();
    fs::create_dir(dir.path().join("d")).unwrap();
    // The root's parent is the root.
    let up = fs.lookup(&ctx(), ROOT, c"..").unwrap();
    assert_eq!(up.nodeid, ROOT);
    assert_eq!(up.generation, 0);
    assert_eq!(fs.lookup(&ctx(), ROOT, c".").unwrap().nodeid, ROOT);
    assert_eq!(fs.lookup_refs(), 0, "the root is not counted");
    let d = fs.lookup(&ctx(), ROOT, c"d").unwrap();
    assert_ne!(d.nodeid, ROOT);
    assert_eq!(fs.lookup(&ctx(), d.nodeid, c"..").unwrap().nodeid, ROOT);
    let dot = fs.lookup(&ctx(), d.nodeid, c".").unwrap();
    assert_eq!(dot.nodeid, d.nodeid);
    assert_eq!(fs.lookup_refs(), 2);
    fs.forget(&ctx(), d.nodeid, 2);
    assert_eq!(fs.lookup_refs(), 0);
    assert_eq!(fs.inode_count(), 1);
}

#[test]
fn symlinks_in_the_backing_tree_are_not_followed() {
    let (dir, fs) = setup();
    std::os::unix::fs::symlink("/etc", dir.path().join("esc")).unwrap();
    let e = fs.lookup(&ctx(), ROOT, c"esc").unwrap();
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    // Looking up through the link as if it were a directory fails.
    let r = fs.lookup(&ctx(), e.nodeid, c"passwd");
    assert!(r.is_err(), "lookup through a symlink must fail: {r:?}");
    assert_eq!(fs.readlink(&ctx(), e.nodeid).unwrap(), b"/etc");
    // Opening a symlink node is refused, never followed.
    assert!(fs
        .open(&ctx(), e.nodeid, &open_args(libc::O_RDONLY))
        .is_err());
    // So is a directory operation on it.
    assert_eq!(
        errno_of(fs.opendir(&ctx(), e.nodeid, &OpenArgs::default())),
        libc::ENOTDIR
    );
}

#[test]
fn lookup_counts_are_exact() {
    let (dir, fs) = setup();
    fs::write(dir.path().join("f"), b"x").unwrap();
    fs::hard_link(dir.path().join("f"), dir.path().join("g")).unwrap();
    let a = fs.lookup(&ctx(), ROOT, c"f").unwrap();
    let b = fs.lookup(&ctx(), ROOT, c"f").unwrap();
    let c = fs.lookup(&ctx(), ROOT, c"g").unwrap();
    assert_eq!(a.nodeid, b.nodeid);
    assert_eq!(a.nodeid, c.nodeid, "hard links share a node id");
    assert_eq!(fs.lookup_refs(), 3);
    assert_eq!(fs.inode_count(), 2);
    fs.forget(&ctx(), a.nodeid, 2);
    assert_eq!(fs.lookup_refs(), 1);
    assert_eq!(fs.inode_count(), 2);
    fs.forget(&ctx(), a.nodeid, 1);
    assert_eq!(fs.inode_count(), 1);
    // Forgetting what is gone (or more than held) does not underflow.
    fs.forget(&ctx(), a.nodeid, 5);
    let d = fs.lookup(&ctx(), ROOT, c"f").unwrap();
    assert_ne!(d.nodeid, a.nodeid, "node ids are never reused");
    fs.forget(&ctx(), d.nodeid, 10);
    assert_eq!(fs.lookup_refs(), 0);
    assert_eq!(fs.inode_count(), 1);
    fs.forget(&ctx(), ROOT, 1);
    assert_eq!(fs.inode_count(), 1);
    assert_eq!(errno_of(fs.getattr(&ctx(), d.nodeid, None)), libc::ESTALE);
}

/// Accepts `room` entries, then rejects.
struct Limited {
    room: usize,
    taken: Vec<(Entry, u64)>,
}

impl DirentPlusSink for Limited {
    fn add(&mut self, entry: &Entry, cookie: u64, _dtype: u32, _name: &[u8]) -> bool {
        if self.taken.len() == self.room {
            return false;
        }
        self.taken.push((*entry, cookie));
        true
    }

    fn count(&self) -> usize {
        self.taken.len()
    }
}

#[test]
fn readdirplus_entries_that_do_not_fit_are_forgotten() {
    let (_dir, fs) = setup_with_files(20, "f");
    let opened = fs.opendir(&ctx(), ROOT, &OpenArgs::default()).unwrap();
    let mut offset = 0;
    let mut names = 0;
    loop {
        let mut sink = Limited {
            room: 5,
            taken: Vec::new(),
        };
        let args = read_args(opened.fh, offset, 4096);
        fs.readdirplus(&ctx(), ROOT, &args, &mut sink).unwrap();
        let Some(&(_, last)) = sink.taken.last() else {
            break;
        };
        // Only what the sink took is counted: the lookup of the entry it
        // rejected was undone at once. `.` and `..` have node id 0.
        let counted = sink.taken.iter().filter(|(e, _)| e.nodeid != 0).count() as u64;
        assert_eq!(fs.lookup_refs(), counted);
        for (e, _) in &sink.taken {
            if e.nodeid != 0 {
                fs.forget(&ctx(), e.nodeid, 1);
            }
        }
        names += sink.taken.len();
        offset = last;
    }
    assert_eq!(names, 22);
    assert_eq!(fs.lookup_refs(), 0);
    fs.releasedir(
        &ctx(),
        ROOT,
        &ReleaseArgs {
            fh: opened.fh,
            ..ReleaseArgs::default()
        },
    )
    .unwrap();
    assert_eq!(fs.handle_count(), 0);
}

#[test]
fn readdir_cookies_increase_and_resume() {
    let (_dir, fs) = setup_with_files(300, "file-");
    let opened = fs.opendir(&ctx(), ROOT, &OpenArgs::default()).unwrap();
    let mut offset = 0;
    let mut all = Vec::new();
    loop {
        let mut mem = vec![0u8; 1024];
        let mut buf = fuse_server::DirentBuf::new(&mut mem);
        let args = read_args(opened.fh, offset, 1024);
        fs.readdir(&ctx(), ROOT, &args, &mut buf).unwrap();
        let len = buf.len();
        if len == 0 {
            break;
        }
        let mut at = 0;
        while at < len {
            let d: &[u8] = &mem[at..];
            let off = u64::from_ne_bytes(d[8..16].try_into().unwrap());
            let namelen = u32::from_ne_bytes(d[16..20].try_into().unwrap()) as usize;
            let name = String::from_utf8_lossy(&d[24..24 + namelen]).into_owned();
            assert_ne!(off, 0, "cookies are never 0");
            all.push((name, off));
            offset = off;
            at += fuse_abi::dirent_size(namelen);
        }
    }
    assert_eq!(all.len(), 302);
    let names: std::collections::HashSet<_> = all.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names.len(), 302, "each entry once");
    // An offset beyond i64::MAX is the end.
    let mut mem = vec![0u8; 1024];
    let mut buf = fuse_server::DirentBuf::new(&mut mem);
    let args = read_args(opened.fh, u64::MAX, 1024);
    fs.readdir(&ctx(), ROOT, &args, &mut buf).unwrap();
    assert!(buf.is_empty());
    // Offset 0 starts over.
    let mut mem = vec![0u8; 4096];
    let mut buf = fuse_server::DirentBuf::new(&mut mem);
    let args = read_args(opened.fh, 0, 4096);
    fs.readdir(&ctx(), ROOT, &args, &mut buf).unwrap();
    assert!(!buf.is_empty());
}

#[test]
fn bad_handles_and_arguments_give_errors_not_panics() {
    let (dir, fs) = setup();
    fs::write(dir.path().join("f"), b"0123456789").unwrap();
    let e = fs.lookup(&ctx(), ROOT, c"f").unwrap();
    let mut mem = [0u8; 16];
    let mut out = SliceWriter::new(&mut mem);
    let read = read_args(999, 0, 16);
    assert_eq!(
        errno_of(fs.read(&ctx(), e.nodeid, &read, &mut out)),
        libc::EBADF
    );
    assert_eq!(errno_of(fs.getattr(&ctx(), 12345, None)), libc::ESTALE);
    assert_eq!(
        errno_of(fs.getattr(&ctx(), e.nodeid, Some(77))),
        libc::EBADF
    );
    assert_eq!(
        errno_of(fs.release(
            &ctx(),
            e.nodeid,
            &ReleaseArgs {
                fh: 4242,
                ..ReleaseArgs::default()
            }
        )),
        libc::EBADF
    );
    let opened = fs.open(&ctx(), e.nodeid, &open_args(libc::O_RDWR)).unwrap();
    // Lock ranges that make no sense, and a lock type that is none.
    let wrlck = libc::F_WRLCK as u32;
    for (start, end, r#type) in [(10, 5, wrlck), (u64::MAX, u64::MAX, wrlck), (0, 1, 99)] {
        let lk = LockArgs {
            fh: opened.fh,
            owner: 1,
            lock: fuse_abi::FileLock {
                start,
                end,
                r#type,
                pid: 1,
            },
            flock: false,
        };
        assert_eq!(
            errno_of(fs.setlk(&ctx(), e.nodeid, &lk, false)),
            libc::EINVAL,
            "{start}..{end}, type {type}",
            type = r#type
        );
    }
    let seek = LseekArgs {
        fh: opened.fh,
        offset: u64::MAX,
        whence: libc::SEEK_DATA as u32,
    };
    // The wire's u64 is the kernel's loff_t: -1, which lseek(2) of the
    // backing file refuses with ENXIO for SEEK_DATA, as natively.
    assert_eq!(errno_of(fs.lseek(&ctx(), e.nodeid, &seek)), libc::ENXIO);
    let copy = CopyFileRangeArgs {
        fh_in: opened.fh,
        nodeid_out: e.nodeid,
        fh_out: opened.fh,
        len: 1,
        flags: 1 << 40,
        ..CopyFileRangeArgs::default()
    };
    assert_eq!(
        errno_of(fs.copy_file_range(&ctx(), e.nodeid, &copy)),
        libc::EINVAL
    );
    // Reads and writes with short counts.
    let mut input = SliceReader::new(b"abc");
    let w = WriteArgs {
        fh: opened.fh,
        offset: 8,
        size: 3,
        ..WriteArgs::default()
    };
    assert_eq!(fs.write(&ctx(), e.nodeid, &w, &mut input).unwrap(), 3);
    let mut mem = [0u8; 64];
    let mut out = SliceWriter::new(&mut mem);
    let read = read_args(opened.fh, 5, 64);
    fs.read(&ctx(), e.nodeid, &read, &mut out).unwrap();
    assert_eq!(fuse_server::ZeroCopyWriter::written(&out), 6);
    assert_eq!(&mem[..6], b"567abc");
    // Syncing the whole file system (sent by virtio-fs only).
    fs.syncfs(&ctx(), ROOT).unwrap();
    fs.destroy();
    assert_eq!(fs.inode_count(), 1);
    assert_eq!(fs.handle_count(), 0);
}

#[test]
fn source_errors_are_reported() {
    let err = PassthroughFs::new("/nonexistent/dir", PassthroughConfig::default()).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/dir"), "{err}");
    let file = tempfile::NamedTempFile::new().unwrap();
    let err = PassthroughFs::new(file.path(), PassthroughConfig::default()).unwrap_err();
    assert!(err.to_string().contains("cannot open source"), "{err}");
}
