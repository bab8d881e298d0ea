//! Remote files (`gpufile.RemoteFile`): conversion, GIL release and exception mapping over
//! the `gpufile-remote` crate.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use gpufile::{Error, RemoteFailure};
use gpufile_remote::{RemoteEndpointType, RemoteFile, S3Options};
use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::{to_py, uint_arg, BufferView};

/// Errors of opening and inferring: KvikIO raises RuntimeError for bad or unsupported URLs,
/// missing credentials and failed requests.
fn open_err(e: Error) -> PyErr {
    match e {
        Error::InvalidArgument(text) => PyRuntimeError::new_err(text),
        other => read_err(other),
    }
}

/// Errors of reads: a request past the end is a ValueError, a server that ignores ranges an
/// OverflowError (KvikIO's types), other server and network failures RuntimeError.
fn read_err(e: Error) -> PyErr {
    let text = e.to_string();
    match e {
        Error::Remote {
            kind: RemoteFailure::NoRangeSupport,
            ..
        } => PyOverflowError::new_err(text),
        Error::Remote { .. } => PyRuntimeError::new_err(text),
        other => to_py(other),
    }
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
struct NativeRemoteFile {
    file: Mutex<Option<Arc<RemoteFile>>>,
    /// Kept after close for `str()` and `nbytes()`.
    url: String,
    nbytes: u64,
    kind: RemoteEndpointType,
}

impl NativeRemoteFile {
    fn wrap(opened: gpufile::Result<RemoteFile>) -> PyResult<Self> {
        let f = opened.map_err(open_err)?;
        Ok(NativeRemoteFile {
            url: f.url().to_owned(),
            nbytes: f.nbytes(),
            kind: f.remote_endpoint_type(),
            file: Mutex::new(Some(Arc::new(f))),
        })
    }

    fn file(&self) -> PyResult<Arc<RemoteFile>> {
        let guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or_else(|| to_py(Error::Closed))
    }
}

#[allow(clippy::too_many_arguments)]
fn s3_options(
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

    /// Starts a read of `size` bytes (default: the buffer) at `file_offset` into `buf`; the
    /// range is checked against the size before any byte moves.
    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pread(
        &self,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeRemoteFuture> {
        let file = self.file()?;
        let view = BufferView::new(buf, true)?;
        let len = view.request_len(size)?;
        let offset = uint_arg("file_offset", file_offset, Some(0))?.unwrap_or(0);
        file.check_range(offset, len).map_err(read_err)?;
        let settings = gpufile::config::current().map_err(to_py)?;
        let task_size = match uint_arg("task_size", task_size, None)? {
            Some(0) => return Err(PyValueError::new_err("task_size must be positive")),
            Some(t) => usize::try_from(t).unwrap_or(usize::MAX),
            None => settings.task_size,
        };
        let threads = settings.num_threads;
        let addr = match &view {
            BufferView::Host(b) => b.buf_ptr() as usize,
            BufferView::Device { .. } => return Err(PyTypeError::new_err(
                "RemoteFile reads into host buffers for now; reads into device memory come with \
                     the engine's source executor",
            )),
        };
        let worker = std::thread::Builder::new()
            .name("gpufile-remote".into())
            .spawn(move || -> gpufile::Result<usize> {
                if len == 0 {
                    return Ok(0);
                }
                // SAFETY: the future holds `view` (the buffer export, writable, C-contiguous,
                // at least `len` bytes) until this thread has been joined, so the memory stays
                // valid and unresized; no other reference to it is made by gpufile meanwhile.
                let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
                let progress = AtomicU64::new(0);
                gpufile_remote::read_into_host(&*file, dst, offset, task_size, threads, &progress)?;
                Ok(len)
            })
            .map_err(|e| {
                to_py(Error::Spawn {
                    threads: 1,
                    reason: e.to_string(),
                })
            })?;
        Ok(NativeRemoteFuture {
            state: Mutex::new(State::Running(worker)),
            _view: view,
        })
    }

    fn __str__(&self) -> String {
        self.url.clone()
    }
}

enum State {
    Running(JoinHandle<gpufile::Result<usize>>),
    Finished(gpufile::Result<usize>),
}

/// A remote read in flight; holds the buffer until the read is done.
#[pyclass(frozen, module = "gpufile._native")]
struct NativeRemoteFuture {
    state: Mutex<State>,
    _view: BufferView,
}

impl NativeRemoteFuture {
    fn wait(&self) -> gpufile::Result<usize> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let taken = std::mem::replace(&mut *state, State::Finished(Ok(0)));
        let result = match taken {
            State::Running(handle) => handle.join().unwrap_or_else(|_| {
                Err(Error::InvalidArgument(
                    "the remote read thread panicked".into(),
                ))
            }),
            State::Finished(r) => r,
        };
        *state = State::Finished(result.clone());
        result
    }
}

#[pymethods]
impl NativeRemoteFuture {
    /// Waits for the read (GIL released); the bytes read.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.wait()).map_err(read_err)
    }

    /// Whether the read has finished.
    fn done(&self) -> bool {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Running(h) => h.is_finished(),
            State::Finished(_) => true,
        }
    }
}

impl Drop for NativeRemoteFuture {
    fn drop(&mut self) {
        // The thread writes into the buffer: keep the export until it is done.
        let _ = self.wait();
    }
}

/// KvikIO's `infer_remote_endpoint_type` (its integer value).
#[pyfunction]
fn infer_remote_endpoint_type(url: &str) -> PyResult<u32> {
    gpufile_remote::infer_remote_endpoint_type(url)
        .map(|t| t as u32)
        .map_err(open_err)
}

/// Adds the remote-file classes and functions to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeRemoteFile>()?;
    m.add_class::<NativeRemoteFuture>()?;
    m.add_function(wrap_pyfunction!(infer_remote_endpoint_type, m)?)?;
    Ok(())
}
