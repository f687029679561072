//! A runtime's ring shared with another user's SQEs (`Builder::uring_commands`,
//! `Runtime::shared_ring`): the user's completions come back to the user, the runtime's
//! own operations work beside them, on one ring.

mod common;

use std::io::Write;
use std::os::fd::AsRawFd;

use async_io::{Builder, File, Runtime, RuntimeType, SharedRing};
use common::{make_file, pattern, pipe, scratch};
use io_uring::{opcode, types};

fn shared_runtime(defer_taskrun: bool) -> Runtime {
    match Builder::new(RuntimeType::IoUring)
        .uring_commands(true)
        .defer_taskrun(defer_taskrun)
        .cq_entries(4096)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build an io_uring runtime with 128-byte SQEs here: {e}"),
    }
}

/// Pushes `sqe` (made 128 bytes) with `user_data`.
fn push(ring: &SharedRing, sqe: io_uring::squeue::Entry, user_data: u64) {
    // SAFETY: the SQEs of these tests point at fds the test keeps open until their
    // completion, and carry user_data below the limit; nothing is reaped here.
    unsafe {
        ring.with_ring(|r| {
            let sqe: io_uring::squeue::Entry128 = sqe.user_data(user_data).into();
            r.submission()
                .push(&sqe)
                .expect("room in the submission queue");
        })
    }
    .expect("the ring is free");
}

#[test]
fn only_runtimes_built_for_uring_commands_share_their_ring() {
    assert!(common::runtime(RuntimeType::IoUring)
        .shared_ring()
        .is_none());
    assert!(common::runtime(RuntimeType::Tokio).shared_ring().is_none());
    let rt = Builder::new(RuntimeType::Tokio)
        .uring_commands(true)
        .build()
        .expect("a tokio runtime");
    assert!(rt.shared_ring().is_none(), "a tokio runtime has no ring");
    assert!(shared_runtime(false).shared_ring().is_some());
}

#[test]
fn user_completions_come_back_to_the_user_and_file_io_runs_beside_them() {
    for defer in [false, true] {
        let dir = scratch();
        let data = pattern(256 * 1024, 7);
        let path = make_file(dir.path(), "f", &data);
        let rt = shared_runtime(defer);
        let ring = rt.shared_ring().expect("a shared ring");
        rt.block_on(async {
            let f = File::open(&path).await.expect("open");
            // A user's NOP and the runtime's reads, in flight together.
            push(&ring, opcode::Nop::new().build(), 42);
            let reads = async_io::spawn_local(async move {
                let mut out = Vec::new();
                for i in 0..8u64 {
                    let (r, buf) = f.read_at(vec![0u8; 4096], i * 4096).await;
                    assert_eq!(r.expect("read"), 4096);
                    out.push(buf);
                }
                out
            });
            ring.enter(0).expect("enter");
            ring.completions_ready().await;
            let reads = reads.await.expect("the reading task");
            for (i, buf) in reads.iter().enumerate() {
                assert_eq!(&buf[..], &data[i * 4096..(i + 1) * 4096], "read {i}");
            }
            let mut done = Vec::new();
            ring.take_completions(&mut done);
            assert_eq!(done, vec![(42, 0)], "defer_taskrun {defer}");
        });
        drop(ring);
        assert_eq!(rt.uring_in_flight(), 0);
    }
}

#[test]
fn the_runtime_reaps_user_completions_that_arrive_later() {
    // A poll on a pipe completes when another thread writes: the CQE is reaped by the
    // runtime's driver task (woken by the ring's eventfd), not by the user.
    let (r, mut w) = pipe();
    let rt = shared_runtime(false);
    let ring = rt.shared_ring().expect("a shared ring");
    rt.block_on(async {
        push(
            &ring,
            opcode::PollAdd::new(types::Fd(r.as_raw_fd()), libc::POLLIN as u32).build(),
            5,
        );
        ring.enter(0).expect("enter");
        let mut done = Vec::new();
        ring.take_completions(&mut done);
        assert!(done.is_empty(), "the poll completed before the write");
        let writer = std::thread::spawn(move || {
            w.write_all(b"x").expect("write to the pipe");
            w
        });
        ring.completions_ready().await;
        ring.take_completions(&mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].0, 5);
        assert!(
            done[0].1 & libc::POLLIN as i32 != 0,
            "poll result {}",
            done[0].1
        );
        drop(writer.join());
    });
}

#[test]
fn enter_waits_in_the_ring_for_user_completions() {
    let (r, mut w) = pipe();
    let rt = shared_runtime(true);
    let ring = rt.shared_ring().expect("a shared ring");
    push(
        &ring,
        opcode::PollAdd::new(types::Fd(r.as_raw_fd()), libc::POLLIN as u32).build(),
        9,
    );
    let writer = std::thread::spawn(move || {
        w.write_all(b"x").expect("write to the pipe");
        w
    });
    let mut done = Vec::new();
    while done.is_empty() {
        ring.enter(1).expect("enter and wait");
        ring.take_completions(&mut done);
    }
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, 9);
    drop(writer.join());
    assert!(ring.stats().cqes >= 1);
}

#[test]
fn after_a_sleep_in_the_ring_the_eventfd_wakes_the_runtime_again() {
    // While `enter` sleeps in the ring it keeps the ring's eventfd quiet
    // (the sleeper reaps what comes); a completion that arrives after it
    // must wake the runtime's driver task through the eventfd as before.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (r1, mut w1) = pipe();
        let (r2, w2) = pipe();
        for defer in [false, true] {
            let rt = shared_runtime(defer);
            let ring = rt.shared_ring().expect("a shared ring");
            push(
                &ring,
                opcode::PollAdd::new(types::Fd(r1.as_raw_fd()), libc::POLLIN as u32).build(),
                1,
            );
            w1.write_all(b"x").expect("write to the first pipe");
            let mut done = Vec::new();
            while done.is_empty() {
                ring.enter(1).expect("enter and wait");
                ring.take_completions(&mut done);
            }
            assert_eq!(done[0].0, 1);
            rt.block_on(async {
                push(
                    &ring,
                    opcode::PollAdd::new(types::Fd(r2.as_raw_fd()), libc::POLLIN as u32).build(),
                    2,
                );
                ring.enter(0).expect("enter");
                let mut w = w2.try_clone().expect("a second handle on the pipe");
                let writer = std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    w.write_all(b"y").expect("write to the second pipe");
                });
                let mut later = Vec::new();
                while later.is_empty() {
                    ring.completions_ready().await;
                    ring.take_completions(&mut later);
                }
                assert_eq!(later[0].0, 2, "defer_taskrun {defer}");
                writer.join().expect("the writer");
            });
            // Empty both pipes for the next round.
            let mut byte = [0u8; 1];
            for mut r in [&r1, &r2] {
                std::io::Read::read_exact(&mut r, &mut byte).expect("the byte written");
            }
        }
        tx.send(()).expect("the test's thread waits");
    });
    rx.recv_timeout(std::time::Duration::from_secs(60)).expect(
        "a completion after a sleep in the ring never woke the runtime (eventfd left quiet?)",
    );
}
