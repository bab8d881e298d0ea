//! `gpufile read`'s report: what was read, how fast, into which memory and by which path, as
//! text or as docs/json.md's `read` object.

use gpufile::observe::Report;
use gpufile::Settings;
use gpufile_diag::schema;
use gpufile_diag::units::{self, Units};
use gpufile_remote::RemoteStats;
use serde_json::{json, Value};

use super::source::{ReadPath, ReadSource};
use crate::destination::Destination;
use crate::out;

/// Everything a finished `gpufile read` reports.
pub(super) struct Outcome<'a> {
    /// What was read.
    pub source: &'a ReadSource,
    /// Its name in the report: the path, or the URL with signatures redacted.
    pub shown: String,
    /// The range read.
    pub offset: u64,
    pub size: usize,
    /// The memory read into, and why it is host memory where the user named none.
    pub dest: &'a Destination,
    pub why_host: Option<String>,
    /// The settings the runs took.
    pub settings: &'a Settings,
    /// The path the reads took.
    pub path: ReadPath,
    /// Requests, retries and bytes of the runs, for a remote object.
    pub remote: Option<RemoteStats>,
    /// `--repeat`, and the seconds of each run and their median.
    pub repeat: u32,
    pub runs: Vec<f64>,
    pub seconds: f64,
    /// `Some(true)` where `--verify` compared the bytes.
    pub verified: Option<bool>,
    /// What gpufile observed over the runs.
    pub observed: Report,
}

impl Outcome<'_> {
    /// Where an S3 object's credentials came from (never the credentials); `None` otherwise.
    fn credentials(&self) -> Option<&'static str> {
        match self.source {
            ReadSource::Remote(remote) => remote.credentials_source(),
            ReadSource::Local(_) => None,
        }
    }

    /// docs/json.md's `read` object.
    pub(super) fn to_json(&self) -> Value {
        let (device, device_name) = match self.dest {
            Destination::Device { ordinal, name, .. } => (Some(*ordinal), Some(name.clone())),
            Destination::Host(_) => (None, None),
        };
        let (size, seconds, settings, path) = (self.size, self.seconds, self.settings, &self.path);
        schema::envelope(
            "read",
            json!({
                "file": self.shown,
                "offset": self.offset,
                "bytes": size,
                "memory": self.dest.memory(),
                "device": device,
                "device_name": device_name,
                "memory_note": self.why_host,
                "settings": {
                    "num_threads": settings.num_threads,
                    "task_size": settings.task_size,
                    "compat_mode": settings.compat_mode.name(),
                },
                "path": path.to_json(),
                "remote": self.remote.map(|r| json!({
                    "endpoint": path.remote_endpoint(),
                    "url": self.shown,
                    "requests": r.requests,
                    "retries": r.retries,
                    "bytes": r.bytes,
                    "credentials": self.credentials(),
                })),
                "runs": self.runs.len(),
                "seconds": seconds,
                "seconds_per_run": self.runs,
                "throughput_gb_per_s": units::gb_per_s(size as u64, seconds),
                "verified": self.verified,
                "observed": schema::observation(&self.observed),
            }),
        )
    }

    /// Prints the report as text, rates in `units`.
    pub(super) fn print(&self, units: Units) {
        let (size, offset, settings, report) =
            (self.size, self.offset, self.settings, &self.observed);
        let runs_note = if self.repeat > 1 {
            format!(" (median of {} runs)", self.repeat)
        } else {
            String::new()
        };
        let mut text = format!(
            "file        {}\nbytes       {} ({})\nseconds     {:.6}{}\nthroughput  {}\n\
             memory      {}{}\npath        {}\nreason      {}\nthreads     {}\ntask_size   {}\n",
            self.shown,
            size,
            units::size(size as u64),
            self.seconds,
            runs_note,
            units::rate(size as u64, self.seconds, units),
            self.dest.describe(),
            self.why_host
                .as_ref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default(),
            self.path.backend(),
            self.path.reason(),
            settings.num_threads,
            units::size(settings.task_size as u64),
        );
        if offset > 0 {
            text += &format!("offset      {offset} ({})\n", units::size(offset));
        }
        if let Some(r) = self.remote {
            text += &format!(
                "remote      {}, {}, {} ({})\n",
                units::count(r.requests, "request", "requests"),
                units::count(r.retries, "retry", "retries"),
                units::count(r.bytes, "byte", "bytes"),
                units::size(r.bytes)
            );
            if let Some(c) = self.credentials() {
                text += &format!("credentials {c}\n");
            }
        }
        if self.verified == Some(true) {
            text += match self.source {
                ReadSource::Local(_) => "verified    bytes match the file\n",
                ReadSource::Remote(_) => {
                    "verified    bytes match a plain ranged read of the object\n"
                }
            };
        }
        let dma = report.gpufile_posix.dma_bytes;
        if dma > 0 {
            let total = report.gpufile_posix.bytes.max(1);
            text += &format!(
                "page cache  {} of {} by DMA from registered page cache ({:.0} %; no bounce copy)\n",
                units::size(dma),
                units::size(report.gpufile_posix.bytes),
                dma as f64 * 100.0 / total as f64
            );
        }
        out(&text);
        match (report.cufile.ops, report.cufile_stats) {
            (0, _) => {}
            (_, Some(s)) => out(&format!(
                "cufile      {} (cuFile's counters: n={} nvfs={} posix={})\n",
                report
                    .cufile_path()
                    .unwrap_or("no cuFile operation counted"),
                s.n_reads,
                s.nvfs_reads,
                s.posix_reads
            )),
            (_, None) => out(&format!(
                "cufile      counters unavailable: {}\n",
                report.cufile_stats_note.as_deref().unwrap_or("unknown")
            )),
        }
    }
}
