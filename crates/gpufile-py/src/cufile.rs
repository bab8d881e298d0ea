//! cuFile: the driver, its library, properties and parameters, cufile.json, and registration of
//! buffers and streams.

use gpufile::__private::cufile::{DriverSetting, DriverValue};
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::buffer::{wait_for_stream, BufferView};
use crate::errors::{to_py, type_name, uint_arg, GpufileError, PathArg};
use crate::tools::json_to_py;

/// Extra folders to find libcufile.so.0 in (before the system loader).
#[pyfunction]
pub(crate) fn cufile_set_search_dirs(dirs: Vec<std::path::PathBuf>) {
    gpufile::__private::cufile::set_search_dirs(dirs);
}

/// `(major, minor)` of libcufile, `(0, 0)` where it cannot be loaded or does not say (KvikIO).
#[pyfunction]
pub(crate) fn cufile_version(py: Python<'_>) -> (i32, i32) {
    py.detach(|| {
        gpufile::__private::cufile::version()
            .ok()
            .flatten()
            .unwrap_or((0, 0))
    })
}

/// Where libcufile was loaded from, or why not.
#[pyfunction]
pub(crate) fn cufile_library(py: Python<'_>) -> (bool, String) {
    py.detach(|| match gpufile::__private::cufile::library() {
        Ok(l) => (true, l.path.clone()),
        Err(e) => (false, e.to_string()),
    })
}

/// The driver's properties as a dict (opens the driver).
#[pyfunction]
pub(crate) fn cufile_properties(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let props = py
        .detach(gpufile::__private::cufile::properties)
        .map_err(to_py)?;
    let value = serde_json::to_value(&props).map_err(|e| GpufileError::new_err(e.to_string()))?;
    json_to_py(py, &value)
}

/// `[(name, value)]` as cuFile reports them (`cuFileGetParameter*`).
#[pyfunction]
pub(crate) fn cufile_parameters(py: Python<'_>) -> PyResult<Vec<(String, String)>> {
    let params = py
        .detach(gpufile::__private::cufile::parameters)
        .map_err(to_py)?;
    Ok(params.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// `(path, [(section.key, json value)])` of cufile.json (`CUFILE_ENV_PATH_JSON` or
/// `/etc/cufile.json` unless `path` is given).
#[pyfunction]
#[pyo3(signature = (path=None))]
pub(crate) fn cufile_config(
    path: Option<PathArg>,
) -> PyResult<(std::path::PathBuf, Vec<(String, String)>)> {
    let path = path.map_or_else(gpufile::__private::cufile::config_path, |p| p.0);
    let values = gpufile::__private::cufile::read_config(&path).map_err(to_py)?;
    Ok((path, values))
}

fn driver_setting(name: &str) -> PyResult<DriverSetting> {
    name.parse::<DriverSetting>().map_err(to_py)
}

/// One cuFile driver property by KvikIO's name (`cufile_driver.get`; opens the driver).
#[pyfunction]
pub(crate) fn cufile_driver_get(py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
    let setting = driver_setting(name)?;
    let value = py
        .detach(|| gpufile::__private::cufile::driver_setting(setting))
        .map_err(to_py)?;
    Ok(match value {
        DriverValue::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
        DriverValue::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
    })
}

/// Sets one settable driver property (`cufile_driver.set`): a bool for `poll_mode` (or 0/1),
/// a size in KiB (an int or anything with `__index__`) for the others. A read-only name is
/// KeyError, as KvikIO's.
#[pyfunction]
pub(crate) fn cufile_driver_set(
    py: Python<'_>,
    name: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let setting = driver_setting(name)?;
    if setting.read_only() {
        return Err(PyKeyError::new_err(format!(
            "{name} is a read-only property of the cuFile driver; settable: poll_mode, \
             poll_thresh_size, max_device_cache_size, max_pinned_memory_size"
        )));
    }
    let value = if setting.is_bool() {
        match value.extract::<bool>() {
            Ok(b) if value.is_instance_of::<PyBool>() => DriverValue::Bool(b),
            _ => match uint_arg(name, Some(value), None) {
                Ok(Some(n @ (0 | 1))) => DriverValue::Bool(n == 1),
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "{name} must be a bool, not {}",
                        type_name(value)
                    )))
                }
            },
        }
    } else {
        DriverValue::Int(uint_arg(name, Some(value), None)?.unwrap_or(0))
    };
    py.detach(|| gpufile::__private::cufile::set_driver_setting(setting, value))
        .map_err(to_py)
}

/// Opens the cuFile driver.
#[pyfunction]
pub(crate) fn cufile_driver_open(py: Python<'_>) -> PyResult<()> {
    py.detach(gpufile::__private::cufile::driver_open)
        .map_err(to_py)
}

/// Closes the cuFile driver if gpufile opened it; refused while files are registered with it.
#[pyfunction]
pub(crate) fn cufile_driver_close(py: Python<'_>) -> PyResult<()> {
    py.detach(gpufile::__private::cufile::driver_close)
        .map_err(to_py)
}

pub(crate) fn device_base(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<(u64, usize)> {
    match BufferView::describe(buf)? {
        BufferView::Device { addr, info, .. } => {
            let info = match info {
                Some(i) => i,
                None => py
                    .detach(|| gpufile::__private::cuda::classify(addr))
                    .map_err(to_py)?,
            };
            Ok((info.base, info.size))
        }
        BufferView::Host(_) | BufferView::HostDlpack { .. } => {
            Err(PyTypeError::new_err("cuFile registers device memory only"))
        }
    }
}

/// `cuFileBufRegister` on the allocation holding `buf`.
#[pyfunction]
pub(crate) fn memory_register(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
    let (base, size) = device_base(py, buf)?;
    py.detach(|| gpufile::__private::cufile::buf_register(base, size))
        .map_err(to_py)
}

/// `cuFileBufDeregister` on the allocation holding `buf`.
#[pyfunction]
pub(crate) fn memory_deregister(py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
    let (base, _) = device_base(py, buf)?;
    py.detach(|| gpufile::__private::cufile::buf_deregister(base))
        .map_err(to_py)
}

/// Waits for the work queued on CUDA stream `stream` (a handle) in the context of `buf`.
#[pyfunction]
pub(crate) fn stream_synchronize(
    py: Python<'_>,
    stream: u64,
    buf: &Bound<'_, PyAny>,
) -> PyResult<()> {
    match BufferView::new(buf, false)? {
        BufferView::Device {
            info: Some(info), ..
        } => wait_for_stream(py, &info, stream),
        BufferView::Device { info: None, .. } => Ok(()), // empty: nothing to wait for
        BufferView::Host(_) | BufferView::HostDlpack { .. } => Ok(()),
    }
}

/// `cuFileStreamRegister`.
#[pyfunction]
#[pyo3(signature = (stream, flags=0))]
pub(crate) fn stream_register(py: Python<'_>, stream: u64, flags: u32) -> PyResult<()> {
    py.detach(|| gpufile::__private::cufile::stream_register(stream, flags))
        .map_err(to_py)
}

/// `cuFileStreamDeregister`.
#[pyfunction]
pub(crate) fn stream_deregister(py: Python<'_>, stream: u64) -> PyResult<()> {
    py.detach(|| gpufile::__private::cufile::stream_deregister(stream))
        .map_err(to_py)
}
