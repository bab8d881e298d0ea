//! A `gs://` object: its XML API address (ranged GETs), where a resumable upload of it
//! starts, the credentials its requests carry ([`super::credentials`]), and what a refusal of
//! them means.

use gpufile::Result;
use percent_encoding::utf8_percent_encode;

use super::credentials::Credentials;
use crate::error::{RemoteError, RemoteFailure};
use crate::syntax::env::Env;
use crate::syntax::gs::{endpoint, parse_gs_url, public_http_url};
use crate::syntax::keys::KEY_ENCODE;

/// A `gs://` object: its XML API address, and the credentials its requests carry.
#[derive(Clone, Debug)]
pub(crate) struct GcsObject {
    /// The object's XML API address (ranged GETs).
    pub url: String,
    /// The `gs://` URL, as shown.
    pub gs: String,
    pub creds: Credentials,
    endpoint: String,
    bucket: String,
    object: String,
}

impl GcsObject {
    /// `gs://<bucket>/<object>` at the XML API endpoint, with ADC's credentials from `env`.
    pub(crate) fn open(url: &str, env: Env<'_>) -> Result<Self> {
        let (bucket, object) = parse_gs_url(url)?;
        let endpoint = endpoint(env)?;
        Ok(GcsObject {
            url: public_http_url(url, env)?,
            // Shown as given: a name is literal (`?` and `#` are its characters), and a URL
            // with userinfo was refused above.
            gs: url.to_owned(),
            creds: Credentials::from_env(env)?,
            endpoint,
            bucket,
            object,
        })
    }

    /// Where a resumable upload of the object starts (GCS's JSON API, on the same endpoint).
    pub(crate) fn upload_url(&self) -> String {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([("uploadType", "resumable"), ("name", &self.object)])
            .finish();
        let bucket = utf8_percent_encode(&self.bucket, KEY_ENCODE);
        format!("{}/upload/storage/v1/b/{bucket}/o?{query}", self.endpoint)
    }

    /// A server's refusal of the object, with the address asked and, for 401 and 403, what the
    /// credentials (or their absence) mean; other errors, and refusals of a token endpoint
    /// (which name themselves), as they are.
    pub(crate) fn explain(&self, e: gpufile::Error) -> gpufile::Error {
        match RemoteError::of(&e) {
            Some(
                r @ RemoteError {
                    kind: RemoteFailure::Status(code),
                    ..
                },
            ) if r.url == self.gs => {
                let hint = match code {
                    401 | 403 => format!(". {}", self.creds.refusal_hint()),
                    _ => String::new(),
                };
                RemoteError {
                    reason: format!("{}, from {}{hint}", r.reason, self.url),
                    ..r.clone()
                }
                .into()
            }
            _ => e,
        }
    }
}
