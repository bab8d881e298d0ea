//! An [`Explanation`] for people ([`Explanation::render`]) and for programs
//! ([`Explanation::to_json`], docs/json.md's `explain` → `prediction`).

use std::fmt::Write as _;

use gpufile::Memory;
use serde_json::{json, Value};

use super::Explanation;
use crate::{schema, units};

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

/// `n` bytes with units, as every size here prints.
pub(super) fn human(n: usize) -> String {
    units::size(n as u64)
}

/// `n` things with its noun (`1 task`, `2 tasks`).
fn count(n: usize, one: &str, many: &str) -> String {
    units::count(n as u64, one, many)
}

/// The tasks for people, each size shown: `none: 0 bytes to read`, `1 task of 1 MiB`,
/// `16 tasks of 4 MiB`, `5 tasks: 4 of 4 MiB and 1 of 1 MiB`.
fn task_list(total: usize, runs: &[(usize, usize)]) -> String {
    match runs {
        [] => "none: 0 bytes to read".to_owned(),
        [(n, size)] => format!("{} of {}", count(*n, "task", "tasks"), human(*size)),
        _ => format!(
            "{}: {}",
            count(total, "task", "tasks"),
            runs.iter()
                .map(|(n, s)| format!("{n} of {}", human(*s)))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

/// Runs as `count × size` terms, summed.
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
                "task_size": self.task_size_setting,
                "num_threads": self.num_threads,
                "gds_threshold": self.gds_threshold,
            },
            "tasks": {
                "task_size": self.task_size,
                "count": self.task_count,
                "runs": self.tasks.iter().map(|(n, b)| json!({"count": n, "bytes": b}))
                    .collect::<Vec<_>>(),
            },
            "bounce_chunk": self.bounce_chunk,
            "gather_host_io": {
                "backend": self.gather_host_io.backend,
                "reason": self.gather_host_io.reason.to_string(),
            },
            "gather_kernel": {
                "on": matches!(self.gather_dma, gpufile::Dma::On(_)),
                "reason": self.gather_dma.to_string(),
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
            "request     {} ({}) at offset {} into {mem}",
            human(self.size),
            count(self.size, "byte", "bytes"),
            human(self.file_offset as usize)
        );
        let _ = writeln!(
            s,
            "settings    compat_mode {}, task_size {}, num_threads {}, gds_threshold {}",
            self.compat_mode,
            human(self.task_size_setting),
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
        let cut = match self.task_size < self.task_size_setting.min(self.size) {
            true => format!(
                ", the plan's task size for this read (the setting is {})",
                human(self.task_size_setting)
            ),
            false => String::new(),
        };
        let _ = writeln!(
            s,
            "tasks       {}{cut}",
            task_list(self.task_count, &self.tasks)
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
            let _ = writeln!(
                s,
                "cuFile      {}, one per task",
                count(req, "request", "requests")
            );
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
            for (count_of, pieces) in &self.cufile_pieces {
                let size: usize = pieces.iter().sum();
                let why = if pieces.len() == 1 {
                    format!(
                        "not above min_io_threshold_size_kb, {}",
                        human(e.min_io_threshold_size_kb as usize * 1024)
                    )
                } else {
                    format!(
                        "split by max_request_parallelism {} and min_io_threshold_size_kb",
                        e.max_request_parallelism
                    )
                };
                let _ = writeln!(
                    s,
                    "  {} of {}: {} = {} ({why})",
                    count(*count_of, "request", "requests"),
                    human(size),
                    count(pieces.len(), "piece", "pieces"),
                    run_list(&runs(pieces.iter().copied()))
                );
            }
            if let Some(w) = self.cufile_work_units {
                let _ = writeln!(
                    s,
                    "work units  {} scheduled on cuFile's {}",
                    count(w, "work unit", "work units"),
                    count(e.max_io_threads as usize, "I/O thread", "I/O threads")
                );
            }
        }
        let _ = writeln!(
            s,
            "gathers     read_ranges and read_rows of many small ranges use {}: {}",
            self.gather_host_io.backend, self.gather_host_io.reason
        );
        if self.memory == Memory::Device {
            let _ = writeln!(
                s,
                "            into GPU memory, hot ranges by the GPU's gather kernel: {}",
                self.gather_dma
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note        {n}");
        }
        s
    }
}
