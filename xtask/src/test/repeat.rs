//! `cargo xtask test --repeat N [--only STEP] [--load]`: the test steps run
//! N times, to find the tests that fail now and then.
//!
//! setup, build and abi-check run once (if selected); the test steps (by
//! default `cargo-test` alone, else those `--only` names) run once per
//! round. A round of `cargo-test` writes its output to
//! `target/xtask-repeat/round-R-cargo-test.log` (kept only when the round
//! failed) and prints one line; a round still running after `--watchdog`
//! seconds is reported as hung with the tests still running, killed, and
//! the next round starts. At the end every test that failed at least once
//! is listed with how many rounds it failed in and its first message.
//!
//! `--load` runs the rounds beside a load of the runner's own: two threads
//! that spin and one that keeps writing and syncing a 64 MiB file in the
//! temporary directory.

use super::*;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Steps that prepare the machine or the build: run once, not per round.
const ONCE: &[&str] = &["setup", "build", "abi-check"];

/// One test's failures over the rounds.
struct Tally {
    /// The test as the summary names it: `test [binary]` or `step STEP`.
    what: String,
    /// The rounds it failed in.
    rounds: Vec<u32>,
    /// The message of its first failure.
    first_message: String,
}

/// Runs the repeat and prints its summary; exits with 1 if anything failed.
pub(super) fn run(steps: &[Step], ctx: &mut Ctx, rounds: u32) -> Result<()> {
    let args = ctx.args;
    let repeated: Vec<&Step> = steps
        .iter()
        .filter(|s| !ONCE.contains(&s.name) && deselected(args, s.name).is_none())
        .filter(|s| !args.only.is_empty() || s.name == "cargo-test" || args.scratch)
        .collect();
    if rounds == 0 || repeated.is_empty() {
        eprintln!(
            "error: --repeat needs N >= 1 and a test step to repeat (--only cargo-test, ...)"
        );
        std::process::exit(2);
    }
    let started = Instant::now();
    for step in steps.iter().filter(|s| ONCE.contains(&s.name)) {
        if deselected(args, step.name).is_some() {
            continue;
        }
        println!("\n==> {}: {}", step.name, step.about);
        if let Err(e) = run_checked(step, ctx) {
            eprintln!("error: step `{}` failed: {}", step.name, one_line(&e));
            std::process::exit(1);
        }
    }

    let logs = target_dir().join("xtask-repeat");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let names: Vec<&str> = repeated.iter().map(|s| s.name).collect();
    println!(
        "\n==> repeat: {rounds} rounds of {}{}, watchdog {} s per round",
        names.join(", "),
        if args.load {
            " beside a load (2 busy loops, 1 writer)"
        } else {
            ""
        },
        args.watchdog
    );
    // fuse-abi's layout test needs the 7.3 header: found once, not per
    // round (set before the load's threads start).
    if names.contains(&"cargo-test") && std::env::var_os("FUSE_ABI_REFERENCE_H").is_none() {
        if let Ok(header) = kernel_7_3_fuse_h(&ctx.root) {
            std::env::set_var("FUSE_ABI_REFERENCE_H", header);
        }
    }
    let load = if args.load {
        Some(Load::start()?)
    } else {
        None
    };
    let mut tallies: Vec<Tally> = Vec::new();
    let mut hung: Vec<String> = Vec::new();
    let mut failed_rounds = 0;
    for round in 1..=rounds {
        let mut round_failed = false;
        for step in &repeated {
            let log = logs.join(format!("round-{round}-{}.log", step.name));
            ctx.round = Some(RoundOptions {
                log: log.clone(),
                watchdog: Duration::from_secs(args.watchdog),
                hung: None,
            });
            let (counts_before, failed_before) = (ctx.counts, ctx.failed_tests.len());
            let t = Instant::now();
            let result = run_checked(step, ctx);
            let secs = t.elapsed().as_secs_f64();
            let round_opts = ctx.round.take().expect("set above");
            let new_failed = &ctx.failed_tests[failed_before..];
            for f in new_failed {
                record(
                    &mut tallies,
                    format!("{} [{}]", f.test, f.binary),
                    round,
                    &f.message,
                );
            }
            if let Some(running) = &round_opts.hung {
                hung.push(format!("round {round}: {running}"));
            }
            let c = ctx.counts;
            let counts = format!(
                "{} passed, {} failed, {} ignored",
                c.passed - counts_before.passed,
                c.failed - counts_before.failed,
                c.skipped - counts_before.skipped
            );
            match result {
                Ok(_) => {
                    println!(
                        "round {round}/{rounds} {}: ok ({counts}; {secs:.1} s)",
                        step.name
                    );
                    let _ = fs::remove_file(&log);
                }
                Err(e) => {
                    round_failed = true;
                    let reason = one_line(&e);
                    // A failure no test accounts for (a hang, a leftover
                    // mount, a step without per-test results) is the step's.
                    if new_failed.is_empty()
                        || round_opts.hung.is_some()
                        || reason.contains("FUSE mount")
                    {
                        record(&mut tallies, format!("step {}", step.name), round, &reason);
                    }
                    let log_note = if log.exists() {
                        format!(
                            "; log: {}",
                            crate::text::repo_relative(&log.display().to_string())
                        )
                    } else {
                        String::new()
                    };
                    println!(
                        "round {round}/{rounds} {}: FAILED ({counts}; {secs:.1} s{log_note}): {reason}",
                        step.name
                    );
                    for f in new_failed {
                        println!("  {} [{}]: {}", f.test, f.binary, f.message);
                    }
                }
            }
            let _ = std::io::stdout().flush();
        }
        failed_rounds += u32::from(round_failed);
    }
    drop(load);

    println!("\n==> repeat summary");
    println!(
        "{rounds} rounds of {}{}: {failed_rounds} failed; {:.1} s in all",
        names.join(", "),
        if args.load { " under load" } else { "" },
        started.elapsed().as_secs_f64()
    );
    for h in &hung {
        println!("hung: {h}");
    }
    if tallies.is_empty() {
        println!("no test failed in any round");
        return Ok(());
    }
    println!("failed at least once ({}):", tallies.len());
    for t in &tallies {
        println!(
            "  {}/{rounds} {} (rounds {}): {}",
            t.rounds.len(),
            t.what,
            t.rounds
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            t.first_message
        );
    }
    std::process::exit(1);
}

/// Counts a failure of `what` in `round`, keeping its first message.
fn record(tallies: &mut Vec<Tally>, what: String, round: u32, message: &str) {
    match tallies.iter_mut().find(|t| t.what == what) {
        Some(t) => {
            if t.rounds.last() != Some(&round) {
                t.rounds.push(round);
            }
        }
        None => tallies.push(Tally {
            what,
            rounds: vec![round],
            first_message: if message.is_empty() {
                "(no message)".into()
            } else {
                message.to_string()
            },
        }),
    }
}

/// The load of `--load`; stops (and removes its file) when dropped.
struct Load {
    /// Tells the threads to end.
    stop: Arc<AtomicBool>,
    /// The two spinners and the writer.
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// Starts two busy loops and a writer.
    fn start() -> Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for _ in 0..2 {
            let stop = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }));
        }
        let file = tempfile::NamedTempFile::new().context("creating the load's file")?;
        println!("load: 2 busy loops, 1 writer of {}", file.path().display());
        let stop_w = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            // Written in 1 MiB pieces, synced and emptied every 64 MiB: it
            // keeps the disk and the page cache busy without filling either.
            let chunk = vec![0x5au8; 1 << 20];
            let mut f = file.as_file();
            while !stop_w.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    if f.write_all(&chunk).is_err() {
                        break;
                    }
                }
                let _ = f.sync_data();
                let _ = f.set_len(0);
                let _ = std::io::Seek::rewind(&mut f);
            }
        }));
        Ok(Load { stop, threads })
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_count_rounds_and_keep_the_first_message() {
        let mut t = Vec::new();
        record(&mut t, "a [bin]".into(), 1, "first");
        record(&mut t, "b [bin]".into(), 1, "");
        record(&mut t, "a [bin]".into(), 3, "second");
        record(&mut t, "a [bin]".into(), 3, "again in round 3");
        let seen: Vec<_> = t
            .iter()
            .map(|t| (t.what.as_str(), t.rounds.clone(), t.first_message.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("a [bin]", vec![1, 3], "first"),
                ("b [bin]", vec![1], "(no message)")
            ]
        );
    }
}
