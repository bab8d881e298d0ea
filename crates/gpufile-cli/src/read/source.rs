//! What `gpufile read` reads and how: a local file or, where FILE is a URL, a remote object
//! (gpufile_remote), and the path a read of it takes, with the reason, for the report.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::destination::Destination;
use gpufile::source::{IoContext, Source};
use gpufile::StopFlag;
use gpufile::{FileHandle, IoPath};
use gpufile_diag::schema;
use gpufile_remote::{ReadPlan, RemoteEndpointType, RemoteFile, RemoteStats};
use serde_json::{json, Value};

use crate::error::CliError;
use crate::interrupt::Interrupts;

/// What `gpufile read` reads: a local file, or a remote object where FILE is a URL.
pub(super) enum ReadSource {
    Local(FileHandle),
    Remote(Arc<RemoteFile>),
}

/// FILE as a URL (`scheme://...`: http, https, s3, gs, webhdfs, ...), or None for a local path
/// (`./http://x` names a local file).
fn remote_url(file: &Path) -> Option<&str> {
    let text = file.to_str()?;
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some(text)
}

/// Opens `url` with Ctrl-C (SIGINT, SIGTERM) heard: the open waits on credential sources (a
/// `credential_process`, STS, IMDS, a token endpoint) and on the size request, which end soon
/// after a signal ([`Interrupts::stoppable`]); the command then ends with status 128 + the
/// signal.
fn open_remote(url: &str, interrupts: &Interrupts) -> Result<RemoteFile, CliError> {
    let opened =
        interrupts.stoppable(|_| RemoteFile::open(url, RemoteEndpointType::Auto, None, None));
    match interrupts.error("nothing was read") {
        Some(e) => Err(e),
        None => opened.map_err(CliError::from),
    }
}

impl ReadSource {
    pub(super) fn open(file: &Path, interrupts: &Interrupts) -> Result<Self, CliError> {
        let Some(url) = remote_url(file) else {
            return Ok(ReadSource::Local(FileHandle::open(file, "r")?));
        };
        let remote = open_remote(url, interrupts).map_err(|e| {
            if e.path.is_some() {
                e
            } else {
                // Never the URL as given: it may carry a signature or a key.
                e.with_path(gpufile_remote::redact(url))
            }
        })?;
        Ok(ReadSource::Remote(Arc::new(remote)))
    }

    /// The path a read of `size` bytes at `offset` into `dest` takes and why; a remote read is
    /// checked as the engine checks it, before the timed runs (so that what the object learns
    /// first, such as whether its server honours Range, is not counted in them).
    pub(super) fn plan(
        &self,
        dest: &mut Destination,
        (offset, size): (u64, usize),
        settings: &gpufile::Settings,
        stop: &gpufile::StopFlag,
    ) -> gpufile::Result<ReadPath> {
        Ok(match self {
            ReadSource::Local(file) => {
                ReadPath::Local(file.io_path(dest.memory(), size, settings)?)
            }
            ReadSource::Remote(remote) => {
                // The range probe a split read makes ends on Ctrl-C too.
                let req =
                    gpufile::Request::read(dest.buffer(0, size), offset).stop(Some(stop.clone()));
                gpufile::Engine::global()?.check(&self.endpoint(), &req, settings)?;
                ReadPath::Remote(remote.remote_endpoint_type(), remote.plan_read())
            }
        })
    }

    /// The file side of a read from it.
    pub(super) fn endpoint(&self) -> gpufile::source::Endpoint {
        match self {
            ReadSource::Local(file) => file.endpoint(gpufile::Direction::Read),
            ReadSource::Remote(remote) => {
                gpufile::source::Endpoint::Read(Arc::clone(remote) as Arc<dyn Source>)
            }
        }
    }

    /// The name reports and errors show: the path, or the URL with signatures redacted.
    pub(super) fn shown(&self, file: &Path) -> String {
        match self {
            ReadSource::Local(_) => file.display().to_string(),
            ReadSource::Remote(remote) => remote.url().to_owned(),
        }
    }

    pub(super) fn remote_stats(&self) -> Option<RemoteStats> {
        match self {
            ReadSource::Local(_) => None,
            ReadSource::Remote(remote) => Some(remote.stats()),
        }
    }

    /// `size` bytes at `offset` by the plainest read there is, for `--verify`: one `pread`
    /// of the file, or one ranged request to the object.
    pub(super) fn plain_read(
        &self,
        file: &Path,
        offset: u64,
        size: usize,
        stop: &StopFlag,
    ) -> Result<Vec<u8>, CliError> {
        let mut expect = vec![0u8; size];
        match self {
            ReadSource::Local(_) => {
                let f = std::fs::File::open(file).map_err(|e| CliError::os("open", file, &e))?;
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut expect, offset)
                    .map_err(|e| CliError::os("read", file, &e))?;
            }
            ReadSource::Remote(remote) => plain_remote_read(remote, &mut expect, offset, stop)?,
        }
        Ok(expect)
    }
}

/// The path a `gpufile read` takes: gpufile's decision for a local file, ranged requests for
/// a remote object.
pub(super) enum ReadPath {
    Local(IoPath),
    Remote(RemoteEndpointType, ReadPlan),
}

impl ReadPath {
    pub(super) fn backend(&self) -> String {
        match self {
            ReadPath::Local(p) => p.backend.to_string(),
            ReadPath::Remote(kind, _) => format!("remote ({kind})"),
        }
    }

    pub(super) fn reason(&self) -> String {
        match self {
            ReadPath::Local(p) => p.reason.to_string(),
            ReadPath::Remote(_, plan) => remote_reason(plan),
        }
    }

    pub(super) fn remote_endpoint(&self) -> Option<String> {
        match self {
            ReadPath::Local(_) => None,
            ReadPath::Remote(kind, _) => Some(kind.to_string()),
        }
    }

    /// docs/json.md's `path` object; a remote read is backend `remote`, reason kind `remote`
    /// with the endpoint type as its detail.
    pub(super) fn to_json(&self) -> Value {
        match self {
            ReadPath::Local(p) => schema::path(p),
            ReadPath::Remote(kind, plan) => json!({
                "backend": "remote",
                "reason": {
                    "kind": "remote",
                    "detail": kind.to_string(),
                    "text": remote_reason(plan),
                },
            }),
        }
    }
}

/// Why a remote object takes the path it takes.
fn remote_reason(plan: &ReadPlan) -> String {
    format!(
        "a remote object: {}, into host memory directly or into GPU memory through pinned \
         bounce buffers",
        plan.reason()
    )
}

/// A plain ranged read of `dst.len()` bytes of `remote` at `offset`, outside the engine (what
/// `--verify` compares with); `stop` ends its waits.
pub(crate) fn plain_remote_read(
    remote: &RemoteFile,
    dst: &mut [u8],
    offset: u64,
    stop: &StopFlag,
) -> gpufile::Result<()> {
    let progress = AtomicU64::new(0);
    let call = IoContext {
        progress: &progress,
        direct: false,
        direct_uncached: false,
        stop,
    };
    remote.read_at(dst, offset, call)
}
