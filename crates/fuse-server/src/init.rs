//! INIT negotiation: what the kernel offers, what the server asks for, and
//! what was agreed.

use fuse_abi::{InitFlags, InitIn, InitOut, KERNEL_MINOR_VERSION, KERNEL_VERSION};

/// The page size the kernel's limits are counted in.
pub const PAGE_SIZE: usize = 4096;

/// The oldest protocol minor version the server speaks (Linux 2.6.31).
pub const MIN_KERNEL_MINOR: u32 = 12;

/// The kernel's INIT request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelInit {
    /// Kernel's major version.
    pub major: u32,
    /// Kernel's minor version.
    pub minor: u32,
    /// Largest readahead the kernel will do.
    pub max_readahead: u32,
    /// Every flag the kernel offers, both halves, unknown bits included.
    pub flags: InitFlags,
    /// The kernel's cap on `max_pages` (the `fs.fuse.max_pages_limit`
    /// sysctl; not part of the INIT message). [`KernelInit::from_init_in`]
    /// assumes the kernel's default, 256; the server reads the sysctl.
    pub max_pages_limit: u16,
}

/// The kernel's default `fs.fuse.max_pages_limit`.
pub const DEFAULT_MAX_PAGES_LIMIT: u16 = 256;

/// Reads `/proc/sys/fs/fuse/max_pages_limit`, if the kernel has it.
pub fn read_max_pages_limit() -> Option<u16> {
    let text = std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit").ok()?;
    let value: u32 = text.trim().parse().ok()?;
    Some(value.clamp(1, u16::MAX as u32) as u16)
}

impl KernelInit {
    /// From the wire struct (`flags2` only counts with `FUSE_INIT_EXT`).
    pub fn from_init_in(init: &InitIn) -> Self {
        let low = InitFlags::from_bits_retain(init.flags as u64);
        let flags = if low.contains(InitFlags::INIT_EXT) {
            InitFlags::from_halves(init.flags, init.flags2)
        } else {
            low
        };
        Self {
            major: init.major,
            minor: init.minor,
            max_readahead: init.max_readahead,
            flags,
            max_pages_limit: DEFAULT_MAX_PAGES_LIMIT,
        }
    }
}

/// What the server asks for in its INIT reply. Starts from
/// [`InitConfig::default`]; the file system's `init` and the transport
/// adjust it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InitConfig {
    /// Flags asked for; only those the kernel offers are kept.
    pub flags: InitFlags,
    /// Largest WRITE payload (at least 4096).
    pub max_write: u32,
    /// Largest readahead (capped at the kernel's).
    pub max_readahead: u32,
    /// Largest number of background requests (readahead, async direct I/O).
    pub max_background: u16,
    /// Background requests at which the kernel marks the connection congested.
    pub congestion_threshold: u16,
    /// Timestamp granularity in nanoseconds.
    pub time_gran: u32,
    /// Largest number of pages per request (the kernel caps it at its
    /// `max_pages_limit`, 256 by default).
    pub max_pages: u16,
    /// log2 of the DAX mapping alignment.
    pub map_alignment: u16,
    /// Largest stacking depth of passthrough backing files, with
    /// `FUSE_PASSTHROUGH`: 1 when they live on a plain file system (the
    /// mount can then itself be a layer of an overlayfs), 2 when they live
    /// on a stacked one such as overlayfs. INIT sends it clamped to 1..=2
    /// ([`crate::FILESYSTEM_MAX_STACK_DEPTH`]); 0 counts as 1.
    pub max_stack_depth: u32,
    /// Request timeout in seconds (with `FUSE_REQUEST_TIMEOUT`; 0: none).
    pub request_timeout: u16,
}

impl Default for InitConfig {
    fn default() -> Self {
        Self {
            flags: InitFlags::ASYNC_READ
                | InitFlags::BIG_WRITES
                | InitFlags::MAX_PAGES
                | InitFlags::INIT_EXT
                | InitFlags::PARALLEL_DIROPS
                | InitFlags::ASYNC_DIO,
            max_write: 1 << 20,
            max_readahead: 1 << 20,
            max_background: 64,
            congestion_threshold: 48,
            time_gran: 1,
            max_pages: 256,
            map_alignment: 0,
            max_stack_depth: 0,
            request_timeout: 0,
        }
    }
}

/// Builder-style setters, one per field: start from [`InitConfig::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl InitConfig {
    /// Sets the flags asked for (`flags`).
    #[must_use]
    pub fn flags(mut self, flags: InitFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Sets the largest WRITE payload (`max_write`).
    #[must_use]
    pub fn max_write(mut self, n: u32) -> Self {
        self.max_write = n;
        self
    }

    /// Sets the largest readahead (`max_readahead`).
    #[must_use]
    pub fn max_readahead(mut self, n: u32) -> Self {
        self.max_readahead = n;
        self
    }

    /// Sets the largest number of background requests (`max_background`).
    #[must_use]
    pub fn max_background(mut self, n: u16) -> Self {
        self.max_background = n;
        self
    }

    /// Sets the congestion threshold (`congestion_threshold`).
    #[must_use]
    pub fn congestion_threshold(mut self, n: u16) -> Self {
        self.congestion_threshold = n;
        self
    }

    /// Sets the timestamp granularity in nanoseconds (`time_gran`).
    #[must_use]
    pub fn time_gran(mut self, nanoseconds: u32) -> Self {
        self.time_gran = nanoseconds;
        self
    }

    /// Sets the largest number of pages per request (`max_pages`).
    #[must_use]
    pub fn max_pages(mut self, n: u16) -> Self {
        self.max_pages = n;
        self
    }

    /// Sets the log2 of the DAX mapping alignment (`map_alignment`).
    #[must_use]
    pub fn map_alignment(mut self, log2: u16) -> Self {
        self.map_alignment = log2;
        self
    }

    /// Sets the largest passthrough stacking depth (`max_stack_depth`).
    #[must_use]
    pub fn max_stack_depth(mut self, depth: u32) -> Self {
        self.max_stack_depth = depth;
        self
    }

    /// Sets the request timeout in seconds (`request_timeout`; 0: none).
    #[must_use]
    pub fn request_timeout(mut self, seconds: u16) -> Self {
        self.request_timeout = seconds;
        self
    }
}

/// The result of INIT, as both sides use it from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// What the kernel offered, raw flags included (also bits this crate
    /// doesn't name, such as a newer kernel's).
    pub kernel: KernelInit,
    /// The protocol minor version in use: the smaller of the two.
    pub minor: u32,
    /// The flags in force: asked for and offered.
    pub flags: InitFlags,
    /// Largest WRITE payload.
    pub max_write: u32,
    /// Largest number of pages per request, as the kernel uses it (capped
    /// at its `max_pages_limit`).
    pub max_pages: u16,
    /// Largest readahead.
    pub max_readahead: u32,
    /// Timestamp granularity in nanoseconds.
    pub time_gran: u32,
    /// Largest number of background requests.
    pub max_background: u16,
    /// Congestion threshold.
    pub congestion_threshold: u16,
    /// Largest passthrough stacking depth.
    pub max_stack_depth: u32,
    /// Request timeout in seconds.
    pub request_timeout: u16,
}

impl Negotiated {
    /// The payload buffer size of a FUSE-over-io_uring entry, computed as the
    /// kernel's `fuse_uring_create()` does:
    /// `max(FUSE_MIN_READ_BUFFER, max_write, max_pages * PAGE_SIZE)`.
    pub fn uring_payload_size(&self) -> usize {
        fuse_abi::MIN_READ_BUFFER
            .max(self.max_write as usize)
            .max(self.max_pages as usize * PAGE_SIZE)
    }

    /// The largest request the kernel sends: the header, a WRITE's header
    /// and `max_write` bytes, and at least `FUSE_MIN_READ_BUFFER`. A
    /// `/dev/fuse` read buffer must be at least this big.
    pub fn max_request_size(&self) -> usize {
        let write = size_of::<fuse_abi::InHeader>()
            + size_of::<fuse_abi::WriteIn>()
            + self.max_write as usize;
        write
            .max(fuse_abi::MIN_READ_BUFFER)
            .max(self.max_pages as usize * PAGE_SIZE + PAGE_SIZE)
    }

    /// The largest reply body: a READ of `max_pages` pages.
    pub fn max_reply_size(&self) -> usize {
        (self.max_pages as usize * PAGE_SIZE)
            .max(self.max_write as usize)
            .max(PAGE_SIZE)
    }

    /// Whether INIT agreed to kernel passthrough (`FUSE_PASSTHROUGH`, with
    /// a `max_stack_depth` of 1 or 2 and without the writeback cache).
    pub fn passthrough(&self) -> bool {
        self.flags.contains(InitFlags::PASSTHROUGH) && self.max_stack_depth > 0
    }

    /// Whether the kernel offered FUSE over io_uring and the server took it.
    pub fn over_io_uring(&self) -> bool {
        self.flags.contains(InitFlags::OVER_IO_URING)
    }
}

/// How INIT was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// Agreed; the reply carries the first `reply_len` bytes of `reply`.
    Agreed {
        /// The result.
        negotiated: Negotiated,
        /// The reply.
        reply: InitOut,
        /// How many bytes of `reply` the kernel's version expects.
        reply_len: usize,
    },
    /// The kernel speaks a newer major version: reply with ours only and
    /// wait for a new INIT.
    MajorOnly(InitOut),
    /// The kernel is too old; reply with this errno.
    Refused(i32),
}

/// Negotiates: the kernel's offer and the server's wishes (already
/// adjusted by the file system) give the reply and the agreed values.
pub fn negotiate(kernel: &KernelInit, wanted: &InitConfig) -> InitOutcome {
    if kernel.major > KERNEL_VERSION {
        return InitOutcome::MajorOnly(InitOut {
            major: KERNEL_VERSION,
            minor: KERNEL_MINOR_VERSION,
            ..InitOut::default()
        });
    }
    if kernel.major < KERNEL_VERSION || kernel.minor < MIN_KERNEL_MINOR {
        return InitOutcome::Refused(libc::EPROTO);
    }
    let minor = kernel.minor.min(KERNEL_MINOR_VERSION);
    let mut flags = wanted.flags & kernel.flags;
    // Without the extended INIT the kernel can't read the high half.
    if !flags.contains(InitFlags::INIT_EXT) {
        flags = InitFlags::from_bits_retain(flags.bits() & 0xffff_ffff);
    }
    // The kernel turns passthrough off (silently) next to the writeback
    // cache: say so here, so `Negotiated` tells the truth.
    if flags.contains(InitFlags::PASSTHROUGH) && flags.contains(InitFlags::WRITEBACK_CACHE) {
        tracing::warn!(
            "FUSE_PASSTHROUGH and FUSE_WRITEBACK_CACHE exclude each other: no passthrough"
        );
        flags.remove(InitFlags::PASSTHROUGH);
    }
    let max_write = wanted.max_write.max(4096);
    let max_pages = if flags.contains(InitFlags::MAX_PAGES) {
        wanted.max_pages.max(1).min(kernel.max_pages_limit.max(1))
    } else {
        // Without MAX_PAGES the kernel uses 32 pages.
        32
    };
    let max_readahead = wanted.max_readahead.min(kernel.max_readahead);
    let negotiated = Negotiated {
        kernel: *kernel,
        minor,
        flags,
        max_write,
        max_pages,
        max_readahead,
        time_gran: wanted.time_gran.clamp(1, 1_000_000_000),
        max_background: wanted.max_background,
        congestion_threshold: wanted.congestion_threshold,
        max_stack_depth: if flags.contains(InitFlags::PASSTHROUGH) {
            wanted
                .max_stack_depth
                .clamp(1, crate::backing::FILESYSTEM_MAX_STACK_DEPTH)
        } else {
            0
        },
        request_timeout: if flags.contains(InitFlags::REQUEST_TIMEOUT) {
            wanted.request_timeout
        } else {
            0
        },
    };
    let reply = InitOut {
        major: KERNEL_VERSION,
        minor: KERNEL_MINOR_VERSION,
        max_readahead,
        flags: flags.low(),
        max_background: negotiated.max_background,
        congestion_threshold: negotiated.congestion_threshold,
        max_write,
        time_gran: negotiated.time_gran,
        max_pages: if flags.contains(InitFlags::MAX_PAGES) {
            max_pages
        } else {
            0
        },
        map_alignment: wanted.map_alignment,
        flags2: flags.high(),
        max_stack_depth: negotiated.max_stack_depth,
        request_timeout: negotiated.request_timeout,
        unused: [0; 11],
    };
    let reply_len = if minor < 5 {
        fuse_abi::COMPAT_INIT_OUT_SIZE
    } else if minor < 23 {
        fuse_abi::COMPAT_22_INIT_OUT_SIZE
    } else {
        size_of::<InitOut>()
    };
    InitOutcome::Agreed {
        negotiated,
        reply,
        reply_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(minor: u32, flags: InitFlags) -> KernelInit {
        KernelInit {
            major: 7,
            minor,
            max_readahead: 128 * 1024,
            flags,
            max_pages_limit: 256,
        }
    }

    #[test]
    fn keeps_only_offered_flags_and_records_raw_bits() {
        let offered = InitFlags::ASYNC_READ
            | InitFlags::MAX_PAGES
            | InitFlags::INIT_EXT
            | InitFlags::OVER_IO_URING
            | InitFlags::HAS_IO_URING_BUFPOOL
            | InitFlags::from_bits_retain(1 << 60);
        let k = kernel(46, offered);
        let mut wanted = InitConfig::default();
        wanted.flags |= InitFlags::OVER_IO_URING | InitFlags::WRITEBACK_CACHE;
        let InitOutcome::Agreed {
            negotiated,
            reply,
            reply_len,
        } = negotiate(&k, &wanted)
        else {
            panic!("not agreed")
        };
        assert_eq!(reply_len, 64);
        assert!(negotiated.flags.contains(InitFlags::OVER_IO_URING));
        assert!(!negotiated.flags.contains(InitFlags::WRITEBACK_CACHE));
        assert!(negotiated
            .kernel
            .flags
            .contains(InitFlags::HAS_IO_URING_BUFPOOL));
        assert_eq!(negotiated.kernel.flags.bits() & (1 << 60), 1 << 60);
        assert_eq!(reply.flags2, (InitFlags::OVER_IO_URING.bits() >> 32) as u32);
        assert_eq!(negotiated.max_readahead, 128 * 1024);
        assert_eq!(negotiated.max_write, 1 << 20);
        assert_eq!(negotiated.max_pages, 256);
    }

    #[test]
    fn uring_payload_size_follows_the_kernel_formula() {
        let k = kernel(46, InitFlags::MAX_PAGES | InitFlags::INIT_EXT);
        let cases = [
            (4096u32, 1u16, 8192usize),
            (4096, 4, 16384),
            (65536, 8, 65536),
            (1 << 20, 256, 1 << 20),
        ];
        for (max_write, max_pages, want) in cases {
            let wanted = InitConfig {
                max_write,
                max_pages,
                ..InitConfig::default()
            };
            let InitOutcome::Agreed { negotiated, .. } = negotiate(&k, &wanted) else {
                panic!()
            };
            assert_eq!(
                negotiated.uring_payload_size(),
                want,
                "max_write {max_write} max_pages {max_pages}"
            );
        }
    }

    #[test]
    fn max_pages_is_capped_by_the_kernel_limit() {
        let k = KernelInit {
            max_pages_limit: 64,
            ..kernel(46, InitFlags::MAX_PAGES | InitFlags::INIT_EXT)
        };
        let InitOutcome::Agreed { negotiated, .. } = negotiate(&k, &InitConfig::default()) else {
            panic!()
        };
        assert_eq!(negotiated.max_pages, 64);
        assert_eq!(
            negotiated.uring_payload_size(),
            1 << 20,
            "max_write still counts"
        );
        let wanted = InitConfig {
            max_write: 65536,
            ..InitConfig::default()
        };
        let InitOutcome::Agreed { negotiated, .. } = negotiate(&k, &wanted) else {
            panic!()
        };
        assert_eq!(negotiated.uring_payload_size(), 64 * 4096);
    }

    #[test]
    fn old_and_new_majors() {
        assert_eq!(
            negotiate(
                &KernelInit {
                    major: 6,
                    ..kernel(46, InitFlags::empty())
                },
                &InitConfig::default()
            ),
            InitOutcome::Refused(libc::EPROTO)
        );
        assert_eq!(
            negotiate(&kernel(11, InitFlags::empty()), &InitConfig::default()),
            InitOutcome::Refused(libc::EPROTO)
        );
        let InitOutcome::MajorOnly(out) = negotiate(
            &KernelInit {
                major: 8,
                ..kernel(0, InitFlags::empty())
            },
            &InitConfig::default(),
        ) else {
            panic!()
        };
        assert_eq!((out.major, out.minor), (7, 46));
        let InitOutcome::Agreed {
            reply_len,
            negotiated,
            ..
        } = negotiate(&kernel(22, InitFlags::empty()), &InitConfig::default())
        else {
            panic!()
        };
        assert_eq!(reply_len, 24);
        assert_eq!(negotiated.max_pages, 32);
    }

    #[test]
    fn passthrough_stack_depth_and_writeback() {
        let offered = InitFlags::INIT_EXT
            | InitFlags::MAX_PAGES
            | InitFlags::PASSTHROUGH
            | InitFlags::WRITEBACK_CACHE;
        let k = kernel(45, offered);
        let agree = |flags: InitFlags, depth: u32| {
            let wanted = InitConfig {
                flags: InitConfig::default().flags | flags,
                max_stack_depth: depth,
                ..InitConfig::default()
            };
            let InitOutcome::Agreed {
                negotiated, reply, ..
            } = negotiate(&k, &wanted)
            else {
                panic!("not agreed")
            };
            (negotiated, reply)
        };
        // Not asked for: no depth sent.
        let (n, r) = agree(InitFlags::empty(), 2);
        assert!(!n.passthrough());
        assert_eq!(r.max_stack_depth, 0);
        // Asked for: the depth is clamped to what the kernel accepts.
        for (asked, sent) in [(0, 1), (1, 1), (2, 2), (7, 2)] {
            let (n, r) = agree(InitFlags::PASSTHROUGH, asked);
            assert!(n.passthrough());
            assert_eq!((n.max_stack_depth, r.max_stack_depth), (sent, sent));
            assert_ne!(r.flags2 & (InitFlags::PASSTHROUGH.bits() >> 32) as u32, 0);
        }
        // With the writeback cache the kernel would ignore it: dropped.
        let (n, r) = agree(InitFlags::PASSTHROUGH | InitFlags::WRITEBACK_CACHE, 1);
        assert!(!n.passthrough());
        assert!(n.flags.contains(InitFlags::WRITEBACK_CACHE));
        assert_eq!(r.flags2 & (InitFlags::PASSTHROUGH.bits() >> 32) as u32, 0);
        assert_eq!(r.max_stack_depth, 0);
        // Not offered (an old kernel): nothing.
        let old = kernel(38, InitFlags::INIT_EXT | InitFlags::MAX_PAGES);
        let wanted = InitConfig {
            flags: InitConfig::default().flags | InitFlags::PASSTHROUGH,
            max_stack_depth: 1,
            ..InitConfig::default()
        };
        let InitOutcome::Agreed {
            negotiated, reply, ..
        } = negotiate(&old, &wanted)
        else {
            panic!()
        };
        assert!(!negotiated.passthrough());
        assert_eq!(reply.max_stack_depth, 0);
    }

    #[test]
    fn flags2_ignored_without_init_ext() {
        let init = InitIn {
            major: 7,
            minor: 46,
            max_readahead: 0,
            flags: 1,
            flags2: 0xff,
            unused: [0; 11],
        };
        assert_eq!(KernelInit::from_init_in(&init).flags, InitFlags::ASYNC_READ);
        let init = InitIn {
            flags: InitFlags::INIT_EXT.bits() as u32,
            flags2: 1 << 11,
            ..init
        };
        assert!(KernelInit::from_init_in(&init)
            .flags
            .contains(InitFlags::HAS_IO_URING_BUFPOOL));
    }
}
