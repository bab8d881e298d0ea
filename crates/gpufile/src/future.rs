//! The futures of requests: a [`Completion`] counts a request's tasks down and keeps the first
//! error; an [`IoFuture`] waits on it.
//!
//! Nothing here knows of backends, devices or metrics: whoever makes a completion gives it a hook
//! that runs once, when the last task finishes and before any waiter wakes (the engine uses it to
//! record the request and take it out of its in-flight count).
//!
//! Callbacks ([`IoFuture::on_done`]) are for whoever holds the future (a binding's
//! `add_done_callback`, an event loop's wake-up): any number, each run once after the waiters are
//! woken, outside every lock, on the thread that finished the last task (or at once, on the
//! caller's thread, when the request has ended already).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result, MAX_TASK_ERRORS};

/// What a request ended with, handed to the completion's hook.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Bytes moved by the tasks that succeeded.
    pub bytes: usize,
    /// Whether every task succeeded.
    pub ok: bool,
}

type Hook = Box<dyn FnOnce(Outcome) + Send>;
type Callback = Box<dyn FnOnce() + Send>;

struct State {
    remaining: usize,
    bytes: usize,
    error: Option<Error>,
    /// Errors of tasks that failed after the first (at most [`MAX_TASK_ERRORS`]).
    others: Vec<Error>,
    /// Further failed tasks, counted only.
    not_shown: usize,
    hook: Option<Hook>,
    /// Run once the request has ended, after the waiters are woken ([`Completion::on_done`]).
    callbacks: Vec<Callback>,
}

impl State {
    /// Keeps a task's error: the first is the request's, later ones are listed beside it (a
    /// caller learns every range that failed, not only the first). An error that says what one
    /// kept already says (each run's failed wait for the same stream) adds nothing.
    fn keep(&mut self, e: Error) {
        let said = |k: &Error| k.to_string() == e.to_string();
        match &self.error {
            None => self.error = Some(e),
            Some(_) if matches!(e, Error::Cancelled) => {}
            // A task that failed while a cancel ran says more than the cancel: its error leads.
            Some(Error::Cancelled) => self.error = Some(e),
            Some(first) if said(first) || self.others.iter().any(said) => {}
            Some(_) if self.others.len() < MAX_TASK_ERRORS => self.others.push(e),
            Some(_) => self.not_shown += 1,
        }
    }
}

/// Set once a request is cancelled or one of its tasks failed; shared with the sources that run
/// its tasks, so that one that waits (a remote retry's backoff, a slow server) gives up at once.
#[derive(Clone, Debug, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Whether the request has stopped.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Stops whatever watches the flag: a request's tasks, or the requests of a remote
    /// writer's close or abort that a caller runs under its own flag (Ctrl-C in Python).
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Shared state of one request.
pub struct Completion {
    state: Mutex<State>,
    cv: Condvar,
    progress: AtomicU64,
    stop: StopFlag,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Completion {
    /// A request of `tasks` tasks (at least one); `hook` runs once when the last one finishes.
    pub fn new(tasks: usize, hook: impl FnOnce(Outcome) + Send + 'static) -> Arc<Self> {
        assert!(tasks > 0, "a completion counts at least one task");
        Arc::new(Completion {
            state: Mutex::new(State {
                remaining: tasks,
                bytes: 0,
                error: None,
                others: Vec::new(),
                not_shown: 0,
                hook: Some(Box::new(hook)),
                callbacks: Vec::new(),
            }),
            cv: Condvar::new(),
            progress: AtomicU64::new(0),
            stop: StopFlag::default(),
        })
    }

    /// Whether every task has finished (the request has ended).
    pub fn is_done(&self) -> bool {
        lock(&self.state).remaining == 0
    }

    /// True once a task failed or the request was cancelled: tasks not yet started are skipped.
    pub fn stopped(&self) -> bool {
        self.stop.is_set()
    }

    /// The flag behind [`Completion::stopped`], for the sources of the request's tasks.
    pub fn stop_flag(&self) -> &StopFlag {
        &self.stop
    }

    /// Cancels the tasks not yet started (they finish as skipped); tasks running go on to their
    /// end, so no worker touches the caller's memory once the future is done.
    pub fn cancel(&self) {
        let mut st = lock(&self.state);
        if st.remaining > 0 && st.error.is_none() {
            st.error = Some(Error::Cancelled);
        }
        self.stop.set();
    }

    /// Bytes moved so far, updated by tasks as they go.
    pub fn progress(&self) -> &AtomicU64 {
        &self.progress
    }

    /// Counts one task down with its result.
    pub fn finish_task(&self, result: Result<usize>) {
        self.finish_tasks(1, result);
    }

    /// Counts `n` tasks down at once (skipped tasks of a stopped request).
    pub fn finish_tasks(&self, n: usize, result: Result<usize>) {
        let mut st = lock(&self.state);
        match result {
            Ok(b) => st.bytes += b,
            Err(e) => {
                self.stop.set();
                st.keep(e);
            }
        }
        st.remaining -= n.min(st.remaining);
        if st.remaining == 0 {
            if let Some(hook) = st.hook.take() {
                let outcome = Outcome {
                    bytes: st.bytes,
                    ok: st.error.is_none(),
                };
                // A hook that panics (a bug) must not keep the waiters asleep for ever: they
                // are woken below whatever the hook did.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(outcome)));
            }
            let callbacks = std::mem::take(&mut st.callbacks);
            self.cv.notify_all();
            // Outside the lock: a callback may ask the future for its result, or wait on it.
            drop(st);
            run_callbacks(callbacks);
        }
    }

    /// Runs `f` once the request has ended: at once, on this thread, if it has; otherwise on the
    /// thread that finishes its last task, after the waiters are woken. A callback that panics
    /// does not keep the others from running.
    pub fn on_done(&self, f: impl FnOnce() + Send + 'static) {
        let mut st = lock(&self.state);
        if st.remaining > 0 {
            st.callbacks.push(Box::new(f));
            return;
        }
        drop(st);
        run_callbacks(vec![Box::new(f)]);
    }

    /// Fails the request with `e` and stops it, without counting a task down: a run that
    /// panicked left tasks unfinished that only [`Completion::finish_rest`] can count, once no
    /// other run can still finish one.
    pub fn fail(&self, e: Error) {
        let mut st = lock(&self.state);
        if st.remaining > 0 {
            st.keep(e);
        }
        self.stop.set();
    }

    /// Counts down every task not finished yet, as moving nothing (see [`Completion::fail`]).
    pub fn finish_rest(&self) {
        let n = lock(&self.state).remaining;
        if n > 0 {
            self.finish_tasks(n, Ok(0));
        }
    }

    fn outcome(st: &State) -> Result<usize> {
        match &st.error {
            Some(e) if st.others.is_empty() => Err(e.clone()),
            Some(e) => Err(Error::TasksFailed {
                first: Box::new(e.clone()),
                others: st.others.clone(),
                not_shown: st.not_shown,
                bytes_done: st.bytes,
            }),
            None => Ok(st.bytes),
        }
    }
}

fn run_callbacks(callbacks: Vec<Callback>) {
    for cb in callbacks {
        // A callback's bug must not take the worker's thread down nor skip the next callbacks.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(cb));
    }
}

/// The result of a request that may still be running. Dropping it does not cancel the request.
#[must_use = "an IoFuture must be waited on to learn whether the I/O succeeded"]
pub struct IoFuture {
    inner: Awaited,
}

/// What an [`IoFuture`] waits on.
enum Awaited {
    /// Nothing: the result is known.
    Ready(Result<usize>),
    Pending(Arc<Completion>),
    /// Several requests as one (a batch): done when all are.
    All(Vec<IoFuture>),
}

impl IoFuture {
    /// A future that is already done.
    pub fn ready(result: Result<usize>) -> Self {
        IoFuture {
            inner: Awaited::Ready(result),
        }
    }

    /// A future of a running request.
    pub fn pending(c: Arc<Completion>) -> Self {
        IoFuture {
            inner: Awaited::Pending(c),
        }
    }

    /// One future of several requests: done when all are, the sum of their bytes, or the first
    /// error (after every request has ended, so no worker still uses a buffer).
    pub fn all(futures: Vec<IoFuture>) -> Self {
        IoFuture {
            inner: Awaited::All(futures),
        }
    }

    /// Waits for every task; the bytes transferred, or the first error.
    pub fn wait(&self) -> Result<usize> {
        match &self.inner {
            Awaited::Ready(r) => r.clone(),
            Awaited::All(fs) => Self::sum(fs.iter().map(IoFuture::wait)),
            Awaited::Pending(c) => {
                let mut st = lock(&c.state);
                while st.remaining > 0 {
                    st = c.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                Completion::outcome(&st)
            }
        }
    }

    fn sum(results: impl Iterator<Item = Result<usize>>) -> Result<usize> {
        let (mut total, mut first_error) = (0usize, None);
        for r in results {
            match r {
                Ok(n) => total += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(total), Err)
    }

    /// Like [`IoFuture::wait`], but gives up after `timeout` (returns `None`).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<usize>> {
        match &self.inner {
            Awaited::Ready(r) => Some(r.clone()),
            Awaited::All(fs) => {
                let deadline = std::time::Instant::now() + timeout;
                for f in fs {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let _ended = f.wait_timeout(left)?;
                }
                Some(self.wait())
            }
            Awaited::Pending(c) => {
                let st = lock(&c.state);
                let (st, _) =
                    c.cv.wait_timeout_while(st, timeout, |s| s.remaining > 0)
                        .unwrap_or_else(|e| e.into_inner());
                (st.remaining == 0).then(|| Completion::outcome(&st))
            }
        }
    }

    /// Bytes moved so far by the request's tasks that succeeded (a failed task's partial bytes
    /// are not counted); once the future is done, what a caller can trust landed. A ready future
    /// counts its result.
    pub fn bytes_moved(&self) -> usize {
        match &self.inner {
            Awaited::Ready(r) => *r.as_ref().unwrap_or(&0),
            Awaited::Pending(c) => lock(&c.state).bytes,
            Awaited::All(fs) => fs.iter().map(IoFuture::bytes_moved).sum(),
        }
    }

    /// Whether every task has finished.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            Awaited::Ready(_) => true,
            Awaited::Pending(c) => lock(&c.state).remaining == 0,
            Awaited::All(fs) => fs.iter().all(IoFuture::is_done),
        }
    }

    /// Cancels the tasks not yet started (see `Completion::cancel`); wait for the future
    /// afterwards to know that no worker still uses the buffer.
    pub fn cancel(&self) {
        match &self.inner {
            Awaited::Ready(_) => {}
            Awaited::Pending(c) => c.cancel(),
            Awaited::All(fs) => fs.iter().for_each(IoFuture::cancel),
        }
    }

    /// Runs `f` once every request of the future has ended (see `Completion::on_done`): at
    /// once on this thread if they have, else on the thread that ends the last one.
    pub fn on_done(&self, f: impl FnOnce() + Send + 'static) {
        self.on_done_boxed(Box::new(f));
    }

    fn on_done_boxed(&self, f: Callback) {
        match &self.inner {
            Awaited::Ready(_) => run_callbacks(vec![f]),
            Awaited::Pending(c) => c.on_done(f),
            Awaited::All(fs) if fs.is_empty() => run_callbacks(vec![f]),
            Awaited::All(fs) => {
                let left = Arc::new(std::sync::atomic::AtomicUsize::new(fs.len()));
                let f: Arc<Mutex<Option<Callback>>> = Arc::new(Mutex::new(Some(f)));
                for child in fs {
                    let (left, f) = (Arc::clone(&left), Arc::clone(&f));
                    child.on_done_boxed(Box::new(move || {
                        if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                            if let Some(f) = lock(&f).take() {
                                f();
                            }
                        }
                    }));
                }
            }
        }
    }

    /// Bytes moved so far (for progress bars).
    pub fn bytes_transferred(&self) -> u64 {
        match &self.inner {
            Awaited::Ready(r) => r.as_ref().map_or(0, |n| *n as u64),
            Awaited::Pending(c) => c.progress.load(Ordering::Relaxed),
            Awaited::All(fs) => fs.iter().map(IoFuture::bytes_transferred).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_error_wins_and_get_repeats_it() {
        let c = Completion::new(2, |_| {});
        c.finish_task(Err(Error::Closed));
        assert!(c.stopped());
        c.finish_task(Err(Error::Cancelled));
        let f = IoFuture::pending(c);
        assert_eq!(f.wait().unwrap_err().to_string(), Error::Closed.to_string());
        assert!(f.wait().is_err());
    }

    #[test]
    fn hook_runs_once_before_waiters_see_the_end() {
        let seen = Arc::new(Mutex::new(None));
        let s = Arc::clone(&seen);
        let c = Completion::new(3, move |o| *lock(&s) = Some((o.bytes, o.ok)));
        let f = IoFuture::pending(Arc::clone(&c));
        assert!(f.wait_timeout(Duration::from_millis(5)).is_none());
        c.finish_task(Ok(1));
        c.finish_tasks(2, Ok(6));
        assert_eq!(f.wait().unwrap(), 7);
        assert_eq!(*lock(&seen), Some((7, true)));
    }

    #[test]
    fn all_sums_and_waits_for_every_request_before_an_error() {
        let (a, b) = (Completion::new(1, |_| {}), Completion::new(1, |_| {}));
        let f = IoFuture::all(vec![
            IoFuture::pending(Arc::clone(&a)),
            IoFuture::ready(Ok(5)),
            IoFuture::pending(Arc::clone(&b)),
        ]);
        a.finish_task(Err(Error::Closed));
        assert!(
            f.wait_timeout(Duration::from_millis(5)).is_none(),
            "b still runs"
        );
        assert!(!f.is_done());
        b.finish_task(Ok(3));
        assert!(matches!(f.wait(), Err(Error::Closed)));
        let ok = IoFuture::all(vec![IoFuture::ready(Ok(2)), IoFuture::ready(Ok(3))]);
        assert_eq!(ok.wait().unwrap(), 5);
    }

    fn os(offset: u64) -> Error {
        Error::Os {
            op: crate::error::Op::Write,
            path: "/t/x.bin".into(),
            offset,
            len: 1 << 20,
            errno: libc::ENOSPC,
        }
    }

    /// Every failed task is reported, not only the first: its error stays the request's
    /// (errno and all), the others are listed with their ranges, and the bytes of the tasks
    /// that succeeded are counted; one failure alone stays that failure.
    #[test]
    fn a_completion_hook_that_panics_still_wakes_the_waiters() {
        let c = Completion::new(1, |_| panic!("a hook's bug"));
        let fut = IoFuture::pending(Arc::clone(&c));
        let finisher = std::thread::spawn(move || c.finish_task(Ok(7)));
        let r = fut.wait_timeout(std::time::Duration::from_secs(10));
        assert_eq!(r.expect("the waiter was never woken").unwrap(), 7);
        finisher
            .join()
            .expect("the task's thread survives the hook");
    }

    #[test]
    fn a_task_failing_while_a_cancel_runs_names_its_error_not_the_cancel() {
        let c = Completion::new(3, |_| {});
        c.cancel();
        c.finish_task(Err(os(2 << 20)));
        c.finish_task(Ok(0));
        c.finish_task(Ok(1 << 20));
        let fut = IoFuture::pending(c);
        let e = fut.wait().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
        assert_eq!(e.failed_ranges(), vec![(2 << 20, 1 << 20)]);
        assert_eq!(fut.bytes_moved(), 1 << 20);
    }

    #[test]
    fn every_failed_task_is_named_beside_the_first() {
        let c = Completion::new(5, |_| {});
        c.finish_task(Ok(1 << 20));
        c.finish_task(Err(os(9 << 20)));
        c.finish_task(Err(Error::Cancelled));
        c.finish_task(Err(os(6 << 20)));
        c.finish_task(Ok(1 << 20));
        let e = IoFuture::pending(c).wait().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC));
        assert_eq!(
            e.failed_ranges(),
            vec![(9 << 20, 1 << 20), (6 << 20, 1 << 20)]
        );
        let text = e.to_string();
        for part in [
            "offset 9437184",
            "offset 6291456",
            "1 other task",
            "2097152 bytes",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert!(
            matches!(&e, Error::TasksFailed { first, bytes_done: 2097152, .. } if matches!(**first, Error::Os { offset: 9437184, .. }))
        );
        // The same failure from several runs is one failure.
        let same = Completion::new(3, |_| {});
        (0..3).for_each(|_| same.finish_task(Err(os(0))));
        assert!(matches!(
            IoFuture::pending(same).wait(),
            Err(Error::Os { offset: 0, .. })
        ));
        let one = Completion::new(2, |_| {});
        one.finish_task(Err(os(0)));
        one.finish_task(Ok(5));
        assert!(matches!(
            IoFuture::pending(one).wait(),
            Err(Error::Os { offset: 0, .. })
        ));
        // Past MAX_TASK_ERRORS the rest are counted.
        let many = Completion::new(40, |_| {});
        (0..40).for_each(|i| many.finish_task(Err(os(i << 20))));
        let e = IoFuture::pending(many).wait().unwrap_err();
        assert!(
            matches!(&e, Error::TasksFailed { others, not_shown: 23, .. } if others.len() == MAX_TASK_ERRORS)
        );
        assert!(e.to_string().contains("39 other task(s)"), "{e}");
    }

    /// Callbacks run once each, after the waiters can see the result (a callback may wait on
    /// the future without a deadlock), on the finishing thread; one added to an ended request
    /// runs at once on the adding thread; a panicking one does not stop the next.
    #[test]
    fn callbacks_run_once_after_the_end_outside_the_lock() {
        let c = Completion::new(2, |_| {});
        let fut = Arc::new(IoFuture::pending(Arc::clone(&c)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let (seen, f) = (Arc::clone(&seen), Arc::clone(&fut));
            fut.on_done(move || {
                if i == 1 {
                    panic!("a callback's bug");
                }
                let r = f.wait().unwrap(); // the lock is free: no deadlock
                lock(&seen).push((i, r, std::thread::current().name().map(str::to_owned)));
            });
        }
        assert!(lock(&seen).is_empty());
        c.finish_task(Ok(3));
        assert!(lock(&seen).is_empty(), "one task is still running");
        std::thread::Builder::new()
            .name("finisher".into())
            .spawn(move || c.finish_task(Ok(4)))
            .unwrap()
            .join()
            .unwrap();
        let got = lock(&seen).clone();
        let finisher = Some("finisher".to_owned());
        assert_eq!(got, vec![(0, 7, finisher.clone()), (2, 7, finisher)]);
        let here = std::thread::current().name().map(str::to_owned);
        let s = Arc::clone(&seen);
        fut.on_done(move || {
            lock(&s).push((9, 0, std::thread::current().name().map(str::to_owned)))
        });
        assert_eq!(lock(&seen).last(), Some(&(9, 0, here)));
    }

    #[test]
    fn a_batch_calls_back_once_when_its_last_request_ends() {
        let (a, b) = (Completion::new(1, |_| {}), Completion::new(1, |_| {}));
        let f = IoFuture::all(vec![
            IoFuture::pending(Arc::clone(&a)),
            IoFuture::ready(Ok(1)),
            IoFuture::pending(Arc::clone(&b)),
        ]);
        let n = Arc::new(AtomicU64::new(0));
        let m = Arc::clone(&n);
        f.on_done(move || {
            m.fetch_add(1, Ordering::SeqCst);
        });
        b.finish_task(Ok(1));
        assert_eq!(n.load(Ordering::SeqCst), 0);
        a.finish_task(Err(Error::Closed));
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let empty = IoFuture::all(Vec::new());
        let m = Arc::clone(&n);
        empty.on_done(move || {
            m.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn cancel_stops_and_reports_cancelled() {
        let c = Completion::new(4, |_| {});
        let f = IoFuture::pending(Arc::clone(&c));
        f.cancel();
        assert!(c.stopped());
        c.finish_tasks(4, Ok(0));
        assert!(matches!(f.wait(), Err(Error::Cancelled)));
    }
}
