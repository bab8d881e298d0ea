//! KvikIO 26.10's statistics (`gpufile.Summary`, `gpufile.SummaryMonitor`) over the core's
//! [`gpufile::observe::SummaryMonitor`]: conversion only; the counting, the differences and the
//! renderings are the core's.

use gpufile::observe::{ReportRows, Summary, SummaryMonitor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn value_error(e: gpufile::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A reading of a monitor (the handle behind `gpufile.Summary`).
#[pyclass(module = "gpufile._native", frozen)]
pub(crate) struct NativeSummary {
    inner: Summary,
}

#[pymethods]
impl NativeSummary {
    /// Every field of `gpufile.Summary`, derived values included, in the JSON's order.
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?
            .getattr("loads")?
            .call1((self.inner.to_json(),))
    }

    /// The interval since `previous` (ValueError where it is not an earlier reading of the
    /// same span).
    fn since(&self, previous: &NativeSummary) -> PyResult<NativeSummary> {
        let inner = self.inner.since(&previous.inner).map_err(value_error)?;
        Ok(NativeSummary { inner })
    }

    /// The JSON object, as text.
    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    /// The exact bytes.
    fn serialize<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.serialize())
    }

    /// Reads back `serialize`'s bytes (ValueError for anything else).
    #[staticmethod]
    fn deserialize(data: &[u8]) -> PyResult<NativeSummary> {
        let inner = Summary::deserialize(data).map_err(value_error)?;
        Ok(NativeSummary { inner })
    }

    /// The report for people.
    #[pyo3(signature = (all_rows=false))]
    fn report(&self, all_rows: bool) -> String {
        let rows = match all_rows {
            true => ReportRows::All,
            false => ReportRows::Used,
        };
        self.inner.report(rows)
    }
}

/// A monitor (the handle behind `gpufile.SummaryMonitor`).
#[pyclass(module = "gpufile._native", frozen)]
pub(crate) struct NativeSummaryMonitor {
    inner: SummaryMonitor,
}

#[pymethods]
impl NativeSummaryMonitor {
    #[new]
    fn new() -> PyResult<Self> {
        let inner = SummaryMonitor::new().map_err(crate::errors::to_py)?;
        Ok(NativeSummaryMonitor { inner })
    }

    fn get(&self) -> NativeSummary {
        NativeSummary {
            inner: self.inner.get(),
        }
    }

    fn reset(&self) {
        self.inner.reset();
    }

    fn since(&self, previous: &NativeSummary) -> PyResult<NativeSummary> {
        let inner = self.inner.since(&previous.inner).map_err(value_error)?;
        Ok(NativeSummary { inner })
    }

    /// Stops counting; waits (GIL released) for deliveries in progress on other threads.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.inner.stop());
    }
}

/// The process's counters of work that belongs to no single operation, as a dict.
#[pyfunction]
pub(crate) fn statistics_counters() -> Vec<(&'static str, u64)> {
    gpufile::observe::counters().fields().to_vec()
}

/// Adds the statistics classes and functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeSummary>()?;
    m.add_class::<NativeSummaryMonitor>()?;
    m.add_function(wrap_pyfunction!(statistics_counters, m)?)?;
    Ok(())
}
