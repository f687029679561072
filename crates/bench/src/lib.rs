//! Benchmark support for the workspace: the bench daemon
//! (`fuse-bench-daemon`, module [`daemon`]) and the metadata workloads
//! (`fuse-bench-meta`, module [`meta`]) that `cargo xtask bench` runs next
//! to fio. How the harness uses them is in `docs/benchmarks.md`.

pub mod daemon;
pub mod meta;
