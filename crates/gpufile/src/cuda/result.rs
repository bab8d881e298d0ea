//! The result layer: the only place that calls the driver. Each entry point is called here once,
//! its `CUresult` turned into the crate's [`Error`]; the safe types of the sibling modules build
//! on these functions. A function is `unsafe` where the driver would read or write through a
//! handle or address that it cannot check, and its `# Safety` says what the caller keeps valid.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use gpufile_sys::{
    self as sys, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult,
    CUstream, CudaApi,
};

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
    let read = |p: *const c_char| {
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

/// The error for an optional entry point this driver does not export.
fn missing(entry: &str) -> Error {
    Error::CudaUnavailable {
        reason: format!("the driver has no {entry}"),
    }
}

/// `cuDriverGetVersion`: the version as the driver encodes it (1000 × major + 10 × minor).
pub(super) fn driver_get_version() -> Result<c_int> {
    let api = api()?;
    let mut v = 0;
    // SAFETY: plain out-parameter.
    check("cuDriverGetVersion", unsafe {
        (api.driver_get_version)(&mut v)
    })?;
    Ok(v)
}

/// `cuDeviceGetCount`.
pub(super) fn device_get_count() -> Result<c_int> {
    let api = api()?;
    let mut n = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGetCount", unsafe {
        (api.device_get_count)(&mut n)
    })?;
    Ok(n)
}

/// `cuDeviceGet`: the device of ordinal `ordinal`.
pub(super) fn device_get(ordinal: c_int) -> Result<CUdevice> {
    let api = api()?;
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuDeviceGet", unsafe {
        (api.device_get)(&mut dev, ordinal)
    })?;
    Ok(dev)
}

/// `cuDeviceGetName`.
pub(super) fn device_get_name(dev: CUdevice) -> Result<String> {
    let api = api()?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    check("cuDeviceGetName", unsafe {
        (api.device_get_name)(buf.as_mut_ptr(), 256, dev)
    })?;
    // SAFETY: NUL-terminated by the driver within the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// `cuDeviceTotalMem`: bytes.
pub(super) fn device_total_mem(dev: CUdevice) -> Result<usize> {
    let api = api()?;
    let mut bytes = 0usize;
    // SAFETY: plain out-parameter.
    check("cuDeviceTotalMem", unsafe {
        (api.device_total_mem)(&mut bytes, dev)
    })?;
    Ok(bytes)
}

/// `cuDeviceGetAttribute`.
pub(super) fn device_get_attribute(attr: c_int, dev: CUdevice) -> Result<c_int> {
    let api = api()?;
    let mut v = 0;
    // SAFETY: plain out-parameter; an unknown attribute is an error status, not a crash.
    check("cuDeviceGetAttribute", unsafe {
        (api.device_get_attribute)(&mut v, attr, dev)
    })?;
    Ok(v)
}

/// `cuDevicePrimaryCtxRetain`; the caller decides when (if ever) to release.
pub(super) fn primary_ctx_retain(dev: CUdevice) -> Result<CUcontext> {
    let api = api()?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: plain out-parameter.
    check("cuDevicePrimaryCtxRetain", unsafe {
        (api.primary_ctx_retain)(&mut ctx, dev)
    })?;
    Ok(ctx)
}

/// `cuCtxGetCurrent`: null where no context is current on this thread.
pub(super) fn ctx_get_current() -> Result<CUcontext> {
    let api = api()?;
    let mut current = std::ptr::null_mut();
    // SAFETY: plain out-parameter.
    check("cuCtxGetCurrent", unsafe {
        (api.ctx_get_current)(&mut current)
    })?;
    Ok(current)
}

/// `cuCtxGetDevice`: the device of the current context.
pub(super) fn ctx_get_device() -> Result<CUdevice> {
    let api = api()?;
    let mut dev = 0;
    // SAFETY: plain out-parameter.
    check("cuCtxGetDevice", unsafe { (api.ctx_get_device)(&mut dev) })?;
    Ok(dev)
}

/// `cuCtxPushCurrent`.
///
/// # Safety
/// `ctx` must be a context handle the driver gave (a pointer attribute or a primary retain).
pub(super) unsafe fn ctx_push_current(ctx: CUcontext) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuCtxPushCurrent", unsafe { (api.ctx_push_current)(ctx) })
}

/// `cuCtxPopCurrent`: the context popped off this thread's stack.
pub(super) fn ctx_pop_current() -> Result<CUcontext> {
    let api = api()?;
    let mut old = std::ptr::null_mut();
    // SAFETY: plain out-parameter.
    check("cuCtxPopCurrent", unsafe {
        (api.ctx_pop_current)(&mut old)
    })?;
    Ok(old)
}

/// `cuPointerGetAttributes` of `addr`, one 8-byte slot per attribute: each attribute is written
/// as 1, 4 or 8 bytes at the start of its slot, and zeroed slots read back correctly for all of
/// them on little-endian x86-64 and aarch64.
pub(super) fn pointer_get_attributes<const N: usize>(
    mut attrs: [c_uint; N],
    addr: CUdeviceptr,
) -> Result<[u64; N]> {
    let api = api()?;
    let mut vals = [0u64; N];
    let mut ptrs: [*mut c_void; N] = [std::ptr::null_mut(); N];
    for (p, v) in ptrs.iter_mut().zip(vals.iter_mut()) {
        *p = (v as *mut u64).cast();
    }
    // SAFETY: `attrs` and `ptrs` have N entries; each slot is 8 bytes, the largest attribute.
    check("cuPointerGetAttributes", unsafe {
        (api.pointer_get_attributes)(N as c_uint, attrs.as_mut_ptr(), ptrs.as_mut_ptr(), addr)
    })?;
    Ok(vals)
}

/// `cuStreamCreate` in the current context.
pub(super) fn stream_create(flags: c_uint) -> Result<CUstream> {
    let api = api()?;
    let mut s = std::ptr::null_mut();
    // SAFETY: plain out-parameter; without a current context the driver returns an error.
    check("cuStreamCreate", unsafe {
        (api.stream_create)(&mut s, flags)
    })?;
    Ok(s)
}

/// `cuStreamDestroy`.
///
/// # Safety
/// `stream` must be a stream the caller created, destroyed once, in its context.
pub(super) unsafe fn stream_destroy(stream: CUstream) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuStreamDestroy", unsafe { (api.stream_destroy)(stream) })
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `stream` must be a live stream of the current context, or a special handle (0, 1, 2).
pub(super) unsafe fn stream_synchronize(stream: CUstream) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuStreamSynchronize", unsafe {
        (api.stream_synchronize)(stream)
    })
}

/// `cuStreamQuery`: whether the stream has no work left (`CUDA_ERROR_NOT_READY` is "no").
///
/// # Safety
/// As for [`stream_synchronize`].
pub(super) unsafe fn stream_query(stream: CUstream) -> Result<bool> {
    let api = api()?;
    // SAFETY: the caller's contract.
    match unsafe { (api.stream_query)(stream) } {
        sys::CUDA_ERROR_NOT_READY => Ok(false),
        code => check("cuStreamQuery", code).map(|()| true),
    }
}

/// Refuses unless the driver exports `cuStreamWaitValue32` (v2 or v1).
pub(super) fn has_stream_wait_value32() -> Result<()> {
    let api = api()?;
    match api.stream_wait_value32_v2.or(api.stream_wait_value32) {
        Some(_) => Ok(()),
        None => Err(missing("cuStreamWaitValue32")),
    }
}

/// `cuStreamWaitValue32` (v2 where exported, else v1).
///
/// # Safety
/// `stream` as for [`stream_synchronize`]; `addr` must stay readable by the device until the
/// stream has passed the wait.
pub(super) unsafe fn stream_wait_value32(
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> Result<()> {
    let api = api()?;
    let wait = api
        .stream_wait_value32_v2
        .or(api.stream_wait_value32)
        .ok_or_else(|| missing("cuStreamWaitValue32"))?;
    // SAFETY: the caller's contract.
    check("cuStreamWaitValue32", unsafe {
        wait(stream, addr, value, flags)
    })
}

/// Refuses unless the driver exports `cuLaunchHostFunc`.
pub(super) fn has_launch_host_func() -> Result<()> {
    match api()?.launch_host_func {
        Some(_) => Ok(()),
        None => Err(missing("cuLaunchHostFunc")),
    }
}

/// `cuLaunchHostFunc`.
///
/// # Safety
/// `stream` as for [`stream_synchronize`]; `f` must make no CUDA call, and `data` must stay
/// valid until `f` has run with it (exactly once if this returns `Ok`, never otherwise).
pub(super) unsafe fn launch_host_func(
    stream: CUstream,
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
) -> Result<()> {
    let api = api()?;
    let launch = api
        .launch_host_func
        .ok_or_else(|| missing("cuLaunchHostFunc"))?;
    // SAFETY: the caller's contract.
    check("cuLaunchHostFunc", unsafe { launch(stream, f, data) })
}

/// `cuMemcpyHtoDAsync`.
///
/// # Safety
/// `stream` as for [`stream_synchronize`]; `src` must stay valid and unchanged, and
/// `dst..dst + len` valid device memory written by nobody else, until the stream has passed
/// the copy.
pub(super) unsafe fn memcpy_htod_async(
    dst: CUdeviceptr,
    src: *const u8,
    len: usize,
    stream: CUstream,
) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemcpyHtoDAsync", unsafe {
        (api.memcpy_htod_async)(dst, src.cast(), len, stream)
    })
}

/// `cuMemcpyDtoHAsync`.
///
/// # Safety
/// `stream` as for [`stream_synchronize`]; `dst` must stay valid and untouched by anyone else,
/// and `src..src + len` valid device memory, until the stream has passed the copy.
pub(super) unsafe fn memcpy_dtoh_async(
    dst: *mut u8,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemcpyDtoHAsync", unsafe {
        (api.memcpy_dtoh_async)(dst.cast(), src, len, stream)
    })
}

/// `cuEventCreate` in the current context.
pub(super) fn event_create(flags: c_uint) -> Result<CUevent> {
    let api = api()?;
    let mut e = std::ptr::null_mut();
    // SAFETY: plain out-parameter; without a current context the driver returns an error.
    check("cuEventCreate", unsafe {
        (api.event_create)(&mut e, flags)
    })?;
    Ok(e)
}

/// `cuEventRecord`.
///
/// # Safety
/// `event` must be a live event, and `stream` as for [`stream_synchronize`].
pub(super) unsafe fn event_record(event: CUevent, stream: CUstream) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuEventRecord", unsafe {
        (api.event_record)(event, stream)
    })
}

/// `cuEventSynchronize`.
///
/// # Safety
/// `event` must be a live event.
pub(super) unsafe fn event_synchronize(event: CUevent) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuEventSynchronize", unsafe {
        (api.event_synchronize)(event)
    })
}

/// `cuEventDestroy`.
///
/// # Safety
/// `event` must be an event the caller created, destroyed once, in its context.
pub(super) unsafe fn event_destroy(event: CUevent) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuEventDestroy", unsafe { (api.event_destroy)(event) })
}

/// `cuMemHostAlloc` of `len` bytes in the current context.
pub(super) fn mem_host_alloc(len: usize, flags: c_uint) -> Result<*mut c_void> {
    let api = api()?;
    let mut p = std::ptr::null_mut();
    // SAFETY: plain out-parameter; without a current context the driver returns an error.
    check("cuMemHostAlloc", unsafe {
        (api.mem_host_alloc)(&mut p, len, flags)
    })?;
    Ok(p)
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `p` must come from [`mem_host_alloc`], be freed once, and be used by nobody any more.
pub(super) unsafe fn mem_free_host(p: *mut c_void) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemFreeHost", unsafe { (api.mem_free_host)(p) })
}

/// `cuMemHostGetDevicePointer`, where the driver exports it: the device address of `p`.
///
/// # Safety
/// `p` must lie in a live allocation from [`mem_host_alloc`] with `CU_MEMHOSTALLOC_DEVICEMAP`.
pub(super) unsafe fn mem_host_get_device_pointer(p: *mut c_void) -> Result<CUdeviceptr> {
    let api = api()?;
    let get = api
        .mem_host_get_device_pointer
        .ok_or_else(|| missing("cuMemHostGetDevicePointer"))?;
    let mut dev = 0;
    // SAFETY: the caller's contract; plain out-parameter; flags must be 0.
    check("cuMemHostGetDevicePointer", unsafe { get(&mut dev, p, 0) })?;
    Ok(dev)
}

/// `cuMemHostRegister`.
///
/// # Safety
/// `[p, p + len)` must stay mapped for as long as it is registered: the driver pins its pages,
/// and copies from it read them.
pub(super) unsafe fn mem_host_register(p: *mut c_void, len: usize, flags: c_uint) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemHostRegister", unsafe {
        (api.mem_host_register)(p, len, flags)
    })
}

/// `cuMemHostUnregister`.
///
/// # Safety
/// `p` must be the start of a range registered with [`mem_host_register`] that no copy reads
/// any more.
pub(super) unsafe fn mem_host_unregister(p: *mut c_void) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemHostUnregister", unsafe {
        (api.mem_host_unregister)(p)
    })
}

/// `cuMemAlloc` of `len` bytes in the current context.
pub(super) fn mem_alloc(len: usize) -> Result<CUdeviceptr> {
    let api = api()?;
    let mut p = 0;
    // SAFETY: plain out-parameter; without a current context the driver returns an error.
    check("cuMemAlloc", unsafe { (api.mem_alloc)(&mut p, len) })?;
    Ok(p)
}

/// `cuMemFree`.
///
/// # Safety
/// `p` must come from [`mem_alloc`], be freed once, and be used by nobody any more.
pub(super) unsafe fn mem_free(p: CUdeviceptr) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemFree", unsafe { (api.mem_free)(p) })
}

/// `cuMemcpyHtoD` (blocking).
///
/// # Safety
/// `src` must be readable and `dst..dst + len` valid device memory for `len` bytes.
pub(super) unsafe fn memcpy_htod(dst: CUdeviceptr, src: *const u8, len: usize) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemcpyHtoD", unsafe {
        (api.memcpy_htod)(dst, src.cast(), len)
    })
}

/// `cuMemcpyDtoH` (blocking).
///
/// # Safety
/// `dst` must be writable and `src..src + len` valid device memory for `len` bytes.
pub(super) unsafe fn memcpy_dtoh(dst: *mut u8, src: CUdeviceptr, len: usize) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemcpyDtoH", unsafe {
        (api.memcpy_dtoh)(dst.cast(), src, len)
    })
}

/// `cuMemsetD8` (blocking).
///
/// # Safety
/// `dst..dst + len` must be valid device memory.
pub(super) unsafe fn memset_d8(dst: CUdeviceptr, value: u8, len: usize) -> Result<()> {
    let api = api()?;
    // SAFETY: the caller's contract.
    check("cuMemsetD8", unsafe { (api.memset_d8)(dst, value, len) })
}

/// `cuModuleLoadData` of a PTX image in the current context. The module stays loaded for the
/// process's life (it belongs to a primary context gpufile retains).
pub(super) fn module_load_data(image: &CStr) -> Result<CUmodule> {
    let api = api()?;
    let load = api
        .module_load_data
        .ok_or_else(|| missing("cuModuleLoadData"))?;
    let mut module = std::ptr::null_mut();
    // SAFETY: `image` is a NUL-terminated PTX text the driver only reads; plain out-parameter;
    // the caller made a context current.
    check("cuModuleLoadData", unsafe {
        load(&mut module, image.as_ptr().cast())
    })?;
    Ok(module)
}

/// `cuModuleGetFunction`: the kernel `name` of `module`.
///
/// # Safety
/// `module` must come from [`module_load_data`] (never unloaded).
pub(super) unsafe fn module_get_function(module: CUmodule, name: &CStr) -> Result<CUfunction> {
    let api = api()?;
    let get = api
        .module_get_function
        .ok_or_else(|| missing("cuModuleGetFunction"))?;
    let mut f = std::ptr::null_mut();
    // SAFETY: the caller's contract; `name` is NUL-terminated; plain out-parameter.
    check("cuModuleGetFunction", unsafe {
        get(&mut f, module, name.as_ptr())
    })?;
    Ok(f)
}

/// `cuLaunchKernel` of `f` on a one-dimensional grid of `grid` blocks of `block` threads.
///
/// # Safety
/// `f` must come from [`module_get_function`]; `params` must point at one value per kernel
/// parameter, of the kernel's types, valid for this call; every address the kernel reads or
/// writes must stay valid until the stream has passed the launch; `stream` as for
/// [`stream_synchronize`].
pub(super) unsafe fn launch_kernel(
    f: CUfunction,
    grid: c_uint,
    block: c_uint,
    stream: CUstream,
    params: &mut [*mut c_void],
) -> Result<()> {
    let api = api()?;
    let launch = api.launch_kernel.ok_or_else(|| missing("cuLaunchKernel"))?;
    // SAFETY: the caller's contract; no shared memory and no `extra` array.
    check("cuLaunchKernel", unsafe {
        launch(
            f,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
