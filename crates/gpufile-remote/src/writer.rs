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
//! redirects to).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use gpufile::future::StopFlag;
use gpufile::request::Range;
use gpufile::source::{IoContext, Sink};
use gpufile::{Error, Result};

use crate::endpoint::{self, RemoteEndpointType, S3Object, S3Options};
use crate::error::{RemoteError, RemoteFailure};
use crate::file::{self, check_http, process_env, user_param, Env};
use crate::gcs;
use crate::http::{Client, RemoteStats, Target};

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
        };
        let part_size = match &dest {
            Dest::S3(_) => {
                let setting = gpufile::Engine::global()?.settings().remote_part_size as u64;
                part_size_for(setting, size_hint)
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

    /// The endpoint type from the URL, as [`crate::RemoteFile::open`] picks it (`allow_list`
    /// checked before anything else; an explicit type must fit the URL). S3 public objects and
    /// public `gs://` objects cannot be written: an `InvalidArgument` says what to use instead.
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
            _ if gcs::is_gs_scheme(url) => Err(Error::InvalidArgument(format!(
                "{}: gs:// objects are read anonymously and cannot be written; write a GCS \
                 object through a signed URL with open_http",
                endpoint::redact(url)
            ))),
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

    /// The request's task size for writes: a part (tasks then are parts where the write starts
    /// at a part boundary); `None` where there are no parts.
    pub fn task_size(&self) -> Option<usize> {
        self.part_size()
            .map(|p| usize::try_from(p).unwrap_or(usize::MAX))
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
        if self.part_size != u64::MAX && end.div_ceil(self.part_size) > S3_MAX_PARTS {
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
        let req = gpufile::Request::write(buffer, offset).task_size(self.task_size());
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
                Dest::S3(o) => Some(o),
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

    /// `PUT ?partNumber&uploadId` of part `k`; its ETag.
    fn send_part(&self, k: u64, data: &[u8], stop: Option<&StopFlag>) -> Result<String> {
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

    /// `DELETE ?uploadId` (AbortMultipartUpload), once no part upload is under way. A
    /// cancelled write sends it without the request's stop flag, since a cancelled upload must
    /// be aborted too; [`Self::abort_with_stop`] sends it under its caller's flag. False where
    /// that flag stopped it before the server answered (the upload may still be there).
    fn send_abort(&self, stop: Option<&StopFlag>) -> bool {
        let Some(id) = lock(&self.upload_id).clone() else {
            return true;
        };
        let r = self.s3_url(&form(&[("uploadId", &id)])).and_then(|url| {
            let t = self.target(&url, "DELETE (AbortMultipartUpload)", stop);
            self.client.send_body(&t, "DELETE", &[], None, false)
        });
        match r {
            Ok(_) => true,
            Err(_) if stop.is_some_and(StopFlag::is_set) => false,
            Err(e) => {
                lock(&self.state).abort_error = Some(e);
                true
            }
        }
    }

    /// Ends the writer without making the object: aborts the multipart upload (if any) once
    /// the part uploads under way have ended. Idempotent; nothing happens after a close.
    pub fn abort(&self) -> Result<()> {
        self.abort_with_stop(None)
    }

    /// [`Self::abort`] whose AbortMultipartUpload stops soon after `stop` is set (Ctrl-C), as a
    /// read does. Stopped before the server answered: [`RemoteFailure::Interrupted`], the
    /// writer ended all the same, and a later abort sends the request again.
    pub fn abort_with_stop(&self, stop: Option<&StopFlag>) -> Result<()> {
        let mut st = lock(&self.state);
        while st.inflight > 0 {
            st = self.idle.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.closed == Some(true) {
            return Ok(());
        }
        st.closed = Some(false);
        st.buffers.clear();
        if st.failed.is_none() {
            st.failed = Some(Error::Cancelled);
        }
        let send = !st.aborted;
        st.aborted = true;
        drop(st);
        if send {
            if !self.send_abort(stop) {
                let e = self.interrupted(
                    "abort() was interrupted before the server answered AbortMultipartUpload: \
                     the multipart upload may still be there (its parts stored); abort() again \
                     removes it",
                );
                let mut st = lock(&self.state);
                st.aborted = false;
                st.interrupted = Some(e.clone());
                return Err(e);
            }
            lock(&self.state).interrupted = None;
        }
        match lock(&self.state).abort_error.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn interrupted(&self, reason: &str) -> Error {
        RemoteError {
            url: self.shown.clone(),
            kind: RemoteFailure::Interrupted,
            reason: reason.to_owned(),
        }
        .into()
    }

    /// What an interrupted close leaves on the server.
    fn interrupted_close(&self, multipart: bool) -> Error {
        let holds = match (&self.dest, multipart) {
            (Dest::S3(_), true) => {
                "S3 holds an incomplete multipart upload (its parts stored) until abort() \
                 removes it, unless a CompleteMultipartUpload it received still makes the object"
            }
            (Dest::S3(_), false) => "S3 makes the object from the PutObject it received, or none",
            (Dest::Put { .. }, _) => "the server may still store what it received of the PUT",
            (Dest::WebHdfs { .. }, _) => {
                "the file may be created, with what the data node received of the bytes"
            }
        };
        self.interrupted(&format!(
            "close() was interrupted before the server answered: the object is not known to \
             be made; {holds}"
        ))
    }

    /// Makes the object from the bytes written, once every write has returned (the caller
    /// waits for its requests first): the last parts and CompleteMultipartUpload (S3), or the
    /// one `PUT` / WebHDFS `CREATE`. Refused, and the upload aborted, where an earlier write
    /// failed or the writes do not tile the object from byte 0 to its end
    /// ([`RemoteFailure::NotTiled`]). A second close does nothing.
    pub fn close(&self) -> Result<()> {
        self.close_with_stop(None)
    }

    /// [`Self::close`] whose requests (the last parts, CompleteMultipartUpload, the one `PUT` /
    /// `CREATE`, the abort after a failure) stop soon after `stop` is set (Ctrl-C), as a read
    /// does, however long the server stalls. Stopped before the server answered:
    /// [`RemoteFailure::Interrupted`], saying what the server may hold; the writer has ended
    /// without the object known to be made (a second close returns the same error), and no
    /// abort was sent (a stalled server would hold it as long): [`Self::abort`] sends it.
    pub fn close_with_stop(&self, stop: Option<&StopFlag>) -> Result<()> {
        let mut st = lock(&self.state);
        while st.inflight > 0 {
            st = self.idle.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        match st.closed {
            Some(true) => return Ok(()),
            Some(false) => return Err(st.interrupted.clone().unwrap_or(Error::Closed)),
            None => {}
        }
        if let Some(e) = st.failed.clone() {
            drop(st);
            let _ = self.abort_with_stop(stop);
            return Err(self.with_abort_note(e));
        }
        if let Some(gap) = self.gap(&st) {
            drop(st);
            let _ = self.abort_with_stop(stop);
            return Err(self.with_abort_note(gap));
        }
        let extent = st.extent;
        let multipart = st.multipart;
        let mut buffers: Vec<(u64, Vec<u8>)> =
            st.buffers.drain().map(|(k, b)| (k, b.data)).collect();
        buffers.sort_by_key(|(k, _)| *k);
        drop(st);
        let r = match multipart {
            false => {
                let body = buffers.pop().map(|(_, d)| d).unwrap_or_default();
                self.send_whole(&body[..extent as usize], stop)
            }
            true => self.finish_multipart(buffers, stop),
        };
        match r {
            Ok(()) => {
                lock(&self.state).closed = Some(true);
                Ok(())
            }
            Err(_) if stop.is_some_and(StopFlag::is_set) => {
                let e = self.interrupted_close(multipart);
                let mut st = lock(&self.state);
                st.failed.get_or_insert(Error::Cancelled);
                st.closed = Some(false);
                st.interrupted = Some(e.clone());
                Err(e)
            }
            Err(e) => {
                {
                    let mut st = lock(&self.state);
                    st.failed.get_or_insert(e.clone());
                }
                let _ = self.abort_with_stop(stop);
                Err(self.with_abort_note(e))
            }
        }
    }

    /// Where the writes leave a hole, if anywhere.
    fn gap(&self, st: &State) -> Option<Error> {
        let mut next = 0u64;
        for (&s, &e) in &st.reserved {
            if s > next {
                return Some(self.not_tiled(format!(
                    "bytes {next}-{} were never written; the writes to an object must tile it \
                     from byte 0 to its end",
                    s - 1
                )));
            }
            next = e;
        }
        (st.written != st.extent).then(|| {
            self.not_tiled(format!(
                "{} of the object's {} bytes were written: a write did not finish",
                st.written, st.extent
            ))
        })
    }

    fn with_abort_note(&self, e: Error) -> Error {
        let Some(r) = RemoteError::of(&e) else {
            return e;
        };
        let had_upload = lock(&self.upload_id).is_some();
        let st = lock(&self.state);
        let note = match (had_upload, st.aborted, st.abort_error.as_ref()) {
            (false, _, _) => " (nothing was written)".to_owned(),
            (true, false, _) => " (the abort of the multipart upload was interrupted: the \
                                 upload may still be there; abort() removes it)"
                .to_owned(),
            (true, true, None) => " (the multipart upload was aborted)".to_owned(),
            (true, true, Some(a)) => format!(" (aborting the multipart upload failed too: {a})"),
        };
        drop(st);
        RemoteError {
            reason: format!("{}{note}", r.reason),
            ..r.clone()
        }
        .into()
    }

    /// The object in one request: PutObject (S3), `PUT`, or WebHDFS `CREATE`.
    fn send_whole(&self, body: &[u8], stop: Option<&StopFlag>) -> Result<()> {
        match &self.dest {
            Dest::S3(o) => {
                let url = o.url.as_str().to_owned();
                let t = self.target(&url, "PUT (PutObject)", stop);
                self.client
                    .send_body(&t, "PUT", body, None, false)
                    .map(|_| ())
            }
            Dest::Put { url } => {
                let t = self.target(url, "PUT", stop);
                self.client
                    .send_body(&t, "PUT", body, None, false)
                    .map(|_| ())
            }
            Dest::WebHdfs { base, user } => {
                let url = format!("{base}?{}op=CREATE&overwrite=true", user_param(user));
                let t = self.target(&url, "PUT (WebHDFS CREATE)", stop);
                let answer = self.client.send_body(&t, "PUT", &[], None, true)?;
                let location = match answer.location {
                    Some(l) => l,
                    None => serde_json::from_str::<serde_json::Value>(&answer.body)
                        .ok()
                        .and_then(|v| v.get("Location")?.as_str().map(str::to_owned))
                        .ok_or_else(|| {
                            self.bad_answer(format!(
                                "WebHDFS CREATE: the name node answered {} without a Location \
                                 for the data",
                                answer.status
                            ))
                        })?,
                };
                let next = url::Url::parse(&url)
                    .and_then(|b| b.join(&location))
                    .map_err(|e| self.bad_answer(format!("WebHDFS CREATE: Location {e}")))?;
                if url.starts_with("https://") && next.scheme() != "https" {
                    return Err(self.bad_answer(format!(
                        "WebHDFS CREATE: the name node redirects from https to {} ({}), refused: \
                         the bytes would travel unencrypted",
                        next.scheme(),
                        endpoint::redact(next.as_str())
                    )));
                }
                let next = next.to_string();
                let t = self.target(&next, "PUT (WebHDFS CREATE, data)", stop);
                self.client
                    .send_body(&t, "PUT", body, Some("application/octet-stream"), false)?;
                Ok(())
            }
        }
    }

    /// Uploads the parts left in buffers, then CompleteMultipartUpload with every part's ETag.
    fn finish_multipart(
        &self,
        buffers: Vec<(u64, Vec<u8>)>,
        stop: Option<&StopFlag>,
    ) -> Result<()> {
        let extent = lock(&self.state).extent;
        for (k, data) in buffers {
            let len = (extent - k * self.part_size).min(self.part_size) as usize;
            self.upload_part(k, &data[..len], stop, false)?;
        }
        let parts: String = lock(&self.state)
            .etags
            .iter()
            .map(|(k, etag)| {
                format!(
                    "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
                    k + 1,
                    xml_escape(etag)
                )
            })
            .collect();
        let body = format!("<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>");
        let id = self.upload_id(stop)?;
        let url = self.s3_url(&form(&[("uploadId", &id)]))?;
        let t = self.target(&url, "POST (CompleteMultipartUpload)", stop);
        let answer =
            self.client
                .send_body(&t, "POST", body.as_bytes(), Some("application/xml"), false)?;
        // S3 may answer 200 and report the failure in the body.
        if answer.body.contains("<Error>") || !answer.body.contains("CompleteMultipartUploadResult")
        {
            return Err(self.bad_answer(format!(
                "CompleteMultipartUpload failed{}",
                s3_error(&answer.body)
            )));
        }
        Ok(())
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

    fn whole_tasks(&self) -> bool {
        self.part_size != u64::MAX
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
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn part_size_rises_to_fit_ten_thousand_parts() {
        assert_eq!(part_size_for(16 << 20, None), 16 << 20);
        assert_eq!(part_size_for(1, None), S3_MIN_PART);
        assert_eq!(part_size_for(16 << 20, Some(1 << 30)), 16 << 20);
        let big = 1u64 << 40; // 1 TiB: 10,000 parts of at least 105 MiB
        let p = part_size_for(16 << 20, Some(big));
        assert!(p * S3_MAX_PARTS >= big && p % (1 << 20) == 0, "{p}");
        assert_eq!(part_size_for(16 << 20, Some(u64::MAX)), S3_MAX_PART);
    }

    #[test]
    fn range_sets_merge_and_split() {
        let mut s = BTreeMap::new();
        insert_range(&mut s, 10, 20);
        insert_range(&mut s, 0, 10);
        insert_range(&mut s, 30, 40);
        assert_eq!(
            s.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
            [(0, 20), (30, 40)]
        );
        insert_range(&mut s, 20, 30);
        assert_eq!(
            s.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
            [(0, 40)]
        );
        remove_range(&mut s, 5, 15);
        assert_eq!(
            s.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
            [(0, 5), (15, 40)]
        );
    }

    #[test]
    fn s3_answers_are_read_without_their_other_fields() {
        let body = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>\
                    <AWSAccessKeyId>AKIDSECRET</AWSAccessKeyId></Error>";
        let shown = s3_error(body);
        assert_eq!(shown, ": AccessDenied: Access Denied");
        assert_eq!(
            xml_text("<R><UploadId>a&amp;b</UploadId></R>", "UploadId").as_deref(),
            Some("a&b")
        );
        assert_eq!(form(&[("uploadId", "a+b/c=")]), "uploadId=a%2Bb%2Fc%3D");
    }

    fn writer(part: u64) -> RemoteWriter {
        let mut w = RemoteWriter::create_http("http://127.0.0.1:9/x").unwrap();
        w.part_size = part;
        w
    }

    fn r(file_offset: u64, len: usize) -> Range {
        Range {
            file_offset,
            len,
            buf_offset: 0,
        }
    }

    #[test]
    fn overlaps_are_refused_before_any_byte_and_gaps_at_close() {
        let w = writer(u64::MAX);
        w.reserve(&[r(0, 10)]).unwrap();
        let e = w.reserve(&[r(5, 10)]).unwrap_err();
        assert_eq!(RemoteError::of(&e).unwrap().kind, RemoteFailure::NotTiled);
        assert!(
            e.to_string().contains("bytes 5-14 overlaps bytes 0-9"),
            "{e}"
        );
        // Nothing of the refused request was reserved.
        w.reserve(&[r(10, 5)]).unwrap();
        let e = w.reserve(&[r(20, 4), r(22, 4)]).unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
        w.reserve(&[r(20, 4)]).unwrap();
        let st = lock(&w.state);
        let gap = w.gap(&st).unwrap();
        assert!(
            gap.to_string().contains("bytes 15-19 were never written"),
            "{gap}"
        );
    }

    #[test]
    fn more_than_ten_thousand_parts_are_refused() {
        let w = writer(S3_MIN_PART);
        let e = w.reserve(&[r(S3_MIN_PART * S3_MAX_PARTS, 1)]).unwrap_err();
        assert_eq!(RemoteError::of(&e).unwrap().kind, RemoteFailure::PartLimit);
        w.reserve(&[r(S3_MIN_PART * S3_MAX_PARTS - 1, 1)]).unwrap();
        w.release(&[r(S3_MIN_PART * S3_MAX_PARTS - 1, 1)]);
        assert_eq!(w.nbytes(), 0);
    }

    /// A server that reads the `PUT` and never answers: a close under a stop flag ends soon
    /// after the flag is set (not after `http_timeout` times `http_max_attempts`), as
    /// [`RemoteFailure::Interrupted`], and the writer is not reported as made.
    #[test]
    fn a_close_stops_soon_after_its_flag_is_set_however_long_the_server_stalls() {
        use std::io::Read;
        use std::time::{Duration, Instant};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/o.bin", listener.local_addr().unwrap());
        let (got, arrived) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.ends_with(b"\r\n\r\nabc") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = got.send(());
            std::thread::sleep(Duration::from_secs(120)); // the connection open, unanswered
        });
        let w = RemoteWriter::create_http(&url).unwrap();
        w.reserve(&[r(0, 3)]).unwrap();
        let (progress, request_stop) = (AtomicU64::new(0), StopFlag::default());
        let call = IoContext {
            progress: &progress,
            direct: false,
            direct_uncached: false,
            stop: &request_stop,
        };
        w.write_at(b"abc", 0, call).unwrap();
        let stop = StopFlag::default();
        let (e, took) = std::thread::scope(|s| {
            let closing = s.spawn(|| w.close_with_stop(Some(&stop)));
            arrived
                .recv_timeout(Duration::from_secs(30))
                .expect("the PUT never arrived");
            let set = Instant::now();
            stop.set();
            (closing.join().unwrap().unwrap_err(), set.elapsed())
        });
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(
            RemoteError::of(&e).unwrap().kind,
            RemoteFailure::Interrupted
        );
        assert!(
            e.to_string().contains("the object is not known to be made"),
            "{e}"
        );
        assert!(w.closed());
        assert_eq!(w.close().unwrap_err().to_string(), e.to_string());
    }
}
