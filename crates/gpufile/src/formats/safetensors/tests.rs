use super::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

const P: &str = "m.safetensors";

/// A file: the header JSON padded with spaces to a multiple of 8 (as the writer does), then
/// `data_len` bytes.
fn file(header: &serde_json::Value, data_len: usize) -> Vec<u8> {
    file_raw(header.to_string().as_bytes(), data_len)
}

fn file_raw(json: &[u8], data_len: usize) -> Vec<u8> {
    let mut h = json.to_vec();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend((0..data_len).map(|i| i as u8));
    out
}

fn parse(bytes: &[u8]) -> Result<Header> {
    Header::from_bytes(Path::new(P), bytes)
}

fn err(bytes: &[u8]) -> String {
    parse(bytes).unwrap_err().to_string()
}

fn t(dtype: &str, shape: &[u64], start: u64, end: u64) -> serde_json::Value {
    json!({"dtype": dtype, "shape": shape, "data_offsets": [start, end]})
}

#[test]
fn every_dtype_is_sized_like_the_reference() {
    let sizes = [
        ("BOOL", 1),
        ("U8", 1),
        ("I8", 1),
        ("F8_E5M2", 1),
        ("F8_E4M3", 1),
        ("F8_E8M0", 1),
        ("F8_E4M3FNUZ", 1),
        ("F8_E5M2FNUZ", 1),
        ("I16", 2),
        ("U16", 2),
        ("F16", 2),
        ("BF16", 2),
        ("I32", 4),
        ("U32", 4),
        ("F32", 4),
        ("C64", 8),
        ("F64", 8),
        ("I64", 8),
        ("U64", 8),
    ];
    let mut header = serde_json::Map::new();
    let mut off = 0;
    for (name, size) in sizes {
        header.insert(name.into(), t(name, &[2, 3], off, off + 6 * size));
        off += 6 * size;
    }
    // Sub-byte MX types: 8 x F4 = 4 bytes, 4 x F6 = 3 bytes.
    header.insert("F4".into(), t("F4", &[2, 4], off, off + 4));
    header.insert("F6_E2M3".into(), t("F6_E2M3", &[4], off + 4, off + 7));
    header.insert("F6_E3M2".into(), t("F6_E3M2", &[4], off + 7, off + 10));
    let h = parse(&file(&header.into(), off as usize + 10)).unwrap();
    assert_eq!(h.tensors.len(), Dtype::ALL.len());
    for d in Dtype::ALL {
        let info = h.get(d.name()).unwrap();
        assert_eq!(info.dtype, d);
        assert_eq!(Dtype::parse(d.name()), Some(d));
    }
    assert_eq!(h.get("BF16").unwrap().len(), 12);
    assert_eq!(h.get("F4").unwrap().shape, vec![2, 4]);
    assert_eq!(Dtype::parse("bf16"), None);
}

#[test]
fn metadata_scalars_empty_tensors_and_json_order() {
    let h = json!({
        "b": t("F32", &[2], 8, 16),
        "__metadata__": {"format": "pt", "x": "y"},
        "a": t("F32", &[2], 0, 8),
        "s": t("I64", &[], 16, 24),
        "e": t("F16", &[0, 4], 24, 24),
    });
    let h = parse(&file(&h, 24)).unwrap();
    let names: Vec<_> = h.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "s", "e"]);
    let m = h.metadata.as_ref().unwrap();
    assert_eq!(m["format"], "pt");
    assert_eq!(h.get("s").unwrap().shape, Vec::<u64>::new());
    assert!(h.get("e").unwrap().is_empty());
    assert_eq!(h.data_len(), 24);
    assert_eq!(h.data_start % 8, 0);
    // No tensor at all is a valid (empty) file.
    let h = parse(&file(&json!({}), 0)).unwrap();
    assert!(h.tensors.is_empty() && h.metadata.is_none());
}

#[test]
fn bad_lengths_are_refused_with_the_file_name() {
    assert_eq!(
        err(&[1, 2, 3]),
        "m.safetensors: file of 3 bytes is too short for a safetensors header (8-byte length, \
         then JSON)"
    );
    let mut huge = (MAX_HEADER_LEN + 1).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(err(&huge).contains("header length 100000001 is larger than the limit"));
    let mut max = u64::MAX.to_le_bytes().to_vec();
    max.extend_from_slice(b"{}");
    assert!(err(&max).contains("is larger than the limit"));
    let mut past = 64u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}      ");
    assert_eq!(
        err(&past),
        "m.safetensors: header of 64 bytes goes past the end of the file (16 bytes; truncated \
         file?)"
    );
}

#[test]
fn malformed_headers_are_refused() {
    assert!(err(&file_raw(b"{\"a\": ", 0)).starts_with("m.safetensors: invalid header: "));
    assert!(err(&file_raw(b"[1, 2]", 0)).contains("expected a JSON object"));
    assert!(err(&file_raw(b"{\"a\xff\": 1}", 0)).contains("not UTF-8"));
    let dup = br#"{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                  "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}"#;
    assert!(err(&file_raw(dup, 1)).contains("key \"a\" appears twice"));
    let e = err(&file(&json!({"__metadata__": {"n": 1}}), 0));
    assert!(e.starts_with("m.safetensors: invalid __metadata__"), "{e}");
    let e = err(&file(&json!({"w": {"dtype": "F32", "shape": [1]}}), 4));
    assert!(
        e.contains("tensor \"w\": invalid entry") && e.contains("data_offsets"),
        "{e}"
    );
    let e = err(&file(&json!({"w": t("F32", &[1], 0, 4), "v": 3}), 4));
    assert!(e.contains("tensor \"v\": invalid entry"), "{e}");
    let e = err(&file(
        &json!({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}),
        4,
    ));
    assert!(e.contains("tensor \"w\": invalid entry"), "{e}");
}

#[test]
fn bad_tensors_are_refused_naming_the_tensor() {
    let e = err(&file(&json!({"w": t("F31", &[1], 0, 4)}), 4));
    assert!(e.starts_with("m.safetensors: tensor \"w\": unknown dtype \"F31\" (known: BOOL, F4"));
    let e = err(&file(&json!({"w": t("F32", &[1], 4, 0)}), 4));
    assert_eq!(
        e,
        "m.safetensors: tensor \"w\": data_offsets [4, 0] end before they begin"
    );
    let e = err(&file(&json!({"w": t("F32", &[3], 0, 8)}), 8));
    assert_eq!(
        e,
        "m.safetensors: tensor \"w\": shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] \
         hold 8"
    );
    let e = err(&file(&json!({"w": t("U8", &[1 << 32, 1 << 32], 0, 0)}), 0));
    assert!(e.contains("tensor \"w\": shape [4294967296, 4294967296] of U8 overflows"));
    let e = err(&file(&json!({"w": t("F64", &[1 << 62], 0, 0)}), 0));
    assert!(e.contains("overflows"), "{e}");
    let e = err(&file(&json!({"w": t("F4", &[3], 0, 2)}), 2));
    assert!(e.contains("is 12 bits, not a whole number of bytes"), "{e}");
}

#[test]
fn layout_errors_name_both_tensors() {
    // Truncated data: the last tensor ends past the end.
    let e = err(&file(
        &json!({"a": t("U8", &[4], 0, 4), "b": t("U8", &[4], 4, 8)}),
        6,
    ));
    assert_eq!(
        e,
        "m.safetensors: tensor \"b\" (data bytes 4..8) ends past the data area of 6 bytes \
         (truncated file?)"
    );
    let e = err(&file(
        &json!({"a": t("U8", &[4], 0, 4), "b": t("U8", &[4], 2, 6)}),
        6,
    ));
    assert_eq!(
        e,
        "m.safetensors: tensor \"b\" (data bytes 2..6) overlaps tensor \"a\", which ends at 4"
    );
    let e = err(&file(
        &json!({"a": t("U8", &[4], 0, 4), "b": t("U8", &[4], 6, 10)}),
        10,
    ));
    assert_eq!(
        e,
        "m.safetensors: data bytes 4..6 belong to no tensor (before tensor \"b\")"
    );
    let e = err(&file(&json!({"a": t("U8", &[4], 0, 4)}), 9));
    assert_eq!(
        e,
        "m.safetensors: data bytes 4..9 belong to no tensor (after the last tensor)"
    );
    let e = err(&file(&json!({"a": t("U8", &[4], 4, 8)}), 8));
    assert!(e.contains("data bytes 0..4 belong to no tensor"), "{e}");
}

fn checkpoint(h: &serde_json::Value, data_len: usize) -> Checkpoint {
    let h = parse(&file(h, data_len)).unwrap();
    Checkpoint::from_headers(Path::new(P), vec![h], None, None).unwrap()
}

#[test]
fn plan_coalesces_adjacent_tensors_and_reads_only_the_selection() {
    let ck = checkpoint(
        &json!({
            "a": t("F32", &[4], 0, 16),
            "b": t("F32", &[4], 16, 32),
            "c": t("F32", &[4], 32, 48),
            "d": t("F32", &[4], 48, 64),
        }),
        64,
    );
    let ds = ck.files[0].data_start;
    let all: Vec<usize> = (0..4).collect();
    let plan = ck.plan(&all, PlanOptions::default()).unwrap();
    assert_eq!(
        plan.ranges,
        [ReadRange {
            file: 0,
            offset: ds,
            len: 64,
            dest: 0
        }]
    );
    assert_eq!(plan.dests, [0, 16, 32, 48]);
    assert_eq!(plan.total, 64);

    let sel = [
        ck.find("d").unwrap(),
        ck.find("a").unwrap(),
        ck.find("b").unwrap(),
    ];
    let plan = ck.plan(&sel, PlanOptions::default()).unwrap();
    assert_eq!(plan.ranges.len(), 2);
    assert_eq!((plan.ranges[0].offset, plan.ranges[0].len), (ds, 32));
    assert_eq!((plan.ranges[1].offset, plan.ranges[1].len), (ds + 48, 16));
    assert_eq!(plan.ranges[1].dest, 256);
    assert_eq!(plan.dests, [256, 0, 16]);
    assert_eq!(plan.bytes(), 48);

    // Not coalesced: one range per tensor; a repeated tensor is read once.
    let opts = PlanOptions {
        align: 64,
        coalesce: false,
    };
    let plan = ck.plan(&[1, 0, 1], opts).unwrap();
    assert_eq!(plan.ranges.len(), 2);
    assert_eq!(plan.dests, [64, 0, 64]);
    assert_eq!(plan.total, 80);

    let e = ck
        .plan(
            &[0],
            PlanOptions {
                align: 3,
                coalesce: true,
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid plan options: align must be a power of two, got 3"
    );
    assert!(ck.plan(&[9], PlanOptions::default()).is_err());
    assert_eq!(
        ck.find("zz").unwrap_err().to_string(),
        "m.safetensors: no tensor named \"zz\""
    );
}

#[test]
fn plan_splits_a_run_where_a_tensor_would_be_misaligned() {
    // "a" is 3 bytes, so "b" (F32) sits at data offset 3: it gets its own aligned range.
    let ck = checkpoint(
        &json!({"a": t("U8", &[3], 0, 3), "b": t("F32", &[1], 3, 7), "c": t("U8", &[1], 7, 8),
                "e": t("F64", &[0], 8, 8)}),
        8,
    );
    let plan = ck.plan(&[0, 1, 2, 3], PlanOptions::default()).unwrap();
    assert_eq!(plan.ranges.len(), 2);
    assert_eq!(plan.dests, [0, 256, 260, 0]);
    assert_eq!(plan.ranges[1].len, 5);
    assert_eq!(plan.total, 261);
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn sharded_checkpoints_by_directory_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s1 = json!({"x.1": t("U8", &[4], 0, 4), "x.0": t("U8", &[2], 4, 6)});
    let s2 = json!({"y": t("I16", &[3], 0, 6), "extra": t("U8", &[1], 6, 7)});
    write(d, "model-00002-of-00002.safetensors", &file(&s2, 7));
    write(d, "model-00001-of-00002.safetensors", &file(&s1, 6));

    // A directory without an index: every file, every tensor.
    let ck = Checkpoint::open(d).unwrap();
    assert_eq!(ck.files.len(), 2);
    assert!(ck.files[0]
        .path
        .ends_with("model-00001-of-00002.safetensors"));
    let names: Vec<_> = ck.entries.iter().map(|e| ck.info(e).name.clone()).collect();
    assert_eq!(names, ["x.1", "x.0", "y", "extra"]);
    let plan = ck.plan(&[0, 1, 2], PlanOptions::default()).unwrap();
    assert_eq!(plan.ranges.len(), 2);
    assert_eq!((plan.ranges[1].file, plan.ranges[1].len), (1, 6));
    assert_eq!(plan.dests, [0, 4, 256]);

    // With an index: only the tensors of its weight_map.
    let index = json!({"metadata": {"total_size": 12}, "weight_map": {
        "y": "model-00002-of-00002.safetensors",
        "x.0": "model-00001-of-00002.safetensors",
        "x.1": "model-00001-of-00002.safetensors"}});
    write(d, INDEX_FILE_NAME, index.to_string().as_bytes());
    for ck in [
        Checkpoint::open(d).unwrap(),
        Checkpoint::open(d.join(INDEX_FILE_NAME)).unwrap(),
    ] {
        let names: Vec<_> = ck.entries.iter().map(|e| ck.info(e).name.clone()).collect();
        assert_eq!(names, ["x.1", "x.0", "y"]);
        assert_eq!(ck.index_metadata.as_ref().unwrap()["total_size"], 12);
        assert_eq!(ck.bytes(), 12);
    }
    // A single file.
    let ck = Checkpoint::open(d.join("model-00002-of-00002.safetensors")).unwrap();
    assert_eq!(ck.entries.len(), 2);
}

#[test]
fn bad_checkpoints_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let e = Checkpoint::open(d).unwrap_err().to_string();
    assert!(
        e.ends_with("no *.safetensors file and no model.safetensors.index.json"),
        "{e}"
    );
    let e = Checkpoint::open(d.join("nope.safetensors")).unwrap_err();
    assert!(
        matches!(e, FormatError::Io { ref source, .. } if source.kind() == io::ErrorKind::NotFound)
    );

    write(
        d,
        "a.safetensors",
        &file(&json!({"w": t("U8", &[1], 0, 1)}), 1),
    );
    write(
        d,
        "b.safetensors",
        &file(&json!({"w": t("U8", &[2], 0, 2)}), 2),
    );
    let e = Checkpoint::open(d).unwrap_err().to_string();
    assert!(
        e.starts_with("tensor \"w\" is in both ") && e.contains("a.safetensors"),
        "{e}"
    );

    let idx = |v: serde_json::Value| {
        write(d, INDEX_FILE_NAME, v.to_string().as_bytes());
        Checkpoint::open(d).unwrap_err().to_string()
    };
    let e = idx(json!({"weight_map": {"w": "../a.safetensors"}}));
    assert!(
        e.contains("is not a file name inside the checkpoint's directory"),
        "{e}"
    );
    let e = idx(json!({"weight_map": {"w": "/etc/passwd"}}));
    assert!(e.contains("is not a file name inside"), "{e}");
    let e = idx(json!({"weight_map": {"w": 3}}));
    assert!(e.contains("weight_map[\"w\"] is not a file name"), "{e}");
    let e = idx(json!({"metadata": {}}));
    assert!(
        e.contains("invalid checkpoint index: missing field `weight_map`"),
        "{e}"
    );
    let e = idx(json!({"weight_map": {"v": "a.safetensors"}}));
    assert!(
        e.contains("maps tensor \"v\" to ") && e.contains("which does not hold it"),
        "{e}"
    );
    let e = idx(json!({"weight_map": {"w": "c.safetensors"}}));
    assert!(e.contains("c.safetensors: No such file"), "{e}");
    std::fs::remove_file(d.join(INDEX_FILE_NAME)).unwrap();
    write(d, "x.safetensors.index.json", b"{}");
    write(d, "y.safetensors.index.json", b"{}");
    let e = Checkpoint::open(d).unwrap_err().to_string();
    assert!(e.contains("several index files"), "{e}");
}

#[test]
fn header_read_bounds_its_allocation_by_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // Claims a 99 MB header in a 16-byte file: refused before allocating.
    let mut b = 99_000_000u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}      ");
    let p = write(dir.path(), "x.safetensors", &b);
    assert!(matches!(
        Header::read(&p),
        Err(FormatError::HeaderPastEnd { file_size: 16, .. })
    ));
    let p = write(dir.path(), "y.safetensors", b"");
    assert!(matches!(
        Header::read(&p),
        Err(FormatError::TooShort { file_size: 0, .. })
    ));
}

#[test]
fn data_opened_from_a_file_renamed_over_the_headers_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = file(&json!({"a": t("U8", &[8], 0, 8)}), 8);
    let p = write(dir.path(), "m.safetensors", &bytes);
    let header = Header::read(&p).unwrap();
    let same = File::open(&p).unwrap();
    header.check_same_file(&same).unwrap();
    let other = write(dir.path(), "other.safetensors", &bytes);
    std::fs::rename(&other, &p).unwrap();
    let e = header
        .check_same_file(&File::open(&p).unwrap())
        .unwrap_err();
    assert!(matches!(e, FormatError::Replaced { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("m.safetensors: the file was replaced"),
        "{e}"
    );
    header.check_same_file(&same).unwrap(); // the file opened before the rename still is it
                                            // A header parsed from bytes knows no file: nothing to compare.
    parse(&bytes).unwrap().check_same_file(&same).unwrap();
}

fn dtype_strategy() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("U8"),
        Just("F16"),
        Just("BF16"),
        Just("F32"),
        Just("F64"),
        Just("F4"),
        Just("F6_E2M3"),
        Just("BAD"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn arbitrary_header_text_never_panics(text in "[{}\\[\\]\",:0-9a-z_ -]{0,120}", data in 0usize..64) {
        let _ = parse(&file_raw(text.as_bytes(), data));
    }

    /// Random headers, mostly well formed, some off by a byte or with a bad dtype: an error,
    /// or a header whose every plan is sound.
    #[test]
    fn headers_parse_to_errors_or_sound_plans(
        tensors in proptest::collection::vec(
            (dtype_strategy(), proptest::collection::vec(0u64..6, 0..3),
             prop_oneof![8 => Just(0i64), 1 => -2i64..3], prop_oneof![8 => Just(0i64), 1 => -2i64..3]),
            0..8),
        tail in prop_oneof![8 => Just(0i64), 1 => -2i64..3],
        selection in proptest::collection::vec(0usize..8, 0..8),
        coalesce in any::<bool>(),
        align_pow in 0u32..9,
    ) {
        let mut header = serde_json::Map::new();
        let mut cursor = 0i64;
        for (i, (dtype, shape, skew_start, skew_len)) in tensors.iter().enumerate() {
            let bits = Dtype::parse(dtype).map_or(8, Dtype::bits);
            let len = (shape.iter().product::<u64>() * bits).div_ceil(8) as i64 + skew_len;
            let start = (cursor + skew_start).max(0);
            let end = (start + len).max(0);
            header.insert(format!("t{i}"), t(dtype, shape, start as u64, end as u64));
            cursor = end;
        }
        let data_len = (cursor + tail).max(0) as usize;
        let bytes = file(&header.into(), data_len);
        let Ok(h) = parse(&bytes) else { return Ok(()); };
        let data_start = h.data_start;
        let ck = Checkpoint::from_headers(Path::new(P), vec![h], None, None).unwrap();
        let sel: Vec<usize> = selection.into_iter().filter(|&i| i < ck.entries.len()).collect();
        let opts = PlanOptions { align: 1 << align_pow, coalesce };
        let plan = ck.plan(&sel, opts).unwrap();
        // Every range lies in the data area, and the destination holds every tensor's bytes
        // where the plan says, aligned.
        let mut dest = vec![None::<u8>; plan.total as usize];
        for r in &plan.ranges {
            prop_assert!(r.len > 0);
            prop_assert!(r.offset >= data_start && r.offset + r.len <= bytes.len() as u64);
            prop_assert_eq!(r.dest % opts.align, 0);
            for k in 0..r.len {
                let slot = &mut dest[(r.dest + k) as usize];
                prop_assert!(slot.is_none(), "ranges overlap in the destination");
                *slot = Some(bytes[(r.offset + k) as usize]);
            }
        }
        let mut selected_bytes = 0;
        let mut seen = HashSet::new();
        for (&i, &d) in sel.iter().zip(&plan.dests) {
            let info = ck.info(&ck.entries[i]);
            prop_assert_eq!(d % info.dtype.align(), 0);
            if seen.insert(i) { selected_bytes += info.len(); }
            for k in 0..info.len() {
                let want = bytes[(data_start + info.start + k) as usize];
                prop_assert_eq!(dest[(d + k) as usize], Some(want));
            }
        }
        prop_assert_eq!(plan.bytes(), selected_bytes);
    }
}

#[test]
fn symlinks_may_not_lead_a_checkpoints_files_out_of_its_directory() {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let secret = write(
        &outside,
        "secret.safetensors",
        &file(&json!({"s": t("U8", &[1], 0, 1)}), 1),
    );
    let d = root.path().join("ck");
    std::fs::create_dir_all(d.join("real")).unwrap();
    write(
        &d.join("real"),
        "a.safetensors",
        &file(&json!({"a": t("U8", &[2], 0, 2)}), 2),
    );
    // A link that stays inside is followed.
    symlink("real/a.safetensors", d.join("a.safetensors")).unwrap();
    assert_eq!(Checkpoint::open(&d).unwrap().entries.len(), 1);

    // A shard linked to a file outside: refused by directory, and by index.
    symlink(&secret, d.join("b.safetensors")).unwrap();
    let refused = |e: FormatError| match e {
        FormatError::OutsideCheckpoint {
            ref file, ref real, ..
        } => {
            assert_eq!(real, &std::fs::canonicalize(&secret).unwrap());
            let text = e.to_string();
            assert!(
                text.contains("outside the checkpoint's directory"),
                "{text}"
            );
            file.clone()
        }
        other => panic!("expected OutsideCheckpoint, got {other:?}"),
    };
    assert!(refused(Checkpoint::open(&d).unwrap_err()).ends_with("b.safetensors"));
    let index = json!({"weight_map": {"a": "a.safetensors", "s": "b.safetensors"}});
    let index_path = write(&d, INDEX_FILE_NAME, index.to_string().as_bytes());
    refused(Checkpoint::open(&d).unwrap_err());
    refused(Checkpoint::open(&index_path).unwrap_err());
    // A folder linked from outside.
    std::fs::remove_file(d.join("b.safetensors")).unwrap();
    symlink(&outside, d.join("sub")).unwrap();
    let index = json!({"weight_map": {"a": "a.safetensors", "s": "sub/secret.safetensors"}});
    write(&d, INDEX_FILE_NAME, index.to_string().as_bytes());
    refused(Checkpoint::open(&d).unwrap_err());
    // A shard linked to a file that is no safetensors file is refused before it is read.
    std::fs::remove_file(d.join(INDEX_FILE_NAME)).unwrap();
    let passwd = write(&outside, "passwd", b"root:x:0:0:root:/root:/bin/bash\n");
    symlink(&passwd, d.join("c.safetensors")).unwrap();
    let e = Checkpoint::open(&d).unwrap_err();
    assert!(matches!(e, FormatError::OutsideCheckpoint { .. }), "{e}");
    // An index linked from outside the directory is refused too.
    std::fs::remove_file(d.join("c.safetensors")).unwrap();
    let foreign = write(
        &outside,
        "index.json",
        json!({"weight_map": {"a": "a.safetensors"}})
            .to_string()
            .as_bytes(),
    );
    symlink(&foreign, d.join(INDEX_FILE_NAME)).unwrap();
    let e = Checkpoint::open(&d).unwrap_err();
    assert!(matches!(e, FormatError::OutsideCheckpoint { .. }), "{e}");
    // A file the caller names is read wherever it leads.
    assert_eq!(Checkpoint::open(&secret).unwrap().entries.len(), 1);
}

#[test]
fn resolve_inside_follows_links_within_the_directory_and_refuses_the_rest() {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let secret = write(root.path(), "secret", b"x");
    let d = root.path().join("store");
    std::fs::create_dir(&d).unwrap();
    let real = write(&d, "a.rows", b"a");
    symlink("a.rows", d.join("b.rows")).unwrap();
    symlink(&secret, d.join("c.rows")).unwrap();
    let canonical = std::fs::canonicalize(&real).unwrap();
    assert_eq!(resolve_inside(&d, &real).unwrap(), canonical);
    assert_eq!(resolve_inside(&d, &d.join("b.rows")).unwrap(), canonical);
    let e = resolve_inside(&d, &d.join("c.rows")).unwrap_err();
    assert!(matches!(e, FormatError::OutsideCheckpoint { .. }), "{e}");
    let e = resolve_inside(&d, &d.join("missing.rows")).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
}

/// Hugging Face hub's cache: `<repo>/snapshots/<revision>/<name>` are symlinks to
/// `../../blobs/<hash>`; such a snapshot opens by directory and by index.
#[test]
fn a_hugging_face_snapshots_links_into_its_blobs_are_followed() {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("models--org--name");
    let blobs = repo.join("blobs");
    let snap = repo.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    write(&blobs, "h1", &file(&json!({"x": t("U8", &[4], 0, 4)}), 4));
    write(&blobs, "h2", &file(&json!({"y": t("U8", &[2], 0, 2)}), 2));
    let index = json!({"weight_map": {
        "x": "model-00001-of-00002.safetensors",
        "y": "model-00002-of-00002.safetensors"}});
    write(&blobs, "h3", index.to_string().as_bytes());
    symlink(
        "../../blobs/h1",
        snap.join("model-00001-of-00002.safetensors"),
    )
    .unwrap();
    symlink(
        "../../blobs/h2",
        snap.join("model-00002-of-00002.safetensors"),
    )
    .unwrap();
    symlink("../../blobs/h3", snap.join(INDEX_FILE_NAME)).unwrap();
    for ck in [
        Checkpoint::open(&snap).unwrap(),
        Checkpoint::open(snap.join(INDEX_FILE_NAME)).unwrap(),
    ] {
        assert_eq!(ck.entries.len(), 2);
        // Files keep their names in the snapshot (errors and reports name those).
        assert!(ck.files[0]
            .path
            .ends_with("0123abcd/model-00001-of-00002.safetensors"));
    }
    // Elsewhere in the repository (not its blobs) is outside.
    write(
        &repo,
        "elsewhere",
        &file(&json!({"z": t("U8", &[1], 0, 1)}), 1),
    );
    std::fs::remove_file(snap.join(INDEX_FILE_NAME)).unwrap();
    symlink("../../elsewhere", snap.join("z.safetensors")).unwrap();
    let e = Checkpoint::open(&snap).unwrap_err();
    assert!(matches!(e, FormatError::OutsideCheckpoint { .. }), "{e}");
}
