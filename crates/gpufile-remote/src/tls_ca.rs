//! The TLS roots the remote client trusts: Mozilla's (webpki roots) unless a variable names
//! others, in KvikIO's order: a PEM file in `CURL_CA_BUNDLE` or `SSL_CERT_FILE`, else a
//! directory of PEM files in `SSL_CERT_DIR` (OpenSSL's `c_rehash` layout or plain `*.pem`;
//! `:`-separated directories), then gpufile's addition `AWS_CA_BUNDLE` (a file). Exactly those
//! certificates are then trusted. A bundle or directory that cannot be read or holds no
//! certificate is an error naming the variable and the path (KvikIO hands the path to libcurl
//! and fails later, at the first TLS handshake).

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use gpufile::{Error, Result};
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

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
    let bundle = ca_bundle_from(&lookup);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
}
