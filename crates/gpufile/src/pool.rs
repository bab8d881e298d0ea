//! A fixed set of worker threads fed through one FIFO queue. Generic: it runs closures and knows
//! nothing of files, devices or metrics.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::future::lock;

/// A job run by one worker.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    /// Waits for a job; `None` once the pool is closed and drained.
    fn pop_wait(&self) -> Option<Job> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(job) = q.jobs.pop_front() {
                return Some(job);
            }
            if q.closed {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Worker threads named `gpufile-io-N`. Dropping the pool closes its queue, lets the workers
/// finish what was queued, and joins them.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl ThreadPool {
    /// Starts `size` workers (an error, not a panic, if the OS refuses a thread).
    pub fn new(size: usize) -> Result<Self> {
        let pool = ThreadPool {
            shared: Arc::new(Shared::default()),
            workers: Mutex::new(Vec::with_capacity(size)),
        };
        // On error, dropping `pool` closes the queue and joins the workers already started.
        pool.grow(size)?;
        Ok(pool)
    }

    /// Adds workers until there are at least `size`.
    pub fn grow(&self, size: usize) -> Result<()> {
        let mut workers = lock(&self.workers);
        while workers.len() < size {
            let shared = Arc::clone(&self.shared);
            let worker = std::thread::Builder::new()
                .name(format!("gpufile-io-{}", workers.len()))
                .spawn(move || {
                    while let Some(job) = shared.pop_wait() {
                        job();
                    }
                })
                .map_err(|e| Error::Spawn {
                    threads: size,
                    source: Arc::new(e),
                })?;
            workers.push(worker);
        }
        Ok(())
    }

    /// Number of workers.
    pub fn size(&self) -> usize {
        lock(&self.workers).len()
    }

    /// Queues a job.
    pub fn submit(&self, job: Job) {
        lock(&self.shared.queue).jobs.push_back(job);
        self.shared.ready.notify_one();
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.ready.notify_all();
        let workers = std::mem::take(&mut *lock(&self.workers));
        for w in workers {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_job_runs_before_drop_returns() {
        let n = Arc::new(AtomicUsize::new(0));
        let pool = ThreadPool::new(3).unwrap();
        assert_eq!(pool.size(), 3);
        pool.grow(5).unwrap();
        pool.grow(2).unwrap();
        assert_eq!(pool.size(), 5);
        for i in 0..100 {
            let n = Arc::clone(&n);
            pool.submit(Box::new(move || {
                n.fetch_add(i, Ordering::Relaxed);
            }));
        }
        drop(pool);
        assert_eq!(n.load(Ordering::Relaxed), 4950);
    }
}
