//! A signed S3 object: where it is (its URL, by bucket or by `http(s)://` URL, in path or
//! virtual-host style) and how each request to it is signed (SigV4 in the headers, with the
//! credentials [`super::credentials`] resolves).

use std::fmt;
use std::time::SystemTime;

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use gpufile::{Error, Result};
use percent_encoding::utf8_percent_encode;
use url::Url;

use super::credentials::{endpoint_of, region_of, S3Options, Signer};
use crate::http::sign::SignRequest;
use crate::syntax::env::Env;
use crate::syntax::keys::KEY_ENCODE;
use crate::syntax::redact::redact;
use crate::syntax::s3::{aws_s3_http_parts, percent_decode};
use crate::syntax::scheme::parse_http;

/// How an S3 object's URL names its bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UrlStyle {
    /// `<endpoint>/<bucket>/<key>`: custom endpoints (`AWS_ENDPOINT_URL`) and AWS path URLs.
    Path,
    /// `<bucket>.<endpoint host>/<key>`: AWS's own hosts.
    VirtualHost,
}

/// A signed S3 object: where it is and who asks. Requests are signed one by one, in their
/// headers (SigV4 `Authorization`), as the AWS SDKs and KvikIO (libcurl) sign them.
#[derive(Clone)]
pub struct S3Object {
    /// The object's URL (no query).
    pub(crate) url: Url,
    region: String,
    signer: Signer,
}

impl fmt::Debug for S3Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The credentials stay out, even the key id.
        f.debug_struct("S3Object")
            .field("url", &redact(self.url.as_str()))
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl S3Object {
    fn build(
        endpoint: Url,
        style: UrlStyle,
        bucket: &str,
        key: String,
        region: String,
        o: &S3Options,
        env: Env<'_>,
    ) -> Result<Self> {
        let url = object_url(&endpoint, style, bucket, &key)?;
        let signer = Signer::resolve(o, env, &region, url.as_str())?;
        Ok(S3Object {
            url,
            region,
            signer,
        })
    }

    /// `bucket` + `object`: at `<endpoint>/<bucket>/<object>` when an endpoint is given
    /// (argument or `AWS_ENDPOINT_URL`), else `https://<bucket>.s3.<region>.amazonaws.com/<object>`.
    pub fn from_bucket(bucket: &str, object: &str, o: &S3Options, env: Env<'_>) -> Result<Self> {
        if bucket.is_empty() || object.is_empty() {
            return Err(Error::InvalidArgument(
                "S3: bucket and object names must not be empty".into(),
            ));
        }
        let region = region_of(o, env)?;
        let (endpoint, style) = match endpoint_of(o, env) {
            Some(e) => {
                let u = Url::parse(&e).map_err(|err| {
                    Error::InvalidArgument(format!("S3 endpoint URL {:?}: {err}", redact(&e)))
                })?;
                (u, UrlStyle::Path)
            }
            None => (aws_endpoint(&region)?, UrlStyle::VirtualHost),
        };
        Self::build(endpoint, style, bucket, object.to_owned(), region, o, env)
    }

    /// An `http(s)://` URL of an S3 object: the AWS forms keep their style; any other URL is read
    /// as path style, `<scheme>://<host>/<bucket>/<object>`.
    pub fn from_http_url(url: &str, o: &S3Options, env: Env<'_>) -> Result<Self> {
        let u = parse_http(url).ok_or_else(|| {
            Error::InvalidArgument(format!("{:?} is not an http(s) URL", redact(url)))
        })?;
        let region = region_of(o, env)?;
        let decode = |k: &str| percent_decode(k);
        if let Some((bucket, key)) = aws_s3_http_parts(url) {
            let host = u.host_str().unwrap_or_default();
            let (endpoint, style) = match host.strip_prefix(&format!("{bucket}.")) {
                Some(service) => (format!("{}://{service}", u.scheme()), UrlStyle::VirtualHost),
                None => (format!("{}://{host}", u.scheme()), UrlStyle::Path),
            };
            let endpoint = Url::parse(&endpoint)
                .map_err(|e| Error::InvalidArgument(format!("{:?}: {e}", redact(url))))?;
            return Self::build(endpoint, style, &bucket, decode(&key), region, o, env);
        }
        let path = u.path().strip_prefix('/').unwrap_or_default();
        let (bucket, key) = path
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty())
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{:?} names no <bucket>/<object>", redact(url)))
            })?;
        let mut endpoint = u.clone();
        endpoint.set_path("/");
        endpoint.set_query(None);
        endpoint.set_fragment(None);
        Self::build(
            endpoint,
            UrlStyle::Path,
            bucket,
            decode(key),
            region,
            o,
            env,
        )
    }

    /// Where the credentials come from ("arguments or environment", or the AWS chain's source,
    /// such as "container credentials"); never the credentials.
    pub fn credentials_source(&self) -> &'static str {
        self.signer.source()
    }

    /// The object's URL, unsigned, userinfo redacted (for errors and `str()`).
    pub fn url(&self) -> String {
        redact(self.url.as_str())
    }

    /// The SigV4 headers of one `method` request of the object (`Authorization`, `x-amz-date`,
    /// `x-amz-content-sha256: UNSIGNED-PAYLOAD`, `x-amz-security-token` with a session token),
    /// signed now over `Host`, `Range` (when given) and those. Each request is signed for
    /// itself: the range differs from task to task.
    #[cfg(test)]
    pub(crate) fn sign(
        &self,
        method: &str,
        range: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>> {
        self.sign_url(method, self.url.as_str(), range)
    }

    /// [`S3Object::sign`] of a request to `url`: the object's URL with a query (a multipart
    /// upload's `uploads`, `partNumber` and `uploadId`), signed with the rest.
    pub(crate) fn sign_url(
        &self,
        method: &str,
        url: &str,
        range: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>> {
        // Each request takes the chain's current credentials: a long read or upload outlives
        // temporary ones.
        let identity = self.signer.identity()?;
        let mut settings = SigningSettings::default();
        // S3's rules: the path is encoded once, not normalised; the payload hash is a header.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| Error::InvalidArgument(format!("S3 signing of {}: {e}", self.url())))?
            .into();
        let headers = range.map(|r| ("range", r)).into_iter();
        let signed = SignableRequest::new(method, url, headers, SignableBody::UnsignedPayload)
            .and_then(|req| sign(req, &params))
            .map_err(|e| Error::InvalidArgument(format!("S3 signing of {}: {e}", self.url())))?;
        let (headers, _query) = signed.into_parts().0.into_parts();
        Ok(headers
            .into_iter()
            .map(|h| (h.name(), h.value().to_owned()))
            .collect())
    }
}

/// The URL of `key` in `bucket` at `endpoint`, in `style`; the key percent-encoded.
fn object_url(endpoint: &Url, style: UrlStyle, bucket: &str, key: &str) -> Result<Url> {
    let bad = |why: String| Error::InvalidArgument(format!("S3 bucket {bucket:?}: {why}"));
    let key = utf8_percent_encode(key, KEY_ENCODE);
    let mut url = endpoint.clone();
    url.set_query(None);
    url.set_fragment(None);
    match style {
        UrlStyle::Path => {
            let base = url.path().trim_end_matches('/').to_owned();
            let bucket = utf8_percent_encode(bucket, KEY_ENCODE);
            url.set_path(&format!("{base}/{bucket}/{key}"));
        }
        UrlStyle::VirtualHost => {
            let host = url.host_str().ok_or_else(|| {
                bad(format!(
                    "endpoint {} has no host",
                    redact(endpoint.as_str())
                ))
            })?;
            let host = format!("{bucket}.{host}");
            url.set_host(Some(&host))
                .map_err(|e| bad(format!("{host:?} is not a host name ({e})")))?;
            url.set_path(&format!("/{key}"));
        }
    }
    Ok(url)
}

fn aws_endpoint(region: &str) -> Result<Url> {
    Url::parse(&format!("https://s3.{region}.amazonaws.com"))
        .map_err(|e| Error::InvalidArgument(format!("S3 region {region:?}: {e}")))
}

impl SignRequest for S3Object {
    fn sign_request(
        &self,
        method: &str,
        url: &str,
        range: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>> {
        self.sign_url(method, url, range)
    }
}

#[cfg(test)]
#[path = "object_tests.rs"]
mod tests;
