//! The C API from C: tests/c/test_capi.c and the example of docs/c-api.md, compiled with the
//! system's C compiler against include/gpufile/gpufile.h and the libraries cargo built, then
//! run on files in a temporary folder.
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
