//! Blocking work that Ctrl-C must end (a remote open waiting on credential sources, a writer's
//! close or abort): it runs on a thread of its own under a stop flag while the caller's thread
//! looks for signals every [`SIGNAL_POLL`], the GIL let go between looks.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use gpufile::StopFlag;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// How often a blocking wait looks for signals (Ctrl-C): a KeyboardInterrupt arrives within
/// about this long.
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// How [`run_stoppable`]'s work ended.
pub(crate) enum Ended<T> {
    /// It returned.
    Done(T),
    /// A signal came: its exception (KeyboardInterrupt), and what the work returned once the
    /// flag stopped it (`None` where it panicked).
    Interrupted(PyErr, Option<T>),
}

/// Runs `work` on a thread named `gpufile-{name}`, with a stop flag it must watch. A signal
/// sets the flag and waits for `work` to end (soon: the remote crate's waits look at the flag
/// every 20 ms, a credential helper is killed) before [`Ended::Interrupted`] is returned.
pub(crate) fn run_stoppable<T: Send + 'static>(
    py: Python<'_>,
    name: &str,
    work: impl FnOnce(&StopFlag) -> T + Send + 'static,
) -> PyResult<Ended<T>> {
    let stop = StopFlag::default();
    let flag = stop.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("gpufile-{name}"))
        .spawn(move || {
            let _ = tx.send(work(&flag));
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
    // A `Receiver` is not `Sync`: the detached closures borrow it through a lock.
    let rx = Mutex::new(rx);
    let recv = |wait: Option<Duration>| {
        let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
        match wait {
            Some(d) => rx.recv_timeout(d),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        }
    };
    loop {
        match py.detach(|| recv(Some(SIGNAL_POLL))) {
            Ok(v) => return Ok(Ended::Done(v)),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(format!(
                    "the thread of the {name} panicked"
                )))
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Err(interrupt) = py.check_signals() {
            stop.set();
            let late = py.detach(|| recv(None)).ok();
            return Ok(Ended::Interrupted(interrupt, late));
        }
    }
}
