//! Worker threads and the futures of requests split over them.
//!
//! One process-wide pool of `num_threads` workers (rebuilt when the setting changes; the old pool
//! finishes what it was given). Each request is a [`Completion`] counting its tasks; an
//! [`IoFuture`] waits on it. Every request in flight is counted so that [`wait_idle`] can let
//! an interpreter exit only once no worker still writes into its memory.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::plan::Backend;

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

/// The queue, with a condvar so that sleeping workers hold no lock (a busy worker must be able to
/// see "nothing queued" at once, to finish work it deferred).
#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn try_pop(&self) -> Option<Job> {
        lock(&self.queue).jobs.pop_front()
    }

    /// Waits for a job; `None` once the pool is closed and drained.
    fn pop_wait(&self) -> Option<Job> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(job) = q.jobs.pop_front() {
                return Some(job);
            }
            if q.closed {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A fixed set of worker threads fed through one queue.
pub(crate) struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    fn new(size: usize) -> Result<Self> {
        let shared = Arc::new(Shared::default());
        let mut pool = ThreadPool {
            shared,
            workers: Vec::with_capacity(size),
        };
        for i in 0..size {
            let shared = Arc::clone(&pool.shared);
            let worker = std::thread::Builder::new()
                .name(format!("gpufile-io-{i}"))
                .spawn(move || loop {
                    let job = match shared.try_pop() {
                        Some(job) => job,
                        None => {
                            // Nothing queued: finish work this worker deferred, then sleep.
                            crate::device::on_worker_idle();
                            match shared.pop_wait() {
                                Some(job) => job,
                                None => break, // the pool was replaced or dropped
                            }
                        }
                    };
                    job();
                })
                // Dropping `pool` here closes the queue and joins the workers already started.
                .map_err(|e| Error::Spawn {
                    threads: size,
                    reason: e.to_string(),
                })?;
            pool.workers.push(worker);
        }
        Ok(pool)
    }

    pub(crate) fn size(&self) -> usize {
        self.workers.len()
    }

    pub(crate) fn submit(&self, job: Job) {
        lock(&self.shared.queue).jobs.push_back(job);
        self.shared.ready.notify_one();
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.ready.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

static POOL: Mutex<Option<Arc<ThreadPool>>> = Mutex::new(None);

/// The process pool with `size` workers (rebuilt if the size changed).
pub(crate) fn pool(size: usize) -> Result<Arc<ThreadPool>> {
    let mut slot = lock(&POOL);
    match &*slot {
        Some(p) if p.size() == size => Ok(Arc::clone(p)),
        _ => {
            let p = Arc::new(ThreadPool::new(size)?);
            // The old pool (if any) is dropped once its last submitter lets go; its workers drain
            // the queue first, so no accepted task is lost.
            *slot = Some(Arc::clone(&p));
            Ok(p)
        }
    }
}

static IN_FLIGHT: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// Blocks until no request is in flight (for interpreter exit).
pub fn wait_idle() {
    let (count, cv) = &IN_FLIGHT;
    let mut n = lock(count);
    while *n > 0 {
        n = cv.wait(n).unwrap_or_else(|e| e.into_inner());
    }
}

/// Requests started and not yet finished.
pub fn in_flight() -> usize {
    *lock(&IN_FLIGHT.0)
}

struct State {
    remaining: usize,
    bytes: usize,
    error: Option<Error>,
}

/// What a request records when it finishes.
struct Record {
    backend: Backend,
    tasks: usize,
    start: Instant,
}

/// Shared state of one request: counts its tasks down and keeps the first error.
pub(crate) struct Completion {
    record: Option<Record>,
    state: Mutex<State>,
    cv: Condvar,
    progress: AtomicU64,
    failed: AtomicBool,
}

impl Completion {
    /// A request of `tasks` tasks on `backend`, recorded by the observe module when it ends.
    pub(crate) fn new(tasks: usize, backend: Backend) -> Arc<Self> {
        Self::build(
            tasks,
            Some(Record {
                backend,
                tasks,
                start: Instant::now(),
            }),
        )
    }

    #[cfg(test)]
    fn unrecorded(tasks: usize) -> Arc<Self> {
        Self::build(tasks, None)
    }

    fn build(tasks: usize, record: Option<Record>) -> Arc<Self> {
        assert!(tasks > 0);
        *lock(&IN_FLIGHT.0) += 1;
        Arc::new(Completion {
            record,
            state: Mutex::new(State {
                remaining: tasks,
                bytes: 0,
                error: None,
            }),
            cv: Condvar::new(),
            progress: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        })
    }

    /// True once a task failed: tasks not yet started are skipped.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Bytes moved so far, updated by tasks as they go.
    pub(crate) fn progress(&self) -> &AtomicU64 {
        &self.progress
    }

    pub(crate) fn finish_task(&self, result: Result<usize>) {
        let mut st = lock(&self.state);
        match result {
            Ok(n) => st.bytes += n,
            Err(e) => {
                self.failed.store(true, Ordering::Relaxed);
                st.error.get_or_insert(e);
            }
        }
        st.remaining -= 1;
        if st.remaining == 0 {
            if let Some(r) = &self.record {
                let ok = st.error.is_none();
                crate::observe::record(r.backend, r.tasks, st.bytes, r.start.elapsed(), ok);
            }
            // Out of the in-flight count before any waiter wakes: a caller who saw its request
            // end must not see it still counted.
            let (count, cv) = &IN_FLIGHT;
            *lock(count) -= 1;
            cv.notify_all();
            self.cv.notify_all();
        }
    }

    fn outcome(st: &State) -> Result<usize> {
        match &st.error {
            Some(e) => Err(e.clone()),
            None => Ok(st.bytes),
        }
    }
}

/// The result of a request that may still be running. Dropping it does not cancel the request.
#[must_use = "an IoFuture must be waited on to learn whether the I/O succeeded"]
pub struct IoFuture {
    inner: Inner,
}

enum Inner {
    Ready(Result<usize>),
    Pending(Arc<Completion>),
}

impl IoFuture {
    pub(crate) fn ready(result: Result<usize>) -> Self {
        IoFuture {
            inner: Inner::Ready(result),
        }
    }

    pub(crate) fn pending(c: Arc<Completion>) -> Self {
        IoFuture {
            inner: Inner::Pending(c),
        }
    }

    /// Waits for every task; the bytes transferred, or the first error.
    pub fn wait(&self) -> Result<usize> {
        match &self.inner {
            Inner::Ready(r) => r.clone(),
            Inner::Pending(c) => {
                let mut st = lock(&c.state);
                while st.remaining > 0 {
                    st = c.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                Completion::outcome(&st)
            }
        }
    }

    /// Like [`IoFuture::wait`], but gives up after `timeout` (returns `None`).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<usize>> {
        match &self.inner {
            Inner::Ready(r) => Some(r.clone()),
            Inner::Pending(c) => {
                let st = lock(&c.state);
                let (st, _) =
                    c.cv.wait_timeout_while(st, timeout, |s| s.remaining > 0)
                        .unwrap_or_else(|e| e.into_inner());
                (st.remaining == 0).then(|| Completion::outcome(&st))
            }
        }
    }

    /// Whether every task has finished.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            Inner::Ready(_) => true,
            Inner::Pending(c) => lock(&c.state).remaining == 0,
        }
    }

    /// Bytes moved so far (for progress bars).
    pub fn bytes_transferred(&self) -> u64 {
        match &self.inner {
            Inner::Ready(r) => r.as_ref().map_or(0, |n| *n as u64),
            Inner::Pending(c) => c.progress.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_on_the_pool_and_the_future_sums_them() {
        let pool = ThreadPool::new(3).unwrap();
        let c = Completion::unrecorded(10);
        for i in 0..10 {
            let c = Arc::clone(&c);
            pool.submit(Box::new(move || c.finish_task(Ok(i))));
        }
        let f = IoFuture::pending(c);
        assert_eq!(f.wait().unwrap(), 45);
        assert!(f.is_done());
    }

    #[test]
    fn first_error_wins_and_get_repeats_it() {
        let c = Completion::unrecorded(2);
        c.finish_task(Err(Error::InvalidArgument("first".into())));
        assert!(c.failed());
        c.finish_task(Err(Error::InvalidArgument("second".into())));
        let f = IoFuture::pending(c);
        assert_eq!(f.wait().unwrap_err().to_string(), "first");
        assert_eq!(f.wait().unwrap_err().to_string(), "first");
    }

    #[test]
    fn wait_timeout_returns_none_while_pending() {
        let c = Completion::unrecorded(1);
        let f = IoFuture::pending(Arc::clone(&c));
        assert!(f.wait_timeout(Duration::from_millis(5)).is_none());
        assert!(!f.is_done());
        c.finish_task(Ok(7));
        assert_eq!(
            f.wait_timeout(Duration::from_millis(5)).unwrap().unwrap(),
            7
        );
    }
}
