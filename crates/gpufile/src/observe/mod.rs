//! What ran: per-path counters of every request, cuFile's own counters, and notices.
//!
//! How to use:
//! 1. [`begin`] an observation, do I/O, [`end`] it: a [`Report`] of requests by path
//!    (gpufile-posix, cufile) with bytes, busy time and errors, plus cuFile's statistics for the
//!    same span (how many of its operations went through nvidia-fs and how many through its
//!    compat POSIX path).
//! 2. [`totals`] gives the same counters since the process started.
//! 3. Fallbacks and other decisions worth knowing are [`notice`]d once; the Python package logs
//!    them with `logging`, `KVIKIO_LOG_LEVEL` (INFO or below) writes them to `KVIKIO_LOG_FILE`
//!    or stderr (`crate::config::LogSettings`), and `RUST_LOG` (any value naming gpufile, or
//!    info/debug) prints them.
//! 4. Every finished operation passes through `record` once: it feeds the totals above and,
//!    where a [`Monitor`] is registered, the observations of [`ops`] (KvikIO 26.10's
//!    `Observation`s, with gpufile's path and reason) and the [`SummaryMonitor`]s built on them.
//!    One source for both: `observe()` and a monitor cannot disagree on what ran.
//!
//! ```
//! let path = std::env::temp_dir().join(format!("gpufile-doc-obs-{}", std::process::id()));
//! std::fs::write(&path, vec![7u8; 1 << 16])?;
//! let obs = gpufile::observe::begin();
//! let f = gpufile::FileHandle::open(&path, "r")?;
//! let mut buf = vec![0u8; 1 << 16];
//! f.read(&mut buf, 0, None)?;
//! let report = gpufile::observe::end(obs);
//! assert!(report.gpufile_posix.bytes >= 1 << 16); // other threads' reads count too
//! println!("{}", report.to_json());
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::cufile;
/// cuFile's own counters, as a [`Report`] carries them.
pub use crate::cufile::Stats;
use crate::plan::Backend;
use crate::source::LocalFile;

pub(crate) mod counters;
pub mod ops;
pub(crate) mod summary;
mod summary_format;

pub use counters::{counters, Counters};
pub use ops::{ClockAnchor, DataPath, IoBackend, Monitor, Operation, Why};
pub use summary::{BackendTotals, PathRow, Summary, SummaryMonitor};
pub use summary_format::{format_duration_ns, format_nbytes, format_rate, ReportRows};

#[derive(Default)]
struct PathCounters {
    ops: AtomicU64,
    tasks: AtomicU64,
    bytes: AtomicU64,
    busy_ns: AtomicU64,
    errors: AtomicU64,
    dma_bytes: AtomicU64,
}

static POSIX: PathCounters = PathCounters::new();
static CUFILE: PathCounters = PathCounters::new();
static REMOTE: PathCounters = PathCounters::new();

/// The row of [`Report`] a request is counted in: the path its bytes took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Row {
    GpufilePosix,
    Cufile,
    /// A remote object's: its bytes crossed the network, whatever memory they went to.
    Remote,
}

impl Row {
    /// The row of a request on an endpoint of KvikIO's backend `io` that `backend` runs.
    pub(crate) fn of(backend: Backend, io: IoBackend) -> Row {
        match (io, backend) {
            (IoBackend::RemoteHttp | IoBackend::RemoteHdfs, _) => Row::Remote,
            (_, Backend::Cufile) => Row::Cufile,
            (_, Backend::GpufilePosix) => Row::GpufilePosix,
        }
    }
}

impl PathCounters {
    const fn new() -> Self {
        PathCounters {
            ops: AtomicU64::new(0),
            tasks: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            dma_bytes: AtomicU64::new(0),
        }
    }

    fn snapshot(&self) -> PathTotals {
        PathTotals {
            ops: self.ops.load(Ordering::Relaxed),
            tasks: self.tasks.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            busy_s: self.busy_ns.load(Ordering::Relaxed) as f64 / 1e9,
            errors: self.errors.load(Ordering::Relaxed),
            dma_bytes: self.dma_bytes.load(Ordering::Relaxed),
        }
    }
}

/// Counters of one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct PathTotals {
    /// Requests (read/write/pread/pwrite calls).
    pub ops: u64,
    /// Tasks they were split into (each a cuFile request on the cuFile path).
    pub tasks: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds from submit to completion, summed over requests.
    pub busy_s: f64,
    /// Requests that failed.
    pub errors: u64,
    /// Of `bytes`, those copied to the GPU straight from registered page cache (page-cache
    /// DMA, no bounce buffer).
    pub dma_bytes: u64,
}

impl PathTotals {
    fn since(&self, before: &PathTotals) -> PathTotals {
        PathTotals {
            ops: self.ops - before.ops,
            tasks: self.tasks - before.tasks,
            bytes: self.bytes - before.bytes,
            busy_s: self.busy_s - before.busy_s,
            errors: self.errors - before.errors,
            dma_bytes: self.dma_bytes - before.dma_bytes,
        }
    }

    /// Bytes per busy second, in GB/s.
    pub fn gb_per_s(&self) -> f64 {
        if self.busy_s > 0.0 {
            self.bytes as f64 / self.busy_s / 1e9
        } else {
            0.0
        }
    }
}

/// Records a finished request: the per-path totals, then, where a monitor watched it start,
/// its observation (`watched`).
pub(crate) fn record(
    row: Row,
    tasks: usize,
    bytes: usize,
    dma_bytes: u64,
    elapsed: std::time::Duration,
    ok: bool,
    watched: Option<&Operation<'_>>,
) {
    let c = match row {
        Row::GpufilePosix => &POSIX,
        Row::Cufile => &CUFILE,
        Row::Remote => &REMOTE,
    };
    c.ops.fetch_add(1, Ordering::Relaxed);
    c.tasks.fetch_add(tasks as u64, Ordering::Relaxed);
    c.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    c.dma_bytes.fetch_add(dma_bytes, Ordering::Relaxed);
    c.busy_ns
        .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    if !ok {
        c.errors.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(op) = watched {
        ops::deliver(op, true);
    }
}

/// Counters since the process started.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Report {
    /// Requests that ran through gpufile's POSIX path.
    pub gpufile_posix: PathTotals,
    /// Requests that ran through cuFile.
    pub cufile: PathTotals,
    /// Requests on remote objects (HTTP, S3, GCS, WebHDFS): their bytes crossed the network
    /// (into GPU memory through gpufile's pinned buffers), not the local POSIX path.
    pub remote: PathTotals,
    /// cuFile's own counters over the same span (nvfs vs posix), where readable.
    pub cufile_stats: Option<Stats>,
    /// Why `cufile_stats` is missing, if it is.
    pub cufile_stats_note: Option<String>,
}

impl Report {
    /// The report as JSON, with the cuFile path and each path's GB/s filled in.
    pub fn to_json(&self) -> serde_json::Value {
        let path = |t: &PathTotals| {
            serde_json::json!({
                "ops": t.ops, "tasks": t.tasks, "bytes": t.bytes, "seconds": t.busy_s,
                "gb_per_s": t.gb_per_s(), "errors": t.errors, "dma_bytes": t.dma_bytes,
            })
        };
        serde_json::json!({
            "gpufile-posix": path(&self.gpufile_posix),
            "cufile": path(&self.cufile),
            "remote": path(&self.remote),
            "cufile_path": self.cufile_path(),
            "cufile_stats": self.cufile_stats,
            "cufile_stats_note": self.cufile_stats_note,
        })
    }

    /// Which cuFile path ran, from cuFile's counters: "cufile-nvfs", "cufile-compat", both, or
    /// `None` where cuFile ran nothing or its counters are unknown.
    pub fn cufile_path(&self) -> Option<&'static str> {
        let s = self.cufile_stats?;
        let (nvfs, posix) = (s.nvfs_reads + s.nvfs_writes, s.posix_reads + s.posix_writes);
        match (nvfs > 0, posix > 0) {
            (true, false) => Some("cufile-nvfs"),
            (false, true) => Some("cufile-compat"),
            (true, true) => Some("cufile-nvfs+cufile-compat"),
            (false, false) => None,
        }
    }
}

/// Totals since the process started (cuFile's counters where its driver is open).
pub fn totals() -> Report {
    let (cufile_stats, cufile_stats_note) = cufile_snapshot();
    Report {
        gpufile_posix: POSIX.snapshot(),
        cufile: CUFILE.snapshot(),
        remote: REMOTE.snapshot(),
        cufile_stats,
        cufile_stats_note,
    }
}

fn cufile_snapshot() -> (Option<Stats>, Option<String>) {
    if !cufile::driver_is_open() {
        return (None, Some("cuFile was not used".into()));
    }
    match Stats::snapshot() {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    }
}

/// An observation in progress.
pub struct Observation {
    posix: PathTotals,
    cufile: PathTotals,
    remote: PathTotals,
    cufile_stats: Option<Stats>,
    note: Option<String>,
}

/// Starts observing: turns cuFile's statistics on (level 3) if its driver is open, or as soon
/// as it opens.
pub fn begin() -> Observation {
    cufile::watch_stats(true);
    let (mut cufile_stats, mut note) = (None, None);
    if cufile::driver_is_open() {
        match cufile::enable_stats(3).and_then(|_| Stats::snapshot()) {
            Ok(s) => cufile_stats = Some(s),
            Err(e) => note = Some(e.to_string()),
        }
    }
    Observation {
        posix: POSIX.snapshot(),
        cufile: CUFILE.snapshot(),
        remote: REMOTE.snapshot(),
        cufile_stats,
        note,
    }
}

/// Ends an observation: what ran since [`begin`].
pub fn end(obs: Observation) -> Report {
    cufile::watch_stats(false);
    let baseline = obs.cufile_stats.or(cufile::stats_at_open());
    let (now, now_note) = cufile_snapshot();
    let (cufile_stats, note) = match (now, baseline) {
        (Some(now), Some(before)) => (Some(now.since(&before)), None),
        (Some(_), None) => (None, Some("cuFile statistics could not be started".into())),
        (None, _) => (None, obs.note.or(now_note)),
    };
    Report {
        gpufile_posix: POSIX.snapshot().since(&obs.posix),
        cufile: CUFILE.snapshot().since(&obs.cufile),
        remote: REMOTE.snapshot().since(&obs.remote),
        cufile_stats,
        cufile_stats_note: note,
    }
}

/// Most distinct texts said per kind of notice. A kind's text may name a file or an error, so
/// the texts are bounded per kind (the kinds are the program's own, `&'static str`): a long run
/// over many files keeps a few examples and one line saying the rest are not shown, not every
/// path it met.
pub const NOTICES_PER_KIND: usize = 8;

/// The notices waiting for [`take_notices`], and the texts said so far of each kind.
struct Notices {
    pending: Vec<String>,
    said: Vec<(&'static str, Vec<String>)>,
}

static NOTICES: Mutex<Notices> = Mutex::new(Notices {
    pending: Vec::new(),
    said: Vec::new(),
});

/// Reports a decision of `kind` once per process per distinct text, at most
/// [`NOTICES_PER_KIND`] texts per kind (then once that further ones are not shown).
pub fn notice(kind: &'static str, text: String) {
    let mut n = NOTICES.lock().unwrap_or_else(|e| e.into_inner());
    let at = match n.said.iter().position(|(k, _)| *k == kind) {
        Some(i) => i,
        None => {
            n.said.push((kind, Vec::new()));
            n.said.len() - 1
        }
    };
    let texts = &mut n.said[at].1;
    if texts.len() > NOTICES_PER_KIND || texts.contains(&text) {
        return;
    }
    let text = match texts.len() == NOTICES_PER_KIND {
        true => format!("further notices of kind {kind:?} are not shown ({NOTICES_PER_KIND} were)"),
        false => text,
    };
    texts.push(text.clone());
    let on_stderr = crate::config::log_notice(&text);
    if crate::config::log_notices_to_stderr() && !on_stderr {
        eprintln!("[gpufile] {text}");
    }
    n.pending.push(text);
}

/// Says the notice `file` has come to have, if any ([`LocalFile::notice`]: no direct I/O);
/// called by whoever asked the file for its `O_DIRECT` descriptor (the engine as it plans and
/// ends a request, a file handle), since the file itself says nothing.
pub(crate) fn file_notice(file: &LocalFile) {
    if let Some((kind, text)) = file.notice() {
        notice(kind, text);
    }
}

/// The texts said so far of notices of `kind` (what `take_notices` gives may be taken by
/// another test meanwhile).
#[cfg(test)]
pub(crate) fn said(kind: &str) -> Vec<String> {
    let n = NOTICES.lock().unwrap_or_else(|e| e.into_inner());
    let said = n.said.iter().find(|(k, _)| *k == kind);
    said.map(|(_, t)| t.clone()).unwrap_or_default()
}

/// Notices not yet taken (for the Python package's logger).
pub fn take_notices() -> Vec<String> {
    std::mem::take(&mut NOTICES.lock().unwrap_or_else(|e| e.into_inner()).pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_given_once() {
        notice("test-once", "fallback A".into());
        notice("test-once", "fallback A".into());
        let taken = take_notices();
        assert_eq!(taken.iter().filter(|t| *t == "fallback A").count(), 1);
        notice("test-once", "fallback A".into());
        assert!(!take_notices().contains(&"fallback A".to_string()));
    }

    /// A notice naming a path, for 10,000 paths: a few are said and kept, then one line that
    /// the rest are not shown; nothing more is kept (it kept every text for the process's life).
    /// Checked on what is kept, not on `take_notices`, which other tests running meanwhile
    /// empty.
    #[test]
    fn notices_of_one_kind_are_bounded_whatever_their_texts() {
        let kept = |kind: &str| {
            let n = NOTICES.lock().unwrap();
            let said = n.said.iter().find(|(k, _)| *k == kind);
            said.map(|(_, t)| t.clone()).unwrap_or_default()
        };
        for i in 0..10_000 {
            notice("test-paths", format!("/data/file-{i}.bin falls back"));
        }
        let texts = kept("test-paths");
        assert_eq!(texts.len(), NOTICES_PER_KIND + 1, "{texts:?}");
        assert_eq!(texts[0], "/data/file-0.bin falls back");
        assert!(texts[NOTICES_PER_KIND].contains("not shown"), "{texts:?}");
        notice("test-paths", "/data/new.bin falls back".into());
        assert_eq!(kept("test-paths"), texts);
        // Another kind is not silenced by this one.
        notice("test-other", "other".into());
        assert_eq!(kept("test-other"), ["other"]);
    }

    #[test]
    fn cufile_path_from_counters() {
        let mut r = Report::default();
        assert_eq!(r.cufile_path(), None);
        r.cufile_stats = Some(Stats {
            n_reads: 256,
            posix_reads: 256,
            ..Stats::default()
        });
        assert_eq!(r.cufile_path(), Some("cufile-compat"));
        r.cufile_stats = Some(Stats {
            n_reads: 256,
            nvfs_reads: 256,
            ..Stats::default()
        });
        assert_eq!(r.cufile_path(), Some("cufile-nvfs"));
    }
}
