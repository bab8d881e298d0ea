//! What authenticates a request in its headers: S3's SigV4 signature or a GCS bearer token.
//! A request that carries either follows no redirect (see [`super::client`]), so that its credentials
//! reach no other server.

use gpufile::Result;

/// Headers that authenticate one request, made afresh for each attempt.
pub(crate) trait SignRequest: Sync {
    /// The headers for `method` of `url` (the object's, or with a query), with `range` (the
    /// `Range` header's value) where one is sent.
    fn sign_request(
        &self,
        method: &str,
        url: &str,
        range: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>>;
}
