//! `gpufile load`, run as a user would, on safetensors files written here byte by byte
//! (8-byte little-endian header length, JSON header, data).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

fn gpufile(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpufile"));
    cmd.args(args);
    for var in [
        "KVIKIO_COMPAT_MODE",
        "KVIKIO_TASK_SIZE",
        "GPUFILE_TASK_SIZE",
        "KVIKIO_NTHREADS",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("run gpufile")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes a safetensors file: `tensors` are (name, dtype, shape, data), laid out in order.
fn write_safetensors(path: &Path, tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            (*name).into(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    write_raw(path, &serde_json::to_vec(&header).unwrap(), &data);
}

fn write_raw(path: &Path, header: &[u8], data: &[u8]) {
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(data);
    std::fs::write(path, file).unwrap();
}

/// `n` bytes that differ from tensor to tensor (`seed`) and from byte to byte.
fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A model-like file: F32, BF16, I64, BOOL and an empty tensor; 1 MiB + some odd sizes.
fn model(path: &Path) -> u64 {
    let tensors = vec![
        ("embed.weight", "F32", vec![256, 1024], pattern(1, 1 << 20)),
        ("layers.0.attn", "BF16", vec![3, 5, 8], pattern(2, 240)),
        ("layers.0.mlp", "I64", vec![9], pattern(3, 72)),
        ("layers.1.mask", "BOOL", vec![13], vec![1; 13]),
        ("empty", "F16", vec![0, 4], vec![]),
    ];
    let total = tensors.iter().map(|t| t.3.len() as u64).sum();
    write_safetensors(path, &tensors);
    total
}

fn load_json(args: &[&str]) -> Value {
    let o = gpufile(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

#[test]
fn load_to_host_reports_tensors_bytes_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("model.safetensors");
    let total = model(&f);
    let v = load_json(&["load", f.to_str().unwrap(), "--host", "--json", "--verify"]);
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["command"], "load");
    // The fields load.rs documents, no more, no fewer.
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "allocation_bytes",
            "allocation_seconds",
            "bytes",
            "checkpoint",
            "checkpoint_bytes",
            "command",
            "device",
            "device_name",
            "files",
            "header_seconds",
            "memory",
            "memory_note",
            "observed",
            "path",
            "remote",
            "requests",
            "schema_version",
            "seconds",
            "settings",
            "tensors",
            "tensors_per_s",
            "tensors_total",
            "throughput_gb_per_s",
            "verified",
        ]
    );
    assert_eq!(v["tensors"], 5);
    assert_eq!(v["tensors_total"], 5);
    assert_eq!(v["bytes"], total);
    assert_eq!(v["checkpoint_bytes"], total);
    assert_eq!(v["memory"], "host");
    assert!(v["device"].is_null() && v["memory_note"].is_null());
    assert!(v["remote"].is_null(), "a local checkpoint");
    assert_eq!(v["verified"], true);
    // Adjacent tensors are one request when their alignment allows (F32 then BF16 then I64
    // then BOOL: all land where they must), the empty one none.
    assert_eq!(v["requests"], 1);
    assert_eq!(v["files"][0]["path"], f.to_str().unwrap());
    assert_eq!(v["files"][0]["bytes"], total);
    assert_eq!(v["files"][0]["tensors"], 5);
    assert_eq!(v["path"]["backend"], "gpufile-posix");
    assert_eq!(v["path"]["reason"]["kind"], "host-buffer");
    assert_eq!(v["observed"]["path"], "gpufile-posix");
    assert_eq!(v["observed"]["by_path"]["gpufile-posix"]["bytes"], total);
    assert_eq!(v["observed"]["by_path"]["cufile"]["ops"], 0);
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
    assert!(v["throughput_gb_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["tensors_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn filter_reads_only_the_selected_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("model.safetensors");
    model(&f);
    let v = load_json(&[
        "load",
        f.to_str().unwrap(),
        "--host",
        "--json",
        "--verify",
        "--filter",
        "layers.0.*,embed.weight",
    ]);
    let want = (1u64 << 20) + 240 + 72;
    assert_eq!(v["tensors"], 3);
    assert_eq!(v["tensors_total"], 5);
    assert_eq!(v["bytes"], want);
    assert_eq!(v["observed"]["by_path"]["gpufile-posix"]["bytes"], want);
    assert_eq!(v["verified"], true);

    // One tensor out of the middle: its bytes only.
    let v = load_json(&[
        "load",
        f.to_str().unwrap(),
        "--host",
        "--json",
        "--filter",
        "layers.0.mlp",
    ]);
    assert_eq!(v["bytes"], 72);
    assert_eq!(v["requests"], 1);
    assert_eq!(v["observed"]["by_path"]["gpufile-posix"]["bytes"], 72);
}

#[test]
fn directory_of_shards_is_one_stream_of_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut total = 0;
    for i in 0..3u8 {
        let data = pattern(i, 4096 + i as usize * 8);
        total += data.len() as u64;
        let name = format!("w{i}");
        write_safetensors(
            &dir.path()
                .join(format!("model-0000{i}-of-00003.safetensors")),
            &[(&name, "U8", vec![data.len() as u64], data)],
        );
    }
    let v = load_json(&[
        "load",
        dir.path().to_str().unwrap(),
        "--host",
        "--json",
        "--verify",
    ]);
    assert_eq!(v["tensors"], 3);
    assert_eq!(v["bytes"], total);
    assert_eq!(v["files"].as_array().unwrap().len(), 3);
    assert_eq!(v["requests"], 3);
    assert_eq!(v["observed"]["by_path"]["gpufile-posix"]["ops"], 3);
    assert_eq!(v["verified"], true);
}

#[test]
fn text_output_says_what_was_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("model.safetensors");
    model(&f);
    let o = gpufile(&["load", f.to_str().unwrap(), "--host", "--filter", "empty"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("tensors     1 of 5"), "{text}");
    assert!(text.contains("bytes       0 (0 B) in 0 requests"), "{text}");
    assert!(text.contains("observed    nothing read"), "{text}");
}

#[test]
fn bad_files_exit_1_naming_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.safetensors");
    let name = f.to_str().unwrap();
    let cases: Vec<(Vec<u8>, Vec<u8>, &str)> = vec![
        // shape says 4 F32 = 16 bytes, offsets say 12
        (
            br#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}}"#.to_vec(),
            vec![0; 12],
            "tensor \"w\"",
        ),
        // unknown dtype
        (
            br#"{"w":{"dtype":"F13","shape":[1],"data_offsets":[0,1]}}"#.to_vec(),
            vec![0; 1],
            "tensor \"w\"",
        ),
        // data past the end of the file (truncated)
        (
            br#"{"w":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}"#.to_vec(),
            vec![0; 10],
            "tensor \"w\"",
        ),
        // malformed JSON
        (br#"{"w":"#.to_vec(), vec![], "invalid header"),
    ];
    for (header, data, says) in cases {
        write_raw(&f, &header, &data);
        let o = gpufile(&["load", name, "--host"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(name) && err.contains(says), "{err}");
        assert!(o.stdout.is_empty());
    }
    // A header length past the end of the file.
    std::fs::write(&f, 1000u64.to_le_bytes()).unwrap();
    let o = gpufile(&["load", name, "--host"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("past the end of the file"),
        "{}",
        stderr(&o)
    );

    // A name the checkpoint does not hold.
    model(&f);
    let o = gpufile(&["load", name, "--host", "--filter", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(name) && stderr(&o).contains("no tensor named \"nope\""),
        "{}",
        stderr(&o)
    );
    // --device and --host together is a usage error.
    let o = gpufile(&["load", name, "--host", "--device", "0"]);
    assert_eq!(o.status.code(), Some(2));
}
