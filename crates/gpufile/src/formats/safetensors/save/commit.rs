//! The commit of a checkpoint whose shards are written and synced under temporary names: the
//! order of its renames and removals, so that at every instant the directory loads as one whole
//! checkpoint, the old or the new, under the loader's rule (`Checkpoint::open` of a directory:
//! its `model.safetensors.index.json` where there is one, else every `*.safetensors` in it).
//!
//! One file replacing whatever was there:
//! 1. it is renamed to `model.safetensors`. Where an index is there, the index still names the
//!    old shards and the directory loads as the old checkpoint; without one, this is the commit;
//! 2. where an index is there, an index naming `model.safetensors` for every tensor replaces it
//!    (the commit);
//! 3. the old shards go (no index names them), then the index, leaving the one file. A shard
//!    that cannot be removed keeps the index, which goes on naming the new file.
//!
//! Several shards:
//! 1. an index naming the shards' temporaries (each complete) replaces the old index, or is
//!    the first (the commit; a `model.safetensors` beside an index is not read);
//! 2. each shard takes its final name, keeping its temporary name; the directory is synced;
//! 3. the final index, naming the final names, replaces the first;
//! 4. the temporaries, an old `model.safetensors` and shards of another count go.
//!
//! A step that fails before the commit leaves the old checkpoint, and is the save's error; one
//! that fails after it is [`SaveError::Committed`]: the directory loads as the new checkpoint
//! (its index may name the temporaries, kept until a later save replaces that index). What
//! cannot be removed of the old checkpoint (another user's file in a sticky directory) is said in
//! a notice: the new checkpoint loads all the same.

use std::path::Path;

use crate::error::Op;
use crate::publish::{remove_file, sync_dir, PendingFile};
use crate::{Error, Result};

use super::index::{
    is_shard_name, remove_stale_checkpoint_temporaries, CheckpointIndex, INDEX_NAME, SINGLE_NAME,
};
use super::write::SaveError;

/// Publishes a checkpoint whose shards (`pending`, named `names`) are written and synced, then
/// removes what the checkpoint it replaces had (see the module's header). Call it holding the
/// directory's lock. On [`SaveError::Committed`] the temporaries are the published index's:
/// the caller must leave them.
pub(super) fn commit(
    dir: &Path,
    names: &[String],
    pending: &mut [PendingFile],
    index: &CheckpointIndex,
    durable: bool,
) -> std::result::Result<(), SaveError> {
    let index_path = dir.join(INDEX_NAME);
    if let [single] = pending {
        let had_index = std::fs::symlink_metadata(&index_path).is_ok();
        // Without an index, this rename is the commit.
        publish(single, durable, false, !had_index)?;
        if had_index {
            publish_text(&index_path, &index.to_json(), durable)?;
        }
        let left = remove_stale_files(dir, is_shard_name)?;
        if left == 0 {
            remove_or_say(&index_path);
        }
    } else {
        let temp_of = |name: &str| -> String {
            let k = names.iter().position(|n| n == name).unwrap_or(0);
            pending[k]
                .temp_path()
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let first = CheckpointIndex {
            metadata: index.metadata.clone(),
            weight_map: index
                .weight_map
                .iter()
                .map(|(k, f)| (k.clone(), temp_of(f)))
                .collect(),
        };
        publish_text(&index_path, &first.to_json(), durable)?;
        let mut finish = || -> Result<()> {
            for p in pending.iter_mut() {
                p.publish(false, true)?;
            }
            if durable {
                sync_dir(dir)?;
            }
            publish_text(&index_path, &index.to_json(), durable).map_err(SaveError::into_error)
        };
        finish().map_err(SaveError::Committed)?;
        for p in pending.iter_mut() {
            if let Err(e) = p.discard() {
                say_left(p.temp_path(), &e);
            }
        }
        remove_or_say(&dir.join(SINGLE_NAME));
        remove_stale_files(dir, |n| is_shard_name(n) && !names.iter().any(|m| m == n))?;
    }
    // Temporaries of a killed save that its index named (kept until now) are no one's now.
    remove_stale_checkpoint_temporaries(dir).map_err(SaveError::Committed)?;
    if durable {
        sync_dir(dir).map_err(SaveError::Committed)?;
    }
    Ok(())
}

/// Removes the files of `dir` whose names `stale` picks; how many could not be removed (each
/// said in a notice).
fn remove_stale_files(
    dir: &Path,
    stale: impl Fn(&str) -> bool,
) -> std::result::Result<usize, SaveError> {
    let listed = std::fs::read_dir(dir)
        .and_then(|entries| entries.collect::<std::io::Result<Vec<_>>>())
        .map_err(|e| SaveError::Committed(Error::os(Op::Open, dir, 0, 0, e)))?;
    let mut left = 0;
    for entry in listed {
        let name = entry.file_name();
        if name.to_str().is_some_and(&stale) && !remove_or_say(&dir.join(&name)) {
            left += 1;
        }
    }
    Ok(left)
}

/// Removes `path` (gone already is fine); where it cannot be, says so in a notice. Whether
/// the name is gone.
fn remove_or_say(path: &Path) -> bool {
    match remove_file(path) {
        Ok(()) => true,
        Err(e) => {
            say_left(path, &e);
            false
        }
    }
}

fn say_left(path: &Path, e: &Error) {
    crate::observe::notice(
        "checkpoint-leftover",
        format!(
            "{} is left in place ({e}): the checkpoint saved beside it loads without it",
            path.display()
        ),
    );
}

/// [`PendingFile::publish`]; where `is_commit`, a failure after the rename (the directory's
/// `fsync`) is [`SaveError::Committed`].
fn publish(
    p: &mut PendingFile,
    durable: bool,
    keep_temp: bool,
    is_commit: bool,
) -> std::result::Result<(), SaveError> {
    p.publish(durable, keep_temp)
        .map_err(|e| match is_commit && p.published() {
            true => SaveError::Committed(e),
            false => SaveError::Io(e),
        })
}

/// Publishes `text` at `path` whole (a temporary renamed over it): the commit of the index
/// ([`SaveError::Committed`] where only the directory's `fsync` after the rename failed).
fn publish_text(path: &Path, text: &str, durable: bool) -> std::result::Result<(), SaveError> {
    let mut pending = PendingFile::create(path)?;
    let written = pending.handle().write(text.as_bytes(), 0, None);
    let published = match written {
        Ok(_) => publish(&mut pending, durable, false, true),
        Err(e) => Err(e.into()),
    };
    if published.is_err() {
        let _ = pending.discard();
    }
    published
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
