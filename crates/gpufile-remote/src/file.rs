//! [`RemoteFile`]: an opened remote object (size known) that reads ranges into host slices.

use std::sync::Arc;

use gpufile::source::{IoContext, Source};
use gpufile::{Error, Result};

use crate::error::{RemoteError, RemoteFailure};
use crate::gcs::object::GcsObject;
use crate::http::client::{Client, RemoteStats};
use crate::http::range::{RangeSupport, WHOLE_BODY_REASON};
use crate::http::request::Target;
use crate::s3::chain::is_source_failure;
use crate::s3::{S3Object, S3Options};
use crate::syntax::endpoint::{explicit_kind, infer, RemoteEndpointType};
use crate::syntax::env::{process_env, Env};
use crate::syntax::gs::is_gs_scheme;
use crate::syntax::redact::redact;
use crate::syntax::s3::{parse_s3_url, public_http_url};
use crate::syntax::scheme::{check_http, scheme};
use crate::webhdfs::{user_param, webhdfs_length, webhdfs_parts};

/// Why a read of a server that answers ranges takes its path, in path reports.
pub const RANGED_REASON: &str = "ranged requests of task_size over the workers";

/// How a read of a remote object is served, as the engine's plan reads it from the source
/// ([`Source::one_request`]), for path reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    /// The server ignores `Range`: the read is one whole-body GET (streamed into the
    /// destination), whatever the task size.
    pub whole_body: bool,
}

impl ReadPlan {
    /// Why, in a few words ([`RANGED_REASON`] or [`WHOLE_BODY_REASON`]).
    pub fn reason(&self) -> &'static str {
        match self.whole_body {
            true => WHOLE_BODY_REASON,
            false => RANGED_REASON,
        }
    }
}

/// How the bytes of an object are asked for.
#[derive(Clone)]
enum Access {
    /// A ranged GET of a fixed URL (HTTP, S3 public, presigned URL).
    Plain { url: String },
    /// A GCS object: a ranged GET of its XML API address, shown as its `gs://` URL, with a
    /// bearer token where Google credentials were found.
    Gcs(Box<GcsObject>),
    /// A ranged GET of the object's URL, each request signed in its headers (SigV4).
    S3(Box<S3Object>),
    /// WebHDFS: `op=GETFILESTATUS` for the size, `op=OPEN&offset&length` for the bytes.
    WebHdfs { base: String, user: Option<String> },
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs redacted, as everywhere they are shown.
        match self {
            Access::Plain { url } => f.debug_struct("Plain").field("url", &redact(url)).finish(),
            Access::Gcs(g) => g.fmt(f),
            Access::S3(o) => o.fmt(f),
            Access::WebHdfs { base, user } => f
                .debug_struct("WebHdfs")
                .field("base", &redact(base))
                .field("user", user)
                .finish(),
        }
    }
}

/// An opened remote object. Cheap to share (`Arc`); safe to read from several threads at once.
#[derive(Debug)]
pub struct RemoteFile {
    access: Access,
    kind: RemoteEndpointType,
    shown: String,
    nbytes: u64,
    client: Client,
    /// The smallest request worth making ([`Source::min_request`]; `None`: `task_size` ranges,
    /// as KvikIO's `RemoteHandle` asks them).
    min_request: Option<usize>,
}

impl RemoteFile {
    fn new(access: Access, kind: RemoteEndpointType, nbytes: Option<u64>) -> Result<Self> {
        let (shown, sent) = match &access {
            Access::Plain { url } => (redact(url), url.clone()),
            Access::Gcs(g) => (g.gs.clone(), g.url.clone()),
            Access::S3(o) => (o.url(), o.url.as_str().to_owned()),
            Access::WebHdfs { base, .. } => (redact(base), base.clone()),
        };
        let tls = sent.to_ascii_lowercase().starts_with("https://");
        let mut f = RemoteFile {
            access,
            kind,
            shown,
            nbytes: 0,
            client: Client::new(tls)?,
            min_request: None,
        };
        f.nbytes = match nbytes {
            Some(n) => n,
            None => f.fetch_size().map_err(|e| f.explain(e))?,
        };
        Ok(f)
    }

    /// The object's size, asked of the server (counted as a size probe, with its time).
    fn fetch_size(&self) -> Result<u64> {
        let began = std::time::Instant::now();
        let size = self.ask_size();
        gpufile::__private::observe::count_remote_size_probe(began.elapsed());
        size
    }

    fn ask_size(&self) -> Result<u64> {
        match &self.access {
            Access::Plain { url } if self.kind == RemoteEndpointType::S3PresignedUrl => self
                .client
                .range_probe_size(&self.target(url, Some((0, 1)))),
            Access::Plain { url } => self.client.head_size(&self.target(url, None)),
            Access::Gcs(g) => self.client.head_size(&Target {
                signer: g.creds.signer(),
                ..self.target(&g.url, None)
            }),
            Access::S3(o) => self.client.head_size(&Target {
                signer: Some(o.as_ref()),
                ..self.target(o.url.as_str(), None)
            }),
            Access::WebHdfs { base, user } => {
                let url = format!("{base}?{}op=GETFILESTATUS", user_param(user));
                let body = self.client.get_small(&self.target(&url, None))?;
                webhdfs_length(&body).ok_or_else(|| {
                    RemoteError {
                        url: self.shown.clone(),
                        kind: RemoteFailure::BadResponse,
                        reason: format!(
                            "Cannot extract file length from the JSON response of GETFILESTATUS: {:.200}",
                            body
                        ),
                    }
                    .into()
                })
            }
        }
    }

    /// A server's refusal of a `gs://` object, explained ([`GcsObject::explain`]); other
    /// errors as they are.
    fn explain(&self, e: Error) -> Error {
        match &self.access {
            Access::Gcs(g) => g.explain(e),
            _ => e,
        }
    }

    fn target<'a>(&'a self, url: &'a str, range: Option<(u64, usize)>) -> Target<'a> {
        Target {
            url,
            shown: &self.shown,
            range,
            signer: None,
            size: None,
            stop: None,
            label: None,
        }
    }

    /// The GET of `range` of the object's URL (signed for S3), when it is read by ranges.
    fn ranged<'a>(&'a self, range: (u64, usize)) -> Option<Target<'a>> {
        match &self.access {
            Access::Plain { url } => Some(self.target(url, Some(range))),
            Access::Gcs(g) => Some(Target {
                signer: g.creds.signer(),
                ..self.target(&g.url, Some(range))
            }),
            Access::S3(o) => Some(Target {
                signer: Some(o.as_ref()),
                ..self.target(o.url.as_str(), Some(range))
            }),
            Access::WebHdfs { .. } => None,
        }
    }

    /// This object, read in requests of at least `bytes` ([`Source::min_request`]).
    pub fn with_min_request(self, bytes: usize) -> Self {
        RemoteFile {
            min_request: Some(bytes),
            ..self
        }
    }

    /// How a read is served, from what the server's answers have said so far: one whole-body
    /// GET where the server ignores `Range`, ranged tasks otherwise.
    pub fn plan_read(&self) -> ReadPlan {
        ReadPlan {
            whole_body: self.one_request(),
        }
    }

    /// Whether the server ignores `Range` (said once, with what to do about it).
    fn whole_body(&self) -> bool {
        if self.client.range_support() != RangeSupport::Ignored
            || matches!(self.access, Access::WebHdfs { .. })
        {
            return false;
        }
        gpufile::observe::notice(
            "server-ignores-range",
            format!(
                "{}: the server ignores Range, so each read is one whole-body GET (no parallel \
             ranges); serve the object from a server that answers ranges to read it in parallel",
                self.shown
            ),
        );
        true
    }

    /// What the server's answers have said of byte ranges so far.
    pub fn range_support(&self) -> RangeSupport {
        self.client.range_support()
    }

    /// An HTTP(S) server that answers ranged GETs; size by `HEAD` (`Content-Length`).
    pub fn open_http(url: &str, nbytes: Option<u64>) -> Result<Self> {
        check_http(url, RemoteEndpointType::Http)?;
        Self::new(
            Access::Plain {
                url: url.to_owned(),
            },
            RemoteEndpointType::Http,
            nbytes,
        )
    }

    /// S3 `bucket`/`object`, signed (SigV4) with the given or the environment's credentials.
    pub fn open_s3(
        bucket: &str,
        object: &str,
        nbytes: Option<u64>,
        options: &S3Options,
    ) -> Result<Self> {
        Self::open_s3_with_env(bucket, object, nbytes, options, &process_env)
    }

    fn open_s3_with_env(
        bucket: &str,
        object: &str,
        nbytes: Option<u64>,
        o: &S3Options,
        env: Env<'_>,
    ) -> Result<Self> {
        let obj = S3Object::from_bucket(bucket, object, o, env)?;
        Self::new(Access::S3(Box::new(obj)), RemoteEndpointType::S3, nbytes)
    }

    /// S3 by URL: `s3://bucket/object` or an `http(s)://` URL of the object; `Unsupported
    /// protocol` for any other scheme.
    pub fn open_s3_url(url: &str, nbytes: Option<u64>, options: &S3Options) -> Result<Self> {
        match scheme(url)?.as_str() {
            "s3" => {
                let (bucket, key) = parse_s3_url(url)?;
                Self::open_s3(&bucket, &key, nbytes, options)
            }
            "http" | "https" => {
                let obj = S3Object::from_http_url(url, options, &process_env)?;
                Self::new(Access::S3(Box::new(obj)), RemoteEndpointType::S3, nbytes)
            }
            _ => Err(Error::InvalidArgument(format!(
                "Unsupported protocol: {}",
                redact(url)
            ))),
        }
    }

    /// A public S3 object (no signing): an `http(s)://` URL, or `s3://bucket/object` (read
    /// through `AWS_ENDPOINT_URL`, else AWS's global endpoint).
    pub fn open_s3_public(url: &str, nbytes: Option<u64>) -> Result<Self> {
        let http = match scheme(url)?.as_str() {
            "s3" => public_http_url(url, &process_env)?,
            _ => {
                check_http(url, RemoteEndpointType::S3Public)?;
                url.to_owned()
            }
        };
        Self::new(
            Access::Plain { url: http },
            RemoteEndpointType::S3Public,
            nbytes,
        )
    }

    /// A Google Cloud Storage object, `gs://<bucket>/<object>` (gpufile's addition): ranged GETs
    /// of `https://storage.googleapis.com/<bucket>/<object>` (GCS's XML API), or of the host in
    /// `STORAGE_EMULATOR_HOST` where that is set; size by `HEAD`. Each request carries a bearer
    /// token of the credentials Google's Application Default Credentials find (see
    /// `gcs/credentials.rs`); with none, requests are anonymous and read public objects only. Opened
    /// as [`RemoteEndpointType::Http`], shown (`url()`, errors) as the `gs://` URL. A 401 or 403
    /// answer says which credentials were used, or that none were found.
    pub fn open_gcs_public(url: &str, nbytes: Option<u64>) -> Result<Self> {
        Self::open_gcs_public_with_env(url, nbytes, &process_env)
    }

    fn open_gcs_public_with_env(url: &str, nbytes: Option<u64>, env: Env<'_>) -> Result<Self> {
        let g = GcsObject::open(url, env)?;
        Self::new(Access::Gcs(Box::new(g)), RemoteEndpointType::Http, nbytes)
    }

    /// A presigned S3 URL; size by `GET` with `Range: bytes=0-0` (`Content-Range`), since
    /// the signature covers GET only.
    pub fn open_s3_presigned_url(url: &str, nbytes: Option<u64>) -> Result<Self> {
        check_http(url, RemoteEndpointType::S3PresignedUrl)?;
        Self::new(
            Access::Plain {
                url: url.to_owned(),
            },
            RemoteEndpointType::S3PresignedUrl,
            nbytes,
        )
    }

    /// A WebHDFS file, `http(s)://host:port/webhdfs/v1/<path>[?user.name=<user>]`; without
    /// `user.name` in the URL, `KVIKIO_WEBHDFS_USERNAME` is used if set.
    pub fn open_webhdfs(url: &str, nbytes: Option<u64>) -> Result<Self> {
        Self::open_webhdfs_with_env(url, nbytes, &process_env)
    }

    fn open_webhdfs_with_env(url: &str, nbytes: Option<u64>, env: Env<'_>) -> Result<Self> {
        check_http(url, RemoteEndpointType::WebHdfs)?;
        let (base, user) = webhdfs_parts(url, env);
        Self::new(
            Access::WebHdfs { base, user },
            RemoteEndpointType::WebHdfs,
            nbytes,
        )
    }

    /// KvikIO's `RemoteHandle::open`: `kind` AUTO infers the type from the URL, trying
    /// `allow_list` (default: S3, S3 public, presigned, WebHDFS, HTTP) in order; an explicit
    /// type must be in `allow_list`. With AUTO, an S3 URL whose credentials are missing (no
    /// source configured at all) or refused is opened as S3 public when that is allowed; a
    /// configured source that fails ([`RemoteFailure::Credentials`]: a profile named by
    /// `AWS_PROFILE` that does not exist, a failing `credential_process`, ...) is an error. Beyond KvikIO (which answers
    /// `Unsupported endpoint URL`), a `gs://<bucket>/<object>` URL is an HTTP one, opened with
    /// [`RemoteFile::open_gcs_public`].
    pub fn open(
        url: &str,
        kind: RemoteEndpointType,
        allow_list: Option<&[RemoteEndpointType]>,
        nbytes: Option<u64>,
    ) -> Result<Self> {
        let allow = allow_list.unwrap_or(&RemoteEndpointType::DEFAULT_ALLOW_LIST);
        let kind = if kind == RemoteEndpointType::Auto {
            let kind = infer(url, allow)?;
            if kind == RemoteEndpointType::S3 {
                match Self::open_as(url, kind, nbytes) {
                    // Not when a configured credential source failed (boto3 and the AWS SDKs
                    // raise too), nor when the open was stopped.
                    Err(e)
                        if allow.contains(&RemoteEndpointType::S3Public)
                            && !matches!(e, Error::Cancelled)
                            && !is_source_failure(&e) =>
                    {
                        return Self::open_as(url, RemoteEndpointType::S3Public, nbytes)
                    }
                    other => return other,
                }
            }
            kind
        } else {
            explicit_kind(url, kind, allow)?
        };
        Self::open_as(url, kind, nbytes)
    }

    fn open_as(url: &str, kind: RemoteEndpointType, nbytes: Option<u64>) -> Result<Self> {
        match kind {
            RemoteEndpointType::S3 => Self::open_s3_url(url, nbytes, &S3Options::default()),
            RemoteEndpointType::S3Public => Self::open_s3_public(url, nbytes),
            RemoteEndpointType::S3PresignedUrl => Self::open_s3_presigned_url(url, nbytes),
            RemoteEndpointType::WebHdfs => Self::open_webhdfs(url, nbytes),
            RemoteEndpointType::Http | RemoteEndpointType::Auto if is_gs_scheme(url) => {
                Self::open_gcs_public(url, nbytes)
            }
            RemoteEndpointType::Http | RemoteEndpointType::Auto => Self::open_http(url, nbytes),
        }
    }

    /// The object's size in bytes (known since open; no request).
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// The endpoint type it was opened as.
    pub fn remote_endpoint_type(&self) -> RemoteEndpointType {
        self.kind
    }

    /// The URL, with signatures and tokens redacted.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// For an S3 object read with credentials, where they come from ("arguments or
    /// environment", "container credentials", ...); for a `gs://` object, the Google
    /// credentials' source or that there are none; never the credentials themselves.
    pub fn credentials_source(&self) -> Option<&'static str> {
        match &self.access {
            Access::S3(o) => Some(o.credentials_source()),
            Access::Gcs(g) => Some(g.creds.source()),
            _ => None,
        }
    }

    /// Requests sent, retries made and bytes received since open (every reader together).
    pub fn stats(&self) -> RemoteStats {
        self.client.stats()
    }

    /// KvikIO's range check: `cannot read 0+100 bytes into a 10 bytes file (<url>)`.
    pub fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.nbytes)
        {
            return Err(Error::InvalidArgument(format!(
                "cannot read {offset}+{len} bytes into a {} bytes file ({})",
                self.nbytes, self.shown
            )));
        }
        Ok(())
    }

    /// One request for `dst.len()` bytes at `offset` (no splitting).
    fn get(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        let len = dst.len();
        let webhdfs;
        let t = match &self.access {
            Access::WebHdfs { base, user } => {
                webhdfs = format!(
                    "{base}?{}op=OPEN&offset={offset}&length={len}",
                    user_param(user)
                );
                self.target(&webhdfs, None)
            }
            _ => self.ranged((offset, len)).ok_or_else(|| {
                Error::InvalidArgument(format!("{}: no ranged address", self.shown))
            })?,
        };
        let t = Target {
            size: Some(self.nbytes),
            stop: Some(call.stop),
            ..t
        };
        self.client.get_into(&t, offset, dst, call.progress)
    }

    /// Reads `dst.len()` bytes at `offset` on the process engine under `settings` (split into
    /// `task_size` ranged requests over `num_threads` workers); returns the bytes read.
    pub fn read(
        self: &Arc<Self>,
        dst: &mut [u8],
        offset: u64,
        settings: &gpufile::Settings,
    ) -> Result<usize> {
        self.check_range(offset, dst.len())?;
        read_into(self.clone(), dst, offset, settings)
    }
}

/// Reads `dst.len()` bytes of `source` at `offset` into host memory through the engine.
pub fn read_into(
    source: Arc<dyn Source>,
    dst: &mut [u8],
    offset: u64,
    settings: &gpufile::Settings,
) -> Result<usize> {
    let req = gpufile::Request::read(gpufile::Buffer::host(dst), offset);
    let engine = gpufile::Engine::global()?;
    // SAFETY: `dst` is exclusively borrowed until the wait returns.
    unsafe { engine.submit(&gpufile::source::Endpoint::Read(source), req, settings) }?.wait()
}

impl Source for RemoteFile {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn described(&self) -> Option<&str> {
        Some(&self.shown)
    }

    fn io_backend(&self) -> gpufile::observe::IoBackend {
        match self.access {
            Access::WebHdfs { .. } => gpufile::observe::IoBackend::RemoteHdfs,
            _ => gpufile::observe::IoBackend::RemoteHttp,
        }
    }

    /// KvikIO's range check ([`RemoteFile::check_range`]), against the size known at open.
    fn check(&self, ranges: &gpufile::Ranges) -> Result<()> {
        ranges
            .as_slice()
            .iter()
            .try_for_each(|r| self.check_range(r.file_offset, r.len))
    }

    fn size(&self) -> Result<u64> {
        Ok(self.nbytes)
    }

    /// Every task is a GET of its own: a read runs in `task_size` ranges, as KvikIO's
    /// `RemoteHandle` asks them, never cut smaller for idle workers.
    fn request_per_task(&self) -> bool {
        true
    }

    /// A server that ignores `Range` sends the whole object for each request: one GET.
    fn one_request(&self) -> bool {
        self.whole_body()
    }

    fn min_request(&self) -> Option<usize> {
        self.min_request
    }

    /// A read split into ranged requests learns first whether the server honours `Range`,
    /// where no answer has said so yet (a HEAD without `Accept-Ranges`, or `nbytes` given): a
    /// GET of byte 0, so that a server that ignores ranges sends the object once, not once
    /// per task ([`Source::one_request`] then says so and the engine plans one request).
    fn before_split_read(&self, call: IoContext<'_>) -> Result<bool> {
        if matches!(self.access, Access::WebHdfs { .. })
            || self.client.range_support() != RangeSupport::Unknown
            || self.nbytes == 0
        {
            return Ok(false);
        }
        self.read_at(&mut [0u8; 1], 0, call)?;
        Ok(true)
    }

    fn read_at(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        if offset
            .checked_add(dst.len() as u64)
            .is_none_or(|end| end > self.nbytes)
        {
            return Err(Error::UnexpectedEof {
                path: self.shown.clone().into(),
                offset,
                len: dst.len(),
                file_size: self.nbytes,
            });
        }
        // KvikIO's reactor pool starts at the first read under MULTI_POLL, which fixes its
        // reactor settings; gpufile keeps that rule though it has no pool.
        if !gpufile::__private::config::remote_io_started() {
            if let Ok(engine) = gpufile::Engine::global() {
                engine.note_remote_read();
            }
        }
        self.get(dst, offset, call).map_err(|e| self.explain(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source over memory, to test the splitting without a server.
    struct Bytes(Vec<u8>);

    impl Source for Bytes {
        fn describe(&self) -> String {
            "mem".into()
        }
        fn size(&self) -> Result<u64> {
            Ok(self.0.len() as u64)
        }
        fn read_at(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
            let o = offset as usize;
            if o + dst.len() > self.0.len() {
                return Err(Error::InvalidArgument(format!("past the end at {o}")));
            }
            dst.copy_from_slice(&self.0[o..o + dst.len()]);
            call.progress
                .fetch_add(dst.len() as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    }

    fn settings(task_size: usize, num_threads: usize) -> gpufile::Settings {
        gpufile::Settings {
            task_size,
            num_threads,
            ..gpufile::Settings::default()
        }
    }

    #[test]
    fn the_engine_splits_a_source_and_reassembles_it() {
        let data: Vec<u8> = (0..10_007u32).map(|i| (i * 7 % 251) as u8).collect();
        let src: Arc<dyn Source> = Arc::new(Bytes(data.clone()));
        for (task, threads) in [(199, 1), (199, 3), (1, 4), (4096, 16), (20_000, 2)] {
            let mut dst = vec![0u8; 9000];
            let n = read_into(Arc::clone(&src), &mut dst, 1000, &settings(task, threads));
            assert_eq!(n.unwrap(), 9000);
            assert_eq!(dst, data[1000..10_000], "task {task} threads {threads}");
        }
    }

    #[test]
    fn the_engine_returns_the_sources_error() {
        let src: Arc<dyn Source> = Arc::new(Bytes(vec![0; 100]));
        let mut dst = vec![0u8; 200];
        let e = read_into(Arc::clone(&src), &mut dst, 0, &settings(10, 3)).unwrap_err();
        assert!(e.to_string().contains("past the end"), "{e}");
        assert!(read_into(src, &mut dst, 0, &settings(0, 3)).is_err());
    }

    #[test]
    fn explicit_type_outside_allow_list_is_refused_before_any_request() {
        let e = RemoteFile::open(
            "http://127.0.0.1:9/x",
            RemoteEndpointType::S3,
            Some(&[RemoteEndpointType::Http]),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("S3 is not in the allowlist"), "{e}");
        let e = RemoteFile::open(
            "http://127.0.0.1:9/x",
            RemoteEndpointType::WebHdfs,
            None,
            Some(1),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("Invalid URL for WebHDFS endpoint"),
            "{e}"
        );
        let e = RemoteFile::open_s3_url("ftp://b/k", None, &S3Options::default()).unwrap_err();
        assert!(e.to_string().contains("Unsupported protocol"), "{e}");
    }

    #[test]
    fn webhdfs_user_from_url_or_env() {
        let env = |k: &str| (k == "KVIKIO_WEBHDFS_USERNAME").then(|| "envuser".to_string());
        let f = RemoteFile::open_webhdfs_with_env(
            "http://h:1/webhdfs/v1/a?user.name=me",
            Some(3),
            &env,
        )
        .unwrap();
        assert!(
            matches!(&f.access, Access::WebHdfs { user: Some(u), base } if u == "me" && base == "http://h:1/webhdfs/v1/a")
        );
        let f =
            RemoteFile::open_webhdfs_with_env("http://h:1/webhdfs/v1/a", Some(3), &env).unwrap();
        assert!(matches!(&f.access, Access::WebHdfs { user: Some(u), .. } if u == "envuser"));
        assert_eq!(f.nbytes(), 3);
        assert_eq!(f.url(), "http://h:1/webhdfs/v1/a");
        let e = f.check_range(0, 100).unwrap_err().to_string();
        assert!(
            e.contains("cannot read 0+100 bytes into a 3 bytes file (http://h:1/webhdfs/v1/a)"),
            "{e}"
        );
    }
}

#[cfg(test)]
#[path = "file_gcs_tests.rs"]
mod gcs_tests;

#[cfg(test)]
#[path = "file_shown_tests.rs"]
mod shown_tests;
