//! The nice value ring threads set themselves (`UringConfig::nice`): the
//! one configured, or the one inherited from the thread that starts the
//! session. Its own test binary: the check reads every `fuse-uring-*`
//! thread of this process, which other tests' sessions would add to.
//!
//! Lowering a nice value takes `CAP_SYS_NICE` in the initial user
//! namespace, hence `needs_root` (a user namespace's run skips it, listed).

mod common;

use common::*;
use fuse_server::Session;
use fuse_transport_uring::UringConfig;
use std::time::Duration;

/// The nice values of this process's ring threads.
fn ring_thread_nices() -> Vec<i32> {
    test_support::thread_nices(std::process::id() as i32)
        .into_iter()
        .filter(|(name, _)| name.starts_with("fuse-uring-"))
        .map(|(_, nice)| nice)
        .collect()
}

fn serve_with(config: UringConfig) -> Vec<i32> {
    let m = mount(config);
    assert!(
        m.session.mode().uses_uring(),
        "the session fell back to /dev/fuse: {}",
        m.session.fallback_reason().unwrap_or("no reason given")
    );
    std::fs::metadata(&m.mnt).unwrap();
    let nices = ring_thread_nices();
    let Mounted { session, .. } = m;
    session.stop();
    within(Duration::from_secs(60), "stop and wait", move || {
        session.wait().expect("session ended cleanly");
    });
    assert!(!nices.is_empty(), "no ring threads");
    nices
}

#[test]
fn ring_threads_set_the_configured_nice_or_keep_the_inherited_one_needs_root() {
    require_root_and_uring();
    let nices = serve_with(UringConfig::default().nice(Some(-3)));
    assert!(
        nices.iter().all(|&n| n == -3),
        "ring threads at {nices:?}, not -3"
    );
    let inherited = test_support::current_thread_nice();
    let nices = serve_with(UringConfig::default().nice(None));
    assert!(
        nices.iter().all(|&n| n == inherited),
        "ring threads at {nices:?}, not the inherited {inherited}"
    );
}
