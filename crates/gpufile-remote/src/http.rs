//! HTTP requests with KvikIO's retry policy, reading bodies straight into the caller's slice.
//!
//! One [`Client`] per remote file: a `ureq` agent (blocking, rustls, a connection pool shared by
//! the workers). Each request reads `http_max_attempts`, `http_status_codes` and `http_timeout`
//! from the settings when it starts (as KvikIO reads its defaults per request), retries a
//! retryable status or a timeout after 500 ms, 1 s, 2 s, 4 s (at most 4 s), and fails with an
//! [`Error::Remote`] that names the URL, the range and the attempts made.
//!
//! Trusted roots: Mozilla's (webpki roots) unless a CA bundle variable names a PEM file
//! (`CURL_CA_BUNDLE`, then `SSL_CERT_FILE` as KvikIO reads them, then `AWS_CA_BUNDLE`; see
//! [`gpufile::config::ca_bundle`]); then exactly that file's certificates are trusted. A bundle
//! that cannot be read or holds no certificate is an error naming the variable and the file
//! (KvikIO hands the path to libcurl and fails later, at the first TLS handshake).

use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gpufile::{Error, RemoteFailure, Result};
use ureq::http::Response;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
use ureq::{Agent, Body};

use crate::endpoint::S3Object;

/// Base and cap of the backoff between attempts (KvikIO's values).
const BACKOFF_BASE_MS: u64 = 500;
const BACKOFF_MAX_MS: u64 = 4000;
/// Bodies read into memory (WebHDFS JSON) are bounded; a file status is a few hundred bytes.
const SMALL_BODY_LIMIT: u64 = 1 << 20;

/// The retry settings of one request.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    pub max_attempts: usize,
    pub retry_codes: Vec<u16>,
    pub timeout: Duration,
}

impl Policy {
    /// From the current settings.
    pub fn current() -> Result<Self> {
        let s = gpufile::Engine::global()?.settings();
        Ok(Policy {
            max_attempts: s.http_max_attempts.max(1),
            retry_codes: s.http_status_codes.clone(),
            timeout: Duration::from_secs(s.http_timeout),
        })
    }
}

/// What one attempt came to when it did not succeed.
enum Attempt {
    /// Worth another try: a retryable status or a timeout (the text says which).
    Retry(String),
    /// Final.
    Fail(Error),
}

/// One HTTP request's description, for errors.
pub(crate) struct Target<'a> {
    /// The URL to send (may carry a signature).
    pub url: &'a str,
    /// The URL to show (redacted).
    pub shown: &'a str,
    /// `Range: bytes=a-b` to send, if any.
    pub range: Option<(u64, usize)>,
    /// Signs each attempt in its headers (S3 SigV4).
    pub signer: Option<&'a S3Object>,
}

impl Target<'_> {
    fn what(&self, method: &str) -> String {
        match self.range {
            Some((off, len)) => format!("{method} of bytes {off}-{}", off + len as u64 - 1),
            None => method.to_owned(),
        }
    }

    fn error(&self, kind: RemoteFailure, reason: String) -> Error {
        Error::Remote {
            url: self.shown.to_owned(),
            kind,
            reason,
        }
    }
}

/// A blocking HTTP client shared by the workers of a remote file.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    agent: Agent,
    counters: Arc<Counters>,
}

/// What a client has sent and received since it was made (all its clones together).
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    bytes: AtomicU64,
}

/// Requests sent, retries made and body bytes received into callers' buffers, by one remote
/// file since it was opened (the size request included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// HTTP requests sent, every attempt counted.
    pub requests: u64,
    /// Attempts that were retried (a retryable status or a timeout).
    pub retries: u64,
    /// Bytes of object data received.
    pub bytes: u64,
}

/// Largest CA bundle read (a full Mozilla bundle is about 220 KiB).
const CA_BUNDLE_LIMIT: u64 = 64 << 20;

/// The certificates of the PEM file `path`, named by environment variable `var` (for errors).
///
/// Private keys and other PEM sections are skipped; a malformed section, an unreadable file or
/// a file without any certificate is an [`Error::InvalidEnv`].
pub(crate) fn load_ca_bundle(var: &str, path: &Path) -> Result<Vec<Certificate<'static>>> {
    let invalid = |reason: String| Error::InvalidEnv {
        var: var.to_owned(),
        value: path.display().to_string(),
        reason,
    };
    let file = std::fs::File::open(path)
        .map_err(|e| invalid(format!("cannot open the CA bundle: {e}")))?;
    let mut pem = Vec::new();
    file.take(CA_BUNDLE_LIMIT + 1)
        .read_to_end(&mut pem)
        .map_err(|e| invalid(format!("cannot read the CA bundle: {e}")))?;
    if pem.len() as u64 > CA_BUNDLE_LIMIT {
        return Err(invalid(format!(
            "the CA bundle is larger than {} MiB",
            CA_BUNDLE_LIMIT >> 20
        )));
    }
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(invalid(format!("the CA bundle is not valid PEM: {e}"))),
        }
    }
    if certs.is_empty() {
        return Err(invalid(
            "the CA bundle holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// The TLS settings: the CA bundle's certificates where a variable names one, else webpki roots.
fn tls_config() -> Result<TlsConfig> {
    let roots = match gpufile::config::ca_bundle() {
        Some((var, path)) => RootCerts::new_with_certs(&load_ca_bundle(var, &path)?),
        None => RootCerts::WebPki,
    };
    Ok(TlsConfig::builder().root_certs(roots).build())
}

impl Client {
    /// A client; for `https` (`tls`), trusting the roots chosen by [`tls_config`]. A plain-HTTP
    /// object never reads the CA bundle variables, so a bad bundle cannot break it.
    pub fn new(tls: bool) -> Result<Self> {
        let tls_config = match tls {
            true => tls_config()?,
            false => TlsConfig::builder().build(),
        };
        let config = Agent::config_builder()
            .tls_config(tls_config)
            // Status codes are ours to judge (retry list, range checks).
            .http_status_as_error(false)
            // One idle connection per worker, so that tasks reuse them.
            .max_idle_connections(256)
            .max_idle_connections_per_host(256)
            .user_agent(concat!("gpufile/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Client {
            agent: config.into(),
            counters: Arc::default(),
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

    /// Runs `attempt` under the retry policy.
    fn retrying<T>(
        &self,
        t: &Target<'_>,
        method: &str,
        mut attempt: impl FnMut(&Policy) -> std::result::Result<T, Attempt>,
    ) -> Result<T> {
        let policy = Policy::current()?;
        let mut last = String::new();
        for n in 1..=policy.max_attempts {
            match attempt(&policy) {
                Ok(v) => return Ok(v),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::Retry(why)) => {
                    if n < policy.max_attempts {
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        let delay = (BACKOFF_BASE_MS << (n - 1).min(4)).min(BACKOFF_MAX_MS);
                        eprintln!(
                            "gpufile: {why} on {} {}. Retrying after {delay}ms (attempt {n} of {}).",
                            t.what(method),
                            t.shown,
                            policy.max_attempts
                        );
                        std::thread::sleep(Duration::from_millis(delay));
                    }
                    last = why;
                }
            }
        }
        Err(t.error(
            RemoteFailure::AttemptsExhausted,
            format!(
                "HTTP request reached maximum number of attempts ({}). Reason: {last} ({})",
                policy.max_attempts,
                t.what(method)
            ),
        ))
    }

    /// Sends one request; classifies transport errors and statuses.
    fn send(
        &self,
        t: &Target<'_>,
        method: &str,
        policy: &Policy,
    ) -> std::result::Result<Response<Body>, Attempt> {
        let mut req = match method {
            "HEAD" => self.agent.head(t.url),
            _ => self.agent.get(t.url),
        };
        let range = t
            .range
            .map(|(off, len)| format!("bytes={off}-{}", off + len as u64 - 1));
        if let Some(r) = &range {
            req = req.header("Range", r);
        }
        if let Some(s3) = t.signer {
            // Signed per attempt, so that a retry after a long backoff is signed afresh.
            let headers = s3.sign(method, range.as_deref()).map_err(Attempt::Fail)?;
            for (name, value) in headers {
                req = req.header(name, value);
            }
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let resp = req
            .config()
            .timeout_global(Some(policy.timeout))
            .build()
            .call()
            .map_err(|e| classify(t, method, e, policy))?;
        let status = resp.status().as_u16();
        if policy.retry_codes.contains(&status) {
            return Err(Attempt::Retry(format!("Got HTTP code {status}")));
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

    /// `HEAD`: the `Content-Length` of the object.
    pub fn head_size(&self, t: &Target<'_>) -> Result<u64> {
        self.retrying(t, "HEAD", |p| {
            let resp = self.send(t, "HEAD", p)?;
            header_u64(&resp, "content-length").ok_or_else(|| {
                Attempt::Fail(t.error(
                    RemoteFailure::BadResponse,
                    "HEAD: the server sent no Content-Length, so the size is unknown (pass nbytes)".into(),
                ))
            })
        })
    }

    /// `GET` with `Range: bytes=0-0`: the size from `Content-Range: bytes 0-0/<size>`.
    pub fn range_probe_size(&self, t: &Target<'_>) -> Result<u64> {
        self.retrying(t, "GET", |p| {
            let mut resp = self.send(t, "GET", p)?;
            let size = if resp.status().as_u16() == 206 {
                let cr = header_str(&resp, "content-range").unwrap_or_default();
                match cr.rsplit_once('/').map(|(_, s)| s.trim().parse::<u64>()) {
                    Some(Ok(n)) => n,
                    _ => {
                        return Err(Attempt::Fail(t.error(
                            RemoteFailure::BadResponse,
                            format!("File size information missing on the server side (Content-Range: {cr:?})"),
                        )))
                    }
                }
            } else {
                // The whole object came back: its length is the size; the body is not read.
                header_u64(&resp, "content-length").ok_or_else(|| {
                    Attempt::Fail(t.error(
                        RemoteFailure::BadResponse,
                        "the server sent neither Content-Range nor Content-Length".into(),
                    ))
                })?
            };
            if resp.status().as_u16() == 206 {
                // Drain the one byte so that the connection can be reused.
                let mut one = [0u8; 1];
                let _ = resp.body_mut().as_reader().read(&mut one);
            }
            Ok(size)
        })
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

    /// `GET` of `dst.len()` bytes into `dst`. `ranged`: the request carries a `Range` header
    /// (a `200` answer then means the server ignored it); otherwise the URL itself selects the
    /// bytes (WebHDFS `op=OPEN&offset&length`).
    pub fn get_into(
        &self,
        t: &Target<'_>,
        offset: u64,
        dst: &mut [u8],
        progress: &AtomicU64,
    ) -> Result<()> {
        let len = dst.len();
        self.retrying(t, "GET", |p| {
            let mut resp = self.send(t, "GET", p)?;
            let status = resp.status().as_u16();
            let announced = header_u64(&resp, "content-length");
            if t.range.is_some() {
                match status {
                    206 => {
                        let cr = header_str(&resp, "content-range").unwrap_or_default();
                        let start = cr
                            .strip_prefix("bytes ")
                            .and_then(|r| r.split_once('-'))
                            .and_then(|(a, _)| a.trim().parse::<u64>().ok());
                        if start != Some(offset) {
                            return Err(Attempt::Fail(t.error(
                                RemoteFailure::BadResponse,
                                format!("{}: the server answered with Content-Range {cr:?}", t.what("GET")),
                            )));
                        }
                    }
                    // A whole-object answer is the right bytes only for a read of the whole object.
                    200 if offset == 0 && announced == Some(len as u64) => {}
                    _ => {
                        return Err(Attempt::Fail(t.error(
                            RemoteFailure::NoRangeSupport,
                            format!(
                                "{}: the server answered {status} with {} bytes instead of the range; \
                                 maybe the server doesn't support file ranges?",
                                t.what("GET"),
                                announced.map_or("an unknown number of".into(), |n| n.to_string())
                            ),
                        )));
                    }
                }
            } else if status != 200 {
                return Err(Attempt::Fail(t.error(
                    RemoteFailure::BadResponse,
                    format!("{}: unexpected HTTP status {status}", t.what("GET")),
                )));
            }
            match announced {
                Some(n) if n > len as u64 => {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::NoRangeSupport,
                        format!(
                            "{}: the server announced {n} bytes for a {len}-byte range; \
                             maybe the server doesn't support file ranges?",
                            t.what("GET")
                        ),
                    )))
                }
                Some(n) if n < len as u64 => {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::ShortBody,
                        format!("{}: the server announced {n} of the {len} bytes asked for", t.what("GET")),
                    )))
                }
                _ => {}
            }
            let mut reader = resp.body_mut().as_reader();
            let mut filled = 0;
            let outcome = loop {
                if filled == len {
                    break Ok(());
                }
                match reader.read(&mut dst[filled..]) {
                    Ok(0) => {
                        break Err(Attempt::Fail(t.error(
                            RemoteFailure::ShortBody,
                            format!("{}: the body ended after {filled} of {len} bytes", t.what("GET")),
                        )))
                    }
                    Ok(n) => {
                        filled += n;
                        progress.fetch_add(n as u64, Ordering::Relaxed);
                        self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => match ureq::Error::from(e) {
                        // A connection closed or reset mid-body.
                        ureq::Error::Io(io) if io.kind() != io::ErrorKind::TimedOut => {
                            break Err(Attempt::Fail(t.error(
                                RemoteFailure::ShortBody,
                                format!(
                                    "{}: the body ended after {filled} of {len} bytes ({io})",
                                    t.what("GET")
                                ),
                            )))
                        }
                        other => break Err(classify(t, "GET", other, p)),
                    },
                }
            };
            if outcome.is_err() {
                // A retry reads the range again: take back what this attempt counted.
                progress.fetch_sub(filled as u64, Ordering::Relaxed);
            } else if announced.is_none() {
                // No length announced (chunked): a longer body means the range was ignored.
                let mut extra = [0u8; 1];
                if matches!(reader.read(&mut extra), Ok(n) if n > 0) {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::NoRangeSupport,
                        format!(
                            "{}: the body is longer than the range; maybe the server doesn't support file ranges?",
                            t.what("GET")
                        ),
                    )));
                }
            }
            outcome
        })
    }
}

fn header_str(resp: &Response<Body>, name: &str) -> Option<String> {
    resp.headers().get(name)?.to_str().ok().map(str::to_owned)
}

fn header_u64(resp: &Response<Body>, name: &str) -> Option<u64> {
    header_str(resp, name)?.trim().parse().ok()
}

/// A `ureq` error as an attempt's outcome: timeouts are retried (as in KvikIO), the rest final.
fn classify(t: &Target<'_>, method: &str, e: ureq::Error, policy: &Policy) -> Attempt {
    match e {
        ureq::Error::Timeout(_) => Attempt::Retry(format!(
            "Operation timed out (http_timeout {} s)",
            policy.timeout.as_secs()
        )),
        ureq::Error::Io(ref io) if io.kind() == io::ErrorKind::TimedOut => Attempt::Retry(format!(
            "Operation timed out (http_timeout {} s)",
            policy.timeout.as_secs()
        )),
        ureq::Error::BodyExceedsLimit(n) => Attempt::Fail(t.error(
            RemoteFailure::BadResponse,
            format!("{}: the response is larger than {n} bytes", t.what(method)),
        )),
        other => Attempt::Fail(t.error(
            RemoteFailure::Transport,
            format!("{}: {other}", t.what(method)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const VAR: &str = "SSL_CERT_FILE";

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    /// A file of `content` in a fresh directory, removed with the returned guard.
    fn scratch(name: &str, content: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        (dir, path)
    }

    fn error_text(path: &Path) -> String {
        let err = load_ca_bundle(VAR, path).unwrap_err();
        assert!(matches!(err, Error::InvalidEnv { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(VAR), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        text
    }

    #[test]
    fn bundle_certificates_are_loaded_and_prose_and_keys_skipped() {
        let certs = load_ca_bundle(VAR, &data("test-ca-bundle.pem")).unwrap();
        assert_eq!(certs.len(), 2);
        // DER of an X.509 certificate: a SEQUENCE with a two-byte length.
        assert!(certs.iter().all(|c| c.der().starts_with(&[0x30, 0x82])));
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        let bundle = std::fs::read(data("test-ca-bundle.pem")).unwrap();
        let (_d, path) = scratch("with-key.pem", &[key.as_bytes(), &bundle].concat());
        assert_eq!(load_ca_bundle(VAR, &path).unwrap().len(), 2);
    }

    #[test]
    fn the_roots_are_the_bundle_s() {
        let certs = load_ca_bundle(VAR, &data("test-ca-bundle.pem")).unwrap();
        let config = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&certs))
            .build();
        match config.root_certs() {
            RootCerts::Specific(roots) => assert_eq!(roots.len(), 2),
            _ => panic!("expected the bundle's certificates as roots"),
        }
    }

    #[test]
    fn missing_bundle_names_variable_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = error_text(&dir.path().join("absent.pem"));
        assert!(text.contains("cannot open the CA bundle"), "{text}");
    }

    #[test]
    fn a_directory_is_not_a_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let text = error_text(dir.path());
        assert!(text.contains("CA bundle"), "{text}");
    }

    #[test]
    fn empty_bundle_or_keys_only_is_an_error() {
        let (_d, empty) = scratch("empty.pem", b"");
        assert!(error_text(&empty).contains("holds no PEM certificate"));
        let key =
            b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        let (_d2, keys) = scratch("keys.pem", key);
        assert!(error_text(&keys).contains("holds no PEM certificate"));
    }

    #[test]
    fn truncated_pem_is_an_error() {
        let (_d, path) = scratch(
            "cut.pem",
            b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n",
        );
        let text = error_text(&path);
        assert!(text.contains("not valid PEM"), "{text}");
    }
}
