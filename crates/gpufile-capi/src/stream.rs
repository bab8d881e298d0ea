//! Stream-ordered reads and writes (KvikIO's `read_async` / `write_async`): queued on the
//! caller's CUDA stream through `gpufile_core::__private::stream`, returning at once with a future.

use std::ffi::c_void;

use gpufile_core::__private::cuda::{self, Context, PointerInfo};
use gpufile_core::__private::stream::{self, OnStream, StreamOrder};
use gpufile_core::{Direction, Engine, Request};

use crate::error::{guard, CallError};
use crate::{buffer, file_of, give_future, gpufile_file, gpufile_future, gpufile_status};
use crate::{out_arg, put};

/// How the work queued on a stream after a stream-ordered request waits for it
/// (`gpufile_file_read_async`, `gpufile_file_write_async`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gpufile_stream_order {
    /// The stream waits on a flag gpufile sets when the file read ends (`cuStreamWaitValue32`),
    /// then copies the bytes to the buffer.
    GPUFILE_STREAM_WAIT_VALUE = 0,
    /// A host function on the stream blocks until the file read ends (no stream memory
    /// operations), then the stream copies the bytes.
    GPUFILE_STREAM_HOST_FUNCTION = 1,
    /// A write: the stream copies the source into pinned staging and goes on; the file write
    /// follows the copy, and the stream's next stream-ordered request follows the file write.
    GPUFILE_STREAM_STAGED = 2,
    /// The call waited for the stream, then for the request (no CUDA driver, no
    /// `cuLaunchHostFunc`, or more staging than gpufile keeps).
    GPUFILE_STREAM_CALLER_WAITS = 3,
}

fn order_of(order: StreamOrder) -> gpufile_stream_order {
    use gpufile_stream_order::*;
    match order {
        StreamOrder::WaitValue => GPUFILE_STREAM_WAIT_VALUE,
        StreamOrder::HostFunction => GPUFILE_STREAM_HOST_FUNCTION,
        StreamOrder::Staged => GPUFILE_STREAM_STAGED,
        StreamOrder::CallerWaits => GPUFILE_STREAM_CALLER_WAITS,
    }
}

/// The stream's context and device, as the buffer says (device memory), else the thread's
/// current context, else device 0's primary context; `None` without a usable driver.
fn stream_device(info: Option<PointerInfo>) -> Result<Option<(Context, i32)>, CallError> {
    if let Some(info) = info {
        let device = info.device.unwrap_or(0);
        let ctx = match info.context {
            Some(c) => c,
            None => cuda::primary_context(device)?,
        };
        return Ok(Some((ctx, device)));
    }
    Ok(match cuda::current_context() {
        Err(_) => None,
        Ok(Some(ctx)) => Some((ctx, cuda::context_device(ctx)?)),
        Ok(None) => match gpufile_core::device_count() {
            Ok(n) if n > 0 => Some((cuda::primary_context(0)?, 0)),
            _ => None,
        },
    })
}

/// A stream-ordered request (see `gpufile_file_read_async`).
///
/// # Safety
/// As `gpufile_file_read_async`.
#[allow(clippy::too_many_arguments)]
unsafe fn queue(
    file: *const gpufile_file,
    dir: Direction,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    cuda_stream: *mut c_void,
    out: *mut *mut gpufile_future,
    out_order: *mut gpufile_stream_order,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let file = file_of(file)?;
        let (buf, info) = buffer(buf, size)?;
        let req = match dir {
            Direction::Read => Request::read(buf, file_offset),
            Direction::Write => Request::write(buf, file_offset),
        };
        req.ranges.check(req.direction, size)?;
        let req = req.pointer_info(info);
        let on = OnStream {
            handle: cuda_stream as usize as u64,
            device: stream_device(info)?,
        };
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: the buffer stays valid until the future ends (the caller's contract); the
        // stream is the caller's live one, used during this call only.
        let (fut, ordering) =
            unsafe { stream::submit(&engine, file.endpoint(dir), req, settings, on, None) }?;
        if !out_order.is_null() {
            // SAFETY: non-null; the caller's contract.
            unsafe { put(out_order, order_of(ordering.order)) };
        }
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give_future(fut, out) };
        Ok(())
    })
}

/// Queues a read of `size` bytes at `file_offset` of `file` into `buf` (device or host memory)
/// on the CUDA stream `cuda_stream` (a `CUstream`/`cudaStream_t`; NULL is the legacy default
/// stream) and returns at once with a future in `*out`: the read starts once the work queued
/// on the stream before the call has finished, and the work queued after the call sees its
/// bytes. `*out_order` (if not null) says how the stream waits. Bad arguments, a file not open
/// for reading and a read past the end of the file as it is now (unless a write queued earlier
/// on the stream is still running) are refused here, with nothing queued. Errors found when the
/// stream gets there (the file shrank, a failed `pread`) end the future, and every byte of the
/// buffer the read did not read keeps its value. Freeing the future waits for the read, and so
/// for the stream to get there.
///
/// # Safety
/// `buf` is null or valid for writes of `size` bytes until the future is done, and not used
/// otherwise meanwhile; `cuda_stream` is a live stream of the buffer's context (or NULL);
/// `out` is null or valid for a write of a pointer; `out_order` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_read_async(
    file: *const gpufile_file,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    cuda_stream: *mut c_void,
    out: *mut *mut gpufile_future,
    out_order: *mut gpufile_stream_order,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe {
        queue(
            file,
            Direction::Read,
            buf,
            size,
            file_offset,
            cuda_stream,
            out,
            out_order,
        )
    }
}

/// Queues a write of `size` bytes of `buf` (device or host memory) at `file_offset` of `file`
/// on `cuda_stream`, returning at once with a future in `*out`. From device memory it is
/// staged: the stream copies the source after the work queued before the call and goes on
/// (the work queued after the call may change `buf` at once); the file write follows, and the
/// future ends with it. Otherwise as `gpufile_file_read_async`.
///
/// # Safety
/// As `gpufile_file_read_async`, the buffer read (not written) until the future is done.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_write_async(
    file: *const gpufile_file,
    buf: *const c_void,
    size: usize,
    file_offset: u64,
    cuda_stream: *mut c_void,
    out: *mut *mut gpufile_future,
    out_order: *mut gpufile_stream_order,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe {
        queue(
            file,
            Direction::Write,
            buf.cast_mut(),
            size,
            file_offset,
            cuda_stream,
            out,
            out_order,
        )
    }
}
