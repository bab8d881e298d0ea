//! HTTP requests with KvikIO's retry policy, reading bodies straight into the caller's slice.
//!
//! One [`Client`] per remote file composes the rooms of this module:
//! - [`transport`]: the `ureq` agent and how a request stops when its [`StopFlag`] is set;
//! - [`retry`]: what is retried, after how long, how many times, and each retry's record;
//! - [`range`]: `Range` requests and their answers, servers that ignore `Range`, sizes;
//! - the trusted roots, from KvikIO's variables: [`crate::tls_ca`].
//!
//! The client itself sends requests (reads, uploads) and checks their redirects and bodies.
//! Redirects are followed by this module, not by ureq, so that each hop is checked: a signed
//! request (S3 SigV4) follows none, since its headers carry credentials that no other host may
//! see (`x-amz-security-token` among them); a redirect from `https` to plain `http` is refused
//! for every request. Bodies are asked for and accepted only as they are stored
//! (`Accept-Encoding: identity`): an encoded body is refused, since its bytes are not the
//! object's.

mod range;
mod retry;
mod transport;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use gpufile::StopFlag;
use gpufile::{Error, Result};
use ureq::http::Response;
use ureq::tls::TlsConfig;
use ureq::{Agent, Body};

use crate::endpoint;
use crate::error::{RemoteError, RemoteFailure};
use crate::sign::SignRequest;
use crate::tls_ca::tls_config;
use range::WholeBody;
pub use range::{RangeSupport, WHOLE_BODY_REASON};
use retry::{classify, Attempt, Policy, RetryCause};
pub(crate) use transport::{stoppable_agent, STOP_POLL};

/// Bodies read into memory (WebHDFS JSON) are bounded; a file status is a few hundred bytes.
const SMALL_BODY_LIMIT: u64 = 1 << 20;

/// Redirects followed per request at most (ureq's default).
const MAX_REDIRECTS: usize = 10;

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
    fn what(&self, method: &str) -> String {
        if let Some(label) = self.label {
            return label.to_owned();
        }
        match self.range {
            Some((off, len)) => format!("{method} of bytes {off}-{}", off + len as u64 - 1),
            None => method.to_owned(),
        }
    }

    fn error(&self, kind: RemoteFailure, reason: String) -> Error {
        RemoteError {
            url: self.shown.to_owned(),
            kind,
            reason,
        }
        .into()
    }

    /// Its own stop flag is set, or, for a request without one (the size request of an open),
    /// its caller's ([`crate::stop::with_stop`]).
    fn stopped(&self) -> bool {
        self.stop
            .map_or_else(crate::stop::stopped, StopFlag::is_set)
    }
}

/// A blocking HTTP client shared by the workers of a remote file.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    agent: Agent,
    counters: Arc<Counters>,
    /// A whole-object answer left open after the range it served (a server that ignores
    /// `Range`), for the read that continues it: the next bounce-buffer chunk of a read into
    /// GPU memory, or the next of sequential reads, without a new GET from the object's start.
    stream: Arc<Mutex<Option<WholeBody>>>,
}

/// The answer to an upload request ([`Client::send_body`]).
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `ETag` header (S3's name for an uploaded part).
    pub etag: Option<String>,
    /// The `Location` of a redirect, when the request stopped at one; else the answer's own
    /// (a GCS resumable upload's session).
    pub location: Option<String>,
    /// The body, at most 1 MiB (S3's XML answers).
    pub body: String,
}

/// What a client has sent and received since it was made (all its clones together).
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    bytes: AtomicU64,
    /// A `RANGES_*` value: what the server's answers said of ranges.
    ranges: AtomicU8,
}

/// Requests sent, retries made and body bytes received into callers' buffers (or sent from
/// them, for an object opened for writing), by one remote file since it was opened (the size
/// request included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// HTTP requests sent, every attempt counted.
    pub requests: u64,
    /// Attempts that were retried (a retryable status or a timeout).
    pub retries: u64,
    /// Bytes of object data received (sent, for an object opened for writing).
    pub bytes: u64,
}

impl Client {
    /// A client; for `https` (`tls`), trusting the roots chosen by [`tls_config`]. A plain-HTTP
    /// object never reads the CA bundle variables, so a bad bundle cannot break it.
    pub fn new(tls: bool) -> Result<Self> {
        let tls_config = match tls {
            true => tls_config()?,
            false => TlsConfig::builder().build(),
        };
        Ok(Client {
            agent: transport::agent(tls_config),
            counters: Arc::default(),
            stream: Arc::default(),
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> RemoteStats {
        let c = &self.counters;
        RemoteStats {
            requests: c.requests.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    }

    /// Sends one request, following redirects hop by hop; classifies transport errors and
    /// statuses.
    fn send(
        &self,
        t: &Target<'_>,
        method: &str,
        policy: &Policy,
    ) -> std::result::Result<Response<Body>, Attempt> {
        let mut url = t.url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let resp = self.send_once(t, &url, method, policy)?;
            let status = resp.status();
            let location = header_str(&resp, "location");
            let (true, Some(location)) = (status.is_redirection(), location) else {
                return self.judge(t, method, policy, resp);
            };
            url = next_hop(t, method, &url, status.as_u16(), &location)?;
        }
        Err(Attempt::Fail(t.error(
            RemoteFailure::BadResponse,
            format!("{}: more than {MAX_REDIRECTS} redirects", t.what(method)),
        )))
    }

    /// Sends one request to `url` (the target's, or a redirect's).
    fn send_once(
        &self,
        t: &Target<'_>,
        url: &str,
        method: &str,
        policy: &Policy,
    ) -> std::result::Result<Response<Body>, Attempt> {
        let mut req = match method {
            "HEAD" => self.agent.head(url),
            _ => self.agent.get(url),
        };
        let range = t
            .range
            .map(|(off, len)| format!("bytes={off}-{}", off + len as u64 - 1));
        if let Some(r) = &range {
            req = req.header("Range", r);
        }
        if let Some(s3) = t.signer {
            // Signed per attempt, so that a retry after a long backoff is signed afresh.
            let headers = s3
                .sign_request(method, url, range.as_deref())
                .map_err(Attempt::Fail)?;
            for (name, value) in headers {
                req = req.header(name, value);
            }
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        req.config()
            .timeout_global(Some(policy.timeout))
            .build()
            .call()
            .map_err(|e| classify(t, method, e, policy))
    }

    /// The final answer's status: retryable, an error, or the answer to read.
    fn judge(
        &self,
        t: &Target<'_>,
        method: &str,
        policy: &Policy,
        resp: Response<Body>,
    ) -> std::result::Result<Response<Body>, Attempt> {
        let status = resp.status().as_u16();
        if policy.retry_codes.contains(&status) {
            return Err(Attempt::Retry(RetryCause::Status(status)));
        }
        if status >= 400 {
            let reason = resp.status().canonical_reason().unwrap_or("");
            return Err(Attempt::Fail(
                t.error(
                    RemoteFailure::Status(status),
                    format!("{}: URL returned error: {status} {reason}", t.what(method))
                        .trim_end()
                        .to_owned(),
                ),
            ));
        }
        Ok(resp)
    }

    /// `method` (`PUT`, `POST` or `DELETE`) of `body` to the target's URL, which may carry a
    /// query (signed with the rest for S3): an object's bytes, a part, or a multipart upload's
    /// create, complete or abort. Each attempt sends the whole body again. Redirects are
    /// followed hop by hop as for reads, unless `stop_at_redirect`: then a redirect is the
    /// answer (WebHDFS `CREATE`'s first step, whose `Location` names where the bytes go).
    pub fn send_body(
        &self,
        t: &Target<'_>,
        method: &'static str,
        body: &[u8],
        content_type: Option<&str>,
        stop_at_redirect: bool,
    ) -> Result<Answer> {
        self.retrying(t, method, |p| {
            let mut url = t.url.to_owned();
            for _ in 0..=MAX_REDIRECTS {
                let resp = self.send_once_body(t, &url, method, body, content_type, p)?;
                let status = resp.status();
                let location = header_str(&resp, "location");
                match (status.is_redirection(), location) {
                    (true, Some(location)) if stop_at_redirect => {
                        return Ok(Answer {
                            status: status.as_u16(),
                            etag: None,
                            location: Some(location),
                            body: String::new(),
                        })
                    }
                    (true, Some(location)) => {
                        url = next_hop(t, method, &url, status.as_u16(), &location)?;
                    }
                    _ => {
                        let mut resp = self.judge(t, method, p, resp)?;
                        self.counters
                            .bytes
                            .fetch_add(body.len() as u64, Ordering::Relaxed);
                        let etag = header_str(&resp, "etag");
                        let location = header_str(&resp, "location");
                        let text = resp
                            .body_mut()
                            .with_config()
                            .limit(SMALL_BODY_LIMIT)
                            .read_to_string()
                            .map_err(|e| classify(t, method, e, p))?;
                        return Ok(Answer {
                            status: status.as_u16(),
                            etag,
                            location,
                            body: text,
                        });
                    }
                }
            }
            Err(Attempt::Fail(t.error(
                RemoteFailure::BadResponse,
                format!("{}: more than {MAX_REDIRECTS} redirects", t.what(method)),
            )))
        })
    }

    /// Sends one `method` request with `body` to `url`.
    fn send_once_body(
        &self,
        t: &Target<'_>,
        url: &str,
        method: &'static str,
        body: &[u8],
        content_type: Option<&str>,
        policy: &Policy,
    ) -> std::result::Result<Response<Body>, Attempt> {
        let mut headers: Vec<(&str, String)> = Vec::new();
        if let Some(ct) = content_type {
            headers.push(("content-type", ct.to_owned()));
        }
        if let Some(s3) = t.signer {
            // Signed per attempt, over the URL sent (its query: uploads, partNumber, uploadId).
            let signed = s3.sign_request(method, url, None).map_err(Attempt::Fail)?;
            headers.extend(signed);
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let sent = match method {
            "DELETE" => {
                let mut req = self.agent.delete(url);
                for (name, value) in &headers {
                    req = req.header(*name, value);
                }
                req.config()
                    .timeout_global(Some(policy.timeout))
                    .build()
                    .call()
            }
            _ => {
                let mut req = match method {
                    "POST" => self.agent.post(url),
                    _ => self.agent.put(url),
                };
                for (name, value) in &headers {
                    req = req.header(*name, value);
                }
                req.config()
                    .timeout_global(Some(policy.timeout))
                    .build()
                    .send(body)
            }
        };
        sent.map_err(|e| classify(t, method, e, policy))
    }

    /// `GET` of a small body (WebHDFS file status), at most 1 MiB.
    pub fn get_small(&self, t: &Target<'_>) -> Result<String> {
        self.retrying(t, "GET", |p| {
            let mut resp = self.send(t, "GET", p)?;
            let status = resp.status().as_u16();
            if status != 200 {
                return Err(Attempt::Fail(t.error(
                    RemoteFailure::BadResponse,
                    format!("GET: HTTP response is not successful (status {status})"),
                )));
            }
            resp.body_mut()
                .with_config()
                .limit(SMALL_BODY_LIMIT)
                .read_to_string()
                .map_err(|e| classify(t, "GET", e, p))
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn header_str(resp: &Response<Body>, name: &str) -> Option<String> {
    resp.headers().get(name)?.to_str().ok().map(str::to_owned)
}

fn header_u64(resp: &Response<Body>, name: &str) -> Option<u64> {
    header_str(resp, name)?.trim().parse().ok()
}

/// Where a redirect from `from` to `location` goes, if it may be followed: never for a signed
/// request (its headers carry credentials, a session token among them, that ureq would send on
/// to any host), never from `https` to plain `http`, and only to `http(s)` URLs.
fn next_hop(
    t: &Target<'_>,
    method: &str,
    from: &str,
    status: u16,
    location: &str,
) -> std::result::Result<String, Attempt> {
    let refuse = |why: String| {
        Attempt::Fail(t.error(
            RemoteFailure::BadResponse,
            format!(
                "{}: the server answered {status}, a redirect {why}",
                t.what(method)
            ),
        ))
    };
    let next = url::Url::parse(from)
        .and_then(|base| base.join(location))
        .map_err(|e| refuse(format!("to an address that is not a URL ({e})")))?;
    let shown = endpoint::redact(next.as_str());
    if t.signer.is_some() {
        return Err(refuse(format!(
            "to {shown}; a signed request follows no redirect, so that its credentials \
             reach no other server (open the object at the address it names)"
        )));
    }
    let from_https = from
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    match next.scheme() {
        "http" if from_https => Err(refuse(format!(
            "from https to plain http ({shown}), refused: the bytes would travel unencrypted"
        ))),
        "http" | "https" => Ok(next.into()),
        other => Err(refuse(format!("to a {other}: URL ({shown}), not followed"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(url: &'a str, signer: Option<&'a dyn SignRequest>) -> Target<'a> {
        Target {
            url,
            shown: url,
            range: Some((0, 10)),
            signer,
            size: None,
            stop: None,
            label: None,
        }
    }

    fn refusal(r: std::result::Result<String, Attempt>) -> String {
        match r {
            Err(Attempt::Fail(e)) => e.to_string(),
            Err(Attempt::Retry(c)) => panic!("a retry: {c:?}"),
            Ok(u) => panic!("followed to {u}"),
        }
    }

    #[test]
    fn redirect_hops_are_checked() {
        let t = target("https://a/x", None);
        assert_eq!(
            next_hop(&t, "GET", "https://a/x", 302, "/y?q=1").unwrap_or_default(),
            "https://a/y?q=1"
        );
        assert_eq!(
            next_hop(&t, "GET", "http://a/x", 301, "https://b/z").unwrap_or_default(),
            "https://b/z"
        );
        let e = refusal(next_hop(&t, "GET", "https://a/x", 307, "http://b/z?sig=s"));
        assert!(
            e.contains("from https to plain http (http://b/z?sig=REDACTED)"),
            "{e}"
        );
        let e = refusal(next_hop(&t, "GET", "http://a/x", 307, "ftp://b/z"));
        assert!(e.contains("to a ftp: URL"), "{e}");
        let env = |k: &str| {
            [("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s")]
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let o = crate::S3Object::from_http_url(
            "http://127.0.0.1:1/b/k",
            &crate::S3Options {
                region: Some("us-east-1".into()),
                ..Default::default()
            },
            &env,
        )
        .unwrap();
        let signed = target("http://127.0.0.1:1/b/k", Some(&o));
        let e = refusal(next_hop(
            &signed,
            "GET",
            "http://127.0.0.1:1/b/k",
            307,
            "/b/k2",
        ));
        assert!(e.contains("a signed request follows no redirect"), "{e}");
    }
}
