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
use std::time::Duration;

use crate::config::{self, Input, Name, Origin, Settings, Value};
use crate::error::{Error, Result};
use crate::exec::bounce::BouncePool;
use crate::exec::dma::DmaCache;
use crate::future::{lock, IoFuture};
use crate::plan::{self, Dma, HostIo, HostIoReason, IoPath};
use crate::pool::ThreadPool;
use crate::request::Request;
use crate::source::Endpoint;

mod batch;
mod launch;
mod planning;
pub(crate) mod shared_writes;
mod watch;

use planning::Prepared;

/// A gather's host I/O under `settings` (`plan::choose_host_io`, with the kernel probed once
/// per process); `pread` while fault injection is on, whose seam io_uring would bypass.
pub fn host_io(settings: &Settings, local_file: bool) -> HostIo {
    plan::choose_host_io(settings.io_uring, local_file, io_uring)
}

/// Whether io_uring can gather here: the kernel probed once per process by its executor; not
/// while fault injection is on, whose `pread`/`pwrite` seam io_uring would bypass. The engine
/// answers this for planning, which names no executor.
fn io_uring() -> std::result::Result<String, HostIoReason> {
    match crate::posix::faults::active() {
        true => Err(HostIoReason::FaultInjection),
        false => crate::exec::uring::probe(),
    }
}

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
    /// For a gathered device read: whether the GPU copies ranges in registered page cache
    /// itself (gpufile's gather kernel), or why not; `None` for other requests.
    pub gather_dma: Option<Dma>,
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

    /// Changes default settings (all or nothing); a bad value is an [`Error::InvalidSetting`],
    /// and one of [`Name::FIXED_ONCE_REMOTE_IO_STARTS`] after the first remote read under
    /// MULTI_POLL ([`config::remote_io_started`]) an [`Error::SettingFixed`].
    pub fn set(&self, updates: &[(Name, Input<'_>)]) -> Result<()> {
        if config::remote_io_started() {
            if let Some((name, _)) = updates
                .iter()
                .find(|(n, _)| n.fixed_once_remote_io_starts())
            {
                return Err(Error::SettingFixed {
                    name: name.as_str(),
                });
            }
        }
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

    /// Called by a remote source as each read runs: the first under the default
    /// `remote_io_backend` MULTI_POLL fixes KvikIO's reactor settings
    /// (`config::note_remote_read`).
    pub fn note_remote_read(&self) {
        if !config::remote_io_started() {
            config::note_remote_read(self.shared_settings().remote_io_backend);
        }
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

    /// Bytes of page cache registered for DMA now (see `crate::exec::dma`).
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

    /// Starts `req` on `endpoint` (a local file, a mapping, a remote object, any source or
    /// sink) under `settings`: checked, planned ([`crate::plan::plan_request`]), then run by the
    /// executor its plan names. A request whose caller waits at once
    /// ([`Request::caller_waits`]) may run on the calling thread, or take a share of its tasks
    /// (see `crate::plan::CallerPart`); its future then comes back done, or sooner done.
    ///
    /// Argument errors (reading past the end of the file, a write-only handle, a device range
    /// past its allocation, compat_mode OFF without cuFile) come back before any byte moves.
    ///
    /// # Safety
    /// The request's buffer must be valid for its length (writable for a read) until the
    /// returned future is done (waited on or seen done), and nothing else may write it meanwhile
    /// (nor read it, for a read). A `pointer_info` must be what [`crate::cuda::classify`] says of an
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
        let asked = watch::Asked::of(&req);
        let prepared = match self.prepare(endpoint, req, settings, report, true, false) {
            Ok(p) => p,
            Err(e) => {
                if let Some(asked) = asked {
                    asked.refused(endpoint, &e);
                }
                return Err(e);
            }
        };
        // SAFETY: the caller's contract.
        unsafe { self.launch(prepared, settings) }
    }
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
