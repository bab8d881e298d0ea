import json
import os
import subprocess
import sys

import numpy as np


def gpufile_cli(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          text=True, env=clean, timeout=120)


def test_config_lists_every_setting_with_source():
    r = gpufile_cli("config", env={"KVIKIO_NTHREADS": "4"})
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:]}
    assert set(rows) >= {"compat_mode", "num_threads", "task_size", "gds_threshold",
                         "bounce_buffer_size", "auto_direct_io_read", "auto_direct_io_write"}
    assert "env KVIKIO_NTHREADS" in rows["num_threads"]
    assert "default" in rows["task_size"]


def test_config_json():
    r = gpufile_cli("config", "--json", env={"KVIKIO_COMPAT_MODE": "off"})
    cfg = json.loads(r.stdout)
    assert cfg["compat_mode"] == {"value": "OFF", "source": "env KVIKIO_COMPAT_MODE"}


def test_read_json_reports_path_and_throughput(tmp_path):
    p = tmp_path / "d.bin"
    np.arange(1 << 20, dtype=np.uint32).tofile(p)
    r = gpufile_cli("read", str(p), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["bytes"] == 4 << 20
    assert rep["path"]["backend"] == "gpufile-posix"
    assert rep["gb_per_s"] > 0


def test_read_missing_file():
    r = gpufile_cli("read", "/nonexistent.bin")
    assert r.returncode == 1
    assert "No such file" in r.stderr


def test_bad_env_is_reported():
    r = gpufile_cli("config", env={"GPUFILE_NTHREADS": "many"})
    assert r.returncode == 1
    assert "GPUFILE_NTHREADS" in r.stderr
