//! Streams and events gpufile creates and owns, destroyed on drop in their context.

use gpufile_sys::{self as sys, CUevent, CUstream};

use super::context::{Context, ContextGuard};
use super::result;
use crate::error::Result;

/// A non-blocking stream, destroyed on drop (in its context).
pub struct Stream {
    raw: usize,
    ctx: Context,
}

impl Stream {
    /// Creates a non-blocking stream in `ctx`.
    pub fn new(ctx: Context) -> Result<Self> {
        let _g = ContextGuard::push(ctx)?;
        let s = result::stream_create(sys::CU_STREAM_NON_BLOCKING)?;
        Ok(Stream {
            raw: s as usize,
            ctx,
        })
    }

    pub(crate) fn raw(&self) -> CUstream {
        self.raw as CUstream
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
        // SAFETY: the caller's contract; the stream is live.
        unsafe { result::memcpy_htod_async(dst, src, len, self.raw()) }
    }

    /// Queues a copy of `len` bytes from device address `src` to host memory at `dst`
    /// (`cuMemcpyDtoHAsync`).
    ///
    /// # Safety
    /// `dst` must stay valid and untouched by anyone else, and `src..src + len` valid device
    /// memory, until the copy is done.
    pub unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, len: usize) -> Result<()> {
        // SAFETY: the caller's contract; the stream is live.
        unsafe { result::memcpy_dtoh_async(dst, src, len, self.raw()) }
    }

    /// Waits for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream owned by self.
        unsafe { result::stream_synchronize(self.raw()) }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::push(self.ctx) {
            // SAFETY: destroys the stream this value created, in its context.
            unsafe { result::stream_destroy(self.raw()) }.ok();
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
        let _g = ContextGuard::push(ctx)?;
        let e = result::event_create(sys::CU_EVENT_DISABLE_TIMING)?;
        Ok(Event {
            raw: e as usize,
            ctx,
        })
    }

    pub(super) fn raw(&self) -> CUevent {
        self.raw as CUevent
    }

    /// The context it was created in.
    pub(super) fn context(&self) -> Context {
        self.ctx
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live event and stream of the same context.
        unsafe { result::event_record(self.raw(), stream.raw()) }
    }

    /// Waits until the work before the last record has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live event owned by self.
        unsafe { result::event_synchronize(self.raw()) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::push(self.ctx) {
            // SAFETY: destroys the event this value created.
            unsafe { result::event_destroy(self.raw()) }.ok();
        }
    }
}
