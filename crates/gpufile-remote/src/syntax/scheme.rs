//! Scheme-level URL syntax shared by every endpoint type: a URL's scheme, the `http(s)://`
//! shapes KvikIO accepts for HTTP and WebHDFS, and the check that an `http(s)://` URL's
//! userinfo does not hide another host. Pure: no I/O, no provider's types.

use gpufile::{Error, Result};
use url::Url;

use super::redact::{redact, userinfo_end};

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

pub(crate) fn parse_http(url: &str) -> Option<Url> {
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

/// An `http(s)://` URL for `kind`, refused before any request where its userinfo holds a
/// character that would end the authority early; `Unsupported protocol` for other schemes.
pub(crate) fn check_http(url: &str, kind: impl std::fmt::Display) -> Result<()> {
    match scheme(url)?.as_str() {
        "http" | "https" => {
            // A `#`, `?` or `/` typed in a password ends the authority for every client, which
            // would then ask another host (the user name looked up as one): refused here,
            // said plainly.
            let (_, rest) = url.split_once("://").unwrap_or_default();
            match userinfo_end(rest) {
                Some(at) if rest[..at].contains(['#', '?', '/']) => {
                    Err(Error::InvalidArgument(format!(
                        "{}: the URL's user name or password holds a '#', '?' or '/' that is not \
                         percent-encoded (write %23, %3F, %2F)",
                        redact(url)
                    )))
                }
                _ => Ok(()),
            }
        }
        _ => Err(Error::InvalidArgument(format!(
            "Unsupported protocol for {kind}: {} (http:// or https://)",
            redact(url)
        ))),
    }
}
