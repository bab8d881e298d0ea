//! Which TLS CA bundle the remote client (`gpufile-remote`) trusts instead of the built-in
//! roots, by KvikIO's variables.

use std::ffi::OsString;

/// The CA bundle variables, in KvikIO's order: the first one set names a PEM file of trusted
/// certificates (libcurl's and OpenSSL's names, then the AWS SDK's).
pub const CA_BUNDLE_VARS: [&str; 3] = ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "AWS_CA_BUNDLE"];

/// The CA bundle to trust instead of the built-in roots, as `(variable, path)`: the first of
/// [`CA_BUNDLE_VARS`] that is set and not empty, looked up through `lookup`.
pub fn ca_bundle_from(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Option<(&'static str, std::path::PathBuf)> {
    CA_BUNDLE_VARS.iter().find_map(|var| {
        lookup(var)
            .filter(|v| !v.is_empty())
            .map(|v| (*var, std::path::PathBuf::from(v)))
    })
}
