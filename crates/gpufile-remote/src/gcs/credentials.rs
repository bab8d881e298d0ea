//! Google credentials for `gs://` objects, found where Google's client libraries find
//! Application Default Credentials (ADC), and the OAuth 2.0 access tokens they give.
//!
//! The sources, in ADC's order; the first one present is used:
//! 1. `GOOGLE_APPLICATION_CREDENTIALS`: a JSON file holding a service-account key
//!    (`"type": "service_account"`: a JWT signed with the key (RS256) exchanged at the key's
//!    `token_uri`, RFC 7523) or authorized-user credentials (`"type": "authorized_user"`: the
//!    refresh-token grant). Set but unreadable or malformed is an error, not a fall-through.
//! 2. gcloud's well-known file, `application_default_credentials.json` in `$CLOUDSDK_CONFIG`
//!    (default `~/.config/gcloud`), written by `gcloud auth application-default login`; the
//!    same two types.
//! 3. The GCE metadata server (`GCE_METADATA_HOST`, else `metadata.google.internal`): asked
//!    when `GCE_METADATA_HOST` is set, or when the machine says it is a Compute Engine VM (its
//!    DMI product name starts with `Google`, the check google-auth makes on Linux) unless
//!    `NO_GCE_CHECK` is true. Nothing is looked up elsewhere, so that a machine without
//!    credentials waits on no DNS lookup or timeout.
//!
//! With none of them, objects are asked for anonymously (public objects read as before).
//! Tokens are kept in memory only, shared by every object opened with the same credentials,
//! and fetched again when less than 5 minutes (or half a short token's life) remain. Keys,
//! assertions, refresh tokens and access tokens never appear in an error or a `Debug`: errors
//! name the source and the token endpoint. A token request times out after 30 s (3 s for the
//! metadata server), 3 attempts; under a caller's stop flag ([`crate::stop::with_stop`]) it
//! ends soon after the flag is set (Ctrl-C), however long the endpoint stalls.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use gpufile::{Error, Result};
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde_json::Value;

use crate::error::{RemoteError, RemoteFailure};
use crate::http::sign::SignRequest;
use crate::syntax::env::Env;

/// The variable naming a credentials file (ADC's first source).
pub const CREDENTIALS_VAR: &str = "GOOGLE_APPLICATION_CREDENTIALS";
/// The variable naming the metadata server (`host:port`), as Google's libraries read it.
pub const METADATA_HOST_VAR: &str = "GCE_METADATA_HOST";
const NO_GCE_CHECK_VAR: &str = "NO_GCE_CHECK";
const CLOUDSDK_CONFIG_VAR: &str = "CLOUDSDK_CONFIG";
const WELL_KNOWN_FILE: &str = "application_default_credentials.json";
const METADATA_HOST: &str = "metadata.google.internal";
const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
const PRODUCT_NAME_FILE: &str = "/sys/class/dmi/id/product_name";
/// Google's token endpoint, for credentials files that name none.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The scope asked for: read and write objects.
pub const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// A service account's assertion is good for an hour, Google's longest.
const JWT_LIFETIME: u64 = 3600;
/// A token is fetched again this long before it expires at the latest.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// A metadata server answers at once or not at all: google-auth waits 3 s for it.
const METADATA_TIMEOUT: Duration = Duration::from_secs(3);
const TOKEN_ATTEMPTS: u32 = 3;
const FILE_LIMIT: u64 = 1 << 20;

/// The sources, as the error for a refused anonymous request names them.
pub const SOURCES: &str = "GOOGLE_APPLICATION_CREDENTIALS, gcloud's \
                           application_default_credentials.json, the GCE metadata server";

/// How a token is asked for.
enum Grant {
    /// A service-account key: a JWT for [`SCOPE`] signed with `key`, exchanged at `token_uri`.
    ServiceAccount {
        email: String,
        key_id: Option<String>,
        key: Box<RsaKeyPair>,
        token_uri: String,
    },
    /// User credentials: the refresh-token grant at `token_uri`.
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
    /// The VM's default service account, from the metadata server at `base`.
    Metadata { base: String },
}

struct Token {
    value: String,
    refresh_at: Instant,
}

/// One set of Google credentials and its current token.
pub(crate) struct GcsAuth {
    grant: Grant,
    source: &'static str,
    token: Mutex<Option<Token>>,
    agent: ureq::Agent,
}

impl fmt::Debug for GcsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key and the tokens stay out.
        f.debug_struct("GcsAuth")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What a `gs://` object's requests are authorised with.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    Found(Arc<GcsAuth>),
    /// None found: requests go unauthenticated (public objects only).
    Anonymous,
}

impl Credentials {
    /// The first source of ADC's order present in `env` (and on this machine).
    pub(crate) fn from_env(env: Env<'_>) -> Result<Self> {
        Self::discover(env, &on_gce)
    }

    fn discover(env: Env<'_>, on_gce: &dyn Fn() -> bool) -> Result<Self> {
        let set = |var: &str| env(var).filter(|v| !v.trim().is_empty());
        if let Some(path) = set(CREDENTIALS_VAR) {
            let text = read_file(&path).map_err(|why| Error::InvalidEnv {
                var: CREDENTIALS_VAR.into(),
                value: path.clone(),
                reason: why,
            })?;
            let (grant, kind) = parse_credentials(&text).map_err(|why| Error::InvalidEnv {
                var: CREDENTIALS_VAR.into(),
                value: path.clone(),
                reason: why,
            })?;
            let source = match kind {
                Kind::ServiceAccount => "GOOGLE_APPLICATION_CREDENTIALS (service account key)",
                Kind::AuthorizedUser => "GOOGLE_APPLICATION_CREDENTIALS (authorized user)",
            };
            return shared(source, &text, grant).map(Credentials::Found);
        }
        if let Some(path) = well_known_file(env) {
            if path.is_file() {
                let shown = path.display().to_string();
                let bad = |why: String| {
                    Error::InvalidArgument(format!("gcloud's credentials file {shown}: {why}"))
                };
                let text = read_file(&shown).map_err(bad)?;
                let (grant, kind) = parse_credentials(&text).map_err(bad)?;
                let source = match kind {
                    Kind::ServiceAccount => {
                        "gcloud application default credentials (service account key)"
                    }
                    Kind::AuthorizedUser => {
                        "gcloud application default credentials (authorized user)"
                    }
                };
                return shared(source, &text, grant).map(Credentials::Found);
            }
        }
        let no_check = set(NO_GCE_CHECK_VAR)
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"));
        let host = match set(METADATA_HOST_VAR) {
            Some(h) => Some(metadata_base(&h)?),
            None if !no_check && on_gce() => Some(format!("http://{METADATA_HOST}")),
            None => None,
        };
        match host {
            Some(base) => {
                let key = base.clone();
                shared("GCE metadata server", &key, Grant::Metadata { base })
                    .map(Credentials::Found)
            }
            None => Ok(Credentials::Anonymous),
        }
    }

    /// The headers' source for requests, if any.
    pub(crate) fn signer(&self) -> Option<&dyn SignRequest> {
        match self {
            Credentials::Found(a) => Some(a.as_ref()),
            Credentials::Anonymous => None,
        }
    }

    /// Where the credentials come from; never the credentials.
    pub(crate) fn source(&self) -> &'static str {
        match self {
            Credentials::Found(a) => a.source,
            Credentials::Anonymous => "none (anonymous: no Google credentials found)",
        }
    }

    /// What a 401 or 403 answer means for these credentials.
    pub(crate) fn refusal_hint(&self) -> String {
        match self {
            Credentials::Found(a) => format!(
                "The token of the credentials from {} was refused, or they may not access the \
                 object (they ask for {SCOPE})",
                a.source
            ),
            Credentials::Anonymous => format!(
                "No Google credentials were found ({SOURCES} were tried), so the object was \
                 asked for anonymously, which reads public objects only"
            ),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    ServiceAccount,
    AuthorizedUser,
}

/// Whether this machine says it is a Compute Engine VM (no network asked).
fn on_gce() -> bool {
    std::fs::read_to_string(PRODUCT_NAME_FILE).is_ok_and(|s| s.trim().starts_with("Google"))
}

/// gcloud's well-known file: `$CLOUDSDK_CONFIG/...`, else the user's gcloud directory.
fn well_known_file(env: Env<'_>) -> Option<PathBuf> {
    let set = |var: &str| env(var).filter(|v| !v.is_empty());
    let dir = match set(CLOUDSDK_CONFIG_VAR) {
        Some(d) => PathBuf::from(d),
        None if cfg!(windows) => PathBuf::from(set("APPDATA")?).join("gcloud"),
        None => PathBuf::from(set("HOME")?).join(".config").join("gcloud"),
    };
    Some(dir.join(WELL_KNOWN_FILE))
}

/// `GCE_METADATA_HOST` (`host:port`, or a URL) as a base URL.
fn metadata_base(value: &str) -> Result<String> {
    let text = value.trim();
    let text = match text.contains("://") {
        true => text.to_owned(),
        false => format!("http://{text}"),
    };
    let ok = url::Url::parse(&text).ok().filter(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host_str().is_some_and(|h| !h.is_empty())
            && u.query().is_none()
            && u.username().is_empty()
    });
    match ok {
        Some(u) => Ok(u.as_str().trim_end_matches('/').to_owned()),
        None => Err(Error::InvalidEnv {
            var: METADATA_HOST_VAR.into(),
            // A refused value may hold a user's password: shown as every URL is.
            value: crate::syntax::redact::redact(value),
            reason: "expected host:port or http(s)://host:port".into(),
        }),
    }
}

fn read_file(path: &str) -> std::result::Result<String, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut text = String::new();
    f.take(FILE_LIMIT)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    Ok(text)
}

/// A credentials file's grant; what is wrong with it otherwise (never a value of it).
fn parse_credentials(text: &str) -> std::result::Result<(Grant, Kind), String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON credentials file ({e})"))?;
    let field = |name: &str| -> std::result::Result<String, String> {
        v.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("the credentials have no {name:?}"))
    };
    let token_uri = v
        .get("token_uri")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_TOKEN_URI)
        .to_owned();
    if !token_uri.starts_with("https://") && !token_uri.starts_with("http://") {
        return Err("the credentials' \"token_uri\" is not an http(s) URL".into());
    }
    match v.get("type").and_then(Value::as_str) {
        Some("service_account") => {
            let pem = field("private_key")?;
            let key = Box::new(rsa_key(&pem)?);
            let grant = Grant::ServiceAccount {
                email: field("client_email")?,
                key_id: field("private_key_id").ok(),
                key,
                token_uri,
            };
            Ok((grant, Kind::ServiceAccount))
        }
        Some("authorized_user") => Ok((
            Grant::AuthorizedUser {
                client_id: field("client_id")?,
                client_secret: field("client_secret")?,
                refresh_token: field("refresh_token")?,
                token_uri,
            },
            Kind::AuthorizedUser,
        )),
        Some(other) => Err(format!(
            "credentials of type {other:?} are not supported (service_account and \
             authorized_user are)"
        )),
        None => Err("the credentials have no \"type\"".into()),
    }
}

/// The RSA key of a PEM `private_key` (PKCS#8, as Google issues them, or PKCS#1).
fn rsa_key(pem: &str) -> std::result::Result<RsaKeyPair, String> {
    let bad = |why: String| format!("the \"private_key\" is not an RSA private key in PEM ({why})");
    let key = ureq::tls::parse_pem(pem.as_bytes())
        .find_map(|item| match item {
            Ok(ureq::tls::PemItem::PrivateKey(k)) => Some(Ok(k)),
            Ok(_) => None,
            Err(e) => Some(Err(e.to_string())),
        })
        .ok_or_else(|| bad("no PRIVATE KEY block".into()))?
        .map_err(bad)?;
    RsaKeyPair::from_pkcs8(key.der())
        .or_else(|_| RsaKeyPair::from_der(key.der()))
        .map_err(|e| bad(e.to_string()))
}

/// One [`GcsAuth`] per set of credentials in the process, so that every object opened with
/// them shares their token.
fn shared(source: &'static str, identity: &str, grant: Grant) -> Result<Arc<GcsAuth>> {
    static ALL: OnceLock<Mutex<HashMap<u64, Arc<GcsAuth>>>> = OnceLock::new();
    let mut h = DefaultHasher::new();
    (source, identity).hash(&mut h);
    let key = h.finish();
    let mut all = ALL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(a) = all.get(&key) {
        return Ok(Arc::clone(a));
    }
    let auth = Arc::new(GcsAuth::new(source, grant)?);
    all.insert(key, Arc::clone(&auth));
    Ok(auth)
}

/// The assertion of RFC 7523 for `email`'s key: `header.claims.signature`, base64url, RS256.
fn jwt(key: &RsaKeyPair, key_id: Option<&str>, email: &str, aud: &str, now: u64) -> Result<String> {
    let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
    if let Some(kid) = key_id {
        header["kid"] = Value::from(kid);
    }
    let claims = serde_json::json!({
        "iss": email,
        "scope": SCOPE,
        "aud": aud,
        "iat": now,
        "exp": now + JWT_LIFETIME,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut sig = vec![0u8; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut sig,
    )
    .map_err(|_| Error::InvalidArgument("signing the service account's JWT failed".into()))?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

/// When a token that lives `life` is fetched again: 5 minutes before it expires, or halfway
/// through a shorter life.
fn refresh_after(life: Duration) -> Duration {
    life.saturating_sub(REFRESH_BEFORE.min(life / 2))
}

/// The access token and its life of a token endpoint's JSON answer.
fn parse_token(body: &str) -> std::result::Result<(String, Duration), String> {
    let v: Value = serde_json::from_str(body).map_err(|_| "the answer is not JSON".to_owned())?;
    let token = v
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("the answer holds no access_token")?;
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the access_token is not a header value".into());
    }
    if let Some(kind) = v.get("token_type").and_then(Value::as_str) {
        if !kind.eq_ignore_ascii_case("bearer") {
            // Cut at 20 characters: `{:.20?}` would not cut a `str`'s Debug.
            let kind: String = kind.chars().take(20).collect();
            return Err(format!("the token is of type {kind:?}, not Bearer"));
        }
    }
    let secs = match v.get("expires_in") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        None => Some(JWT_LIFETIME),
        _ => None,
    }
    .ok_or("the answer's expires_in is not a number of seconds")?;
    Ok((token.to_owned(), Duration::from_secs(secs)))
}

/// The OAuth error of a refusal (`invalid_grant: Invalid JWT Signature.`), at most 200
/// characters; what the server said of the request, never what was sent.
fn oauth_error(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let text = match (v.get("error"), v.get("error_description")) {
        (Some(Value::String(e)), Some(Value::String(d))) => format!("{e}: {d}"),
        (Some(Value::String(e)), _) => e.clone(),
        (Some(e @ Value::Object(_)), _) => e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    match text.is_empty() {
        true => String::new(),
        false => format!(": {text}"),
    }
}

impl GcsAuth {
    fn new(source: &'static str, grant: Grant) -> Result<Self> {
        let endpoint = match &grant {
            Grant::ServiceAccount { token_uri, .. } | Grant::AuthorizedUser { token_uri, .. } => {
                token_uri
            }
            Grant::Metadata { base } => base,
        };
        let tls = match endpoint.to_ascii_lowercase().starts_with("https://") {
            true => crate::tls_ca::tls_config()?,
            false => ureq::tls::TlsConfig::builder().build(),
        };
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            // A token request follows no redirect: its body is a credential.
            .max_redirects(0)
            .timeout_global(Some(match grant {
                Grant::Metadata { .. } => METADATA_TIMEOUT,
                _ => TOKEN_TIMEOUT,
            }))
            .user_agent(concat!("gpufile/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(GcsAuth {
            grant,
            source,
            token: Mutex::default(),
            // Stoppable: a fetch made under a caller's stop flag (an open in Python or the
            // CLI) ends soon after Ctrl-C, however long the endpoint stalls.
            agent: crate::http::transport::stoppable_agent(config),
        })
    }

    /// The current token: the one held while it is fresh, else a new one (one fetch at a
    /// time; the other requests wait for it).
    pub(crate) fn token(&self) -> Result<String> {
        let mut held = self.token.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = held.as_ref().filter(|t| Instant::now() < t.refresh_at) {
            return Ok(t.value.clone());
        }
        let asked = Instant::now();
        let (value, life) = self.fetch()?;
        *held = Some(Token {
            value: value.clone(),
            refresh_at: asked + refresh_after(life),
        });
        Ok(value)
    }

    /// Where tokens are asked for (no secret in it), for errors.
    fn endpoint(&self) -> String {
        match &self.grant {
            Grant::ServiceAccount { token_uri, .. } | Grant::AuthorizedUser { token_uri, .. } => {
                crate::syntax::redact::redact(token_uri)
            }
            Grant::Metadata { base } => format!("{base}{METADATA_TOKEN_PATH}"),
        }
    }

    fn fail(&self, kind: RemoteFailure, reason: String) -> Error {
        RemoteError {
            url: self.endpoint(),
            kind,
            reason: format!("Google credentials from {}: {reason}", self.source),
        }
        .into()
    }

    /// A new token and its life; [`Error::Cancelled`] soon after the caller's stop flag is set
    /// ([`crate::stop::with_stop`]).
    fn fetch(&self) -> Result<(String, Duration)> {
        let mut last = String::new();
        for attempt in 0..TOKEN_ATTEMPTS {
            if attempt > 0 && !crate::stop::sleep(Duration::from_millis(500 << (attempt - 1))) {
                return Err(Error::Cancelled);
            }
            if crate::stop::stopped() {
                return Err(Error::Cancelled);
            }
            let sent = match &self.grant {
                Grant::ServiceAccount {
                    email,
                    key_id,
                    key,
                    token_uri,
                } => {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    let assertion = jwt(key, key_id.as_deref(), email, token_uri, now)?;
                    self.post(
                        token_uri,
                        &[("grant_type", JWT_BEARER), ("assertion", &assertion)],
                    )
                }
                Grant::AuthorizedUser {
                    client_id,
                    client_secret,
                    refresh_token,
                    token_uri,
                } => self.post(
                    token_uri,
                    &[
                        ("grant_type", "refresh_token"),
                        ("client_id", client_id),
                        ("client_secret", client_secret),
                        ("refresh_token", refresh_token),
                    ],
                ),
                Grant::Metadata { base } => self
                    .agent
                    .get(format!("{base}{METADATA_TOKEN_PATH}"))
                    .header("Metadata-Flavor", "Google")
                    .call(),
            };
            let mut resp = match sent {
                Ok(r) => r,
                Err(_) if crate::stop::stopped() => return Err(Error::Cancelled),
                Err(e) => {
                    last = format!("the token request failed: {e}");
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let body = resp
                .body_mut()
                .with_config()
                .limit(FILE_LIMIT)
                .read_to_string()
                .unwrap_or_default();
            if status == 429 || status >= 500 {
                last = format!("the token endpoint answered {status}{}", oauth_error(&body));
                continue;
            }
            if status != 200 {
                return Err(self.fail(
                    RemoteFailure::Status(status),
                    format!("the token endpoint refused: {status}{}", oauth_error(&body)),
                ));
            }
            return parse_token(&body).map_err(|why| {
                self.fail(
                    RemoteFailure::BadResponse,
                    format!("the token endpoint's answer: {why}"),
                )
            });
        }
        Err(self.fail(
            RemoteFailure::AttemptsExhausted,
            format!("{last} ({TOKEN_ATTEMPTS} attempts)"),
        ))
    }

    fn post(
        &self,
        url: &str,
        form: &[(&str, &str)],
    ) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        self.agent
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .send(body.as_bytes())
    }
}

impl SignRequest for GcsAuth {
    /// `Authorization: Bearer <token>`, the same for every request while the token is fresh.
    fn sign_request(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>> {
        Ok(vec![("authorization", format!("Bearer {}", self.token()?))])
    }
}

#[cfg(test)]
#[path = "credentials_tests.rs"]
mod tests;
