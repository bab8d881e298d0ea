"""The cuFile path on a GPU machine: decisions, the spec's Step 5, the path report.

cuFile registers a file only if udev's database describes its block device; the GPU machine has
no udev, so these tests write the two properties udevd would have written (see DEVICE.md) and
remove them afterwards. Each scenario runs in a fresh interpreter: cuFile's state is per process.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import pattern
from test_gpu import REASON as GPU_REASON
from test_cufile import HAVE_CUFILE

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.cufile,
    pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or ""),
    pytest.mark.skipif(not HAVE_CUFILE, reason="libcufile is not installed"),
]


@pytest.fixture(scope="module")
def gib_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cufile") / "gib.bin"
    data = pattern(1 << 30, 42)
    data.tofile(path)
    return path, data


def _udev_entry(path):
    st = os.stat(path)
    return f"/run/udev/data/b{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


@pytest.fixture
def udev_db(gib_file):
    """The udev properties cuFile needs for the test file's disk; removed afterwards."""
    entry = _udev_entry(gib_file[0])
    if os.path.exists(entry):
        yield entry
        return
    if os.geteuid() != 0:
        pytest.skip("writing /run/udev needs root")
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    with open(entry, "w") as f:
        f.write("E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n")
    try:
        yield entry
    finally:
        os.remove(entry)


@pytest.fixture
def no_udev_db(gib_file):
    if os.path.exists(_udev_entry(gib_file[0])):
        pytest.skip("this machine has a udev database for the disk")
    yield


def scenario(code, **env):
    """Runs code (with `path` bound to the test file) in a fresh interpreter; its last stdout
    line is JSON."""
    prelude = textwrap.dedent("""
        import json, sys
        import cupy as cp, numpy as np
        import gpufile
        from gpufile import defaults, cufile_driver
        path = sys.argv[1]
    """)
    script = prelude + textwrap.dedent(CHECK) + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", script, str(env.pop("path"))],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, **{k: str(v) for k, v in env.items()}})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


CHECK = """
    def same(dev):
        ref = np.fromfile(path, dtype=np.uint8, count=dev.size)
        return bool(cp.array_equal(dev, cp.asarray(ref)))
"""


def test_off_reads_through_cufile_compat_path_n256(gib_file, udev_db):
    """The spec's Step 5 on this machine: OFF → cuFile, 256 requests, all on its POSIX path."""
    out = scenario("""
        dev = cp.zeros(1 << 30, dtype=cp.uint8)
        with defaults.set({"compat_mode": "off", "task_size": 4 << 20}):
            with gpufile.observe() as obs, gpufile.CuFile(path) as f:
                n = f.read(dev)
                backend, reason = f.io_path
        r = obs.report
        print(json.dumps({"n": n, "same": same(dev), "backend": backend, "reason": reason,
                          "cufile": r["cufile"], "stats": r.cufile_stats,
                          "cufile_path": r.cufile_path, "text": str(r)}))
    """, path=gib_file[0])
    assert out["n"] == 1 << 30 and out["same"]
    assert out["backend"] == "cufile"
    assert "compat path" in out["reason"] and "nvidia-fs not loaded" in out["reason"]
    assert out["cufile"]["ops"] == 1 and out["cufile"]["tasks"] == 256
    s = out["stats"]
    assert (s["n_reads"], s["nvfs_reads"], s["posix_reads"]) == (256, 0, 256), out["text"]
    assert out["cufile_path"] == "cufile-compat"
    print(out["text"])


def test_auto_takes_gpufile_posix_because_nvidia_fs_is_not_loaded(gib_file, udev_db):
    out = scenario("""
        dev = cp.zeros(1 << 30, dtype=cp.uint8)
        with gpufile.observe() as obs, gpufile.CuFile(path) as f:
            n = f.read(dev)
            backend, reason = f.io_path
        print(json.dumps({"n": n, "same": same(dev), "backend": backend, "reason": reason,
                          "posix_ops": obs.report["gpufile-posix"]["ops"],
                          "cufile_ops": obs.report["cufile"]["ops"]}))
    """, path=gib_file[0])
    assert out["same"] and out["backend"] == "gpufile-posix"
    assert out["reason"] == "nvidia-fs not loaded"
    assert (out["posix_ops"], out["cufile_ops"]) == (1, 0)


def test_without_udev_off_fails_with_the_reason_and_auto_works(gib_file, no_udev_db):
    out = scenario("""
        dev = cp.zeros(1 << 24, dtype=cp.uint8)
        with defaults.set("compat_mode", "off"), gpufile.CuFile(path) as f:
            try:
                f.read(dev)
                err = None
            except gpufile.CufileError as e:
                err = str(e)
        untouched = not bool(dev.any())
        with gpufile.CuFile(path) as f:
            n = f.read(dev)
        print(json.dumps({"err": err, "untouched": untouched, "n": n, "same": same(dev)}))
    """, path=gib_file[0])
    assert out["err"] and "cuFileHandleRegister" in out["err"], out
    assert "compat_mode is OFF" in out["err"]
    assert out["untouched"]
    assert out["n"] == 1 << 24 and out["same"]


def test_cufile_writes_raw_io_registration_and_properties(gib_file, udev_db, tmp_path):
    out_file = tmp_path / "w.bin"
    out_file.write_bytes(b"")
    out = scenario("""
        result = {}
        result["version"] = cufile_driver.libcufile_version()
        result["gds"] = cufile_driver.properties.is_gds_available
        result["compat"] = cufile_driver.properties.allow_compat_mode
        result["params"] = cufile_driver.parameters()
        result["config"] = cufile_driver.config()[1]
        dev = cp.asarray(np.fromfile(path, dtype=np.uint8, count=(16 << 20) + 4096))
        out_path = sys.argv[2]
        with defaults.set("compat_mode", "off"):
            gpufile.memory_register(dev)
            with gpufile.observe() as obs:
                with gpufile.CuFile(out_path, "w") as f:
                    result["written"] = f.write(dev, task_size=1 << 20)
                back = cp.zeros_like(dev)
                with gpufile.CuFile(out_path, "r") as f:
                    result["raw"] = f.raw_read(back, size=(8 << 20), file_offset=4096,
                                               dev_offset=4096)
            gpufile.memory_deregister(dev)
        result["file_ok"] = bool(np.array_equal(np.fromfile(out_path, dtype=np.uint8),
                                                cp.asnumpy(dev)))
        result["raw_ok"] = bool(cp.array_equal(back[4096:4096 + (8 << 20)],
                                               dev[4096:4096 + (8 << 20)]))
        result["stats"] = obs.report.cufile_stats
        result["report"] = str(obs.report)
        with defaults.set("require_gds", True), gpufile.CuFile(path) as f:
            try:
                f.read(back)
                result["require"] = None
            except gpufile.CufileError as e:
                result["require"] = str(e)
        print(json.dumps(result))
    """.replace("sys.argv[2]", repr(str(out_file))), path=gib_file[0])
    assert tuple(out["version"]) >= (1, 14)
    assert out["gds"] is False and out["compat"] is True
    assert out["written"] == (16 << 20) + 4096 and out["file_ok"]
    assert out["raw"] == 8 << 20 and out["raw_ok"]
    s = out["stats"]
    assert s["n_writes"] == 17 and s["posix_writes"] == 17, out["report"]
    assert s["n_reads"] == 1, out["report"]  # raw_read: one cuFile call, not split
    assert out["require"] and "require_gds" in out["require"]
    print(out["params"], out["config"])
    cfg = out["config"]
    for key in ("execution.max_io_threads", "execution.max_request_parallelism",
                "execution.min_io_threshold_size_kb"):
        if key in cfg and key in out["params"]:
            assert str(cfg[key]) == out["params"][key], (key, cfg[key], out["params"][key])


def test_clean_exit_after_cufile_io(gib_file, udev_db):
    out = scenario("""
        dev = cp.zeros(1 << 22, dtype=cp.uint8)
        defaults.set("compat_mode", "off")
        f = gpufile.CuFile(path)
        fut = f.pread(dev)
        print(json.dumps({"started": True}))
    """, path=gib_file[0])
    assert out["started"]


def test_logging_says_why_auto_did_not_use_cufile(gib_file, udev_db):
    out = scenario("""
        import logging, io
        stream = io.StringIO()
        logging.basicConfig(stream=stream, level=logging.INFO)
        dev = cp.zeros(1 << 22, dtype=cp.uint8)
        with gpufile.CuFile(path) as f:
            f.read(dev)
            f.read(dev)
        print(json.dumps({"log": stream.getvalue()}))
    """, path=gib_file[0])
    assert out["log"].count("nvidia-fs not loaded") == 1, out["log"]
