//! The one way a Python call becomes a request: its arguments read into a [`Request`] on the
//! caller's buffer view ([`build`]), then started on an endpoint (a file, a mapping, a remote
//! object) on the process engine with the GIL released ([`submit`]). The ranges are checked by
//! the engine, against the endpoint, before any byte moves.

use gpufile::source::Endpoint;
use gpufile::PathReport;
use gpufile::{Direction, Engine, IoFuture, Request};
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::{to_py, uint_arg};
use crate::stoppable::{run_stoppable, Ended};

/// What a call asks for, beyond its buffer.
pub(crate) struct Args<'a, 'py> {
    /// Read or write.
    pub dir: Direction,
    /// Bytes to move (already checked against the buffer).
    pub len: usize,
    /// Where in the buffer they start.
    pub buf_offset: usize,
    /// The file offset argument: its name in errors and its value.
    pub file_offset: (&'static str, Option<&'a Bound<'py, PyAny>>),
    /// The `task_size` argument.
    pub task_size: Option<&'a Bound<'py, PyAny>>,
    /// The caller waits for the request at once (a blocking read or write).
    pub caller_waits: bool,
}

/// The request `args` make on `view` (the view must outlive it).
pub(crate) fn build(view: &BufferView, args: Args<'_, '_>) -> PyResult<Request> {
    let (name, offset) = args.file_offset;
    let file_offset = uint_arg(name, offset, Some(0))?.unwrap_or(0);
    let task_size = task_size_arg(args.task_size)?;
    Ok(view
        .request(args.dir, args.buf_offset, args.len, file_offset)
        .task_size(task_size)
        .caller_waits(args.caller_waits))
}

/// A `task_size` argument: `None` (the settings' task size) or the bytes given (saturated).
pub(crate) fn task_size_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    Ok(uint_arg("task_size", obj, None)?.map(|t| usize::try_from(t).unwrap_or(usize::MAX)))
}

/// Starts `req` on `endpoint` on the process engine under its default settings, GIL released.
///
/// # Safety
/// The request's buffer must stay valid and unshared until the returned future is done: the
/// caller holds the buffer's view that long.
pub(crate) unsafe fn submit(
    py: Python<'_>,
    endpoint: Endpoint,
    req: Request,
) -> gpufile::Result<IoFuture> {
    let started = py.detach(move || {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: the caller's contract.
        unsafe { engine.submit(&endpoint, req, &settings) }
    });
    crate::notices::after(py, started)
}

/// [`submit`] on a thread of its own, under a stop flag that Ctrl-C sets: for an endpoint
/// that the engine may ask first, before the request starts (a remote object learning whether
/// its server honours `Range`, [`gpufile::source::Source::before_split_read`]), so that a slow
/// server's answer does not hold KeyboardInterrupt back.
///
/// # Safety
/// As for [`submit`].
pub(crate) unsafe fn submit_stoppable(
    py: Python<'_>,
    endpoint: Endpoint,
    req: Request,
) -> PyResult<IoFuture> {
    let ended = run_stoppable(py, "submit", move |stop| {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        let req = req.stop(Some(stop.clone()));
        // SAFETY: the caller's contract.
        unsafe { engine.submit(&endpoint, req, &settings) }
    })?;
    match ended {
        Ended::Done(started) => crate::notices::after(py, started).map_err(to_py),
        Ended::Interrupted(interrupt, late) => {
            // Started just before the signal: ended before the caller's buffer is let go.
            if let Some(Ok(fut)) = late {
                fut.cancel();
                let _ = py.detach(|| fut.wait());
            }
            Err(interrupt)
        }
    }
}

/// [`submit`], with what the request's plan decided.
///
/// # Safety
/// As for [`submit`].
pub(crate) unsafe fn submit_reported(
    py: Python<'_>,
    endpoint: Endpoint,
    req: Request,
) -> gpufile::Result<(IoFuture, PathReport)> {
    let started = py.detach(move || {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: the caller's contract.
        unsafe { engine.submit_reported(&endpoint, req, &settings) }
    });
    crate::notices::after(py, started)
}
