//! `gpufile explain`: how a request will be split and which path each piece takes, from the
//! same planner that executes reads, plus the work units cuFile is expected to make of each
//! request under cufile.json's `execution.*` settings.
//!
//! How to use: build a [`Request`], call [`explain`], print [`Explanation::render`]; with a file,
//! [`run`] performs the read under the same settings and returns what was observed, for a
//! side-by-side comparison. [`explain_and_run`] does both, as the CLI and Python present them.
//! Nothing here changes the process defaults: the run carries its own settings.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpufile::config::{CompatMode, Settings};
use gpufile::cufile;
use gpufile::error::{Error, Result};
use gpufile::observe::{self, Report};
use gpufile::plan::{self, Availability, Backend, IoPath, Memory};
use gpufile::{Buffer, Engine, FileHandle};
use serde_json::{json, Value};

use crate::{schema, units};

/// What cuFile is assumed to be able to do (`Probe` asks this machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CufileAssumption {
    /// Probe this machine.
    Probe,
    /// As if nvidia-fs were loaded.
    Nvfs,
    /// As if cuFile could only run its compat path.
    Compat,
    /// As if cuFile could not be used.
    Unavailable,
}

impl std::str::FromStr for CufileAssumption {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "probe" => Ok(Self::Probe),
            "nvfs" | "gds" => Ok(Self::Nvfs),
            "compat" | "posix" => Ok(Self::Compat),
            "none" | "unavailable" => Ok(Self::Unavailable),
            _ => Err(Error::InvalidArgument(format!(
                "cufile assumption {s:?}: expected probe, nvfs, compat or none"
            ))),
        }
    }
}

/// A request to explain; `None` fields take the current settings.
#[derive(Clone, Debug)]
pub struct Request {
    /// Bytes.
    pub size: usize,
    /// File offset.
    pub file_offset: u64,
    /// Host or device memory.
    pub memory: Memory,
    /// The GPU of device memory (its CUDA ordinal).
    pub device: i32,
    /// task_size override.
    pub task_size: Option<usize>,
    /// num_threads override.
    pub num_threads: Option<usize>,
    /// compat_mode override.
    pub compat_mode: Option<CompatMode>,
    /// gds_threshold override.
    pub gds_threshold: Option<usize>,
    /// What cuFile can do.
    pub cufile: CufileAssumption,
    /// cufile.json to read (default: `CUFILE_ENV_PATH_JSON` or /etc/cufile.json).
    pub cufile_json: Option<PathBuf>,
    /// Whether the destination buffer is registered with cuFile (`memory_register`).
    pub registered_buffer: bool,
}

/// cuFile's `execution.*` settings that decide how it splits one request.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CufileExecution {
    /// `execution.parallel_io`.
    pub parallel_io: bool,
    /// `execution.max_io_threads`.
    pub max_io_threads: u64,
    /// `execution.min_io_threshold_size_kb`.
    pub min_io_threshold_size_kb: u64,
    /// `execution.max_request_parallelism`.
    pub max_request_parallelism: u64,
    /// Where the values came from.
    pub source: String,
}

/// cuFile's documented defaults for the `execution.*` keys gpufile predicts with, as cufile.json
/// would spell them (cuFile uses them where cufile.json or a key is missing).
pub const CUFILE_EXECUTION_DEFAULTS: [(&str, &str); 4] = [
    ("execution.parallel_io", "true"),
    ("execution.max_io_threads", "4"),
    ("execution.min_io_threshold_size_kb", "8192"),
    ("execution.max_request_parallelism", "4"),
];

impl CufileExecution {
    /// Reads `path`; missing keys (or a missing file) take cuFile's documented defaults
    /// ([`CUFILE_EXECUTION_DEFAULTS`]).
    pub fn load(path: &Path) -> Self {
        let mut e = CufileExecution {
            parallel_io: true,
            max_io_threads: 4,
            min_io_threshold_size_kb: 8192,
            max_request_parallelism: 4,
            source: format!(
                "{} (cuFile defaults: the file does not exist)",
                path.display()
            ),
        };
        let Ok(values) = cufile::read_config(path) else {
            return e;
        };
        e.source = path.display().to_string();
        for (k, v) in values {
            match k.as_str() {
                "execution.parallel_io" => e.parallel_io = v == "true",
                "execution.max_io_threads" => e.max_io_threads = v.parse().unwrap_or(4),
                "execution.min_io_threshold_size_kb" => {
                    e.min_io_threshold_size_kb = v.parse().unwrap_or(8192)
                }
                "execution.max_request_parallelism" => {
                    e.max_request_parallelism = v.parse().unwrap_or(4)
                }
                _ => {}
            }
        }
        e
    }

    /// The pieces cuFile makes of one request of `len` bytes: one piece up to
    /// min_io_threshold_size_kb (or without parallel_io), else at most max_request_parallelism
    /// pieces of at least that threshold (the spec: 1 GiB → 4 × 256 MiB; 16 MiB → 2 × 8 MiB).
    pub fn pieces(&self, len: usize) -> Vec<usize> {
        let threshold = (self.min_io_threshold_size_kb as usize)
            .saturating_mul(1024)
            .max(1);
        if !self.parallel_io || len <= threshold || self.max_request_parallelism <= 1 {
            return vec![len];
        }
        let n = len
            .div_ceil(threshold)
            .min(self.max_request_parallelism as usize)
            .max(1);
        let piece = len.div_ceil(n);
        (0..len)
            .step_by(piece)
            .map(|o| piece.min(len - o))
            .collect()
    }
}

/// Runs of equal-sized items: `[(count, size)]`.
fn runs(sizes: impl Iterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for s in sizes {
        match out.last_mut() {
            Some((n, size)) if *size == s => *n += 1,
            _ => out.push((1, s)),
        }
    }
    out
}

/// The prediction.
#[derive(Clone, Debug)]
pub struct Explanation {
    /// Bytes.
    pub size: usize,
    /// File offset.
    pub file_offset: u64,
    /// Host or device.
    pub memory: Memory,
    /// The GPU of device memory.
    pub device: i32,
    /// Effective compat_mode.
    pub compat_mode: CompatMode,
    /// Effective task_size.
    pub task_size: usize,
    /// Effective num_threads.
    pub num_threads: usize,
    /// Effective gds_threshold.
    pub gds_threshold: usize,
    /// The path, or why the request would fail.
    pub path: std::result::Result<IoPath, String>,
    /// Tasks as runs of equal size: `[(count, bytes)]`.
    pub tasks: Vec<(usize, usize)>,
    /// Number of tasks.
    pub task_count: usize,
    /// On gpufile's device path: the pipeline chunk of each task (bytes).
    pub bounce_chunk: Option<usize>,
    /// On the cuFile path: cuFile requests (one per task).
    pub cufile_requests: Option<usize>,
    /// On the cuFile path: the pieces of each request as runs: `[(requests, [piece sizes])]`.
    pub cufile_pieces: Vec<(usize, Vec<usize>)>,
    /// On the cuFile path: total work units cuFile schedules.
    pub cufile_work_units: Option<usize>,
    /// cuFile's execution settings used.
    pub cufile_execution: Option<CufileExecution>,
    /// How a gather of many small ranges of a local file would move its bytes under these
    /// settings: io_uring or `pread`, and why ([`gpufile::engine::host_io`]).
    pub gather_host_io: gpufile::HostIo,
    /// Notes (assumptions, caveats).
    pub notes: Vec<String>,
}

impl Request {
    /// The settings the request runs under: `defaults` with the request's overrides.
    pub fn settings(&self, defaults: &Settings) -> Result<Settings> {
        let mut s = defaults.clone();
        if let Some(t) = self.task_size {
            s.task_size = t;
        }
        if let Some(n) = self.num_threads {
            s.num_threads = n;
        }
        if let Some(m) = self.compat_mode {
            s.compat_mode = m;
        }
        if let Some(g) = self.gds_threshold {
            s.gds_threshold = g;
        }
        if s.task_size == 0 {
            return Err(Error::InvalidArgument(
                "task_size must be at least 1 byte".into(),
            ));
        }
        if s.num_threads == 0 || s.num_threads > gpufile::config::MAX_THREADS {
            return Err(Error::InvalidArgument(format!(
                "num_threads must be between 1 and {}",
                gpufile::config::MAX_THREADS
            )));
        }
        Ok(s)
    }
}

/// Predicts how `req` runs under the process defaults (and its own overrides).
pub fn explain(req: &Request) -> Result<Explanation> {
    explain_with(req, &Engine::global()?.settings(), None)
}

/// Predicts how `req` runs under `defaults`; with `file`, cuFile's registration of that file is
/// part of the prediction, as it is of the request.
pub fn explain_with(
    req: &Request,
    defaults: &Settings,
    file: Option<&FileHandle>,
) -> Result<Explanation> {
    let s = req.settings(defaults)?;
    let (num_threads, compat_mode, gds_threshold) = (s.num_threads, s.compat_mode, s.gds_threshold);
    let mut notes = Vec::new();
    let availability = || match req.cufile {
        CufileAssumption::Probe => cufile::availability(),
        CufileAssumption::Nvfs => Availability::Accelerated("assumed: nvidia-fs loaded".into()),
        CufileAssumption::Compat => {
            Availability::CompatOnly("assumed: nvidia-fs not loaded".into())
        }
        CufileAssumption::Unavailable => {
            Availability::Unavailable("assumed: cuFile cannot be used".into())
        }
    };
    // The engine's own plan of this request (a read alone, as predicted): its path, with the
    // registration of `file` where cuFile is chosen and probed, and its tasks.
    let ranges = gpufile::Ranges::One(gpufile::Range {
        file_offset: req.file_offset,
        len: req.size,
        buf_offset: 0,
    });
    let shape = plan::Shape {
        direction: gpufile::Direction::Read,
        memory: req.memory,
        ranges: &ranges,
        len: req.size,
        task_size: req.task_size,
        caller_waits: false,
        alone: true,
        local_file: true,
        request_per_task: false,
    };
    let planned = plan::plan_request(&shape, &s, availability, || match (file, req.cufile) {
        (Some(f), CufileAssumption::Probe) => f.cufile_registration().map_err(|e| e.to_string()),
        _ => Ok(()),
    });
    let path = planned.path.map_err(|e| e.to_string());
    let task_size = planned.task_size;
    if task_size != planned.task_size_busy {
        notes.push(format!(
            "a read alone is cut into {} pieces so every worker helps ({} pieces with other \
             requests in flight)",
            units::size(task_size as u64),
            units::size(planned.task_size_busy as u64)
        ));
    }
    let split = planned.tasks;
    let task_count = split.count();
    // Runs of equal tasks, counted without listing them (a billion tasks cost nothing here).
    let task_runs = match task_count {
        0 => Vec::new(),
        n => {
            let last = split.task(n - 1).len;
            match (n, last == task_size) {
                (_, true) => vec![(n, task_size)],
                (1, false) => vec![(1, last)],
                (n, false) => vec![(n - 1, task_size), (1, last)],
            }
        }
    };
    let (mut bounce_chunk, mut cufile_requests, mut cufile_pieces, mut work, mut exec) =
        (None, None, Vec::new(), None, None);
    match &path {
        Ok(p) if p.backend == Backend::Cufile => {
            let e =
                CufileExecution::load(&req.cufile_json.clone().unwrap_or_else(cufile::config_path));
            cufile_requests = Some(task_count);
            let mut total = 0;
            for (count, len) in &task_runs {
                let pieces = e.pieces(*len);
                total += count * pieces.len();
                cufile_pieces.push((*count, pieces));
            }
            work = Some(total);
            notes.push(if req.registered_buffer {
                "registered buffer: cuFile's scheduling of registered buffers is predicted with \
                 the same rule as unregistered ones"
                    .to_owned()
            } else {
                "unregistered buffer: cuFile stages it through its own buffers and splits by \
                 execution.* (pieces are scheduled work units, not separate storage transfers)"
                    .to_owned()
            });
            exec = Some(e);
        }
        Ok(_) if req.memory == Memory::Device => {
            bounce_chunk = Some(plan::chunk_size(
                task_size.min(req.size.max(1)),
                s.bounce_buffer_size,
            ));
            notes.push(dma_note(&s, req.size));
        }
        _ => {}
    }
    if task_count > num_threads {
        notes.push(format!("{task_count} tasks over {num_threads} workers"));
    }
    Ok(Explanation {
        gather_host_io: gpufile::engine::host_io(&s, true),
        size: req.size,
        file_offset: req.file_offset,
        memory: req.memory,
        device: req.device,
        compat_mode,
        task_size,
        num_threads,
        gds_threshold,
        path,
        task_count,
        tasks: task_runs,
        bounce_chunk,
        cufile_requests,
        cufile_pieces,
        cufile_work_units: work,
        cufile_execution: exec,
        notes,
    })
}

/// What page-cache DMA does for a device read of `size` bytes under `s` (see
/// `gpufile::exec::dma`).
fn dma_note(s: &Settings, size: usize) -> String {
    use gpufile::exec::dma::{GRANULE, MIN_REQUEST};
    if s.dma_cache_size == 0 {
        "page-cache DMA off (dma_cache_size 0): every chunk goes through the bounce buffers".into()
    } else if s.auto_direct_io_read {
        "page-cache DMA off: auto_direct_io_read asks for O_DIRECT reads".into()
    } else if size < MIN_REQUEST {
        format!("page-cache DMA: not for reads under {}", human(MIN_REQUEST))
    } else {
        format!(
            "page-cache DMA on (dma_cache_size {}): where this file was read before and a \
             {} granule is all in the page cache, the GPU copies it straight from there \
             (registered once, kept); a first read of a file version bounces",
            human(s.dma_cache_size),
            human(GRANULE)
        )
    }
}

fn human(n: usize) -> String {
    units::size(n as u64)
}

fn run_list(runs: &[(usize, usize)]) -> String {
    runs.iter()
        .map(|(n, s)| format!("{n} × {}", human(*s)))
        .collect::<Vec<_>>()
        .join(" + ")
}

impl Explanation {
    /// The prediction as plain data (docs/json.md, `explain` → `prediction`).
    pub fn to_json(&self) -> Value {
        let cufile = match (self.cufile_requests, &self.cufile_execution) {
            (Some(requests), Some(e)) => json!({
                "requests": requests,
                "work_units": self.cufile_work_units,
                "pieces": self.cufile_pieces.iter().map(|(n, pieces)| json!({
                    "requests": n, "piece_bytes": pieces,
                })).collect::<Vec<_>>(),
                "execution": e,
            }),
            _ => Value::Null,
        };
        let mut v = json!({
            "request": {
                "size": self.size,
                "file_offset": self.file_offset,
                "memory": self.memory,
                "device": (self.memory == Memory::Device).then_some(self.device),
            },
            "settings": {
                "compat_mode": self.compat_mode.name(),
                "task_size": self.task_size,
                "num_threads": self.num_threads,
                "gds_threshold": self.gds_threshold,
            },
            "tasks": {
                "count": self.task_count,
                "runs": self.tasks.iter().map(|(n, b)| json!({"count": n, "bytes": b}))
                    .collect::<Vec<_>>(),
            },
            "bounce_chunk": self.bounce_chunk,
            "gather_host_io": {
                "backend": self.gather_host_io.backend,
                "reason": self.gather_host_io.reason.to_string(),
            },
            "cufile": cufile,
            "notes": self.notes,
        });
        if let (Value::Object(m), Value::Object(d)) = (&mut v, schema::decision(&self.path)) {
            m.extend(d);
        }
        v
    }

    /// The explanation for people.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mem = match self.memory {
            Memory::Host => "host memory".to_owned(),
            Memory::Device => format!("the memory of GPU {}", self.device),
        };
        let _ = writeln!(
            s,
            "request     {} ({} bytes) at offset {} into {mem}",
            human(self.size),
            self.size,
            human(self.file_offset as usize)
        );
        let _ = writeln!(
            s,
            "settings    compat_mode {}, task_size {}, num_threads {}, gds_threshold {}",
            self.compat_mode,
            human(self.task_size),
            self.num_threads,
            human(self.gds_threshold)
        );
        match &self.path {
            Ok(p) => {
                let _ = writeln!(s, "path        {} — {}", p.backend, p.reason);
            }
            Err(e) => {
                let _ = writeln!(s, "path        none: the request would fail: {e}");
            }
        }
        let _ = writeln!(
            s,
            "tasks       {} = {}",
            self.task_count,
            run_list(&self.tasks)
        );
        if let Some(chunk) = self.bounce_chunk {
            let _ = writeln!(
                s,
                "pipeline    each task: pread into pinned bounce buffers in chunks of {}, copied to \
                 the GPU while the next chunk is read",
                human(chunk)
            );
        }
        if let (Some(req), Some(e)) = (self.cufile_requests, &self.cufile_execution) {
            let _ = writeln!(s, "cuFile      {req} requests (one per task)");
            let _ = writeln!(
                s,
                "cufile.json {}: parallel_io {}, max_io_threads {}, min_io_threshold_size_kb {}, \
                 max_request_parallelism {}",
                e.source,
                e.parallel_io,
                e.max_io_threads,
                e.min_io_threshold_size_kb,
                e.max_request_parallelism
            );
            for (count, pieces) in &self.cufile_pieces {
                let size: usize = pieces.iter().sum();
                let why = if pieces.len() == 1 {
                    format!(
                        "not above min_io_threshold_size_kb ({})",
                        human(e.min_io_threshold_size_kb as usize * 1024)
                    )
                } else {
                    format!(
                        "split by max_request_parallelism {} / min_io_threshold",
                        e.max_request_parallelism
                    )
                };
                let _ = writeln!(
                    s,
                    "  {count} request(s) of {}: {} piece(s) = {} ({why})",
                    human(size),
                    pieces.len(),
                    run_list(&runs(pieces.iter().copied()))
                );
            }
            if let Some(w) = self.cufile_work_units {
                let _ = writeln!(
                    s,
                    "work units  {w} scheduled on cuFile's {} I/O threads",
                    e.max_io_threads
                );
            }
        }
        let _ = writeln!(
            s,
            "gathers     many small ranges (read_ranges, read_rows): {}",
            self.gather_host_io
        );
        for n in &self.notes {
            let _ = writeln!(s, "note        {n}");
        }
        s
    }
}

/// Performs the explained read of `file` (device memory where the request says so) under the
/// request's settings, and returns what was observed. The range is checked against the file
/// before any memory is allocated.
pub fn run(req: &Request, file: &Path) -> Result<Report> {
    run_with(
        req,
        &Engine::global()?.settings(),
        &FileHandle::open(file, "r")?,
    )
}

fn run_with(req: &Request, defaults: &Settings, h: &FileHandle) -> Result<Report> {
    let settings = req.settings(defaults)?;
    let file_size = h.size()?;
    if req.file_offset.saturating_add(req.size as u64) > file_size {
        return Err(Error::UnexpectedEof {
            path: h.path().to_owned(),
            offset: req.file_offset,
            len: req.size,
            file_size,
        });
    }
    let req_at = |buffer| gpufile::Request::read(buffer, req.file_offset);
    let obs = observe::begin();
    let r = match req.memory {
        Memory::Host => {
            let mut buf = vec![0u8; req.size];
            // SAFETY: `buf` outlives the wait.
            unsafe { submit(h, req_at(Buffer::host(&mut buf)), &settings) }.and_then(|f| f.wait())
        }
        Memory::Device => {
            let buf = gpufile::cuda::DeviceBuffer::new(req.size, req.device)?;
            let buffer = Buffer::Device {
                addr: buf.addr(),
                len: req.size,
            };
            // SAFETY: `buf` outlives the wait.
            unsafe { submit(h, req_at(buffer), &settings) }.and_then(|f| f.wait())
        }
    };
    let report = observe::end(obs);
    r.map(|_| report)
}

/// Starts `req` on `h` on the process engine under `settings`.
///
/// # Safety
/// As for [`Engine::submit`].
unsafe fn submit(
    h: &FileHandle,
    req: gpufile::Request,
    settings: &Settings,
) -> Result<gpufile::IoFuture> {
    // SAFETY: the caller's contract.
    unsafe { Engine::global()?.submit(&h.endpoint(req.direction), req, settings) }
}

/// A prediction and, where a run was asked for, what was observed.
pub struct Outcome {
    /// The file explained (and read with `run`).
    pub file: Option<PathBuf>,
    /// The prediction.
    pub explanation: Explanation,
    /// What ran.
    pub observed: Option<Report>,
    /// How rates print in [`Outcome::render`].
    pub units: units::Units,
}

impl Outcome {
    /// For people: the prediction, then prediction and observation side by side.
    pub fn render(&self) -> String {
        let mut text = self.explanation.render();
        if let Some(o) = &self.observed {
            text.push('\n');
            text.push_str(&render_comparison(&self.explanation, o, self.units));
        }
        text
    }

    /// For programs: `gpufile explain --json` and Python's `explain().as_dict()`
    /// (docs/json.md).
    pub fn to_json(&self) -> Value {
        let observed = self.observed.as_ref().map(|r| {
            let mut o = schema::observation(r);
            o["throughput_gb_per_s"] = json!(schema::throughput(r));
            o
        });
        schema::envelope(
            "explain",
            json!({
                "file": self.file,
                "prediction": self.explanation.to_json(),
                "observed": observed,
            }),
        )
    }
}

/// Explains `req` under the process defaults and, with `run`, reads `file` the same way: the
/// one orchestration the CLI and Python share.
pub fn explain_and_run(req: &Request, file: Option<&Path>, run: bool) -> Result<Outcome> {
    let defaults = Engine::global()?.settings();
    if run && file.is_none() {
        return Err(Error::InvalidArgument("run needs a file".into()));
    }
    let handle = file.map(|f| FileHandle::open(f, "r")).transpose()?;
    let explanation = explain_with(req, &defaults, handle.as_ref())?;
    let observed = match (&handle, run) {
        (Some(h), true) => Some(run_with(req, &defaults, h)?),
        _ => None,
    };
    Ok(Outcome {
        file: file.map(Path::to_path_buf),
        explanation,
        observed,
        units: units::Units::default(),
    })
}

/// The memory a read goes to where the user named none: GPU 0 where CUDA has a device, else host
/// memory with the reason (the CLI's `read`, `load` and `explain --run`, Python's `explain`).
pub fn default_memory() -> (Memory, Option<String>) {
    match gpufile::cuda::device_count() {
        Ok(0) => (Memory::Host, Some("no CUDA device".into())),
        Ok(_) => (Memory::Device, None),
        Err(e) => (Memory::Host, Some(e.to_string())),
    }
}

/// The note an explanation carries when a run falls back to host memory.
pub fn host_fallback_note(why: &str) -> String {
    format!("host memory: {why} (a read into GPU memory needs one; --host to choose it)")
}

/// Prediction and observation side by side.
pub fn render_comparison(e: &Explanation, observed: &Report, units: units::Units) -> String {
    let mut s = String::new();
    let predicted_path = e
        .path
        .as_ref()
        .map(|p| p.backend.to_string())
        .unwrap_or_else(|_| "error".into());
    let observed_path = schema::observed_path(observed).unwrap_or_else(|| "none".into());
    let totals = if observed.cufile.ops > 0 {
        observed.cufile
    } else {
        observed.gpufile_posix
    };
    let _ = writeln!(s, "{:<18} {:<22} observed", "", "predicted");
    let _ = writeln!(s, "{:<18} {:<22} {}", "path", predicted_path, observed_path);
    let _ = writeln!(s, "{:<18} {:<22} {}", "tasks", e.task_count, totals.tasks);
    let _ = writeln!(
        s,
        "{:<18} {:<22} {}",
        "bytes",
        human(e.size),
        human(totals.bytes as usize)
    );
    if let Some(req) = e.cufile_requests {
        let seen = observed
            .cufile_stats
            .map(|c| {
                format!(
                    "n={} (nvfs={}, posix={})",
                    c.n_reads, c.nvfs_reads, c.posix_reads
                )
            })
            .unwrap_or_else(|| observed.cufile_stats_note.clone().unwrap_or_default());
        let _ = writeln!(s, "{:<18} {:<22} {}", "cuFile requests", req, seen);
    }
    if observed.gpufile_posix.dma_bytes > 0 {
        let _ = writeln!(
            s,
            "{:<18} {:<22} {}",
            "by page-cache DMA",
            "",
            human(observed.gpufile_posix.dma_bytes as usize)
        );
    }
    let (bytes, seconds) = schema::moved(observed);
    let _ = writeln!(
        s,
        "{:<18} {:<22} {}",
        "throughput",
        "",
        units::rate(bytes, seconds, units)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec_exec() -> CufileExecution {
        CufileExecution {
            parallel_io: true,
            max_io_threads: 4,
            min_io_threshold_size_kb: 8192,
            max_request_parallelism: 4,
            source: "test".into(),
        }
    }

    fn req(size: usize, task: usize) -> Request {
        Request {
            size,
            file_offset: 0,
            memory: Memory::Device,
            device: 0,
            task_size: Some(task),
            num_threads: Some(4),
            compat_mode: Some(CompatMode::Off),
            gds_threshold: Some(16 << 10),
            cufile: CufileAssumption::Nvfs,
            cufile_json: Some(PathBuf::from("/nonexistent/cufile.json")),
            registered_buffer: false,
        }
    }

    #[test]
    fn the_specs_three_examples() {
        let e = spec_exec();
        assert_eq!(e.pieces(4 << 20), vec![4 << 20]);
        assert_eq!(e.pieces(1 << 30), vec![256 << 20; 4]);
        assert_eq!(e.pieces(16 << 20), vec![8 << 20; 2]);

        let x = explain(&req(1 << 30, 4 << 20)).unwrap();
        assert_eq!(x.cufile_requests, Some(256));
        assert_eq!(x.cufile_work_units, Some(256));
        assert_eq!(x.cufile_pieces, vec![(256, vec![4 << 20])]);
        let x = explain(&req(1 << 30, 1 << 30)).unwrap();
        assert_eq!(x.cufile_requests, Some(1));
        assert_eq!(x.cufile_pieces, vec![(1, vec![256 << 20; 4])]);
        let x = explain(&req(16 << 20, 16 << 20)).unwrap();
        assert_eq!(x.cufile_pieces, vec![(1, vec![8 << 20; 2])]);
        assert!(x.render().contains("2 piece(s)"), "{}", x.render());
    }

    #[test]
    fn posix_paths_and_failures_are_explained() {
        let mut r = req(1 << 20, 4 << 20);
        r.compat_mode = Some(CompatMode::On);
        let x = explain(&r).unwrap();
        assert_eq!(x.path.as_ref().unwrap().backend, Backend::GpufilePosix);
        assert!(x.bounce_chunk.is_some() && x.cufile_requests.is_none());
        r.compat_mode = Some(CompatMode::Off);
        r.cufile = CufileAssumption::Unavailable;
        let x = explain(&r).unwrap();
        assert!(x.path.is_err());
        assert!(x.render().contains("would fail"));
    }

    #[test]
    fn a_device_read_alone_on_the_posix_path_is_predicted_in_smaller_pieces() {
        let mut r = req(4 << 20, 4 << 20);
        r.compat_mode = Some(CompatMode::On);
        r.task_size = None;
        r.num_threads = Some(16);
        let x = explain(&r).unwrap();
        assert_eq!((x.task_size, x.task_count), (256 << 10, 16));
        assert!(
            x.notes
                .iter()
                .any(|n| n.contains("a read alone is cut into 256 KiB pieces")
                    && n.contains("1 MiB pieces with other requests in flight")),
            "{:?}",
            x.notes
        );
        r.memory = Memory::Host;
        assert_eq!(
            explain(&r).unwrap().task_count,
            4,
            "host memory: 1 MiB pieces"
        );
        r.memory = Memory::Device;
        r.task_size = Some(4 << 20);
        assert_eq!(
            explain(&r).unwrap().task_count,
            1,
            "a task size given: as given"
        );
        r.task_size = None;
        r.compat_mode = Some(CompatMode::Off);
        r.cufile = CufileAssumption::Nvfs;
        assert_eq!(explain(&r).unwrap().task_count, 4, "cuFile: 1 MiB pieces");
    }

    #[test]
    fn page_cache_dma_is_explained_on_the_device_posix_path() {
        let mut r = req(64 << 20, 4 << 20);
        r.compat_mode = Some(CompatMode::On);
        let mut s = Settings {
            dma_cache_size: 1 << 30,
            ..Settings::default()
        };
        let note = |s: &Settings, r: &Request| {
            let x = explain_with(r, s, None).unwrap();
            x.notes
                .iter()
                .find(|n| n.contains("page-cache DMA"))
                .cloned()
        };
        let on = note(&s, &r).unwrap();
        assert!(on.contains("on (dma_cache_size 1 GiB)"), "{on}");
        assert!(
            on.contains("a first read of a file version bounces"),
            "{on}"
        );
        assert!(
            note(&s, &req(32 << 10, 4 << 20)).is_none(),
            "cuFile path: no note"
        );
        let mut small = req(32 << 10, 4 << 20);
        small.compat_mode = Some(CompatMode::On);
        assert!(note(&s, &small)
            .unwrap()
            .contains("not for reads under 64 KiB"));
        s.dma_cache_size = 0;
        assert!(note(&s, &r).unwrap().contains("off (dma_cache_size 0)"));
        r.memory = Memory::Host;
        assert!(note(&s, &r).is_none(), "host memory: no DMA");
    }

    proptest! {
        #[test]
        fn pieces_cover_each_request_exactly(len in 1usize..(1 << 32), par in 1u64..16, kb in 1u64..20000) {
            let e = CufileExecution { max_request_parallelism: par, min_io_threshold_size_kb: kb, ..spec_exec() };
            let p = e.pieces(len);
            prop_assert_eq!(p.iter().sum::<usize>(), len);
            prop_assert!(p.len() as u64 <= par.max(1));
            prop_assert!(p.iter().all(|x| *x > 0));
        }
    }
}
