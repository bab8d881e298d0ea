//! What a server or the network did wrong: gpufile-remote's own failures.
//!
//! How to use: every function of this crate returns a [`gpufile::Error`]; what the server or the
//! network did arrives as a [`gpufile::Error::Source`] of kind [`SOURCE_WHAT`] holding a
//! [`RemoteError`], which [`RemoteError::of`] finds again (the Python binding raises
//! `OverflowError` for [`RemoteFailure::NoRangeSupport`], the CLI reports the URL as the path).
//! Bad URLs, missing credentials and reads past the end stay the core's own kinds
//! (`InvalidArgument`, `UnexpectedEof`, ...).

use std::fmt;

/// The [`gpufile::Error::Source`] kind of a remote failure (the CLI's error type `remote`).
pub const SOURCE_WHAT: &str = "remote";

/// A remote object (HTTP(S), S3, WebHDFS) could not be opened, read or written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteError {
    /// The object's URL (signatures and tokens redacted).
    pub url: String,
    /// What went wrong, for callers that branch on it.
    pub kind: RemoteFailure,
    /// What happened, in words: the request, the server's answer, the attempts made.
    pub reason: String,
}

/// The kinds of [`RemoteError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteFailure {
    /// The server answered with an HTTP error status that is not retried (403, 404, ...).
    Status(u16),
    /// Every attempt allowed by `http_max_attempts` got a retryable status or timed out.
    AttemptsExhausted,
    /// The connection failed (refused, reset, TLS, DNS).
    Transport,
    /// The server ignored the byte range and sent the whole object.
    NoRangeSupport,
    /// The body ended before the bytes the response announced or the request asked for.
    ShortBody,
    /// The answer cannot be used (no size, malformed headers or JSON).
    BadResponse,
    /// The writes to an object do not tile it: a write overlaps an earlier one (refused before
    /// any byte moves) or leaves a gap (refused at close). A caller's error (Python's
    /// `ValueError`).
    NotTiled,
    /// A write ends past S3's 10,000 parts of `remote_part_size` (refused before any byte
    /// moves). A caller's error (Python's `ValueError`).
    PartLimit,
    /// A writer's close or abort was stopped (Ctrl-C) before the server answered its last
    /// request: the object is not known to be made, and what the server holds is said in the
    /// reason.
    Interrupted,
}

impl RemoteError {
    /// The remote failure that `e` carries, if it is one.
    pub fn of(e: &gpufile::Error) -> Option<&RemoteError> {
        e.source_error::<RemoteError>()
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.url)
    }
}

impl std::error::Error for RemoteError {}

impl From<RemoteError> for gpufile::Error {
    fn from(e: RemoteError) -> Self {
        gpufile::Error::from_source(SOURCE_WHAT, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through the core's error a remote failure keeps its text, its kind and its URL, and is
    /// found again by [`RemoteError::of`]; a clone shares it.
    #[test]
    fn remote_error_round_trips_through_the_core_error() {
        let r = RemoteError {
            url: "http://h/a".into(),
            kind: RemoteFailure::Status(404),
            reason: "HEAD: URL returned error: 404".into(),
        };
        let e = gpufile::Error::from(r.clone());
        assert_eq!(e.to_string(), "HEAD: URL returned error: 404 (http://h/a)");
        assert!(matches!(e, gpufile::Error::Source { what: "remote", .. }));
        assert_eq!(RemoteError::of(&e.clone()), Some(&r));
        assert_eq!(RemoteError::of(&gpufile::Error::Closed), None);
    }
}
