//! The planner: pure functions from a request to everything it will do.
//!
//! [`plan_request`] makes the whole [`Plan`] of one request, once; the engine instantiates what
//! it says and `gpufile explain` prints the same plan, so what explain predicts is what runs.
//! A plan is decided in this order:
//! 1. **The path and why** ([`decide_path`]): cuFile or gpufile's own, by KvikIO's
//!    `compat_mode` rules, with AUTO honest about cuFile's compat path.
//! 2. **The tasks**: a request of many small ranges is gathered, a group of ranges per task
//!    ([`gathers`], [`gather_group`]); any other is cut by [`task_size`], the one rule for task
//!    sizes.
//! 3. **The strategy** ([`Strategy`]): the executor that runs the tasks (cuFile, host memory,
//!    bounce buffers, gather) and its policies: direct I/O ([`DirectIo`]), the bounce
//!    pipeline's chunks ([`Chunks`]), page-cache DMA ([`Dma`]), a gather's io_uring or `pread`
//!    ([`HostIo`]).
//! 4. **Who runs them**: what the waiting caller does itself ([`CallerPart`]), how many workers
//!    share the tasks, and how many consecutive tasks a worker takes at once ([`task_block`]).
//!
//! What a plan reads: the request's [`Shape`], the facts its endpoint states about itself
//! ([`Needs`]: a local file, a server's request per task, a sink's parts), the settings, and
//! the machine ([`Machine`]: cuFile, the file's registration, io_uring, page-cache DMA), each
//! asked only where its answer matters. Only what depends on the bytes themselves is decided
//! later, per chunk: whether a chunk is aligned for O_DIRECT and whether its pages are
//! resident ([`crate::source::LocalFile`], [`crate::exec::dma`]).

use crate::config::Settings;
use crate::error::Error;
pub use crate::request::{Direction, Memory, Ranges};

mod gather;
mod host_io;
mod path;
mod size;
mod strategy;
mod tasks;

pub use gather::*;
pub use host_io::*;
pub use path::*;
pub use size::*;
pub use strategy::*;
pub use tasks::*;

/// What an endpoint states about itself for the plan: facts, not decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// A local file: cuFile can move its bytes, io_uring can gather it, page-cache DMA can
    /// serve it, and the split of a device read alone applies.
    pub local_file: bool,
    /// Each task is a request of its own to a server (a remote object's ranged GET): the
    /// settings' `task_size` is not cut for idle workers.
    pub request_per_task: bool,
    /// The source serves a read best as one request (a server that ignores `Range`: one
    /// whole-body GET, whatever the task size).
    pub one_request: bool,
    /// The smallest request worth making to the source (a server's cost is per request): the
    /// settings' `task_size` where it is larger.
    pub min_request: Option<usize>,
    /// The sink takes its bytes in parts of this size (an object store's multipart upload):
    /// a write's tasks are its parts, each sent whole.
    pub part_size: Option<usize>,
}

/// What the planner needs to know of one request.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'a> {
    /// Read or write.
    pub direction: Direction,
    /// The caller's memory.
    pub memory: Memory,
    /// What moves.
    pub ranges: &'a Ranges,
    /// Bytes in all the ranges.
    pub len: usize,
    /// The request's own task size (`None`: the settings' one, cut for idle workers).
    pub task_size: Option<usize>,
    /// The caller waits for the request at once (see `CallerPart`).
    pub caller_waits: bool,
    /// No other request is in flight (see `alone_task_size`).
    pub alone: bool,
    /// The request is one of a batch that keeps every worker busy with whole `task_size`
    /// tasks (`batch_keeps_tasks_whole`).
    pub batch_whole: bool,
    /// What the endpoint states about itself.
    pub needs: Needs,
}

/// What the machine says, asked by the planner only where the answer matters (so host work
/// never loads cuFile, and a file is registered only for a request that takes cuFile's path).
pub trait Machine {
    /// What cuFile can do here.
    fn cufile(&mut self) -> Availability;
    /// Whether cuFile registers the endpoint's file, or why not.
    fn registration(&mut self) -> Result<(), String>;
    /// Whether io_uring can gather here (what the probe found), or why not.
    fn io_uring(&mut self) -> Result<String, HostIoReason>;
    /// Why this process cannot register page cache for DMA, if it cannot.
    fn dma_disabled(&mut self) -> Option<String>;
    /// Whether the GPU of the caller's memory runs gpufile's gather kernel on it, or why not.
    fn gather_kernel(&mut self) -> Result<(), String>;
}

/// How one request runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The path and why, or why the settings cannot be honoured (compat_mode OFF or
    /// `require_gds` without cuFile).
    pub path: Result<IoPath, Error>,
    /// The executor and its policies (`None` where the path is an error).
    pub strategy: Option<Strategy>,
    /// The task size the request runs with (a gather: the most bytes in a group).
    pub task_size: usize,
    /// The task size it would run with were other requests in flight (equal to `task_size`
    /// unless the split of a request alone applies).
    pub task_size_busy: usize,
    /// The tasks.
    pub tasks: TaskSplit,
    /// What the waiting caller does.
    pub caller: CallerPart,
    /// Runs that share the tasks: at most `num_threads`, at most one per task (the caller's
    /// share, where it takes one, is one of them).
    pub runs: usize,
}

/// Plans `shape` under `settings`, asking `machine` what it must.
pub fn plan_request(shape: &Shape<'_>, settings: &Settings, machine: &mut dyn Machine) -> Plan {
    let policy = Policy::from(settings);
    let device = shape.memory == Memory::Device;
    let read = shape.direction == Direction::Read;
    let local = shape.needs.local_file;
    // A group of a device gather goes through one pinned buffer.
    let group_bytes = match device {
        true => settings.bounce_buffer_size,
        false => settings.task_size,
    };
    // A gather is grouped in a batch that keeps every worker busy too: a group (at most a task
    // or a bounce buffer of bytes) is a whole task, where a task per small range (a column
    // block's rows) would cost a worker's wake-up, and on a device a copy, per range.
    let gather = gathers(shape.ranges, shape.task_size, group_bytes);
    // A gather moves each range by itself: cuFile would too, so gds_threshold is a range's.
    let path_len = match gather {
        true => shape.ranges.facts().max_len,
        false => shape.len,
    };
    let path = decide_path(shape.memory, path_len, local, policy, machine);
    let bounce = matches!(&path, Ok(p) if p.backend == Backend::GpufilePosix);
    let direct = DirectIo::of(settings, shape.direction);
    // Device writes of many ranges keep a task per range (each copied out by itself).
    let grouped = gather && bounce && (read || !device);
    let (tasks, task_size, task_size_busy) = match grouped {
        true => {
            let n = shape.ranges.as_slice().len();
            let group = gather_group(n, settings.num_threads);
            let tasks = TaskSplit::grouped(shape.ranges.clone(), group, group_bytes);
            (tasks, group_bytes, group_bytes)
        }
        false => {
            let (now, busy) = task_size(shape, settings, bounce);
            (TaskSplit::over(shape.ranges.clone(), now), now, busy)
        }
    };
    let strategy = path
        .as_ref()
        .ok()
        .map(|p| match (p.backend, grouped, device) {
            (Backend::Cufile, _, _) => Strategy::Cufile,
            (_, true, _) => Strategy::Gather {
                direct,
                host_io: choose_host_io(settings.io_uring, local, || machine.io_uring()),
                staging: device.then_some(settings.bounce_buffer_size),
                dma: page_cache_dma(settings, device && read && local, shape.len, || {
                    machine
                        .dma_disabled()
                        .or_else(|| machine.gather_kernel().err())
                }),
            },
            (_, false, false) => Strategy::Host { direct },
            (_, false, true) => Strategy::Bounce {
                direct,
                chunks: Chunks {
                    bounce: settings.bounce_buffer_size,
                    whole_tasks: !read && shape.needs.part_size.is_some(),
                },
                dma: page_cache_dma(settings, read && local, shape.len, || {
                    machine.dma_disabled()
                }),
            },
        });
    let caller = caller_part(
        shape.caller_waits,
        device,
        bounce,
        read,
        tasks.count(),
        shape.len,
    );
    let runs = tasks.count().min(settings.num_threads.max(1));
    Plan {
        path,
        strategy,
        task_size,
        task_size_busy,
        tasks,
        caller,
        runs,
    }
}

#[cfg(test)]
mod strategy_tests;
#[cfg(test)]
mod tests;
