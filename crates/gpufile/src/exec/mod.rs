//! One executor per backend, each behind [`Executor`]: it takes tasks from a request's shared
//! cursor until none is left and finishes each in the request's [`Completion`].
//!
//! - [`host`]: host memory ⇄ a [`Source`](crate::source::Source) / [`Sink`](crate::source::Sink).
//! - [`bounce`]: GPU memory ⇄ a source or sink through pinned bounce buffers, overlapped.
//! - [`cufile`]: GPU memory ⇄ a file registered with cuFile.
//!
//! The engine starts one run of the executor per worker (at most one per task); a run owns its
//! worker until the cursor is empty, so what a run sets up once (a stream, two pinned buffers)
//! serves all the tasks it takes, and a read's last copy overlaps the run's next `pread`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::cuda::StreamWait;
use crate::future::Completion;
use crate::plan::{Task, TaskSplit};
use crate::source::{Sink, Source};

pub mod bounce;
pub mod cufile;
pub mod dma;
pub mod host;

/// Runs tasks of one request.
pub trait Executor: Send + Sync {
    /// Takes tasks from `tasks` until it is empty, finishing each in `done`.
    fn run(&self, tasks: &Tasks, done: &Completion);

    /// Bytes copied to the GPU straight from registered page cache so far (page-cache DMA).
    fn dma_bytes(&self) -> u64 {
        0
    }
}

/// An executor whose runs first wait for a producer's stream ([`StreamWait`]): each run waits
/// once, on its worker, before the inner executor touches the caller's memory; a failed wait
/// fails the run's first task and skips the rest.
pub struct AfterStream {
    /// The stream to wait for.
    pub wait: StreamWait,
    /// What runs after the wait.
    pub inner: Arc<dyn Executor>,
}

impl Executor for AfterStream {
    fn run(&self, tasks: &Tasks, done: &Completion) {
        if let Err(e) = self.wait.wait() {
            let mut lease = Lease::default();
            if tasks.next(&mut lease).is_some() {
                done.finish_task(Err(e));
            }
            tasks.skip_rest(&mut lease, done);
            return;
        }
        self.inner.run(tasks, done);
    }

    fn dma_bytes(&self) -> u64 {
        self.inner.dma_bytes()
    }
}

/// The file side of a request.
#[derive(Clone)]
pub enum Endpoint {
    /// A read from this source.
    Read(Arc<dyn Source>),
    /// A write to this sink.
    Write(Arc<dyn Sink>),
}

/// The tasks of one request, handed out to the runs in blocks of consecutive tasks: each run
/// reads a contiguous stretch of the file at a time (the kernel's readahead sees a sequential
/// stream per worker, which a cold file needs), while blocks small enough that every run still
/// gets several keep the load even.
pub struct Tasks {
    split: TaskSplit,
    next: AtomicUsize,
    block: usize,
}

/// A run's current block of tasks.
#[derive(Default)]
pub struct Lease {
    next: usize,
    end: usize,
}

/// Most tasks in one block (64 × 4 MiB = 256 MiB of a file read sequentially by one run).
const MAX_BLOCK: usize = 64;

impl Tasks {
    /// The tasks of `split`, for `runs` runs.
    pub fn new(split: TaskSplit, runs: usize) -> Self {
        let block = (split.count() / (runs.max(1) * 4)).clamp(1, MAX_BLOCK);
        Tasks {
            split,
            next: AtomicUsize::new(0),
            block,
        }
    }

    /// How many tasks in all.
    pub fn count(&self) -> usize {
        self.split.count()
    }

    /// The run's next task: the next of its block, or the first of a new block.
    pub fn next(&self, lease: &mut Lease) -> Option<Task> {
        if lease.next >= lease.end {
            let count = self.split.count();
            let start = self.next.fetch_add(self.block, Ordering::Relaxed);
            if start >= count {
                return None;
            }
            *lease = Lease {
                next: start,
                end: (start + self.block).min(count),
            };
        }
        let i = lease.next;
        lease.next += 1;
        Some(self.split.task(i))
    }

    /// Finishes as skipped every task not yet started: the rest of `lease` and every block not
    /// yet handed out (the request stopped, or a run cannot start).
    pub fn skip_rest(&self, lease: &mut Lease, done: &Completion) {
        let count = self.split.count();
        let before = self.next.fetch_max(count, Ordering::Relaxed);
        let n = count.saturating_sub(before) + lease.end.saturating_sub(lease.next);
        lease.next = lease.end;
        if n > 0 {
            done.finish_tasks(n, Ok(0));
        }
    }
}

/// A raw pointer that crosses to a worker thread. The request's caller keeps the memory valid
/// (the `# Safety` contract of [`crate::Engine::submit`]).
#[derive(Clone, Copy, Debug)]
pub struct SendPtr(pub *mut u8);
// SAFETY: the pointer is only dereferenced by the one task that owns its disjoint range, while the
// caller guarantees the memory outlives the request.
unsafe impl Send for SendPtr {}
// SAFETY: as above: shared between runs, each dereferences only the ranges of its own tasks.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The address `offset` bytes further.
    pub fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}
