//! Tools: observe and stats, notices, the fault seam, page-cache helpers, check, explain, exit,
//! and the command line.

use std::time::Duration;

use gpufile::__private::config;
use gpufile::{Engine, Memory};
use gpufile::{Input, Name, Value};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList};

use crate::errors::{to_py, PathArg};

/// An observation in progress (see `gpufile.observe`).
#[pyclass(module = "gpufile._native")]
pub(crate) struct Observation {
    inner: Option<gpufile::observe::Observation>,
}

/// Starts an observation.
#[pyfunction]
pub(crate) fn observe_begin(py: Python<'_>) -> Observation {
    Observation {
        inner: Some(py.detach(gpufile::observe::begin)),
    }
}

/// Ends an observation; the report as a dict.
#[pyfunction]
pub(crate) fn observe_end(py: Python<'_>, obs: &mut Observation) -> PyResult<Py<PyAny>> {
    let inner = obs
        .inner
        .take()
        .ok_or_else(|| PyValueError::new_err("observation already ended"))?;
    let report = py.detach(move || gpufile::observe::end(inner));
    json_to_py(py, &report.to_json())
}

/// Totals since the process started, as a dict.
#[pyfunction]
pub(crate) fn stats(py: Python<'_>) -> PyResult<Py<PyAny>> {
    json_to_py(py, &py.detach(gpufile::observe::totals).to_json())
}

/// Decisions noticed since the last call (for `logging`).
#[pyfunction]
pub(crate) fn take_notices() -> Vec<String> {
    gpufile::observe::take_notices()
}

/// Warnings about `GPUFILE_*`/`KVIKIO_*` variables nothing reads, the first time it is called
/// in the process (the package issues them with `warnings.warn` at import).
#[pyfunction]
pub(crate) fn take_env_warnings() -> Vec<String> {
    gpufile::__private::config::take_unknown_env_warnings()
}

/// Test seam: `[(call, after, fault, times)]` with call "read"/"write" and fault "eintr",
/// "eagain", "short", "eio", "enospc", "enospc_together" (the `times` calls fail together),
/// "panic" or an errno; `[]` turns injection off.
#[pyfunction]
pub(crate) fn _inject_faults(rules: Vec<(String, u64, Bound<'_, PyAny>, u64)>) -> PyResult<()> {
    use gpufile::__private::posix::faults::{self, Call, Fault, Rule};
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
                "panic" => Fault::Panic,
                // The `times` calls fail together (each waits for the others first).
                "enospc_together" => Fault::Together(28, times),
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

/// The descriptor `fd`, or where it is `None` `path` opened as every path is
/// ([`gpufile::__private::pagecache::open`]: a FIFO is refused at once), for `f`; `path` names the file in
/// errors.
fn with_descriptor<T>(
    fd: Option<i32>,
    path: &std::path::Path,
    f: impl FnOnce(i32) -> gpufile::Result<T>,
) -> gpufile::Result<T> {
    use std::os::fd::AsRawFd;
    match fd {
        Some(fd) => f(fd),
        None => {
            let file = gpufile::__private::pagecache::open(path)?;
            f(file.as_raw_fd())
        }
    }
}

/// `(pages cached, pages)` of a range of the open descriptor `fd`, or of `path` where `fd` is
/// `None`.
#[pyfunction]
pub(crate) fn page_cache_info(
    py: Python<'_>,
    fd: Option<i32>,
    path: PathArg,
    offset: u64,
    length: u64,
) -> PyResult<(u64, u64)> {
    let p = &path.0;
    py.detach(|| {
        with_descriptor(fd, p, |fd| {
            gpufile::__private::pagecache::page_cache_info(fd, p, offset, length)
        })
    })
    .map_err(to_py)
}

/// Evicts a range of the open descriptor `fd`, or of `path` where `fd` is `None`, from the page
/// cache.
#[pyfunction]
pub(crate) fn drop_file_page_cache(
    py: Python<'_>,
    fd: Option<i32>,
    path: PathArg,
    offset: u64,
    length: u64,
    sync_first: bool,
) -> PyResult<()> {
    let p = &path.0;
    py.detach(|| {
        with_descriptor(fd, p, |fd| {
            gpufile::__private::pagecache::drop_file_page_cache(fd, p, offset, length, sync_first)
        })
    })
    .map_err(to_py)
}

/// Drops the system page cache (root); whether it worked.
#[pyfunction]
pub(crate) fn drop_system_page_cache(
    py: Python<'_>,
    reclaim_dentries_and_inodes: bool,
    sync_first: bool,
) -> bool {
    py.detach(|| {
        gpufile::__private::pagecache::drop_system_page_cache(
            reclaim_dentries_and_inodes,
            sync_first,
        )
    })
}

/// Whether device I/O of `gds_threshold` or more would use gpufile's POSIX path rather than
/// cuFile under the current settings (KvikIO's `is_compat_mode_preferred`).
#[pyfunction]
pub(crate) fn compat_mode_preferred(py: Python<'_>) -> PyResult<bool> {
    py.detach(|| -> gpufile::Result<bool> {
        let s = Engine::global()?.settings();
        let policy = gpufile::__private::plan::Policy::from(&s);
        Ok(
            match gpufile::__private::plan::choose_path(
                Memory::Device,
                usize::MAX,
                policy,
                gpufile::__private::cufile::availability,
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
pub(crate) fn in_flight() -> PyResult<usize> {
    Ok(Engine::global().map_err(to_py)?.in_flight())
}

/// `gpufile check`: `(dict, text)`.
#[pyfunction]
#[pyo3(signature = (path=None))]
pub(crate) fn check(py: Python<'_>, path: Option<PathArg>) -> PyResult<(Py<PyAny>, String)> {
    let path = path.map(|p| p.0);
    let report = py.detach(|| gpufile_diag::check::check(path.as_deref()));
    Ok((json_to_py(py, &report.to_json())?, report.render()))
}

/// `gpufile explain`: `(dict, text)`; with `run` and `file`, the read is performed (under the
/// request's own settings) and the observation added.
#[pyfunction]
#[pyo3(signature = (size, file_offset=0, device=None, task_size=None, num_threads=None,
                    compat_mode=None, gds_threshold=None, cufile="probe", cufile_json=None,
                    registered=false, file=None, run=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn explain(
    py: Python<'_>,
    size: u64,
    file_offset: u64,
    device: Option<bool>,
    task_size: Option<u64>,
    num_threads: Option<usize>,
    compat_mode: Option<&Bound<'_, PyAny>>,
    gds_threshold: Option<u64>,
    cufile: &str,
    cufile_json: Option<PathArg>,
    registered: bool,
    file: Option<PathArg>,
    run: bool,
) -> PyResult<(Py<PyAny>, String)> {
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
    // As the CLI: unnamed memory is GPU 0 where CUDA has one, else host memory, run or not.
    let (memory, fallback) = match device {
        Some(true) => (Memory::Device, None),
        Some(false) => (Memory::Host, None),
        None => py.detach(gpufile_diag::explain::default_memory),
    };
    let req = gpufile_diag::explain::Request {
        size: to_usize(size)?,
        file_offset,
        memory,
        device: 0,
        task_size: task_size.map(to_usize).transpose()?,
        num_threads,
        compat_mode,
        gds_threshold: gds_threshold.map(to_usize).transpose()?,
        cufile: cufile.parse().map_err(to_py)?,
        cufile_json: cufile_json.map(|p| p.0),
        registered_buffer: registered,
    };
    let file = file.map(|p| p.0);
    if run && file.is_none() {
        return Err(PyValueError::new_err("run=True needs file"));
    }
    let mut outcome = py
        .detach(move || gpufile_diag::explain::explain_and_run(&req, file.as_deref(), run))
        .map_err(to_py)?;
    if let Some(why) = fallback {
        let note = gpufile_diag::explain::host_fallback_note(&why);
        outcome.explanation.notes.insert(0, note);
    }
    Ok((json_to_py(py, &outcome.to_json())?, outcome.render()))
}

/// Longest wait at interpreter exit for requests in flight.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Interpreter exit (registered with `atexit`): no new request is accepted, and those in flight
/// get up to 10 s (GIL released) to finish; whether none was left.
#[pyfunction]
pub(crate) fn shutdown(py: Python<'_>) -> PyResult<bool> {
    // Where the environment does not parse there is no engine, so nothing in flight: the
    // error was the program's to report, not the exit's.
    let Ok(engine) = Engine::global() else {
        return Ok(true);
    };
    Ok(py.detach(|| engine.shutdown(EXIT_WAIT)))
}

/// Runs the `gpufile` command line in this process; returns its exit status.
#[pyfunction]
pub(crate) fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> i32 {
    py.detach(move || gpufile_cli::run(argv))
}

/// A JSON value as the Python object it describes (dict, list, str, int, float, bool, None).
pub(crate) fn json_to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<Py<PyAny>> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => py.None(),
        J::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any().unbind(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any().unbind(),
            _ => n
                .as_f64()
                .unwrap_or(f64::NAN)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        },
        J::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        J::Array(items) => {
            let items: Vec<Py<PyAny>> = items
                .iter()
                .map(|i| json_to_py(py, i))
                .collect::<PyResult<_>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        J::Object(map) => {
            let d = PyDict::new(py);
            for (k, v) in map {
                d.set_item(k, json_to_py(py, v)?)?;
            }
            d.into_any().unbind()
        }
    })
}
