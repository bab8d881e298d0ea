//! Ctrl-C (SIGINT) and SIGTERM for the commands that run long (`read`, `load`, `bench`): while
//! an [`Interrupts`] guard lives, the signals only set a flag; the command looks at it between
//! steps and while it waits for I/O (a request in flight is cancelled, a remote one stopped,
//! [`Interrupts::stoppable`]), stops, and removes what it made on its way out (drops), instead
//! of dying with a half-written file left behind or, under `python -m gpufile`, finishing every
//! run before Python's handler raises. It then ends with one line, `gpufile: error: interrupted
//! (SIGINT); ...`, and status 130 (143 for SIGTERM), its report of cut runs left out. The
//! previous handlers (the default ones, or Python's under `python -m gpufile`) are back when the
//! guard is dropped.
//!
//! This is the CLI's only `unsafe`: `sigaction(2)` through libc.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use gpufile::StopFlag;

use crate::CliError;

/// How often a wait looks for a caught signal.
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// The signal caught while a guard lives (0: none).
static CAUGHT: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// SIGINT and SIGTERM caught (see the module docs) until dropped.
pub(crate) struct Interrupts {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl Interrupts {
    /// Catches SIGINT and SIGTERM from now on.
    pub(crate) fn catch() -> std::io::Result<Self> {
        CAUGHT.store(0, Ordering::SeqCst);
        let mut guard = Interrupts {
            previous: Vec::new(),
        };
        for sig in SIGNALS {
            // SAFETY: zeroed is a valid `sigaction` (no handler, empty mask, no flags); the
            // fields set below make it a plain handler.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            // SAFETY: `action.sa_mask` is a sigset_t this function owns.
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            // SAFETY: as above, `old` is written by the kernel.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: both pointers are to live `sigaction` values; the handler is a plain
            // `extern "C"` fn that lives for the whole process and only stores to an atomic.
            if unsafe { libc::sigaction(sig, &action, &mut old) } != 0 {
                return Err(std::io::Error::last_os_error()); // the guard restores the others
            }
            guard.previous.push((sig, old));
        }
        Ok(guard)
    }

    /// The signal caught so far, if any.
    pub(crate) fn caught(&self) -> Option<libc::c_int> {
        match CAUGHT.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    /// `Err` (exit status 128 + the signal, as a shell reports a command it ended) once a
    /// signal was caught.
    pub(crate) fn check(&self) -> Result<(), CliError> {
        match self.error("the files bench made are removed") {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// `Err` (as [`Interrupts::check`]) saying `what` became of the command's work, once a
    /// signal was caught.
    pub(crate) fn check_that(&self, what: &str) -> Result<(), CliError> {
        match self.error(what) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Runs `f` with a stop flag that a caught signal sets (a watcher thread looks every
    /// [`SIGNAL_POLL`]): a remote request given the flag, and gpufile_remote's waits on
    /// credential sources ([`gpufile_remote::with_stop`]: a `credential_process`, STS, IMDS, a
    /// token endpoint), end soon after Ctrl-C. The caller then looks at [`Interrupts::error`].
    pub(crate) fn stoppable<R>(&self, f: impl FnOnce(&StopFlag) -> R) -> R {
        let stop = StopFlag::default();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    if self.caught().is_some() {
                        stop.set();
                        return;
                    }
                    std::thread::park_timeout(SIGNAL_POLL);
                }
            });
            let result = gpufile_remote::with_stop(&stop, || f(&stop));
            done.store(true, Ordering::SeqCst);
            watcher.thread().unpark();
            result
        })
    }

    /// Waits for `fut`; on a signal, its tasks not yet started are cancelled and the running
    /// ones waited for (they use the buffer), then the error saying `what` became of the work.
    pub(crate) fn wait(
        &self,
        fut: &gpufile::IoFuture,
        what: &str,
        mut tick: impl FnMut(),
    ) -> Result<usize, CliError> {
        loop {
            if let Some(r) = fut.wait_timeout(SIGNAL_POLL) {
                // A signal that cut the request short is what the user is told about.
                return match (r, self.error(what)) {
                    (Err(_), Some(e)) => Err(e),
                    (r, _) => Ok(r?),
                };
            }
            if let Some(e) = self.error(what) {
                fut.cancel();
                let _ = fut.wait();
                return Err(e);
            }
            tick();
        }
    }

    /// The error of a command that a caught signal ended (exit status 128 + the signal), saying
    /// `what` became of its work; `None` while none was caught.
    pub(crate) fn error(&self, what: &str) -> Option<CliError> {
        let sig = self.caught()?;
        let name = if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        let mut e = CliError::new("interrupted", format!("interrupted ({name}); {what}"));
        e.status = 128 + sig;
        Some(e)
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for (sig, old) in self.previous.drain(..).rev() {
            // SAFETY: puts back the action `sigaction` returned for `sig`; `old` is live.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
    }
}
