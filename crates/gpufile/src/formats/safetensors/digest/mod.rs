//! BLAKE3 digests of a checkpoint's tensors: computed from the files' bytes (read through the
//! engine, hashed on every core), kept in a sidecar manifest, and checked against it or against
//! a table a file carries in its own header.
//!
//! What is hashed: each tensor's bytes, exactly its `data_offsets` range of the data area, as
//! one BLAKE3 input (`blake3::hash` of those bytes; 64 lowercase hex digits). The header is not
//! hashed: it is validated whenever the file is opened, and a digest per tensor names the tensor
//! that differs.
//!
//! The manifest ([`Manifest`], JSON):
//! `{"format": "gpufile-blake3/1", "files": {"<file name>": {"size": N, "tensors": {"<name>":
//! "<64 hex>"}}}}`, file names relative to the checkpoint's directory. A file may carry the
//! same per-file table ([`FileDigests`], `size` optional) in its header's `__metadata__` under
//! [`METADATA_KEY`], as a JSON string (metadata values are strings).
//!
//! How to use: [`digest_files`] a [`Checkpoint`](super::Checkpoint), collect a [`Manifest`], [`write_manifest`];
//! later [`read_manifest`] (or [`embedded`]) and [`compare`] each file's digests with what
//! [`digest_files`] computes now.

mod hash;
mod read;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{FormatError, Header, LoadError};

pub use hash::{hash, hash_ranges, LEAF};
pub use read::{digest_files, FileDigest};

/// The manifest's `format`.
pub const MANIFEST_FORMAT: &str = "gpufile-blake3/1";

/// The `__metadata__` key of a file's own digest table (a JSON string of a [`FileDigests`]).
pub const METADATA_KEY: &str = "gpufile.blake3";

/// The manifest's name in a checkpoint directory.
pub const DIR_MANIFEST_NAME: &str = "gpufile.blake3.json";

/// What follows a file's name for its manifest beside it (`model.safetensors.blake3.json`).
pub const FILE_MANIFEST_SUFFIX: &str = ".blake3.json";

/// Largest manifest read (as an index).
pub const MAX_MANIFEST_LEN: u64 = super::MAX_INDEX_LEN;

/// One file's digests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigests {
    /// The file's size in bytes (always in a manifest; a table in the file's own header may
    /// leave it out, as the header's length depends on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Each tensor's digest, 64 lowercase hex digits, by name.
    pub tensors: BTreeMap<String, String>,
}

/// A checkpoint's digests, file by file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// By file name (relative to the checkpoint's directory).
    pub files: BTreeMap<String, FileDigests>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            format: MANIFEST_FORMAT.into(),
            files: BTreeMap::new(),
        }
    }
}

/// Why digests could not be made or checked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The checkpoint or a file of it.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The engine (a read, the manifest's write).
    #[error(transparent)]
    Io(#[from] crate::Error),
    /// A manifest (or a file's digest table) that is not one.
    #[error("{}: not a gpufile digest manifest: {why}", path.display())]
    BadManifest {
        /// The manifest, or the file whose `__metadata__` holds the table.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A file shorter than its header says, read as it was hashed.
    #[error("{}: read {read} bytes of its data, expected {expected}", path.display())]
    Short {
        /// The file.
        path: PathBuf,
        /// Bytes read.
        read: u64,
        /// Bytes its header describes.
        expected: u64,
    },
}

impl From<LoadError> for DigestError {
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::Format(e) => DigestError::Format(e),
            LoadError::Io(e) => DigestError::Io(e),
        }
    }
}

/// The name a checkpoint's file has in a manifest: its file name (a checkpoint's files lie in
/// one directory).
pub fn file_key(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The manifest's default path for the checkpoint `path` (a file: `PATH.blake3.json` beside
/// it; a directory, or an index: [`DIR_MANIFEST_NAME`] in it).
pub fn default_manifest_path(path: &Path) -> PathBuf {
    let is_index = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".json"));
    if path.is_dir() {
        path.join(DIR_MANIFEST_NAME)
    } else if is_index {
        path.with_file_name(DIR_MANIFEST_NAME)
    } else {
        let mut name = path.as_os_str().to_owned();
        name.push(FILE_MANIFEST_SUFFIX);
        PathBuf::from(name)
    }
}

/// A file's digests as a manifest keeps them.
pub fn file_digests(header: &Header, digest: &FileDigest) -> FileDigests {
    FileDigests {
        size: Some(header.file_size),
        tensors: digest
            .tensors
            .iter()
            .map(|(n, h)| (n.clone(), h.to_hex().to_string()))
            .collect(),
    }
}

/// Parses a manifest's text (`path` names it in errors).
pub fn parse_manifest(path: &Path, text: &[u8]) -> Result<Manifest, DigestError> {
    let bad = |why: String| DigestError::BadManifest {
        path: path.to_owned(),
        why,
    };
    let m: Manifest = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
    if m.format != MANIFEST_FORMAT {
        return Err(bad(format!(
            "format {:?}, expected {MANIFEST_FORMAT:?}",
            m.format
        )));
    }
    Ok(m)
}

/// Reads the manifest at `path`; `Ok(None)` where no file has that name.
pub fn read_manifest(path: &Path) -> Result<Option<Manifest>, DigestError> {
    let io = |source| FormatError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        other => other.map_err(io)?,
    };
    if meta.len() > MAX_MANIFEST_LEN {
        return Err(DigestError::BadManifest {
            path: path.to_owned(),
            why: format!("{} bytes, more than {MAX_MANIFEST_LEN}", meta.len()),
        });
    }
    let text = std::fs::read(path).map_err(io)?;
    parse_manifest(path, &text).map(Some)
}

/// The digest table a file carries in its header's `__metadata__` ([`METADATA_KEY`]), if any.
pub fn embedded(header: &Header) -> Result<Option<FileDigests>, DigestError> {
    let Some(text) = header.metadata.as_ref().and_then(|m| m.get(METADATA_KEY)) else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| DigestError::BadManifest {
            path: header.path.clone(),
            why: format!("__metadata__[{METADATA_KEY:?}]: {e}"),
        })
}

/// Writes `manifest` to `path`, whole or not at all (a temporary beside it, synced, renamed
/// over it). An existing `path` is refused (`EEXIST`) unless `overwrite`.
pub fn write_manifest(path: &Path, manifest: &Manifest, overwrite: bool) -> crate::Result<()> {
    if !overwrite && std::fs::symlink_metadata(path).is_ok() {
        let exists = std::io::Error::from_raw_os_error(libc::EEXIST);
        return Err(crate::Error::os(crate::error::Op::Open, path, 0, 0, exists));
    }
    let mut text = serde_json::to_vec_pretty(manifest)
        .map_err(|e| crate::Error::InvalidArgument(e.to_string()))?;
    text.push(b'\n');
    let mut pending = crate::publish::PendingFile::create(path)?;
    pending.handle().write(&text, 0, None)?;
    pending.publish(true, false)
}

/// One tensor whose digest differs from the one expected (or has none, or is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The file.
    pub file: PathBuf,
    /// The tensor.
    pub tensor: String,
    /// The digest expected; `None` where the table has none for this tensor.
    pub expected: Option<String>,
    /// The digest computed; `None` where the file has no such tensor.
    pub computed: Option<String>,
}

/// Each tensor of `digest` against `expected` (and the file's size, where the table has one):
/// every tensor whose digest differs, that the table lacks, or that the table names and the
/// file lacks, in the file's order then the table's.
pub fn compare(header: &Header, digest: &FileDigest, expected: &FileDigests) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (name, h) in &digest.tensors {
        seen.insert(name.as_str());
        let computed = h.to_hex().to_string();
        let want = expected.tensors.get(name);
        if want.map(|w| w.to_ascii_lowercase()) != Some(computed.clone()) {
            out.push(Mismatch {
                file: header.path.clone(),
                tensor: name.clone(),
                expected: want.cloned(),
                computed: Some(computed),
            });
        }
    }
    for (name, want) in &expected.tensors {
        if !seen.contains(name.as_str()) {
            out.push(Mismatch {
                file: header.path.clone(),
                tensor: name.clone(),
                expected: Some(want.clone()),
                computed: None,
            });
        }
    }
    out
}
