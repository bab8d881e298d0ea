//! The CLI's one error: a type name, a message, and the errno and path where known, printed
//! as `gpufile: error: MESSAGE` on stderr, or as docs/json.md's error object with `--json`.
//!
//! An OS error reads as gpufile's own do, `OP PATH: REASON` (`open x.bin: No such file or
//! directory`), in every command: [`CliError::os`] words those the CLI meets itself, gpufile's
//! [`gpufile::Error::Os`] already reads so, and [`os_text`] is the reason without Rust's
//! `(os error N)` (the errno is in the JSON's `errno`).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Why a command failed.
#[derive(Debug)]
pub(crate) struct CliError {
    /// The kind, in kebab case: `os`, `unexpected-eof`, `invalid-argument`, `invalid-setting`,
    /// `cuda-unavailable`, `cufile`, `usage`, ... (gpufile's error variants, named alike).
    pub kind: String,
    /// The sentence for people.
    pub message: String,
    /// The OS error number, where the kernel said no.
    pub errno: Option<i32>,
    /// The file concerned, where known.
    pub path: Option<PathBuf>,
    /// The exit status: 1, or 2 for usage errors.
    pub status: i32,
    /// The command's JSON output carries the error already (`config` shows its settings and the
    /// error in one object): nothing more goes to stdout.
    pub in_output: bool,
}

impl CliError {
    /// A bad argument (exit status 1: the command line parsed, the value did not make sense).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid-argument", message)
    }

    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        CliError {
            kind: kind.into(),
            message: message.into(),
            errno: None,
            path: None,
            status: 1,
            in_output: false,
        }
    }

    /// Marks the error as carried by the JSON output already where `json`.
    pub fn in_output(mut self, json: bool) -> Self {
        self.in_output = json;
        self
    }

    /// The OS error `e` of `op` (`open`, `read`, `create`...) on `path`, worded as gpufile's
    /// own: `open x.bin: No such file or directory`.
    pub fn os(op: &str, path: &Path, e: &std::io::Error) -> Self {
        let mut err = CliError::new("os", format!("{op} {}: {}", path.display(), os_text(e)));
        err.errno = os_errno(e);
        err.with_path(path)
    }

    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// docs/json.md's error object, in its envelope.
    pub fn to_json(&self, command: Option<&str>) -> Value {
        json!({
            "schema_version": gpufile_diag::schema::SCHEMA_VERSION,
            "command": command,
            "error": {
                "type": self.kind,
                "message": self.message,
                "errno": self.errno,
                "path": self.path,
            },
        })
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The errno behind `e`, also where a library wrapped it (tempfile adds the path).
fn os_errno(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        let inner = e.get_ref()?;
        let mut source: Option<&(dyn std::error::Error + 'static)> = inner.source();
        while let Some(s) = source {
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                return io.raw_os_error();
            }
            source = s.source();
        }
        None
    })
}

/// The reason of `e` as people read it: the OS's text for its errno ("No such file or
/// directory"), without the " (os error 2)" Rust appends, also inside a wrapping library's text.
pub(crate) fn os_text(e: &std::io::Error) -> String {
    if let Some(errno) = e.raw_os_error() {
        return gpufile::__private::error::os_message(errno);
    }
    let mut text = e.to_string();
    while let Some(at) = text.find(" (os error ") {
        let end = text[at..].find(')').map_or(text.len(), |i| at + i + 1);
        text.replace_range(at..end, "");
    }
    text
}

/// `UnexpectedEof` → `unexpected-eof`: the variant's name, from its `Debug` text, so a new
/// variant is named without a change here.
fn kebab_variant(debug: &str) -> String {
    let name: String = debug
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

impl From<gpufile::Error> for CliError {
    fn from(e: gpufile::Error) -> Self {
        use gpufile::Error as E;
        let path = match &e {
            E::Os { path, .. }
            | E::UnexpectedEof { path, .. }
            | E::NotReadable { path, .. }
            | E::NotWritable { path, .. }
            | E::NotSeekable { path, .. } => Some(path.clone()),
            // Redacted by gpufile-remote: no signature or key.
            E::Source { .. } => gpufile_remote::RemoteError::of(&e).map(|r| r.url.clone().into()),
            _ => None,
        };
        // The kind `read` and `bench` give every file they cannot read by offset.
        let kind = match &e {
            E::NotSeekable { .. } => "not-a-regular-file".to_owned(),
            // The kind of source that failed: `remote` for a server or network failure.
            E::Source { what, .. } => (*what).to_owned(),
            _ => kebab_variant(&format!("{e:?}")),
        };
        CliError {
            kind,
            message: e.to_string(),
            errno: e.errno(),
            path,
            status: 1,
            in_output: false,
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError {
            kind: "os".into(),
            errno: os_errno(&e),
            message: os_text(&e),
            path: None,
            status: 1,
            in_output: false,
        }
    }
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::invalid(message)
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        CliError::invalid(message)
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::new("internal", e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpufile_errors_keep_type_errno_and_path() {
        let e = CliError::from(gpufile::Error::UnexpectedEof {
            path: "/data/x".into(),
            offset: 8,
            len: 4,
            file_size: 10,
        });
        assert_eq!(e.kind, "unexpected-eof");
        assert_eq!(e.path.as_deref(), Some(std::path::Path::new("/data/x")));
        let e = CliError::from(gpufile::Error::InvalidArgument("no".into()));
        assert_eq!(e.kind, "invalid-argument");
        let v = e.to_json(Some("read"));
        assert_eq!(v["error"]["message"], "no");
        assert!(v["error"]["errno"].is_null());
        assert_eq!(v["command"], "read");
    }

    #[test]
    fn os_errors_read_as_gpufiles_without_rusts_os_error_n() {
        let enoent = std::io::Error::from_raw_os_error(libc::ENOENT);
        let e = CliError::os("open", Path::new("x.bin"), &enoent);
        assert_eq!(e.message, "open x.bin: No such file or directory");
        assert_eq!((e.kind.as_str(), e.errno), ("os", Some(libc::ENOENT)));
        // As gpufile's own error of the same open reads.
        let core = gpufile::FileHandle::open("/nonexistent-dir/x.bin", "r").unwrap_err();
        let e = CliError::os("open", Path::new("/nonexistent-dir/x.bin"), &enoent);
        assert_eq!(CliError::from(core).message, e.message);
        // A library's wrapping (tempfile names the path after Rust's text).
        let wrapped = std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} at path \"/d/.x\"",
                std::io::Error::from_raw_os_error(libc::EACCES)
            ),
        );
        assert_eq!(os_text(&wrapped), "Permission denied at path \"/d/.x\"");
    }
}
