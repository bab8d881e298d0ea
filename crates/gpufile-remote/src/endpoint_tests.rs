//! URL rules, S3 URL parsing, signing and redaction, on literal URLs and environments.

use super::*;
use RemoteEndpointType as T;

#[test]
fn infers_kvikio_examples() {
    assert_eq!(
        infer_remote_endpoint_type("s3://bucket-name/object-key-name").unwrap(),
        T::S3
    );
    assert_eq!(
        infer_remote_endpoint_type("https://host:1234/webhdfs/v1/data.bin").unwrap(),
        T::WebHdfs
    );
    assert_eq!(
        infer_remote_endpoint_type("https://example.com/path/file.bin").unwrap(),
        T::Http
    );
    let presigned = "https://bucket-name.s3.region-code.amazonaws.com/object-key-name?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=sig&X-Amz-Credential=cred&X-Amz-SignedHeaders=host";
    assert_eq!(
        infer_remote_endpoint_type(presigned).unwrap(),
        T::S3PresignedUrl
    );
    assert_eq!(
        infer_remote_endpoint_type("https://bucket.s3.us-east-1.amazonaws.com/key").unwrap(),
        T::S3
    );
}

#[test]
fn bad_and_unsupported_urls_say_so() {
    let e = infer_remote_endpoint_type("example.com/path")
        .unwrap_err()
        .to_string();
    assert!(e.contains("Bad scheme"), "{e}");
    let e = infer_remote_endpoint_type("unsupported://example.com/path")
        .unwrap_err()
        .to_string();
    assert!(e.contains("Unsupported endpoint URL"), "{e}");
    // http without a path, and WebHDFS without a port, fit nothing / only HTTP.
    assert!(infer_remote_endpoint_type("http://example.com/").is_err());
    assert_eq!(
        infer_remote_endpoint_type("http://host/webhdfs/v1/x").unwrap(),
        T::Http
    );
}

#[test]
fn allow_list_order_decides() {
    let url = "https://bucket.s3.amazonaws.com/key";
    assert_eq!(infer(url, &[T::Http, T::S3]).unwrap(), T::Http);
    assert_eq!(infer(url, &[T::S3Public]).unwrap(), T::S3Public);
    assert!(infer("s3://b/k", &[T::Http]).is_err());
}

#[test]
fn aws_forms() {
    let p = |u: &str| aws_s3_http_parts(u);
    assert_eq!(
        p("https://b.s3.eu-west-1.amazonaws.com/a/b.bin"),
        Some(("b".into(), "a/b.bin".into()))
    );
    assert_eq!(
        p("https://my.dotted.bucket.s3.amazonaws.com/k"),
        Some(("my.dotted.bucket".into(), "k".into()))
    );
    assert_eq!(
        p("https://b.s3-eu-west-1.amazonaws.com/k"),
        Some(("b".into(), "k".into()))
    );
    assert_eq!(
        p("http://s3.us-east-1.amazonaws.com/b/k"),
        Some(("b".into(), "k".into()))
    );
    assert_eq!(
        p("http://s3.amazonaws.com/b/k"),
        Some(("b".into(), "k".into()))
    );
    assert_eq!(
        p("http://s3-us-west-2.amazonaws.com/b/k"),
        Some(("b".into(), "k".into()))
    );
    assert_eq!(p("http://s3.amazonaws.com/b/"), None);
    assert_eq!(p("https://b.s3.eu-west-1.amazonaws.com/"), None);
    assert_eq!(p("https://example.com/b/k"), None);
    assert_eq!(p("https://b.s3.a.b.amazonaws.com/k"), None);
}

#[test]
fn s3_urls_parse() {
    assert_eq!(
        parse_s3_url("s3://bkt/dir/obj").unwrap(),
        ("bkt".into(), "dir/obj".into())
    );
    assert_eq!(
        parse_s3_url("S3://bkt/o").unwrap(),
        ("bkt".into(), "o".into())
    );
    for bad in ["s3://bkt", "s3://bkt/", "s3:///obj", "http://b/o"] {
        assert!(parse_s3_url(bad).is_err(), "{bad}");
    }
}

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

#[test]
fn public_url_of_s3_url() {
    assert_eq!(
        public_http_url("s3://b/k", &env(&[])).unwrap(),
        "https://b.s3.amazonaws.com/k"
    );
    assert_eq!(
        public_http_url(
            "s3://b/k",
            &env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:1/")])
        )
        .unwrap(),
        "http://127.0.0.1:1/b/k"
    );
}

#[test]
fn gs_urls_are_http_urls() {
    assert_eq!(
        infer_remote_endpoint_type("gs://bucket-name/dir/object.bin").unwrap(),
        T::Http
    );
    assert!(T::Http.accepts("gs://bkt/a b/é"));
    for other in [T::S3, T::S3Public, T::S3PresignedUrl, T::WebHdfs] {
        assert!(!other.accepts("gs://bkt/o"), "{other}");
    }
    // A bad gs:// URL is unsupported, with what is wrong with it.
    for (url, why) in [
        ("gs://bkt", "no object name"),
        ("gs:///o", "no bucket name"),
        ("gs://BKT/o", "is not a bucket name"),
    ] {
        let e = infer_remote_endpoint_type(url).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("Unsupported endpoint URL: {url} (")),
            "{e}"
        );
        assert!(
            e.contains(why) && e.contains("gs://<bucket>/<object>"),
            "{e}"
        );
    }
    // HTTP left out of the allow list: said so.
    let e = infer("gs://bkt/o", &[T::S3, T::WebHdfs])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("read as HTTP, which the allow list leaves out"),
        "{e}"
    );
    // Other schemes keep KvikIO's words alone.
    let e = infer_remote_endpoint_type("az://c/b")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "Unsupported endpoint URL: az://c/b");
}

#[test]
fn percent_decoding() {
    assert_eq!(percent_decode("a%20b%2Fc%"), "a b/c%");
    assert_eq!(percent_decode("%zz"), "%zz");
}
