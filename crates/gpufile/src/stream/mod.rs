//! Stream-ordered requests (KvikIO's `raw_read_async` / `raw_write_async`): a request queued on
//! an application's CUDA stream starts once the work queued on the stream before it has
//! finished, the work queued on the stream after it waits for what it needs of it, and the call
//! that queues it returns at once.
//!
//! How to use:
//! 1. [`ordering_for`] a device (or [`choose`], a pure function of what the driver offers) says
//!    how the stream's later work will wait: a [`StreamOrdering`], with its reason.
//! 2. [`submit`] queues the request on the stream and returns its [`IoFuture`] at once. What is
//!    known at the call (the handle's mode, a read past the end of the file) fails the call;
//!    errors found when the stream gets there (the file shrank, a failed `pread`) end the future.
//!
//! How it works. Every GPU operation of a request goes on the application's stream itself, and
//! gpufile's own part is host work only, which makes no CUDA call. That is what keeps it free
//! of deadlocks: while a stream waits for gpufile, the application may do anything that waits
//! for the whole context (CUDA loads a kernel's module on its first launch and synchronizes the
//! context to do it; `cudaFree`; a device synchronize), and such a wait, holding the driver,
//! would block a CUDA call of gpufile's that the stream's wait depends on: a write staged on a
//! stream of gpufile's own, with a kernel launched for the first time behind it, waits for ever
//! (docs/async.md, "Stream-ordered transfers", tells the case).
//!
//! - A read into device memory reads the file into pinned staging memory, then the stream copies
//!   it to the destination. A host function (`cuLaunchHostFunc`) queued on the stream hands the
//!   host read to gpufile's launcher thread when the stream reaches it (a host function may make
//!   no CUDA call, so it only hands over); the file is looked at when the stream gets there, not
//!   when the call was made. The stream then waits for the host read's end in one of two ways
//!   ([`StreamOrder`]), then copies the staging to the destination, then a last host function
//!   ends the future:
//!   - `WaitValue`: `cuStreamWaitValue32` on a flag in pinned, device-mapped memory that gpufile
//!     sets when the host read ends. Nothing blocks: neither the caller nor the driver's thread.
//!   - `HostFunction`: the host function blocks until the host read ends (where the driver
//!     lacks stream memory operations). The driver may run the host functions of several
//!     streams on one thread, so such requests of different streams may run one after another.
//! - A write from device memory (`Staged`): the stream copies the source into pinned staging
//!   memory, then a host function hands the file write to the launcher. The stream's later work
//!   follows the copy, not the file write: it may change the source at once. The future ends
//!   when the file write has.
//! - A request on host memory needs no staging: the host read or write runs where the stream
//!   reaches its host function, and the stream waits for its end as for a read.
//!
//! The requests queued on one stream reach the file in their order: each waits for the staged
//! writes queued before it on the same stream (whose file writes the stream does not wait for).
//! Staging comes from a pool of pinned buffers that is never freed while the process runs
//! (freeing pinned memory synchronizes the device: it would wait for the very streams that wait
//! for gpufile), at most [`STAGING_MAX`] bytes in all. Where a request cannot be queued this way
//! (more staging than that, no driver, no `cuLaunchHostFunc`), the calling thread waits for the
//! stream, then for the request (`CallerWaits`), and the reason says why.
//!
//! What is known when the call is made fails the call, with nothing queued: the handle's mode,
//! and a read past the end of the file as it is then (unless a write queued earlier on the same
//! stream may still make the file longer). A read whose host part fails later (the file shrank
//! before the stream got there, a failed `pread`) still lets the stream go, and leaves every
//! byte of the destination that it did not read as it was: the stream copies the destination's
//! ranges into the staging before the host read (the restore copy), so the copy back writes
//! the old bytes where the read wrote none. The future holds the error.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use crate::cuda::{self, Context, StreamCopy};
use crate::error::{Error, Result};
use crate::future::{lock, Completion};
use crate::request::{Buffer, Direction, Range, Ranges};
use crate::source::Endpoint;
use crate::{Engine, IoFuture, Request, Settings};

mod order;
mod release;
mod staging;

pub use order::{choose, ordering_for, StreamOrder, StreamOrdering};
use order::{order_for_request, unable};
use release::{Flag, Gate, Release};
use staging::Staging;
pub use staging::STAGING_MAX;

/// Where a stream-ordered request is queued.
#[derive(Clone, Copy, Debug)]
pub struct OnStream {
    /// The stream handle (0 and 1: the legacy default stream; 2: this thread's default stream).
    pub handle: u64,
    /// The stream's context and device ordinal; `None` where there is no CUDA driver (the
    /// request then runs at once, the caller waiting).
    pub device: Option<(Context, i32)>,
}

/// Queues `req` on `stream` (see the module's header) and returns its future at once, with how
/// the stream waits for it; `prefer` asks for an order (for tests; `None`: the device's best).
///
/// The stream is used only during this call. A failure to queue on the stream is an error of
/// the call, and nothing was queued; every error of the request itself ends the future.
///
/// # Safety
/// As [`Engine::submit`]: the request's buffer must stay valid, and untouched by others, until
/// the returned future is done, which may be long after this returns (when the stream has
/// reached the request and it has run); `stream.handle` must be a live stream of its context.
pub unsafe fn submit(
    engine: &Arc<Engine>,
    endpoint: Endpoint,
    req: Request,
    settings: Arc<Settings>,
    stream: OnStream,
    prefer: Option<StreamOrder>,
) -> Result<(IoFuture, StreamOrdering)> {
    let req = req.after(None).caller_waits(false);
    let base = match (stream.device, prefer) {
        (Some((_, ordinal)), None) => ordering_for(ordinal),
        (device, _) => {
            let support = match device {
                Some((_, ordinal)) => cuda::stream_ops_support(ordinal).map_err(|e| e.to_string()),
                None => Err("none loaded".to_owned()),
            };
            choose(support, prefer)?
        }
    };
    let write = req.direction == Direction::Write;
    let device = matches!(req.buffer, Buffer::Device { .. });
    let mut ordering = order_for_request(base, prefer.is_some(), write, device)?;
    // What is known now fails the call, before anything is queued: the handle's mode, and a
    // read past the end of the file as it is now, unless a write queued earlier on the same
    // stream may still make the file longer before the stream gets there.
    let sure_now = !write
        && stream
            .device
            .is_none_or(|_| last_write(stream.handle).is_none());
    match sure_now {
        true => endpoint.check(&req.ranges)?,
        false => endpoint.check(&Ranges::NONE)?,
    }
    let mut staging = None;
    if let (Some((_, ordinal)), true, false) = (
        stream.device,
        device,
        ordering.order == StreamOrder::CallerWaits,
    ) {
        match Staging::take(req.buffer.len(), ordinal)? {
            Some(s) => staging = Some(s),
            None if prefer.is_some() => {
                return Err(unable(prefer, &staging_full(req.buffer.len())));
            }
            None => {
                ordering =
                    StreamOrdering::new(StreamOrder::CallerWaits, staging_full(req.buffer.len()))
            }
        }
    }
    let Some((ctx, _)) = stream.device else {
        let job = Job::new(engine, endpoint, req, settings, None);
        return Ok((job.run_here(), ordering));
    };
    let on = Queued {
        handle: stream.handle,
        ctx,
    };
    if ordering.order == StreamOrder::CallerWaits {
        cuda::synchronize_stream(stream.handle, ctx)?;
        // The stream's staged writes are past the stream but perhaps not in the file yet.
        if let Some(write) = on.last_write() {
            let _ = IoFuture::pending(write).wait();
        }
        let job = Job::new(engine, endpoint, req, settings, None);
        return Ok((job.run_here(), ordering));
    }
    let fut = match staging {
        Some(staging) if write => {
            on.staged_write(engine, endpoint, req, settings, staging, &mut ordering)?
        }
        Some(staging) => on.staged_read(engine, endpoint, req, settings, staging, &mut ordering)?,
        None => on.host(engine, endpoint, req, settings, &mut ordering)?,
    };
    Ok((fut, ordering))
}

fn staging_full(len: usize) -> String {
    format!(
        "the caller waits: {len} bytes of pinned staging are not to be had within the \
         {STAGING_MAX} bytes that stream-ordered requests keep"
    )
}

/// The stream a request is queued on.
struct Queued {
    handle: u64,
    ctx: Context,
}

impl Queued {
    /// A request on host memory: the host function hands it over, the stream waits for its end.
    fn host(
        &self,
        engine: &Arc<Engine>,
        endpoint: Endpoint,
        req: Request,
        settings: Arc<Settings>,
        ordering: &mut StreamOrdering,
    ) -> Result<IoFuture> {
        let write = req.direction == Direction::Write;
        let job = Job::new(engine, endpoint, req, settings, self.last_write());
        let (fut, proxy) = self.queue_waited(job, ordering)?;
        if write {
            self.remember_write(proxy);
        }
        Ok(fut)
    }

    /// A read into device memory: the host read into staging (the stream waiting for it), the
    /// stream's copies to the destination, and a host function that ends the future.
    fn staged_read(
        &self,
        engine: &Arc<Engine>,
        endpoint: Endpoint,
        req: Request,
        settings: Arc<Settings>,
        staging: Staging,
        ordering: &mut StreamOrdering,
    ) -> Result<IoFuture> {
        let Buffer::Device { addr, .. } = req.buffer else {
            unreachable!("staged only for device memory")
        };
        let ranges: Vec<Range> = req.ranges.as_slice().to_vec();
        // The restore copy: the stream first copies the destination's ranges into the staging,
        // so that the copy back after the host read leaves every byte the read did not write as
        // it was, whatever part of the read fails. (The copy back cannot be skipped or cut short
        // by the host part: its length is fixed when it is queued, and the host part may make
        // no CUDA call; see docs/async.md for what this costs.)
        self.copy_into_staging(addr, &ranges, &staging)?;
        let host_req = staging.request(&req);
        let job = Job::new(engine, endpoint, host_req, settings, self.last_write());
        let (read, read_done) = match self.queue_waited(job, ordering) {
            Ok(queued) => queued,
            Err(e) => {
                // The restore copies may still run into the staging: wait for them before it
                // goes back to the pool.
                cuda::synchronize_stream(self.handle, self.ctx).ok();
                drop(staging);
                return Err(e);
            }
        };
        let user = Completion::new(1, |_| {});
        let copied = (|| {
            for r in &ranges {
                let copy = StreamCopy::ToDevice {
                    dst: addr + r.buf_offset as u64,
                    // SAFETY: the range lies in the staging buffer, which mirrors the request's
                    // buffer and holds buffer.len() bytes.
                    src: unsafe { staging.ptr().add(r.buf_offset) },
                    len: r.len,
                };
                // SAFETY: the staging stays valid and unchanged until the future ends (after the
                // host function below); the destination is the caller's, valid until then.
                unsafe { cuda::copy_on_stream(self.handle, self.ctx, copy) }?;
            }
            Ok(())
        })();
        let end = Ended {
            read: Arc::clone(&read_done),
            user: Arc::clone(&user),
            staging: Some(staging),
            copy_error: copied.err(),
        };
        if end.copy_error.is_some() {
            // Nothing more is queued: the read still runs when the stream gets there; the
            // caller waits for it, so that the staging goes back only once nothing uses it.
            let _ = read.wait();
            cuda::synchronize_stream(self.handle, self.ctx).ok();
            end.run();
            return Ok(IoFuture::pending(user));
        }
        let data = Box::into_raw(Box::new(end)).cast::<c_void>();
        // SAFETY: `on_copied` makes no CUDA call and takes the box back exactly once; on an
        // error the driver never calls it, and the box is taken back here.
        if let Err(e) = unsafe { cuda::launch_host_func(self.handle, self.ctx, on_copied, data) } {
            // SAFETY: not handed to the driver: this is the only owner.
            let end = unsafe { Box::from_raw(data.cast::<Ended>()) };
            // The copies are queued: wait for them here, then end the future.
            let _ = read.wait();
            cuda::synchronize_stream(self.handle, self.ctx).ok();
            *ordering = StreamOrdering::new(
                StreamOrder::CallerWaits,
                format!(
                    "cuLaunchHostFunc failed after the copies were queued ({e}): the caller waited"
                ),
            );
            end.run();
        }
        Ok(IoFuture::pending(user))
    }

    /// A write from device memory: the stream copies the source into staging, then hands the
    /// file write over; the stream does not wait for it.
    fn staged_write(
        &self,
        engine: &Arc<Engine>,
        endpoint: Endpoint,
        req: Request,
        settings: Arc<Settings>,
        staging: Staging,
        ordering: &mut StreamOrdering,
    ) -> Result<IoFuture> {
        let Buffer::Device { addr, .. } = req.buffer else {
            unreachable!("staged only for device memory")
        };
        // Before any copy is queued: a failure after would leave a copy writing into staging
        // that went back to the pool.
        let sender = launcher()?;
        self.copy_into_staging(addr, req.ranges.as_slice(), &staging)?;
        let host_req = staging.request(&req);
        let mut job = Job::new(engine, endpoint, host_req, settings, self.last_write());
        job.staging = Some(staging);
        let proxy = Completion::new(1, |_| {});
        let reached = Box::new(Reached {
            job,
            proxy: Arc::clone(&proxy),
            release: Release::None,
            sender,
            gate: None,
        });
        let data = Box::into_raw(reached).cast::<c_void>();
        // SAFETY: `on_reached` makes no CUDA call and takes back the box exactly once; on an
        // error the driver never calls it, and the box is taken back here.
        if let Err(e) = unsafe { cuda::launch_host_func(self.handle, self.ctx, on_reached, data) } {
            // SAFETY: not handed to the driver: this is the only owner.
            let reached = unsafe { Box::from_raw(data.cast::<Reached>()) };
            // The copies are queued: the write runs once they are done, from this thread.
            cuda::synchronize_stream(self.handle, self.ctx).ok();
            *ordering = StreamOrdering::new(
                StreamOrder::CallerWaits,
                format!(
                    "cuLaunchHostFunc failed after the copy was queued ({e}): the caller \
                         waited for the copy"
                ),
            );
            reached.launch();
        }
        self.remember_write(Arc::clone(&proxy));
        Ok(IoFuture::pending(proxy))
    }

    /// Queues `job` behind a host function and a wait of the stream for its end (a flag, or a
    /// blocking host function). The future and the completion behind it.
    fn queue_waited(
        &self,
        job: Job,
        ordering: &mut StreamOrdering,
    ) -> Result<(IoFuture, Arc<Completion>)> {
        match ordering.order {
            StreamOrder::WaitValue => match Flag::take(self.ctx) {
                Ok(flag) => {
                    let target = (flag.dev, flag.target);
                    let (fut, proxy) = job.queue(self, Release::Flag(flag))?;
                    // SAFETY: the flag's page is never freed; the stream is the caller's live
                    // one.
                    let waited = unsafe {
                        cuda::stream_wait_value32(self.handle, self.ctx, target.0, target.1)
                    };
                    if let Err(e) = waited {
                        // The request is queued: wait for it here, so that later work still
                        // follows.
                        fut.wait().ok();
                        *ordering = StreamOrdering::new(
                            StreamOrder::CallerWaits,
                            format!("cuStreamWaitValue32 failed ({e}): the caller waited"),
                        );
                    }
                    Ok((fut, proxy))
                }
                Err(e) => {
                    *ordering = StreamOrdering::new(
                        StreamOrder::HostFunction,
                        format!(
                            "no flag for cuStreamWaitValue32 ({e}): a host function on the \
                             stream blocks until the transfer ends"
                        ),
                    );
                    job.queue(self, Release::Gate(Arc::default()))
                }
            },
            _ => job.queue(self, Release::Gate(Arc::default())),
        }
    }

    /// Queues on the stream the copies of `ranges` of the device memory at `addr` into the same
    /// places of `staging`. On an error, waits for the copies queued before it (they write into
    /// the staging) so that the caller may give the staging back.
    fn copy_into_staging(&self, addr: u64, ranges: &[Range], staging: &Staging) -> Result<()> {
        for r in ranges {
            let copy = StreamCopy::ToHost {
                // SAFETY: the range lies in the staging buffer (buffer.len() bytes).
                dst: unsafe { staging.ptr().add(r.buf_offset) },
                src: addr + r.buf_offset as u64,
                len: r.len,
            };
            // SAFETY: nobody else touches the staging until the request ends; the source is
            // the caller's device memory, valid until the future ends.
            if let Err(e) = unsafe { cuda::copy_on_stream(self.handle, self.ctx, copy) } {
                cuda::synchronize_stream(self.handle, self.ctx).ok();
                return Err(e);
            }
        }
        Ok(())
    }

    /// The last write queued on this stream, while it has not ended.
    fn last_write(&self) -> Option<Arc<Completion>> {
        last_write(self.handle)
    }

    /// Makes `write` the one the stream's later requests wait for.
    fn remember_write(&self, write: Arc<Completion>) {
        let mut writes = lock(&LAST_WRITES);
        let writes = writes.get_or_insert_with(HashMap::new);
        writes.retain(|_, c| !c.is_done());
        writes.insert(self.handle, write);
    }
}

/// Per stream handle, the last write queued on it, while it has not ended: the stream's later
/// requests start after it, so that they see its bytes in the file (a staged write's file write
/// is not waited for by the stream), and a read queued after it is not refused at the call for
/// a file that the write will make longer. Writes of one stream end in their order.
static LAST_WRITES: Mutex<Option<HashMap<u64, Arc<Completion>>>> = Mutex::new(None);

/// The last write queued on stream `handle`, while it has not ended ([`LAST_WRITES`]).
fn last_write(handle: u64) -> Option<Arc<Completion>> {
    let writes = lock(&LAST_WRITES);
    writes
        .as_ref()
        .and_then(|w| w.get(&handle))
        .filter(|c| !c.is_done())
        .cloned()
}

/// What the launcher submits.
struct Job {
    engine: Arc<Engine>,
    endpoint: Endpoint,
    /// Its raw addresses stay valid: the caller of [`submit`] keeps the buffer until the
    /// future is done.
    req: Request,
    settings: Arc<Settings>,
    /// A write queued before it on the same stream, which it starts after.
    after: Option<Arc<Completion>>,
    /// A staged write's staging, back to the pool when the write has ended.
    staging: Option<Staging>,
}

impl Job {
    fn new(
        engine: &Arc<Engine>,
        endpoint: Endpoint,
        req: Request,
        settings: Arc<Settings>,
        after: Option<Arc<Completion>>,
    ) -> Self {
        Job {
            engine: Arc::clone(engine),
            endpoint,
            req,
            settings,
            after,
            staging: None,
        }
    }

    /// Submits now, on this thread, and waits: the future comes back done.
    fn run_here(self) -> IoFuture {
        let req = self.req.caller_waits(true);
        // SAFETY: the caller of `submit` keeps the buffer valid until the future is done.
        let fut = unsafe { self.engine.submit(&self.endpoint, req, &self.settings) };
        let fut = fut.unwrap_or_else(|e| IoFuture::ready(Err(e)));
        let _ = fut.wait();
        fut
    }

    /// Queues a host function on the stream that hands the job to the launcher when the stream
    /// reaches it; `release` lets the stream's later work go once the request has ended.
    fn queue(self, on: &Queued, release: Release) -> Result<(IoFuture, Arc<Completion>)> {
        let proxy = Completion::new(1, |_| {});
        let sender = launcher()?;
        let gate = match &release {
            Release::Gate(g) => Some(Arc::clone(g)),
            Release::Flag(_) | Release::None => None,
        };
        let reached = Box::new(Reached {
            job: self,
            proxy: Arc::clone(&proxy),
            release,
            sender,
            gate,
        });
        let data = Box::into_raw(reached).cast::<c_void>();
        // SAFETY: `on_reached` makes no CUDA call and takes back the box exactly once; on an
        // error the driver never calls it, and the box is taken back here.
        if let Err(e) = unsafe { cuda::launch_host_func(on.handle, on.ctx, on_reached, data) } {
            // SAFETY: not handed to the driver: this is the only owner.
            let reached = unsafe { Box::from_raw(data.cast::<Reached>()) };
            // Nothing was queued: the staging (dropped with the box) goes back unused.
            reached.release.signal();
            return Err(e);
        }
        Ok((IoFuture::pending(Arc::clone(&proxy)), proxy))
    }
}

/// A queued request, as its host function finds it.
struct Reached {
    job: Job,
    proxy: Arc<Completion>,
    release: Release,
    sender: Sender<Msg>,
    /// The gate a blocking host function waits on (HostFunction).
    gate: Option<Arc<Gate>>,
}

impl Reached {
    /// Submits the request (on the launcher thread, or after the stream's earlier write) and
    /// arranges its end.
    fn launch(mut self: Box<Self>) {
        if let Some(before) = self.job.after.take() {
            let sender = self.sender.clone();
            // The earlier write's end sends this back to the launcher (never run on the
            // thread that ends that write, which may be a worker).
            before.on_done(move || {
                if let Err(back) = sender.send(Msg::Launch(self)) {
                    if let Msg::Launch(r) = back.0 {
                        r.end(Err(Error::Closed));
                    }
                }
            });
            return;
        }
        if self.proxy.stopped() {
            return self.end(Err(Error::Cancelled));
        }
        let Reached {
            job,
            proxy,
            release,
            ..
        } = *self;
        let Job {
            engine,
            endpoint,
            req,
            settings,
            staging,
            ..
        } = job;
        // SAFETY: the caller of `submit` keeps the buffer valid until the proxy is done, which
        // is after this request's future is; staging is owned here until then.
        match unsafe { engine.submit(&endpoint, req, &settings) } {
            Err(e) => finish(release, &proxy, staging, Err(e)),
            Ok(fut) => {
                let fut = Arc::new(fut);
                let ended = Arc::clone(&fut);
                fut.on_done(move || finish(release, &proxy, staging, ended.wait()));
            }
        }
    }

    /// Ends the request without running it.
    fn end(self: Box<Self>, result: Result<usize>) {
        let Reached {
            job,
            proxy,
            release,
            ..
        } = *self;
        finish(release, &proxy, job.staging, result);
    }
}

/// The end of a stream-ordered request's host part: the stream's later work is let go, then
/// the future ends (so a caller that saw it done knows the stream is free to go on), then a
/// staged write's staging goes back.
fn finish(release: Release, proxy: &Completion, staging: Option<Staging>, result: Result<usize>) {
    release.signal();
    proxy.finish_task(result);
    drop(staging);
}

/// A staged read, once the stream has copied its staging to the destination.
struct Ended {
    read: Arc<Completion>,
    user: Arc<Completion>,
    staging: Option<Staging>,
    copy_error: Option<Error>,
}

impl Ended {
    /// Ends the user's future with the read's result (or the copy's error) once the read's
    /// completion has counted down, and gives the staging back.
    fn run(mut self) {
        let read = Arc::clone(&self.read);
        read.on_done(move || {
            let result = match self.copy_error.take() {
                Some(e) => Err(e),
                None => IoFuture::pending(Arc::clone(&self.read)).wait(),
            };
            // The stream has copied it (or the caller waited for the stream): back to the pool.
            drop(self.staging.take());
            self.user.finish_task(result);
        });
    }
}

/// The host function queued after a staged read's copies.
unsafe extern "C" fn on_copied(data: *mut c_void) {
    // SAFETY: `data` is the box `staged_read` leaked for this one call.
    let end = unsafe { Box::from_raw(data.cast::<Ended>()) };
    // No panic may unwind into the driver; the future's callbacks run on the launcher, never
    // on the driver's thread (they may make CUDA calls).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        if let Ok(sender) = launcher() {
            if let Err(back) = sender.send(Msg::Ended(end)) {
                if let Msg::Ended(end) = back.0 {
                    end.run();
                }
            }
        }
    }));
}

/// The host function queued on the stream.
unsafe extern "C" fn on_reached(data: *mut c_void) {
    // SAFETY: `data` is the box `Job::queue` leaked for this one call.
    let reached = unsafe { Box::from_raw(data.cast::<Reached>()) };
    // No panic may unwind into the driver.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let gate = reached.gate.clone();
        let sender = reached.sender.clone();
        if let Err(back) = sender.send(Msg::Launch(reached)) {
            if let Msg::Launch(r) = back.0 {
                r.end(Err(Error::Closed));
            }
            return;
        }
        if let Some(gate) = gate {
            gate.wait();
        }
    }));
}

/// What the launcher thread is handed.
enum Msg {
    /// A request the stream has reached (or whose earlier write has ended).
    Launch(Box<Reached>),
    /// A staged read whose copies the stream has done.
    Ended(Box<Ended>),
}

/// The launcher thread's queue (started on first use).
fn launcher() -> Result<Sender<Msg>> {
    static LAUNCHER: OnceLock<std::result::Result<Mutex<Sender<Msg>>, String>> = OnceLock::new();
    let started = LAUNCHER.get_or_init(|| {
        let (tx, rx) = channel::<Msg>();
        std::thread::Builder::new()
            .name("gpufile-stream".into())
            .spawn(move || {
                rx.into_iter().for_each(|m| match m {
                    Msg::Launch(r) => r.launch(),
                    Msg::Ended(e) => e.run(),
                })
            })
            .map(|_| Mutex::new(tx))
            .map_err(|e| e.to_string())
    });
    match started {
        Ok(tx) => Ok(lock(tx).clone()),
        Err(e) => Err(Error::InvalidArgument(format!(
            "cannot start gpufile's stream launcher thread: {e}"
        ))),
    }
}
