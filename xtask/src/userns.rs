//! `cargo xtask test-in-userns`: the workspace's tests without real root.
//!
//! The tests run inside a new user namespace with its own mount namespace
//! (util-linux `unshare --user --mount`), where the test process is root of
//! the namespace and may mount FUSE file systems (`/dev/fuse` with
//! `mount(2)`), while nothing it mounts is visible outside. The mount
//! namespace is a slave of the host's (`--propagation slave`): an unmount
//! on the host reaches it, so it never keeps another program's FUSE mount
//! (and that mount's daemon) alive after the host unmounted it.
//!
//! Every test binary runs (`cargo test --no-fail-fast`), and the run ends
//! with the counts of all of them and every failed test with its binary.
//!
//! Some tests cannot pass there: creating device nodes is EPERM in any user
//! namespace, and switching to other uids needs more than one mapped uid. By
//! convention a test whose name contains `needs_root` needs real root, one
//! whose name contains `needs_file_handles` needs `open_by_handle_at`
//! (`CAP_DAC_READ_SEARCH` in the initial user namespace), and
//! one whose name starts with `vm_` needs the Linux 7.3 kernel that `cargo
//! xtask test-in-vm` boots; such tests are listed and counted as skipped with
//! their reason (`--skip needs_root --skip vm_`), never silently passed.
//!
//! fuse-abi's layout test reads the Linux 7.3 `fuse.h`: as `cargo xtask test`
//! does, the run sets `FUSE_ABI_REFERENCE_H` to the header found next to the
//! workspace (`../shared/reference/`), cached under `target/` by an earlier
//! run, or downloaded from Debian's `linux-libc-dev` (which needs root); a
//! `FUSE_ABI_REFERENCE_H` already set is kept.
//!
//! Run as real root, it first mounts fusectl and turns FUSE over io_uring on
//! in the host, as `cargo xtask test`'s setup step does: a user namespace can
//! do neither, and tests read fusectl's connection directories and mount
//! over io_uring.
//!
//! The uid/gid mapping, best first:
//! - `full` as real root: the parent writes `0 0 65536` into the child's
//!   `uid_map` and `gid_map` (an identity map of uids 0-65535);
//! - `full` as a user: `newuidmap`/`newgidmap` (apt package `uidmap`) map 0 to
//!   the user and 1-65535 to the user's range in `/etc/subuid` and `/etc/subgid`;
//! - `root`: `unshare --map-root-user`, only root is mapped (tests that switch
//!   to other users fail there).

use crate::test::TestRun;
use crate::test::{print_failed, run_tests, Echo};
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Arguments of `cargo xtask test-in-userns`.
#[derive(clap::Args)]
pub struct UsernsArgs {
    /// Test only this package (repeatable); the whole workspace by default.
    #[arg(long = "package", short = 'p', value_name = "NAME")]
    packages: Vec<String>,
    /// uid/gid mapping: `auto` (full if possible, else root), `full`
    /// (65536 ids; fails if impossible) or `root` (only root mapped).
    #[arg(long, value_enum, default_value_t = MapChoice::Auto)]
    map: MapChoice,
    /// Passed to the test binaries as `--test-threads N`.
    #[arg(long, value_name = "N")]
    test_threads: Option<usize>,
    /// Stop at the first failing test binary (by default every binary runs
    /// and all failures are listed at the end).
    #[arg(long)]
    fail_fast: bool,
    /// Extra arguments for the test binaries (after `--`), e.g. a name filter.
    #[arg(last = true, value_name = "TEST_ARGS")]
    test_args: Vec<String>,
}

/// The mapping asked for on the command line.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MapChoice {
    /// A full map if one is possible, else root only.
    Auto,
    /// A full map (uids and gids 0-65535), or an error.
    Full,
    /// Only root (`unshare --map-root-user`).
    Root,
}

/// The marker in a test's name that says it needs real root.
const NEEDS_ROOT: &str = "needs_root";

/// Tests that cannot run in the namespace: the marker in their names (as
/// libtest's `--skip` matches it: anywhere in the name) and why, in the
/// order a test is counted (once, under the first marker it carries).
const SKIPPED: &[(&str, &str)] = &[
    (NEEDS_ROOT, "needs real root"),
    (
        "needs_file_handles",
        "needs file handles (CAP_DAC_READ_SEARCH in the initial user namespace)",
    ),
    ("vm_", "needs Linux 7.3, run by cargo xtask test-in-vm"),
];

/// How many ids a full map covers.
const FULL_RANGE: u32 = 65536;

/// A uid/gid mapping that can be set up here.
enum Mapping {
    /// We are real root: write `0 0 65536` into the child's maps ourselves.
    IdentityAsRoot,
    /// Through the setuid helpers newuidmap/newgidmap: 0 is the user, 1.. the
    /// user's subordinate ranges.
    Subordinate(SubordinateMap),
    /// `unshare --map-root-user`: 0 is the user, nothing else is mapped.
    RootOnly,
}

/// The ids a newuidmap/newgidmap mapping maps.
struct SubordinateMap {
    /// Our uid (mapped to 0).
    uid: u32,
    /// Our gid (mapped to 0).
    gid: u32,
    /// First subordinate uid (mapped to 1).
    subuid: u32,
    /// First subordinate gid (mapped to 1).
    subgid: u32,
    /// How many ids the map covers in all (1 + subordinate ones).
    count: u32,
}

impl Mapping {
    /// What the mapping is, for the log.
    fn describe(&self) -> String {
        match self {
            Mapping::IdentityAsRoot => {
                format!("full identity map `0 0 {FULL_RANGE}` (written by the parent, which is root)")
            }
            Mapping::Subordinate(m) => format!(
                "full map through newuidmap/newgidmap: 0 -> uid {}/gid {}, \
                 1-{} -> subordinate uids {}.. and gids {}..",
                m.uid,
                m.gid,
                m.count - 1,
                m.subuid,
                m.subgid
            ),
            Mapping::RootOnly => {
                "root-only map (`unshare --map-root-user`): tests that switch to other users will fail"
                    .to_string()
            }
        }
    }
}

/// Runs the suite in a user namespace; on failure prints a one-line reason
/// and exits with status 1.
pub fn run(args: &UsernsArgs) -> Result<()> {
    crate::exit_on_error("error: ", run_inner(args))
}

/// The body of [`run`].
fn run_inner(args: &UsernsArgs) -> Result<()> {
    let root = crate::workspace_root();
    let mapping = choose_mapping(args.map)?;

    // Found (or fetched) outside the namespace, where apt can run.
    let reference_h = reference_header(&root);

    // What the tests need of the host that a user namespace can't set up:
    // fusectl (its connection directories: fusectl can't be mounted in a
    // user namespace) and FUSE over io_uring. As real root, set up here as
    // `cargo xtask test`'s setup step does; else said, and the tests that
    // need them fail naming what is missing.
    println!("==> the host: fusectl and FUSE over io_uring");
    if crate::test::is_root() {
        crate::test::mount_fusectl();
        if let Err(e) = crate::test::enable_fuse_uring() {
            println!("note: FUSE over io_uring stays off: {e:#}");
        }
    } else {
        println!(
            "not root: fusectl and FUSE over io_uring left as they are (tests that need \
             them fail saying so; `cargo xtask test --only setup` as root sets them up)"
        );
    }

    // Build and list outside the namespace, as the calling user.
    println!("==> listing tests that cannot run in a user namespace");
    let skipped = list_skipped(args, &root)?;
    for (name, reason) in &skipped {
        println!("skipped ({reason}): {name}");
    }
    println!("{} tests will be skipped", skipped.len());

    println!("==> running the tests in a user namespace");
    println!("mapping: {}", mapping.describe());
    let mut test = cargo_test(args);
    if let Some(header) = &reference_h {
        test.env("FUSE_ABI_REFERENCE_H", header);
    }
    for (marker, _) in SKIPPED {
        test.arg("--skip").arg(marker);
    }
    if let Some(n) = args.test_threads {
        test.arg(format!("--test-threads={n}"));
    }
    test.args(&args.test_args);
    let run = run_in_userns(&mapping, &test, &root)?;
    let c = run.report.counts;

    println!("\n==> summary (user namespace)");
    println!(
        "tests: {} passed, {} failed, {} ignored; {} skipped here{}",
        c.passed,
        c.failed,
        c.skipped,
        skipped.len(),
        if skipped.is_empty() {
            String::new()
        } else {
            format!(" (listed above): {}", skip_counts(&skipped))
        }
    );
    print_failed(&run.report.failed);
    let status = run.status.expect("no watchdog: the run has a status");
    if !status.success() {
        bail!(
            "the tests failed inside the user namespace ({status}; {} failed{})",
            run.report.failed.len(),
            if run.report.failed.is_empty() {
                ""
            } else {
                ", listed above"
            }
        );
    }
    Ok(())
}

/// The Linux 7.3 `fuse.h` for fuse-abi's layout test, found as `cargo
/// xtask test` finds it ([`crate::test::kernel_7_3_fuse_h`]); `None` when
/// `FUSE_ABI_REFERENCE_H` is already set (it is passed on as it is) or no
/// header can be had (the reason is printed; the layout test then fails
/// with its own).
fn reference_header(root: &Path) -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("FUSE_ABI_REFERENCE_H") {
        println!("header: {} (FUSE_ABI_REFERENCE_H)", Path::new(&h).display());
        return None;
    }
    match crate::test::kernel_7_3_fuse_h(root) {
        Ok(header) => Some(header),
        Err(e) => {
            println!(
                "no Linux 7.3 fuse.h for fuse-abi's layout test ({}); it will fail",
                format!("{e:#}").replace('\n', " ")
            );
            None
        }
    }
}

/// `cargo test` for the selected packages, up to and including the `--`.
fn cargo_test(args: &UsernsArgs) -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.arg("test");
    if !args.fail_fast {
        cmd.arg("--no-fail-fast");
    }
    if args.packages.is_empty() {
        cmd.arg("--workspace");
    }
    for p in &args.packages {
        cmd.arg("--package").arg(p);
    }
    cmd.arg("--");
    cmd
}

/// Builds the tests and lists those the run skips ([`SKIPPED`]), each
/// with its reason.
fn list_skipped(args: &UsernsArgs, root: &Path) -> Result<Vec<(String, &'static str)>> {
    let mut cmd = cargo_test(args);
    cmd.arg("--list").args(&args.test_args).current_dir(root);
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test -- --list")?;
    if !out.status.success() {
        bail!("`cargo test -- --list` failed ({})", out.status);
    }
    Ok(filter_skipped(&String::from_utf8_lossy(&out.stdout)))
}

/// The test names in libtest `--list` output (`NAME: test`) that carry a
/// marker of [`SKIPPED`], each with the reason of its first marker.
fn filter_skipped(list: &str) -> Vec<(String, &'static str)> {
    list.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter_map(|name| {
            let (_, reason) = SKIPPED.iter().find(|(m, _)| name.contains(m))?;
            Some((name.to_string(), *reason))
        })
        .collect()
}

/// `N needs real root, M needs the Linux 7.3 kernel ...`: how many
/// skipped tests there are for each reason, in [`SKIPPED`]'s order.
fn skip_counts(skipped: &[(String, &str)]) -> String {
    SKIPPED
        .iter()
        .map(|(_, reason)| (skipped.iter().filter(|(_, r)| r == reason).count(), reason))
        .filter(|(n, _)| *n > 0)
        .map(|(n, reason)| format!("{n} {reason}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Picks the best mapping allowed by `choice` and this machine.
fn choose_mapping(choice: MapChoice) -> Result<Mapping> {
    if choice == MapChoice::Root {
        return Ok(Mapping::RootOnly);
    }
    // SAFETY: getuid/getgid/geteuid cannot fail and have no preconditions.
    let (euid, uid, gid) = unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) };
    if euid == 0 {
        return Ok(Mapping::IdentityAsRoot);
    }
    let why_not = match subordinate_mapping(uid, gid) {
        Ok(m) => return Ok(m),
        Err(e) => format!("{e:#}"),
    };
    if choice == MapChoice::Full {
        bail!("no full uid/gid map possible: {why_not}");
    }
    println!("note: no full uid/gid map ({why_not}); mapping only root");
    Ok(Mapping::RootOnly)
}

/// A newuidmap/newgidmap mapping for a user, if the helpers and the
/// user's `/etc/subuid` and `/etc/subgid` entries are there.
fn subordinate_mapping(uid: u32, gid: u32) -> Result<Mapping> {
    for helper in ["newuidmap", "newgidmap"] {
        if find_on_path(helper).is_none() {
            bail!("{helper} not found (apt package uidmap)");
        }
    }
    let name = user_name(uid);
    let (subuid, ucount) = subordinate_range("/etc/subuid", uid, name.as_deref())?;
    let (subgid, gcount) = subordinate_range("/etc/subgid", uid, name.as_deref())?;
    let count = 1 + ucount.min(gcount).min(FULL_RANGE - 1);
    if count < FULL_RANGE {
        println!("note: subordinate ranges hold only {} ids", count - 1);
    }
    Ok(Mapping::Subordinate(SubordinateMap {
        uid,
        gid,
        subuid,
        subgid,
        count,
    }))
}

/// The user's first range (start, count) in `/etc/subuid` or `/etc/subgid`,
/// whose lines are `NAME_OR_UID:START:COUNT`.
fn subordinate_range(file: &str, uid: u32, name: Option<&str>) -> Result<(u32, u32)> {
    let text = fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    let uid = uid.to_string();
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (who, start, count) = (f.next()?, f.next()?, f.next()?);
            let mine = who == uid || Some(who) == name;
            mine.then(|| Some((start.parse().ok()?, count.parse().ok()?)))
                .flatten()
        })
        .find(|&(_, count): &(u32, u32)| count > 0)
        .with_context(|| format!("no entry for this user in {file}"))
}

/// The user name of `uid` from `/etc/passwd`, if listed there.
fn user_name(uid: u32) -> Option<String> {
    let text = fs::read_to_string("/etc/passwd").ok()?;
    let uid = uid.to_string();
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid).then(|| f[0].to_string())
    })
}

/// Searches PATH for a program.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `inner` (a `cargo test` command line: program and args) in a new
/// user and mount namespace with the given mapping; returns how it ended
/// and what it printed.
fn run_in_userns(mapping: &Mapping, inner: &Command, dir: &Path) -> Result<TestRun> {
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--mount", "--propagation", "slave"])
        .current_dir(dir);
    // The shell shows the maps as seen from inside, then execs `inner`.
    let show = r#"echo "inside: uid_map $(xargs </proc/self/uid_map), gid_map $(xargs </proc/self/gid_map)" && exec "$@""#;
    let needs_parent = !matches!(mapping, Mapping::RootOnly);
    if needs_parent {
        // The child waits until we have written its maps.
        cmd.args(["--", "sh", "-c"])
            .arg(format!(r#"read -r go && [ "$go" = go ] && {show}"#))
            .stdin(Stdio::piped());
    } else {
        cmd.args(["--map-root-user", "--", "sh", "-c", show]);
    }
    cmd.arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args());
    // `inner`'s environment (FUSE_ABI_REFERENCE_H) goes through unshare and
    // the shell to it.
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    run_tests(&mut cmd, Echo::Stdout, None, |child| {
        if !needs_parent {
            return Ok(());
        }
        // On an error run_tests ends the child (ours, not yet waited for).
        let pid = child.id();
        wait_for_userns(child, pid)?;
        write_maps(mapping, pid)?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(b"go\n")
            .context("releasing the namespaced child")?;
        Ok(())
    })
}

/// Waits until the child (`unshare`, not yet waited for, so `pid` is still
/// ours) is in a user namespace other than ours.
fn wait_for_userns(child: &mut std::process::Child, pid: u32) -> Result<()> {
    let ours = fs::read_link("/proc/self/ns/user").context("reading /proc/self/ns/user")?;
    let theirs = format!("/proc/{pid}/ns/user");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("unshare exited before creating the namespace ({status})");
        }
        if fs::read_link(&theirs).is_ok_and(|ns| ns != ours) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("unshare did not create a user namespace within 10 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Writes the child's uid and gid maps.
fn write_maps(mapping: &Mapping, pid: u32) -> Result<()> {
    match *mapping {
        Mapping::IdentityAsRoot => {
            for file in ["uid_map", "gid_map"] {
                let path = format!("/proc/{pid}/{file}");
                fs::write(&path, format!("0 0 {FULL_RANGE}\n"))
                    .with_context(|| format!("writing {path}"))?;
            }
            Ok(())
        }
        Mapping::Subordinate(ref m) => {
            let ids = [
                ("newuidmap", m.uid, m.subuid),
                ("newgidmap", m.gid, m.subgid),
            ];
            for (helper, id, sub) in ids {
                let status = Command::new(helper)
                    .arg(pid.to_string())
                    .args(["0", &id.to_string(), "1"])
                    .args(["1", &sub.to_string(), &(m.count - 1).to_string()])
                    .status()
                    .with_context(|| format!("running {helper}"))?;
                if !status.success() {
                    bail!("{helper} failed ({status})");
                }
            }
            Ok(())
        }
        Mapping::RootOnly => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_skipped_tests_from_list_output() {
        let list = "a::plain: test\nb::mknod_needs_root: test\nsrc/lib.rs - x (line 3): test\n\
                    c::needs_root_chown: test\nvm_pools: test\nd::vm_bufs_needs_root: test\n\
                    e::crashes_needs_file_handles: test\n\
                    \n3 tests, 0 benchmarks\n";
        let skipped = filter_skipped(list);
        let names: Vec<_> = skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "b::mknod_needs_root",
                "c::needs_root_chown",
                "vm_pools",
                "d::vm_bufs_needs_root",
                "e::crashes_needs_file_handles"
            ]
        );
        let reason = |marker: &str| SKIPPED.iter().find(|(m, _)| *m == marker).unwrap().1;
        assert_eq!(skipped[2].1, reason("vm_"));
        assert_eq!(
            skipped[3].1,
            reason(NEEDS_ROOT),
            "counted once, as needing root"
        );
        assert_eq!(skipped[4].1, reason("needs_file_handles"));
        assert_eq!(
            skip_counts(&skipped),
            format!(
                "3 {}, 1 {}, 1 {}",
                reason(NEEDS_ROOT),
                reason("needs_file_handles"),
                reason("vm_")
            )
        );
    }
}
