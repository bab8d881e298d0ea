//! Safe wrappers over the CUDA driver: pointer classification, context guards, streams, events,
//! pinned and device memory.
//!
//! How to use:
//! 1. [`classify`] a device address: its memory kind, device, owning context and allocation.
//! 2. [`ContextGuard::push`] the pointer's own context (not whatever is current) on the thread
//!    that copies, and use a [`Stream`] created in that context.
//! 3. [`PinnedBuffer`] (page-aligned, portable) and [`DeviceBuffer`] free themselves on drop.
//!
//! Nothing here loads `libcuda.so.1` until it is called: host-only work never touches CUDA.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::{Mutex, OnceLock};

use gpufile_sys::{self as sys, CUresult, CudaApi};

use crate::error::{Error, Result};

/// The loaded and initialised driver.
pub(crate) fn api() -> Result<&'static CudaApi> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    let api = sys::cuda().map_err(|e| Error::CudaUnavailable {
        reason: e.to_string(),
    })?;
    INIT.get_or_init(|| {
        // SAFETY: cuInit(0) is the documented first call; it is idempotent.
        check("cuInit", unsafe { (api.init)(0) })
    })
    .clone()?;
    Ok(api)
}

/// Turns a driver status into a `Result`, with the driver's name and text for the code.
pub(crate) fn check(call: &'static str, code: CUresult) -> Result<()> {
    if code == sys::CUDA_SUCCESS {
        return Ok(());
    }
    let (mut name, mut text) = (std::ptr::null(), std::ptr::null());
    if let Ok(api) = sys::cuda() {
        // SAFETY: out-parameters receive pointers to static strings owned by the driver.
        unsafe {
            (api.get_error_name)(code, &mut name);
            (api.get_error_string)(code, &mut text);
        }
    }
    let read = |p: *const std::ffi::c_char| {
        if p.is_null() {
            "unknown".to_owned()
        } else {
            // SAFETY: non-null pointers from cuGetError* are NUL-terminated static strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    Err(Error::Cuda {
        call,
        code,
        name: read(name),
        message: read(text),
    })
}

/// The driver's version as (major, minor), e.g. (13, 0).
pub fn driver_version() -> Result<(i32, i32)> {
    let api = api()?;
    let mut v = 0;
    // SAFETY: plain out-parameter.
    check("cuDriverGetVersion", unsafe {
        (api.driver_get_version)(&mut v)
    })?;
    Ok((v / 1000, (v % 1000) / 10))
}

/// Number of CUDA devices.
pub fn device_count() -> Result<usize> {
    let api = api()?;
    let mut n = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGetCount", unsafe {
        (api.device_get_count)(&mut n)
    })?;
    Ok(n.max(0) as usize)
}

/// A device's name ("NVIDIA H200").
pub fn device_name(ordinal: i32) -> Result<String> {
    let api = api()?;
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGet", unsafe {
        (api.device_get)(&mut dev, ordinal)
    })?;
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    check("cuDeviceGetName", unsafe {
        (api.device_get_name)(buf.as_mut_ptr(), 256, dev)
    })?;
    // SAFETY: NUL-terminated by the driver within the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// A device's total memory in bytes.
pub fn device_total_memory(ordinal: i32) -> Result<usize> {
    let api = api()?;
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGet", unsafe {
        (api.device_get)(&mut dev, ordinal)
    })?;
    let mut bytes = 0usize;
    // SAFETY: plain out-parameter.
    check("cuDeviceTotalMem", unsafe {
        (api.device_total_mem)(&mut bytes, dev)
    })?;
    Ok(bytes)
}

/// A device's PCI address as sysfs names it ("0000:3b:00.0").
pub fn device_pci_address(ordinal: i32) -> Result<String> {
    let api = api()?;
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGet", unsafe {
        (api.device_get)(&mut dev, ordinal)
    })?;
    let attr = |a| -> Result<i32> {
        let mut v = 0;
        // SAFETY: plain out-parameter.
        check("cuDeviceGetAttribute", unsafe {
            (api.device_get_attribute)(&mut v, a, dev)
        })?;
        Ok(v)
    };
    let (domain, bus, device) = (
        attr(sys::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(sys::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(sys::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    );
    Ok(format!("{domain:04x}:{bus:02x}:{device:02x}.0"))
}

/// A device attribute (`cuDeviceGetAttribute`).
pub fn device_attribute(ordinal: i32, attr: std::ffi::c_int) -> Result<i32> {
    let api = api()?;
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGet", unsafe {
        (api.device_get)(&mut dev, ordinal)
    })?;
    let mut v = 0;
    // SAFETY: plain out-parameter; an unknown attribute is an error status, not a crash.
    check("cuDeviceGetAttribute", unsafe {
        (api.device_get_attribute)(&mut v, attr, dev)
    })?;
    Ok(v)
}

/// What the driver offers for ordering gpufile's work on an application's stream (see
/// `crate::stream`): the entry points present and what the device says of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOpsSupport {
    /// The driver's version (major, minor).
    pub driver: (i32, i32),
    /// `cuStreamWaitValue32_v2` is exported.
    pub wait_value_v2: bool,
    /// `cuStreamWaitValue32` (v1) is exported.
    pub wait_value_v1: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` is 1 on the device.
    pub mem_ops_v1: bool,
    /// `cuMemHostGetDevicePointer_v2` is exported (a flag the device can read).
    pub mapped_memory: bool,
    /// `cuLaunchHostFunc` is exported.
    pub host_func: bool,
}

/// Asks the driver what [`StreamOpsSupport`] device `ordinal` has.
pub fn stream_ops_support(ordinal: i32) -> Result<StreamOpsSupport> {
    let api = api()?;
    Ok(StreamOpsSupport {
        driver: driver_version()?,
        wait_value_v2: api.stream_wait_value32_v2.is_some(),
        wait_value_v1: api.stream_wait_value32.is_some(),
        mem_ops_v1: device_attribute(ordinal, sys::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1)
            .is_ok_and(|v| v == 1),
        mapped_memory: api.mem_host_get_device_pointer.is_some(),
        host_func: api.launch_host_func.is_some(),
    })
}

/// Whether the stream `handle` orders itself with the legacy default stream (a stream created
/// without `CU_STREAM_NON_BLOCKING`, the legacy stream itself, the per-thread default stream):
/// work queued on the legacy stream later waits for it. Unknown (the driver cannot say) counts
/// as blocking.
pub fn stream_is_blocking(handle: u64, ctx: Context) -> bool {
    if handle <= 2 {
        return true; // the legacy stream (0, 1) and the per-thread default stream (2)
    }
    let Ok(api) = api() else { return true };
    let (Some(get), Ok(_g)) = (api.stream_get_flags, push_unless_current(api, ctx)) else {
        return true;
    };
    let mut flags = 0;
    // SAFETY: the caller's live stream (CUDA Array Interface v3 contract); plain out-parameter.
    let code = unsafe { get(handle as sys::CUstream, &mut flags) };
    code != sys::CUDA_SUCCESS || flags & sys::CU_STREAM_NON_BLOCKING == 0
}

/// The context current on this thread, if any.
pub fn current_context() -> Result<Option<Context>> {
    let api = api()?;
    let mut current = std::ptr::null_mut();
    // SAFETY: plain out-parameter.
    check("cuCtxGetCurrent", unsafe {
        (api.ctx_get_current)(&mut current)
    })?;
    Ok((!current.is_null()).then_some(Context(current as usize)))
}

/// The device ordinal of `ctx`.
pub fn context_device(ctx: Context) -> Result<i32> {
    let api = api()?;
    let _g = push_unless_current(api, ctx)?;
    let mut dev = 0;
    // SAFETY: plain out-parameter; `ctx` is current.
    check("cuCtxGetDevice", unsafe { (api.ctx_get_device)(&mut dev) })?;
    Ok(dev)
}

/// Queues on the stream `handle` (as for [`synchronize_stream`]) a wait until the 32-bit value
/// at device address `addr` reaches `value` (`cuStreamWaitValue32`, `CU_STREAM_WAIT_VALUE_GEQ`:
/// a cyclic compare, so a flag whose value only grows can be reused); `ctx` is made current
/// unless it is already.
///
/// # Safety
/// `addr` must stay readable by the device until the stream has passed the wait (gpufile's
/// flags are never freed), and `handle` must be a live stream of `ctx` or a special handle.
pub unsafe fn stream_wait_value32(handle: u64, ctx: Context, addr: u64, value: u32) -> Result<()> {
    let api = api()?;
    let wait = api
        .stream_wait_value32_v2
        .or(api.stream_wait_value32)
        .ok_or_else(|| Error::CudaUnavailable {
            reason: "the driver has no cuStreamWaitValue32".into(),
        })?;
    let _g = push_unless_current(api, ctx)?;
    // SAFETY: the caller's contract.
    check("cuStreamWaitValue32", unsafe {
        wait(
            handle as sys::CUstream,
            addr,
            value,
            sys::CU_STREAM_WAIT_VALUE_GEQ,
        )
    })
}

/// Queues `f(data)` on the stream `handle` (`cuLaunchHostFunc`): the driver calls it on its own
/// thread once the work queued before it has finished, and the stream's later work waits for it
/// to return. `ctx` is made current unless it is already.
///
/// # Safety
/// `f` must make no CUDA call, and `data` must stay valid until `f` has run with it; `f` runs
/// exactly once if this returns `Ok`, never if it returns an error. `handle` must be a live
/// stream of `ctx` or a special handle.
pub unsafe fn launch_host_func(
    handle: u64,
    ctx: Context,
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
) -> Result<()> {
    let api = api()?;
    let launch = api.launch_host_func.ok_or_else(|| Error::CudaUnavailable {
        reason: "the driver has no cuLaunchHostFunc".into(),
    })?;
    let _g = push_unless_current(api, ctx)?;
    // SAFETY: the caller's contract.
    check("cuLaunchHostFunc", unsafe {
        launch(handle as sys::CUstream, f, data)
    })
}

/// A CUDA context handle (an address; contexts are process-wide objects).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context(usize);

impl Context {
    fn raw(self) -> sys::CUcontext {
        self.0 as sys::CUcontext
    }

    /// The handle as a number (for logs and maps).
    pub fn addr(self) -> usize {
        self.0
    }

    /// A made-up handle, for tests that never give it to the driver.
    #[cfg(test)]
    pub(crate) fn for_test(addr: usize) -> Self {
        Context(addr)
    }
}

/// The primary contexts gpufile retained, by device ordinal.
static PRIMARY: Mutex<Option<HashMap<i32, Context>>> = Mutex::new(None);

/// Whether `ctx` is a primary context gpufile retained (alive for the whole process).
fn retained_primary(ctx: Context) -> bool {
    let map = PRIMARY.lock().unwrap_or_else(|e| e.into_inner());
    map.as_ref().is_some_and(|m| m.values().any(|c| *c == ctx))
}

/// The primary context of device `ordinal`, retained once by gpufile and never released, so it
/// stays valid for pinned buffers and streams whatever the application does with its own.
pub fn primary_context(ordinal: i32) -> Result<Context> {
    let api = api()?;
    let mut map = PRIMARY.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(c) = map.get(&ordinal) {
        return Ok(*c);
    }
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGet", unsafe {
        (api.device_get)(&mut dev, ordinal)
    })?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: plain out-parameter; the retain is deliberately never released.
    check("cuDevicePrimaryCtxRetain", unsafe {
        (api.primary_ctx_retain)(&mut ctx, dev)
    })?;
    let c = Context(ctx as usize);
    map.insert(ordinal, c);
    Ok(c)
}

/// Makes a context current on this thread until dropped (then the previous one is back).
pub struct ContextGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ContextGuard {
    /// Pushes `ctx` onto this thread's context stack.
    pub fn push(ctx: Context) -> Result<Self> {
        let api = api()?;
        // SAFETY: `ctx` came from the driver (pointer attribute or primary retain).
        check("cuCtxPushCurrent", unsafe {
            (api.ctx_push_current)(ctx.raw())
        })?;
        Ok(ContextGuard {
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if let Ok(api) = sys::cuda() {
            let mut old = std::ptr::null_mut();
            // SAFETY: pops exactly the context this guard pushed on this thread.
            unsafe { (api.ctx_pop_current)(&mut old) };
        }
    }
}

/// What kind of memory an address points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Host memory CUDA does not know (pageable).
    Host,
    /// Page-locked host memory (cuMemHostAlloc / cuMemHostRegister).
    PinnedHost,
    /// Device memory.
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// What the driver knows about an address.
#[derive(Clone, Copy, Debug)]
pub struct PointerInfo {
    /// The memory kind.
    pub kind: MemoryKind,
    /// The device holding it (device and managed memory).
    pub device: Option<i32>,
    /// The context that owns the allocation.
    pub context: Option<Context>,
    /// Start of the allocation holding the address.
    pub base: u64,
    /// Size of that allocation.
    pub size: usize,
}

/// Classifies `addr` with `cuPointerGetAttributes` (which, unlike `cuPointerGetAttribute`,
/// answers "unknown host memory" for addresses CUDA never saw, instead of failing).
pub fn classify(addr: u64) -> Result<PointerInfo> {
    let api = api()?;
    let mut attrs = [
        sys::CU_POINTER_ATTRIBUTE_CONTEXT,
        sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        sys::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        sys::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    // Each attribute is written as 1, 4 or 8 bytes at the start of its slot; zeroed u64 slots
    // read back correctly for all of them on little-endian x86-64 and aarch64.
    let mut vals = [0u64; 6];
    let mut ptrs: [*mut c_void; 6] = [std::ptr::null_mut(); 6];
    for (p, v) in ptrs.iter_mut().zip(vals.iter_mut()) {
        *p = (v as *mut u64).cast();
    }
    // SAFETY: `attrs` and `ptrs` have 6 entries; each slot is 8 bytes, the largest attribute.
    check("cuPointerGetAttributes", unsafe {
        (api.pointer_get_attributes)(6, attrs.as_mut_ptr(), ptrs.as_mut_ptr(), addr)
    })?;
    let [ctx, mem_type, managed, ordinal, base, size] = vals;
    let mem_type = mem_type as u32;
    let kind = if managed as u8 != 0 {
        MemoryKind::Managed
    } else {
        match mem_type {
            sys::CU_MEMORYTYPE_DEVICE => MemoryKind::Device,
            sys::CU_MEMORYTYPE_UNIFIED => MemoryKind::Managed,
            sys::CU_MEMORYTYPE_HOST => MemoryKind::PinnedHost,
            _ => MemoryKind::Host,
        }
    };
    let on_device = matches!(kind, MemoryKind::Device | MemoryKind::Managed);
    Ok(PointerInfo {
        kind,
        device: on_device.then_some(ordinal as u32 as i32),
        context: (ctx != 0).then_some(Context(ctx as usize)),
        base,
        size: size as usize,
    })
}

/// Waits for all work queued on the stream `handle` (a `__cuda_array_interface__` `stream`
/// value: 1 is the legacy default stream, 2 the per-thread default stream) in `ctx`.
pub fn synchronize_stream(handle: u64, ctx: Context) -> Result<()> {
    let api = api()?;
    let _g = ContextGuard::push(ctx)?;
    // SAFETY: the handle comes from the array's producer, who promises it is a live stream in
    // this context (CUDA Array Interface v3), or is one of the special values 1 and 2.
    check("cuStreamSynchronize", unsafe {
        (api.stream_synchronize)(handle as sys::CUstream)
    })
}

/// A copy queued on an application's stream by [`copy_on_stream`].
#[derive(Clone, Copy, Debug)]
pub enum StreamCopy {
    /// `len` bytes from host memory at `src` to device address `dst` (`cuMemcpyHtoDAsync`).
    ToDevice {
        /// Device address of the first byte written.
        dst: u64,
        /// Host address of the first byte read.
        src: *const u8,
        /// Bytes.
        len: usize,
    },
    /// `len` bytes from device address `src` to host memory at `dst` (`cuMemcpyDtoHAsync`).
    ToHost {
        /// Host address of the first byte written.
        dst: *mut u8,
        /// Device address of the first byte read.
        src: u64,
        /// Bytes.
        len: usize,
    },
}

/// Queues `copy` on the stream `handle` (as for [`synchronize_stream`]) in `ctx`, made current
/// unless it is already.
///
/// # Safety
/// The host side must be page-locked memory that stays valid (and, for a copy to the device,
/// unchanged; for one to the host, untouched by others) until the stream has passed the copy;
/// the device side must be valid device memory of `ctx` for `len` bytes; `handle` must be a
/// live stream of `ctx` or a special handle.
pub unsafe fn copy_on_stream(handle: u64, ctx: Context, copy: StreamCopy) -> Result<()> {
    let api = api()?;
    let _g = push_unless_current(api, ctx)?;
    let stream = handle as sys::CUstream;
    match copy {
        // SAFETY: the caller's contract.
        StreamCopy::ToDevice { dst, src, len } => check("cuMemcpyHtoDAsync", unsafe {
            (api.memcpy_htod_async)(dst, src.cast(), len, stream)
        }),
        // SAFETY: the caller's contract.
        StreamCopy::ToHost { dst, src, len } => check("cuMemcpyDtoHAsync", unsafe {
            (api.memcpy_dtoh_async)(dst.cast(), src, len, stream)
        }),
    }
}

/// `ctx` made current on this thread until the guard drops, unless it is already (an
/// application thread that made the array usually has it: no push, no pop).
fn push_unless_current(api: &CudaApi, ctx: Context) -> Result<Option<ContextGuard>> {
    let mut current = std::ptr::null_mut();
    // SAFETY: plain out-parameter.
    check("cuCtxGetCurrent", unsafe {
        (api.ctx_get_current)(&mut current)
    })?;
    match current as usize == ctx.0 {
        true => Ok(None),
        false => ContextGuard::push(ctx).map(Some),
    }
}

/// Whether the stream `handle` (as for [`synchronize_stream`]) in `ctx` has no work left
/// (`cuStreamQuery`): an idle stream needs no wait. `ctx` is pushed only when it is not the
/// thread's current context already.
pub fn stream_idle(handle: u64, ctx: Context) -> Result<bool> {
    let api = api()?;
    let _g = push_unless_current(api, ctx)?;
    // SAFETY: as for `synchronize_stream`: the producer's live stream or a special handle.
    match unsafe { (api.stream_query)(handle as sys::CUstream) } {
        sys::CUDA_ERROR_NOT_READY => Ok(false),
        code => check("cuStreamQuery", code).map(|()| true),
    }
}

/// A producer's stream that a request must wait for before it touches the caller's memory (CUDA
/// Array Interface v3 `stream`). The engine [marks](StreamWait::mark) it when the request is
/// submitted, on the submitting thread, and each worker run waits for the mark: the stream
/// handle itself is never used after the submit returns (its producer may destroy it then), and
/// work queued on it later is not waited for. The per-thread default stream (2) names the
/// submitting thread's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamWait {
    /// The stream handle.
    pub handle: u64,
    /// The context it belongs to.
    pub ctx: Context,
}

impl StreamWait {
    /// Returns once the work queued on the stream so far has finished (at once when it is idle).
    pub fn wait(&self) -> Result<()> {
        match stream_idle(self.handle, self.ctx)? {
            true => Ok(()),
            false => synchronize_stream(self.handle, self.ctx),
        }
    }

    /// Marks the work queued on the stream so far (`cuEventRecord` of a gpufile event), to be
    /// waited for later from any thread with [`StreamMark::wait`]; `None` where nothing needs
    /// waiting for (the stream is idle now, or was waited for here). A stream the event cannot be
    /// recorded on (one of another context than the memory's: a producer may name its current
    /// device's stream for another device's array) is waited for here instead.
    pub fn mark(&self) -> Result<Option<StreamMark>> {
        // An idle stream (the usual case: nothing queued since the array was made) needs no
        // mark, and `cuStreamQuery` costs the submitting thread less than `cuEventRecord`
        // (docs/performance.md, "Why the defaults are what they are").
        if let Ok(true) = stream_idle(self.handle, self.ctx) {
            return Ok(None);
        }
        let api = api()?;
        let event = EventPool::take(self.ctx)?;
        let _g = push_unless_current(api, self.ctx)?;
        // SAFETY: a live event of `ctx`; the handle is the producer's live stream (the caller's
        // contract, CUDA Array Interface v3) or a special handle, read on this thread.
        let recorded = check("cuEventRecord", unsafe {
            (api.event_record)(event.raw(), self.handle as sys::CUstream)
        });
        match recorded {
            Ok(()) => Ok(Some(StreamMark { event: Some(event) })),
            Err(_) => {
                EventPool::give(event);
                self.wait()?;
                Ok(None)
            }
        }
    }
}

/// The end of the work a producer's stream had queued when it was [marked](StreamWait::mark):
/// an event gpufile owns (so it outlives the stream), back to a small pool on drop.
pub struct StreamMark {
    event: Option<Event>,
}

impl StreamMark {
    /// Returns once the marked work has finished (`cuEventSynchronize`).
    pub fn wait(&self) -> Result<()> {
        match &self.event {
            Some(e) => e.synchronize(),
            None => Ok(()),
        }
    }
}

impl Drop for StreamMark {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            EventPool::give(e);
        }
    }
}

/// Events for [`StreamMark`]s, kept for reuse (a create and a destroy per request saved) only
/// in the primary contexts gpufile retains, which are never destroyed; others are destroyed.
struct EventPool;

/// Most events kept.
const EVENT_POOL_MAX: usize = 64;

static EVENT_POOL: Mutex<Vec<Event>> = Mutex::new(Vec::new());

impl EventPool {
    fn take(ctx: Context) -> Result<Event> {
        let mut pool = EVENT_POOL.lock().unwrap_or_else(|e| e.into_inner());
        match pool.iter().rposition(|e| e.ctx == ctx) {
            Some(i) => Ok(pool.swap_remove(i)),
            None => {
                drop(pool);
                Event::new(ctx)
            }
        }
    }

    fn give(event: Event) {
        if !retained_primary(event.ctx) {
            return; // destroyed: its context may be destroyed by the application later
        }
        let mut pool = EVENT_POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < EVENT_POOL_MAX {
            pool.push(event);
        }
    }
}

/// A non-blocking stream, destroyed on drop (in its context).
pub struct Stream {
    raw: usize,
    ctx: Context,
}

impl Stream {
    /// Creates a non-blocking stream in `ctx`.
    pub fn new(ctx: Context) -> Result<Self> {
        let api = api()?;
        let _g = ContextGuard::push(ctx)?;
        let mut s = std::ptr::null_mut();
        // SAFETY: plain out-parameter; a context is current.
        check("cuStreamCreate", unsafe {
            (api.stream_create)(&mut s, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(Stream {
            raw: s as usize,
            ctx,
        })
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw as sys::CUstream
    }

    /// The stream's handle, as an application's stream handle is given to gpufile (a
    /// stream-ordered request on it: `crate::stream`).
    pub fn handle(&self) -> u64 {
        self.raw as u64
    }

    /// Queues a copy of `len` bytes from host memory at `src` to device address `dst`
    /// (`cuMemcpyHtoDAsync`).
    ///
    /// # Safety
    /// `src` must stay valid and unchanged, and `dst..dst + len` must stay valid device memory
    /// written by nobody else, until the copy is done (an event recorded after it fires, or the
    /// stream is synchronized).
    pub unsafe fn copy_to_device(&self, dst: u64, src: *const u8, len: usize) -> Result<()> {
        let api = api()?;
        // SAFETY: the caller's contract; the stream is live.
        check("cuMemcpyHtoDAsync", unsafe {
            (api.memcpy_htod_async)(dst, src.cast(), len, self.raw())
        })
    }

    /// Queues a copy of `len` bytes from device address `src` to host memory at `dst`
    /// (`cuMemcpyDtoHAsync`).
    ///
    /// # Safety
    /// `dst` must stay valid and untouched by anyone else, and `src..src + len` valid device
    /// memory, until the copy is done.
    pub unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, len: usize) -> Result<()> {
        let api = api()?;
        // SAFETY: the caller's contract; the stream is live.
        check("cuMemcpyDtoHAsync", unsafe {
            (api.memcpy_dtoh_async)(dst.cast(), src, len, self.raw())
        })
    }

    /// Waits for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        let api = api()?;
        // SAFETY: a live stream owned by self.
        check("cuStreamSynchronize", unsafe {
            (api.stream_synchronize)(self.raw())
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let (Ok(api), Ok(_g)) = (sys::cuda(), ContextGuard::push(self.ctx)) {
            // SAFETY: destroys the stream this value created, in its context.
            unsafe { (api.stream_destroy)(self.raw()) };
        }
    }
}

/// An event without timing, destroyed on drop.
pub struct Event {
    raw: usize,
    ctx: Context,
}

impl Event {
    /// Creates an event in `ctx`.
    pub fn new(ctx: Context) -> Result<Self> {
        let api = api()?;
        let _g = ContextGuard::push(ctx)?;
        let mut e = std::ptr::null_mut();
        // SAFETY: plain out-parameter; a context is current.
        check("cuEventCreate", unsafe {
            (api.event_create)(&mut e, sys::CU_EVENT_DISABLE_TIMING)
        })?;
        Ok(Event {
            raw: e as usize,
            ctx,
        })
    }

    fn raw(&self) -> sys::CUevent {
        self.raw as sys::CUevent
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let api = api()?;
        // SAFETY: live event and stream of the same context.
        check("cuEventRecord", unsafe {
            (api.event_record)(self.raw(), stream.raw())
        })
    }

    /// Waits until the work before the last record has finished.
    pub fn synchronize(&self) -> Result<()> {
        let api = api()?;
        // SAFETY: a live event owned by self.
        check("cuEventSynchronize", unsafe {
            (api.event_synchronize)(self.raw())
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let (Ok(api), Ok(_g)) = (sys::cuda(), ContextGuard::push(self.ctx)) {
            // SAFETY: destroys the event this value created.
            unsafe { (api.event_destroy)(self.raw()) };
        }
    }
}

/// Page-locked, page-aligned host memory usable from every context (`CU_MEMHOSTALLOC_PORTABLE`).
pub struct PinnedBuffer {
    ptr: usize,
    len: usize,
    ctx: Context,
}

impl PinnedBuffer {
    /// Allocates `len` bytes under `ctx` (a context gpufile retains, so the free always works).
    pub fn new(len: usize, ctx: Context) -> Result<Self> {
        Self::with_flags(len, ctx, sys::CU_MEMHOSTALLOC_PORTABLE)
    }

    /// As [`PinnedBuffer::new`], also mapped into the devices' address space
    /// (`CU_MEMHOSTALLOC_DEVICEMAP`); the device address of its start.
    pub fn new_mapped(len: usize, ctx: Context) -> Result<(Self, u64)> {
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        let buf = Self::with_flags(len, ctx, flags)?;
        let api = api()?;
        let get = api
            .mem_host_get_device_pointer
            .ok_or_else(|| Error::CudaUnavailable {
                reason: "the driver has no cuMemHostGetDevicePointer".into(),
            })?;
        let _g = ContextGuard::push(ctx)?;
        let mut dev = 0;
        // SAFETY: a mapped allocation this value owns; plain out-parameter; flags must be 0.
        check("cuMemHostGetDevicePointer", unsafe {
            get(&mut dev, buf.as_ptr().cast(), 0)
        })?;
        Ok((buf, dev))
    }

    fn with_flags(len: usize, ctx: Context, flags: std::ffi::c_uint) -> Result<Self> {
        let api = api()?;
        let _g = ContextGuard::push(ctx)?;
        let mut p = std::ptr::null_mut();
        // SAFETY: plain out-parameter; a context is current.
        check("cuMemHostAlloc", unsafe {
            (api.mem_host_alloc)(&mut p, len.max(1), flags)
        })?;
        Ok(PinnedBuffer {
            ptr: p as usize,
            len,
            ctx,
        })
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let (Ok(api), Ok(_g)) = (sys::cuda(), ContextGuard::push(self.ctx)) {
            // SAFETY: frees the allocation this value made; nobody uses it any more.
            unsafe { (api.mem_free_host)(self.ptr as *mut c_void) };
        }
    }
}

/// Host memory the caller owns, page-locked for reads by every GPU (`cuMemHostRegister` with
/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY`: a read-only file mapping can be
/// registered), unregistered on drop.
pub struct HostRegistration {
    ptr: usize,
    len: usize,
    ctx: Context,
}

impl HostRegistration {
    /// Registers `[ptr, ptr + len)` under `ctx` (a context gpufile retains).
    ///
    /// # Safety
    /// The range must be mapped (readable) for as long as the returned value lives: the driver
    /// pins its pages, and copies from it read them.
    pub unsafe fn new(ptr: *const u8, len: usize, ctx: Context) -> Result<Self> {
        let api = api()?;
        let _g = ContextGuard::push(ctx)?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_READ_ONLY;
        // SAFETY: the caller keeps the range mapped while registered; a context is current.
        check("cuMemHostRegister", unsafe {
            (api.mem_host_register)(ptr as *mut c_void, len, flags)
        })?;
        Ok(HostRegistration {
            ptr: ptr as usize,
            len,
            ctx,
        })
    }

    /// Start of the registered range.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        if let (Ok(api), Ok(_g)) = (sys::cuda(), ContextGuard::push(self.ctx)) {
            // SAFETY: unregisters the range this value registered; no copy reads it any more
            // (every holder of the registration drained its stream before letting go).
            unsafe { (api.mem_host_unregister)(self.ptr as *mut c_void) };
        }
    }
}

/// Device memory from `cuMemAlloc` on a device's primary context, freed on drop (for tests,
/// the CLI and benchmarks; Python callers bring their own arrays).
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    ctx: Context,
}

impl DeviceBuffer {
    /// Allocates `len` bytes on device `ordinal`.
    pub fn new(len: usize, ordinal: i32) -> Result<Self> {
        let api = api()?;
        let ctx = primary_context(ordinal)?;
        let _g = ContextGuard::push(ctx)?;
        let mut p = 0;
        // SAFETY: plain out-parameter; a context is current.
        check("cuMemAlloc", unsafe { (api.mem_alloc)(&mut p, len.max(1)) })?;
        Ok(DeviceBuffer { ptr: p, len, ctx })
    }

    /// The device address.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` into the buffer at `offset` (blocking).
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        let api = api()?;
        let _g = ContextGuard::push(self.ctx)?;
        // SAFETY: the range was checked against the allocation; `src` is a valid slice.
        check("cuMemcpyHtoD", unsafe {
            (api.memcpy_htod)(self.ptr + offset as u64, src.as_ptr().cast(), src.len())
        })
    }

    /// Copies from the buffer at `offset` into `dst` (blocking).
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        let api = api()?;
        let _g = ContextGuard::push(self.ctx)?;
        // SAFETY: the range was checked against the allocation; `dst` is a valid slice.
        check("cuMemcpyDtoH", unsafe {
            (api.memcpy_dtoh)(dst.as_mut_ptr().cast(), self.ptr + offset as u64, dst.len())
        })
    }

    /// Sets every byte to `value` (blocking).
    pub fn fill(&self, value: u8) -> Result<()> {
        let api = api()?;
        let _g = ContextGuard::push(self.ctx)?;
        // SAFETY: the whole allocation.
        check("cuMemsetD8", unsafe {
            (api.memset_d8)(self.ptr, value, self.len)
        })
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len)
    }
}

/// Refuses `offset..offset + len` unless it lies within a device buffer of `size` bytes.
fn check_range(offset: usize, len: usize, size: usize) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(Error::InvalidArgument(format!(
            "range {offset}+{len} outside a device buffer of {size} bytes"
        )));
    }
    Ok(())
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let (Ok(api), Ok(_g)) = (sys::cuda(), ContextGuard::push(self.ctx)) {
            // SAFETY: frees the allocation this value made.
            unsafe { (api.mem_free)(self.ptr) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_inside_a_device_buffer_only() {
        for (offset, len) in [(0, 4096), (4095, 1), (4096, 0), (0, 0)] {
            check_range(offset, len, 4096).unwrap();
        }
        for (offset, len) in [(0, 4097), (4096, 1), (1, 4096), (usize::MAX, 2)] {
            let e = check_range(offset, len, 4096).unwrap_err();
            let want = format!("range {offset}+{len} outside a device buffer of 4096 bytes");
            assert!(
                matches!(&e, Error::InvalidArgument(m) if *m == want),
                "{e:?}"
            );
        }
    }

    #[test]
    fn driver_statuses_become_results() {
        check("cuInit", sys::CUDA_SUCCESS).unwrap();
        // 1 is CUDA_ERROR_INVALID_VALUE; named by the driver where one is installed.
        match check("cuMemAlloc", 1).unwrap_err() {
            Error::Cuda {
                call, code, name, ..
            } => {
                assert_eq!((call, code), ("cuMemAlloc", 1));
                assert!(
                    name == "unknown" || name == "CUDA_ERROR_INVALID_VALUE",
                    "{name}"
                );
            }
            e => panic!("{e:?}"),
        }
    }
}
