//! The URL every kind of [`RemoteFile`] shows (`url()`, `Debug`, errors of a real server's
//! refusal) holds none of the credentials of the URL it was opened with: userinfo with a
//! password typed unencoded (`@`, `#`, `?`, `/`) or encoded (`%40`), signatures, tokens.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use super::*;

/// A server on 127.0.0.1: `HEAD` → 10 bytes, WebHDFS `GETFILESTATUS` → 10 bytes, any other
/// `GET` → 404. Its port, and the head of each request it got.
fn server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let shared = Arc::clone(&log);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let (status, body) = if head.starts_with("HEAD ") {
                ("200 OK", "")
            } else if head.contains("op=GETFILESTATUS") {
                ("200 OK", r#"{"FileStatus":{"length":10}}"#)
            } else {
                ("404 Not Found", "")
            };
            let length = if body.is_empty() { 10 } else { body.len() };
            let length = if status.starts_with("404") { 0 } else { length };
            // Logged before the answer: a client that has its answer finds its request logged.
            shared.lock().unwrap().push(head);
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Length: {length}\r\nAccept-Ranges: bytes\r\n\
                 Connection: close\r\n\r\n{body}"
            );
        }
    });
    (port, log)
}

/// Everything `f` shows: `url()`, `Debug`, the range check's error and the error of a read
/// (the server refuses it).
fn everything_shown(f: RemoteFile) -> String {
    let f = Arc::new(f);
    let range = f.check_range(0, 11).unwrap_err();
    let read = f
        .read(&mut [0u8; 4], 0, &gpufile::Settings::default())
        .unwrap_err();
    format!("{}\n{f:?}\n{range}\n{read}", f.url())
}

fn assert_hidden(shown: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!shown.contains(s), "{s:?} shown in:\n{shown}");
    }
    assert!(shown.contains("REDACTED"), "{shown}");
}

/// Passwords with `@` (raw and `%40`): the URL parses, the request reaches the server with
/// the credentials (HTTP Basic), and nothing shows them.
#[test]
fn a_plain_http_object_shows_its_url_redacted() {
    let (port, log) = server();
    for password in ["p@ss", "p%40ss", "p@s@s"] {
        let url = format!("http://alice:{password}@127.0.0.1:{port}/a.bin");
        let f = RemoteFile::open_http(&url, None).unwrap();
        assert_eq!(f.nbytes(), 10);
        assert_eq!(f.url(), format!("http://REDACTED@127.0.0.1:{port}/a.bin"));
        let shown = everything_shown(f);
        assert!(shown.contains("404"), "{shown}");
        assert_hidden(&shown, &["alice", "ss@", "p%40"]);
    }
    let heads = log.lock().unwrap().join("");
    assert!(heads.contains("authorization: Basic"), "{heads}");
}

/// Passwords with `#`, `?` or `/` unencoded: no client reads them as userinfo (the user name
/// would be looked up as the host), so every opener refuses them before any request, and the
/// error hides the whole password.
#[test]
fn a_password_typed_with_hash_question_mark_or_slash_is_refused_unshown() {
    let (port, log) = server();
    for password in ["p#ss", "p?ss", "p/ss", "p#s?s/s@s"] {
        let secrets = ["alice", password, "ss@", "s@s"];
        let url = format!("http://alice:{password}@127.0.0.1:{port}/a.bin");
        let hdfs = format!("http://alice:{password}@127.0.0.1:{port}/webhdfs/v1/a.bin");
        for e in [
            RemoteFile::open_http(&url, Some(10)).unwrap_err(),
            RemoteFile::open_http(&url, None).unwrap_err(),
            RemoteFile::open_s3_public(&url, Some(10)).unwrap_err(),
            RemoteFile::open_s3_presigned_url(&url, Some(10)).unwrap_err(),
            RemoteFile::open_webhdfs(&hdfs, Some(10)).unwrap_err(),
            RemoteFile::open(&url, RemoteEndpointType::Auto, None, Some(10)).unwrap_err(),
            RemoteFile::open(&url, RemoteEndpointType::Http, None, Some(10)).unwrap_err(),
            crate::RemoteWriter::create_http(&url).unwrap_err(),
        ] {
            assert_hidden(&e.to_string(), &secrets);
        }
        let e = RemoteFile::open_http(&url, Some(10))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "http://REDACTED@127.0.0.1:{port}/a.bin: the URL's user name or password holds \
                 a '#', '?' or '/' that is not percent-encoded (write %23, %3F, %2F)"
            )
        );
    }
    assert!(log.lock().unwrap().is_empty(), "a request was sent");
}

#[test]
fn s3_public_and_presigned_objects_show_their_urls_redacted() {
    let (port, _log) = server();
    let f =
        RemoteFile::open_s3_public(&format!("http://k:s@cr@t@127.0.0.1:{port}/b/k"), None).unwrap();
    assert_eq!(f.url(), format!("http://REDACTED@127.0.0.1:{port}/b/k"));
    assert_hidden(&everything_shown(f), &["s@cr", "cr@t"]);
    let presigned = format!(
        "http://127.0.0.1:{port}/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDX\
         &X-Amz-Signature=5ig&X-Amz-Security-Token=t0k&%73ig=s2"
    );
    // nbytes given: its size request would be the refused GET.
    let f = RemoteFile::open_s3_presigned_url(&presigned, Some(10)).unwrap();
    assert_eq!(
        f.url(),
        format!(
            "http://127.0.0.1:{port}/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED\
             &X-Amz-Security-Token=REDACTED&%73ig=REDACTED"
        )
    );
    assert_hidden(&everything_shown(f), &["AKIDX", "5ig", "t0k", "s2"]);
    // Written: the writer's Debug too.
    let w = crate::RemoteWriter::create_s3_presigned_url(&presigned).unwrap();
    assert_hidden(
        &format!("{w:?} {}", w.url()),
        &["AKIDX", "5ig", "t0k", "s2"],
    );
    let w =
        crate::RemoteWriter::create_http(&format!("http://alice:p@ss@127.0.0.1:{port}/o")).unwrap();
    assert_hidden(&format!("{w:?} {}", w.url()), &["alice", "p@ss", "ss@"]);
}

/// A signed S3 object at an endpoint with userinfo (`AWS_ENDPOINT_URL`), and by its
/// `http://` URL.
#[test]
fn signed_s3_objects_show_their_urls_redacted() {
    let (port, _log) = server();
    let o = S3Options {
        region: Some("us-east-1".into()),
        access_key_id: Some("AKIDX".into()),
        secret_access_key: Some("SECRETX".into()),
        endpoint_url: Some(format!("http://alice:p@ss@127.0.0.1:{port}")),
        session_token: Some("T0KEN".into()),
    };
    let f = RemoteFile::open_s3_with_env("b", "k.bin", None, &o, &|_| None).unwrap();
    assert_eq!(f.url(), format!("http://REDACTED@127.0.0.1:{port}/b/k.bin"));
    let shown = everything_shown(f);
    assert!(shown.contains("404"), "{shown}");
    assert_hidden(
        &shown,
        &["alice", "ss@", "%40", "AKIDX", "SECRETX", "T0KEN"],
    );
    let o = S3Options {
        endpoint_url: None,
        ..o
    };
    let url = format!("http://alice:p%40ss@127.0.0.1:{port}/b/k.bin");
    let f = RemoteFile::open_s3_url(&url, None, &o).unwrap();
    assert_eq!(f.url(), format!("http://REDACTED@127.0.0.1:{port}/b/k.bin"));
    assert_hidden(&everything_shown(f), &["alice", "%40", "SECRETX"]);
    // An s3:// URL holds no credentials: refused, unshown.
    let e = RemoteFile::open_s3_url("s3://alice:p@ss@b/k", None, &o).unwrap_err();
    assert!(e.to_string().contains("no user name or password"), "{e}");
    assert_hidden(&e.to_string(), &["alice", "ss@"]);
}

/// WebHDFS: the userinfo and the delegation token of the query.
#[test]
fn webhdfs_objects_show_their_urls_redacted() {
    let (port, log) = server();
    for password in ["p@ss", "p%40ss", "p@s@s"] {
        let url = format!(
            "http://alice:{password}@127.0.0.1:{port}/webhdfs/v1/a.bin?delegation=DT0K&user.name=me"
        );
        let f = RemoteFile::open_webhdfs_with_env(&url, Some(10), &|_| None).unwrap();
        assert_eq!(
            f.url(),
            format!("http://REDACTED@127.0.0.1:{port}/webhdfs/v1/a.bin")
        );
        assert!(matches!(&f.access, Access::WebHdfs { user: Some(u), .. } if u == "me"));
        assert_hidden(&everything_shown(f), &["alice", password, "ss@", "DT0K"]);
    }
    let url = format!("http://alice:p@ss@127.0.0.1:{port}/webhdfs/v1/a.bin");
    let f = RemoteFile::open_webhdfs_with_env(&url, None, &|_| None).unwrap();
    assert_eq!(f.nbytes(), 10);
    assert!(log
        .lock()
        .unwrap()
        .iter()
        .any(|h| h.contains("op=GETFILESTATUS")));
}

/// `gs://`: credentials in the URL, or in the emulator's address, are refused unshown.
#[test]
fn gs_objects_show_no_credentials() {
    let (port, _log) = server();
    let env = |host: String| {
        move |k: &str| match k {
            crate::EMULATOR_HOST_VAR => Some(host.clone()),
            "NO_GCE_CHECK" => Some("true".to_string()),
            _ => None,
        }
    };
    let plain = env(format!("127.0.0.1:{port}"));
    let f = RemoteFile::open_gcs_public_with_env("gs://bkt/o", None, &plain).unwrap();
    assert_eq!(f.url(), "gs://bkt/o");
    let shown = format!("{f:?}");
    assert!(shown.contains("gs://bkt/o"), "{shown}");
    for url in [
        "gs://alice:p@ss@bkt/o",
        "gs://alice:p#ss@bkt/o",
        "gs://alice:p/ss@bkt/o",
    ] {
        let e = RemoteFile::open_gcs_public_with_env(url, None, &plain).unwrap_err();
        assert_hidden(&e.to_string(), &["alice", "p@ss", "p#ss", "p/ss", "ss@"]);
        let e = RemoteFile::open(url, RemoteEndpointType::Auto, None, None).unwrap_err();
        assert_hidden(&e.to_string(), &["alice", "p@ss", "p#ss", "p/ss", "ss@"]);
    }
    for host in [
        format!("http://alice:p@ss@127.0.0.1:{port}"),
        format!("alice:p/ss@127.0.0.1:{port}"),
    ] {
        let e = RemoteFile::open_gcs_public_with_env("gs://bkt/o", None, &env(host)).unwrap_err();
        assert_hidden(&e.to_string(), &["alice", "p@ss", "p/ss", "ss@"]);
    }
}
