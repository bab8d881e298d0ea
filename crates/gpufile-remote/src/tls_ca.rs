//! Which TLS CA bundle the remote client trusts instead of the built-in roots, by KvikIO's
//! variables.

use std::ffi::OsString;
use std::path::PathBuf;

/// The CA bundle variables, in KvikIO's order: the first one set names a PEM file of trusted
/// certificates (libcurl's and OpenSSL's names, then the AWS SDK's).
const CA_BUNDLE_VARS: [&str; 3] = ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "AWS_CA_BUNDLE"];

/// The CA bundle to trust instead of the built-in roots, as `(variable, path)`: the first of
/// [`CA_BUNDLE_VARS`] that is set and not empty, looked up through `lookup`.
pub(crate) fn ca_bundle_from(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Option<(&'static str, PathBuf)> {
    CA_BUNDLE_VARS.iter().find_map(|var| {
        lookup(var)
            .filter(|v| !v.is_empty())
            .map(|v| (*var, PathBuf::from(v)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_bundle_follows_kvikio_order_and_skips_empty() {
        let os = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(ca_bundle_from(os(&[])), None);
        assert_eq!(
            ca_bundle_from(os(&[("AWS_CA_BUNDLE", "/a"), ("SSL_CERT_FILE", "/s")])),
            Some(("SSL_CERT_FILE", "/s".into()))
        );
        assert_eq!(
            ca_bundle_from(os(&[("CURL_CA_BUNDLE", ""), ("AWS_CA_BUNDLE", "/a")])),
            Some(("AWS_CA_BUNDLE", "/a".into()))
        );
        assert_eq!(
            ca_bundle_from(os(&[("CURL_CA_BUNDLE", "/c"), ("SSL_CERT_FILE", "/s")])),
            Some(("CURL_CA_BUNDLE", "/c".into()))
        );
    }
}
