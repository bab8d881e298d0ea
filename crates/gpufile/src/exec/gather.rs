//! Many small ranges of one request (a gather or a scatter), a group of whole ranges per task
//! ([`crate::plan::TaskSplit::grouped`]).
//!
//! A group moves with one queue of I/O: on a local file through io_uring ([`super::uring`]) or,
//! where the request's decision says so ([`crate::plan::HostIo`]), one `pread`/`pwrite` per
//! range; other sources and sinks through their own calls. A group of a device read is staged:
//! its ranges are read into a pinned buffer, packed in the order of their destination, then
//! copied to the GPU with one copy per contiguous run of the destination; a run alternates two
//! pinned buffers, so the reads of one group overlap the copies of the one before.
//!
//! Where the plan allows page-cache DMA ([`crate::plan::Dma`]) and the GPU runs gpufile's gather
//! kernel ([`crate::cuda::GatherKernel`]), the ranges of a group that lie in registered page
//! cache ([`super::dma`]) are not read by a CPU at all: their descriptions go into the slot
//! after the staged bytes, and one kernel launch has the GPU copy them from the registered
//! mapping; the group's other ranges are staged as above, in the same slot's turn.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cuda::{ContextGuard, DeviceTarget, GatherKernel, GatherPiece};
use crate::error::Result;
use crate::exec::dma::{DmaRead, Held};
use crate::exec::lane::{with_lane, BouncePool, CopyQueue, Lent};
use crate::exec::uring::{self, Piece};
use crate::exec::{Endpoint, Executor, Lease, Tasks};
use crate::future::Completion;
use crate::plan::HostIoBackend;
use crate::request::Range;
use crate::request::SendPtr;
use crate::source::{IoContext, LocalFile};

/// Where a gather's bytes land (or come from).
#[derive(Clone)]
pub enum GatherTarget {
    /// The caller's host memory: each range in place.
    Host(SendPtr),
    /// The caller's GPU memory (reads only), staged in pinned buffers of `bounce` bytes.
    Device {
        /// The caller's GPU memory.
        device: DeviceTarget,
        /// Size of each pinned buffer (a group's bytes never exceed it).
        bounce: usize,
        /// Where pinned buffers come from.
        pool: Arc<BouncePool>,
    },
}

/// The gather executor of one request.
pub struct GatherExec {
    /// The file side.
    pub endpoint: Endpoint,
    /// The local file the endpoint is, where it is one (io_uring and `O_DIRECT` need it).
    pub local: Option<Arc<LocalFile>>,
    /// The caller's memory.
    pub target: GatherTarget,
    /// io_uring or `pread` (the request's decision).
    pub host_io: HostIoBackend,
    /// Direct I/O asked for.
    pub direct: bool,
    /// Direct I/O asked for where the range is not cached.
    pub direct_uncached: bool,
    /// The GPU's own gather from registered page cache, where the plan allows it.
    pub gpu: Option<GpuGather>,
}

/// What a device gather needs to have the GPU copy hot ranges itself.
pub struct GpuGather {
    /// The request's use of the registered page cache.
    pub dma: DmaRead,
    /// The kernel, loaded in the primary context of the caller's memory.
    pub kernel: GatherKernel,
}

/// Smallest range the kernel takes: a range's description (24 bytes, [`GatherPiece`]) then never
/// takes more room in the slot than the range would staged, so a group's descriptions and
/// staged bytes always fit the slot together; smaller ranges are cheaper staged anyway.
pub const KERNEL_MIN_RANGE: usize = 32;

impl Executor for GatherExec {
    fn dma_bytes(&self) -> u64 {
        self.gpu
            .as_ref()
            .map_or(0, |g| g.dma.bytes.load(Ordering::Relaxed))
    }

    fn run(&self, tasks: &Tasks, done: &Completion) {
        match &self.target {
            GatherTarget::Host(base) => self.host_run(*base, tasks, done),
            GatherTarget::Device {
                device,
                bounce,
                pool,
            } => self.device_run(*device, *bounce, pool, tasks, done),
        }
    }
}

impl GatherExec {
    fn call<'c>(&self, done: &'c Completion) -> IoContext<'c> {
        IoContext {
            progress: done.progress(),
            direct: self.direct,
            direct_uncached: self.direct_uncached,
            stop: done.stop_flag(),
        }
    }

    /// Groups straight into (or out of) the caller's host memory.
    fn host_run(&self, base: SendPtr, tasks: &Tasks, done: &Completion) {
        let mut lease = Lease::default();
        while let Some(i) = tasks.next_index(&mut lease) {
            if done.stopped() {
                done.finish_task(Ok(0));
                tasks.skip_rest(&mut lease, done);
                return;
            }
            let group = tasks.split().group(i);
            let bytes = group.iter().map(|r| r.len).sum::<usize>();
            // SAFETY: each range's bytes lie in the caller's buffer (checked at submission),
            // owned by this group alone (ranges of a read do not overlap in the buffer) until
            // the request completes (`Engine::submit`).
            let r = unsafe { self.transfer(group, |k| base.at(group[k].buf_offset), done) };
            done.finish_task(r.map(|()| bytes));
        }
    }

    /// Moves every range of `group` between the file and memory at `at(k)` (range `k`'s).
    ///
    /// # Safety
    /// `at(k)` must be valid for range `k`'s length (writable for a read), and untouched by
    /// anyone else, until this returns.
    unsafe fn transfer(
        &self,
        group: &[Range],
        at: impl Fn(usize) -> *mut u8,
        done: &Completion,
    ) -> Result<()> {
        let call = self.call(done);
        let direction = self.endpoint.direction();
        if let (Some(local), HostIoBackend::IoUring) = (&self.local, self.host_io) {
            let fds = [local.fd(), local.direct_fd().unwrap_or(-1)];
            let pieces: Vec<Piece> = group
                .iter()
                .enumerate()
                .filter(|(_, r)| r.len > 0)
                .map(|(k, r)| {
                    let ptr = at(k);
                    Piece {
                        fd: local.pick(&call, ptr, r.len, r.file_offset),
                        ptr,
                        len: r.len,
                        offset: r.file_offset,
                    }
                })
                .collect();
            // SAFETY: the caller's contract, per piece.
            return unsafe {
                uring::transfer(direction, fds, local.path(), &pieces, call.progress)
            };
        }
        for (k, r) in group.iter().enumerate().filter(|(_, r)| r.len > 0) {
            let p = at(k);
            match &self.endpoint {
                Endpoint::Read(src) => {
                    // SAFETY: the caller's contract, for range `k`.
                    let dst = unsafe { std::slice::from_raw_parts_mut(p, r.len) };
                    src.read_at(dst, r.file_offset, call)?;
                }
                Endpoint::Write(sink) => {
                    // SAFETY: as above; a write only reads its range.
                    let src = unsafe { std::slice::from_raw_parts(p, r.len) };
                    sink.write_at(src, r.file_offset, call)?;
                }
            }
        }
        Ok(())
    }

    /// Groups read into pinned buffers and copied to the GPU.
    fn device_run(
        &self,
        device: DeviceTarget,
        bounce: usize,
        pool: &BouncePool,
        tasks: &Tasks,
        done: &Completion,
    ) {
        let mut lease = Lease::default();
        let Some(first) = tasks.next_index(&mut lease) else {
            return;
        };
        let lease = &mut lease;
        let r = ContextGuard::push(device.ctx).and_then(|_guard| {
            with_lane(device.ctx, device.device, |lane| {
                let lent = Lent::take(pool, bounce, &lane.stream)?;
                let slots = [lent.ptr(0), lent.ptr(1)];
                let gpu = self.gpu.as_ref().map(|g| (g, device));
                let mut held = Held::default();
                let run = Run {
                    lane,
                    slots,
                    bounce,
                    dst: device.addr,
                    gpu,
                };
                self.staged(first, tasks, &mut *lease, done, &run, &mut held);
                // A run that ended early drained before it reported; either way, the granules
                // its kernels read go only once nothing queued can read them.
                held.release(&lane.drain());
                Ok(())
            })
        });
        if let Err(e) = r {
            // The run could not start: its first group fails, the others are skipped.
            done.finish_task(Err(e));
            tasks.skip_rest(lease, done);
        }
    }

    /// The staged pipeline of one run, from group `first`: group *k* is read into slot *k* mod
    /// 2 and its copies queued; then group *k − 1*'s copies are waited for and it is finished,
    /// while the copies of group *k* run on. Granules the run's kernels read are kept in `held`.
    fn staged<Q: CopyQueue>(
        &self,
        first: usize,
        tasks: &Tasks,
        lease: &mut Lease,
        done: &Completion,
        run: &Run<'_, Q>,
        held: &mut Held,
    ) {
        let lane = run.lane;
        let mut pending: Option<(usize, usize)> = None; // (slot, bytes) of the group before
        let mut next = Some(first);
        let mut k = 0usize;
        while let Some(i) = next {
            if done.stopped() {
                let drained = lane.drain();
                if let Some((_, bytes)) = pending.take() {
                    done.finish_task(drained.map(|()| bytes));
                }
                done.finish_task(Ok(0));
                tasks.skip_rest(lease, done);
                return;
            }
            let slot = k % 2;
            let group = tasks.split().group(i);
            let bytes = group.iter().map(|r| r.len).sum::<usize>();
            let r = self.stage(group, run, slot, done, held);
            if let Err(e) = r {
                let drained = lane.drain();
                if let Some((_, bytes)) = pending.take() {
                    done.finish_task(drained.map(|()| bytes));
                }
                done.finish_task(Err(e));
                tasks.skip_rest(lease, done);
                return;
            }
            if let Some((slot, bytes)) = pending.take() {
                done.finish_task(lane.wait_slot(slot).map(|()| bytes));
            }
            pending = Some((slot, bytes));
            k += 1;
            next = tasks.next_index(lease);
        }
        if let Some((_, bytes)) = pending {
            done.finish_task(lane.drain().map(|()| bytes));
        }
    }

    /// Moves `group` through `slot` (free: its last copies were waited for): the ranges in
    /// registered page cache by one kernel launch, where the run has the kernel; the others
    /// read into the slot, packed in destination order, with one copy queued per contiguous run
    /// of the destination.
    fn stage<Q: CopyQueue>(
        &self,
        group: &[Range],
        run: &Run<'_, Q>,
        slot: usize,
        done: &Completion,
        held: &mut Held,
    ) -> Result<()> {
        let (lane, staging, dst) = (run.lane, run.slots[slot], run.dst);
        let Some((gpu, device)) = run.gpu else {
            return self.stage_copies(group, lane, staging, dst, slot, done);
        };
        let mut memo = HashMap::new();
        let mut pieces = Vec::new();
        let mut rest = Vec::new();
        for r in group {
            let hot = (r.len >= KERNEL_MIN_RANGE)
                .then(|| gpu.dma.whole(r.file_offset, r.len, device.ctx, &mut memo))
                .flatten();
            match hot {
                Some(src) => {
                    pieces.push(GatherPiece {
                        src: src as u64,
                        dst: dst + r.buf_offset as u64,
                        len: r.len as u64,
                    });
                }
                None => rest.push(*r),
            }
        }
        // The granules the pieces read stay registered until the run's queue is drained.
        held.hold_all(memo);
        let staged: usize = rest.iter().map(|r| r.len).sum();
        let at = staged.next_multiple_of(std::mem::align_of::<GatherPiece>());
        let room = std::mem::size_of_val(pieces.as_slice());
        if pieces.is_empty() || at + room > run.bounce {
            // Nothing hot (or, never with ranges of KERNEL_MIN_RANGE and more, no room).
            return self.stage_copies(group, lane, staging, dst, slot, done);
        }
        let n = u32::try_from(pieces.len()).map_err(|_| {
            crate::error::Error::InvalidArgument("a gather group of over 2^32 ranges".into())
        })?;
        let desc = staging.wrapping_add(at).cast::<GatherPiece>();
        // SAFETY: `[at, at + room)` lies in the slot (checked above), is aligned for `GatherPiece`
        // (the slot is page-aligned), and is not read by anything queued (the slot is free).
        unsafe { std::ptr::copy_nonoverlapping(pieces.as_ptr(), desc, pieces.len()) };
        // SAFETY: the descriptions stay in the slot, untouched, until the slot's mark (set
        // after the launch by `stage_copies`) is waited for; each source lies in a granule held
        // until the run's queue is drained; each destination is a range of the caller's buffer
        // (checked at submission), which the ranges of a read do not share.
        unsafe { lane.gather(&gpu.kernel, desc, n) }?;
        let bytes = pieces.iter().map(|p| p.len).sum::<u64>();
        done.progress().fetch_add(bytes, Ordering::Relaxed);
        gpu.dma.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.stage_copies(&rest, lane, staging, dst, slot, done)
    }

    /// Reads `group` into the pinned buffer at `staging`, packed in destination order, queues
    /// one copy per contiguous run of the destination at `dst`, and marks `slot` after them.
    fn stage_copies(
        &self,
        group: &[Range],
        lane: &impl CopyQueue,
        staging: *mut u8,
        dst: u64,
        slot: usize,
        done: &Completion,
    ) -> Result<()> {
        let plan = StagePlan::new(group);
        // SAFETY: the packed offsets of a group stay within its bytes, at most the pinned
        // buffer's size (the planner's limit); the buffer is this run's alone.
        unsafe { self.transfer(group, |k| staging.wrapping_add(plan.at[k]), done) }?;
        for run in &plan.runs {
            // SAFETY: the source is the staged bytes, unchanged until the slot's mark is waited
            // for; the destination run lies in the caller's buffer (checked at submission).
            unsafe {
                lane.copy_to_device(
                    dst + run.buf_offset as u64,
                    staging.wrapping_add(run.staged),
                    run.len,
                )
            }?;
        }
        lane.mark_slot(slot)
    }
}

/// What one run of a device gather moves its groups with.
struct Run<'a, Q: CopyQueue> {
    /// The run's stream and events.
    lane: &'a Q,
    /// The two pinned buffers, `bounce` bytes each, lent to this run only.
    slots: [*mut u8; 2],
    bounce: usize,
    /// Device address of the caller's buffer.
    dst: u64,
    /// The GPU's own gather, with the caller's memory.
    gpu: Option<(&'a GpuGather, DeviceTarget)>,
}

/// One contiguous run of a group's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyRun {
    /// Offset in the caller's buffer.
    pub buf_offset: usize,
    /// Offset in the staging buffer.
    pub staged: usize,
    /// Bytes.
    pub len: usize,
}

/// Where each range of a group is staged (packed in destination order) and the copies that
/// move the staged bytes to their destination.
#[derive(Debug)]
pub struct StagePlan {
    /// Staging offset of each range, in the group's order.
    pub at: Vec<usize>,
    /// The copies.
    pub runs: Vec<CopyRun>,
}

impl StagePlan {
    /// The plan of `group`.
    pub fn new(group: &[Range]) -> Self {
        let mut order: Vec<usize> = (0..group.len()).collect();
        if !group.windows(2).all(|w| w[0].buf_offset <= w[1].buf_offset) {
            order.sort_unstable_by_key(|&k| group[k].buf_offset);
        }
        let mut at = vec![0usize; group.len()];
        let mut runs: Vec<CopyRun> = Vec::new();
        let mut staged = 0usize;
        for k in order {
            let r = group[k];
            at[k] = staged;
            if r.len == 0 {
                continue;
            }
            match runs.last_mut() {
                Some(last) if last.buf_offset + last.len == r.buf_offset => last.len += r.len,
                _ => runs.push(CopyRun {
                    buf_offset: r.buf_offset,
                    staged,
                    len: r.len,
                }),
            }
            staged += r.len;
        }
        StagePlan { at, runs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::future::IoFuture;
    use crate::plan::TaskSplit;
    use crate::request::Ranges;
    use crate::source::Source;
    use std::io::Write;

    fn r(file_offset: u64, len: usize, buf_offset: usize) -> Range {
        Range {
            file_offset,
            len,
            buf_offset,
        }
    }

    #[test]
    fn a_group_is_staged_in_destination_order_with_a_copy_per_contiguous_run() {
        // Given out of order: staged sorted by destination, two runs (a gap at 12..20).
        let group = [
            r(500, 4, 8),
            r(100, 4, 0),
            r(900, 4, 4),
            r(0, 0, 30),
            r(7, 6, 20),
        ];
        let plan = StagePlan::new(&group);
        assert_eq!(plan.at, vec![8, 0, 4, 18, 12]);
        assert_eq!(
            plan.runs,
            vec![
                CopyRun {
                    buf_offset: 0,
                    staged: 0,
                    len: 12
                },
                CopyRun {
                    buf_offset: 20,
                    staged: 12,
                    len: 6
                },
            ]
        );
    }

    fn run_host(
        src: Endpoint,
        local: Option<Arc<LocalFile>>,
        ranges: Vec<Range>,
        buf: &mut [u8],
        host_io: HostIoBackend,
    ) -> crate::Result<usize> {
        let split = TaskSplit::grouped(Ranges::Many(ranges.into()), 7, 1 << 20);
        let count = split.count();
        let tasks = Tasks::new(split, 2);
        let done = Completion::new(count, |_| {});
        let exec = GatherExec {
            endpoint: src,
            local,
            target: GatherTarget::Host(SendPtr(buf.as_mut_ptr())),
            host_io,
            direct: false,
            direct_uncached: false,
            gpu: None,
        };
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| exec.run(&tasks, &done));
            }
        });
        IoFuture::pending(done).wait()
    }

    /// A copy queue in host memory that runs a copy only when its slot is waited for (or the
    /// queue drained), as late as a GPU may: a pipeline that refilled a slot before waiting
    /// for its copies would copy the wrong bytes.
    struct LateQueue {
        queued: std::cell::RefCell<Vec<Queued>>,
    }

    /// A queued copy: device address, source, bytes, and the slot marked after it.
    type Queued = (u64, *const u8, usize, Option<usize>);

    impl LateQueue {
        fn run_until(&self, upto: usize) {
            let mut q = self.queued.borrow_mut();
            for (dst, src, len, _) in q.drain(..upto) {
                // SAFETY: `dst` is the test's "device" vector, `src` a staging buffer.
                unsafe { std::ptr::copy_nonoverlapping(src, dst as usize as *mut u8, len) };
            }
        }
    }

    impl CopyQueue for LateQueue {
        fn wait_slot(&self, slot: usize) -> crate::Result<()> {
            let q = self.queued.borrow();
            let last = q.iter().rposition(|c| c.3 == Some(slot));
            drop(q);
            if let Some(i) = last {
                self.run_until(i + 1);
            }
            Ok(())
        }
        unsafe fn copy_to_device(&self, dst: u64, src: *const u8, len: usize) -> crate::Result<()> {
            self.queued.borrow_mut().push((dst, src, len, None));
            Ok(())
        }
        unsafe fn copy_to_host(&self, _: *mut u8, _: u64, _: usize) -> crate::Result<()> {
            unreachable!("a gather copies to the device only")
        }
        fn mark_slot(&self, slot: usize) -> crate::Result<()> {
            if let Some(last) = self.queued.borrow_mut().last_mut() {
                last.3 = Some(slot);
            }
            Ok(())
        }
        fn drain(&self) -> crate::Result<()> {
            let n = self.queued.borrow().len();
            self.run_until(n);
            Ok(())
        }
    }

    #[test]
    fn a_staged_device_gather_is_byte_exact_with_copies_run_late() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        let file = std::fs::File::open(f.path()).unwrap();
        let local = Arc::new(LocalFile::new(file, f.path().to_owned(), true, false));
        // 600 ranges, destinations reversed with a gap every 7th, some empty.
        let n = 600;
        let ranges: Vec<Range> = (0..n)
            .map(|i| {
                let gap = usize::from(i % 7 == 0) * 5;
                r(
                    (i * 331 % 190_000) as u64,
                    (i * 17) % 90,
                    (n - 1 - i) * 100 + gap,
                )
            })
            .collect();
        let split = TaskSplit::grouped(Ranges::Many(ranges.clone().into()), 50, 4096);
        let count = split.count();
        let tasks = Tasks::new(split, 1);
        let done = Completion::new(count, |_| {});
        let exec = GatherExec {
            endpoint: Endpoint::Read(Arc::clone(&local) as Arc<dyn Source>),
            local: Some(local),
            target: GatherTarget::Host(SendPtr(std::ptr::null_mut())),
            host_io: HostIoBackend::IoUring,
            direct: false,
            direct_uncached: false,
            gpu: None,
        };
        let mut device = vec![0xEEu8; n * 100 + 100];
        let mut slots = [vec![0u8; 4096], vec![0u8; 4096]];
        let queue = LateQueue {
            queued: Default::default(),
        };
        let mut lease = Lease::default();
        let first = tasks.next_index(&mut lease).unwrap();
        let ptrs = [slots[0].as_mut_ptr(), slots[1].as_mut_ptr()];
        let dst = device.as_mut_ptr() as u64;
        let run = Run {
            lane: &queue,
            slots: ptrs,
            bounce: 4096,
            dst,
            gpu: None,
        };
        exec.staged(first, &tasks, &mut lease, &done, &run, &mut Held::default());
        let want: usize = ranges.iter().map(|r| r.len).sum();
        assert_eq!(IoFuture::pending(done).wait().unwrap(), want);
        for (i, x) in ranges.iter().enumerate() {
            let at = x.file_offset as usize;
            assert_eq!(
                &device[x.buf_offset..][..x.len],
                &data[at..at + x.len],
                "range {i}"
            );
        }
        drop(slots);
    }

    #[test]
    fn host_gathers_are_byte_exact_through_io_uring_and_pread() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        let file = std::fs::File::open(f.path()).unwrap();
        let local = Arc::new(LocalFile::new(file, f.path().to_owned(), true, false));
        let ranges: Vec<Range> = (0..50)
            .map(|i| r((i * 1999 % 97_000) as u64, 1 + i * 13 % 300, i * 300))
            .collect();
        for io in [HostIoBackend::IoUring, HostIoBackend::Pread] {
            let mut buf = vec![0xAAu8; 50 * 300];
            let endpoint = Endpoint::Read(Arc::clone(&local) as Arc<dyn Source>);
            let n = run_host(
                endpoint,
                Some(Arc::clone(&local)),
                ranges.clone(),
                &mut buf,
                io,
            );
            assert_eq!(n.unwrap(), ranges.iter().map(|r| r.len).sum::<usize>());
            for (i, x) in ranges.iter().enumerate() {
                let at = x.file_offset as usize;
                assert_eq!(
                    &buf[x.buf_offset..][..x.len],
                    &data[at..at + x.len],
                    "{io} {i}"
                );
                // Bytes between ranges are left as they were.
                assert!(buf[x.buf_offset + x.len..(i + 1) * 300]
                    .iter()
                    .all(|&b| b == 0xAA));
            }
        }
    }
}
