//! Waiting for a producer's stream: [`StreamWait`] names it, [`StreamMark`] is the end of the work
//! it had queued when a request was submitted, held as an event from a small pool.

use std::sync::Mutex;

use gpufile_sys::CUstream;

use super::app_stream::{stream_idle, synchronize_stream};
use super::context::{push_unless_current, retained_primary, Context};
use super::result;
use super::stream::Event;
use crate::error::Result;

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
        result::api()?;
        let event = EventPool::take(self.ctx)?;
        let _g = push_unless_current(self.ctx)?;
        // SAFETY: a live event of `ctx`; the handle is the producer's live stream (the caller's
        // contract, CUDA Array Interface v3) or a special handle, read on this thread.
        let recorded = unsafe { result::event_record(event.raw(), self.handle as CUstream) };
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
        match pool.iter().rposition(|e| e.context() == ctx) {
            Some(i) => Ok(pool.swap_remove(i)),
            None => {
                drop(pool);
                Event::new(ctx)
            }
        }
    }

    fn give(event: Event) {
        if !retained_primary(event.context()) {
            return; // destroyed: its context may be destroyed by the application later
        }
        let mut pool = EVENT_POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < EVENT_POOL_MAX {
            pool.push(event);
        }
    }
}
