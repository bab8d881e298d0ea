//! The `gs://` side of [`RemoteFile`]: opening, explaining refusals, bad URLs.

use super::*;

#[test]
fn gs_urls_open_as_http_objects_anonymous_without_credentials() {
    let env = |k: &str| match k {
        crate::EMULATOR_HOST_VAR => Some("127.0.0.1:9".to_string()),
        "NO_GCE_CHECK" => Some("true".to_string()),
        _ => None,
    };
    // nbytes given: no request at open.
    let f = RemoteFile::open_gcs_public_with_env("gs://bkt/a b.bin", Some(10), &env).unwrap();
    assert_eq!(f.url(), "gs://bkt/a b.bin");
    assert_eq!(f.remote_endpoint_type(), RemoteEndpointType::Http);
    assert_eq!(
        f.credentials_source(),
        Some("none (anonymous: no Google credentials found)")
    );
    assert!(matches!(&f.access, Access::Gcs(g) if g.url == "http://127.0.0.1:9/bkt/a%20b.bin"));
    let e = f.check_range(5, 6).unwrap_err().to_string();
    assert!(e.contains("(gs://bkt/a b.bin)"), "{e}");
    // A refusal names the address asked; 401 and 403 say that no credentials were found, so
    // that only public objects are read.
    let refusal = |code: u16| -> Error {
        RemoteError {
            url: f.url().to_owned(),
            kind: RemoteFailure::Status(code),
            reason: format!("HEAD: URL returned error: {code}"),
        }
        .into()
    };
    let e = f.explain(refusal(403)).to_string();
    assert_eq!(
        e,
        "HEAD: URL returned error: 403, from http://127.0.0.1:9/bkt/a%20b.bin. No Google \
         credentials were found (GOOGLE_APPLICATION_CREDENTIALS, gcloud's \
         application_default_credentials.json, the GCE metadata server were tried), so the \
         object was asked for anonymously, which reads public objects only (gs://bkt/a b.bin)"
    );
    assert!(f
        .explain(refusal(401))
        .to_string()
        .contains("reads public objects only"));
    let e = f.explain(refusal(404)).to_string();
    assert!(
        e.ends_with("404, from http://127.0.0.1:9/bkt/a%20b.bin (gs://bkt/a b.bin)"),
        "{e}"
    );
    let eof = f.explain(Error::Closed);
    assert!(matches!(eof, Error::Closed));
    // A token endpoint's refusal names itself: it is not explained as the object's.
    let token = Error::from(RemoteError {
        url: "http://127.0.0.1:9/token".into(),
        kind: RemoteFailure::Status(400),
        reason: "Google credentials from x: the token endpoint refused: 400".into(),
    });
    assert_eq!(f.explain(token.clone()).to_string(), token.to_string());
}

#[test]
fn bad_gs_urls_are_refused_before_any_request() {
    let e = RemoteFile::open_gcs_public("gs://bkt", Some(1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("gs://bkt: no object name"), "{e}");
    let e = RemoteFile::open_gcs_public("https://h/b/o", Some(1)).unwrap_err();
    assert!(
        e.to_string()
            .contains("for an http(s):// URL use RemoteFile.open_http"),
        "{e}"
    );
    let e = RemoteFile::open("gs:///o", RemoteEndpointType::Auto, None, Some(1)).unwrap_err();
    assert!(
        e.to_string()
            .contains("Unsupported endpoint URL: gs:///o (no bucket name"),
        "{e}"
    );
    let e = RemoteFile::open("gs://bkt/", RemoteEndpointType::Http, None, Some(1)).unwrap_err();
    assert!(
        e.to_string()
            .contains("Invalid URL for HTTP endpoint: gs://bkt/ (no object name"),
        "{e}"
    );
    let e = RemoteFile::open("gs://bkt/o", RemoteEndpointType::S3, None, Some(1)).unwrap_err();
    assert_eq!(e.to_string(), "Invalid URL for S3 endpoint: gs://bkt/o");
    // open_http stays http(s) only.
    let e = RemoteFile::open_http("gs://bkt/o", Some(1)).unwrap_err();
    assert!(
        e.to_string().contains("Unsupported protocol for HTTP"),
        "{e}"
    );
}
