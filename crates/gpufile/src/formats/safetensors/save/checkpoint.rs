//! Saving a Hugging Face sharded checkpoint into a local directory: the shards as
//! `huggingface_hub.split_torch_state_dict_into_shards` fills them, named
//! `model-0000k-of-0000n.safetensors` (or one `model.safetensors`), the index
//! `model.safetensors.index.json` byte for byte as Python's `json.dumps(index, indent=2,
//! sort_keys=True) + "\n"` writes it, and the commit that leaves the directory holding a whole
//! checkpoint, the old or the new one, at every moment (a kill -9 included).
//!
//! How it goes ([`save_checkpoint`]): every shard's header is built (a refused tensor touches
//! no file); the directory is created where missing; temporaries that killed saves left are
//! removed (under the directory's [`DirLock`]); every shard is written under a temporary name
//! (one batch, [`submit_files`]) and synced; then, under the lock, the commit, in the order
//! `commit` gives (each instant leaves a directory that loads as the old or the new checkpoint).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::error::Op;
use crate::publish::{sync_dir, DirLock, PendingFile, WriteBehind};
use crate::{Engine, Error, Settings};

use super::commit::commit;
pub use super::index::{
    remove_stale_checkpoint_temporaries, shard_name, CheckpointIndex, MetaValue, INDEX_NAME,
    SINGLE_NAME,
};
use super::write::{submit_files, wait_stoppable, FileToWrite, SaveError, TensorRow};

/// `max_shard_size` as text, read by the one size parser every size in gpufile goes through
/// ([`crate::config::parse_size`]: the environment variables, `defaults.set`, the CLI's
/// options): bytes (`"1000000"`), a decimal unit as huggingface_hub reads it (`"5GB"`,
/// `"500MB"`: powers of 1000), a binary one (`"5GiB"`, `"5 GiB"`, `"16M"`); the unit in any
/// case. 0 is refused. The error is the message Python's `ValueError` carries.
pub fn parse_size(size: &str) -> Result<u64, String> {
    match crate::config::parse_size(size) {
        Ok(0) => Err(format!("max_shard_size must be positive, got {size:?}")),
        Ok(n) => Ok(n),
        Err(why) => Err(format!("max_shard_size {size:?}: {why}")),
    }
}

/// The shards, as `split_torch_state_dict_into_shards` fills them: indices into `sizes`, in
/// order; a new shard when the next tensor would tip the current one over `max_shard_size`; a
/// tensor larger than the limit alone in a shard of its own, appended where it is met. No
/// tensor at all is one empty shard.
pub fn split(sizes: &[u64], max_shard_size: u64) -> Vec<Vec<usize>> {
    let mut shards = Vec::new();
    let mut current = Vec::new();
    let mut current_size = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        if size > max_shard_size {
            shards.push(vec![i]);
            continue;
        }
        if current_size.saturating_add(size) > max_shard_size {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current.push(i);
        current_size += size;
    }
    if !current.is_empty() || shards.is_empty() {
        shards.push(current);
    }
    shards
}

/// How to save a checkpoint.
#[derive(Clone)]
pub struct SaveOptions<'a> {
    /// The largest shard in bytes (see [`parse_size`]).
    pub max_shard_size: u64,
    /// The caller's metadata: in the index's `metadata`, and in the file of a single shard.
    pub metadata: Option<&'a BTreeMap<String, String>>,
    /// Sync files and directory before and after each rename (survives a power loss).
    pub durable: bool,
    /// Each tensor's size for sharding, in the order of the tensors (huggingface_hub counts a
    /// tensor's whole storage); `None`: each buffer's length.
    pub sizes: Option<&'a [u64]>,
    /// Asked every `STOP_POLL` while the shards are written: `true` cancels the save (its
    /// requests are cancelled and waited for, nothing is published, the error is
    /// [`Error::Cancelled`]). How a binding lets Ctrl-C stop a long save.
    pub stop: Option<&'a (dyn Fn() -> bool + Sync)>,
}

impl std::fmt::Debug for SaveOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaveOptions")
            .field("max_shard_size", &self.max_shard_size)
            .field("metadata", &self.metadata)
            .field("durable", &self.durable)
            .field("sizes", &self.sizes)
            .field("stop", &self.stop.map(|_| "…"))
            .finish()
    }
}

/// A checkpoint's files before any is written: the shards as `split` fills them, their
/// names, the metadata of each file and the index. Where the checkpoint goes (a directory, an
/// object store's prefix) is the caller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointLayout {
    /// Each shard's tensors: indices into the rows, in order.
    pub shards: Vec<Vec<usize>>,
    /// Each shard's file name: `SINGLE_NAME` for one shard, else `shard_name`s.
    pub names: Vec<String>,
    /// Every file's `__metadata__`: `format: pt`, and for a single file the caller's metadata.
    pub file_metadata: BTreeMap<String, String>,
    /// The index (for one shard, what it would say: no index file is written then).
    pub index: CheckpointIndex,
}

/// The layout of a checkpoint of `tensors` under `options` (its shard size, metadata and
/// sizes); `what` (a directory, a URL) names the checkpoint in errors. Refused: sizes that are
/// not one a tensor, a name given twice, `max_shard_size` 0.
pub fn layout(
    what: &str,
    tensors: &[TensorRow],
    options: &SaveOptions<'_>,
) -> Result<CheckpointLayout, SaveError> {
    let sizes: Vec<u64> = match options.sizes {
        Some(s) if s.len() != tensors.len() => {
            return Err(Error::InvalidArgument(format!(
                "{what}: {} sizes for {} tensors",
                s.len(),
                tensors.len()
            ))
            .into())
        }
        Some(s) => s.to_vec(),
        None => tensors.iter().map(|t| t.buffer.len() as u64).collect(),
    };
    let mut seen = HashSet::with_capacity(tensors.len());
    if let Some(t) = tensors.iter().find(|t| !seen.insert(t.name.as_str())) {
        return Err(
            Error::InvalidArgument(format!("{what}: tensor {:?} is given twice", t.name)).into(),
        );
    }
    if options.max_shard_size == 0 {
        return Err(Error::InvalidArgument("max_shard_size must be positive, got 0".into()).into());
    }
    let shards = split(&sizes, options.max_shard_size);
    let n = shards.len();
    let names: Vec<String> = match n {
        1 => vec![SINGLE_NAME.to_owned()],
        _ => (0..n).map(|k| shard_name(k, n)).collect(),
    };
    let empty = BTreeMap::new();
    let meta = options.metadata.unwrap_or(&empty);
    let mut file_metadata = BTreeMap::from([("format".to_owned(), "pt".to_owned())]);
    if n == 1 {
        file_metadata.extend(meta.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut index_meta = BTreeMap::from([(
        "total_size".to_owned(),
        MetaValue::Int(sizes.iter().fold(0u64, |a, &s| a.saturating_add(s))),
    )]);
    index_meta.extend(
        meta.iter()
            .map(|(k, v)| (k.clone(), MetaValue::Str(v.clone()))),
    );
    let weight_map = shards
        .iter()
        .zip(&names)
        .flat_map(|(keys, file)| {
            keys.iter()
                .map(|&i| (tensors[i].name.clone(), file.clone()))
        })
        .collect();
    Ok(CheckpointLayout {
        shards,
        names,
        file_metadata,
        index: CheckpointIndex {
            metadata: index_meta,
            weight_map,
        },
    })
}

/// Saves `tensors` as a Hugging Face checkpoint in `dir` (see the module's header): shards as
/// `split` makes them, each written by `engine` with `settings` from the tensors' own memory
/// (host or device). The index (also for one shard, where no index file is written). On an
/// error every temporary is gone and the directory holds what it held (a refused tensor or
/// argument creates no directory), or, on [`SaveError::Committed`], loads as the new checkpoint.
///
/// # Safety
/// Every row's buffer must stay valid, and unchanged, until the call returns.
pub unsafe fn save_checkpoint(
    dir: &Path,
    tensors: &[TensorRow],
    options: &SaveOptions<'_>,
    engine: &Engine,
    settings: &Settings,
) -> Result<CheckpointIndex, SaveError> {
    let CheckpointLayout {
        shards,
        names,
        file_metadata: file_meta,
        index,
    } = layout(&dir.display().to_string(), tensors, options)?;
    let n = shards.len();
    // Every shard's header is built before anything is created: a refused tensor leaves the
    // file system as it was, missing directories included.
    for (keys, name) in shards.iter().zip(&names) {
        let specs: Vec<_> = keys.iter().map(|&i| tensors[i].spec()).collect();
        super::plan_save(&dir.join(name), &specs, Some(&file_meta))?;
    }
    if !dir.is_dir() {
        let parent = std::path::absolute(dir)
            .ok()
            .and_then(|p| p.parent().map(Path::to_owned))
            .unwrap_or_else(|| PathBuf::from("."));
        std::fs::create_dir_all(dir).map_err(|e| Error::os(Op::Create, &parent, 0, 0, e))?;
        if options.durable {
            sync_dir(&parent)?;
        }
    }
    {
        // Room on the disk before this save writes.
        let _lock = DirLock::acquire(dir)?;
        remove_stale_checkpoint_temporaries(dir)?;
    }
    let mut pending: Vec<PendingFile> = Vec::with_capacity(n);
    let result = (|| -> Result<(), SaveError> {
        // Every shard whole and synced under its temporary name before anything is published:
        // until then the directory holds the previous checkpoint, untouched.
        let mut behind: Vec<WriteBehind> = Vec::new();
        for name in &names {
            let p = PendingFile::create(dir.join(name))?;
            if options.durable {
                behind.push(p.write_behind());
            }
            pending.push(p);
        }
        let files: Vec<FileToWrite<'_>> = pending
            .iter()
            .zip(&shards)
            .map(|(p, keys)| FileToWrite {
                file: p.handle(),
                tensors: keys.iter().map(|&i| &tensors[i]).collect(),
                metadata: Some(&file_meta),
            })
            .collect();
        // SAFETY: the caller keeps the buffers valid until this call returns, after the wait.
        let (_, fut) = unsafe { submit_files(engine, settings, &files) }?;
        wait_stoppable(&fut, options.stop)?;
        drop(behind);
        if options.durable {
            for p in &pending {
                p.sync()?;
            }
        }
        // The commit and the removal of what the replaced checkpoint had, one save at a time
        // (threads, processes, hosts sharing the directory): a save never removes files that a
        // commit after its own published.
        let _lock = DirLock::acquire(dir)?;
        commit(dir, &names, &mut pending, &index, options.durable)?;
        Ok(())
    })();
    match result {
        Ok(()) => Ok(index),
        // The published index may name the temporaries: they stay.
        Err(e @ SaveError::Committed(_)) => {
            pending.into_iter().for_each(PendingFile::leave);
            Err(e)
        }
        Err(e) => {
            for p in &mut pending {
                let _ = p.discard();
            }
            Err(e)
        }
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
