//! A fixed set of worker threads fed through one FIFO queue. Generic: it runs closures and knows
//! nothing of files, devices or metrics.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::future::lock;

/// A job run by one worker.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long a worker that found the queue empty watches it before it sleeps. While requests
/// come one after another (random reads, many files), the worker that just finished takes the
/// next job without being woken: a wake-up is a futex call on the submitting thread, which is
/// what limits one Python thread submitting small requests.
const SPIN: Duration = Duration::from_micros(50);

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
    /// Workers waiting on `ready`.
    sleeping: usize,
    /// Of those, how many were notified and have not yet come back for a job.
    woken: usize,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// `queue.jobs.len()`, readable without the lock (what a spinning worker watches).
    queued: AtomicUsize,
    /// Whether a worker is watching the queue (at most one does). Changed only with the queue
    /// locked, so a submitter that sees it set knows that worker will look at the queue again.
    spinning: AtomicBool,
}

impl Shared {
    /// Waits for a job; `None` once the pool is closed and drained.
    fn pop_wait(&self) -> Option<Job> {
        let mut q = lock(&self.queue);
        let mut spun = false;
        loop {
            if let Some(job) = q.jobs.pop_front() {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                return Some(job);
            }
            if q.closed {
                return None;
            }
            if !spun && !self.spinning.load(Ordering::Relaxed) {
                spun = true;
                self.spinning.store(true, Ordering::Relaxed);
                drop(q);
                let deadline = Instant::now() + SPIN;
                let mut spins = 0u32;
                while self.queued.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
                    spins += 1;
                    // Other threads first where there are fewer cores than threads.
                    if spins % 64 == 0 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                q = lock(&self.queue);
                self.spinning.store(false, Ordering::Relaxed);
                continue;
            }
            q.sleeping += 1;
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            q.sleeping -= 1;
            q.woken = q.woken.saturating_sub(1);
        }
    }

    /// Queues jobs under one lock, and wakes as many sleeping workers as there are jobs that no
    /// worker is on its way for (a spinning worker counts as one): all of them with one call
    /// where every sleeper is needed.
    fn push(&self, jobs: impl ExactSizeIterator<Item = Job>) {
        let mut q = lock(&self.queue);
        let n = jobs.len();
        q.jobs.extend(jobs);
        self.queued.fetch_add(n, Ordering::Relaxed);
        let coming = q.woken + usize::from(self.spinning.load(Ordering::Relaxed));
        let idle = q.sleeping.saturating_sub(q.woken);
        let wake = idle.min(q.jobs.len().saturating_sub(coming));
        q.woken += wake;
        drop(q);
        match wake {
            0 => {}
            w if w == idle => self.ready.notify_all(),
            w => (0..w).for_each(|_| self.ready.notify_one()),
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
                        // A job that panics ends there and the worker goes on: a dead worker
                        // would leave every later job that needs it queued for ever. Turning
                        // the panic into a failure is the job's owner's part (the engine's
                        // runs catch their own).
                        let _ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
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
    #[cfg(test)]
    pub fn size(&self) -> usize {
        lock(&self.workers).len()
    }

    /// Queues a job.
    #[cfg(test)]
    pub fn submit(&self, job: Job) {
        self.shared.push(std::iter::once(job));
    }

    /// Queues jobs at once: one lock, and the sleeping workers they need woken together.
    pub fn submit_all(&self, jobs: Vec<Job>) {
        self.shared.push(jobs.into_iter());
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

    /// Jobs that can only end together: each worker must be given one, whether the others
    /// sleep (long after the last job) or one watches the queue (right after it).
    /// `k` jobs that can only end together (each waits at a barrier for the others, so each
    /// needs a worker of its own), and where each says it ended.
    fn meeting_jobs(k: usize) -> (Vec<Job>, std::sync::mpsc::Receiver<()>) {
        let barrier = Arc::new(std::sync::Barrier::new(k));
        let (tx, rx) = std::sync::mpsc::channel();
        let jobs = (0..k)
            .map(|_| {
                let (b, tx) = (Arc::clone(&barrier), tx.clone());
                Box::new(move || {
                    b.wait();
                    tx.send(()).unwrap();
                }) as Job
            })
            .collect();
        (jobs, rx)
    }

    /// A panicking job leaves its worker alive: with one worker, the jobs after it still run.
    #[test]
    fn a_job_that_panics_leaves_its_worker_running_later_jobs() {
        let pool = ThreadPool::new(1).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        pool.submit(Box::new(|| panic!("injected")));
        pool.submit(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the job after a panic never ran");
        assert_eq!(pool.size(), 1);
    }

    #[test]
    fn every_queued_job_gets_a_worker_while_others_sleep_or_spin() {
        let pool = ThreadPool::new(4).unwrap();
        for (pause, together) in [
            (Duration::ZERO, false),
            (SPIN * 4, false),
            (Duration::ZERO, true),
            (SPIN * 4, true),
        ] {
            for _ in 0..20 {
                std::thread::sleep(pause);
                let (jobs, rx) = meeting_jobs(4);
                match together {
                    true => pool.submit_all(jobs),
                    false => jobs.into_iter().for_each(|j| pool.submit(j)),
                }
                for _ in 0..4 {
                    rx.recv_timeout(Duration::from_secs(10))
                        .expect("a queued job got no worker");
                }
            }
        }
    }

    /// Rounds of k jobs pushed together that can only end together (each needs a worker of its
    /// own), k from 1 to the pool's size, from two submitters at once, with pauses below, around
    /// and past the spin: a lost wake-up, or an over-counted one that a later push trusts,
    /// leaves a job queued with the workers it needs asleep, and its round never ends.
    #[test]
    fn rounds_of_jobs_pushed_together_from_two_threads_each_get_a_worker() {
        const WORKERS: usize = 6;
        let pool = Arc::new(ThreadPool::new(WORKERS).unwrap());
        let pauses = [
            Duration::ZERO,
            SPIN / 4,
            SPIN / 2,
            SPIN,
            SPIN * 3 / 2,
            SPIN * 3,
        ];
        let submitter = |seed: usize| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for round in 0..3000usize {
                    // At most half the pool each, so both rounds can always run at once.
                    let k = (round + seed) % (WORKERS / 2) + 1;
                    std::thread::sleep(pauses[(round * 7 + seed) % pauses.len()]);
                    let (jobs, rx) = meeting_jobs(k);
                    match round % 3 {
                        0 => jobs.into_iter().for_each(|j| pool.submit(j)),
                        _ => pool.submit_all(jobs),
                    }
                    for _ in 0..k {
                        rx.recv_timeout(Duration::from_secs(10))
                            .unwrap_or_else(|_| {
                                panic!("round {round} of {k}: a job got no worker")
                            });
                    }
                }
            })
        };
        let (a, b) = (submitter(0), submitter(1));
        a.join().unwrap();
        b.join().unwrap();
    }
}
