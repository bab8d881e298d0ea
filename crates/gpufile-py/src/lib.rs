//! `gpufile._native`: the PyO3 bindings. Conversion and GIL release only; the logic lives in the
//! `gpufile` crate and the KvikIO-shaped façade in `python/gpufile/`.

use std::sync::Mutex;

use gpufile::config::{self, Input, Name, Source, Value};
use gpufile::error::Op;
use gpufile::{Error, FileHandle, IoFuture, Memory};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyException, PyKeyError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};

mod dlpack;
mod remote;

pyo3::create_exception!(
    gpufile,
    GpufileError,
    PyException,
    "Base class of gpufile's own failures."
);
pyo3::create_exception!(
    gpufile,
    CudaError,
    GpufileError,
    "A CUDA driver call failed, or CUDA is not available for a device buffer."
);
pyo3::create_exception!(
    gpufile,
    CufileError,
    GpufileError,
    "cuFile failed, or cannot be used where it is required (compat_mode OFF)."
);
pyo3::create_exception!(
    gpufile,
    EndOfFileError,
    GpufileError,
    "A read reached the end of the file before the requested range was complete."
);

/// Maps the core error onto the Python exception a caller would expect.
fn to_py(e: Error) -> PyErr {
    let text = e.to_string();
    match e {
        Error::Os {
            errno,
            ref path,
            op,
            offset,
            len,
        } => {
            // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError, ...) and
            // appends the filename itself.
            let reason = gpufile::error::os_message(errno);
            let what = match op {
                Op::Read | Op::Write => format!("{op} of {len} bytes at offset {offset}: {reason}"),
                _ => format!("{op}: {reason}"),
            };
            PyOSError::new_err((errno, what, path.to_string_lossy().into_owned()))
        }
        Error::UnexpectedEof { .. } => EndOfFileError::new_err(text),
        Error::NotReadable { .. } | Error::NotWritable { .. } => Python::attach(|py| {
            match py
                .import("io")
                .and_then(|io| io.getattr("UnsupportedOperation"))
            {
                Ok(ty) => match ty.cast_into::<pyo3::types::PyType>() {
                    Ok(ty) => PyErr::from_type(ty, text),
                    Err(_) => PyValueError::new_err(text),
                },
                Err(err) => err,
            }
        }),
        Error::UnknownSetting { .. } => PyKeyError::new_err(text),
        Error::Cuda { .. } | Error::CudaUnavailable { .. } => CudaError::new_err(text),
        Error::CufileUnavailable { .. } | Error::Cufile { .. } => CufileError::new_err(text),
        Error::Closed
        | Error::InvalidArgument(_)
        | Error::InvalidSetting { .. }
        | Error::InvalidEnv { .. } => PyValueError::new_err(text),
        _ => GpufileError::new_err(text),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A non-negative integer argument (`None` → `default`); bad types are TypeError, negative or
/// too large values ValueError.
fn uint_arg(
    name: &str,
    obj: Option<&Bound<'_, PyAny>>,
    default: Option<u64>,
) -> PyResult<Option<u64>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(default);
    };
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            type_name(obj)
        )));
    }
    match obj.extract::<i128>() {
        Ok(v) if v < 0 => Err(PyValueError::new_err(format!(
            "{name} must not be negative, got {v}"
        ))),
        Ok(v) => u64::try_from(v)
            .map(Some)
            .map_err(|_| PyValueError::new_err(format!("{name} {v} is out of range"))),
        Err(_) => Err(PyValueError::new_err(format!("{name} is out of range"))),
    }
}

/// A caller's buffer, held (and so kept alive, and for host buffers unresizable) for as long as
/// this value lives.
enum BufferView {
    /// Exported through the buffer protocol.
    Host(PyUntypedBuffer),
    /// Described by `__cuda_array_interface__` or DLPack; the object (and the DLPack capsule)
    /// is held.
    Device {
        addr: u64,
        len: usize,
        _owner: Vec<Py<PyAny>>,
    },
}

/// Byte size of one item of a `__cuda_array_interface__` typestr such as "<f4" or "|u1".
fn typestr_itemsize(typestr: &str) -> Option<usize> {
    typestr.get(2..)?.parse().ok().filter(|n| *n > 0)
}

/// Waits (GIL released) for the work queued on stream `handle`, in the context owning `addr`.
fn wait_for_stream(py: Python<'_>, addr: u64, handle: u64) -> PyResult<()> {
    py.detach(|| -> gpufile::Result<()> {
        let info = gpufile::cuda::classify(addr)?;
        let ctx = match info.context {
            Some(c) => c,
            None => gpufile::cuda::primary_context(info.device.unwrap_or(0))?,
        };
        gpufile::cuda::synchronize_stream(handle, ctx)
    })
    .map_err(to_py)
}

impl BufferView {
    fn new(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        if let Ok(cai) = obj.getattr("__cuda_array_interface__") {
            return Self::from_cai(obj, &cai, writable);
        }
        let buf = match PyUntypedBuffer::get(obj) {
            Ok(buf) => buf,
            Err(_) => {
                if let Some(t) = dlpack::take(obj)? {
                    if t.len > 0 {
                        wait_for_stream(obj.py(), t.addr, 1)?;
                    }
                    let owner = vec![obj.clone().unbind(), t.capsule];
                    return Ok(BufferView::Device {
                        addr: t.addr,
                        len: t.len,
                        _owner: owner,
                    });
                }
                return Err(PyTypeError::new_err(format!(
                    "expected a buffer (NumPy array, bytearray, memoryview) or a CUDA array \
                     (__cuda_array_interface__ or __dlpack__), got {}",
                    type_name(obj)
                )));
            }
        };
        if buf.format().to_bytes().contains(&b'O') {
            return Err(PyTypeError::new_err(format!(
                "unsupported dtype: {} holds Python object pointers, not data",
                type_name(obj)
            )));
        }
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "buffer must be C-contiguous (got a strided view; numpy.ascontiguousarray makes a copy)",
            ));
        }
        if writable && buf.readonly() {
            return Err(PyTypeError::new_err(format!(
                "the destination {} is read-only",
                type_name(obj)
            )));
        }
        Ok(BufferView::Host(buf))
    }

    /// CUDA Array Interface v2/v3: data, shape, typestr, strides (None or C order), stream.
    fn from_cai(obj: &Bound<'_, PyAny>, cai: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        let bad = |what: &str| {
            PyValueError::new_err(format!(
                "{}.__cuda_array_interface__ is malformed: {what}",
                type_name(obj)
            ))
        };
        let (addr, readonly): (u64, bool) = cai
            .get_item("data")
            .and_then(|d| d.extract())
            .map_err(|_| bad("data"))?;
        let shape: Vec<usize> = cai
            .get_item("shape")
            .and_then(|d| d.extract())
            .map_err(|_| bad("shape"))?;
        let typestr: String = cai
            .get_item("typestr")
            .and_then(|d| d.extract())
            .map_err(|_| bad("typestr"))?;
        let itemsize = typestr_itemsize(&typestr).ok_or_else(|| bad("typestr"))?;
        if typestr.as_bytes().get(1) == Some(&b'O') {
            return Err(PyTypeError::new_err(
                "unsupported dtype: object arrays hold pointers",
            ));
        }
        let strides: Option<Vec<isize>> = match cai.get_item("strides") {
            Ok(s) if !s.is_none() => Some(s.extract().map_err(|_| bad("strides"))?),
            _ => None,
        };
        let items = shape.iter().try_fold(1usize, |acc, d| acc.checked_mul(*d));
        let len = items
            .and_then(|n| n.checked_mul(itemsize))
            .ok_or_else(|| bad("shape"))?;
        if let Some(strides) = strides.filter(|_| len > 0) {
            let mut expect = itemsize as isize;
            for (dim, stride) in shape.iter().zip(&strides).rev() {
                if *dim > 1 && *stride != expect {
                    return Err(PyValueError::new_err(format!(
                        "device array must be C-contiguous (shape {shape:?}, strides {strides:?})"
                    )));
                }
                expect *= *dim as isize;
            }
        }
        if writable && readonly {
            return Err(PyTypeError::new_err(format!(
                "the destination {} is read-only",
                type_name(obj)
            )));
        }
        // v3: work queued on `stream` must finish before gpufile touches the data.
        if let Ok(stream) = cai.get_item("stream") {
            if !stream.is_none() && len > 0 {
                let handle: u64 = stream.extract().map_err(|_| bad("stream"))?;
                if handle == 0 {
                    return Err(bad("stream 0 is not allowed (CUDA Array Interface v3)"));
                }
                wait_for_stream(obj.py(), addr, handle)?;
            }
        }
        Ok(BufferView::Device {
            addr,
            len,
            _owner: vec![obj.clone().unbind()],
        })
    }

    fn len(&self) -> usize {
        match self {
            BufferView::Host(b) => b.len_bytes(),
            BufferView::Device { len, .. } => *len,
        }
    }

    /// The byte count of a request: `size` (default: the whole buffer), at most the buffer.
    fn request_len(&self, size: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let n = uint_arg("size", size, Some(self.len() as u64))?.unwrap_or(0);
        if n > self.len() as u64 {
            return Err(PyValueError::new_err(format!(
                "size {n} is larger than the buffer ({} bytes)",
                self.len()
            )));
        }
        Ok(n as usize)
    }

    fn memory(&self) -> Memory {
        match self {
            BufferView::Host(_) => Memory::Host,
            BufferView::Device { .. } => Memory::Device,
        }
    }
}

/// An open file (the engine under `gpufile.CuFile`).
#[pyclass(frozen, module = "gpufile._native")]
struct NativeFile {
    handle: Mutex<Option<FileHandle>>,
}

#[derive(Clone, Copy)]
enum Dir {
    Read,
    Write,
}

impl NativeFile {
    fn handle(&self) -> PyResult<FileHandle> {
        let guard = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or_else(|| to_py(Error::Closed))
    }

    /// Validates the arguments and starts the request; argument errors leave the buffer alone.
    fn start(
        &self,
        py: Python<'_>,
        dir: Dir,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(IoFuture, BufferView)> {
        let handle = self.handle()?;
        let view = BufferView::new(buf, matches!(dir, Dir::Read))?;
        let len = view.request_len(size)?;
        let offset = uint_arg("file_offset", file_offset, Some(0))?.unwrap_or(0);
        let task_size = uint_arg("task_size", task_size, None)?
            .map(|t| usize::try_from(t).unwrap_or(usize::MAX));
        let (addr, device) = match &view {
            BufferView::Host(b) => (b.buf_ptr() as u64, false),
            BufferView::Device { addr, .. } => (*addr, true),
        };
        let fut = py.detach(move || {
            // SAFETY: `view` holds the buffer export (host) or the array object (device), so the
            // memory stays valid until the view is dropped; every caller keeps the view until
            // the future is done.
            unsafe {
                match (dir, device) {
                    (Dir::Read, false) => {
                        handle.pread_host(addr as *mut u8, len, offset, task_size)
                    }
                    (Dir::Write, false) => {
                        handle.pwrite_host(addr as *const u8, len, offset, task_size)
                    }
                    (Dir::Read, true) => handle.pread_device(addr, len, offset, task_size),
                    (Dir::Write, true) => handle.pwrite_device(addr, len, offset, task_size),
                }
            }
        });
        Ok((fut.map_err(to_py)?, view))
    }

    fn blocking(
        &self,
        py: Python<'_>,
        dir: Dir,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (fut, view) = self.start(py, dir, buf, size, file_offset, task_size)?;
        let result = py.detach(|| fut.wait());
        drop(view);
        result.map_err(to_py)
    }

    fn raw(
        &self,
        py: Python<'_>,
        dir: Dir,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let handle = self.handle()?;
        let view = BufferView::new(buf, matches!(dir, Dir::Read))?;
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
        let offset = uint_arg("file_offset", file_offset, Some(0))?.unwrap_or(0);
        let result = match &view {
            BufferView::Host(b) => {
                let addr = b.buf_ptr() as u64 + dev_offset;
                py.detach(move || {
                    // SAFETY: `view` holds the export until after the wait.
                    let fut = unsafe {
                        match dir {
                            Dir::Read => {
                                handle.pread_host(addr as *mut u8, len, offset, Some(len.max(1)))
                            }
                            Dir::Write => {
                                handle.pwrite_host(addr as *const u8, len, offset, Some(len.max(1)))
                            }
                        }
                    };
                    fut.and_then(|f| f.wait())
                })
            }
            BufferView::Device { addr, .. } => {
                let addr = addr + dev_offset;
                py.detach(move || {
                    // SAFETY: `view` holds the array object until the call returns.
                    unsafe {
                        match dir {
                            Dir::Read => handle.raw_read_device(addr, len, offset),
                            Dir::Write => handle.raw_write_device(addr, len, offset),
                        }
                    }
                })
            }
        };
        drop(view);
        result.map_err(to_py)
    }

    fn future(
        slf: &Bound<'_, Self>,
        dir: Dir,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let py = slf.py();
        let (fut, view) = slf
            .get()
            .start(py, dir, buf, size, file_offset, task_size)?;
        Ok(NativeFuture {
            fut,
            _view: Some(view),
            _owners: vec![buf.clone().unbind(), slf.clone().into_any().unbind()],
        })
    }
}

#[pymethods]
impl NativeFile {
    #[new]
    fn new(py: Python<'_>, path: std::path::PathBuf, flags: &str) -> PyResult<Self> {
        let flags = flags.to_owned();
        let handle = py
            .detach(move || FileHandle::open(path, &flags))
            .map_err(to_py)?;
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
        self.blocking(py, Dir::Read, buf, size, file_offset, task_size)
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
        self.blocking(py, Dir::Write, buf, size, file_offset, task_size)
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pread(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        Self::future(slf, Dir::Read, buf, size, file_offset, task_size)
    }

    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pwrite(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        Self::future(slf, Dir::Write, buf, size, file_offset, task_size)
    }

    /// One request, not split (KvikIO's `raw_read`): `dev_offset` bytes into `buf`.
    #[pyo3(signature = (buf, size=None, file_offset=None, dev_offset=None))]
    fn raw_read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        dev_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.raw(py, Dir::Read, buf, size, file_offset, dev_offset)
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
        self.raw(py, Dir::Write, buf, size, file_offset, dev_offset)
    }

    /// Closes the handle; requests in flight finish first (they hold the descriptor).
    fn close(&self) {
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
    /// (default: device memory) under the current settings.
    #[pyo3(signature = (buf=None, size=None))]
    fn io_path(
        &self,
        buf: Option<&Bound<'_, PyAny>>,
        size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(String, String)> {
        let handle = self.handle()?;
        let (memory, len) = match buf {
            Some(b) => {
                let view = BufferView::new(b, false)?;
                (view.memory(), view.request_len(size)?)
            }
            None => (Memory::Device, usize::MAX),
        };
        let path = handle.io_path(memory, len).map_err(to_py)?;
        Ok((path.backend.to_string(), path.reason.to_string()))
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

/// A request in flight. Holds the buffer export and the objects involved until it is done.
#[pyclass(frozen, module = "gpufile._native")]
struct NativeFuture {
    fut: IoFuture,
    _view: Option<BufferView>,
    _owners: Vec<Py<PyAny>>,
}

#[pymethods]
impl NativeFuture {
    /// Waits for the request (GIL released); the bytes transferred.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.fut.wait()).map_err(to_py)
    }

    /// Whether the request has finished.
    fn done(&self) -> bool {
        self.fut.is_done()
    }
}

impl Drop for NativeFuture {
    fn drop(&mut self) {
        // The workers may still write into the buffer: keep the export until they are done.
        let _ = self.fut.wait();
    }
}

fn value_to_py(py: Python<'_>, value: Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::CompatMode(m) => (m as u8).into_pyobject(py)?.into_any().unbind(),
        Value::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
        Value::IntList(v) => PyList::new(py, v)?.into_any().unbind(),
    })
}

fn parse_name(name: &str) -> PyResult<Name> {
    name.parse::<Name>().map_err(to_py)
}

/// The current value of a setting (compat_mode as its int value).
#[pyfunction]
fn settings_get(py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
    let value = config::get(parse_name(name)?).map_err(to_py)?;
    value_to_py(py, value)
}

/// Saved settings, for `defaults.set(...)` used as a context manager.
#[pyclass(frozen, module = "gpufile._native")]
struct SettingsSnapshot {
    saved: Vec<(Name, Value, Source)>,
}

#[pymethods]
impl SettingsSnapshot {
    /// Puts the saved values (and their sources) back.
    fn restore(&self) -> PyResult<()> {
        config::restore(&self.saved).map_err(to_py)
    }
}

/// Applies every update or none; returns what was there before.
#[pyfunction]
fn settings_set(updates: &Bound<'_, PyDict>) -> PyResult<SettingsSnapshot> {
    let mut texts: Vec<(Name, String)> = Vec::new();
    let mut parsed: Vec<(Name, Input<'static>)> = Vec::new();
    for (key, value) in updates.iter() {
        let key: String = key.extract().map_err(|_| {
            PyTypeError::new_err(format!("setting names are str, not {}", type_name(&key)))
        })?;
        let name = parse_name(&key)?;
        if value.is_instance_of::<PyBool>() {
            parsed.push((name, Input::Bool(value.extract()?)));
        } else if value.is_instance_of::<PyInt>() {
            let n: i128 = value.extract().map_err(|_| {
                PyValueError::new_err(format!("invalid value for setting {key:?}: out of range"))
            })?;
            parsed.push((name, Input::Int(n)));
        } else if value.is_instance_of::<PyString>() {
            texts.push((name, value.extract()?));
        } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
            let items: Vec<i128> = value
                .extract()
                .map_err(|_| PyTypeError::new_err(format!("{key} expects a list of ints")))?;
            parsed.push((name, Input::IntList(items)));
        } else {
            return Err(PyTypeError::new_err(format!(
                "invalid type for setting {key:?}: {}",
                type_name(&value)
            )));
        }
    }
    let mut all: Vec<(Name, Input<'_>)> = parsed;
    all.extend(texts.iter().map(|(n, t)| (*n, Input::Text(t.as_str()))));
    let names: Vec<Name> = all.iter().map(|(n, _)| *n).collect();
    let saved = config::snapshot(&names).map_err(to_py)?;
    config::set(&all).map_err(to_py)?;
    Ok(SettingsSnapshot { saved })
}

/// Every setting with its source, for a later `restore()`.
#[pyfunction]
fn settings_snapshot() -> PyResult<SettingsSnapshot> {
    Ok(SettingsSnapshot {
        saved: config::snapshot(&Name::ALL).map_err(to_py)?,
    })
}

/// `[(name, value, source)]` for every setting.
#[pyfunction]
fn settings_report(py: Python<'_>) -> PyResult<Vec<(String, Py<PyAny>, String)>> {
    config::report()
        .map_err(to_py)?
        .into_iter()
        .map(|(n, v, s)| Ok((n.to_string(), value_to_py(py, v)?, s.to_string())))
        .collect()
}

/// Frees the pooled pinned bounce buffers; returns the bytes freed (KvikIO's
/// `bounce_buffer_free`).
#[pyfunction]
fn bounce_buffer_free(py: Python<'_>) -> usize {
    py.detach(gpufile::free_bounce_buffers)
}

/// Bytes of pinned bounce buffers pooled now.
#[pyfunction]
fn bounce_buffer_pooled() -> usize {
    gpufile::pooled_bounce_bytes()
}

/// Extra folders to find libcufile.so.0 in (before the system loader).
#[pyfunction]
fn cufile_set_search_dirs(dirs: Vec<std::path::PathBuf>) {
    gpufile::cufile::set_search_dirs(dirs);
}

/// `(major, minor)` of libcufile, `(0, 0)` where it cannot be loaded or does not say (KvikIO).
#[pyfunction]
fn cufile_version(py: Python<'_>) -> (i32, i32) {
    py.detach(|| gpufile::cufile::version().ok().flatten().unwrap_or((0, 0)))
}

/// Where libcufile was loaded from, or why not.
#[pyfunction]
fn cufile_library(py: Python<'_>) -> (bool, String) {
    py.detach(|| match gpufile::cufile::library() {
        Ok(l) => (true, l.path.clone()),
        Err(e) => (false, e.to_string()),
    })
}

/// The driver's properties as JSON (opens the driver).
#[pyfunction]
fn cufile_properties(py: Python<'_>) -> PyResult<String> {
    let props = py.detach(gpufile::cufile::properties).map_err(to_py)?;
    serde_json::to_string(&props).map_err(|e| GpufileError::new_err(e.to_string()))
}

/// `[(name, value)]` as cuFile reports them (`cuFileGetParameter*`).
#[pyfunction]
fn cufile_parameters(py: Python<'_>) -> PyResult<Vec<(String, String)>> {
    let params = py.detach(gpufile::cufile::parameters).map_err(to_py)?;
    Ok(params.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// `(path, [(section.key, json value)])` of cufile.json (`CUFILE_ENV_PATH_JSON` or
/// `/etc/cufile.json` unless `path` is given).
#[pyfunction]
#[pyo3(signature = (path=None))]
fn cufile_config(
    path: Option<std::path::PathBuf>,
) -> PyResult<(std::path::PathBuf, Vec<(String, String)>)> {
    let path = path.unwrap_or_else(gpufile::cufile::config_path);
    let values = gpufile::cufile::read_config(&path).map_err(to_py)?;
    Ok((path, values))
}

/// Opens the cuFile driver.
#[pyfunction]
fn cufile_driver_open(py: Python<'_>) -> PyResult<()> {
    py.detach(gpufile::cufile::driver_open).map_err(to_py)
}

/// Closes the cuFile driver if gpufile opened it.
#[pyfunction]
fn cufile_driver_close(py: Python<'_>) -> PyResult<()> {
    py.detach(gpufile::cufile::driver_close).map_err(to_py)
}

fn device_base(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<(u64, usize)> {
    match BufferView::new(buf, false)? {
        BufferView::Device { addr, .. } => {
            let info = py.detach(|| gpufile::cuda::classify(addr)).map_err(to_py)?;
            Ok((info.base, info.size))
        }
        BufferView::Host(_) => Err(PyTypeError::new_err("cuFile registers device memory only")),
    }
}

/// `cuFileBufRegister` on the allocation holding `buf`.
#[pyfunction]
fn memory_register(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
    let (base, size) = device_base(py, buf)?;
    py.detach(|| gpufile::cufile::buf_register(base, size))
        .map_err(to_py)
}

/// `cuFileBufDeregister` on the allocation holding `buf`.
#[pyfunction]
fn memory_deregister(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
    let (base, _) = device_base(py, buf)?;
    py.detach(|| gpufile::cufile::buf_deregister(base))
        .map_err(to_py)
}

/// Waits for the work queued on CUDA stream `stream` (a handle) in the context of `buf`.
#[pyfunction]
fn stream_synchronize(py: Python<'_>, stream: u64, buf: &Bound<'_, PyAny>) -> PyResult<()> {
    match BufferView::new(buf, false)? {
        BufferView::Device { addr, .. } => wait_for_stream(py, addr, stream),
        BufferView::Host(_) => Ok(()),
    }
}

/// `cuFileStreamRegister`.
#[pyfunction]
#[pyo3(signature = (stream, flags=0))]
fn stream_register(py: Python<'_>, stream: u64, flags: u32) -> PyResult<()> {
    py.detach(|| gpufile::cufile::stream_register(stream, flags))
        .map_err(to_py)
}

/// `cuFileStreamDeregister`.
#[pyfunction]
fn stream_deregister(py: Python<'_>, stream: u64) -> PyResult<()> {
    py.detach(|| gpufile::cufile::stream_deregister(stream))
        .map_err(to_py)
}

/// An observation in progress (see `gpufile.observe`).
#[pyclass(module = "gpufile._native")]
struct Observation {
    inner: Option<gpufile::observe::Observation>,
}

/// Starts an observation.
#[pyfunction]
fn observe_begin(py: Python<'_>) -> Observation {
    Observation {
        inner: Some(py.detach(gpufile::observe::begin)),
    }
}

/// Ends an observation; the report as JSON.
#[pyfunction]
fn observe_end(py: Python<'_>, obs: &mut Observation) -> PyResult<String> {
    let inner = obs
        .inner
        .take()
        .ok_or_else(|| PyValueError::new_err("observation already ended"))?;
    Ok(py
        .detach(move || gpufile::observe::end(inner))
        .to_json()
        .to_string())
}

/// Totals since the process started, as JSON.
#[pyfunction]
fn stats_json(py: Python<'_>) -> String {
    py.detach(gpufile::observe::totals).to_json().to_string()
}

/// Decisions noticed since the last call (for `logging`).
#[pyfunction]
fn take_notices() -> Vec<String> {
    gpufile::observe::take_notices()
}

/// Test seam: `[(call, after, fault, times)]` with call "read"/"write" and fault "eintr",
/// "eagain", "short", "eio", "enospc" or an errno; `[]` turns injection off.
#[pyfunction]
fn _inject_faults(rules: Vec<(String, u64, Bound<'_, PyAny>, u64)>) -> PyResult<()> {
    use gpufile::posix::faults::{self, Call, Fault, Rule};
    let mut parsed = Vec::new();
    for (call, after, fault, times) in rules {
        let call = match call.as_str() {
            "read" => Call::Read,
            "write" => Call::Write,
            other => {
                return Err(PyValueError::new_err(format!(
                    "call {other:?}: read or write"
                )))
            }
        };
        let fault = if let Ok(errno) = fault.extract::<i32>() {
            Fault::Errno(errno)
        } else {
            match fault.extract::<String>()?.as_str() {
                "eintr" => Fault::Eintr,
                "eagain" => Fault::Eagain,
                "short" => Fault::Short,
                "eio" => Fault::Errno(5),
                "enospc" => Fault::Errno(28),
                other => return Err(PyValueError::new_err(format!("fault {other:?}"))),
            }
        };
        parsed.push(Rule {
            call,
            after,
            fault,
            times,
        });
    }
    faults::set(parsed);
    Ok(())
}

/// `(pages cached, pages)` of a range of the open descriptor `fd` (path for errors).
#[pyfunction]
fn page_cache_info(
    py: Python<'_>,
    fd: i32,
    path: std::path::PathBuf,
    offset: u64,
    length: u64,
) -> PyResult<(u64, u64)> {
    py.detach(|| gpufile::pagecache::page_cache_info(fd, &path, offset, length))
        .map_err(to_py)
}

/// Evicts a range of the open descriptor `fd` from the page cache.
#[pyfunction]
fn drop_file_page_cache(
    py: Python<'_>,
    fd: i32,
    path: std::path::PathBuf,
    offset: u64,
    length: u64,
    sync_first: bool,
) -> PyResult<()> {
    py.detach(|| gpufile::pagecache::drop_file_page_cache(fd, &path, offset, length, sync_first))
        .map_err(to_py)
}

/// Drops the system page cache (root); whether it worked.
#[pyfunction]
fn drop_system_page_cache(
    py: Python<'_>,
    reclaim_dentries_and_inodes: bool,
    sync_first: bool,
) -> bool {
    py.detach(|| {
        gpufile::pagecache::drop_system_page_cache(reclaim_dentries_and_inodes, sync_first)
    })
}

/// Whether device I/O of `gds_threshold` or more would use gpufile's POSIX path rather than
/// cuFile under the current settings (KvikIO's `is_compat_mode_preferred`).
#[pyfunction]
fn compat_mode_preferred(py: Python<'_>) -> PyResult<bool> {
    py.detach(|| -> gpufile::Result<bool> {
        let s = config::current()?;
        let policy = gpufile::plan::Policy::from(&s);
        Ok(
            match gpufile::plan::choose_path(
                Memory::Device,
                usize::MAX,
                policy,
                gpufile::cufile::availability,
            ) {
                Ok(p) => p.backend == gpufile::Backend::GpufilePosix,
                Err(_) => false, // OFF (or require_gds) insists on cuFile
            },
        )
    })
    .map_err(to_py)
}

/// Requests in flight now.
#[pyfunction]
fn in_flight() -> usize {
    gpufile::pool::in_flight()
}

/// `gpufile check`: `(json, text)`.
#[pyfunction]
#[pyo3(signature = (path=None))]
fn check(py: Python<'_>, path: Option<std::path::PathBuf>) -> PyResult<(String, String)> {
    let report = py.detach(|| gpufile::platform::check(path.as_deref()));
    let json = serde_json::to_string(&report).map_err(|e| GpufileError::new_err(e.to_string()))?;
    Ok((json, report.render()))
}

/// `gpufile explain`: `(json, text)`; with `run` and `file`, the read is performed and the
/// observation added.
#[pyfunction]
#[pyo3(signature = (size, file_offset=0, device=true, task_size=None, num_threads=None,
                    compat_mode=None, gds_threshold=None, cufile="probe", cufile_json=None,
                    registered=false, file=None, run=false))]
#[allow(clippy::too_many_arguments)]
fn explain(
    py: Python<'_>,
    size: u64,
    file_offset: u64,
    device: bool,
    task_size: Option<u64>,
    num_threads: Option<usize>,
    compat_mode: Option<&Bound<'_, PyAny>>,
    gds_threshold: Option<u64>,
    cufile: &str,
    cufile_json: Option<std::path::PathBuf>,
    registered: bool,
    file: Option<std::path::PathBuf>,
    run: bool,
) -> PyResult<(String, String)> {
    let compat_mode = match compat_mode {
        None => None,
        Some(v) => {
            let text = v.extract::<String>().ok();
            let input = match &text {
                Some(t) => Input::Text(t),
                None => Input::Int(v.extract::<i128>()?),
            };
            match config::validate(Name::CompatMode, &input) {
                Ok(Value::CompatMode(m)) => Some(m),
                Ok(_) | Err(_) => {
                    return Err(PyValueError::new_err(format!("invalid compat_mode {v}")))
                }
            }
        }
    };
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| PyValueError::new_err("size too large"));
    let req = gpufile::explain::Request {
        size: to_usize(size)?,
        file_offset,
        memory: if device { Memory::Device } else { Memory::Host },
        task_size: task_size.map(to_usize).transpose()?,
        num_threads,
        compat_mode,
        gds_threshold: gds_threshold.map(to_usize).transpose()?,
        cufile: cufile.parse().map_err(to_py)?,
        cufile_json,
        registered_buffer: registered,
    };
    if run && file.is_none() {
        return Err(PyValueError::new_err("run=True needs file"));
    }
    py.detach(move || -> gpufile::Result<(String, String)> {
        let e = gpufile::explain::explain(&req)?;
        let observed = match (&file, run) {
            (Some(f), true) => Some(gpufile::explain::run(&req, f)?),
            _ => None,
        };
        let mut text = e.render();
        if let Some(o) = &observed {
            text.push('\n');
            text.push_str(&gpufile::explain::render_comparison(&e, o));
        }
        let json = serde_json::json!({
            "prediction": e,
            "observed": observed.as_ref().map(gpufile::observe::Report::to_json),
        });
        Ok((json.to_string(), text))
    })
    .map_err(to_py)
}

/// Blocks (GIL released) until no request is in flight; registered with `atexit`.
#[pyfunction]
fn wait_idle(py: Python<'_>) {
    py.detach(gpufile::pool::wait_idle);
}

/// Runs the `gpufile` command line in this process; returns its exit status.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(move || gpufile_cli::run(argv))
}

/// gpufile's native extension.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", gpufile::VERSION)?;
    m.add("GpufileError", py.get_type::<GpufileError>())?;
    m.add("EndOfFileError", py.get_type::<EndOfFileError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add("CufileError", py.get_type::<CufileError>())?;
    m.add_class::<NativeFile>()?;
    remote::register(m)?;
    m.add_class::<NativeFuture>()?;
    m.add_class::<SettingsSnapshot>()?;
    m.add_function(wrap_pyfunction!(settings_get, m)?)?;
    m.add_function(wrap_pyfunction!(settings_set, m)?)?;
    m.add_function(wrap_pyfunction!(settings_report, m)?)?;
    m.add_function(wrap_pyfunction!(settings_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(wait_idle, m)?)?;
    m.add_function(wrap_pyfunction!(bounce_buffer_free, m)?)?;
    m.add_function(wrap_pyfunction!(bounce_buffer_pooled, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_class::<Observation>()?;
    for f in [
        wrap_pyfunction!(cufile_set_search_dirs, m)?,
        wrap_pyfunction!(cufile_version, m)?,
        wrap_pyfunction!(cufile_library, m)?,
        wrap_pyfunction!(cufile_properties, m)?,
        wrap_pyfunction!(cufile_parameters, m)?,
        wrap_pyfunction!(cufile_config, m)?,
        wrap_pyfunction!(cufile_driver_open, m)?,
        wrap_pyfunction!(cufile_driver_close, m)?,
        wrap_pyfunction!(memory_register, m)?,
        wrap_pyfunction!(memory_deregister, m)?,
        wrap_pyfunction!(stream_synchronize, m)?,
        wrap_pyfunction!(stream_register, m)?,
        wrap_pyfunction!(stream_deregister, m)?,
        wrap_pyfunction!(observe_begin, m)?,
        wrap_pyfunction!(observe_end, m)?,
        wrap_pyfunction!(stats_json, m)?,
        wrap_pyfunction!(take_notices, m)?,
        wrap_pyfunction!(check, m)?,
        wrap_pyfunction!(_inject_faults, m)?,
        wrap_pyfunction!(in_flight, m)?,
        wrap_pyfunction!(page_cache_info, m)?,
        wrap_pyfunction!(drop_file_page_cache, m)?,
        wrap_pyfunction!(drop_system_page_cache, m)?,
        wrap_pyfunction!(compat_mode_preferred, m)?,
        wrap_pyfunction!(explain, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
