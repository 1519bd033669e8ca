//! What can go wrong, typed.

/// An error of this crate: loading libfabric, choosing a provider, opening or using an
/// endpoint. A failed *operation* reported by the completion queue is not one of these but a
/// [`crate::Completion`] carrying a [`crate::CompletionError`].
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The library file could not be opened (`dlopen`).
    #[error("cannot load libfabric from {path} (set FERRY_FABRIC_LIB to its path): {reason}")]
    Load { path: String, reason: String },
    /// The file was opened but lacks one of the calls ferry resolves.
    #[error("{path} is not a usable libfabric: it has no {symbol}: {reason}")]
    Symbol {
        path: String,
        symbol: &'static str,
        reason: String,
    },
    /// The library is older than the API version ferry asks for.
    #[error("{path} is libfabric {found}, older than the {needed} ferry needs")]
    Version {
        path: String,
        found: String,
        needed: String,
    },
    /// No provider offers an RDM endpoint with what ferry asks for, under the given filter.
    #[error("no libfabric provider offers {wanted}: {reason}")]
    NoProvider { wanted: String, reason: String },
    /// A libfabric call returned an error.
    #[error("{call} failed: {text} (-{code})")]
    Call {
        call: &'static str,
        code: i32,
        text: String,
    },
    /// A peer address (from `Endpoint::name` of the peer) that cannot be one of this
    /// endpoint's format.
    #[error("malformed peer address of {len} bytes: {reason}")]
    BadAddress { len: usize, reason: String },
    /// An argument outside what the endpoint offers (message size, vector length, …).
    #[error("{0}")]
    Invalid(String),
}

/// Shorthand for this crate's results.
pub type Result<T> = std::result::Result<T, FabricError>;
