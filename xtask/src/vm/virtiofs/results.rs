//! What the host makes of a boot: the guest's steps and skips, the
//! hashes of the files it left against the shared directory (with the
//! checker's pattern and hash), the daemon's write path, pjdfstest's
//! summary. Apart from the boots: these only read a finished [`VmRun`]
//! and the files it left.

use super::*;
use std::collections::BTreeMap;

/// How many checks the guest skipped, then each (its `SKIP: ...` line),
/// `suffix` after "skipped".
pub(super) fn print_guest_skips(vm: &VmRun, suffix: &str) {
    let skips = guest_skips(vm);
    println!("guest checks skipped{suffix}: {}", skips.len());
    for skipped in skips {
        println!("guest skipped{suffix}: {skipped}");
    }
}

/// One line per step the guest ran: its name, how it ended, how long it
/// took, then `suffix`.
pub(super) fn print_steps(vm: &VmRun, suffix: &str) {
    for e in &vm.exes {
        let result = match e.status {
            Some(0) => "ok".to_string(),
            Some(s) => format!("exit {s}"),
            None => "no exit".to_string(),
        };
        println!("{:<24} {result:>8} {:>6.1} s{suffix}", e.name, e.secs);
    }
}

/// The daemon's data lines (`fuse_transport_virtio::data` at debug): every
/// 1 MiB WRITE must have gone to the file in one `pwritev` from guest
/// memory, and there must be at least one.
pub(super) fn check_write_path(log: &Path) -> Vec<String> {
    let text = fs::read_to_string(log).unwrap_or_default();
    let field = |line: &str, name: &str| -> Option<u64> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        line[at..].split_whitespace().next()?.parse().ok()
    };
    let mut big = 0;
    let mut problems = Vec::new();
    for line in text.lines().filter(|l| l.contains("op=\"WRITE\"")) {
        if field(line, "bytes") != Some(1 << 20) {
            continue;
        }
        big += 1;
        if field(line, "calls") != Some(1) || field(line, "bounced") != Some(0) {
            problems.push(format!("a 1 MiB WRITE took more than one pwritev: {line}"));
        }
    }
    for line in text.lines().filter(|l| l.contains("data path:")) {
        println!("daemon: {}", &line[line.find("data path:").unwrap_or(0)..]);
    }
    if big == 0 {
        problems.push("the daemon logged no 1 MiB WRITE (is max_pages below 256?)".into());
    } else if problems.is_empty() {
        println!("daemon: {big} WRITEs of 1 MiB, each one pwritev from the guest's pages");
    }
    problems
}

/// pjdfstest's summary line in the guest, and the tests it said failed.
pub(super) fn pjdfstest_report(vm: &VmRun) -> String {
    let summary = vm
        .console
        .iter()
        .rev()
        .find_map(|l| after(l, "Summary:").map(|s| format!("Summary:{s}")))
        .unwrap_or_else(|| "no summary".to_string());
    let failed: Vec<&str> = vm
        .console
        .iter()
        .map(|l| l.trim_end())
        .filter(|l| l.ends_with(" FAILED") || l.ends_with(" PASSED UNEXPECTEDLY"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if failed.is_empty() {
        summary
    } else {
        format!("{summary}; failed: {}", failed.join(", "))
    }
}

/// What the checker skipped in the guest (its `SKIP: ...` lines): features
/// the backing file system lacks.
fn guest_skips(vm: &VmRun) -> Vec<&str> {
    vm.console
        .iter()
        .filter_map(|l| after(l, "SKIP: "))
        .map(str::trim_end)
        .collect()
}

/// Problems with the steps `names` of a boot: each must have run and
/// exited 0.
pub(super) fn steps_ok(vm: &VmRun, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter_map(|name| match vm.exes.iter().find(|e| e.name == *name) {
            Some(e) if e.status == Some(0) => None,
            Some(e) => Some(format!(
                "{name}: {}",
                e.status
                    .map_or("no exit status".to_string(), |s| format!("exit {s}"))
            )),
            None => Some(format!("{name} didn't run")),
        })
        .collect()
}

/// Compares the files the guest reported (`XTASK-VIRTIOFS-HASH: NAME SIZE
/// HASH`) with the shared directory; also checks the guest's file
/// against the pattern it was made from.
pub(super) fn compare_hashes(vm: &VmRun, shared: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut reported = BTreeMap::new();
    for l in &vm.console {
        if let Some(rest) = after(l, "XTASK-VIRTIOFS-HASH: ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [name, size, hash] = w[..] {
                reported.insert(name.to_string(), (size.to_string(), hash.to_string()));
            }
        }
    }
    for name in ["model.bin", FROM_GUEST.0, "d/f2"] {
        let Some((size, hash)) = reported.get(name) else {
            problems.push(format!("the guest reported no hash of {name}"));
            continue;
        };
        match fs::read(shared.join(name)) {
            Ok(data) => {
                let (s, h) = (data.len().to_string(), format!("{:016x}", fnv1a(&data)));
                if (&s, &h) != (size, hash) {
                    problems.push(format!(
                        "{name}: the guest saw {size} bytes, hash {hash}; the host has {s} \
                         bytes, hash {h}"
                    ));
                } else {
                    println!("host: {name} matches the guest ({s} bytes, {h})");
                }
            }
            Err(e) => problems.push(format!("{name} on the host: {e}")),
        }
    }
    match fs::read(shared.join(FROM_GUEST.0)) {
        Ok(data) if data == pattern(FROM_GUEST.1, FROM_GUEST.2) => {}
        Ok(_) => problems.push(format!(
            "{} isn't the pattern the guest wrote",
            FROM_GUEST.0
        )),
        Err(e) => problems.push(format!("{}: {e}", FROM_GUEST.0)),
    }
    let link = fs::read_link(shared.join("link"));
    if !link.as_ref().is_ok_and(|t| t == Path::new("d/f2")) {
        problems.push(format!("the guest's symlink on the host: {link:?}"));
    }
    match fs::metadata(shared.join("d/f2")) {
        Ok(m) if m.permissions().mode() & 0o7777 == 0o640 => {}
        other => problems.push(format!("d/f2's mode on the host: {other:?}")),
    }
    problems
}

/// The checker's pattern: `len` bytes of xorshift64* words from `seed`.
pub(super) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(len);
    let mut word = 0u64;
    for i in 0..len {
        if i % 8 == 0 {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            word = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
        }
        out.push((word >> (8 * (i % 8))) as u8);
    }
    out
}

/// 64-bit FNV-1a, as the checker computes it.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_and_hash_match_the_checker() {
        // The checker (xtask/vm-virtiofs.c) on the host printed these for
        // its file of seed 2.
        let data = pattern(FROM_GUEST.1, FROM_GUEST.2);
        assert_eq!(format!("{:016x}", fnv1a(&data)), "7bc28095694a9696");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
