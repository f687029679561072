//! Faults the transport's own tests inject to exercise the fallback chain
//! against a real kernel. Not part of the supported API: the type is
//! reachable only with feature `fault-injection` (hidden from the docs),
//! which the crate's tests turn on.

/// A fault to inject (`UringConfig::fault`, feature `fault-injection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// Without the feature nothing can ask for a fault, and the checks for one
// never fire.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub enum UringFault {
    /// Ring entries register with a payload iovec the kernel must refuse.
    RefuseRegister,
    /// Ring threads fail their setup before registering anything.
    FailThreadSetup,
    /// A synchronous ring thread panics in the transport (outside the file
    /// system's `catch_unwind`) on the first request it takes.
    PanicInRingThread,
}
