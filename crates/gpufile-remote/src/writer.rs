//! [`RemoteWriter`]: a remote object opened for writing (S3 PutObject or multipart upload, HTTP
//! `PUT`, WebHDFS `CREATE`), a [`gpufile::source::Sink`] of the one submit.
//!
//! How to use:
//! 1. Open with [`RemoteWriter::create`] (the endpoint type from the URL, as
//!    [`crate::RemoteFile::open`] infers it) or one of `create_s3`, `create_s3_url`,
//!    `create_http`, `create_s3_presigned_url`, `create_webhdfs`. Nothing is sent at open.
//! 2. Write with [`RemoteWriter::write`] (host memory) or submit [`Endpoint::Write`] requests of
//!    host or GPU memory to [`gpufile::Engine::submit`] (GPU memory goes through the pinned
//!    bounce pipeline, as reads do), in any order and in parallel.
//! 3. [`RemoteWriter::close`] makes the object: it exists only once close succeeds. A failure,
//!    a cancellation, a close that finds the writes do not tile the object, or a writer dropped
//!    unclosed makes nothing and, for S3, aborts the multipart upload, so that no upload is
//!    left behind.
//!
//! The writes to an object tile it: every byte from 0 to the end of the last write is written
//! exactly once. A write that overlaps an earlier one is refused before any byte moves; a gap is
//! refused at close. Both are [`RemoteFailure::NotTiled`].
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
//! in order (`gcs_write.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use gpufile::future::StopFlag;
use gpufile::request::Range;
use gpufile::source::{IoContext, Sink};
use gpufile::{Error, Result};

use crate::endpoint::{self, RemoteEndpointType, S3Object, S3Options};
use crate::error::{RemoteError, RemoteFailure};
use crate::file::{self, check_http, process_env, Env};
use crate::gcs::{self, GcsObject};
use crate::gcs_write::{self, GcsUpload};
use crate::http::{Client, RemoteStats, Target};

mod close;

/// S3's smallest part, in bytes (every part but the last).
pub const S3_MIN_PART: u64 = 5 << 20;
/// S3's largest part, in bytes.
pub const S3_MAX_PART: u64 = 5 << 30;
/// S3's most parts of one multipart upload.
pub const S3_MAX_PARTS: u64 = 10_000;

/// Where the bytes go.
#[derive(Debug)]
enum Dest {
    /// An S3 object, each request signed (SigV4).
    S3(Box<S3Object>),
    /// One `PUT` of the whole object to a fixed URL (a plain server, a presigned URL).
    Put { url: String },
    /// WebHDFS: `op=CREATE` at the name node, then the bytes where it redirects.
    WebHdfs { base: String, user: Option<String> },
    /// A `gs://` object: a resumable upload whose chunks are the parts (`gcs_write.rs`).
    Gcs(Box<GcsUpload>),
}

/// A part's bytes collected from several writes.
#[derive(Debug, Default)]
struct PartBuf {
    data: Vec<u8>,
    filled: u64,
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

/// The part size for an object of `size_hint` bytes (when known) under `setting`: the setting,
/// raised (to a whole MiB) where the object would need more than [`S3_MAX_PARTS`] parts.
pub fn part_size_for(setting: u64, size_hint: Option<u64>) -> u64 {
    let setting = setting.clamp(S3_MIN_PART, S3_MAX_PART);
    let needed = size_hint.map_or(0, |n| n.div_ceil(S3_MAX_PARTS).next_multiple_of(1 << 20));
    setting.max(needed).min(S3_MAX_PART)
}

impl RemoteWriter {
    fn new(dest: Dest, kind: RemoteEndpointType, size_hint: Option<u64>) -> Result<Self> {
        let (shown, sent) = match &dest {
            Dest::S3(o) => (o.url(), o.url.as_str().to_owned()),
            Dest::Put { url } => (endpoint::redact(url), url.clone()),
            Dest::WebHdfs { base, .. } => (endpoint::redact(base), base.clone()),
            Dest::Gcs(g) => (g.obj.gs.clone(), g.obj.url.clone()),
        };
        let part_size = match &dest {
            Dest::S3(_) => {
                let setting = gpufile::Engine::global()?.settings().remote_part_size as u64;
                part_size_for(setting, size_hint)
            }
            Dest::Gcs(_) => {
                let setting = gpufile::Engine::global()?.settings().remote_part_size as u64;
                part_size_for(setting, size_hint).next_multiple_of(gcs_write::CHUNK_UNIT)
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
        match endpoint::scheme(url)?.as_str() {
            "s3" => {
                let (bucket, key) = endpoint::parse_s3_url(url)?;
                Self::create_s3(&bucket, &key, size_hint, options)
            }
            "http" | "https" => {
                let obj = S3Object::from_http_url(url, options, &process_env)?;
                Self::new(Dest::S3(Box::new(obj)), RemoteEndpointType::S3, size_hint)
            }
            _ => Err(Error::InvalidArgument(format!(
                "Unsupported protocol: {}",
                endpoint::redact(url)
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
        let (base, user) = file::webhdfs_parts(url, &process_env);
        Self::new(
            Dest::WebHdfs { base, user },
            RemoteEndpointType::WebHdfs,
            None,
        )
    }

    /// A `gs://<bucket>/<object>` object, written with GCS's resumable upload and the bearer
    /// token of the Google credentials found as [`crate::RemoteFile::open_gcs_public`] finds
    /// them (see `gcs_write.rs`). Nothing is sent at open.
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
            RemoteEndpointType::Auto => endpoint::infer(url, allow)?,
            kind => file::explicit_kind(url, kind, allow)?,
        };
        match kind {
            RemoteEndpointType::S3 => Self::create_s3_url(url, size_hint, &S3Options::default()),
            RemoteEndpointType::S3Public => Err(Error::InvalidArgument(format!(
                "{}: an S3 public object cannot be written; write it as S3 (with credentials) \
                 or through a presigned URL",
                endpoint::redact(url)
            ))),
            RemoteEndpointType::S3PresignedUrl => Self::create_s3_presigned_url(url),
            RemoteEndpointType::WebHdfs => Self::create_webhdfs(url),
            _ if gcs::is_gs_scheme(url) => Self::create_gcs(url, size_hint),
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

    fn not_tiled(&self, reason: String) -> Error {
        RemoteError {
            url: self.shown.clone(),
            kind: RemoteFailure::NotTiled,
            reason,
        }
        .into()
    }

    /// Reserves `ranges` for one request: refused, with nothing reserved, where one overlaps a
    /// range reserved before or another of them, ends past S3's 10,000 parts, or the writer
    /// is closed or failed.
    fn reserve(&self, ranges: &[Range]) -> Result<()> {
        let mut st = lock(&self.state);
        if st.closed.is_some() {
            return Err(Error::Closed);
        }
        if let Some(e) = &st.failed {
            return Err(self.failed_earlier(e));
        }
        let mut asked: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for r in ranges.iter().filter(|r| r.len > 0) {
            let end = r.file_offset.checked_add(r.len as u64).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "a write of {} bytes at {} ends past the largest offset",
                    r.len, r.file_offset
                ))
            })?;
            asked.push((r.file_offset, end));
        }
        asked.sort_unstable();
        for w in asked.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(self.overlap(w[1], w[0]));
            }
        }
        for &(a, b) in &asked {
            if let Some((&s, &e)) = st.reserved.range(..b).next_back() {
                if e > a {
                    return Err(self.overlap((a, b), (s, e)));
                }
            }
        }
        let end = asked.iter().map(|r| r.1).max().unwrap_or(0).max(st.extent);
        // GCS's resumable upload has no part count limit.
        let limited = self.part_size != u64::MAX && !matches!(self.dest, Dest::Gcs(_));
        if limited && end.div_ceil(self.part_size) > S3_MAX_PARTS {
            return Err(RemoteError {
                url: self.shown.clone(),
                kind: RemoteFailure::PartLimit,
                reason: format!(
                    "a write up to byte {end} needs more than S3's {S3_MAX_PARTS} parts of {} \
                     bytes (remote_part_size); raise remote_part_size, or give the object's \
                     size (nbytes) when opening it",
                    self.part_size
                ),
            }
            .into());
        }
        for (a, b) in asked {
            insert_range(&mut st.reserved, a, b);
        }
        st.extent = end;
        if self.part_size != u64::MAX && end > self.part_size {
            st.multipart = true;
        }
        Ok(())
    }

    /// Gives back ranges reserved by a request that could not start.
    fn release(&self, ranges: &[Range]) {
        let mut st = lock(&self.state);
        for r in ranges.iter().filter(|r| r.len > 0) {
            remove_range(&mut st.reserved, r.file_offset, r.end());
        }
        st.extent = st.reserved.values().next_back().copied().unwrap_or(0);
    }

    fn overlap(&self, (a, b): (u64, u64), (s, e): (u64, u64)) -> Error {
        self.not_tiled(format!(
            "a write of bytes {a}-{} overlaps bytes {s}-{} written before; the writes to an \
             object must tile it (each byte written once)",
            b - 1,
            e - 1
        ))
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

    /// Takes in `src` at `offset`: whole parts go out at once, pieces into part buffers.
    fn take(&self, src: &[u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        let p = self.part_size;
        let end = offset + src.len() as u64;
        let mut at = offset;
        while at < end {
            let k = at / p;
            let part_end = (k + 1).saturating_mul(p).min(end);
            let piece = &src[(at - offset) as usize..(part_end - offset) as usize];
            let whole = at == k * p && piece.len() as u64 == p;
            let ready = {
                let mut st = lock(&self.state);
                if let Some(e) = &st.failed {
                    return Err(self.failed_earlier(e));
                }
                if whole && st.multipart {
                    None
                } else {
                    let buf = st.buffers.entry(k).or_default();
                    let from = (at - k.saturating_mul(p)) as usize;
                    if buf.data.len() < from + piece.len() {
                        buf.data.resize(from + piece.len(), 0);
                    }
                    buf.data[from..from + piece.len()].copy_from_slice(piece);
                    buf.filled += piece.len() as u64;
                    let full = p != u64::MAX && buf.filled == p && st.multipart;
                    st.written += piece.len() as u64;
                    match full {
                        true => Some(st.buffers.remove(&k).map(|b| b.data).unwrap_or_default()),
                        false => {
                            at = part_end;
                            continue;
                        }
                    }
                }
            };
            match ready {
                None => {
                    self.upload_part(k, piece, Some(call.stop), true)?;
                    lock(&self.state).written += piece.len() as u64;
                }
                Some(data) => self.upload_part(k, &data, Some(call.stop), true)?,
            }
            at = part_end;
        }
        call.progress.fetch_add(src.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Uploads part `k` (S3's part number `k + 1`); a failure fails the writer, and, where
    /// `abort`, the last upload to end after a failure aborts the multipart upload (close
    /// aborts on its own, under its caller's stop flag).
    fn upload_part(&self, k: u64, data: &[u8], stop: Option<&StopFlag>, abort: bool) -> Result<()> {
        {
            let mut st = lock(&self.state);
            if let Some(e) = &st.failed {
                return Err(self.failed_earlier(e));
            }
            st.inflight += 1;
        }
        let r = self.send_part(k, data, stop);
        let abort = {
            let mut st = lock(&self.state);
            st.inflight -= 1;
            match &r {
                Ok(etag) => {
                    st.etags.insert(k, etag.clone());
                }
                Err(e) => {
                    if st.failed.is_none() {
                        st.failed = Some(e.clone());
                    }
                }
            }
            let abort = abort && st.failed.is_some() && st.inflight == 0 && !st.aborted;
            if abort {
                st.aborted = true;
            }
            abort
        };
        if abort {
            self.send_abort(None);
        }
        self.idle.notify_all();
        r.map(|_| ())
    }

    fn s3(&self) -> Result<&S3Object> {
        match &self.dest {
            Dest::S3(o) => Ok(o),
            _ => Err(Error::InvalidArgument(format!(
                "{}: not an S3 object",
                self.shown
            ))),
        }
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

    /// The object's URL with `query`.
    fn s3_url(&self, query: &str) -> Result<String> {
        let mut u = self.s3()?.url.clone();
        u.set_query(Some(query));
        Ok(u.into())
    }

    /// The multipart upload's id: created (`POST ?uploads`) by the first caller.
    fn upload_id(&self, stop: Option<&StopFlag>) -> Result<String> {
        let mut id = lock(&self.upload_id);
        if let Some(id) = id.as_ref() {
            return Ok(id.clone());
        }
        let url = self.s3_url("uploads")?;
        let t = self.target(&url, "POST (CreateMultipartUpload)", stop);
        let answer = self.client.send_body(&t, "POST", &[], None, false)?;
        let created = xml_text(&answer.body, "UploadId").ok_or_else(|| {
            self.bad_answer(format!(
                "CreateMultipartUpload: the answer holds no UploadId{}",
                s3_error(&answer.body)
            ))
        })?;
        *id = Some(created.clone());
        Ok(created)
    }

    fn bad_answer(&self, reason: String) -> Error {
        RemoteError {
            url: self.shown.clone(),
            kind: RemoteFailure::BadResponse,
            reason,
        }
        .into()
    }

    /// What a GCS upload's requests need of this writer.
    fn gcs_ctx<'a>(&'a self, stop: Option<&'a StopFlag>) -> gcs_write::Ctx<'a> {
        gcs_write::Ctx {
            client: &self.client,
            shown: &self.shown,
            stop,
            part_size: self.part_size,
        }
    }

    /// `PUT ?partNumber&uploadId` of part `k`; its ETag (GCS: the part goes to the resumable
    /// upload in its turn, and has no ETag).
    fn send_part(&self, k: u64, data: &[u8], stop: Option<&StopFlag>) -> Result<String> {
        if let Dest::Gcs(g) = &self.dest {
            return g.part(&self.gcs_ctx(stop), k, data).map(|()| String::new());
        }
        let id = self.upload_id(stop)?;
        let query = form(&[("partNumber", &(k + 1).to_string()), ("uploadId", &id)]);
        let url = self.s3_url(&query)?;
        let start = k * self.part_size;
        let label = format!(
            "PUT of part {} (bytes {start}-{})",
            k + 1,
            start + (data.len() as u64).max(1) - 1
        );
        let t = self.target(&url, &label, stop);
        let answer = self.client.send_body(&t, "PUT", data, None, false)?;
        answer
            .etag
            .ok_or_else(|| self.bad_answer(format!("{label}: the answer has no ETag")))
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

/// Adds `[a, b)` to a set of disjoint ranges, merging neighbours.
fn insert_range(set: &mut BTreeMap<u64, u64>, mut a: u64, mut b: u64) {
    if let Some((&s, &e)) = set.range(..=a).next_back() {
        if e >= a {
            a = s;
            b = b.max(e);
            set.remove(&s);
        }
    }
    while let Some((&s, &e)) = set.range(a..=b).next() {
        b = b.max(e);
        set.remove(&s);
    }
    set.insert(a, b);
}

/// Removes `[a, b)` from a set of disjoint ranges, splitting where needed.
fn remove_range(set: &mut BTreeMap<u64, u64>, a: u64, b: u64) {
    let hit: Vec<(u64, u64)> = set
        .range(..b)
        .filter(|(_, &e)| e > a)
        .map(|(&s, &e)| (s, e))
        .collect();
    for (s, e) in hit {
        set.remove(&s);
        if s < a {
            set.insert(s, a);
        }
        if e > b {
            set.insert(b, e);
        }
    }
}

/// A query of `pairs`, form-encoded.
fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The text of the first `<tag>` element of `xml`.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(xml_unescape(&xml[start..end]))
}

/// An S3 error answer's code and message, for errors (nothing else of the body: an S3 error can
/// carry the request's canonical form and the access key id).
fn s3_error(body: &str) -> String {
    match (xml_text(body, "Code"), xml_text(body, "Message")) {
        (Some(c), Some(m)) => format!(": {c}: {m}"),
        (Some(c), None) => format!(": {c}"),
        _ => String::new(),
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn xml_unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests;
