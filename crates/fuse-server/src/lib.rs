//! fuse-server
