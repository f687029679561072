//! Directory listings through the mount, with and without READDIRPLUS:
//! large directories (every entry exactly once), resuming at telldir
//! positions, rewinding, entry types, and lookup counts after listings.
//! Needs root (CI runs as root).

mod common;

use common::*;
use fuse_backend_passthrough::PassthroughConfig;
use std::collections::{BTreeMap, HashSet};
use std::ffi::CStr;
use std::fs;
use std::path::Path;

/// Every entry of `dir` with libc's readdir (`.` and `..` included): name,
/// d_ino, d_type.
fn list(dir: &Path) -> Vec<(String, u64, u8)> {
    list_and_stat(dir, false)
}

/// Like [`list`]; with `stat`, each entry is also lstat'ed as it comes (as
/// `ls -l` does, which makes the kernel keep using READDIRPLUS).
fn list_and_stat(dir: &Path, stat: bool) -> Vec<(String, u64, u8)> {
    let p = c(dir);
    // SAFETY: valid path; the stream is closed below.
    let d = unsafe { libc::opendir(p.as_ptr()) };
    assert!(!d.is_null(), "opendir {}", dir.display());
    let mut out = Vec::new();
    loop {
        // SAFETY: valid stream.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry.
        let e = unsafe { &*e };
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr(e.d_name.as_ptr()) };
        let name = name.to_string_lossy().into_owned();
        if stat {
            lmeta(&dir.join(&name));
        }
        out.push((name, e.d_ino, e.d_type));
    }
    // SAFETY: valid stream.
    unsafe { libc::closedir(d) };
    out
}

fn readdir_config(plus: bool) -> PassthroughConfig {
    PassthroughConfig::default().readdirplus(plus)
}

fn large_directory(plus: bool) {
    let t = TestMount::with(readdir_config(plus), test_options());
    fs::create_dir(t.s("big")).unwrap();
    let n = 5000;
    for i in 0..n {
        // Names of varying lengths so records straddle request buffers.
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 37));
        fs::write(t.s("big").join(name), b"").unwrap();
    }
    let entries = list_and_stat(&t.m("big"), plus);
    let below = list(&t.s("big"));
    assert_eq!(entries.len(), n + 2);
    let mut seen = HashSet::new();
    for (name, _, _) in &entries {
        assert!(seen.insert(name.clone()), "{name} listed twice");
    }
    // Same names, inode numbers and types as below.
    let a: BTreeMap<_, _> = entries
        .iter()
        .map(|(n, i, t)| (n.clone(), (*i, *t)))
        .collect();
    let b: BTreeMap<_, _> = below
        .iter()
        .map(|(n, i, t)| (n.clone(), (*i, *t)))
        .collect();
    assert_eq!(a, b);
    if plus {
        assert!(
            t.count(fuse_abi::Opcode::Readdirplus) > 1,
            "several READDIRPLUS"
        );
        // Listing with readdirplus handed out entries: the kernel holds
        // them, or (when it already pruned those dentries, which it may do
        // at any time) gave them back with FORGET.
        let forgets = t.count(fuse_abi::Opcode::Forget) + t.count(fuse_abi::Opcode::BatchForget);
        assert!(
            t.fs.lookup_refs() > 0 || forgets > 0,
            "READDIRPLUS handed out no references"
        );
    } else {
        assert!(t.count(fuse_abi::Opcode::Readdir) > 1, "several READDIR");
        assert_eq!(t.count(fuse_abi::Opcode::Readdirplus), 0);
    }
    // std's iterator (a second open of the directory) agrees.
    assert_eq!(fs::read_dir(t.m("big")).unwrap().count(), n);
}

test_support::test_cases! {
    large_directory_each_entry_once_readdirplus => large_directory(true);
    large_directory_each_entry_once_plain_readdir => large_directory(false);
}

/// A first listing with a stat of each name (`ls -l`, `find`) holds the
/// new names' inodes by file handle without opening them: the descriptor
/// cache doesn't grow with the listing. What was listed then works
/// through the mount (each file opened by its handle when read). Needs
/// real root too (it drops the kernel's caches).
///
/// The source is a tmpfs of its own, filled before the mount: a file the
/// source watch saw change just as it was looked up is read again (and
/// opened), and other tests write on `/tmp`'s file system meanwhile.
fn first_listing_opens_nothing(plus: bool) {
    let (src, _tmpfs) = tmpfs_source("pt-first-listing-");
    fs::create_dir(src.join("d")).unwrap();
    let n = 400;
    for i in 0..n {
        fs::write(src.join(format!("d/f{i}")), format!("file {i}")).unwrap();
    }
    fs::create_dir(src.join("d/sub")).unwrap();
    fs::write(src.join("d/sub/inner"), b"inner").unwrap();
    std::os::unix::fs::symlink("f7", src.join("d/link")).unwrap();
    let t = TestMount::of_source(&src, readdir_config(plus), test_options());
    assert!(
        t.fs.uses_file_handles(),
        "inodes held by descriptor: {:?}",
        t.fs.file_handle_fallback()
    );
    // The directory itself is opened (to be listed): counted before.
    lmeta(&t.m("d"));
    let before = t.fs.cached_fds();
    let opens = t.fs.handle_opens();
    let lookups = t.count(fuse_abi::Opcode::Lookup);
    // Counts what the kernel holds (watched files): no cache drop of
    // another test meanwhile.
    let keep = kernel_keeps();
    // lstat(2) as `find` and `ls -l` do: basic attributes, which the
    // kernel has from the lookup (Rust's metadata asks for the birth time
    // too, which costs a STATX request each).
    let names: Vec<String> = list(&t.m("d")).into_iter().map(|e| e.0).collect();
    assert_eq!(names.len(), n + 4);
    for name in &names {
        let p = c(&t.m("d").join(name));
        // SAFETY: stat is plain data; a NUL-terminated path.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `st` is valid for writes.
        assert_eq!(unsafe { libc::lstat(p.as_ptr(), &mut st) }, 0, "{name}");
    }
    let opened = t.fs.cached_fds().saturating_sub(before);
    assert!(
        opened <= 4,
        "a first listing of {} names opened {opened} of them",
        n + 2
    );
    if !plus {
        assert!(t.count(fuse_abi::Opcode::Lookup) - lookups >= n as u64);
    }
    // Watched by inode number: no entry of the watch's own per file.
    let watch = t.fs.source_watch_stats();
    assert!(watch.watched_by_number >= n, "{watch:?}");
    drop(keep);
    // A change behind the mount's back (by another process: the daemon
    // here is this process, whose changes the watch takes for its own)
    // still shows: the size the lstat above cached, for long, goes.
    let status = test_support::command("sh")
        .arg("-c")
        .arg("printf 'changed behind' > d/f3")
        .current_dir(&src)
        .status()
        .expect("running sh");
    assert!(status.success());
    let size = || {
        let p = c(&t.m("d/f3"));
        // SAFETY: stat is plain data; a NUL-terminated path.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `st` is valid for writes.
        assert_eq!(unsafe { libc::lstat(p.as_ptr(), &mut st) }, 0);
        st.st_size
    };
    assert!(
        wait_until(std::time::Duration::from_secs(30), || size() == 14),
        "a change of a file watched by number didn't show: size {}, {:?}",
        size(),
        t.fs.source_watch_stats()
    );
    // Nor does forgetting them (a file watched through the filesystem-wide
    // mark has no mark of its own to remove).
    assert_refs_return_to_zero(&t.fs);
    let opened = t.fs.handle_opens() - opens;
    assert!(
        opened <= 4,
        "listing and forgetting {} names opened {opened}",
        n + 2
    );
    for i in (0..n).filter(|&i| i != 3) {
        assert_eq!(
            fs::read_to_string(t.m(&format!("d/f{i}"))).unwrap(),
            format!("file {i}")
        );
    }
    assert_eq!(fs::read_link(t.m("d/link")).unwrap(), Path::new("f7"));
    assert_eq!(fs::read(t.m("d/link")).unwrap(), b"file 7");
    assert_eq!(fs::read(t.m("d/sub/inner")).unwrap(), b"inner");
}

test_support::test_cases! {
    first_listing_opens_nothing_needs_file_handles_readdirplus => first_listing_opens_nothing(true);
    first_listing_opens_nothing_needs_file_handles_plain_readdir => first_listing_opens_nothing(false);
}

/// A listing whose replies are shared out to listing helpers
/// (`PassthroughConfig::listing_threads`) holds what one thread alone
/// lists: every name once, the source's inode numbers and types, the
/// attributes of each, and one lookup reference per entry the kernel got
/// (they all come back with its FORGETs). Needs real root (it drops the
/// kernel's caches).
fn listing_shared_out(threads: usize) {
    let t = TestMount::with(
        readdir_config(true).listing_threads(threads),
        test_options(),
    );
    let keep = kernel_keeps();
    let n = 3000;
    fs::create_dir(t.s("d")).unwrap();
    for i in 0..n {
        // Names of varying lengths: shares end at other places in each
        // reply, and records straddle the stream's buffer.
        let name = format!("f{i:04}-{}", "y".repeat(i % 41));
        fs::write(t.s("d").join(name), vec![b'x'; i % 7]).unwrap();
    }
    let entries = list_and_stat(&t.m("d"), true);
    assert_eq!(entries.len(), n + 2);
    let a: BTreeMap<_, _> = entries
        .iter()
        .map(|(n, i, t)| (n.clone(), (*i, *t)))
        .collect();
    let b: BTreeMap<_, _> = list(&t.s("d"))
        .into_iter()
        .map(|(n, i, t)| (n, (i, t)))
        .collect();
    let differ: Vec<_> = b
        .iter()
        .filter(|(k, v)| a.get(*k) != Some(*v))
        .take(5)
        .collect();
    assert!(
        a.len() == b.len() && differ.is_empty(),
        "names, inode numbers and types as in the source; these differ: {differ:?}"
    );
    for (name, _, _) in entries.iter().filter(|e| !e.0.starts_with('.')) {
        assert_same_meta(&t, &format!("d/{name}"));
    }
    assert!(
        t.fs.lookup_refs() >= n as u64,
        "a reference per listed file: {}",
        t.fs.lookup_refs()
    );
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if threads > 1 && cpus > 1 {
        assert!(t.fs.listing_helpers() > 0, "the replies were shared out");
    } else {
        assert_eq!(
            t.fs.listing_helpers(),
            0,
            "{threads} thread(s), {cpus} CPU(s): no helpers"
        );
    }
    drop(keep);
    assert_refs_return_to_zero(&t.fs);
}

test_support::test_cases! {
    listing_shared_out_by_two_threads_needs_root => listing_shared_out(2);
    listing_shared_out_by_four_threads_needs_root => listing_shared_out(4);
    listing_on_the_serving_thread_alone_needs_root => listing_shared_out(1);
}

#[test]
fn readdirplus_lookup_counts_return_to_zero_needs_root() {
    // (Dropping the kernel's caches needs real root.)
    let t = TestMount::with(readdir_config(true), test_options());
    // Counts what the kernel holds: no cache drop of another test meanwhile.
    let keep = kernel_keeps();
    for i in 0..3000 {
        fs::write(t.s(&format!("f{i}")), b"").unwrap();
    }
    assert_eq!(list_and_stat(&t.mnt, true).len(), 3002);
    assert!(t.fs.lookup_refs() >= 3000);
    drop(keep);
    assert_refs_return_to_zero(&t.fs);
}

#[test]
fn telldir_seekdir_and_rewind_resume_exactly() {
    for plus in [true, false] {
        let t = TestMount::with(readdir_config(plus), test_options());
        for i in 0..1500 {
            fs::write(t.s(&format!("f{i}")), b"").unwrap();
        }
        let p = c(&t.mnt);
        // SAFETY: valid path and stream throughout; closed at the end.
        unsafe {
            let d = libc::opendir(p.as_ptr());
            assert!(!d.is_null());
            let next = |d: *mut libc::DIR| -> Option<String> {
                let e = libc::readdir(d);
                (!e.is_null()).then(|| {
                    CStr::from_ptr((*e).d_name.as_ptr())
                        .to_string_lossy()
                        .into_owned()
                })
            };
            for _ in 0..700 {
                next(d).unwrap();
            }
            let pos = libc::telldir(d);
            let after: Vec<String> = (0..300).map(|_| next(d).unwrap()).collect();
            // Jump back to the saved position: the same entries follow.
            libc::seekdir(d, pos);
            let again: Vec<String> = (0..300).map(|_| next(d).unwrap()).collect();
            assert_eq!(after, again, "plus={plus}");
            // Rewind: everything again, once.
            libc::rewinddir(d);
            let mut all = HashSet::new();
            while let Some(n) = next(d) {
                assert!(all.insert(n));
            }
            assert_eq!(all.len(), 1502);
            libc::closedir(d);
        }
    }
}

#[test]
fn entries_present_throughout_a_changing_listing_appear_once() {
    let t = TestMount::new();
    for i in 0..2000 {
        fs::write(t.s(&format!("old{i}")), b"").unwrap();
    }
    let p = c(&t.mnt);
    let mut seen = Vec::new();
    // SAFETY: valid path and stream; closed at the end.
    unsafe {
        let d = libc::opendir(p.as_ptr());
        assert!(!d.is_null());
        let mut k = 0;
        loop {
            let e = libc::readdir(d);
            if e.is_null() {
                break;
            }
            seen.push(
                CStr::from_ptr((*e).d_name.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            );
            k += 1;
            if k % 100 == 0 {
                fs::write(t.m(&format!("new{k}")), b"").unwrap();
            }
        }
        libc::closedir(d);
    }
    let olds: Vec<_> = seen.iter().filter(|n| n.starts_with("old")).collect();
    let unique: HashSet<_> = olds.iter().collect();
    assert_eq!(olds.len(), 2000);
    assert_eq!(unique.len(), 2000);
}

#[test]
fn entry_types_match_backing() {
    for plus in [true, false] {
        let t = TestMount::with(readdir_config(plus), test_options());
        fs::write(t.m("file"), b"").unwrap();
        fs::create_dir(t.m("dir")).unwrap();
        std::os::unix::fs::symlink("file", t.m("link")).unwrap();
        let fifo = c(&t.m("fifo"));
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let mut a = list(&t.mnt);
        let mut b = list(&t.src);
        a.sort();
        b.sort();
        assert_eq!(a, b, "plus={plus}");
        assert!(a.iter().any(|(n, _, _)| n == "."));
        assert!(a.iter().any(|(n, _, _)| n == ".."));
        // An empty directory lists . and .. only.
        assert_eq!(list(&t.m("dir")).len(), 2);
    }
}

/// Under `CachePolicy::Never` the entry timeout is 0: READDIRPLUS is not
/// offered (the kernel would drop its entries at once) and listings are
/// READDIRs; an entry timeout set above 0 brings READDIRPLUS back.
#[test]
fn no_readdirplus_while_names_are_not_cached() {
    use fuse_backend_passthrough::CachePolicy;
    use std::time::Duration;
    for (entry_timeout, plus) in [(None, false), (Some(Duration::from_secs(1)), true)] {
        let cfg = PassthroughConfig::default()
            .cache(CachePolicy::Never)
            .entry_timeout(entry_timeout);
        let t = TestMount::with(cfg, test_options());
        fs::create_dir(t.s("d")).unwrap();
        for i in 0..50 {
            fs::write(t.s("d").join(format!("f{i}")), b"").unwrap();
        }
        assert_eq!(list_and_stat(&t.m("d"), true).len(), 52);
        let (readdirs, pluses) = (
            t.count(fuse_abi::Opcode::Readdir),
            t.count(fuse_abi::Opcode::Readdirplus),
        );
        if plus {
            assert!(
                pluses > 0,
                "entry timeout {entry_timeout:?}: no READDIRPLUS"
            );
        } else {
            assert!(readdirs > 0, "no READDIR");
            assert_eq!(pluses, 0, "READDIRPLUS with an entry timeout of 0");
        }
    }
}
