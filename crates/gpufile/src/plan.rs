//! The planner: pure functions from a request to its tasks and to the data path each one takes.
//!
//! [`plan_request`] is the whole plan of one request (its path and why, its tasks, what the
//! waiting caller does); the engine runs what it returns and `gpufile explain` prints it, so
//! what explain predicts is what runs. Every task-size rule is applied there.

use std::fmt;

use crate::config::{CompatMode, Settings};
use crate::error::Error;
pub use crate::request::{Direction, Memory, Range, Ranges};
use std::sync::Arc;

/// What cuFile can do on this machine: the input of compat_mode AUTO and OFF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// cuFile works and its accelerated path exists (the text says which).
    Accelerated(String),
    /// cuFile works but can only run its own compat path (the text says why).
    CompatOnly(String),
    /// cuFile cannot be used at all (the text says why).
    Unavailable(String),
}

/// One piece of a request, run by one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// Offset in the file.
    pub file_offset: u64,
    /// Offset in the caller's buffer.
    pub buf_offset: usize,
    /// Bytes to transfer.
    pub len: usize,
}

/// A request cut into tasks of at most `task_size` bytes (KvikIO's split: every task of a range
/// is `task_size` long except possibly its last), range after range. Tasks are made on demand,
/// so a request of a billion tasks costs no memory up front.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSplit {
    ranges: Ranges,
    task_size: usize,
    /// For several ranges: the index of each range's first task (`None` for one range).
    starts: Option<Arc<[usize]>>,
    /// For a gather ([`TaskSplit::grouped`]): the index of each group's first range; a task is
    /// then a group of whole ranges, not a piece of one.
    groups: Option<Arc<[usize]>>,
    count: usize,
}

impl TaskSplit {
    /// `size` bytes at `file_offset` (at the buffer's start). `task_size` must be positive
    /// (settings and argument checks refuse 0 before any plan is made; 0 is treated as 1 here
    /// rather than dividing by zero).
    pub fn new(file_offset: u64, size: usize, task_size: usize) -> Self {
        let range = Range {
            file_offset,
            len: size,
            buf_offset: 0,
        };
        Self::over(Ranges::One(range), task_size)
    }

    /// Every range of `ranges`, each cut into tasks of at most `task_size` bytes.
    pub fn over(ranges: Ranges, task_size: usize) -> Self {
        let task_size = task_size.max(1);
        let (starts, count) = match &ranges {
            Ranges::One(r) => (None, r.len.div_ceil(task_size)),
            Ranges::Many(v) => {
                let mut next = 0usize;
                let starts: Arc<[usize]> = v
                    .iter()
                    .map(|r| {
                        let first = next;
                        next += r.len.div_ceil(task_size);
                        first
                    })
                    .collect();
                (Some(starts), next)
            }
        };
        TaskSplit {
            ranges,
            task_size,
            starts,
            groups: None,
            count,
        }
    }

    /// The ranges of `ranges` as groups of whole consecutive ranges, each of at most
    /// `max_ranges` ranges and (unless one range alone is larger) `max_bytes` bytes: one task per
    /// group, so that a worker reads a group with one queue of I/O and one completion instead of
    /// one task per range. Empty ranges are kept in their group (they move nothing).
    pub fn grouped(ranges: Ranges, max_ranges: usize, max_bytes: usize) -> Self {
        let (max_ranges, max_bytes) = (max_ranges.max(1), max_bytes.max(1));
        let list = ranges.as_slice();
        let mut starts = Vec::with_capacity(list.len().div_ceil(max_ranges));
        let (mut n, mut bytes) = (0usize, 0usize);
        for (i, r) in list.iter().enumerate() {
            if i == 0 || n == max_ranges || (r.len > 0 && bytes + r.len > max_bytes) {
                starts.push(i);
                (n, bytes) = (0, 0);
            }
            n += 1;
            bytes += r.len;
        }
        let count = starts.len();
        TaskSplit {
            ranges,
            task_size: max_bytes,
            starts: None,
            groups: Some(starts.into()),
            count,
        }
    }

    /// Whether a task is a group of ranges ([`TaskSplit::grouped`]).
    pub fn is_grouped(&self) -> bool {
        self.groups.is_some()
    }

    /// The ranges of group `i` (`i < count()`) of a grouped split; the whole range list of
    /// another.
    pub fn group(&self, i: usize) -> &[Range] {
        let list = self.ranges.as_slice();
        match &self.groups {
            Some(g) => &list[g[i]..g.get(i + 1).copied().unwrap_or(list.len())],
            None => list,
        }
    }

    /// The ranges split.
    pub fn ranges(&self) -> &Ranges {
        &self.ranges
    }

    /// Number of tasks (0 for an empty request).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Task `i` (`i < count()`).
    pub fn task(&self, i: usize) -> Task {
        if self.groups.is_some() {
            // A group as one task: where its first range starts, and all its bytes.
            let g = self.group(i);
            return Task {
                file_offset: g.first().map_or(0, |r| r.file_offset),
                buf_offset: g.first().map_or(0, |r| r.buf_offset),
                len: g.iter().map(|r| r.len).sum(),
            };
        }
        let (range, j) = match (&self.ranges, &self.starts) {
            (Ranges::Many(v), Some(starts)) => {
                // The last range starting at or before `i` (ranges of no task start where the
                // next one does, and are passed over).
                let k = starts.partition_point(|&s| s <= i) - 1;
                (v[k], i - starts[k])
            }
            (Ranges::One(r), _) => (*r, i),
            (Ranges::Many(v), None) => (v[0], i),
        };
        let at = j * self.task_size;
        Task {
            file_offset: range.file_offset + at as u64,
            buf_offset: range.buf_offset + at,
            len: self.task_size.min(range.len - at),
        }
    }

    /// The size of the tasks but the last of each range.
    pub fn task_size(&self) -> usize {
        self.task_size
    }
}

/// O_DIRECT needs file offsets, lengths and memory aligned to the logical block; 4 KiB covers
/// every common device.
pub const DIRECT_ALIGN: usize = 4096;

/// Smallest task gpufile cuts a request into when it splits below `task_size` so that every
/// worker helps with a request that would otherwise leave most of them idle (a 4 MiB read is
/// four tasks, not one).
pub const MIN_SPLIT: usize = 1 << 20;

/// The task size a request of `len` bytes runs with. A size the caller gave for this request is
/// used as given (`raw_read` is one task). The settings' `task_size` is a largest piece: a request
/// of fewer tasks than `threads` is cut into `threads` even pieces (4 KiB multiples) instead,
/// but none smaller than [`MIN_SPLIT`].
pub fn effective_task_size(len: usize, task_size: usize, threads: usize, explicit: bool) -> usize {
    let task_size = task_size.max(1);
    if explicit || len.div_ceil(task_size) >= threads {
        return task_size;
    }
    let even = len.div_ceil(threads.max(1)).next_multiple_of(DIRECT_ALIGN);
    even.max(MIN_SPLIT).min(task_size)
}

/// Smallest task of a device read on gpufile's bounce path when no other request is in flight
/// (see [`alone_task_size`]).
pub const ALONE_SPLIT: usize = 256 << 10;

/// The task size of a device read on gpufile's bounce path when it is the only request in
/// flight: a request already cut to [`MIN_SPLIT`] pieces is cut further, down to
/// [`ALONE_SPLIT`], so that every worker copies a part (a 4 MiB read: 16 pieces of 256 KiB, not
/// 4 of 1 MiB): a read alone is faster the more workers share it. With other requests in flight
/// the workers are busy already and the smaller pieces only cost, so the rule is for a request
/// alone (measurements: docs/performance.md, "Pieces of a device read alone").
pub fn alone_task_size(len: usize, task_size: usize, threads: usize) -> usize {
    if task_size != MIN_SPLIT {
        return task_size;
    }
    len.div_ceil(threads.max(1))
        .next_multiple_of(DIRECT_ALIGN)
        .clamp(ALONE_SPLIT, MIN_SPLIT)
}

/// The largest device read whose waiting caller takes a share of the work itself (on the bounce
/// path, a request whose caller waits: [`crate::Request::caller_waits`]). The caller is awake
/// already, so its share starts with no wake-up, and one worker fewer is woken; the workers it
/// waits for otherwise start one by one over tens of microseconds (docs/performance.md, "The
/// waiting caller's share"). Bounded so a caller's share stays short (its Ctrl-C is checked after it):
/// usually a 1/16 share; even if no worker comes (all busy with other requests), one thread
/// copies 64 MiB in about 10–20 ms.
pub const CALLER_SHARE_MAX: usize = 64 << 20;

/// What the thread that submits a request and waits for it at once does besides waiting
/// ([`crate::Request::caller_waits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallerPart {
    /// Nothing: the workers run every task (a request nobody waits for at once, a device request
    /// past [`CALLER_SHARE_MAX`] or on cuFile's path, a device write of several tasks).
    Wait,
    /// All of it: a request of one task (host memory, or device memory on the bounce path up to
    /// [`CALLER_SHARE_MAX`]) runs on the calling thread, and no worker is woken.
    Whole,
    /// A share: a device read of several tasks on the bounce path, up to [`CALLER_SHARE_MAX`], is
    /// run by the workers and the caller together.
    Share,
}

/// The caller's part of a request of `tasks` tasks and `len` bytes: `blocking` (the caller waits
/// at once), `device` (GPU memory), `bounce` (gpufile's bounce path), `read` (a read).
pub fn caller_part(
    blocking: bool,
    device: bool,
    bounce: bool,
    read: bool,
    tasks: usize,
    len: usize,
) -> CallerPart {
    let small_device = device && bounce && len <= CALLER_SHARE_MAX;
    match (blocking, tasks) {
        (true, 1) if !device || small_device => CallerPart::Whole,
        (true, 2..) if small_device && read => CallerPart::Share,
        _ => CallerPart::Wait,
    }
}

/// Every task of `size` bytes at `file_offset` (see [`TaskSplit`]). `size` 0 gives no task.
pub fn split(file_offset: u64, size: usize, task_size: usize) -> impl Iterator<Item = Task> {
    let s = TaskSplit::new(file_offset, size, task_size);
    (0..s.count()).map(move |i| s.task(i))
}

/// Smallest chunk of the bounce pipeline: below it, per-chunk read, copy and event costs dominate
/// (docs/performance.md, "Bounce pipeline chunks").
pub const MIN_CHUNK: usize = 4 << 20;

/// Chunk size of a task in the bounce pipeline: about a quarter of the task so reads and copies
/// overlap (small tasks overlap with the run's next task instead), at least [`MIN_CHUNK`], at most
/// the bounce buffer, a multiple of [`DIRECT_ALIGN`] (so O_DIRECT can take it).
pub fn chunk_size(task_len: usize, bounce: usize) -> usize {
    let align = DIRECT_ALIGN;
    let quarter = task_len.div_ceil(4).next_multiple_of(align);
    quarter.max(MIN_CHUNK).min(bounce).max(1)
}

/// The data path that moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Backend {
    /// gpufile's own pread/pwrite path (through pinned bounce buffers for device memory).
    #[serde(rename = "gpufile-posix")]
    GpufilePosix,
    /// cuFile, which itself runs nvidia-fs (GDS) or its own compat path; the statistics of the
    /// observe module tell which.
    #[serde(rename = "cufile")]
    Cufile,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::GpufilePosix => "gpufile-posix",
            Backend::Cufile => "cufile",
        })
    }
}

/// Why a path was chosen.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum Reason {
    /// Host buffers never go through cuFile: it would stage them through its own bounce buffers
    /// and gain nothing.
    HostBuffer,
    /// compat_mode is ON: cuFile is never used.
    CompatModeOn,
    /// The request is smaller than gds_threshold.
    BelowGdsThreshold,
    /// compat_mode is OFF: cuFile is used whatever it then does; the text says what it will do.
    CompatModeOff(String),
    /// AUTO chose cuFile: its accelerated path exists (the text says which).
    Accelerated(String),
    /// AUTO chose gpufile's path: cuFile could only run its compat path, an order of magnitude
    /// slower (the text says why).
    NotAccelerated(String),
    /// AUTO chose gpufile's path: cuFile cannot be used (the text says why).
    CufileUnavailable(String),
    /// The source or sink is not a local file (a mapping, a remote object): only gpufile's path
    /// moves its bytes, whatever compat_mode says.
    NotALocalFile,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::HostBuffer => f.write_str("host buffer: cuFile gains nothing for host memory"),
            Reason::CompatModeOn => f.write_str("compat_mode is ON"),
            Reason::BelowGdsThreshold => f.write_str("request smaller than gds_threshold"),
            Reason::CompatModeOff(what) => write!(f, "compat_mode is OFF ({what})"),
            Reason::Accelerated(why) | Reason::NotAccelerated(why) => f.write_str(why),
            Reason::CufileUnavailable(why) => write!(f, "cuFile unavailable: {why}"),
            Reason::NotALocalFile => f.write_str("not a local file: cuFile reads only those"),
        }
    }
}

/// A path decision: the backend and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IoPath {
    /// What moves the bytes.
    pub backend: Backend,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for IoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.backend, self.reason)
    }
}

/// The settings a path decision reads.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// compat_mode.
    pub compat_mode: CompatMode,
    /// gds_threshold.
    pub gds_threshold: usize,
    /// require_gds: a device request that would not run on the accelerated path is an error.
    pub require_gds: bool,
}

impl From<&crate::Settings> for Policy {
    fn from(s: &crate::Settings) -> Self {
        Policy {
            compat_mode: s.compat_mode,
            gds_threshold: s.gds_threshold,
            require_gds: s.require_gds,
        }
    }
}

/// Chooses the path for a request of `len` bytes into or out of `memory` (KvikIO's rules, with
/// AUTO honest about cuFile's compat path). `cufile` is asked only where the answer matters, so
/// host-only work never loads cuFile. An error is a decision too: OFF and `require_gds` say why
/// they cannot be honoured.
pub fn choose_path(
    memory: Memory,
    len: usize,
    policy: Policy,
    cufile: impl FnOnce() -> Availability,
) -> Result<IoPath, Error> {
    let posix = |reason| IoPath {
        backend: Backend::GpufilePosix,
        reason,
    };
    let cufile_path = |reason| IoPath {
        backend: Backend::Cufile,
        reason,
    };
    let require = |why: String| -> Result<IoPath, Error> {
        Err(Error::CufileUnavailable {
            reason: format!("require_gds is set but GPUDirect Storage cannot run: {why}"),
        })
    };
    match (memory, policy.compat_mode) {
        (Memory::Host, _) => Ok(posix(Reason::HostBuffer)),
        (Memory::Device, _) if policy.require_gds => match cufile() {
            Availability::Accelerated(why) => Ok(cufile_path(Reason::Accelerated(why))),
            Availability::CompatOnly(why) | Availability::Unavailable(why) => require(why),
        },
        (Memory::Device, CompatMode::On) => Ok(posix(Reason::CompatModeOn)),
        (Memory::Device, _) if len < policy.gds_threshold => Ok(posix(Reason::BelowGdsThreshold)),
        (Memory::Device, CompatMode::Off) => match cufile() {
            Availability::Accelerated(why) => Ok(cufile_path(Reason::CompatModeOff(format!(
                "cuFile will use its accelerated path: {why}"
            )))),
            Availability::CompatOnly(why) => Ok(cufile_path(Reason::CompatModeOff(format!(
                "cuFile can only run its compat path: {why}"
            )))),
            Availability::Unavailable(why) => Err(Error::CufileUnavailable {
                reason: format!("compat_mode is OFF but {why}"),
            }),
        },
        (Memory::Device, CompatMode::Auto) => Ok(match cufile() {
            Availability::Accelerated(why) => cufile_path(Reason::Accelerated(why)),
            Availability::CompatOnly(why) => posix(Reason::NotAccelerated(why)),
            Availability::Unavailable(why) => posix(Reason::CufileUnavailable(why)),
        }),
    }
}

/// The second half of the decision, once cuFile was chosen: `registration` is whether cuFile
/// registered the file (or why not). Under AUTO (without `require_gds`) a refusal falls back to
/// gpufile's path with the reason; under OFF and `require_gds` it is an error.
pub fn after_registration(
    path: IoPath,
    policy: Policy,
    registration: Result<(), String>,
) -> Result<IoPath, Error> {
    match registration {
        Ok(()) => Ok(path),
        Err(why) if policy.compat_mode == CompatMode::Auto && !policy.require_gds => Ok(IoPath {
            backend: Backend::GpufilePosix,
            reason: Reason::CufileUnavailable(why),
        }),
        Err(why) => Err(Error::CufileUnavailable {
            reason: format!("compat_mode is {} but {why}", policy.compat_mode),
        }),
    }
}

/// Largest range a request of many ranges gathers ([`TaskSplit::grouped`]); a request with a
/// larger range keeps one task (or more) per range, as a large read is best served by itself.
pub const GATHER_MAX_RANGE: usize = 1 << 20;

/// Most ranges in one group of a gather: one queue of I/O of this many ranges per task.
pub const GATHER_MAX_GROUP: usize = 4096;

/// Fewest ranges in a group of a gather (unless the request has fewer): a group is one task,
/// and waking a worker for a task costs about as much as reading a few hot 4 KiB ranges.
pub const GATHER_MIN_GROUP: usize = 8;

/// Groups a gather aims at per worker: several, so that a slow group does not leave the other
/// workers idle at the end, few, so that each costs its set-up once per many ranges.
pub const GATHER_GROUPS_PER_THREAD: usize = 4;

/// Whether a request of `ranges` is gathered: several ranges, none larger than
/// [`GATHER_MAX_RANGE`] nor than `max_bytes` (a group of a device read must fit one pinned
/// buffer), with no task size of its own.
pub fn gathers(ranges: &Ranges, task_size: Option<usize>, max_bytes: usize) -> bool {
    let Ranges::Many(list) = ranges else {
        return false;
    };
    let limit = GATHER_MAX_RANGE.min(max_bytes);
    task_size.is_none() && list.len() >= 2 && list.iter().all(|r| r.len <= limit)
}

/// Ranges per group of a gather of `n` ranges on `threads` workers: about
/// [`GATHER_GROUPS_PER_THREAD`] groups per worker, at least [`GATHER_MIN_GROUP`] and at most
/// [`GATHER_MAX_GROUP`] ranges each.
pub fn gather_group(n: usize, threads: usize) -> usize {
    n.div_ceil(threads.max(1) * GATHER_GROUPS_PER_THREAD)
        .clamp(GATHER_MIN_GROUP, GATHER_MAX_GROUP)
}

/// Host-to-GPU copies a gathered device read makes: one per contiguous run of the destination
/// within each group (ranges sorted by buffer offset in the group), so a gather into a packed
/// output (rows one after the other) makes one copy per group.
pub fn gather_copies(split: &TaskSplit) -> usize {
    (0..split.count())
        .map(|i| contiguous_runs(split.group(i)))
        .sum()
}

/// Contiguous runs of the destination covered by `ranges` (in buffer order; empty ranges count
/// for nothing).
pub fn contiguous_runs(ranges: &[Range]) -> usize {
    let mut spans: Vec<(usize, usize)> = ranges
        .iter()
        .filter(|r| r.len > 0)
        .map(|r| (r.buf_offset, r.buf_offset + r.len))
        .collect();
    if !spans.windows(2).all(|w| w[0] <= w[1]) {
        spans.sort_unstable();
    }
    let mut runs = 0;
    let mut end = None;
    for (start, stop) in spans {
        if end != Some(start) {
            runs += 1;
        }
        end = Some(stop);
    }
    runs
}

/// How a gather moves bytes between host memory (the caller's, or a pinned staging buffer) and
/// a local file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum HostIoBackend {
    /// io_uring: a group's ranges are queued and submitted together, many system calls in one.
    #[serde(rename = "io_uring")]
    IoUring,
    /// One `pread`/`pwrite` per range.
    #[serde(rename = "pread")]
    Pread,
}

impl fmt::Display for HostIoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostIoBackend::IoUring => "io_uring",
            HostIoBackend::Pread => "pread",
        })
    }
}

/// Why a gather's host I/O takes its backend.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum HostIoReason {
    /// io_uring works here (the text says what the probe found).
    Available(String),
    /// The `io_uring` setting is off (`GPUFILE_IO_URING=0`).
    SettingOff,
    /// The kernel has no io_uring (`io_uring_setup` is ENOSYS).
    Missing(String),
    /// The kernel or a seccomp policy refuses io_uring (EPERM, `kernel.io_uring_disabled`).
    Refused(String),
    /// The kernel's io_uring lacks what a gather needs (IORING_OP_READ/WRITE: Linux 5.6).
    OldKernel(String),
    /// The endpoint is not a local file (a mapping, a remote object): it reads and writes
    /// through its own calls.
    NotALocalFile,
    /// Fault injection is on: every transfer goes through the `pread`/`pwrite` seam it hooks.
    FaultInjection,
}

impl fmt::Display for HostIoReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostIoReason::Available(what) => write!(f, "io_uring available ({what})"),
            HostIoReason::SettingOff => f.write_str("io_uring is off (setting io_uring)"),
            HostIoReason::Missing(why) => write!(f, "io_uring missing: {why}"),
            HostIoReason::Refused(why) => write!(f, "io_uring refused: {why}"),
            HostIoReason::OldKernel(why) => write!(f, "io_uring too old: {why}"),
            HostIoReason::NotALocalFile => f.write_str("not a local file"),
            HostIoReason::FaultInjection => f.write_str("fault injection is on"),
        }
    }
}

/// A gather's host I/O decision: the backend and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HostIo {
    /// What moves the bytes.
    pub backend: HostIoBackend,
    /// Why.
    pub reason: HostIoReason,
}

impl fmt::Display for HostIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.backend, self.reason)
    }
}

/// Chooses a gather's host I/O: io_uring where the setting allows it, the endpoint is a local
/// file and `probe` (what the kernel says, asked only where it matters) finds it usable;
/// `pread`/`pwrite` otherwise, with the reason.
pub fn choose_host_io(
    setting: bool,
    local_file: bool,
    probe: impl FnOnce() -> std::result::Result<String, HostIoReason>,
) -> HostIo {
    let pread = |reason| HostIo {
        backend: HostIoBackend::Pread,
        reason,
    };
    match (setting, local_file) {
        (false, _) => pread(HostIoReason::SettingOff),
        (true, false) => pread(HostIoReason::NotALocalFile),
        (true, true) => match probe() {
            Ok(what) => HostIo {
                backend: HostIoBackend::IoUring,
                reason: HostIoReason::Available(what),
            },
            Err(why) => pread(why),
        },
    }
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
    /// The caller waits for the request at once (see [`CallerPart`]).
    pub caller_waits: bool,
    /// No other request is in flight (see [`alone_task_size`]).
    pub alone: bool,
    /// The endpoint is a local file: cuFile can read and write it, and the split of a device
    /// read alone applies (a remote source pays one request per task, so it keeps its tasks).
    pub local_file: bool,
    /// Each task is a request of its own to a server (a remote object's ranged GET,
    /// [`crate::source::Source::request_per_task`]): the settings' `task_size` is not cut for
    /// idle workers.
    pub request_per_task: bool,
}

/// How one request runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The path and why, or why the settings cannot be honoured (compat_mode OFF or
    /// `require_gds` without cuFile).
    pub path: Result<IoPath, Error>,
    /// The task size the request runs with.
    pub task_size: usize,
    /// The task size it would run with were other requests in flight (equal to `task_size`
    /// unless the split of a request alone applies).
    pub task_size_busy: usize,
    /// The tasks.
    pub tasks: TaskSplit,
    /// What the waiting caller does.
    pub caller: CallerPart,
}

/// Plans `shape` under `settings`. `cufile` says what cuFile can do and `registration` whether
/// cuFile registers the file (or why not); each is asked only where the answer matters, so host
/// work never loads cuFile and a file is registered only for a request that takes cuFile's path.
pub fn plan_request(
    shape: &Shape<'_>,
    settings: &Settings,
    cufile: impl FnOnce() -> Availability,
    registration: impl FnOnce() -> Result<(), String>,
) -> Plan {
    let policy = Policy::from(settings);
    let device = shape.memory == Memory::Device;
    // A group of a device gather goes through one pinned buffer.
    let group_bytes = match device {
        true => settings.bounce_buffer_size,
        false => settings.task_size,
    };
    let gather = gathers(shape.ranges, shape.task_size, group_bytes);
    // A gather moves each range by itself: cuFile would too, so gds_threshold is a range's.
    let path_len = match gather {
        true => shape
            .ranges
            .as_slice()
            .iter()
            .map(|r| r.len)
            .max()
            .unwrap_or(0),
        false => shape.len,
    };
    let path = match (shape.memory, shape.local_file) {
        (Memory::Device, false) => Ok(IoPath {
            backend: Backend::GpufilePosix,
            reason: Reason::NotALocalFile,
        }),
        _ => choose_path(shape.memory, path_len, policy, cufile).and_then(|p| match p.backend {
            Backend::Cufile => after_registration(p, policy, registration()),
            Backend::GpufilePosix => Ok(p),
        }),
    };
    let task_size_busy = effective_task_size(
        shape.len,
        shape.task_size.unwrap_or(settings.task_size),
        settings.num_threads,
        shape.task_size.is_some() || shape.request_per_task,
    );
    let bounce = matches!(&path, Ok(p) if p.backend == Backend::GpufilePosix);
    let read = shape.direction == Direction::Read;
    // Device writes of many ranges keep a task per range (each copied out by itself).
    if gather && bounce && (read || !device) {
        let n = shape.ranges.as_slice().len();
        let tasks = TaskSplit::grouped(
            shape.ranges.clone(),
            gather_group(n, settings.num_threads),
            group_bytes,
        );
        let caller = caller_part(
            shape.caller_waits,
            device,
            bounce,
            read,
            tasks.count(),
            shape.len,
        );
        return Plan {
            path,
            task_size: group_bytes,
            task_size_busy: group_bytes,
            tasks,
            caller,
        };
    }
    let alone_split = bounce && device && read && shape.local_file && shape.task_size.is_none();
    let task_size = match alone_split && shape.alone {
        true => alone_task_size(shape.len, task_size_busy, settings.num_threads),
        false => task_size_busy,
    };
    let task_size_busy = match alone_split {
        true => task_size_busy,
        false => task_size,
    };
    let tasks = TaskSplit::over(shape.ranges.clone(), task_size);
    let caller = caller_part(
        shape.caller_waits,
        device,
        bounce,
        read,
        tasks.count(),
        shape.len,
    );
    Plan {
        path,
        task_size,
        task_size_busy,
        tasks,
        caller,
    }
}

/// Whether a batch's requests run as `task_size` tasks, none split further: a request is cut
/// below `task_size` only so that all workers help with it, and a batch that holds at least a
/// worker's worth of `task_size` per worker already keeps them all busy (one run per file
/// instead of several: fewer runs' set-up and stream waits; docs/performance.md, "Batches").
/// Counted in bytes, so that small requests do not pass for whole tasks (15 one-byte reads and
/// a 4 MiB one: the 4 MiB one is still cut for the idle workers). `requests`: each request's
/// length and own task size.
pub fn batch_keeps_tasks_whole(
    requests: impl Iterator<Item = (usize, Option<usize>)>,
    settings: &Settings,
) -> bool {
    let task_size = settings.task_size.max(1);
    let want = (settings.num_threads as u128) * task_size as u128;
    let mut bytes = 0u128;
    for (len, own) in requests {
        // A request with its own task size is never cut: it counts as its whole tasks.
        let len = len as u128;
        bytes += match own {
            Some(t) => len.div_ceil(t.max(1) as u128) * task_size as u128,
            None => len,
        };
        if bytes >= want {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests;
