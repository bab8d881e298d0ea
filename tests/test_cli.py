import json
import os
import subprocess
import sys

import numpy as np
import pytest


def gpufile_cli(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          text=True, env=clean, timeout=120)


def test_config_lists_every_setting_with_source():
    r = gpufile_cli("config", env={"KVIKIO_NTHREADS": "4"})
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("\n\n")[0]  # the settings, then their variables
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert set(rows) >= {"compat_mode", "num_threads", "task_size", "gds_threshold",
                         "bounce_buffer_size", "auto_direct_io_read", "auto_direct_io_write"}
    assert "env KVIKIO_NTHREADS" in rows["num_threads"]
    assert "default" in rows["task_size"]


def test_config_json():
    r = gpufile_cli("config", "--json", env={"KVIKIO_COMPAT_MODE": "off"})
    cfg = json.loads(r.stdout)["settings"]
    assert cfg["compat_mode"] == {"value": "OFF", "source": "env KVIKIO_COMPAT_MODE", "error": None,
                                  "variables": ["GPUFILE_COMPAT_MODE", "KVIKIO_COMPAT_MODE"]}


def test_read_json_reports_path_and_throughput(tmp_path):
    p = tmp_path / "d.bin"
    np.arange(1 << 20, dtype=np.uint32).tofile(p)
    r = gpufile_cli("read", str(p), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["bytes"] == 4 << 20
    assert rep["path"]["backend"] == "gpufile-posix"
    assert rep["throughput_gb_per_s"] > 0


def test_read_missing_file():
    r = gpufile_cli("read", "/nonexistent.bin")
    assert r.returncode == 1
    assert "No such file" in r.stderr


def test_bad_env_is_reported():
    r = gpufile_cli("config", env={"GPUFILE_NTHREADS": "many"})
    assert r.returncode == 1
    assert "GPUFILE_NTHREADS" in r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("num_threads "))
    assert '"many"' in row and "env GPUFILE_NTHREADS: invalid: expected an integer" in row
    r = gpufile_cli("read", "/nonexistent", env={"GPUFILE_NTHREADS": "many"})
    assert r.returncode == 1 and r.stdout == "" and "GPUFILE_NTHREADS" in r.stderr


def test_sizes_take_decimal_and_binary_units_and_fractions(tmp_path):
    p = tmp_path / "u.bin"
    p.write_bytes(os.urandom(3 << 20))
    for text, expect in [("1.5MiB", 3 << 19), ("2MB", 2_000_000), ("16k", 16 << 10),
                         ("1000", 1000), ("0.5 MiB", 1 << 19)]:
        r = gpufile_cli("read", str(p), "--host", "--size", text, "--json")
        assert r.returncode == 0, (text, r.stderr)
        assert json.loads(r.stdout)["bytes"] == expect, text
    r = gpufile_cli("read", str(p), "--host", "--size", "0.1MiB")
    assert r.returncode == 1 and "not a whole number of bytes" in r.stderr
    r = gpufile_cli("read", str(p), "--host", "--size", "3 parsecs")
    assert r.returncode == 1 and "unknown size unit" in r.stderr


def test_text_output_prints_sizes_and_labelled_rates(tmp_path):
    p = tmp_path / "t.bin"
    p.write_bytes(os.urandom(3 << 20))
    r = gpufile_cli("read", str(p), "--host", "--task-size", "1MiB")
    assert "bytes       3145728 (3 MiB)" in r.stdout and "task_size   1 MiB" in r.stdout
    assert " GB/s" in r.stdout and "GiB/s" not in r.stdout
    r = gpufile_cli("read", str(p), "--host", "--units", "binary")
    assert " GiB/s" in r.stdout
    r = gpufile_cli("read", str(p), "--host", "--units", "both")
    assert " GB/s (" in r.stdout and " GiB/s)" in r.stdout
    r = gpufile_cli("config")
    assert "4194304 (4 MiB)" in r.stdout
    r = gpufile_cli("explain", str(p), "--host")
    assert "request     3 MiB (3145728 bytes)" in r.stdout, r.stdout
    r = gpufile_cli("read", str(p), "--units", "metric")
    assert r.returncode == 1 and "expected decimal, binary or both" in r.stderr


def test_help_lists_the_commands_truthfully():
    r = gpufile_cli("--help")
    assert r.returncode == 0
    for name in ("config", "read", "check", "explain", "bench", "load"):
        assert f"\n  {name} " in r.stdout
    assert "later" not in r.stdout and "read check" not in r.stdout


def test_read_refuses_ranges_past_the_end_and_files_without_a_size(tmp_path):
    p = tmp_path / "s.bin"
    p.write_bytes(b"abc")
    r = gpufile_cli("read", str(p), "--offset", "4")
    assert r.returncode == 1 and "past the end" in r.stderr and str(p) in r.stderr
    r = gpufile_cli("read", str(p), "--offset", "3", "--json")  # at the end: nothing to read
    assert r.returncode == 0 and json.loads(r.stdout)["bytes"] == 0
    r = gpufile_cli("read", "/dev/zero", "--size", "1k")
    assert r.returncode == 1 and "character device" in r.stderr
    r = gpufile_cli("read", "/proc/self/status")
    assert r.returncode == 1 and "pseudo file system" in r.stderr


def test_check_of_a_missing_file_fails():
    r = gpufile_cli("check", "/nonexistent/file.bin")
    assert r.returncode == 1 and "No such file" in r.stderr


def test_explain_takes_the_files_size_and_refuses_zero_threads(tmp_path):
    p = tmp_path / "e.bin"
    p.write_bytes(os.urandom(5 << 20))
    r = gpufile_cli("explain", str(p), "--offset", "1MiB", "--host", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prediction"]["request"]["size"] == 4 << 20
    r = gpufile_cli("explain", str(p), "--threads", "0")
    assert r.returncode == 1 and "--threads" in r.stderr
    r = gpufile_cli("explain")  # nothing to explain: a usage error, as any missing argument
    assert r.returncode == 2 and "<FILE|--size <SIZE>>" in r.stderr
    r = gpufile_cli("explain", "--size", "1MiB", "--device")
    assert r.returncode == 2  # --device takes a GPU number, as in `read`: the number is missing


def _has_gpu():
    import gpufile
    return gpufile.check().as_dict()["gpus"] != []


def test_explain_run_falls_back_to_host_memory_without_a_gpu(tmp_path):
    if _has_gpu():
        pytest.skip("this machine has a GPU: explain --run reads into GPU 0")
    p = tmp_path / "f.bin"
    p.write_bytes(os.urandom(1 << 20))
    r = gpufile_cli("explain", str(p), "--run", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prediction"]["request"]["memory"] == "host"
    assert out["prediction"]["notes"][0].startswith("host memory:")
    assert out["observed"]["by_path"]["gpufile-posix"]["bytes"] == 1 << 20
    r = gpufile_cli("explain", str(p), "--run")
    assert "note        host memory:" in r.stdout


def test_non_utf8_arguments_end_in_a_clear_error(tmp_path):
    name = os.fsdecode(b"caf\xe9.bin")  # not UTF-8: a surrogate-escaped str in Python
    r = subprocess.run([sys.executable, "-m", "gpufile", "read", os.fsencode(tmp_path) + b"/" +
                        b"caf\xe9.bin"], capture_output=True, timeout=60)
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    assert b"No such file" in r.stderr
    (tmp_path / name).write_bytes(b"xyz")
    r = subprocess.run([sys.executable, "-m", "gpufile", "read", "--host",
                        os.fsencode(tmp_path / name)], capture_output=True, timeout=60)
    assert r.returncode == 0 and b"bytes       3 (3 B)" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "gpufile", "read", "x", "--size", b"1\xffk"],
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    assert b"invalid UTF-8" in r.stderr


def test_cufile_config_without_a_file_is_cufiles_defaults(tmp_path):
    code = ("import gpufile; p, v = gpufile.cufile_driver.config(); "
            "print(p, v['execution.max_io_threads'])")
    missing = tmp_path / "none.json"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "CUFILE_ENV_PATH_JSON": str(missing)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(missing), "4"]


def test_io_path_describes_the_read_that_would_run(tmp_path):
    import gpufile
    if _has_gpu():
        pytest.skip("this machine has a GPU: io_path describes a device read")
    p = tmp_path / "io.bin"
    p.write_bytes(b"x")
    with gpufile.CuFile(p) as f:
        backend, reason = f.io_path
        assert backend == "gpufile-posix" and reason.startswith("no GPU (")
        assert "host memory" in reason
        with gpufile.defaults.set("compat_mode", "off"):  # host reads ignore compat_mode
            assert f.io_path[0] == "gpufile-posix"


def _entry_point():
    path = os.path.join(os.path.dirname(sys.executable), "gpufile")
    if not os.path.exists(path):
        pytest.skip("no gpufile entry point beside this interpreter (a wheel installed with "
                    "pip's --target has none)")
    return path


@pytest.mark.parametrize("how", ["python -m gpufile", "entry point"])
def test_bad_env_is_one_line_of_error(how):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean["KVIKIO_COMPAT_MODE"] = "maybe"
    cmd = [sys.executable, "-m", "gpufile"] if how == "python -m gpufile" else [_entry_point()]
    r = subprocess.run([*cmd, "config"], capture_output=True, text=True, env=clean, timeout=120)
    assert r.returncode == 1
    assert r.stderr == ('gpufile: error: environment variable KVIKIO_COMPAT_MODE="maybe" is '
                        "invalid: expected on/off/auto (also true/false, yes/no, 1/0; any case)\n")


@pytest.mark.parametrize("how", ["python -m gpufile", "entry point"])
def test_a_misspelt_variable_is_one_warning_line_of_the_command(how):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean["GPUFILE_X"] = "1"
    cmd = [sys.executable, "-m", "gpufile"] if how == "python -m gpufile" else [_entry_point()]
    r = subprocess.run([*cmd, "config"], capture_output=True, text=True, env=clean, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ("gpufile: warning: environment variable GPUFILE_X is not one gpufile "
                        "reads (`gpufile config` lists the settings and their variables)\n")


def test_a_misspelt_variable_is_still_a_warning_for_the_library():
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean["GPUFILE_X"] = "1"
    code = "import warnings; warnings.simplefilter('error'); import gpufile"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean,
                       timeout=120)
    assert r.returncode == 1
    assert "UserWarning: environment variable GPUFILE_X is not one gpufile reads" in r.stderr


def test_unknown_env_variable_is_warned_once_by_the_cli():
    r = gpufile_cli("config", env={"GPUFILE_TASKSIZE": "1MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("GPUFILE_TASKSIZE is not one gpufile reads; did you mean "
                          "GPUFILE_TASK_SIZE?") == 1, r.stderr


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: both plan into GPU 0")
def test_explain_chooses_memory_as_read_does_with_or_without_run(tmp_path):
    p = tmp_path / "m.bin"
    p.write_bytes(os.urandom(1 << 20))
    for args in (["--size", "1GiB"], [str(p)], [str(p), "--run"]):
        r = gpufile_cli("explain", *args, "--json")
        assert r.returncode == 0, r.stderr
        pred = json.loads(r.stdout)["prediction"]
        assert pred["request"]["memory"] == "host", (args, pred["request"])
        assert any(n.startswith("host memory: ") for n in pred["notes"]), (args, pred["notes"])
    r = gpufile_cli("explain", "--size", "1GiB", "--device", "0", "--json")  # another machine's GPU
    assert json.loads(r.stdout)["prediction"]["request"]["memory"] == "device"
    import gpufile
    assert gpufile.explain(1 << 20).as_dict()["prediction"]["request"]["memory"] == "host"


def test_explain_says_whether_a_gather_into_gpu_memory_runs_on_the_gpu():
    env = {"GPUFILE_DMA_CACHE_SIZE": "1GiB"}
    r = gpufile_cli("explain", "--size", "1GiB", "--device", "0", env=env)
    assert r.returncode == 0, r.stderr
    assert ("into GPU memory, hot ranges by the GPU's gather kernel: on, up to dma_cache_size "
            "1073741824 bytes registered") in r.stdout, r.stdout
    r = gpufile_cli("explain", "--size", "1GiB", "--device", "0", "--json", env=env)
    assert json.loads(r.stdout)["prediction"]["gather_kernel"]["on"] is True
    r = gpufile_cli("explain", "--size", "1GiB", "--device", "0")
    assert "gather kernel: off: dma_cache_size is 0" in r.stdout, r.stdout
    r = gpufile_cli("explain", "--size", "1GiB", "--host")
    assert "gather kernel" not in r.stdout
