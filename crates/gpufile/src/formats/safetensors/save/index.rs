//! The names of a sharded checkpoint's files and its index (`model.safetensors.index.json`,
//! written byte for byte as Python's `json.dumps(index, indent=2, sort_keys=True) + "\n"`):
//! what the layout ([`super::checkpoint`]) makes and the commit ([`super::commit`]) publishes
//! and removes, in a room of its own so that neither imports the other's.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::path::Path;

use crate::publish::remove_stale_temporaries;

/// The index of a sharded checkpoint.
pub const INDEX_NAME: &str = "model.safetensors.index.json";
/// The file of a checkpoint of one shard.
pub const SINGLE_NAME: &str = "model.safetensors";

/// The name of shard `k` (from 0) of `n`.
pub fn shard_name(k: usize, n: usize) -> String {
    format!("model-{:05}-of-{:05}.safetensors", k + 1, n)
}

/// Whether `name` is a shard's name (`model-\d{5}-of-\d{5}\.safetensors`), of any count.
pub fn is_shard_name(name: &str) -> bool {
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("model-")
        .and_then(|r| r.strip_suffix(".safetensors"))
        .and_then(|r| r.split_once("-of-"))
        .is_some_and(|(a, b)| digits(a) && digits(b))
}

/// A value of the index's `metadata`: `total_size` (a number) or the caller's strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaValue {
    /// A JSON number.
    Int(u64),
    /// A JSON string.
    Str(String),
}

/// A saved checkpoint's index, as `model.safetensors.index.json` holds it (for one shard the
/// directory holds no index; this says what it would).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointIndex {
    /// `total_size` (the sum of the tensors' sizes for sharding), then the caller's metadata
    /// (a caller's `total_size` replaces the number, as Python's `{"total_size": n, **meta}`).
    pub metadata: BTreeMap<String, MetaValue>,
    /// Each tensor's file, shard by shard (in each shard, in the order of the tensors).
    pub weight_map: Vec<(String, String)>,
}

impl CheckpointIndex {
    /// The index file's text, as Python's `json.dumps(index, indent=2, sort_keys=True) + "\n"`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\n  \"metadata\": ");
        let meta: Vec<(&str, String)> = self
            .metadata
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    MetaValue::Int(n) => n.to_string(),
                    MetaValue::Str(s) => json_string(s),
                };
                (k.as_str(), text)
            })
            .collect();
        json_object(&mut out, meta);
        out.push_str(",\n  \"weight_map\": ");
        let mut files: Vec<(&str, String)> = self
            .weight_map
            .iter()
            .map(|(k, f)| (k.as_str(), json_string(f)))
            .collect();
        files.sort_by(|a, b| a.0.cmp(b.0));
        json_object(&mut out, files);
        out.push_str("\n}\n");
        out
    }
}

/// An object of `entries` (sorted by key) at the second level of an `indent=2` dump.
fn json_object(out: &mut String, entries: Vec<(&str, String)>) {
    if entries.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push('{');
    for (i, (k, v)) in entries.iter().enumerate() {
        out.push_str(if i == 0 { "\n    " } else { ",\n    " });
        out.push_str(&json_string(k));
        out.push_str(": ");
        out.push_str(v);
    }
    out.push_str("\n  }");
}

/// A JSON string as Python's `json.dumps` writes it (`ensure_ascii`: everything outside
/// printable ASCII as `\uXXXX`, UTF-16 surrogate pairs past the BMP).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// The names an index in `dir` points at (kept by the cleanup of temporaries: a killed save's
/// first index names temporaries); none where there is no readable index.
pub fn referenced_names(dir: &Path) -> HashSet<OsString> {
    let Ok(text) = std::fs::read(dir.join(INDEX_NAME)) else {
        return HashSet::new();
    };
    let Ok(serde_json::Value::Object(index)) = serde_json::from_slice(&text) else {
        return HashSet::new();
    };
    match index.get("weight_map") {
        Some(serde_json::Value::Object(map)) => map
            .values()
            .filter_map(|v| v.as_str().map(OsString::from))
            .collect(),
        _ => HashSet::new(),
    }
}

/// Removes the temporaries of killed saves from `dir`, keeping those its index names. Call it
/// holding the directory's [`DirLock`](crate::publish::DirLock).
pub fn remove_stale_checkpoint_temporaries(dir: &Path) -> crate::Result<usize> {
    remove_stale_temporaries(dir, &referenced_names(dir))
}
