//! Requests from other users: files they create belong to them, umask and
//! set-group-ID directories work as on the backing file system,
//! supplementary groups count, permissions are enforced, and set-user-ID
//! bits are cleared on write. Every test switches to other users, which
//! needs real root (or a full identity map in a user namespace): hence
//! `needs_root` in the names.

mod common;

use common::*;
use fuse_backend_passthrough::{KillPrivV2, PassthroughConfig};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;

/// `script` run by `sh` in `dir` as nobody (nogroup, no other group),
/// which must succeed.
fn nobody_ok(dir: &std::path::Path, script: &str) {
    run_as_ok(NOBODY, NOGROUP, &[NOGROUP], dir, script)
}

fn owner(t: &TestMount, name: &str) -> (u32, u32) {
    let m = lmeta(&t.s(name));
    (m.uid(), m.gid())
}

#[test]
fn files_created_by_other_users_belong_to_them_needs_root() {
    let t = TestMount::new();
    fs::create_dir(t.m("shared")).unwrap();
    chmod(&t.s("shared"), 0o777);
    nobody_ok(
        &t.m("shared"),
        "echo data > file && mkdir dir && mkfifo fifo && ln -s file link && ln file hard \
         && (umask 077; echo x > private; mkdir privdir)",
    );
    for name in ["file", "dir", "fifo", "link", "hard", "private", "privdir"] {
        assert_eq!(
            owner(&t, &format!("shared/{name}")),
            (NOBODY, NOGROUP),
            "{name}"
        );
        assert_same_meta(&t, &format!("shared/{name}"));
    }
    // The caller's umask was applied once (by the kernel), not twice.
    let mode = |n: &str| lmeta(&t.s(&format!("shared/{n}"))).mode() & 0o7777;
    assert_eq!(mode("file"), 0o644);
    assert_eq!(mode("dir"), 0o755);
    assert_eq!(mode("fifo"), 0o644);
    assert_eq!(mode("private"), 0o600);
    assert_eq!(mode("privdir"), 0o700);
    // Root's files still belong to root on the same (now switched) threads.
    fs::write(t.m("shared/root-file"), b"").unwrap();
    assert_eq!(owner(&t, "shared/root-file"), (0, 0));
    fs::create_dir(t.m("shared/root-dir")).unwrap();
    assert_eq!(owner(&t, "shared/root-dir"), (0, 0));
}

#[test]
fn setgid_directories_pass_their_group_on_needs_root() {
    let t = TestMount::new();
    fs::create_dir(t.m("sg")).unwrap();
    std::os::unix::fs::chown(t.m("sg"), None, Some(4242)).unwrap();
    fs::set_permissions(t.m("sg"), fs::Permissions::from_mode(0o2777)).unwrap();
    nobody_ok(&t.m("sg"), "touch f && mkdir d");
    assert_eq!(owner(&t, "sg/f"), (NOBODY, 4242));
    assert_eq!(owner(&t, "sg/d"), (NOBODY, 4242));
    assert_ne!(
        lmeta(&t.s("sg/d")).mode() & libc::S_ISGID,
        0,
        "subdirectory inherits setgid"
    );
    assert_same_meta(&t, "sg/d");
}

#[test]
fn supplementary_groups_count_needs_root() {
    let t = TestMount::new();
    // A directory only group 4242 may write to.
    fs::create_dir(t.m("g")).unwrap();
    std::os::unix::fs::chown(t.m("g"), Some(0), Some(4242)).unwrap();
    fs::set_permissions(t.m("g"), fs::Permissions::from_mode(0o770)).unwrap();
    run_as_ok(NOBODY, NOGROUP, &[NOGROUP, 4242], &t.m("g"), "touch mine");
    assert_eq!(owner(&t, "g/mine"), (NOBODY, NOGROUP));
    // chgrp to a group the caller is in, and not to another.
    run_as_ok(
        NOBODY,
        NOGROUP,
        &[NOGROUP, 4242],
        &t.m("g"),
        "chgrp 4242 mine",
    );
    assert_eq!(owner(&t, "g/mine"), (NOBODY, 4242));
    let out = run_as(
        NOBODY,
        NOGROUP,
        &[NOGROUP, 4242],
        &t.m("g"),
        "chgrp 4343 mine",
    );
    assert!(!out.status.success(), "chgrp to a foreign group must fail");
    assert_eq!(owner(&t, "g/mine"), (NOBODY, 4242));
    // Without the group: no access at all.
    let out = run_as(NOBODY, NOGROUP, &[NOGROUP], &t.mnt, "touch g/other");
    assert!(!out.status.success());
    assert!(!t.s("g/other").exists());
    // A thread switching between group sets gives each request its own.
    for _ in 0..3 {
        run_as_ok(
            NOBODY,
            NOGROUP,
            &[NOGROUP, 4242],
            &t.m("g"),
            "ls > /dev/null",
        );
        assert!(!run_as(NOBODY, NOGROUP, &[NOGROUP], &t.m("g"), "ls")
            .status
            .success());
    }
}

#[test]
fn permissions_are_enforced_for_other_users_needs_root() {
    let t = TestMount::new();
    fs::write(t.m("secret"), b"secret").unwrap();
    fs::set_permissions(t.m("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(t.m("public"), b"public").unwrap();
    fs::set_permissions(t.m("public"), fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_as(NOBODY, NOGROUP, &[NOGROUP], &t.mnt, "cat secret");
    assert!(!out.status.success());
    let out = run_as(NOBODY, NOGROUP, &[NOGROUP], &t.mnt, "cat public");
    assert_eq!(out.stdout, b"public");
    assert!(
        !run_as(NOBODY, NOGROUP, &[NOGROUP], &t.mnt, "echo x >> public")
            .status
            .success()
    );
    assert!(!run_as(NOBODY, NOGROUP, &[NOGROUP], &t.mnt, "rm -f public")
        .status
        .success());
    assert!(
        !run_as(NOBODY, NOGROUP, &[NOGROUP], &t.mnt, "chmod 777 public")
            .status
            .success()
    );
    assert_eq!(fs::read(t.s("public")).unwrap(), b"public");
    // Sticky directory: others' files can't be removed.
    fs::create_dir(t.m("tmp")).unwrap();
    fs::set_permissions(t.m("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    run_as_ok(1, 1, &[1], &t.m("tmp"), "touch daemons");
    assert!(
        !run_as(NOBODY, NOGROUP, &[NOGROUP], &t.m("tmp"), "rm -f daemons")
            .status
            .success()
    );
    assert!(t.s("tmp/daemons").exists());
    run_as_ok(1, 1, &[1], &t.m("tmp"), "rm daemons");
    assert!(!t.s("tmp/daemons").exists());
}

/// `d/prog` in a world-writable `d`, owned by nobody, mode 6775, made
/// through the mount.
fn setid_prog_of_nobody(t: &TestMount) {
    fs::create_dir(t.m("d")).unwrap();
    chmod(&t.s("d"), 0o777);
    fs::write(t.m("d/prog"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::chown(t.m("d/prog"), Some(NOBODY), Some(NOGROUP)).unwrap();
    fs::set_permissions(t.m("d/prog"), fs::Permissions::from_mode(0o6775)).unwrap();
}

fn setuid_cleared_on_write(config: PassthroughConfig) {
    let t = TestMount::with(config, test_options());
    setid_prog_of_nobody(&t);
    assert_eq!(lmeta(&t.s("d/prog")).mode() & 0o7777, 0o6775);
    run_as_ok(NOBODY, NOGROUP, &[NOGROUP], &t.m("d"), "echo more >> prog");
    // As on any Linux file system: a write by a non-root user clears
    // set-user-ID, and set-group-ID when the group may execute.
    assert_eq!(lmeta(&t.s("d/prog")).mode() & 0o7777, 0o0775);
    assert_same_meta(&t, "d/prog");
    // Root's write keeps them.
    fs::set_permissions(t.m("d/prog"), fs::Permissions::from_mode(0o6775)).unwrap();
    fs::write(t.m("d/prog"), b"root").unwrap();
    assert_eq!(lmeta(&t.s("d/prog")).mode() & 0o7777, 0o6775);
    // Truncation by the owner clears them too.
    run_as_ok(NOBODY, NOGROUP, &[NOGROUP], &t.m("d"), ": > prog");
    assert_eq!(lmeta(&t.s("d/prog")).mode() & 0o7777, 0o0775);
    // So does a write by someone who doesn't own the file: native Linux
    // lets it through and clears the bit.
    fs::write(t.m("d/roots"), b"x").unwrap();
    fs::set_permissions(t.m("d/roots"), fs::Permissions::from_mode(0o4777)).unwrap();
    run_as_ok(NOBODY, NOGROUP, &[NOGROUP], &t.m("d"), "echo more >> roots");
    assert_eq!(lmeta(&t.s("d/roots")).mode() & 0o7777, 0o0777);
    assert_eq!(fs::read(t.s("d/roots")).unwrap(), b"xmore\n");
}

#[test]
fn setuid_cleared_on_write_needs_root() {
    // The default (KillPrivV2::Auto) asks for killpriv_v2: no kernel
    // passthrough here.
    setuid_cleared_on_write(uncached());
}

test_support::test_cases! {
    setuid_cleared_on_write_by_the_kernel_needs_root =>
        setuid_cleared_on_write(uncached().killpriv_v2(KillPrivV2::Off));
    setuid_cleared_on_write_with_killpriv_v2_needs_root =>
        setuid_cleared_on_write(uncached().killpriv_v2(KillPrivV2::On));
}

/// The mode as `statx(STATX_MODE)` sees it: what `stat -c %A` asks for, so
/// the kernel answers from its attribute cache unless the mode itself was
/// invalidated (a write invalidates size and times only).
fn cached_mode(path: &std::path::Path) -> u32 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `statx` is plain integers, for which all zeroes is valid.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statx, both
    // live across the call.
    let r = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_MODE, &mut st) };
    assert_eq!(
        r,
        0,
        "statx {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    st.stx_mode as u32 & 0o7777
}

#[test]
fn cleared_setuid_is_seen_through_cached_attributes_needs_root() {
    // With killpriv_v2 the daemon clears set-user-ID on a WRITE, whose
    // reply carries no attributes: the mode the kernel cached (for a day
    // here) must be invalidated by a notification (xfstests generic/355).
    let config = PassthroughConfig::default()
        .cache(fuse_backend_passthrough::CachePolicy::Always)
        .killpriv_v2(KillPrivV2::On);
    let t = TestMount::with(config, test_options());
    setid_prog_of_nobody(&t);
    assert_eq!(cached_mode(&t.m("d/prog")), 0o6775);
    run_as_ok(NOBODY, NOGROUP, &[NOGROUP], &t.m("d"), "echo more >> prog");
    assert_eq!(lmeta(&t.s("d/prog")).mode() & 0o7777, 0o0775);
    assert_eq!(cached_mode(&t.m("d/prog")), 0o0775);
}

#[test]
fn writeback_write_only_files_of_other_users_needs_root() {
    let config = PassthroughConfig::default().writeback(true);
    let t = TestMount::with(config, test_options());
    fs::create_dir(t.m("d")).unwrap();
    chmod(&t.s("d"), 0o777);
    nobody_ok(&t.m("d"), "echo one > wo && chmod 200 wo && echo two >> wo");
    assert_eq!(fs::read(t.s("d/wo")).unwrap(), b"one\ntwo\n");
    assert_eq!(owner(&t, "d/wo"), (NOBODY, NOGROUP));
}

#[test]
fn chown_by_owner_and_utimes_by_writer_needs_root() {
    let t = TestMount::new();
    fs::create_dir(t.m("d")).unwrap();
    chmod(&t.s("d"), 0o777);
    nobody_ok(&t.m("d"), "touch mine && chmod 666 mine");
    // Another user with write permission may set the times to now, not
    // to a given time.
    run_as_ok(1, 1, &[1], &t.m("d"), "touch mine");
    assert!(!run_as(1, 1, &[1], &t.m("d"), "touch -d 2001-01-01 mine")
        .status
        .success());
    nobody_ok(&t.m("d"), "touch -d 2001-01-01 mine");
    assert_eq!(lmeta(&t.s("d/mine")).mtime(), 978307200);
    // Giving a file away needs root.
    assert!(
        !run_as(NOBODY, NOGROUP, &[NOGROUP], &t.m("d"), "chown 1 mine")
            .status
            .success()
    );
    assert_eq!(owner(&t, "d/mine"), (NOBODY, NOGROUP));
}

fn ftruncate_of_new_mode_0_file(config: PassthroughConfig) {
    let t = TestMount::with(config, test_options());
    fs::create_dir(t.m("d")).unwrap();
    chmod(&t.s("d"), 0o777);
    // truncate(1) creates the file (mode 0 under umask 777) and truncates
    // it through the descriptor it just opened: allowed, as below.
    nobody_ok(&t.m("d"), "umask 777; truncate -s 12345 f");
    let m = lmeta(&t.s("d/f"));
    assert_eq!((m.len(), m.mode() & 0o7777, m.uid()), (12345, 0, NOBODY));
}

test_support::test_cases! {
    ftruncate_of_new_mode_0_file_needs_root => ftruncate_of_new_mode_0_file(uncached());
    ftruncate_of_new_mode_0_file_zero_message_opens_needs_root =>
        ftruncate_of_new_mode_0_file(uncached().no_open(true).no_opendir(true));
}

/// A user who may write a set-user-ID and set-group-ID file but doesn't
/// own it truncates it, by path (`truncate(2)`) and through a descriptor
/// (`ftruncate(2)`, what `truncate -s` uses): as natively, the truncation
/// succeeds and clears both bits (the kernel sends the new size and the
/// cleared mode in one SETATTR). Checked against the same calls on the
/// backing directory.
fn setid_cleared_on_truncate_by_non_owner(config: PassthroughConfig) {
    let t = TestMount::with(config, test_options());
    fs::create_dir(t.m("d")).unwrap();
    chmod(&t.s("d"), 0o777);
    let scripts = [
        ("truncate -s 1 f", 1),
        ("perl -e 'truncate(\"f\", 2) or die \"truncate: $!\"'", 2),
        (
            "perl -e 'open(F, \"+<\", \"f\") or die \"open: $!\"; truncate(F, 3) or die \"ftruncate: $!\"'",
            3,
        ),
    ];
    for (script, size) in scripts {
        for (dir, what) in [(t.s("d"), "natively"), (t.m("d"), "through the mount")] {
            let f = dir.join("f");
            fs::write(&f, b"0123456789").unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
            assert_eq!(lmeta(&f).mode() & 0o7777, 0o6777);
            assert_eq!(lmeta(&f).uid(), 0);
            run_as_ok(NOBODY, NOGROUP, &[NOGROUP], &dir, script);
            let m = lmeta(&t.s("d/f"));
            assert_eq!(
                (m.len(), m.mode() & 0o7777),
                (size, 0o0777),
                "`{script}` {what}: the size changes and set-user-ID and set-group-ID are cleared"
            );
            fs::remove_file(&f).unwrap();
        }
    }
}

test_support::test_cases! {
    setid_cleared_on_truncate_by_non_owner_needs_root =>
        setid_cleared_on_truncate_by_non_owner(uncached());
    setid_cleared_on_truncate_by_the_kernel_needs_root =>
        setid_cleared_on_truncate_by_non_owner(uncached().killpriv_v2(KillPrivV2::Off));
    setid_cleared_on_truncate_by_non_owner_with_killpriv_v2_needs_root =>
        setid_cleared_on_truncate_by_non_owner(uncached().killpriv_v2(KillPrivV2::On));
}
