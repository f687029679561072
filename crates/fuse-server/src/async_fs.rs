//! The asynchronous [`AsyncFileSystem`] trait, and the adapter that serves
//! a synchronous [`FileSystem`] through it.
//!
//! The server has one dispatch, written against [`AsyncFileSystem`]. A
//! synchronous file system goes through [`SyncFs`], whose futures are
//! [`FsFuture::Ready`] values: no allocation, and the dispatch completes at
//! its first poll, so the synchronous transports drive it without an
//! executor.

use crate::args::*;
use crate::backing::BackingFiles;
use crate::filesystem::{enosys, FileSystem};
use crate::init::{InitConfig, KernelInit};
use crate::io::{DirentPlusSink, DirentSink, ZeroCopyReader, ZeroCopyWriter};
use crate::request::{ForgetList, PodList};
use crate::types::*;
use fuse_abi::{AccessMask, FileLock, Kstatfs, SetupmappingIn};
use std::ffi::CStr;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

/// The future an [`AsyncFileSystem`] method returns: a value that is ready
/// at once (no allocation) or a boxed future.
///
/// The boxed future need not be `Send`: a connection is served thread by
/// thread (each serving thread reads its own `/dev/fuse` fd or ring), so a
/// file system may use thread-bound I/O such as an io_uring owned by the
/// serving thread (`async-io`'s io_uring runtime). Serving tasks are
/// therefore local tasks (`spawn_local`).
pub enum FsFuture<'a, T> {
    /// A result available at once; `None` once taken.
    Ready(Option<io::Result<T>>),
    /// A result still being computed.
    Pending(Pin<Box<dyn Future<Output = io::Result<T>> + 'a>>),
}

impl<'a, T> FsFuture<'a, T> {
    /// A future that is ready with `result`.
    pub fn ready(result: io::Result<T>) -> Self {
        FsFuture::Ready(Some(result))
    }

    /// Boxes `future`.
    pub fn boxed(future: impl Future<Output = io::Result<T>> + 'a) -> Self {
        FsFuture::Pending(Box::pin(future))
    }
}

// The value is moved out, never pinned in place.
impl<T> Unpin for FsFuture<'_, T> {}

impl<T> Future for FsFuture<'_, T> {
    type Output = io::Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            FsFuture::Ready(value) => Poll::Ready(
                value
                    .take()
                    .unwrap_or_else(|| Err(io::Error::other("FsFuture polled after completion"))),
            ),
            FsFuture::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

/// A file system served through FUSE whose operations may wait without
/// blocking a thread.
///
/// The asynchronous twin of [`FileSystem`]: the same operations with the
/// same arguments and contracts, each returning an [`FsFuture`] borrowing
/// its arguments. Object safe; every method defaults to `ENOSYS`.
#[allow(unused_variables)]
pub trait AsyncFileSystem: Send + Sync {
    /// Called once with the kernel's INIT offer; see [`FileSystem::init`].
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        Ok(())
    }

    /// The connection is going away (unmount); no request follows.
    fn destroy(&self) {}

    /// The session is stopping: end lock waits; see
    /// [`FileSystem::stop_waits`].
    fn stop_waits(&self) {}

    /// Called once before `init` with the connection's backing file
    /// registry; see [`FileSystem::attach_backing_files`].
    fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {}

    /// Looks up `name` in the directory `parent`; a found entry counts one
    /// lookup reference.
    fn lookup<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, Entry> {
        FsFuture::ready(enosys())
    }

    /// Drops `nlookup` references of `ino` (no reply).
    fn forget<'a>(&'a self, ctx: &'a Context, ino: u64, nlookup: u64) -> FsFuture<'a, ()> {
        FsFuture::ready(Ok(()))
    }

    /// Drops references of many inodes (no reply). The default calls
    /// [`AsyncFileSystem::forget`] for each.
    fn batch_forget<'a>(&'a self, ctx: &'a Context, items: ForgetList<'a>) -> FsFuture<'a, ()> {
        FsFuture::boxed(async move {
            for item in items.iter() {
                self.forget(ctx, item.nodeid, item.nlookup).await?;
            }
            Ok(())
        })
    }

    /// Attributes of `ino`; `fh` is set when the caller used an open file.
    fn getattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        fh: Option<u64>,
    ) -> FsFuture<'a, AttrReply> {
        FsFuture::ready(enosys())
    }

    /// Changes attributes; replies with the new ones.
    fn setattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a SetattrArgs,
    ) -> FsFuture<'a, AttrReply> {
        FsFuture::ready(enosys())
    }

    /// The target of a symlink.
    fn readlink<'a>(&'a self, ctx: &'a Context, ino: u64) -> FsFuture<'a, Vec<u8>> {
        FsFuture::ready(enosys())
    }

    /// Creates a symlink `name` in `parent` pointing to `target`.
    fn symlink<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        target: &'a CStr,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(enosys())
    }

    /// Creates a file, device node, FIFO or socket.
    fn mknod<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a MknodArgs,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(enosys())
    }

    /// Creates a directory.
    fn mkdir<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a MkdirArgs,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(enosys())
    }

    /// Removes a file.
    fn unlink<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Removes a directory.
    fn rmdir<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Renames `args.name` in `parent` to `args.newname` in `args.newdir`
    /// (RENAME and RENAME2).
    fn rename<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        args: &'a RenameArgs<'a>,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Creates a hard link to `ino` named `newname` in `newparent`.
    fn link<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        newparent: u64,
        newname: &'a CStr,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(enosys())
    }

    /// Opens a file.
    fn open<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a OpenArgs) -> FsFuture<'a, Opened> {
        FsFuture::ready(enosys())
    }

    /// Reads up to `args.size` bytes into `out`; returns normally once done
    /// (the reply carries whatever `out` holds: fewer bytes than asked
    /// means end of file, unless the file was opened with direct I/O).
    fn read<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn ZeroCopyWriter,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Writes the request's data from `data`; returns the bytes written.
    fn write<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a WriteArgs,
        data: &'a mut dyn ZeroCopyReader,
    ) -> FsFuture<'a, usize> {
        FsFuture::ready(enosys())
    }

    /// File system statistics.
    fn statfs<'a>(&'a self, ctx: &'a Context, ino: u64) -> FsFuture<'a, Kstatfs> {
        FsFuture::ready(enosys())
    }

    /// Releases an open file (the last close of its handle); errors are not
    /// reported to anyone.
    fn release<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReleaseArgs,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Syncs a file.
    fn fsync<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FsyncArgs) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Sets an extended attribute.
    fn setxattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a SetxattrArgs<'a>,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Gets an extended attribute: its size when `size` is 0, else its value
    /// (`ERANGE` if longer than `size`).
    fn getxattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        name: &'a CStr,
        size: u32,
    ) -> FsFuture<'a, XattrReply> {
        FsFuture::ready(enosys())
    }

    /// Lists extended attribute names: the list's size when `size` is 0,
    /// else the list (`ERANGE` if longer than `size`).
    fn listxattr<'a>(&'a self, ctx: &'a Context, ino: u64, size: u32) -> FsFuture<'a, XattrReply> {
        FsFuture::ready(enosys())
    }

    /// Removes an extended attribute.
    fn removexattr<'a>(&'a self, ctx: &'a Context, ino: u64, name: &'a CStr) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Called on every close(2) of a file descriptor of an open file.
    fn flush<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FlushArgs) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Opens a directory.
    fn opendir<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a OpenArgs,
    ) -> FsFuture<'a, Opened> {
        FsFuture::ready(enosys())
    }

    /// Lists directory entries after cookie `args.offset` into `out` until
    /// it is full or the directory ends.
    fn readdir<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn DirentSink,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Like [`FileSystem::readdir`], with an [`Entry`] per name; each entry
    /// that `out` accepts counts one lookup reference, one it rejects must
    /// be released at once.
    fn readdirplus<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn DirentPlusSink,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Releases an open directory.
    fn releasedir<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReleaseArgs,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Syncs a directory.
    fn fsyncdir<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FsyncArgs) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Tests for a lock: returns the conflicting lock or one of type `F_UNLCK`.
    fn getlk<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a LockArgs,
    ) -> FsFuture<'a, FileLock> {
        FsFuture::ready(enosys())
    }

    /// Takes or releases a lock; `sleep` waits for a conflicting lock to go
    /// (SETLKW), and may be interrupted ([`FileSystem::interrupt`]).
    fn setlk<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a LockArgs,
        sleep: bool,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Checks access (only without the `default_permissions` mount option).
    fn access<'a>(&'a self, ctx: &'a Context, ino: u64, mask: AccessMask) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Creates and opens a file; the entry counts one lookup reference.
    fn create<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a CreateArgs,
    ) -> FsFuture<'a, (Entry, Opened)> {
        FsFuture::ready(enosys())
    }

    /// The kernel asks to interrupt the request `unique` (no reply). A
    /// request that is interrupted may reply `EINTR`.
    fn interrupt<'a>(&'a self, ctx: &'a Context, unique: u64) -> FsFuture<'a, ()> {
        FsFuture::ready(Ok(()))
    }

    /// Maps a file block to a device block (block device file systems).
    fn bmap<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        blocksize: u32,
        block: u64,
    ) -> FsFuture<'a, u64> {
        FsFuture::ready(enosys())
    }

    /// ioctl(2) on an open file (restricted ioctls).
    fn ioctl<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a IoctlArgs<'a>,
    ) -> FsFuture<'a, IoctlReply> {
        FsFuture::ready(enosys())
    }

    /// poll(2) on an open file: returns the ready events.
    fn poll<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a PollArgs) -> FsFuture<'a, u32> {
        FsFuture::ready(enosys())
    }

    /// The kernel's answer to [`crate::Notifier::retrieve`] (no reply).
    fn retrieve_reply<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        notify_unique: u64,
        offset: u64,
        data: &'a [u8],
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(Ok(()))
    }

    /// Allocates or deallocates space.
    fn fallocate<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a FallocateArgs,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Repositions a file offset (`SEEK_DATA`, `SEEK_HOLE`): returns the offset.
    fn lseek<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a LseekArgs) -> FsFuture<'a, u64> {
        FsFuture::ready(enosys())
    }

    /// Copies a range between two open files: returns the bytes copied.
    fn copy_file_range<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a CopyFileRangeArgs,
    ) -> FsFuture<'a, u64> {
        FsFuture::ready(enosys())
    }

    /// DAX: sets up a mapping.
    fn setupmapping<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a SetupmappingIn,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// DAX: removes mappings.
    fn removemapping<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        ranges: PodList<'a, fuse_abi::RemovemappingOne>,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Syncs the whole file system.
    fn syncfs<'a>(&'a self, ctx: &'a Context, ino: u64) -> FsFuture<'a, ()> {
        FsFuture::ready(enosys())
    }

    /// Creates and opens an unnamed temporary file in the directory `parent`.
    fn tmpfile<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        args: &'a CreateArgs,
    ) -> FsFuture<'a, (Entry, Opened)> {
        FsFuture::ready(enosys())
    }

    /// statx(2).
    fn statx<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a StatxArgs,
    ) -> FsFuture<'a, StatxReply> {
        FsFuture::ready(enosys())
    }
}

/// Serves a synchronous [`FileSystem`] as an [`AsyncFileSystem`]: every
/// method calls the synchronous one and returns its result ready.
pub struct SyncFs<F: ?Sized>(pub Arc<F>);

impl<F: FileSystem + ?Sized> AsyncFileSystem for SyncFs<F> {
    fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
        self.0.init(kernel, config)
    }

    fn destroy(&self) {
        self.0.destroy()
    }

    fn stop_waits(&self) {
        self.0.stop_waits()
    }

    fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {
        self.0.attach_backing_files(files)
    }

    fn lookup<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, Entry> {
        FsFuture::ready(self.0.lookup(ctx, parent, name))
    }

    fn forget<'a>(&'a self, ctx: &'a Context, ino: u64, nlookup: u64) -> FsFuture<'a, ()> {
        self.0.forget(ctx, ino, nlookup);
        FsFuture::ready(Ok(()))
    }

    fn batch_forget<'a>(&'a self, ctx: &'a Context, items: ForgetList<'a>) -> FsFuture<'a, ()> {
        self.0.batch_forget(ctx, items);
        FsFuture::ready(Ok(()))
    }

    fn getattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        fh: Option<u64>,
    ) -> FsFuture<'a, AttrReply> {
        FsFuture::ready(self.0.getattr(ctx, ino, fh))
    }

    fn setattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a SetattrArgs,
    ) -> FsFuture<'a, AttrReply> {
        FsFuture::ready(self.0.setattr(ctx, ino, args))
    }

    fn readlink<'a>(&'a self, ctx: &'a Context, ino: u64) -> FsFuture<'a, Vec<u8>> {
        FsFuture::ready(self.0.readlink(ctx, ino))
    }

    fn symlink<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        target: &'a CStr,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(self.0.symlink(ctx, parent, name, target))
    }

    fn mknod<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a MknodArgs,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(self.0.mknod(ctx, parent, name, args))
    }

    fn mkdir<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a MkdirArgs,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(self.0.mkdir(ctx, parent, name, args))
    }

    fn unlink<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.unlink(ctx, parent, name))
    }

    fn rmdir<'a>(&'a self, ctx: &'a Context, parent: u64, name: &'a CStr) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.rmdir(ctx, parent, name))
    }

    fn rename<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        args: &'a RenameArgs<'a>,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.rename(ctx, parent, args))
    }

    fn link<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        newparent: u64,
        newname: &'a CStr,
    ) -> FsFuture<'a, Entry> {
        FsFuture::ready(self.0.link(ctx, ino, newparent, newname))
    }

    fn open<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a OpenArgs) -> FsFuture<'a, Opened> {
        FsFuture::ready(self.0.open(ctx, ino, args))
    }

    fn read<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn ZeroCopyWriter,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.read(ctx, ino, args, out))
    }

    fn write<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a WriteArgs,
        data: &'a mut dyn ZeroCopyReader,
    ) -> FsFuture<'a, usize> {
        FsFuture::ready(self.0.write(ctx, ino, args, data))
    }

    fn statfs<'a>(&'a self, ctx: &'a Context, ino: u64) -> FsFuture<'a, Kstatfs> {
        FsFuture::ready(self.0.statfs(ctx, ino))
    }

    fn release<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReleaseArgs,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.release(ctx, ino, args))
    }

    fn fsync<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FsyncArgs) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.fsync(ctx, ino, args))
    }

    fn setxattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a SetxattrArgs<'a>,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.setxattr(ctx, ino, args))
    }

    fn getxattr<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        name: &'a CStr,
        size: u32,
    ) -> FsFuture<'a, XattrReply> {
        FsFuture::ready(self.0.getxattr(ctx, ino, name, size))
    }

    fn listxattr<'a>(&'a self, ctx: &'a Context, ino: u64, size: u32) -> FsFuture<'a, XattrReply> {
        FsFuture::ready(self.0.listxattr(ctx, ino, size))
    }

    fn removexattr<'a>(&'a self, ctx: &'a Context, ino: u64, name: &'a CStr) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.removexattr(ctx, ino, name))
    }

    fn flush<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FlushArgs) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.flush(ctx, ino, args))
    }

    fn opendir<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a OpenArgs,
    ) -> FsFuture<'a, Opened> {
        FsFuture::ready(self.0.opendir(ctx, ino, args))
    }

    fn readdir<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn DirentSink,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.readdir(ctx, ino, args, out))
    }

    fn readdirplus<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReadArgs,
        out: &'a mut dyn DirentPlusSink,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.readdirplus(ctx, ino, args, out))
    }

    fn releasedir<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a ReleaseArgs,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.releasedir(ctx, ino, args))
    }

    fn fsyncdir<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a FsyncArgs) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.fsyncdir(ctx, ino, args))
    }

    fn getlk<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a LockArgs,
    ) -> FsFuture<'a, FileLock> {
        FsFuture::ready(self.0.getlk(ctx, ino, args))
    }

    fn setlk<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a LockArgs,
        sleep: bool,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.setlk(ctx, ino, args, sleep))
    }

    fn access<'a>(&'a self, ctx: &'a Context, ino: u64, mask: AccessMask) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.access(ctx, ino, mask))
    }

    fn create<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        name: &'a CStr,
        args: &'a CreateArgs,
    ) -> FsFuture<'a, (Entry, Opened)> {
        FsFuture::ready(self.0.create(ctx, parent, name, args))
    }

    fn interrupt<'a>(&'a self, ctx: &'a Context, unique: u64) -> FsFuture<'a, ()> {
        self.0.interrupt(ctx, unique);
        FsFuture::ready(Ok(()))
    }

    fn bmap<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        blocksize: u32,
        block: u64,
    ) -> FsFuture<'a, u64> {
        FsFuture::ready(self.0.bmap(ctx, ino, blocksize, block))
    }

    fn ioctl<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a IoctlArgs<'a>,
    ) -> FsFuture<'a, IoctlReply> {
        FsFuture::ready(self.0.ioctl(ctx, ino, args))
    }

    fn poll<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a PollArgs) -> FsFuture<'a, u32> {
        FsFuture::ready(self.0.poll(ctx, ino, args))
    }

    fn retrieve_reply<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        notify_unique: u64,
        offset: u64,
        data: &'a [u8],
    ) -> FsFuture<'a, ()> {
        self.0.retrieve_reply(ctx, ino, notify_unique, offset, data);
        FsFuture::ready(Ok(()))
    }

    fn fallocate<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a FallocateArgs,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.fallocate(ctx, ino, args))
    }

    fn lseek<'a>(&'a self, ctx: &'a Context, ino: u64, args: &'a LseekArgs) -> FsFuture<'a, u64> {
        FsFuture::ready(self.0.lseek(ctx, ino, args))
    }

    fn copy_file_range<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a CopyFileRangeArgs,
    ) -> FsFuture<'a, u64> {
        FsFuture::ready(self.0.copy_file_range(ctx, ino, args))
    }

    fn setupmapping<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a SetupmappingIn,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.setupmapping(ctx, ino, args))
    }

    fn removemapping<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        ranges: PodList<'a, fuse_abi::RemovemappingOne>,
    ) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.removemapping(ctx, ino, ranges))
    }

    fn syncfs<'a>(&'a self, ctx: &'a Context, ino: u64) -> FsFuture<'a, ()> {
        FsFuture::ready(self.0.syncfs(ctx, ino))
    }

    fn tmpfile<'a>(
        &'a self,
        ctx: &'a Context,
        parent: u64,
        args: &'a CreateArgs,
    ) -> FsFuture<'a, (Entry, Opened)> {
        FsFuture::ready(self.0.tmpfile(ctx, parent, args))
    }

    fn statx<'a>(
        &'a self,
        ctx: &'a Context,
        ino: u64,
        args: &'a StatxArgs,
    ) -> FsFuture<'a, StatxReply> {
        FsFuture::ready(self.0.statx(ctx, ino, args))
    }
}
