//! `gpufile.Mmap`'s engine (`NativeMmap`): a file region mapped read-only
//! ([`gpufile::source::MmapSource`]), read into host or GPU memory through the engine.

use std::sync::{Arc, Mutex};

use gpufile::source::Endpoint;
use gpufile::source::{MapOptions, MmapSource};
use gpufile::{Direction, Error, IoFuture};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyTuple, PyType};

use crate::buffer::BufferView;
use crate::errors::{to_py, type_name, uint_arg, PathArg};
use crate::future::{wait_interruptibly, NativeFuture};
use crate::request::{self, Args};

/// KvikIO raises `RuntimeError` where gpufile raises a more precise type (a file that does not
/// open, a closed handle): these errors are instances of both, a subclass of `base` and of
/// `RuntimeError` named `name`, made once per name.
fn kvikio_compatible<'py>(
    py: Python<'py>,
    base: Bound<'py, PyType>,
    name: &str,
    args: PyResult<Bound<'py, PyTuple>>,
) -> PyErr {
    static TYPES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    let made = (|| -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let args = args?;
        let types = TYPES.get_or_init(py, || PyDict::new(py).unbind()).bind(py);
        if let Some(t) = types.get_item(name)? {
            return Ok((t.cast_into::<PyType>()?, args));
        }
        let ns = PyDict::new(py);
        ns.set_item("__module__", "gpufile")?;
        ns.set_item(
            "__doc__",
            format!(
                "{} that is also KvikIO's RuntimeError (code written for KvikIO catches it).",
                base.name()?
            ),
        )?;
        let runtime = py.get_type::<PyRuntimeError>();
        let bases = PyTuple::new(py, [base.as_any(), runtime.as_any()])?;
        let t = py
            .get_type::<PyType>()
            .call1((name, bases, ns))?
            .cast_into::<PyType>()?;
        types.set_item(name, &t)?;
        Ok((t, args))
    })();
    match made {
        Ok((t, args)) => PyErr::from_type(t, args.unbind()),
        Err(e) => e,
    }
}

/// A failed open: gpufile's `OSError` subclass (by errno), also a `RuntimeError` with KvikIO's
/// "Unable to open file".
fn open_error(py: Python<'_>, e: Error) -> PyErr {
    let Error::Os {
        errno,
        ref path,
        op: gpufile::Op::Open,
        ..
    } = e
    else {
        return to_py(e);
    };
    // The instance, not the lazy error: OSError(errno, ...) picks its subclass when made.
    let base = to_py(e.clone()).value(py).get_type();
    let Ok(name) = base.name().map(|n| n.to_string()) else {
        return to_py(e);
    };
    let message = format!(
        "Unable to open file: {}",
        gpufile::__private::error::os_message(errno)
    );
    let args = (errno, message, path.to_string_lossy().into_owned()).into_pyobject(py);
    kvikio_compatible(py, base, &name, args)
}

/// A read on a closed handle: `ValueError` (Python's files) and KvikIO's `RuntimeError`.
fn closed_error(py: Python<'_>) -> PyErr {
    let base = py.get_type::<PyValueError>();
    kvikio_compatible(
        py,
        base,
        "ClosedMmapError",
        ("Cannot read from a closed MmapHandle",).into_pyobject(py),
    )
}

/// An `int` argument that fits `i32` (`map_flags`), or None.
fn i32_arg(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i32>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            type_name(obj)
        )));
    }
    obj.extract::<i32>()
        .map(Some)
        .map_err(|_| PyValueError::new_err(format!("{name} {obj} is out of range")))
}

/// A file region mapped read-only (the engine under `gpufile.Mmap`).
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeMmap {
    source: Mutex<Option<Arc<MmapSource>>>,
}

impl NativeMmap {
    fn source(&self) -> Option<Arc<MmapSource>> {
        self.source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Validates the arguments and starts the read; argument errors leave the buffer alone.
    fn start(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(IoFuture, BufferView)> {
        let view = BufferView::for_request(buf, true)?;
        let source = self.source().ok_or_else(|| closed_error(py))?;
        let size = uint_arg("size", size, None)?;
        let offset_arg = offset;
        let offset = uint_arg("offset", offset, Some(0))?.unwrap_or(0);
        request::task_size_arg(task_size)?;
        let len = source.read_len(size, offset).map_err(to_py)?;
        if len > view.len() {
            let what = match size {
                Some(n) => format!("size {n}"),
                None => {
                    format!("the read of {len} bytes from offset {offset} to the end of the file")
                }
            };
            return Err(PyValueError::new_err(format!(
                "{what} is larger than the buffer ({} bytes)",
                view.len()
            )));
        }
        let args = Args {
            dir: Direction::Read,
            len,
            buf_offset: 0,
            file_offset: ("offset", offset_arg),
            task_size,
            caller_waits: false,
        };
        let req = request::build(&view, args)?;
        // SAFETY: `view` holds the buffer export (host) or the array object (device), so the
        // memory stays valid until the view is dropped; every caller keeps the view until the
        // future is done. The endpoint holds the mapping until the request ends.
        let fut = unsafe { request::submit(py, Endpoint::Read(source), req) };
        Ok((fut.map_err(to_py)?, view))
    }
}

#[pymethods]
impl NativeMmap {
    #[new]
    #[pyo3(signature = (file_path, flags="r", initial_map_size=None, initial_map_offset=None, mode=None, map_flags=None))]
    fn new(
        py: Python<'_>,
        file_path: PathArg,
        flags: &str,
        initial_map_size: Option<&Bound<'_, PyAny>>,
        initial_map_offset: Option<&Bound<'_, PyAny>>,
        mode: Option<&Bound<'_, PyAny>>,
        map_flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mode = uint_arg("mode", mode, Some(0o644))?.unwrap_or(0o644);
        let options = MapOptions {
            size: uint_arg("initial_map_size", initial_map_size, None)?,
            offset: uint_arg("initial_map_offset", initial_map_offset, Some(0))?.unwrap_or(0),
            mode: u32::try_from(mode).unwrap_or(u32::MAX),
            map_flags: i32_arg("map_flags", map_flags)?,
        };
        let flags = flags.to_owned();
        let source = py
            .detach(move || MmapSource::open(file_path.0, &flags, options))
            .map_err(|e| open_error(py, e))?;
        Ok(NativeMmap {
            source: Mutex::new(Some(Arc::new(source))),
        })
    }

    /// Bytes mapped when the handle was made (0 once closed, as KvikIO).
    fn initial_map_size(&self) -> u64 {
        self.source().map_or(0, |s| s.initial_map_size())
    }

    /// File offset of the mapped region (0 once closed, as KvikIO).
    fn initial_map_offset(&self) -> u64 {
        self.source().map_or(0, |s| s.initial_map_offset())
    }

    /// The file's size now; 0 once closed.
    fn file_size(&self) -> PyResult<u64> {
        match self.source() {
            Some(s) => s.current_size().map_err(to_py),
            None => Ok(0),
        }
    }

    /// Closes the handle; reads in flight finish first (they hold the mapping).
    fn close(&self) {
        self.source.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn closed(&self) -> bool {
        self.source().is_none()
    }

    #[pyo3(signature = (buf, size=None, offset=None))]
    fn read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (fut, view) = self.start(py, buf, size, offset, None)?;
        let result = wait_interruptibly(py, &fut);
        drop(view);
        result
    }

    #[pyo3(signature = (buf, size=None, offset=None, task_size=None))]
    fn pread(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let (fut, view) = slf.get().start(slf.py(), buf, size, offset, task_size)?;
        let owners = vec![buf.clone().unbind(), slf.clone().into_any().unbind()];
        Ok(NativeFuture::new(fut, view, owners))
    }

    /// The path it was opened with (None once closed).
    #[getter]
    fn path(&self) -> Option<std::path::PathBuf> {
        self.source().map(|s| s.path().to_owned())
    }
}
