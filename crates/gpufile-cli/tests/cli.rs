//! The `gpufile` binary, run as a user would.

use std::process::{Command, Output};

fn gpufile(args: &[&str], env: &[(&str, &str)]) -> Output {
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
    cmd.envs(env.iter().copied());
    cmd.output().expect("run gpufile")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn config_shows_values_and_sources() {
    let o = gpufile(
        &["config"],
        &[("KVIKIO_TASK_SIZE", "1MiB"), ("KVIKIO_COMPAT_MODE", "on")],
    );
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_owned()
    };
    assert!(
        line("task_size").contains("1048576") && line("task_size").contains("env KVIKIO_TASK_SIZE")
    );
    assert!(line("compat_mode").contains("ON"));
    assert!(line("gds_threshold").contains("16384") && line("gds_threshold").contains("default"));
    assert!(line("num_threads").contains("cores="), "{text}");
}

#[test]
fn config_json_parses() {
    let o = gpufile(&["config", "--json"], &[("GPUFILE_TASK_SIZE", "2MiB")]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["settings"];
    assert_eq!(s["task_size"]["value"], 2 << 20);
    assert_eq!(s["task_size"]["source"], "env GPUFILE_TASK_SIZE");
    assert_eq!(s["compat_mode"]["value"], "AUTO");
    assert_eq!(v["command"], "config");
}

#[test]
fn bad_env_value_is_a_clear_error() {
    let o = gpufile(&["config"], &[("KVIKIO_COMPAT_MODE", "maybe")]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("KVIKIO_COMPAT_MODE") && err.contains("maybe"),
        "{err}"
    );
}

#[test]
fn read_reports_bytes_throughput_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
    let p = path.to_str().unwrap();
    let o = gpufile(&["read", p, "--threads", "3", "--task-size", "256k"], &[]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(text.contains(&format!("bytes       {}", 3 << 20)), "{text}");
    assert!(
        text.contains("GB/s") && text.contains("gpufile-posix"),
        "{text}"
    );
    assert!(
        text.contains("threads     3") && text.contains("task_size   256 KiB"),
        "{text}"
    );

    let o = gpufile(
        &["read", p, "--json", "--offset", "1MiB", "--repeat", "3"],
        &[],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["bytes"], 2 << 20);
    assert_eq!(v["path"]["backend"], "gpufile-posix");
    assert_eq!(v["memory"], "host");
    assert_eq!(v["seconds_per_run"].as_array().unwrap().len(), 3);
    assert_eq!(v["schema_version"], 2);
}

#[test]
fn errors_with_json_are_json_on_stdout() {
    let o = gpufile(&["read", "/nonexistent/file.bin", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["type"], "os");
    assert_eq!(v["error"]["errno"], 2);
    assert_eq!(v["error"]["path"], "/nonexistent/file.bin");
    assert_eq!(v["command"], "read");
}

#[test]
fn non_utf8_arguments_are_bad_values_or_paths() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"1\xffk");
    let o = Command::new(env!("CARGO_BIN_EXE_gpufile"))
        .args(["read".as_ref(), "x".as_ref(), "--size".as_ref(), bad])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("invalid UTF-8"),
        "{o:?}"
    );
    let path = std::ffi::OsStr::from_bytes(b"/nonexistent/caf\xe9.bin");
    let o = Command::new(env!("CARGO_BIN_EXE_gpufile"))
        .args(["read".as_ref(), path])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("No such file"),
        "{o:?}"
    );
}

#[test]
fn read_errors_exit_1_with_the_reason() {
    let o = gpufile(&["read", "/nonexistent/file.bin"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such file or directory"));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.bin");
    std::fs::write(&path, b"abc").unwrap();
    let o = gpufile(&["read", path.to_str().unwrap(), "--size", "10"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("past the end"),
        "{o:?}"
    );
    let o = gpufile(&["read", path.to_str().unwrap(), "--threads", "0"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("num_threads"),
        "{o:?}"
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(gpufile(&["frobnicate"], &[]).status.code(), Some(2));
    assert_eq!(gpufile(&["--help"], &[]).status.code(), Some(0));
}

#[test]
fn misspelt_env_variable_is_warned_once() {
    let o = gpufile(&["config"], &[("KVIKIO_NTHREAD", "8")]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "gpufile: warning: environment variable KVIKIO_NTHREAD is not one gpufile reads; \
         did you mean KVIKIO_NTHREADS?\n"
    );
}

#[test]
fn negative_offsets_and_sizes_say_they_must_be_non_negative() {
    for (args, rule) in [
        (
            &["read", "Cargo.toml", "--offset", "-1"][..],
            "offsets are non-negative",
        ),
        (
            &["explain", "--size", "-1GiB"][..],
            "sizes are non-negative",
        ),
        (
            &["read", "Cargo.toml", "--task-size", "-4MiB"][..],
            "sizes are non-negative",
        ),
    ] {
        let o = gpufile(args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(rule) && !err.contains("'-- -"),
            "{args:?}: {err}"
        );
    }
}

/// Ctrl-C while `bench --ops write` runs: the write file is removed, the data file it made
/// stays complete, and the exit status is 130 (128 + SIGINT).
#[test]
fn an_interrupted_bench_removes_its_write_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.bin");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufile"))
        .args(["bench", "--file", data.to_str().unwrap(), "--create"])
        .args([
            "--sizes", "16MiB", "--ops", "write", "--memory", "host", "--runs", "100000",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let names = || -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let start = std::time::Instant::now();
    while !names()
        .iter()
        .any(|n| n.starts_with(".gpufile-bench-write-"))
    {
        assert!(child.try_wait().unwrap().is_none(), "bench ended early");
        assert!(start.elapsed().as_secs() < 120, "no write file after 120 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (_, err) = interrupted(child);
    assert!(err.contains("interrupted (SIGINT)"), "{err}");
    assert_eq!(names(), ["data.bin"]);
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 16 << 20);
}

/// Ctrl-C while `read --repeat` runs (its reads seen in /proc): the command stops at once,
/// with one line, no report of the cut runs, and status 130 (it was killed by the signal).
#[test]
fn an_interrupted_read_repeat_says_so_in_one_line_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.bin");
    std::fs::write(&data, vec![7u8; 8 << 20]).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_gpufile"))
        .args([
            "read",
            data.to_str().unwrap(),
            "--host",
            "--repeat",
            "100000",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rchar = || -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{}/io", child.id())).unwrap_or_default();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    let start = std::time::Instant::now();
    while rchar() < 4 * (8 << 20) {
        assert!(start.elapsed().as_secs() < 120, "no reads after 120 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (out, err) = interrupted(child);
    assert_eq!(
        err,
        "gpufile: error: interrupted (SIGINT); the read was stopped; nothing is reported\n"
    );
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
}

/// bench's own file in TMPDIR is a symlink to a user's file: refused, the file untouched; and
/// `--file` naming a dangling symlink with `--create` creates nothing.
#[test]
fn bench_never_writes_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user.txt");
    std::fs::write(&user, b"precious\n").unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::os::unix::fs::symlink(&user, tmp.join("gpufile-bench.bin")).unwrap();
    let args = [
        "bench", "--sizes", "1MiB", "--memory", "host", "--runs", "1",
    ];
    let o = gpufile(&args, &[("TMPDIR", tmp.to_str().unwrap())]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(std::fs::read(&user).unwrap(), b"precious\n");

    let dangling = dir.path().join("dangling.bin");
    std::os::unix::fs::symlink(dir.path().join("target.bin"), &dangling).unwrap();
    let mut args = vec!["bench", "--file", dangling.to_str().unwrap(), "--create"];
    args.extend(["--sizes", "1MiB", "--memory", "host", "--runs", "1"]);
    let o = gpufile(&args, &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(!dir.path().join("target.bin").exists());
}

/// Sends SIGINT to `child` and waits for it: its output and stderr, once it exited with 130.
fn interrupted(child: std::process::Child) -> (std::process::Output, String) {
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(130), "{err}");
    (out, err)
}
