//! One safetensors file's header ([`Header`]): the 8-byte length, the JSON parsed and validated
//! as the reference reader does, and each tensor's place in the data area ([`TensorInfo`]).
//!
//! How to use: [`Header::read`] a file (or [`Header::from_bytes`] / [`Header::parse`] bytes
//! already read), then [`Header::get`] a tensor by name; before reading its data through an
//! open file, [`Header::check_same_file`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{Dtype, FormatError, Result, MAX_HEADER_LEN};

/// Opens `real` for reading without blocking on a FIFO (see `posix::open_file`); errors name
/// it `path`.
pub(super) fn open_for_reading(path: &Path, real: &Path) -> Result<(File, std::fs::Metadata)> {
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
    pub(super) index: HashMap<String, usize>,
    /// The file's (device, inode) where the header was read from a file: the data must come
    /// from that file, not from whatever has its name when the data is read.
    identity: Option<(u64, u64)>,
}

/// The header's top-level object as (key, value) pairs, refusing a key that appears twice.
pub(super) struct Entries(pub(super) Vec<(String, serde_json::Value)>);

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
    pub(super) fn read_from(path: &Path, real: &Path) -> Result<Header> {
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
