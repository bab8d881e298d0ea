//! [`RemoteWriter`]: a remote object opened for writing (S3 PutObject or multipart upload, HTTP
//! `PUT`, WebHDFS `CREATE`), a [`gpufile::source::Sink`] of the one submit.
//!
//! How to use:
//! 1. Open with [`RemoteWriter::create`] (the endpoint type from the URL, as
//!    [`crate::RemoteFile::open`] infers it) or one of `create_s3`, `create_s3_url`,
//!    `create_http`, `create_s3_presigned_url`, `create_webhdfs`. Nothing is sent at open.
//! 2. Write with [`RemoteWriter::write`] (host memory) or submit
//!    [`Endpoint::Write`](gpufile::source::Endpoint::Write) requests of host or GPU memory to
//!    [`gpufile::Engine::submit`] (GPU memory goes through the pinned bounce pipeline, as reads
//!    do), in any order and in parallel.
//! 3. [`RemoteWriter::close`] makes the object: it exists only once close succeeds. A failure,
//!    a cancellation, a close that finds the writes do not tile the object, or a writer dropped
//!    unclosed makes nothing and, for S3, aborts the multipart upload, so that no upload is
//!    left behind.
//!
//! The writer is the sink; its rooms: [`tiling`] (the writes tile the object; how a write is
//! cut into parts), [`multipart`] (S3's multipart upload) and [`close`] (how the writer ends).
//!
//! S3: an object up to `remote_part_size` bytes is one PutObject at close. A larger one is a
//! multipart upload: each part (`remote_part_size` bytes, the last one shorter) is uploaded by
//! the worker that wrote its last byte, as soon as it is whole, straight from the request's
//! memory where a write covers the whole part (a host buffer or a pinned bounce buffer), else
//! from a part buffer that collects the part's pieces; the upload is completed at close, with
//! every part's ETag. Each part is retried on its own under the `http_*` settings. HTTP and
//! WebHDFS have no parts: their object is collected in host memory and sent at close in one
//! request (WebHDFS: `op=CREATE` to the name node, then the bytes to the data node it
//! redirects to). `gs://` objects go as GCS resumable uploads whose chunks are the parts, sent
//! in order (`gcs/upload.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use gpufile::source::{IoContext, Sink};
use gpufile::Range;
use gpufile::StopFlag;
use gpufile::{Error, Result};

use crate::error::{RemoteError, RemoteFailure};
use crate::gcs::object::GcsObject;
use crate::gcs::upload::{self, GcsUpload};
use crate::http::client::{Client, RemoteStats};
use crate::http::request::Target;
use crate::s3::{S3Object, S3Options};
use crate::syntax::endpoint::{explicit_kind, infer, RemoteEndpointType};
use crate::syntax::env::{process_env, Env};
use crate::syntax::gs::is_gs_scheme;
use crate::syntax::redact::redact;
use crate::syntax::s3::parse_s3_url;
use crate::syntax::scheme::{check_http, scheme};
use crate::webhdfs::webhdfs_parts;

mod close;
mod multipart;
mod tiling;

pub use multipart::{S3_MAX_PART, S3_MAX_PARTS, S3_MIN_PART};
pub use tiling::part_size_for;
use tiling::PartBuf;

/// Where the bytes go.
enum Dest {
    /// An S3 object, each request signed (SigV4).
    S3(Box<S3Object>),
    /// One `PUT` of the whole object to a fixed URL (a plain server, a presigned URL).
    Put { url: String },
    /// WebHDFS: `op=CREATE` at the name node, then the bytes where it redirects.
    WebHdfs { base: String, user: Option<String> },
    /// A `gs://` object: a resumable upload whose chunks are the parts (`gcs/upload.rs`).
    Gcs(Box<GcsUpload>),
}

impl std::fmt::Debug for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs redacted (a presigned PUT URL's signature), as everywhere they are shown.
        match self {
            Dest::S3(o) => o.fmt(f),
            Dest::Put { url } => f.debug_struct("Put").field("url", &redact(url)).finish(),
            Dest::WebHdfs { base, user } => f
                .debug_struct("WebHdfs")
                .field("base", &redact(base))
                .field("user", user)
                .finish(),
            Dest::Gcs(g) => g.fmt(f),
        }
    }
}

/// What has been written and sent so far.
#[derive(Debug, Default)]
struct State {
    /// Ranges reserved by requests (start → end, disjoint, adjacent ones merged).
    reserved: BTreeMap<u64, u64>,
    /// The end of the last reserved range: the object's size so far.
    extent: u64,
    /// Bytes handed to the writer by `write_at`.
    written: u64,
    /// The object is larger than one part: it goes as a multipart upload.
    multipart: bool,
    /// Parts (by index) still being collected, or whole but not yet sent.
    buffers: HashMap<u64, PartBuf>,
    /// ETags of the parts uploaded, by index.
    etags: BTreeMap<u64, String>,
    /// Part uploads under way.
    inflight: usize,
    /// The first failure: later writes are refused, and the upload is aborted.
    failed: Option<Error>,
    /// The abort was sent (or there was nothing to abort).
    aborted: bool,
    /// What the abort request answered, where it failed.
    abort_error: Option<Error>,
    /// `Some(true)`: completed; `Some(false)`: aborted, or ended by an interrupted close.
    closed: Option<bool>,
    /// Why the last close or abort stopped before the server answered (a second close
    /// returns it); cleared by an abort that the server answers.
    interrupted: Option<Error>,
}

/// A remote object opened for writing. Share it in an `Arc`; safe to write from several
/// threads at once (disjoint ranges).
#[derive(Debug)]
pub struct RemoteWriter {
    dest: Dest,
    kind: RemoteEndpointType,
    shown: String,
    client: Client,
    /// S3: the size of every part but the last; others: `u64::MAX` (one part, the object).
    part_size: u64,
    state: Mutex<State>,
    /// Signalled when the last part upload under way ends.
    idle: Condvar,
    /// The multipart upload's id, created by the first part uploaded.
    upload_id: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RemoteWriter {
    fn new(dest: Dest, kind: RemoteEndpointType, size_hint: Option<u64>) -> Result<Self> {
        let (shown, sent) = match &dest {
            Dest::S3(o) => (o.url(), o.url.as_str().to_owned()),
            Dest::Put { url } => (redact(url), url.clone()),
            Dest::WebHdfs { base, .. } => (redact(base), base.clone()),
            Dest::Gcs(g) => (g.obj.gs.clone(), g.obj.url.clone()),
        };
        let part_size = match &dest {
            Dest::S3(_) => {
                let setting = gpufile::Engine::global()?.settings().remote_part_size as u64;
                part_size_for(setting, size_hint)
            }
            Dest::Gcs(_) => {
                let setting = gpufile::Engine::global()?.settings().remote_part_size as u64;
                part_size_for(setting, size_hint).next_multiple_of(upload::CHUNK_UNIT)
            }
            _ => u64::MAX,
        };
        let tls = sent.to_ascii_lowercase().starts_with("https://");
        Ok(RemoteWriter {
            dest,
            kind,
            shown,
            client: Client::new(tls)?,
            part_size,
            state: Mutex::default(),
            idle: Condvar::new(),
            upload_id: Mutex::default(),
        })
    }

    /// An S3 object `bucket`/`object`, signed with the given or the environment's credentials
    /// (missing ones are an `InvalidArgument` before any request). `size_hint`, the object's
    /// size where known, raises the part size so that it fits S3's 10,000 parts.
    pub fn create_s3(
        bucket: &str,
        object: &str,
        size_hint: Option<u64>,
        options: &S3Options,
    ) -> Result<Self> {
        Self::create_s3_with_env(bucket, object, size_hint, options, &process_env)
    }

    fn create_s3_with_env(
        bucket: &str,
        object: &str,
        size_hint: Option<u64>,
        options: &S3Options,
        env: Env<'_>,
    ) -> Result<Self> {
        let obj = S3Object::from_bucket(bucket, object, options, env)?;
        Self::new(Dest::S3(Box::new(obj)), RemoteEndpointType::S3, size_hint)
    }

    /// An S3 object by URL: `s3://bucket/object` or an `http(s)://` URL of the object.
    pub fn create_s3_url(url: &str, size_hint: Option<u64>, options: &S3Options) -> Result<Self> {
        match scheme(url)?.as_str() {
            "s3" => {
                let (bucket, key) = parse_s3_url(url)?;
                Self::create_s3(&bucket, &key, size_hint, options)
            }
            "http" | "https" => {
                let obj = S3Object::from_http_url(url, options, &process_env)?;
                Self::new(Dest::S3(Box::new(obj)), RemoteEndpointType::S3, size_hint)
            }
            _ => Err(Error::InvalidArgument(format!(
                "Unsupported protocol: {}",
                redact(url)
            ))),
        }
    }

    /// An object written with one `PUT` of its bytes to `url` at close (a server that takes
    /// `PUT`, a signed URL of any store: its query is sent, its signature never shown).
    pub fn create_http(url: &str) -> Result<Self> {
        check_http(url, RemoteEndpointType::Http)?;
        let url = url.to_owned();
        Self::new(Dest::Put { url }, RemoteEndpointType::Http, None)
    }

    /// An S3 URL presigned for `PUT`: one `PUT` of the object's bytes at close (a presigned
    /// URL names one request, so there are no parts).
    pub fn create_s3_presigned_url(url: &str) -> Result<Self> {
        check_http(url, RemoteEndpointType::S3PresignedUrl)?;
        let url = url.to_owned();
        Self::new(Dest::Put { url }, RemoteEndpointType::S3PresignedUrl, None)
    }

    /// A WebHDFS file, `http(s)://host:port/webhdfs/v1/<path>[?user.name=<user>]` (without
    /// `user.name`, `KVIKIO_WEBHDFS_USERNAME`), created (overwritten) at close.
    pub fn create_webhdfs(url: &str) -> Result<Self> {
        check_http(url, RemoteEndpointType::WebHdfs)?;
        let (base, user) = webhdfs_parts(url, &process_env);
        Self::new(
            Dest::WebHdfs { base, user },
            RemoteEndpointType::WebHdfs,
            None,
        )
    }

    /// A `gs://<bucket>/<object>` object, written with GCS's resumable upload and the bearer
    /// token of the Google credentials found as [`crate::RemoteFile::open_gcs_public`] finds
    /// them (see `gcs/upload.rs`). Nothing is sent at open.
    fn create_gcs(url: &str, size_hint: Option<u64>) -> Result<Self> {
        let g = GcsUpload::new(GcsObject::open(url, &process_env)?);
        Self::new(Dest::Gcs(Box::new(g)), RemoteEndpointType::Http, size_hint)
    }

    /// The endpoint type from the URL, as [`crate::RemoteFile::open`] picks it (`allow_list`
    /// checked before anything else; an explicit type must fit the URL); a `gs://` URL is a
    /// GCS object. S3 public objects cannot be written: an `InvalidArgument` says what to use
    /// instead.
    pub fn create(
        url: &str,
        kind: RemoteEndpointType,
        allow_list: Option<&[RemoteEndpointType]>,
        size_hint: Option<u64>,
    ) -> Result<Self> {
        let allow = allow_list.unwrap_or(&RemoteEndpointType::DEFAULT_ALLOW_LIST);
        let kind = match kind {
            RemoteEndpointType::Auto => infer(url, allow)?,
            kind => explicit_kind(url, kind, allow)?,
        };
        match kind {
            RemoteEndpointType::S3 => Self::create_s3_url(url, size_hint, &S3Options::default()),
            RemoteEndpointType::S3Public => Err(Error::InvalidArgument(format!(
                "{}: an S3 public object cannot be written; write it as S3 (with credentials) \
                 or through a presigned URL",
                redact(url)
            ))),
            RemoteEndpointType::S3PresignedUrl => Self::create_s3_presigned_url(url),
            RemoteEndpointType::WebHdfs => Self::create_webhdfs(url),
            _ if is_gs_scheme(url) => Self::create_gcs(url, size_hint),
            _ => Self::create_http(url),
        }
    }

    /// The endpoint type.
    pub fn remote_endpoint_type(&self) -> RemoteEndpointType {
        self.kind
    }

    /// The URL, with signatures and tokens redacted.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// For an S3 or `gs://` object, where its credentials come from; never the credentials.
    pub fn credentials_source(&self) -> Option<&'static str> {
        match &self.dest {
            Dest::S3(o) => Some(o.credentials_source()),
            Dest::Gcs(g) => Some(g.obj.creds.source()),
            _ => None,
        }
    }

    /// The size of every part but the last (S3); `None` for endpoints without parts.
    pub fn part_size(&self) -> Option<u64> {
        (self.part_size != u64::MAX).then_some(self.part_size)
    }

    /// The object's size so far: the end of the last range written or being written.
    pub fn nbytes(&self) -> u64 {
        lock(&self.state).extent
    }

    /// Requests sent, retries made and bytes sent since open.
    pub fn stats(&self) -> RemoteStats {
        self.client.stats()
    }

    /// Whether close (or an abort) has ended the writer.
    pub fn closed(&self) -> bool {
        lock(&self.state).closed.is_some()
    }

    fn failed_earlier(&self, e: &Error) -> Error {
        match RemoteError::of(e) {
            Some(r) => RemoteError {
                reason: format!("an earlier write failed: {}", r.reason),
                ..r.clone()
            }
            .into(),
            None => e.clone(),
        }
    }

    /// Writes `src` at `offset` through the engine (split into parts over the workers) and
    /// waits; returns the bytes written.
    pub fn write(
        self: &Arc<Self>,
        src: &[u8],
        offset: u64,
        settings: &gpufile::Settings,
    ) -> Result<usize> {
        let buffer = gpufile::Buffer::Host {
            ptr: src.as_ptr().cast_mut(),
            len: src.len(),
        };
        // Tasks are parts: the plan reads the part size from the sink.
        let req = gpufile::Request::write(buffer, offset);
        // SAFETY: `src` is borrowed until the wait returns; a write only reads it.
        unsafe { self.submit(req, settings) }?.wait()
    }

    /// Submits a write request of this object to the process engine; ranges reserved by a
    /// request that cannot start are given back.
    ///
    /// # Safety
    /// As for [`gpufile::Engine::submit`].
    pub unsafe fn submit(
        self: &Arc<Self>,
        req: gpufile::Request,
        settings: &gpufile::Settings,
    ) -> Result<gpufile::IoFuture> {
        let ranges: Vec<Range> = req.ranges.as_slice().to_vec();
        let engine = gpufile::Engine::global()?;
        let endpoint = gpufile::source::Endpoint::Write(Arc::clone(self) as Arc<dyn Sink>);
        // SAFETY: the caller's contract.
        let r = unsafe { engine.submit(&endpoint, req, settings) };
        if let Err(e) = &r {
            let refused = RemoteError::of(e).is_some_and(|r| {
                matches!(r.kind, RemoteFailure::NotTiled | RemoteFailure::PartLimit)
            });
            if !refused && !matches!(e, Error::Closed) {
                self.release(&ranges);
            }
        }
        r
    }

    /// A request of this object, stopped soon after `stop` is set.
    fn target<'a>(
        &'a self,
        url: &'a str,
        label: &'a str,
        stop: Option<&'a StopFlag>,
    ) -> Target<'a> {
        Target {
            url,
            shown: &self.shown,
            range: None,
            signer: match &self.dest {
                Dest::S3(o) => Some(o.as_ref()),
                _ => None,
            },
            size: None,
            stop,
            label: Some(label),
        }
    }
}

impl Drop for RemoteWriter {
    /// A writer dropped unclosed makes no object: its multipart upload is aborted.
    fn drop(&mut self) {
        if lock(&self.state).closed.is_none() {
            let _ = self.abort();
        }
    }
}

impl Sink for RemoteWriter {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn described(&self) -> Option<&str> {
        Some(&self.shown)
    }

    fn io_backend(&self) -> gpufile::observe::IoBackend {
        match self.dest {
            Dest::WebHdfs { .. } => gpufile::observe::IoBackend::RemoteHdfs,
            _ => gpufile::observe::IoBackend::RemoteHttp,
        }
    }

    /// Reserves the request's ranges ([`RemoteFailure::NotTiled`] for an overlap).
    fn check(&self, ranges: &[Range]) -> Result<()> {
        self.reserve(ranges)
    }

    fn write_at(&self, src: &[u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        if call.stop.is_set() {
            return Err(Error::Cancelled);
        }
        self.take(src, offset, call)
    }

    /// Tasks are parts: each is sent as one part, straight from the bounce buffer.
    fn part_size(&self) -> Option<usize> {
        RemoteWriter::part_size(self).map(|p| usize::try_from(p).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests;
