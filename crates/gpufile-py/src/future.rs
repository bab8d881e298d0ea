//! Futures: `IOFuture`'s engine (`NativeFuture`), a batch's (`NativeBatchFuture`), `when_all`
//! over both, and the interruptible wait every blocking call of the binding uses.

use std::sync::{Arc, Mutex};

use gpufile::{Error, IoFuture};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::to_py;
use crate::stoppable::SIGNAL_POLL;

/// The buffer views a future holds until its request is done (never read: dropping them ends
/// the exports).
pub(crate) enum Held {
    /// The request's own view.
    One { _view: BufferView },
    /// Views shared with other requests (the groups of one batch submission on one buffer).
    Shared { _views: Vec<Arc<BufferView>> },
}

/// A request in flight. Holds the buffer export and the objects involved until it is done; the
/// export is released as soon as `get()` has seen the request end.
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeFuture {
    fut: IoFuture,
    /// `None` once `get()` saw the end, and for a stream-ordered request (which holds its
    /// buffer itself).
    view: Mutex<Option<Held>>,
    _owners: Vec<Py<PyAny>>,
    /// What the plan decided, for requests that report it (ranges and rows).
    report: Option<gpufile::PathReport>,
    /// How a stream-ordered request's stream waits, and why.
    stream_order: Option<(String, String)>,
    callbacks: crate::callbacks::Callbacks,
}

impl NativeFuture {
    /// A future over `fut` that holds `view` until the request is done and `owners` (the buffer,
    /// the file or mapping) for as long as it lives.
    pub(crate) fn new(fut: IoFuture, view: BufferView, owners: Vec<Py<PyAny>>) -> Self {
        Self::holding(fut, Held::One { _view: view }, owners)
    }

    /// A future over `fut` that holds `held` until the request is done and `owners` for as long
    /// as it lives.
    pub(crate) fn holding(fut: IoFuture, held: Held, owners: Vec<Py<PyAny>>) -> Self {
        NativeFuture {
            fut,
            view: Mutex::new(Some(held)),
            _owners: owners,
            report: None,
            stream_order: None,
            callbacks: Default::default(),
        }
    }

    /// The future of a stream-ordered request, which holds its buffer and file itself until
    /// the stream has run it; `order` is `(how, reason)` its stream waits.
    pub(crate) fn stream_ordered(fut: IoFuture, order: (String, String)) -> Self {
        NativeFuture {
            fut,
            view: Mutex::new(None),
            _owners: Vec::new(),
            report: None,
            stream_order: Some(order),
            callbacks: Default::default(),
        }
    }

    /// The future, with what its request's plan decided (`report()`).
    pub(crate) fn with_report(mut self, report: gpufile::PathReport) -> Self {
        self.report = Some(report);
        self
    }
}

#[pymethods]
impl NativeFuture {
    /// Waits for the request (GIL released; Ctrl-C cancels it); the bytes transferred.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        let r = wait_interruptibly(py, &self.fut);
        // Done (or cancelled and drained): no worker uses the buffer any more.
        self.view.lock().unwrap_or_else(|e| e.into_inner()).take();
        r
    }

    /// Whether the request has finished.
    fn done(&self) -> bool {
        self.fut.is_done()
    }

    /// Stops the request: tasks not yet started are skipped, those running finish; `get()`
    /// then raises the cancellation unless every task had finished.
    fn cancel(&self) {
        self.fut.cancel();
    }

    /// What the plan decided (a dict, see `CuFile.read_ranges`), or `None` for requests that
    /// do not report it.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        self.report
            .as_ref()
            .map(|r| crate::ranges::report_dict(py, r))
            .transpose()
    }

    /// Arranges for `callback()` to run (GIL held, on gpufile's callback thread) once the
    /// request has ended, after the callbacks added before it; `False`, and nothing arranged,
    /// when it has ended and those have run.
    fn add_done_callback(&self, callback: Py<PyAny>) -> bool {
        self.callbacks.add(&self.fut, callback)
    }

    /// `(how, reason)` of a stream-ordered request; `None` for others.
    #[getter]
    fn stream_order(&self) -> Option<(String, String)> {
        self.stream_order.clone()
    }
}

impl Drop for NativeFuture {
    fn drop(&mut self) {
        let holds = self.view.get_mut().map(|v| v.is_some()).unwrap_or(false);
        // The workers may still write into the buffer: keep the export until they are done,
        // without holding the GIL meanwhile (other Python threads go on).
        if holds && !self.fut.is_done() {
            Python::attach(|py| py.detach(|| self.fut.wait().ok()));
        }
        if !self.fut.is_done() {
            return; // a stream-ordered request, still queued: it holds its own buffer
        }
        if let Err(e) = self.fut.wait() {
            if holds {
                // Nobody called get(): say once that this request failed (a dropped pwrite would
                // otherwise lose ENOSPC silently).
                gpufile::observe::notice(
                    "unwaited-failure",
                    format!("a request nobody waited for failed: {e}"),
                );
            }
        }
    }
}

/// The future of a batch: holds every buffer until all requests are done.
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeBatchFuture {
    fut: IoFuture,
    views: Mutex<Vec<BufferView>>,
    _owners: Vec<Py<PyAny>>,
    callbacks: crate::callbacks::Callbacks,
}

impl NativeBatchFuture {
    /// The future of a batch over `fut`, holding every buffer's view until all requests are
    /// done and `owners` for as long as it lives.
    pub(crate) fn new(fut: IoFuture, views: Vec<BufferView>, owners: Vec<Py<PyAny>>) -> Self {
        NativeBatchFuture {
            fut,
            views: Mutex::new(views),
            _owners: owners,
            callbacks: Default::default(),
        }
    }
}

#[pymethods]
impl NativeBatchFuture {
    /// Waits for every request (GIL released; Ctrl-C cancels them); the bytes transferred.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        let r = wait_interruptibly(py, &self.fut);
        self.views.lock().unwrap_or_else(|e| e.into_inner()).clear();
        r
    }

    /// Whether every request has finished.
    fn done(&self) -> bool {
        self.fut.is_done()
    }

    /// As `NativeFuture.add_done_callback`, once every request has ended.
    fn add_done_callback(&self, callback: Py<PyAny>) -> bool {
        self.callbacks.add(&self.fut, callback)
    }
}

/// Arranges for `callback()` to run once every future of `futures` (`NativeFuture`s and
/// `NativeBatchFuture`s) has ended: one call for all of them. `False`, and nothing arranged,
/// when all have ended already.
#[pyfunction]
pub(crate) fn when_all(futures: Vec<Bound<'_, PyAny>>, callback: Py<PyAny>) -> PyResult<bool> {
    let mut pending = Vec::new();
    for f in &futures {
        if let Ok(n) = f.cast::<NativeFuture>() {
            pending.push(n.clone().into_any());
        } else if let Ok(b) = f.cast::<NativeBatchFuture>() {
            pending.push(b.clone().into_any());
        } else {
            return Err(PyTypeError::new_err(format!(
                "expected gpufile futures, got {}",
                crate::errors::type_name(f)
            )));
        }
    }
    let futs: Vec<&IoFuture> = pending
        .iter()
        .map(|f| match f.cast::<NativeFuture>() {
            Ok(n) => &n.get().fut,
            Err(_) => {
                &f.cast::<NativeBatchFuture>()
                    .expect("checked above")
                    .get()
                    .fut
            }
        })
        .collect();
    let left: Vec<&IoFuture> = futs.into_iter().filter(|f| !f.is_done()).collect();
    if left.is_empty() {
        return Ok(false);
    }
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(left.len()));
    let callback = std::sync::Arc::new(Mutex::new(Some(callback)));
    for f in left {
        let (count, callback) = (count.clone(), callback.clone());
        f.on_done(move || {
            if count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
                let cb = callback.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(cb) = cb {
                    crate::callbacks::post(crate::callbacks::call(cb));
                }
            }
        });
    }
    Ok(true)
}

impl Drop for NativeBatchFuture {
    fn drop(&mut self) {
        if !self.fut.is_done() {
            Python::attach(|py| py.detach(|| self.fut.wait().ok()));
        }
    }
}

/// The exception of a failed request, with `bytes_done`: the bytes its succeeding tasks moved,
/// which a caller can trust landed (tasks skipped once a task failed moved nothing).
fn failed(py: Python<'_>, e: Error, fut: &IoFuture) -> PyErr {
    let err = to_py(e);
    let value = err.value(py);
    if !value.hasattr("bytes_done").unwrap_or(true) {
        let _ = value.setattr("bytes_done", fut.bytes_moved());
    }
    err
}

/// Waits for `fut` with the GIL released, checking for signals: on one (KeyboardInterrupt), the
/// request's tasks not yet started are cancelled and those running are waited for (so no worker
/// touches the buffer afterwards), then the exception is raised.
pub(crate) fn wait_interruptibly(py: Python<'_>, fut: &IoFuture) -> PyResult<usize> {
    crate::notices::after(py, wait_for(py, fut))
}

/// [`wait_interruptibly`]'s wait.
fn wait_for(py: Python<'_>, fut: &IoFuture) -> PyResult<usize> {
    if fut.is_done() {
        // Ran on this thread, or ended meanwhile: no need to let the GIL go.
        return fut.wait().map_err(|e| failed(py, e, fut));
    }
    loop {
        if let Some(r) = py.detach(|| fut.wait_timeout(SIGNAL_POLL)) {
            return r.map_err(|e| failed(py, e, fut));
        }
        if let Err(interrupt) = py.check_signals() {
            fut.cancel();
            let _ = py.detach(|| fut.wait());
            return Err(interrupt);
        }
    }
}
