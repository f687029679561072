//! Test hooks (feature `fault-injection`, hidden from the docs): code a
//! test binary runs in the middle of a request.

use std::ffi::CStr;
use std::io;
use std::sync::OnceLock;

/// A hook run by every LOOKUP of a name (not `.` or `..`); `Some(error)`
/// is the request's answer instead of the lookup.
pub type LookupHook = fn(&CStr) -> Option<io::Error>;

static LOOKUP_HOOK: OnceLock<LookupHook> = OnceLock::new();

/// Sets the lookup hook (once per process; later calls do nothing).
pub fn set_lookup_hook(hook: LookupHook) {
    let _ = LOOKUP_HOOK.set(hook);
}

/// What the hook says about a lookup of `name`.
pub(crate) fn on_lookup(name: &CStr) -> Option<io::Error> {
    LOOKUP_HOOK.get().and_then(|hook| hook(name))
}

/// A hook run when a reply is about to hand a lookup reference on a node
/// to the kernel, after the crash table counted it and before the request
/// journal records it (the window a crash recovery must survive); it gets
/// the node id and the backing inode number.
pub type HandOverHook = fn(u64, u64);

static HAND_OVER_HOOK: OnceLock<HandOverHook> = OnceLock::new();

/// Sets the hand-over hook (once per process; later calls do nothing).
pub fn set_hand_over_hook(hook: HandOverHook) {
    let _ = HAND_OVER_HOOK.set(hook);
}

/// Runs the hand-over hook, if one is set.
pub(crate) fn on_hand_over(nodeid: u64, ino: u64) {
    if let Some(hook) = HAND_OVER_HOOK.get() {
        hook(nodeid, ino);
    }
}

/// A hook run as a handle is made for an OPEN, OPENDIR or CREATE; it gets
/// the handle number. [`set_handle_made_hook`]'s runs once the crash table
/// keeps the handle and the request journal noted it, before the reply is
/// recorded; [`set_handle_noted_hook`]'s once the journal noted it, before
/// the crash table keeps it.
pub type HandleMadeHook = fn(u64);

static HANDLE_MADE_HOOK: OnceLock<HandleMadeHook> = OnceLock::new();
static HANDLE_NOTED_HOOK: OnceLock<HandleMadeHook> = OnceLock::new();

/// Sets the handle hook (once per process; later calls do nothing).
pub fn set_handle_made_hook(hook: HandleMadeHook) {
    let _ = HANDLE_MADE_HOOK.set(hook);
}

/// Sets the hook run between the journal's note and the crash table (once
/// per process; later calls do nothing).
pub fn set_handle_noted_hook(hook: HandleMadeHook) {
    let _ = HANDLE_NOTED_HOOK.set(hook);
}

/// Runs the handle hook, if one is set.
pub(crate) fn on_handle_made(fh: u64) {
    if let Some(hook) = HANDLE_MADE_HOOK.get() {
        hook(fh);
    }
}

/// Runs the noted-handle hook, if one is set.
pub(crate) fn on_handle_noted(fh: u64) {
    if let Some(hook) = HANDLE_NOTED_HOOK.get() {
        hook(fh);
    }
}

static DROP_INTERRUPTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the file system ignore every INTERRUPT, as if the kernel had not
/// sent it (FUSE over io_uring doesn't for a signal that comes before the
/// request reaches the daemon): a lock wait then ends only through the
/// lock wait watchdog's look at the requester's pending signals.
pub fn drop_interrupts() {
    DROP_INTERRUPTS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether INTERRUPTs are to be ignored ([`drop_interrupts`]).
pub(crate) fn interrupts_dropped() -> bool {
    DROP_INTERRUPTS.load(std::sync::atomic::Ordering::Relaxed)
}
