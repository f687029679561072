//! What the harness reads of a daemon in /proc around each workload: its
//! peak resident set (`VmHWM` of `status`, reset through `clear_refs`
//! before the workload), its thread count (`Threads`), and its CPU time
//! (`utime` + `stime` of `stat`, all threads, including those that have
//! exited).

use std::path::PathBuf;

/// The numbers of `/proc/<pid>/status` the report uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// `VmHWM`: peak resident set, KiB.
    pub rss_peak_kib: u64,
    /// `Threads`.
    pub threads: u32,
}

fn proc_file(pid: u32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// Parses `/proc/<pid>/status`; `None` without both fields (a zombie has
/// no `VmHWM`).
pub fn parse_status(text: &str) -> Option<Status> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some(Status {
        rss_peak_kib: field("VmHWM")?,
        threads: u32::try_from(field("Threads")?).ok()?,
    })
}

/// `/proc/<pid>/status` of `pid`.
pub fn status(pid: u32) -> Option<Status> {
    parse_status(&std::fs::read_to_string(proc_file(pid, "status")).ok()?)
}

/// `utime + stime` (clock ticks) from `/proc/<pid>/stat`: fields 14 and 15,
/// counted after the command name, which is in parentheses and may itself
/// hold spaces and parentheses.
pub fn parse_cpu_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds `pid` has used so far (user and system, all its threads).
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let ticks = parse_cpu_ticks(&std::fs::read_to_string(proc_file(pid, "stat")).ok()?)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// Resets `pid`'s `VmHWM` to its current resident set (`echo 5 >
/// /proc/<pid>/clear_refs`, Linux 4.0+; touches no page tables); true if it
/// worked.
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(proc_file(pid, "clear_refs"), "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let text = "Name:\tpassthrough_hp\nUmask:\t0000\nState:\tS (sleeping)\n\
                    VmPeak:\t  180000 kB\nVmHWM:\t   69692 kB\nVmRSS:\t    8000 kB\n\
                    Threads:\t5\nSigQ:\t0/7000\n";
        assert_eq!(
            parse_status(text),
            Some(Status {
                rss_peak_kib: 69692,
                threads: 5
            })
        );
        assert_eq!(
            parse_status("Name:\tx\nState:\tZ (zombie)\nThreads:\t1\n"),
            None
        );
    }

    #[test]
    fn cpu_ticks() {
        // comm with a space and a parenthesis; utime 250, stime 120.
        let text = "4242 (fuse (bench) d) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 120 \
                    0 0 20 0 5 0 100 200000 300 18446744073709551615\n";
        assert_eq!(parse_cpu_ticks(text), Some(370));
        assert_eq!(parse_cpu_ticks("4242 (x) S 1 2"), None);
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process() {
        let me = std::process::id();
        let s = status(me).unwrap();
        assert!(s.rss_peak_kib > 0 && s.threads >= 1);
        assert!(cpu_secs(me).unwrap() >= 0.0);
    }
}
