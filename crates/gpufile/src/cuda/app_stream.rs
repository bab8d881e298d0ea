//! Work on an application's stream, named by its handle (a `__cuda_array_interface__` `stream`
//! value, or what a C or C++ caller passes): waits, queries, copies, value waits and host
//! functions. gpufile never owns these streams; the handle's producer keeps it alive.

use std::ffi::c_void;

use gpufile_sys::{self as sys, CUstream};

use super::context::{push_unless_current, Context, ContextGuard};
use super::result;
use crate::error::Result;

/// Waits for all work queued on the stream `handle` (a `__cuda_array_interface__` `stream`
/// value: 1 is the legacy default stream, 2 the per-thread default stream) in `ctx`.
pub fn synchronize_stream(handle: u64, ctx: Context) -> Result<()> {
    let _g = ContextGuard::push(ctx)?;
    // SAFETY: the handle comes from the array's producer, who promises it is a live stream in
    // this context (CUDA Array Interface v3), or is one of the special values 1 and 2.
    unsafe { result::stream_synchronize(handle as CUstream) }
}

/// Whether the stream `handle` (as for [`synchronize_stream`]) in `ctx` has no work left
/// (`cuStreamQuery`): an idle stream needs no wait. `ctx` is pushed only when it is not the
/// thread's current context already.
pub fn stream_idle(handle: u64, ctx: Context) -> Result<bool> {
    let _g = push_unless_current(ctx)?;
    // SAFETY: as for `synchronize_stream`: the producer's live stream or a special handle.
    unsafe { result::stream_query(handle as CUstream) }
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
    let _g = push_unless_current(ctx)?;
    let stream = handle as CUstream;
    match copy {
        // SAFETY: the caller's contract.
        StreamCopy::ToDevice { dst, src, len } => unsafe {
            result::memcpy_htod_async(dst, src, len, stream)
        },
        // SAFETY: the caller's contract.
        StreamCopy::ToHost { dst, src, len } => unsafe {
            result::memcpy_dtoh_async(dst, src, len, stream)
        },
    }
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
    result::has_stream_wait_value32()?;
    let _g = push_unless_current(ctx)?;
    // SAFETY: the caller's contract.
    unsafe {
        result::stream_wait_value32(
            handle as CUstream,
            addr,
            value,
            sys::CU_STREAM_WAIT_VALUE_GEQ,
        )
    }
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
    result::has_launch_host_func()?;
    let _g = push_unless_current(ctx)?;
    // SAFETY: the caller's contract.
    unsafe { result::launch_host_func(handle as CUstream, f, data) }
}
