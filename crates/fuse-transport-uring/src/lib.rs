//! FUSE over io_uring (work in progress).
