//! `fuse-capture`: records the requests the kernel sends while a command
//! runs against a real mount, to seed the fuzz corpus.
//!
//! ```text
//! fuse-capture CORPUS_DIR NAME COMMAND
//! ```
//!
//! Mounts a `PassthroughFs` over a fresh copy of the fuzz scratch tree
//! (`fuse_fuzz::scratch::populate`), serves it on one thread with a small
//! transport of its own that keeps the bytes of every request read from
//! `/dev/fuse`, runs `sh -c COMMAND` in the mount, unmounts, and writes
//! `CORPUS_DIR/dispatch/NAME` (an options byte, then the requests as one
//! stream, cut at 64 KiB) and `CORPUS_DIR/decode/NAME-OPCODE` (the first
//! request of each opcode). Needs root.

use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{AlignedBuf, Server};
use fuse_transport_dev::{DevTransaction, Mount, MountOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Largest dispatch seed.
const MAX_SEED: usize = 64 << 10;

fn serve(server: &Server, fd: OwnedFd, log: &Mutex<Vec<Vec<u8>>>) {
    let mut request = AlignedBuf::new(4 << 20).expect("request buffer");
    let mut reply = AlignedBuf::new(2 << 20).expect("reply buffer");
    loop {
        // SAFETY: the buffer is valid for writes of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), request.as_mut_ptr().cast(), request.len()) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                _ => return,
            }
        }
        let bytes = &request[..n as usize];
        log.lock().unwrap().push(bytes.to_vec());
        let mut tx = DevTransaction {
            fd: fd.as_fd(),
            request: bytes,
            reply: &mut reply,
        };
        if matches!(server.handle(&mut tx), Ok(fuse_server::Outcome::Destroyed)) {
            return;
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: fuse-capture CORPUS_DIR NAME COMMAND");
        std::process::exit(2);
    }
    let (corpus, name, command) = (PathBuf::from(&args[1]), &args[2], &args[3]);
    let dir = std::env::temp_dir().join(format!("fuse-capture-{}", std::process::id()));
    let src = dir.join("src");
    let mnt = dir.join("mnt");
    fuse_fuzz::scratch::populate(&src).expect("populating the source");
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    std::fs::write(dir.join("outside/secret"), b"capture\n").unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let config = PassthroughConfig::default()
        .attr_timeout(std::time::Duration::ZERO)
        .entry_timeout(std::time::Duration::ZERO);
    let fs = Arc::new(PassthroughFs::new(&src, config).expect("PassthroughFs"));
    let server = Arc::new(Server::new(fs));
    let options = MountOptions::default().fsname("fuse-capture");
    let mut mount = Mount::new(&mnt, &options).expect("mounting (needs root)");
    let fd = mount.dev_fd().try_clone_to_owned().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let thread = {
        let (server, log) = (server.clone(), log.clone());
        std::thread::spawn(move || serve(&server, fd, &log))
    };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(&mnt)
        .status()
        .expect("running the command");
    eprintln!("fuse-capture: `{command}` exited with {status}");
    mount.unmount().expect("unmounting");
    drop(mount);
    thread.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let requests = log.lock().unwrap();
    let mut stream = vec![0u8]; // the options byte: defaults
    for r in requests.iter() {
        if stream.len() + r.len() > MAX_SEED {
            break;
        }
        stream.extend_from_slice(r);
    }
    std::fs::create_dir_all(corpus.join("dispatch")).unwrap();
    std::fs::create_dir_all(corpus.join("decode")).unwrap();
    std::fs::write(corpus.join("dispatch").join(name), &stream).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for r in requests.iter() {
        let opcode = u32::from_ne_bytes(r[4..8].try_into().unwrap());
        if r.len() <= 4096 && seen.insert(opcode) {
            // The decode target's two leading bytes: protocol 7.45 with
            // SETXATTR_EXT, split after 40 bytes.
            let mut seed = vec![45 | 0x40, 40];
            seed.extend_from_slice(r);
            std::fs::write(corpus.join("decode").join(format!("{name}-{opcode}")), seed).unwrap();
        }
    }
    eprintln!(
        "fuse-capture: {} requests, {} bytes of dispatch seed, {} opcodes",
        requests.len(),
        stream.len(),
        seen.len()
    );
}
