//! The passthrough's table for crash recovery: the node ids and open
//! handles the kernel holds, kept in shared memory that outlives the
//! serving process (a [`Region`] of a `fuse_server::recovery::StateArea`
//! that a supervisor holds), so that a new process continues the same
//! connection after a `kill -9`.
//!
//! Unlike a live upgrade (`fs/takeover.rs`), nothing of the dead process
//! can move as a descriptor, so a node is kept as its file handle
//! (`name_to_handle_at`; a passthrough without file handles can't be
//! recovered) and a handle as what it was opened with, to open again.
//! The table is updated as the passthrough answers: a node's slot is
//! written when the node is made and freed when the kernel forgot it, its
//! lookup count follows what replies handed to the kernel (the temporary
//! references requests take are not in it), a handle's slot is written
//! when the handle is made and freed at RELEASE, with the kernel
//! passthrough backing id its open was counted with (the ids belong to
//! the connection and outlive the process: the next one adopts them, and
//! counts each inode's opens from its handles).
//!
//! Each slot's first word says whether it is in use and is written last
//! (and cleared first), so a process killed while writing a slot leaves
//! it unused, never half made. A node slot is 32 words: in use, node id,
//! lookup count, inode number, device, mount id, mode, generation, handle
//! type and length, the handle's bytes (16 words). A handle slot is 8:
//! in use, handle number, node id, open flags, file or directory, backing
//! id.

use crate::inode::Inode;
use crate::lock;
use crate::sys::FileHandle;
use fuse_server::recovery::Region;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const MAGIC: u64 = u64::from_le_bytes(*b"PTCRASH1");
/// The layout version of the table.
pub const CRASH_TABLE_VERSION: u64 = 1;

const HEADER_WORDS: usize = 16;
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_NODE_CAP: usize = 2;
const H_HANDLE_CAP: usize = 3;
const H_NODE_HIGH: usize = 4;
const H_HANDLE_HIGH: usize = 5;
const H_ROOT_INO: usize = 6;
const H_ROOT_DEV: usize = 7;
/// Handle numbers below this may have been given out (noted in a request's
/// journal record, or handed to the kernel) by some process: the next one
/// numbers its handles from here. 0 in a table written before the word
/// was kept (the same layout otherwise).
const H_HANDLES_NUMBERED_BELOW: usize = 8;
/// How many handle numbers a process takes at once (one write of the
/// shared word per this many opens).
const HANDLE_NUMBERS_TAKEN: u64 = 1024;

const NODE_WORDS: usize = 32;
const N_USED: usize = 0;
const N_ID: usize = 1;
const N_REFS: usize = 2;
const N_INO: usize = 3;
const N_DEV: usize = 4;
const N_MNT: usize = 5;
const N_MODE: usize = 6;
const N_GEN: usize = 7;
const N_HANDLE_HEAD: usize = 8;
const N_HANDLE_AT: usize = 9;
const HANDLE_WORDS_MAX: usize = crate::sys::MAX_HANDLE_SZ / 8;

const HANDLE_SLOT_WORDS: usize = 8;
const F_USED: usize = 0;
const F_FH: usize = 1;
const F_NODE: usize = 2;
const F_FLAGS: usize = 3;
const F_DIR: usize = 4;
const F_PASSTHROUGH: usize = 5;

/// Bytes a table for `nodes` nodes (and a quarter as many handles) needs.
pub fn crash_table_bytes(nodes: usize) -> usize {
    (HEADER_WORDS + nodes * NODE_WORDS + nodes.div_ceil(4) * HANDLE_SLOT_WORDS) * 8
}

/// No slot.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// A node as the table kept it.
pub(crate) struct NodeRecord {
    pub slot: u32,
    pub nodeid: u64,
    pub refs: u64,
    pub ino: u64,
    pub dev: u64,
    pub mnt_id: u64,
    pub mode: u32,
    pub handle: FileHandle,
}

/// A handle as the table kept it.
pub(crate) struct HandleRecord {
    pub slot: u32,
    pub fh: u64,
    pub nodeid: u64,
    pub flags: i32,
    pub dir: bool,
    /// Kernel passthrough's backing id its open counted (0: served by the
    /// daemon; -1: not counted).
    pub passthrough_id: i32,
}

struct Slots {
    free: Vec<u32>,
    /// Slots below this were used at some time.
    high: u32,
    cap: u32,
}

impl Slots {
    fn take(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if self.high < self.cap {
            self.high += 1;
            return Some(self.high - 1);
        }
        None
    }
}

/// See the module documentation.
pub(crate) struct CrashTable {
    region: Region,
    node_cap: usize,
    handles_at: usize,
    nodes: Mutex<Slots>,
    handles: Mutex<Slots>,
    full_warned: std::sync::atomic::AtomicBool,
}

impl CrashTable {
    /// The table in `region`: a new one if the region is empty (zeroed),
    /// else the one a previous process kept there, which must be of this
    /// version and this source (root inode `root`: inode number, device).
    pub(crate) fn open(region: Region, root: (u64, u64)) -> io::Result<CrashTable> {
        let words = region.words();
        let total = words.len();
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        let node_cap = (total.saturating_sub(HEADER_WORDS)) / (NODE_WORDS + HANDLE_SLOT_WORDS / 4);
        let handle_cap = node_cap / 4;
        if node_cap == 0 || handle_cap == 0 {
            return Err(bad(format!(
                "a crash table needs more than {} bytes",
                total * 8
            )));
        }
        let handles_at = HEADER_WORDS + node_cap * NODE_WORDS;
        let (node_high, handle_high) = match words[H_MAGIC].load(Ordering::Acquire) {
            0 => {
                words[H_VERSION].store(CRASH_TABLE_VERSION, Ordering::Relaxed);
                words[H_NODE_CAP].store(node_cap as u64, Ordering::Relaxed);
                words[H_HANDLE_CAP].store(handle_cap as u64, Ordering::Relaxed);
                words[H_ROOT_INO].store(root.0, Ordering::Relaxed);
                words[H_ROOT_DEV].store(root.1, Ordering::Relaxed);
                words[H_MAGIC].store(MAGIC, Ordering::Release);
                (0, 0)
            }
            MAGIC => {
                let version = words[H_VERSION].load(Ordering::Relaxed);
                if version != CRASH_TABLE_VERSION {
                    return Err(bad(format!(
                        "crash table version {version}, this build reads version \
                         {CRASH_TABLE_VERSION}"
                    )));
                }
                if words[H_NODE_CAP].load(Ordering::Relaxed) != node_cap as u64
                    || words[H_HANDLE_CAP].load(Ordering::Relaxed) != handle_cap as u64
                {
                    return Err(bad("crash table of another size".into()));
                }
                let kept = (
                    words[H_ROOT_INO].load(Ordering::Relaxed),
                    words[H_ROOT_DEV].load(Ordering::Relaxed),
                );
                if kept != root {
                    return Err(bad(format!(
                        "the crash table is of another source (root inode {} on device {}, \
                         this one serves {} on {})",
                        kept.0, kept.1, root.0, root.1
                    )));
                }
                let high = |at: usize, cap: usize| {
                    (words[at].load(Ordering::Acquire) as usize).min(cap) as u32
                };
                (high(H_NODE_HIGH, node_cap), high(H_HANDLE_HIGH, handle_cap))
            }
            _ => return Err(bad("not a passthrough crash table (bad magic)".into())),
        };
        Ok(CrashTable {
            region,
            node_cap,
            handles_at,
            nodes: Mutex::new(Slots {
                free: Vec::new(),
                high: node_high,
                cap: node_cap as u32,
            }),
            handles: Mutex::new(Slots {
                free: Vec::new(),
                high: handle_high,
                cap: handle_cap as u32,
            }),
            full_warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn node(&self, slot: u32) -> &[AtomicU64] {
        let at = HEADER_WORDS + slot as usize * NODE_WORDS;
        &self.region.words()[at..at + NODE_WORDS]
    }

    fn handle(&self, slot: u32) -> &[AtomicU64] {
        let at = self.handles_at + slot as usize * HANDLE_SLOT_WORDS;
        &self.region.words()[at..at + HANDLE_SLOT_WORDS]
    }

    fn full(&self, what: &str) {
        if !self.full_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                nodes = self.node_cap,
                "the crash table is full: {what} made from now on won't survive a crash"
            );
        }
    }

    fn raise_high(&self, at: usize, high: u32) {
        self.region.words()[at].fetch_max(high as u64, Ordering::AcqRel);
    }

    /// A free slot of `slots` (the table's `what`, whose high-water mark
    /// is the header word `high_at`); `None`, with a warning the first
    /// time, when the table is full.
    fn take_slot(&self, slots: &Mutex<Slots>, what: &str, high_at: usize) -> Option<u32> {
        let mut slots = lock(slots);
        let Some(slot) = slots.take() else {
            drop(slots);
            self.full(what);
            return None;
        };
        self.raise_high(high_at, slots.high);
        Some(slot)
    }

    /// Writes down a new node (with no lookup reference yet); `NO_SLOT`
    /// when the table is full.
    pub(crate) fn add_node(&self, inode: &Inode, handle: &FileHandle) -> u32 {
        let Some(slot) = self.take_slot(&self.nodes, "nodes", H_NODE_HIGH) else {
            return NO_SLOT;
        };
        let w = self.node(slot);
        w[N_USED].store(0, Ordering::Release);
        w[N_ID].store(inode.nodeid, Ordering::Relaxed);
        w[N_REFS].store(0, Ordering::Relaxed);
        w[N_INO].store(inode.key.ino, Ordering::Relaxed);
        w[N_DEV].store(inode.key.dev(), Ordering::Relaxed);
        w[N_MNT].store(inode.key.mnt_id(), Ordering::Relaxed);
        w[N_MODE].store(u64::from(inode.ftype()), Ordering::Relaxed);
        w[N_GEN].store(u64::from(inode.generation), Ordering::Relaxed);
        let bytes = handle.bytes();
        let len = bytes.len().min(crate::sys::MAX_HANDLE_SZ);
        w[N_HANDLE_HEAD].store(
            (handle.kind() as u32 as u64) | ((len as u64) << 32),
            Ordering::Relaxed,
        );
        for (k, chunk) in bytes[..len].chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w[N_HANDLE_AT + k].store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        w[N_USED].store(1, Ordering::Release);
        slot
    }

    /// The lookup count of node slot `slot`.
    pub(crate) fn refs(&self, slot: u32) -> &AtomicU64 {
        &self.node(slot)[N_REFS]
    }

    /// Frees node slot `slot` (the kernel forgot the node).
    pub(crate) fn free_node(&self, slot: u32) {
        self.node(slot)[N_USED].store(0, Ordering::Release);
        lock(&self.nodes).free.push(slot);
    }

    /// Writes down a new handle; `NO_SLOT` when the table is full.
    pub(crate) fn add_handle(
        &self,
        fh: u64,
        nodeid: u64,
        flags: i32,
        dir: bool,
        passthrough_id: i32,
    ) -> u32 {
        let Some(slot) = self.take_slot(&self.handles, "handles", H_HANDLE_HIGH) else {
            return NO_SLOT;
        };
        let w = self.handle(slot);
        w[F_USED].store(0, Ordering::Release);
        w[F_FH].store(fh, Ordering::Relaxed);
        w[F_NODE].store(nodeid, Ordering::Relaxed);
        w[F_FLAGS].store(flags as u32 as u64, Ordering::Relaxed);
        w[F_DIR].store(dir as u64, Ordering::Relaxed);
        w[F_PASSTHROUGH].store(passthrough_id as i64 as u64, Ordering::Relaxed);
        w[F_USED].store(1, Ordering::Release);
        slot
    }

    /// Before handle number `fh` is used anywhere (a request's journal
    /// record, this table, a reply): marks it taken, so that no later
    /// process numbers a handle of its own `fh`. A resend's note then
    /// names a handle of the dead process or none, never the new one's
    /// (see `HandleTable::insert`).
    pub(crate) fn take_handle_number(&self, fh: u64) {
        let below = &self.region.words()[H_HANDLES_NUMBERED_BELOW];
        if fh < below.load(Ordering::Acquire) {
            return;
        }
        below.fetch_max(
            (fh / HANDLE_NUMBERS_TAKEN + 1) * HANDLE_NUMBERS_TAKEN,
            Ordering::AcqRel,
        );
    }

    /// The first handle number no earlier process can have used.
    pub(crate) fn handles_numbered_below(&self) -> u64 {
        self.region.words()[H_HANDLES_NUMBERED_BELOW].load(Ordering::Acquire)
    }

    /// Frees handle slot `slot` (RELEASE).
    pub(crate) fn free_handle(&self, slot: u32) {
        self.handle(slot)[F_USED].store(0, Ordering::Release);
        lock(&self.handles).free.push(slot);
    }

    /// What a previous process left: its nodes and handles. Slots not in
    /// use become free ones. Call once, before serving.
    pub(crate) fn records(&self) -> (Vec<NodeRecord>, Vec<HandleRecord>) {
        let mut nodes = Vec::new();
        for slot in self.slots_in_use(&self.nodes, N_USED, |slot| self.node(slot)) {
            let w = self.node(slot);
            let head = w[N_HANDLE_HEAD].load(Ordering::Relaxed);
            let len = ((head >> 32) as usize).min(crate::sys::MAX_HANDLE_SZ);
            let mut bytes = Vec::with_capacity(HANDLE_WORDS_MAX * 8);
            for k in 0..len.div_ceil(8) {
                bytes.extend_from_slice(&w[N_HANDLE_AT + k].load(Ordering::Relaxed).to_le_bytes());
            }
            bytes.truncate(len);
            // ENOMEM (a long handle): the node is not restored.
            let Ok(handle) = FileHandle::new(head as u32 as i32, &bytes) else {
                continue;
            };
            nodes.push(NodeRecord {
                slot,
                nodeid: w[N_ID].load(Ordering::Relaxed),
                refs: w[N_REFS].load(Ordering::Relaxed),
                ino: w[N_INO].load(Ordering::Relaxed),
                dev: w[N_DEV].load(Ordering::Relaxed),
                mnt_id: w[N_MNT].load(Ordering::Relaxed),
                mode: w[N_MODE].load(Ordering::Relaxed) as u32,
                handle,
            });
        }
        let mut handles = Vec::new();
        for slot in self.slots_in_use(&self.handles, F_USED, |slot| self.handle(slot)) {
            let w = self.handle(slot);
            handles.push(HandleRecord {
                slot,
                fh: w[F_FH].load(Ordering::Relaxed),
                nodeid: w[F_NODE].load(Ordering::Relaxed),
                flags: w[F_FLAGS].load(Ordering::Relaxed) as u32 as i32,
                dir: w[F_DIR].load(Ordering::Relaxed) != 0,
                passthrough_id: w[F_PASSTHROUGH].load(Ordering::Relaxed) as i64 as i32,
            });
        }
        (nodes, handles)
    }

    /// The slots of `slots` that a previous process left in use (the word
    /// `used_at` of their `words` is 1); the others become free ones, the
    /// lowest to be taken first.
    fn slots_in_use<'a>(
        &'a self,
        slots: &Mutex<Slots>,
        used_at: usize,
        words: impl Fn(u32) -> &'a [AtomicU64],
    ) -> Vec<u32> {
        let mut slots = lock(slots);
        let mut in_use = Vec::new();
        for slot in 0..slots.high {
            if words(slot)[used_at].load(Ordering::Acquire) == 1 {
                in_use.push(slot);
            } else {
                slots.free.push(slot);
            }
        }
        slots.free.reverse();
        in_use
    }
}
