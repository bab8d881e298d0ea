//! Settings: KvikIO's `defaults` over the process engine's default settings; the pinned pool.

use gpufile::__private::config::{self, Kind};
use gpufile::Engine;
use gpufile::{Input, Name, Origin, Value};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

use crate::errors::{index_of, out_of_range, to_py, type_name};

pub(crate) fn value_to_py(py: Python<'_>, value: Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::CompatMode(m) => (m as u8).into_pyobject(py)?.into_any().unbind(),
        Value::RemoteIoBackend(b) => (b as u8).into_pyobject(py)?.into_any().unbind(),
        Value::RemoteReactorDispatch(d) => (d as u8).into_pyobject(py)?.into_any().unbind(),
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
    saved: Vec<(Name, Value, Origin)>,
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
///
/// Types are checked here, as KvikIO's typed setters check them: an integer setting takes an
/// `int` or anything with `__index__` (`np.int64`), a negative one is `OutOfRangeError` (a
/// ValueError and KvikIO's OverflowError); `http_status_codes` takes a list or tuple of such
/// integers (or a comma-separated str), anything else is TypeError. Ranges are the core's.
#[pyfunction]
pub(crate) fn settings_set(updates: &Bound<'_, PyDict>) -> PyResult<SettingsSnapshot> {
    let mut texts: Vec<(Name, String)> = Vec::new();
    let mut parsed: Vec<(Name, Input<'static>)> = Vec::new();
    for (key, value) in updates.iter() {
        let key: String = key.extract().map_err(|_| {
            PyTypeError::new_err(format!("setting names are str, not {}", type_name(&key)))
        })?;
        let name = parse_name(&key)?;
        let wrong_type = |what: &str| {
            PyTypeError::new_err(format!(
                "invalid type for setting {key:?}: expected {what}, not {}",
                type_name(&value)
            ))
        };
        let unsigned = matches!(
            name.kind(),
            Kind::Count | Kind::PositiveSize | Kind::Size | Kind::Seconds
        );
        if value.is_instance_of::<PyString>() {
            texts.push((name, value.extract()?));
        } else if name.kind() == Kind::IntList {
            if !(value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>()) {
                return Err(wrong_type("a list of ints"));
            }
            let items = value
                .try_iter()?
                .map(|item| {
                    let item = item?;
                    let int = index_of(&item).ok_or_else(|| wrong_type("a list of ints"))?;
                    int.extract::<i128>()
                        .map_err(|_| out_of_range(format!("{key}: {int} is out of range")))
                })
                .collect::<PyResult<Vec<i128>>>()?;
            parsed.push((name, Input::IntList(items)));
        } else if value.is_instance_of::<PyBool>() {
            parsed.push((name, Input::Bool(value.extract()?)));
        } else if let Some(int) = index_of(&value) {
            let n: i128 = int.extract().map_err(|_| {
                let range = name.bounds().map(|b| format!(": expected {b}"));
                out_of_range(format!(
                    "invalid value {int} for setting {key:?}: too large{}",
                    range.unwrap_or_default()
                ))
            })?;
            if unsigned && n < 0 {
                let range = name.bounds().map(|b| format!("; expected {b}"));
                return Err(out_of_range(format!(
                    "invalid value {n} for setting {key:?}: must not be negative (can't \
                     convert negative value to an unsigned integer){}",
                    range.unwrap_or_default()
                )));
            }
            // Too large for the setting: the core's words, raised as KvikIO's OverflowError
            // (and a ValueError), as a negative value is.
            if name.bounds().is_some_and(|b| n > i128::from(b.max)) {
                let input = Input::Int(n);
                let reason = config::validate(name, &input).err().unwrap_or_default();
                return Err(out_of_range(
                    gpufile::Error::InvalidSetting {
                        name: name.as_str(),
                        value: input.to_string(),
                        reason,
                    }
                    .to_string(),
                ));
            }
            parsed.push((name, Input::Int(n)));
        } else {
            return Err(wrong_type(match name.kind() {
                Kind::Bool => "a bool",
                Kind::CompatMode => "a CompatMode, an int or a str",
                Kind::RemoteIoBackend => "a RemoteIOBackend, an int or a str",
                Kind::RemoteReactorDispatch => "a RemoteReactorDispatch, an int or a str",
                _ => "an int or a str",
            }));
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

/// Bytes of page cache registered for DMA to the GPU now (`dma_cache_size` bounds it).
#[pyfunction]
pub(crate) fn dma_cache_registered() -> PyResult<usize> {
    Ok(Engine::global().map_err(to_py)?.dma_registered_bytes())
}

/// Unregisters the page cache kept for DMA (copies in flight keep theirs until done).
#[pyfunction]
pub(crate) fn dma_cache_clear(py: Python<'_>) -> PyResult<()> {
    let engine = Engine::global().map_err(to_py)?;
    py.detach(|| engine.dma_cache_clear());
    Ok(())
}
