//! A Hugging Face sharded checkpoint's index (`model.safetensors.index.json`) parsed and checked
//! ([`Index`]): which shard holds each tensor, every shard a plain name inside the checkpoint's
//! directory.

use std::collections::HashMap;
use std::path::{Component, Path};

use serde::Deserialize;

use super::header::Entries;
use super::{FormatError, Result};

/// A sharded checkpoint's index (`{"metadata": {...}, "weight_map": {tensor: file}}`), parsed
/// and checked, before any shard is opened (a local index, or one read from a URL).
#[derive(Clone, Debug)]
pub struct Index {
    /// The shard names, sorted, each once: plain names relative to the index's directory
    /// (no `..`, no absolute path).
    pub shards: Vec<String>,
    /// Each tensor and the index of its shard in [`Index::shards`].
    pub weight_map: Vec<(String, usize)>,
    /// The index's `metadata` object, if any.
    pub metadata: Option<serde_json::Value>,
}

impl Index {
    /// Parses the index text read from `path` (named in errors).
    pub fn parse(path: &Path, text: &[u8]) -> Result<Index> {
        let bad = |reason: String| FormatError::InvalidIndex {
            path: path.to_owned(),
            reason,
        };
        #[derive(Deserialize)]
        struct RawIndex {
            #[serde(default)]
            metadata: Option<serde_json::Value>,
            weight_map: Entries,
        }
        let raw: RawIndex = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
        let mut shards: Vec<String> = Vec::new();
        let mut map: Vec<(String, String)> = Vec::with_capacity(raw.weight_map.0.len());
        for (tensor, file) in raw.weight_map.0 {
            let serde_json::Value::String(file) = file else {
                return Err(bad(format!(
                    "weight_map[{tensor:?}] is not a file name: {file}"
                )));
            };
            let rel = Path::new(&file);
            if file.is_empty()
                || !rel
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
            {
                return Err(bad(format!(
                    "weight_map[{tensor:?}] = {file:?} is not a file name inside the \
                     checkpoint's directory"
                )));
            }
            shards.push(file.clone());
            map.push((tensor, file));
        }
        shards.sort();
        shards.dedup();
        let position: HashMap<&str, usize> = shards
            .iter()
            .enumerate()
            .map(|(i, f)| (f.as_str(), i))
            .collect();
        let weight_map = map
            .into_iter()
            .map(|(t, f)| (t, position[f.as_str()]))
            .collect();
        Ok(Index {
            shards,
            weight_map,
            metadata: raw.metadata,
        })
    }
}
