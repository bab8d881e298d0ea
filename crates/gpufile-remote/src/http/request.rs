//! One request's description ([`Target`]: what is sent, what is shown, who signs, when it
//! stops) and how an answer's headers read: what every room of the client shares.

use std::sync::Mutex;

use gpufile::Error;
use gpufile::StopFlag;
use ureq::http::Response;
use ureq::Body;

use super::sign::SignRequest;
use crate::error::{RemoteError, RemoteFailure};

/// One HTTP request's description, for errors.
pub(crate) struct Target<'a> {
    /// The URL to send (may carry a signature).
    pub url: &'a str,
    /// The URL to show (redacted).
    pub shown: &'a str,
    /// `Range: bytes=a-b` to send, if any.
    pub range: Option<(u64, usize)>,
    /// Authenticates each attempt in its headers (S3 SigV4, a GCS bearer token).
    pub signer: Option<&'a dyn SignRequest>,
    /// The object's size, when known (checked against `Content-Range`).
    pub size: Option<u64>,
    /// The request's stop flag: set, the request ends with [`Error::Cancelled`].
    pub stop: Option<&'a StopFlag>,
    /// What the request is, for errors and retry records, where it is more than its method and
    /// range ("PUT of part 3 (bytes 0-9)").
    pub label: Option<&'a str>,
}

impl Target<'_> {
    pub(super) fn what(&self, method: &str) -> String {
        if let Some(label) = self.label {
            return label.to_owned();
        }
        match self.range {
            Some((off, len)) => format!("{method} of bytes {off}-{}", off + len as u64 - 1),
            None => method.to_owned(),
        }
    }

    pub(super) fn error(&self, kind: RemoteFailure, reason: String) -> Error {
        RemoteError {
            url: self.shown.to_owned(),
            kind,
            reason,
        }
        .into()
    }

    /// Its own stop flag is set, or, for a request without one (the size request of an open),
    /// its caller's ([`crate::stop::with_stop`]).
    pub(super) fn stopped(&self) -> bool {
        self.stop
            .map_or_else(crate::stop::stopped, StopFlag::is_set)
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn header_str(resp: &Response<Body>, name: &str) -> Option<String> {
    resp.headers().get(name)?.to_str().ok().map(str::to_owned)
}

pub(super) fn header_u64(resp: &Response<Body>, name: &str) -> Option<u64> {
    header_str(resp, name)?.trim().parse().ok()
}
