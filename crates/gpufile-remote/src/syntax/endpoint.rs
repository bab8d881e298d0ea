//! Which endpoint type a URL is: [`RemoteEndpointType`] (KvikIO's values and allow list), the
//! shape each type accepts, inference under an allow list (KvikIO's AUTO rules, no network) and
//! the check of an explicit type. Pure: every scheme's syntax comes from its sibling module.

use std::fmt;

use gpufile::{Error, Result};

use super::gs;
use super::redact::redact;
use super::s3::{is_presigned_url, is_s3_url};
use super::scheme::{is_http_url, is_webhdfs_url, scheme};

/// The kinds of remote endpoint (KvikIO's `RemoteEndpointType`, same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemoteEndpointType {
    /// Infer from the URL (the `allow_list` order decides).
    Auto = 0,
    /// S3 with credentials (SigV4).
    S3 = 1,
    /// S3 objects readable by anyone (no signing).
    S3Public = 2,
    /// An S3 URL signed in advance (`X-Amz-Signature` in its query).
    S3PresignedUrl = 3,
    /// Apache Hadoop WebHDFS.
    WebHdfs = 4,
    /// Any HTTP(S) server that answers ranged GETs; gpufile also reads public
    /// `gs://<bucket>/<object>` URLs as this type (GCS's XML API is plain ranged HTTPS).
    Http = 5,
}

impl RemoteEndpointType {
    /// KvikIO's default allow list, in the order AUTO tries it.
    pub const DEFAULT_ALLOW_LIST: [RemoteEndpointType; 5] = [
        RemoteEndpointType::S3,
        RemoteEndpointType::S3Public,
        RemoteEndpointType::S3PresignedUrl,
        RemoteEndpointType::WebHdfs,
        RemoteEndpointType::Http,
    ];

    /// The value as KvikIO numbers it.
    pub fn from_value(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Auto,
            1 => Self::S3,
            2 => Self::S3Public,
            3 => Self::S3PresignedUrl,
            4 => Self::WebHdfs,
            5 => Self::Http,
            _ => return None,
        })
    }

    /// Whether `url` has the shape this endpoint type accepts (KvikIO's `is_url_valid`).
    pub fn accepts(self, url: &str) -> bool {
        match self {
            Self::Auto => false,
            Self::S3 | Self::S3Public => is_s3_url(url),
            Self::S3PresignedUrl => is_presigned_url(url),
            Self::WebHdfs => is_webhdfs_url(url),
            Self::Http => is_http_url(url) || gs::problem(url).is_none(),
        }
    }
}

impl fmt::Display for RemoteEndpointType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "AUTO",
            Self::S3 => "S3",
            Self::S3Public => "S3 public",
            Self::S3PresignedUrl => "S3 with presigned URL",
            Self::WebHdfs => "WebHDFS",
            Self::Http => "HTTP",
        })
    }
}

/// Which endpoint type `url` is, trying `allow_list` in order (KvikIO's AUTO rules, without
/// network probing); `Unsupported endpoint URL` when none fits.
pub fn infer(url: &str, allow_list: &[RemoteEndpointType]) -> Result<RemoteEndpointType> {
    scheme(url)?;
    allow_list
        .iter()
        .copied()
        .find(|t| t.accepts(url))
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "Unsupported endpoint URL: {}{}",
                redact(url),
                gs_note(url)
            ))
        })
}

/// For a `gs://` URL that no endpoint type accepted, why: the URL's problem, or HTTP (which
/// reads `gs://` URLs) left out of the allow list.
pub(crate) fn gs_note(url: &str) -> String {
    if !gs::is_gs_scheme(url) {
        return String::new();
    }
    match gs::problem(url) {
        Some(why) => format!(" ({why})"),
        None => " (gs:// URLs are read as HTTP, which the allow list leaves out)".into(),
    }
}

/// KvikIO's `infer_remote_endpoint_type`: the default allow list.
pub fn infer_remote_endpoint_type(url: &str) -> Result<RemoteEndpointType> {
    infer(url, &RemoteEndpointType::DEFAULT_ALLOW_LIST)
}

/// An explicit endpoint type, checked before any request: in `allow`, and fitting the URL.
pub(crate) fn explicit_kind(
    url: &str,
    kind: RemoteEndpointType,
    allow: &[RemoteEndpointType],
) -> Result<RemoteEndpointType> {
    if !allow.contains(&kind) {
        return Err(Error::InvalidArgument(format!(
            "{kind} is not in the allowlist."
        )));
    }
    scheme(url)?;
    if !kind.accepts(url) {
        let note = match kind {
            RemoteEndpointType::Http => gs_note(url),
            _ => String::new(),
        };
        return Err(Error::InvalidArgument(format!(
            "Invalid URL for {kind} endpoint: {}{note}",
            redact(url)
        )));
    }
    Ok(kind)
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
