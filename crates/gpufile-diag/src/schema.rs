//! The JSON of every `gpufile ... --json` and of Python's `check()`/`explain()` `as_dict()`:
//! one documented shape (docs/json.md), version [`SCHEMA_VERSION`].
//!
//! Rules: named fields only (no positional arrays, no Rust `Ok`/`Err` wrappers); sizes are
//! integers in bytes; the one throughput field of a result is `throughput_gb_per_s` (decimal,
//! 10^9 bytes per second); a path decision is always [`path`]'s object, its reason always
//! [`reason`]'s; a probe that can fail is always [`outcome`]'s object.

use gpufile::observe::{PathTotals, Report};
use gpufile::{IoPath, Reason};
use serde_json::{json, Value};

use crate::units;

/// The version of the JSON shapes; raised when a field changes meaning or goes away (a new
/// field does not raise it).
pub const SCHEMA_VERSION: u32 = 2;

/// Every command's output: `{"schema_version": 2, "command": NAME, ...body}`.
pub fn envelope(command: &str, body: Value) -> Value {
    let mut map = match body {
        Value::Object(map) => map,
        other => {
            let mut m = serde_json::Map::new();
            m.insert("result".into(), other);
            m
        }
    };
    map.insert("schema_version".into(), json!(SCHEMA_VERSION));
    map.insert("command".into(), json!(command));
    Value::Object(map)
}

/// Why a path was chosen: `{"kind": "compat-mode-on", "detail": str|null, "text": str}`;
/// `text` is the sentence the text output prints.
pub fn reason(r: &Reason) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_else(|_| json!({ "kind": "unknown" }));
    if let Value::Object(m) = &mut v {
        m.entry("detail").or_insert(Value::Null);
        m.insert("text".into(), json!(r.to_string()));
    }
    v
}

/// A path decision: `{"backend": "gpufile-posix"|"cufile", "reason": reason}`.
pub fn path(p: &IoPath) -> Value {
    json!({ "backend": p.backend.to_string(), "reason": reason(&p.reason) })
}

/// A decision that may have failed: `{"path": path|null, "error": str|null}`.
pub fn decision(d: &Result<IoPath, String>) -> Value {
    match d {
        Ok(p) => json!({ "path": path(p), "error": null }),
        Err(e) => json!({ "path": null, "error": e }),
    }
}

/// A probe that may have failed: `{"ok": bool, "value": T|null, "error": str|null}`.
pub fn outcome<T: serde::Serialize>(r: &Result<T, String>) -> Value {
    match r {
        Ok(v) => json!({ "ok": true, "value": v, "error": null }),
        Err(e) => json!({ "ok": false, "value": null, "error": e }),
    }
}

/// One path's totals: `{"ops", "tasks", "bytes", "seconds", "errors", "dma_bytes"}` (no rate: a
/// result has one throughput field, beside this object; `dma_bytes`: of `bytes`, those copied
/// straight from registered page cache).
pub fn totals(t: &PathTotals) -> Value {
    json!({
        "ops": t.ops, "tasks": t.tasks, "bytes": t.bytes, "seconds": t.busy_s, "errors": t.errors,
        "dma_bytes": t.dma_bytes,
    })
}

/// What ran over a span: `{"path": str|null, "by_path": {"gpufile-posix": totals, "cufile":
/// totals, "remote": totals}, "cufile_stats": obj|null, "cufile_stats_note": str|null}`. `path`
/// names the path that moved the bytes: "gpufile-posix", "cufile-nvfs", "cufile-compat",
/// "cufile" (cuFile's counters unknown), "remote" (a remote object's), several joined by "+",
/// or null where nothing ran.
pub fn observation(r: &Report) -> Value {
    json!({
        "path": observed_path(r),
        "by_path": {
            "gpufile-posix": totals(&r.gpufile_posix),
            "cufile": totals(&r.cufile),
            "remote": totals(&r.remote),
        },
        "cufile_stats": r.cufile_stats,
        "cufile_stats_note": r.cufile_stats_note,
    })
}

/// The path that moved the bytes of a span (see [`observation`]).
pub fn observed_path(r: &Report) -> Option<String> {
    let ran: Vec<&str> = [
        (r.gpufile_posix.ops, "gpufile-posix"),
        (r.cufile.ops, r.cufile_path().unwrap_or("cufile")),
        (r.remote.ops, "remote"),
    ]
    .into_iter()
    .filter(|(ops, _)| *ops > 0)
    .map(|(_, name)| name)
    .collect();
    (!ran.is_empty()).then(|| ran.join("+"))
}

/// The bytes and busy seconds of a span, over every path.
pub fn moved(r: &Report) -> (u64, f64) {
    (
        r.gpufile_posix.bytes + r.cufile.bytes + r.remote.bytes,
        r.gpufile_posix.busy_s + r.cufile.busy_s + r.remote.busy_s,
    )
}

/// Decimal GB/s of a span (bytes over busy seconds).
pub fn throughput(r: &Report) -> f64 {
    let (bytes, seconds) = moved(r);
    units::gb_per_s(bytes, seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufile::Backend;

    #[test]
    fn reasons_have_the_same_fields_with_or_without_detail() {
        let r = reason(&Reason::CompatModeOn);
        assert_eq!(
            r,
            json!({"kind": "compat-mode-on", "detail": null, "text": "compat_mode is ON"})
        );
        let r = reason(&Reason::CufileUnavailable("no libcufile".into()));
        assert_eq!(r["kind"], "cufile-unavailable");
        assert_eq!(r["detail"], "no libcufile");
        assert_eq!(r["text"], "cuFile unavailable: no libcufile");
    }

    #[test]
    fn decisions_and_outcomes_never_leak_ok_or_err() {
        let p = IoPath {
            backend: Backend::GpufilePosix,
            reason: Reason::HostBuffer,
        };
        let d = decision(&Ok(p));
        assert_eq!(d["path"]["backend"], "gpufile-posix");
        assert!(d["error"].is_null());
        let d = decision(&Err("no".into()));
        assert!(d["path"].is_null() && d["error"] == "no");
        let o = outcome::<u32>(&Err("why".into()));
        assert_eq!(o, json!({"ok": false, "value": null, "error": "why"}));
        let text = serde_json::to_string(&[d, o]).unwrap();
        assert!(!text.contains("\"Ok\"") && !text.contains("\"Err\""));
    }

    #[test]
    fn envelopes_carry_version_and_command() {
        let v = envelope("read", json!({"bytes": 1}));
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["command"], "read");
        assert_eq!(v["bytes"], 1);
    }
}
