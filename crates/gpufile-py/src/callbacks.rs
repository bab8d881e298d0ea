//! Python callbacks of requests (`IOFuture.add_done_callback`, `await`, `gpufile.aio.gather`).
//!
//! The thread that ends a request (an I/O worker) never takes the GIL: it hands the callback to
//! one thread, started on first use, that takes the GIL and runs the callbacks in the order their
//! requests ended. So a worker never waits for Python (a thread holding the GIL while it polls a
//! future cannot stall the I/O), and awaiting 10,000 futures costs one thread, not 10,000.
//!
//! At exit ([`close`], from gpufile's atexit handler) the callbacks due run, then the thread
//! stops calling into Python: a thread that enters or leaves Python while the interpreter
//! finalizes kills the process ("PyGILState_Release: thread state ... must be current").

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use gpufile::IoFuture;
use pyo3::prelude::*;

/// Something to run with the GIL held on the callback thread.
pub(crate) type Job = Box<dyn FnOnce(Python<'_>) + Send>;

/// The callback thread's queue, and the process that started it (a forked child has no such
/// thread: it starts its own).
static QUEUE: Mutex<Option<(u32, Sender<Job>)>> = Mutex::new(None);

/// Jobs posted and not run yet, and whether the interpreter is exiting (no job runs any more).
struct Due {
    pending: usize,
    closed: bool,
}

static DUE: Mutex<Due> = Mutex::new(Due {
    pending: 0,
    closed: false,
});
static DRAINED: Condvar = Condvar::new();

fn due() -> std::sync::MutexGuard<'static, Due> {
    DUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `job` on the callback thread (started here on first use). Where no thread can be
/// started, the job runs on this thread, taking the GIL. After [`close`], it never runs.
pub(crate) fn post(job: Job) {
    {
        let mut d = due();
        if d.closed {
            // Dropping it would touch Python objects without the GIL, after exit.
            std::mem::forget(job);
            return;
        }
        d.pending += 1;
    }
    let pid = std::process::id();
    let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    if queue.as_ref().is_none_or(|(p, _)| *p != pid) {
        let (tx, rx) = channel();
        let started = std::thread::Builder::new()
            .name("gpufile-callbacks".into())
            .spawn(move || run(rx));
        *queue = started.ok().map(|_| (pid, tx));
    }
    let job = match queue.as_ref() {
        Some((_, tx)) => match tx.send(job) {
            Ok(()) => return,
            Err(e) => e.0,
        },
        None => job,
    };
    drop(queue);
    run_jobs(vec![job]);
}

fn run(rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        // Every job queued meanwhile runs under the same GIL hold (10,000 awaits that end
        // together take the GIL a few times, not 10,000).
        let mut jobs = vec![job];
        jobs.extend(rx.try_iter());
        run_jobs(jobs);
    }
}

fn run_jobs(jobs: Vec<Job>) {
    let n = jobs.len();
    // SAFETY: a plain query of the interpreter's state, valid from any thread.
    if due().closed || unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
        // The interpreter exits or is gone: nobody is left to call back.
        std::mem::forget(jobs);
    } else {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Python::attach(|py| {
                for job in jobs {
                    job(py);
                }
            })
        }));
    }
    let mut d = due();
    d.pending -= n.min(d.pending);
    DRAINED.notify_all();
}

/// How long [`close`] waits for the callbacks due.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Runs the callbacks due (waiting at most [`CLOSE_WAIT`], GIL released), then runs no more:
/// gpufile's atexit handler calls it, before the interpreter finalizes. `False` if some were
/// still due when the wait ended (a callback that blocks).
#[pyfunction]
pub(crate) fn callbacks_close(py: Python<'_>) -> bool {
    py.detach(|| {
        let d = due();
        let (mut d, _) = DRAINED
            .wait_timeout_while(d, CLOSE_WAIT, |d| d.pending > 0)
            .unwrap_or_else(|e| e.into_inner());
        d.closed = true;
        d.pending == 0
    })
}

/// A job that calls `callback()`; an exception it raises (the Python wrappers catch and log
/// their callbacks' own) is reported as unraisable rather than lost.
pub(crate) fn call(callback: Py<PyAny>) -> Job {
    Box::new(move |py| {
        if let Err(e) = callback.call0(py) {
            e.write_unraisable(py, Some(callback.bind(py)));
        }
    })
}

/// The callbacks of one future not yet run, so that a callback added later never runs before
/// them (`concurrent.futures` calls them in the order they were added).
#[derive(Default)]
pub(crate) struct Callbacks(Arc<AtomicUsize>);

impl Callbacks {
    /// Arranges for `callback()` to run once `fut` has ended, after the callbacks added before
    /// it, on the callback thread. `false`, and nothing arranged, when `fut` has ended and every
    /// earlier callback has run: the caller calls back itself, on its own thread, as
    /// `concurrent.futures` does.
    pub(crate) fn add(&self, fut: &IoFuture, callback: Py<PyAny>) -> bool {
        if fut.is_done() && self.0.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.0.fetch_add(1, Ordering::AcqRel);
        let due = Arc::clone(&self.0);
        let job: Job = Box::new(move |py| {
            call(callback)(py);
            due.fetch_sub(1, Ordering::AcqRel);
        });
        fut.on_done(move || post(job));
        true
    }
}
