//! Benchmark support (work in progress).
