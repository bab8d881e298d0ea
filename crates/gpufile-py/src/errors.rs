//! Python exceptions, declared once, and the conversion of the core's errors into them (the
//! class from the error's kind, `kinds::python_class`; the arguments and message from the
//! variant); the argument helpers every binding module shares.
//!
//! KvikIO raises `RuntimeError` where gpufile raises a precise builtin type (`FileNotFoundError`,
//! `io.UnsupportedOperation`, ...), and `OverflowError` for a negative size where gpufile says
//! `ValueError`. So that code written for either catches what it expects, the error raised is a
//! class deriving from both (`gpufile._native.FileNotFoundError` is a `FileNotFoundError` and a
//! `RuntimeError`), made once at import by [`register`]; `GpufileError` itself derives from
//! `RuntimeError`.

use gpufile::Error;
use gpufile::Op;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyTuple, PyType};

use crate::kinds::{python_class_in, Call};

pyo3::create_exception!(
    gpufile,
    GpufileError,
    PyRuntimeError,
    "Base class of gpufile's own failures (a RuntimeError, as KvikIO's failures are)."
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
    SafetensorError,
    pyo3::exceptions::PyValueError,
    "A safetensors file or checkpoint that does not follow the format; the message names the \
     file and the tensor."
);
pyo3::create_exception!(
    gpufile,
    EndOfFileError,
    GpufileError,
    "A read reached the end of the file before the requested range was complete."
);

/// The builtin `OSError` subclasses an errno can map to; each gets a twin that is also a
/// `RuntimeError`.
const OS_ERRORS: [&str; 16] = [
    "OSError",
    "BlockingIOError",
    "ChildProcessError",
    "ConnectionError",
    "BrokenPipeError",
    "ConnectionAbortedError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "FileExistsError",
    "FileNotFoundError",
    "InterruptedError",
    "IsADirectoryError",
    "NotADirectoryError",
    "PermissionError",
    "ProcessLookupError",
    "TimeoutError",
];

/// The classes deriving from two bases: `(gpufile's base, class)` for the OS errors and
/// `io.UnsupportedOperation`, then the out-of-range class last.
static COMPAT: PyOnceLock<Vec<(Py<PyType>, Py<PyType>)>> = PyOnceLock::new();

fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: (Bound<'py, PyAny>, Bound<'py, PyAny>),
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "gpufile._native")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [bases.0, bases.1])?;
    Ok(py
        .get_type::<PyType>()
        .call1((name, bases, ns))?
        .cast_into::<PyType>()?)
}

/// Makes the two-base classes and adds them to the module (so they pickle by name).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let builtins = py.import("builtins")?;
    let runtime = py.get_type::<PyRuntimeError>().into_any();
    let mut classes = Vec::new();
    for name in OS_ERRORS {
        let base = builtins.getattr(name)?;
        let doc = format!("{name}, also a RuntimeError (what KvikIO raises for it).");
        classes.push((
            base.clone(),
            make_class(py, name, (base, runtime.clone()), &doc)?,
        ));
    }
    let unsupported = py.import("io")?.getattr("UnsupportedOperation")?;
    let doc = "io.UnsupportedOperation (the file's flags forbid the operation), also a \
               RuntimeError (what KvikIO raises, \"Operation not permitted\").";
    classes.push((
        unsupported.clone(),
        make_class(py, "UnsupportedOperation", (unsupported, runtime), doc)?,
    ));
    let value = py.get_type::<PyValueError>().into_any();
    let overflow = builtins.getattr("OverflowError")?;
    let doc = "An integer argument below 0 or too large: a ValueError, also the OverflowError \
               KvikIO raises for it.";
    classes.push((
        value.clone(),
        make_class(py, "OutOfRangeError", (value, overflow), doc)?,
    ));
    for (_, class) in &classes {
        m.add(class.name()?, class)?;
    }
    let classes = classes
        .into_iter()
        .map(|(b, c)| Ok((b.cast_into::<PyType>()?.unbind(), c.unbind())))
        .collect::<PyResult<Vec<_>>>()?;
    let _ = COMPAT.set(py, classes);
    Ok(())
}

/// An exception of the two-base twin of `base` (of `base` itself before [`register`]), made
/// from `args`.
fn compat_err<'py>(py: Python<'py>, base: &Bound<'py, PyType>, args: Bound<'py, PyTuple>) -> PyErr {
    let class = COMPAT
        .get(py)
        .and_then(|v| v.iter().find(|(b, _)| b.bind(py).is(base)))
        .map(|(_, c)| c.bind(py).clone())
        .unwrap_or_else(|| base.clone());
    match class.call1(args) {
        Ok(v) => PyErr::from_value(v),
        Err(e) => e,
    }
}

/// An `OutOfRangeError` (a `ValueError` and an `OverflowError`) with `text`.
pub(crate) fn out_of_range(text: String) -> PyErr {
    Python::attach(|py| {
        let base = py.get_type::<PyValueError>();
        match PyTuple::new(py, [text]) {
            Ok(args) => compat_err(py, &base, args),
            Err(e) => e,
        }
    })
}

/// Maps the core error onto the Python exception a caller would expect.
///
/// Where several tasks of a request failed ([`Error::TasksFailed`]) the exception is the first
/// task's type, its message goes on to name the other failures, and it carries
/// `failed_ranges` (`[(offset, length)]` of every failed transfer listed) and `bytes_done`
/// (bytes moved by the tasks that succeeded). A single failed transfer carries its
/// `failed_ranges` too.
pub(crate) fn to_py(e: Error) -> PyErr {
    to_py_in(Call::Any, e)
}

/// Errors of opening and inferring: KvikIO raises RuntimeError for bad or unsupported URLs,
/// missing credentials and failed requests; the rest as the common mapping has them (a server
/// that ignores ranges is an OverflowError, other server and network failures RuntimeError).
pub(crate) fn open_err(e: Error) -> PyErr {
    match e {
        // The override is for the URL, the open's arguments and the credentials; a bad
        // environment variable (SSL_CERT_DIR) or setting stays the ValueError it is everywhere.
        Error::InvalidArgument(_) => to_py_in(Call::RemoteOpen, e),
        other => to_py(other),
    }
}

/// [`to_py`] for an error of `call`, whose class may be the call's override
/// ([`python_class_in`]).
pub(crate) fn to_py_in(call: Call, e: Error) -> PyErr {
    let Error::TasksFailed {
        first, bytes_done, ..
    } = &e
    else {
        let ranges = e.failed_ranges();
        let err = to_py_with(call, e, "");
        if !ranges.is_empty() {
            Python::attach(|py| {
                let _ = err.value(py).setattr("failed_ranges", ranges);
            });
        }
        return err;
    };
    let (full, first_text) = (e.to_string(), first.to_string());
    let more = full.strip_prefix(first_text.as_str()).unwrap_or_default();
    let err = to_py_with(call, (**first).clone(), more);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("failed_ranges", e.failed_ranges());
        let _ = value.setattr("bytes_done", *bytes_done);
    });
    err
}

/// [`to_py`] for one error, `more` appended to its message: the class is
/// [`python_class_in`] of its kind, the arguments and message the variant's own.
fn to_py_with(call: Call, e: Error, more: &str) -> PyErr {
    let text = format!("{e}{more}");
    let errno = e.errno().unwrap_or(0);
    let class = python_class_in(call, e.kind());
    Python::attach(|py| {
        let args = match e {
            // OSError(errno, strerror, filename) as Python's own: KvikIO's wording for a failed
            // open is kept ("Unable to open file").
            Error::Os {
                errno,
                ref path,
                op,
                offset,
                len,
            } => {
                let reason = gpufile::__private::error::os_message(errno);
                let what = match op {
                    Op::Read | Op::Write | Op::Map | Op::Advise => {
                        format!("{op} of {len} bytes at offset {offset}: {reason}")
                    }
                    Op::Open => format!("Unable to open file: {reason}"),
                    Op::Create => format!("Unable to create a file in the directory: {reason}"),
                    _ => format!("{op}: {reason}"),
                } + more;
                (errno, what, path.to_string_lossy().into_owned()).into_pyobject(py)
            }
            // The path is the exception's `filename`, shown after the text as for other OS
            // errors; also a RuntimeError, as every failed open.
            Error::NotSeekable { ref path, what } => (
                errno,
                format!(
                    "Unable to open file: is {what} (gpufile reads and writes at file offsets, \
                     which {what} does not have){more}"
                ),
                path.to_string_lossy().into_owned(),
            )
                .into_pyobject(py),
            // KvikIO's text for it (its POSIX path checks for EBADF).
            Error::NotReadable { .. } | Error::NotWritable { .. } => {
                PyTuple::new(py, [format!("{text}: Operation not permitted")])
            }
            _ => PyTuple::new(py, [text]),
        };
        raise(py, class, args)
    })
}

/// An exception of the class [`python_class_in`] names, made from `args`.
pub(crate) fn raise<'py>(
    py: Python<'py>,
    class: &str,
    args: PyResult<Bound<'py, PyTuple>>,
) -> PyErr {
    match (class_named(py, class), args) {
        (Ok(class), Ok(args)) => new_err(py, &class, args),
        (Err(e), _) | (_, Err(e)) => e,
    }
}

/// The class [`python_class`] names.
fn class_named<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(match name {
        "GpufileError" => py.get_type::<GpufileError>(),
        "EndOfFileError" => py.get_type::<EndOfFileError>(),
        "CudaError" => py.get_type::<CudaError>(),
        "CufileError" => py.get_type::<CufileError>(),
        "SafetensorError" => py.get_type::<SafetensorError>(),
        "UnsupportedOperation" => py
            .import("io")?
            .getattr("UnsupportedOperation")?
            .cast_into::<PyType>()?,
        builtin => py
            .import("builtins")?
            .getattr(builtin)?
            .cast_into::<PyType>()?,
    })
}

/// An exception of `class` made from `args`; an `OSError` (`io.UnsupportedOperation`
/// included) as its twin that is also a `RuntimeError`, of the subclass `OSError` picks for
/// the errno.
fn new_err<'py>(py: Python<'py>, class: &Bound<'py, PyType>, args: Bound<'py, PyTuple>) -> PyErr {
    if !class.is_subclass_of::<PyOSError>().unwrap_or(false) {
        return match class.call1(args) {
            Ok(v) => PyErr::from_value(v),
            Err(e) => e,
        };
    }
    match class.call1(args.clone()) {
        Ok(picked) => compat_err(py, &picked.get_type(), args),
        Err(e) => e,
    }
}

/// A path argument as Python's `open` takes one: a `str`, a `bytes`, or an `os.PathLike` whose
/// `__fspath__` returns either. Bytes are the file name as the kernel sees it; a `str` is
/// encoded as `os.fsencode` does. Anything else is Python's own `TypeError` ("expected str,
/// bytes or os.PathLike object, not int").
pub(crate) struct PathArg(pub std::path::PathBuf);

impl FromPyObject<'_, '_> for PathArg {
    type Error = PyErr;

    fn extract(ob: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        use std::os::unix::ffi::OsStrExt;
        let path = ob.py().import("os")?.getattr("fspath")?.call1((ob,))?;
        if let Ok(bytes) = path.cast::<PyBytes>() {
            let name = std::ffi::OsStr::from_bytes(bytes.as_bytes());
            return Ok(PathArg(name.into()));
        }
        Ok(PathArg(path.extract()?))
    }
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `obj` as a Python int: an `int` (not a `bool`), or anything with `__index__` (NumPy integer
/// scalars), as `operator.index` takes it; `None` for anything else.
pub(crate) fn index_of<'py>(obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    if obj.is_instance_of::<PyBool>() {
        return None;
    }
    if obj.is_instance_of::<PyInt>() {
        return Some(obj.clone());
    }
    if !obj.hasattr("__index__").unwrap_or(false) {
        return None;
    }
    let index = obj.py().import("operator").ok()?.getattr("index").ok()?;
    index.call1((obj,)).ok()
}

/// A non-negative integer argument (`None` → `default`): an `int` or anything with `__index__`
/// (`np.int64`); other types are TypeError, negative or too large values `OutOfRangeError` (a
/// ValueError, and the OverflowError KvikIO raises).
pub(crate) fn uint_arg(
    name: &str,
    obj: Option<&Bound<'_, PyAny>>,
    default: Option<u64>,
) -> PyResult<Option<u64>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(default);
    };
    let Some(int) = index_of(obj) else {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            type_name(obj)
        )));
    };
    match int.extract::<i128>() {
        Ok(v) if v < 0 => Err(out_of_range(format!(
            "{name} must not be negative, got {v} (can't convert negative value to an \
             unsigned integer)"
        ))),
        Ok(v) => u64::try_from(v)
            .map(Some)
            .map_err(|_| out_of_range(format!("{name} {v} is out of range"))),
        Err(_) => Err(out_of_range(format!("{name} is out of range"))),
    }
}
