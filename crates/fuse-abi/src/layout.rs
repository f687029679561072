//! A table of every protocol struct's C name, size, alignment and field
//! offsets, as this crate lays them out.
//!
//! `cargo xtask abi-check HEADER` prints this table (through the
//! `abi-layout` example), compiles a C program against a kernel `fuse.h`
//! that prints the same facts with `sizeof`/`offsetof`, and compares the two.

/// One field of a protocol struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// The field's C designator, e.g. `"ino"` or `"bufpool.uaddr"`.
    pub c_name: &'static str,
    /// Offset from the start of the struct.
    pub offset: usize,
    /// Size of the field.
    pub size: usize,
}

/// One protocol struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StructLayout {
    /// The C type, e.g. `"struct fuse_attr"`.
    pub c_name: &'static str,
    /// The Rust type's name.
    pub rust_name: &'static str,
    /// `size_of`.
    pub size: usize,
    /// `align_of`.
    pub align: usize,
    /// Every field, in declaration order.
    pub fields: &'static [FieldLayout],
}

/// Every protocol struct of this crate.
pub const LAYOUTS: &[StructLayout] = &[];
