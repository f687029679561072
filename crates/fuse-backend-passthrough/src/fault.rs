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
