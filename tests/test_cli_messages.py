"""What the `gpufile` command says, the same way in every command: an OS error as gpufile words
it (never Rust's "(os error N)"), a bad variable refused by `check` too, `explain`'s
`--cufile-json` read or refused, `explain` with nothing to explain a usage error (2), and
`config` naming the variables its misspelt-variable warning sends users to."""

import json
import os
import subprocess
import sys

import pytest


def cli(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          text=True, env=clean, timeout=120)


@pytest.mark.parametrize("command", [["read"], ["check"], ["explain"], ["load"], ["digest"],
                                     ["verify"], ["bench", "--sizes", "1k", "--file"]])
def test_a_missing_file_reads_the_same_in_every_command(tmp_path, command):
    missing = tmp_path / "missing.bin"
    r = cli(*command, str(missing))
    assert r.returncode == 1, r
    first = f"gpufile: error: open {missing}: No such file or directory"
    assert r.stderr.splitlines() == [first + ("; add --create to let bench make it (1 KiB)"
                                              if command[0] == "bench" else "")], r.stderr
    assert "os error" not in r.stderr
    j = cli(*command, str(missing), "--json")
    err = json.loads(j.stdout)["error"]
    assert (err["type"], err["errno"], err["path"]) == ("os", 2, str(missing)), err


def test_a_shard_listed_by_an_index_but_missing_reads_as_an_open_error(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    r = cli("load", str(tmp_path), "--host")
    assert r.returncode == 1
    assert "os error" not in r.stderr, r.stderr
    assert "No such file or directory" in r.stderr, r.stderr


def test_check_refuses_an_invalid_variable_as_every_command_does(tmp_path):
    env = {"KVIKIO_NTHREADS": "many"}
    line = ('gpufile: error: environment variable KVIKIO_NTHREADS="many" is invalid: expected '
            "an integer from 1 to 1024 (threads)\n")
    for command in (["check"], ["read", str(tmp_path)], ["check", "--json"]):
        r = cli(*command, env=env)
        assert (r.returncode, r.stderr) == (1, line), (command, r)
    out = json.loads(cli("check", "--json", env=env).stdout)
    assert out["error"]["type"] == "invalid-env", out


def test_explain_with_nothing_to_explain_is_a_usage_error():
    r = cli("explain")
    assert r.returncode == 2, r
    assert r.stderr.startswith("error: the following required arguments were not provided:")
    assert "Usage: gpufile explain" in r.stderr and r.stdout == ""
    j = cli("explain", "--json")
    assert j.returncode == 2 and json.loads(j.stdout)["error"]["type"] == "usage"


def test_explain_refuses_a_malformed_or_missing_cufile_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    for memory in (["--host"], ["--device", "0", "--cufile", "nvfs"]):
        r = cli("explain", "--size", "1GiB", *memory, "--cufile-json", str(bad))
        assert r.returncode == 1, r
        assert r.stderr.startswith(f"gpufile: error: {bad} is not valid cufile.json: "), r.stderr
        assert "does not exist" not in r.stderr + r.stdout
        missing = tmp_path / "missing.json"
        r = cli("explain", "--size", "1GiB", *memory, "--cufile-json", str(missing))
        assert (r.returncode, r.stderr) == (
            1, f"gpufile: error: open {missing}: No such file or directory\n"), r


def test_explain_reads_a_named_cufile_json(tmp_path):
    good = tmp_path / "cufile.json"
    good.write_text('{"execution": {"max_request_parallelism": 2}}')
    r = cli("explain", "--size", "1GiB", "--device", "0", "--cufile", "nvfs", "--task-size",
            "1GiB", "--cufile-json", str(good), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prediction"]["cufile"]["execution"]["source"] == str(good), out
    assert out["prediction"]["cufile"]["execution"]["max_request_parallelism"] == 2


def test_config_shows_the_variables_its_warning_sends_users_to():
    r = cli("config", env={"GPUFILE_X": "1"})
    assert "`gpufile config` lists the settings and their variables" in r.stderr
    table, variables = r.stdout.split("\n\n")
    assert table.splitlines()[0].split() == ["setting", "value", "source"]
    lines = variables.splitlines()
    assert lines[0] == "environment variables (where several are set, the first listed wins)"
    rows = [line.split() for line in lines[1:]]
    assert ["task_size", "GPUFILE_TASK_SIZE", "KVIKIO_TASK_SIZE"] in rows, lines
    assert ["num_threads", "GPUFILE_NTHREADS", "GPUFILE_NUM_THREADS", "KVIKIO_NTHREADS",
            "KVIKIO_NUM_THREADS"] in rows, lines
    assert len(lines) == 1 + len(table.splitlines()) - 1  # every setting's
    settings = json.loads(cli("config", "--json").stdout)["settings"]
    assert settings["task_size"]["variables"] == ["GPUFILE_TASK_SIZE", "KVIKIO_TASK_SIZE"]


def test_python_explain_refuses_a_malformed_or_missing_cufile_json_too(tmp_path):
    import gpufile

    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(ValueError, match="is not valid cufile.json"):
        gpufile.explain(1 << 20, cufile_json=bad)
    with pytest.raises(FileNotFoundError):
        gpufile.explain(1 << 20, cufile_json=tmp_path / "missing.json")
