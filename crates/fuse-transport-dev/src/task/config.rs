//! [`TaskConfig`], how a [`FuseDevTask`] serves, with its builder-style
//! setters: plain settings, apart from the task that reads them.

// Only the documentation's links name them.
#[cfg(doc)]
use {super::FuseDevTask, fuse_server::Session};

/// How a [`FuseDevTask`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskConfig {
    /// Largest number of requests handled at once (each holds a request
    /// and a reply buffer).
    pub max_in_flight: usize,
    /// The runtime's name in [`Session::transport`] (`"tokio"` by default;
    /// the task runs on whatever runtime it was created in).
    pub runtime_name: String,
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            runtime_name: "tokio".into(),
        }
    }
}

/// Builder-style setters, one per field: start from [`TaskConfig::default`]
/// and chain them (the struct is `#[non_exhaustive]`, so it has no struct
/// literal outside its crate).
impl TaskConfig {
    /// Sets the largest number of requests handled at once (`max_in_flight`).
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Sets the runtime's name reported by the session (`runtime_name`).
    #[must_use]
    pub fn runtime_name(mut self, name: impl Into<String>) -> Self {
        self.runtime_name = name.into();
        self
    }
}
