//! The C API from C: tests/c/test_capi.c, test_batch.c, test_save.c, test_save_file.c and the
//! example of docs/c-api.md, compiled with the system's C compiler against
//! include/gpufile/gpufile.h and the libraries cargo built, then run on files in a temporary
//! folder.
//!
//! The libraries are this crate's own lib target: cargo builds it with all its crate types
//! (rlib, staticlib, cdylib) in one compiler run, and builds it before this test because an
//! integration test depends on its crate's lib; they lie in `deps/` next to this test's
//! executable (the copies one folder up are refreshed by `cargo build` only, so may be old).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding this test's executable and the crate's libraries.
fn deps() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's executable");
    exe.parent().expect("its folder").to_owned()
}

/// The C compiler (`$CC`, else `cc`), or `None` where there is none.
fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let works = Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    works.then_some(cc)
}

/// Compiles `source` into `exe`, linked with `lib` (a path) and `extra` flags.
fn compile(cc: &str, source: &Path, exe: &Path, lib: &[String]) {
    let out = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .arg("-I")
        .arg(root().join("include"))
        .arg(source)
        .args(lib)
        .args(["-lpthread", "-ldl", "-lm"])
        .arg("-o")
        .arg(exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}{}",
        source.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `exe` with `args` and `env`; its output, asserting it succeeded.
fn run_with(exe: &Path, args: &[&Path], env: &[(&str, &str)]) -> String {
    let out = Command::new(exe)
        .args(args)
        .env_remove("KVIKIO_NTHREADS")
        .env_remove("GPUFILE_NTHREADS")
        .envs(env.iter().copied())
        .output()
        .expect("run the C program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} failed ({}):\n{text}",
        exe.display(),
        out.status
    );
    text
}

/// Runs `exe` with `args`; its output, asserting it succeeded.
fn run(exe: &Path, args: &[&Path]) -> String {
    run_with(exe, args, &[])
}

/// How to link the static library, and the shared one (found at run time through an rpath).
fn links() -> [(&'static str, Vec<String>); 2] {
    let dir = deps();
    let a = dir.join("libgpufile.a");
    let so = dir.join("libgpufile.so");
    assert!(a.exists(), "{} is missing", a.display());
    assert!(so.exists(), "{} is missing", so.display());
    [
        ("static", vec![a.display().to_string()]),
        (
            "shared",
            vec![
                so.display().to_string(),
                format!("-Wl,-rpath,{}", dir.display()),
            ],
        ),
    ]
}

#[test]
fn c_test_program_passes_against_the_static_and_the_shared_library() {
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test_capi.c");
    for (kind, lib) in links() {
        let tmp = tempfile::tempdir().expect("a temporary folder");
        let exe = tmp.path().join(format!("test_capi_{kind}"));
        compile(&cc, &source, &exe, &lib);
        let files = tmp.path().join("files");
        std::fs::create_dir(&files).expect("a folder for the files");
        // KvikIO's name for the thread count, read by the library at its first call.
        let env = [("KVIKIO_NTHREADS", "3"), ("EXPECT_NUM_THREADS", "3")];
        let out = run_with(&exe, &[&files], &env);
        assert!(out.contains("test_capi: all passed"), "{kind}: {out}");
    }
}

/// The C example of docs/c-api.md: its first ```c block.
fn doc_example() -> String {
    let page = std::fs::read_to_string(root().join("docs/c-api.md")).expect("docs/c-api.md");
    let start = page.find("```c\n").expect("a ```c block in docs/c-api.md") + 5;
    let len = page[start..].find("```").expect("the end of the block");
    page[start..start + len].to_owned()
}

#[test]
fn doc_example_compiles_and_runs() {
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let source = tmp.path().join("example.c");
    std::fs::write(&source, doc_example()).expect("write the example");
    let exe = tmp.path().join("example");
    let [(_, lib), _] = links();
    compile(&cc, &source, &exe, &lib);
    let file = tmp.path().join("example.bin");
    let out = run(&exe, &[&file]);
    assert!(out.contains("read back 1048576 bytes"), "{out}");
    let missing = tmp.path().join("missing.bin");
    let out = Command::new(&exe).arg(&missing).arg("--read-only").output();
    let out = out.expect("run the example");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("No such file or directory"), "{text}");
    assert!(text.contains(&missing.display().to_string()), "{text}");
}

#[test]
fn a_c_program_saves_a_sharded_checkpoint_the_loader_reads() {
    use gpufile_core::safetensors::Checkpoint;
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test_save.c");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let exe = tmp.path().join("test_save");
    let [(_, lib), _] = links();
    compile(&cc, &source, &exe, &lib);
    let dir = tmp.path().join("ck");
    let out = run(&exe, &[&dir]);
    assert!(out.contains("test_save: all passed"), "{out}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the checkpoint")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .into_string()
                .expect("UTF-8")
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "model-00001-of-00003.safetensors",
            "model-00002-of-00003.safetensors",
            "model-00003-of-00003.safetensors",
            "model.safetensors.index.json",
        ]
    );
    let index = std::fs::read_to_string(dir.join("model.safetensors.index.json")).expect("index");
    assert!(index.contains("\"step\": \"7\""), "{index}");
    assert!(index.contains("\"total_size\": 24000"), "{index}");
    let ck = Checkpoint::open(&dir).expect("the checkpoint loads");
    assert_eq!(ck.entries.len(), 6);
    for i in 0..6u32 {
        let e = &ck.entries[ck.find(&format!("layer.{i}")).expect("the tensor")];
        let (h, t) = (&ck.files[e.file], ck.info(e));
        assert_eq!(t.shape, [1000]);
        let bytes = std::fs::read(&h.path).expect("the shard");
        let at = (h.data_start + t.start) as usize;
        let values: Vec<f32> = bytes[at..at + 4000]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let want: Vec<f32> = (0..1000).map(|k| (i * 1000 + k) as f32).collect();
        assert_eq!(values, want, "layer.{i}");
    }
}

#[test]
fn a_c_program_saves_one_safetensors_file_the_reader_reads() {
    use gpufile_core::safetensors::Header;
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test_save_file.c");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let exe = tmp.path().join("test_save_file");
    let [(_, lib), _] = links();
    compile(&cc, &source, &exe, &lib);
    let files = tmp.path().join("files");
    std::fs::create_dir(&files).expect("a folder");
    let path = files.join("model.safetensors");
    let out = run(&exe, &[&path]);
    assert!(out.contains("test_save_file: all passed"), "{out}");
    // Only the file: no temporary of the save or of the refused ones.
    let names: Vec<_> = std::fs::read_dir(&files)
        .expect("the folder")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(names, ["model.safetensors"]);
    let bytes = std::fs::read(&path).expect("the file");
    let h = Header::from_bytes(&path, &bytes).expect("a safetensors file");
    let meta = h.metadata.as_ref().expect("metadata");
    assert_eq!(
        meta.iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [("format", "pt"), ("step", "7")]
    );
    let at = |name: &str| {
        let t = h.get(name).expect("the tensor");
        let start = (h.data_start + t.start) as usize;
        (
            t.shape.clone(),
            bytes[start..start + t.len() as usize].to_vec(),
        )
    };
    let w: Vec<u8> = [1f32, 2., 3., 4., 5., 6.]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(at("w"), (vec![2, 3], w));
    let steps: Vec<u8> = [7i64, -1, 1 << 40, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(at("steps"), (vec![4], steps));
    assert_eq!(at("flags"), (vec![5], vec![1, 0, 1, 1, 0]));
    // The safetensors layout: I64, F32, U8 (largest alignment first), no gap, no trailing byte.
    assert_eq!(h.get("steps").expect("steps").start, 0);
    assert_eq!(h.data_start as usize + 32 + 24 + 5, bytes.len());
}

#[test]
fn a_c_program_submits_a_batch_as_one_request_per_file_buffer_and_direction() {
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test_batch.c");
    for (kind, lib) in links() {
        let tmp = tempfile::tempdir().expect("a temporary folder");
        let exe = tmp.path().join(format!("test_batch_{kind}"));
        compile(&cc, &source, &exe, &lib);
        let files = tmp.path().join("files");
        std::fs::create_dir(&files).expect("a folder for the files");
        let out = run(&exe, &[&files]);
        assert!(out.contains("test_batch: all passed"), "{kind}: {out}");
    }
}

#[test]
fn a_c_monitor_sees_one_observation_per_read_with_gpufile_s_path_and_reason() {
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test_observation.c");
    for (kind, lib) in links() {
        let tmp = tempfile::tempdir().expect("a temporary folder");
        let exe = tmp.path().join(format!("test_observation_{kind}"));
        compile(&cc, &source, &exe, &lib);
        let files = tmp.path().join("files");
        std::fs::create_dir(&files).expect("a folder for the files");
        let out = run(&exe, &[&files]);
        assert!(
            out.contains("test_observation: all passed"),
            "{kind}: {out}"
        );
    }
}

#[test]
fn a_c_program_opens_a_file_by_its_descriptor_and_cancels_a_running_read() {
    let Some(cc) = compiler() else {
        println!("skipped: no C compiler (set CC, or install gcc)");
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/test_fd_cancel.c");
    for (kind, lib) in links() {
        let tmp = tempfile::tempdir().expect("a temporary folder");
        let exe = tmp.path().join(format!("test_fd_cancel_{kind}"));
        compile(&cc, &source, &exe, &lib);
        let out = run(&exe, &[tmp.path()]);
        assert!(out.contains("test_fd_cancel: all passed"), "{kind}: {out}");
    }
}
