//! Credential files, the JWT of a service account, ADC's order, token answers.

use std::collections::HashMap;
use std::path::Path;

use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

use super::*;

/// A throwaway RSA key made for these tests (`tests/data/test-rsa-key.pem`, PKCS#8).
fn test_key_pem() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/test-rsa-key.pem");
    std::fs::read_to_string(path).unwrap()
}

fn service_account(token_uri: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "kid-1",
        "private_key": test_key_pem(),
        "client_email": "sa@p.iam.gserviceaccount.com",
        "token_uri": token_uri,
    })
    .to_string()
}

const USER: &str = r#"{"type": "authorized_user", "client_id": "cid",
    "client_secret": "SECRET-cs", "refresh_token": "SECRET-rt"}"#;

fn b64json(part: &str) -> Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

#[test]
fn the_jwt_is_rs256_signed_for_the_storage_scope() {
    let key = rsa_key(&test_key_pem()).unwrap();
    let t = jwt(
        &key,
        Some("kid-1"),
        "sa@p",
        "https://t/token",
        1_700_000_000,
    )
    .unwrap();
    let parts: Vec<&str> = t.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header = b64json(parts[0]);
    assert_eq!(
        header,
        serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": "kid-1"})
    );
    let claims = b64json(parts[1]);
    assert_eq!(
        claims,
        serde_json::json!({"iss": "sa@p", "scope": SCOPE, "aud": "https://t/token",
                           "iat": 1_700_000_000u64, "exp": 1_700_003_600u64})
    );
    // The signature verifies with the key's public half, over `header.claims`.
    let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public().as_ref());
    let signed = format!("{}.{}", parts[0], parts[1]);
    public.verify(signed.as_bytes(), &sig).unwrap();
    assert!(public.verify(b"other", &sig).is_err());
    // No key id: no `kid`.
    let t = jwt(&key, None, "sa@p", "https://t/token", 1).unwrap();
    assert!(b64json(t.split('.').next().unwrap()).get("kid").is_none());
}

#[test]
fn credential_files_parse_by_type() {
    let (g, kind) = parse_credentials(&service_account("http://127.0.0.1:9/token")).unwrap();
    assert_eq!(kind, Kind::ServiceAccount);
    assert!(
        matches!(g, Grant::ServiceAccount { ref email, ref key_id, ref token_uri, .. }
        if email == "sa@p.iam.gserviceaccount.com" && key_id.as_deref() == Some("kid-1")
            && token_uri == "http://127.0.0.1:9/token")
    );
    // gcloud's user file names no token endpoint: Google's.
    let (g, kind) = parse_credentials(USER).unwrap();
    assert_eq!(kind, Kind::AuthorizedUser);
    assert!(
        matches!(g, Grant::AuthorizedUser { ref token_uri, ref client_id, .. }
        if token_uri == DEFAULT_TOKEN_URI && client_id == "cid")
    );
}

#[test]
fn bad_credential_files_say_what_is_wrong_and_show_no_secret() {
    let why = |text: &str| match parse_credentials(text) {
        Err(e) => e,
        Ok(_) => panic!("accepted {text}"),
    };
    let mut sa: Value = serde_json::from_str(&service_account("https://t/token")).unwrap();
    sa["private_key"] =
        Value::from("-----BEGIN PRIVATE KEY-----\nU0VDUkVULWtleQ==\n-----END PRIVATE KEY-----\n");
    let e = why(&sa.to_string());
    assert!(
        e.contains("\"private_key\" is not an RSA private key"),
        "{e}"
    );
    sa["private_key"] = Value::from("SECRET-not-pem");
    let e = why(&sa.to_string());
    assert!(
        e.contains("no PRIVATE KEY block") && !e.contains("SECRET"),
        "{e}"
    );
    let mut user: Value = serde_json::from_str(USER).unwrap();
    user.as_object_mut().unwrap().remove("refresh_token");
    let e = why(&user.to_string());
    assert_eq!(e, "the credentials have no \"refresh_token\"");
    user["refresh_token"] = Value::from("SECRET-rt");
    user["token_uri"] = Value::from("file:///etc/passwd");
    assert!(why(&user.to_string()).contains("not an http(s) URL"));
    let e = why(r#"{"type": "external_account", "audience": "SECRET"}"#);
    assert!(e.contains("\"external_account\" are not supported") && !e.contains("SECRET"));
    assert!(why(r#"{"client_id": "x"}"#).contains("no \"type\""));
    let e = why("{\"type\": \"authorized_user\", SECRET");
    assert!(
        e.starts_with("not a JSON credentials file") && !e.contains("SECRET"),
        "{e}"
    );
}

/// An environment of `pairs`, with the GCE check off unless `NO_GCE_CHECK` is given.
fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn source(env: &[(&str, &str)], on_gce: bool) -> Result<&'static str> {
    Credentials::discover(&env_of(env), &|| on_gce).map(|c| c.source())
}

#[test]
fn sources_are_tried_in_adc_order() {
    let dir = tempfile::tempdir().unwrap();
    let sa = dir.path().join("sa.json");
    std::fs::write(&sa, service_account("http://127.0.0.1:9/token")).unwrap();
    let gcloud = dir.path().join("gcloud");
    std::fs::create_dir(&gcloud).unwrap();
    std::fs::write(gcloud.join(WELL_KNOWN_FILE), USER).unwrap();
    let sa = sa.to_str().unwrap();
    let gcloud = gcloud.to_str().unwrap();
    let all = [
        (CREDENTIALS_VAR, sa),
        (CLOUDSDK_CONFIG_VAR, gcloud),
        (METADATA_HOST_VAR, "127.0.0.1:9"),
    ];
    assert_eq!(
        source(&all, true).unwrap(),
        "GOOGLE_APPLICATION_CREDENTIALS (service account key)"
    );
    assert_eq!(
        source(&all[1..], true).unwrap(),
        "gcloud application default credentials (authorized user)"
    );
    assert_eq!(source(&all[2..], false).unwrap(), "GCE metadata server");
    // The well-known file under $HOME when CLOUDSDK_CONFIG is unset.
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".config/gcloud")).unwrap();
    std::fs::write(
        home.join(".config/gcloud").join(WELL_KNOWN_FILE),
        service_account("http://127.0.0.1:9/t"),
    )
    .unwrap();
    assert_eq!(
        source(&[("HOME", home.to_str().unwrap())], false).unwrap(),
        "gcloud application default credentials (service account key)"
    );
    // On a GCE VM (by its DMI name) the metadata server, unless NO_GCE_CHECK; else nothing.
    assert_eq!(source(&[], true).unwrap(), "GCE metadata server");
    assert_eq!(
        source(&[(NO_GCE_CHECK_VAR, "True")], true).unwrap(),
        "none (anonymous: no Google credentials found)"
    );
    assert_eq!(
        source(&[("HOME", gcloud)], false).unwrap(),
        "none (anonymous: no Google credentials found)"
    );
    // Empty variables are unset ones.
    assert_eq!(
        source(&[(CREDENTIALS_VAR, ""), (METADATA_HOST_VAR, " ")], false).unwrap(),
        "none (anonymous: no Google credentials found)"
    );
}

#[test]
fn a_named_file_that_fails_is_an_error_not_a_fall_through() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.json");
    let e = source(&[(CREDENTIALS_VAR, missing.to_str().unwrap())], true).unwrap_err();
    assert!(matches!(e, Error::InvalidEnv { .. }), "{e:?}");
    assert!(e.to_string().contains(CREDENTIALS_VAR), "{e}");
    assert!(e.to_string().contains("cannot open"), "{e}");
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"type": "authorized_user", "client_secret": "SECRET"}"#,
    )
    .unwrap();
    let e = source(&[(CREDENTIALS_VAR, bad.to_str().unwrap())], true).unwrap_err();
    assert!(e.to_string().contains("no \"client_id\""), "{e}");
    assert!(!e.to_string().contains("SECRET"), "{e}");
    // A broken well-known file is an error naming it.
    std::fs::write(dir.path().join(WELL_KNOWN_FILE), "{").unwrap();
    let e = source(&[(CLOUDSDK_CONFIG_VAR, dir.path().to_str().unwrap())], true).unwrap_err();
    assert!(e.to_string().contains("gcloud's credentials file"), "{e}");
    let e = source(&[(METADATA_HOST_VAR, "ftp://h:1")], false).unwrap_err();
    assert!(e.to_string().contains(METADATA_HOST_VAR), "{e}");
}

#[test]
fn metadata_hosts_take_host_port_or_urls() {
    assert_eq!(
        metadata_base("127.0.0.1:8080").unwrap(),
        "http://127.0.0.1:8080"
    );
    assert_eq!(metadata_base("http://h:1/").unwrap(), "http://h:1");
    assert!(metadata_base("http://u@h:1").is_err());
    let e = metadata_base("http://user:s3cret@h:1").unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
    assert!(metadata_base("h:port").is_err());
}

#[test]
fn token_answers_parse_and_refusals_say_the_oauth_error() {
    let (t, life) = parse_token(
        r#"{"access_token": "ya29.a-b_c", "expires_in": 3599, "token_type": "Bearer"}"#,
    )
    .unwrap();
    assert_eq!((t.as_str(), life.as_secs()), ("ya29.a-b_c", 3599));
    assert_eq!(
        parse_token(r#"{"access_token": "x", "expires_in": "7"}"#)
            .unwrap()
            .1,
        Duration::from_secs(7)
    );
    for (body, why) in [
        ("nope", "not JSON"),
        (r#"{"expires_in": 1}"#, "no access_token"),
        (
            r#"{"access_token": "a b", "expires_in": 1}"#,
            "not a header value",
        ),
        (
            r#"{"access_token": "a", "token_type": "MAC"}"#,
            "not Bearer",
        ),
        (r#"{"access_token": "a", "expires_in": -1}"#, "not a number"),
    ] {
        let e = parse_token(body).unwrap_err();
        assert!(e.contains(why), "{body}: {e}");
        assert!(!e.contains("a b"), "{e}");
    }
    // A token type that is not Bearer is shown cut at 20 characters.
    let long = format!(
        r#"{{"access_token": "a", "token_type": "MAC{}"}}"#,
        "x".repeat(500)
    );
    let e = parse_token(&long).unwrap_err();
    assert_eq!(
        e,
        r#"the token is of type "MACxxxxxxxxxxxxxxxxx", not Bearer"#
    );
    assert_eq!(
        oauth_error(r#"{"error": "invalid_grant", "error_description": "Invalid JWT Signature."}"#),
        ": invalid_grant: Invalid JWT Signature."
    );
    assert_eq!(
        oauth_error(r#"{"error": {"code": 403, "message": "no"}}"#),
        ": no"
    );
    assert_eq!(oauth_error("<html>"), "");
}

#[test]
fn tokens_are_fetched_again_before_they_expire() {
    assert_eq!(
        refresh_after(Duration::from_secs(3600)),
        Duration::from_secs(3300)
    );
    assert_eq!(
        refresh_after(Duration::from_secs(400)),
        Duration::from_secs(200)
    );
    assert_eq!(
        refresh_after(Duration::from_secs(2)),
        Duration::from_secs(1)
    );
    assert_eq!(refresh_after(Duration::ZERO), Duration::ZERO);
}

#[test]
fn debug_shows_the_source_only() {
    let (grant, _) = parse_credentials(USER).unwrap();
    let auth = GcsAuth::new("test source", grant).unwrap();
    let shown = format!("{:?}", Credentials::Found(Arc::new(auth)));
    assert!(shown.contains("test source"), "{shown}");
    assert!(
        !shown.contains("SECRET") && !shown.contains("cid"),
        "{shown}"
    );
}
