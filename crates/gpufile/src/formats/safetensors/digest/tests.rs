use super::*;
use crate::formats::safetensors::Checkpoint;

/// Bytes that differ from position to position (a digest of a wrong piece cannot match).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sizes around every edge of the split: empty, one byte, a chunk and one more, one leaf and one
/// more, odd sizes of many leaves.
const SIZES: [usize; 10] = [
    0,
    1,
    1023,
    1025,
    LEAF,
    LEAF + 1,
    3 * LEAF + 12_345,
    4 * LEAF,
    5 * LEAF - 1,
    9 * LEAF + 7,
];

#[test]
fn parallel_hashes_equal_blake3_hash_of_the_same_bytes_at_every_thread_count() {
    let data = bytes(9 * LEAF + 7, 1);
    for &n in &SIZES {
        let want = blake3::hash(&data[..n]);
        for threads in [1, 2, 3, 8] {
            assert_eq!(
                hash(&data[..n], threads),
                want,
                "{n} bytes, {threads} threads"
            );
        }
    }
}

#[test]
fn hashing_ranges_hashes_each_range_alone() {
    // Back-to-back ranges of every size, each hashed as its own input.
    let total: usize = SIZES.iter().sum();
    let data = bytes(total, 2);
    let mut ranges = Vec::new();
    let mut at = 0;
    for &n in &SIZES {
        ranges.push((at, n));
        at += n;
    }
    let want: Vec<_> = ranges
        .iter()
        .map(|&(s, n)| blake3::hash(&data[s..s + n]))
        .collect();
    for threads in [1, 2, 5] {
        assert_eq!(hash_ranges(&data, &ranges, threads), want, "{threads}");
    }
}

/// A safetensors file of U8 tensors `STEM.t0..` (STEM: the file's) of `sizes` bytes (data from `bytes`), and its data.
fn write_file(path: &std::path::Path, sizes: &[usize], metadata: Option<&str>) -> Vec<Vec<u8>> {
    let prefix = path.file_stem().unwrap().to_str().unwrap();
    let mut header = serde_json::Map::new();
    let mut at = 0;
    let mut datas = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        header.insert(
            format!("{prefix}.t{i}"),
            serde_json::json!({"dtype": "U8", "shape": [n], "data_offsets": [at, at + n]}),
        );
        at += n;
        datas.push(bytes(n, 10 + i as u64));
    }
    if let Some(m) = metadata {
        header.insert(
            "__metadata__".into(),
            serde_json::json!({ METADATA_KEY: m }),
        );
    }
    let json = serde_json::to_vec(&header).unwrap();
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&json);
    for d in &datas {
        file.extend_from_slice(d);
    }
    std::fs::write(path, file).unwrap();
    datas
}

fn digest_all(ck: &Checkpoint, threads: usize) -> Vec<FileDigest> {
    let engine = crate::Engine::global().unwrap();
    let mut out = Vec::new();
    digest_files(&engine, &engine.settings(), ck, threads, |d| {
        out.push(d);
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn files_read_through_the_engine_hash_to_blake3_of_each_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [0, 1, 1023, 3 * LEAF + 12_345, 2 * LEAF, 5];
    let a = write_file(&dir.path().join("a.safetensors"), &sizes, None);
    let b = write_file(&dir.path().join("b.safetensors"), &[7, 0], None);
    // Read into the memory `a` was read into (the buffers go round): a stale byte would show.
    let c = write_file(
        &dir.path().join("c.safetensors"),
        &[LEAF + 3, 2 * LEAF],
        None,
    );
    let ck = Checkpoint::open(dir.path()).unwrap();
    for threads in [1, 2] {
        let got = digest_all(&ck, threads);
        assert_eq!(got.len(), 3);
        for ((d, datas), stem) in got.iter().zip([&a, &b, &c]).zip(["a", "b", "c"]) {
            let want: Vec<_> = datas
                .iter()
                .enumerate()
                .map(|(i, x)| (format!("{stem}.t{i}"), blake3::hash(x)))
                .collect();
            assert_eq!(d.tensors, want);
            assert_eq!(d.bytes, datas.iter().map(|x| x.len() as u64).sum::<u64>());
        }
    }
}

#[test]
fn compare_names_each_tensor_that_differs_lacks_a_digest_or_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    write_file(&path, &[10, 20], None);
    let ck = Checkpoint::open(&path).unwrap();
    let d = &digest_all(&ck, 2)[0];
    let mut table = file_digests(&ck.files[0], d);
    assert!(compare(&ck.files[0], d, &table).is_empty());
    let good = table.tensors["m.t1"].clone();
    table.tensors.insert("m.t1".into(), "0".repeat(64));
    table.tensors.remove("m.t0");
    table.tensors.insert("gone".into(), "1".repeat(64));
    let m = compare(&ck.files[0], d, &table);
    let names: Vec<_> = m.iter().map(|m| m.tensor.as_str()).collect();
    assert_eq!(names, ["m.t0", "m.t1", "gone"]);
    assert_eq!(m[0].expected, None);
    assert_eq!(m[1].computed.as_deref(), Some(good.as_str()));
    assert_eq!(m[1].expected.as_deref(), Some("0".repeat(64).as_str()));
    assert_eq!(m[2].computed, None);
}

#[test]
fn a_table_in_the_files_metadata_is_read_and_a_bad_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.safetensors");
    write_file(&plain, &[4], None);
    let ck = Checkpoint::open(&plain).unwrap();
    assert_eq!(embedded(&ck.files[0]).unwrap(), None);
    let table = file_digests(&ck.files[0], &digest_all(&ck, 1)[0]);

    let inner = serde_json::to_string(&FileDigests {
        size: None,
        ..table.clone()
    })
    .unwrap();
    // The same file name in another directory: the same tensor names.
    std::fs::create_dir(dir.path().join("w")).unwrap();
    let with = dir.path().join("w/plain.safetensors");
    write_file(&with, &[4], Some(&inner));
    let ck = Checkpoint::open(&with).unwrap();
    let got = embedded(&ck.files[0]).unwrap().unwrap();
    assert_eq!(got.tensors, table.tensors);
    assert_eq!(got.size, None);

    let bad = dir.path().join("bad.safetensors");
    write_file(&bad, &[4], Some("{\"tensors\": 3}"));
    let e = embedded(&Checkpoint::open(&bad).unwrap().files[0]).unwrap_err();
    assert!(e.to_string().contains("gpufile.blake3"), "{e}");
}

#[test]
fn manifests_round_trip_refuse_overwrite_and_other_formats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.blake3.json");
    let mut m = Manifest::default();
    m.files.insert(
        "m.safetensors".into(),
        FileDigests {
            size: Some(12),
            tensors: [("w".to_string(), "ab".repeat(32))].into(),
        },
    );
    write_manifest(&path, &m, false).unwrap();
    assert_eq!(read_manifest(&path).unwrap(), Some(m.clone()));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"format\": \"gpufile-blake3/1\""), "{text}");

    let e = write_manifest(&path, &Manifest::default(), false).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST));
    assert_eq!(read_manifest(&path).unwrap(), Some(m));
    write_manifest(&path, &Manifest::default(), true).unwrap();
    assert_eq!(read_manifest(&path).unwrap(), Some(Manifest::default()));

    assert_eq!(read_manifest(&dir.path().join("none.json")).unwrap(), None);
    std::fs::write(&path, r#"{"format": "sha256/1", "files": {}}"#).unwrap();
    let e = read_manifest(&path).unwrap_err();
    assert!(e.to_string().contains("sha256/1"), "{e}");
}

#[test]
fn the_default_manifest_lies_beside_a_file_and_inside_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.safetensors");
    assert_eq!(
        default_manifest_path(&file),
        dir.path().join("m.safetensors.blake3.json")
    );
    assert_eq!(
        default_manifest_path(dir.path()),
        dir.path().join(DIR_MANIFEST_NAME)
    );
    assert_eq!(
        default_manifest_path(&dir.path().join("model.safetensors.index.json")),
        dir.path().join(DIR_MANIFEST_NAME)
    );
}
