//! The GPU side both pipelines share: pinned buffers pooled per engine ([`BouncePool`]), a
//! worker's lane (one stream and two events per primary context, [`with_lane`]), two buffers
//! lent to one run ([`Lent`]), and the copy queue the pipelines drive ([`CopyQueue`]). The bounce
//! executor (`bounce.rs`) and the GPU's gather (`gather.rs`) both run on them.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::cuda::{self, Context, Event, GatherKernel, GatherPiece, PinnedBuffer, Stream};
use crate::error::{Error, Result};
use crate::future::lock;

/// Pinned bounce buffers, allocated on first use and reused (never on the hot path once warm).
#[derive(Default)]
pub struct BouncePool {
    inner: std::sync::Mutex<PoolInner>,
}

#[derive(Default)]
struct PoolInner {
    size: usize,
    free: Vec<PinnedBuffer>,
}

impl BouncePool {
    fn take(&self, size: usize, ctx: Context) -> Result<PinnedBuffer> {
        {
            let mut pool = lock(&self.inner);
            if pool.size != size {
                pool.free.clear();
                pool.size = size;
            }
            if let Some(b) = pool.free.pop() {
                return Ok(b);
            }
        }
        PinnedBuffer::new(size, ctx)
    }

    fn give(&self, buf: PinnedBuffer) {
        let mut pool = lock(&self.inner);
        if buf.len() == pool.size {
            pool.free.push(buf);
        }
    }

    /// Frees the pooled buffers; returns the bytes freed. Buffers in use by running requests
    /// come back when those finish.
    pub fn free(&self) -> usize {
        let freed = std::mem::take(&mut lock(&self.inner).free);
        freed.iter().map(PinnedBuffer::len).sum()
    }

    /// Bytes of pinned memory held by the pool now.
    pub fn pooled(&self) -> usize {
        lock(&self.inner).free.iter().map(PinnedBuffer::len).sum()
    }

    /// Forgets the buffers without freeing them (a forked child: they belong to the parent's
    /// CUDA state, which the child cannot use).
    pub fn forget(&self) {
        if let Ok(mut pool) = self.inner.try_lock() {
            std::mem::forget(std::mem::take(&mut pool.free));
        }
    }
}

/// A worker's stream and events for one context.
pub(crate) struct Lane {
    pub(crate) stream: Stream,
    events: [Event; 2],
}

impl Lane {
    fn new(ctx: Context) -> Result<Lane> {
        Ok(Lane {
            stream: Stream::new(ctx)?,
            events: [Event::new(ctx)?, Event::new(ctx)?],
        })
    }
}

thread_local! {
    static LANES: RefCell<HashMap<Context, Lane>> = RefCell::new(HashMap::new());
}

/// Runs `f` with this worker's lane for `ctx` (kept per thread for primary contexts, which
/// gpufile retains so they outlive every lane; made for this run otherwise).
pub(crate) fn with_lane<R>(
    ctx: Context,
    device: i32,
    f: impl FnOnce(&Lane) -> Result<R>,
) -> Result<R> {
    if cuda::primary_context(device)? != ctx {
        return f(&Lane::new(ctx)?);
    }
    LANES.with(|lanes| {
        let mut lanes = lanes.borrow_mut();
        let lane = match lanes.entry(ctx) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Lane::new(ctx)?),
        };
        f(lane)
    })
}

/// Two pinned buffers lent to one run. On drop the stream is drained first, so no copy still
/// touches a buffer that goes back to the pool; a stream that fails to drain leaks them.
pub(crate) struct Lent<'a> {
    bufs: [Option<PinnedBuffer>; 2],
    stream: &'a Stream,
    pool: &'a BouncePool,
}

impl<'a> Lent<'a> {
    pub(crate) fn take(pool: &'a BouncePool, size: usize, stream: &'a Stream) -> Result<Self> {
        let pinned_ctx = cuda::primary_context(0)?;
        let mut lent = Lent {
            bufs: [None, None],
            stream,
            pool,
        };
        lent.bufs[0] = Some(pool.take(size, pinned_ctx)?);
        lent.bufs[1] = Some(pool.take(size, pinned_ctx)?);
        Ok(lent)
    }

    pub(crate) fn ptr(&self, slot: usize) -> *mut u8 {
        self.bufs[slot]
            .as_ref()
            .map_or(std::ptr::null_mut(), PinnedBuffer::as_ptr)
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let drained = self.stream.synchronize().is_ok();
        for b in self.bufs.iter_mut().filter_map(Option::take) {
            if drained {
                self.pool.give(b);
            } else {
                // A copy may still use the buffer: freeing it, or lending it again, would let
                // that copy touch memory someone else owns. Leak it instead.
                std::mem::forget(b);
            }
        }
    }
}

/// What a pipeline asks of the GPU: one copy queue (a stream) and one event per slot. A trait so
/// that the pipelines' order of steps is tested without a GPU.
pub(crate) trait CopyQueue {
    /// Waits until the last copy marked for `slot` (into or out of its buffer) is done.
    fn wait_slot(&self, slot: usize) -> Result<()>;

    /// Queues a copy of `len` bytes from host memory at `src` to device address `dst`.
    ///
    /// # Safety
    /// As for [`Stream::copy_to_device`]: `src` stays valid and unchanged, `dst..dst + len` valid
    /// device memory nobody else writes, until the copy is done.
    unsafe fn copy_to_device(&self, dst: u64, src: *const u8, len: usize) -> Result<()>;

    /// Queues a copy of `len` bytes from device address `src` to host memory at `dst`.
    ///
    /// # Safety
    /// As for [`Stream::copy_to_host`]: `dst` stays valid and untouched by anyone else, and
    /// `src..src + len` valid device memory, until the copy is done.
    unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, len: usize) -> Result<()>;

    /// Queues gpufile's gather kernel over `n` pieces at `pieces` (see
    /// [`GatherKernel::launch`]); a queue that cannot run kernels refuses.
    ///
    /// # Safety
    /// As for [`GatherKernel::launch`], on this queue's stream.
    unsafe fn gather(
        &self,
        kernel: &GatherKernel,
        pieces: *const GatherPiece,
        n: u32,
    ) -> Result<()> {
        let _ = (kernel, pieces, n);
        Err(Error::InvalidArgument(
            "this copy queue runs no kernel".into(),
        ))
    }

    /// Marks the end of the queue as `slot`'s last copy.
    fn mark_slot(&self, slot: usize) -> Result<()>;

    /// Waits for every queued copy.
    fn drain(&self) -> Result<()>;
}

impl CopyQueue for Lane {
    fn wait_slot(&self, slot: usize) -> Result<()> {
        self.events[slot].synchronize()
    }

    unsafe fn copy_to_device(&self, dst: u64, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: the caller's contract, which is the stream's.
        unsafe { self.stream.copy_to_device(dst, src, len) }
    }

    unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, len: usize) -> Result<()> {
        // SAFETY: the caller's contract, which is the stream's.
        unsafe { self.stream.copy_to_host(dst, src, len) }
    }

    unsafe fn gather(
        &self,
        kernel: &GatherKernel,
        pieces: *const GatherPiece,
        n: u32,
    ) -> Result<()> {
        // SAFETY: the caller's contract, on this lane's stream.
        unsafe { kernel.launch(&self.stream, pieces, n) }
    }

    fn mark_slot(&self, slot: usize) -> Result<()> {
        self.events[slot].record(&self.stream)
    }

    fn drain(&self) -> Result<()> {
        self.stream.synchronize()
    }
}
