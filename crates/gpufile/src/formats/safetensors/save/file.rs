//! Saving one safetensors file, crash-safe: what `gpufile.safetensors.save_file`,
//! `gpufile_save_file` (C) and `gpufile::save_file` (C++) do for a local path.
//!
//! The file is written under a temporary name beside `path` ([`PendingFile`]): its header,
//! then every tensor's bytes as one batch from the tensors' own memory (host or device,
//! [`submit_files`]); then published by a rename over `path`. With `durable`, the disk writes
//! the pages as they come ([`PendingFile::write_behind`]) and file and directory are synced
//! around the rename. Until the rename `path` holds what it held; on any failure the temporary
//! is removed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::publish::PendingFile;
use crate::{Engine, Settings};

use super::write::{submit_files, wait_stoppable, FileToWrite, SaveError, TensorRow};

/// How to save a file.
#[derive(Clone, Copy, Default)]
pub struct FileOptions<'a> {
    /// The file's `__metadata__` (none: no `__metadata__` entry).
    pub metadata: Option<&'a BTreeMap<String, String>>,
    /// Sync the file and its directory around the rename (survives a power loss).
    pub durable: bool,
    /// Asked every [`super::write::STOP_POLL`] while the bytes are written: `true` cancels
    /// the save ([`crate::Error::Cancelled`], nothing published). How a binding lets Ctrl-C
    /// stop a long save.
    pub stop: Option<&'a (dyn Fn() -> bool + Sync)>,
}

impl std::fmt::Debug for FileOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileOptions")
            .field("metadata", &self.metadata)
            .field("durable", &self.durable)
            .field("stop", &self.stop.map(|_| "…"))
            .finish()
    }
}

/// Saves `tensors` as one safetensors file at `path` (see the module's header), written by
/// `engine` with `settings`; the file's size. A refused tensor (its size, its dtype, a name
/// given twice) is [`SaveError::Format`] before any byte is written.
///
/// # Safety
/// Every row's buffer must stay valid, and unchanged, until the call returns.
pub unsafe fn save_file(
    path: &Path,
    tensors: &[TensorRow],
    options: &FileOptions<'_>,
    engine: &Engine,
    settings: &Settings,
) -> Result<u64, SaveError> {
    let mut pending = PendingFile::create(path)?;
    let written = (|| -> Result<u64, SaveError> {
        let behind = options.durable.then(|| pending.write_behind());
        let file = FileToWrite {
            file: pending.handle(),
            tensors: tensors.iter().collect(),
            metadata: options.metadata,
        };
        // SAFETY: the caller keeps the buffers valid until this call returns, after the wait.
        let (sizes, fut) = unsafe { submit_files(engine, settings, &[file]) }?;
        wait_stoppable(&fut, options.stop)?;
        // The write-behind ends before the final sync, which then finds little left.
        drop(behind);
        pending.publish(options.durable, false)?;
        Ok(sizes[0])
    })();
    if written.is_err() {
        let _ = pending.discard();
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::safetensors::{Dtype, FormatError, Header};
    use crate::Error;

    fn engine() -> (std::sync::Arc<Engine>, std::sync::Arc<Settings>) {
        let engine = Engine::global().expect("the engine");
        let settings = engine.shared_settings();
        (engine, settings)
    }

    #[test]
    fn save_file_writes_header_and_bytes_and_leaves_only_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let a: Vec<u8> = (0..64u8).collect();
        let b = vec![9u8; 3];
        let rows = [
            TensorRow::host("a", Dtype::F32, vec![4, 4], &a),
            TensorRow::host("b", Dtype::U8, vec![3], &b),
            TensorRow::host("empty", Dtype::F16, vec![0, 5], &[]),
        ];
        let meta = BTreeMap::from([("format".to_owned(), "pt".to_owned())]);
        let options = FileOptions {
            metadata: Some(&meta),
            durable: true,
            stop: None,
        };
        let (engine, settings) = engine();
        // SAFETY: the rows borrow `a` and `b`, alive until the call returns.
        let size = unsafe { save_file(&path, &rows, &options, &engine, &settings) }.unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, size);
        let h = Header::from_bytes(&path, &bytes).unwrap();
        assert_eq!(h.metadata.as_ref(), Some(&meta));
        for (name, want) in [("a", &a[..]), ("b", &b[..])] {
            let t = h.get(name).unwrap();
            let at = (h.data_start + t.start) as usize;
            assert_eq!(&bytes[at..at + want.len()], want, "{name}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_refused_tensor_or_a_stop_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        std::fs::write(&path, b"old").unwrap();
        let data = vec![1u8; 10];
        let (engine, settings) = engine();
        let bad = [TensorRow::host("w", Dtype::F32, vec![3], &data)];
        // SAFETY: the row borrows `data`, alive until the call returns.
        let e = unsafe { save_file(&path, &bad, &FileOptions::default(), &engine, &settings) }
            .unwrap_err();
        assert!(
            matches!(e, SaveError::Format(FormatError::InvalidTensor { .. })),
            "{e:?}"
        );
        assert!(e.to_string().contains("needs 12 bytes"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let big = vec![7u8; 8 << 20];
        let rows = [TensorRow::host("w", Dtype::U8, vec![8 << 20], &big)];
        let stop = || true;
        let options = FileOptions {
            stop: Some(&stop),
            ..FileOptions::default()
        };
        // SAFETY: the row borrows `big`, alive until the call returns.
        // A batch that ends before the first look at `stop` publishes; else nothing does.
        match unsafe { save_file(&path, &rows, &options, &engine, &settings) } {
            Err(SaveError::Io(Error::Cancelled)) => {
                assert_eq!(std::fs::read(&path).unwrap(), b"old")
            }
            Ok(size) => assert_eq!(std::fs::metadata(&path).unwrap().len(), size),
            Err(e) => panic!("{e:?}"),
        }
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["m.safetensors"]);
    }
}
