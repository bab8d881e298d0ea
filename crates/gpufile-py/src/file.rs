//! Files and futures: `gpufile.CuFile`'s engine (`NativeFile`) and `IOFuture`'s (`NativeFuture`).

use std::sync::{Arc, Mutex};

use gpufile::__private::cuda::Context;
use gpufile::__private::stream::{OnStream, StreamOrder};
use gpufile::{Direction, Engine, Error, FileHandle, IoFuture, Memory, Request};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::{to_py, uint_arg, PathArg};
use crate::request::{self, Args};
use crate::stoppable::SIGNAL_POLL;

/// An open file (the engine under `gpufile.CuFile`).
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeFile {
    handle: Mutex<Option<FileHandle>>,
}

impl NativeFile {
    /// A Python file object over an open handle.
    pub(crate) fn from_handle(handle: FileHandle) -> Self {
        NativeFile {
            handle: Mutex::new(Some(handle)),
        }
    }

    pub(crate) fn handle(&self) -> PyResult<FileHandle> {
        let guard = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or_else(|| to_py(Error::Closed))
    }

    /// Validates the arguments and starts the request; argument errors leave the buffer alone.
    /// `blocking`: the caller waits at once (a small host request then runs on this thread).
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        py: Python<'_>,
        dir: Direction,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
        blocking: bool,
    ) -> PyResult<(IoFuture, BufferView)> {
        let handle = self.handle()?;
        let view = BufferView::for_request(buf, dir == Direction::Read)?;
        let args = Args {
            dir,
            len: view.request_len(size)?,
            buf_offset: 0,
            file_offset: ("file_offset", file_offset),
            task_size,
            caller_waits: blocking,
        };
        let req = request::build(&view, args)?;
        // SAFETY: `view` holds the buffer export (host) or the array object (device), so the
        // memory stays valid until the view is dropped; every caller keeps the view until the
        // future is done.
        let fut = unsafe { request::submit(py, handle.endpoint(dir), req) };
        Ok((fut.map_err(to_py)?, view))
    }

    fn blocking(
        &self,
        py: Python<'_>,
        dir: Direction,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (fut, view) = self.start(py, dir, buf, size, file_offset, task_size, true)?;
        let result = wait_interruptibly(py, &fut);
        drop(view);
        result
    }

    /// One request, not split (KvikIO's `raw_read`/`raw_write`), host or device memory alike.
    fn raw(
        &self,
        py: Python<'_>,
        dir: Direction,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let handle = self.handle()?;
        let view = BufferView::for_request(buf, dir == Direction::Read)?;
        let req = raw_request(&view, dir, size, file_offset, dev_offset, true)?;
        // SAFETY: `view` holds the export or the array object until after the wait.
        let fut = unsafe { request::submit(py, handle.endpoint(dir), req) };
        let result = wait_interruptibly(py, &fut.map_err(to_py)?);
        drop(view);
        result
    }

    /// A stream-ordered `raw`: queued on `stream` (see `gpufile::__private::stream`), returning at once.
    /// The buffer and the file are held until the request has ended, whatever becomes of the
    /// returned future (dropping it never waits for the stream).
    #[allow(clippy::too_many_arguments)]
    fn raw_async(
        slf: &Bound<'_, Self>,
        dir: Direction,
        buf: &Bound<'_, PyAny>,
        stream: u64,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
        order: Option<&str>,
    ) -> PyResult<NativeFuture> {
        let py = slf.py();
        let prefer = order
            .map(|o| {
                StreamOrder::parse(o).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "order must be \"wait-value\", \"host-function\", \"staged\" or \
                         \"caller-waits\", got {o:?}"
                    ))
                })
            })
            .transpose()?;
        let handle = slf.get().handle()?;
        // The stream given is the order asked for: the array's own stream is not waited for.
        let view = BufferView::for_stream(buf, dir == Direction::Read)?;
        let req = raw_request(&view, dir, size, file_offset, dev_offset, false)?;
        let on = OnStream {
            handle: stream,
            device: stream_device(&view)?,
        };
        let endpoint = handle.endpoint(dir);
        let (fut, ordering) = py
            .detach(move || {
                let engine = Engine::global()?;
                let settings = engine.shared_settings();
                // SAFETY: the view (export or array object) is held until the request has
                // ended (`keep` below); the stream is the caller's, used during this call only.
                unsafe {
                    gpufile::__private::stream::submit(&engine, endpoint, req, settings, on, prefer)
                }
            })
            .map_err(to_py)?;
        let keep = (view, buf.clone().unbind(), slf.clone().into_any().unbind());
        // Dropped with the GIL held, on the callback thread, once the request has ended.
        fut.on_done(move || crate::callbacks::post(Box::new(move |_py| drop(keep))));
        if !matches!(ordering.order, StreamOrder::WaitValue | StreamOrder::Staged) {
            gpufile::observe::notice(
                "stream-order",
                format!(
                    "stream-ordered transfers: {} ({})",
                    ordering.order, ordering.reason
                ),
            );
        }
        Ok(NativeFuture {
            fut,
            view: Mutex::new(None),
            _owners: Vec::new(),
            report: None,
            stream_order: Some((ordering.order.as_str().to_owned(), ordering.reason)),
            callbacks: Default::default(),
        })
    }

    fn future(
        slf: &Bound<'_, Self>,
        dir: Direction,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let py = slf.py();
        let (fut, view) = slf
            .get()
            .start(py, dir, buf, size, file_offset, task_size, false)?;
        Ok(NativeFuture::new(
            fut,
            view,
            vec![buf.clone().unbind(), slf.clone().into_any().unbind()],
        ))
    }

    /// Starts the request of `ranges` on `buf` (one request, its ranges checked against the
    /// buffer and the file before any byte moves); its future carries the plan's report.
    fn ranges_future(
        slf: &Bound<'_, Self>,
        dir: Direction,
        buf: &Bound<'_, PyAny>,
        ranges: gpufile::Ranges,
    ) -> PyResult<NativeFuture> {
        let py = slf.py();
        let handle = slf.get().handle()?;
        let view = BufferView::for_request(buf, dir == Direction::Read)?;
        let req = crate::ranges::request(&view, dir, ranges);
        // SAFETY: the future made here holds `view` (the export or the array object) until the
        // request is done.
        let started = unsafe { request::submit_reported(py, handle.endpoint(dir), req) };
        let (fut, report) = started.map_err(to_py)?;
        Ok(NativeFuture {
            fut,
            view: Mutex::new(Some(Held::One { _view: view })),
            _owners: vec![buf.clone().unbind(), slf.clone().into_any().unbind()],
            report: Some(report),
            stream_order: None,
            callbacks: Default::default(),
        })
    }
}

#[pymethods]
impl NativeFile {
    #[new]
    fn new(py: Python<'_>, path: PathArg, flags: &str) -> PyResult<Self> {
        let (path, flags) = (path.0, flags.to_owned());
        let handle = py
            .detach(move || FileHandle::open(path, &flags))
            .map_err(to_py)?;
        Ok(NativeFile {
            handle: Mutex::new(Some(handle)),
        })
    }

    /// A handle on the file an open descriptor refers to, with the descriptor's access mode
    /// (see [`FileHandle::from_fd`]); `name` is what errors call it.
    #[staticmethod]
    fn from_fd(fd: i32, name: std::path::PathBuf) -> PyResult<Self> {
        if fd < 0 {
            return Err(PyValueError::new_err(format!(
                "fd must not be negative, got {fd}"
            )));
        }
        // SAFETY: `fd` is not negative, and `from_fd` uses it only during this call (fcntl,
        // then a new descriptor of the file), never closing it. The wrapper passes the
        // descriptor of a file object it holds (a closed object's `fileno()` raises first); a
        // number closed behind the object's back is EBADF from fcntl, or names whatever file
        // now holds it, as it would for Python's own `os` calls on it.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let handle = FileHandle::from_fd(borrowed, name).map_err(to_py)?;
        Ok(NativeFile {
            handle: Mutex::new(Some(handle)),
        })
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.blocking(py, Direction::Read, buf, size, file_offset, task_size)
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn write(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.blocking(py, Direction::Write, buf, size, file_offset, task_size)
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pread(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        Self::future(slf, Direction::Read, buf, size, file_offset, task_size)
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pwrite(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        Self::future(slf, Direction::Write, buf, size, file_offset, task_size)
    }

    /// One request, not split (KvikIO's `raw_read`): `dev_offset` bytes into `buf`.
    /// Reads `sizes[i]` bytes at `file_offsets[i]` into `buf` at `buf_offsets[i]` (packed in
    /// order when `None`), as one request.
    #[pyo3(signature = (buf, file_offsets, sizes, buf_offsets=None))]
    fn read_ranges(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        file_offsets: &Bound<'_, PyAny>,
        sizes: &Bound<'_, PyAny>,
        buf_offsets: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let ranges = crate::ranges::ranges_arg(file_offsets, sizes, buf_offsets)?;
        Self::ranges_future(slf, Direction::Read, buf, ranges)
    }

    /// Writes `sizes[i]` bytes of `buf` at `buf_offsets[i]` (packed when `None`) to
    /// `file_offsets[i]`, as one request.
    #[pyo3(signature = (buf, file_offsets, sizes, buf_offsets=None))]
    fn write_ranges(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        file_offsets: &Bound<'_, PyAny>,
        sizes: &Bound<'_, PyAny>,
        buf_offsets: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let ranges = crate::ranges::ranges_arg(file_offsets, sizes, buf_offsets)?;
        Self::ranges_future(slf, Direction::Write, buf, ranges)
    }

    /// Gathers rows: row `rows[i]` (`row_bytes` at `base_offset + rows[i] * row_stride`) into
    /// `out` at `i * row_bytes`.
    #[pyo3(signature = (out, rows, row_bytes, row_stride=None, base_offset=None))]
    fn read_rows(
        slf: &Bound<'_, Self>,
        out: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        row_bytes: &Bound<'_, PyAny>,
        row_stride: Option<&Bound<'_, PyAny>>,
        base_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let ranges = crate::ranges::rows_arg(rows, row_bytes, row_stride, base_offset)?;
        Self::ranges_future(slf, Direction::Read, out, ranges)
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, dev_offset=None))]
    fn raw_read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.raw(py, Direction::Read, buf, size, file_offset, dev_offset)
    }

    /// One request, not split (KvikIO's `raw_write`).
    #[pyo3(signature = (buf, size=None, file_offset=None, dev_offset=None))]
    fn raw_write(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.raw(py, Direction::Write, buf, size, file_offset, dev_offset)
    }

    /// Stream-ordered `raw_read` (KvikIO's `raw_read_async`); `order` forces how the stream
    /// waits (`"wait-value"`, `"host-function"`, `"caller-waits"`; tests).
    #[pyo3(signature = (buf, stream, size=None, file_offset=None, dev_offset=None, order=None))]
    #[allow(clippy::too_many_arguments)]
    fn raw_read_async(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        stream: u64,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
        order: Option<&str>,
    ) -> PyResult<NativeFuture> {
        let d = Direction::Read;
        Self::raw_async(slf, d, buf, stream, size, file_offset, dev_offset, order)
    }

    /// Stream-ordered `raw_write` (KvikIO's `raw_write_async`).
    #[pyo3(signature = (buf, stream, size=None, file_offset=None, dev_offset=None, order=None))]
    #[allow(clippy::too_many_arguments)]
    fn raw_write_async(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        stream: u64,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
        order: Option<&str>,
    ) -> PyResult<NativeFuture> {
        let d = Direction::Write;
        Self::raw_async(slf, d, buf, stream, size, file_offset, dev_offset, order)
    }

    /// Closes the handle; requests in flight finish first (they hold the descriptor).
    pub(crate) fn close(&self) {
        self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.handle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    fn fileno(&self) -> PyResult<i32> {
        Ok(self.handle()?.fd())
    }

    fn open_flags(&self) -> PyResult<i32> {
        self.handle()?.open_flags().map_err(to_py)
    }

    fn nbytes(&self) -> PyResult<u64> {
        self.handle()?.size().map_err(to_py)
    }

    fn is_direct_io_supported(&self, py: Python<'_>) -> PyResult<bool> {
        let handle = self.handle()?;
        Ok(py.detach(move || handle.is_direct_io_supported()))
    }

    /// `(backend, reason)` of a request of `size` bytes (default: a large one) into `buf`
    /// (default: device memory where CUDA has a device, else host memory: the read that would
    /// really run here) under the current settings.
    #[pyo3(signature = (buf=None, size=None))]
    fn io_path(
        &self,
        buf: Option<&Bound<'_, PyAny>>,
        size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(String, String)> {
        let handle = self.handle()?;
        let (memory, len, no_gpu) = match buf {
            Some(b) => {
                let view = BufferView::describe(b)?;
                (view.memory(), view.request_len(size)?, None)
            }
            None => match gpufile::device_count() {
                Ok(n) if n > 0 => (Memory::Device, usize::MAX, None),
                Ok(_) => (Memory::Host, usize::MAX, Some("no CUDA device".to_owned())),
                Err(e) => (Memory::Host, usize::MAX, Some(e.to_string())),
            },
        };
        let settings = Engine::global().map_err(to_py)?.settings();
        let path = handle.io_path(memory, len, &settings).map_err(to_py)?;
        let reason = match no_gpu {
            Some(why) => format!(
                "no GPU ({why}): reads here go to host memory; {}",
                path.reason
            ),
            None => path.reason.to_string(),
        };
        Ok((path.backend.to_string(), reason))
    }

    #[getter]
    fn path(&self) -> PyResult<std::path::PathBuf> {
        Ok(self.handle()?.path().to_owned())
    }

    #[getter]
    fn flags(&self) -> PyResult<&'static str> {
        Ok(self.handle()?.mode().as_str())
    }
}

/// The buffer views a future holds until its request is done (never read: dropping them ends
/// the exports).
pub(crate) enum Held {
    /// The request's own view.
    One { _view: BufferView },
    /// Views shared with other requests (the groups of one batch submission on one buffer).
    Shared { _views: Vec<Arc<BufferView>> },
}

/// A request in flight. Holds the buffer export and the objects involved until it is done; the
/// export is released as soon as `get()` has seen the request end.
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeFuture {
    fut: IoFuture,
    /// `None` once `get()` saw the end, and for a stream-ordered request (which holds its
    /// buffer itself).
    view: Mutex<Option<Held>>,
    _owners: Vec<Py<PyAny>>,
    /// What the plan decided, for requests that report it (ranges and rows).
    report: Option<gpufile::PathReport>,
    /// How a stream-ordered request's stream waits, and why.
    stream_order: Option<(String, String)>,
    callbacks: crate::callbacks::Callbacks,
}

impl NativeFuture {
    /// A future over `fut` that holds `view` until the request is done and `owners` (the buffer,
    /// the file or mapping) for as long as it lives.
    pub(crate) fn new(fut: IoFuture, view: BufferView, owners: Vec<Py<PyAny>>) -> Self {
        Self::holding(fut, Held::One { _view: view }, owners)
    }

    /// A future over `fut` that holds `held` until the request is done and `owners` for as long
    /// as it lives.
    pub(crate) fn holding(fut: IoFuture, held: Held, owners: Vec<Py<PyAny>>) -> Self {
        NativeFuture {
            fut,
            view: Mutex::new(Some(held)),
            _owners: owners,
            report: None,
            stream_order: None,
            callbacks: Default::default(),
        }
    }

    /// The future, with what its request's plan decided (`report()`).
    pub(crate) fn with_report(mut self, report: gpufile::PathReport) -> Self {
        self.report = Some(report);
        self
    }
}

#[pymethods]
impl NativeFuture {
    /// Waits for the request (GIL released; Ctrl-C cancels it); the bytes transferred.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        let r = wait_interruptibly(py, &self.fut);
        // Done (or cancelled and drained): no worker uses the buffer any more.
        self.view.lock().unwrap_or_else(|e| e.into_inner()).take();
        r
    }

    /// Whether the request has finished.
    fn done(&self) -> bool {
        self.fut.is_done()
    }

    /// Stops the request: tasks not yet started are skipped, those running finish; `get()`
    /// then raises the cancellation unless every task had finished.
    fn cancel(&self) {
        self.fut.cancel();
    }

    /// What the plan decided (a dict, see `CuFile.read_ranges`), or `None` for requests that
    /// do not report it.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        self.report
            .as_ref()
            .map(|r| crate::ranges::report_dict(py, r))
            .transpose()
    }

    /// Arranges for `callback()` to run (GIL held, on gpufile's callback thread) once the
    /// request has ended, after the callbacks added before it; `False`, and nothing arranged,
    /// when it has ended and those have run.
    fn add_done_callback(&self, callback: Py<PyAny>) -> bool {
        self.callbacks.add(&self.fut, callback)
    }

    /// `(how, reason)` of a stream-ordered request; `None` for others.
    #[getter]
    fn stream_order(&self) -> Option<(String, String)> {
        self.stream_order.clone()
    }
}

impl Drop for NativeFuture {
    fn drop(&mut self) {
        let holds = self.view.get_mut().map(|v| v.is_some()).unwrap_or(false);
        // The workers may still write into the buffer: keep the export until they are done,
        // without holding the GIL meanwhile (other Python threads go on).
        if holds && !self.fut.is_done() {
            Python::attach(|py| py.detach(|| self.fut.wait().ok()));
        }
        if !self.fut.is_done() {
            return; // a stream-ordered request, still queued: it holds its own buffer
        }
        if let Err(e) = self.fut.wait() {
            if holds {
                // Nobody called get(): say once that this request failed (a dropped pwrite would
                // otherwise lose ENOSPC silently).
                gpufile::observe::notice(
                    "unwaited-failure",
                    format!("a request nobody waited for failed: {e}"),
                );
            }
        }
    }
}

/// The request of a `raw_read`/`raw_write` (one task): `size` bytes (default: the rest of the
/// buffer) at `dev_offset` into the buffer, at `file_offset` in the file.
fn raw_request(
    view: &BufferView,
    dir: Direction,
    size: Option<&Bound<'_, PyAny>>,
    file_offset: Option<&Bound<'_, PyAny>>,
    dev_offset: Option<&Bound<'_, PyAny>>,
    caller_waits: bool,
) -> PyResult<Request> {
    let dev_offset = uint_arg("dev_offset", dev_offset, Some(0))?.unwrap_or(0);
    let room = (view.len() as u64).checked_sub(dev_offset).ok_or_else(|| {
        PyValueError::new_err(format!(
            "dev_offset {dev_offset} is past the end of the buffer ({} bytes)",
            view.len()
        ))
    })?;
    let len = uint_arg("size", size, Some(room))?.unwrap_or(0);
    if len > room {
        return Err(PyValueError::new_err(format!(
            "size {len} at dev_offset {dev_offset} is larger than the buffer ({} bytes)",
            view.len()
        )));
    }
    let len = len as usize;
    let args = Args {
        dir,
        len,
        buf_offset: dev_offset as usize,
        file_offset: ("file_offset", file_offset),
        task_size: None,
        caller_waits,
    };
    Ok(request::build(view, args)?.task_size(Some(len.max(1))))
}

/// The context and device a stream-ordered request's stream belongs to: the device memory's
/// own; for host memory, the thread's current context, else device 0's primary one. `None`
/// where there is no CUDA driver or device (the request then runs at once).
fn stream_device(view: &BufferView) -> PyResult<Option<(Context, i32)>> {
    use gpufile::__private::cuda;
    if let BufferView::Device {
        info: Some(info), ..
    } = view
    {
        let device = info.device.unwrap_or(0);
        let ctx = match info.context {
            Some(c) => c,
            None => cuda::primary_context(device).map_err(to_py)?,
        };
        return Ok(Some((ctx, device)));
    }
    match cuda::current_context() {
        Err(_) => Ok(None),
        Ok(Some(ctx)) => Ok(Some((ctx, cuda::context_device(ctx).map_err(to_py)?))),
        Ok(None) => match gpufile::device_count() {
            Ok(n) if n > 0 => Ok(Some((cuda::primary_context(0).map_err(to_py)?, 0))),
            _ => Ok(None),
        },
    }
}

/// The future of a batch: holds every buffer until all requests are done.
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeBatchFuture {
    fut: IoFuture,
    views: Mutex<Vec<BufferView>>,
    _owners: Vec<Py<PyAny>>,
    callbacks: crate::callbacks::Callbacks,
}

impl NativeBatchFuture {
    /// The future of a batch over `fut`, holding every buffer's view until all requests are
    /// done and `owners` for as long as it lives.
    pub(crate) fn new(fut: IoFuture, views: Vec<BufferView>, owners: Vec<Py<PyAny>>) -> Self {
        NativeBatchFuture {
            fut,
            views: Mutex::new(views),
            _owners: owners,
            callbacks: Default::default(),
        }
    }
}

#[pymethods]
impl NativeBatchFuture {
    /// Waits for every request (GIL released; Ctrl-C cancels them); the bytes transferred.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        let r = wait_interruptibly(py, &self.fut);
        self.views.lock().unwrap_or_else(|e| e.into_inner()).clear();
        r
    }

    /// Whether every request has finished.
    fn done(&self) -> bool {
        self.fut.is_done()
    }

    /// As `NativeFuture.add_done_callback`, once every request has ended.
    fn add_done_callback(&self, callback: Py<PyAny>) -> bool {
        self.callbacks.add(&self.fut, callback)
    }
}

/// Arranges for `callback()` to run once every future of `futures` (`NativeFuture`s and
/// `NativeBatchFuture`s) has ended: one call for all of them. `False`, and nothing arranged,
/// when all have ended already.
#[pyfunction]
pub(crate) fn when_all(futures: Vec<Bound<'_, PyAny>>, callback: Py<PyAny>) -> PyResult<bool> {
    let mut pending = Vec::new();
    for f in &futures {
        if let Ok(n) = f.cast::<NativeFuture>() {
            pending.push(n.clone().into_any());
        } else if let Ok(b) = f.cast::<NativeBatchFuture>() {
            pending.push(b.clone().into_any());
        } else {
            return Err(PyTypeError::new_err(format!(
                "expected gpufile futures, got {}",
                crate::errors::type_name(f)
            )));
        }
    }
    let futs: Vec<&IoFuture> = pending
        .iter()
        .map(|f| match f.cast::<NativeFuture>() {
            Ok(n) => &n.get().fut,
            Err(_) => {
                &f.cast::<NativeBatchFuture>()
                    .expect("checked above")
                    .get()
                    .fut
            }
        })
        .collect();
    let left: Vec<&IoFuture> = futs.into_iter().filter(|f| !f.is_done()).collect();
    if left.is_empty() {
        return Ok(false);
    }
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(left.len()));
    let callback = std::sync::Arc::new(Mutex::new(Some(callback)));
    for f in left {
        let (count, callback) = (count.clone(), callback.clone());
        f.on_done(move || {
            if count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
                let cb = callback.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(cb) = cb {
                    crate::callbacks::post(crate::callbacks::call(cb));
                }
            }
        });
    }
    Ok(true)
}

impl Drop for NativeBatchFuture {
    fn drop(&mut self) {
        if !self.fut.is_done() {
            Python::attach(|py| py.detach(|| self.fut.wait().ok()));
        }
    }
}

/// The exception of a failed request, with `bytes_done`: the bytes its succeeding tasks moved,
/// which a caller can trust landed (tasks skipped once a task failed moved nothing).
fn failed(py: Python<'_>, e: Error, fut: &IoFuture) -> PyErr {
    let err = to_py(e);
    let value = err.value(py);
    if !value.hasattr("bytes_done").unwrap_or(true) {
        let _ = value.setattr("bytes_done", fut.bytes_moved());
    }
    err
}

/// Waits for `fut` with the GIL released, checking for signals: on one (KeyboardInterrupt), the
/// request's tasks not yet started are cancelled and those running are waited for (so no worker
/// touches the buffer afterwards), then the exception is raised.
pub(crate) fn wait_interruptibly(py: Python<'_>, fut: &IoFuture) -> PyResult<usize> {
    crate::notices::after(py, wait_for(py, fut))
}

/// [`wait_interruptibly`]'s wait.
fn wait_for(py: Python<'_>, fut: &IoFuture) -> PyResult<usize> {
    if fut.is_done() {
        // Ran on this thread, or ended meanwhile: no need to let the GIL go.
        return fut.wait().map_err(|e| failed(py, e, fut));
    }
    loop {
        if let Some(r) = py.detach(|| fut.wait_timeout(SIGNAL_POLL)) {
            return r.map_err(|e| failed(py, e, fut));
        }
        if let Err(interrupt) = py.check_signals() {
            fut.cancel();
            let _ = py.detach(|| fut.wait());
            return Err(interrupt);
        }
    }
}
