//! What the `gpufile` binary prints for people: its tables, counts, rates and exit statuses.

use std::process::{Command, Output};

fn gpufile(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpufile"));
    cmd.args(args);
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if name.starts_with("GPUFILE_") || name.starts_with("KVIKIO_") {
            cmd.env_remove(&var);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run gpufile")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The line of `text` that starts with `start`.
fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?} in\n{text}"))
}

#[test]
fn config_shows_a_bad_variable_in_its_row_and_exits_1() {
    let env = [("GPUFILE_TASK_SIZE", "banana"), ("KVIKIO_NTHREADS", "8")];
    let o = gpufile(&["config"], &env);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let row = line(&text, "task_size ");
    assert!(
        row.contains("\"banana\"")
            && row.contains("env GPUFILE_TASK_SIZE: invalid: expected a size such as 4194304"),
        "{text}"
    );
    assert!(
        line(&text, "num_threads ").contains(" 8 ")
            && line(&text, "num_threads ").ends_with("env KVIKIO_NTHREADS"),
        "{text}"
    );
    assert!(line(&text, "gds_threshold ").ends_with("default"), "{text}");
    assert_eq!(
        stderr(&o),
        "gpufile: error: environment variable GPUFILE_TASK_SIZE=\"banana\" is invalid: \
         expected a size such as 4194304, 4MiB, 1.5GiB, 16k or 1GB\n"
    );

    let o = gpufile(&["config", "--json"], &env);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["settings"]["task_size"]["value"], "banana");
    assert_eq!(
        v["settings"]["task_size"]["source"],
        "env GPUFILE_TASK_SIZE"
    );
    assert!(v["settings"]["task_size"]["error"]
        .as_str()
        .unwrap()
        .starts_with("expected a size"));
    assert_eq!(v["settings"]["num_threads"]["value"], 8);
    assert!(v["settings"]["num_threads"]["error"].is_null());
    assert_eq!(v["error"]["type"], "invalid-env");
}

#[test]
fn config_columns_are_as_wide_as_their_widest_cell() {
    let o = gpufile(
        &["config"],
        &[("GPUFILE_HTTP_STATUS_CODES", "429,500,502,503,504,599")],
    );
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let header = text.lines().next().unwrap();
    let columns = [
        header.find("value").unwrap(),
        header.find("source").unwrap(),
    ];
    // The table ends at the blank line before the variables.
    for row in text.lines().skip(1).take_while(|l| !l.is_empty()) {
        for c in columns {
            let (before, at) = (row.as_bytes()[c - 1], row.as_bytes()[c]);
            assert!(
                before == b' ' && at != b' ',
                "a cell runs past its column at byte {c}:\n{text}"
            );
        }
    }
}

/// docs/cli.md's rule, for every command: a bad value exits 1 with one line `gpufile: error:
/// ...`, whoever finds it (clap's parsers or the command); a command line of the wrong shape
/// exits 2. A refused bench makes no file.
#[test]
fn bad_values_exit_1_and_misshapen_command_lines_2_in_every_command() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.bin");
    std::fs::write(&file, vec![1u8; 4096]).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let f = file.to_str().unwrap();
    let bad_values: &[&[&str]] = &[
        &["read", f, "--threads", "0"],
        &["read", f, "--threads", "many"],
        &["explain", f, "--threads", "0"],
        &["explain", f, "--threads", "many"],
        &["bench", "--threads", "0", "--sizes", "4k"],
        &["bench", "--threads", "many", "--sizes", "4k"],
        &["read", f, "--compat-mode", "maybe"],
        &["explain", f, "--compat-mode", "maybe"],
        &["bench", "--compat-modes", "maybe", "--sizes", "4k"],
        &["read", f, "--task-size", "banana"],
        &["explain", f, "--task-size", "banana"],
        &["bench", "--task-sizes", "banana", "--sizes", "4k"],
        &["bench", "--task-sizes", "0", "--sizes", "4k"],
        &["read", f, "--offset", "-1"],
        &["explain", f, "--offset", "-1"],
        &["read", f, "--repeat", "0"],
        &["read", f, "--device", "x"],
        &["explain", f, "--device", "x"],
        &["load", f, "--device", "x"],
        &["bench", "--runs", "0"],
        &["bench", "--runs", "x"],
        &["bench", "--memory", "floppy"],
        &["explain", f, "--cufile", "maybe"],
        &["read", f, "--units", "metric"],
    ];
    for args in bad_values {
        let o = gpufile(args, &[("TMPDIR", tmp.to_str().unwrap())]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("gpufile: error: ") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        let o = gpufile(&[args, &["--json"][..]].concat(), &[]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?} --json");
        assert_eq!(v["command"], args[0], "{args:?} --json");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_gpufile"))
        .args([OsStr::new("read"), file.as_os_str(), OsStr::new("--size")])
        .arg(OsStr::from_bytes(b"1\xffk"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "bench made a file"
    );

    let misshapen: &[&[&str]] = &[
        &["frobnicate"],
        &["config", "--frobnicate"],
        &["check", "--frobnicate"],
        &["read", f, "--frobnicate"],
        &["explain", f, "--frobnicate"],
        &["bench", "--frobnicate"],
        &["load", f, "--frobnicate"],
        &["read"],
        &["read", f, "--size"],
        &["read", f, "--size", "--json"],
        &["read", f, "--host", "--device", "0"],
        &["explain", f, "--host", "--device", "0"],
    ];
    for args in misshapen {
        let o = gpufile(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

/// Where libcuda does not load, `check` says why once, on its line; the lines it also explains
/// (the file's registration, the verdicts) point there.
#[test]
fn check_says_why_libcuda_is_missing_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.bin");
    std::fs::write(&file, b"x").unwrap();
    let o = gpufile(&["check", file.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let Some(why) = line(&text, "libcuda ").split_once("not available: ") else {
        return; // libcuda loads here: nothing to repeat
    };
    assert_eq!(text.matches(why.1).count(), 1, "{text}");
    assert!(
        line(&text, "  OFF ").ends_with("CUDA is not available, see libcuda"),
        "{text}"
    );
}

/// What only cuFile 1.15+ tells (BAR sizes, P2P modes, parameter ranges) has its lines and
/// fields; where libcufile does not load, each says "not in this cuFile" and its value is null.
#[test]
fn check_shows_what_cufile_1_15_tells_or_not_in_this_cufile() {
    let o = gpufile(&["check"], &[]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let no_cufile = line(&text, "libcufile ").contains("not available: ");
    for label in ["cuFile BAR ", "cuFile P2P ", "cuFile limits"] {
        let l = line(&text, label);
        if no_cufile {
            assert!(
                l.ends_with("not in this cuFile (libcufile not loaded)"),
                "{text}"
            );
        }
    }
    let o = gpufile(&["check", "--json"], &[]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in [
        "cufile_bar_sizes",
        "cufile_p2p_flags",
        "cufile_parameter_limits",
    ] {
        let field = &v[key];
        assert!(field["ok"].is_boolean(), "{key}: {field}");
        if no_cufile {
            assert!(field["value"].is_null(), "{key}: {field}");
            let error = field["error"].as_str().unwrap_or_default();
            assert!(error.starts_with("not in this cuFile"), "{key}: {field}");
        }
    }
}

/// Counts agree with their nouns: no `1 runs`, `1 requests`, `1 tasks`, ...
fn assert_plurals(text: &str) {
    for noun in [
        "runs",
        "requests",
        "tasks",
        "pieces",
        "workers",
        "retries",
        "files",
        "work units",
        "I/O threads",
        "tensors",
    ] {
        let wrong = format!(" 1 {noun}");
        assert!(
            !text.contains(&wrong) && !text.contains(&format!("\n1 {noun}")),
            "{wrong:?} in\n{text}"
        );
    }
}

/// The deepest nesting of parentheses in `line`.
fn depth(line: &str) -> usize {
    let (mut d, mut most) = (0usize, 0);
    for c in line.chars() {
        match c {
            '(' => d += 1,
            ')' => d = d.saturating_sub(1),
            _ => {}
        }
        most = most.max(d);
    }
    most
}

#[test]
fn explain_reads_as_prose_with_the_task_size_setting_under_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("e.bin");
    std::fs::write(&file, vec![3u8; 2 << 20]).unwrap();
    let f = file.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["--size", "0", "--host"],
        &["--size", "1MiB", "--host"],
        &["--size", "4MiB", "--threads", "4", "--host"],
        &[
            "--size",
            "2MiB",
            "--threads",
            "1",
            "--task-size",
            "1MiB",
            "--host",
        ],
        &["--size", "17MiB", "--device", "0", "--cufile", "nvfs"],
        &[
            "--size",
            "1GiB",
            "--device",
            "0",
            "--cufile",
            "nvfs",
            "--task-size",
            "1GiB",
        ],
        &["--size", "64MiB", "--device", "0", "--cufile", "compat"],
        &[f, "--host", "--run"],
    ];
    let mut texts = Vec::new();
    for args in cases {
        let o = gpufile(&[&["explain"][..], args].concat(), &[]);
        assert!(o.status.success(), "{args:?}: {o:?}");
        let text = stdout(&o);
        for l in text.lines() {
            assert!(depth(l) <= 1, "nested parentheses in {args:?}:\n{l}");
            assert!(
                !l.trim_end().ends_with('='),
                "dangling '=' in {args:?}:\n{l}"
            );
        }
        assert_plurals(&text);
        texts.push(text);
    }
    assert_eq!(
        line(&texts[0], "tasks "),
        "tasks       none: 0 bytes to read"
    );
    assert_eq!(line(&texts[1], "tasks "), "tasks       1 task of 1 MiB");
    // The setting under settings, the plan's task size where the tasks are.
    assert!(
        line(&texts[2], "settings ").contains("task_size 4 MiB"),
        "{}",
        texts[2]
    );
    assert!(
        line(&texts[2], "tasks ").starts_with("tasks       4 tasks of 1 MiB"),
        "{}",
        texts[2]
    );
    assert!(texts[3].contains("2 tasks over 1 worker\n"), "{}", texts[3]);
    assert_eq!(
        line(&texts[4], "tasks "),
        "tasks       5 tasks: 4 of 4 MiB and 1 of 1 MiB"
    );
    assert!(
        texts[5].contains("cuFile      1 request, one per task"),
        "{}",
        texts[5]
    );
    assert!(
        texts[5].contains("1 request of 1 GiB: 4 pieces"),
        "{}",
        texts[5]
    );
}

#[test]
fn units_is_an_option_of_the_commands_that_print_a_rate_only() {
    for command in ["read", "explain", "bench", "load", "digest", "verify"] {
        let o = gpufile(&[command, "--help"], &[]);
        assert!(stdout(&o).contains("--units <UNITS>"), "{command}");
    }
    for command in ["config", "check"] {
        let o = gpufile(&[command, "--help"], &[]);
        assert!(!stdout(&o).contains("--units"), "{command}: {}", stdout(&o));
        let o = gpufile(&[command, "--units", "binary"], &[]);
        assert_eq!(o.status.code(), Some(2), "{command}: {}", stderr(&o));
    }
    assert!(!stdout(&gpufile(&["--help"], &[])).contains("--units"));
}

/// `read --task-size 1`: a slow rate keeps three significant digits (it printed `0.00 GB/s`).
#[test]
fn a_slow_read_prints_its_rate_with_three_significant_digits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slow.bin");
    std::fs::write(&file, vec![5u8; 16 << 10]).unwrap();
    let args = ["read", file.to_str().unwrap(), "--host", "--task-size", "1"];
    let o = gpufile(&args, &[]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let rate = line(&text, "throughput ")
        .trim_start_matches("throughput")
        .trim()
        .trim_end_matches(" GB/s");
    let value: f64 = rate.parse().unwrap();
    let significant = rate.trim_start_matches(['0', '.']).replace('.', "");
    assert!(value > 0.0 && significant.len() >= 3, "{text}");
}

/// `bench --sizes 0` measures nothing: refused before any file is made.
#[test]
fn bench_refuses_a_size_of_0_before_making_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench", "--sizes", "64k,0", "--memory", "host", "--runs", "1",
    ];
    let o = gpufile(&args, &[("TMPDIR", dir.path().to_str().unwrap())]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(
        stderr(&o),
        "gpufile: error: --sizes 0: a transfer of 0 bytes measures nothing; sizes are at least \
         1 byte\n"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
