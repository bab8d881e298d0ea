//! A [`Summary`] for people (KvikIO's report: one field a line, scaled units, then gpufile's
//! paths and reasons), for programs (KvikIO's JSON keys, plus `by_path`) and for a pipe
//! (bytes that [`Summary::deserialize`] reads back exactly).

use std::fmt::Write as _;

use super::counters::Counters;
use super::ops::IoBackend;
use super::summary::Summary;
use crate::error::{Error, Result};

/// "GFSM": a gpufile summary; bytes from anything else are refused.
const MAGIC: &[u8; 4] = b"GFSM";
/// Bumped whenever the payload changes.
const VERSION: u32 = 1;
const HEADER: usize = 12;

/// Which rows [`Summary::report`] prints (KvikIO's `ReportRows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportRows {
    /// The backends and counter groups the span used.
    Used,
    /// Every row.
    All,
}

/// `value` with `decimals` places, the fraction dropped where it is all zeros, then `unit`.
fn scaled(value: f64, magnitude: f64, unit: &str) -> String {
    let mut s = format!("{magnitude:.2}");
    if s.ends_with(".00") {
        s.truncate(s.len() - 3);
    }
    let sign = if value < 0.0 { "-" } else { "" };
    format!("{sign}{s} {unit}")
}

/// Bytes in binary units (`1.50 KiB`).
pub fn format_nbytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let (mut m, mut i) = (n as f64, 0);
    while m >= 1024.0 && i + 1 < UNITS.len() {
        m /= 1024.0;
        i += 1;
    }
    scaled(n as f64, m, UNITS[i])
}

/// A rate in decimal units (`87.38 MB/s`).
pub fn format_rate(bytes_per_sec: f64) -> String {
    const UNITS: [&str; 6] = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s", "PB/s"];
    let (mut m, mut i) = (bytes_per_sec.abs(), 0);
    while m.is_finite() && m >= 1000.0 && i + 1 < UNITS.len() {
        m /= 1000.0;
        i += 1;
    }
    scaled(bytes_per_sec, m, UNITS[i])
}

/// A duration of `ns` nanoseconds in the unit that keeps it readable (`430.29 ms`).
pub fn format_duration_ns(ns: u64) -> String {
    let seconds = ns as f64 / 1e9;
    for (unit, scale) in [("d", 86400.0), ("h", 3600.0), ("min", 60.0)] {
        if seconds >= scale {
            return scaled(seconds, seconds / scale, unit);
        }
    }
    if seconds >= 1.0 || ns == 0 {
        return scaled(seconds, seconds, "s");
    }
    for (unit, scale) in [("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)] {
        if seconds >= scale {
            return scaled(seconds, seconds / scale, unit);
        }
    }
    scaled(seconds, seconds, "s")
}

impl Summary {
    /// Every field for people, one a line, newline-terminated; under [`ReportRows::Used`] the
    /// backends, paths and counter groups the span never used are left out.
    pub fn report(&self, rows: ReportRows) -> String {
        let mut out = String::from("KvikIO I/O summary\n");
        let mut row = |label: &str, value: String| {
            let _ = writeln!(out, "  {label:<21}{value}");
        };
        row("wall time", format_duration_ns(self.wall_ns()));
        row(
            "busy time",
            format!(
                "{} ({:.2} % of the wall time)",
                format_duration_ns(self.busy_ns),
                self.busy_fraction() * 100.0
            ),
        );
        row("busy bandwidth", format_rate(self.busy_bytes_per_sec()));
        row(
            "operations",
            format!(
                "{} ({} read, {} write)",
                self.num_ops, self.num_reads, self.num_writes
            ),
        );
        row("mean duration", format_duration_ns(self.mean_duration_ns()));
        row(
            "bytes",
            format!(
                "{} of {} requested ({} read, {} written)",
                format_nbytes(self.bytes_transferred),
                format_nbytes(self.bytes_requested),
                format_nbytes(self.bytes_read),
                format_nbytes(self.bytes_written)
            ),
        );
        row("errors", self.num_errors.to_string());
        let all = rows == ReportRows::All;
        for (backend, t) in IoBackend::ALL.iter().zip(&self.by_backend) {
            let label = format!("backend {}", backend.name());
            if t.num_ops == 0 {
                if all {
                    row(&label, "unused".into());
                }
                continue;
            }
            let mut v = format!(
                "{} in {} ops, {}",
                format_nbytes(t.bytes_transferred),
                t.num_ops,
                format_duration_ns(t.total_duration_ns)
            );
            if t.total_duration_ns > 0 {
                let rate = t.bytes_transferred as f64 / (t.total_duration_ns as f64 / 1e9);
                let _ = write!(v, ", {}", format_rate(rate));
            }
            if t.num_errors != 0 {
                let _ = write!(v, ", {} failed", t.num_errors);
            }
            row(&label, v);
        }
        self.counters.rows(all, &mut row);
        // gpufile's answer to "which path, and why": one row per path, then its reasons.
        for p in &self.by_path {
            let mut v = format!(
                "{} in {} ops ({}), {} tasks",
                format_nbytes(p.bytes_transferred),
                p.num_ops,
                p.backend,
                p.num_tasks
            );
            if p.dma_bytes > 0 {
                let _ = write!(v, ", {} by page-cache DMA", format_nbytes(p.dma_bytes));
            }
            if p.num_errors != 0 {
                let _ = write!(v, ", {} failed", p.num_errors);
            }
            row(&format!("path {}", p.path), v);
            for (reason, n) in &p.reasons {
                row("", format!("  {n} ops: {reason}"));
            }
        }
        out
    }

    /// KvikIO's JSON object (its keys, in its order, spaced as it spaces them), with gpufile's
    /// `path` and `reason` in each `by_backend` row and its `by_path` rows.
    pub fn to_json(&self) -> String {
        let mut by_backend = Obj::default();
        for (backend, t) in IoBackend::ALL.iter().zip(&self.by_backend) {
            let (path, reason) = self.path_and_reason(*backend);
            let mut row = Obj::default();
            row.num("num_ops", t.num_ops)
                .num("bytes_transferred", t.bytes_transferred)
                .num("total_duration_ns", t.total_duration_ns)
                .num("num_errors", t.num_errors)
                .text("path", &path)
                .text("reason", &reason);
            by_backend.raw(backend.name(), row.end());
        }
        let mut counters = Obj::default();
        for (k, v) in self.counters.fields() {
            counters.num(k, v);
        }
        let mut by_path = Obj::default();
        for p in &self.by_path {
            let mut reasons = Obj::default();
            for (r, n) in &p.reasons {
                reasons.num(r, *n);
            }
            let mut row = Obj::default();
            row.text("backend", &p.backend)
                .num("num_ops", p.num_ops)
                .num("bytes_transferred", p.bytes_transferred)
                .num("total_duration_ns", p.total_duration_ns)
                .num("num_errors", p.num_errors)
                .num("num_tasks", p.num_tasks)
                .num("dma_bytes", p.dma_bytes)
                .raw("reasons", reasons.end());
            by_path.raw(&p.path, row.end());
        }
        let mut o = Obj::default();
        o.num("start_unix_ns", self.start_unix_ns())
            .num("end_unix_ns", self.end_unix_ns())
            .num("wall_ns", self.wall_ns())
            .num("num_ops", self.num_ops)
            .num("num_reads", self.num_reads)
            .num("num_writes", self.num_writes)
            .num("bytes_requested", self.bytes_requested)
            .num("bytes_transferred", self.bytes_transferred)
            .num("bytes_read", self.bytes_read)
            .num("bytes_written", self.bytes_written)
            .num("num_errors", self.num_errors)
            .num("busy_ns", self.busy_ns)
            .num("total_duration_ns", self.total_duration_ns)
            .float("busy_bytes_per_sec", self.busy_bytes_per_sec())
            .float("busy_fraction", self.busy_fraction())
            .num("mean_duration_ns", self.mean_duration_ns())
            .raw("counters", counters.end())
            .raw("by_backend", by_backend.end())
            .raw("by_path", by_path.end());
        o.end()
    }

    /// The gpufile paths that carried `backend`'s operations (`+`-joined, `""` if none) and
    /// their reasons (`; `-joined).
    pub fn path_and_reason(&self, backend: IoBackend) -> (String, String) {
        let rows: Vec<_> = self
            .by_path
            .iter()
            .filter(|p| p.backend == backend.name())
            .collect();
        let path = rows.iter().map(|p| p.path.as_str()).collect::<Vec<_>>();
        let reasons = rows
            .iter()
            .flat_map(|p| p.reasons.iter().map(|(r, _)| r.as_str()))
            .collect::<Vec<_>>();
        (path.join("+"), reasons.join("; "))
    }

    /// Everything, exactly (the clock anchor and the span's identity too), so a summary sent
    /// through a pipe is still a baseline for [`Summary::since`]. Not a wire format: only this
    /// version of gpufile reads it back; use [`Summary::to_json`] for other readers.
    pub fn serialize(&self) -> Vec<u8> {
        let payload = serde_json::to_vec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Reads back [`Summary::serialize`]'s bytes; anything else (another format, a truncated
    /// or extended buffer, another version) is an `InvalidArgument`.
    pub fn deserialize(bytes: &[u8]) -> Result<Summary> {
        let bad = |why: &str| Error::InvalidArgument(format!("not a serialized Summary: {why}"));
        if bytes.len() < HEADER || &bytes[..4] != MAGIC {
            return Err(bad("wrong magic"));
        }
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        if word(4) != VERSION {
            return Err(bad(&format!(
                "version {} where this build reads {VERSION}",
                word(4)
            )));
        }
        if word(8) as usize != bytes.len() - HEADER {
            return Err(bad("wrong length"));
        }
        serde_json::from_slice(&bytes[HEADER..]).map_err(|e| bad(&e.to_string()))
    }
}

impl Counters {
    /// KvikIO's `Counters::report`: one line per group (size probes, handshakes, retries),
    /// newline-terminated; under [`ReportRows::Used`] only the groups counted, so an empty
    /// reading is `""`.
    pub fn report(&self, rows: ReportRows) -> String {
        let mut out = String::new();
        self.rows(
            rows == ReportRows::All,
            &mut |label: &str, value: String| {
                let _ = writeln!(out, "  {label:<21}{value}");
            },
        );
        out
    }

    /// KvikIO's `Counters::to_json`: every counter, whatever was used, durations in ns.
    pub fn to_json(&self) -> String {
        let mut o = Obj::default();
        for (k, v) in self.fields() {
            o.num(k, v);
        }
        o.end()
    }

    /// Hands each group's report row to `row` (every group where `all`).
    fn rows(&self, all: bool, row: &mut dyn FnMut(&str, String)) {
        let c = self;
        if all || c.remote_size_probes > 0 {
            row(
                "http size probes",
                format!(
                    "{} probes, {}",
                    c.remote_size_probes,
                    format_duration_ns(c.remote_size_probing_ns)
                ),
            );
        }
        if all || c.http_connections > 0 {
            row(
                "http handshake",
                format!(
                    "{} connections, {} dns, {} tcp, {} tls",
                    c.http_connections,
                    format_duration_ns(c.http_dns_ns),
                    format_duration_ns(c.http_tcp_ns),
                    format_duration_ns(c.http_tls_ns)
                ),
            );
        }
        if all || c.http_retries > 0 {
            row(
                "http retries",
                format!(
                    "{} retries, {} backoff",
                    c.http_retries,
                    format_duration_ns(c.http_retry_backoff_ns)
                ),
            );
        }
    }
}

/// A JSON object written in order (serde_json's map sorts its keys).
#[derive(Default)]
struct Obj(Vec<String>);

impl Obj {
    fn raw(&mut self, key: &str, value: String) -> &mut Self {
        let key = serde_json::to_string(key).unwrap_or_default();
        self.0.push(format!("{key}: {value}"));
        self
    }

    fn num(&mut self, key: &str, value: impl std::fmt::Display) -> &mut Self {
        self.raw(key, value.to_string())
    }

    fn float(&mut self, key: &str, value: f64) -> &mut Self {
        self.raw(
            key,
            serde_json::to_string(&value).unwrap_or_else(|_| "null".into()),
        )
    }

    fn text(&mut self, key: &str, value: &str) -> &mut Self {
        self.raw(key, serde_json::to_string(value).unwrap_or_default())
    }

    fn end(&self) -> String {
        format!("{{{}}}", self.0.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_scale_as_kvikio_prints_them() {
        assert_eq!(format_nbytes(0), "0 B");
        assert_eq!(format_nbytes(1536), "1.50 KiB");
        assert_eq!(format_nbytes(10 << 20), "10 MiB");
        assert_eq!(format_rate(87_381_333.3), "87.38 MB/s");
        assert_eq!(format_rate(0.0), "0 B/s");
        assert_eq!(format_duration_ns(0), "0 s");
        assert_eq!(format_duration_ns(800), "800 ns");
        assert_eq!(format_duration_ns(1_500_000), "1.50 ms");
        assert_eq!(format_duration_ns(243_800_000), "243.80 ms");
        assert_eq!(format_duration_ns(3_000_000_000), "3 s");
        assert_eq!(format_duration_ns(90_000_000_000), "1.50 min");
    }

    #[test]
    fn bytes_round_trip_and_refuse_anything_else() {
        let s = Summary {
            num_ops: 3,
            monitor: 7,
            ..Summary::default()
        };
        let raw = s.serialize();
        assert_eq!(Summary::deserialize(&raw).unwrap(), s);
        assert!(Summary::deserialize(&raw[..raw.len() - 1]).is_err());
        assert!(Summary::deserialize(b"not a summary").is_err());
        let mut other = raw.clone();
        other[4] = 9;
        assert!(Summary::deserialize(&other).is_err());
    }
}
