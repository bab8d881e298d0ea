//! Safetensors checkpoints by URL: a file, a sharded checkpoint's index, or a prefix holding
//! one, with every header read and validated before a byte of data is read.
//!
//! How to use:
//! 1. [`is_url`] tells a URL from a local path (`s3://`, `gs://`, `http(s)://`, WebHDFS).
//! 2. [`open_checkpoint`] opens every file as a [`RemoteFile`] (one size request each) and reads
//!    its header with one small ranged request (a second one only for a header longer than
//!    [`HEADER_PROBE`]); it returns the core's [`Checkpoint`] (its paths are the redacted URLs)
//!    and the open files, so that the planned ranges go to any memory through the engine, as
//!    a local checkpoint's do.
//!
//! A URL ending in `.json` is an index (its shards are siblings of it); one ending in
//! `.safetensors` a file; anything else a prefix, where `model.safetensors.index.json` is
//! looked for, then `model.safetensors` (a prefix is not listed: object stores list only
//! with more rights than reading needs).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpufile::safetensors::{Checkpoint, FormatError, Header, Index, MAX_INDEX_LEN};
use percent_encoding::utf8_percent_encode;

use crate::error::{RemoteError, RemoteFailure};
use crate::file::RemoteFile;
use crate::syntax::endpoint::RemoteEndpointType;
use crate::syntax::keys::KEY_ENCODE;

/// Bytes asked for at once for a header: the 8-byte length and, for most files, all the JSON.
pub const HEADER_PROBE: usize = 64 << 10;

/// Why a checkpoint could not be opened: the network or the server, or the format.
#[derive(Debug)]
pub enum CheckpointError {
    /// A request failed (a [`gpufile::Error`], a remote one inside).
    Remote(gpufile::Error),
    /// A file or the index breaks the format (the path is the URL).
    Format(FormatError),
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointError::Remote(e) => e.fmt(f),
            CheckpointError::Format(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CheckpointError {}

impl From<gpufile::Error> for CheckpointError {
    fn from(e: gpufile::Error) -> Self {
        CheckpointError::Remote(e)
    }
}

impl From<FormatError> for CheckpointError {
    fn from(e: FormatError) -> Self {
        CheckpointError::Format(e)
    }
}

type Result<T> = std::result::Result<T, CheckpointError>;

/// A checkpoint read by URL: the core's table and the open files, in the table's file order.
#[derive(Debug)]
pub struct RemoteCheckpoint {
    /// Headers, tensors and the plan; each file's path is its (redacted) URL.
    pub checkpoint: Checkpoint,
    /// The files, opened for reading.
    pub files: Vec<Arc<RemoteFile>>,
}

/// Whether `path` is a URL that [`open_checkpoint`] reads (`s3://`, `gs://`, `http(s)://`).
pub fn is_url(path: &str) -> bool {
    crate::syntax::scheme::scheme(path)
        .is_ok_and(|s| matches!(s.as_str(), "s3" | "gs" | "http" | "https"))
}

/// The URL of `name` next to `url` (its last path segment replaced, its query dropped).
fn sibling(url: &str, name: &str) -> String {
    let base = url.split(['?', '#']).next().unwrap_or(url);
    let dir = &base[..base.rfind('/').map_or(base.len(), |i| i + 1)];
    let scheme = crate::syntax::scheme::scheme(url).unwrap_or_default();
    match scheme.as_str() {
        "http" | "https" => format!("{dir}{}", utf8_percent_encode(name, KEY_ENCODE)),
        _ => format!("{dir}{name}"), // s3:// and gs:// keys are taken literally
    }
}

/// The last path segment of `url`, without its query.
fn last_segment(url: &str) -> &str {
    let base = url.split(['?', '#']).next().unwrap_or(url);
    base.rsplit('/').next().unwrap_or(base)
}

/// Smallest ranged request a checkpoint's objects are read in (the `task_size` setting where it
/// is larger): each range is a request, and a server's cost is per request (S3's time to first
/// byte, moto's cost of a GET, which grows with the object), so ranges of the size boto3 and the
/// S3 tools move (8-16 MiB) keep up with a plain client where `task_size`'s 4 MiB default falls
/// far behind (docs/performance.md, "Object stores both ways"). A `RemoteFile` opened by itself
/// keeps KvikIO's `task_size` ranges.
pub const CHECKPOINT_RANGE_MIN: usize = 16 << 20;

/// One of a checkpoint's objects, opened to be read in [`CHECKPOINT_RANGE_MIN`] ranges.
fn open(url: &str) -> gpufile::Result<Arc<RemoteFile>> {
    RemoteFile::open(url, RemoteEndpointType::Auto, None, None)
        .map(|f| Arc::new(f.with_min_request(CHECKPOINT_RANGE_MIN)))
}

fn is_404(e: &gpufile::Error) -> bool {
    matches!(
        RemoteError::of(e).map(|r| r.kind),
        Some(RemoteFailure::Status(404 | 403))
    )
}

/// Reads `len` bytes at `offset` of `f` into a new vector.
fn read(f: &Arc<RemoteFile>, offset: u64, len: usize) -> gpufile::Result<Vec<u8>> {
    let settings = gpufile::Engine::global()?.settings();
    let mut buf = vec![0u8; len];
    f.read(&mut buf, offset, &settings)?;
    Ok(buf)
}

/// The header of `f`: one ranged request of at most [`HEADER_PROBE`] bytes, a second one for
/// the rest of a longer header.
pub fn read_header(f: &Arc<RemoteFile>) -> Result<Header> {
    let path = PathBuf::from(f.url());
    let size = f.nbytes();
    let probe = (size as usize).min(HEADER_PROBE);
    let mut first = read(f, 0, probe)?;
    let n = Header::header_len(&path, &first, size)?;
    let end = 8 + n as usize;
    if end > first.len() {
        let rest = read(f, first.len() as u64, end - first.len())?;
        first.extend_from_slice(&rest);
    }
    Ok(Header::parse(&path, &first[8..end], size)?)
}

/// Opens each URL and reads its header, several at a time.
fn open_all(urls: &[String]) -> Result<(Vec<Header>, Vec<Arc<RemoteFile>>)> {
    let results: Vec<Result<(Header, Arc<RemoteFile>)>> = std::thread::scope(|s| {
        let workers: Vec<_> = urls
            .chunks(urls.len().div_ceil(16).max(1))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|u| {
                            let f = open(u)?;
                            Ok((read_header(&f)?, f))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut headers = Vec::with_capacity(urls.len());
    let mut files = Vec::with_capacity(urls.len());
    for r in results {
        let (h, f) = r?;
        headers.push(h);
        files.push(f);
    }
    if headers.len() != urls.len() {
        return Err(CheckpointError::Remote(gpufile::Error::InvalidArgument(
            "a header reader stopped early".into(),
        )));
    }
    Ok((headers, files))
}

/// Opens the checkpoint at `url`: a `.safetensors` file, an index (`*.json`), or a prefix
/// holding `model.safetensors.index.json` or `model.safetensors`.
pub fn open_checkpoint(url: &str) -> Result<RemoteCheckpoint> {
    let name = last_segment(url);
    if name.ends_with(".json") {
        return open_index(url, open(url)?);
    }
    if name.ends_with(".safetensors") {
        let (headers, files) = open_all(&[url.to_owned()])?;
        let checkpoint = Checkpoint::from_headers(Path::new(files[0].url()), headers, None, None)?;
        return Ok(RemoteCheckpoint { checkpoint, files });
    }
    let prefix = format!("{}/", url.trim_end_matches('/'));
    let index = sibling(&prefix, "model.safetensors.index.json");
    match open(&index) {
        Ok(f) => return open_index(&index, f),
        Err(e) if is_404(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let single = sibling(&prefix, "model.safetensors");
    match open_all(std::slice::from_ref(&single)) {
        Ok((headers, files)) => {
            let checkpoint =
                Checkpoint::from_headers(Path::new(files[0].url()), headers, None, None)?;
            Ok(RemoteCheckpoint { checkpoint, files })
        }
        Err(CheckpointError::Remote(e)) if is_404(&e) => Err(FormatError::NotACheckpoint {
            path: crate::syntax::redact::redact(url).into(),
            reason: "no model.safetensors.index.json and no model.safetensors under this \
                     prefix (a prefix is not listed: name the file or the index)"
                .into(),
        }
        .into()),
        Err(e) => Err(e),
    }
}

fn open_index(url: &str, f: Arc<RemoteFile>) -> Result<RemoteCheckpoint> {
    let path = PathBuf::from(f.url());
    if f.nbytes() > MAX_INDEX_LEN {
        return Err(FormatError::InvalidIndex {
            path,
            reason: format!(
                "{} bytes is larger than the limit of {MAX_INDEX_LEN}",
                f.nbytes()
            ),
        }
        .into());
    }
    let text = read(&f, 0, f.nbytes() as usize)?;
    let index = Index::parse(&path, &text)?;
    let urls: Vec<String> = index.shards.iter().map(|s| sibling(url, s)).collect();
    let (headers, files) = open_all(&urls)?;
    let checkpoint =
        Checkpoint::from_headers(&path, headers, Some(index.weight_map), index.metadata)?;
    Ok(RemoteCheckpoint { checkpoint, files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_replace_the_last_segment() {
        assert_eq!(
            sibling("s3://b/m/model.safetensors.index.json", "a b.safetensors"),
            "s3://b/m/a b.safetensors"
        );
        assert_eq!(
            sibling("http://h:1/m/index.json?x=1", "a b.safetensors"),
            "http://h:1/m/a%20b.safetensors"
        );
        assert_eq!(sibling("gs://b/m/", "x"), "gs://b/m/x");
        assert_eq!(last_segment("http://h/a/b.json?q=1"), "b.json");
        assert!(is_url("S3://b/k") && is_url("https://h/x") && is_url("gs://b/o"));
        assert!(!is_url("/tmp/x") && !is_url("model.safetensors") && !is_url("ftp://h/x"));
    }
}
