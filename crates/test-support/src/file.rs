//! Files the I/O tests share: read-write creation, page-aligned buffers
//! and `O_DIRECT` opens,
//! shared mappings, and the mapping check the passthrough tests make on
//! every way a mount is served.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Where an [`Aligned`] buffer starts: a page boundary, which `O_DIRECT`
/// asks of the memory it reads into and writes from.
const PAGE: usize = 4096;

/// `path` opened for reading and writing, created or truncated.
pub fn create_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()))
}

/// A page-aligned buffer for `O_DIRECT`.
pub struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    /// `len` (not 0) zeroed bytes at a page boundary.
    pub fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, PAGE).expect("a buffer layout");
        assert!(len > 0, "an empty Aligned buffer");
        // SAFETY: the layout's size is not zero (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocating {len} aligned bytes");
        Self { ptr, len }
    }
}

impl AsMut<[u8]> for Aligned {
    /// The bytes.
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` holds `len` initialized bytes we own.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, PAGE).expect("its layout");
        // SAFETY: allocated in `new` with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, layout) }
    }
}

/// `path` opened for reading and writing with `O_DIRECT`, created or
/// truncated.
pub fn open_direct(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {} with O_DIRECT: {e}", path.display()))
}

/// A shared, readable and writable mapping of the first `len` bytes of a
/// file, unmapped on drop.
pub struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

impl SharedMap {
    /// Maps `len` bytes of `f` (open for reading and writing), or the
    /// error mmap returned.
    pub fn new(f: &File, len: usize) -> std::io::Result<Self> {
        let (prot, fd) = (libc::PROT_READ | libc::PROT_WRITE, f.as_raw_fd());
        // SAFETY: a new mapping of a valid descriptor; checked below.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if ptr == libc::MAP_FAILED {
            Err(std::io::Error::last_os_error())
        } else {
            let ptr = ptr.cast();
            Ok(Self { ptr, len })
        }
    }

    /// The mapped bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable, ours
        // until drop.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// `msync(MS_SYNC)`: the mapping's changes written to the file, or
    /// the error.
    pub fn sync(&self) -> std::io::Result<()> {
        // SAFETY: `ptr`/`len` are exactly the mapping this value owns,
        // mapped until drop.
        if unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A file written below a passthrough (`below`) reads the same through a
/// shared mapping of it through the mount (`through`), and what is
/// written to the mapping reaches the file below once synced. `what`
/// names the case in a failure.
pub fn mmap_writes_through(below: &Path, through: &Path, what: &str) {
    let len = 64 * 1024;
    std::fs::write(below, crate::pattern(len, 9)).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(through)
        .unwrap_or_else(|e| panic!("{what}: opening {}: {e}", through.display()));
    let mut map = SharedMap::new(&f, len).unwrap_or_else(|e| panic!("{what}: mmap: {e}"));
    let bytes = map.bytes();
    assert_eq!(&bytes[..], &crate::pattern(len, 9)[..], "{what}");
    bytes[100..110].copy_from_slice(b"0123456789");
    bytes[len - 1] = 0xAB;
    map.sync().unwrap_or_else(|e| panic!("{what}: msync: {e}"));
    drop(map);
    drop(f);
    let below = std::fs::read(below).unwrap();
    assert_eq!(&below[100..110], b"0123456789", "{what}");
    assert_eq!(below[len - 1], 0xAB, "{what}");
}

/// `renameat2(from, to, flags)` (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`,
/// ...), which std doesn't offer.
pub fn renameat2(
    from: &std::path::Path,
    to: &std::path::Path,
    flags: libc::c_uint,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes()).expect("a path without NUL")
    };
    let (from, to) = (c(from), c(to));
    // SAFETY: NUL-terminated paths that outlive the call; AT_FDCWD needs
    // no descriptor.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
