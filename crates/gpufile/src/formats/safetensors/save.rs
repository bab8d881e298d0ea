//! Writing safetensors files: the header built as the `safetensors` crate builds it, byte for
//! byte, and where each tensor's bytes go.
//!
//! How to use:
//! 1. Describe the tensors ([`SaveTensor`]: name, dtype, logical shape, byte length) and the
//!    metadata, then [`plan_save`]: the header bytes (8-byte length, JSON, space padding) and
//!    each tensor's file offset.
//! 2. Write the header at offset 0 and each tensor's bytes at its offset, in any order and all
//!    at once (one stream of requests: the tensors tile the data area, so the writes cover the
//!    whole file); [`file::save_file`] does it from host or device memory, crash-safe (see
//!    [`crate::publish`]).
//!
//! The layout is the reference serializer's: tensors sorted by dtype, largest alignment first
//! (the order of [`Dtype::ALL`], reversed), then by name (byte order); data offsets in that
//! order with no padding between tensors; the JSON compact, `__metadata__` first, then the
//! tensors in file order, each `{"dtype","shape","data_offsets"}`; the header padded with
//! spaces to a multiple of 8 bytes. One difference: the reference writes metadata keys in the
//! order of a Rust `HashMap` (a different order in each process); gpufile writes them sorted,
//! so the same save gives the same bytes every time. A file with at most one metadata key is
//! byte-identical to the reference's.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::{Dtype, FormatError, Result, MAX_HEADER_LEN};

pub mod checkpoint;
mod commit;
pub mod file;
mod index;
pub mod write;

/// One tensor to write: what the header says of it, and its byte length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveTensor {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its logical shape (for F4, the element count: twice PyTorch's packed last dimension).
    pub shape: Vec<u64>,
    /// Its bytes in memory (C order).
    pub len: u64,
}

/// The file to write: the header, and each tensor's place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavePlan {
    /// The file's first bytes: the 8-byte little-endian length, the JSON, the padding.
    pub header: Vec<u8>,
    /// Absolute file offset of each tensor, in the order of the input.
    pub offsets: Vec<u64>,
    /// Indices into the input in file order (the order of the data area).
    pub order: Vec<usize>,
    /// The file's size.
    pub file_size: u64,
}

/// A tensor's entry in the header, fields in the reference's order.
#[derive(Serialize)]
struct Entry<'a> {
    dtype: &'static str,
    shape: &'a [u64],
    data_offsets: (u64, u64),
}

/// The header object: `__metadata__` first (where given), then the tensors in file order.
struct HeaderJson<'a> {
    metadata: Option<&'a BTreeMap<String, String>>,
    tensors: Vec<(&'a str, Entry<'a>)>,
}

impl Serialize for HeaderJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let len = self.tensors.len() + usize::from(self.metadata.is_some());
        let mut map = s.serialize_map(Some(len))?;
        if let Some(m) = self.metadata {
            map.serialize_entry("__metadata__", m)?;
        }
        for (name, entry) in &self.tensors {
            map.serialize_entry(name, entry)?;
        }
        map.end()
    }
}

/// Plans the file `path` (named in errors) holding `tensors` and `metadata`. Refused: a
/// byte length that is not what shape and dtype make, a name given twice, a tensor named
/// `__metadata__`, a header over [`MAX_HEADER_LEN`].
pub fn plan_save(
    path: &Path,
    tensors: &[SaveTensor],
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<SavePlan> {
    let bad = |t: &SaveTensor, reason: String| FormatError::InvalidTensor {
        path: path.to_owned(),
        tensor: t.name.clone(),
        reason,
    };
    let mut seen = HashSet::with_capacity(tensors.len());
    for t in tensors {
        if t.name == "__metadata__" {
            return Err(bad(
                t,
                "the name is the format's key for metadata; rename the tensor".into(),
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(bad(t, "the name is given twice".into()));
        }
        let bits = t
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(t.dtype.bits()))
            .ok_or_else(|| bad(t, format!("shape {:?} overflows when sized", t.shape)))?;
        if bits % 8 != 0 {
            return Err(bad(
                t,
                format!(
                    "shape {:?} of {} is {bits} bits, not a whole number of bytes",
                    t.shape, t.dtype
                ),
            ));
        }
        if bits / 8 != t.len {
            return Err(bad(
                t,
                format!(
                    "shape {:?} of {} needs {} bytes, but the tensor holds {}",
                    t.shape,
                    t.dtype,
                    bits / 8,
                    t.len
                ),
            ));
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&tensors[a], &tensors[b]);
        b.dtype.cmp(&a.dtype).then_with(|| a.name.cmp(&b.name))
    });
    let mut rel = vec![0u64; tensors.len()];
    let mut entries = Vec::with_capacity(tensors.len());
    let mut cursor = 0u64;
    for &i in &order {
        let t = &tensors[i];
        let end = cursor
            .checked_add(t.len)
            .ok_or_else(|| bad(t, "the data area's size overflows".into()))?;
        rel[i] = cursor;
        entries.push((
            t.name.as_str(),
            Entry {
                dtype: t.dtype.name(),
                shape: &t.shape,
                data_offsets: (cursor, end),
            },
        ));
        cursor = end;
    }
    let json = serde_json::to_vec(&HeaderJson {
        metadata,
        tensors: entries,
    })
    .map_err(|e| FormatError::InvalidHeader {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let padded = json.len().next_multiple_of(8);
    if padded as u64 > MAX_HEADER_LEN {
        return Err(FormatError::HeaderTooLarge {
            path: path.to_owned(),
            header_len: padded as u64,
        });
    }
    let mut header = Vec::with_capacity(8 + padded);
    header.extend_from_slice(&(padded as u64).to_le_bytes());
    header.extend_from_slice(&json);
    header.resize(8 + padded, b' ');
    let data_start = header.len() as u64;
    Ok(SavePlan {
        offsets: rel.iter().map(|r| data_start + r).collect(),
        order,
        file_size: data_start + cursor,
        header,
    })
}

/// Saves host tensors (`SaveTensor`s with their bytes) to `path`, crash-safe: written under a
/// temporary name through the engine (every tensor at once), then published (see
/// [`crate::publish::PendingFile::publish`]; `durable` syncs). The bytes written: the file size.
/// The tests' reference writer; [`file::save_file`] is the one every front end calls.
#[cfg(test)]
pub fn save_host(
    path: &Path,
    tensors: &[(SaveTensor, &[u8])],
    metadata: Option<&BTreeMap<String, String>>,
    durable: bool,
) -> crate::Result<u64> {
    let specs: Vec<SaveTensor> = tensors.iter().map(|(t, _)| t.clone()).collect();
    if let Some((t, data)) = tensors.iter().find(|(t, d)| d.len() as u64 != t.len) {
        return Err(crate::Error::InvalidArgument(format!(
            "{}: tensor {:?} says {} bytes but holds {}",
            path.display(),
            t.name,
            t.len,
            data.len()
        )));
    }
    let plan = plan_save(path, &specs, metadata)
        .map_err(|e| crate::Error::InvalidArgument(e.to_string()))?;
    let mut pending = crate::publish::PendingFile::create(path)?;
    let handle = pending.handle().clone();
    handle.write(&plan.header, 0, None)?;
    let engine = crate::Engine::global()?;
    let settings = engine.shared_settings();
    let endpoint = handle.endpoint(crate::Direction::Write);
    let batch: Vec<_> = tensors
        .iter()
        .zip(&plan.offsets)
        .filter(|((_, d), _)| !d.is_empty())
        .map(|((_, d), &off)| {
            let buffer = crate::Buffer::Host {
                ptr: d.as_ptr().cast_mut(),
                len: d.len(),
            };
            (endpoint.clone(), crate::Request::write(buffer, off))
        })
        .collect();
    // SAFETY: every slice is borrowed for this call, which waits for the batch; a write only
    // reads its buffer.
    unsafe { engine.submit_batch(&batch, &settings) }?.wait()?;
    pending.publish(durable, false)?;
    Ok(plan.file_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::safetensors::Header;

    fn t(name: &str, dtype: Dtype, shape: &[u64]) -> SaveTensor {
        let bits: u64 = shape.iter().product::<u64>() * dtype.bits();
        SaveTensor {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            len: bits / 8,
        }
    }

    #[test]
    fn tensors_go_by_dtype_largest_first_then_name_and_the_header_pads_to_8_with_spaces() {
        let tensors = [
            t("b", Dtype::F16, &[2]),
            t("a", Dtype::F16, &[3]),
            t("z", Dtype::BOOL, &[1]),
            t("m", Dtype::F64, &[1]),
            t("e", Dtype::U8, &[0]),
        ];
        let plan = plan_save(Path::new("x"), &tensors, None).unwrap();
        assert_eq!(plan.order, [3, 1, 0, 4, 2]);
        let n = u64::from_le_bytes(plan.header[..8].try_into().unwrap());
        assert_eq!(n as usize, plan.header.len() - 8);
        assert_eq!(n % 8, 0);
        let json = std::str::from_utf8(&plan.header[8..]).unwrap();
        assert_eq!(
            json.trim_end(),
            r#"{"m":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"a":{"dtype":"F16","shape":[3],"data_offsets":[8,14]},"b":{"dtype":"F16","shape":[2],"data_offsets":[14,18]},"e":{"dtype":"U8","shape":[0],"data_offsets":[18,18]},"z":{"dtype":"BOOL","shape":[1],"data_offsets":[18,19]}}"#
        );
        assert!(json.len() - json.trim_end().len() < 8);
        let data = 8 + n;
        assert_eq!(
            plan.offsets,
            [data + 14, data + 8, data + 18, data, data + 18]
        );
        assert_eq!(plan.file_size, data + 19);
    }

    #[test]
    fn metadata_comes_first_sorted_and_the_file_reads_back() {
        let m: BTreeMap<String, String> = [("z", "1"), ("format", "pt"), ("é\"", "\n")]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let tensors = [t("w", Dtype::BF16, &[2, 2])];
        let plan = plan_save(Path::new("x"), &tensors, Some(&m)).unwrap();
        let json = std::str::from_utf8(&plan.header[8..]).unwrap();
        assert!(
            json.starts_with(r#"{"__metadata__":{"format":"pt","z":"1","é\"":"\n"},"w":"#),
            "{json}"
        );
        let mut file = plan.header.clone();
        file.resize(plan.file_size as usize, 7);
        let h = Header::from_bytes(Path::new("x"), &file).unwrap();
        assert_eq!(h.metadata.as_ref(), Some(&m));
        assert_eq!(h.get("w").unwrap().len(), 8);
    }

    #[test]
    fn an_empty_save_is_an_empty_object_padded() {
        let plan = plan_save(Path::new("x"), &[], None).unwrap();
        assert_eq!(plan.header, b"\x08\0\0\0\0\0\0\0{}      ");
        let plan = plan_save(Path::new("x"), &[], Some(&BTreeMap::new())).unwrap();
        assert_eq!(&plan.header[8..], b"{\"__metadata__\":{}}     ");
    }

    #[test]
    fn bad_tensors_are_refused_naming_file_and_tensor() {
        let mut wrong = t("w", Dtype::F32, &[3]);
        wrong.len = 10;
        let e = plan_save(Path::new("f.st"), &[wrong], None).unwrap_err();
        assert!(
            e.to_string().contains(
                "f.st: tensor \"w\": shape [3] of F32 needs 12 bytes, but the tensor holds 10"
            ),
            "{e}"
        );
        let e = plan_save(Path::new("f.st"), &[t("x", Dtype::F4, &[3])], None).unwrap_err();
        assert!(e.to_string().contains("12 bits, not a whole number"), "{e}");
        let e = plan_save(
            Path::new("f.st"),
            &[t("__metadata__", Dtype::U8, &[1])],
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("key for metadata"), "{e}");
        let e = plan_save(
            Path::new("f.st"),
            &[t("a", Dtype::U8, &[1]), t("a", Dtype::I8, &[1])],
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }

    #[test]
    fn save_host_writes_a_file_the_reader_accepts_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let a: Vec<u8> = (0..64u8).collect();
        let b = vec![9u8; 3];
        let tensors = [
            (t("a", Dtype::F32, &[4, 4]), a.as_slice()),
            (t("b", Dtype::U8, &[3]), b.as_slice()),
            (t("empty", Dtype::F16, &[0, 5]), &[][..]),
        ];
        let size = save_host(&path, &tensors, None, true).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, size);
        let h = Header::from_bytes(&path, &bytes).unwrap();
        let a_info = h.get("a").unwrap();
        let at = (h.data_start + a_info.start) as usize;
        assert_eq!(&bytes[at..at + 64], a.as_slice());
        let b_info = h.get("b").unwrap();
        let at = (h.data_start + b_info.start) as usize;
        assert_eq!(&bytes[at..at + 3], b.as_slice());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
