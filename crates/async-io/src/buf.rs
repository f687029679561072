//! Owned buffers for IO the kernel performs after the call returns.
//!
//! io_uring reads into and writes from memory *after* the submitting call has returned,
//! possibly after the future that asked for it was dropped. So the file API takes buffers
//! by value and hands them back with the result ([`BufResult`]), and the driver keeps a
//! buffer of a dropped operation alive until the kernel's completion arrives.
//!
//! Semantics, the same on both runtimes:
//! - A write sends the buffer's initialised bytes, `[0, bytes_init())`.
//! - A read fills the buffer from its start, up to `bytes_total()` (the capacity), and then
//!   sets the initialised length to exactly the number of bytes read into it
//!   ([`IoBufMut::set_init`]). Previous contents are replaced, not appended to.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The result of an operation on an owned buffer: the outcome and the buffer, which is
/// always given back (also on error).
pub type BufResult<T, B> = (std::io::Result<T>, B);

/// The alignment [`AlignedBuf`] guarantees: one page, which satisfies `O_DIRECT` on every
/// Linux file system and block device (their logical block size is at most 4096).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// A buffer whose memory can be read by the kernel while the caller no longer holds it.
///
/// # Safety
/// Implementors guarantee that `stable_ptr()` points to `bytes_init()` initialised bytes,
/// that this memory stays valid and does not move while the value is moved around (it
/// lives on the heap or in static memory), and that nothing else writes to it while the
/// value is owned by an operation.
pub unsafe trait IoBuf: Send + 'static {
    /// A pointer to the start of the buffer, stable across moves of `self`.
    fn stable_ptr(&self) -> *const u8;
    /// How many bytes, from the start, are initialised: what a write sends.
    fn bytes_init(&self) -> usize;
}

/// A buffer the kernel can write into while the caller no longer holds it.
///
/// # Safety
/// As for [`IoBuf`], and `stable_mut_ptr()` must be valid for writes of `bytes_total()`
/// bytes, stable across moves of `self`.
pub unsafe trait IoBufMut: IoBuf {
    /// A mutable pointer to the start of the buffer, stable across moves of `self`.
    fn stable_mut_ptr(&mut self) -> *mut u8;
    /// The capacity: how many bytes a read may place into the buffer.
    fn bytes_total(&self) -> usize;
    /// Marks the first `n` bytes as initialised and the rest as not (the length becomes `n`).
    ///
    /// # Safety
    /// `n <= bytes_total()` and the first `n` bytes have been written.
    unsafe fn set_init(&mut self, n: usize);
}

// SAFETY: a Vec's heap allocation does not move when the Vec is moved; `len` bytes are
// initialised and `capacity` bytes are allocated.
unsafe impl IoBuf for Vec<u8> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
}

// SAFETY: see `IoBuf for Vec<u8>`; the spare capacity is writable.
unsafe impl IoBufMut for Vec<u8> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn bytes_total(&self) -> usize {
        self.capacity()
    }
    unsafe fn set_init(&mut self, n: usize) {
        debug_assert!(n <= self.capacity());
        // SAFETY: the caller guarantees `n <= capacity` and that the bytes are written.
        unsafe { self.set_len(n) }
    }
}

// SAFETY: static memory never moves or goes away, and is immutable.
unsafe impl IoBuf for &'static [u8] {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len()
    }
}

/// A heap buffer aligned to [`DIRECT_IO_ALIGN`] (a page), usable for `O_DIRECT`.
///
/// Its memory is zeroed when allocated, so every byte of the capacity is always
/// initialised and [`AlignedBuf::set_len`] is safe. It dereferences to its first `len()`
/// bytes.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty (`len() == 0`) buffer with room for `capacity` bytes, all zero.
    pub fn with_capacity(capacity: usize) -> Self {
        if capacity == 0 {
            // A dangling but aligned pointer, never dereferenced for a zero-sized range.
            let ptr = NonNull::new(DIRECT_IO_ALIGN as *mut u8).expect("non-null constant");
            return Self {
                ptr,
                cap: 0,
                len: 0,
            };
        }
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Self {
            ptr,
            cap: capacity,
            len: 0,
        }
    }

    /// A buffer of `len` zero bytes (`len() == capacity() == len`).
    pub fn zeroed(len: usize) -> Self {
        let mut b = Self::with_capacity(len);
        b.len = len;
        b
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut b = Self::zeroed(data.len());
        b.copy_from_slice(data);
        b
    }

    fn layout(capacity: usize) -> Layout {
        Layout::from_size_align(capacity, DIRECT_IO_ALIGN).expect("buffer size overflows isize")
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The number of valid bytes (what `Deref` shows and a write sends).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the number of valid bytes. Bytes never written read as zero or as whatever an
    /// earlier use left there.
    ///
    /// # Panics
    /// If `len > capacity()`.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.cap,
            "AlignedBuf::set_len({len}) beyond capacity {}",
            self.cap
        );
        self.len = len;
    }

    /// The whole capacity as a mutable slice, regardless of `len()`.
    pub fn as_full_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `cap` bytes, zero-initialised at allocation, exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap != 0 {
            // SAFETY: allocated in `with_capacity` with exactly this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len <= cap` bytes of our initialised allocation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len <= cap` bytes of our initialised allocation, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        let mut b = Self::with_capacity(self.cap);
        b.len = self.len;
        b.as_full_mut_slice().copy_from_slice(self.as_full_slice());
        b
    }
}

impl AlignedBuf {
    fn as_full_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `cap` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .finish()
    }
}

// SAFETY: the allocation is owned, never moves, `len` bytes are initialised (all are).
unsafe impl IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
    fn bytes_init(&self) -> usize {
        self.len
    }
}

// SAFETY: `cap` bytes are allocated and writable.
unsafe impl IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn bytes_total(&self) -> usize {
        self.cap
    }
    unsafe fn set_init(&mut self, n: usize) {
        debug_assert!(n <= self.cap);
        self.len = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        for cap in [0, 1, 4095, 4096, 1 << 20] {
            let mut b = AlignedBuf::with_capacity(cap);
            assert_eq!(b.stable_ptr() as usize % DIRECT_IO_ALIGN, 0);
            assert_eq!(b.len(), 0);
            assert!(b.as_full_mut_slice().iter().all(|&x| x == 0));
        }
        let b = AlignedBuf::from_slice(b"hello");
        assert_eq!(&b[..], b"hello");
        assert_eq!(b.clone()[..], b[..]);
    }
}
