//! fuse-backend-passthrough
