//! What of a URL is shown: [`redact`] replaces the credentials a URL may carry (its userinfo,
//! the values of signature, token and key parameters) with `REDACTED`. Every URL that an error,
//! `str()`, a retry line or a report of the remote crate shows goes through it; the bindings and
//! the CLI call it too.

use percent_encoding::percent_decode_str;

/// The query and fragment parameters whose values [`redact`] replaces, lower case: those of S3
/// presigned URLs (SigV4's `X-Amz-*`, SigV2's `Signature` and `AWSAccessKeyId`), of GCS signed
/// URLs (`X-Goog-*`, V2's `GoogleAccessId`), Azure shared access signatures (`sig`), WebHDFS
/// delegation tokens, GCS resumable upload sessions (`upload_id`, which lets its holder
/// upload), OAuth tokens and codes, API keys and passwords. A name matches whatever its case
/// and percent-encoding (`%73ig`, `X-AMZ-SIGNATURE`).
pub const SECRET_PARAMS: &[&str] = &[
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "signature",
    "awsaccesskeyid",
    "x-goog-signature",
    "x-goog-credential",
    "googleaccessid",
    "sig",
    "delegation",
    "upload_id",
    "token",
    "access_token",
    "id_token",
    "refresh_token",
    "code",
    "auth",
    "authorization",
    "key",
    "api_key",
    "apikey",
    "api-key",
    "x-api-key",
    "password",
    "passwd",
    "pass",
    "pwd",
    "secret",
    "client_secret",
];

/// The URL with its credentials replaced by `REDACTED`, for errors and `str()`: a signed URL
/// is a bearer credential. The userinfo (`user:password@`) is replaced as a whole,
/// `https://REDACTED@host/...`, whatever the password holds (`@`, and `#`, `?` or `/` left
/// unencoded); the value of every parameter of the query and of the
/// fragment named in [`SECRET_PARAMS`] is replaced, `sig=REDACTED`.
pub fn redact(url: &str) -> String {
    let url = redact_userinfo(url);
    let Some(start) = url.find(['?', '#']) else {
        return url;
    };
    let (base, tail) = url.split_at(start);
    let (query, fragment) = match tail.strip_prefix('?') {
        Some(rest) => match rest.split_once('#') {
            Some((q, f)) => (Some(q), Some(f)),
            None => (Some(rest), None),
        },
        None => (None, Some(&tail[1..])),
    };
    let mut out = base.to_owned();
    if let Some(q) = query {
        out.push('?');
        out.push_str(&redact_params(q));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(&redact_params(f));
    }
    out
}

/// `a=1&sig=x` → `a=1&sig=REDACTED`.
fn redact_params(params: &str) -> String {
    params
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if is_secret_param(k) => format!("{k}=REDACTED"),
            _ => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn is_secret_param(name: &str) -> bool {
    let name = percent_decode_str(name)
        .decode_utf8_lossy()
        .to_ascii_lowercase();
    SECRET_PARAMS.contains(&name.trim())
}

/// `scheme://user:password@host/...` → `scheme://REDACTED@host/...`.
fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match userinfo_end(rest) {
        Some(at) => format!("{scheme}://REDACTED@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// Where the userinfo of `rest` (a URL after its `scheme://`) ends: the `@` before the host,
/// or `None` where it has none. Passwords are often typed unencoded, and a redaction must not
/// stop short of their end, so the authority is read leniently: it ends at the first `/`
/// before which what follows the last `@` reads as `host[:port]` (a port is digits; `?` and
/// `#` are no host's, so a `/` after them is a password's too), and the userinfo at that `@`.
/// A password's own `@`, `#`, `?` and `/` stay inside it (`user:p@s#s?/s@host/path`), an `@`
/// of the path stays outside (`user:pw@host/a@b.bin`, `host/a@b`). Where nothing reads as a
/// host, the userinfo ends at the last `@`: too much hidden rather than a secret shown. A `/`
/// after what reads as a host is a path's (`user/x@host/...` names host `user` to any client,
/// and is shown so).
pub(crate) fn userinfo_end(rest: &str) -> Option<usize> {
    let mut at = None;
    for end in rest.match_indices('/').map(|(i, _)| i).chain([rest.len()]) {
        let head = &rest[..end];
        at = head.rfind('@');
        let mut host = &head[at.map_or(0, |a| a + 1)..];
        if end == rest.len() {
            // No path: a query or fragment may follow the host.
            host = &host[..host.find(['?', '#']).unwrap_or(host.len())];
        }
        if is_host_port(host) {
            return at;
        }
    }
    at
}

/// Whether `s` reads as `host[:port]`, the port digits (an IPv6 address in brackets): what
/// precedes the first `/` of a URL without userinfo.
fn is_host_port(s: &str) -> bool {
    let (host_ok, port) = match s.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, after)) => (
                addr.chars()
                    .all(|c| c.is_ascii_hexdigit() || ":.%".contains(c)),
                after,
            ),
            None => return false,
        },
        None => {
            let (host, port) = s.find(':').map_or((s, ""), |i| s.split_at(i));
            let ok = !host
                .chars()
                .any(|c| "@/?#[]\\".contains(c) || c.is_whitespace() || c.is_control());
            (ok, port)
        }
    };
    host_ok
        && (port.is_empty()
            || port
                .strip_prefix(':')
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
