//! The synchronous [`FileSystem`] trait a backend implements.

use crate::args::*;
use crate::backing::BackingFiles;
use crate::init::{InitConfig, KernelInit};
use crate::io::{DirentPlusSink, DirentSink, ZeroCopyReader, ZeroCopyWriter};
use crate::request::{ForgetList, PodList};
use crate::types::*;
use fuse_abi::{AccessMask, FileLock, Kstatfs, SetupmappingIn};
use std::ffi::CStr;
use std::io;
use std::sync::Arc;

/// The error every operation returns by default.
pub fn enosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// A file system served through FUSE, called synchronously on the
/// transport's threads.
///
/// Every method has a default that answers `ENOSYS` (or does nothing, for
/// the operations without a reply), so a backend implements what it
/// supports. The trait is object safe: servers hold an
/// `Arc<dyn FileSystem>`. Methods are called concurrently from several
/// threads. An error's `raw_os_error()` becomes the errno of the reply;
/// an error without one becomes `EIO`.
///
/// Node ids are the file system's own: it hands them to the kernel in
/// [`Entry::nodeid`] and gets them back as `ino` arguments; the root is
/// [`fuse_abi::ROOT_ID`]. Every entry that reaches the kernel counts one
/// lookup reference, dropped by [`FileSystem::forget`].
#[allow(unused_variables)]
pub trait FileSystem: Send + Sync {
    /// Called once with the kernel's INIT offer, before any other request.
    /// Ask for optional features by adding flags to `config.flags` (only
    /// flags the kernel offers are kept) and adjust limits; an error fails
    /// the mount.
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        Ok(())
    }

    /// The connection is going away (unmount); no request follows.
    fn destroy(&self) {}

    /// The session is stopping: end every request that waits for something
    /// outside the file system (a blocking lock, SETLKW) with `EINTR`, and
    /// any that starts such a wait from now on, so that the threads serving
    /// them can finish. Called once, from the transport's `Session::stop`
    /// (through [`crate::Server::stop_waits`]), before the transport waits
    /// for its threads; requests may still come and must be answered.
    fn stop_waits(&self) {}

    /// Called once before [`FileSystem::init`] when the transport can
    /// register backing files on the connection (kernel passthrough, see
    /// [`crate::backing`]). A file system that wants passthrough keeps
    /// `files`, asks for `FUSE_PASSTHROUGH` in `init`, and answers OPEN
    /// and CREATE with [`crate::BackingId`]s it registered. The default
    /// ignores it.
    fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {}

    /// Looks up `name` in the directory `parent`; a found entry counts one
    /// lookup reference.
    fn lookup(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        enosys()
    }

    /// Drops `nlookup` references of `ino` (no reply).
    fn forget(&self, ctx: &Context, ino: u64, nlookup: u64) {}

    /// Drops references of many inodes (no reply). The default calls
    /// [`FileSystem::forget`] for each.
    fn batch_forget(&self, ctx: &Context, items: ForgetList<'_>) {
        for item in items.iter() {
            self.forget(ctx, item.nodeid, item.nlookup);
        }
    }

    /// Attributes of `ino`; `fh` is set when the caller used an open file.
    fn getattr(&self, ctx: &Context, ino: u64, fh: Option<u64>) -> io::Result<AttrReply> {
        enosys()
    }

    /// Changes attributes; replies with the new ones.
    fn setattr(&self, ctx: &Context, ino: u64, args: &SetattrArgs) -> io::Result<AttrReply> {
        enosys()
    }

    /// The target of a symlink.
    fn readlink(&self, ctx: &Context, ino: u64) -> io::Result<Vec<u8>> {
        enosys()
    }

    /// Creates a symlink `name` in `parent` pointing to `target`.
    fn symlink(&self, ctx: &Context, parent: u64, name: &CStr, target: &CStr) -> io::Result<Entry> {
        enosys()
    }

    /// Creates a file, device node, FIFO or socket.
    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MknodArgs,
    ) -> io::Result<Entry> {
        enosys()
    }

    /// Creates a directory.
    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &MkdirArgs,
    ) -> io::Result<Entry> {
        enosys()
    }

    /// Removes a file.
    fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        enosys()
    }

    /// Removes a directory.
    fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        enosys()
    }

    /// Renames `args.name` in `parent` to `args.newname` in `args.newdir`
    /// (RENAME and RENAME2).
    fn rename(&self, ctx: &Context, parent: u64, args: &RenameArgs<'_>) -> io::Result<()> {
        enosys()
    }

    /// Creates a hard link to `ino` named `newname` in `newparent`.
    fn link(&self, ctx: &Context, ino: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        enosys()
    }

    /// Opens a file.
    fn open(&self, ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        enosys()
    }

    /// Reads up to `args.size` bytes into `out`; returns normally once done
    /// (the reply carries whatever `out` holds: fewer bytes than asked
    /// means end of file, unless the file was opened with direct I/O).
    fn read(
        &self,
        ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn ZeroCopyWriter,
    ) -> io::Result<()> {
        enosys()
    }

    /// Writes the request's data from `data`; returns the bytes written.
    fn write(
        &self,
        ctx: &Context,
        ino: u64,
        args: &WriteArgs,
        data: &mut dyn ZeroCopyReader,
    ) -> io::Result<usize> {
        enosys()
    }

    /// File system statistics.
    fn statfs(&self, ctx: &Context, ino: u64) -> io::Result<Kstatfs> {
        enosys()
    }

    /// Releases an open file (the last close of its handle); errors are not
    /// reported to anyone.
    fn release(&self, ctx: &Context, ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        enosys()
    }

    /// Syncs a file.
    fn fsync(&self, ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        enosys()
    }

    /// Sets an extended attribute.
    fn setxattr(&self, ctx: &Context, ino: u64, args: &SetxattrArgs<'_>) -> io::Result<()> {
        enosys()
    }

    /// Gets an extended attribute: its size when `size` is 0, else its value
    /// (`ERANGE` if longer than `size`).
    fn getxattr(&self, ctx: &Context, ino: u64, name: &CStr, size: u32) -> io::Result<XattrReply> {
        enosys()
    }

    /// Lists extended attribute names: the list's size when `size` is 0,
    /// else the list (`ERANGE` if longer than `size`).
    fn listxattr(&self, ctx: &Context, ino: u64, size: u32) -> io::Result<XattrReply> {
        enosys()
    }

    /// Removes an extended attribute.
    fn removexattr(&self, ctx: &Context, ino: u64, name: &CStr) -> io::Result<()> {
        enosys()
    }

    /// Called on every close(2) of a file descriptor of an open file.
    fn flush(&self, ctx: &Context, ino: u64, args: &FlushArgs) -> io::Result<()> {
        enosys()
    }

    /// Opens a directory.
    fn opendir(&self, ctx: &Context, ino: u64, args: &OpenArgs) -> io::Result<Opened> {
        enosys()
    }

    /// Lists directory entries after cookie `args.offset` into `out` until
    /// it is full or the directory ends.
    fn readdir(
        &self,
        ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentSink,
    ) -> io::Result<()> {
        enosys()
    }

    /// Like [`FileSystem::readdir`], with an [`Entry`] per name; each entry
    /// that `out` accepts counts one lookup reference, one it rejects must
    /// be released at once.
    fn readdirplus(
        &self,
        ctx: &Context,
        ino: u64,
        args: &ReadArgs,
        out: &mut dyn DirentPlusSink,
    ) -> io::Result<()> {
        enosys()
    }

    /// Releases an open directory.
    fn releasedir(&self, ctx: &Context, ino: u64, args: &ReleaseArgs) -> io::Result<()> {
        enosys()
    }

    /// Syncs a directory.
    fn fsyncdir(&self, ctx: &Context, ino: u64, args: &FsyncArgs) -> io::Result<()> {
        enosys()
    }

    /// Tests for a lock: returns the conflicting lock or one of type `F_UNLCK`.
    fn getlk(&self, ctx: &Context, ino: u64, args: &LockArgs) -> io::Result<FileLock> {
        enosys()
    }

    /// Takes or releases a lock; `sleep` waits for a conflicting lock to go
    /// (SETLKW), and may be interrupted ([`FileSystem::interrupt`]).
    fn setlk(&self, ctx: &Context, ino: u64, args: &LockArgs, sleep: bool) -> io::Result<()> {
        enosys()
    }

    /// Checks access (only without the `default_permissions` mount option).
    fn access(&self, ctx: &Context, ino: u64, mask: AccessMask) -> io::Result<()> {
        enosys()
    }

    /// Creates and opens a file; the entry counts one lookup reference.
    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        enosys()
    }

    /// The kernel asks to interrupt the request `unique` (no reply). A
    /// request that is interrupted may reply `EINTR`.
    fn interrupt(&self, ctx: &Context, unique: u64) {}

    /// Maps a file block to a device block (block device file systems).
    fn bmap(&self, ctx: &Context, ino: u64, blocksize: u32, block: u64) -> io::Result<u64> {
        enosys()
    }

    /// ioctl(2) on an open file (restricted ioctls).
    fn ioctl(&self, ctx: &Context, ino: u64, args: &IoctlArgs<'_>) -> io::Result<IoctlReply> {
        enosys()
    }

    /// poll(2) on an open file: returns the ready events.
    fn poll(&self, ctx: &Context, ino: u64, args: &PollArgs) -> io::Result<u32> {
        enosys()
    }

    /// The kernel's answer to [`crate::Notifier::retrieve`] (no reply).
    fn retrieve_reply(
        &self,
        ctx: &Context,
        ino: u64,
        notify_unique: u64,
        offset: u64,
        data: &[u8],
    ) {
    }

    /// Allocates or deallocates space.
    fn fallocate(&self, ctx: &Context, ino: u64, args: &FallocateArgs) -> io::Result<()> {
        enosys()
    }

    /// Repositions a file offset (`SEEK_DATA`, `SEEK_HOLE`): returns the offset.
    fn lseek(&self, ctx: &Context, ino: u64, args: &LseekArgs) -> io::Result<u64> {
        enosys()
    }

    /// Copies a range between two open files: returns the bytes copied.
    fn copy_file_range(
        &self,
        ctx: &Context,
        ino: u64,
        args: &CopyFileRangeArgs,
    ) -> io::Result<u64> {
        enosys()
    }

    /// DAX: sets up a mapping.
    fn setupmapping(&self, ctx: &Context, ino: u64, args: &SetupmappingIn) -> io::Result<()> {
        enosys()
    }

    /// DAX: removes mappings.
    fn removemapping(
        &self,
        ctx: &Context,
        ino: u64,
        ranges: PodList<'_, fuse_abi::RemovemappingOne>,
    ) -> io::Result<()> {
        enosys()
    }

    /// Syncs the whole file system.
    fn syncfs(&self, ctx: &Context, ino: u64) -> io::Result<()> {
        enosys()
    }

    /// Creates and opens an unnamed temporary file in the directory `parent`.
    fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: &CreateArgs,
    ) -> io::Result<(Entry, Opened)> {
        enosys()
    }

    /// statx(2).
    fn statx(&self, ctx: &Context, ino: u64, args: &StatxArgs) -> io::Result<StatxReply> {
        enosys()
    }
}
