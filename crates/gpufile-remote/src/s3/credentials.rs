//! Who an S3 object's requests are signed as, and where: the caller's [`S3Options`], KvikIO's
//! variables, the region and endpoint chains, and the AWS credential chain ([`super::chain`])
//! when no key is given.

use std::sync::Arc;

use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::identity::Identity;
use gpufile::{Error, Result};

use super::chain;
use crate::syntax::env::Env;

/// S3 settings given by the caller; what is `None` comes from KvikIO's environment variables.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    /// `AWS_DEFAULT_REGION`.
    pub region: Option<String>,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`: `<endpoint>/<bucket>/<object>` instead of
    /// AWS's own hosts.
    pub endpoint_url: Option<String>,
    /// `AWS_SESSION_TOKEN` (temporary credentials).
    pub session_token: Option<String>,
}

fn pick(given: &Option<String>, env: Env<'_>, var: &str) -> Option<String> {
    given.clone().or_else(|| env(var)).filter(|v| !v.is_empty())
}

fn required(value: Option<String>, what: &str, var: &str) -> Result<String> {
    value.ok_or_else(|| {
        Error::InvalidArgument(format!("S3: must provide `{what}` if {var} isn't set"))
    })
}

/// The region: argument, `AWS_DEFAULT_REGION` (KvikIO's), then the AWS SDK's region chain
/// (`AWS_REGION`, the profile's `region`, the instance metadata service).
pub(super) fn region_of(o: &S3Options, env: Env<'_>) -> Result<String> {
    if let Some(r) = pick(&o.region, env, "AWS_DEFAULT_REGION") {
        return Ok(r);
    }
    if let Some(r) = env("AWS_REGION").filter(|v| !v.is_empty()) {
        return Ok(r);
    }
    required(
        chain::region()?,
        "aws_region",
        "AWS_DEFAULT_REGION (nor AWS_REGION, a profile's region or instance metadata)",
    )
}

/// The endpoint: argument, `AWS_ENDPOINT_URL_S3` (the SDKs' per-service variable), then
/// `AWS_ENDPOINT_URL`.
pub(super) fn endpoint_of(o: &S3Options, env: Env<'_>) -> Option<String> {
    pick(&o.endpoint_url, env, "AWS_ENDPOINT_URL_S3")
        .or_else(|| env("AWS_ENDPOINT_URL").filter(|v| !v.is_empty()))
}

/// Who signs an object's requests: a key given (arguments, environment) or the AWS chain's
/// current credentials, fetched again before they expire.
#[derive(Clone)]
pub(super) enum Signer {
    Static(Identity),
    Chain(Arc<chain::Chain>),
}

impl Signer {
    /// The signer of an object at `url` in `region`: the key of the arguments or the
    /// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), else
    /// the AWS chain's. Half a key is refused.
    pub(super) fn resolve(o: &S3Options, env: Env<'_>, region: &str, url: &str) -> Result<Self> {
        let key_id = pick(&o.access_key_id, env, "AWS_ACCESS_KEY_ID");
        let secret = pick(&o.secret_access_key, env, "AWS_SECRET_ACCESS_KEY");
        Ok(match (key_id, secret) {
            (Some(key_id), Some(secret)) => {
                let token = pick(&o.session_token, env, "AWS_SESSION_TOKEN");
                Signer::Static(Credentials::new(key_id, secret, token, None, "gpufile").into())
            }
            // Half a key is a mistake, not a cue to look elsewhere.
            (Some(_), None) => {
                return Err(
                    required(None, "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY").unwrap_err(),
                )
            }
            (None, Some(_)) => {
                return Err(required(None, "aws_access_key_id", "AWS_ACCESS_KEY_ID").unwrap_err())
            }
            (None, None) => {
                Signer::Chain(chain::Chain::shared(region).map_err(|e| chain::for_object(e, url))?)
            }
        })
    }

    /// Where the credentials come from ("arguments or environment", or the AWS chain's source,
    /// such as "container credentials"); never the credentials.
    pub(super) fn source(&self) -> &'static str {
        match self {
            Signer::Static(_) => "arguments or environment",
            Signer::Chain(chain) => chain.source(),
        }
    }

    /// The identity to sign with now: the chain's current credentials, since a long read or
    /// upload outlives temporary ones.
    pub(super) fn identity(&self) -> Result<Identity> {
        Ok(match self {
            Signer::Static(identity) => identity.clone(),
            Signer::Chain(chain) => chain.credentials()?.into(),
        })
    }
}
