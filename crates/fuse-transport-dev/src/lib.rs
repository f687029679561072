//! fuse-transport-dev
