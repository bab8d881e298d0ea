//! Path decisions worth knowing (a fallback, say), handed on to Python's `gpufile` logger (at
//! INFO) at the end of the call that made them, so a call crosses into the module once: the
//! core says each once per process ([`gpufile::observe::notice`]); a decision a worker makes
//! after the call returned is handed on at the end of the next call, or of the wait for it.

use pyo3::prelude::*;

/// Logs the notices the core has said since the last time (from any call or thread); a logger
/// that fails is not the caller's error.
pub(crate) fn hand_on(py: Python<'_>) {
    let texts = gpufile::observe::take_notices();
    if texts.is_empty() {
        return;
    }
    let logger = py
        .import("logging")
        .and_then(|m| m.call_method1("getLogger", ("gpufile",)));
    if let Ok(logger) = logger {
        for text in texts {
            let _ = logger.call_method1("info", (text,));
        }
    }
}

/// `result`, once the notices are handed on (a refusal is often what a notice explains).
pub(crate) fn after<T>(py: Python<'_>, result: T) -> T {
    hand_on(py);
    result
}

/// Hands the notices on when it goes out of scope: at the end of a call, whichever way it
/// returns (`let _notices = notices::OnReturn(py);` first in the call).
pub(crate) struct OnReturn<'py>(pub(crate) Python<'py>);

impl Drop for OnReturn<'_> {
    fn drop(&mut self) {
        hand_on(self.0);
    }
}
