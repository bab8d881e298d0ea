//! `gpufile explain`: how a request will be split and which path each piece takes, from the
//! same planner that executes reads, plus the work units cuFile is expected to make of each
//! request under cufile.json's `execution.*` settings.
//!
//! How to use: build a [`Request`], call [`explain`], print [`Explanation::render`]; with a file,
//! [`run`] performs the read under the same settings and returns what was observed, for a
//! side-by-side comparison. [`explain_and_run`] does both, as the CLI and Python present them.
//! Nothing here changes the process defaults: the run carries its own settings.
//!
//! The prediction lives here; [`CufileExecution`] models cuFile's own split of a request, the
//! `render` module prints an [`Explanation`] (text and JSON), and the `compare` module performs
//! the read and sets the observation beside the prediction.

use std::path::PathBuf;

use gpufile::__private::cufile;
use gpufile::__private::plan::{self, Availability};
use gpufile::{Backend, IoPath, Memory};
use gpufile::{CompatMode, Settings};
use gpufile::{Engine, FileHandle};
use gpufile::{Error, Result};

use crate::units;

mod compare;
mod cufile_execution;
mod render;
#[cfg(test)]
mod tests;

pub use compare::{
    default_memory, explain_and_run, host_fallback_note, render_comparison, run, Outcome,
};
pub use cufile_execution::{CufileExecution, CUFILE_EXECUTION_DEFAULTS};
use render::human;

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
    /// cufile.json to read (default: `CUFILE_ENV_PATH_JSON` or /etc/cufile.json, cuFile's
    /// defaults where it does not exist); one named here that is missing or not valid
    /// cufile.json is an error.
    pub cufile_json: Option<PathBuf>,
    /// Whether the destination buffer is registered with cuFile (`memory_register`).
    pub registered_buffer: bool,
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
    /// The task_size setting (the request's, else the process's).
    pub task_size_setting: usize,
    /// Effective task_size: the setting, or smaller where a read alone is cut so every worker
    /// helps.
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
    /// settings: io_uring or `pread`, and why ([`gpufile::__private::engine::host_io`]).
    pub gather_host_io: gpufile::HostIo,
    /// Whether a gather of many small ranges into this memory has the GPU copy hot ranges
    /// itself (gpufile's gather kernel over registered page cache) under these settings.
    pub gather_dma: gpufile::Dma,
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
        plan::check_task_size(None, s.task_size)?;
        if s.num_threads == 0 || s.num_threads > gpufile::__private::config::MAX_THREADS {
            return Err(Error::InvalidArgument(format!(
                "num_threads must be between 1 and {}",
                gpufile::__private::config::MAX_THREADS
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
    // A cufile.json the caller named is read first: missing or malformed, it is an error.
    let named_cufile_json = req
        .cufile_json
        .as_deref()
        .map(CufileExecution::load_named)
        .transpose()?;
    let (num_threads, compat_mode, gds_threshold) = (s.num_threads, s.compat_mode, s.gds_threshold);
    let mut notes = Vec::new();
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
        batch_whole: false,
        needs: plan::Needs {
            local_file: true,
            ..plan::Needs::default()
        },
    };
    let mut machine = Predicted {
        cufile: req.cufile,
        file,
    };
    let planned = plan::plan_request(&shape, &s, &mut machine);
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
            let e = named_cufile_json
                .clone()
                .unwrap_or_else(|| CufileExecution::load(&cufile::config_path()));
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
        _ => {}
    }
    if let Some(plan::Strategy::Bounce { chunks, dma, .. }) = &planned.strategy {
        bounce_chunk = Some(chunks.of(task_size.min(req.size.max(1))));
        notes.push(render_dma(dma));
    }
    if task_count > num_threads {
        notes.push(format!(
            "{task_count} tasks over {}",
            units::count(num_threads as u64, "worker", "workers")
        ));
    }
    Ok(Explanation {
        gather_host_io: gpufile::__private::engine::host_io(&s, true),
        gather_dma: plan::page_cache_dma(&s, req.memory == Memory::Device, req.size, || None),
        size: req.size,
        file_offset: req.file_offset,
        memory: req.memory,
        device: req.device,
        compat_mode,
        task_size_setting: s.task_size,
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

/// The plan's page-cache DMA decision for a device read (see the core's `exec::dma`), in words.
fn render_dma(dma: &gpufile::Dma) -> String {
    match dma {
        gpufile::Dma::SettingOff => {
            "page-cache DMA off (dma_cache_size 0): every chunk goes through the bounce buffers"
                .into()
        }
        gpufile::Dma::DirectIo => {
            "page-cache DMA off: auto_direct_io_read asks for O_DIRECT reads".into()
        }
        gpufile::Dma::Small => format!(
            "page-cache DMA: not for reads under {}",
            human(plan::DMA_MIN_REQUEST)
        ),
        gpufile::Dma::NotADeviceRead => {
            "page-cache DMA: only for device reads of local files".into()
        }
        gpufile::Dma::Disabled(why) => format!("page-cache DMA off in this process: {why}"),
        gpufile::Dma::On(budget) => format!(
            "page-cache DMA on (dma_cache_size {}): where this file was read before and a \
             {} granule is all in the page cache, the GPU copies it straight from there \
             (registered once, kept); a first read of a file version bounces",
            human(*budget),
            human(plan::DMA_GRANULE)
        ),
    }
}

/// The machine as `explain` predicts it: cuFile as assumed (or probed), the file's
/// registration where one is given and probed, io_uring as the process would find it, and
/// page-cache DMA allowed (a process disables it only after the driver refuses a registration).
struct Predicted<'a> {
    cufile: CufileAssumption,
    file: Option<&'a FileHandle>,
}

impl plan::Machine for Predicted<'_> {
    fn cufile(&mut self) -> Availability {
        match self.cufile {
            CufileAssumption::Probe => cufile::availability(),
            CufileAssumption::Nvfs => Availability::Accelerated("assumed: nvidia-fs loaded".into()),
            CufileAssumption::Compat => {
                Availability::CompatOnly("assumed: nvidia-fs not loaded".into())
            }
            CufileAssumption::Unavailable => {
                Availability::Unavailable("assumed: cuFile cannot be used".into())
            }
        }
    }

    fn registration(&mut self) -> std::result::Result<(), String> {
        match (self.file, self.cufile) {
            (Some(f), CufileAssumption::Probe) => {
                f.cufile_registration().map_err(|e| e.to_string())
            }
            _ => Ok(()),
        }
    }

    fn io_uring(&mut self) -> std::result::Result<String, gpufile::HostIoReason> {
        gpufile::__private::exec::uring_probe()
    }

    fn dma_disabled(&mut self) -> Option<String> {
        None
    }

    fn gather_kernel(&mut self) -> std::result::Result<(), String> {
        Ok(()) // assumed: loading it is what a real request would try first
    }
}
