//! URL rules and S3 URL parsing, on literal URLs and environments.

use super::*;
use crate::syntax::s3::{aws_s3_http_parts, parse_s3_url, percent_decode, public_http_url};
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
