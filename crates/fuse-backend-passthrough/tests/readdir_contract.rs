//! The readdir contract of [`PassthroughFs`], through its OPENDIR,
//! READDIR, READDIRPLUS, LSEEK and RELEASEDIR handlers called directly on
//! a persistent directory handle over a real backing directory. No mount
//! and no root: these pass as any user (`cargo test -p
//! fusewire-backend-passthrough --test readdir_contract`).
//!
//! Replies are collected in a [`DirentBuf`] of the request's size, as the
//! server does, and read back from its bytes. Pinned here (DESIGN.md,
//! "Contracts the code must keep"):
//! - every entry is listed exactly once however small the replies, with
//!   non-zero cookies that are the backing directory's own positions
//!   (`d_off`), in its order, the same every time: the listing is the
//!   backing directory's getdents64 listing, whatever the file system.
//!   (So cookies increase on ext4, in hash order, and decrease on tmpfs,
//!   newest entry first: these tests run in `$TMPDIR`, which is either,
//!   and on tmpfs in `/dev/shm` as well);
//! - a listing resumes exactly after the cookie it is given (from this
//!   handle, another one, or after an LSEEK of the handle), a cookie
//!   beyond `i64::MAX` is the end, and a seek invalidates the position
//!   the handle cached;
//! - READDIRPLUS hands out one lookup reference per delivered entry (none
//!   for `.` and `..`), releases the reference of an entry the reply had
//!   no room for at once, and its attributes are LOOKUP's;
//! - an error before the first entry of a reply is the reply's error; one
//!   after it ends the reply, which carries what it has;
//! - [`PassthroughConfig::no_readdir`] lists nothing, successfully;
//! - RELEASEDIR ends a handle (`EBADF` after it).

mod common;

use common::{errno_of, own_context as ctx};
use fuse_abi::{Attr, Dirent, Direntplus, EntryOut, ROOT_ID};
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{DirentBuf, Entry, FileSystem, LseekArgs, OpenArgs, ReadArgs, ReleaseArgs};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::io;
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

const ROOT: u64 = ROOT_ID;

fn passthrough(dir: &Path, config: PassthroughConfig) -> PassthroughFs {
    // As the daemon does: without file handles (any user but root) every
    // inode READDIRPLUS hands out holds a descriptor, thousands here.
    fuse_backend_passthrough::raise_nofile_limit().expect("raising the open file limit");
    PassthroughFs::new(dir, config).expect("PassthroughFs::new")
}

/// A directory on tmpfs (`/dev/shm`), whose cookies are counters that
/// decrease along a listing (newest entry first; Linux 6.18), unlike those
/// of ext4 (hash positions, which increase). The default temporary
/// directory (`$TMPDIR`, else `/tmp`) may be either.
fn tmpfs_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm (tmpfs)")
}

/// `n` empty files with names of varying lengths (so that records straddle
/// reply and getdents64 buffers); returns their names.
fn populate(dir: &Path, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|i| {
            let name = format!("entry-{i:05}-{}", "x".repeat(i % 37));
            std::fs::write(dir.join(&name), b"").unwrap();
            name
        })
        .collect()
}

/// A directory of `n` files ([`populate`], their names), and the
/// passthrough of it at its defaults.
fn populated(n: usize) -> (tempfile::TempDir, BTreeSet<String>, PassthroughFs) {
    let base = tempfile::tempdir().unwrap();
    let names = populate(base.path(), n);
    let fs = passthrough(base.path(), PassthroughConfig::default());
    (base, names, fs)
}

/// `names` plus `.` and `..`.
fn with_dots(names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut all = names.clone();
    all.insert(".".into());
    all.insert("..".into());
    all
}

fn mkfifo(path: &Path) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// What READDIRPLUS says of an entry besides its dirent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plus {
    nodeid: u64,
    ino: u64,
    mode: u32,
    size: u64,
}

/// One entry of a reply, read back from the reply's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    /// The dirent's inode number.
    ino: u64,
    cookie: u64,
    dtype: u32,
    /// READDIRPLUS only.
    plus: Option<Plus>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

/// The records of a READDIR (`plus`: READDIRPLUS) reply body.
fn parse(body: &[u8], plus: bool) -> Vec<Listed> {
    let (dirent, name_at) = if plus {
        (
            offset_of!(Direntplus, dirent),
            fuse_abi::NAME_OFFSET_DIRENTPLUS,
        )
    } else {
        (0, fuse_abi::NAME_OFFSET)
    };
    let attr = offset_of!(Direntplus, entry_out) + offset_of!(EntryOut, attr);
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        assert!(rest.len() >= name_at, "a truncated record");
        let namelen = u32_at(rest, dirent + offset_of!(Dirent, namelen)) as usize;
        let name = std::str::from_utf8(&rest[name_at..name_at + namelen])
            .expect("UTF-8 test names")
            .to_owned();
        out.push(Listed {
            name,
            ino: u64_at(rest, dirent + offset_of!(Dirent, ino)),
            cookie: u64_at(rest, dirent + offset_of!(Dirent, off)),
            dtype: u32_at(rest, dirent + offset_of!(Dirent, r#type)),
            plus: plus.then(|| Plus {
                nodeid: u64_at(rest, offset_of!(Direntplus, entry_out)),
                ino: u64_at(rest, attr + offset_of!(Attr, ino)),
                mode: u32_at(rest, attr + offset_of!(Attr, mode)),
                size: u64_at(rest, attr + offset_of!(Attr, size)),
            }),
        });
        let len = if plus {
            fuse_abi::direntplus_size(namelen)
        } else {
            fuse_abi::dirent_size(namelen)
        };
        rest = &rest[len..];
    }
    out
}

fn names(entries: &[Listed]) -> Vec<String> {
    entries.iter().map(|e| e.name.clone()).collect()
}

/// Drops the lookup reference of every READDIRPLUS entry in `entries`
/// (what the kernel's FORGET does).
fn forget_listed(fs: &PassthroughFs, entries: &[Listed]) {
    for e in entries {
        if let Some(p) = e.plus.filter(|p| p.nodeid != 0) {
            fs.forget(&ctx(), p.nodeid, 1);
        }
    }
}

/// The READDIRPLUS entries in `entries` that carry a reference.
fn counted(entries: &[Listed]) -> u64 {
    entries
        .iter()
        .filter(|e| e.plus.is_some_and(|p| p.nodeid != 0))
        .count() as u64
}

/// The backing directory's own listing: each name with its position
/// (`d_off`), in the order getdents64 gives them, read on a descriptor of
/// its own (not through the file system under test).
fn backing_listing(dir: &Path) -> Vec<(String, u64)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .unwrap_or_else(|e| panic!("opening {}: {e}", dir.display()));
    let fd = file.as_raw_fd();
    let mut listing = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: `fd` is open and `buf` is writable for its length.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        assert!(n >= 0, "getdents64: {}", io::Error::last_os_error());
        if n == 0 {
            break;
        }
        // linux_dirent64: ino u64, off u64, reclen u16, type u8, name.
        let mut rest = &buf[..n as usize];
        while !rest.is_empty() {
            let reclen = u16::from_ne_bytes(rest[16..18].try_into().unwrap()) as usize;
            let name = &rest[19..reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
            listing.push((
                String::from_utf8(name.to_vec()).expect("UTF-8 test names"),
                u64_at(rest, 8),
            ));
            rest = &rest[reclen..];
        }
    }
    listing
}

/// Every entry once with a non-zero cookie, and the listing is the
/// backing directory's (`backing`, from [`backing_listing`]): the same
/// names with the same positions in the same order.
fn assert_listing(
    entries: &[Listed],
    expected: &BTreeSet<String>,
    backing: &[(String, u64)],
    what: &str,
) {
    assert_listed_once(entries, expected, what);
    let listed: Vec<(String, u64)> = entries.iter().map(|e| (e.name.clone(), e.cookie)).collect();
    if let Some(at) =
        (0..listed.len().max(backing.len())).find(|&i| listed.get(i) != backing.get(i))
    {
        panic!(
            "{what}: entry #{at} is {:?}, the backing directory's is {:?} (name, cookie): \
             not its positions in its order",
            listed.get(at),
            backing.get(at)
        );
    }
}

/// Every entry once, cookies non-zero and distinct.
fn assert_listed_once(entries: &[Listed], expected: &BTreeSet<String>, what: &str) {
    let got: BTreeSet<String> = entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(got.len(), entries.len(), "{what}: an entry listed twice");
    assert_eq!(&got, expected, "{what}: the names listed");
    let cookies: BTreeSet<u64> = entries.iter().map(|e| e.cookie).collect();
    assert_eq!(cookies.len(), entries.len(), "{what}: a cookie given twice");
    assert!(!cookies.contains(&0), "{what}: a cookie of 0");
}

/// An open directory handle of a [`PassthroughFs`].
struct Dir<'a> {
    fs: &'a PassthroughFs,
    ino: u64,
    fh: u64,
}

impl<'a> Dir<'a> {
    fn open(fs: &'a PassthroughFs, ino: u64) -> Self {
        let opened = fs
            .opendir(&ctx(), ino, &OpenArgs::default())
            .expect("opendir");
        assert_ne!(opened.fh, 0);
        Self {
            fs,
            ino,
            fh: opened.fh,
        }
    }

    /// One READDIR (`plus`: READDIRPLUS) of `size` bytes after `offset`,
    /// as the server makes it: the entries of the reply.
    fn read(&self, plus: bool, offset: u64, size: usize) -> io::Result<Vec<Listed>> {
        let mut mem = vec![0u8; size];
        let mut buf = DirentBuf::new(&mut mem);
        let args = ReadArgs {
            fh: self.fh,
            offset,
            size: size as u32,
            ..ReadArgs::default()
        };
        if plus {
            self.fs.readdirplus(&ctx(), self.ino, &args, &mut buf)?;
        } else {
            self.fs.readdir(&ctx(), self.ino, &args, &mut buf)?;
        }
        let len = buf.len();
        Ok(parse(&mem[..len], plus))
    }

    /// Requests of `size` bytes from `offset` on, each resuming at the last
    /// cookie of the one before, until an empty reply (the end): the
    /// entries and the number of requests.
    fn read_to_end(&self, plus: bool, offset: u64, size: usize) -> (Vec<Listed>, usize) {
        let mut all = Vec::new();
        let mut offset = offset;
        let mut requests = 0;
        loop {
            requests += 1;
            let batch = self.read(plus, offset, size).expect("readdir");
            let Some(last) = batch.last() else {
                return (all, requests);
            };
            offset = last.cookie;
            all.extend(batch);
        }
    }

    fn lseek(&self, offset: u64, whence: i32) -> io::Result<u64> {
        let args = LseekArgs {
            fh: self.fh,
            offset,
            whence: whence as u32,
        };
        self.fs.lseek(&ctx(), self.ino, &args)
    }

    fn release(&self) -> io::Result<()> {
        let args = ReleaseArgs {
            fh: self.fh,
            ..ReleaseArgs::default()
        };
        self.fs.releasedir(&ctx(), self.ino, &args)
    }
}

fn lookup(fs: &PassthroughFs, parent: u64, name: &str) -> Entry {
    let c = CString::new(name).unwrap();
    fs.lookup(&ctx(), parent, &c).expect("lookup")
}

#[test]
fn readdir_in_many_small_batches_lists_every_entry_once_in_a_stable_order() {
    let base = tempfile::tempdir().unwrap();
    many_small_batches(base.path());
}

#[test]
fn readdir_in_many_small_batches_on_tmpfs_lists_every_entry_once() {
    // Decreasing cookies, whatever `$TMPDIR` is.
    let base = tmpfs_dir();
    many_small_batches(base.path());
}

/// Lists 3000 entries of `base` with replies of several sizes, READDIR
/// and READDIRPLUS: each time the backing directory's listing.
fn many_small_batches(base: &Path) {
    let expected = with_dots(&populate(base, 3000));
    let backing = backing_listing(base);
    let fs = passthrough(base, PassthroughConfig::default());
    let dir = Dir::open(&fs, ROOT);
    let mut order: Option<Vec<String>> = None;
    // (READDIRPLUS?, reply size): 80 bytes hold one or two dirents,
    // 256 one direntplus.
    for (plus, size) in [
        (false, 80),
        (false, 1000),
        (false, 4096),
        (true, 256),
        (true, 4096),
    ] {
        let what = format!("{} plus={plus} size={size}", base.display());
        let (all, requests) = dir.read_to_end(plus, 0, size);
        assert_listing(&all, &expected, &backing, &what);
        let per_request = (size / 80).max(1);
        assert!(
            requests > all.len() / (per_request * 2),
            "{what}: {requests} requests"
        );
        match &order {
            None => order = Some(names(&all)),
            Some(o) => assert_eq!(o, &names(&all), "{what}: another order"),
        }
        if plus {
            assert_eq!(fs.lookup_refs(), 3000, "{what}");
            forget_listed(&fs, &all);
            assert_eq!(fs.lookup_refs(), 0, "{what}");
        }
    }
    // Resuming after a cookie in the middle lists exactly what follows it.
    let (full, _) = dir.read_to_end(false, 0, 65536);
    for k in [1000, 3, 2999, 1500] {
        let (rest, _) = dir.read_to_end(false, full[k].cookie, 1000);
        assert_eq!(rest, full[k + 1..], "{}: after #{k}", base.display());
    }
    // Another handle lists the same entries with the same cookies.
    let other = Dir::open(&fs, ROOT);
    let (a, _) = dir.read_to_end(false, 0, 4096);
    let (b, _) = other.read_to_end(false, 0, 4096);
    assert_eq!(a, b);
    dir.release().unwrap();
    other.release().unwrap();
    assert_eq!(fs.handle_count(), 0);
    assert_eq!(fs.inode_count(), 1);
}

#[test]
fn readdirplus_attributes_are_lookups_and_dirent_ino_is_attr_ino() {
    let base = tempfile::tempdir().unwrap();
    let p = base.path();
    std::fs::write(p.join("file"), vec![7u8; 1234]).unwrap();
    std::fs::hard_link(p.join("file"), p.join("hardlink")).unwrap();
    std::fs::create_dir(p.join("dir")).unwrap();
    std::os::unix::fs::symlink("file", p.join("symlink")).unwrap();
    mkfifo(&p.join("fifo"));
    let fs = passthrough(p, PassthroughConfig::default());
    let dir = Dir::open(&fs, ROOT);
    let plain = dir.read_to_end(false, 0, 4096).0;
    let plus = dir.read_to_end(true, 0, 4096).0;
    assert_eq!(names(&plain), names(&plus));
    assert_eq!(plus.len(), 7);
    for (e, d) in plus.iter().zip(&plain) {
        let a = e.plus.unwrap();
        assert_eq!(e.ino, a.ino, "{}: dirent ino is attr ino", e.name);
        assert_eq!(e.ino, d.ino, "{}: READDIRPLUS ino is READDIR's", e.name);
        assert_eq!(e.cookie, d.cookie, "{}: same cookie", e.name);
        assert_eq!(e.dtype, d.dtype, "{}: same type", e.name);
        if e.name == "." || e.name == ".." {
            // No lookup, no reference: node id 0.
            assert_eq!(a.nodeid, 0, "{}", e.name);
            assert_eq!(a.mode, libc::S_IFDIR, "{}", e.name);
            continue;
        }
        let l = lookup(&fs, ROOT, &e.name);
        assert_eq!(a.nodeid, l.nodeid, "{}", e.name);
        assert_eq!(
            (a.ino, a.mode, a.size),
            (l.attr.ino, l.attr.mode, l.attr.size),
            "{}: READDIRPLUS attributes are LOOKUP's",
            e.name
        );
        let md = std::fs::symlink_metadata(p.join(&e.name)).unwrap();
        assert_eq!((a.ino, a.mode, a.size), (md.ino(), md.mode(), md.size()));
    }
    let by_name: BTreeMap<_, _> = plus.iter().map(|e| (e.name.as_str(), e.plus)).collect();
    assert_eq!(by_name["file"].unwrap().size, 1234);
    // Hard links are one node.
    assert_eq!(
        by_name["file"].unwrap().nodeid,
        by_name["hardlink"].unwrap().nodeid
    );
    // 5 names listed and 5 looked up; "file" and "hardlink" share a node.
    assert_eq!(fs.lookup_refs(), 10);
    assert_eq!(fs.inode_count(), 5);
    forget_listed(&fs, &plus);
    for e in plus.iter().filter(|e| e.plus.unwrap().nodeid != 0) {
        fs.forget(&ctx(), e.plus.unwrap().nodeid, 1);
    }
    assert_eq!(fs.lookup_refs(), 0);
    assert_eq!(fs.inode_count(), 1);
    dir.release().unwrap();
}

#[test]
fn readdirplus_looks_names_up_in_the_directory_of_the_handle() {
    // A request whose node id is not its handle's (the kernel never sends
    // one, a fuzzer does): the names listed are those of the handle's
    // directory, and so must be the attributes that come with them.
    let base = tempfile::tempdir().unwrap();
    let p = base.path();
    std::fs::write(p.join("file"), b"1").unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    std::fs::write(p.join("sub/file"), b"22").unwrap();
    let fs = passthrough(p, PassthroughConfig::default());
    let sub = lookup(&fs, ROOT, "sub");
    let root = Dir::open(&fs, ROOT);
    let plain = root.read_to_end(false, 0, 4096).0;
    let skewed = Dir {
        fs: &fs,
        ino: sub.nodeid,
        fh: root.fh,
    };
    let plus = skewed.read_to_end(true, 0, 4096).0;
    assert_eq!(names(&plus), names(&plain));
    for (e, d) in plus.iter().zip(&plain) {
        assert_eq!(e.plus.unwrap().ino, d.ino, "{}: the listed file's", e.name);
    }
    let file = plus.iter().find(|e| e.name == "file").unwrap();
    assert_eq!(file.plus.unwrap().size, 1);
    forget_listed(&fs, &plus);
    fs.forget(&ctx(), sub.nodeid, 1);
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    root.release().unwrap();
}

#[test]
fn readdir_plain_leaves_lookup_counts_unchanged() {
    let (base, names, fs) = populated(200);
    let expected = with_dots(&names);
    let backing = backing_listing(base.path());
    let known = lookup(&fs, ROOT, "entry-00007-xxxxxxx");
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (1, 2));
    let dir = Dir::open(&fs, ROOT);
    for size in [100, 4096] {
        let (all, _) = dir.read_to_end(false, 0, size);
        assert_listing(&all, &expected, &backing, "plain");
        assert_eq!((fs.lookup_refs(), fs.inode_count()), (1, 2));
    }
    fs.forget(&ctx(), known.nodeid, 1);
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    dir.release().unwrap();
}

#[test]
fn readdirplus_keeps_one_reference_per_delivered_entry_until_forget() {
    let (base, names, fs) = populated(500);
    let expected = with_dots(&names);
    let backing = backing_listing(base.path());
    let known = lookup(&fs, ROOT, "entry-00007-xxxxxxx");
    let dir = Dir::open(&fs, ROOT);
    let mut listings = Vec::new();
    for _ in 0..2 {
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let batch = dir.read(true, offset, 1024).unwrap();
            let Some(last) = batch.last() else { break };
            offset = last.cookie;
            all.extend(batch);
            // Exactly one reference per entry handed out so far.
            let before: u64 = listings.iter().map(|l: &Vec<Listed>| counted(l)).sum();
            assert_eq!(fs.lookup_refs(), 1 + before + counted(&all));
        }
        assert_listing(&all, &expected, &backing, "readdirplus");
        assert_eq!(counted(&all), 500);
        listings.push(all);
    }
    assert_eq!(fs.lookup_refs(), 1001);
    assert_eq!(fs.inode_count(), 501);
    for all in &listings {
        forget_listed(&fs, all);
    }
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (1, 2));
    fs.forget(&ctx(), known.nodeid, 1);
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    dir.release().unwrap();
}

#[test]
fn readdirplus_entry_rejected_by_a_full_reply_is_released_at_once() {
    let base = tempfile::tempdir().unwrap();
    // Names of one length: every record is direntplus_size(3) = 160 bytes.
    let files: BTreeSet<String> = (0..50).map(|i| format!("f{i:02}")).collect();
    for f in &files {
        std::fs::write(base.path().join(f), b"").unwrap();
    }
    let expected = with_dots(&files);
    let backing = backing_listing(base.path());
    let rec = fuse_abi::direntplus_size(3);
    assert_eq!(fuse_abi::direntplus_size(1), rec);
    let fs = passthrough(base.path(), PassthroughConfig::default());
    // A reference held before: rejecting the entry drops only its own.
    let known = lookup(&fs, ROOT, "f10");
    let dir = Dir::open(&fs, ROOT);
    let mut all: Vec<Listed> = Vec::new();
    let mut offset = 0;
    loop {
        // Room for 3 records and most of a 4th: the 4th is looked up,
        // rejected and must be forgotten at once.
        let batch = dir.read(true, offset, 4 * rec - 1).unwrap();
        let Some(last) = batch.last() else { break };
        assert!(batch.len() <= 3);
        offset = last.cookie;
        all.extend(batch);
        assert_eq!(
            fs.lookup_refs(),
            1 + counted(&all),
            "references are the delivered entries' exactly"
        );
        let nodes: BTreeSet<u64> = all
            .iter()
            .filter_map(|e| e.plus.map(|p| p.nodeid))
            .chain([known.nodeid])
            .filter(|&n| n != 0)
            .collect();
        assert_eq!(fs.inode_count(), 1 + nodes.len(), "no inode left behind");
    }
    assert_listing(&all, &expected, &backing, "readdirplus");
    // A reply too small for any record, at a cookie followed by a file
    // (`.` and `..` come anywhere in a small ext4 directory: hash order).
    let at = (0..all.len() - 1)
        .find(|&i| all[i + 1].name.starts_with('f'))
        .unwrap();
    let file = all[at + 1].name.clone();
    let before = (fs.lookup_refs(), fs.inode_count());
    assert!(dir.read(true, all[at].cookie, rec - 1).unwrap().is_empty());
    assert_eq!((fs.lookup_refs(), fs.inode_count()), before);
    // ... and the entry it could not take comes with the next request.
    assert_eq!(dir.read(true, all[at].cookie, rec).unwrap()[0].name, file);
    assert_eq!(fs.lookup_refs(), before.0 + 1);
    fs.forget(&ctx(), lookup(&fs, ROOT, &file).nodeid, 2);
    forget_listed(&fs, &all);
    fs.forget(&ctx(), known.nodeid, 1);
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    dir.release().unwrap();
}

/// Empties and removes the backing directory `path`: its descriptors
/// stay open, and getdents64 on them fails with `ENOENT`.
fn remove_backing_dir(path: &Path) {
    for e in std::fs::read_dir(path).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    std::fs::remove_dir(path).unwrap();
}

#[test]
fn readdir_error_before_the_first_entry_fails_after_one_ends_the_reply() {
    let base = tempfile::tempdir().unwrap();
    let d = base.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let files: BTreeSet<String> = (0..10).map(|i| format!("f{i}")).collect();
    for f in &files {
        std::fs::write(d.join(f), b"").unwrap();
    }
    let backing = backing_listing(&d);
    let fs = passthrough(base.path(), PassthroughConfig::default());
    let sub = lookup(&fs, ROOT, "d");
    let dir = Dir::open(&fs, sub.nodeid);
    // Records of 32 bytes: the first reply takes 3 entries; the stream
    // holds the other 9, read with the same getdents64.
    let first = dir.read(false, 0, 96).unwrap();
    assert_eq!(first.len(), 3);
    remove_backing_dir(&d);
    // The 9 come, then getdents64 fails (ENOENT): the reply stands with them.
    let second = dir.read(false, first[2].cookie, 65536).unwrap();
    assert_eq!(
        second.len(),
        9,
        "the entries before the error are delivered"
    );
    let mut all = first.clone();
    all.extend(second.iter().cloned());
    assert_listing(&all, &with_dots(&files), &backing, "before the removal");
    // The next request fails before its first entry: the error is its reply.
    assert_eq!(
        errno_of(dir.read(false, second[8].cookie, 65536)),
        libc::ENOENT
    );
    assert_eq!(errno_of(dir.read(false, 0, 65536)), libc::ENOENT);
    dir.release().unwrap();
    fs.forget(&ctx(), sub.nodeid, 1);
    assert_eq!(fs.lookup_refs(), 0);
}

#[test]
fn readdirplus_error_before_the_first_entry_fails_after_one_ends_the_reply() {
    // With file handles (root) a lookup in the removed directory may fail
    // (the entry callback's error); with descriptors it is skipped as
    // gone and getdents64 fails. Either way the same contract holds.
    for file_handles in [false, true] {
        let base = tempfile::tempdir().unwrap();
        let d = base.path().join("d");
        std::fs::create_dir(&d).unwrap();
        for i in 0..10 {
            std::fs::write(d.join(format!("f{i}")), b"").unwrap();
        }
        let config = PassthroughConfig::default().file_handles(file_handles);
        let fs = passthrough(base.path(), config);
        let sub = lookup(&fs, ROOT, "d");
        let dir = Dir::open(&fs, sub.nodeid);
        // The later of `.` and `..` (not the first entry): the first reply
        // stops right before it, so that after the removal the stream
        // starts with an entry that needs no lookup.
        let order = names(&dir.read_to_end(false, 0, 4096).0);
        let k = order.iter().rposition(|n| n == "." || n == "..").unwrap();
        assert!(k >= 1);
        let rec = fuse_abi::direntplus_size(2);
        let first = dir.read(true, 0, k * rec).unwrap();
        assert_eq!(names(&first), order[..k]);
        forget_listed(&fs, &first);
        remove_backing_dir(&d);
        let second = dir.read(true, first[k - 1].cookie, 65536).unwrap();
        assert_eq!(
            names(&second),
            [order[k].clone()],
            "file_handles={file_handles}: the entry before the error is delivered"
        );
        // The next request fails before its first entry: the error is its
        // reply (which one is the backing file system's: ENOENT from
        // getdents64, ESTALE from a lookup by file handle, EINVAL from the
        // seek back to the cookie past the names skipped as gone).
        let r = dir.read(true, second[0].cookie, 65536);
        assert!(r.is_err(), "file_handles={file_handles}: {r:?}");
        assert_eq!(errno_of(dir.read(true, 0, 65536)), libc::ENOENT);
        assert_eq!(fs.lookup_refs(), 1, "only the lookup of d");
        dir.release().unwrap();
        fs.forget(&ctx(), sub.nodeid, 1);
        assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    }
}

#[test]
fn readdir_resumes_after_any_cookie_and_after_lseek() {
    let (_base, _, fs) = populated(300);
    let a = Dir::open(&fs, ROOT);
    let full = a.read_to_end(false, 0, 65536).0;
    let n = full.len();
    assert_eq!(n, 302);
    let key = |l: &[Listed]| -> Vec<(String, u64)> {
        l.iter().map(|e| (e.name.clone(), e.cookie)).collect()
    };
    for plus in [false, true] {
        // Back and forth on one handle: the cached position differs from
        // the cookie each time.
        for k in [150, 0, 1, 299, 2, n - 2, n - 1, 150] {
            let (rest, _) = a.read_to_end(plus, full[k].cookie, 1000);
            assert_eq!(key(&rest), key(&full[k + 1..]), "plus={plus} after #{k}");
            forget_listed(&fs, &rest);
        }
        // Part of a listing, then an earlier cookie and the start again.
        let part = a.read(plus, full[200].cookie, 1000).unwrap();
        assert_eq!(part[0].name, full[201].name);
        forget_listed(&fs, &part);
        let (rest, _) = a.read_to_end(plus, full[100].cookie, 1000);
        assert_eq!(key(&rest), key(&full[101..]), "plus={plus}");
        forget_listed(&fs, &rest);
        let (again, _) = a.read_to_end(plus, 0, 1000);
        assert_eq!(key(&again), key(&full), "plus={plus} rewound");
        forget_listed(&fs, &again);
        // A cookie of one handle on another.
        let b = Dir::open(&fs, ROOT);
        let (rest, _) = b.read_to_end(plus, full[37].cookie, 1000);
        assert_eq!(key(&rest), key(&full[38..]), "plus={plus} other handle");
        forget_listed(&fs, &rest);
        // LSEEK to a cookie, then the listing from there.
        for k in [10, 250, 0] {
            assert_eq!(
                b.lseek(full[k].cookie, libc::SEEK_SET).unwrap(),
                full[k].cookie
            );
            let (rest, _) = b.read_to_end(plus, full[k].cookie, 1000);
            assert_eq!(key(&rest), key(&full[k + 1..]), "plus={plus} lseek #{k}");
            forget_listed(&fs, &rest);
        }
        assert_eq!(b.lseek(0, libc::SEEK_SET).unwrap(), 0);
        let (all, _) = b.read_to_end(plus, 0, 1000);
        assert_eq!(key(&all), key(&full), "plus={plus} lseek to 0");
        forget_listed(&fs, &all);
        b.release().unwrap();
    }
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    a.release().unwrap();
}

#[test]
fn readdir_after_lseek_does_not_trust_the_cached_position() {
    // More entries than one getdents64 buffer (32 KiB) holds, so that a
    // listing reads the descriptor again after the stream's buffer ends.
    let (_base, _, fs) = populated(3000);
    let full = Dir::open(&fs, ROOT).read_to_end(false, 0, 65536).0;
    let key = |l: &[Listed]| -> Vec<(String, u64)> {
        l.iter().map(|e| (e.name.clone(), e.cookie)).collect()
    };
    for plus in [false, true] {
        for target in [0, full[1500].cookie, full.last().unwrap().cookie] {
            let dir = Dir::open(&fs, ROOT);
            let first = dir.read(plus, 0, 2048).unwrap();
            assert!(first.len() >= 5);
            let pos = first.last().unwrap().cookie;
            // The descriptor moves; the kernel then asks to continue at the
            // position the handle stood at before.
            assert_eq!(dir.lseek(target, libc::SEEK_SET).unwrap(), target);
            let (rest, _) = dir.read_to_end(plus, pos, 256 * 1024);
            let mut all = first.clone();
            all.extend(rest.iter().cloned());
            assert_eq!(
                key(&all),
                key(&full),
                "plus={plus}, lseek to {target:#x}: every entry once, in order"
            );
            forget_listed(&fs, &all);
            dir.release().unwrap();
        }
    }
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
}

#[test]
fn readdir_cookie_above_i64_max_is_the_end() {
    let (_base, _, fs) = populated(20);
    let dir = Dir::open(&fs, ROOT);
    let full = dir.read_to_end(false, 0, 4096).0;
    for plus in [false, true] {
        let first = dir.read(plus, 0, 400).unwrap();
        forget_listed(&fs, &first);
        let pos = first.last().unwrap().cookie;
        for offset in [i64::MAX as u64 + 1, u64::MAX - 1, u64::MAX] {
            assert!(dir.read(plus, offset, 4096).unwrap().is_empty());
            assert!(dir.read(!plus, offset, 4096).unwrap().is_empty());
        }
        // The stream was not moved by them.
        let (rest, _) = dir.read_to_end(plus, pos, 4096);
        assert_eq!(names(&rest), names(&full[first.len()..]), "plus={plus}");
        forget_listed(&fs, &rest);
    }
    assert_eq!(fs.lookup_refs(), 0);
    dir.release().unwrap();
}

#[test]
fn readdir_reports_the_type_of_files_directories_and_symlinks() {
    let base = tempfile::tempdir().unwrap();
    let p = base.path();
    std::fs::write(p.join("file"), b"x").unwrap();
    std::fs::create_dir(p.join("dir")).unwrap();
    std::os::unix::fs::symlink("file", p.join("symlink")).unwrap();
    std::os::unix::fs::symlink("nowhere", p.join("dangling")).unwrap();
    mkfifo(&p.join("fifo"));
    let want: BTreeMap<&str, u8> = [
        (".", libc::DT_DIR),
        ("..", libc::DT_DIR),
        ("file", libc::DT_REG),
        ("dir", libc::DT_DIR),
        ("symlink", libc::DT_LNK),
        ("dangling", libc::DT_LNK),
        ("fifo", libc::DT_FIFO),
    ]
    .into();
    let fs = passthrough(p, PassthroughConfig::default());
    let dir = Dir::open(&fs, ROOT);
    for plus in [false, true] {
        let (all, _) = dir.read_to_end(plus, 0, 4096);
        let got: BTreeMap<&str, u8> = all
            .iter()
            .map(|e| (e.name.as_str(), e.dtype as u8))
            .collect();
        assert_eq!(got, want, "plus={plus}");
        for e in all.iter().filter(|e| e.plus.is_some()) {
            let mode = e.plus.unwrap().mode;
            assert_eq!(mode & libc::S_IFMT, e.dtype << 12, "{}: mode", e.name);
        }
        forget_listed(&fs, &all);
    }
    assert_eq!(fs.lookup_refs(), 0);
    dir.release().unwrap();
}

#[test]
fn readdir_of_an_empty_directory_ends_at_once() {
    let base = tempfile::tempdir().unwrap();
    std::fs::create_dir(base.path().join("empty")).unwrap();
    let fs = passthrough(base.path(), PassthroughConfig::default());
    let sub = lookup(&fs, ROOT, "empty");
    let dir = Dir::open(&fs, sub.nodeid);
    for plus in [false, true] {
        // `.` and `..` in the first reply, nothing after them.
        let first = dir.read(plus, 0, 4096).unwrap();
        let got: BTreeSet<String> = names(&first).into_iter().collect();
        assert_eq!(got, with_dots(&BTreeSet::new()), "plus={plus}");
        let last = first.last().unwrap().cookie;
        assert!(dir.read(plus, last, 4096).unwrap().is_empty());
        assert!(dir.read(plus, last, 4096).unwrap().is_empty());
        // No entry carried a reference: only the lookup of the directory.
        assert_eq!(fs.lookup_refs(), 1);
    }
    dir.release().unwrap();
    // The root of an empty backing directory too.
    let empty = tempfile::tempdir().unwrap();
    let fs = passthrough(empty.path(), PassthroughConfig::default());
    let dir = Dir::open(&fs, ROOT);
    let (all, requests) = dir.read_to_end(true, 0, 4096);
    assert_eq!((all.len(), requests), (2, 2));
    assert_eq!(fs.lookup_refs(), 0);
    dir.release().unwrap();
}

#[test]
fn readdir_of_size_zero_touches_nothing() {
    let base = tempfile::tempdir().unwrap();
    let expected = with_dots(&populate(base.path(), 20));
    std::fs::write(base.path().join("probe"), b"").unwrap();
    let fs = passthrough(base.path(), PassthroughConfig::default());
    let dir = Dir::open(&fs, ROOT);
    let full = dir.read_to_end(false, 0, 4096).0;
    // A cookie followed by a file (that READDIRPLUS would look up).
    let at = (0..full.len() - 1)
        .find(|&i| full[i + 1].name.starts_with("entry"))
        .unwrap();
    let pos = dir.read(false, 0, 4096).unwrap()[2].cookie;
    for plus in [false, true] {
        let probe = lookup(&fs, ROOT, "probe").nodeid;
        fs.forget(&ctx(), probe, 1);
        for offset in [0, full[at].cookie, pos, full.last().unwrap().cookie] {
            assert!(dir.read(plus, offset, 0).unwrap().is_empty());
            assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
        }
        // No inode was made and dropped meanwhile: node ids are a counter,
        // and the next one is still the one after `probe`'s.
        let again = lookup(&fs, ROOT, "probe").nodeid;
        assert_eq!(again, probe + 1, "plus={plus}");
        fs.forget(&ctx(), again, 1);
        // The handle carries on where it stood.
        let (rest, _) = dir.read_to_end(plus, pos, 4096);
        assert_eq!(names(&rest), names(&full[3..]), "plus={plus}");
        forget_listed(&fs, &rest);
    }
    let mut all: BTreeSet<String> = names(&full).into_iter().collect();
    all.remove("probe");
    assert_eq!(all, expected);
    assert_eq!(fs.lookup_refs(), 0);
    dir.release().unwrap();
}

#[test]
fn readdir_with_no_readdir_succeeds_with_no_entries() {
    let base = tempfile::tempdir().unwrap();
    populate(base.path(), 10);
    let config = PassthroughConfig::default().no_readdir(true);
    let fs = passthrough(base.path(), config);
    let dir = Dir::open(&fs, ROOT);
    for plus in [false, true] {
        for offset in [0, 1, 12345] {
            assert!(dir.read(plus, offset, 4096).unwrap().is_empty());
        }
    }
    assert_eq!((fs.lookup_refs(), fs.inode_count()), (0, 1));
    // Names still resolve.
    let e = lookup(&fs, ROOT, "entry-00003-xxx");
    fs.forget(&ctx(), e.nodeid, 1);
    dir.release().unwrap();
    // A handle that isn't open is still an error.
    assert_eq!(errno_of(dir.read(false, 0, 4096)), libc::EBADF);
    assert_eq!(errno_of(dir.read(true, 0, 4096)), libc::EBADF);
}

#[test]
fn releasedir_drops_the_handle_and_its_position() {
    let (_base, _, fs) = populated(100);
    let dir = Dir::open(&fs, ROOT);
    let full = dir.read_to_end(false, 0, 4096).0;
    let part = dir.read(true, 0, 1024).unwrap();
    forget_listed(&fs, &part);
    assert_eq!(fs.handle_count(), 1);
    dir.release().unwrap();
    assert_eq!(fs.handle_count(), 0);
    for plus in [false, true] {
        assert_eq!(errno_of(dir.read(plus, 0, 4096)), libc::EBADF);
        assert_eq!(
            errno_of(dir.read(plus, part.last().unwrap().cookie, 4096)),
            libc::EBADF
        );
    }
    assert_eq!(errno_of(dir.lseek(0, libc::SEEK_SET)), libc::EBADF);
    assert_eq!(errno_of(dir.release()), libc::EBADF);
    // A new handle has a number of its own and starts at the beginning.
    let again = Dir::open(&fs, ROOT);
    assert_ne!(again.fh, dir.fh);
    let (all, _) = again.read_to_end(false, 0, 4096);
    assert_eq!(all, full);
    assert_eq!(errno_of(dir.read(false, 0, 4096)), libc::EBADF);
    again.release().unwrap();
    assert_eq!((fs.handle_count(), fs.lookup_refs()), (0, 0));
}
