//! Every way a safetensors file or checkpoint is refused ([`FormatError`]), each naming the file
//! and, where one is at fault, the tensor.

use std::io;
use std::path::PathBuf;

use super::MAX_HEADER_LEN;
use crate::error::{os_kind, ErrorKind};

/// Every way a safetensors file or checkpoint can be refused. Each names the file, and the
/// tensor where one is at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file at the path is no longer the one whose header was read (renamed over, or
    /// deleted and made again).
    #[error(
        "{}: the file was replaced since its header was read (renamed over, or deleted and \
         made again); open it again",
        path.display()
    )]
    Replaced {
        /// The file.
        path: PathBuf,
    },
    /// The file or directory could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS's error.
        #[source]
        source: io::Error,
    },
    /// Fewer than 8 bytes: not even the header length is there.
    #[error(
        "{}: file of {file_size} bytes is too short for a safetensors header \
         (8-byte length, then JSON)",
        path.display()
    )]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its size.
        file_size: u64,
    },
    /// The header length field is larger than [`MAX_HEADER_LEN`].
    #[error(
        "{}: header length {header_len} is larger than the limit of {MAX_HEADER_LEN} bytes \
         (not a safetensors file?)",
        path.display()
    )]
    HeaderTooLarge {
        /// The file.
        path: PathBuf,
        /// The length field.
        header_len: u64,
    },
    /// The header length field points past the end of the file.
    #[error(
        "{}: header of {header_len} bytes goes past the end of the file ({file_size} bytes; \
         truncated file?)",
        path.display()
    )]
    HeaderPastEnd {
        /// The file.
        path: PathBuf,
        /// The length field.
        header_len: u64,
        /// The file's size.
        file_size: u64,
    },
    /// The header is not UTF-8 JSON, not an object, or has a key twice.
    #[error("{}: invalid header: {reason}", path.display())]
    InvalidHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `__metadata__` is not an object of strings.
    #[error("{}: invalid __metadata__ (an object of strings): {reason}", path.display())]
    InvalidMetadata {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's entry is malformed: a missing field, an unknown dtype, reversed offsets, a
    /// shape whose size overflows, or a byte length that does not match shape and dtype.
    #[error("{}: tensor {tensor:?}: {reason}", path.display())]
    InvalidTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's bytes end past the end of the file.
    #[error(
        "{}: tensor {tensor:?} (data bytes {start}..{end}) ends past the data area of \
         {data_len} bytes (truncated file?)",
        path.display()
    )]
    OutOfBounds {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its first byte in the data area.
        start: u64,
        /// One past its last byte in the data area.
        end: u64,
        /// Bytes in the file's data area.
        data_len: u64,
    },
    /// Two tensors share bytes.
    #[error(
        "{}: tensor {tensor:?} (data bytes {start}..{end}) overlaps tensor {previous:?}, \
         which ends at {previous_end}",
        path.display()
    )]
    Overlap {
        /// The file.
        path: PathBuf,
        /// The later tensor (by offset).
        tensor: String,
        /// Its first byte.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The tensor it overlaps.
        previous: String,
        /// Where that one ends.
        previous_end: u64,
    },
    /// Bytes of the data area that belong to no tensor (the format has none).
    #[error(
        "{}: data bytes {start}..{end} belong to no tensor{}",
        path.display(),
        match next { Some(t) => format!(" (before tensor {t:?})"), None => " (after the last tensor)".into() }
    )]
    Gap {
        /// The file.
        path: PathBuf,
        /// First byte of the gap in the data area.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The tensor after the gap; `None` for bytes after the last tensor.
        next: Option<String>,
    },
    /// A `*.safetensors.index.json` that is not an index.
    #[error("{}: invalid checkpoint index: {reason}", path.display())]
    InvalidIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The same tensor name in two files of one checkpoint.
    #[error("tensor {tensor:?} is in both {} and {}", first.display(), second.display())]
    DuplicateTensor {
        /// The tensor.
        tensor: String,
        /// The first file holding it.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
    /// The index maps a tensor to a file that does not hold it.
    #[error("{}: maps tensor {tensor:?} to {}, which does not hold it", index.display(), file.display())]
    MissingTensor {
        /// The index file.
        index: PathBuf,
        /// The tensor.
        tensor: String,
        /// The file named for it.
        file: PathBuf,
    },
    /// A directory without safetensors files, or with several index files.
    #[error("{}: {reason}", path.display())]
    NotACheckpoint {
        /// The directory.
        path: PathBuf,
        /// What is missing or ambiguous.
        reason: String,
    },
    /// A tensor name that the checkpoint does not hold.
    #[error("{}: no tensor named {tensor:?}", path.display())]
    UnknownTensor {
        /// The checkpoint (file, index or directory).
        path: PathBuf,
        /// The name asked for.
        tensor: String,
    },
    /// Patterns of a selection ([`super::Checkpoint::select`]) that match no tensor: a name the
    /// checkpoint does not hold, or a `prefix*` no tensor name starts with.
    #[error("{}: {}", path.display(), no_match(missing))]
    NoMatch {
        /// The checkpoint (file, index or directory).
        path: PathBuf,
        /// Every pattern that matched nothing, as given.
        missing: Vec<String>,
    },
    /// Plan options out of range.
    #[error("invalid plan options: {0}")]
    InvalidOptions(String),
    /// A sharding or a part of a tensor that cannot be read: an unknown split word, a
    /// dimension the tensor lacks, a rank not below the world size, indices past the shape.
    #[error("invalid sharding: {0}")]
    InvalidShard(String),
    /// A FIFO or a socket where a file was expected: refused before `open(2)` can wait for the
    /// FIFO's other end.
    #[error(
        "{} is {what}: safetensors files are read at offsets, which {what} does not have",
        path.display()
    )]
    NotSeekable {
        /// The file.
        path: PathBuf,
        /// What it is ("a FIFO", "a socket").
        what: &'static str,
    },
    /// A shard (or an index) of a directory whose real path, symlinks followed, lies outside
    /// the directory.
    #[error(
        "{}: {} resolves to {}, outside the checkpoint's directory {}; a checkpoint's files \
         must lie inside it (symlinks within it, or from a Hugging Face snapshot into its \
         repository's blobs folder, are followed)",
        checkpoint.display(),
        file.display(),
        real.display(),
        dir.display()
    )]
    OutsideCheckpoint {
        /// What was opened (directory or index).
        checkpoint: PathBuf,
        /// The file as the directory or the index names it.
        file: PathBuf,
        /// Where it leads.
        real: PathBuf,
        /// The checkpoint's directory (its real path).
        dir: PathBuf,
    },
}

impl FormatError {
    /// What kind of failure this is, in the core's one table ([`ErrorKind`]): an OS error by
    /// its errno (one without an errno is [`ErrorKind::Os`] 0), a name the checkpoint lacks
    /// [`ErrorKind::UnknownName`], plan options and shardings [`ErrorKind::BadArgument`], a
    /// FIFO or socket
    /// [`ErrorKind::NotSeekable`], and a file that breaks the format
    /// [`ErrorKind::InvalidData`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            FormatError::Io { source, .. } => {
                source.raw_os_error().map_or(ErrorKind::Os(0), os_kind)
            }
            FormatError::NotSeekable { .. } => ErrorKind::NotSeekable,
            FormatError::UnknownTensor { .. } | FormatError::NoMatch { .. } => {
                ErrorKind::UnknownName
            }
            FormatError::InvalidOptions(_) | FormatError::InvalidShard(_) => ErrorKind::BadArgument,
            FormatError::Replaced { .. }
            | FormatError::TooShort { .. }
            | FormatError::HeaderTooLarge { .. }
            | FormatError::HeaderPastEnd { .. }
            | FormatError::InvalidHeader { .. }
            | FormatError::InvalidMetadata { .. }
            | FormatError::InvalidTensor { .. }
            | FormatError::OutOfBounds { .. }
            | FormatError::Overlap { .. }
            | FormatError::Gap { .. }
            | FormatError::InvalidIndex { .. }
            | FormatError::DuplicateTensor { .. }
            | FormatError::MissingTensor { .. }
            | FormatError::NotACheckpoint { .. }
            | FormatError::OutsideCheckpoint { .. } => ErrorKind::InvalidData,
        }
    }

    /// One error of each variant (an OS error with an errno and one without), for the bindings'
    /// tests that check every variant maps as the error table says. Not for use outside tests.
    #[doc(hidden)]
    pub fn one_of_each() -> Vec<FormatError> {
        let path = || PathBuf::from("/ckpt/model.safetensors");
        let reason = || "a reason".to_owned();
        let tensor = || "w".to_owned();
        vec![
            FormatError::Replaced { path: path() },
            FormatError::Io {
                path: path(),
                source: io::Error::from_raw_os_error(libc::ENOENT),
            },
            FormatError::Io {
                path: path(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "no errno"),
            },
            FormatError::TooShort {
                path: path(),
                file_size: 3,
            },
            FormatError::HeaderTooLarge {
                path: path(),
                header_len: u64::MAX,
            },
            FormatError::HeaderPastEnd {
                path: path(),
                header_len: 100,
                file_size: 50,
            },
            FormatError::InvalidHeader {
                path: path(),
                reason: reason(),
            },
            FormatError::InvalidMetadata {
                path: path(),
                reason: reason(),
            },
            FormatError::InvalidTensor {
                path: path(),
                tensor: tensor(),
                reason: reason(),
            },
            FormatError::OutOfBounds {
                path: path(),
                tensor: tensor(),
                start: 0,
                end: 100,
                data_len: 10,
            },
            FormatError::Overlap {
                path: path(),
                tensor: tensor(),
                start: 4,
                end: 12,
                previous: "v".into(),
                previous_end: 8,
            },
            FormatError::Gap {
                path: path(),
                start: 8,
                end: 16,
                next: Some(tensor()),
            },
            FormatError::InvalidIndex {
                path: path(),
                reason: reason(),
            },
            FormatError::DuplicateTensor {
                tensor: tensor(),
                first: path(),
                second: path(),
            },
            FormatError::MissingTensor {
                index: path(),
                tensor: tensor(),
                file: path(),
            },
            FormatError::NotACheckpoint {
                path: path(),
                reason: reason(),
            },
            FormatError::UnknownTensor {
                path: path(),
                tensor: tensor(),
            },
            FormatError::NoMatch {
                path: path(),
                missing: vec!["x.*".into()],
            },
            FormatError::InvalidOptions(reason()),
            FormatError::InvalidShard(reason()),
            FormatError::NotSeekable {
                path: path(),
                what: "a FIFO",
            },
            FormatError::OutsideCheckpoint {
                checkpoint: path(),
                file: path(),
                real: path(),
                dir: path(),
            },
        ]
    }

    /// The file at fault, where one is: the file of a tensor or header, the index that names
    /// a missing tensor, the second file of a tensor held twice, the file outside a
    /// checkpoint's directory.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            FormatError::Replaced { path }
            | FormatError::Io { path, .. }
            | FormatError::TooShort { path, .. }
            | FormatError::HeaderTooLarge { path, .. }
            | FormatError::HeaderPastEnd { path, .. }
            | FormatError::InvalidHeader { path, .. }
            | FormatError::InvalidMetadata { path, .. }
            | FormatError::InvalidTensor { path, .. }
            | FormatError::OutOfBounds { path, .. }
            | FormatError::Overlap { path, .. }
            | FormatError::Gap { path, .. }
            | FormatError::InvalidIndex { path, .. }
            | FormatError::NotACheckpoint { path, .. }
            | FormatError::UnknownTensor { path, .. }
            | FormatError::NoMatch { path, .. }
            | FormatError::NotSeekable { path, .. } => Some(path),
            FormatError::DuplicateTensor { second, .. } => Some(second),
            FormatError::MissingTensor { index, .. } => Some(index),
            FormatError::OutsideCheckpoint { file, .. } => Some(file),
            FormatError::InvalidOptions(_) | FormatError::InvalidShard(_) => None,
        }
    }

    /// The OS error number, where there is one (a FIFO's is `ESPIPE`, what `pread` answers).
    pub fn errno(&self) -> Option<i32> {
        match self {
            FormatError::Io { source, .. } => source.raw_os_error(),
            FormatError::NotSeekable { .. } => Some(libc::ESPIPE),
            _ => None,
        }
    }
}

/// `no tensor named "a"; no tensor name starts with "b."` for the patterns `a`, `b.*`.
fn no_match(missing: &[String]) -> String {
    let parts: Vec<String> = missing
        .iter()
        .map(|p| match p.strip_suffix('*') {
            Some(prefix) => format!("no tensor name starts with {prefix:?}"),
            None => format!("no tensor named {p:?}"),
        })
        .collect();
    parts.join("; ")
}
