//! Stream-ordered requests (KvikIO's `raw_read_async` / `raw_write_async`): a request queued on
//! an application's CUDA stream starts once the work queued on the stream before it has
//! finished, the work queued on the stream after it waits for its end, and the call that queues
//! it returns at once.
//!
//! How to use:
//! 1. [`ordering_for`] a device (or [`choose`], a pure function of what the driver offers) says
//!    how the stream's later work will wait: a [`StreamOrdering`], with its reason.
//! 2. [`submit`] queues the request on the stream and returns its [`IoFuture`] at once. Errors of
//!    the request itself (past the end of the file as it is when the stream gets there, a failed
//!    `pread`) end that future; they never fail the call.
//!
//! How it works. A host function (`cuLaunchHostFunc`) queued on the stream hands the request to
//! gpufile's launcher thread when the stream reaches it (a host function may make no CUDA call,
//! so it only hands over); the launcher submits it to the engine, so the file is looked at when
//! the stream gets there, not when the call was made. The stream's later work waits for the
//! request's end in one of two ways ([`StreamOrder`]):
//! - `WaitValue`: `cuStreamWaitValue32` on a flag in pinned, device-mapped memory that gpufile
//!   sets when the request ends. Nothing blocks: neither the caller nor the driver's thread.
//! - `HostFunction`: the host function blocks until the request has ended (where the driver
//!   lacks stream memory operations). The driver may run the host functions of several streams
//!   on one thread, so such requests of different streams may run one after another.
//!
//! Where neither can run (a write, whose staging was seen to deadlock behind the stream's wait;
//! no driver, no `cuLaunchHostFunc`, or a cuFile transfer on a stream that the legacy default
//! stream orders, where cuFile's own copies could queue behind the wait), the calling thread
//! waits for the stream, then for the request (`CallerWaits`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::cuda::{self, Context, PinnedBuffer, StreamOpsSupport};
use crate::error::{Error, Result};
use crate::future::{lock, Completion};
use crate::plan::Backend;
use crate::request::Direction;
use crate::source::Endpoint;
use crate::{Engine, IoFuture, Request, Settings};

/// How the work queued on a stream after a stream-ordered request waits for its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamOrder {
    /// `cuStreamWaitValue32` on a flag gpufile sets when the request ends.
    WaitValue,
    /// A host function on the stream blocks until the request ends.
    HostFunction,
    /// The calling thread waits for the stream, then for the request.
    CallerWaits,
}

impl StreamOrder {
    /// The name shown in reports (`"wait-value"`, `"host-function"`, `"caller-waits"`).
    pub fn as_str(self) -> &'static str {
        match self {
            StreamOrder::WaitValue => "wait-value",
            StreamOrder::HostFunction => "host-function",
            StreamOrder::CallerWaits => "caller-waits",
        }
    }

    /// The order a name says, `None` for an unknown name.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::WaitValue, Self::HostFunction, Self::CallerWaits]
            .into_iter()
            .find(|o| o.as_str() == name)
    }
}

impl std::fmt::Display for StreamOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The decision for a stream-ordered request: how, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOrdering {
    /// How the stream waits.
    pub order: StreamOrder,
    /// Why this way.
    pub reason: String,
}

impl StreamOrdering {
    fn new(order: StreamOrder, reason: impl Into<String>) -> Self {
        StreamOrdering {
            order,
            reason: reason.into(),
        }
    }
}

/// How stream-ordered requests wait, given what the driver offers (`Err`: no usable driver, and
/// why) and an order asked for (`prefer`; an order the driver cannot do is an error).
pub fn choose(
    support: std::result::Result<StreamOpsSupport, String>,
    prefer: Option<StreamOrder>,
) -> Result<StreamOrdering> {
    use StreamOrder::*;
    let s = match support {
        Ok(s) => s,
        Err(_) if prefer.is_some_and(|p| p != CallerWaits) => {
            return Err(unable(prefer, "there is no CUDA driver"))
        }
        Err(why) => {
            return Ok(StreamOrdering::new(
                CallerWaits,
                format!("no CUDA driver ({why}): nothing can be queued on a stream"),
            ))
        }
    };
    let (major, minor) = s.driver;
    let wait_value =
        if !s.mapped_memory {
            Err("the driver has no cuMemHostGetDevicePointer".to_owned())
        } else if s.wait_value_v2 && major >= 12 {
            Ok("cuStreamWaitValue32 on a flag gpufile sets (stream memory operations are on every \
            device from CUDA 12)")
        } else if s.wait_value_v1 && s.mem_ops_v1 {
            Ok(
                "cuStreamWaitValue32 on a flag gpufile sets (the device enables stream memory \
            operations)",
            )
        } else {
            Err(format!(
                "stream memory operations are off (driver {major}.{minor}; \
             CAN_USE_STREAM_MEM_OPS_V1 is 0: the nvidia module's NVreg_EnableStreamMemOPs=1 \
             turns them on)"
            ))
        };
    match (prefer, s.host_func, wait_value) {
        (Some(CallerWaits), ..) => Ok(StreamOrdering::new(CallerWaits, "asked for")),
        (_, false, _) if prefer.is_some() => {
            Err(unable(prefer, "the driver has no cuLaunchHostFunc"))
        }
        (_, false, _) => Ok(StreamOrdering::new(
            CallerWaits,
            format!("the driver ({major}.{minor}) has no cuLaunchHostFunc"),
        )),
        (Some(HostFunction), true, _) => Ok(StreamOrdering::new(HostFunction, "asked for")),
        (Some(WaitValue), true, Err(why)) => Err(unable(prefer, &why)),
        (_, true, Ok(how)) => Ok(StreamOrdering::new(WaitValue, how)),
        (_, true, Err(why)) => Ok(StreamOrdering::new(
            HostFunction,
            format!("{why}: a host function on the stream blocks until the transfer ends"),
        )),
    }
}

fn unable(prefer: Option<StreamOrder>, why: &str) -> Error {
    let asked = prefer.map_or("?", StreamOrder::as_str);
    Error::InvalidArgument(format!("stream order {asked} cannot be used here: {why}"))
}

/// How stream-ordered requests on device `ordinal` wait (asked of the driver once per device).
pub fn ordering_for(ordinal: i32) -> StreamOrdering {
    static KNOWN: Mutex<Option<HashMap<i32, StreamOrdering>>> = Mutex::new(None);
    let mut known = lock(&KNOWN);
    let known = known.get_or_insert_with(HashMap::new);
    known
        .entry(ordinal)
        .or_insert_with(|| {
            let support = cuda::stream_ops_support(ordinal).map_err(|e| e.to_string());
            choose(support, None)
                .unwrap_or_else(|e| StreamOrdering::new(StreamOrder::CallerWaits, e.to_string()))
        })
        .clone()
}

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
    let mut ordering = match (stream.device, prefer) {
        (Some((_, ordinal)), None) => ordering_for(ordinal),
        (device, _) => {
            let support = match device {
                Some((_, ordinal)) => cuda::stream_ops_support(ordinal).map_err(|e| e.to_string()),
                None => Err("none loaded".to_owned()),
            };
            choose(support, prefer)?
        }
    };
    if req.direction == Direction::Write && ordering.order != StreamOrder::CallerWaits {
        if prefer.is_some() {
            return Err(unable(prefer, WRITES_WAIT));
        }
        ordering = StreamOrdering::new(StreamOrder::CallerWaits, WRITES_WAIT);
    }
    if let (Some((ctx, _)), StreamOrder::WaitValue | StreamOrder::HostFunction) =
        (stream.device, ordering.order)
    {
        if cufile_behind_legacy_stream(&endpoint, &req, &settings, stream.handle, ctx) {
            ordering = StreamOrdering::new(
                StreamOrder::CallerWaits,
                "a cuFile transfer on a stream the legacy default stream orders: cuFile's own \
                 copies could queue behind the stream's wait",
            );
        }
    }
    let job = Job {
        engine: Arc::clone(engine),
        endpoint,
        req: SendRequest(req),
        settings,
    };
    let Some((ctx, _)) = stream.device else {
        return Ok((job.run_here(), ordering));
    };
    match ordering.order {
        StreamOrder::CallerWaits => {
            cuda::synchronize_stream(stream.handle, ctx)?;
            Ok((job.run_here(), ordering))
        }
        StreamOrder::WaitValue => match Flag::take(ctx) {
            Ok(flag) => {
                let target = (flag.dev, flag.target);
                let fut = job.queue(stream.handle, ctx, Release::Flag(flag))?;
                // SAFETY: the flag's page is never freed; the stream is the caller's live one.
                let waited =
                    unsafe { cuda::stream_wait_value32(stream.handle, ctx, target.0, target.1) };
                if let Err(e) = waited {
                    // The request is queued: wait for it here, so that later work still follows.
                    fut.wait().ok();
                    ordering = StreamOrdering::new(
                        StreamOrder::CallerWaits,
                        format!("cuStreamWaitValue32 failed ({e}): the caller waited"),
                    );
                }
                Ok((fut, ordering))
            }
            Err(e) => {
                let reason = format!(
                    "no flag for cuStreamWaitValue32 ({e}): a host function on the stream blocks \
                     until the transfer ends"
                );
                let fut = job.queue(stream.handle, ctx, Release::Gate(Arc::default()))?;
                Ok((fut, StreamOrdering::new(StreamOrder::HostFunction, reason)))
            }
        },
        StreamOrder::HostFunction => {
            let fut = job.queue(stream.handle, ctx, Release::Gate(Arc::default()))?;
            Ok((fut, ordering))
        }
    }
}

/// Why a stream-ordered write waits for the caller. A write queued behind the stream's wait was
/// seen to deadlock on an H200 (its device-to-host staging never finished while the stream
/// waited for the write's end), where reads queued the same way ran; until the cause is found
/// and tested, a write is ordered the way that cannot deadlock: the caller waits for the stream,
/// then for the write.
const WRITES_WAIT: &str = "a write waits for the caller: the stream is synchronized, then the \
     write runs (a write queued behind the stream's wait could deadlock on its device-to-host \
     staging)";

/// Whether `req` would take cuFile on a stream that the legacy default stream orders.
fn cufile_behind_legacy_stream(
    endpoint: &Endpoint,
    req: &Request,
    settings: &Settings,
    handle: u64,
    ctx: Context,
) -> bool {
    let cufile = Engine::io_path(endpoint, req.buffer.memory(), req.len(), settings)
        .is_ok_and(|p| p.backend == Backend::Cufile);
    cufile && cuda::stream_is_blocking(handle, ctx)
}

/// A request moved to the launcher thread: its raw addresses stay valid because the caller of
/// [`submit`] keeps the buffer until the future is done.
struct SendRequest(Request);
// SAFETY: see above; only the launcher submits it, once.
unsafe impl Send for SendRequest {}

/// What the launcher submits.
struct Job {
    engine: Arc<Engine>,
    endpoint: Endpoint,
    req: SendRequest,
    settings: Arc<Settings>,
}

impl Job {
    /// Submits now, on this thread, and waits: the future comes back done.
    fn run_here(self) -> IoFuture {
        let req = self.req.0.caller_waits(true);
        // SAFETY: the caller of `submit` keeps the buffer valid until the future is done.
        let fut = unsafe { self.engine.submit(&self.endpoint, req, &self.settings) };
        let fut = fut.unwrap_or_else(|e| IoFuture::ready(Err(e)));
        let _ = fut.wait();
        fut
    }

    /// Queues a host function on the stream that hands the job to the launcher when the stream
    /// reaches it; `release` lets the stream's later work go once the request has ended.
    fn queue(self, handle: u64, ctx: Context, release: Release) -> Result<IoFuture> {
        let proxy = Completion::new(1, |_| {});
        let sender = launcher()?;
        let gate = match &release {
            Release::Gate(g) => Some(Arc::clone(g)),
            Release::Flag(_) => None,
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
        if let Err(e) = unsafe { cuda::launch_host_func(handle, ctx, on_reached, data) } {
            // SAFETY: not handed to the driver: this is the only owner.
            let reached = unsafe { Box::from_raw(data.cast::<Reached>()) };
            reached.release.signal();
            return Err(e);
        }
        Ok(IoFuture::pending(proxy))
    }
}

/// A queued request, as its host function finds it.
struct Reached {
    job: Job,
    proxy: Arc<Completion>,
    release: Release,
    sender: Sender<Box<Reached>>,
    /// The gate a blocking host function waits on (HostFunction).
    gate: Option<Arc<Gate>>,
}

impl Reached {
    /// Submits the request (on the launcher thread) and arranges its end.
    fn launch(self: Box<Self>) {
        let Reached {
            job,
            proxy,
            release,
            ..
        } = *self;
        if proxy.stopped() {
            return finish(release, &proxy, Err(Error::Cancelled));
        }
        // SAFETY: the caller of `submit` keeps the buffer valid until the proxy is done, which
        // is after this request's future is.
        match unsafe { job.engine.submit(&job.endpoint, job.req.0, &job.settings) } {
            Err(e) => finish(release, &proxy, Err(e)),
            Ok(fut) => {
                let fut = Arc::new(fut);
                let ended = Arc::clone(&fut);
                fut.on_done(move || finish(release, &proxy, ended.wait()));
            }
        }
    }
}

/// The end of a stream-ordered request: the stream's later work is let go first, then the
/// future ends (so a caller that saw it done knows the stream is free to go on).
fn finish(release: Release, proxy: &Completion, result: Result<usize>) {
    release.signal();
    proxy.finish_task(result);
}

/// The host function queued on the stream.
unsafe extern "C" fn on_reached(data: *mut c_void) {
    // SAFETY: `data` is the box `Job::queue` leaked for this one call.
    let reached = unsafe { Box::from_raw(data.cast::<Reached>()) };
    // No panic may unwind into the driver.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let gate = reached.gate.clone();
        let sender = reached.sender.clone();
        if let Err(back) = sender.send(reached) {
            let r = back.0;
            finish(r.release, &r.proxy, Err(Error::Closed));
            return;
        }
        if let Some(gate) = gate {
            gate.wait();
        }
    }));
}

/// The launcher thread's queue (started on first use).
fn launcher() -> Result<Sender<Box<Reached>>> {
    static LAUNCHER: OnceLock<std::result::Result<Mutex<Sender<Box<Reached>>>, String>> =
        OnceLock::new();
    let started = LAUNCHER.get_or_init(|| {
        let (tx, rx) = channel::<Box<Reached>>();
        std::thread::Builder::new()
            .name("gpufile-stream".into())
            .spawn(move || rx.into_iter().for_each(Reached::launch))
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

/// What lets the stream's later work go.
enum Release {
    Flag(Flag),
    Gate(Arc<Gate>),
}

impl Release {
    fn signal(self) {
        match self {
            Release::Flag(f) => f.set(),
            Release::Gate(g) => g.open(),
        }
    }
}

/// Where a blocking host function waits for the request's end.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn open(&self) {
        *lock(&self.open) = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut open = lock(&self.open);
        while !*open {
            open = self.cv.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One 32-bit flag a stream waits on. Its value only grows: each use waits for one more than
/// the last, so a wait queued by an earlier use (its stream perhaps not there yet) stays
/// satisfied when the flag is reused (`CU_STREAM_WAIT_VALUE_GEQ` compares cyclically).
struct Flag {
    host: usize,
    dev: u64,
    slot: (usize, usize),
    target: u32,
}

/// Flags per pinned page.
const FLAGS_PER_PAGE: usize = 4096 / std::mem::size_of::<u32>();

/// Pinned, device-mapped pages of flags (never freed: a stream may still wait on a flag long
/// after its request ended), and the flags free now with their last value.
struct FlagPages {
    pages: Vec<(PinnedBuffer, u64)>,
    free: Vec<((usize, usize), u32)>,
}

static FLAGS: Mutex<FlagPages> = Mutex::new(FlagPages {
    pages: Vec::new(),
    free: Vec::new(),
});

impl Flag {
    /// A free flag (a new page under `ctx`'s device's primary context when none is free).
    fn take(ctx: Context) -> Result<Flag> {
        let mut flags = lock(&FLAGS);
        if flags.free.is_empty() {
            let primary = cuda::primary_context(cuda::context_device(ctx)?)?;
            let (page, dev) = PinnedBuffer::new_mapped(FLAGS_PER_PAGE * 4, primary)?;
            // SAFETY: a fresh allocation of FLAGS_PER_PAGE u32s, written by nobody yet.
            unsafe { std::ptr::write_bytes(page.as_ptr(), 0, FLAGS_PER_PAGE * 4) };
            let p = flags.pages.len();
            flags.pages.push((page, dev));
            flags
                .free
                .extend((0..FLAGS_PER_PAGE).rev().map(|i| ((p, i), 0)));
        }
        let ((p, i), last) = flags.free.pop().expect("a page was just added");
        let (page, dev) = &flags.pages[p];
        Ok(Flag {
            host: page.as_ptr() as usize + i * 4,
            dev: dev + (i * 4) as u64,
            slot: (p, i),
            target: last.wrapping_add(1),
        })
    }

    /// Sets the flag (the stream's wait is over) and frees it for the next use.
    fn set(self) {
        // SAFETY: the flag's 4 aligned bytes in a page that is never freed; the device only
        // reads them.
        let cell = unsafe { &*(self.host as *const AtomicU32) };
        cell.store(self.target, Ordering::Release);
        lock(&FLAGS).free.push((self.slot, self.target));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda12() -> StreamOpsSupport {
        StreamOpsSupport {
            driver: (12, 4),
            wait_value_v2: true,
            wait_value_v1: true,
            mem_ops_v1: false,
            mapped_memory: true,
            host_func: true,
        }
    }

    #[test]
    fn the_order_is_a_value_with_its_reason() {
        use StreamOrder::*;
        let got = |s, p| choose(s, p).unwrap();
        let best = got(Ok(cuda12()), None);
        assert_eq!(best.order, WaitValue);
        assert!(
            best.reason.contains("cuStreamWaitValue32"),
            "{}",
            best.reason
        );
        // CUDA 11 with memory operations off: the host function, and how to turn them on.
        let old = StreamOpsSupport {
            driver: (11, 8),
            ..cuda12()
        };
        let fallback = got(Ok(old), None);
        assert_eq!(fallback.order, HostFunction);
        assert!(
            fallback.reason.contains("NVreg_EnableStreamMemOPs=1"),
            "{}",
            fallback.reason
        );
        let enabled = StreamOpsSupport {
            mem_ops_v1: true,
            ..old
        };
        assert_eq!(got(Ok(enabled), None).order, WaitValue);
        let unmapped = StreamOpsSupport {
            mapped_memory: false,
            ..cuda12()
        };
        assert_eq!(got(Ok(unmapped), None).order, HostFunction);
        let ancient = StreamOpsSupport {
            host_func: false,
            ..old
        };
        let waits = got(Ok(ancient), None);
        assert_eq!(waits.order, CallerWaits);
        assert!(
            waits.reason.contains("cuLaunchHostFunc"),
            "{}",
            waits.reason
        );
        let none = got(Err("libcuda.so.1 not found".into()), None);
        assert_eq!(none.order, CallerWaits);
        assert!(
            none.reason.contains("libcuda.so.1 not found"),
            "{}",
            none.reason
        );
    }

    #[test]
    fn an_order_asked_for_is_used_or_refused_with_why() {
        use StreamOrder::*;
        assert_eq!(
            choose(Ok(cuda12()), Some(HostFunction)).unwrap().order,
            HostFunction
        );
        assert_eq!(
            choose(Ok(cuda12()), Some(CallerWaits)).unwrap().order,
            CallerWaits
        );
        let old = StreamOpsSupport {
            driver: (11, 8),
            ..cuda12()
        };
        let e = choose(Ok(old), Some(WaitValue)).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("wait-value") && m.contains("off")),
            "{e}"
        );
        let e = choose(Err("no driver".into()), Some(HostFunction)).unwrap_err();
        assert!(e.to_string().contains("no CUDA driver"), "{e}");
        assert_eq!(
            choose(Err("no driver".into()), Some(CallerWaits))
                .unwrap()
                .order,
            CallerWaits
        );
        for o in [WaitValue, HostFunction, CallerWaits] {
            assert_eq!(StreamOrder::parse(o.as_str()), Some(o));
        }
        assert_eq!(StreamOrder::parse("soon"), None);
    }
}
