//! Async runtimes and file IO (work in progress).
