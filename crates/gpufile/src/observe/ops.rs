//! One observation per logical operation (KvikIO 26.10's `Observation`), delivered to the
//! registered [`Monitor`]s when it starts and when it ends, with gpufile's path and reason.
//!
//! How to use:
//! 1. Implement [`Monitor`] (two callbacks, light and thread-safe: they run inline with the
//!    I/O) and [`register`] it; [`unregister`] waits until no thread is inside a callback.
//! 2. Each operation is one user-facing call (one `read`, one `pread`, one `read_ranges`, one
//!    request of a batch) however many tasks it runs as; an operation refused before any byte
//!    moved is observed too, as failed.
//! 3. With no monitor registered, an operation costs one relaxed atomic load ([`active`]) and
//!    nothing is built or delivered.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::plan::Reason;
use crate::request::{Direction, Memory};
pub use crate::source::backend::IoBackend;
use crate::source::Endpoint;

/// gpufile's data path of an operation: finer than [`IoBackend`], it says which of gpufile's
/// mechanisms moved the bytes (KvikIO cannot say this).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DataPath {
    /// gpufile's pread/pwrite (through pinned bounce buffers for GPU memory).
    GpufilePosix = 0,
    /// A GPU read of which bytes were copied by DMA straight from registered page cache.
    PageCacheDma = 1,
    /// A gathered GPU read whose ranges the GPU copied itself from registered page cache.
    GpuGather = 2,
    /// cuFile, with its accelerated path (nvidia-fs or P2PDMA) present.
    CufileNvfs = 3,
    /// cuFile running its own compat (POSIX) path.
    CufileCompat = 4,
    /// A memory-mapped file.
    Mmap = 5,
    /// A remote object (HTTP, S3, GCS, WebHDFS).
    Remote = 6,
}

impl DataPath {
    /// Every path.
    pub const ALL: [DataPath; 7] = [
        DataPath::GpufilePosix,
        DataPath::PageCacheDma,
        DataPath::GpuGather,
        DataPath::CufileNvfs,
        DataPath::CufileCompat,
        DataPath::Mmap,
        DataPath::Remote,
    ];

    /// The name reports use: `"gpufile-posix"`, `"page-cache-dma"`, `"gpu-gather"`,
    /// `"cufile-nvfs"`, `"cufile-compat"`, `"mmap"`, `"remote"`.
    pub fn name(self) -> &'static str {
        match self {
            DataPath::GpufilePosix => "gpufile-posix",
            DataPath::PageCacheDma => "page-cache-dma",
            DataPath::GpuGather => "gpu-gather",
            DataPath::CufileNvfs => "cufile-nvfs",
            DataPath::CufileCompat => "cufile-compat",
            DataPath::Mmap => "mmap",
            DataPath::Remote => "remote",
        }
    }

    /// The path named `name` ([`DataPath::name`]).
    pub fn from_name(name: &str) -> Option<DataPath> {
        DataPath::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Why an operation took its path: the plan's reason, or why it was refused before any byte
/// moved.
#[derive(Clone, Copy, Debug)]
pub enum Why<'a> {
    /// The plan's decision.
    Planned(&'a Reason),
    /// The error that refused the operation.
    Refused(&'a Error),
    /// A layer above the engine ran the operation itself and reported it ([`report`]).
    Reported,
}

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Planned(r) => r.fmt(f),
            Why::Refused(e) => write!(f, "refused before any byte moved: {e}"),
            Why::Reported => f.write_str("reported by the caller, not run by gpufile's engine"),
        }
    }
}

/// One logical operation as observed, at its start (`end == start`, nothing transferred, `ok`)
/// or at its end.
#[derive(Clone, Copy)]
pub struct Operation<'a> {
    /// Unique within the process.
    pub id: u64,
    /// When it was issued.
    pub start: Instant,
    /// When it ended (`start` in the start notification).
    pub end: Instant,
    /// Offset of its first byte in the file or object.
    pub offset: u64,
    /// Bytes asked for.
    pub size: u64,
    /// Bytes moved (0 at the start and for a failed operation).
    pub bytes_transferred: u64,
    /// Read or write.
    pub direction: Direction,
    /// The caller's memory.
    pub memory: Memory,
    /// KvikIO's backend.
    pub backend: IoBackend,
    /// gpufile's path.
    pub path: DataPath,
    /// Why that path.
    pub why: Why<'a>,
    /// Tasks it ran as.
    pub tasks: usize,
    /// Of `bytes_transferred`, those copied by DMA from registered page cache.
    pub dma_bytes: u64,
    /// False if it failed.
    pub ok: bool,
    /// Where it went.
    pub endpoint: &'a Endpoint,
}

impl Operation<'_> {
    /// The file path or URL it went to.
    pub fn source(&self) -> String {
        self.endpoint.describe()
    }

    /// KvikIO's `http_method`: `"GET"`/`"PUT"` for a remote object, `None` for local I/O.
    pub fn http_method(&self) -> Option<&'static str> {
        match (self.backend, self.direction) {
            (IoBackend::RemoteHttp | IoBackend::RemoteHdfs, Direction::Read) => Some("GET"),
            (IoBackend::RemoteHttp | IoBackend::RemoteHdfs, Direction::Write) => Some("PUT"),
            _ => None,
        }
    }

    /// `end - start`.
    pub fn duration(&self) -> std::time::Duration {
        self.end.saturating_duration_since(self.start)
    }
}

/// Watches operations from start to end (KvikIO's `Monitor`). Both callbacks run inline with
/// the I/O, on the thread doing it: keep them light and thread-safe; registering or
/// unregistering a monitor from inside one is refused.
pub trait Monitor: Send + Sync {
    /// Whether it wants [`Monitor::on_start`]: where no registered monitor does, starts are not
    /// delivered at all (a summary needs only the ends, which carry the starts).
    fn wants_start(&self) -> bool {
        true
    }

    /// An operation started.
    fn on_start(&self, op: &Operation<'_>);
    /// An operation ended (exactly once for every start delivered).
    fn on_finish(&self, op: &Operation<'_>);
}

/// Registered monitors; the count is the hot path's one check.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Registered monitors that want starts.
static STARTS: AtomicUsize = AtomicUsize::new(0);
type Registered = Vec<(u64, Arc<dyn Monitor>)>;
static MONITORS: RwLock<Registered> = RwLock::new(Vec::new());
static NEXT_REGISTRATION: AtomicU64 = AtomicU64::new(1);
static NEXT_OPERATION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Set while this thread runs a monitor's callback.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread starts requests that are part of another operation.
    static UNOBSERVED: Cell<bool> = const { Cell::new(false) };
}

/// Whether any monitor is registered: the one check an operation makes when none is.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// Whether a request started on this thread now is observed: a monitor is registered and the
/// request is not part of another operation ([`unobserved`]).
#[inline]
pub fn watching() -> bool {
    active() && !UNOBSERVED.with(Cell::get)
}

/// Runs `f`, whose requests (started on this thread) are part of the caller's operation and
/// not operations of their own: a remote read's range probe, say.
pub fn unobserved<T>(f: impl FnOnce() -> T) -> T {
    let before = UNOBSERVED.with(|u| u.replace(true));
    let out = f();
    UNOBSERVED.with(|u| u.set(before));
    out
}

/// A fresh operation id.
pub(crate) fn next_id() -> u64 {
    NEXT_OPERATION.fetch_add(1, Ordering::Relaxed)
}

/// Registers `monitor`; its id for [`unregister`]. Refused from inside a callback.
pub fn register(monitor: Arc<dyn Monitor>) -> Result<u64> {
    refuse_in_callback("register a monitor")?;
    let id = NEXT_REGISTRATION.fetch_add(1, Ordering::Relaxed);
    let mut m = MONITORS.write().unwrap_or_else(|e| e.into_inner());
    m.push((id, monitor));
    publish(&m);
    Ok(id)
}

/// Unregisters the monitor `id` (no effect for an unknown one); returns once no thread is
/// inside its callbacks. Refused from inside a callback.
pub fn unregister(id: u64) -> Result<()> {
    refuse_in_callback("unregister a monitor")?;
    let mut m = MONITORS.write().unwrap_or_else(|e| e.into_inner());
    m.retain(|(i, _)| *i != id);
    publish(&m);
    Ok(())
}

/// The counts the hot path reads, of `m` (called with the registry's write lock held).
fn publish(m: &Registered) {
    let starts = m.iter().filter(|(_, m)| m.wants_start()).count();
    STARTS.store(starts, Ordering::Relaxed);
    ACTIVE.store(m.len(), Ordering::Relaxed);
}

/// Delivers the start of `op` where a registered monitor wants starts.
pub(crate) fn deliver_start(op: &Operation<'_>) {
    if STARTS.load(Ordering::Relaxed) != 0 {
        deliver(op, false);
    }
}

fn refuse_in_callback(what: &str) -> Result<()> {
    match IN_CALLBACK.with(Cell::get) {
        true => Err(Error::InvalidArgument(format!(
            "cannot {what} from inside a monitor's callback"
        ))),
        false => Ok(()),
    }
}

/// Delivers `op` to every monitor registered now (`finish`: its end, else its start). A
/// monitor's panic is caught and dropped: it must not fail the I/O.
pub(crate) fn deliver(op: &Operation<'_>, finish: bool) {
    let monitors = MONITORS.read().unwrap_or_else(|e| e.into_inner());
    IN_CALLBACK.with(|c| c.set(true));
    for (_, m) in monitors.iter() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match finish {
            true => m.on_finish(op),
            false => m.on_start(op),
        }));
    }
    IN_CALLBACK.with(|c| c.set(false));
}

/// An operation a layer above the engine ran itself (the C++ shim's
/// `kvikio::detail::LogicalObservationRecorder`), as it reports it to [`report`].
#[derive(Clone, Debug)]
pub struct ReportedOperation {
    /// Its id; 0 asks [`report`] for a fresh one (stored back).
    pub id: u64,
    /// When it was issued, as [`steady_ns`].
    pub start_ns: u64,
    /// When it ended (ignored at its start).
    pub end_ns: u64,
    /// Offset of its first byte.
    pub offset: u64,
    /// Bytes asked for.
    pub size: u64,
    /// Bytes moved.
    pub bytes_transferred: u64,
    /// Read or write.
    pub direction: Direction,
    /// The caller's memory.
    pub memory: Memory,
    /// KvikIO's backend; gpufile's path follows from it.
    pub backend: IoBackend,
    /// False if it failed.
    pub ok: bool,
    /// The file path or URL.
    pub source: String,
}

/// What a reported operation's endpoint says it is: the caller's text.
struct ReportedEndpoint(String);

impl crate::source::Source for ReportedEndpoint {
    fn describe(&self) -> String {
        self.0.clone()
    }

    fn size(&self) -> Result<u64> {
        Ok(0)
    }

    fn read_at(&self, _: &mut [u8], _: u64, _: crate::source::IoContext<'_>) -> Result<()> {
        Err(Error::InvalidArgument(
            "a reported operation moves no bytes here".into(),
        ))
    }
}

impl crate::source::Sink for ReportedEndpoint {
    fn describe(&self) -> String {
        self.0.clone()
    }

    fn write_at(&self, _: &[u8], _: u64, _: crate::source::IoContext<'_>) -> Result<()> {
        Err(Error::InvalidArgument(
            "a reported operation moves no bytes here".into(),
        ))
    }
}

/// Delivers `op`'s start (`finish` false) or its end to the registered monitors, as the
/// engine delivers its own: for a layer that ran the operation itself. Its path is gpufile's
/// for the backend (cuFile's accelerated one for GDS) and its reason [`Why::Reported`].
/// Refused from inside a callback.
pub fn report(op: &mut ReportedOperation, finish: bool) -> Result<()> {
    refuse_in_callback("report an operation")?;
    if op.id == 0 {
        op.id = next_id();
    }
    if !active() || (!finish && STARTS.load(Ordering::Relaxed) == 0) {
        return Ok(());
    }
    let endpoint = match op.direction {
        Direction::Read => Endpoint::Read(Arc::new(ReportedEndpoint(op.source.clone()))),
        Direction::Write => Endpoint::Write(Arc::new(ReportedEndpoint(op.source.clone()))),
    };
    let path = match op.backend {
        IoBackend::Posix => DataPath::GpufilePosix,
        IoBackend::Gds => DataPath::CufileNvfs,
        IoBackend::Mmap => DataPath::Mmap,
        IoBackend::RemoteHttp | IoBackend::RemoteHdfs => DataPath::Remote,
    };
    let start = instant_at(op.start_ns);
    let (end, bytes_transferred, ok) = match finish {
        true => (instant_at(op.end_ns), op.bytes_transferred, op.ok),
        false => (start, 0, true),
    };
    let o = Operation {
        id: op.id,
        start,
        end,
        offset: op.offset,
        size: op.size,
        bytes_transferred,
        direction: op.direction,
        memory: op.memory,
        backend: op.backend,
        path,
        why: Why::Reported,
        tasks: 1,
        dma_bytes: 0,
        ok,
        endpoint: &endpoint,
    };
    deliver(&o, finish);
    Ok(())
}

/// The process's clock origin: an instant and `CLOCK_MONOTONIC` read together, so that a
/// reading is nanoseconds on `CLOCK_MONOTONIC` (C++'s `std::chrono::steady_clock` on Linux),
/// off by the few nanoseconds between the two reads.
fn origin() -> (Instant, u64) {
    static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let at = Instant::now();
        (at, ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    })
}

/// `t` on `CLOCK_MONOTONIC`, in ns (what every observation and summary timestamp is).
pub fn steady_ns(t: Instant) -> u64 {
    let (at, ns) = origin();
    match t.checked_duration_since(at) {
        Some(d) => ns + d.as_nanos() as u64,
        None => ns.saturating_sub(at.duration_since(t).as_nanos() as u64),
    }
}

/// `steady_ns` back to an instant.
pub fn instant_at(steady_ns: u64) -> Instant {
    let (at, ns) = origin();
    match steady_ns.checked_sub(ns) {
        Some(d) => at + std::time::Duration::from_nanos(d),
        None => at
            .checked_sub(std::time::Duration::from_nanos(ns - steady_ns))
            .unwrap_or(at),
    }
}

/// A reading of the monotonic clock and of the wall clock taken together (KvikIO's
/// `ClockAnchor`): what maps a monotonic timestamp to the wall clock.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ClockAnchor {
    /// [`steady_ns`] at the reading.
    pub steady_ns: u64,
    /// Nanoseconds since the Unix epoch at the reading.
    pub wall_ns: i64,
}

impl ClockAnchor {
    /// Both clocks now.
    pub fn now() -> Self {
        let steady_ns = steady_ns(Instant::now());
        let wall_ns = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i64,
            Err(e) => -(e.duration().as_nanos() as i64),
        };
        ClockAnchor { steady_ns, wall_ns }
    }

    /// The wall-clock time (ns since the Unix epoch) of the monotonic reading `steady_ns`.
    pub fn to_wall_ns(&self, steady_ns: u64) -> i64 {
        self.wall_ns + (steady_ns as i64 - self.steady_ns as i64)
    }
}
