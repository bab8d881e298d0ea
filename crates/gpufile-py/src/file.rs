//! Files: `gpufile.CuFile`'s engine (`NativeFile`); its futures are `crate::future`'s.

use std::sync::Mutex;

use gpufile::__private::cuda::Context;
use gpufile::__private::stream::{OnStream, StreamOrder};
use gpufile::{Direction, Engine, Error, FileHandle, IoFuture, Memory, Request};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::{to_py, uint_arg, PathArg};
use crate::future::{wait_interruptibly, NativeFuture};
use crate::request::{self, Args};

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
        Ok(NativeFuture::stream_ordered(
            fut,
            (ordering.order.as_str().to_owned(), ordering.reason),
        ))
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
        let owners = vec![buf.clone().unbind(), slf.clone().into_any().unbind()];
        Ok(NativeFuture::new(fut, view, owners).with_report(report))
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
