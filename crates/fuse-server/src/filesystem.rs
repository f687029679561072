//! The file system traits a backend implements: [`FileSystem`]
//! (synchronous) and [`AsyncFileSystem`] (each operation returns an
//! [`FsFuture`]), both made from one list of operations below (see
//! `operations.rs` for how), so an operation is declared and documented
//! once.
//!
//! ## What every operation shares
//!
//! - **Errors.** An error's `raw_os_error()` becomes the reply's errno; one
//!   without (or one the kernel refuses, 512 and above) becomes `EIO`. The
//!   [`crate::errno`] helpers make the common ones.
//! - **ENOSYS.** Every operation defaults to `ENOSYS`. For many the kernel
//!   then stops sending that operation and does something else for good;
//!   each method says what. For the others the caller gets `ENOSYS`.
//! - **Node ids** are the file system's own: it hands them to the kernel in
//!   [`Entry::nodeid`] and gets them back as `ino`/`parent` arguments; the
//!   root is [`fuse_abi::ROOT_ID`]. (node id, [`Entry::generation`]) must be
//!   unique for the file system's lifetime: reusing a node id the kernel
//!   has forgotten is allowed with a higher generation.
//! - **Lookup counts.** Every entry that reaches the kernel (from
//!   `lookup`, `mknod`, `mkdir`, `symlink`, `link`, `create`, `tmpfile`,
//!   and each entry `readdirplus` stores) adds one reference to its node;
//!   `forget` and `batch_forget` drop them. A node may go away when its
//!   count reaches 0, not before: the kernel may use it until then, even
//!   after the name was removed. The root is not counted. A reply the
//!   kernel never receives (an interrupted request) is undone by the
//!   server (it forgets the entry and releases an opened handle).
//! - **Concurrency.** Methods are called concurrently from many threads
//!   (or tasks), for the same node too.
//! - **Interrupts.** A caller that gets a signal while its request waits
//!   makes the kernel send INTERRUPT ([`FileSystem::interrupt`]); a
//!   request may then answer `EINTR`. Only requests that can wait long
//!   need to care (a blocking lock).

use crate::args::*;
use crate::backing::BackingFiles;
use crate::init::{InitConfig, KernelInit};
use crate::io::{DirentPlusSink, DirentSink, ZeroCopyReader, ZeroCopyWriter};
use crate::operations::file_system_traits;
use crate::request::{ForgetList, PodList};
use crate::types::*;
use crate::FsFuture;
use fuse_abi::{AccessMask, FileLock, Kstatfs, SetupmappingIn};
use std::ffi::CStr;
use std::io;
use std::sync::Arc;

/// The error every operation returns by default.
pub fn enosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

crate::__file_system_operations! {
    [file_system_traits]
    /// A file system served through FUSE, called synchronously on the
    /// transport's threads.
    ///
    /// Every operation has a default (see the [module docs](self): `ENOSYS`,
    /// or nothing for those without a reply), so a backend implements what
    /// it supports. The trait is object safe: servers hold an
    /// `Arc<dyn FileSystem>`.
    ///
    /// ```
    /// use fuse_server::{errno, AttrReply, Context, FileAttr, FileSystem, FileType};
    /// use std::io;
    /// use std::time::Duration;
    ///
    /// /// An empty read-only directory.
    /// struct Empty;
    ///
    /// impl FileSystem for Empty {
    ///     fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
    ///         if ino != fuse_server::ROOT_ID {
    ///             return Err(errno::stale());
    ///         }
    ///         let attr = FileAttr::new(ino, FileType::Directory, 0o555);
    ///         Ok(AttrReply { attr: attr.into(), timeout: Duration::from_secs(60) })
    ///     }
    /// }
    /// ```
    pub trait FileSystem {
        /// Called once with the kernel's INIT offer, before any other
        /// request. Ask for optional features by adding flags to
        /// `config.flags` (only flags the kernel offers are kept) and adjust
        /// limits; an error fails the mount.
        fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
            Ok(())
        }

        /// The connection is going away (unmount, or the session ended); no
        /// request follows.
        fn destroy(&self) {}

        /// The session is stopping: end every request that waits for
        /// something outside the file system (a blocking lock, SETLKW) with
        /// `EINTR`, and any that starts such a wait from now on, so that the
        /// threads serving them can finish. Called once, from the
        /// transport's `Session::stop` (through [`crate::Server::stop_waits`]),
        /// before the transport waits for its threads; requests may still
        /// come and must be answered.
        fn stop_waits(&self) {}

        /// Called once before [`FileSystem::init`] when the transport can
        /// register backing files on the connection (kernel passthrough, see
        /// [`crate::backing`]). A file system that wants passthrough keeps
        /// `files`, asks for `FUSE_PASSTHROUGH` in `init`, and answers OPEN
        /// and CREATE with [`crate::BackingId`]s it registered. The default
        /// ignores it.
        fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {}

        /// Drops references of many nodes at once (BATCH_FORGET; no reply).
        /// The default calls [`FileSystem::forget`] for each.
        fn batch_forget(&self, ctx: &Context, items: ForgetList<'_>) {
            for item in items.iter() {
                self.forget(ctx, item.nodeid, item.nlookup);
            }
        }
    }

    /// A file system served through FUSE whose operations may wait without
    /// blocking a thread.
    ///
    /// The asynchronous twin of [`FileSystem`]: the same operations with
    /// the same arguments and contracts (documented there), each returning
    /// an [`FsFuture`] that borrows its arguments. Object safe.
    ///
    /// Every method's default calls the synchronous implementation that
    /// [`AsyncFileSystem::sync_fs`] returns, if any (else `ENOSYS`, or
    /// nothing): a type that implements both traits returns `Some(self)`
    /// there and writes only the async methods that really wait
    /// ([`crate::SyncFs`] serves a plain [`FileSystem`] this way).
    pub trait AsyncFileSystem {
        /// The synchronous implementation the defaults of every method
        /// call; `None` (the default): they answer `ENOSYS` or do nothing.
        fn sync_fs(&self) -> Option<&dyn FileSystem> {
            None
        }

        /// Called once with the kernel's INIT offer; see
        /// [`FileSystem::init`].
        fn init(&self, kernel: &KernelInit, config: &mut InitConfig) -> io::Result<()> {
            match self.sync_fs() {
                Some(fs) => fs.init(kernel, config),
                None => Ok(()),
            }
        }

        /// The connection is going away; see [`FileSystem::destroy`].
        fn destroy(&self) {
            if let Some(fs) = self.sync_fs() {
                fs.destroy()
            }
        }

        /// The session is stopping: end lock waits; see
        /// [`FileSystem::stop_waits`].
        fn stop_waits(&self) {
            if let Some(fs) = self.sync_fs() {
                fs.stop_waits()
            }
        }

        /// Called once before `init` with the connection's backing file
        /// registry; see [`FileSystem::attach_backing_files`].
        fn attach_backing_files(&self, files: Arc<dyn BackingFiles>) {
            if let Some(fs) = self.sync_fs() {
                fs.attach_backing_files(files)
            }
        }

        /// Drops references of many nodes at once; see
        /// [`FileSystem::batch_forget`]. Without a synchronous
        /// implementation the default calls [`AsyncFileSystem::forget`] for
        /// each.
        fn batch_forget<'a>(&'a self, ctx: &'a Context, items: ForgetList<'a>) -> FsFuture<'a, ()> {
            if let Some(fs) = self.sync_fs() {
                fs.batch_forget(ctx, items);
                return FsFuture::ready(Ok(()));
            }
            FsFuture::boxed(async move {
                for item in items.iter() {
                    self.forget(ctx, item.nodeid, item.nlookup).await?;
                }
                Ok(())
            })
        }
    }

}

/// The one list of operations, handed to the macro `$callback` after the
/// tokens `$before`: `file_system_traits` makes both traits of it (above),
/// [`crate::impl_file_system`] forwards operations of it. Not for use
/// outside the crate's macros.
#[doc(hidden)]
#[macro_export]
macro_rules! __file_system_operations {
    ([$($callback:tt)*] $($before:tt)*) => {
        $($callback)*! {
            $($before)*
            operations {
                /// Looks up `name` in the directory `parent` (LOOKUP). A found
                /// entry counts one lookup reference. `ENOENT` says the name doesn't
                /// exist (not cached); [`Entry::negative`] says the same and lets the
                /// kernel cache that for its timeout. The kernel also sends LOOKUP to
                /// revalidate a cached name when its entry timeout ran out: an
                /// answer with another node id replaces the name's node. `.` and
                /// `..` come only with `FUSE_EXPORT_SUPPORT` (NFS export).
                op fn lookup(ctx: &Context, parent: u64, name: &CStr) -> Entry;

                /// Drops `nlookup` references of `ino` (FORGET; no reply): the sum of
                /// what the kernel forgets is what it was given. May come for any
                /// node at any time, also while other requests for it run; never
                /// for the root.
                oneway fn forget(ctx: &Context, ino: u64, nlookup: u64);

                /// The attributes of `ino` (GETATTR); `fh` is the handle when the
                /// caller asked about an open file (fstat). The reply's timeout says
                /// how long the kernel may use them without asking again.
                op fn getattr(ctx: &Context, ino: u64, fh: Option<u64>) -> AttrReply;

                /// Changes attributes (SETATTR: chmod, chown, truncate, utimes, and
                /// `args.fh` when done through an open file); answers with the new
                /// ones. The kernel sends some on its own: the cleared set-user-ID
                /// and set-group-ID bits when someone who isn't the owner writes or
                /// truncates (without `FUSE_HANDLE_KILLPRIV_V2`; with it
                /// `args.kill_suidgid` asks the file system to clear them), the
                /// times it keeps under the writeback cache, and `O_TRUNC` of an
                /// open (a size of 0, unless `FUSE_ATOMIC_O_TRUNC` puts it in OPEN).
                op fn setattr(ctx: &Context, ino: u64, args: &SetattrArgs) -> AttrReply;

                /// The target of the symlink `ino` (READLINK). With
                /// `FUSE_CACHE_SYMLINKS` the kernel caches it like file data.
                op fn readlink(ctx: &Context, ino: u64) -> Vec<u8>;

                /// Creates a symlink `name` in `parent` pointing to `target`
                /// (SYMLINK); the entry counts one lookup reference.
                op fn symlink(ctx: &Context, parent: u64, name: &CStr, target: &CStr) -> Entry;

                /// Creates a file, device node, FIFO or socket (MKNOD); the entry
                /// counts one lookup reference. Regular files come here too when
                /// [`FileSystem::create`] answers `ENOSYS` (then an OPEN follows).
                op fn mknod(ctx: &Context, parent: u64, name: &CStr, args: &MknodArgs) -> Entry;

                /// Creates a directory (MKDIR); the entry counts one lookup
                /// reference.
                op fn mkdir(ctx: &Context, parent: u64, name: &CStr, args: &MkdirArgs) -> Entry;

                /// Removes a file (UNLINK). Its node lives on until the kernel
                /// forgets it (open files of it keep working).
                op fn unlink(ctx: &Context, parent: u64, name: &CStr) -> ();

                /// Removes a directory (RMDIR).
                op fn rmdir(ctx: &Context, parent: u64, name: &CStr) -> ();

                /// Renames `args.name` in `parent` to `args.newname` in
                /// `args.newdir` (RENAME, and RENAME2 with `args.flags`:
                /// `RENAME_NOREPLACE`, `RENAME_EXCHANGE`, `RENAME_WHITEOUT`).
                /// `ENOSYS` to a RENAME2: the kernel answers `EINVAL` to renames with
                /// flags from then on.
                op fn rename(ctx: &Context, parent: u64, args: &RenameArgs<'_>) -> ();

                /// Makes a hard link to `ino` named `newname` in `newparent` (LINK);
                /// the entry counts one lookup reference. `ENOSYS`: the kernel
                /// answers `EPERM` to link(2) from then on.
                op fn link(ctx: &Context, ino: u64, newparent: u64, newname: &CStr) -> Entry;

                /// Opens a file (OPEN); the handle comes back in every request about
                /// the open file, up to its RELEASE. [`Opened::flags`] tell the
                /// kernel how to cache (`FOPEN_DIRECT_IO`, `FOPEN_KEEP_CACHE`,
                /// `FOPEN_PASSTHROUGH` with a backing id, ...). `args.flags` are the
                /// open(2) flags without `O_CREAT`, `O_EXCL`, `O_NOCTTY` (and
                /// without `O_TRUNC` unless `FUSE_ATOMIC_O_TRUNC`). `ENOSYS`:
                /// zero-message opens: the kernel stops sending OPEN and RELEASE for
                /// files and every later request comes with handle 0.
                op fn open(ctx: &Context, ino: u64, args: &OpenArgs) -> Opened;

                /// Reads up to `args.size` bytes at `args.offset` into `out` (READ),
                /// writing them straight into the transport's reply memory; returns
                /// once done, and the reply carries what `out` holds. Fewer bytes
                /// than asked means end of file, unless the file was opened with
                /// `FOPEN_DIRECT_IO` (then it is what read(2) returns). An error
                /// after some bytes were written should return `Ok` with them.
                op fn read(ctx: &Context, ino: u64, args: &ReadArgs, out: &mut dyn ZeroCopyWriter) -> ();

                /// Writes the request's data from `data` at `args.offset` (WRITE);
                /// returns the bytes written (fewer is a short write). Under the
                /// writeback cache the kernel writes back pages later, with any
                /// handle of the inode opened for writing (`args.from_cache()`),
                /// and handles `O_APPEND` itself (the offset is the end it knows);
                /// otherwise an `O_APPEND` file is the file system's to append to.
                /// `args.kill_suidgid()` (with `FUSE_HANDLE_KILLPRIV_V2`) asks to
                /// clear set-user-ID and set-group-ID.
                op fn write(ctx: &Context, ino: u64, args: &WriteArgs, data: &mut dyn ZeroCopyReader) -> usize;

                /// File system statistics (STATFS) for statfs(2) on any file of the
                /// mount.
                op fn statfs(ctx: &Context, ino: u64) -> Kstatfs;

                /// Releases an open file (RELEASE): the last close of its handle.
                /// Sent in the background: nobody waits for it and its error goes
                /// nowhere. `args.release_flags` may ask to drop the handle's
                /// `flock` locks (`FUSE_RELEASE_FLOCK_UNLOCK`).
                op fn release(ctx: &Context, ino: u64, args: &ReleaseArgs) -> ();

                /// Syncs a file (FSYNC; `args.datasync()` for fdatasync). `ENOSYS`:
                /// the kernel stops sending FSYNC and fsync(2) succeeds.
                op fn fsync(ctx: &Context, ino: u64, args: &FsyncArgs) -> ();

                /// Sets an extended attribute (SETXATTR). `ENOSYS`: the kernel stops
                /// sending SETXATTR and answers `EOPNOTSUPP` (as for every xattr
                /// operation below, each on its own).
                op fn setxattr(ctx: &Context, ino: u64, args: &SetxattrArgs<'_>) -> ();

                /// Gets an extended attribute (GETXATTR): its size when `size` is 0,
                /// else its value (`ERANGE` if longer than `size`). `ENOSYS`: see
                /// [`FileSystem::setxattr`].
                op fn getxattr(ctx: &Context, ino: u64, name: &CStr, size: u32) -> XattrReply;

                /// Lists extended attribute names (LISTXATTR): the list's size when
                /// `size` is 0, else the NUL-separated list (`ERANGE` if longer
                /// than `size`). `ENOSYS`: see [`FileSystem::setxattr`].
                op fn listxattr(ctx: &Context, ino: u64, size: u32) -> XattrReply;

                /// Removes an extended attribute (REMOVEXATTR). `ENOSYS`: see
                /// [`FileSystem::setxattr`].
                op fn removexattr(ctx: &Context, ino: u64, name: &CStr) -> ();

                /// Called on every close(2) of a descriptor of an open file (FLUSH),
                /// with the closing process's lock owner: its error is close(2)'s.
                /// `ENOSYS`: the kernel stops sending FLUSH.
                op fn flush(ctx: &Context, ino: u64, args: &FlushArgs) -> ();

                /// Opens a directory (OPENDIR); see [`FileSystem::open`]. `ENOSYS`:
                /// zero-message opens for directories (no OPENDIR, no RELEASEDIR,
                /// handle 0).
                op fn opendir(ctx: &Context, ino: u64, args: &OpenArgs) -> Opened;

                /// Lists entries after cookie `args.offset` (0: from the start)
                /// into `out`, until it is full or the directory ends (READDIR). An
                /// entry's cookie is where the listing resumes after it: never 0,
                /// and a listing resumed at a cookie must go on with the entry after
                /// that one. Ending with nothing stored means the end. An error
                /// after some entries were stored should return `Ok` with them.
                op fn readdir(ctx: &Context, ino: u64, args: &ReadArgs, out: &mut dyn DirentSink) -> ();

                /// Like [`FileSystem::readdir`] with each name's [`Entry`]
                /// (READDIRPLUS, with `FUSE_DO_READDIRPLUS`): each entry `out`
                /// stores counts one lookup reference, and one it refuses (the
                /// buffer is full) must not be counted.
                op fn readdirplus(ctx: &Context, ino: u64, args: &ReadArgs, out: &mut dyn DirentPlusSink) -> ();

                /// Releases an open directory (RELEASEDIR), like
                /// [`FileSystem::release`].
                op fn releasedir(ctx: &Context, ino: u64, args: &ReleaseArgs) -> ();

                /// Syncs a directory (FSYNCDIR). `ENOSYS`: the kernel stops sending
                /// it and fsync(2) of directories succeeds.
                op fn fsyncdir(ctx: &Context, ino: u64, args: &FsyncArgs) -> ();

                /// Tests for a POSIX lock (GETLK, with `FUSE_POSIX_LOCKS`): the
                /// conflicting lock, or the asked one with type `F_UNLCK`. Without
                /// `FUSE_POSIX_LOCKS` (and `FUSE_FLOCK_LOCKS` for flock(2)) in INIT
                /// the kernel keeps locks itself and never sends lock requests.
                op fn getlk(ctx: &Context, ino: u64, args: &LockArgs) -> FileLock;

                /// Takes or releases a lock (SETLK; SETLKW when `sleep`;
                /// `args.flock` for flock(2)). A wait lasts until the lock is free:
                /// it must not hold a thread others need, and ends with `EINTR` on
                /// [`FileSystem::interrupt`] and on [`FileSystem::stop_waits`] (the
                /// kernel then restarts the call, or the process dies of its
                /// signal). Without `sleep`, a lock held by another owner is
                /// `EAGAIN`.
                op fn setlk(ctx: &Context, ino: u64, args: &LockArgs, sleep: bool) -> ();

                /// Checks access for access(2) and chdir(2) (ACCESS), sent only
                /// without the `default_permissions` mount option. `ENOSYS`: the
                /// kernel stops sending ACCESS and allows everything.
                op fn access(ctx: &Context, ino: u64, mask: AccessMask) -> ();

                /// Creates and opens a file (CREATE, for open(2) with `O_CREAT` of
                /// a name that doesn't exist); the entry counts one lookup
                /// reference and the handle is as [`FileSystem::open`]'s. `ENOSYS`:
                /// the kernel stops sending CREATE and uses MKNOD then OPEN.
                op fn create(ctx: &Context, parent: u64, name: &CStr, args: &CreateArgs) -> (Entry, Opened);

                /// The kernel asks to interrupt request `unique` (INTERRUPT; no
                /// reply): its caller got a signal. It may come before that request
                /// reached the file system, or after it was answered.
                oneway fn interrupt(ctx: &Context, unique: u64);

                /// Maps a block of a file to a block of the device (BMAP; block
                /// device based file systems, `blkdev` mounts). `ENOSYS`: the kernel
                /// stops sending it and answers 0.
                op fn bmap(ctx: &Context, ino: u64, blocksize: u32, block: u64) -> u64;

                /// ioctl(2) on an open file (IOCTL; restricted ioctls, whose
                /// argument sizes the command encodes). `ENOSYS` reaches the caller
                /// as `ENOTTY`.
                op fn ioctl(ctx: &Context, ino: u64, args: &IoctlArgs<'_>) -> IoctlReply;

                /// poll(2) on an open file (POLL): the ready events. `ENOSYS`: the
                /// kernel stops sending POLL and reports files always ready.
                op fn poll(ctx: &Context, ino: u64, args: &PollArgs) -> u32;

                /// The kernel's answer to [`crate::Notifier::retrieve`] (NOTIFY_REPLY;
                /// no reply): `data` of the file at `offset`.
                oneway fn retrieve_reply(ctx: &Context, ino: u64, notify_unique: u64, offset: u64, data: &[u8]);

                /// Allocates or deallocates space (FALLOCATE). `ENOSYS`: the kernel
                /// stops sending it and answers `EOPNOTSUPP`.
                op fn fallocate(ctx: &Context, ino: u64, args: &FallocateArgs) -> ();

                /// Finds data or a hole (LSEEK with `SEEK_DATA`/`SEEK_HOLE`): the
                /// offset. `ENOSYS`: the kernel stops sending it and treats the
                /// whole file as data.
                op fn lseek(ctx: &Context, ino: u64, args: &LseekArgs) -> u64;

                /// Copies a range between two open files of the mount
                /// (COPY_FILE_RANGE): the bytes copied. `ENOSYS`: the kernel stops
                /// sending it and copy_file_range(2) copies through READ and WRITE.
                op fn copy_file_range(ctx: &Context, ino: u64, args: &CopyFileRangeArgs) -> u64;

                /// DAX (virtio-fs): maps part of a file into the DAX window
                /// (SETUPMAPPING).
                op fn setupmapping(ctx: &Context, ino: u64, args: &SetupmappingIn) -> ();

                /// DAX (virtio-fs): removes mappings (REMOVEMAPPING).
                op fn removemapping(ctx: &Context, ino: u64, ranges: PodList<'_, fuse_abi::RemovemappingOne>) -> ();

                /// Syncs the whole file system (SYNCFS, for syncfs(2)). `ENOSYS`: the
                /// kernel stops sending it and syncfs(2) succeeds.
                op fn syncfs(ctx: &Context, ino: u64) -> ();

                /// Creates and opens an unnamed file in the directory `parent`
                /// (TMPFILE, for `O_TMPFILE`); as [`FileSystem::create`]. `ENOSYS`:
                /// the kernel stops sending it and `O_TMPFILE` fails with
                /// `EOPNOTSUPP`.
                op fn tmpfile(ctx: &Context, parent: u64, args: &CreateArgs) -> (Entry, Opened);

                /// statx(2) with fields GETATTR lacks (STATX: birth time, ...).
                /// `ENOSYS`: the kernel stops sending it and uses GETATTR.
                op fn statx(ctx: &Context, ino: u64, args: &StatxArgs) -> StatxReply;
            }
        }
    };
}
