//! The futures C holds: waiting on a request, asking whether it ended, a callback run when it
//! ends (what the C++ API completes its `std::future`s from, with no thread of its own per
//! request), and freeing.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use gpufile_core::IoFuture;

use crate::error::{guard, CallError};
use crate::handles::Table;
use crate::{gpufile_future, gpufile_status, out_arg, put};

/// The futures, by the number their `gpufile_future*` is.
static FUTURES: Table<IoFuture> = Table::new("future");

/// The future `fut` names.
fn future_of(fut: *const gpufile_future) -> Result<Arc<IoFuture>, CallError> {
    FUTURES.get(fut as usize)
}

/// Stores `future` in the table and its handle in `*out`.
///
/// # Safety
/// `out` is non-null and valid for a write of a pointer.
pub(crate) unsafe fn give_future(future: IoFuture, out: *mut *mut gpufile_future) {
    let id = FUTURES.insert(future);
    // SAFETY: the caller's contract.
    unsafe { put(out, id as *mut gpufile_future) };
}

/// Stores the bytes of an ended request in `*out_bytes` (if not null), or its error.
///
/// # Safety
/// `out_bytes` is null or valid for a write of a `size_t`.
unsafe fn ended(
    result: gpufile_core::Result<usize>,
    out_bytes: *mut usize,
) -> Result<(), CallError> {
    let n = result?;
    if !out_bytes.is_null() {
        // SAFETY: non-null; the caller's contract.
        unsafe { put(out_bytes, n) };
    }
    Ok(())
}

/// Waits until the request of `fut` ends; stores the bytes it moved in `*out_bytes` (if not
/// null), or returns its error. May be called again: it gives the same answer.
///
/// # Safety
/// `out_bytes` is null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_future_wait(
    fut: *const gpufile_future,
    out_bytes: *mut usize,
) -> gpufile_status {
    guard(|| {
        let fut = future_of(fut)?;
        // SAFETY: the caller's contract.
        unsafe { ended(fut.wait(), out_bytes) }
    })
}

/// As `gpufile_future_wait`, but gives up after `timeout_ns` nanoseconds with
/// `GPUFILE_TIMEOUT` (the request goes on; wait again later).
///
/// # Safety
/// `out_bytes` is null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_future_wait_for(
    fut: *const gpufile_future,
    timeout_ns: u64,
    out_bytes: *mut usize,
) -> gpufile_status {
    guard(|| {
        let fut = future_of(fut)?;
        match fut.wait_timeout(Duration::from_nanos(timeout_ns)) {
            // SAFETY: the caller's contract.
            Some(result) => unsafe { ended(result, out_bytes) },
            None => Err(CallError::timeout(format!(
                "the request is not done after {timeout_ns} ns"
            ))),
        }
    })
}

/// Stores in `*out_done` whether the request of `fut` has ended (1) or not (0).
///
/// # Safety
/// `out_done` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_future_done(
    fut: *const gpufile_future,
    out_done: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out_done, "out_done")?;
        let fut = future_of(fut)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out_done, c_int::from(fut.is_done())) };
        Ok(())
    })
}

/// Cancels what `fut`'s request has not started yet: its tasks not yet begun end as skipped,
/// those running go on to their end, and the future then ends with the error "cancelled"
/// (`GPUFILE_OTHER`) unless it had ended already. Returns at once; wait for the future (or
/// free it) to know no worker still uses the buffer. Bytes of the buffer (or, for a write, of
/// the file) that the skipped tasks would have moved keep their values.
#[no_mangle]
pub extern "C" fn gpufile_future_cancel(fut: *const gpufile_future) -> gpufile_status {
    guard(|| {
        future_of(fut)?.cancel();
        Ok(())
    })
}

/// Frees `fut`. A request still running is waited for first (as the destructor of the
/// `std::future` of `std::async` does), so that no byte of its buffer is touched after this
/// returns; its result is dropped (call `gpufile_future_wait` first to learn it). A future
/// freed already, or NULL, is `GPUFILE_BAD_ARGUMENT`.
#[no_mangle]
pub extern "C" fn gpufile_future_free(fut: *mut gpufile_future) -> gpufile_status {
    guard(|| {
        let fut = FUTURES.remove(fut as usize)?;
        let _ended = fut.wait();
        Ok(())
    })
}

/// A C callback with its argument, run once on whichever thread ends the request.
struct OnDone {
    callback: unsafe extern "C" fn(*mut c_void),
    ctx: *mut c_void,
}

// SAFETY: `gpufile_future_on_done`'s contract: the callback may run with `ctx` on any thread.
unsafe impl Send for OnDone {}

impl OnDone {
    fn run(self) {
        // SAFETY: the caller of `gpufile_future_on_done` gave the callback for this `ctx`.
        unsafe { (self.callback)(self.ctx) }
    }
}

/// Runs `callback(ctx)` once, when the request of `fut` has ended: on the thread that ends it
/// (one of gpufile's workers), or at once on the calling thread where it has ended already.
/// Its buffer is then no longer used, and `gpufile_future_wait` on `fut` answers at once. The
/// callback may wait on, ask about or free `fut`; it should return soon (it runs on a worker)
/// and must not unwind (a C++ exception leaving it ends the process). Any number of callbacks
/// may be added; freeing `fut` does not cancel them.
///
/// # Safety
/// `callback` is null or a function that may be called once with `ctx` from any thread.
#[no_mangle]
pub unsafe extern "C" fn gpufile_future_on_done(
    fut: *const gpufile_future,
    callback: Option<unsafe extern "C" fn(*mut c_void)>,
    ctx: *mut c_void,
) -> gpufile_status {
    guard(|| {
        let callback = callback.ok_or_else(|| CallError::bad("callback is NULL"))?;
        let fut = future_of(fut)?;
        let call = OnDone { callback, ctx };
        fut.on_done(move || call.run());
        Ok(())
    })
}
