//! The macro that turns the one list of operations (in `filesystem.rs`)
//! into both file system traits.
//!
//! Each operation is declared once, with its documentation, as a
//! synchronous signature:
//!
//! ```text
//! /// Docs.
//! op fn lookup(ctx: &Context, parent: u64, name: &CStr) -> Entry;
//! oneway fn forget(ctx: &Context, ino: u64, nlookup: u64);
//! ```
//!
//! `op` operations are answered (`io::Result<T>`, default `ENOSYS`);
//! `oneway` ones take no reply (default: nothing). From the list the macro
//! makes:
//!
//! - [`crate::FileSystem`]: each operation as written, with its default;
//! - [`crate::AsyncFileSystem`]: each operation borrowing its arguments for
//!   `'a` and returning an [`crate::FsFuture`]`<'a, T>`; its default calls the
//!   synchronous method of [`crate::AsyncFileSystem::sync_fs`] when the file
//!   system has one, else the same default. So a file system that is both
//!   writes only the async methods that differ, and
//!   [`crate::SyncFs`] needs no method at all.
//!
//! Argument forms the async side rewrites: `&T` to `&'a T`, `&mut T` to
//! `&'a mut T`, `&T<'_>` to `&'a T<'a>`, `T<'_>` and `T<'_, U>` to
//! `T<'a>` and `T<'a, U>`; anything else is taken as it is (`u64`,
//! `Option<u64>`, `bool`, ...).

/// Makes the `FileSystem` and `AsyncFileSystem` traits; see the module
/// docs.
macro_rules! file_system_traits {
    (
        $(#[$sync_meta:meta])*
        pub trait FileSystem { $($sync_items:item)* }
        $(#[$async_meta:meta])*
        pub trait AsyncFileSystem { $($async_items:item)* }
        operations {
            $(
                $(#[doc = $doc:literal])*
                $kind:ident fn $name:ident ( $($args:tt)* ) $(-> $ret:ty)? ;
            )*
        }
    ) => {
        $(#[$sync_meta])*
        #[allow(unused_variables)]
        pub trait FileSystem: Send + Sync {
            $($sync_items)*
            $(
                file_system_traits!(@sync [$(#[doc = $doc])*] $kind $name ($($args)*) $(-> $ret)?);
            )*
        }

        $(#[$async_meta])*
        #[allow(unused_variables)]
        pub trait AsyncFileSystem: Send + Sync {
            $($async_items)*
            $(
                file_system_traits!(@async [$(#[doc = $doc])*] $kind $name [$($ret)?] [] [] $($args)*);
            )*
        }
    };

    // The synchronous method.
    (@sync [$($meta:tt)*] op $name:ident ($($args:tt)*) -> $ret:ty) => {
        $($meta)*
        fn $name(&self, $($args)*) -> std::io::Result<$ret> {
            $crate::filesystem::enosys()
        }
    };
    (@sync [$($meta:tt)*] oneway $name:ident ($($args:tt)*)) => {
        $($meta)*
        fn $name(&self, $($args)*) {}
    };

    // The async method: each argument munched into `[params] [names]`.
    (@async $meta:tt $kind:ident $name:ident $ret:tt [$($p:tt)*] [$($n:ident)*]
        $arg:ident : &mut $t:ty $(, $($rest:tt)*)?) => {
        file_system_traits!(@async $meta $kind $name $ret [$($p)* $arg: &'a mut $t,] [$($n)* $arg] $($($rest)*)?);
    };
    (@async $meta:tt $kind:ident $name:ident $ret:tt [$($p:tt)*] [$($n:ident)*]
        $arg:ident : & $t:ident <'_> $(, $($rest:tt)*)?) => {
        file_system_traits!(@async $meta $kind $name $ret [$($p)* $arg: &'a $t<'a>,] [$($n)* $arg] $($($rest)*)?);
    };
    (@async $meta:tt $kind:ident $name:ident $ret:tt [$($p:tt)*] [$($n:ident)*]
        $arg:ident : & $t:ty $(, $($rest:tt)*)?) => {
        file_system_traits!(@async $meta $kind $name $ret [$($p)* $arg: &'a $t,] [$($n)* $arg] $($($rest)*)?);
    };
    (@async $meta:tt $kind:ident $name:ident $ret:tt [$($p:tt)*] [$($n:ident)*]
        $arg:ident : $t:ident <'_> $(, $($rest:tt)*)?) => {
        file_system_traits!(@async $meta $kind $name $ret [$($p)* $arg: $t<'a>,] [$($n)* $arg] $($($rest)*)?);
    };
    (@async $meta:tt $kind:ident $name:ident $ret:tt [$($p:tt)*] [$($n:ident)*]
        $arg:ident : $t:ident <'_, $u:ty> $(, $($rest:tt)*)?) => {
        file_system_traits!(@async $meta $kind $name $ret [$($p)* $arg: $t<'a, $u>,] [$($n)* $arg] $($($rest)*)?);
    };
    (@async $meta:tt $kind:ident $name:ident $ret:tt [$($p:tt)*] [$($n:ident)*]
        $arg:ident : $t:ty $(, $($rest:tt)*)?) => {
        file_system_traits!(@async $meta $kind $name $ret [$($p)* $arg: $t,] [$($n)* $arg] $($($rest)*)?);
    };
    // Every argument munched: the method.
    (@async [$($meta:tt)*] op $name:ident [$ret:ty] [$($p:tt)*] [$($n:ident)*]) => {
        $($meta)*
        fn $name<'a>(&'a self, $($p)*) -> $crate::FsFuture<'a, $ret> {
            match self.sync_fs() {
                Some(fs) => $crate::FsFuture::ready(fs.$name($($n),*)),
                None => $crate::FsFuture::ready($crate::filesystem::enosys()),
            }
        }
    };
    (@async [$($meta:tt)*] oneway $name:ident [] [$($p:tt)*] [$($n:ident)*]) => {
        $($meta)*
        fn $name<'a>(&'a self, $($p)*) -> $crate::FsFuture<'a, ()> {
            if let Some(fs) = self.sync_fs() {
                fs.$name($($n),*);
            }
            $crate::FsFuture::ready(Ok(()))
        }
    };
}

pub(crate) use file_system_traits;

/// Implements [`FileSystem`](crate::FileSystem) for a type whose
/// operations are inherent methods of the same names and signatures
/// (a backend that keeps each concern's operations in a module of its
/// own): the items written out, and one forward per operation named after
/// `forward`, made from the operation list so no signature is written
/// twice.
///
/// ```
/// use fuse_server::{errno, AttrReply, Context, FileAttr, FileType};
/// use std::io;
/// use std::time::Duration;
///
/// struct Empty;
///
/// impl Empty {
///     fn getattr(&self, _ctx: &Context, ino: u64, _fh: Option<u64>) -> io::Result<AttrReply> {
///         if ino != fuse_server::ROOT_ID {
///             return Err(errno::stale());
///         }
///         let attr = FileAttr::new(ino, FileType::Directory, 0o555);
///         Ok(AttrReply { attr: attr.into(), timeout: Duration::from_secs(1) })
///     }
/// }
///
/// fuse_server::impl_file_system! {
///     impl FileSystem for Empty {
///         fn readlink(&self, _ctx: &Context, _ino: u64) -> io::Result<Vec<u8>> {
///             Err(errno::invalid())
///         }
///     }
///     forward { getattr }
/// }
/// ```
///
/// The types of the forwarded signatures are named as the operation list
/// names them (`Context`, `CStr`, `Entry`, the argument structs): they must
/// be in scope where the macro is used (`use fuse_server::*` and
/// `std::ffi::CStr` bring them).
#[macro_export]
macro_rules! impl_file_system {
    (
        impl FileSystem for $ty:ty { $($items:tt)* }
        forward { $($name:ident),* $(,)? }
    ) => {
        $crate::__file_system_operations! {
            [$crate::__impl_file_system] [$ty] [$($items)*] [$($name)*]
        }
    };
}

/// [`impl_file_system`]'s second step, given the operation list: a local
/// macro with one forward per operation, called for each name asked for.
#[doc(hidden)]
#[macro_export]
macro_rules! __impl_file_system {
    (
        [$ty:ty] [$($items:tt)*] [$($want:ident)*]
        operations {
            $(
                $(#[doc = $doc:literal])*
                $kind:ident fn $name:ident ( $($arg:ident : $t:ty),* $(,)? ) $(-> $ret:ty)? ;
            )*
        }
    ) => {
        macro_rules! __forward_operation {
            $(
                ($name) => {
                    $crate::__forward_operation! { $kind $ty, $name ($($arg: $t),*) $(-> $ret)? }
                };
            )*
        }

        impl $crate::FileSystem for $ty {
            $($items)*
            $( __forward_operation!($want); )*
        }
    };
}

/// One forward: the trait method calling the inherent method of the same
/// name.
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_operation {
    (op $ty:ty, $name:ident ($($arg:ident: $t:ty),*) -> $ret:ty) => {
        fn $name(&self, $($arg: $t),*) -> ::std::io::Result<$ret> {
            <$ty>::$name(self, $($arg),*)
        }
    };
    (oneway $ty:ty, $name:ident ($($arg:ident: $t:ty),*)) => {
        fn $name(&self, $($arg: $t),*) {
            <$ty>::$name(self, $($arg),*)
        }
    };
}
