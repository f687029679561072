//! `-o OPT[,OPT...]`: the mount option string that mount(8), fstab lines
//! and `mount.fuse3` hand to a FUSE daemon, applied to the parsed
//! [`Args`]. The names are libfuse's where libfuse has
//! one (`allow_other`, `default_permissions`, `auto_unmount`, `max_threads=`,
//! `io_uring`, `fsname=`, ...) and passthrough_ll's for the cache
//! (`cache=`, `timeout=`, `writeback`); every switch of the command line
//! also has an `-o` name, so an fstab line can say anything the command
//! line can. One table (`OPTIONS`) is both the parser and `--help`'s list.

use crate::cli::Args;
use crate::{Cache, Failure, Runtime, ZeroCopy};
use clap::ValueEnum;
use std::path::PathBuf;

/// What an option does to the arguments.
enum Effect {
    /// A switch with no value.
    Flag(fn(&mut Args)),
    /// `name=VALUE`: sets from the value or says why it can't.
    Value(fn(&mut Args, &str) -> Result<(), String>),
    /// A generic mount flag passed to the mount as it is (`noexec`, ...).
    MountFlag,
    /// Accepted and ignored: it is for mount(8) or fstab, not the daemon.
    Ignored,
    /// Refused, with the reason.
    Refused(&'static str),
}

/// One `-o` name.
struct Opt {
    /// The name; a value-taking option's name ends in `=`.
    name: &'static str,
    /// What `--help` says (empty: not listed, e.g. the plain mount flags,
    /// which are listed together).
    help: &'static str,
    effect: Effect,
}

const fn flag(name: &'static str, help: &'static str, f: fn(&mut Args)) -> Opt {
    Opt {
        name,
        help,
        effect: Effect::Flag(f),
    }
}

const fn value(
    name: &'static str,
    help: &'static str,
    f: fn(&mut Args, &str) -> Result<(), String>,
) -> Opt {
    Opt {
        name,
        help,
        effect: Effect::Value(f),
    }
}

const fn mount_flag(name: &'static str) -> Opt {
    Opt {
        name,
        help: "",
        effect: Effect::MountFlag,
    }
}

const fn ignored(name: &'static str) -> Opt {
    Opt {
        name,
        help: "",
        effect: Effect::Ignored,
    }
}

const fn refused(name: &'static str, why: &'static str) -> Opt {
    Opt {
        name,
        help: "",
        effect: Effect::Refused(why),
    }
}

fn number<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{v:?} is not a whole number"))
}

fn nice(v: &str) -> Result<i32, String> {
    match v.parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(n),
        _ => Err(format!("{v:?} is not a nice value from -20 to 19")),
    }
}

fn secs(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if (0.0..1e12).contains(&s) => Ok(s),
        _ => Err(format!("{v:?} is not a number of seconds >= 0")),
    }
}

fn choice<T: ValueEnum>(v: &str) -> Result<T, String> {
    T::from_str(v, false).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|c| c.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        format!("{v:?} is not one of {}", names.join(", "))
    })
}

/// Every `-o` name, in `--help`'s order.
const OPTIONS: &[Opt] = &[
    value(
        "source=",
        "the directory to serve (SOURCE then names the mount)",
        |a, v| {
            if v.is_empty() {
                return Err("the directory must not be empty".into());
            }
            a.source_dir = Some(PathBuf::from(v));
            Ok(())
        },
    ),
    flag("allow_other", "--allow-other", |a| a.allow_other = true),
    flag("default_permissions", "--default-permissions", |a| {
        a.default_permissions = true
    }),
    flag("ro", "--ro", |a| a.ro = true),
    flag("rw", "read-write (the default)", |a| a.ro = false),
    flag("auto_unmount", "--auto-unmount", |a| a.auto_unmount = true),
    value("fsname=", "--fsname NAME", |a, v| {
        a.fsname = Some(v.to_string());
        Ok(())
    }),
    value("subtype=", "--subtype NAME", |a, v| {
        a.subtype = v.to_string();
        Ok(())
    }),
    value("max_read=", "--max-read BYTES", |a, v| {
        number(v).map(|x| a.max_read = Some(x))
    }),
    flag("debug", "--debug", |a| a.debug = true),
    value("log_file=", "--log-file PATH", |a, v| {
        if v.is_empty() {
            return Err("the path must not be empty".into());
        }
        a.log_file = Some(PathBuf::from(v));
        Ok(())
    }),
    value("threads=", "--threads N", |a, v| {
        number(v).map(|x| a.threads = x)
    }),
    value("max_threads=", "--max-threads N", |a, v| {
        number(v).map(|x| a.max_threads = Some(x))
    }),
    value("runtime=", "--runtime sync|tokio|uring", |a, v| {
        choice::<Runtime>(v).map(|x| a.runtime = x)
    }),
    flag("io_uring", "--uring (libfuse's name; also: uring)", |a| {
        a.uring = true
    }),
    flag("uring", "", |a| a.uring = true),
    value(
        "io_uring_q_depth=",
        "--uring-entries N (libfuse's name)",
        |a, v| number(v).map(|x| a.uring_entries = x),
    ),
    value("uring_entries=", "--uring-entries N", |a, v| {
        number(v).map(|x| a.uring_entries = x)
    }),
    value("uring_bufs=", "--uring-bufs N", |a, v| {
        number(v).map(|x| a.uring_bufs = x)
    }),
    flag(
        "uring_unregistered_pools",
        "--uring-unregistered-pools",
        |a| a.uring_unregistered_pools = true,
    ),
    flag("uring_no_zero_copy", "--uring-no-zero-copy", |a| {
        a.uring_no_zero_copy = true
    }),
    flag("uring_one_ring", "--uring-one-ring", |a| {
        a.uring_one_ring = true
    }),
    flag("uring_unpinned", "--uring-unpinned", |a| {
        a.uring_unpinned = true
    }),
    value("uring_nice=", "--uring-nice N", |a, v| {
        nice(v).map(|x| a.uring_nice = x)
    }),
    value("uring_queues=", "--uring-queues N", |a, v| {
        number(v).map(|x| a.uring_queues = x)
    }),
    value(
        "uring_threads_per_queue=",
        "--uring-threads-per-queue N",
        |a, v| number(v).map(|x| a.uring_threads_per_queue = x),
    ),
    flag("thread_pool", "--thread-pool", |a| a.fs.thread_pool = true),
    value("pool_threads=", "--pool-threads N", |a, v| {
        number(v).map(|x| a.fs.pool_threads = Some(x))
    }),
    value("cache=", "--cache never|auto|always", |a, v| {
        choice::<Cache>(v).map(|x| a.fs.cache = x)
    }),
    value("takeover_socket=", "--takeover-socket PATH", |a, v| {
        a.takeover_socket = Some(v.into());
        Ok(())
    }),
    value("take_over=", "--take-over PATH", |a, v| {
        a.take_over = Some(v.into());
        Ok(())
    }),
    value("takeover_timeout=", "--takeover-timeout SECS", |a, v| {
        number(v).map(|x| a.takeover_timeout = x)
    }),
    value("sandbox=", "--sandbox namespace|chroot|none", |a, v| {
        choice(v).map(|x| a.sandbox = Some(x))
    }),
    value("seccomp=", "--seccomp kill|log|none", |a, v| {
        choice(v).map(|x| a.seccomp = Some(x))
    }),
    value("landlock=", "--landlock on|off", |a, v| {
        choice(v).map(|x| a.landlock = Some(x))
    }),
    value("zero_copy=", "--zero-copy never|auto|always", |a, v| {
        choice::<ZeroCopy>(v).map(|x| a.fs.zero_copy = x)
    }),
    flag("writeback", "--writeback", |a| a.fs.writeback = true),
    flag("no_writeback", "no writeback cache (the default)", |a| {
        a.fs.writeback = false
    }),
    value(
        "timeout=",
        "--attr-timeout and --entry-timeout SECS",
        |a, v| {
            let s = secs(v)?;
            a.fs.attr_timeout = Some(s);
            a.fs.entry_timeout = Some(s);
            Ok(())
        },
    ),
    value("attr_timeout=", "--attr-timeout SECS", |a, v| {
        secs(v).map(|x| a.fs.attr_timeout = Some(x))
    }),
    value("entry_timeout=", "--entry-timeout SECS", |a, v| {
        secs(v).map(|x| a.fs.entry_timeout = Some(x))
    }),
    value("request_timeout=", "--request-timeout SECS", |a, v| {
        match v.parse::<u16>() {
            Ok(s) if s > 0 => a.fs.request_timeout = Some(s),
            _ => return Err(format!("{v:?} is not a number of seconds from 1 to 65535")),
        }
        Ok(())
    }),
    flag("allow_idmap", "--allow-idmap", |a| a.fs.allow_idmap = true),
    value("max_nodes=", "--max-nodes N", |a, v| {
        match v.parse::<usize>() {
            Ok(n) => a.fs.max_nodes = Some(n),
            _ => return Err(format!("{v:?} is not a number of inodes")),
        }
        Ok(())
    }),
    value("listing_threads=", "--listing-threads N", |a, v| {
        match v.parse::<u16>() {
            Ok(n @ 1..=64) => a.fs.listing_threads = Some(n),
            _ => return Err(format!("{v:?} is not a number of threads from 1 to 64")),
        }
        Ok(())
    }),
    flag("no_watch_source", "--no-watch-source", |a| {
        a.fs.no_watch_source = true
    }),
    flag("watch_source", "watch the source (the default)", |a| {
        a.fs.no_watch_source = false
    }),
    flag("xattr", "extended attributes (the default)", |a| {
        a.fs.no_xattr = false
    }),
    flag("no_xattr", "--no-xattr", |a| a.fs.no_xattr = true),
    flag("readdirplus", "READDIRPLUS (the default)", |a| {
        a.fs.no_readdirplus = false
    }),
    flag("no_readdirplus", "--no-readdirplus", |a| {
        a.fs.no_readdirplus = true
    }),
    flag("no_open", "--no-open", |a| a.fs.no_open = true),
    flag("no_opendir", "--no-opendir", |a| a.fs.no_opendir = true),
    flag("passthrough", "--passthrough", |a| {
        a.fs.passthrough = true;
        a.fs.no_passthrough = false;
    }),
    flag("no_passthrough", "--no-passthrough", |a| {
        a.fs.no_passthrough = true;
        a.fs.passthrough = false;
    }),
    flag("no_file_handles", "--no-file-handles", |a| {
        a.fs.no_file_handles = true
    }),
    flag("killpriv_v2", "--killpriv-v2", |a| {
        a.fs.killpriv_v2 = true;
        a.fs.no_killpriv_v2 = false;
    }),
    flag("no_killpriv_v2", "--no-killpriv-v2", |a| {
        a.fs.no_killpriv_v2 = true;
        a.fs.killpriv_v2 = false;
    }),
    flag("unmount_dead", "--unmount-dead", |a| a.unmount_dead = true),
    flag("supervise", "--supervise", |a| a.supervise = true),
    // Generic mount flags (listed together in --help).
    mount_flag("suid"),
    mount_flag("nosuid"),
    mount_flag("dev"),
    mount_flag("nodev"),
    mount_flag("exec"),
    mount_flag("noexec"),
    mount_flag("sync"),
    mount_flag("async"),
    mount_flag("dirsync"),
    mount_flag("atime"),
    mount_flag("noatime"),
    mount_flag("diratime"),
    mount_flag("nodiratime"),
    mount_flag("relatime"),
    mount_flag("norelatime"),
    mount_flag("strictatime"),
    mount_flag("lazytime"),
    mount_flag("nolazytime"),
    mount_flag("symfollow"),
    mount_flag("nosymfollow"),
    // For mount(8) and fstab, or what libfuse accepts and we always do.
    ignored("defaults"),
    ignored("auto"),
    ignored("noauto"),
    ignored("user"),
    ignored("users"),
    ignored("nouser"),
    ignored("owner"),
    ignored("nofail"),
    ignored("_netdev"),
    ignored("nonempty"),
    ignored("clone_fd"),
    refused(
        "allow_root",
        "the kernel has no such option (libfuse emulates it); use allow_other with \
         default_permissions and the backing directory's permissions",
    ),
    refused(
        "remount",
        "a FUSE mount of passthroughfs cannot be remounted: unmount it and mount again",
    ),
    refused(
        "blkdev",
        "passthroughfs serves a directory, not a block device",
    ),
    refused("fd=", "set by passthroughfs itself when it mounts"),
    refused("rootmode=", "set by passthroughfs itself when it mounts"),
    refused("user_id=", "set by passthroughfs itself when it mounts"),
    refused("group_id=", "set by passthroughfs itself when it mounts"),
    refused(
        "setuid=",
        "mount.fuse3 handles it (it starts the daemon as that user); pass it through \
         mount -t fuse.passthroughfs",
    ),
    refused(
        "drop_privileges",
        "mount.fuse3 handles it by passing a /dev/fuse descriptor as /dev/fd/N, which \
         passthroughfs does not take",
    ),
];

/// The `-o` list as (term, text) pairs: each named option, then the mount
/// flags, the ignored names and the refused ones as lists (`--help` and the
/// man page render it).
pub fn help_entries() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = OPTIONS
        .iter()
        .filter(|o| !o.help.is_empty())
        .map(|o| {
            let term = match o.effect {
                Effect::Value(_) => format!("{}VALUE", o.name),
                _ => o.name.to_string(),
            };
            (term, o.help.to_string())
        })
        .collect();
    let names = |want: fn(&Effect) -> bool| -> String {
        OPTIONS
            .iter()
            .filter(|o| want(&o.effect))
            .map(|o| o.name)
            .collect::<Vec<_>>()
            .join(" ")
    };
    out.push((
        "mount flags".into(),
        names(|e| matches!(e, Effect::MountFlag)),
    ));
    out.push((
        "ignored".into(),
        format!("{} x-* comment=*", names(|e| matches!(e, Effect::Ignored))),
    ));
    out.push((
        "refused (says why)".into(),
        names(|e| matches!(e, Effect::Refused(_))),
    ));
    out
}

/// The `-o` list for `--help`, one entry a line (lists wrapped at 80
/// columns).
pub fn help() -> String {
    let lines: Vec<String> = help_entries()
        .into_iter()
        .map(|(term, text)| wrap(&format!("  {term:<22}"), &text))
        .collect();
    lines.concat().trim_end().to_string()
}

/// `words` after `lead`, wrapped at 80 columns with continuation lines
/// indented as far as `lead`.
fn wrap(lead: &str, words: &str) -> String {
    let mut out = String::from(lead);
    let mut col = lead.len();
    for w in words.split(' ') {
        if col + 1 + w.len() > 80 {
            out.push('\n');
            out.push_str(&" ".repeat(lead.len()));
            col = lead.len();
        }
        out.push(' ');
        out.push_str(w);
        col += 1 + w.len();
    }
    out.push('\n');
    out
}

/// Splits an option string at its commas; a backslash escapes the next
/// character (`fsname=a\,b` is one option, as libfuse reads it).
pub fn split(options: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.last_mut().expect("never empty").push(next);
                }
            }
            ',' => out.push(String::new()),
            c => out.last_mut().expect("never empty").push(c),
        }
    }
    out.retain(|o| !o.is_empty());
    out
}

/// Whether the `-o` strings of `args` name the option `name` (as a flag,
/// or `name=VALUE`): for messages that should say `-o NAME` when that is
/// what was typed.
pub fn named(args: &Args, name: &str) -> bool {
    args.options
        .iter()
        .flat_map(|s| split(s))
        .any(|o| o.split_once('=').map_or(o.as_str(), |(n, _)| n) == name)
}

/// Applies every `-o` string of `args.options` in order. An unknown name
/// or a bad value fails with the option and the reason, unless
/// `args.sloppy` (mount(8)'s `-s`): then an unknown name is skipped, and
/// returned for the caller to log (the log may not be set up yet).
pub fn apply(args: &mut Args) -> Result<Vec<String>, Failure> {
    let strings = std::mem::take(&mut args.options);
    let mut skipped = Vec::new();
    for option in strings.iter().flat_map(|s| split(s)) {
        if !apply_one(args, &option)? {
            skipped.push(option);
        }
    }
    args.options = strings;
    Ok(skipped)
}

/// Applies one option; false if it was unknown and skipped (sloppy).
fn apply_one(args: &mut Args, option: &str) -> Result<bool, Failure> {
    let fail = |why: &str| Failure(format!("-o {option}: {why}"));
    if option.starts_with("x-") || option.starts_with("comment=") {
        return Ok(true);
    }
    let (name, val) = match option.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (option, None),
    };
    let found = OPTIONS.iter().find(|o| match o.name.strip_suffix('=') {
        Some(n) => n == name,
        None => o.name == name,
    });
    let Some(opt) = found else {
        if args.sloppy {
            return Ok(false);
        }
        return Err(fail(
            "unknown mount option (passthroughfs --help lists them)",
        ));
    };
    match (&opt.effect, val) {
        (Effect::Refused(why), _) => return Err(fail(why)),
        (Effect::Value(f), Some(v)) => f(args, v).map_err(|e| fail(&e))?,
        (Effect::Value(_), None) => return Err(fail(&format!("needs a value: {name}=VALUE"))),
        (_, Some(_)) => return Err(fail(&format!("takes no value: {name}"))),
        (Effect::Flag(f), None) => f(args),
        (Effect::MountFlag, None) => args.mount_flags.push(name.to_string()),
        (Effect::Ignored, None) => {}
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(argv: &[&str]) -> Result<Args, Failure> {
        let mut args = Args::try_parse_from(argv).expect("clap accepts it");
        apply(&mut args).map(|skipped| {
            assert!(skipped.is_empty());
            args
        })
    }

    #[test]
    fn splits_at_unescaped_commas() {
        assert_eq!(split("a,b=c,,d"), ["a", "b=c", "d"]);
        assert_eq!(split(r"fsname=a\,b,ro"), ["fsname=a,b", "ro"]);
        assert_eq!(split(r"x\\y"), [r"x\y"]);
        assert!(split("").is_empty());
    }

    #[test]
    fn options_set_what_the_switches_set() {
        let a = parse(&[
            "passthroughfs",
            "name",
            "/mnt",
            "-o",
            "rw,allow_other,default_permissions,cache=always,writeback,timeout=2.5",
            "-o",
            "max_threads=9,io_uring,io_uring_q_depth=4,uring_nice=-2,noexec,nosuid,noauto,x-systemd.automount",
            "-o",
            "source=/srv/data,fsname=a\\,b,runtime=tokio,thread_pool,request_timeout=7,max_nodes=100000,listing_threads=3",
        ])
        .unwrap();
        assert_eq!(a.fs.request_timeout, Some(7));
        assert_eq!(a.fs.max_nodes, Some(100_000));
        assert_eq!(a.fs.listing_threads, Some(3));
        assert!(a.allow_other && a.default_permissions && !a.ro);
        assert_eq!(a.fs.cache, Cache::Always);
        assert!(a.fs.writeback && a.fs.thread_pool);
        assert_eq!(a.fs.attr_timeout, Some(2.5));
        assert_eq!(a.fs.entry_timeout, Some(2.5));
        assert_eq!(a.max_threads, Some(9));
        assert!(a.uring);
        assert_eq!(a.uring_entries, 4);
        assert_eq!(a.uring_nice, -2);
        assert_eq!(a.mount_flags, ["noexec", "nosuid"]);
        assert_eq!(a.source_dir, Some(PathBuf::from("/srv/data")));
        assert_eq!(a.fsname.as_deref(), Some("a,b"));
        assert_eq!(a.runtime, Runtime::Tokio);
    }

    #[test]
    fn a_later_option_wins() {
        let a = parse(&["p", "s", "m", "--cache", "never", "-o", "ro,rw,cache=auto"]).unwrap();
        assert!(!a.ro);
        assert_eq!(a.fs.cache, Cache::Auto);
    }

    #[test]
    fn bad_options_say_which_and_why() {
        let err = |o: &str| parse(&["p", "s", "m", "-o", o]).unwrap_err().0;
        assert_eq!(
            err("ro,bogus"),
            "-o bogus: unknown mount option (passthroughfs --help lists them)"
        );
        assert_eq!(
            err("cache=sometimes"),
            "-o cache=sometimes: \"sometimes\" is not one of never, auto, always"
        );
        assert_eq!(
            err("max_threads=x"),
            "-o max_threads=x: \"x\" is not a whole number"
        );
        assert_eq!(
            err("timeout=-1"),
            "-o timeout=-1: \"-1\" is not a number of seconds >= 0"
        );
        assert_eq!(
            err("uring_nice=20"),
            "-o uring_nice=20: \"20\" is not a nice value from -20 to 19"
        );
        assert_eq!(
            err("listing_threads=0"),
            "-o listing_threads=0: \"0\" is not a number of threads from 1 to 64"
        );
        assert_eq!(err("ro=1"), "-o ro=1: takes no value: ro");
        assert_eq!(err("fsname"), "-o fsname: needs a value: fsname=VALUE");
        assert!(err("allow_root").starts_with("-o allow_root: the kernel has no such option"));
        assert!(err("fd=3").contains("set by passthroughfs itself"));
    }

    #[test]
    fn named_tells_what_was_typed_with_o() {
        let a = parse(&["p", "s", "m", "--ro", "-o", "allow_other,cache=auto"]).unwrap();
        assert!(named(&a, "allow_other"));
        assert!(named(&a, "cache"));
        assert!(!named(&a, "ro"), "--ro was a switch");
        assert!(!named(&a, "allow"));
    }

    #[test]
    fn sloppy_skips_unknown_names_only() {
        let mut a = Args::try_parse_from(["p", "s", "m", "-o", "bogus,ro"]).unwrap();
        a.sloppy = true;
        assert_eq!(apply(&mut a).unwrap(), ["bogus"]);
        assert!(a.ro);
        let mut a = Args::try_parse_from(["p", "s", "m", "-o", "cache=x"]).unwrap();
        a.sloppy = true;
        assert!(apply(&mut a).is_err());
    }

    #[test]
    fn help_lists_every_named_option() {
        let h = help();
        for o in OPTIONS {
            assert!(
                h.contains(o.name.trim_end_matches('=')),
                "{} missing",
                o.name
            );
        }
        assert!(h.lines().all(|l| l.len() <= 80), "{h}");
    }
}
