use super::*;
use crate::formats::safetensors::save::index::is_shard_name;
use crate::formats::safetensors::{Checkpoint, Dtype};

#[test]
fn parse_size_reads_every_size_as_the_config_does() {
    assert_eq!(parse_size("5GB"), Ok(5_000_000_000)); // as huggingface_hub
    assert_eq!(parse_size("500MB"), Ok(500_000_000));
    assert_eq!(parse_size("8kb"), Ok(8000));
    assert_eq!(parse_size(" 1.5 TB "), Ok(1_500_000_000_000));
    // What huggingface_hub refuses, and every other size of gpufile takes.
    assert_eq!(parse_size("5GiB"), Ok(5 << 30));
    assert_eq!(parse_size("5 GiB"), Ok(5 << 30));
    assert_eq!(parse_size("1000"), Ok(1000));
    assert_eq!(parse_size("16M"), Ok(16 << 20));
    for text in ["5GiB", "5GB", "5 GiB", "1000", "16k", "1.5GiB"] {
        assert_eq!(
            parse_size(text),
            Ok(crate::config::parse_size(text).unwrap())
        );
    }
    assert_eq!(
        parse_size("xGB").unwrap_err(),
        "max_shard_size \"xGB\": expected a size such as 4194304, 4MiB, 1.5GiB, 16k or 1GB"
    );
    assert_eq!(
        parse_size("0").unwrap_err(),
        "max_shard_size must be positive, got \"0\""
    );
    assert!(parse_size("-1MB").is_err());
    assert!(parse_size("0.0001KB")
        .unwrap_err()
        .contains("whole number of bytes"));
}

#[test]
fn split_fills_shards_as_huggingface_hub() {
    // The cases of tests/test_save.py's model: ten tensors of 4000 bytes, a 12 kB head, a tiny one.
    let mut sizes = vec![4000u64; 10];
    sizes.push(12_000);
    sizes.push(4);
    assert_eq!(
        split(&sizes, 1_000_000_000),
        vec![(0..12).collect::<Vec<_>>()]
    );
    let alone = |v: std::ops::Range<usize>| v.map(|i| vec![i]).collect::<Vec<_>>();
    // A tensor over the limit is a shard of its own where it is met: before the open one.
    let mut want = alone(0..9);
    want.extend([vec![10], vec![9], vec![11]]);
    assert_eq!(split(&sizes, 4000), want);
    let mut want = alone(0..9);
    want.extend([vec![10], vec![9, 11]]);
    assert_eq!(split(&sizes, 4004), want);
    assert_eq!(split(&sizes, 3999), alone(0..12));
    assert_eq!(
        split(&sizes, 12_000),
        vec![
            vec![0, 1, 2],
            vec![3, 4, 5],
            vec![6, 7, 8],
            vec![9],
            vec![10],
            vec![11]
        ]
    );
    assert_eq!(split(&[], 10), vec![Vec::<usize>::new()]);
    assert_eq!(split(&[0, 0], 1), vec![vec![0, 1]]);
}

#[test]
fn shard_names_and_their_pattern() {
    assert_eq!(shard_name(0, 12), "model-00001-of-00012.safetensors");
    assert!(is_shard_name("model-00003-of-00012.safetensors"));
    assert!(!is_shard_name("model-0003-of-00012.safetensors"));
    assert!(!is_shard_name("model-00003-of-00012.safetensors.tmp"));
    assert!(!is_shard_name("model.safetensors"));
}

#[test]
fn the_index_is_what_python_json_dumps_writes() {
    let index = CheckpointIndex {
        metadata: BTreeMap::from([
            ("total_size".to_owned(), MetaValue::Int(8004)),
            (
                "a\u{e9}\u{1f600}\"\\\n\u{1}\u{7f}".to_owned(),
                MetaValue::Str("x y".into()),
            ),
        ]),
        weight_map: vec![
            ("w".into(), "model-00002-of-00002.safetensors".into()),
            ("b".into(), "model-00001-of-00002.safetensors".into()),
        ],
    };
    // json.dumps({"metadata": {"total_size": 8004, "a\u00e9\U0001f600\"\\\n\x01\x7f": "x y"},
    //             "weight_map": {"w": "...2", "b": "...1"}}, indent=2, sort_keys=True) + "\n"
    let want = r#"{
  "metadata": {
    "a\u00e9\ud83d\ude00\"\\\n\u0001\u007f": "x y",
    "total_size": 8004
  },
  "weight_map": {
    "b": "model-00001-of-00002.safetensors",
    "w": "model-00002-of-00002.safetensors"
  }
}
"#;
    assert_eq!(index.to_json(), want);
    let empty = CheckpointIndex {
        metadata: BTreeMap::new(),
        weight_map: vec![],
    };
    assert_eq!(
        empty.to_json(),
        "{\n  \"metadata\": {},\n  \"weight_map\": {}\n}\n"
    );
}

fn rows(data: &[Vec<u8>]) -> Vec<TensorRow> {
    data.iter()
        .enumerate()
        .map(|(i, d)| TensorRow::host(format!("t{i:02}"), Dtype::U8, vec![d.len() as u64], d))
        .collect()
}

fn save(dir: &Path, data: &[Vec<u8>], limit: u64) -> Result<CheckpointIndex, SaveError> {
    let engine = Engine::global().unwrap();
    let settings = engine.shared_settings();
    let tensors = rows(data);
    let meta = BTreeMap::from([("step".to_owned(), "7".to_owned())]);
    let options = SaveOptions {
        max_shard_size: limit,
        metadata: Some(&meta),
        durable: true,
        sizes: None,
        stop: None,
    };
    // SAFETY: `data` outlives the call.
    unsafe { save_checkpoint(dir, &tensors, &options, &engine, &settings) }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn check_loads(dir: &Path, data: &[Vec<u8>]) {
    let ck = Checkpoint::open(dir).unwrap();
    assert_eq!(ck.entries.len(), data.len());
    for (i, d) in data.iter().enumerate() {
        let e = &ck.entries[ck.find(&format!("t{i:02}")).unwrap()];
        let h = &ck.files[e.file];
        let t = ck.info(e);
        let bytes = std::fs::read(&h.path).unwrap();
        let at = (h.data_start + t.start) as usize;
        assert_eq!(&bytes[at..at + d.len()], d.as_slice());
    }
}

#[test]
fn a_sharded_checkpoint_round_trips_through_the_loader() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("new").join("ck");
    let data: Vec<Vec<u8>> = (0..7u8).map(|i| vec![i; 1000 + 37 * i as usize]).collect();
    let index = save(&dir, &data, 2500).unwrap();
    let shards: Vec<String> = (0..4).map(|k| shard_name(k, 4)).collect();
    let mut want = shards.clone();
    want.push(INDEX_NAME.into());
    assert_eq!(names(&dir), want);
    let text = std::fs::read_to_string(dir.join(INDEX_NAME)).unwrap();
    assert_eq!(text, index.to_json());
    assert!(text.contains("\"step\": \"7\""), "{text}");
    assert_eq!(
        index.metadata["total_size"],
        MetaValue::Int(data.iter().map(|d| d.len() as u64).sum())
    );
    check_loads(&dir, &data);
    // Shards carry only {"format": "pt"}; a single file carries the caller's metadata too.
    let ck = Checkpoint::open(&dir).unwrap();
    let pt = BTreeMap::from([("format".to_owned(), "pt".to_owned())]);
    assert!(ck.files.iter().all(|h| h.metadata.as_ref() == Some(&pt)));
}

#[test]
fn a_new_checkpoint_removes_what_the_replaced_one_had_and_leaves_other_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("config.json"), "{}").unwrap();
    let data: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 1000]).collect();
    save(dir, &data, 1000).unwrap(); // 6 shards
    assert_eq!(names(dir).len(), 8);
    save(dir, &data, 2000).unwrap(); // 3 shards: the other 6 go
    let mut want = vec!["config.json".to_owned()];
    want.extend((0..3).map(|k| shard_name(k, 3)));
    want.push(INDEX_NAME.into());
    assert_eq!(names(dir), want);
    check_loads(dir, &data);
    let other: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i + 50; 1000]).collect();
    save(dir, &other, 1 << 20).unwrap(); // one file: index and shards go
    assert_eq!(names(dir), ["config.json", SINGLE_NAME]);
    check_loads(dir, &other);
    let ck = Checkpoint::open(dir).unwrap();
    assert_eq!(ck.files[0].metadata.as_ref().unwrap()["step"], "7");
    save(dir, &data, 3000).unwrap(); // sharded again: the single file goes
    let mut want = vec!["config.json".to_owned()];
    want.extend((0..2).map(|k| shard_name(k, 2)));
    want.push(INDEX_NAME.into());
    assert_eq!(names(dir), want);
    check_loads(dir, &data);
}

#[test]
fn a_refused_save_leaves_the_directory_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
    save(dir, &data, 150).unwrap();
    let before = names(dir);
    let engine = Engine::global().unwrap();
    let settings = engine.shared_settings();
    let mut tensors = rows(&data);
    tensors[2].shape = vec![99]; // 100 bytes said to be 99
    let options = SaveOptions {
        max_shard_size: 150,
        metadata: None,
        durable: false,
        sizes: None,
        stop: None,
    };
    // SAFETY: `data` outlives the call.
    let e = unsafe { save_checkpoint(dir, &tensors, &options, &engine, &settings) }.unwrap_err();
    assert!(matches!(e, SaveError::Format(_)), "{e}");
    assert!(
        e.to_string().contains("model-00003-of-00003.safetensors"),
        "{e}"
    );
    assert!(e.to_string().contains("needs 99 bytes"), "{e}");
    assert_eq!(names(dir), before);
    check_loads(dir, &data);
    tensors[2].shape = vec![100];
    tensors[1].name = "t00".into();
    // SAFETY: as above.
    let e = unsafe { save_checkpoint(dir, &tensors, &options, &engine, &settings) }.unwrap_err();
    assert!(e.to_string().contains("\"t00\" is given twice"), "{e}");
    assert_eq!(names(dir), before);
}

#[test]
fn a_refused_save_creates_no_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a").join("b");
    let data: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
    let engine = Engine::global().unwrap();
    let settings = engine.shared_settings();
    let mut tensors = rows(&data);
    tensors[2].shape = vec![99]; // 100 bytes said to be 99
    for limit in [150, 1 << 20] {
        let options = SaveOptions {
            max_shard_size: limit,
            metadata: None,
            durable: true,
            sizes: None,
            stop: None,
        };
        // SAFETY: `data` outlives the call.
        let e =
            unsafe { save_checkpoint(&dir, &tensors, &options, &engine, &settings) }.unwrap_err();
        assert!(e.to_string().contains("needs 99 bytes"), "{e}");
        assert!(!tmp.path().join("a").exists(), "{limit}: {e}");
    }
}
