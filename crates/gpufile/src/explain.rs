//! `gpufile explain`: how a request will be split and which path each piece takes, from the
//! same planner that executes reads, plus the work units cuFile is expected to make of each
//! request under cufile.json's `execution.*` settings.
//!
//! How to use: build a [`Request`], call [`explain`], print [`Explanation::render`]; with a file,
//! [`run`] performs the read and returns what was observed, for a side-by-side comparison.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::config::{self, CompatMode, Input, Name};
use crate::cufile::{self, Availability};
use crate::error::{Error, Result};
use crate::observe::{self, Report};
use crate::plan::{self, Backend, IoPath, Memory, Policy};

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

impl CufileExecution {
    /// Reads `path`; missing keys (or a missing file) take cuFile's documented defaults
    /// (parallel_io true, 4 threads, 8192 KiB, parallelism 4).
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
#[derive(Clone, Debug, serde::Serialize)]
pub struct Explanation {
    /// Bytes.
    pub size: usize,
    /// File offset.
    pub file_offset: u64,
    /// Host or device.
    pub memory: Memory,
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
    /// Notes (assumptions, caveats).
    pub notes: Vec<String>,
}

/// Predicts how `req` runs.
pub fn explain(req: &Request) -> Result<Explanation> {
    let s = config::current()?;
    let task_size = req.task_size.unwrap_or(s.task_size);
    if task_size == 0 {
        return Err(Error::InvalidArgument(
            "task_size must be at least 1 byte".into(),
        ));
    }
    let num_threads = req.num_threads.unwrap_or(s.num_threads);
    let compat_mode = req.compat_mode.unwrap_or(s.compat_mode);
    let gds_threshold = req.gds_threshold.unwrap_or(s.gds_threshold);
    let policy = Policy {
        compat_mode,
        gds_threshold,
        require_gds: s.require_gds,
    };
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
    let path =
        plan::choose_path(req.memory, req.size, policy, availability).map_err(|e| e.to_string());
    let tasks: Vec<plan::Task> = plan::split(req.file_offset, req.size, task_size).collect();
    let task_runs = runs(tasks.iter().map(|t| t.len));
    let (mut bounce_chunk, mut cufile_requests, mut cufile_pieces, mut work, mut exec) =
        (None, None, Vec::new(), None, None);
    match &path {
        Ok(p) if p.backend == Backend::Cufile => {
            let e =
                CufileExecution::load(&req.cufile_json.clone().unwrap_or_else(cufile::config_path));
            cufile_requests = Some(tasks.len());
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
            bounce_chunk = Some(crate::device::chunk_size(
                task_size.min(req.size.max(1)),
                s.bounce_buffer_size,
            ));
        }
        _ => {}
    }
    if tasks.len() > num_threads {
        notes.push(format!("{} tasks over {num_threads} workers", tasks.len()));
    }
    Ok(Explanation {
        size: req.size,
        file_offset: req.file_offset,
        memory: req.memory,
        compat_mode,
        task_size,
        num_threads,
        gds_threshold,
        path,
        task_count: tasks.len(),
        tasks: task_runs,
        bounce_chunk,
        cufile_requests,
        cufile_pieces,
        cufile_work_units: work,
        cufile_execution: exec,
        notes,
    })
}

fn human(n: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < 4 {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{} {}", v.round(), UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

fn run_list(runs: &[(usize, usize)]) -> String {
    runs.iter()
        .map(|(n, s)| format!("{n} × {}", human(*s)))
        .collect::<Vec<_>>()
        .join(" + ")
}

impl Explanation {
    /// The explanation for people.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mem = match self.memory {
            Memory::Host => "host",
            Memory::Device => "device",
        };
        let _ = writeln!(
            s,
            "request     {} ({} bytes) at offset {} into {mem} memory",
            human(self.size),
            self.size,
            self.file_offset
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
        for n in &self.notes {
            let _ = writeln!(s, "note        {n}");
        }
        s
    }
}

/// Performs the explained read of `file` (device memory where the request says so) with the
/// request's settings, and returns what was observed.
pub fn run(req: &Request, file: &Path) -> Result<Report> {
    let e = explain(req)?;
    let mut updates: Vec<(Name, Input<'_>)> = vec![
        (Name::TaskSize, Input::Int(e.task_size as i128)),
        (Name::NumThreads, Input::Int(e.num_threads as i128)),
        (Name::GdsThreshold, Input::Int(e.gds_threshold as i128)),
        (Name::CompatMode, Input::Int(e.compat_mode as i128)),
    ];
    let names: Vec<Name> = updates.iter().map(|(n, _)| *n).collect();
    let saved = config::snapshot(&names)?;
    config::set(&std::mem::take(&mut updates))?;
    let result = (|| {
        let h = crate::FileHandle::open(file, "r")?;
        let obs = observe::begin();
        let r = match req.memory {
            Memory::Host => {
                let mut buf = vec![0u8; req.size];
                h.read(&mut buf, req.file_offset, None).map(|_| ())
            }
            Memory::Device => {
                let buf = crate::cuda::DeviceBuffer::new(req.size, 0)?;
                // SAFETY: `buf` outlives the wait.
                unsafe { h.pread_device(buf.addr(), req.size, req.file_offset, None) }?
                    .wait()
                    .map(|_| ())
            }
        };
        let report = observe::end(obs);
        r.map(|()| report)
    })();
    config::restore(&saved)?;
    result
}

/// Prediction and observation side by side.
pub fn render_comparison(e: &Explanation, observed: &Report) -> String {
    let mut s = String::new();
    let predicted_path = e
        .path
        .as_ref()
        .map(|p| p.backend.to_string())
        .unwrap_or_else(|_| "error".into());
    let (observed_path, totals) = if observed.cufile.ops > 0 {
        (
            observed.cufile_path().unwrap_or("cufile").to_owned(),
            observed.cufile,
        )
    } else {
        ("gpufile-posix".to_owned(), observed.gpufile_posix)
    };
    let _ = writeln!(s, "{:<18} {:<22} observed", "", "predicted");
    let _ = writeln!(s, "{:<18} {:<22} {}", "path", predicted_path, observed_path);
    let _ = writeln!(s, "{:<18} {:<22} {}", "tasks", e.task_count, totals.tasks);
    let _ = writeln!(s, "{:<18} {:<22} {}", "bytes", e.size, totals.bytes);
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
    let _ = writeln!(s, "{:<18} {:<22} {:.2}", "GB/s", "", totals.gb_per_s());
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
