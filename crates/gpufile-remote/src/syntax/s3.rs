//! S3 URL syntax: `s3://<bucket>/<key>`, the AWS S3 `https://` forms KvikIO knows (virtual
//! host and path style), presigned URLs, and the public address of an `s3://` URL. Pure: the
//! environment comes in as a function.

use gpufile::{Error, Result};

use super::env::Env;
use super::redact::{redact, userinfo_end};
use super::scheme::{parse_http, scheme};

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
    if userinfo_end(rest).is_some() {
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

/// The public HTTP URL of `s3://bucket/key` (endpoint from `AWS_ENDPOINT_URL`, else AWS's
/// global virtual-host form), for S3 public objects named by an `s3://` URL.
pub fn public_http_url(url: &str, env: Env<'_>) -> Result<String> {
    let (bucket, key) = parse_s3_url(url)?;
    Ok(match env("AWS_ENDPOINT_URL").filter(|e| !e.is_empty()) {
        Some(e) => format!("{}/{bucket}/{key}", e.trim_end_matches('/')),
        None => format!("https://{bucket}.s3.amazonaws.com/{key}"),
    })
}

/// `s`, its `%XX` escapes decoded (an invalid one kept as it is; invalid UTF-8 replaced).
pub(crate) fn percent_decode(s: &str) -> String {
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
