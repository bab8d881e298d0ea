"""cuFile loading, cufile.json, path decisions and the path report, on any machine."""

import ctypes
import importlib.util
import json

import numpy as np
import pytest

import gpufile
from gpufile import cufile_driver, defaults
from conftest import gpu_reason, run_python


def _loads(name):
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


HAVE_CUFILE = _loads("libcufile.so.0") or bool(gpufile._cufile_dirs())
HAVE_CUDA = _loads("libcuda.so.1")


NO_CUFILE = """
import json, gpufile
gpufile._native.cufile_set_search_dirs([])  # as if no nvidia wheel were installed
from gpufile import cufile_driver
print(json.dumps([cufile_driver.libcufile_version(), *cufile_driver.library()]))
"""


def test_no_cufile_means_version_0_0_and_a_reason():
    """Where libcufile is nowhere gpufile looks: version (0, 0) and a reason naming it. Run in a
    fresh interpreter that does not search site-packages' nvidia folders, where torch's CUDA
    wheels put a libcufile even on a machine without a GPU."""
    r = run_python(NO_CUFILE, {"LD_LIBRARY_PATH": "", "CUDA_HOME": "/nonexistent"})
    assert r.returncode == 0, r.stderr
    version, ok, why = json.loads(r.stdout.splitlines()[-1])
    if ok:
        pytest.skip(f"this machine has libcufile where the system loader or /usr/local/cuda "
                    f"finds it ({why})")
    assert version == [0, 0]
    assert "libcufile.so.0" in why, why


def test_gpufile_cufile_path_is_tried_first(tmp_path):
    fake = tmp_path / "libcufile.so.0"
    fake.write_bytes(b"not a library")
    r = run_python("import gpufile; print(gpufile.cufile_driver.library())",
                   {"GPUFILE_CUFILE_PATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    if "True" not in r.stdout:  # a real libcufile elsewhere would have loaded after it
        assert str(fake) in r.stdout


def test_cufile_json_with_comments(tmp_path):
    cfg = tmp_path / "cufile.json"
    cfg.write_text("""{
        // the spec's example settings
        "execution": {"parallel_io": true, "max_io_threads": 4,
                      "min_io_threshold_size_kb": 8192, "max_request_parallelism": 4},
        "properties": {"allow_compat_mode": true, "note": "a // in a string"}
    }""")
    path, values = cufile_driver.config(str(cfg))
    assert path == str(cfg)
    assert values["execution.max_io_threads"] == 4
    assert values["execution.min_io_threshold_size_kb"] == 8192
    assert values["properties.allow_compat_mode"] is True
    assert values["properties.note"] == "a // in a string"
    r = run_python("import gpufile; print(gpufile.cufile_driver.config()[0])",
                   {"CUFILE_ENV_PATH_JSON": str(cfg)})
    assert r.stdout.strip() == str(cfg), r.stderr


def test_garbage_cufile_json_is_a_valueerror(tmp_path):
    cfg = tmp_path / "cufile.json"
    cfg.write_text("{ this is not json")
    with pytest.raises(ValueError, match="cufile.json"):
        cufile_driver.config(str(cfg))
    with pytest.raises(FileNotFoundError):
        cufile_driver.config(str(tmp_path / "missing.json"))


def test_observe_reports_host_reads_on_gpufile_posix(tmp_path):
    data = np.arange(1 << 20, dtype=np.uint8)
    path = tmp_path / "o.bin"
    data.tofile(path)
    out = np.empty_like(data)
    before = gpufile.stats()["gpufile-posix"]["ops"]
    with gpufile.observe() as obs, gpufile.CuFile(path) as f:
        f.read(out, task_size=1 << 18)
        f.pread(out).get()
    r = obs.report
    assert r["gpufile-posix"]["ops"] == 2
    assert r["gpufile-posix"]["tasks"] == 4 + 1
    assert r["gpufile-posix"]["bytes"] == 2 << 20
    assert r["gpufile-posix"]["gb_per_s"] > 0
    assert r["cufile"]["ops"] == 0 and r.cufile_path is None
    assert "gpufile-posix" in str(r)
    assert gpufile.stats()["gpufile-posix"]["ops"] >= before + 2
    json.dumps(r.as_dict())


def test_errors_are_counted(tmp_path):
    path = tmp_path / "e.bin"
    path.write_bytes(b"x" * 10)
    with gpufile.observe() as obs, gpufile.CuFile(path) as f:
        with pytest.raises(gpufile.EndOfFileError):
            f.read(bytearray(20))  # refused before it starts: not an operation
    assert obs.report["gpufile-posix"]["ops"] == 0


def test_require_gds_setting():
    assert defaults.get("require_gds") is False
    with defaults.set("require_gds", True):
        assert defaults.get("require_gds") is True
    with pytest.raises(ValueError):
        defaults.set("require_gds", "sometimes")


def test_host_reads_ignore_compat_mode_and_require_gds(tmp_path):
    path = tmp_path / "h.bin"
    path.write_bytes(bytes(range(256)) * 64)
    buf = bytearray(256 * 64)
    with defaults.set({"compat_mode": "off", "require_gds": True}), gpufile.CuFile(path) as f:
        assert f.read(buf) == len(buf)
        assert f.io_path_for(buf)[0] == "gpufile-posix"


def test_gpu_skips_name_what_this_machine_lacks():
    """The GPU tests' skip reason (conftest.gpu_reason) says what is missing: a GPU (no CUDA
    driver, or a driver that finds no device) wherever there is none, CuPy installed or not;
    "CuPy is not installed" only where the driver has a GPU to offer."""
    reason = gpu_reason()
    if not HAVE_CUDA:
        assert reason is not None and reason.startswith("no GPU"), reason
        assert "libcuda.so.1" in reason, reason
        return
    cuda = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        assert reason is not None and reason.startswith("no GPU"), reason
    elif importlib.util.find_spec("cupy") is None:
        assert reason is not None and reason.startswith("CuPy is not installed"), reason
    else:
        assert reason is None or "CuPy" in reason, reason


@pytest.mark.skipif(HAVE_CUDA, reason="this machine has a CUDA driver")
def test_device_decisions_without_cuda(tmp_path):
    path = tmp_path / "d.bin"
    path.write_bytes(b"x")
    with gpufile.CuFile(path) as f:
        # No GPU: the read that runs here is a host read, whatever compat_mode says.
        backend, reason = f.io_path
        assert backend == "gpufile-posix" and reason.startswith("no GPU (")
        with defaults.set("compat_mode", "off"):
            assert f.io_path[0] == "gpufile-posix"
    # A device read's decisions, predicted: AUTO says why not cuFile, OFF fails.
    auto = gpufile.explain(1 << 20, device=True)["prediction"]
    assert auto["path"]["reason"]["kind"] == "cufile-unavailable"
    off = gpufile.explain(1 << 20, compat_mode="off", device=True)["prediction"]
    assert off["path"] is None and "compat_mode is OFF" in off["error"]
    on = gpufile.explain(1 << 20, compat_mode="on", device=True)["prediction"]
    assert on["path"]["reason"]["text"] == "compat_mode is ON"
