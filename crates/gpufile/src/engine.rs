//! The [`Engine`]: the worker pool, the pinned bounce buffers, the in-flight count and the default
//! settings of a process (or of a test), and the one path every request takes:
//! plan (the path and its reason) → executor → record.
//!
//! How to use:
//! 1. [`Engine::global`] is the process engine behind KvikIO's global `defaults` API; a forked
//!    child gets a fresh one (its parent's threads do not exist there) with the same settings.
//! 2. Every request carries the settings it runs under ([`Engine::submit`] takes them), so tools
//!    and tests vary settings per request without touching the defaults.
//! 3. [`Engine::shutdown`] stops new requests and waits, for a bounded time, for those in flight
//!    (interpreter exit).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::{self, Input, Name, Origin, Settings, Value};
use crate::cuda::{self, MemoryKind};
use crate::cufile::{self, RegisteredFile};
use crate::error::{Error, Result};
use crate::exec::bounce::{BounceExec, BouncePool, DeviceTarget};
use crate::exec::cufile::CufileExec;
use crate::exec::dma::DmaCache;
use crate::exec::gather::{GatherExec, GatherTarget};
use crate::exec::host::HostExec;
use crate::exec::{AfterStream, Executor, SendPtr, Tasks};
use crate::future::{lock, Completion, IoFuture};
use crate::observe;
use crate::plan::{
    self, Backend, CallerPart, Dma, HostIo, HostIoReason, IoPath, Reason, Shape, Strategy,
    TaskSplit,
};
use crate::pool::ThreadPool;
use crate::request::{Buffer, Direction, Memory, Ranges, Request};
use crate::source::{Endpoint, LocalFile};

mod batch;

/// Requests started and not yet finished, with a condvar for [`Engine::shutdown`].
#[derive(Default)]
struct InFlight {
    count: Mutex<usize>,
    idle: Condvar,
}

impl InFlight {
    fn enter(&self) {
        *lock(&self.count) += 1;
    }

    fn leave(&self) {
        let mut n = lock(&self.count);
        *n -= 1;
        if *n == 0 {
            self.idle.notify_all();
        }
    }
}

/// A request's plan with its path decided, and the registered file where cuFile runs it.
struct Planned {
    path: IoPath,
    strategy: Strategy,
    tasks: TaskSplit,
    caller: CallerPart,
    runs: usize,
    registered: Option<Arc<RegisteredFile>>,
}

/// A request checked and planned ([`Engine::prepare`]), not started.
struct Prepared {
    endpoint: Endpoint,
    direction: Direction,
    len: usize,
    after: Option<cuda::StreamWait>,
    target: Target,
    plan: Planned,
    local: Option<Arc<LocalFile>>,
    report: Option<PathReport>,
}

/// The caller's memory, resolved: host memory, or GPU memory with its allocation and context.
#[derive(Clone, Copy, Debug)]
enum Target {
    Host(SendPtr),
    Device {
        device: DeviceTarget,
        /// Start of the allocation holding the range (cuFile addresses buffers by base + offset).
        base: u64,
    },
}

impl Target {
    fn memory(&self) -> Memory {
        match self {
            Target::Host(_) => Memory::Host,
            Target::Device { .. } => Memory::Device,
        }
    }
}

/// What the plan of a submitted request decided, for the request's report (and `explain`):
/// the path and why, how many ranges and tasks, and for a gather its host I/O and copies.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PathReport {
    /// The data path and why.
    pub path: IoPath,
    /// Ranges in the request.
    pub ranges: usize,
    /// Tasks it runs as (groups of ranges, for a gather).
    pub tasks: usize,
    /// Whether its ranges are gathered, a group of them per task.
    pub gathered: bool,
    /// A gather's host I/O (io_uring or pread) and why; `None` for other requests.
    pub host_io: Option<HostIo>,
    /// Host-to-GPU copies a gathered device read makes (one per contiguous run of the
    /// destination in each group); `None` for other requests.
    pub copies: Option<usize>,
}

/// Worker pool, pinned buffers, in-flight requests and default settings.
pub struct Engine {
    defaults: RwLock<config::State>,
    /// `defaults.settings`, shared: what a request runs under when it names no settings
    /// (replaced, under the `defaults` write lock, whenever the defaults change).
    current: RwLock<Arc<Settings>>,
    pool: Mutex<Option<Arc<ThreadPool>>>,
    bounce: Arc<BouncePool>,
    dma: Arc<DmaCache>,
    in_flight: Arc<InFlight>,
    closing: AtomicBool,
    pid: u32,
}

/// The process engine. It never lets an engine go: it is replaced only in a forked child, where
/// the parent's one is forgotten.
static GLOBAL: Mutex<Option<Arc<Engine>>> = Mutex::new(None);

thread_local! {
    /// This thread's share of the engine `GLOBAL` holds, so that [`Engine::global`] takes no
    /// lock once a thread has one (it runs for every request). A forked child's thread finds
    /// its parent's engine here, with the parent's pid, and asks `GLOBAL` again.
    static LOCAL: RefCell<Option<Arc<Engine>>> = const { RefCell::new(None) };
}

impl Engine {
    /// An engine with these default settings; its workers start on its first request.
    pub fn new(defaults: config::State) -> Self {
        Engine {
            current: RwLock::new(Arc::new(defaults.settings.clone())),
            defaults: RwLock::new(defaults),
            pool: Mutex::new(None),
            bounce: Arc::new(BouncePool::default()),
            dma: Arc::new(DmaCache::default()),
            in_flight: Arc::new(InFlight::default()),
            closing: AtomicBool::new(false),
            pid: crate::posix::pid(),
        }
    }

    /// The process engine, made on first use from the environment (`KVIKIO_*`/`GPUFILE_*`; a
    /// value that does not parse is an error naming the variable). In a forked child, a fresh
    /// engine with the parent's settings: the parent's one is forgotten, never dropped (its
    /// workers do not exist in the child, and its pinned memory belongs to the parent's CUDA).
    pub fn global() -> Result<Arc<Engine>> {
        let pid = crate::posix::pid();
        // `try_with`: a thread's own locals may be gone already (a destructor that reads).
        let mine = LOCAL.try_with(|l| l.borrow().as_ref().filter(|e| e.pid == pid).cloned());
        if let Ok(Some(engine)) = mine {
            return Ok(engine);
        }
        let engine = Self::global_shared(pid)?;
        let _ = LOCAL.try_with(|l| *l.borrow_mut() = Some(Arc::clone(&engine)));
        Ok(engine)
    }

    /// The engine `GLOBAL` holds for process `pid`, made (or made anew in a forked child) here.
    fn global_shared(pid: u32) -> Result<Arc<Engine>> {
        let mut slot = lock(&GLOBAL);
        if let Some(e) = &*slot {
            if e.pid == pid {
                return Ok(Arc::clone(e));
            }
        }
        let defaults = match slot.take() {
            Some(parent) => {
                let state = match parent.defaults.try_read() {
                    Ok(s) => s.clone(),
                    Err(_) => config::State::from_process_env()?,
                };
                parent.bounce.forget();
                std::mem::forget(parent);
                state
            }
            None => config::State::from_process_env()?,
        };
        let engine = Arc::new(Engine::new(defaults));
        *slot = Some(Arc::clone(&engine));
        Ok(engine)
    }

    /// The default settings now (a snapshot: later changes do not affect it).
    pub fn settings(&self) -> Settings {
        self.read_defaults().settings.clone()
    }

    /// The default settings now, shared rather than copied (what a request that names no
    /// settings runs under; later changes do not affect it).
    pub fn shared_settings(&self) -> Arc<Settings> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes `state`'s settings the shared ones; called with the `defaults` write lock held.
    fn publish(&self, state: &config::State) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(state.settings.clone());
    }

    fn read_defaults(&self) -> std::sync::RwLockReadGuard<'_, config::State> {
        self.defaults.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_defaults(&self) -> std::sync::RwLockWriteGuard<'_, config::State> {
        self.defaults.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The default settings with `updates` applied, for one request or tool run: the defaults
    /// themselves do not change (a bad value is an [`Error::InvalidSetting`]).
    pub fn settings_with(&self, updates: &[(Name, Input<'_>)]) -> Result<Settings> {
        let mut state = self.read_defaults().clone();
        state.set(updates)?;
        Ok(state.settings)
    }

    /// Changes default settings (all or nothing); a bad value is an [`Error::InvalidSetting`].
    pub fn set(&self, updates: &[(Name, Input<'_>)]) -> Result<()> {
        let limit = {
            let mut state = self.write_defaults();
            state.set(updates)?;
            self.publish(&state);
            state.settings.dma_cache_size
        };
        if updates.iter().any(|(n, _)| *n == Name::DmaCacheSize) {
            self.dma.trim(limit); // a smaller budget unpins what no longer fits, now
        }
        Ok(())
    }

    /// The value and source of each named setting, for a later [`Engine::restore`].
    pub fn snapshot(&self, names: &[Name]) -> Vec<(Name, Value, Origin)> {
        self.read_defaults().snapshot(names)
    }

    /// Puts back what [`Engine::snapshot`] saved.
    pub fn restore(&self, saved: &[(Name, Value, Origin)]) {
        let limit = {
            let mut state = self.write_defaults();
            state.restore(saved);
            self.publish(&state);
            state.settings.dma_cache_size
        };
        if saved.iter().any(|(n, _, _)| *n == Name::DmaCacheSize) {
            self.dma.trim(limit); // a budget put back smaller unpins what no longer fits
        }
    }

    /// Every setting with its value and source.
    pub fn report(&self) -> Vec<(Name, Value, Origin)> {
        self.snapshot(&Name::ALL)
    }

    /// Frees the pooled pinned bounce buffers; the bytes freed.
    pub fn free_bounce_buffers(&self) -> usize {
        self.bounce.free()
    }

    /// Bytes of pinned bounce buffers pooled now.
    pub fn pooled_bounce_bytes(&self) -> usize {
        self.bounce.pooled()
    }

    /// Bytes of page cache registered for DMA now (see [`crate::exec::dma`]).
    pub fn dma_registered_bytes(&self) -> usize {
        self.dma.registered()
    }

    /// Unregisters the page cache kept for DMA (copies in flight keep theirs until done).
    pub fn dma_cache_clear(&self) {
        self.dma.trim(0);
    }

    /// Requests started and not yet finished.
    pub fn in_flight(&self) -> usize {
        *lock(&self.in_flight.count)
    }

    /// Stops accepting requests ([`Error::ShuttingDown`] from then on) and waits up to `timeout`
    /// for those in flight; whether none is left.
    pub fn shutdown(&self, timeout: Duration) -> bool {
        self.closing.store(true, Ordering::SeqCst);
        let n = lock(&self.in_flight.count);
        let (n, _) = self
            .in_flight
            .idle
            .wait_timeout_while(n, timeout, |n| *n > 0)
            .unwrap_or_else(|e| e.into_inner());
        *n == 0
    }

    /// The path a request of `len` bytes into or out of `memory` on `endpoint` takes under
    /// `settings`, and why (an error where compat_mode OFF cannot be honoured); registers a
    /// local file with cuFile where the decision depends on it, as the request would.
    pub fn io_path(
        endpoint: &Endpoint,
        memory: Memory,
        len: usize,
        settings: &Settings,
    ) -> Result<IoPath> {
        let local = endpoint.local_file();
        let ranges = Ranges::One(crate::request::Range {
            file_offset: 0,
            len,
            buf_offset: 0,
        });
        let shape = Shape {
            direction: endpoint.direction(),
            memory,
            ranges: &ranges,
            len,
            task_size: None,
            caller_waits: false,
            alone: false,
            batch_whole: false,
            needs: endpoint.needs(local.is_some()),
        };
        Self::plan(endpoint, local.as_ref(), &shape, settings, None).map(|planned| planned.path)
    }

    /// Plans `shape` on `endpoint` (see [`plan::plan_request`]) with this machine's answers:
    /// cuFile's availability, the endpoint's registration, io_uring, page-cache DMA. Says once
    /// why device I/O does not take cuFile's path where AUTO falls back.
    fn plan(
        endpoint: &Endpoint,
        local: Option<&Arc<LocalFile>>,
        shape: &Shape<'_>,
        settings: &Settings,
        dma: Option<&DmaCache>,
    ) -> Result<Planned> {
        let mut machine = ThisMachine {
            local,
            registration: None,
            dma,
        };
        let plan = plan::plan_request(shape, settings, &mut machine);
        let path = plan.path?;
        let strategy = plan
            .strategy
            .ok_or_else(|| Error::InvalidArgument("a plan with a path has a strategy".into()))?;
        let registered = match (path.backend, machine.registration) {
            (Backend::Cufile, Some(registered)) => registered,
            // cuFile was chosen and the file refused: said for the file.
            (Backend::GpufilePosix, Some(_)) => {
                let why = format!(
                    "compat_mode AUTO: {} uses gpufile's POSIX path ({})",
                    endpoint.describe(),
                    path.reason
                );
                observe::notice("registration-fallback", why);
                None
            }
            _ => {
                if let Reason::NotAccelerated(_) | Reason::CufileUnavailable(_) = path.reason {
                    // Said once per process: this runs for every device request.
                    static SAID: AtomicBool = AtomicBool::new(false);
                    if !SAID.swap(true, Ordering::Relaxed) {
                        observe::notice(
                            "auto-posix",
                            format!(
                                "compat_mode AUTO: device I/O uses gpufile's POSIX path ({})",
                                path.reason
                            ),
                        );
                    }
                }
                None
            }
        };
        if let Strategy::Bounce {
            dma: Dma::Disabled(why),
            ..
        } = &strategy
        {
            observe::notice("dma-disabled", why.clone());
        }
        Ok(Planned {
            path,
            strategy,
            tasks: plan.tasks,
            caller: plan.caller,
            runs: plan.runs,
            registered,
        })
    }

    /// Starts `req` on `endpoint` (a local file, a mapping, a remote object, any source or
    /// sink) under `settings`: checked, planned ([`plan::plan_request`]), then run by the
    /// executor its plan names. A request whose caller waits at once
    /// ([`Request::caller_waits`]) may run on the calling thread, or take a share of its tasks
    /// (see [`plan::CallerPart`]); its future then comes back done, or sooner done.
    ///
    /// Argument errors (reading past the end of the file, a write-only handle, a device range
    /// past its allocation, compat_mode OFF without cuFile) come back before any byte moves.
    ///
    /// # Safety
    /// The request's buffer must be valid for its length (writable for a read) until the
    /// returned future is done (waited on or seen done), and nothing else may write it meanwhile
    /// (nor read it, for a read). A `pointer_info` must be what [`cuda::classify`] says of an
    /// address in the buffer's allocation (the engine trusts it for that allocation's range),
    /// and an `after` stream must be live until this returns.
    pub unsafe fn submit(
        &self,
        endpoint: &Endpoint,
        req: Request,
        settings: &Settings,
    ) -> Result<IoFuture> {
        // SAFETY: the caller's contract.
        unsafe { self.start(endpoint, req, settings, false) }.map(|(f, _)| f)
    }

    /// [`Engine::submit`], with what its plan decided ([`PathReport`]).
    ///
    /// # Safety
    /// As for [`Engine::submit`].
    pub unsafe fn submit_reported(
        &self,
        endpoint: &Endpoint,
        req: Request,
        settings: &Settings,
    ) -> Result<(IoFuture, PathReport)> {
        // SAFETY: the caller's contract.
        let (fut, report) = unsafe { self.start(endpoint, req, settings, true) }?;
        let report = report.ok_or_else(|| Error::InvalidArgument("no report made".into()))?;
        Ok((fut, report))
    }

    /// The one request path; the report is made only where it is asked for (`report`), so a
    /// plain submit pays nothing for it.
    ///
    /// # Safety
    /// As for [`Engine::submit`].
    unsafe fn start(
        &self,
        endpoint: &Endpoint,
        req: Request,
        settings: &Settings,
        report: bool,
    ) -> Result<(IoFuture, Option<PathReport>)> {
        let prepared = self.prepare(endpoint, req, settings, report, true, false)?;
        // SAFETY: the caller's contract.
        unsafe { self.launch(prepared, settings) }
    }

    /// Checks and plans `req` on `endpoint`, moving no byte: every argument error comes from
    /// here. `may_be_alone`: no other request of the same call starts before this one;
    /// `batch_whole`: the request is one of a batch that keeps every worker busy.
    fn prepare(
        &self,
        endpoint: &Endpoint,
        req: Request,
        settings: &Settings,
        report: bool,
        may_be_alone: bool,
        batch_whole: bool,
    ) -> Result<Prepared> {
        self.accept(endpoint, &req, settings)?;
        let target = resolve(req.buffer, req.pointer_info)?;
        let len = req.len();
        endpoint.check(req.ranges.as_slice())?;
        let local = endpoint.local_file();
        let device_read = matches!(target, Target::Device { .. })
            && req.direction == Direction::Read
            && req.task_size.is_none()
            && !batch_whole;
        let shape = Shape {
            direction: req.direction,
            memory: target.memory(),
            ranges: &req.ranges,
            len,
            task_size: req.task_size,
            caller_waits: req.caller_waits,
            // Asked only where it matters (the in-flight count takes a lock).
            alone: device_read && may_be_alone && self.in_flight() == 0,
            batch_whole,
            needs: endpoint.needs(local.is_some()),
        };
        let plan = Self::plan(endpoint, local.as_ref(), &shape, settings, Some(&self.dma))?;
        let device = matches!(target, Target::Device { .. });
        let report = report.then(|| PathReport {
            path: plan.path.clone(),
            ranges: req.ranges.as_slice().len(),
            tasks: plan.tasks.count(),
            gathered: plan.tasks.is_grouped(),
            host_io: match &plan.strategy {
                Strategy::Gather { host_io, .. } => Some(host_io.clone()),
                _ => None,
            },
            copies: (plan.tasks.is_grouped() && device).then(|| plan::gather_copies(&plan.tasks)),
        });
        Ok(Prepared {
            endpoint: endpoint.clone(),
            direction: req.direction,
            len,
            after: req.after,
            target,
            plan,
            local,
            report,
        })
    }

    /// Whether [`Engine::submit`] would accept `req` now: every check a submission makes before
    /// its first byte moves (the arguments, the direction, the ranges against the file, the
    /// memory, the path the settings allow), with nothing started. A caller starting several
    /// requests as one checks them all first, so that a refusal leaves every file as it was.
    pub fn check(&self, endpoint: &Endpoint, req: &Request, settings: &Settings) -> Result<()> {
        self.prepare(endpoint, req.clone(), settings, false, true, false)
            .map(drop)
    }

    /// Starts a prepared request: the executor its plan names, on the runs its plan names.
    ///
    /// # Safety
    /// As for [`Engine::submit`], for the request `prepared` was made of.
    unsafe fn launch(
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
        } = prepared;
        if len == 0 {
            return Ok((IoFuture::ready(Ok(0)), report));
        }
        let backend = plan.path.backend;
        if let (Direction::Write, Some(local)) = (direction, &local) {
            self.dma.forget(local); // its pages must be unpinned for the write
        }
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
            CallerPart::Whole => self.run_here(exec, plan.tasks, backend),
            part => self.run(
                exec,
                plan.tasks,
                backend,
                settings.num_threads,
                plan.runs,
                part == CallerPart::Share,
            )?,
        };
        Ok((fut, report))
    }

    /// The executor `strategy` names, made for this request.
    fn executor(
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
                },
                target,
            ) => {
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

    /// Checks what every request needs before its endpoint is asked.
    fn accept(&self, endpoint: &Endpoint, req: &Request, settings: &Settings) -> Result<()> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        if req.task_size == Some(0) || settings.task_size == 0 {
            return Err(Error::InvalidArgument(
                "task_size must be at least 1 byte".into(),
            ));
        }
        if endpoint.direction() != req.direction {
            return Err(Error::InvalidArgument(format!(
                "a {} request on {}, which is open for {}s only",
                req.direction,
                endpoint.describe(),
                endpoint.direction()
            )));
        }
        req.ranges.check(req.direction, req.buffer.len())
    }

    /// Runs `split` on the workers of a pool of `threads`: `runs` runs of `exec` (the plan's); the request is recorded and leaves the in-flight count when its last task
    /// ends, before any waiter wakes. With `share`, the calling thread is one of those runs: it
    /// takes tasks beside the workers until none is left, then returns (the caller waits next;
    /// see [`plan::CALLER_SHARE_MAX`]).
    fn run(
        &self,
        exec: Arc<dyn Executor>,
        split: TaskSplit,
        backend: Backend,
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
        let completion = self.completion(backend, count, move || {
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
    fn run_here(&self, exec: Arc<dyn Executor>, split: TaskSplit, backend: Backend) -> IoFuture {
        let tasks = Tasks::new(split, 1);
        let counted = Arc::clone(&exec);
        let completion = self.completion(backend, tasks.count(), move || counted.dma_bytes());
        let runs = Runs::new(1);
        runs.run(&*exec, &tasks, &completion);
        IoFuture::pending(completion)
    }

    /// The completion of a request of `count` tasks, counted in flight from now; when its last
    /// task ends it runs `release` (which lets the executor go and says how many bytes it copied
    /// by page-cache DMA), records the request and leaves the in-flight count.
    fn completion(
        &self,
        backend: Backend,
        count: usize,
        release: impl FnOnce() -> u64 + Send + 'static,
    ) -> Arc<Completion> {
        self.in_flight.enter();
        let (in_flight, start) = (Arc::clone(&self.in_flight), Instant::now());
        Completion::new(count, move |o| {
            let dma = release();
            observe::record(backend, count, o.bytes, dma, start.elapsed(), o.ok);
            in_flight.leave();
        })
    }

    /// The pool, grown to at least `threads` workers (it never shrinks: a request uses at most
    /// its own `num_threads` of them).
    fn pool(&self, threads: usize) -> Result<Arc<ThreadPool>> {
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

/// A gather's host I/O under `settings` ([`plan::choose_host_io`], with the kernel probed once
/// per process); `pread` while fault injection is on, whose seam io_uring would bypass.
pub fn host_io(settings: &Settings, local_file: bool) -> HostIo {
    plan::choose_host_io(settings.io_uring, local_file, io_uring)
}

/// Whether io_uring can gather here: the kernel probed once per process; not while fault
/// injection is on, whose `pread`/`pwrite` seam io_uring would bypass.
fn io_uring() -> std::result::Result<String, HostIoReason> {
    match crate::posix::faults::active() {
        true => Err(HostIoReason::FaultInjection),
        false => crate::exec::uring::probe(),
    }
}

/// This machine, as the planner asks it ([`plan::Machine`]).
struct ThisMachine<'a> {
    local: Option<&'a Arc<LocalFile>>,
    /// Set where the plan asked for the registration: `Some(None)` where it was refused.
    registration: Option<Option<Arc<RegisteredFile>>>,
    /// The engine's page-cache registrations (`None`: a path asked without an engine).
    dma: Option<&'a DmaCache>,
}

impl plan::Machine for ThisMachine<'_> {
    fn cufile(&mut self) -> plan::Availability {
        cufile::availability()
    }

    fn registration(&mut self) -> std::result::Result<(), String> {
        let r = self.local.map(|l| l.registered());
        let outcome = match &r {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("not a local file".to_owned()),
        };
        self.registration = Some(r.and_then(Result::ok));
        outcome
    }

    fn io_uring(&mut self) -> std::result::Result<String, HostIoReason> {
        io_uring()
    }

    fn dma_disabled(&mut self) -> Option<String> {
        self.dma.and_then(|d| d.disabled()).map(str::to_owned)
    }
}

/// One run of the executor in `slot` over `tasks`, unless the request has ended and let it go.
fn run_from(
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
struct Runs {
    left: std::sync::atomic::AtomicUsize,
    panicked: AtomicBool,
}

impl Runs {
    fn new(runs: usize) -> Self {
        Runs {
            left: std::sync::atomic::AtomicUsize::new(runs),
            panicked: AtomicBool::new(false),
        }
    }

    /// Runs `exec` over `tasks`; a panic fails the request with [`Error::TaskPanicked`]
    /// instead of unwinding into the worker or the caller.
    fn run(&self, exec: &dyn Executor, tasks: &Tasks, done: &Completion) {
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
    fn end(&self, done: &Completion) {
        let last = self.left.fetch_sub(1, Ordering::AcqRel) == 1;
        if last && self.panicked.load(Ordering::SeqCst) {
            done.finish_rest();
        }
    }
}

/// A panic's message, as `panic!` formatted it.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

/// Resolves the caller's memory: a device address is classified by CUDA (a pinned host address
/// takes the host path); a range past its allocation is refused, pinned host memory included.
/// `known`: the caller's classification of an address in the same allocation, used when it
/// covers `addr` (asking the driver again costs a `cuPointerGetAttributes` per request).
fn resolve(buffer: Buffer, known: Option<cuda::PointerInfo>) -> Result<Target> {
    let (addr, len) = match buffer {
        Buffer::Host { ptr, .. } => return Ok(Target::Host(SendPtr(ptr))),
        Buffer::Device { addr, len } => (addr, len),
    };
    let covers = |i: &cuda::PointerInfo| {
        matches!(i.kind, MemoryKind::Device | MemoryKind::Managed)
            && addr >= i.base
            && addr - i.base < i.size as u64
    };
    let info = match known.filter(covers) {
        Some(i) => i,
        None => cuda::classify(addr)?,
    };
    match info.kind {
        MemoryKind::Host => Err(Error::InvalidArgument(format!(
            "address {addr:#x} is not GPU memory CUDA knows of"
        ))),
        MemoryKind::PinnedHost => {
            // CUDA gives the range of page-locked allocations too (cuMemHostAlloc and
            // cuMemHostRegister); where it gives none, or a range in another address space than
            // the pointer's, there is nothing to check against.
            let known = info.size > 0 && addr >= info.base && addr - info.base < info.size as u64;
            if known {
                within_allocation(addr, len, info.base, info.size)?;
            }
            Ok(Target::Host(SendPtr(addr as *mut u8)))
        }
        MemoryKind::Device | MemoryKind::Managed => {
            within_allocation(addr, len, info.base, info.size)?;
            let device = info.device.unwrap_or(0);
            let ctx = match info.context {
                Some(c) => c,
                None => cuda::primary_context(device)?,
            };
            Ok(Target::Device {
                device: DeviceTarget { addr, ctx, device },
                base: info.base,
            })
        }
    }
}

/// `exec`, made to wait first for the work queued on `after` (where the request names a
/// stream) until now: the stream is marked here, on the submitting thread, so that the runs
/// wait for that work only, and never use the producer's stream handle, which may be gone by
/// the time a run starts.
fn after_stream(
    exec: Arc<dyn Executor>,
    after: Option<cuda::StreamWait>,
) -> Result<Arc<dyn Executor>> {
    Ok(match after.map(|w| w.mark()).transpose()?.flatten() {
        Some(mark) => Arc::new(AfterStream { mark, inner: exec }),
        None => exec,
    })
}

/// Refuses `len` bytes at `addr` that run past the allocation of `size` bytes at `base`.
fn within_allocation(addr: u64, len: usize, base: u64, size: usize) -> Result<()> {
    let end = base.saturating_add(size as u64);
    if addr < base || addr.checked_add(len as u64).is_none_or(|e| e > end) {
        return Err(Error::InvalidArgument(format!(
            "{len} bytes at {addr:#x} run past the end of their allocation ({size} bytes at \
             {base:#x})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod resolve_tests;

#[cfg(test)]
mod range_tests;

#[cfg(test)]
mod batch_tests;

#[cfg(test)]
mod endpoint_tests;

#[cfg(test)]
mod panic_tests;
