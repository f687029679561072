//! The sandbox escape tests' hook (feature `fault-injection`, test builds
//! only): a LOOKUP of `.passthroughfs-escape-WHAT` makes the daemon, in
//! the middle of that request, attempt what a subverted daemon would:
//!
//! - `open`: read the file named by `PASSTHROUGHFS_ESCAPE_OPEN`;
//! - `exec`: run `PASSTHROUGHFS_ESCAPE_EXEC` (a program) with
//!   `PASSTHROUGHFS_ESCAPE_ARG` as its one argument;
//! - `socket`: connect to the TCP address `PASSTHROUGHFS_ESCAPE_CONNECT`;
//! - `kill`: send SIGTERM to the process `PASSTHROUGHFS_ESCAPE_KILL`.
//!
//! The lookup then fails with the attempt's error (`EEXIST` if it
//! succeeded, which a lookup never says otherwise) and the daemon logs
//! the outcome. A filter that kills the daemon for the attempt ends it
//! instead (and says which call).
//!
//! One more name is no escape: `.passthroughfs-escape-stall` holds the
//! request (and its ring entry, or its worker) until the file named by
//! `PASSTHROUGHFS_ESCAPE_STALL_UNTIL` exists (a path as the daemon sees
//! it: under `/source` in the namespace sandbox), then answers `ENOENT`.
//! The lock wait tests use it to make the kernel queue requests behind it.
//!
//! With `PASSTHROUGHFS_DROP_INTERRUPTS` set, the daemon ignores every
//! INTERRUPT, as the kernel's lost ones look to it (the lock wait tests:
//! a killed waiter's wait must end through the requester's pending
//! signal alone).
//!
//! And crashes: with `PASSTHROUGHFS_CRASH_AT` naming a file (which must
//! exist when the daemon starts: it is opened then, before confinement),
//! the daemon empties that file and kills itself (SIGKILL) while the crash table has
//! a record of something the kernel is about to be given and the reply is
//! not recorded (`--supervise` tests: the next serving process must settle
//! the resent request right). What the file holds says where: an inode
//! number (in decimal), at a reply handing a lookup reference on that
//! file, between the crash table's count and the journal's record; or
//! `handle`, at the next handle an OPEN, OPENDIR or CREATE makes, once
//! the table keeps it and the journal noted it; or `handle-noted`, at the
//! next handle once the journal noted it, before the table keeps it.

use std::ffi::CStr;
use std::io;

/// The names' prefix.
pub const PREFIX: &str = ".passthroughfs-escape-";

/// Installs the hooks in the backend.
pub fn install() {
    fuse_backend_passthrough::fault::set_lookup_hook(on_lookup);
    if std::env::var_os("PASSTHROUGHFS_DROP_INTERRUPTS").is_some() {
        fuse_backend_passthrough::fault::drop_interrupts();
    }
    if let Some(flag) = std::env::var_os("PASSTHROUGHFS_CRASH_AT") {
        // Opened now, before any confinement: the file lies outside
        // SOURCE, out of the sandbox's and Landlock's reach later.
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&flag)
        {
            Ok(file) => {
                let _ = CRASH_FLAG.set(file);
            }
            Err(e) => eprintln!(
                "crash test hook: PASSTHROUGHFS_CRASH_AT {}: {e}",
                std::path::Path::new(&flag).display()
            ),
        }
        fuse_backend_passthrough::fault::set_hand_over_hook(on_hand_over);
        fuse_backend_passthrough::fault::set_handle_made_hook(on_handle_made);
        fuse_backend_passthrough::fault::set_handle_noted_hook(on_handle_noted);
    }
}

/// The file that arms the crash hooks.
static CRASH_FLAG: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

fn on_hand_over(nodeid: u64, ino: u64) {
    crash_if_armed(&ino.to_string(), &format!("node {nodeid}"));
}

fn on_handle_made(fh: u64) {
    crash_if_armed("handle", &format!("handle {fh}"));
}

fn on_handle_noted(fh: u64) {
    crash_if_armed(
        "handle-noted",
        &format!("handle {fh}, noted, not in the crash table"),
    );
}

/// Kills the process if the flag file holds `armed_for` (emptying it
/// first, so that the next process doesn't crash again).
fn crash_if_armed(armed_for: &str, what: &str) {
    use std::os::unix::fs::FileExt;
    let Some(flag) = CRASH_FLAG.get() else {
        return;
    };
    let mut text = [0u8; 64];
    let Ok(n) = flag.read_at(&mut text, 0) else {
        return;
    };
    if std::str::from_utf8(&text[..n]).map(str::trim) != Ok(armed_for) {
        return;
    }
    if flag.set_len(0).is_err() {
        return;
    }
    tracing::warn!(
        what,
        "crash test hook: killed before the reply was recorded"
    );
    // SAFETY: plain system calls; the process ends here.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

fn env(name: &str) -> io::Result<String> {
    std::env::var(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn attempt(what: &str) -> io::Result<()> {
    match what {
        "open" => {
            let data = std::fs::read(env("PASSTHROUGHFS_ESCAPE_OPEN")?)?;
            tracing::warn!(
                bytes = data.len(),
                "escape test: read a file outside SOURCE"
            );
            Ok(())
        }
        "exec" => {
            let status = std::process::Command::new(env("PASSTHROUGHFS_ESCAPE_EXEC")?)
                .arg(env("PASSTHROUGHFS_ESCAPE_ARG")?)
                .status()?;
            if status.success() {
                Ok(())
            } else {
                // A child the filter ended (it says which call).
                Err(io::Error::from_raw_os_error(libc::EPERM))
            }
        }
        "socket" => {
            let addr = env("PASSTHROUGHFS_ESCAPE_CONNECT")?;
            std::net::TcpStream::connect(addr.as_str()).map(drop)
        }
        "kill" => {
            let pid: libc::pid_t = env("PASSTHROUGHFS_ESCAPE_KILL")?
                .parse()
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: plain system call.
            if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// Waits for the file `PASSTHROUGHFS_ESCAPE_STALL_UNTIL` to exist.
fn stall() -> io::Error {
    let until = match env("PASSTHROUGHFS_ESCAPE_STALL_UNTIL") {
        Ok(p) => std::path::PathBuf::from(p),
        Err(e) => return e,
    };
    tracing::info!(until = %until.display(), "stall test hook: holding a LOOKUP");
    while !until.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    tracing::info!("stall test hook: LOOKUP released");
    io::Error::from_raw_os_error(libc::ENOENT)
}

fn on_lookup(name: &CStr) -> Option<io::Error> {
    let name = name.to_str().ok()?;
    let what = name.strip_prefix(PREFIX)?;
    if what == "stall" {
        return Some(stall());
    }
    Some(match attempt(what) {
        Ok(()) => {
            tracing::warn!(attempt = what, "escape test: the attempt succeeded");
            io::Error::from_raw_os_error(libc::EEXIST)
        }
        Err(e) => {
            tracing::warn!(attempt = what, "escape test: the attempt was denied: {e}");
            e
        }
    })
}
