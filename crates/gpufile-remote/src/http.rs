//! HTTP requests with KvikIO's retry policy, reading bodies straight into the caller's slice.
//!
//! One [`Client`] per remote file: a `ureq` agent (blocking, rustls, a connection pool shared by
//! the workers). Each request reads `http_max_attempts`, `http_status_codes` and `http_timeout`
//! from the settings when it starts (as KvikIO reads its defaults per request), retries a
//! retryable status or a timeout after 500 ms, 1 s, 2 s, 4 s (at most 4 s), and fails with an
//! [`RemoteError`] that names the URL, the range and the attempts made. Each retry writes one
//! line to stderr, KvikIO's record after the library's name, then the request:
//! `gpufile: Got HTTP code 503. Retrying after 500ms (attempt 1 of 2). Request: HEAD <url>`
//! (KvikIO prints `KvikIO: Got HTTP code 503. Retrying ...` to stdout; stdout is the program's
//! data, so gpufile keeps it clean).
//!
//! Trusted roots: Mozilla's (webpki roots) unless a variable names others, in KvikIO's order:
//! a PEM file in `CURL_CA_BUNDLE` or `SSL_CERT_FILE`, else a directory of PEM files in
//! `SSL_CERT_DIR` (OpenSSL's `c_rehash` layout or plain `*.pem`; `:`-separated directories),
//! then gpufile's addition `AWS_CA_BUNDLE` (a file). Exactly those certificates are then
//! trusted. A bundle or directory that cannot be read or holds no certificate is an error
//! naming the variable and the path (KvikIO hands the path to libcurl and fails later, at the
//! first TLS handshake).
//!
//! Redirects are followed by this module, not by ureq, so that each hop is checked: a signed
//! request (S3 SigV4) follows none, since its headers carry credentials that no other host may
//! see (`x-amz-security-token` among them); a redirect from `https` to plain `http` is refused
//! for every request. Bodies are asked for and accepted only as they are stored
//! (`Accept-Encoding: identity`): an encoded body is refused, since its bytes are not the
//! object's.
//!
//! A request stops (an [`Error::Cancelled`]) soon after its [`StopFlag`] is set (Ctrl-C, or
//! another task of the request failed): between attempts, during a backoff, and while a
//! response or a body is awaited (socket reads wait in slices of [`STOP_POLL`] and look at the
//! flag between them); only a connection being opened is waited for.

use std::cell::RefCell;
use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpufile::future::StopFlag;
use gpufile::{Error, Result};
use ureq::http::Response;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, NextTimeout, RustlsConnector,
    TcpConnector, Transport,
};
use ureq::{Agent, Body, BodyReader};

use crate::endpoint;
use crate::error::{RemoteError, RemoteFailure};
use crate::sign::SignRequest;

/// Base and cap of the backoff between attempts (KvikIO's values).
const BACKOFF_BASE_MS: u64 = 500;
const BACKOFF_MAX_MS: u64 = 4000;
/// Bodies read into memory (WebHDFS JSON) are bounded; a file status is a few hundred bytes.
const SMALL_BODY_LIMIT: u64 = 1 << 20;
/// Redirects followed per request at most (ureq's default).
const MAX_REDIRECTS: usize = 10;
/// How long a socket read or a backoff waits before it looks at the request's stop flag again:
/// a cancelled request ends within about this long (Python polls for Ctrl-C every 50 ms too).
pub(crate) const STOP_POLL: Duration = Duration::from_millis(20);

/// The reason of a whole-object read, in path reports.
pub const WHOLE_BODY_REASON: &str = "server ignores Range: one whole-body GET";

/// What is known of a server's byte ranges (a [`Counters::ranges`] value; 0 while unknown).
const RANGES_HONOURED: u8 = 1;
const RANGES_IGNORED: u8 = 2;

/// Whether the server answers `Range` requests with the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeSupport {
    /// No answer has said so yet (a HEAD without `Accept-Ranges`, or `nbytes` given).
    Unknown,
    /// A `206` answer, or `Accept-Ranges: bytes`.
    Honoured,
    /// A `200` answer with the whole object to a ranged GET, or `Accept-Ranges: none`.
    Ignored,
}

thread_local! {
    /// The stop flag of the request this thread is sending, for [`StoppableTransport`]: ureq runs
    /// a request on the calling thread, through a pooled transport made for an earlier one.
    static WATCHED: RefCell<Option<StopFlag>> = const { RefCell::new(None) };
}

/// Watches `stop` on this thread until dropped.
struct Watch(Option<StopFlag>);

impl Watch {
    fn new(stop: Option<&StopFlag>) -> Self {
        let before = WATCHED.with(|w| w.replace(stop.cloned()));
        Watch(before)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let before = self.0.take();
        WATCHED.with(|w| *w.borrow_mut() = before);
    }
}

/// Whether this thread's request has a stop flag (`None`), and whether it is set.
fn watched_stop() -> Option<bool> {
    WATCHED.with(|w| w.borrow().as_ref().map(StopFlag::is_set))
}

/// Puts a [`StoppableTransport`] over each TCP connection (under TLS, if any).
#[derive(Debug)]
struct Stoppable;

impl<In: Transport> Connector<In> for Stoppable {
    type Out = StoppableTransport<In>;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        Ok(chained.map(StoppableTransport))
    }
}

/// A transport whose reads wait in slices of [`STOP_POLL`], giving up when the watched stop flag
/// is set (a blocking socket read cannot be interrupted otherwise).
#[derive(Debug)]
struct StoppableTransport<T>(T);

impl<T: Transport> Transport for StoppableTransport<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.0.buffers()
    }

    fn transmit_output(
        &mut self,
        amount: usize,
        timeout: NextTimeout,
    ) -> std::result::Result<(), ureq::Error> {
        self.0.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> std::result::Result<bool, ureq::Error> {
        use ureq::unversioned::transport::time::Duration as Budget;
        if watched_stop().is_none() {
            return self.0.await_input(timeout); // nothing can stop it: one wait
        }
        let budget = timeout.for_read();
        let until = match budget.after {
            Budget::NotHappening => None,
            after => Instant::now().checked_add(*after),
        };
        loop {
            if watched_stop() == Some(true) {
                return Err(ureq::Error::Io(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "the request was cancelled",
                )));
            }
            // The budget left, in one slice when it fits (then its timeout is the request's).
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            let last = left.is_some_and(|l| l <= STOP_POLL);
            let mut next = budget;
            next.after = Budget::Exact(left.map_or(STOP_POLL, |l| l.min(STOP_POLL)));
            match self.0.await_input(next) {
                Err(ureq::Error::Timeout(_)) if !last => continue,
                other => return other,
            }
        }
    }

    fn is_open(&mut self) -> bool {
        self.0.is_open()
    }

    fn is_tls(&self) -> bool {
        self.0.is_tls()
    }
}

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
    /// Worth another try: a retryable status or a timeout.
    Retry(RetryCause),
    /// Final.
    Fail(Error),
}

/// Why an attempt is worth repeating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RetryCause {
    /// A status in `http_status_codes`.
    Status(u16),
    /// No answer within `http_timeout` seconds.
    Timeout(u64),
}

impl RetryCause {
    /// The retry record's opening words, as KvikIO writes them.
    fn record(self) -> String {
        match self {
            RetryCause::Status(code) => format!("Got HTTP code {code}"),
            RetryCause::Timeout(_) => "Timeout error".to_owned(),
        }
    }

    /// The reason in the final error.
    fn reason(self) -> String {
        match self {
            RetryCause::Status(code) => format!("Got HTTP code {code}"),
            RetryCause::Timeout(secs) => {
                format!("Operation timed out after {secs} s (http_timeout)")
            }
        }
    }
}

/// One retry's line: KvikIO's record after the library's name, then the request.
fn retry_record(
    cause: RetryCause,
    delay_ms: u64,
    attempt: usize,
    max: usize,
    request: &str,
) -> String {
    format!(
        "gpufile: {}. Retrying after {delay_ms}ms (attempt {attempt} of {max}). Request: {request}",
        cause.record()
    )
}

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

    fn stopped(&self) -> bool {
        self.stop.is_some_and(StopFlag::is_set)
    }
}

/// ureq's resolver, without its thread for an IP address.
///
/// ureq resolves the host before every request, pooled connection or not, and under a deadline
/// (`http_timeout`) it does so on a thread spawned for the lookup, so that `getaddrinfo` cannot
/// outlast the deadline. For an IP literal (`127.0.0.1`, `[::1]`) there is nothing to look up:
/// without a deadline ureq parses it on the calling thread, which saves a thread spawned and
/// joined per range (docs/performance.md, "Remote requests").
#[derive(Debug, Default)]
struct LiteralIpResolver(DefaultResolver);

impl Resolver for LiteralIpResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> std::result::Result<ResolvedSocketAddrs, ureq::Error> {
        let literal = uri.host().is_some_and(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok()
        });
        let timeout = if literal {
            NextTimeout::default()
        } else {
            timeout
        };
        self.0.resolve(uri, config, timeout)
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

/// The rest of a whole-object body, positioned at `next`.
struct WholeBody {
    url: String,
    next: u64,
    /// The body's length, where announced.
    end: Option<u64>,
    reader: BodyReader<'static>,
}

impl std::fmt::Debug for WholeBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeBody")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
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

/// Largest CA bundle read, and the most bytes read from a CA directory in all (a full Mozilla
/// bundle is about 220 KiB).
const CA_BUNDLE_LIMIT: u64 = 64 << 20;
/// Most entries looked at in a CA directory (`/etc/ssl/certs` holds about a thousand).
const CA_DIR_ENTRIES_LIMIT: usize = 100_000;

/// `SSL_CERT_DIR`: OpenSSL's (and libcurl's, and KvikIO's) directory of trusted certificates.
pub(crate) const CA_DIR_VAR: &str = "SSL_CERT_DIR";

/// Where the trusted roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CaSource {
    /// A PEM file named by the variable.
    Bundle(&'static str, PathBuf),
    /// `SSL_CERT_DIR`'s value: one or more directories (`:`-separated) of PEM files.
    Dir(OsString),
    /// Mozilla's roots, built in.
    WebPki,
}

/// The roots to trust, from variables looked up through `lookup`, in KvikIO's order:
/// `CURL_CA_BUNDLE`, `SSL_CERT_FILE`, then `SSL_CERT_DIR`; gpufile's `AWS_CA_BUNDLE` after them.
pub(crate) fn ca_source_from(lookup: impl Fn(&str) -> Option<OsString>) -> CaSource {
    let bundle = crate::tls_ca::ca_bundle_from(&lookup);
    match bundle {
        Some((var, path)) if var != "AWS_CA_BUNDLE" => CaSource::Bundle(var, path),
        other => match lookup(CA_DIR_VAR).filter(|v| !v.is_empty()) {
            Some(dir) => CaSource::Dir(dir),
            None => other.map_or(CaSource::WebPki, |(var, path)| CaSource::Bundle(var, path)),
        },
    }
}

/// The certificates of PEM text; other PEM sections (keys, CRLs) are skipped.
fn pem_certificates(pem: &[u8]) -> std::result::Result<Vec<Certificate<'static>>, String> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("not valid PEM: {e}")),
        }
    }
    Ok(certs)
}

/// Reads at most `limit` bytes of `path`; `None` (with the limit) when it is longer.
fn read_bounded(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

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
    std::fs::metadata(path).map_err(|e| invalid(format!("cannot open the CA bundle: {e}")))?;
    let pem = read_bounded(path, CA_BUNDLE_LIMIT)
        .map_err(|e| invalid(format!("cannot read the CA bundle: {e}")))?
        .ok_or_else(|| {
            invalid(format!(
                "the CA bundle is larger than {} MiB",
                CA_BUNDLE_LIMIT >> 20
            ))
        })?;
    let certs = pem_certificates(&pem).map_err(|e| invalid(format!("the CA bundle is {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            "the CA bundle holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// The certificates of every PEM file in the directories of `value` (`SSL_CERT_DIR`, split as
/// `PATH` is), each file read once whatever its name (`c_rehash`'s `<hash>.0` links and plain
/// `*.pem` alike), duplicates dropped.
///
/// A file that is not PEM, or holds no certificate, is skipped, as OpenSSL skips what it cannot
/// use there; a directory that cannot be listed, more than 64 MiB in all, or no certificate at
/// all is an [`Error::InvalidEnv`] naming `SSL_CERT_DIR`.
pub(crate) fn load_ca_dir(value: &OsString) -> Result<Vec<Certificate<'static>>> {
    let invalid = |reason: String| Error::InvalidEnv {
        var: CA_DIR_VAR.to_owned(),
        value: value.to_string_lossy().into_owned(),
        reason,
    };
    let mut certs: Vec<Certificate<'static>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let (mut total, mut entries, mut skipped) = (0u64, 0usize, 0usize);
    for dir in std::env::split_paths(value).filter(|d| !d.as_os_str().is_empty()) {
        let list = std::fs::read_dir(&dir).map_err(|e| {
            invalid(format!(
                "cannot list the CA directory {}: {e}",
                dir.display()
            ))
        })?;
        let mut paths: Vec<PathBuf> = Vec::new();
        for entry in list {
            let entry = entry.map_err(|e| {
                invalid(format!(
                    "cannot list the CA directory {}: {e}",
                    dir.display()
                ))
            })?;
            entries += 1;
            if entries > CA_DIR_ENTRIES_LIMIT {
                return Err(invalid(format!(
                    "the CA directories hold more than {CA_DIR_ENTRIES_LIMIT} entries"
                )));
            }
            paths.push(entry.path());
        }
        paths.sort();
        for path in paths {
            // Symbolic links are followed (c_rehash's links); folders and the like skipped.
            let Ok(meta) = std::fs::metadata(&path) else {
                skipped += 1;
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            total += meta.len();
            if total > CA_BUNDLE_LIMIT {
                return Err(invalid(format!(
                    "the CA directories hold more than {} MiB of files",
                    CA_BUNDLE_LIMIT >> 20
                )));
            }
            let found = read_bounded(&path, CA_BUNDLE_LIMIT)
                .ok()
                .flatten()
                .and_then(|pem| pem_certificates(&pem).ok());
            match found {
                Some(found) if !found.is_empty() => {
                    for c in found {
                        if seen.insert(c.der().to_vec()) {
                            certs.push(c);
                        }
                    }
                }
                _ => skipped += 1,
            }
        }
    }
    if certs.is_empty() {
        return Err(invalid(format!(
            "no PEM certificate (-----BEGIN CERTIFICATE-----) in the CA directory \
             ({skipped} files skipped: unreadable, not PEM, or without a certificate)"
        )));
    }
    Ok(certs)
}

/// The TLS settings: the roots chosen by [`ca_source_from`] over this process's environment.
pub(crate) fn tls_config() -> Result<TlsConfig> {
    let roots = match ca_source_from(|v| std::env::var_os(v)) {
        CaSource::Bundle(var, path) => RootCerts::new_with_certs(&load_ca_bundle(var, &path)?),
        CaSource::Dir(dirs) => RootCerts::new_with_certs(&load_ca_dir(&dirs)?),
        CaSource::WebPki => RootCerts::WebPki,
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
            // Each hop is checked by `send` (credentials, https to http).
            .max_redirects(0)
            // The stored bytes, never an encoding of them (whatever ureq's features).
            .accept_encoding("identity")
            .build();
        // ureq's default chain (CONNECT proxy, TCP, rustls) with a stoppable transport over TCP.
        let connector =
            ().chain(ConnectProxyConnector::default())
                .chain(TcpConnector::default())
                .chain(Stoppable)
                .chain(RustlsConnector::default());
        Ok(Client {
            agent: Agent::with_parts(config, connector, LiteralIpResolver::default()),
            counters: Arc::default(),
            stream: Arc::default(),
        })
    }

    /// What the server's answers have said of byte ranges so far.
    pub fn range_support(&self) -> RangeSupport {
        match self.counters.ranges.load(Ordering::Relaxed) {
            RANGES_HONOURED => RangeSupport::Honoured,
            RANGES_IGNORED => RangeSupport::Ignored,
            _ => RangeSupport::Unknown,
        }
    }

    /// Records what an answer said of ranges.
    pub(crate) fn set_range_support(&self, support: RangeSupport) {
        let v = match support {
            RangeSupport::Unknown => return,
            RangeSupport::Honoured => RANGES_HONOURED,
            RangeSupport::Ignored => RANGES_IGNORED,
        };
        self.counters.ranges.store(v, Ordering::Relaxed);
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
        let _watch = Watch::new(t.stop);
        let mut last = None;
        for n in 1..=policy.max_attempts {
            if t.stopped() {
                return Err(Error::Cancelled);
            }
            match attempt(&policy) {
                Ok(v) => return Ok(v),
                // A request stopped mid-attempt fails as cancelled, whatever the socket said.
                Err(_) if t.stopped() => return Err(Error::Cancelled),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::Retry(cause)) => {
                    if n < policy.max_attempts {
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        let delay = (BACKOFF_BASE_MS << (n - 1).min(4)).min(BACKOFF_MAX_MS);
                        let request = format!("{} {}", t.what(method), t.shown);
                        eprintln!(
                            "{}",
                            retry_record(cause, delay, n, policy.max_attempts, &request)
                        );
                        if !sleep_unless_stopped(Duration::from_millis(delay), t) {
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

    /// `HEAD`: the `Content-Length` of the object.
    pub fn head_size(&self, t: &Target<'_>) -> Result<u64> {
        self.retrying(t, "HEAD", |p| {
            let resp = self.send(t, "HEAD", p)?;
            match header_str(&resp, "accept-ranges").map(|v| v.trim().to_ascii_lowercase()) {
                Some(v) if v == "none" => self.set_range_support(RangeSupport::Ignored),
                Some(v) if v.split(',').any(|u| u.trim() == "bytes") => {
                    self.set_range_support(RangeSupport::Honoured)
                }
                _ => {}
            }
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
            let status = ranged_status(&resp);
            self.set_range_support(match status {
                206 => RangeSupport::Honoured,
                200 => RangeSupport::Ignored,
                _ => RangeSupport::Unknown,
            });
            let size = if status == 206 {
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
            if status == 206 {
                // Read the one byte and the body's end, so that the connection is reused.
                // (At most two reads: a server that sends more is not waited for.)
                let mut one = [0u8; 1];
                let mut reader = resp.body_mut().as_reader();
                for _ in 0..2 {
                    if !matches!(reader.read(&mut one), Ok(n) if n > 0) {
                        break;
                    }
                }
            }
            Ok(size)
        })
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

    /// `GET` of `dst.len()` bytes at `offset` into `dst`. With a range (`t.range`), a `206`
    /// must carry exactly that range (`Content-Range` start, end and total); a `200` is the
    /// whole object, which serves the range too: the bytes before `offset` are read through
    /// `dst` (overwritten, nothing else kept), then `dst.len()` bytes; the rest of the body is
    /// kept open for a read that continues there (the next chunk of a read into GPU memory).
    /// Without a range, the URL itself selects the bytes (WebHDFS `op=OPEN&offset&length`).
    pub fn get_into(
        &self,
        t: &Target<'_>,
        offset: u64,
        dst: &mut [u8],
        progress: &AtomicU64,
    ) -> Result<()> {
        let len = dst.len();
        if t.range.is_some() && self.range_support() == RangeSupport::Ignored {
            if let Some(done) = self.continue_whole_body(t, offset, dst, progress) {
                return done;
            }
        }
        self.retrying(t, "GET", |p| {
            let resp = self.send(t, "GET", p)?;
            let status = if t.range.is_some() { ranged_status(&resp) } else { resp.status().as_u16() };
            let announced = header_u64(&resp, "content-length");
            refuse_encoded(t, "GET", &resp)?;
            let no_ranges = |n: Option<u64>| {
                Attempt::Fail(t.error(
                    RemoteFailure::NoRangeSupport,
                    format!(
                        "{}: the server answered {status} with {} bytes instead of the range; \
                         maybe the server doesn't support file ranges?",
                        t.what("GET"),
                        n.map_or("an unknown number of".into(), |n| n.to_string())
                    ),
                ))
            };
            // A whole object answering a ranged GET: the range is served from it.
            let whole = t.range.is_some() && status == 200;
            let skip = match (t.range.is_some(), status) {
                (true, 206) => {
                    self.set_range_support(RangeSupport::Honoured);
                    check_content_range(t, &resp, offset, len)?;
                    0
                }
                (true, 200) => {
                    self.set_range_support(RangeSupport::Ignored);
                    // The whole object: it serves the range unless it is too short for it.
                    if announced.is_some_and(|n| n < offset + len as u64) {
                        return Err(no_ranges(announced));
                    }
                    offset
                }
                (true, _) => return Err(no_ranges(announced)),
                (false, 200) => 0,
                (false, _) => {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::BadResponse,
                        format!("{}: unexpected HTTP status {status}", t.what("GET")),
                    )))
                }
            };
            match announced {
                _ if whole => {}
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
            let mut reader = resp.into_body().into_reader();
            // The whole object's bytes before the range, through `dst` (not counted as read).
            let mut skipped = 0u64;
            while skipped < skip {
                let n = (skip - skipped).min(len as u64) as usize;
                fill(&mut reader, &mut dst[..n], t, p, |_| {}).map_err(|(e, _)| e)?;
                skipped += n as u64;
            }
            let counted = |n: usize| {
                progress.fetch_add(n as u64, Ordering::Relaxed);
                self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            };
            if let Err((e, filled)) = fill(&mut reader, dst, t, p, counted) {
                // A retry reads the range again: take back what this attempt counted.
                progress.fetch_sub(filled as u64, Ordering::Relaxed);
                return Err(e);
            }
            let end = offset + len as u64;
            if status == 206 || t.range.is_none() {
                // One read past the range: ureq hands a connection back to the agent's pool only
                // once a read has returned the body's end (without it, every range opens a new
                // connection: docs/performance.md, "Remote requests"). A length-delimited body
                // answers 0 at once; a longer chunked body means the range was ignored.
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
            } else if announced == Some(end) {
                // The whole object ends with the range: its end lets the connection be reused.
                let _ = reader.read(&mut [0u8; 1]);
            } else {
                // The rest of the whole object waits for the read that continues it.
                *lock(&self.stream) = Some(WholeBody {
                    url: t.url.to_owned(),
                    next: end,
                    end: announced,
                    reader,
                });
            }
            Ok(())
        })
    }

    /// Serves `dst.len()` bytes at `offset` from the whole-object body left open by an earlier
    /// read that ended there; `None` where there is none (or it fails: a new GET then asks).
    fn continue_whole_body(
        &self,
        t: &Target<'_>,
        offset: u64,
        dst: &mut [u8],
        progress: &AtomicU64,
    ) -> Option<Result<()>> {
        let mut body = lock(&self.stream)
            .take()
            .filter(|b| b.url == t.url && b.next == offset)?;
        let policy = Policy::current().ok()?;
        let _watch = Watch::new(t.stop);
        let counted = |n: usize| {
            progress.fetch_add(n as u64, Ordering::Relaxed);
            self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        };
        match fill(&mut body.reader, dst, t, &policy, counted) {
            Ok(()) => {
                body.next += dst.len() as u64;
                if body.end.is_none_or(|e| body.next < e) {
                    *lock(&self.stream) = Some(body);
                }
                Some(Ok(()))
            }
            Err((_, filled)) => {
                progress.fetch_sub(filled as u64, Ordering::Relaxed);
                t.stopped().then_some(Err(Error::Cancelled))
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads `dst.len()` bytes of a body into `dst`, telling `counted` of each read; or the
/// attempt's end with the bytes read so far.
fn fill(
    reader: &mut impl Read,
    dst: &mut [u8],
    t: &Target<'_>,
    p: &Policy,
    mut counted: impl FnMut(usize),
) -> std::result::Result<(), (Attempt, usize)> {
    let len = dst.len();
    let ended = |filled: usize, extra: String| {
        Attempt::Fail(t.error(
            RemoteFailure::ShortBody,
            format!(
                "{}: the body ended after {filled} of {len} bytes{extra}",
                t.what("GET")
            ),
        ))
    };
    let mut filled = 0;
    while filled < len {
        if t.stopped() {
            return Err((Attempt::Fail(Error::Cancelled), filled));
        }
        match reader.read(&mut dst[filled..]) {
            Ok(0) => return Err((ended(filled, String::new()), filled)),
            Ok(n) => {
                filled += n;
                counted(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let attempt = match ureq::Error::from(e) {
                    // A connection closed or reset mid-body.
                    ureq::Error::Io(io) if io.kind() != io::ErrorKind::TimedOut => {
                        ended(filled, format!(" ({io})"))
                    }
                    other => classify(t, "GET", other, p),
                };
                return Err((attempt, filled));
            }
        }
    }
    Ok(())
}

/// Refuses a body sent with a `Content-Encoding` (gzip, br, ...): its bytes are not the object's
/// (ureq decodes nothing without its `gzip`/`brotli` features, and gpufile asks for `identity`).
fn refuse_encoded(
    t: &Target<'_>,
    method: &str,
    resp: &Response<Body>,
) -> std::result::Result<(), Attempt> {
    match header_str(resp, "content-encoding") {
        Some(e) if !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity") => {
            Err(Attempt::Fail(t.error(
                RemoteFailure::BadResponse,
                format!(
                    "{}: the server sent the body with Content-Encoding: {}, not the stored bytes \
                     (gpufile asks for Accept-Encoding: identity and decodes no body)",
                    t.what(method),
                    e.trim()
                ),
            )))
        }
        _ => Ok(()),
    }
}

/// `Content-Range: bytes <start>-<end>/<total or *>` → (start, end, total).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        n => Some(n.parse::<u64>().ok()?),
    };
    (a <= b && total.is_none_or(|n| b < n)).then_some((a, b, total))
}

/// The status of an answer to a ranged `GET`, where a `200` that carries a `Content-Range`
/// counts as the `206` it means: some S3-compatible servers (rclone's `serve s3`, built on
/// gofakes3) send the range asked for with status 200 and its `Content-Range`. The range is then
/// checked as for a `206`; a `200` without one, or with one of the whole object, is the whole
/// object.
fn ranged_status(resp: &Response<Body>) -> u16 {
    ranged_status_of(
        resp.status().as_u16(),
        header_str(resp, "content-range").as_deref(),
    )
}

fn ranged_status_of(status: u16, content_range: Option<&str>) -> u16 {
    let partial = content_range
        .and_then(parse_content_range)
        .is_some_and(|(a, b, total)| !(a == 0 && total == Some(b + 1)));
    if status == 200 && partial {
        206
    } else {
        status
    }
}

/// A `206` answer must carry the range asked for, of an object of the size known.
fn check_content_range(
    t: &Target<'_>,
    resp: &Response<Body>,
    offset: u64,
    len: usize,
) -> std::result::Result<(), Attempt> {
    let cr = header_str(resp, "content-range").unwrap_or_default();
    let end = offset + len as u64 - 1;
    let fits = parse_content_range(&cr).is_some_and(|(a, b, total)| {
        a == offset && b == end && (total.is_none() || t.size.is_none() || total == t.size)
    });
    if fits {
        return Ok(());
    }
    let size = t.size.map_or("<size>".to_owned(), |n| n.to_string());
    Err(Attempt::Fail(t.error(
        RemoteFailure::BadResponse,
        format!(
            "{}: the server answered with Content-Range {cr:?}, not \"bytes {offset}-{end}/{size}\"",
            t.what("GET")
        ),
    )))
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

/// Sleeps `delay` unless the target's request stops first; false if it stopped.
fn sleep_unless_stopped(delay: Duration, t: &Target<'_>) -> bool {
    let until = Instant::now() + delay;
    loop {
        if t.stopped() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(STOP_POLL));
    }
}

/// A `ureq` error as an attempt's outcome: timeouts are retried (as in KvikIO), the rest final.
fn classify(t: &Target<'_>, method: &str, e: ureq::Error, policy: &Policy) -> Attempt {
    match e {
        ureq::Error::Timeout(_) => Attempt::Retry(RetryCause::Timeout(policy.timeout.as_secs())),
        ureq::Error::Io(ref io) if io.kind() == io::ErrorKind::TimedOut => {
            Attempt::Retry(RetryCause::Timeout(policy.timeout.as_secs()))
        }
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

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn roots_follow_kvikio_s_order_then_aws_ca_bundle() {
        let all = lookup(&[
            ("CURL_CA_BUNDLE", "/c.pem"),
            ("SSL_CERT_FILE", "/f.pem"),
            ("SSL_CERT_DIR", "/d"),
            ("AWS_CA_BUNDLE", "/a.pem"),
        ]);
        assert_eq!(
            ca_source_from(all),
            CaSource::Bundle("CURL_CA_BUNDLE", "/c.pem".into())
        );
        let file_and_dir = lookup(&[("SSL_CERT_FILE", "/f.pem"), ("SSL_CERT_DIR", "/d")]);
        assert_eq!(
            ca_source_from(file_and_dir),
            CaSource::Bundle("SSL_CERT_FILE", "/f.pem".into())
        );
        let dir_and_aws = lookup(&[("SSL_CERT_DIR", "/d"), ("AWS_CA_BUNDLE", "/a.pem")]);
        assert_eq!(ca_source_from(dir_and_aws), CaSource::Dir("/d".into()));
        let aws = lookup(&[("SSL_CERT_DIR", ""), ("AWS_CA_BUNDLE", "/a.pem")]);
        assert_eq!(
            ca_source_from(aws),
            CaSource::Bundle("AWS_CA_BUNDLE", "/a.pem".into())
        );
        assert_eq!(ca_source_from(lookup(&[])), CaSource::WebPki);
    }

    /// The two certificates of the test bundle, each as its own PEM text.
    fn two_pems() -> (String, String) {
        let bundle = std::fs::read_to_string(data("test-ca-bundle.pem")).unwrap();
        let end = "-----END CERTIFICATE-----";
        let mut parts = bundle
            .split_inclusive(end)
            .filter(|p| p.contains("BEGIN CERTIFICATE"));
        let pem = |p: &str| format!("{}\n", &p[p.find("-----BEGIN").unwrap()..]);
        let (a, b) = (parts.next().unwrap(), parts.next().unwrap());
        (pem(a), pem(b))
    }

    #[test]
    fn a_ca_directory_gives_every_certificate_once() {
        let (a, b) = two_pems();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.pem"), &a).unwrap();
        std::fs::write(d.join("b.crt"), &b).unwrap();
        // c_rehash's layout: hash-named links to the same certificates.
        std::os::unix::fs::symlink(d.join("a.pem"), d.join("5ed36f99.0")).unwrap();
        std::fs::write(d.join("README"), "not a certificate").unwrap();
        std::fs::write(d.join("bad.pem"), "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        let certs = load_ca_dir(&d.as_os_str().to_owned()).unwrap();
        assert_eq!(certs.len(), 2);
        let bundle = load_ca_bundle(VAR, &data("test-ca-bundle.pem")).unwrap();
        let ders = |c: &[Certificate<'_>]| {
            let mut v: Vec<Vec<u8>> = c.iter().map(|c| c.der().to_vec()).collect();
            v.sort();
            v
        };
        assert_eq!(ders(&certs), ders(&bundle));
    }

    #[test]
    fn ca_directories_are_colon_separated() {
        let (a, b) = two_pems();
        let (_d1, p1) = scratch("one.pem", a.as_bytes());
        let (_d2, p2) = scratch("two.pem", b.as_bytes());
        let value = std::env::join_paths([p1.parent().unwrap(), p2.parent().unwrap()]).unwrap();
        assert_eq!(load_ca_dir(&value).unwrap().len(), 2);
    }

    #[test]
    fn a_ca_directory_without_certificates_or_absent_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("key.pem"),
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let value = dir.path().as_os_str().to_owned();
        let err = load_ca_dir(&value).unwrap_err();
        assert!(matches!(err, Error::InvalidEnv { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("SSL_CERT_DIR") && text.contains("no PEM certificate"),
            "{text}"
        );
        assert!(text.contains("1 files skipped"), "{text}");
        let absent = dir.path().join("absent").into_os_string();
        let text = load_ca_dir(&absent).unwrap_err().to_string();
        assert!(text.contains("cannot list the CA directory"), "{text}");
    }

    #[test]
    fn retry_records_keep_kvikio_s_words_after_the_name() {
        assert_eq!(
            retry_record(RetryCause::Status(503), 500, 1, 2, "HEAD http://h/a"),
            "gpufile: Got HTTP code 503. Retrying after 500ms (attempt 1 of 2). Request: HEAD http://h/a"
        );
        assert_eq!(
            retry_record(RetryCause::Timeout(1), 1000, 2, 3, "GET of bytes 0-9 http://h/a"),
            "gpufile: Timeout error. Retrying after 1000ms (attempt 2 of 3). Request: GET of bytes 0-9 http://h/a"
        );
        assert_eq!(
            RetryCause::Timeout(1).reason(),
            "Operation timed out after 1 s (http_timeout)"
        );
    }

    #[test]
    fn a_200_with_the_range_s_content_range_counts_as_206() {
        assert_eq!(ranged_status_of(200, Some("bytes 100-199/1000")), 206);
        assert_eq!(ranged_status_of(200, Some("bytes 5-9/*")), 206);
        // The whole object, or no Content-Range: a whole body.
        assert_eq!(ranged_status_of(200, Some("bytes 0-999/1000")), 200);
        assert_eq!(ranged_status_of(200, None), 200);
        assert_eq!(ranged_status_of(200, Some("nonsense")), 200);
        assert_eq!(ranged_status_of(206, Some("bytes 0-9/10")), 206);
        assert_eq!(ranged_status_of(416, Some("bytes */10")), 416);
    }

    #[test]
    fn content_ranges_parse_start_end_and_total() {
        assert_eq!(
            parse_content_range("bytes 10-19/100"),
            Some((10, 19, Some(100)))
        );
        assert_eq!(parse_content_range(" bytes 0-0/*"), Some((0, 0, None)));
        for bad in [
            "bytes 10-19",
            "bytes 19-10/100",
            "bytes 10-100/100",
            "bytes 10-19/x",
            "items 10-19/100",
            "bytes -19/100",
            "",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
    }

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

    #[test]
    fn ip_literals_resolve_without_a_lookup_past_any_deadline() {
        use ureq::unversioned::transport::time::Duration as Deadline;
        let config = ureq::config::Config::default();
        // A deadline already spent: a lookup would time out; an IP literal needs none.
        let spent = NextTimeout {
            after: Deadline::Exact(Duration::ZERO),
            ..NextTimeout::default()
        };
        for (uri, want) in [
            ("http://127.0.0.1:8080/a", "127.0.0.1:8080"),
            ("https://[::1]/a", "[::1]:443"),
        ] {
            let uri: ureq::http::Uri = uri.parse().unwrap();
            let addrs = LiteralIpResolver::default()
                .resolve(&uri, &config, spent)
                .unwrap();
            assert_eq!(addrs[0].to_string(), want);
        }
    }
}
