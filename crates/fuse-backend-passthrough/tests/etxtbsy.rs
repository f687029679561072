//! An open(2) the kernel refuses must leave the file as it was: an
//! `O_RDONLY | O_TRUNC` open of a file being executed fails with ETXTBSY
//! (the kernel checks write access for the truncation only after the
//! file system's OPEN), and the executable keeps its contents and runs on.
//! Needs root (CI runs as root).

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

#[test]
fn o_trunc_refused_with_etxtbsy_leaves_a_running_executable_intact() {
    for passthrough in [false, true] {
        let t = TestMount::with(uncached().passthrough(passthrough), test_options());
        let original = std::fs::read("/bin/sleep").expect("/bin/sleep");
        std::fs::write(t.m("exe"), &original).unwrap();
        std::fs::set_permissions(t.m("exe"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // spawn() returns once the child's execve has the file open (and
        // write access to it denied).
        let mut child = test_support::command(t.m("exe"))
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .expect("running the executable from the mount");
        let path = c(&t.m("exe"));
        // SAFETY: a valid NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_TRUNC) };
        let errno = last_errno();
        if fd >= 0 {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
        }
        let alive = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        let status = child.wait().unwrap();
        assert_eq!(
            (fd, errno),
            (-1, libc::ETXTBSY),
            "passthrough {passthrough}: open(O_RDONLY|O_TRUNC) of a running executable"
        );
        assert_eq!(
            std::fs::metadata(t.s("exe")).unwrap().len(),
            original.len() as u64,
            "passthrough {passthrough}: the refused O_TRUNC truncated the backing file"
        );
        assert!(
            std::fs::read(t.m("exe")).unwrap() == original,
            "passthrough {passthrough}: the executable's contents changed"
        );
        assert!(
            alive,
            "passthrough {passthrough}: the executable died before it was killed ({status})"
        );
    }
}
