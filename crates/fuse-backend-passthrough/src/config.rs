//! Options of a [`crate::PassthroughFs`].

use std::time::Duration;

/// How much the kernel may cache of what the backing directory holds.
///
/// The passthrough assumes by default that it is the only one changing the
/// backing directory; if other programs change it too, use
/// [`CachePolicy::Never`] or [`CachePolicy::Auto`] with short timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// No caching: file data bypasses the page cache (`FOPEN_DIRECT_IO`,
    /// with shared mmap still allowed through `FUSE_DIRECT_IO_ALLOW_MMAP`)
    /// and attributes and names are not cached (timeouts of 0, so
    /// READDIRPLUS is not offered either: see
    /// [`PassthroughConfig::readdirplus`]).
    Never,
    /// Attributes and names are cached for one second (names for a day in
    /// directories the passthrough watches for changes made behind the
    /// mount's back, and regular files' attributes for a day where it
    /// watches the files too: [`PassthroughConfig::watch_source`]); file data and
    /// directory listings are kept across opens (`FOPEN_KEEP_CACHE`,
    /// `FOPEN_CACHE_DIR`) until fresh attributes show the file or
    /// directory changed (another mtime or size: `FUSE_AUTO_INVAL_DATA`
    /// for data), so a change made in the source directly is seen once
    /// the attribute timeout has passed. Symlink targets are cached.
    #[default]
    Auto,
    /// As `Auto`, with attributes and names cached for a day: for a
    /// source nothing else changes.
    Always,
}

/// Which files the passthrough opens with zero copy
/// (`FOPEN_IO_URING_ZERO_COPY`): on a FUSE-over-io_uring queue with zero
/// copy (Linux 7.3, `fuse_transport_uring::UringConfig::zero_copy`), the
/// READ and WRITE data of such a file moves between the kernel's pages and
/// the backing file by fixed-buffer io_uring operations, without the
/// daemon copying it. Elsewhere (`/dev/fuse`, older kernels, files passed
/// through to the kernel) the flag is not sent and nothing changes.
///
/// Each such operation is an io_uring request on the serving ring. On a
/// backing file system that completes io_uring reads and writes inline
/// (it supports `RWF_NOWAIT`: ext4, xfs, btrfs, ...) that costs about a
/// system call; on one that doesn't (tmpfs), io_uring hands each to a
/// worker thread, which costs more than copying a small request (measured
/// in `docs/fuse-uring-performance.md`: 4 KiB random `O_DIRECT` reads on
/// tmpfs at 0.4x to 0.8x, 1 MiB reads and writes at 2.8x to 4.5x).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopyPolicy {
    /// Never ask for zero copy.
    Never,
    /// Files on backing file systems that support `RWF_NOWAIT` (probed
    /// once per file system), and every buffered open elsewhere: a
    /// buffered open's requests come from readahead and writeback, in
    /// pages batches, while an `O_DIRECT` open (or any open under
    /// [`CachePolicy::Never`], whose IO is direct) passes the
    /// application's sizes on, often a few KiB.
    #[default]
    Auto,
    /// Every file the daemon serves.
    Always,
}

impl CachePolicy {
    /// The attribute and entry timeout this policy implies.
    pub fn default_timeout(self) -> Duration {
        match self {
            CachePolicy::Never => Duration::ZERO,
            CachePolicy::Auto => Duration::from_secs(1),
            CachePolicy::Always => Duration::from_secs(86400),
        }
    }
}

/// Whether the daemon takes over clearing set-user-ID, set-group-ID and
/// file capabilities on write, truncate and chown
/// (`FUSE_HANDLE_KILLPRIV_V2`).
///
/// Without it the kernel clears them itself, and to know whether a file
/// has a capability it asks the daemon for `security.capability` before
/// every write(2) (FUSE marks its super block `SB_NOSEC` only with
/// killpriv_v2): each WRITE costs two requests. With it the daemon clears
/// the bits when the kernel says so (`FUSE_WRITE_KILL_SUIDGID`,
/// `FATTR_KILL_SUIDGID`) and the backing file system drops the capability
/// on the daemon's own write, which is exact as long as the daemon sees
/// every write. Under kernel passthrough it doesn't: a file that becomes
/// set-user-ID while open keeps the bit across other users' passthrough
/// writes until its last close (files set-user-ID at open are served by
/// the daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KillPrivV2 {
    /// On unless kernel passthrough is on for the connection: exact
    /// either way, and one request per write where the daemon serves
    /// writes.
    #[default]
    Auto,
    /// Always asked for, kernel passthrough or not (see the caveat above).
    On,
    /// Never asked for: the kernel clears the bits, at a GETXATTR per
    /// write(2).
    Off,
}

impl std::str::FromStr for CachePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "never" => Ok(CachePolicy::Never),
            "auto" => Ok(CachePolicy::Auto),
            "always" => Ok(CachePolicy::Always),
            _ => Err(format!(
                "unknown cache policy {s:?} (expected never, auto or always)"
            )),
        }
    }
}

/// Options of a [`crate::PassthroughFs`]; `Default` gives the usual
/// passthrough: [`CachePolicy::Auto`], xattrs and readdirplus on, no
/// writeback cache, opens answered normally, no kernel passthrough.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassthroughConfig {
    /// Cache policy: open flags and the default timeouts.
    pub cache: CachePolicy,
    /// Use the kernel's writeback cache (`FUSE_WRITEBACK_CACHE`): writes
    /// collect in the page cache and reach the backing file later, in
    /// larger pieces. Files opened write-only are then opened read-write
    /// on the backing side (the kernel reads to fill partial pages) and
    /// `O_APPEND` is left to the kernel.
    pub writeback: bool,
    /// How long the kernel may cache attributes; `None` uses the cache
    /// policy's default.
    pub attr_timeout: Option<Duration>,
    /// How long the kernel may cache names; `None` uses the cache policy's
    /// default (under [`CachePolicy::Auto`] with
    /// [`PassthroughConfig::watch_source`]: a day in watched directories).
    pub entry_timeout: Option<Duration>,
    /// Under [`CachePolicy::Auto`] with no `entry_timeout` set, watch the
    /// directories whose names the kernel caches (fanotify) and tell the
    /// kernel of every name another process removes or renames in the
    /// source (`FUSE_NOTIFY_INVAL_ENTRY`), so that names can be cached for
    /// a day ([`crate::WATCHED_ENTRY_TIMEOUT`]) instead of a second. With
    /// no `attr_timeout` set either, every regular file the kernel is given
    /// an entry for is watched too, and a change another process makes to
    /// its data or attributes is passed on (`FUSE_NOTIFY_INVAL_INODE`), so
    /// that its attributes can be cached for a day
    /// ([`crate::WATCHED_ATTR_TIMEOUT`]; directories keep 1 s). It
    /// starts once the passthrough has a notifier
    /// ([`crate::PassthroughFs::set_notifier`]) on a kernel with
    /// `FUSE_NOTIFY_INC_EPOCH` (protocol 7.44, for a full event queue);
    /// elsewhere, or if fanotify refuses, names keep the 1 s timeout.
    /// Default `true`.
    pub watch_source: bool,
    /// Serve extended attributes (off: the xattr calls answer `ENOSYS`, and
    /// the kernel stops sending them).
    pub xattr: bool,
    /// Offer READDIRPLUS (`FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO`):
    /// listings carry each entry's attributes, saving a LOOKUP per name.
    /// Not offered while the entry timeout in force is 0 (as under
    /// [`CachePolicy::Never`] by default): the kernel would drop what the
    /// listing carries at once, and each entry would cost a lookup and a
    /// FORGET for nothing.
    pub readdirplus: bool,
    /// Zero-message opens: OPEN is answered with `ENOSYS` so the kernel
    /// stops sending OPEN and RELEASE (`FUSE_NO_OPEN_SUPPORT`, when the
    /// kernel offers it); READ and WRITE then come with handle 0 and are
    /// served from one file per inode, opened on first use. Without the
    /// kernel's support, opens are answered normally.
    pub no_open: bool,
    /// Zero-message directory opens, like [`PassthroughConfig::no_open`]
    /// for OPENDIR (`FUSE_NO_OPENDIR_SUPPORT`).
    pub no_opendir: bool,
    /// Answer READDIR and READDIRPLUS with no entries (success, the end of
    /// the directory at once), while names still resolve through LOOKUP
    /// and OPENDIR, RELEASEDIR and everything else work as usual. For
    /// trees whose directories are not to be enumerated through the
    /// mount: a lazily loaded image whose listings are expensive to fetch,
    /// or a drop box where only who knows a name reaches the file.
    pub no_readdir: bool,
    /// Whether the daemon clears the set-user-ID and set-group-ID bits on
    /// write, truncate and chown (`FUSE_HANDLE_KILLPRIV_V2`); see
    /// [`KillPrivV2`].
    pub killpriv_v2: KillPrivV2,
    /// Run creating and changing operations with the caller's file system
    /// uid, gid and supplementary groups, so that new files belong to the
    /// caller and the backing file system checks the caller's permissions.
    /// Only takes effect when the process runs as root (uid 0, with
    /// `CAP_SETUID` and `CAP_SETGID`).
    pub caller_credentials: bool,
    /// Kernel passthrough (`FUSE_PASSTHROUGH`, Linux 6.9+): the kernel
    /// reads and writes open regular files straight from the backing
    /// files, so READ and WRITE never reach the daemon. Used where the
    /// kernel offers it and the process may register backing files
    /// (`CAP_SYS_ADMIN` in the initial user namespace); otherwise, and for
    /// files the kernel refuses, the daemon serves READ and WRITE as usual
    /// (logged once). Off with the writeback cache or zero-message opens,
    /// which exclude it. See `docs/passthrough.md`.
    ///
    /// Off in `Default`, so that a program measuring or testing how its
    /// transport carries READ and WRITE keeps seeing them; the
    /// `passthroughfs` daemon turns it on unless given `--no-passthrough`.
    pub passthrough: bool,
    /// The signal used to end a lock wait (SETLKW); `None` uses
    /// `SIGRTMIN() + 5`.
    ///
    /// A lock wait is a blocking `fcntl(F_OFD_SETLKW)` or `flock(2)` on a
    /// thread, and only a signal makes it return early: on the kernel's
    /// INTERRUPT (the waiting process got a signal), on a stop
    /// (`FileSystem::stop_waits`) and when an async request is dropped, the
    /// file system sends this signal to the waiting thread (`pthread_kill`)
    /// until it has left the wait. For that, [`crate::PassthroughFs::new`]
    /// installs a **process-wide** handler that does nothing, without
    /// `SA_RESTART` (so the call fails with `EINTR`), logged at debug; it
    /// stays installed after the file system is dropped.
    ///
    /// Change it when the application (or a library in it) already uses
    /// `SIGRTMIN() + 5`, or to share one number between several
    /// `PassthroughFs`. The application must not install its own handler
    /// for it (a default disposition kills the process on the first
    /// interrupted lock wait; `SA_RESTART` makes interrupts and stops wait
    /// for the lock holder), block it in threads that serve requests, or
    /// send it itself. It may be the same number as the `/dev/fuse`
    /// transport's `SessionConfig::wake_signal` (`SIGRTMIN() + 4`): both
    /// handlers do nothing and neither restarts, so either serves both.
    pub interrupt_signal: Option<i32>,
    /// Hold known inodes by file handle (`name_to_handle_at(2)`, opened
    /// again with `open_by_handle_at(2)` when used) instead of by an open
    /// `O_PATH` descriptor each, so that trees with more files than the
    /// descriptor limit can be served. Used only where it works (the
    /// backing file system supports file handles and the process has
    /// `CAP_DAC_READ_SEARCH` in the initial user namespace); otherwise, or
    /// when off, every known inode keeps a descriptor.
    pub file_handles: bool,
    /// Inodes held by file handle keep the descriptors of the inodes in
    /// use in a cache of at most this many, so a hot inode needs no
    /// `open_by_handle_at`: a working set that fits keeps its descriptors,
    /// past it the least recently used are closed first. `None` sizes it to
    /// three quarters of the open file limit in force when the file system
    /// is made (`RLIMIT_NOFILE`, which a daemon raises to its hard limit
    /// first: see [`crate::raise_nofile_limit`]), leaving a quarter for
    /// open files, directories and locks. When the process runs out of
    /// descriptors anyway (`EMFILE`), the cache gives its descriptors back
    /// and the call is tried again.
    pub fd_cache_size: Option<usize>,
    /// Which files are opened with zero copy (see [`ZeroCopyPolicy`]).
    /// Default [`ZeroCopyPolicy::Auto`].
    pub zero_copy: ZeroCopyPolicy,
    /// Ask the kernel to time requests out (`FUSE_REQUEST_TIMEOUT`,
    /// protocol 7.43, Linux 6.14+) after this many seconds: a request the
    /// daemon leaves unanswered that long makes the kernel abort the
    /// connection, so that clients get `ECONNABORTED` (then `ENOTCONN`)
    /// instead of hanging in uninterruptible sleep behind a stuck daemon.
    /// The kernel checks every few seconds (at most 15), and may raise the
    /// value to `/proc/sys/fs/fuse/default_request_timeout` or lower it to
    /// `max_request_timeout`. `None` (the default): no timeout; a kernel
    /// without the flag gets none either (said in the log).
    pub request_timeout: Option<u16>,
    /// Offer idmapped mounts (`FUSE_ALLOW_IDMAP`, protocol 7.40, Linux
    /// 6.12+): `mount_setattr(MOUNT_ATTR_IDMAP)` may then map the mount's
    /// ids into a user namespace, as container runtimes do with volumes.
    /// Only for a mount with `default_permissions`: the kernel checks
    /// permissions itself, and fails INIT (a dead mount) if the flag comes
    /// without it. With the flag agreed the kernel sends the caller's ids
    /// only in requests that create an inode (mapped through the mount's
    /// idmapping: the owner the new file gets in SOURCE); the others come
    /// without ids and are served as the daemon. Default false; a kernel
    /// without the flag gets nothing (said in the log).
    pub allow_idmap: bool,
    /// The most inodes to keep: past it, the least recently used are
    /// offered to the kernel with `FUSE_NOTIFY_PRUNE` (protocol 7.45,
    /// Linux 6.18+), which drops those nothing uses and sends their
    /// FORGET, so a walk over any tree leaves a bounded table
    /// (`fuse_server::prune` has the contract: an inode in use stays,
    /// and is served as before). An eighth of the limit is offered at a
    /// time, from a thread of its own. `None` (the default): sized to the
    /// machine ([`default_max_nodes`], which `PassthroughFs::config` then
    /// shows); `Some(0)`: no limit. On an older
    /// kernel every inode is kept until the kernel forgets it (said once in
    /// the log).
    pub max_nodes: Option<usize>,
    /// How many threads look up the names of one READDIRPLUS reply: the
    /// serving thread and up to this many less one helpers, each taking a
    /// share of the names (a first listing's replies hold about 200
    /// names, each a lookup in the source: its inode read from disk when
    /// not cached). Helpers run only while the request does, on every CPU
    /// the process may use, and only for replies of at least
    /// [`MIN_NAMES_PER_LISTING_THREAD`] names a thread. `None` (the
    /// default): the CPUs the process may use, at most 4; `Some(1)`: the
    /// serving thread alone. `PassthroughFs::config` shows the number in
    /// force.
    pub listing_threads: Option<usize>,
}

/// The fewest names of a READDIRPLUS reply each listing thread looks up
/// ([`PassthroughConfig::listing_threads`]): below it, starting a helper
/// costs more than it saves.
pub const MIN_NAMES_PER_LISTING_THREAD: usize = 16;

/// The most threads [`PassthroughConfig::listing_threads`] picks by
/// default.
const DEFAULT_MAX_LISTING_THREADS: usize = 4;

/// The default of [`PassthroughConfig::listing_threads`]: the CPUs the
/// process may use, at most 4 (at least 1).
pub fn default_listing_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, DEFAULT_MAX_LISTING_THREADS)
}

/// A table entry costs about 320 bytes in the daemon (the inode, its file
/// handle, two table slots), rounded up here for the tables' spare room.
const BYTES_PER_NODE: u64 = 512;

/// The fewest inodes the default keeps: a working set of a small machine.
const MIN_DEFAULT_NODES: usize = 16_384;

/// The default of [`PassthroughConfig::max_nodes`]: as many inodes as fit
/// in 1/64 of the machine's memory at 512 bytes each (24 GiB: about
/// 800,000 inodes, 384 MiB), at least 16,384. The kernel's own cache
/// (inode and dentry, about 1 KiB per cached file) is bounded by the same
/// limit, as it drops what it prunes; 1/64 keeps both a small share of the
/// machine while holding far more than a working set. Inodes held by
/// `O_PATH` descriptor (no file handles, `inodes_hold_fds`) hold a
/// descriptor each: there the limit is also three quarters of the open
/// file limit (`RLIMIT_NOFILE`), so that pruning starts before the
/// process runs out of descriptors, leaving a quarter for open files.
pub fn default_max_nodes(inodes_hold_fds: bool) -> usize {
    // SAFETY: `sysinfo` is plain integers, for which all zeroes is a
    // valid value.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `si` is a live, writable `sysinfo` the call fills.
    let ram = if unsafe { libc::sysinfo(&mut si) } == 0 {
        (si.totalram as u64).saturating_mul(si.mem_unit.max(1) as u64)
    } else {
        0
    };
    let by_ram = usize::try_from(ram / 64 / BYTES_PER_NODE).unwrap_or(usize::MAX);
    let mut limit = by_ram.max(MIN_DEFAULT_NODES);
    if inodes_hold_fds {
        if let Ok((soft, _)) = crate::sys::nofile_limits() {
            let by_fds = usize::try_from(soft / 4 * 3).unwrap_or(usize::MAX).max(64);
            limit = limit.min(by_fds);
        }
    }
    limit
}

impl Default for PassthroughConfig {
    fn default() -> Self {
        Self {
            cache: CachePolicy::Auto,
            writeback: false,
            attr_timeout: None,
            entry_timeout: None,
            watch_source: true,
            xattr: true,
            readdirplus: true,
            no_open: false,
            no_opendir: false,
            no_readdir: false,
            killpriv_v2: KillPrivV2::Auto,
            caller_credentials: true,
            passthrough: false,
            interrupt_signal: None,
            file_handles: true,
            fd_cache_size: None,
            zero_copy: ZeroCopyPolicy::Auto,
            request_timeout: None,
            allow_idmap: false,
            max_nodes: None,
            listing_threads: None,
        }
    }
}

/// Builder-style setters: each `field: Type;` becomes a `#[must_use]`
/// `fn field(self, value: Type) -> Self` that sets `field` to
/// `value.into()` (for a `Type` of `impl Into<Option<T>>`, `Some(x)`, `x`
/// and `None` all do).
macro_rules! setters {
    ($( $(#[$doc:meta])* $field:ident: $param:ty; )*) => {$(
        $(#[$doc])*
        #[must_use]
        pub fn $field(mut self, value: $param) -> Self {
            self.$field = value.into();
            self
        }
    )*};
}

/// Builder-style setters, one per field: start from [`PassthroughConfig::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl PassthroughConfig {
    setters! {
        /// Sets the cache policy (`cache`).
        cache: CachePolicy;
        /// Sets whether to use the kernel's writeback cache (`writeback`).
        writeback: bool;
        /// Sets how long the kernel may cache attributes (`attr_timeout`;
        /// `None`: the cache policy's default). The timeout in force is
        /// [`PassthroughConfig::attr_timeout_in_force`].
        attr_timeout: impl Into<Option<Duration>>;
        /// Sets how long the kernel may cache names (`entry_timeout`; `None`:
        /// the cache policy's default). The timeout in force is
        /// [`PassthroughConfig::entry_timeout_in_force`].
        entry_timeout: impl Into<Option<Duration>>;
        /// Sets whether idmapped mounts are offered
        /// ([`PassthroughConfig::allow_idmap`]; needs `default_permissions`).
        allow_idmap: bool;
        /// Sets whether to watch the source for names changed behind the
        /// mount's back, caching names for long (`watch_source`).
        watch_source: bool;
        /// Sets whether to serve extended attributes (`xattr`).
        xattr: bool;
        /// Sets whether to offer READDIRPLUS (`readdirplus`).
        readdirplus: bool;
        /// Sets zero-message opens (`no_open`).
        no_open: bool;
        /// Sets zero-message directory opens (`no_opendir`).
        no_opendir: bool;
        /// Sets whether listings answer with no entries (`no_readdir`).
        no_readdir: bool;
        /// Sets when `FUSE_HANDLE_KILLPRIV_V2` is asked for (`killpriv_v2`).
        killpriv_v2: KillPrivV2;
        /// Sets whether operations run with the caller's credentials
        /// (`caller_credentials`).
        caller_credentials: bool;
        /// Sets kernel passthrough (`passthrough`).
        passthrough: bool;
        /// Sets the signal that ends lock waits (`interrupt_signal`; `None`:
        /// `SIGRTMIN() + 5`; read that field's documentation before changing it).
        interrupt_signal: impl Into<Option<i32>>;
        /// Sets whether inodes are held by file handle (`file_handles`).
        file_handles: bool;
        /// Sets the descriptor cache size of inodes held by file handle
        /// (`fd_cache_size`; `None`: three quarters of the open file limit).
        fd_cache_size: impl Into<Option<usize>>;
        /// Sets the most inodes to keep (`max_nodes`; `None`: sized to the
        /// machine, `Some(0)`: no limit).
        max_nodes: impl Into<Option<usize>>;
        /// Sets how many threads look up one READDIRPLUS reply's names
        /// (`listing_threads`; `None`: the CPUs, at most 4).
        listing_threads: impl Into<Option<usize>>;
        /// Sets which files are opened with zero copy (`zero_copy`).
        zero_copy: ZeroCopyPolicy;
    }

    /// Sets the request timeout in seconds
    /// ([`PassthroughConfig::request_timeout`]; `None` or 0: none).
    #[must_use]
    pub fn request_timeout(mut self, seconds: impl Into<Option<u16>>) -> Self {
        self.request_timeout = seconds.into().filter(|&s| s > 0);
        self
    }

    /// Whether names may be cached for long while the source is watched:
    /// [`CachePolicy::Auto`], no `entry_timeout` set, `watch_source` on.
    pub fn source_watch_wanted(&self) -> bool {
        self.watch_source && self.cache == CachePolicy::Auto && self.entry_timeout.is_none()
    }

    /// Whether regular files' attributes may be cached for long while the
    /// source is watched: [`PassthroughConfig::source_watch_wanted`] and
    /// no `attr_timeout` set.
    pub fn file_watch_wanted(&self) -> bool {
        self.source_watch_wanted() && self.attr_timeout.is_none()
    }
}

impl PassthroughConfig {
    /// The attribute timeout in force.
    pub fn attr_timeout_in_force(&self) -> Duration {
        self.attr_timeout
            .unwrap_or_else(|| self.cache.default_timeout())
    }

    /// The entry timeout in force.
    pub fn entry_timeout_in_force(&self) -> Duration {
        self.entry_timeout
            .unwrap_or_else(|| self.cache.default_timeout())
    }

    /// Whether INIT offers READDIRPLUS: asked for ([`Self::readdirplus`])
    /// and the entry timeout in force above 0. With a timeout of 0 the
    /// kernel drops the names and attributes a READDIRPLUS carries at
    /// once: they would only cost a lookup and a FORGET per entry.
    pub fn readdirplus_offered(&self) -> bool {
        self.readdirplus && !self.entry_timeout_in_force().is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readdirplus_is_offered_only_while_names_are_cached() {
        let c = PassthroughConfig::default();
        assert!(c.clone().readdirplus_offered(), "the default offers it");
        assert!(!c.clone().readdirplus(false).readdirplus_offered());
        assert!(
            !c.clone().cache(CachePolicy::Never).readdirplus_offered(),
            "never: entry timeout 0"
        );
        assert!(c
            .clone()
            .cache(CachePolicy::Never)
            .entry_timeout(Duration::from_secs(1))
            .readdirplus_offered());
        assert!(!c.entry_timeout(Duration::ZERO).readdirplus_offered());
    }
}
