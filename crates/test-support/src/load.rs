//! Client threads that keep a mount busy (and check what they read) while
//! a test upgrades, takes over or recovers the daemon under them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// `n` client threads. Client `t` first runs `start(t)` (its setup; an
/// error ends it at once), then the round that returns again and again,
/// with the round's number, until `stop`, counting each round it finished
/// in `rounds`. Each thread ends with the first error it met, as
/// `client T, round I: ERROR`.
pub fn clients<S, R>(
    n: usize,
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicU64>,
    start: S,
) -> Vec<JoinHandle<Result<(), String>>>
where
    S: Fn(usize) -> Result<R, String> + Send + Sync + 'static,
    R: FnMut(u64) -> std::io::Result<()>,
{
    let start = Arc::new(start);
    (0..n)
        .map(|t| {
            let (start, stop, rounds) = (start.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut round = start(t)?;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round(i).map_err(|e| format!("client {t}, round {i}: {e}"))?;
                    rounds.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok(())
            })
        })
        .collect()
}
