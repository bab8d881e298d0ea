//! GPU memory ⇄ any source or sink through pinned bounce buffers, overlapped.
//!
//! A read cuts each task into chunks and alternates two pinned buffers: it reads chunk *i + 1*
//! from the source into one buffer while the copy engine moves chunk *i* from the other to the GPU
//! (an event per buffer says when it is free again). A task's last copy is left running while the
//! run reads the first chunk of its next task, so copies overlap reads across tasks too. A write
//! copies chunk *i + 1* from the GPU while chunk *i* goes to the sink. Each worker thread keeps one
//! stream and two events per primary context (a context the application made may be destroyed at
//! any time, so it gets a lane for one run only); pinned buffers come from the engine's
//! [`BouncePool`] and go back when the run ends.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cuda::{self, Context, ContextGuard, Event, PinnedBuffer, Stream};
use crate::error::Result;
use crate::exec::dma::{DmaRead, Granule};
use crate::exec::{Endpoint, Executor, Lease, Tasks};
use crate::future::{lock, Completion};
use crate::plan::{chunk_size, Task};
use crate::source::IoContext;

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

/// The GPU side of a request.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTarget {
    /// First byte of the caller's range.
    pub addr: u64,
    /// The context owning the allocation.
    pub ctx: Context,
    /// The device ordinal.
    pub device: i32,
}

/// The bounce executor of one request.
pub struct BounceExec {
    /// The file side.
    pub endpoint: Endpoint,
    /// The caller's GPU memory.
    pub target: DeviceTarget,
    /// Size of each pinned buffer.
    pub bounce: usize,
    /// Direct I/O asked for.
    pub direct: bool,
    /// Direct I/O asked for where the range is not cached.
    pub direct_uncached: bool,
    /// Where pinned buffers come from.
    pub pool: Arc<BouncePool>,
    /// Registered page cache to copy hot chunks from, skipping the bounce (reads of local
    /// files only; see [`super::dma`]).
    pub dma: Option<DmaRead>,
}

/// A worker's stream and events for one context.
struct Lane {
    stream: Stream,
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
fn with_lane<R>(ctx: Context, device: i32, f: impl FnOnce(&Lane) -> Result<R>) -> Result<R> {
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
struct Lent<'a> {
    bufs: [Option<PinnedBuffer>; 2],
    stream: &'a Stream,
    pool: &'a BouncePool,
}

impl<'a> Lent<'a> {
    fn take(pool: &'a BouncePool, size: usize, stream: &'a Stream) -> Result<Self> {
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

    fn ptr(&self, slot: usize) -> *mut u8 {
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
                std::mem::forget(b);
            }
        }
    }
}

impl Executor for BounceExec {
    fn dma_bytes(&self) -> u64 {
        self.dma
            .as_ref()
            .map_or(0, |d| d.bytes.load(Ordering::Relaxed))
    }

    fn run(&self, tasks: &Tasks, done: &Completion) {
        let mut lease = Lease::default();
        let Some(first) = tasks.next(&mut lease) else {
            return;
        };
        let t = self.target;
        let lease = &mut lease;
        let r = ContextGuard::push(t.ctx).and_then(|_guard| {
            with_lane(t.ctx, t.device, |lane| {
                let lent = Lent::take(&self.pool, self.bounce, &lane.stream)?;
                let run = Run {
                    tasks,
                    lease: &mut *lease,
                    done,
                    lane,
                    lent: &lent,
                };
                match &self.endpoint {
                    Endpoint::Read(_) => self.read_run(first, run),
                    Endpoint::Write(_) => self.write_run(first, run),
                }
                Ok(())
            })
        });
        if let Err(e) = r {
            // The run could not start: its first task fails, the others are skipped.
            done.finish_task(Err(e));
            tasks.skip_rest(lease, done);
        }
    }
}

/// What one run works with.
struct Run<'a, 'l> {
    tasks: &'a Tasks,
    lease: &'a mut Lease,
    done: &'a Completion,
    lane: &'a Lane,
    lent: &'a Lent<'l>,
}

/// A task whose last copy may still be running.
struct Pending {
    slot: usize,
    len: usize,
}

impl BounceExec {
    fn call<'c>(&self, done: &'c Completion) -> IoContext<'c> {
        IoContext {
            progress: done.progress(),
            direct: self.direct,
            direct_uncached: self.direct_uncached,
            stop: done.stop_flag(),
        }
    }

    /// Reads the run's tasks; each finishes once its last copy is done, which is checked after
    /// the next task's first read (so that copy and read overlap) or at the end of the run.
    fn read_run(&self, first: Task, run: Run<'_, '_>) {
        let Endpoint::Read(src) = &self.endpoint else {
            return;
        };
        let Run {
            tasks,
            lease,
            done,
            lane,
            lent,
        } = run;
        let mut slot = 0usize;
        let mut pending: Option<Pending> = None;
        // Granules this run's copies read from: kept until the stream is drained.
        let mut held: Vec<Arc<Granule>> = Vec::new();
        // Registrations are made under the device's primary context, which gpufile retains, so
        // they outlive any context the application destroys (they are portable to all).
        let dma = self
            .dma
            .as_ref()
            .zip(cuda::primary_context(self.target.device).ok());
        let finish = |p: Pending| {
            let r = lane.events[p.slot].synchronize().map(|()| p.len);
            done.finish_task(r);
        };
        let mut task = Some(first);
        while let Some(t) = task.take() {
            if done.stopped() {
                done.finish_task(Ok(0));
                break;
            }
            let chunk = chunk_size(t.len, self.bounce);
            let mut off = 0usize;
            let result = loop {
                if off >= t.len {
                    break Ok(());
                }
                let at = t.file_offset + off as u64;
                let want = chunk.min(t.len - off);
                let span = dma.and_then(|(d, ctx)| d.span(at, want, ctx));
                if let Some(s) = &span {
                    // Held from now: a copy from it may be queued even if this step then fails.
                    if !held.last().is_some_and(|h| Arc::ptr_eq(h, &s.granule)) {
                        held.push(Arc::clone(&s.granule));
                    }
                }
                let step = (|| -> Result<usize> {
                    let (from, n) = match &span {
                        // Straight from the registered page cache: no CPU copy, no buffer.
                        Some(s) => (s.ptr, s.len),
                        None => {
                            // Wait until the buffer's previous copy has left it.
                            lane.events[slot].synchronize()?;
                            // SAFETY: each pinned buffer holds `bounce >= chunk >= want` bytes,
                            // is lent to this run only, and no copy reads it any more (its event
                            // fired).
                            let buf =
                                unsafe { std::slice::from_raw_parts_mut(lent.ptr(slot), want) };
                            src.read_for_device(buf, at, self.call(done))?;
                            (lent.ptr(slot).cast_const(), want)
                        }
                    };
                    if let Some(p) = pending.take() {
                        finish(p); // its copy overlapped the read just done
                    }
                    // SAFETY: the destination lies in the caller's allocation (checked when the
                    // request was made); the source stays untouched until the slot's event fires
                    // (a pinned buffer) or the run drains its stream (a registered granule,
                    // held below).
                    unsafe {
                        lane.stream.copy_to_device(
                            self.target.addr + (t.buf_offset + off) as u64,
                            from,
                            n,
                        )
                    }?;
                    lane.events[slot].record(&lane.stream)?;
                    Ok(n)
                })();
                let n = match step {
                    Ok(n) => n,
                    Err(e) => break Err(e),
                };
                if span.is_some() {
                    done.progress().fetch_add(n as u64, Ordering::Relaxed);
                    if let Some((d, _)) = dma {
                        d.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                slot ^= 1;
                off += n;
            };
            match result {
                Ok(()) => {
                    pending = Some(Pending {
                        slot: slot ^ 1,
                        len: t.len,
                    })
                }
                Err(e) => {
                    // Copies of this task may still write into the caller's buffer: drain them
                    // (and any pending task) before reporting.
                    let _ = lane.stream.synchronize();
                    if let Some(p) = pending.take() {
                        finish(p);
                    }
                    done.finish_task(Err(e));
                    break;
                }
            }
            task = tasks.next(lease);
        }
        // Drain the stream before the last task reports, so a caller who frees the pool right
        // after its read finds every buffer back.
        let drained = lane.stream.synchronize();
        if drained.is_err() {
            // A copy may still read these registrations: never unregister them.
            std::mem::forget(held);
        } else {
            drop(held);
        }
        if let Some(p) = pending.take() {
            done.finish_task(drained.map(|()| p.len));
        }
        tasks.skip_rest(lease, done);
    }

    /// Writes the run's tasks: the copy of chunk *i + 1* from the GPU overlaps the write of *i*.
    fn write_run(&self, first: Task, run: Run<'_, '_>) {
        let Endpoint::Write(sink) = &self.endpoint else {
            return;
        };
        let Run {
            tasks,
            lease,
            done,
            lane,
            lent,
        } = run;
        let mut task = Some(first);
        while let Some(t) = task.take() {
            if done.stopped() {
                done.finish_task(Ok(0));
                break;
            }
            let r = self.write_task(sink.as_ref(), t, done, lane, lent);
            let failed = r.is_err();
            done.finish_task(r.map(|()| t.len));
            if failed {
                break;
            }
            task = tasks.next(lease);
        }
        tasks.skip_rest(lease, done);
    }

    fn write_task(
        &self,
        sink: &dyn crate::source::Sink,
        t: Task,
        done: &Completion,
        lane: &Lane,
        lent: &Lent,
    ) -> Result<()> {
        let chunk = chunk_size(t.len, self.bounce);
        let chunks = t.len.div_ceil(chunk);
        let src = self.target.addr + t.buf_offset as u64;
        let copy_out = |i: usize| -> Result<()> {
            let off = i * chunk;
            let n = chunk.min(t.len - off);
            // SAFETY: the source range lies in the caller's device buffer; the pinned buffer of
            // this slot is free (its previous chunk was written out before this call).
            unsafe {
                lane.stream
                    .copy_to_host(lent.ptr(i % 2), src + off as u64, n)
            }?;
            lane.events[i % 2].record(&lane.stream)
        };
        let result = (|| {
            copy_out(0)?;
            for i in 0..chunks {
                if i + 1 < chunks {
                    copy_out(i + 1)?; // overlaps with the write of chunk i below
                }
                lane.events[i % 2].synchronize()?;
                let off = i * chunk;
                let n = chunk.min(t.len - off);
                // SAFETY: the slot's buffer holds chunk i, complete since its event fired, and
                // nothing writes it until the next copy into this slot.
                let buf = unsafe { std::slice::from_raw_parts(lent.ptr(i % 2), n) };
                sink.write_at(buf, t.file_offset + off as u64, self.call(done))?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = lane.stream.synchronize();
        }
        result
    }
}
