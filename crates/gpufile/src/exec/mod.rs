//! One executor per backend, each behind [`Executor`]: it takes tasks from a request's shared
//! cursor until none is left and finishes each in the request's [`Completion`].
//!
//! - [`host`]: host memory ⇄ a [`crate::source::Source`] / [`crate::source::Sink`].
//! - [`bounce`]: GPU memory ⇄ a source or sink through pinned bounce buffers, overlapped.
//! - [`cufile`]: GPU memory ⇄ a file registered with cuFile.
//! - [`gather`]: many small ranges, a group of them per task, host or GPU memory (staged in
//!   pinned memory), through [`uring`] (io_uring) or `pread`.
//!
//! The engine starts one run of the executor per worker (at most one per task); a run owns its
//! worker until the cursor is empty, so what a run sets up once (a stream, two pinned buffers)
//! serves all the tasks it takes, and a read's last copy overlaps the run's next `pread`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::cuda::StreamMark;
use crate::future::Completion;
use crate::plan::{Task, TaskSplit};
pub use crate::source::Endpoint;

pub mod bounce;
pub mod cufile;
pub mod dma;
pub mod gather;
pub mod host;
pub(crate) mod lane;
pub mod uring;

/// Runs tasks of one request.
pub trait Executor: Send + Sync {
    /// Takes tasks from `tasks` until it is empty, finishing each in `done`.
    fn run(&self, tasks: &Tasks, done: &Completion);

    /// Bytes copied to the GPU straight from registered page cache so far (page-cache DMA).
    fn dma_bytes(&self) -> u64 {
        0
    }
}

/// An executor whose runs first wait for a producer's stream, as it was when the request was
/// submitted ([`StreamMark`]): each run waits once, on its worker, before the inner executor
/// touches the caller's memory; a failed wait fails the run's first task and skips the rest.
pub struct AfterStream {
    /// The end of the producer's work, marked at submission.
    pub mark: StreamMark,
    /// What runs after the wait.
    pub inner: Arc<dyn Executor>,
}

impl Executor for AfterStream {
    fn run(&self, tasks: &Tasks, done: &Completion) {
        match self.mark.wait() {
            Ok(()) => self.inner.run(tasks, done),
            Err(e) => fail_run(tasks, done, e),
        }
    }

    fn dma_bytes(&self) -> u64 {
        self.inner.dma_bytes()
    }
}

/// Ends a run that cannot start: its first task (if any is left) fails with `e`, every task not
/// yet handed out is skipped; blocks other runs already hold are theirs to finish.
fn fail_run(tasks: &Tasks, done: &Completion, e: crate::Error) {
    let mut lease = Lease::default();
    if tasks.next(&mut lease).is_some() {
        done.finish_task(Err(e));
    }
    tasks.skip_rest(&mut lease, done);
}

/// The tasks of one request, handed out to the runs in blocks of consecutive tasks, of the sizes
/// the plan gives ([`crate::plan::task_block`], shrinking at the end: [`crate::plan::lease_size`]).
pub struct Tasks {
    split: TaskSplit,
    next: AtomicUsize,
    block: usize,
    runs: usize,
}

/// A run's current block of tasks.
#[derive(Default)]
pub struct Lease {
    next: usize,
    end: usize,
}

impl Tasks {
    /// The tasks of `split`, for `runs` runs.
    pub fn new(split: TaskSplit, runs: usize) -> Self {
        let block = crate::plan::task_block(split.count(), runs);
        Tasks {
            split,
            next: AtomicUsize::new(0),
            block,
            runs,
        }
    }

    /// How many tasks in all.
    pub fn count(&self) -> usize {
        self.split.count()
    }

    /// The run's next task: the next of its block, or the first of a new block.
    pub fn next(&self, lease: &mut Lease) -> Option<Task> {
        self.next_index(lease).map(|i| self.split.task(i))
    }

    /// The index of the run's next task (for [`Tasks::split`]'s groups).
    pub fn next_index(&self, lease: &mut Lease) -> Option<usize> {
        if lease.next >= lease.end {
            let count = self.split.count();
            // What remains may be less by the time the lease is taken (other runs lease too):
            // a lease a little larger than the rule's, never a wrong one.
            let remaining = count.saturating_sub(self.next.load(Ordering::Relaxed));
            let block = crate::plan::lease_size(remaining, self.runs, self.block);
            let start = self.next.fetch_add(block, Ordering::Relaxed);
            if start >= count {
                return None;
            }
            *lease = Lease {
                next: start,
                end: (start + block).min(count),
            };
        }
        let i = lease.next;
        lease.next += 1;
        Some(i)
    }

    /// The split the tasks come from.
    pub fn split(&self) -> &TaskSplit {
        &self.split
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

#[cfg(test)]
mod tasks_tests {
    use super::{fail_run, Lease, Tasks};
    use crate::future::{Completion, IoFuture};
    use crate::plan::TaskSplit;
    use crate::Error;
    use std::sync::Arc;

    /// A run as the executors make it: tasks until none is left or the request stopped.
    fn good_run(tasks: &Tasks, done: &Completion) {
        let mut lease = Lease::default();
        while let Some(task) = tasks.next(&mut lease) {
            if done.stopped() {
                done.finish_task(Ok(0));
                tasks.skip_rest(&mut lease, done);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            done.finish_task(Ok(task.len));
        }
    }

    /// Runs `runs` (true: its wait failed) on threads over `count` tasks; every task must be
    /// finished exactly once: a completion of `count + 1` is one short until the test's own.
    fn check(count: usize, runs: &[bool]) -> IoFuture {
        let tasks = Arc::new(Tasks::new(TaskSplit::new(0, count, 1), runs.len()));
        let done = Completion::new(count + 1, |_| {});
        let threads: Vec<_> = runs
            .iter()
            .map(|&fails| {
                let (tasks, done) = (Arc::clone(&tasks), Arc::clone(&done));
                std::thread::spawn(move || match fails {
                    true => fail_run(&tasks, &done, Error::InvalidArgument("wait".into())),
                    false => good_run(&tasks, &done),
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let fut = IoFuture::pending(Arc::clone(&done));
        assert!(!fut.is_done(), "a task was finished twice");
        done.finish_task(Ok(0));
        assert!(fut.is_done(), "a task was never finished");
        fut
    }

    #[test]
    fn a_failed_wait_fails_the_request_once_whatever_the_runs() {
        for runs in [
            &[true][..],
            &[true, true, true, true],
            &[false, true],
            &[true, false, false],
        ] {
            for count in [1, 2, 7, 40, 300] {
                let r = check(count, runs).wait();
                // A run whose wait passed may have done every task before the failed one began.
                let all_done = runs.contains(&false) && matches!(r, Ok(n) if n == count);
                assert!(
                    all_done || matches!(&r, Err(Error::InvalidArgument(m)) if m == "wait"),
                    "{runs:?} over {count} tasks: {r:?}"
                );
            }
        }
    }

    /// Leases taken one after another (as runs take them) hand out every task once, in order,
    /// whole blocks first and single tasks at the end, so runs finish together.
    #[test]
    fn leases_cover_every_task_once_and_shrink_to_one_at_the_end() {
        for (count, runs) in [(1024, 16), (1000, 4), (3, 4), (100_000, 7), (64, 1)] {
            let tasks = Tasks::new(TaskSplit::new(0, count, 1), runs);
            let (mut lens, mut next, mut lease) = (Vec::new(), 0, Lease::default());
            while let Some(t) = tasks.next(&mut lease) {
                assert_eq!(t.file_offset, next, "{count} tasks, {runs} runs");
                // The first task of a lease: its length is the lease's.
                if lens.iter().sum::<usize>() == next as usize {
                    lens.push(lease.end - next as usize);
                }
                next += 1;
            }
            assert_eq!(next as usize, count);
            assert_eq!(lens[0], crate::plan::task_block(count, runs).min(count));
            assert!(lens.windows(2).all(|w| w[0] >= w[1]), "{lens:?}");
            assert_eq!(lens.last(), Some(&1), "{lens:?}");
        }
    }
}
