//! Remote files (`gpufile.RemoteFile`): conversion, GIL release and exception mapping over
//! the `gpufile-remote` crate.

use std::sync::{Arc, Mutex};

use gpufile::source::Endpoint;
use gpufile::{Direction, Error};
use gpufile_remote::{RemoteEndpointType, RemoteFile, S3Options};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::{to_py, uint_arg};
use crate::file::{wait_interruptibly, NativeFuture};
use crate::request::{self, Args};

/// Errors of opening and inferring: KvikIO raises RuntimeError for bad or unsupported URLs,
/// missing credentials and failed requests.
fn open_err(e: Error) -> PyErr {
    match e {
        Error::InvalidArgument(text) => PyRuntimeError::new_err(text),
        other => read_err(other),
    }
}

/// Errors of reads: the common mapping (a server that ignores ranges is an OverflowError, other
/// server and network failures RuntimeError, as KvikIO raises them).
fn read_err(e: Error) -> PyErr {
    to_py(e)
}

fn endpoint_type(value: u32) -> PyResult<RemoteEndpointType> {
    RemoteEndpointType::from_value(value)
        .ok_or_else(|| PyValueError::new_err(format!("unknown RemoteEndpointType value {value}")))
}

fn nbytes_arg(nbytes: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    uint_arg("nbytes", nbytes, None)
}

/// An open remote object (the engine under `gpufile.RemoteFile`).
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeRemoteFile {
    file: Mutex<Option<Arc<RemoteFile>>>,
    /// Kept after close for `str()` and `nbytes()`.
    url: String,
    nbytes: u64,
    kind: RemoteEndpointType,
}

impl NativeRemoteFile {
    fn wrap(opened: gpufile::Result<RemoteFile>) -> PyResult<Self> {
        opened.map(Self::from_file).map_err(open_err)
    }

    fn from_file(f: RemoteFile) -> Self {
        Self::from_arc(Arc::new(f))
    }

    /// A handle on a file opened elsewhere (a checkpoint's shard), shared with it.
    pub(crate) fn from_arc(f: Arc<RemoteFile>) -> Self {
        NativeRemoteFile {
            url: f.url().to_owned(),
            nbytes: f.nbytes(),
            kind: f.remote_endpoint_type(),
            file: Mutex::new(Some(f)),
        }
    }

    fn file(&self) -> PyResult<Arc<RemoteFile>> {
        let guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or_else(|| to_py(Error::Closed))
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn s3_options(
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    endpoint_url: Option<String>,
    session_token: Option<String>,
) -> S3Options {
    S3Options {
        region,
        access_key_id,
        secret_access_key,
        endpoint_url,
        session_token,
    }
}

#[pymethods]
impl NativeRemoteFile {
    #[staticmethod]
    #[pyo3(signature = (url, nbytes=None))]
    fn open_http(py: Python<'_>, url: String, nbytes: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        Self::wrap(py.detach(|| RemoteFile::open_http(&url, n)))
    }

    #[staticmethod]
    #[pyo3(signature = (bucket_name, object_name, nbytes=None, aws_region_name=None,
        aws_access_key_id=None, aws_secret_access_key=None, aws_endpoint_url=None,
        aws_session_token=None))]
    #[allow(clippy::too_many_arguments)]
    fn open_s3(
        py: Python<'_>,
        bucket_name: String,
        object_name: String,
        nbytes: Option<&Bound<'_, PyAny>>,
        aws_region_name: Option<String>,
        aws_access_key_id: Option<String>,
        aws_secret_access_key: Option<String>,
        aws_endpoint_url: Option<String>,
        aws_session_token: Option<String>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        let o = s3_options(
            aws_region_name,
            aws_access_key_id,
            aws_secret_access_key,
            aws_endpoint_url,
            aws_session_token,
        );
        Self::wrap(py.detach(|| RemoteFile::open_s3(&bucket_name, &object_name, n, &o)))
    }

    #[staticmethod]
    #[pyo3(signature = (url, nbytes=None, aws_region_name=None, aws_access_key_id=None,
        aws_secret_access_key=None, aws_endpoint_url=None, aws_session_token=None))]
    #[allow(clippy::too_many_arguments)]
    fn open_s3_url(
        py: Python<'_>,
        url: String,
        nbytes: Option<&Bound<'_, PyAny>>,
        aws_region_name: Option<String>,
        aws_access_key_id: Option<String>,
        aws_secret_access_key: Option<String>,
        aws_endpoint_url: Option<String>,
        aws_session_token: Option<String>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        let o = s3_options(
            aws_region_name,
            aws_access_key_id,
            aws_secret_access_key,
            aws_endpoint_url,
            aws_session_token,
        );
        Self::wrap(py.detach(|| RemoteFile::open_s3_url(&url, n, &o)))
    }

    #[staticmethod]
    #[pyo3(signature = (url, nbytes=None))]
    fn open_s3_public(
        py: Python<'_>,
        url: String,
        nbytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        Self::wrap(py.detach(|| RemoteFile::open_s3_public(&url, n)))
    }

    #[staticmethod]
    #[pyo3(signature = (presigned_url, nbytes=None))]
    fn open_s3_presigned_url(
        py: Python<'_>,
        presigned_url: String,
        nbytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        Self::wrap(py.detach(|| RemoteFile::open_s3_presigned_url(&presigned_url, n)))
    }

    #[staticmethod]
    #[pyo3(signature = (url, nbytes=None))]
    fn open_webhdfs(
        py: Python<'_>,
        url: String,
        nbytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        Self::wrap(py.detach(|| RemoteFile::open_webhdfs(&url, n)))
    }

    /// gpufile's addition, so its errors take gpufile's types: a bad `gs://` URL is a
    /// ValueError (KvikIO's `open_*` raise RuntimeError for bad URLs), a refusal RuntimeError.
    #[staticmethod]
    #[pyo3(signature = (url, nbytes=None))]
    fn open_gcs_public(
        py: Python<'_>,
        url: String,
        nbytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        py.detach(|| RemoteFile::open_gcs_public(&url, n))
            .map(Self::from_file)
            .map_err(to_py)
    }

    /// `remote_endpoint_type` and `allow_list` as KvikIO's integer values.
    #[staticmethod]
    #[pyo3(signature = (url, remote_endpoint_type=0, allow_list=None, nbytes=None))]
    fn open(
        py: Python<'_>,
        url: String,
        remote_endpoint_type: u32,
        allow_list: Option<Vec<u32>>,
        nbytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let n = nbytes_arg(nbytes)?;
        let kind = endpoint_type(remote_endpoint_type)?;
        let allow = allow_list
            .map(|l| {
                l.into_iter()
                    .map(endpoint_type)
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?;
        Self::wrap(py.detach(|| RemoteFile::open(&url, kind, allow.as_deref(), n)))
    }

    fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// KvikIO's integer value of the endpoint type.
    fn remote_endpoint_type(&self) -> u32 {
        self.kind as u32
    }

    /// The URL (signatures redacted).
    fn url(&self) -> String {
        self.url.clone()
    }

    /// Where an S3 object's credentials come from (never the credentials); `None` for
    /// objects read without them.
    fn credentials_source(&self) -> PyResult<Option<&'static str>> {
        Ok(self.file()?.credentials_source())
    }

    fn close(&self) {
        self.file.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Starts a read of `size` bytes (default: the buffer) at `file_offset` into `buf` (host or
    /// GPU memory): the range is checked against the size before any byte moves, then the
    /// engine splits it into `task_size` ranged requests over its workers (for GPU memory each
    /// one lands in a pinned buffer and is copied to the GPU while the next is received).
    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pread(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let py = slf.py();
        let file = slf.get().file()?;
        let view = BufferView::for_request(buf, true)?;
        let len = view.request_len(size)?;
        let offset = uint_arg("file_offset", file_offset, Some(0))?.unwrap_or(0);
        file.check_range(offset, len).map_err(read_err)?;
        let task_size = match uint_arg("task_size", task_size, None)? {
            Some(0) => return Err(PyValueError::new_err("task_size must be positive")),
            Some(t) => Some(usize::try_from(t).unwrap_or(usize::MAX)),
            None => None,
        };
        let source: Arc<dyn gpufile::source::Source> = file.clone();
        let planned = match task_size {
            Some(t) => t,
            None => {
                gpufile::Engine::global()
                    .map_err(to_py)?
                    .settings()
                    .task_size
            }
        };
        if file.wants_range_probe(len, planned) {
            // Byte 0 through the engine, waited for as any read is (Ctrl-C interrupts it).
            let mut byte = [0u8; 1];
            let probe = gpufile::Request::read(gpufile::Buffer::host(&mut byte), 0);
            // SAFETY: `byte` outlives the wait, which returns once no task uses it.
            let fut = unsafe { request::submit(py, Endpoint::Read(source.clone()), probe) }
                .map_err(read_err)?;
            wait_interruptibly(py, &fut)?;
        }
        // A server that ignores Range serves the whole read from one GET: the plan reads that
        // from the source.
        let args = Args {
            dir: Direction::Read,
            len,
            buf_offset: 0,
            file_offset: ("file_offset", file_offset),
            task_size: None,
            caller_waits: false,
        };
        let req = request::build(&view, args)?.task_size(task_size);
        // SAFETY: the returned future holds `view` (the buffer export or the device array)
        // until the request is done.
        let fut = unsafe { request::submit(py, Endpoint::Read(source), req) }.map_err(read_err)?;
        let owners = vec![buf.clone().unbind(), slf.clone().into_any().unbind()];
        Ok(NativeFuture::new(fut, view, owners))
    }

    fn __str__(&self) -> String {
        self.url.clone()
    }
}

/// KvikIO's `infer_remote_endpoint_type` (its integer value).
#[pyfunction]
fn infer_remote_endpoint_type(url: &str) -> PyResult<u32> {
    gpufile_remote::infer_remote_endpoint_type(url)
        .map(|t| t as u32)
        .map_err(open_err)
}

/// The URL as errors and `str()` show it: signatures and userinfo credentials redacted.
#[pyfunction]
fn redact_url(url: &str) -> String {
    gpufile_remote::redact(url)
}

/// Whether `path` is an object's URL (`s3://`, `gs://`, `http(s)://`, WebHDFS's
/// `http(s)://`; the scheme in any case): `gpufile_remote::is_url`. Anything but a `str`
/// (bytes, a path object) is a local path.
#[pyfunction]
fn is_url(path: &Bound<'_, PyAny>) -> bool {
    path.cast::<pyo3::types::PyString>()
        .ok()
        .and_then(|s| s.to_str().ok().map(gpufile_remote::is_url))
        .unwrap_or(false)
}

/// Adds the remote-file classes and functions to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeRemoteFile>()?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    m.add_function(wrap_pyfunction!(infer_remote_endpoint_type, m)?)?;
    m.add_function(wrap_pyfunction!(redact_url, m)?)?;
    Ok(())
}
