//! Starting a planned request ([`Engine::launch`]): the executor its plan names, on the runs its
//! plan names, and the request's completion (recorded, then counted out of flight).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Engine, PathReport};
use crate::config::Settings;
use crate::cuda::{self};
use crate::cufile::RegisteredFile;
use crate::error::{Error, Result};
use crate::exec::bounce::BounceExec;
use crate::exec::cufile::CufileExec;
use crate::exec::gather::{GatherExec, GatherTarget, GpuGather};
use crate::exec::host::HostExec;
use crate::exec::{AfterStream, Executor, Tasks};
use crate::future::{lock, Completion, IoFuture};
use crate::observe;
use crate::plan::{CallerPart, Dma, Strategy, TaskSplit};
use crate::pool::ThreadPool;
use crate::request::Direction;
use crate::source::{Endpoint, LocalFile};

use super::planning::{Prepared, Target};
use super::watch::Watch;

/// What a request's end records: the row it is counted in, its watch (where monitors are
/// registered), and the local file whose notice it says (one its tasks gave it: no direct I/O).
pub(super) type Ending = (observe::Row, Option<Watch>, Option<Arc<LocalFile>>);

impl Engine {
    /// Starts a prepared request: the executor its plan names, on the runs its plan names.
    ///
    /// # Safety
    /// As for [`Engine::submit`], for the request `prepared` was made of.
    pub(super) unsafe fn launch(
        &self,
        prepared: Prepared,
        settings: &Settings,
    ) -> Result<(IoFuture, Option<PathReport>)> {
        let Prepared {
            endpoint,
            direction,
            len,
            after,
            target,
            plan,
            local,
            report,
            offset,
        } = prepared;
        let backend = plan.path.backend;
        let row = observe::Row::of(backend, endpoint.io_backend());
        let watch = Watch::new(
            &endpoint,
            direction,
            target.memory(),
            offset,
            len,
            backend,
            &plan.strategy,
            plan.path.reason,
        );
        if len == 0 {
            // Recorded as every request is (observe() and the monitors count it alike); it
            // takes no time, so it ends where it starts.
            if let Some(w) = &watch {
                w.started(0);
            }
            let op = watch.as_ref().map(|w| w.operation(None, 0, 0, 0, true));
            observe::record(row, 0, 0, 0, Duration::ZERO, true, op.as_ref());
            return Ok((IoFuture::ready(Ok(0)), report));
        }
        if let (Direction::Write, Some(local)) = (direction, &local) {
            self.dma.forget(local); // its pages must be unpinned for the write
        }
        let file = local.clone();
        let exec = self.executor(
            endpoint,
            local,
            target,
            direction,
            plan.strategy,
            plan.registered,
        )?;
        let exec = after_stream(exec, after)?;
        let fut = match plan.caller {
            CallerPart::Whole => self.run_here(exec, plan.tasks, (row, watch, file)),
            part => self.run(
                exec,
                plan.tasks,
                (row, watch, file),
                settings.num_threads,
                plan.runs,
                part == CallerPart::Share,
            )?,
        };
        Ok((fut, report))
    }

    /// The executor `strategy` names, made for this request.
    pub(super) fn executor(
        &self,
        endpoint: Endpoint,
        local: Option<Arc<LocalFile>>,
        target: Target,
        direction: Direction,
        strategy: Strategy,
        registered: Option<Arc<RegisteredFile>>,
    ) -> Result<Arc<dyn Executor>> {
        Ok(match (strategy, target) {
            (Strategy::Cufile, Target::Device { device, base }) => {
                let registered = registered.ok_or_else(|| {
                    Error::InvalidArgument("cuFile's path without a registered file".into())
                })?;
                Arc::new(CufileExec {
                    registered,
                    direction,
                    ctx: device.ctx,
                    base,
                    offset_in_allocation: device.addr - base,
                    path: endpoint.describe().into(),
                })
            }
            (
                Strategy::Gather {
                    direct,
                    host_io,
                    staging,
                    dma,
                },
                target,
            ) => {
                let gpu = match (&dma, &local, &target) {
                    (Dma::On(budget), Some(local), Target::Device { device, .. }) => {
                        let kernel = cuda::gather_kernel(device.device).ok();
                        let dma = self.dma.read(local, *budget);
                        kernel
                            .zip(dma)
                            .map(|(kernel, dma)| GpuGather { dma, kernel })
                    }
                    _ => None,
                };
                let target = match (target, staging) {
                    (Target::Device { device, .. }, Some(bounce)) => GatherTarget::Device {
                        device,
                        bounce,
                        pool: Arc::clone(&self.bounce),
                    },
                    (Target::Host(ptr), _) => GatherTarget::Host(ptr),
                    (Target::Device { .. }, None) => {
                        return Err(Error::InvalidArgument(
                            "a device gather without staging".into(),
                        ))
                    }
                };
                Arc::new(GatherExec {
                    endpoint,
                    local,
                    target,
                    host_io: host_io.backend,
                    direct: direct.always,
                    direct_uncached: direct.uncached,
                    gpu,
                })
            }
            (Strategy::Host { direct }, Target::Host(ptr)) => Arc::new(HostExec {
                endpoint,
                ptr,
                direct: direct.always,
                direct_uncached: direct.uncached,
            }),
            (
                Strategy::Bounce {
                    direct,
                    chunks,
                    dma,
                },
                Target::Device { device, .. },
            ) => {
                let dma = match (dma, local) {
                    (Dma::On(budget), Some(local)) => self.dma.read(&local, budget),
                    _ => None,
                };
                Arc::new(BounceExec {
                    endpoint,
                    target: device,
                    chunks,
                    direct: direct.always,
                    direct_uncached: direct.uncached,
                    pool: Arc::clone(&self.bounce),
                    dma,
                })
            }
            (strategy, target) => {
                return Err(Error::InvalidArgument(format!(
                    "a plan of {strategy:?} for {:?} memory",
                    target.memory()
                )))
            }
        })
    }

    /// Runs `split` on the workers of a pool of `threads`: `runs` runs of `exec` (the plan's);
    /// the request is recorded (`ending`) and leaves the in-flight count when its last task ends, before
    /// any waiter wakes. With `share`, the calling thread is one of those runs: it
    /// takes tasks beside the workers until none is left, then returns (the caller waits next;
    /// see [`plan::CALLER_SHARE_MAX`]).
    pub(super) fn run(
        &self,
        exec: Arc<dyn Executor>,
        split: TaskSplit,
        ending: Ending,
        threads: usize,
        runs: usize,
        share: bool,
    ) -> Result<IoFuture> {
        let pool = self.pool(threads)?;
        let count = split.count();
        let tasks = Arc::new(Tasks::new(split, runs));
        // The executor (and the file it holds open) is let go when the request ends, not when
        // the last queued run gets a worker and finds nothing left to do.
        let slot = Arc::new(Mutex::new(Some(exec)));
        let done_slot = Arc::clone(&slot);
        let completion = self.completion(ending, count, move || {
            let exec = lock(&done_slot).take();
            exec.map_or(0, |e| e.dma_bytes())
        });
        let queued = runs - usize::from(share);
        let left = Arc::new(Runs::new(runs));
        let jobs = (0..queued)
            .map(|_| {
                let (slot, tasks, done, left) = (
                    Arc::clone(&slot),
                    Arc::clone(&tasks),
                    Arc::clone(&completion),
                    Arc::clone(&left),
                );
                Box::new(move || run_from(&slot, &tasks, &done, &left)) as crate::pool::Job
            })
            .collect();
        pool.submit_all(jobs);
        if share {
            run_from(&slot, &tasks, &completion, &left);
        }
        Ok(IoFuture::pending(completion))
    }

    /// Runs `split` (one task) on the calling thread; the future is done when this returns.
    pub(super) fn run_here(
        &self,
        exec: Arc<dyn Executor>,
        split: TaskSplit,
        ending: Ending,
    ) -> IoFuture {
        let tasks = Tasks::new(split, 1);
        let counted = Arc::clone(&exec);
        let completion = self.completion(ending, tasks.count(), move || counted.dma_bytes());
        let runs = Runs::new(1);
        runs.run(&*exec, &tasks, &completion);
        IoFuture::pending(completion)
    }

    /// The completion of a request of `count` tasks, counted in flight from now (and, where
    /// `watch`ed, told to the monitors as started); when its last task ends it runs `release`
    /// (which lets the executor go and says how many bytes it copied by page-cache DMA), says
    /// the notice its local file came to have while it ran, records the request and leaves the
    /// in-flight count.
    pub(super) fn completion(
        &self,
        (row, watch, file): Ending,
        count: usize,
        release: impl FnOnce() -> u64 + Send + 'static,
    ) -> Arc<Completion> {
        self.in_flight.enter();
        let in_flight = Arc::clone(&self.in_flight);
        let start = match &watch {
            Some(w) => {
                w.started(count);
                w.start()
            }
            None => Instant::now(),
        };
        Completion::new(count, move |o| {
            let dma = release();
            if let Some(file) = file {
                observe::file_notice(&file); // its tasks may have opened O_DIRECT
            }
            let end = Instant::now();
            let op = watch
                .as_ref()
                .map(|w| w.operation(Some(end), o.bytes, count, dma, o.ok));
            let elapsed = end.saturating_duration_since(start);
            observe::record(row, count, o.bytes, dma, elapsed, o.ok, op.as_ref());
            in_flight.leave();
        })
    }

    /// The pool, grown to at least `threads` workers (it never shrinks: a request uses at most
    /// its own `num_threads` of them).
    pub(super) fn pool(&self, threads: usize) -> Result<Arc<ThreadPool>> {
        let mut slot = lock(&self.pool);
        let pool = match &*slot {
            Some(p) => Arc::clone(p),
            None => {
                let p = Arc::new(ThreadPool::new(threads.max(1))?);
                *slot = Some(Arc::clone(&p));
                p
            }
        };
        pool.grow(threads)?;
        Ok(pool)
    }
}

/// One run of the executor in `slot` over `tasks`, unless the request has ended and let it go.
pub(super) fn run_from(
    slot: &Mutex<Option<Arc<dyn Executor>>>,
    tasks: &Tasks,
    done: &Completion,
    runs: &Runs,
) {
    let exec = lock(slot).clone();
    match exec {
        Some(exec) => runs.run(&*exec, tasks, done),
        None => runs.end(done),
    }
}

/// The runs of one request not yet ended, and whether one panicked. A run that panics leaves
/// the tasks it held unfinished, and which those are died with it; so the request fails at
/// once (the other runs skip what they have not started) and its unfinished tasks are counted
/// down when its last run ends, when no worker touches the caller's memory any more.
pub(super) struct Runs {
    left: std::sync::atomic::AtomicUsize,
    panicked: AtomicBool,
}

impl Runs {
    pub(super) fn new(runs: usize) -> Self {
        Runs {
            left: std::sync::atomic::AtomicUsize::new(runs),
            panicked: AtomicBool::new(false),
        }
    }

    /// Runs `exec` over `tasks`; a panic fails the request with [`Error::TaskPanicked`]
    /// instead of unwinding into the worker or the caller.
    pub(super) fn run(&self, exec: &dyn Executor, tasks: &Tasks, done: &Completion) {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec.run(tasks, done)));
        if let Err(payload) = ran {
            self.panicked.store(true, Ordering::SeqCst);
            done.fail(Error::TaskPanicked {
                message: panic_message(&*payload),
            });
        }
        self.end(done);
    }

    /// One run ended; the last one, after a panic, counts the tasks nobody finished.
    pub(super) fn end(&self, done: &Completion) {
        let last = self.left.fetch_sub(1, Ordering::AcqRel) == 1;
        if last && self.panicked.load(Ordering::SeqCst) {
            done.finish_rest();
        }
    }
}

/// A panic's message, as `panic!` formatted it.
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

/// `exec`, made to wait first for the work queued on `after` (where the request names a
/// stream) until now: the stream is marked here, on the submitting thread, so that the runs
/// wait for that work only, and never use the producer's stream handle, which may be gone by
/// the time a run starts.
pub(super) fn after_stream(
    exec: Arc<dyn Executor>,
    after: Option<cuda::StreamWait>,
) -> Result<Arc<dyn Executor>> {
    Ok(match after.map(|w| w.mark()).transpose()?.flatten() {
        Some(mark) => Arc::new(AfterStream { mark, inner: exec }),
        None => exec,
    })
}
