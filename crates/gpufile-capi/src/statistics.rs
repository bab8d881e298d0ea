//! KvikIO 26.10's observation API over the core's ([`gpufile_core::observe::ops`] and
//! [`gpufile_core::observe::SummaryMonitor`]): C callbacks registered as monitors, summary
//! monitors and their readings as handles, the process's counters and clock anchor. What the
//! kvikio C++ shim's `observation.hpp` and `statistics/*.hpp` are built on.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use gpufile_core::observe::{
    self, ops, IoBackend, Monitor, Operation, ReportRows, Summary, SummaryMonitor,
};
use gpufile_core::{Direction, Memory};

use crate::error::{give_text, guard, CallError};
use crate::handles::Table;
use crate::{gpufile_status, out_arg, put};

/// One logical operation, as a monitor's callback sees it (KvikIO's `Observation`, with
/// gpufile's path and reason). The pointers are valid only during the callback.
#[repr(C)]
pub struct gpufile_io_observation {
    /// Unique within the process.
    pub id: u64,
    /// When it was issued: ns on `CLOCK_MONOTONIC` (C++'s `std::chrono::steady_clock`).
    pub start_ns: u64,
    /// When it ended (`start_ns` in the start notification).
    pub end_ns: u64,
    /// Offset of its first byte in the file or object.
    pub offset: u64,
    /// Bytes asked for.
    pub size: u64,
    /// Bytes moved (0 at the start and for a failed operation).
    pub bytes_transferred: u64,
    /// Tasks it ran as.
    pub tasks: u64,
    /// Of `bytes_transferred`, those copied by DMA from registered page cache.
    pub dma_bytes: u64,
    /// "GET"/"PUT" for a remote object, NULL for local I/O (static).
    pub http_method: *const c_char,
    /// The file path or URL (not NUL-terminated): valid while the file, mapping or remote
    /// object it names is open (only during the callback for what holds no such text).
    pub source: *const c_char,
    /// Bytes of `source`.
    pub source_len: usize,
    /// gpufile's path, NUL-terminated and static: "gpufile-posix", "page-cache-dma",
    /// "gpu-gather", "cufile-nvfs", "cufile-compat", "mmap", "remote".
    pub path: *const c_char,
    /// Why that path (not NUL-terminated).
    pub reason: *const c_char,
    /// Bytes of `reason`.
    pub reason_len: usize,
    /// KvikIO's `IoBackend`: 0 POSIX, 1 GDS, 2 MMAP, 3 REMOTE_HTTP, 4 REMOTE_HDFS.
    pub backend: u8,
    /// 0 read, 1 write.
    pub direction: u8,
    /// 0 host memory, 1 device memory.
    pub memory_kind: u8,
    /// 1, or 0 if it failed.
    pub ok: u8,
}

/// A monitor's callback: `ctx` as registered, and the operation.
pub type gpufile_monitor_fn =
    Option<unsafe extern "C" fn(*mut c_void, *const gpufile_io_observation)>;

fn path_c(path: observe::DataPath) -> &'static std::ffi::CStr {
    match path {
        observe::DataPath::GpufilePosix => c"gpufile-posix",
        observe::DataPath::PageCacheDma => c"page-cache-dma",
        observe::DataPath::GpuGather => c"gpu-gather",
        observe::DataPath::CufileNvfs => c"cufile-nvfs",
        observe::DataPath::CufileCompat => c"cufile-compat",
        observe::DataPath::Mmap => c"mmap",
        observe::DataPath::Remote => c"remote",
    }
}

struct CallbackMonitor {
    on_start: gpufile_monitor_fn,
    on_finish: gpufile_monitor_fn,
    ctx: *mut c_void,
}

// SAFETY: `gpufile_monitor_register`'s contract: the callbacks may run with `ctx` on any thread,
// at once.
unsafe impl Send for CallbackMonitor {}
// SAFETY: as above.
unsafe impl Sync for CallbackMonitor {}

impl CallbackMonitor {
    fn call(&self, f: gpufile_monitor_fn, op: &Operation<'_>) {
        let Some(f) = f else { return };
        // The source's own text where it holds one: it lives as long as the handle, past the
        // callback, as KvikIO's does.
        let owned;
        let source = match op.endpoint.described() {
            Some(s) => s,
            None => {
                owned = op.source();
                owned.as_str()
            }
        };
        let reason = op.why.to_string();
        let method = op.http_method().map(|m| match m {
            "GET" => c"GET".as_ptr(),
            _ => c"PUT".as_ptr(),
        });
        let c = gpufile_io_observation {
            id: op.id,
            start_ns: ops::steady_ns(op.start),
            end_ns: ops::steady_ns(op.end),
            offset: op.offset,
            size: op.size,
            bytes_transferred: op.bytes_transferred,
            tasks: op.tasks as u64,
            dma_bytes: op.dma_bytes,
            http_method: method.unwrap_or(std::ptr::null()),
            source: source.as_ptr().cast(),
            source_len: source.len(),
            path: path_c(op.path).as_ptr(),
            reason: reason.as_ptr().cast(),
            reason_len: reason.len(),
            backend: op.backend as u8,
            direction: u8::from(op.direction == Direction::Write),
            memory_kind: u8::from(op.memory == Memory::Device),
            ok: u8::from(op.ok),
        };
        // SAFETY: the registration's contract; `c` and its strings outlive the call.
        unsafe { f(self.ctx, &c) }
    }
}

impl Monitor for CallbackMonitor {
    fn on_start(&self, op: &Operation<'_>) {
        self.call(self.on_start, op);
    }

    fn on_finish(&self, op: &Operation<'_>) {
        self.call(self.on_finish, op);
    }
}

/// Registers a monitor: `on_start` and `on_finish` (either may be NULL) are called with `ctx`
/// for every logical operation, inline, on the thread doing it (keep them light, thread-safe,
/// and out of gpufile: registering or unregistering from one is refused). The id for
/// `gpufile_monitor_unregister` in `*id`.
///
/// # Safety
/// The callbacks may be called with `ctx` from any thread, at once, until
/// `gpufile_monitor_unregister` returns; `id` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_monitor_register(
    on_start: gpufile_monitor_fn,
    on_finish: gpufile_monitor_fn,
    ctx: *mut c_void,
    id: *mut u64,
) -> gpufile_status {
    guard(|| {
        out_arg(id, "id")?;
        let monitor = CallbackMonitor {
            on_start,
            on_finish,
            ctx,
        };
        let registered = ops::register(Arc::new(monitor))?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(id, registered) };
        Ok(())
    })
}

/// Unregisters monitor `id`; returns once no thread is inside its callbacks (its `ctx` may be
/// freed then). An unknown id is no error.
#[no_mangle]
pub extern "C" fn gpufile_monitor_unregister(id: u64) -> gpufile_status {
    guard(|| Ok(ops::unregister(id)?))
}

/// Reads the clock observations are stamped with (`steady_ns`: `CLOCK_MONOTONIC`, C++'s
/// `std::chrono::steady_clock`) and the wall clock (`wall_ns`, ns since the Unix epoch)
/// together.
///
/// # Safety
/// Each pointer is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_clock_anchor(
    steady_ns: *mut u64,
    wall_ns: *mut i64,
) -> gpufile_status {
    guard(|| {
        out_arg(steady_ns, "steady_ns")?;
        out_arg(wall_ns, "wall_ns")?;
        let a = ops::ClockAnchor::now();
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            put(steady_ns, a.steady_ns);
            put(wall_ns, a.wall_ns);
        }
        Ok(())
    })
}

/// Work that belongs to no single operation (KvikIO's `statistics::Counters`), durations in ns.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct gpufile_counters {
    pub remote_size_probes: u64,
    pub remote_size_probing_ns: u64,
    pub http_connections: u64,
    pub http_dns_ns: u64,
    pub http_tcp_ns: u64,
    pub http_tls_ns: u64,
    pub http_retries: u64,
    pub http_retry_backoff_ns: u64,
}

impl From<observe::Counters> for gpufile_counters {
    fn from(c: observe::Counters) -> Self {
        gpufile_counters {
            remote_size_probes: c.remote_size_probes,
            remote_size_probing_ns: c.remote_size_probing_ns,
            http_connections: c.http_connections,
            http_dns_ns: c.http_dns_ns,
            http_tcp_ns: c.http_tcp_ns,
            http_tls_ns: c.http_tls_ns,
            http_retries: c.http_retries,
            http_retry_backoff_ns: c.http_retry_backoff_ns,
        }
    }
}

/// The process's counters since it started.
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_counters_get(out: *mut gpufile_counters) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, observe::counters().into()) };
        Ok(())
    })
}

/// A summary monitor (opaque; `gpufile_summary_monitor_free` ends it).
pub struct gpufile_summary_monitor {
    _opaque: (),
}

/// A reading of a summary monitor, or an interval (opaque; `gpufile_summary_free`).
pub struct gpufile_summary {
    _opaque: (),
}

static MONITORS: Table<SummaryMonitor> = Table::new("summary_monitor");
static SUMMARIES: Table<Summary> = Table::new("summary");

/// What one KvikIO backend carried.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct gpufile_backend_totals {
    pub num_ops: u64,
    pub bytes_transferred: u64,
    pub total_duration_ns: u64,
    pub num_errors: u64,
}

/// A summary's numbers (KvikIO's `statistics::Summary` fields and derived values). Times in ns
/// on `CLOCK_MONOTONIC`; `anchor_*` maps them to the wall clock.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct gpufile_summary_values {
    pub start_ns: u64,
    pub end_ns: u64,
    pub anchor_steady_ns: u64,
    pub anchor_wall_ns: i64,
    pub num_ops: u64,
    pub num_reads: u64,
    pub num_writes: u64,
    pub bytes_requested: u64,
    pub bytes_transferred: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub num_errors: u64,
    /// Indexed by KvikIO's `IoBackend`.
    pub by_backend: [gpufile_backend_totals; 5],
    pub counters: gpufile_counters,
    pub total_duration_ns: u64,
    pub busy_ns: u64,
    pub wall_ns: u64,
    pub mean_duration_ns: u64,
    pub busy_bytes_per_sec: f64,
    pub busy_fraction: f64,
}

fn give_summary(out: *mut *mut gpufile_summary, s: Summary) {
    let id = SUMMARIES.insert(s);
    // SAFETY: checked non-null by every caller; the caller's contract.
    unsafe { put(out, id as *mut gpufile_summary) };
}

/// Starts a summary monitor (counting every operation of the process from now).
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_monitor_new(
    out: *mut *mut gpufile_summary_monitor,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let id = MONITORS.insert(SummaryMonitor::new()?);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, id as *mut gpufile_summary_monitor) };
        Ok(())
    })
}

/// Reads `mon`'s totals (`since` NULL) or the interval since `since`, an earlier reading of its
/// span (else `GPUFILE_BAD_ARGUMENT`), into a new summary handle.
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_monitor_get(
    mon: *const gpufile_summary_monitor,
    since: *const gpufile_summary,
    out: *mut *mut gpufile_summary,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let now = MONITORS.get(mon as usize)?.get();
        let s = match since.is_null() {
            true => now,
            false => now.since(&*SUMMARIES.get(since as usize)?)?,
        };
        give_summary(out, s);
        Ok(())
    })
}

/// Zeroes `mon`'s totals and restarts its span (`reset` 1), or stops it (`reset` 0: the span
/// ends here; idempotent).
#[no_mangle]
pub extern "C" fn gpufile_summary_monitor_reset_or_stop(
    mon: *const gpufile_summary_monitor,
    reset: i32,
) -> gpufile_status {
    guard(|| {
        let m = MONITORS.get(mon as usize)?;
        match reset {
            0 => m.stop(),
            _ => m.reset(),
        }
        Ok(())
    })
}

/// Stops and frees `mon`.
#[no_mangle]
pub extern "C" fn gpufile_summary_monitor_free(
    mon: *mut gpufile_summary_monitor,
) -> gpufile_status {
    guard(|| {
        MONITORS.remove(mon as usize)?.stop();
        Ok(())
    })
}

/// `s`'s numbers.
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_values_get(
    s: *const gpufile_summary,
    out: *mut gpufile_summary_values,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let s = SUMMARIES.get(s as usize)?;
        let mut by_backend = [gpufile_backend_totals::default(); 5];
        for (o, b) in by_backend.iter_mut().zip(&s.by_backend) {
            *o = gpufile_backend_totals {
                num_ops: b.num_ops,
                bytes_transferred: b.bytes_transferred,
                total_duration_ns: b.total_duration_ns,
                num_errors: b.num_errors,
            };
        }
        let v = gpufile_summary_values {
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            anchor_steady_ns: s.anchor.steady_ns,
            anchor_wall_ns: s.anchor.wall_ns,
            num_ops: s.num_ops,
            num_reads: s.num_reads,
            num_writes: s.num_writes,
            bytes_requested: s.bytes_requested,
            bytes_transferred: s.bytes_transferred,
            bytes_read: s.bytes_read,
            bytes_written: s.bytes_written,
            num_errors: s.num_errors,
            by_backend,
            counters: s.counters.into(),
            total_duration_ns: s.total_duration_ns,
            busy_ns: s.busy_ns,
            wall_ns: s.wall_ns(),
            mean_duration_ns: s.mean_duration_ns(),
            busy_bytes_per_sec: s.busy_bytes_per_sec(),
            busy_fraction: s.busy_fraction(),
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, v) };
        Ok(())
    })
}

/// The interval between `previous`, an earlier reading of the same span, and `s`, into a new
/// handle (`GPUFILE_BAD_ARGUMENT` where `previous` is not one).
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_since(
    s: *const gpufile_summary,
    previous: *const gpufile_summary,
    out: *mut *mut gpufile_summary,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let d = SUMMARIES
            .get(s as usize)?
            .since(&*SUMMARIES.get(previous as usize)?)?;
        give_summary(out, d);
        Ok(())
    })
}

/// Copies `s` as text into `buf` as `gpufile_check` does: `what` 0 the JSON object, 1 the
/// report of the rows used, 2 the report of every row.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_text(
    s: *const gpufile_summary,
    what: i32,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let s = SUMMARIES.get(s as usize)?;
        let text = match what {
            0 => s.to_json(),
            1 => s.report(ReportRows::Used),
            2 => s.report(ReportRows::All),
            _ => return Err(CallError::bad(format!("what {what} is not 0, 1 or 2"))),
        };
        // SAFETY: the caller's contract.
        unsafe { give_text(&text, buf, len, needed) };
        Ok(())
    })
}

/// Copies `s`'s exact bytes (what `gpufile_summary_deserialize` reads back; only this build
/// does) into `buf` (all of them or none, where `len` is too small); how many in `*needed`.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_serialize(
    s: *const gpufile_summary,
    buf: *mut u8,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        out_arg(needed, "needed")?;
        let bytes = SUMMARIES.get(s as usize)?.serialize();
        if !buf.is_null() && len >= bytes.len() {
            // SAFETY: `buf` holds `len >= bytes.len()` bytes by the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
        }
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(needed, bytes.len()) };
        Ok(())
    })
}

/// Rebuilds a summary from `gpufile_summary_serialize`'s `len` bytes at `data`
/// (`GPUFILE_BAD_ARGUMENT` for anything else).
///
/// # Safety
/// `data` is valid for reads of `len` bytes; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_deserialize(
    data: *const u8,
    len: usize,
    out: *mut *mut gpufile_summary,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        if data.is_null() {
            return Err(CallError::bad("data is NULL"));
        }
        // SAFETY: non-null and valid for `len` bytes by the caller's contract.
        let bytes = unsafe { std::slice::from_raw_parts(data, len) };
        give_summary(out, Summary::deserialize(bytes)?);
        Ok(())
    })
}

/// Frees `s`.
#[no_mangle]
pub extern "C" fn gpufile_summary_free(s: *mut gpufile_summary) -> gpufile_status {
    guard(|| {
        SUMMARIES.remove(s as usize)?;
        Ok(())
    })
}

/// KvikIO's name of backend `b` (`IoBackend`), NUL-terminated and static; NULL past the last.
#[no_mangle]
pub extern "C" fn gpufile_io_backend_name(b: u8) -> *const c_char {
    match IoBackend::ALL.get(b as usize) {
        Some(IoBackend::Posix) => c"POSIX".as_ptr(),
        Some(IoBackend::Gds) => c"GDS".as_ptr(),
        Some(IoBackend::Mmap) => c"MMAP".as_ptr(),
        Some(IoBackend::RemoteHttp) => c"REMOTE_HTTP".as_ptr(),
        Some(IoBackend::RemoteHdfs) => c"REMOTE_HDFS".as_ptr(),
        None => std::ptr::null(),
    }
}

/// Whether any monitor is registered now (KvikIO's `detail::monitoring_enabled`): 1 or 0.
#[no_mangle]
pub extern "C" fn gpufile_monitor_active() -> i32 {
    i32::from(ops::active())
}

/// Delivers `*obs`, an operation the caller ran itself (the kvikio shim's
/// `detail::LogicalObservationRecorder`), to the registered monitors as gpufile delivers its
/// own: its start (`finish` 0: `end_ns`, `bytes_transferred` and `ok` are ignored) or its end.
/// Its gpufile path follows from `backend`, its reason says it was reported; `path`, `reason`,
/// `tasks` and `dma_bytes` are ignored. An `id` of 0 gets a fresh one, stored back. Refused
/// (`GPUFILE_BAD_ARGUMENT`) from inside a callback.
///
/// # Safety
/// `obs` is valid for reads and a write; its `source` is valid for `source_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpufile_monitor_report(
    obs: *mut gpufile_io_observation,
    finish: i32,
) -> gpufile_status {
    guard(|| {
        out_arg(obs, "obs")?;
        // SAFETY: checked non-null; valid for reads and a write by the caller's contract.
        let o = unsafe { &mut *obs };
        let backend = *IoBackend::ALL
            .get(o.backend as usize)
            .ok_or_else(|| CallError::bad(format!("backend {} is not 0 to 4", o.backend)))?;
        let source = match o.source.is_null() {
            true => String::new(),
            // SAFETY: `source_len` bytes at `source` by the caller's contract.
            false => String::from_utf8_lossy(unsafe {
                std::slice::from_raw_parts(o.source.cast::<u8>(), o.source_len)
            })
            .into_owned(),
        };
        let mut op = ops::ReportedOperation {
            id: o.id,
            start_ns: o.start_ns,
            end_ns: o.end_ns,
            offset: o.offset,
            size: o.size,
            bytes_transferred: o.bytes_transferred,
            direction: match o.direction {
                0 => Direction::Read,
                _ => Direction::Write,
            },
            memory: match o.memory_kind {
                0 => Memory::Host,
                _ => Memory::Device,
            },
            backend,
            ok: o.ok != 0,
            source,
        };
        ops::report(&mut op, finish != 0)?;
        o.id = op.id;
        Ok(())
    })
}

/// Copies `c` as text into `buf`: `what` 0 its JSON object (every counter), 1 the report of
/// the groups counted (`""` for none), 2 the report of every group.
///
/// # Safety
/// `c` is valid for a read; `buf` is null or valid for writes of `len` bytes; `needed` is null
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_counters_text(
    c: *const gpufile_counters,
    what: i32,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        if c.is_null() {
            return Err(CallError::bad("c is NULL"));
        }
        // SAFETY: checked non-null; valid for a read by the caller's contract.
        let c = unsafe { *c };
        let c = observe::Counters {
            remote_size_probes: c.remote_size_probes,
            remote_size_probing_ns: c.remote_size_probing_ns,
            http_connections: c.http_connections,
            http_dns_ns: c.http_dns_ns,
            http_tcp_ns: c.http_tcp_ns,
            http_tls_ns: c.http_tls_ns,
            http_retries: c.http_retries,
            http_retry_backoff_ns: c.http_retry_backoff_ns,
        };
        let text = match what {
            0 => c.to_json(),
            1 => c.report(ReportRows::Used),
            2 => c.report(ReportRows::All),
            _ => return Err(CallError::bad(format!("what {what} is not 0, 1 or 2"))),
        };
        // SAFETY: the caller's contract.
        unsafe { give_text(&text, buf, len, needed) };
        Ok(())
    })
}

/// A summary of the numbers `*v` (its derived values ignored), into a new handle: what a
/// summary built or edited by hand renders from. It carries no paths and is no reading of a
/// monitor (so no baseline for `gpufile_summary_since`).
///
/// # Safety
/// `v` is valid for a read; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_from_values(
    v: *const gpufile_summary_values,
    out: *mut *mut gpufile_summary,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        if v.is_null() {
            return Err(CallError::bad("v is NULL"));
        }
        // SAFETY: checked non-null; valid for a read by the caller's contract.
        let v = unsafe { &*v };
        let mut s = Summary {
            start_ns: v.start_ns,
            end_ns: v.end_ns,
            anchor: ops::ClockAnchor {
                steady_ns: v.anchor_steady_ns,
                wall_ns: v.anchor_wall_ns,
            },
            num_ops: v.num_ops,
            num_reads: v.num_reads,
            num_writes: v.num_writes,
            bytes_requested: v.bytes_requested,
            bytes_transferred: v.bytes_transferred,
            bytes_read: v.bytes_read,
            bytes_written: v.bytes_written,
            num_errors: v.num_errors,
            total_duration_ns: v.total_duration_ns,
            busy_ns: v.busy_ns,
            interval: true,
            ..Summary::default()
        };
        for (b, t) in s.by_backend.iter_mut().zip(&v.by_backend) {
            b.num_ops = t.num_ops;
            b.bytes_transferred = t.bytes_transferred;
            b.total_duration_ns = t.total_duration_ns;
            b.num_errors = t.num_errors;
        }
        let c = v.counters;
        s.counters = observe::Counters {
            remote_size_probes: c.remote_size_probes,
            remote_size_probing_ns: c.remote_size_probing_ns,
            http_connections: c.http_connections,
            http_dns_ns: c.http_dns_ns,
            http_tcp_ns: c.http_tcp_ns,
            http_tls_ns: c.http_tls_ns,
            http_retries: c.http_retries,
            http_retry_backoff_ns: c.http_retry_backoff_ns,
        };
        give_summary(out, s);
        Ok(())
    })
}

/// Copies, for KvikIO backend `backend` of `s`, gpufile's paths that carried its operations
/// (`what` 0: "gpufile-posix", `+`-joined, `""` if none) or their reasons (`what` 1:
/// `; `-joined) into `buf`.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_summary_backend_path(
    s: *const gpufile_summary,
    backend: u8,
    what: i32,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let s = SUMMARIES.get(s as usize)?;
        let b = *IoBackend::ALL
            .get(backend as usize)
            .ok_or_else(|| CallError::bad(format!("backend {backend} is not 0 to 4")))?;
        let (path, reason) = s.path_and_reason(b);
        let text = match what {
            0 => path,
            1 => reason,
            _ => return Err(CallError::bad(format!("what {what} is not 0 or 1"))),
        };
        // SAFETY: the caller's contract.
        unsafe { give_text(&text, buf, len, needed) };
        Ok(())
    })
}
