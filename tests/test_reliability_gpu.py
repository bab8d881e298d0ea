"""Reliability on a GPU. Round two (issue 15, item 14): pinned host memory gets the allocation
range check device memory gets; the cuFile driver does not close under registered files. Round
three (issue 24): device I/O reaches the file that was opened, not what its path names now.

Run on a machine with an NVIDIA GPU and CuPy (`pytest -m gpu`); elsewhere every test here skips
with the reason. The driver test also needs libcufile and a disk cuFile registers (see
test_cufile_gpu.py: the udev properties are written for the test's disk, as root).
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from conftest import pattern
from test_gpu import REASON as GPU_REASON
from test_cufile import HAVE_CUFILE
from test_cufile_gpu import _udev_entry

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")]

if GPU_REASON is None:
    import cupy as cp


class PinnedCAI:
    """`nbytes` of page-locked host memory (cudaHostAlloc) described as a CUDA array of `claim`
    bytes: a producer that overstates its size."""

    def __init__(self, nbytes, claim):
        self.ptr = cp.cuda.runtime.hostAlloc(nbytes, 0)
        self.nbytes, self.claim = nbytes, claim

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.claim,), "typestr": "|u1",
                "strides": None, "version": 3}

    def host_bytes(self):
        import ctypes
        return ctypes.string_at(self.ptr, self.nbytes)

    def free(self):
        cp.cuda.runtime.freeHost(self.ptr)


@pytest.fixture
def src(tmp_path):
    data = pattern(1 << 20, 14)
    path = tmp_path / "src.bin"
    data.tofile(path)
    return path, data


def test_pinned_host_memory_is_read_into_within_its_allocation(src):
    path, data = src
    buf = PinnedCAI(4096, 4096)
    try:
        with gpufile.CuFile(path) as f:
            assert f.read(buf) == 4096
        assert buf.host_bytes() == data[:4096].tobytes()
    finally:
        buf.free()


@pytest.mark.parametrize("direction", ["read", "write"])
def test_a_pinned_range_past_its_allocation_is_refused(src, tmp_path, direction):
    """Before, pinned host pointers skipped the check: the read wrote 1 MiB into a 4 KiB
    allocation (the write read past it). In a fresh interpreter, so that a regression is a
    failed test, not a crashed suite."""
    path, _ = src
    target = path if direction == "read" else tmp_path / "w.bin"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import gpufile
        from test_reliability_gpu import PinnedCAI
        buf = PinnedCAI(4096, 1 << 20)
        with gpufile.CuFile(sys.argv[1], {"r" if direction == "read" else "w"!r}) as f:
            try:
                f.{direction}(buf)
                print("accepted")
            except ValueError as e:
                print("refused:", e)
        print("untouched" if buf.host_bytes() == bytes(4096) else "overwritten")
        buf.free()
    """)
    r = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("refused:") and "run past the end of their allocation" in lines[0]
    assert lines[1] == "untouched"


@pytest.fixture
def cufile_disk(tmp_path):
    """A file on a disk cuFile will register (udev properties written where missing)."""
    if not HAVE_CUFILE:
        pytest.skip("libcufile is not installed")
    path = tmp_path / "reg.bin"
    pattern(1 << 20, 9).tofile(path)
    entry = _udev_entry(path)
    if os.path.exists(entry):
        yield path
        return
    if os.geteuid() != 0:
        pytest.skip("writing /run/udev needs root")
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    with open(entry, "w") as f:
        f.write("E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n")
    try:
        yield path
    finally:
        os.remove(entry)


def test_driver_close_is_refused_while_a_file_is_registered(cufile_disk):
    """Before, the driver closed under the open file and its next read used a handle of a closed
    driver. Now: refused with the count; after close() (requests finished) it closes, and a new
    file reopens it. In a fresh interpreter: cuFile's state is per process."""
    code = textwrap.dedent("""
        import gc, json, sys
        import cupy as cp, numpy as np
        import gpufile
        from gpufile import cufile_driver, defaults
        path = sys.argv[1]
        out = {}
        dev = cp.zeros(1 << 20, dtype=cp.uint8)
        ref = cp.asarray(np.fromfile(path, dtype=np.uint8))
        with defaults.set({"compat_mode": "off"}):
            f = gpufile.CuFile(path, "r")
            f.read(dev)
            fut = f.pread(dev)
            try:
                cufile_driver.driver_close()
                out["refused"] = None
            except gpufile.CufileError as e:
                out["refused"] = str(e)
            out["pending_read"] = fut.get()
            out["same"] = bool(cp.array_equal(dev, ref))
            f.close()
            del fut
            gc.collect()
            cufile_driver.driver_close()
            out["closed"] = True
            with gpufile.CuFile(path, "r") as g:
                dev[:] = 0
                out["reopened_read"] = g.read(dev)
            out["same_after"] = bool(cp.array_equal(dev, ref))
        print(json.dumps(out))
    """)
    r = subprocess.run([sys.executable, "-c", code, str(cufile_disk)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["refused"] and "still registered" in out["refused"], out
    assert out["pending_read"] == 1 << 20 and out["same"], out
    assert out["closed"] and out["reopened_read"] == 1 << 20 and out["same_after"], out


@pytest.mark.parametrize("size", [256 << 10, 8 << 20])
def test_a_device_read_after_a_panicking_task_completes(tmp_path, size):
    """Issue 24, item 2 on the device path: a task that panics inside the bounce pipeline (a
    `pread` of the POSIX path, through the fault seam) fails its request with `GpufileError`,
    its pinned buffers and stream are let go, and the next device reads, one run (the caller's
    share) and many, complete with the file's bytes."""
    from gpufile import _native
    data = pattern(size, 24)
    path = tmp_path / "d.bin"
    data.tofile(path)
    ref = cp.asarray(data)
    try:
        with gpufile.defaults.set({"compat_mode": "on", "num_threads": 4,
                                   "task_size": 64 << 10}):
            for _ in range(6):  # more panics than workers
                _native._inject_faults([("read", 0, "panic", 1)])
                dev = cp.zeros(size, dtype=cp.uint8)
                with gpufile.CuFile(path) as f:
                    with pytest.raises(gpufile.GpufileError, match="panicked"):
                        f.pread(dev).get()
                _native._inject_faults([])
                with gpufile.CuFile(path) as f:
                    assert f.pread(dev).get() == size
                    assert bool(cp.array_equal(dev, ref))
                    dev[:] = 0
                    assert f.read(dev) == size
                    assert bool(cp.array_equal(dev, ref))
    finally:
        _native._inject_faults([])


# ---- issue 24, item 1: device I/O reaches the file that was opened --------------------------------

def _renamed_over(tmp_path, n):
    """An open-then-replaced pair: `f.bin` (seed 1) and `other.bin` (seed 2), with their bytes."""
    old, new = pattern(n, 1), pattern(n, 2)
    p, other = tmp_path / "f.bin", tmp_path / "other.bin"
    old.tofile(p)
    new.tofile(other)
    return p, other, old, new


_RENAMED_OVER = textwrap.dedent("""
    import json, os, sys
    import cupy as cp, numpy as np
    import gpufile
    from gpufile import defaults
    path, other, compat, data_path = sys.argv[1:5]
    data = np.fromfile(data_path, dtype=np.uint8)
    n = 2 * data.size
    settings = {"compat_mode": compat, "auto_direct_io_read": True,
                "auto_direct_io_write": True}
    dev = cp.zeros(n, dtype=cp.uint8)
    with defaults.set(settings), gpufile.CuFile(path, "r+") as f:
        os.rename(other, path)
        out = {"read": f.read(dev), "path": list(f.io_path)}
        out["written"] = f.write(cp.asarray(data), file_offset=n // 2)
        with open(f"/proc/self/fd/{f.fileno()}", "rb") as g:
            opened = g.read()
    cp.asnumpy(dev).tofile(data_path + ".dev")
    with open(data_path + ".opened", "wb") as g:
        g.write(opened)
    print(json.dumps(out))
""")


@pytest.mark.parametrize("compat", ["on", "off"])
def test_device_io_after_a_rename_over_the_path_reaches_the_opened_file(tmp_path, compat,
                                                                        request):
    """Before, the O_DIRECT descriptor was opened by path: every page-aligned bounce chunk (and
    cuFile's registration) went to the file renamed over the path. Now to the opened file.
    compat_mode OFF runs on a disk cuFile registers (the udev properties written, as root), in a
    fresh interpreter: the file is reached, or cuFile's refusal is the error and nothing moves."""
    n = 32 << 20
    if compat == "off":
        request.getfixturevalue("cufile_disk")  # the udev entry for tmp_path's disk
    p, other, old, new = _renamed_over(tmp_path, n)
    data = pattern(n // 2, 3)
    data_path = tmp_path / "data.bin"
    data.tofile(data_path)
    r = subprocess.run([sys.executable, "-c", _RENAMED_OVER, str(p), str(other), compat,
                        str(data_path)], capture_output=True, text=True, timeout=300)
    if compat == "off" and r.returncode != 0:
        # cuFile refuses to register a file whose path was renamed over once it was opened
        # (CU_FILE_GETNEWFD_FAILED, 5031, on the GPU machine's cuFile): with compat_mode OFF
        # that is a CufileError naming the registration, and the file the path names now is
        # left as it was.
        assert "gpufile.CufileError" in r.stderr and "cuFileHandleRegister failed" in r.stderr, \
            r.stderr[-3000:]
        assert np.fromfile(p, dtype=np.uint8).tobytes() == new.tobytes()
        return
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["read"] == n and out["written"] == n // 2, out
    if compat == "off":
        assert out["path"][0] == "cufile", out
    dev = np.fromfile(f"{data_path}.dev", dtype=np.uint8)
    assert dev.tobytes() == old.tobytes()
    opened = (tmp_path / "data.bin.opened").read_bytes()
    assert opened == old[: n // 2].tobytes() + data.tobytes()
    assert np.fromfile(p, dtype=np.uint8).tobytes() == new.tobytes()
