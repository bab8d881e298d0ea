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

use crate::future::Completion;
use crate::plan::{Task, TaskSplit};
use crate::source::{Sink, Source};

pub mod bounce;
pub mod cufile;
pub mod host;

/// Runs tasks of one request.
pub trait Executor: Send + Sync {
    /// Takes tasks from `tasks` until it is empty, finishing each in `done`.
    fn run(&self, tasks: &Tasks, done: &Completion);
}

/// The file side of a request.
#[derive(Clone)]
pub enum Endpoint {
    /// A read from this source.
    Read(Arc<dyn Source>),
    /// A write to this sink.
    Write(Arc<dyn Sink>),
}

/// The tasks of one request, handed out to the runs in order.
pub struct Tasks {
    split: TaskSplit,
    next: AtomicUsize,
}

impl Tasks {
    /// The tasks of `split`.
    pub fn new(split: TaskSplit) -> Self {
        Tasks {
            split,
            next: AtomicUsize::new(0),
        }
    }

    /// How many tasks in all.
    pub fn count(&self) -> usize {
        self.split.count()
    }

    /// The next task not yet taken.
    pub fn next(&self) -> Option<Task> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.split.count()).then(|| self.split.task(i))
    }

    /// Takes every task left and returns how many (to finish them as skipped).
    pub fn take_rest(&self) -> usize {
        let count = self.split.count();
        let before = self.next.fetch_max(count, Ordering::Relaxed);
        count.saturating_sub(before)
    }

    /// Finishes every task left as skipped (the request stopped or a run cannot start).
    pub fn skip_rest(&self, done: &Completion) {
        let n = self.take_rest();
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
