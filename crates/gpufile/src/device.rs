//! gpufile's POSIX path for device memory: file ⇄ pinned bounce buffers ⇄ GPU, overlapped.
//!
//! Each task is cut into chunks. A read `pread`s chunk *i + 1* into one pinned buffer while the
//! copy engine moves chunk *i* from the other buffer to the GPU (events tell when a buffer is free
//! again); a write copies chunk *i + 1* from the GPU while chunk *i* is being `pwrite`n. Each worker
//! thread has one stream (and two events) per context, created once; pinned buffers come from a
//! process pool, allocated on first use and reused (never on the hot path once warm);
//! [`free_bounce_buffers`] gives them back to the driver.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::cuda::{self, Context, ContextGuard, Event, PinnedBuffer, Stream};
use crate::error::Result;
use crate::pool::Completion;
use crate::posix;

/// Smallest pipeline chunk. Measured on the H200 (16 threads, hot 4 GiB file): 1 MiB chunks
/// gave 38.5 GB/s, 4 MiB chunks 49.2 GB/s; per-chunk read, copy and event costs dominate below.
const MIN_CHUNK: usize = 4 << 20;
/// O_DIRECT needs file offsets, lengths and memory aligned to the logical block; 4 KiB covers
/// every common device.
pub(crate) const DIRECT_ALIGN: usize = 4096;

struct BouncePool {
    size: usize,
    free: Vec<PinnedBuffer>,
}

static POOL: Mutex<BouncePool> = Mutex::new(BouncePool {
    size: 0,
    free: Vec::new(),
});

fn take_buffer(size: usize, ctx: Context) -> Result<PinnedBuffer> {
    {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
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

fn give_buffer(buf: PinnedBuffer) {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if buf.len() == pool.size {
        pool.free.push(buf);
    }
}

/// Frees the pooled pinned bounce buffers; returns the bytes freed. Buffers in use by running
/// requests go back to the pool when those finish.
pub fn free_bounce_buffers() -> usize {
    let freed: Vec<PinnedBuffer> = {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut pool.free)
    };
    freed.iter().map(PinnedBuffer::len).sum()
}

/// Bytes of pinned memory held by the pool now.
pub fn pooled_bounce_bytes() -> usize {
    let pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    pool.free.iter().map(PinnedBuffer::len).sum()
}

/// A worker's stream and events for one context.
struct Lane {
    stream: Stream,
    events: [Event; 2],
}

thread_local! {
    static LANES: RefCell<HashMap<Context, Lane>> = RefCell::new(HashMap::new());
}

/// Runs `f` with this worker's lane for `ctx`. Lanes of primary contexts (which gpufile retains,
/// so they outlive every lane) are kept per thread; a context the application created itself may
/// be destroyed at any time, so its lane lives for one task only.
fn with_lane<R>(ctx: Context, device: i32, f: impl FnOnce(&Lane) -> Result<R>) -> Result<R> {
    let new_lane = || -> Result<Lane> {
        Ok(Lane {
            stream: Stream::new(ctx)?,
            events: [Event::new(ctx)?, Event::new(ctx)?],
        })
    };
    if cuda::primary_context(device)? != ctx {
        return f(&new_lane()?);
    }
    LANES.with(|lanes| {
        let mut lanes = lanes.borrow_mut();
        let lane = match lanes.entry(ctx) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(new_lane()?),
        };
        f(lane)
    })
}

/// Two pinned buffers lent to one task. On drop (success or error) the stream is drained
/// first, so no copy still reads a buffer that goes back to the pool.
struct Lent<'a> {
    bufs: [Option<PinnedBuffer>; 2],
    stream: &'a Stream,
}

impl Lent<'_> {
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
                give_buffer(b);
            } else {
                // A failed stream may still touch the buffer: leak it rather than reuse it.
                std::mem::forget(b);
            }
        }
    }
}

/// Chunk size of a task's pipeline: about a quarter of the task so reads and copies overlap
/// (small tasks overlap with the worker's next task instead),
/// at least [`MIN_CHUNK`], at most the bounce buffer, a multiple of [`DIRECT_ALIGN`].
pub(crate) fn chunk_size(task_len: usize, bounce: usize) -> usize {
    let quarter = task_len.div_ceil(4).next_multiple_of(DIRECT_ALIGN);
    quarter.max(MIN_CHUNK).min(bounce).max(1)
}

/// The descriptors a device task reads or writes through.
pub(crate) struct Fds<'a> {
    /// The ordinary (buffered) descriptor.
    pub buffered: RawFd,
    /// An O_DIRECT descriptor, used for aligned chunks when present.
    pub direct: Option<RawFd>,
    /// The file, for errors.
    pub path: &'a Path,
}

impl Fds<'_> {
    fn pick(&self, offset: u64, len: usize) -> RawFd {
        match self.direct {
            Some(fd) if offset % DIRECT_ALIGN as u64 == 0 && len % DIRECT_ALIGN == 0 => fd,
            _ => self.buffered,
        }
    }
}

/// A task whose last copy is still running: finished by the worker's next task (after that
/// task's first `pread`, so the copy and the read overlap) or when the worker goes idle.
struct Pending {
    ctx: Context,
    slot: usize,
    len: usize,
    completion: Arc<Completion>,
}

/// What a worker thread keeps between device-read tasks.
#[derive(Default)]
struct Worker {
    /// Two pinned buffers held during a busy streak (back to the pool when idle).
    bufs: Option<[PinnedBuffer; 2]>,
    /// The slot (buffer and event) the next chunk uses.
    next_slot: usize,
    pending: Option<Pending>,
}

thread_local! {
    static WORKER: RefCell<Worker> = RefCell::new(Worker::default());
}

fn finish_pending(p: Pending, lane: &Lane) {
    let r = lane.events[p.slot].synchronize().map(|()| p.len);
    p.completion.finish_task(r);
}

/// Called by a pool worker when its queue is empty: finishes a deferred task and gives the
/// worker's pinned buffers back to the pool. Touches no CUDA state where there is none.
pub(crate) fn on_worker_idle() {
    let (pending, bufs) = WORKER.with(|w| {
        let mut w = w.borrow_mut();
        (w.pending.take(), w.bufs.take())
    });
    // Wait for the last copy first, give the buffers back, then report the task done, so
    // that a caller who frees the pool right after its read finds every buffer there.
    let finished = pending.map(|p| {
        let _guard = ContextGuard::push(p.ctx);
        let r = LANES.with(|lanes| match lanes.borrow().get(&p.ctx) {
            Some(lane) => lane.events[p.slot].synchronize().map(|()| p.len),
            None => Ok(p.len), // unreachable: lanes outlive pendings
        });
        (p.completion, r)
    });
    for b in bufs.into_iter().flatten() {
        give_buffer(b);
    }
    if let Some((completion, r)) = finished {
        completion.finish_task(r);
    }
}

/// Reads `len` bytes at `file_offset` into device memory at `dst` (owned by context `ctx`),
/// then finishes `completion`'s task: at once (`Some`), or later (`None`) when the task's last
/// copy is left running to overlap with the worker's next `pread` (primary contexts only).
pub(crate) fn read_to_device(
    fds: &Fds<'_>,
    dst: u64,
    len: usize,
    file_offset: u64,
    (ctx, device): (Context, i32),
    bounce: usize,
    completion: &Arc<Completion>,
) -> Option<Result<usize>> {
    let progress = completion.progress();
    let result = (|| -> Result<Option<usize>> {
        let _guard = ContextGuard::push(ctx)?;
        if cuda::primary_context(device)? != ctx {
            return read_to_device_once(
                fds,
                dst,
                len,
                file_offset,
                (ctx, device),
                bounce,
                progress,
            )
            .map(Some);
        }
        let api = cuda::api()?;
        let pinned_ctx = cuda::primary_context(0)?;
        // A pending task of another context uses another stream: finish it first.
        let other = WORKER.with(|w| {
            let mut w = w.borrow_mut();
            let stale_bufs = w.bufs.as_ref().is_some_and(|b| b[0].len() != bounce);
            if w.pending.as_ref().is_some_and(|p| p.ctx != ctx) || stale_bufs {
                w.pending.take()
            } else {
                None
            }
        });
        if let Some(p) = other {
            let _g = ContextGuard::push(p.ctx)?;
            LANES.with(|lanes| {
                if let Some(lane) = lanes.borrow().get(&p.ctx) {
                    finish_pending(p, lane);
                }
            });
        }
        with_lane(ctx, device, |lane| {
            WORKER.with(|w| {
                let mut w = w.borrow_mut();
                if w.bufs.as_ref().is_some_and(|b| b[0].len() != bounce) {
                    for b in w.bufs.take().into_iter().flatten() {
                        give_buffer(b);
                    }
                }
                let pair = match w.bufs.take() {
                    Some(pair) => pair,
                    None => [
                        take_buffer(bounce, pinned_ctx)?,
                        take_buffer(bounce, pinned_ctx)?,
                    ],
                };
                let bufs = [pair[0].as_ptr(), pair[1].as_ptr()];
                w.bufs = Some(pair);
                let task = Chunks {
                    fds,
                    dst,
                    len,
                    file_offset,
                    chunk: chunk_size(len, bounce),
                };
                let mut pending = w.pending.take();
                let outcome = task.read(api, lane, bufs, &mut w.next_slot, progress, || {
                    if let Some(p) = pending.take() {
                        finish_pending(p, lane); // its copy overlapped the read just done
                    }
                });
                w.pending = pending;
                match outcome {
                    Ok(last_slot) => {
                        w.pending = Some(Pending {
                            ctx,
                            slot: last_slot,
                            len,
                            completion: Arc::clone(completion),
                        });
                        Ok(None)
                    }
                    Err(e) => {
                        // Copies of this task may still write into the caller's buffer: drain
                        // them (and any pending task) before reporting.
                        let _ = lane.stream.synchronize();
                        if let Some(p) = w.pending.take() {
                            finish_pending(p, lane);
                        }
                        Err(e)
                    }
                }
            })
        })
    })();
    match result {
        Ok(Some(n)) => Some(Ok(n)),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    }
}

/// One task's read pipeline: chunks alternate between two pinned buffers; each chunk waits for
/// its buffer's previous copy, is read, then copied to the GPU asynchronously.
struct Chunks<'a> {
    fds: &'a Fds<'a>,
    dst: u64,
    len: usize,
    file_offset: u64,
    chunk: usize,
}

impl Chunks<'_> {
    /// Runs the pipeline on `lane` from slot `*next_slot` (left at the slot after the last);
    /// `after_first_read` runs once, right after the first chunk is read. Returns the last
    /// chunk's slot, whose event covers every copy of the task. On error, copies may still be
    /// running: the caller drains the stream.
    fn read(
        &self,
        api: &gpufile_sys::CudaApi,
        lane: &Lane,
        bufs: [*mut u8; 2],
        next_slot: &mut usize,
        progress: &AtomicU64,
        after_first_read: impl FnOnce(),
    ) -> Result<usize> {
        let mut after_first_read = Some(after_first_read);
        let (mut done, mut last) = (0usize, *next_slot);
        while done < self.len {
            let n = self.chunk.min(self.len - done);
            let slot = *next_slot;
            lane.events[slot].synchronize()?; // its previous copy has left the buffer
            let at = self.file_offset + done as u64;
            // SAFETY: each pinned buffer holds at least `chunk >= n` bytes, belongs to this task
            // (worker-owned or lent), and no copy reads it any more (its event fired).
            unsafe {
                posix::pread_all(
                    self.fds.pick(at, n),
                    self.fds.path,
                    bufs[slot],
                    n,
                    at,
                    progress,
                )
            }?;
            if let Some(f) = after_first_read.take() {
                f();
            }
            // SAFETY: the destination lies in the caller's allocation (checked when the request
            // was made); the source stays untouched until the slot's event fires.
            cuda::check("cuMemcpyHtoDAsync", unsafe {
                (api.memcpy_htod_async)(
                    self.dst + done as u64,
                    bufs[slot].cast(),
                    n,
                    lane.stream.raw(),
                )
            })?;
            lane.events[slot].record(&lane.stream)?;
            last = slot;
            *next_slot ^= 1;
            done += n;
        }
        Ok(last)
    }
}

/// Runs `f` on this worker's lane for `ctx` with two pinned buffers lent for one task; they go
/// back to the pool (after the stream drains) when `f` returns.
fn with_lent<R>(
    ctx: Context,
    device: i32,
    bounce: usize,
    f: impl FnOnce(&Lane, &Lent<'_>) -> Result<R>,
) -> Result<R> {
    let pinned_ctx = cuda::primary_context(0)?;
    with_lane(ctx, device, |lane| {
        let lent = Lent {
            bufs: [
                Some(take_buffer(bounce, pinned_ctx)?),
                Some(take_buffer(bounce, pinned_ctx)?),
            ],
            stream: &lane.stream,
        };
        f(lane, &lent)
    })
}

/// One task on a lane of its own (application-created contexts): read, copy, wait.
fn read_to_device_once(
    fds: &Fds<'_>,
    dst: u64,
    len: usize,
    file_offset: u64,
    (ctx, device): (Context, i32),
    bounce: usize,
    progress: &AtomicU64,
) -> Result<usize> {
    let api = cuda::api()?;
    with_lent(ctx, device, bounce, |lane, lent| {
        let task = Chunks {
            fds,
            dst,
            len,
            file_offset,
            chunk: chunk_size(len, bounce),
        };
        let mut slot = 0;
        task.read(
            api,
            lane,
            [lent.ptr(0), lent.ptr(1)],
            &mut slot,
            progress,
            || {},
        )?;
        lane.stream.synchronize()?;
        Ok(len)
    })
}

/// An experiment under measurement (see the GPU issue's notes): read into the GPU by mapping the
/// file range, registering the mapping (`cuMemHostRegister`, read-only) and letting the copy
/// engine DMA straight from the page cache, with no CPU copy. On when the environment variable
/// `GPUFILE_EXPERIMENTAL_MMAP_READ` is `1`.
pub(crate) fn mmap_read_enabled() -> bool {
    std::env::var_os("GPUFILE_EXPERIMENTAL_MMAP_READ").is_some_and(|v| v == "1")
}

/// A read-only shared mapping of a file range, registered with CUDA; undone on drop.
struct RegisteredMap {
    ptr: *mut libc::c_void,
    len: usize,
    registered: bool,
}

impl Drop for RegisteredMap {
    fn drop(&mut self) {
        if self.registered {
            if let Ok(api) = gpufile_sys::cuda() {
                // SAFETY: unregisters the range this value registered.
                unsafe { (api.mem_host_unregister)(self.ptr) };
            }
        }
        // SAFETY: unmaps the mapping this value made.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The mmap + cuMemHostRegister variant of [`read_to_device`].
pub(crate) fn read_to_device_mmap(
    fds: &Fds<'_>,
    dst: u64,
    len: usize,
    file_offset: u64,
    (ctx, device): (Context, i32),
    progress: &AtomicU64,
) -> Result<usize> {
    let api = cuda::api()?;
    let _guard = ContextGuard::push(ctx)?;
    let map_off = file_offset & !(DIRECT_ALIGN as u64 - 1);
    let delta = (file_offset - map_off) as usize;
    let map_len = delta + len;
    // SAFETY: a new read-only shared mapping of a range inside the file (the caller checked the
    // file size); nothing else aliases it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fds.buffered,
            map_off as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(crate::error::Error::os(
            crate::error::Op::Read,
            fds.path,
            file_offset,
            len,
            e,
        ));
    }
    let mut map = RegisteredMap {
        ptr: p,
        len: map_len,
        registered: false,
    };
    // SAFETY: the range is a live mapping of `map_len` bytes; the device only reads it.
    cuda::check("cuMemHostRegister", unsafe {
        (api.mem_host_register)(
            p,
            map_len,
            gpufile_sys::CU_MEMHOSTREGISTER_READ_ONLY | gpufile_sys::CU_MEMHOSTREGISTER_PORTABLE,
        )
    })?;
    map.registered = true;
    with_lane(ctx, device, |lane| {
        // SAFETY: source is the registered mapping (valid until `map` drops, after the sync);
        // the destination range lies in the caller's allocation.
        cuda::check("cuMemcpyHtoDAsync", unsafe {
            (api.memcpy_htod_async)(
                dst,
                (p as *const u8).add(delta).cast(),
                len,
                lane.stream.raw(),
            )
        })?;
        lane.stream.synchronize()
    })?;
    drop(map);
    progress.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(len)
}

/// Writes `len` bytes of device memory at `src` (owned by `ctx`) to the file at `file_offset`.
pub(crate) fn write_from_device(
    fds: &Fds<'_>,
    src: u64,
    len: usize,
    file_offset: u64,
    (ctx, device): (Context, i32),
    bounce: usize,
    progress: &AtomicU64,
) -> Result<usize> {
    let api = cuda::api()?;
    let _guard = ContextGuard::push(ctx)?;
    with_lent(ctx, device, bounce, |lane, lent| {
        let chunk = chunk_size(len, bounce);
        let chunks = len.div_ceil(chunk);
        let copy_out = |i: usize| -> Result<()> {
            let off = i * chunk;
            let n = chunk.min(len - off);
            // SAFETY: the source range lies in the caller's device buffer; the pinned buffer of
            // this slot is free (its previous chunk was written out before this call).
            cuda::check("cuMemcpyDtoHAsync", unsafe {
                (api.memcpy_dtoh_async)(
                    lent.ptr(i % 2).cast(),
                    src + off as u64,
                    n,
                    lane.stream.raw(),
                )
            })?;
            lane.events[i % 2].record(&lane.stream)
        };
        copy_out(0)?;
        for i in 0..chunks {
            if i + 1 < chunks {
                copy_out(i + 1)?; // overlaps with the pwrite of chunk i below
            }
            lane.events[i % 2].synchronize()?;
            let off = i * chunk;
            let n = chunk.min(len - off);
            let at = file_offset + off as u64;
            // SAFETY: the slot's buffer holds chunk i, complete since its event fired.
            unsafe {
                posix::pwrite_all(fds.pick(at, n), fds.path, lent.ptr(i % 2), n, at, progress)
            }?;
        }
        Ok(len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chunks_are_o_direct_aligned(task in 1usize..(1 << 30), bounce_pages in 1usize..8192) {
            let bounce = bounce_pages * DIRECT_ALIGN;
            let c = chunk_size(task, bounce);
            prop_assert!(c > 0 && c <= bounce);
            prop_assert_eq!(c % DIRECT_ALIGN, 0);
        }
    }

    #[test]
    fn chunks_overlap_within_a_task_and_respect_the_bounce_buffer() {
        assert_eq!(chunk_size(4 << 20, 16 << 20), 4 << 20);
        assert_eq!(chunk_size(16 << 20, 16 << 20), 4 << 20);
        assert_eq!(chunk_size(64 << 20, 16 << 20), 16 << 20);
        assert_eq!(chunk_size(100, 16 << 20), MIN_CHUNK);
        assert_eq!(chunk_size(4 << 20, 64 << 10), 64 << 10);
        assert_eq!(chunk_size(5_000_001, 16 << 20) % DIRECT_ALIGN, 0);
    }
}
