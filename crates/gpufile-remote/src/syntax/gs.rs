//! `gs://<bucket>/<object>` URL syntax: Google Cloud Storage's names and their addresses.
//!
//! How to use:
//! 1. [`parse_gs_url`] checks a `gs://` URL and splits it into bucket and object name (taken
//!    literally, as Google's tools take them: `%20` in a `gs://` URL is three characters of
//!    the name, and `?` or `#` are part of it too).
//! 2. [`public_http_url`] maps it to the object's address in GCS's XML API,
//!    `https://storage.googleapis.com/<bucket>/<object>` (the name percent-encoded segment by
//!    segment, `/` kept), or to the host in `STORAGE_EMULATOR_HOST`, the variable Google's
//!    own client libraries read to target an emulator (`http://127.0.0.1:4443` or
//!    `127.0.0.1:4443`).
//!
//! Pure: the environment comes in as a function. The object that requests are made of, with
//! its credentials, is [`crate::gcs::object`]'s.

use gpufile::{Error, Result};
use percent_encoding::utf8_percent_encode;
use url::Url;

use super::env::Env;
use super::keys::KEY_ENCODE;
use super::redact::{redact, userinfo_end};

/// GCS's XML API, where objects are plain ranged GETs of `<endpoint>/<bucket>/<object>`.
pub const XML_API_ENDPOINT: &str = "https://storage.googleapis.com";

/// The variable that points Google's client libraries at an emulator (fake-gcs-server, ...).
pub const EMULATOR_HOST_VAR: &str = "STORAGE_EMULATOR_HOST";

/// The longest object name GCS accepts, in bytes of UTF-8.
const OBJECT_NAME_MAX: usize = 1024;

/// What a `gs://` URL must look like, for errors.
const EXPECTED: &str = "expected gs://<bucket>/<object>";

/// Whether `url` starts with `gs://` (any case): a URL this module is asked to judge.
pub fn is_gs_scheme(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("gs://"))
}

/// What is wrong with bucket name `b`, by GCS's naming rules: 3 to 63 characters (up to 222
/// with dots, 63 between dots) of `a-z`, `0-9`, `-`, `_` and `.`, starting and ending with a
/// letter or a digit.
fn bucket_problem(b: &str) -> Option<String> {
    let rules = "a bucket name is 3 to 63 characters of a-z, 0-9, '-', '_' and '.' (up to 222 \
                 with dots, 63 between them), starting and ending with a letter or digit";
    let chars_ok = b
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_.".contains(&c));
    let ends_ok = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let max = if b.contains('.') { 222 } else { 63 };
    let ok = chars_ok
        && (3..=max).contains(&b.len())
        && b.split('.').all(|part| part.len() <= 63)
        && ends_ok(b.bytes().next())
        && ends_ok(b.bytes().last());
    (!ok).then(|| format!("{b:?} is not a bucket name: {rules}"))
}

/// The bucket and object name of `gs://<bucket>/<object>`, or what is wrong with it.
fn split(url: &str) -> std::result::Result<(&str, &str), String> {
    if !is_gs_scheme(url) {
        return Err("not a gs:// URL (for an http(s):// URL use RemoteFile.open_http)".into());
    }
    let rest = &url[5..];
    if userinfo_end(rest).is_some() {
        // Said without the bucket: what precedes its `@` is a secret.
        return Err(
            "a gs:// URL holds no user name or password (credentials come from \
                    Application Default Credentials)"
                .into(),
        );
    }
    let (bucket, object) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err("no bucket name".into());
    }
    if let Some(why) = bucket_problem(bucket) {
        return Err(why);
    }
    if object.is_empty() {
        return Err("no object name".into());
    }
    if object.len() > OBJECT_NAME_MAX {
        return Err(format!(
            "the object name is {} bytes long; GCS allows at most {OBJECT_NAME_MAX}",
            object.len()
        ));
    }
    if object.contains(['\r', '\n']) {
        return Err(
            "the object name holds a carriage return or line feed, which GCS forbids".into(),
        );
    }
    Ok((bucket, object))
}

/// Why `url` is not a `gs://` URL of an object ("no object name; expected gs://...").
pub fn problem(url: &str) -> Option<String> {
    split(url).err().map(|why| format!("{why}; {EXPECTED}"))
}

/// `gs://<bucket>/<object>` → (bucket, object); `InvalidArgument` naming the URL and what is
/// missing or wrong otherwise.
pub fn parse_gs_url(url: &str) -> Result<(String, String)> {
    split(url)
        .map(|(b, o)| (b.to_owned(), o.to_owned()))
        .map_err(|why| Error::InvalidArgument(format!("{}: {why}; {EXPECTED}", redact(url))))
}

/// The object name as a URL path: each `/`-separated segment percent-encoded (RFC 3986
/// unreserved characters kept); `.` and `..` segments encoded too, so that no client, proxy or
/// server on the way resolves them as dot segments and asks for another object.
fn encode_object(name: &str) -> String {
    name.split('/')
        .map(|seg| match seg {
            "." => "%2E".to_owned(),
            ".." => "%2E%2E".to_owned(),
            _ => utf8_percent_encode(seg, KEY_ENCODE).to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The XML API endpoint: `STORAGE_EMULATOR_HOST` where it is set and not empty (a bare
/// `host:port` is `http://`, as Google's clients read it), else [`XML_API_ENDPOINT`].
pub(crate) fn endpoint(env: Env<'_>) -> Result<String> {
    let Some(value) = env(EMULATOR_HOST_VAR).filter(|v| !v.trim().is_empty()) else {
        return Ok(XML_API_ENDPOINT.to_owned());
    };
    let text = value.trim();
    let text = match text.contains("://") {
        true => text.to_owned(),
        false => format!("http://{text}"),
    };
    let invalid = |reason: String| Error::InvalidEnv {
        var: EMULATOR_HOST_VAR.to_owned(),
        // As read (`http://` added to a bare host), without the credentials it may hold.
        value: redact(&text),
        reason,
    };
    let u = Url::parse(&text)
        .map_err(|e| invalid(format!("expected host:port or http(s)://host:port ({e})")))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
        return Err(invalid("expected host:port or http(s)://host:port".into()));
    }
    if u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
        return Err(invalid(
            "an emulator address has no query, fragment or user name".into(),
        ));
    }
    Ok(u.as_str().trim_end_matches('/').to_owned())
}

/// The address of the public object `gs://<bucket>/<object>` in GCS's XML API (or at the
/// emulator named by `STORAGE_EMULATOR_HOST`, looked up through `env`).
pub fn public_http_url(url: &str, env: Env<'_>) -> Result<String> {
    let (bucket, object) = parse_gs_url(url)?;
    Ok(format!(
        "{}/{bucket}/{}",
        endpoint(env)?,
        encode_object(&object)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn emulator(value: &'static str) -> impl Fn(&str) -> Option<String> {
        move |k| (k == EMULATOR_HOST_VAR).then(|| value.to_owned())
    }

    #[test]
    fn gs_urls_map_to_the_xml_api() {
        let map = |u: &str| public_http_url(u, &no_env).unwrap();
        assert_eq!(
            map("gs://bkt/obj.bin"),
            "https://storage.googleapis.com/bkt/obj.bin"
        );
        // `/` is kept; each segment is percent-encoded, unreserved characters kept.
        assert_eq!(
            map("gs://my-bkt_1/dir/sub dir/a+b~c_d-e.f"),
            "https://storage.googleapis.com/my-bkt_1/dir/sub%20dir/a%2Bb~c_d-e.f"
        );
        // Names are literal: `%`, `?`, `#` are characters of the name.
        assert_eq!(
            map("gs://bkt/50%?x=1#2"),
            "https://storage.googleapis.com/bkt/50%25%3Fx%3D1%232"
        );
        // UTF-8, byte by byte.
        assert_eq!(
            map("gs://bkt/données/é.bin"),
            "https://storage.googleapis.com/bkt/donn%C3%A9es/%C3%A9.bin"
        );
        // Empty segments (`a//b`, a trailing `/`) are part of the name too.
        assert_eq!(
            map("gs://bkt/a//b/"),
            "https://storage.googleapis.com/bkt/a//b/"
        );
        // Dot segments cannot be resolved away on the way.
        assert_eq!(
            map("gs://bkt/a/../b/./c"),
            "https://storage.googleapis.com/bkt/a/%2E%2E/b/%2E/c"
        );
        // The scheme in any case; dotted bucket names.
        assert_eq!(
            map("GS://data.example.com/x"),
            "https://storage.googleapis.com/data.example.com/x"
        );
    }

    #[test]
    fn the_emulator_host_replaces_the_endpoint() {
        for (value, want) in [
            ("http://127.0.0.1:4443", "http://127.0.0.1:4443/bkt/a%20b"),
            ("127.0.0.1:4443", "http://127.0.0.1:4443/bkt/a%20b"),
            ("http://localhost:4443/", "http://localhost:4443/bkt/a%20b"),
            (
                "https://gcs.test:8443/base/",
                "https://gcs.test:8443/base/bkt/a%20b",
            ),
            (" 127.0.0.1:9 ", "http://127.0.0.1:9/bkt/a%20b"),
            ("", "https://storage.googleapis.com/bkt/a%20b"),
        ] {
            assert_eq!(
                public_http_url("gs://bkt/a b", &emulator(value)).unwrap(),
                want,
                "{value:?}"
            );
        }
        for bad in [
            "ftp://h:1",
            "http://",
            "http://h:1/?q=1",
            "http://u@h:1",
            "h:port",
            "u:p@ss@h:1",
            "http://u:p/ss@h:1",
        ] {
            let e = public_http_url("gs://bkt/a", &emulator(bad)).unwrap_err();
            assert!(matches!(e, Error::InvalidEnv { .. }), "{bad}: {e:?}");
            assert!(e.to_string().contains(EMULATOR_HOST_VAR), "{e}");
            // Credentials in the address are not shown.
            assert!(
                !e.to_string().contains("u@") && !e.to_string().contains("ss@"),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_gs_urls_say_what_is_missing() {
        let why = |u: &str| parse_gs_url(u).unwrap_err().to_string();
        for (url, want) in [
            ("gs://bkt", "no object name"),
            ("gs://bkt/", "no object name"),
            ("gs:///obj", "no bucket name"),
            ("gs://", "no bucket name"),
            ("gs://Bkt/o", "\"Bkt\" is not a bucket name"),
            ("gs://ab/o", "\"ab\" is not a bucket name"),
            ("gs://-ab/o", "is not a bucket name"),
            ("gs://ab-/o", "is not a bucket name"),
            ("gs://bkt:80/o", "is not a bucket name"),
            ("gs://bkt/a\nb", "line feed"),
            ("https://h/b/o", "not a gs:// URL"),
        ] {
            let e = why(url);
            assert!(e.contains(want), "{url:?}: {e}");
            assert!(e.contains(url), "{url:?}: {e}");
            assert!(e.contains("expected gs://<bucket>/<object>"), "{e}");
        }
        // Credentials in the URL are refused unshown.
        for (url, secret) in [
            ("gs://tok3n@bkt/o", "tok3n"),
            ("gs://u:p@ss@bkt/o", "p@ss"),
            ("gs://u:p/ss@bkt/o", "p/ss"),
        ] {
            let e = why(url);
            assert!(e.contains("holds no user name or password"), "{e}");
            assert!(!e.contains(secret), "{e}");
            assert!(e.starts_with("gs://REDACTED@bkt/o: "), "{e}");
        }
        let long = format!("gs://bkt/{}", "x".repeat(1025));
        assert!(why(&long).contains("1025 bytes long"));
        assert!(parse_gs_url(&format!("gs://bkt/{}", "x".repeat(1024))).is_ok());
        let bucket63 = "a".repeat(63);
        assert!(parse_gs_url(&format!("gs://{bucket63}/o")).is_ok());
        assert!(parse_gs_url(&format!("gs://{bucket63}a/o")).is_err());
        assert!(parse_gs_url(&format!("gs://{bucket63}.{bucket63}/o")).is_ok());
    }
}
