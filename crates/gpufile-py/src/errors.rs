//! Python exceptions, declared once, and the mapping from the core's error enum onto them; the
//! argument helpers every binding module shares.

use gpufile::error::Op;
use gpufile::{Error, RemoteFailure};
use pyo3::exceptions::{
    PyException, PyIndexError, PyKeyError, PyOSError, PyOverflowError, PyRuntimeError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

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
pub(crate) fn to_py(e: Error) -> PyErr {
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
                Op::Read | Op::Write | Op::Map => {
                    format!("{op} of {len} bytes at offset {offset}: {reason}")
                }
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
        // KvikIO's types for remote failures: a server that ignores ranges is an OverflowError,
        // other server and network failures RuntimeError.
        Error::Remote {
            kind: RemoteFailure::NoRangeSupport,
            ..
        } => PyOverflowError::new_err(text),
        Error::Remote { .. } => PyRuntimeError::new_err(text),
        Error::OutOfRange(_) => PyIndexError::new_err(text),
        Error::Cuda { .. } | Error::CudaUnavailable { .. } => CudaError::new_err(text),
        Error::CufileUnavailable { .. } | Error::Cufile { .. } | Error::CufileBusy { .. } => {
            CufileError::new_err(text)
        }
        Error::Closed
        | Error::InvalidArgument(_)
        | Error::InvalidSetting { .. }
        | Error::InvalidEnv { .. } => PyValueError::new_err(text),
        _ => GpufileError::new_err(text),
    }
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A non-negative integer argument (`None` → `default`); bad types are TypeError, negative or
/// too large values ValueError.
pub(crate) fn uint_arg(
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
