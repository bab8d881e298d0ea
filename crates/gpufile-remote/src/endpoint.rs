//! What a URL names and how to ask for its bytes: endpoint types, KvikIO's URL rules, S3 URL
//! parsing and credentials. Pure (no I/O); the environment comes in as a function.

use std::fmt;
use std::sync::Arc;

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use gpufile::{Error, Result};
use percent_encoding::utf8_percent_encode;
use url::Url;

use crate::aws_chain;
use crate::gcs;
use crate::keys::KEY_ENCODE;
// Every URL this crate shows goes through the one redaction; its callers name it here too.
pub(crate) use crate::redact::redact;

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
            Self::Http => is_http_url(url) || gcs::problem(url).is_none(),
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

/// The scheme of `url` ("https"), lower case; `Bad scheme` when it has none.
pub fn scheme(url: &str) -> Result<String> {
    let bad = || {
        Error::InvalidArgument(format!(
            "Bad scheme: {:?} has no scheme (https://, s3://, ...)",
            redact(url)
        ))
    };
    let (s, _) = url.split_once("://").ok_or_else(bad)?;
    let valid = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if valid {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(bad())
    }
}

fn parse_http(url: &str) -> Option<Url> {
    let u = Url::parse(url).ok()?;
    matches!(u.scheme(), "http" | "https").then_some(u)
}

/// `http(s)://host/path` with a path beyond `/`.
pub fn is_http_url(url: &str) -> bool {
    parse_http(url).is_some_and(|u| u.host_str().is_some() && u.path().len() > 1)
}

/// `http(s)://host:port/webhdfs/v1/path` (the port is required, as in KvikIO).
pub fn is_webhdfs_url(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return false;
    }
    let Some((authority, path)) = rest.split_once('/') else {
        return false;
    };
    let port_ok = authority.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    });
    port_ok && path.len() > "webhdfs/v1/".len() && path.starts_with("webhdfs/v1/")
}

/// The AWS S3 HTTP forms KvikIO knows: virtual host (`bucket.s3[.-]region.amazonaws.com/key`,
/// `bucket.s3.amazonaws.com/key`) and path style (`s3[.-]region.amazonaws.com/bucket/key`,
/// `s3.amazonaws.com/bucket/key`). Returns the bucket and the (still encoded) key.
pub fn aws_s3_http_parts(url: &str) -> Option<(String, String)> {
    let u = parse_http(url)?;
    let host = u.host_str()?;
    let rest = host.strip_suffix(".amazonaws.com")?;
    let region_ok = |r: &str| !r.is_empty() && !r.contains('.');
    let path = u.path().strip_prefix('/')?;
    let is_service = |s: &str| {
        s == "s3"
            || s.strip_prefix("s3.").is_some_and(region_ok)
            || s.strip_prefix("s3-").is_some_and(region_ok)
    };
    if is_service(rest) {
        let (bucket, key) = path.split_once('/')?;
        return (!bucket.is_empty() && !key.is_empty())
            .then(|| (bucket.to_owned(), key.to_owned()));
    }
    // Virtual host: the bucket is everything before the last ".s3" label.
    let split = [".s3.", ".s3-"]
        .iter()
        .filter_map(|m| rest.rfind(m).map(|i| (i, &rest[i + 1..])))
        .chain(rest.strip_suffix(".s3").map(|b| (b.len(), "s3")))
        .max_by_key(|(i, _)| *i)?;
    let (bucket, service) = (&rest[..split.0], split.1);
    (!bucket.is_empty() && is_service(service) && !path.is_empty())
        .then(|| (bucket.to_owned(), path.to_owned()))
}

/// An AWS S3 URL with `X-Amz-Algorithm` and `X-Amz-Signature` in its query.
pub fn is_presigned_url(url: &str) -> bool {
    aws_s3_http_parts(url).is_some()
        && parse_http(url)
            .and_then(|u| u.query().map(str::to_owned))
            .is_some_and(|q| q.contains("X-Amz-Algorithm") && q.contains("X-Amz-Signature"))
}

/// `s3://bucket/key`, or an AWS S3 HTTP URL that is not presigned.
pub fn is_s3_url(url: &str) -> bool {
    if scheme(url).is_ok_and(|s| s == "s3") {
        return parse_s3_url(url).is_ok();
    }
    aws_s3_http_parts(url).is_some() && !is_presigned_url(url)
}

/// `s3://bucket/key` → (bucket, key).
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let bad = || {
        Error::InvalidArgument(format!(
            "{:?} does not match the expected S3 URL format s3://<bucket>/<object>",
            redact(url)
        ))
    };
    let rest = url
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("s3://"))
        .map(|_| &url[5..])
        .ok_or_else(bad)?;
    if crate::redact::userinfo_end(rest).is_some() {
        // No bucket name holds an `@`: it is credentials, which come from the environment.
        return Err(Error::InvalidArgument(format!(
            "{:?}: an s3:// URL holds no user name or password (credentials come from the \
             arguments or the environment)",
            redact(url)
        )));
    }
    let (bucket, key) = rest.split_once('/').ok_or_else(bad)?;
    if bucket.is_empty() || key.is_empty() {
        return Err(bad());
    }
    Ok((bucket.to_owned(), key.to_owned()))
}

/// S3 settings given by the caller; what is `None` comes from KvikIO's environment variables.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    /// `AWS_DEFAULT_REGION`.
    pub region: Option<String>,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`: `<endpoint>/<bucket>/<object>` instead of
    /// AWS's own hosts.
    pub endpoint_url: Option<String>,
    /// `AWS_SESSION_TOKEN` (temporary credentials).
    pub session_token: Option<String>,
}

fn pick(given: &Option<String>, env: &dyn Fn(&str) -> Option<String>, var: &str) -> Option<String> {
    given.clone().or_else(|| env(var)).filter(|v| !v.is_empty())
}

fn required(value: Option<String>, what: &str, var: &str) -> Result<String> {
    value.ok_or_else(|| {
        Error::InvalidArgument(format!("S3: must provide `{what}` if {var} isn't set"))
    })
}

/// The region: argument, `AWS_DEFAULT_REGION` (KvikIO's), then the AWS SDK's region chain
/// (`AWS_REGION`, the profile's `region`, the instance metadata service).
fn region_of(o: &S3Options, env: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    if let Some(r) = pick(&o.region, env, "AWS_DEFAULT_REGION") {
        return Ok(r);
    }
    if let Some(r) = env("AWS_REGION").filter(|v| !v.is_empty()) {
        return Ok(r);
    }
    required(
        aws_chain::region()?,
        "aws_region",
        "AWS_DEFAULT_REGION (nor AWS_REGION, a profile's region or instance metadata)",
    )
}

/// The endpoint: argument, `AWS_ENDPOINT_URL_S3` (the SDKs' per-service variable), then
/// `AWS_ENDPOINT_URL`.
fn endpoint_of(o: &S3Options, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    pick(&o.endpoint_url, env, "AWS_ENDPOINT_URL_S3")
        .or_else(|| env("AWS_ENDPOINT_URL").filter(|v| !v.is_empty()))
}

/// How an S3 object's URL names its bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UrlStyle {
    /// `<endpoint>/<bucket>/<key>`: custom endpoints (`AWS_ENDPOINT_URL`) and AWS path URLs.
    Path,
    /// `<bucket>.<endpoint host>/<key>`: AWS's own hosts.
    VirtualHost,
}

/// Who signs an object's requests: a key given (arguments, environment) or the AWS chain's
/// current credentials, fetched again before they expire.
#[derive(Clone)]
enum Signer {
    Static(Identity),
    Chain(Arc<aws_chain::Chain>),
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
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let key_id = pick(&o.access_key_id, env, "AWS_ACCESS_KEY_ID");
        let secret = pick(&o.secret_access_key, env, "AWS_SECRET_ACCESS_KEY");
        let url = object_url(&endpoint, style, bucket, &key)?;
        let signer = match (key_id, secret) {
            (Some(key_id), Some(secret)) => {
                let token = pick(&o.session_token, env, "AWS_SESSION_TOKEN");
                Signer::Static(Credentials::new(key_id, secret, token, None, "gpufile").into())
            }
            // Half a key is a mistake, not a cue to look elsewhere.
            (Some(_), None) => {
                return Err(
                    required(None, "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY").unwrap_err(),
                )
            }
            (None, Some(_)) => {
                return Err(required(None, "aws_access_key_id", "AWS_ACCESS_KEY_ID").unwrap_err())
            }
            (None, None) => Signer::Chain(
                aws_chain::Chain::shared(&region)
                    .map_err(|e| aws_chain::for_object(e, url.as_str()))?,
            ),
        };
        Ok(S3Object {
            url,
            region,
            signer,
        })
    }

    /// `bucket` + `object`: at `<endpoint>/<bucket>/<object>` when an endpoint is given
    /// (argument or `AWS_ENDPOINT_URL`), else `https://<bucket>.s3.<region>.amazonaws.com/<object>`.
    pub fn from_bucket(
        bucket: &str,
        object: &str,
        o: &S3Options,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
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
    pub fn from_http_url(
        url: &str,
        o: &S3Options,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
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
        match &self.signer {
            Signer::Static(_) => "arguments or environment",
            Signer::Chain(chain) => chain.source(),
        }
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
        let identity = match &self.signer {
            Signer::Static(identity) => identity.clone(),
            Signer::Chain(chain) => chain.credentials()?.into(),
        };
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

/// The public HTTP URL of `s3://bucket/key` (endpoint from `AWS_ENDPOINT_URL`, else AWS's
/// global virtual-host form), for S3 public objects named by an `s3://` URL.
pub fn public_http_url(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    let (bucket, key) = parse_s3_url(url)?;
    Ok(match env("AWS_ENDPOINT_URL").filter(|e| !e.is_empty()) {
        Some(e) => format!("{}/{bucket}/{key}", e.trim_end_matches('/')),
        None => format!("https://{bucket}.s3.amazonaws.com/{key}"),
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
    if !gcs::is_gs_scheme(url) {
        return String::new();
    }
    match gcs::problem(url) {
        Some(why) => format!(" ({why})"),
        None => " (gs:// URLs are read as HTTP, which the allow list leaves out)".into(),
    }
}

/// KvikIO's `infer_remote_endpoint_type`: the default allow list.
pub fn infer_remote_endpoint_type(url: &str) -> Result<RemoteEndpointType> {
    infer(url, &RemoteEndpointType::DEFAULT_ALLOW_LIST)
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
