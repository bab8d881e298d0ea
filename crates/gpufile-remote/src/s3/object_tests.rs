//! S3 objects from arguments, environments and URLs, and their signed headers.

use super::*;

fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn s3_object_from_env_and_arguments() {
    let e = env(&[
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
    ]);
    let o = S3Object::from_bucket("bkt", "a b/c.bin", &S3Options::default(), &e).unwrap();
    assert_eq!(o.url(), "http://127.0.0.1:9000/bkt/a%20b/c.bin");
    assert_eq!(o.region, "us-east-1");
    let h = o.sign("HEAD", None).unwrap();
    let auth = &h.iter().find(|(n, _)| *n == "authorization").unwrap().1;
    assert!(auth.contains("Credential=AKID/"), "{auth}");
    assert!(!h.iter().any(|(n, _)| *n == "x-amz-security-token"));
    // Arguments win over the environment.
    let args = S3Options {
        region: Some("eu-west-1".into()),
        endpoint_url: None,
        session_token: Some("tok".into()),
        ..Default::default()
    };
    let no_endpoint = env(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ]);
    let o = S3Object::from_bucket("bkt", "k", &args, &no_endpoint).unwrap();
    assert_eq!(o.url(), "https://bkt.s3.eu-west-1.amazonaws.com/k");
    let h = o.sign("GET", None).unwrap();
    assert!(h.contains(&("x-amz-security-token", "tok".into())), "{h:?}");
    // Missing pieces are named.
    let e = S3Object::from_bucket("bkt", "k", &S3Options::default(), &env(&[])).unwrap_err();
    assert!(e.to_string().contains("AWS_DEFAULT_REGION"), "{e}");
    // Half a key is named, not completed from the AWS chain (whole keys absent go to the
    // chain: tests/test_s3_aws_chain.py).
    let e = S3Object::from_bucket("bkt", "k", &args, &env(&[("AWS_SECRET_ACCESS_KEY", "s")]))
        .unwrap_err();
    assert!(e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");
    let e = S3Object::from_bucket("bkt", "k", &args, &env(&[("AWS_ACCESS_KEY_ID", "AKID")]))
        .unwrap_err();
    assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
}

#[test]
fn s3_object_from_http_urls() {
    let e = env(&[
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ]);
    let o = S3Object::from_http_url(
        "http://127.0.0.1:5000/bkt/dir/x%20y.bin",
        &S3Options::default(),
        &e,
    )
    .unwrap();
    assert_eq!(o.url(), "http://127.0.0.1:5000/bkt/dir/x%20y.bin");
    let o = S3Object::from_http_url(
        "https://bkt.s3.eu-west-1.amazonaws.com/k",
        &S3Options::default(),
        &e,
    )
    .unwrap();
    assert_eq!(o.url(), "https://bkt.s3.eu-west-1.amazonaws.com/k");
    let o = S3Object::from_http_url(
        "https://s3.eu-west-1.amazonaws.com/bkt/k",
        &S3Options::default(),
        &e,
    )
    .unwrap();
    assert_eq!(o.url(), "https://s3.eu-west-1.amazonaws.com/bkt/k");
    assert!(
        S3Object::from_http_url("http://127.0.0.1:5000/bkt", &S3Options::default(), &e).is_err()
    );
}

#[test]
fn requests_are_signed_in_headers() {
    let e = env(&[
        ("AWS_DEFAULT_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "topsecret"),
    ]);
    let args = S3Options {
        session_token: Some("tok".into()),
        ..Default::default()
    };
    let o = S3Object::from_bucket("test_read", "k", &args, &e).unwrap();
    assert_eq!(o.url(), "https://test_read.s3.eu-west-1.amazonaws.com/k");
    let h: std::collections::HashMap<_, _> = o
        .sign("GET", Some("bytes=0-9"))
        .unwrap()
        .into_iter()
        .collect();
    let auth = &h["authorization"];
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"),
        "{auth}"
    );
    assert!(auth.contains("/eu-west-1/s3/aws4_request"), "{auth}");
    // The range is signed with the host and the x-amz-* headers.
    assert!(
        auth.contains(
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token"
        ),
        "{auth}"
    );
    assert_eq!(h["x-amz-content-sha256"], "UNSIGNED-PAYLOAD");
    assert_eq!(h["x-amz-security-token"], "tok");
    assert_eq!(h["x-amz-date"].len(), "20261130T120000Z".len());
    // A different range is a different signature.
    let other: std::collections::HashMap<_, _> = o
        .sign("GET", Some("bytes=10-19"))
        .unwrap()
        .into_iter()
        .collect();
    assert_ne!(other["authorization"], h["authorization"]);
    // Nothing secret in what is shown.
    let shown = format!("{o:?} {}", o.url());
    assert!(
        !shown.contains("topsecret") && !shown.contains("AKID"),
        "{shown}"
    );
}

#[test]
fn path_style_urls_encode_bucket_and_key() {
    let e = env(&[
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/base/"),
    ]);
    let o = S3Object::from_bucket("test_read", "a+b/c~d=e.bin", &S3Options::default(), &e).unwrap();
    assert_eq!(
        o.url(),
        "http://127.0.0.1:9000/base/test_read/a%2Bb/c~d%3De.bin"
    );
}
