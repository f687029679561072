//! Resource limits set explicitly, whatever the sandbox mode.

use crate::Failure;

/// No core dumps (a dump would hold file data the daemon served, written
/// wherever the system's `core_pattern` says), and the open file limit at
/// its hard limit, set here rather than inherited: the passthrough holds a
/// descriptor per open file and a cache of inodes' descriptors, and must
/// know what it has (it reads the limit back to size that cache).
pub fn apply() -> Result<(), Failure> {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) } != 0 {
        return Err(Failure(format!(
            "cannot turn core dumps off (RLIMIT_CORE): {}",
            std::io::Error::last_os_error()
        )));
    }
    let mut files = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `files` is written by getrlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut files) } != 0 {
        return Err(Failure(format!(
            "reading RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        )));
    }
    files.rlim_cur = files.rlim_max;
    // SAFETY: a valid rlimit; the soft limit may always rise to the hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &files) } != 0 {
        return Err(Failure(format!(
            "setting RLIMIT_NOFILE to {}: {}",
            files.rlim_max,
            std::io::Error::last_os_error()
        )));
    }
    tracing::debug!(nofile = files.rlim_max, "resource limits: no core dumps");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn core_dumps_are_off_and_the_file_limit_is_the_hard_one() {
        super::apply().unwrap();
        let mut r = libc::rlimit {
            rlim_cur: 1,
            rlim_max: 1,
        };
        // SAFETY: `r` is written by getrlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut r) }, 0);
        assert_eq!((r.rlim_cur, r.rlim_max), (0, 0));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
        assert_eq!(r.rlim_cur, r.rlim_max);
    }
}
