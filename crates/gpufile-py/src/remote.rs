//! Remote files (`gpufile.RemoteFile`): conversion, GIL release and exception mapping over
//! the `gpufile-remote` crate.

use std::sync::{Arc, Mutex};

use gpufile::source::Endpoint;
use gpufile::{Direction, Error};
use gpufile_remote::{RemoteEndpointType, RemoteFile};
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::open_err;
use crate::errors::to_py;
use crate::future::NativeFuture;
use crate::request::{self, Args};

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
    pub(crate) fn from_file(f: RemoteFile) -> Self {
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

#[pymethods]
impl NativeRemoteFile {
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
        let args = Args {
            dir: Direction::Read,
            len,
            buf_offset: 0,
            file_offset: ("file_offset", file_offset),
            task_size,
            caller_waits: false,
        };
        let req = request::build(&view, args)?;
        let source: Arc<dyn gpufile::source::Source> = file;
        // SAFETY: the returned future holds `view` (the buffer export or the device array)
        // until the request is done; a submit that Ctrl-C ends leaves no task running.
        let fut = unsafe { request::submit_stoppable(py, Endpoint::Read(source), req) }?;
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
