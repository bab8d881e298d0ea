//! What [`redact`] shows of literal URLs: userinfo however its password is typed, and the
//! parameters of [`SECRET_PARAMS`] however their names are spelled.

use super::*;

#[test]
fn presigned_secrets_are_redacted() {
    let u = "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=A&X-Amz-Credential=AKID%2F1&X-Amz-Signature=abc&x-amz-security-token=t";
    let r = redact(u);
    assert!(
        !r.contains("abc") && !r.contains("AKID") && !r.contains("=t"),
        "{r}"
    );
    assert!(r.contains("X-Amz-Algorithm=A"), "{r}");
    assert_eq!(redact("http://h/p"), "http://h/p");
}

#[test]
fn userinfo_is_redacted() {
    assert_eq!(
        redact("http://alice:pw@127.0.0.1:8/a@b.bin?x=1"),
        "http://REDACTED@127.0.0.1:8/a@b.bin?x=1"
    );
    assert_eq!(redact("https://tok@h/k"), "https://REDACTED@h/k");
    assert_eq!(
        redact("https://u:p@h?sig=s"),
        "https://REDACTED@h?sig=REDACTED"
    );
    assert_eq!(redact("https://h/a@b"), "https://h/a@b");
    assert_eq!(
        redact("https://h:8080/models/m@v2/w.bin"),
        "https://h:8080/models/m@v2/w.bin"
    );
    assert_eq!(
        redact("https://[::1]:8080/a@b/c"),
        "https://[::1]:8080/a@b/c"
    );
}

/// Passwords as users type them: `@`, `#`, `?`, `/` unencoded, or `%40`. The whole userinfo
/// goes, whatever follows the host.
#[test]
fn a_password_is_redacted_whole_whatever_it_holds() {
    for (url, shown) in [
        // `@`: the userinfo ends at the last one (the first would show `ss@`).
        ("https://user:p@ss@host/path", "https://REDACTED@host/path"),
        (
            "https://user:p@s@s@host:9/a@b",
            "https://REDACTED@host:9/a@b",
        ),
        (
            "https://user:p%40ss@host/path",
            "https://REDACTED@host/path",
        ),
        (
            "https://user:p#ss@host/path?x=1",
            "https://REDACTED@host/path?x=1",
        ),
        ("https://user:p?ss@host/path", "https://REDACTED@host/path"),
        ("https://user:p/ss@host/path", "https://REDACTED@host/path"),
        ("https://user:/ss@host/path", "https://REDACTED@host/path"),
        (
            "https://user:p/s@s#s?/s@host:1/a@b.bin?sig=x",
            "https://REDACTED@host:1/a@b.bin?sig=REDACTED",
        ),
        ("https://user:p#s?s/s", "https://user:p#s?s/s"),
        ("https://user:p@ss@host", "https://REDACTED@host"),
        ("https://user:p@ss@host?x=/y", "https://REDACTED@host?x=/y"),
        ("https://user:p@ss@[::1]:8/k", "https://REDACTED@[::1]:8/k"),
        ("s3://key:se/cr@et@bucket/k", "s3://REDACTED@bucket/k"),
    ] {
        assert_eq!(redact(url), shown, "{url}");
    }
}

#[test]
fn gcs_and_azure_signatures_are_redacted() {
    let sas = "https://acct.blob.core.windows.net/c/b.bin?sv=2022-11-02&se=2030-01-01&sr=b&sp=r&sig=abc%2Fdef%3D";
    assert_eq!(
        redact(sas),
        "https://acct.blob.core.windows.net/c/b.bin?sv=2022-11-02&se=2030-01-01&sr=b&sp=r&sig=REDACTED"
    );
    let goog = "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=sa%40p&X-Goog-Signature=0123";
    let r = redact(goog);
    assert!(!r.contains("sa%40p") && !r.contains("0123"), "{r}");
    assert!(r.contains("X-Goog-Algorithm=GOOG4-RSA-SHA256"), "{r}");
    let v2 = "https://storage.googleapis.com/b/o?GoogleAccessId=a&Expires=1&Signature=xyz";
    assert!(redact(v2).ends_with("Signature=REDACTED"));
}

/// Tokens and keys in the query or the fragment, their names in any case or percent-encoded.
#[test]
fn token_key_and_password_parameters_are_redacted() {
    for (url, shown) in [
        (
            "https://h/o?access_token=ya29.x&alt=media",
            "https://h/o?access_token=REDACTED&alt=media",
        ),
        ("https://h/o?token=t1", "https://h/o?token=REDACTED"),
        ("https://h/o?KEY=AIza&x=1", "https://h/o?KEY=REDACTED&x=1"),
        ("https://h/o?%73ig=abc", "https://h/o?%73ig=REDACTED"),
        ("https://h/o?si%67=abc", "https://h/o?si%67=REDACTED"),
        (
            "https://h/o?X%2DAmz%2DSignature=abc",
            "https://h/o?X%2DAmz%2DSignature=REDACTED",
        ),
        (
            "http://h:1/webhdfs/v1/a?op=OPEN&delegation=DT",
            "http://h:1/webhdfs/v1/a?op=OPEN&delegation=REDACTED",
        ),
        (
            "https://h/cb#access_token=t&state=s",
            "https://h/cb#access_token=REDACTED&state=s",
        ),
        (
            "https://h/o?a=1#x&api_key=k",
            "https://h/o?a=1#x&api_key=REDACTED",
        ),
        ("https://h/o?token", "https://h/o?token"),
        ("https://h/o?tokens=1", "https://h/o?tokens=1"),
    ] {
        assert_eq!(redact(url), shown, "{url}");
    }
    for name in SECRET_PARAMS {
        let r = redact(&format!("https://h/o?{}=s3cr3t", name.to_ascii_uppercase()));
        assert!(!r.contains("s3cr3t"), "{r}");
        assert_eq!(name.to_ascii_lowercase(), *name);
    }
}
