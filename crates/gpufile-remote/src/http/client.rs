//! The client: one per remote file, shared by its workers. It sends requests (reads, uploads)
//! under the retry policy ([`super::retry`]), follows redirects hop by hop, judges statuses and
//! reads small bodies; ranged reads and sizes are [`super::range`]'s.
//!
//! Redirects are followed here, not by ureq, so that each hop is checked: a signed request
//! (S3 SigV4, a GCS bearer token) follows none, since its headers carry credentials that no
//! other host may see (`x-amz-security-token` among them); a redirect from `https` to plain
//! `http` is refused for every request.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use gpufile::{Error, Result};
use ureq::http::Response;
use ureq::tls::TlsConfig;
use ureq::{Agent, Body, BodyReader};

use super::request::{header_str, Target};
use super::retry::{classify, retry_record, Attempt, Policy, RetryCause};
use super::transport::{self, sleep_unless_stopped, Watch};
use crate::error::RemoteFailure;
use crate::syntax::redact::redact;
use crate::tls_ca::tls_config;

/// Bodies read into memory (WebHDFS JSON) are bounded; a file status is a few hundred bytes.
const SMALL_BODY_LIMIT: u64 = 1 << 20;

/// Redirects followed per request at most (ureq's default).
const MAX_REDIRECTS: usize = 10;

/// The rest of a whole-object body, positioned at `next`.
pub(super) struct WholeBody {
    pub(super) url: String,
    pub(super) next: u64,
    /// The body's length, where announced.
    pub(super) end: Option<u64>,
    pub(super) reader: BodyReader<'static>,
}

impl std::fmt::Debug for WholeBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeBody")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// A blocking HTTP client shared by the workers of a remote file.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    agent: Agent,
    pub(super) counters: Arc<Counters>,
    /// A whole-object answer left open after the range it served (a server that ignores
    /// `Range`), for the read that continues it: the next bounce-buffer chunk of a read into
    /// GPU memory, or the next of sequential reads, without a new GET from the object's start.
    pub(super) stream: Arc<Mutex<Option<WholeBody>>>,
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
pub(super) struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    pub(super) bytes: AtomicU64,
    /// A `RANGES_*` value: what the server's answers said of ranges.
    pub(super) ranges: AtomicU8,
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
    pub(super) fn send(
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

impl Client {
    /// Runs `attempt` under the retry policy.
    pub(super) fn retrying<T>(
        &self,
        t: &Target<'_>,
        method: &str,
        mut attempt: impl FnMut(&Policy) -> std::result::Result<T, Attempt>,
    ) -> Result<T> {
        let policy = Policy::current()?;
        let _watch = Watch::new(t.stop);
        let mut last = None;
        for n in 1..=policy.max_attempts {
            if t.stopped() {
                return Err(Error::Cancelled);
            }
            // Under the request's flag, the credentials an attempt signs with (a refresh that
            // runs a `credential_process` or asks STS) stop with it too.
            let outcome = match t.stop {
                Some(stop) => crate::stop::with_stop(stop, || attempt(&policy)),
                None => attempt(&policy),
            };
            match outcome {
                Ok(v) => return Ok(v),
                // A request stopped mid-attempt fails as cancelled, whatever the socket said.
                Err(_) if t.stopped() => return Err(Error::Cancelled),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::Retry(cause)) => {
                    if n < policy.max_attempts {
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        let delay = policy.backoff(n);
                        gpufile::__private::observe::count_http_retry(delay);
                        let ms = delay.as_millis() as u64;
                        let request = format!("{} {}", t.what(method), t.shown);
                        eprintln!(
                            "{}",
                            retry_record(cause, ms, n, policy.max_attempts, &request)
                        );
                        if !sleep_unless_stopped(delay, t) {
                            return Err(Error::Cancelled);
                        }
                    }
                    last = Some(cause);
                }
            }
        }
        let reason = last.map_or_else(|| "no attempt was made".to_owned(), RetryCause::reason);
        Err(t.error(
            RemoteFailure::AttemptsExhausted,
            format!(
                "HTTP request reached maximum number of attempts ({}). Reason: {reason} ({})",
                policy.max_attempts,
                t.what(method)
            ),
        ))
    }
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
    let shown = redact(next.as_str());
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
    use crate::http::sign::SignRequest;

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
