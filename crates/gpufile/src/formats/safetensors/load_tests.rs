//! The core's load: selection by names and `prefix*`, and one batch over every file whose
//! requests merge ranges adjacent in a file and in memory.

use super::*;
use crate::batch::OpBuffer;
use crate::request::Buffer;
use crate::{Engine, Settings};
use serde_json::json;
use std::path::Path;

/// `names` as U8 tensors of `len` bytes each, byte `i` of tensor `k` being `k * 7 + i`, in
/// one file at `path`; the data area.
fn write(path: &Path, names: &[&str], len: u64) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    for (k, n) in names.iter().enumerate() {
        let at = k as u64 * len;
        header.insert(
            (*n).into(),
            json!({"dtype": "U8", "shape": [len], "data_offsets": [at, at + len]}),
        );
    }
    let json = serde_json::to_vec(&header).unwrap();
    let data: Vec<u8> = (0..names.len() as u64 * len)
        .map(|i| ((i / len) * 7 + i % len) as u8)
        .collect();
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&json);
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).unwrap();
    data
}

fn names(ck: &Checkpoint, sel: &[usize]) -> Vec<String> {
    sel.iter()
        .map(|&i| ck.info(&ck.entries[i]).name.clone())
        .collect()
}

#[test]
fn select_takes_names_and_prefixes_once_each_and_names_every_miss() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    write(&path, &["a.w", "a.b", "b.w", "c"], 4);
    let ck = Checkpoint::open(&path).unwrap();
    assert_eq!(ck.select::<&str>(&[]).unwrap().len(), 4);
    let sel = ck.select(&["c", "a.*", "a.w"]).unwrap();
    assert_eq!(names(&ck, &sel), ["a.w", "a.b", "c"]);
    assert_eq!(ck.select(&["*"]).unwrap().len(), 4);
    assert_eq!(
        names(&ck, &ck.select_where(|n| n.ends_with(".w"))),
        ["a.w", "b.w"]
    );
    let e = ck.select(&["c", "nope", "z.*"]).unwrap_err();
    assert!(matches!(e, FormatError::NoMatch { ref missing, .. } if missing == &["nope", "z.*"]));
    assert_eq!(
        e.to_string(),
        format!(
            "{}: no tensor named \"nope\"; no tensor name starts with \"z.\"",
            path.display()
        )
    );
    let e = ck.select(&["c", ""]).unwrap_err();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{e}");
}

/// Loads `targets` of the checkpoint at `path`; the requests and bytes read.
fn load(path: &Path, targets: &[Target]) -> Result<(usize, usize), LoadError> {
    let ck = Checkpoint::open(path)?;
    let engine = Engine::global()?;
    let settings = Settings::default();
    // SAFETY: the callers' buffers live until the wait below.
    let s = unsafe { submit_load(&engine, &settings, &ck, &Files::Local, targets) }?;
    let n = s.future.wait()?;
    Ok((s.requests(), n))
}

fn host(buf: &mut [u8]) -> Option<OpBuffer> {
    Some(OpBuffer::new(Buffer::host(buf)))
}

#[test]
fn ranges_adjacent_in_a_file_and_in_memory_are_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let data = write(&path, &["t0", "t1", "t2", "t3"], 100);
    // One target: its plan merges t0-t2; t3 is not selected.
    let mut one = vec![0u8; 300];
    let got = load(
        &path,
        &[Target {
            selection: vec![2, 0, 1],
            buffer: host(&mut one),
        }],
    )
    .unwrap();
    assert_eq!(got, (1, 300));
    assert_eq!(one, data[..300]);
    // One target a tensor, back to back in one arena: one request too.
    let mut arena = vec![0u8; 300];
    let (a, rest) = arena.split_at_mut(100);
    let (b, c) = rest.split_at_mut(100);
    let targets = [(0, a), (1, b), (2, c)].map(|(i, buf)| Target {
        selection: vec![i],
        buffer: host(buf),
    });
    assert_eq!(load(&path, &targets).unwrap(), (1, 300));
    assert_eq!(arena, data[..300]);
    // Apart in memory (t1 and t0 swapped): a request each.
    let mut arena = vec![0u8; 300];
    let (a, rest) = arena.split_at_mut(100);
    let (b, c) = rest.split_at_mut(100);
    let targets = [(1, a), (0, b), (2, c)].map(|(i, buf)| Target {
        selection: vec![i],
        buffer: host(buf),
    });
    assert_eq!(load(&path, &targets).unwrap(), (3, 300));
    assert_eq!(arena[..100], data[100..200]);
    assert_eq!(arena[100..200], data[..100]);
}

#[test]
fn a_short_buffer_is_refused_before_any_byte_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    write(&path, &["t0", "t1"], 100);
    let mut fine = vec![9u8; 100];
    let mut short = vec![9u8; 99];
    let targets = [
        Target {
            selection: vec![0],
            buffer: host(&mut fine),
        },
        Target {
            selection: vec![1],
            buffer: host(&mut short),
        },
    ];
    let e = load(&path, &targets).unwrap_err();
    assert!(
        e.to_string()
            .contains("a buffer of 99 bytes for tensors [\"t1\"] taking 100 bytes"),
        "{e}"
    );
    assert!(fine.iter().all(|&b| b == 9));
    let e = load(
        &path,
        &[Target {
            selection: vec![0],
            buffer: None,
        }],
    )
    .unwrap_err();
    assert!(e.to_string().contains("a buffer of 0 bytes"), "{e}");
}
