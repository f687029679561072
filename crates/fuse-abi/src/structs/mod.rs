//! The protocol's data structures, field for field as in `fuse.h`.
//!
//! All structs are `#[repr(C)]` and derive the zerocopy traits, so a request
//! buffer can be read with `T::read_from_prefix(bytes)` and a reply struct
//! written with `value.as_bytes()`.
//!
//! They live in submodules by protocol area, all re-exported here (and from
//! the crate root), so a struct's path doesn't depend on its area: `header`
//! (request and reply headers, extensions, INIT), `attr` (inodes and their
//! attributes), `dir` (operations on names and directory records), `file`
//! (operations on an open file), `lock` (locks, BMAP, IOCTL, POLL) and
//! `notify` (notifications). The FUSE-over-io_uring structs are in
//! [`crate::uring`].

/// Declares protocol structs with the derives every one of them needs.
macro_rules! abi_structs {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }
    )*};
}

// After the macro: a `macro_rules!` macro is in scope only below its
// definition, submodules included.
mod attr;
mod dir;
mod file;
mod header;
mod lock;
mod notify;

pub use attr::*;
pub use dir::*;
pub use file::*;
pub use header::*;
pub use lock::*;
pub use notify::*;
