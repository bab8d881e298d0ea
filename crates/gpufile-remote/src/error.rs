//! What a server or the network did wrong: gpufile-remote's own failures.
//!
//! How to use: every function of this crate returns a [`gpufile::Error`]; what the server or the
//! network did arrives as a [`gpufile::Error::Source`] of kind [`SOURCE_WHAT`] holding a
//! [`RemoteError`], which [`RemoteError::of`] finds again (the CLI reports the URL as the path).
//! [`RemoteFailure::kind`] says the [`gpufile::ErrorKind`] of each failure, which the core's
//! [`gpufile::Error::kind`] answers for it and the bindings map (the Python binding raises
//! `OverflowError` for [`RemoteFailure::NoRangeSupport`], `ValueError` for the caller's
//! layout of writes).
//! Bad URLs, missing credentials and reads past the end stay the core's own kinds
//! (`InvalidArgument`, `UnexpectedEof`, ...).

use std::fmt;
use std::sync::Once;

use gpufile::ErrorKind;

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
    /// A configured credential source failed (an AWS profile that does not exist, a
    /// `credential_process` that failed, STS refusing a web identity, IMDS answering an
    /// error): the reason names the source and why, never a secret. Not a cue to read the
    /// object anonymously.
    Credentials,
}

impl RemoteFailure {
    /// The kind of failure this is, for [`gpufile::Error::kind`]: the one place a remote
    /// failure is classified.
    pub fn kind(self) -> ErrorKind {
        match self {
            RemoteFailure::Status(_)
            | RemoteFailure::AttemptsExhausted
            | RemoteFailure::Transport
            | RemoteFailure::ShortBody
            | RemoteFailure::BadResponse
            | RemoteFailure::Interrupted
            | RemoteFailure::Credentials => ErrorKind::Remote,
            RemoteFailure::NoRangeSupport => ErrorKind::RangeNotSupported,
            // The caller's layout of writes, not the server's doing.
            RemoteFailure::NotTiled | RemoteFailure::PartLimit => ErrorKind::BadArgument,
        }
    }

    /// One failure of each kind, for the bindings' table tests. Not for use outside tests.
    #[doc(hidden)]
    pub fn one_of_each() -> Vec<RemoteFailure> {
        let all = vec![
            RemoteFailure::Status(404),
            RemoteFailure::AttemptsExhausted,
            RemoteFailure::Transport,
            RemoteFailure::NoRangeSupport,
            RemoteFailure::ShortBody,
            RemoteFailure::BadResponse,
            RemoteFailure::NotTiled,
            RemoteFailure::PartLimit,
            RemoteFailure::Interrupted,
            RemoteFailure::Credentials,
        ];
        // Exhaustive: a new failure fails to compile here until it is listed above.
        for f in &all {
            match f {
                RemoteFailure::Status(_)
                | RemoteFailure::AttemptsExhausted
                | RemoteFailure::Transport
                | RemoteFailure::NoRangeSupport
                | RemoteFailure::ShortBody
                | RemoteFailure::BadResponse
                | RemoteFailure::NotTiled
                | RemoteFailure::PartLimit
                | RemoteFailure::Interrupted
                | RemoteFailure::Credentials => {}
            }
        }
        all
    }
}

/// The core's classifier of [`SOURCE_WHAT`] errors.
fn classify(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    e.downcast_ref::<RemoteError>().map(|r| r.kind.kind())
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
        // Every remote failure reaches the core through here: the core learns how to classify
        // them before it holds the first.
        static REGISTER: Once = Once::new();
        REGISTER
            .call_once(|| gpufile::__private::error::register_source_kind(SOURCE_WHAT, classify));
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
        assert_eq!(e.kind(), gpufile::ErrorKind::Remote);
    }

    /// The core's `kind()` of a remote failure is the kind the failure states.
    #[test]
    fn each_failure_reaches_the_core_with_its_kind() {
        for kind in RemoteFailure::one_of_each() {
            let e = gpufile::Error::from(RemoteError {
                url: "http://h/a".into(),
                kind,
                reason: "r".into(),
            });
            assert_eq!(e.kind(), kind.kind(), "{kind:?}");
        }
    }
}
