//! The explained read performed ([`run`]) and set beside its prediction: [`Outcome`] for the CLI
//! and Python, [`render_comparison`] for the side-by-side table, and [`explain_and_run`], the one
//! orchestration both share.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpufile::observe::{self, Report};
use gpufile::Memory;
use gpufile::Settings;
use gpufile::{Buffer, Engine, FileHandle};
use gpufile::{Error, Result};
use serde_json::{json, Value};

use super::render::human;
use super::{explain_with, Explanation, Request};
use crate::{schema, units};

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
            let buf = gpufile::DeviceBuffer::new(req.size, req.device)?;
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
    match gpufile::device_count() {
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
