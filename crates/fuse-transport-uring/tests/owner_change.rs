//! What the kernel does when the ring entries of a connection change owner:
//! the question a live upgrade over io_uring depends on (docs/takeover.md,
//! "Not yet"). Not a feature: a probe of the running kernel, run on the
//! host's kernel (`..._needs_root`, in `cargo xtask test`) and on Linux 7.3
//! (`vm_...`, in `cargo xtask test-in-vm`).
//!
//! One connection, two rings, as an old and a new daemon would hold them:
//!
//! 1. Ring A's owner (a thread of its own, as the old daemon's ring thread)
//!    registers an entry per queue and answers a request: the setup works.
//! 2. The owner takes the next request on queue 0 and doesn't answer it (a
//!    request read just before a pause), and then stops entering the
//!    kernel (paused). A request on queue 1 is handed to its entry while
//!    the owner sleeps.
//! 3. Ring B registers an entry per queue on the same connection (the new
//!    daemon), then ring A's owner closes its ring and exits.
//! 4. New requests on queues 0 and 1; then `FUSE_NOTIFY_RESEND`.
//!
//! What each request became is printed (`owner change:` lines) and the
//! facts the refusal of an io_uring takeover rests on are asserted: the
//! new ring serves new requests, and what the old ring held is neither
//! answered nor resent to the new ring. If a kernel changes that, the
//! assertions fail and say that a takeover over io_uring could be built.

use fuse_abi::uring::UringReqHeader;
use fuse_abi::{InHeader, InitFlags, OutHeader};
use fuse_server::{FileSystem, Server};
use fuse_transport_dev::{DevSession, Mount, MountOptions, SessionConfig};
use fuse_transport_uring::probe::{self, Ring};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, IntoBytes};

/// Answers INIT and nothing else the ring tests need (`/dev/fuse` only
/// carries INIT here; the rings' requests are answered by hand).
struct Empty;
impl FileSystem for Empty {}

/// One ring's entries: a header and a payload buffer per queue.
struct Entries {
    /// Never resized: the kernel holds pointers into both.
    headers: Vec<UringReqHeader>,
    /// The payload buffers the kernel writes requests into (unread here).
    _payloads: Vec<Vec<u8>>,
    iovecs: Vec<[libc::iovec; 2]>,
}

impl Entries {
    fn new(queues: usize, payload: usize) -> Self {
        let mut headers: Vec<UringReqHeader> = (0..queues).map(|_| Default::default()).collect();
        let mut payloads: Vec<Vec<u8>> = (0..queues).map(|_| vec![0u8; payload]).collect();
        let iovecs = headers
            .iter_mut()
            .zip(payloads.iter_mut())
            .map(|(h, p)| {
                [
                    libc::iovec {
                        iov_base: std::ptr::from_mut::<UringReqHeader>(h).cast(),
                        iov_len: size_of::<UringReqHeader>(),
                    },
                    libc::iovec {
                        iov_base: p.as_mut_ptr().cast(),
                        iov_len: p.len(),
                    },
                ]
            })
            .collect();
        Entries {
            headers,
            _payloads: payloads,
            iovecs,
        }
    }

    /// Registers entry `q` on queue `q` of `ring` (user data `q`).
    fn register_all(&self, ring: &mut Ring) {
        for q in 0..self.iovecs.len() {
            let sqe = probe::register(q as u16, &self.iovecs[q], q as u64, None, None);
            // SAFETY: the iovecs and the buffers they point to live in
            // `self`, which outlives the ring's use of them (the caller
            // keeps it until the ring is closed).
            unsafe { ring.submission().push(&sqe) }.expect("a full submission queue");
        }
        probe::submit(ring).expect("submitting REGISTER");
    }

    /// The request in entry `q`: its unique id and node id.
    fn request(&self, q: usize) -> (u64, u64) {
        let h = InHeader::read_from_prefix(&self.headers[q].in_out)
            .expect("an in header")
            .0;
        (h.unique, h.nodeid)
    }

    /// Answers the request in entry `q` with `-ENOENT` and fetches the
    /// next one.
    fn answer_enoent(&mut self, ring: &mut Ring, q: usize) {
        let (unique, _) = self.request(q);
        let out = OutHeader {
            len: size_of::<OutHeader>() as u32,
            error: -libc::ENOENT,
            unique,
        };
        let header = &mut self.headers[q];
        header.in_out[..size_of::<OutHeader>()].copy_from_slice(out.as_bytes());
        header.ring_ent_in_out.payload_sz = 0;
        let commit_id = header.ring_ent_in_out.commit_id;
        let sqe = probe::commit_and_fetch(q as u16, commit_id, q as u64, None);
        // SAFETY: a commit carries no pointer.
        unsafe { ring.submission().push(&sqe) }.expect("a full submission queue");
        probe::submit(ring).expect("submitting COMMIT_AND_FETCH");
    }
}

/// The next completion of `ring` within `timeout`: (queue, result).
fn completion(ring: &mut Ring, timeout: Duration) -> Option<(usize, i32)> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(cqe) = ring.completion().next() {
            return Some((cqe.user_data() as usize, cqe.result()));
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        let ts = io_uring::types::Timespec::from(left.min(Duration::from_millis(50)));
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        let _ = ring.submitter().submit_with_args(1, &args);
    }
}

/// A ring with the connection's descriptor at fixed slot 0.
fn ring_on(dev_fd: RawFd) -> Ring {
    let ring = probe::build_ring(16, false).expect("an io_uring");
    ring.submitter()
        .register_files(&[dev_fd])
        .expect("registering /dev/fuse");
    ring
}

/// `stat(path)` on `cpu` (so its request goes to queue `cpu`) in a thread
/// of its own: the errno it ended with, when it ends.
fn stat_on(cpu: usize, path: PathBuf) -> mpsc::Receiver<i32> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
                0,
                "pinning a client to CPU {cpu}"
            );
        }
        let errno = match std::fs::metadata(&path) {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(-1),
        };
        let _ = tx.send(errno);
    });
    rx
}

/// Waits (up to a minute) until the connection serving `mnt` has `n`
/// requests waiting for an answer (fusectl's `waiting`).
fn wait_for_waiting(mnt: &Path, n: u64) {
    let root = test_support::fusectl_connections();
    // The connection's number is the mount's device minor, read from
    // mountinfo: a stat of the mountpoint would wait for an answer too.
    let mount = test_support::mountinfo::mounts_at(mnt)
        .pop()
        .expect("the mount in mountinfo");
    let minor = mount
        .line
        .split(' ')
        .nth(2)
        .and_then(|dev| dev.split_once(':'))
        .map(|(_, minor)| minor.to_string())
        .expect("major:minor in mountinfo");
    let waiting = root.join(minor).join("waiting");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now: u64 = std::fs::read_to_string(&waiting)
            .unwrap_or_else(|e| panic!("{}: {e} (is fusectl mounted?)", waiting.display()))
            .trim()
            .parse()
            .expect("a count");
        if now >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} requests waiting after a minute, not {n}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a client saw: its errno, or `None` if it still waits.
fn outcome(rx: &mpsc::Receiver<i32>, within: Duration) -> Option<i32> {
    rx.recv_timeout(within).ok()
}

fn describe(o: Option<i32>) -> String {
    match o {
        None => "still waiting".into(),
        Some(0) => "answered".into(),
        Some(e) => format!("{} ({e})", std::io::Error::from_raw_os_error(e)),
    }
}

/// What ring A's owner thread is told to do.
enum Step {
    /// Answer the next request.
    AnswerOne,
    /// Take the next request and keep it unanswered.
    HoldOne,
    /// Sleep until the next step (the daemon is paused).
    Pause,
    /// Close the ring and end the thread.
    Exit,
}

fn probe() {
    let cpus = probe::possible_cpus().expect("possible CPUs").len();
    assert!(
        cpus >= 2,
        "this probe needs 2 CPUs (a request on each of 2 queues); found {cpus}"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mnt = dir.path().to_path_buf();
    let mount = Mount::new(&mnt, &MountOptions::default()).expect("mounting");
    let server = Server::new(std::sync::Arc::new(Empty));
    let mut init = *server.init_config();
    init.flags |= InitFlags::OVER_IO_URING;
    let dev = DevSession::from_mount(
        server.with_init_config(init),
        mount,
        SessionConfig::default().threads(1),
    )
    .expect("INIT over /dev/fuse");
    let negotiated = *fuse_server::Session::server(&dev)
        .negotiated()
        .expect("negotiated");
    assert!(
        negotiated.over_io_uring(),
        "the kernel offers no FUSE over io_uring (on the host: echo Y > \
         /sys/module/fuse/parameters/enable_uring)"
    );
    let dev_fd = dev.dev_fd().expect("the connection's descriptor");
    let raw = dev_fd.as_raw_fd();
    let payload = negotiated.uring_payload_size();

    // 1. Ring A, on a thread of its own.
    let (steps, step_rx) = mpsc::channel::<Step>();
    let (seen_tx, seen) = mpsc::channel::<(usize, u64)>();
    let owner_a = std::thread::spawn(move || {
        let mut ring = ring_on(raw);
        let mut entries = Entries::new(cpus, payload);
        entries.register_all(&mut ring);
        while let Ok(step) = step_rx.recv() {
            match step {
                Step::AnswerOne | Step::HoldOne => {
                    let (q, res) = completion(&mut ring, Duration::from_secs(60))
                        .expect("ring A: no request within 60 s");
                    assert_eq!(res, 0, "ring A: entry {q} failed");
                    let (unique, _) = entries.request(q);
                    if matches!(step, Step::AnswerOne) {
                        entries.answer_enoent(&mut ring, q);
                    }
                    let _ = seen_tx.send((q, unique));
                }
                Step::Pause => {}
                Step::Exit => break,
            }
        }
        drop(ring);
        drop(entries);
    });
    steps.send(Step::AnswerOne).unwrap();
    let a = stat_on(0, mnt.join("a"));
    let (q, _) = seen
        .recv_timeout(Duration::from_secs(60))
        .expect("ring A served nothing");
    assert_eq!(q, 0, "a request from CPU 0 came on queue {q}");
    assert_eq!(outcome(&a, Duration::from_secs(60)), Some(libc::ENOENT));

    // 2. A request held unanswered on queue 0, then the owner pauses; a
    //    request on queue 1 goes to the sleeping owner's entry.
    steps.send(Step::HoldOne).unwrap();
    let held = stat_on(0, mnt.join("held"));
    let (q, held_unique) = seen
        .recv_timeout(Duration::from_secs(60))
        .expect("nothing held");
    assert_eq!(q, 0);
    steps.send(Step::Pause).unwrap();
    let paused = stat_on(1, mnt.join("paused"));
    // Until the kernel has the request (the held one and this one wait):
    // a client thread that runs late (a busy machine) would otherwise
    // issue it after ring A closed, to ring B.
    wait_for_waiting(&mnt, 2);

    // 3. Ring B registers on the same connection; ring A goes.
    let mut ring_b = ring_on(raw);
    let mut entries_b = Entries::new(cpus, payload);
    entries_b.register_all(&mut ring_b);
    let register_b = completion(&mut ring_b, Duration::from_millis(300));
    steps.send(Step::Exit).unwrap();
    owner_a.join().expect("ring A's owner");
    let held_after_close = outcome(&held, Duration::from_secs(2));
    let paused_after_close = outcome(&paused, Duration::from_secs(2));

    // 4. New requests, answered on ring B; then a resend.
    let mut served_by_b = Vec::new();
    let mut resent = Vec::new();
    let serve_b = |ring: &mut Ring, e: &mut Entries, seen_b: &mut Vec<u64>, t: Duration| {
        while let Some((q, res)) = completion(ring, t) {
            if res != 0 {
                eprintln!("owner change: ring B entry {q} completed with {res}");
                continue;
            }
            let (unique, _) = e.request(q);
            seen_b.push(unique);
            e.answer_enoent(ring, q);
        }
    };
    if let Some((q, res)) = register_b {
        // A request may already have come (queued while no entry was free).
        if res == 0 {
            let (unique, _) = entries_b.request(q);
            served_by_b.push(unique);
            entries_b.answer_enoent(&mut ring_b, q);
        } else {
            eprintln!("owner change: ring B's REGISTER on queue {q} failed with {res}");
        }
    }
    let new0 = stat_on(0, mnt.join("new0"));
    let new1 = stat_on(1, mnt.join("new1"));
    serve_b(
        &mut ring_b,
        &mut entries_b,
        &mut served_by_b,
        Duration::from_secs(2),
    );
    let new0 = outcome(&new0, Duration::from_secs(5));
    let new1 = outcome(&new1, Duration::from_secs(5));
    let resend = fuse_transport_dev_notifier(&dev).and_then(|n| n.resend());
    serve_b(
        &mut ring_b,
        &mut entries_b,
        &mut resent,
        Duration::from_secs(2),
    );
    let held_after_resend = outcome(&held, Duration::from_secs(1));
    let paused_after_resend = outcome(&paused, Duration::from_secs(1));

    for line in [
        format!("kernel {}", kernel_release()),
        format!("ring B's REGISTER: {register_b:?} (None: accepted, waiting for requests)"),
        format!(
            "the request ring A held when it closed: {}; after FUSE_NOTIFY_RESEND ({resend:?}): {}",
            describe(held_after_close),
            describe(held_after_resend.or(held_after_close))
        ),
        format!(
            "the request handed to ring A while its owner slept: {}; after the resend: {}",
            describe(paused_after_close),
            describe(paused_after_resend.or(paused_after_close))
        ),
        format!(
            "new requests after ring A closed: queue 0 {}, queue 1 {} (ring B answered {} requests)",
            describe(new0),
            describe(new1),
            served_by_b.len()
        ),
        format!(
            "requests ring B got after the resend: {} (the held one's unique {held_unique} {})",
            resent.len(),
            if resent.contains(&held_unique) { "among them" } else { "not among them" }
        ),
    ] {
        eprintln!("owner change: {line}");
    }

    // The connection goes with its descriptors; clients still waiting then
    // fail, and the mount is left for `end`.
    fuse_server::Session::stop(&dev);
    drop(dev_fd);
    let _ = fuse_server::Session::wait(&dev);
    drop(ring_b);
    drop(entries_b);
    end(&mnt);

    assert_eq!(
        (new0, new1),
        (Some(libc::ENOENT), Some(libc::ENOENT)),
        "a new owner's entries did not serve new requests"
    );
    assert!(
        !resent.contains(&held_unique)
            && held_after_resend.or(held_after_close) != Some(libc::ENOENT),
        "the kernel resent what a closed ring held: a takeover over io_uring could be built"
    );
    assert_ne!(
        paused_after_resend.or(paused_after_close),
        Some(libc::ENOENT),
        "a request handed to a paused owner reached the new ring: a takeover over io_uring \
         could be built"
    );
}

fn fuse_transport_dev_notifier(dev: &DevSession) -> std::io::Result<fuse_server::Notifier> {
    dev.notifier()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Unmounts what is left (lazily: a client may still hold it).
fn end(mnt: &Path) {
    let _ = fuse_transport_dev::unmount_path(mnt, true);
}

use test_support::require_root;

#[test]
fn ring_entries_changing_owner_on_this_kernel_needs_root() {
    require_root();
    probe();
}

#[test]
fn vm_ring_entries_changing_owner_on_linux_7_3() {
    require_root();
    probe();
}
