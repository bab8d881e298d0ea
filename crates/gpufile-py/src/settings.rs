//! Settings: KvikIO's `defaults` over the process engine's default settings; the pinned pool.

use gpufile::config::{Input, Name, Source, Value};
use gpufile::Engine;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::errors::{to_py, type_name};

pub(crate) fn value_to_py(py: Python<'_>, value: Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::CompatMode(m) => (m as u8).into_pyobject(py)?.into_any().unbind(),
        Value::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
        Value::IntList(v) => PyList::new(py, v)?.into_any().unbind(),
    })
}

pub(crate) fn parse_name(name: &str) -> PyResult<Name> {
    name.parse::<Name>().map_err(to_py)
}

/// The current value of a setting (compat_mode as its int value).
#[pyfunction]
pub(crate) fn settings_get(py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
    let value = Engine::global()
        .map_err(to_py)?
        .settings()
        .get(parse_name(name)?);
    value_to_py(py, value)
}

/// Saved settings, for `defaults.set(...)` used as a context manager.
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct SettingsSnapshot {
    saved: Vec<(Name, Value, Source)>,
}

#[pymethods]
impl SettingsSnapshot {
    /// Puts the saved values (and their sources) back.
    fn restore(&self) -> PyResult<()> {
        Engine::global().map_err(to_py)?.restore(&self.saved);
        Ok(())
    }
}

/// Applies every update or none; returns what was there before.
#[pyfunction]
pub(crate) fn settings_set(updates: &Bound<'_, PyDict>) -> PyResult<SettingsSnapshot> {
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
    let engine = Engine::global().map_err(to_py)?;
    let saved = engine.snapshot(&names);
    engine.set(&all).map_err(to_py)?;
    Ok(SettingsSnapshot { saved })
}

/// Every setting with its source, for a later `restore()`.
#[pyfunction]
pub(crate) fn settings_snapshot() -> PyResult<SettingsSnapshot> {
    Ok(SettingsSnapshot {
        saved: Engine::global().map_err(to_py)?.snapshot(&Name::ALL),
    })
}

/// `[(name, value, source)]` for every setting.
#[pyfunction]
pub(crate) fn settings_report(py: Python<'_>) -> PyResult<Vec<(String, Py<PyAny>, String)>> {
    Engine::global()
        .map_err(to_py)?
        .report()
        .into_iter()
        .map(|(n, v, s)| Ok((n.to_string(), value_to_py(py, v)?, s.to_string())))
        .collect()
}

/// Frees the pooled pinned bounce buffers; returns the bytes freed (KvikIO's
/// `bounce_buffer_free`).
#[pyfunction]
pub(crate) fn bounce_buffer_free(py: Python<'_>) -> PyResult<usize> {
    let engine = Engine::global().map_err(to_py)?;
    Ok(py.detach(|| engine.free_bounce_buffers()))
}

/// Bytes of pinned bounce buffers pooled now.
#[pyfunction]
pub(crate) fn bounce_buffer_pooled() -> PyResult<usize> {
    Ok(Engine::global().map_err(to_py)?.pooled_bounce_bytes())
}
