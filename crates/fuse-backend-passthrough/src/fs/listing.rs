//! A READDIRPLUS reply's lookups shared out between threads
//! ([`PassthroughConfig::listing_threads`]).
//!
//! A first listing's reply holds about 200 names (the kernel asks for as
//! much as the reader's buffer holds, 32 KiB for `ls`), each a lookup in
//! the source: a `statx` and a `name_to_handle_at` by name, with the inode
//! read from disk when the source's caches are cold. Done one after the
//! other on the serving thread, the client waits and the other CPUs idle.
//! So the names the reply will hold are read from the directory stream's
//! buffer before it is handed out ([`DirStream::peek`](crate::handle::DirStream::peek)), helpers look up
//! shares of them while the serving thread looks up the first share, and
//! the serving thread fills the reply in the stream's order, taking each
//! helper's results when it reaches that helper's first name. A share no
//! helper has started by then is the serving thread's after all (the
//! helper, when it comes to it, finds it taken and returns).
//!
//! The helpers are two small pools ([`ListingPools`]), each on one half of
//! the CPUs, made on the first reply worth sharing; a serving thread hands
//! its shares to the pool on the other half, so a helper never waits for
//! the CPU of the (busy) thread that woke it. The reply waits, as it ends,
//! for its shares' helpers to be done with them (they borrow the request's
//! state): at most, a helper's share of another reply it was busy with.
//!
//! What stays as it was: the reply holds the same entries in the same
//! order; a lookup reference goes to the kernel only with an entry the
//! reply carries (a result not used is dropped, and its [`CountedEntry`]
//! gives its reference back, as an entry that doesn't fit always did);
//! the crash journal's `handed` runs on the serving thread, as the reply
//! is filled. Only the order of the lookups changes, and each names its
//! own entry.

use super::*;
use crate::config::MIN_NAMES_PER_LISTING_THREAD;
use crate::handle::dirents;
use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver};

/// A helper's stack: lookups are shallow.
const HELPER_STACK: usize = 256 * 1024;

/// Names of one reply for a helper to look up: raw `linux_dirent64`
/// records copied from the stream's buffer.
pub(super) struct Share {
    /// The cookie of its first name: where the serving thread takes its
    /// results.
    first: u64,
    records: Vec<u8>,
}

/// The helpers' shares of a READDIRPLUS reply of at most `size` bytes
/// whose next entries are the raw records `records`, for `threads`
/// threads in all (the serving thread keeps the first share). None when
/// the reply holds too few names to share.
pub(super) fn plan_shares(records: &[u8], size: usize, threads: usize) -> Vec<Share> {
    // The names that fit, as the end of each one's record in `records`
    // (the reply may have less room than `size`: what doesn't fit is
    // given back).
    let mut room = size;
    let mut ends = Vec::new();
    let mut at = 0;
    for (e, record) in dirents(records) {
        let need = fuse_abi::direntplus_size(e.name.len());
        if need > room {
            break;
        }
        room -= need;
        at += record.len();
        ends.push((at, e.off, is_dot_or_dotdot(e.name)));
    }
    let threads = threads.min(ends.len() / MIN_NAMES_PER_LISTING_THREAD);
    if threads < 2 {
        return Vec::new();
    }
    let per = ends.len().div_ceil(threads);
    let mut shares = Vec::with_capacity(threads - 1);
    for t in 1..threads {
        let (lo, hi) = (per * t, (per * (t + 1)).min(ends.len()));
        if lo >= hi {
            break;
        }
        // Dot entries are the serving thread's (no lookup): a share is
        // taken at its first other name.
        let Some(first) = ends[lo..hi].iter().find(|e| !e.2).map(|e| e.1) else {
            continue;
        };
        let start = ends[lo - 1].0;
        shares.push(Share {
            first,
            records: records[start..ends[hi - 1].0].to_vec(),
        });
    }
    shares
}

/// The lookups of one share: each name's cookie and result.
type Looked<'fs> = Vec<(u64, io::Result<CountedEntry<'fs>>)>;

/// A share handed to the pool.
struct Pending<'fs> {
    /// The cookie of its first name.
    first: u64,
    /// Set by whichever of the helper and the serving thread takes the
    /// share first.
    claimed: Arc<AtomicBool>,
    /// The helper's lookups, sent once done.
    looked: Receiver<Looked<'fs>>,
}

/// Lookups done ahead by helpers, taken in the stream's order.
pub(super) struct Ahead<'fs> {
    pending: VecDeque<Pending<'fs>>,
    ready: VecDeque<(u64, io::Result<CountedEntry<'fs>>)>,
}

impl<'fs> Ahead<'fs> {
    /// Nothing looked up ahead.
    pub(super) fn none() -> Self {
        Self {
            pending: VecDeque::new(),
            ready: VecDeque::new(),
        }
    }

    /// Hands each share to a helper of `scope`'s pool, looking up names in
    /// `parent`.
    pub(super) fn start<'scope>(
        scope: &rayon::Scope<'scope>,
        fs: &'fs PassthroughFs,
        parent: &'fs Inode,
        shares: Vec<Share>,
    ) -> Self
    where
        'fs: 'scope,
    {
        let mut pending = VecDeque::with_capacity(shares.len());
        for share in shares {
            let (sender, looked) = sync_channel(1);
            let claimed = Arc::new(AtomicBool::new(false));
            let taken = claimed.clone();
            scope.spawn(move |_| {
                if taken.swap(true, Ordering::AcqRel) {
                    // The serving thread got there first.
                    return;
                }
                let _ = sender.send(fs.look_up_share(parent, &share.records));
            });
            pending.push_back(Pending {
                first: share.first,
                claimed,
                looked,
            });
        }
        Self {
            pending,
            ready: VecDeque::new(),
        }
    }

    /// The lookup of the entry with cookie `off`, if a helper made it.
    pub(super) fn take(&mut self, off: u64) -> Option<io::Result<CountedEntry<'fs>>> {
        if self.pending.front().is_some_and(|p| p.first == off) {
            if let Some(p) = self.pending.pop_front() {
                // What a share before this one left unused goes (its
                // references with it): the stream is past it.
                self.ready = if p.claimed.swap(true, Ordering::AcqRel) {
                    // A helper has it: wait for its lookups (a helper
                    // that panicked sends none, and they are made again).
                    p.looked.recv().map(VecDeque::from).unwrap_or_default()
                } else {
                    VecDeque::new()
                };
            }
        }
        match self.ready.front() {
            Some((cookie, _)) if *cookie == off => self.ready.pop_front().map(|(_, r)| r),
            _ => None,
        }
    }
}

/// The listing helpers: two pools, each on one half of the CPUs the
/// process may use, so that a serving thread hands its shares to the pool
/// on the other half. A pool of threads free to run anywhere doesn't do:
/// woken by a busy serving thread, a helper was put on that thread's CPU
/// and ran only once the serving thread had done the whole reply itself
/// (a ring thread is pinned to its CPU, and the scheduler put the woken
/// helper beside it: measured, every share).
pub(super) struct ListingPools {
    /// The first half of the CPUs; `pools[0]` runs on the second half.
    first_half: libc::cpu_set_t,
    pools: [rayon::ThreadPool; 2],
}

impl ListingPools {
    /// Pools of up to `helpers` threads each on the halves of `cpus`;
    /// `None` with fewer than two CPUs.
    fn new(cpus: &libc::cpu_set_t, helpers: usize) -> io::Result<Option<Self>> {
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: every index is below the set's capacity.
        let listed: Vec<usize> = (0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, cpus) })
            .collect();
        if listed.len() < 2 {
            return Ok(None);
        }
        let (first, second) = listed.split_at(listed.len() / 2);
        let set_of = |half: &[usize]| {
            // SAFETY: a zeroed cpu_set_t is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for &c in half {
                // SAFETY: `c` is below the set's capacity.
                unsafe { libc::CPU_SET(c, &mut set) };
            }
            set
        };
        let pool_on = |half: &[usize], name: &'static str| {
            let set = set_of(half);
            rayon::ThreadPoolBuilder::new()
                .num_threads(helpers.min(half.len()))
                .thread_name(move |i| format!("{name}-{i}"))
                .stack_size(HELPER_STACK)
                // A thread inherits the CPUs of the one that made it,
                // which may be a ring thread pinned to one CPU.
                .start_handler(move |_| {
                    if let Err(e) = fuse_server::sys::set_affinity(&set) {
                        tracing::debug!("listing helper: setting its CPUs: {e}");
                    }
                })
                .build()
                .map_err(io::Error::other)
        };
        Ok(Some(Self {
            first_half: set_of(first),
            pools: [
                pool_on(second, "pfs-listing-b")?,
                pool_on(first, "pfs-listing-a")?,
            ],
        }))
    }

    /// The pool for a serving thread on CPU `cpu` (negative: unknown):
    /// the one on the other half.
    fn for_cpu(&self, cpu: i32) -> &rayon::ThreadPool {
        let in_first = usize::try_from(cpu).is_ok_and(|c| {
            // SAFETY: the index is checked against the set's capacity.
            c < 8 * std::mem::size_of::<libc::cpu_set_t>()
                && unsafe { libc::CPU_ISSET(c, &self.first_half) }
        });
        &self.pools[usize::from(!in_first)]
    }
}

/// The listing helpers: made on first use, `None` when they can't be.
pub(super) type ListingPool = std::sync::OnceLock<Option<ListingPools>>;

impl PassthroughFs {
    /// The listing helper threads made so far (none until a READDIRPLUS
    /// reply is worth sharing, and none with one CPU or
    /// [`PassthroughConfig::listing_threads`] 1).
    pub fn listing_helpers(&self) -> usize {
        self.listing_pool
            .get()
            .and_then(Option::as_ref)
            .map_or(0, |p| {
                p.pools
                    .iter()
                    .map(rayon::ThreadPool::current_num_threads)
                    .sum()
            })
    }

    /// The pool of listing helpers for the calling thread (on the other
    /// half of the CPUs), the pools made now if they aren't yet.
    pub(super) fn listing_pool(&self) -> Option<&rayon::ThreadPool> {
        let helpers = self.cfg.listing_threads.unwrap_or(1).saturating_sub(1);
        let pools = self.listing_pool.get_or_init(|| {
            let made = match (&self.listing_cpus, helpers) {
                (Some(cpus), 1..) => {
                    // The helpers are started with every CPU of the
                    // process (they take their half as they start): a
                    // thread starts with its maker's CPUs, and a helper
                    // started on a pinned ring thread's CPU would wait
                    // there until that thread yields.
                    let own = fuse_server::sys::current_affinity().ok();
                    let _ = fuse_server::sys::set_affinity(cpus);
                    let made = ListingPools::new(cpus, helpers);
                    if let Some(own) = &own {
                        let _ = fuse_server::sys::set_affinity(own);
                    }
                    made
                }
                _ => Ok(None),
            };
            made.unwrap_or_else(|e| {
                tracing::warn!("listing helpers: {e}; each listing on its serving thread");
                None
            })
        });
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        pools.as_ref().map(|p| p.for_cpu(cpu))
    }

    /// A helper's work: looks up in `parent` each name of `records` but
    /// the dot entries.
    fn look_up_share(&self, parent: &Inode, records: &[u8]) -> Looked<'_> {
        // As the serving thread: the source as the daemon sees it.
        self.creds.root();
        dirents(records)
            .filter(|(e, _)| !is_dot_or_dotdot(e.name))
            .map(|(e, _)| (e.off, self.lookup_listed(parent, e.cname, e.ino)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raw `linux_dirent64` records of `names`, cookies 1, 2, ….
    fn records(names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let reclen = (19 + name.len() + 1).next_multiple_of(8);
            out.extend_from_slice(&(100 + i as u64).to_ne_bytes());
            out.extend_from_slice(&(i as u64 + 1).to_ne_bytes());
            out.extend_from_slice(&(reclen as u16).to_ne_bytes());
            out.push(libc::DT_REG);
            out.extend_from_slice(name.as_bytes());
            out.resize(out.len() + reclen - 19 - name.len(), 0);
        }
        out
    }

    fn names_of(share: &Share) -> Vec<String> {
        dirents(&share.records)
            .map(|(e, _)| String::from_utf8_lossy(e.name).into_owned())
            .collect()
    }

    #[test]
    fn a_reply_of_few_names_is_not_shared() {
        let names: Vec<String> = (0..20).map(|i| format!("f.{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(plan_shares(&records(&names), 1 << 20, 4).is_empty());
        assert!(plan_shares(&records(&names), 1 << 20, 1).is_empty());
    }

    #[test]
    fn shares_cover_what_fits_after_the_serving_threads_part() {
        let names: Vec<String> = (0..100).map(|i| format!("f.{i:03}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let raw = records(&refs);
        // Room for 64 names of 5 bytes (160 bytes each): 4 threads of 16.
        let size = 64 * fuse_abi::direntplus_size(5);
        let shares = plan_shares(&raw, size, 4);
        assert_eq!(shares.len(), 3);
        assert_eq!(
            shares[0].first, 17,
            "the second share starts at the 17th name"
        );
        let got: Vec<String> = shares.iter().flat_map(names_of).collect();
        assert_eq!(got, names[16..64], "the helpers get names 16..64, in order");
        // Two threads: the second half.
        let shares = plan_shares(&raw, size, 2);
        assert_eq!(shares.len(), 1);
        assert_eq!(names_of(&shares[0]), names[32..64]);
    }

    #[test]
    fn a_share_starts_at_its_first_name_that_is_not_a_dot_entry() {
        let mut names: Vec<String> = (0..40).map(|i| format!("f.{i:03}")).collect();
        names[20] = "..".into();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let shares = plan_shares(&records(&refs), 1 << 20, 2);
        assert_eq!(shares.len(), 1);
        assert_eq!(names_of(&shares[0])[0], "..", "the record is carried");
        assert_eq!(shares[0].first, 22, "but the share is taken at f.021");
    }
}
