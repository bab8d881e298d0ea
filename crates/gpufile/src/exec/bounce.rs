//! GPU memory ⇄ any source or sink through pinned bounce buffers, overlapped.
//!
//! A read cuts each task into chunks and alternates two pinned buffers: it reads chunk *i + 1*
//! from the source into one buffer while the copy engine moves chunk *i* from the other to the GPU
//! (an event per buffer says when it is free again). A task's last copy is left running while the
//! run reads the first chunk of its next task, so copies overlap reads across tasks too
//! (`ReadPipeline`). A write copies chunk *i + 1* from the GPU while chunk *i* goes to the sink
//! (`WritePipeline`). Both pipelines drive the GPU through `CopyQueue`, so their order of
//! steps is tested on CPU. Each worker thread keeps one
//! stream and two events per primary context (a context the application made may be destroyed at
//! any time, so it gets a lane for one run only); pinned buffers come from the engine's
//! [`BouncePool`] and go back when the run ends (the lanes and the pool: `lane.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cuda::{self, Context, ContextGuard, DeviceTarget};
use crate::error::{Error, Result};
use crate::exec::dma::{DmaRead, Granule};
pub use crate::exec::lane::BouncePool;
use crate::exec::lane::{with_lane, CopyQueue, Lane, Lent};
use crate::exec::{Endpoint, Executor, Lease, Tasks};
use crate::future::Completion;
use crate::plan::{Chunks, Task};
use crate::source::{IoContext, Sink, Source};

/// The bounce executor of one request.
pub struct BounceExec {
    /// The file side.
    pub endpoint: Endpoint,
    /// The caller's GPU memory.
    pub target: DeviceTarget,
    /// The pipeline's chunks (the pinned buffers' size among them).
    pub chunks: Chunks,
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
                let lent = Lent::take(&self.pool, self.chunks.bounce, &lane.stream)?;
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

/// The double-buffer pipeline of one read run. Each chunk of a task goes through one of two
/// pinned slots in turn: [`fill`](Self::fill) waits for the slot's previous copy and reads the
/// chunk into it, [`launch_copy`](Self::launch_copy) queues its copy to the GPU and marks the
/// slot; so the read of chunk *i + 1* runs while chunk *i* is copied. A task is reported once
/// its last copy is done, which is waited for after the next task's first read
/// ([`finish_pending`](Self::finish_pending)) or when the run ends ([`end`](Self::end)).
/// Chunks found in registered page cache (a [`DmaRead`] span) are copied from there: no wait,
/// no read, but they take a slot's turn all the same.
struct ReadPipeline<'r, Q: CopyQueue> {
    queue: &'r Q,
    /// The two pinned buffers, `chunks.bounce` bytes each, lent to this run only.
    slots: [*mut u8; 2],
    chunks: Chunks,
    /// Device address of the request's first byte.
    dst: u64,
    /// Registered page cache to copy from, with the context its registrations live in.
    dma: Option<(&'r DmaRead, Context)>,
    call: IoContext<'r>,
    done: &'r Completion,
    /// The slot the next chunk goes through.
    slot: usize,
    pending: Option<Pending>,
    /// Granules this run's copies read from: kept until the queue is drained.
    held: Vec<Arc<Granule>>,
}

impl<'r, Q: CopyQueue> ReadPipeline<'r, Q> {
    fn new(
        queue: &'r Q,
        slots: [*mut u8; 2],
        chunks: Chunks,
        dst: u64,
        dma: Option<(&'r DmaRead, Context)>,
        call: IoContext<'r>,
        done: &'r Completion,
    ) -> Self {
        ReadPipeline {
            queue,
            slots,
            chunks,
            dst,
            dma,
            call,
            done,
            slot: 0,
            pending: None,
            held: Vec::new(),
        }
    }

    /// Reads `first` and the run's next tasks until none is left, the request stops or a task
    /// fails; then skips what is left.
    fn run(mut self, src: &dyn Source, first: Task, tasks: &Tasks, lease: &mut Lease) {
        let done = self.done;
        let mut task = Some(first);
        while let Some(t) = task.take() {
            if done.stopped() {
                done.finish_task(Ok(0));
                break;
            }
            if let Err(e) = self.read_task(src, t) {
                self.fail(e);
                break;
            }
            task = tasks.next(lease);
        }
        self.end();
        tasks.skip_rest(lease, done);
    }

    /// Sends every chunk of `t` on its way; its last copy is left running (pending).
    fn read_task(&mut self, src: &dyn Source, t: Task) -> Result<()> {
        let chunk = self.chunks.of(t.len);
        let mut off = 0usize;
        while off < t.len {
            let at = t.file_offset + off as u64;
            let want = chunk.min(t.len - off);
            let span = self.dma.and_then(|(d, ctx)| d.span(at, want, ctx));
            let (from, n) = match &span {
                // Straight from the registered page cache: no CPU copy, no buffer. Held from
                // now: a copy from it may be queued even if this chunk then fails.
                Some(s) => {
                    self.hold(&s.granule);
                    (s.ptr, s.len)
                }
                None => (self.fill(src, at, want)?, want),
            };
            // The previous task's last copy overlapped the read just done.
            self.finish_pending();
            // SAFETY: the destination lies in the caller's allocation (checked when the request
            // was made); the source stays untouched until the slot's event fires (a pinned
            // buffer) or the run drains its queue (a registered granule, held).
            unsafe { self.launch_copy(self.dst + (t.buf_offset + off) as u64, from, n) }?;
            if let (Some((d, _)), Some(_)) = (self.dma, &span) {
                self.done.progress().fetch_add(n as u64, Ordering::Relaxed);
                d.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            self.slot ^= 1;
            off += n;
        }
        self.pending = Some(Pending {
            slot: self.slot ^ 1, // the slot of the task's last chunk
            len: t.len,
        });
        Ok(())
    }

    /// Waits until the current slot's previous copy has left its buffer, then reads `want`
    /// bytes at `at` into it; returns the buffer's start.
    fn fill(&self, src: &dyn Source, at: u64, want: usize) -> Result<*const u8> {
        self.queue.wait_slot(self.slot)?;
        let ptr = self.slots[self.slot];
        debug_assert!(want <= self.chunks.bounce);
        // SAFETY: each pinned buffer holds `bounce >= chunk >= want` bytes, is lent to this run
        // only, and no copy reads it any more (its event fired).
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, want) };
        src.read_for_device(buf, at, self.call)?;
        Ok(ptr.cast_const())
    }

    /// Queues the copy of `n` bytes at `from` to `dst` and marks the current slot after it.
    ///
    /// # Safety
    /// As for [`CopyQueue::copy_to_device`].
    unsafe fn launch_copy(&self, dst: u64, from: *const u8, n: usize) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.queue.copy_to_device(dst, from, n) }?;
        self.queue.mark_slot(self.slot)
    }

    /// Reports the pending task once its last copy is done.
    fn finish_pending(&mut self) {
        if let Some(p) = self.pending.take() {
            let r = self.queue.wait_slot(p.slot).map(|()| p.len);
            self.done.finish_task(r);
        }
    }

    /// Keeps `granule` registered until the queue is drained.
    fn hold(&mut self, granule: &Arc<Granule>) {
        if !self.held.last().is_some_and(|h| Arc::ptr_eq(h, granule)) {
            self.held.push(Arc::clone(granule));
        }
    }

    /// Reports a failed task. Its copies may still write into the caller's buffer: drain them
    /// (and any pending task) first.
    fn fail(&mut self, e: Error) {
        let _ = self.queue.drain();
        self.finish_pending();
        self.done.finish_task(Err(e));
    }

    /// Drains the queue before the last task reports, so a caller who frees the pool right
    /// after its read finds every buffer back.
    fn end(mut self) {
        let drained = self.release_held();
        if let Some(p) = self.pending.take() {
            self.done.finish_task(drained.map(|()| p.len));
        }
    }

    /// Drains the queue, then lets the held granules go. Where the drain fails a copy may still
    /// read them, and unregistering them under it would let it read unmapped memory: they are
    /// leaked instead.
    fn release_held(&mut self) -> Result<()> {
        let drained = self.queue.drain();
        let held = std::mem::take(&mut self.held);
        match drained {
            Ok(()) => drop(held),
            Err(_) => std::mem::forget(held),
        }
        drained
    }
}

/// A run that unwinds (a panic in a task, caught by the engine) still drains its copies before
/// the granules they read are let go; after [`ReadPipeline::end`] nothing is held.
impl<Q: CopyQueue> Drop for ReadPipeline<'_, Q> {
    fn drop(&mut self) {
        if !self.held.is_empty() {
            let _ = self.release_held();
        }
    }
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

    /// Reads the run's tasks through a `ReadPipeline` over the lane's stream and events.
    fn read_run(&self, first: Task, run: Run<'_, '_>) {
        let Endpoint::Read(src) = &self.endpoint else {
            return;
        };
        // Registrations are made under the device's primary context, which gpufile retains, so
        // they outlive any context the application destroys (they are portable to all).
        let dma = self
            .dma
            .as_ref()
            .zip(cuda::primary_context(self.target.device).ok());
        let pipeline = ReadPipeline::new(
            run.lane,
            [run.lent.ptr(0), run.lent.ptr(1)],
            self.chunks,
            self.target.addr,
            dma,
            self.call(run.done),
            run.done,
        );
        pipeline.run(src.as_ref(), first, run.tasks, run.lease);
    }

    /// Writes the run's tasks through a `WritePipeline` over the lane's stream and events.
    fn write_run(&self, first: Task, run: Run<'_, '_>) {
        let Endpoint::Write(sink) = &self.endpoint else {
            return;
        };
        let pipeline = WritePipeline {
            queue: run.lane,
            slots: [run.lent.ptr(0), run.lent.ptr(1)],
            chunks: self.chunks,
            src: self.target.addr,
            call: self.call(run.done),
            done: run.done,
        };
        pipeline.run(sink.as_ref(), first, run.tasks, run.lease);
    }
}

/// The double-buffer pipeline of one write run: each task's chunks alternate between two pinned
/// slots, and the copy of chunk *i + 1* from the GPU ([`copy_chunk`](Self::copy_chunk)) runs
/// while chunk *i* goes to the sink ([`write_chunk`](Self::write_chunk)).
struct WritePipeline<'r, Q: CopyQueue> {
    queue: &'r Q,
    /// The two pinned buffers, `chunks.bounce` bytes each, lent to this run only.
    slots: [*mut u8; 2],
    chunks: Chunks,
    /// Device address of the request's first byte.
    src: u64,
    call: IoContext<'r>,
    done: &'r Completion,
}

impl<Q: CopyQueue> WritePipeline<'_, Q> {
    /// Writes `first` and the run's next tasks until none is left, the request stops or a task
    /// fails; then skips what is left.
    fn run(&self, sink: &dyn Sink, first: Task, tasks: &Tasks, lease: &mut Lease) {
        let done = self.done;
        let mut task = Some(first);
        while let Some(t) = task.take() {
            if done.stopped() {
                done.finish_task(Ok(0));
                break;
            }
            let r = self.write_task(sink, t);
            let failed = r.is_err();
            done.finish_task(r.map(|()| t.len));
            if failed {
                break;
            }
            task = tasks.next(lease);
        }
        tasks.skip_rest(lease, done);
    }

    /// Writes every chunk of `t`; on failure, drains the copies still reading the GPU into the
    /// slots before the run lets them go.
    fn write_task(&self, sink: &dyn Sink, t: Task) -> Result<()> {
        let chunk = self.chunks.of(t.len);
        let chunks = t.len.div_ceil(chunk);
        let result = (|| {
            self.copy_chunk(t, chunk, 0)?;
            for i in 0..chunks {
                if i + 1 < chunks {
                    self.copy_chunk(t, chunk, i + 1)?; // overlaps with the write of chunk i
                }
                self.write_chunk(sink, t, chunk, i)?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = self.queue.drain();
        }
        result
    }

    /// Queues the copy of chunk `i` of `t` from the GPU into slot `i % 2` and marks the slot.
    fn copy_chunk(&self, t: Task, chunk: usize, i: usize) -> Result<()> {
        let off = i * chunk;
        let n = chunk.min(t.len - off);
        let from = self.src + (t.buf_offset + off) as u64;
        // SAFETY: the source range lies in the caller's device buffer; the pinned buffer of
        // this slot holds `bounce >= chunk >= n` bytes and is free (its previous chunk was
        // written out before this call).
        unsafe { self.queue.copy_to_host(self.slots[i % 2], from, n) }?;
        self.queue.mark_slot(i % 2)
    }

    /// Waits for chunk `i`'s copy into its slot, then writes it to the sink.
    fn write_chunk(&self, sink: &dyn Sink, t: Task, chunk: usize, i: usize) -> Result<()> {
        self.queue.wait_slot(i % 2)?;
        let off = i * chunk;
        let n = chunk.min(t.len - off);
        // SAFETY: the slot's buffer holds chunk i, complete since its event fired, and nothing
        // writes it until the next copy into this slot.
        let buf = unsafe { std::slice::from_raw_parts(self.slots[i % 2], n) };
        sink.write_at(buf, t.file_offset + off as u64, self.call)
    }
}

#[cfg(test)]
mod tests;
