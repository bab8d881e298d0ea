//! Python callbacks of requests (`IOFuture.add_done_callback`, `await`, `gpufile.aio.gather`).
//!
//! The thread that ends a request (an I/O worker) never takes the GIL: it hands the callback to
//! one thread, started on first use, that takes the GIL and runs the callbacks in the order their
//! requests ended. So a worker never waits for Python (a thread holding the GIL while it polls a
//! future cannot stall the I/O), and awaiting 10,000 futures costs one thread, not 10,000.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

use gpufile::IoFuture;
use pyo3::prelude::*;

/// Something to run with the GIL held on the callback thread.
pub(crate) type Job = Box<dyn FnOnce(Python<'_>) + Send>;

/// The callback thread's queue, and the process that started it (a forked child has no such
/// thread: it starts its own).
static QUEUE: Mutex<Option<(u32, Sender<Job>)>> = Mutex::new(None);

/// Runs `job` on the callback thread (started here on first use). Where no thread can be
/// started, the job runs on this thread, taking the GIL.
pub(crate) fn post(job: Job) {
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
    // SAFETY: a plain query of the interpreter's state, valid from any thread.
    if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
        // The interpreter is gone (a request ended after exit): nobody is left to call back.
        std::mem::forget(jobs);
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Python::attach(|py| {
            for job in jobs {
                job(py);
            }
        })
    }));
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

/// Arranges for `callback()` to run on the callback thread once `fut` has ended. `false` (and
/// nothing arranged) when it has ended already: the caller calls back itself, on its own thread,
/// as `concurrent.futures` does.
pub(crate) fn when_done(fut: &IoFuture, callback: Py<PyAny>) -> bool {
    if fut.is_done() {
        return false;
    }
    fut.on_done(move || post(call(callback)));
    true
}
