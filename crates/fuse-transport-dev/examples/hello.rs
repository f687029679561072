//! A read-only file system with one file, `hello.txt`.
//!
//! ```sh
//! mkdir -p /tmp/hello
//! cargo run -p fusewire-transport-dev --example hello -- /tmp/hello
//! cat /tmp/hello/hello.txt        # in another terminal
//! ```
//!
//! It serves until Ctrl-C (or SIGTERM), or until someone unmounts it
//! (`umount /tmp/hello`; `fusermount3 -u /tmp/hello` as a normal user).
//!
//! Only two crates are needed: `fuse-server` (the `FileSystem` trait and
//! what its methods take and return) and `fuse-transport-dev` (mounting
//! and serving through `/dev/fuse`).

use fuse_server::{
    errno, AttrReply, Context, DirentSink, Entry, FileAttr, FileSystem, FileType, ReadArgs, Server,
    ZeroCopyWriter, ROOT_ID,
};
use fuse_transport_dev::{DevSession, MountOptions, SessionConfig, SessionError};
use std::ffi::CStr;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The file's name and what it holds.
pub const NAME: &str = "hello.txt";
/// The file's contents.
pub const CONTENT: &[u8] = b"Hello, world!\n";

/// Node ids are ours to choose; the root's is fixed (`ROOT_ID`, 1).
const FILE_ID: u64 = 2;

/// Nothing here ever changes, so the kernel may cache names and
/// attributes for long.
const TTL: Duration = Duration::from_secs(60);

/// The file system: its two nodes' attributes, made once so that their
/// times stay put.
pub struct HelloFs {
    root: FileAttr,
    file: FileAttr,
}

impl HelloFs {
    /// The root directory (`r-xr-xr-x`) holding `hello.txt` (`r--r--r--`).
    pub fn new() -> Self {
        Self {
            root: FileAttr::new(ROOT_ID, FileType::Directory, 0o555),
            file: FileAttr::new(FILE_ID, FileType::RegularFile, 0o444)
                .with_size(CONTENT.len() as u64),
        }
    }

    fn attr(&self, ino: u64) -> io::Result<FileAttr> {
        match ino {
            ROOT_ID => Ok(self.root),
            FILE_ID => Ok(self.file),
            // The kernel only asks about node ids we gave it.
            _ => Err(errno::stale()),
        }
    }
}

impl Default for HelloFs {
    fn default() -> Self {
        Self::new()
    }
}

// Every method has a default; this file system needs only four. The
// others answer ENOSYS, which the kernel mostly takes as "nothing to do"
// (see each method's docs). Two of them matter here:
// - `open` and `opendir`: ENOSYS means this file system keeps no state
//   per open file, so the kernel stops sending OPEN and RELEASE, and every
//   READ comes with file handle 0;
// - `forget`: our nodes live forever, so the lookup counts the kernel
//   drops can be ignored (memfs.rs shows a file system that can't).
impl FileSystem for HelloFs {
    /// Finds a name in a directory: `hello.txt` in the root, nothing else.
    fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        if parent != ROOT_ID || name.to_bytes() != NAME.as_bytes() {
            return Err(errno::not_found());
        }
        Ok(Entry {
            nodeid: FILE_ID,
            generation: 0,
            attr: self.file.into(),
            attr_timeout: TTL,
            entry_timeout: TTL,
        })
    }

    /// stat(2).
    fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(ino)?.into(),
            timeout: TTL,
        })
    }

    /// read(2): the part of the content the kernel asks for, copied
    /// straight into the reply. Fewer bytes than asked means end of file.
    fn read(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        if ino != FILE_ID {
            return Err(errno::is_a_directory());
        }
        out.write_all(&CONTENT[args.range_in(CONTENT.len())])
    }

    /// readdir(3): the entries after the cookie `args.offset` (0 at the
    /// start). Each entry's cookie is where the next call resumes.
    fn readdir(
        &self,
        _ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        if ino != ROOT_ID {
            return Err(errno::not_a_directory());
        }
        let entries = [
            (ROOT_ID, FileType::Directory, "."),
            (ROOT_ID, FileType::Directory, ".."),
            (FILE_ID, FileType::RegularFile, NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(args.offset as usize) {
            // The cookie of entry i is i + 1: never 0, which means "start".
            let cookie = i as u64 + 1;
            if !out.add(*ino, cookie, kind.dirent_type(), name.as_bytes()) {
                break; // the reply is full; the kernel asks again from here
            }
        }
        Ok(())
    }
}

/// Mounts `HelloFs` read-only at `mountpoint` and starts serving it.
pub fn mount(mountpoint: &Path) -> Result<DevSession, SessionError> {
    let options = MountOptions::default()
        .fsname("hello")
        .subtype("hello")
        // The kernel refuses writes (EROFS) before they reach us.
        .read_only(true);
    let server = Server::new(Arc::new(HelloFs::new()));
    DevSession::mount(server, mountpoint, &options, SessionConfig::default())
}

fn main() -> std::process::ExitCode {
    // Errors in words (returning them from main would print their Debug form).
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hello: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What `--help` prints.
pub const HELP: &str = "\
usage: hello MOUNTPOINT

Mounts a read-only file system with one file, hello.txt, at MOUNTPOINT
and serves it in the foreground until Ctrl-C (SIGINT), SIGTERM or SIGHUP,
or until it is unmounted (umount MOUNTPOINT as root, fusermount3 -u
MOUNTPOINT otherwise).

A signal that the process was started with ignored stays ignored: started
from a script as `hello MOUNTPOINT &` (a non-interactive shell starts
background jobs with SIGINT ignored), Ctrl-C and kill -INT don't stop it;
use kill (SIGTERM) or umount.";

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Some(mountpoint) = std::env::args_os().nth(1) else {
        return Err("usage: hello MOUNTPOINT (hello --help says more)".into());
    };
    if mountpoint == "--help" || mountpoint == "-h" {
        println!("{HELP}");
        return Ok(());
    }
    let session = mount(Path::new(&mountpoint))?;
    println!("serving {NAME} at {}", mountpoint.to_string_lossy());
    // Until Ctrl-C, SIGTERM or an unmount; unmounts on the way out.
    fuse_transport_dev::serve_until_signal(&session)?;
    Ok(())
}
