//! WebHDFS (Apache Hadoop's REST API) as an endpoint: a file's base URL and user
//! (`user.name` or `KVIKIO_WEBHDFS_USERNAME`), the query that names them, and the length in a
//! `GETFILESTATUS` answer. Requests are plain HTTP ([`crate::http`]); the URL shape is
//! [`crate::syntax::scheme::is_webhdfs_url`].

use crate::syntax::env::Env;

/// A WebHDFS URL's base (no query) and user: `user.name` in the URL, else
/// `KVIKIO_WEBHDFS_USERNAME`.
pub(crate) fn webhdfs_parts(url: &str, env: Env<'_>) -> (String, Option<String>) {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let user = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("user.name="))
        .map(str::to_owned)
        .or_else(|| env("KVIKIO_WEBHDFS_USERNAME").filter(|u| !u.is_empty()));
    (base.split('#').next().unwrap_or(base).to_owned(), user)
}

/// `user.name=<user>&`, the start of a WebHDFS query, where a user is named.
pub(crate) fn user_param(user: &Option<String>) -> String {
    user.as_ref()
        .map(|u| format!("user.name={u}&"))
        .unwrap_or_default()
}

/// `FileStatus.length` of a WebHDFS `GETFILESTATUS` answer.
pub(crate) fn webhdfs_length(body: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get("FileStatus")
        .and_then(|s| s.get("length"))
        .or_else(|| v.get("length"))?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhdfs_length_from_file_status() {
        let body = r#"{"FileStatus":{"accessTime":0,"length":24930,"type":"FILE"}}"#;
        assert_eq!(webhdfs_length(body), Some(24930));
        assert_eq!(webhdfs_length(r#"{"length": 5}"#), Some(5));
        assert_eq!(webhdfs_length(r#"{"FileStatus":{"type":"FILE"}}"#), None);
        assert_eq!(webhdfs_length("not json"), None);
    }
}
