//! The safetensors format: header parsing, validation, and a read plan of byte ranges.
//!
//! A safetensors file is an 8-byte little-endian header length `n`, `n` bytes of JSON, then the
//! data area. The JSON maps tensor names to `{"dtype", "shape", "data_offsets": [begin, end]}`
//! (offsets relative to the data area) and may hold `"__metadata__"`, an object of strings.
//!
//! How to use:
//! 1. [`Checkpoint::open`] a `.safetensors` file, a Hugging Face sharded checkpoint's
//!    `model.safetensors.index.json`, or a directory (its index if it has one, else every
//!    `*.safetensors` file in it). Every header is read and validated before any data is read.
//! 2. [`Checkpoint::plan`] the tensors you want: the byte ranges to read (adjacent tensors of a
//!    file coalesced into one range) and where each tensor lands in one destination allocation.
//! 3. Read every range (all files at once) into that allocation; tensors are views into it.
//!
//! Validation follows the `safetensors` crate (the reference reader) so that a file gpufile
//! accepts, it accepts too, and the other way round: the header is at most
//! [`MAX_HEADER_LEN`] bytes, tensors tile the data area exactly (sorted by offset, no gap, no
//! overlap, the last one ending at the end of the file), and every tensor's byte length is its
//! element count times its dtype's size. The order of the tensors in the JSON does not matter
//! (the reference sorts them by offset too). gpufile is stricter in one place: a key that appears
//! twice in the header is an error (JSON parsers disagree on which one wins).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// Largest header gpufile reads, as in the `safetensors` crate (100 MB): a larger length field
/// is not a safetensors file, and would size an allocation by untrusted input.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Largest `*.safetensors.index.json` gpufile reads (the same bound as a header).
pub const MAX_INDEX_LEN: u64 = 100_000_000;

/// The index file name of a Hugging Face sharded checkpoint.
pub const INDEX_FILE_NAME: &str = "model.safetensors.index.json";

/// The alignment of each read range's start in the destination allocation by default: 256
/// bytes, what `cudaMalloc` guarantees, so tensors are as aligned as their own allocation
/// would be.
pub const DEFAULT_ALIGN: u64 = 256;

/// Result alias of this module.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Element types of the safetensors format (the names in the header), as the `safetensors`
/// crate lists them.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// Boolean, one byte.
    BOOL,
    /// MX FP4 (E2M1), 4 bits; two per byte.
    F4,
    /// MX FP6 (E2M3), 6 bits.
    F6_E2M3,
    /// MX FP6 (E3M2), 6 bits.
    F6_E3M2,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// FP8 E5M2.
    F8_E5M2,
    /// FP8 E4M3 (the `fn` variant: no infinities).
    F8_E4M3,
    /// MX scale, 8-bit exponent.
    F8_E8M0,
    /// FP8 E4M3, finite with unsigned zero.
    F8_E4M3FNUZ,
    /// FP8 E5M2, finite with unsigned zero.
    F8_E5M2FNUZ,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single precision.
    F32,
    /// Complex of two F32.
    C64,
    /// IEEE double precision.
    F64,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

impl Dtype {
    /// Every dtype, in the order of the `safetensors` crate.
    pub const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// Size of one element in bits (4 and 6 for the sub-byte MX types).
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// The alignment a view of this dtype needs in memory: its element size, at least 1.
    pub fn align(self) -> u64 {
        (self.bits() / 8).max(1)
    }

    /// The name in a safetensors header ("BF16").
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// The dtype of a header name; names are case-sensitive, as in the reference reader.
    pub fn parse(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
    /// Plan options out of range.
    #[error("invalid plan options: {0}")]
    InvalidOptions(String),
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
    /// The OS error number, where there is one (a FIFO's is `ESPIPE`, what `pread` answers).
    pub fn errno(&self) -> Option<i32> {
        match self {
            FormatError::Io { source, .. } => source.raw_os_error(),
            FormatError::NotSeekable { .. } => Some(libc::ESPIPE),
            _ => None,
        }
    }
}

/// Opens `real` for reading without blocking on a FIFO (see `posix::open_file`); errors name
/// it `path`.
fn open_for_reading(path: &Path, real: &Path) -> Result<(File, std::fs::Metadata)> {
    crate::posix::open_file(std::fs::OpenOptions::new().read(true), real).map_err(|e| match e {
        crate::Error::NotSeekable { what, .. } => FormatError::NotSeekable {
            path: path.to_owned(),
            what,
        },
        crate::Error::Os { errno, .. } => FormatError::Io {
            path: path.to_owned(),
            source: io::Error::from_raw_os_error(errno),
        },
        other => FormatError::Io {
            path: path.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
        },
    })
}

/// Where a checkpoint directory's files may lie, by real path: the directory itself and, for a
/// Hugging Face hub snapshot (`<repo>/snapshots/<revision>/`, whose files are symlinks to
/// `../../blobs/<hash>`), that repository's `blobs` folder. Symlinks are followed as long as
/// they lead there; a file that leads anywhere else (`/etc/passwd`, another user's data, a
/// folder linked from outside) is refused before it is opened.
struct Containment {
    /// The directory, as the caller named it (for errors).
    checkpoint: PathBuf,
    /// Its real path.
    dir: PathBuf,
    /// The real paths files may lie under: `dir`, and a snapshot's `blobs` folder.
    roots: Vec<PathBuf>,
}

impl Containment {
    fn new(checkpoint: &Path, dir: &Path) -> Result<Containment> {
        let dir = std::fs::canonicalize(dir).map_err(|source| FormatError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let mut roots = vec![dir.clone()];
        let snapshots = dir
            .parent()
            .filter(|p| p.file_name() == Some("snapshots".as_ref()));
        if let Some(repo) = snapshots.and_then(Path::parent) {
            if let Ok(blobs) = std::fs::canonicalize(repo.join("blobs")) {
                if blobs.is_dir() {
                    roots.push(blobs);
                }
            }
        }
        Ok(Containment {
            checkpoint: checkpoint.to_owned(),
            dir,
            roots,
        })
    }

    /// The real path of `file`, a file of the checkpoint, or why it may not be read.
    fn check(&self, file: &Path) -> Result<PathBuf> {
        let real = std::fs::canonicalize(file).map_err(|source| FormatError::Io {
            path: file.to_owned(),
            source,
        })?;
        match self.roots.iter().any(|r| real.starts_with(r)) {
            true => Ok(real),
            false => Err(FormatError::OutsideCheckpoint {
                checkpoint: self.checkpoint.clone(),
                file: file.to_owned(),
                real,
                dir: self.dir.clone(),
            }),
        }
    }

    /// Reads the header of `file` after checking where it lies; the header keeps the name.
    fn read_header(&self, file: &Path) -> Result<Header> {
        let real = self.check(file)?;
        Header::read_from(file, &real)
    }
}

/// One tensor of a file, as its header describes it (validated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape (empty: a scalar).
    pub shape: Vec<u64>,
    /// Its first byte, relative to the data area.
    pub start: u64,
    /// One past its last byte, relative to the data area.
    pub end: u64,
}

impl TensorInfo {
    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// A validated safetensors header.
#[derive(Clone, Debug)]
pub struct Header {
    /// The file.
    pub path: PathBuf,
    /// File offset of the data area (8 + the header length).
    pub data_start: u64,
    /// The file's size when it was read.
    pub file_size: u64,
    /// `__metadata__`, if present.
    pub metadata: Option<BTreeMap<String, String>>,
    /// The tensors, sorted by offset.
    pub tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    /// The file's (device, inode) where the header was read from a file: the data must come
    /// from that file, not from whatever has its name when the data is read.
    identity: Option<(u64, u64)>,
}

/// The header's top-level object as (key, value) pairs, refusing a key that appears twice.
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut seen = HashSet::new();
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format_args!(
                            "key {k:?} appears twice"
                        )));
                    }
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A tensor's entry as written; checked against the format afterwards.
#[derive(Deserialize)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

impl Header {
    /// The header length from a file's first 8 bytes, checked against the limit and the file
    /// size. `first` holds the file's first bytes (fewer than 8 only if the file is shorter).
    pub fn header_len(path: &Path, first: &[u8], file_size: u64) -> Result<u64> {
        let Some(le) = first.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
            return Err(FormatError::TooShort {
                path: path.to_owned(),
                file_size,
            });
        };
        if file_size < 8 {
            return Err(FormatError::TooShort {
                path: path.to_owned(),
                file_size,
            });
        }
        let header_len = u64::from_le_bytes(le);
        if header_len > MAX_HEADER_LEN {
            return Err(FormatError::HeaderTooLarge {
                path: path.to_owned(),
                header_len,
            });
        }
        if 8 + header_len > file_size {
            return Err(FormatError::HeaderPastEnd {
                path: path.to_owned(),
                header_len,
                file_size,
            });
        }
        Ok(header_len)
    }

    /// Parses and validates a header: `json` is the header's bytes (after the 8-byte length),
    /// `file_size` the size of the whole file.
    pub fn parse(path: &Path, json: &[u8], file_size: u64) -> Result<Header> {
        let p = || path.to_owned();
        let data_start = 8 + json.len() as u64;
        let Some(data_len) = file_size.checked_sub(data_start) else {
            return Err(FormatError::HeaderPastEnd {
                path: p(),
                header_len: json.len() as u64,
                file_size,
            });
        };
        let text = std::str::from_utf8(json).map_err(|e| FormatError::InvalidHeader {
            path: p(),
            reason: format!("not UTF-8: {e}"),
        })?;
        let Entries(entries) =
            serde_json::from_str(text).map_err(|e| FormatError::InvalidHeader {
                path: p(),
                reason: e.to_string(),
            })?;

        let mut metadata = None;
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, value) in entries {
            if name == "__metadata__" {
                let m: BTreeMap<String, String> =
                    serde_json::from_value(value).map_err(|e| FormatError::InvalidMetadata {
                        path: p(),
                        reason: e.to_string(),
                    })?;
                metadata = Some(m);
                continue;
            }
            let bad = |reason: String| FormatError::InvalidTensor {
                path: p(),
                tensor: name.clone(),
                reason,
            };
            let raw: RawTensor = serde_json::from_value(value).map_err(|e| {
                bad(format!(
                    "invalid entry (expected dtype, shape, data_offsets): {e}"
                ))
            })?;
            let dtype = Dtype::parse(&raw.dtype).ok_or_else(|| {
                let known: Vec<_> = Dtype::ALL.iter().map(|d| d.name()).collect();
                bad(format!(
                    "unknown dtype {:?} (known: {})",
                    raw.dtype,
                    known.join(", ")
                ))
            })?;
            let (start, end) = raw.data_offsets;
            if end < start {
                return Err(bad(format!(
                    "data_offsets [{start}, {end}] end before they begin"
                )));
            }
            let bits = raw
                .shape
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .and_then(|n| n.checked_mul(dtype.bits()))
                .ok_or_else(|| {
                    bad(format!(
                        "shape {:?} of {dtype} overflows when sized",
                        raw.shape
                    ))
                })?;
            if bits % 8 != 0 {
                return Err(bad(format!(
                    "shape {:?} of {dtype} is {bits} bits, not a whole number of bytes",
                    raw.shape
                )));
            }
            if bits / 8 != end - start {
                return Err(bad(format!(
                    "shape {:?} of {dtype} needs {} bytes, but data_offsets [{start}, {end}] \
                     hold {}",
                    raw.shape,
                    bits / 8,
                    end - start
                )));
            }
            tensors.push(TensorInfo {
                name,
                dtype,
                shape: raw.shape,
                start,
                end,
            });
        }

        // The reference reader sorts by offsets too: JSON object order means nothing.
        tensors.sort_by(|a, b| (a.start, a.end, &a.name).cmp(&(b.start, b.end, &b.name)));
        let mut cursor = 0u64;
        for (i, t) in tensors.iter().enumerate() {
            if t.end > data_len {
                return Err(FormatError::OutOfBounds {
                    path: p(),
                    tensor: t.name.clone(),
                    start: t.start,
                    end: t.end,
                    data_len,
                });
            }
            if t.start < cursor {
                let prev = &tensors[i - 1];
                return Err(FormatError::Overlap {
                    path: p(),
                    tensor: t.name.clone(),
                    start: t.start,
                    end: t.end,
                    previous: prev.name.clone(),
                    previous_end: prev.end,
                });
            }
            if t.start > cursor {
                return Err(FormatError::Gap {
                    path: p(),
                    start: cursor,
                    end: t.start,
                    next: Some(t.name.clone()),
                });
            }
            cursor = t.end;
        }
        if cursor != data_len {
            return Err(FormatError::Gap {
                path: p(),
                start: cursor,
                end: data_len,
                next: None,
            });
        }
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Header {
            path: p(),
            data_start,
            file_size,
            metadata,
            tensors,
            index,
            identity: None,
        })
    }

    /// Parses the header of a whole file held in memory (tests, fuzzing, small files).
    pub fn from_bytes(path: &Path, file: &[u8]) -> Result<Header> {
        let n = Header::header_len(path, file, file.len() as u64)?;
        Header::parse(path, &file[8..8 + n as usize], file.len() as u64)
    }

    /// Reads and validates the header of the file at `path`: two small reads (the length,
    /// then the JSON), the JSON's allocation bounded by [`MAX_HEADER_LEN`] and the file size.
    pub fn read(path: &Path) -> Result<Header> {
        Header::read_from(path, path)
    }

    /// [`Header::read`] of the file at `real`, reported as `path`.
    fn read_from(path: &Path, real: &Path) -> Result<Header> {
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let (file, meta) = open_for_reading(path, real)?;
        let file_size = meta.len();
        let mut first = [0u8; 8];
        let got = if file_size >= 8 {
            file.read_exact_at(&mut first, 0).map_err(io_err)?;
            8
        } else {
            0
        };
        let n = Header::header_len(path, &first[..got], file_size)?;
        let mut json = vec![0u8; n as usize];
        file.read_exact_at(&mut json, 8).map_err(io_err)?;
        let mut header = Header::parse(path, &json, file_size)?;
        header.identity = Some((meta.dev(), meta.ino()));
        Ok(header)
    }

    /// Checks that `file` (opened to read the data, by [`Header::path`]) is the file this
    /// header was read from: a file renamed over that path (or deleted and made again) since
    /// is [`FormatError::Replaced`], as its bytes do not follow this header.
    pub fn check_same_file(&self, file: &File) -> Result<(), FormatError> {
        let meta = file.metadata().map_err(|source| FormatError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.check_identity(meta.dev(), meta.ino())
    }

    /// [`Header::check_same_file`] for a file known by its `st_dev` and `st_ino`.
    pub fn check_identity(&self, dev: u64, ino: u64) -> Result<(), FormatError> {
        match self.identity.is_none_or(|id| id == (dev, ino)) {
            true => Ok(()),
            false => Err(FormatError::Replaced {
                path: self.path.clone(),
            }),
        }
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// Bytes in the data area.
    pub fn data_len(&self) -> u64 {
        self.file_size - self.data_start
    }
}

/// One tensor of a checkpoint: which file, which of its tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Index into that file's [`Header::tensors`].
    pub tensor: usize,
}

/// One or more safetensors files read as one set of tensors: a single file, a Hugging Face
/// sharded checkpoint (its index), or a directory.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// What was opened (file, index or directory), for errors.
    pub path: PathBuf,
    /// The files' headers, in name order.
    pub files: Vec<Header>,
    /// The checkpoint's tensors, by file then offset. With an index, only the tensors its
    /// `weight_map` names (as `transformers` loads them).
    pub entries: Vec<Entry>,
    /// The index's `metadata` object (`{"total_size": ...}`), if an index was read.
    pub index_metadata: Option<serde_json::Value>,
    by_name: HashMap<String, usize>,
}

/// How [`Checkpoint::plan`] lays tensors out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Alignment of each read range's start in the destination (a power of two). Each tensor
    /// is also aligned to its element size.
    pub align: u64,
    /// Merge tensors adjacent in a file into one read range (one destination run).
    pub coalesce: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            align: DEFAULT_ALIGN,
            coalesce: true,
        }
    }
}

/// A contiguous range of one file to read into the destination allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRange {
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Absolute file offset.
    pub offset: u64,
    /// Bytes to read.
    pub len: u64,
    /// Offset in the destination allocation.
    pub dest: u64,
}

/// What to read, and where each selected tensor lands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    /// Ranges to read, by file then offset; none empty, none overlapping in the destination.
    pub ranges: Vec<ReadRange>,
    /// Destination offset of each selected tensor, in the order of the selection.
    pub dests: Vec<u64>,
    /// Size of the destination allocation.
    pub total: u64,
}

impl ReadPlan {
    /// Bytes the plan reads.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }
}

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

fn align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v & !(a - 1))
}

impl Checkpoint {
    /// Opens a `.safetensors` file, a `*.safetensors.index.json`, or a directory: its
    /// `model.safetensors.index.json` (or its one `*.safetensors.index.json`), else every
    /// `*.safetensors` file in it. Every header is read and validated.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io_err)?;
        if !meta.is_dir() {
            // A file the caller names is read wherever it leads (a Hugging Face snapshot's
            // files are symlinks into its blobs folder).
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            return if name.ends_with(".json") {
                Checkpoint::open_index(path)
            } else {
                Checkpoint::from_headers(path, vec![Header::read(path)?], None, None)
            };
        }
        let mut indexes = Vec::new();
        let mut shards = Vec::new();
        for entry in std::fs::read_dir(path).map_err(io_err)? {
            let entry = entry.map_err(io_err)?;
            let p = entry.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            // A hidden name is no shard: a save killed before it published leaves its
            // temporary under one (`publish::TEMP_PREFIX`), beside the complete files.
            if !p.is_file() || name.starts_with('.') {
                continue;
            }
            if name.ends_with(".safetensors.index.json") {
                indexes.push(p);
            } else if name.ends_with(".safetensors") {
                shards.push(p);
            }
        }
        let inside = Containment::new(path, path)?;
        let preferred = path.join(INDEX_FILE_NAME);
        if indexes.contains(&preferred) {
            inside.check(&preferred)?;
            return Checkpoint::open_index(&preferred);
        }
        match indexes.len() {
            0 => {}
            1 => {
                inside.check(&indexes[0])?;
                return Checkpoint::open_index(&indexes[0]);
            }
            _ => {
                indexes.sort();
                let names: Vec<_> = indexes.iter().map(|p| p.display().to_string()).collect();
                return Err(FormatError::NotACheckpoint {
                    path: path.to_owned(),
                    reason: format!("several index files ({}); open one", names.join(", ")),
                });
            }
        }
        if shards.is_empty() {
            return Err(FormatError::NotACheckpoint {
                path: path.to_owned(),
                reason: format!("no *.safetensors file and no {INDEX_FILE_NAME}"),
            });
        }
        shards.sort();
        let headers = shards
            .iter()
            .map(|p| inside.read_header(p))
            .collect::<Result<Vec<_>>>()?;
        Checkpoint::from_headers(path, headers, None, None)
    }

    /// Opens a sharded checkpoint by its index (`{"metadata": {...}, "weight_map": {tensor:
    /// file}}`); shard names are relative to the index's directory and may not leave it, by
    /// name or by symlink (see `Containment`: a Hugging Face snapshot's links into its blobs
    /// folder are followed).
    pub fn open_index(index: &Path) -> Result<Checkpoint> {
        let bad = |reason: String| FormatError::InvalidIndex {
            path: index.to_owned(),
            reason,
        };
        let io_err = |source| FormatError::Io {
            path: index.to_owned(),
            source,
        };
        let (file, meta) = open_for_reading(index, index)?;
        let len = meta.len();
        if len > MAX_INDEX_LEN {
            return Err(bad(format!(
                "{len} bytes is larger than the limit of {MAX_INDEX_LEN}"
            )));
        }
        let mut text = vec![0u8; len as usize];
        file.read_exact_at(&mut text, 0).map_err(io_err)?;
        let parsed = Index::parse(index, &text)?;
        let dir = match index.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let inside = Containment::new(index, dir)?;
        let headers = parsed
            .shards
            .iter()
            .map(|f| inside.read_header(&dir.join(f)))
            .collect::<Result<Vec<_>>>()?;
        Checkpoint::from_headers(index, headers, Some(parsed.weight_map), parsed.metadata)
    }

    /// A checkpoint of already-read headers. `weight_map` (tensor, file index) limits it to
    /// those tensors; without it, every tensor of every file, each name in one file only.
    pub fn from_headers(
        path: &Path,
        files: Vec<Header>,
        weight_map: Option<Vec<(String, usize)>>,
        index_metadata: Option<serde_json::Value>,
    ) -> Result<Checkpoint> {
        let mut entries = Vec::new();
        let mut by_name = HashMap::new();
        match weight_map {
            None => {
                for (f, h) in files.iter().enumerate() {
                    for (t, info) in h.tensors.iter().enumerate() {
                        if let Some(&prev) = by_name.get(&info.name) {
                            let prev: &Entry = &entries[prev];
                            return Err(FormatError::DuplicateTensor {
                                tensor: info.name.clone(),
                                first: files[prev.file].path.clone(),
                                second: h.path.clone(),
                            });
                        }
                        by_name.insert(info.name.clone(), entries.len());
                        entries.push(Entry { file: f, tensor: t });
                    }
                }
            }
            Some(map) => {
                let mut found = Vec::with_capacity(map.len());
                for (name, f) in map {
                    let h = &files[f];
                    let Some(&t) = h.index.get(&name) else {
                        return Err(FormatError::MissingTensor {
                            index: path.to_owned(),
                            tensor: name,
                            file: h.path.clone(),
                        });
                    };
                    found.push(Entry { file: f, tensor: t });
                }
                found.sort_by_key(|e| (e.file, e.tensor));
                for e in found {
                    by_name.insert(files[e.file].tensors[e.tensor].name.clone(), entries.len());
                    entries.push(e);
                }
            }
        }
        Ok(Checkpoint {
            path: path.to_owned(),
            files,
            entries,
            index_metadata,
            by_name,
        })
    }

    /// The tensor of an entry.
    pub fn info(&self, entry: &Entry) -> &TensorInfo {
        &self.files[entry.file].tensors[entry.tensor]
    }

    /// The index into [`Checkpoint::entries`] of the tensor called `name`.
    pub fn find(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| FormatError::UnknownTensor {
                path: self.path.clone(),
                tensor: name.to_owned(),
            })
    }

    /// Bytes of all the checkpoint's tensors.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| self.info(e).len()).sum()
    }

    /// Plans reading the tensors `selection` (indices into [`Checkpoint::entries`]; a repeated
    /// one is read once) into one destination allocation: the ranges to read, by file then
    /// offset, adjacent tensors of a file merged when `options.coalesce`; only selected bytes are
    /// read. Each range starts `options.align`-aligned; each tensor is aligned to its element
    /// size (a merged run is split where the file layout would misalign one).
    pub fn plan(&self, selection: &[usize], options: PlanOptions) -> Result<ReadPlan> {
        if options.align == 0 || !options.align.is_power_of_two() {
            return Err(FormatError::InvalidOptions(format!(
                "align must be a power of two, got {}",
                options.align
            )));
        }
        if let Some(&bad) = selection.iter().find(|&&i| i >= self.entries.len()) {
            return Err(FormatError::InvalidOptions(format!(
                "tensor index {bad} out of range ({} tensors)",
                self.entries.len()
            )));
        }
        let mut order: Vec<usize> = selection.to_vec();
        order.sort_by_key(|&i| {
            let e = &self.entries[i];
            (e.file, self.info(e).start, e.tensor)
        });
        order.dedup();
        let overflow = || FormatError::InvalidOptions("destination size overflows".into());
        let mut dest_of: HashMap<usize, u64> = HashMap::with_capacity(order.len());
        let mut ranges: Vec<ReadRange> = Vec::new();
        let mut cursor = 0u64;
        for i in order {
            let e = &self.entries[i];
            let info = self.info(e);
            let elem = info.dtype.align();
            let offset = self.files[e.file].data_start + info.start;
            let len = info.len();
            // An empty tensor is a view of no bytes: offset 0 is aligned and in range.
            let dest = if len == 0 {
                0
            } else {
                match ranges.last_mut() {
                    Some(r)
                        if options.coalesce
                            && r.file == e.file
                            && r.offset + r.len == offset
                            && (r.dest + r.len) % elem == 0 =>
                    {
                        let d = r.dest + r.len;
                        r.len += len;
                        d
                    }
                    _ => {
                        let d = align_up(cursor, options.align.max(elem)).ok_or_else(overflow)?;
                        ranges.push(ReadRange {
                            file: e.file,
                            offset,
                            len,
                            dest: d,
                        });
                        d
                    }
                }
            };
            cursor = cursor.max(dest.checked_add(len).ok_or_else(overflow)?);
            dest_of.insert(i, dest);
        }
        Ok(ReadPlan {
            ranges,
            dests: selection.iter().map(|i| dest_of[i]).collect(),
            total: cursor,
        })
    }
}

pub mod save;

#[cfg(test)]
mod tests;
