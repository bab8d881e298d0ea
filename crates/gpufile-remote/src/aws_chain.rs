//! The AWS SDK's credential and region chain (`aws-config`'s own providers) for S3 objects
//! given no key: shared config and credentials files (profiles, `role_arn` through STS,
//! `credential_process`), web identity through STS, container credentials (ECS, EKS Pod
//! Identity) and the EC2 instance metadata service (IMDSv2). The providers' HTTP goes over a
//! ureq agent with the same TLS roots as object reads; their futures run on a small tokio
//! runtime of the chain's own, entered only while credentials are fetched.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
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
    rt.block_on(async {
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
        Ok(chain.region().await.map(|r| r.to_string()))
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
/// configured and fails stops the chain with its error.
fn fetch(
    runtime: &tokio::runtime::Runtime,
    providers: &[(&'static str, SharedCredentialsProvider)],
) -> Result<Cached> {
    let mut skipped = Vec::new();
    for (name, p) in providers {
        match runtime.block_on(p.provide_credentials()) {
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
            Err(e @ CredentialsError::CredentialsNotLoaded(_)) => {
                skipped.push(format!("{name} ({})", causes(&e)));
            }
            Err(e) => {
                skipped.push(format!("{name} (failed: {})", causes(&e)));
                return Err(no_credentials(&skipped));
            }
        }
    }
    Err(no_credentials(&skipped))
}

/// The error of a chain that gave no credentials: what to give, and each source tried with
/// why it gave none (the last one's failure where a configured source failed).
fn no_credentials(tried: &[String]) -> Error {
    Error::InvalidArgument(format!(
        "S3: no credentials: must provide `aws_access_key_id` and `aws_secret_access_key`, \
         or configure an AWS credential source; sources tried: {BEFORE_CHAIN}, {}",
        tried.join(", ")
    ))
}

/// An error and its causes, by their messages only: the SDK's debug forms carry raw responses
/// (an IMDS session token, a credentials body), which must not reach an error.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        next = cause.source();
    }
    text
}

/// The providers' HTTP client: blocking ureq requests inside their futures, which is what a
/// chain driven by `block_on` on one thread wants, with the timeouts the providers ask for
/// (IMDS's one-second connect timeout keeps a machine off EC2 from waiting).
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
        let config = ureq::Agent::config_builder()
            .tls_config(self.tls.clone())
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(settings.connect_timeout())
            .timeout_recv_body(settings.read_timeout())
            .timeout_recv_response(settings.read_timeout())
            .user_agent(concat!("gpufile/", env!("CARGO_PKG_VERSION")))
            .build();
        SharedHttpConnector::new(UreqConnector(config.into()))
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
