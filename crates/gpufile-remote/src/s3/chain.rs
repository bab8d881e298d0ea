//! The AWS SDK's credential and region chain (`aws-config`'s own providers) for S3 objects
//! given no key: shared config and credentials files (profiles, `role_arn` through STS,
//! `credential_process`), web identity through STS, container credentials (ECS, EKS Pod
//! Identity) and the EC2 instance metadata service (IMDSv2). The providers' HTTP goes over a
//! ureq agent with the same TLS roots as object reads; their futures run on a small tokio
//! runtime of the chain's own, entered only while credentials are fetched.
//!
//! Every fetch is bounded as the SDK bounds it (IMDS: 1 s to connect and to answer; container
//! credentials: 2 s and 5 s; STS: 3.1 s to connect), and a request without a read timeout of
//! the SDK's (STS) gets [`READ_TIMEOUT`]. A `credential_process` has no bound, as in the SDKs (it
//! may wait for a person), but a fetch run under [`crate::stop::with_stop`] ends soon after its
//! flag is set (Ctrl-C), the helper and what it started killed. Errors name the source and say
//! why it failed, never a helper's stderr or a server's raw answer.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use aws_config::ecs::EcsCredentialsProvider;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_config::web_identity_token::WebIdentityTokenCredentialsProvider;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use gpufile::{Error, Result};

use crate::error::{RemoteError, RemoteFailure};

/// The sources before the chain's, in the order they are tried (for the error naming them).
pub(crate) const BEFORE_CHAIN: &str =
    "arguments, environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)";

/// The chain's sources in the AWS SDK for Rust's order, as the path report and errors name them.
const SOURCES: [&str; 4] = [
    "shared config/credentials files",
    "web identity (STS)",
    "container credentials",
    "EC2 instance metadata (IMDSv2)",
];

/// The read timeout of a provider's request that the SDK gives none (STS: the SDK bounds only
/// the connection, 3.1 s), so that an endpoint that accepts and never answers ends the fetch.
/// The SDK's own read timeout of container credentials; STS answers in well under a second,
/// and the SDK tries a timed-out request 3 times.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What a failed source's message keeps at most, in characters.
const REASON_LIMIT: usize = 300;

/// Temporary credentials are fetched again this long before they expire at the latest, or
/// halfway through a shorter life, so that no request is signed with an expired key.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

struct Cached {
    credentials: Credentials,
    source: &'static str,
    refresh_at: Option<SystemTime>,
}

/// The chain, shared by the clones of an S3 object; it holds the current credentials and
/// fetches new ones when they near their expiry.
pub(crate) struct Chain {
    providers: Vec<(&'static str, SharedCredentialsProvider)>,
    runtime: tokio::runtime::Runtime,
    cached: Mutex<Cached>,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The credentials stay out.
        f.debug_struct("Chain").finish_non_exhaustive()
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::InvalidArgument(format!("AWS credential chain: {e}")))
}

fn provider_config() -> Result<ProviderConfig> {
    Ok(ProviderConfig::without_region().with_http_client(UreqClient::new()?))
}

/// The region of the SDK's region chain (`AWS_REGION`, the profile's `region`, IMDS).
pub(crate) fn region() -> Result<Option<String>> {
    let rt = runtime()?;
    let conf = provider_config()?;
    let found = until_stopped(&rt, async {
        let chain = aws_config::meta::region::RegionProviderChain::first_try(
            aws_config::environment::region::EnvironmentVariableRegionProvider::new(),
        )
        .or_else(
            aws_config::profile::region::ProfileFileRegionProvider::builder()
                .configure(&conf)
                .build(),
        )
        .or_else(
            aws_config::imds::region::ImdsRegionProvider::builder()
                .configure(&conf)
                .build(),
        );
        chain.region().await.map(|r| r.to_string())
    });
    found.ok_or(Error::Cancelled)
}

/// Runs `fut` on `runtime` until it ends, or until this thread's stop flag
/// ([`crate::stop::with_stop`]) is set (`None`: `fut` is dropped unfinished). The providers'
/// HTTP requests block inside their futures and look at the flag themselves
/// ([`UreqConnector`]); the flag is looked at between polls every [`crate::stop::STOP_POLL`]
/// (a process awaited, a retry's backoff).
fn until_stopped<F: Future>(runtime: &tokio::runtime::Runtime, fut: F) -> Option<F::Output> {
    let stop = crate::stop::current();
    runtime.block_on(async move {
        let mut fut = std::pin::pin!(fut);
        let mut watch = std::pin::pin!(async move {
            match stop {
                Some(s) => {
                    while !s.is_set() {
                        tokio::time::sleep(crate::stop::STOP_POLL).await;
                    }
                }
                None => std::future::pending().await,
            }
        });
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            watch.as_mut().poll(cx).map(|()| None)
        })
        .await
    })
}

impl Chain {
    /// The chain's first source that gives credentials; an error naming every source tried
    /// when none does.
    fn load(region: &str) -> Result<Arc<Self>> {
        let runtime = runtime()?;
        let conf = provider_config()?.with_region(Some(aws_config::Region::new(region.to_owned())));
        let providers: Vec<(&'static str, SharedCredentialsProvider)> = vec![
            (
                SOURCES[0],
                SharedCredentialsProvider::new(
                    ProfileFileCredentialsProvider::builder()
                        .configure(&conf)
                        .build(),
                ),
            ),
            (
                SOURCES[1],
                SharedCredentialsProvider::new(
                    WebIdentityTokenCredentialsProvider::builder()
                        .configure(&conf)
                        .build(),
                ),
            ),
            (
                SOURCES[2],
                SharedCredentialsProvider::new(
                    EcsCredentialsProvider::builder().configure(&conf).build(),
                ),
            ),
            (
                SOURCES[3],
                SharedCredentialsProvider::new(
                    ImdsCredentialsProvider::builder().configure(&conf).build(),
                ),
            ),
        ];
        let first = fetch(&runtime, &providers)?;
        Ok(Arc::new(Chain {
            providers,
            runtime,
            cached: Mutex::new(first),
        }))
    }

    /// The chain for `region` and this process's AWS environment, shared by every object
    /// opened under them: the shards of a checkpoint ask STS or IMDS once, not once each.
    /// A change of any `AWS_*` variable or `HOME` (another profile, another token file) makes
    /// a new one; a chain that failed is not kept.
    pub(crate) fn shared(region: &str) -> Result<Arc<Self>> {
        static CHAINS: OnceLock<Mutex<HashMap<u64, Arc<Chain>>>> = OnceLock::new();
        let mut vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("AWS_") || k == "HOME")
            .collect();
        vars.sort();
        // A hash, so that no value (a session token) is kept as such.
        let mut h = DefaultHasher::new();
        (region, &vars).hash(&mut h);
        let key = h.finish();
        let chains = CHAINS.get_or_init(Mutex::default);
        if let Some(chain) = chains.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(chain.clone());
        }
        let chain = Self::load(region)?;
        chains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, chain.clone());
        Ok(chain)
    }

    /// Which source the credentials come from (never the credentials).
    pub(crate) fn source(&self) -> &'static str {
        self.cached.lock().unwrap_or_else(|p| p.into_inner()).source
    }

    /// The current credentials, fetched again from the chain when they near their expiry.
    pub(crate) fn credentials(&self) -> Result<Credentials> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if cached.refresh_at.is_some_and(|t| SystemTime::now() >= t) {
            *cached = fetch(&self.runtime, &self.providers)?;
        }
        Ok(cached.credentials.clone())
    }
}

/// The SDK chain's rule: a source that is not configured passes to the next; one that is
/// configured and fails stops the chain with its error, a [`RemoteFailure::Credentials`]
/// ([`for_object`] gives it the object's URL). A profile named by `AWS_PROFILE` is a source
/// configured, whether or not a config file exists (boto3's `ProfileNotFound`); the instance
/// metadata service is one only where `AWS_EC2_METADATA_SERVICE_ENDPOINT` names it. Stopped
/// ([`crate::stop::with_stop`]), [`Error::Cancelled`], with any `credential_process` still
/// running killed.
fn fetch(
    runtime: &tokio::runtime::Runtime,
    providers: &[(&'static str, SharedCredentialsProvider)],
) -> Result<Cached> {
    let mut skipped = Vec::new();
    for (name, p) in providers {
        if crate::stop::stopped() {
            return Err(Error::Cancelled);
        }
        let before = crate::children::of_this_thread();
        let Some(got) = until_stopped(runtime, p.provide_credentials()) else {
            if crate::children::kill_new(&before) > 0 {
                // Lets the runtime reap the killed helper (tokio's orphan queue).
                runtime.block_on(async { tokio::time::sleep(crate::stop::STOP_POLL).await });
            }
            return Err(Error::Cancelled);
        };
        match got {
            Ok(credentials) => {
                let now = SystemTime::now();
                let refresh_at = credentials.expiry().map(|exp| {
                    let life = exp.duration_since(now).unwrap_or_default();
                    let early = now + life / 2;
                    early.max(exp.checked_sub(REFRESH_BEFORE).unwrap_or(early))
                });
                return Ok(Cached {
                    credentials,
                    source: name,
                    refresh_at,
                });
            }
            Err(_) if crate::stop::stopped() => return Err(Error::Cancelled),
            Err(e @ CredentialsError::CredentialsNotLoaded(_)) => {
                if *name == SOURCES[0] {
                    // The SDK for Rust passes over a profile that does not exist.
                    if let Some(profile) = named_profile().filter(|p| !profile_defined(p)) {
                        return Err(failed(
                            name,
                            format!(
                                "the profile {profile:?} named by AWS_PROFILE does not exist \
                                 (no section of the config or credentials file defines it)"
                            ),
                        ));
                    }
                }
                skipped.push(format!("{name} ({})", summary(&e)));
            }
            // The instance metadata service is asked wherever nothing says otherwise: a machine
            // off EC2 whose network answers at its address (a refusal, an error) has no source
            // configured, as boto3 sees it.
            Err(e) if *name == SOURCES[3] && !imds_configured() => {
                skipped.push(format!("{name} (failed: {})", summary(&e)));
            }
            Err(e) => return Err(failed(name, summary(&e))),
        }
    }
    Err(no_credentials(&skipped))
}

/// Whether the environment points at an instance metadata service
/// (`AWS_EC2_METADATA_SERVICE_ENDPOINT`), making it a source configured.
fn imds_configured() -> bool {
    std::env::var_os("AWS_EC2_METADATA_SERVICE_ENDPOINT").is_some_and(|v| !v.is_empty())
}

/// `AWS_PROFILE`, where it names a profile.
fn named_profile() -> Option<String> {
    std::env::var("AWS_PROFILE")
        .ok()
        .filter(|p| !p.trim().is_empty())
}

/// Whether the config or credentials file (`AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`,
/// else `~/.aws/config`, `~/.aws/credentials`) has a section for `profile` (`[profile <name>]`
/// or `[<name>]`).
fn profile_defined(profile: &str) -> bool {
    let file = |var: &str, default: &str| -> Option<std::path::PathBuf> {
        let home = || std::env::var_os("HOME").map(std::path::PathBuf::from);
        match std::env::var(var).ok().filter(|v| !v.is_empty()) {
            Some(v) => match v.strip_prefix("~/") {
                Some(rest) => Some(home()?.join(rest)),
                None => Some(v.into()),
            },
            None => Some(home()?.join(".aws").join(default)),
        }
    };
    [
        file("AWS_CONFIG_FILE", "config"),
        file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
    ]
    .into_iter()
    .flatten()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    .any(|text| {
        text.lines().any(|line| {
            let Some(header) = line.trim().strip_prefix('[') else {
                return false;
            };
            let Some((inner, _)) = header.split_once(']') else {
                return false;
            };
            let inner = inner.trim();
            let inner = inner
                .strip_prefix("profile")
                .filter(|rest| rest.starts_with(char::is_whitespace))
                .map_or(inner, str::trim);
            inner == profile
        })
    })
}

/// The error of a configured source that failed; its URL is the object's, given by
/// [`for_object`].
fn failed(source: &str, why: String) -> Error {
    RemoteError {
        url: String::new(),
        kind: RemoteFailure::Credentials,
        reason: format!("S3 credentials from {source}: {why}"),
    }
    .into()
}

/// `e` with the URL of the object whose credentials failed, where it is such a failure.
pub(crate) fn for_object(e: Error, url: &str) -> Error {
    match RemoteError::of(&e) {
        Some(r) if r.kind == RemoteFailure::Credentials && r.url.is_empty() => RemoteError {
            url: url.to_owned(),
            ..r.clone()
        }
        .into(),
        _ => e,
    }
}

/// Whether `e` is a configured AWS credential source's failure (not a cue to read anonymously).
pub(crate) fn is_source_failure(e: &Error) -> bool {
    RemoteError::of(e).is_some_and(|r| r.kind == RemoteFailure::Credentials)
}

/// The error of a chain that gave no credentials: what to give, and each source tried with
/// why it gave none.
fn no_credentials(tried: &[String]) -> Error {
    Error::InvalidArgument(format!(
        "S3: no credentials: must provide `aws_access_key_id` and `aws_secret_access_key`, \
         or configure an AWS credential source; sources tried: {BEFORE_CHAIN}, {}",
        tried.join(", ")
    ))
}

/// An error and its causes, by their messages only, each cut short of what may hold a
/// secret: a helper's stderr (the SDK copies a failed `credential_process`'s into its
/// message), a raw response (the SDK's IMDS error carries the response's debug form: headers,
/// body), anything past [`REASON_LIMIT`] characters; control characters dropped.
fn summary(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        let more = safe_message(&cause.to_string());
        if !more.is_empty() && !text.contains(&more) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&more);
        }
        next = cause.source();
    }
    if text.chars().count() > REASON_LIMIT {
        text = text.chars().take(REASON_LIMIT).collect::<String>() + "...";
    }
    text
}

/// One message of [`summary`].
fn safe_message(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    let mut text = message;
    let mut note = "";
    if let Some(at) = lower.find("stderr") {
        text = &message[..at];
        note = " (the process's stderr is not shown)";
    }
    // A debug form ("error response from IMDS (code: 500). Response { headers: .., body: .. }")
    // goes from the end of the sentence before it.
    if let Some(at) = text.find('{') {
        let head = &text[..at];
        text = head.rfind(". ").map_or(head, |end| &head[..end + 1]);
    }
    let text: String = text
        .chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim_end_matches([' ', '.', ',', ':'])
        .to_owned();
    match text.is_empty() {
        true => text,
        false => text + note,
    }
}

/// The providers' HTTP client: blocking ureq requests inside their futures, which is what a
/// chain driven by `block_on` on one thread wants, with the timeouts the providers ask for
/// (IMDS's one-second connect timeout keeps a machine off EC2 from waiting), [`READ_TIMEOUT`]
/// where they ask for none, and the stoppable transport of object reads: a request ends soon
/// after this thread's stop flag is set ([`crate::stop::with_stop`]).
#[derive(Debug, Clone)]
struct UreqClient {
    tls: ureq::tls::TlsConfig,
}

impl UreqClient {
    fn new() -> Result<Self> {
        Ok(UreqClient {
            tls: crate::tls_ca::tls_config()?,
        })
    }
}

impl HttpClient for UreqClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let read = Some(settings.read_timeout().unwrap_or(READ_TIMEOUT));
        let config = ureq::Agent::config_builder()
            .tls_config(self.tls.clone())
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(settings.connect_timeout())
            .timeout_recv_body(read)
            .timeout_recv_response(read)
            .user_agent(concat!("gpufile/", env!("CARGO_PKG_VERSION")))
            .build();
        SharedHttpConnector::new(UreqConnector(crate::http::transport::stoppable_agent(
            config,
        )))
    }
}

#[derive(Debug)]
struct UreqConnector(ureq::Agent);

impl HttpConnector for UreqConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let agent = self.0.clone();
        HttpConnectorFuture::new(async move { send(&agent, request) })
    }
}

fn send(
    agent: &ureq::Agent,
    request: HttpRequest,
) -> std::result::Result<HttpResponse, ConnectorError> {
    let other = |e: String| ConnectorError::other(e.into(), None);
    if crate::stop::stopped() {
        return Err(other("the credential fetch was stopped".into()));
    }
    let mut b = ureq::http::Request::builder()
        .method(request.method())
        .uri(request.uri());
    for (k, v) in request.headers() {
        b = b.header(k, v);
    }
    let body = request.body().bytes().unwrap_or_default().to_vec();
    let req = b.body(body).map_err(|e| other(e.to_string()))?;
    let resp = agent.run(req).map_err(|e| match e {
        ureq::Error::Timeout(_) => ConnectorError::timeout(e.into()),
        ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
            ConnectorError::io(e.into())
        }
        e => other(e.to_string()),
    })?;
    let status = resp.status().as_u16();
    let headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let bytes = resp
        .into_body()
        .read_to_vec()
        .map_err(|e| ConnectorError::io(e.into()))?;
    let status = StatusCode::try_from(status).map_err(|e| other(e.to_string()))?;
    let mut out = HttpResponse::new(status, SdkBody::from(bytes));
    for (k, v) in headers {
        out.headers_mut().insert(k, v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SDK's messages as aws-config 1.13 words them: what may hold a secret is cut, the
    /// exit status and the status code stay.
    #[test]
    fn a_summary_keeps_the_status_never_a_helpers_stderr_or_a_raw_answer() {
        let helper = "Error retrieving credentials: external process exited with code exit \
                      status: 1. Stderr: token-SECRET\n";
        assert_eq!(
            safe_message(helper),
            "Error retrieving credentials: external process exited with code exit status: 1 \
             (the process's stderr is not shown)"
        );
        let imds = "error response from IMDS (code: 500). Response { status: StatusCode(500), \
                    headers: {\"x-leak\": \"SECRET\"}, body: b\"SECRET\" }";
        assert_eq!(safe_message(imds), "error response from IMDS (code: 500)");
        let long = CredentialsError::provider_error("x".repeat(1000));
        assert_eq!(summary(&long).chars().count(), REASON_LIMIT + 3);
        assert_eq!(safe_message("a\u{1b}[31mb\r\nc"), "a[31mbc");
    }
}
