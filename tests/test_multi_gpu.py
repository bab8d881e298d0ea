"""Several GPUs in one process: buffers on different devices, concurrently, through both paths.

These need two or more GPUs and skip with the reason elsewhere; the wrong-device cases that one
GPU can show (a buffer whose context is not current) are in test_gpu.py.
"""

import threading

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from conftest import pattern
from test_gpu import REASON as GPU_REASON


def _count():
    if GPU_REASON is not None:
        return 0
    import cupy as cp
    return cp.cuda.runtime.getDeviceCount()


N = _count()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(N < 2, reason=f"needs 2 or more GPUs; this machine has {N}"),
]


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_one_file_split_across_gpus(tmp_path, mode):
    import cupy as cp
    data = pattern(N * (8 << 20) + 12345, 3)
    path = tmp_path / "split.bin"
    data.tofile(path)
    part = -(-data.size // N)
    bufs = []
    for d in range(N):
        with cp.cuda.Device(d):
            bufs.append(cp.zeros(min(part, data.size - d * part), dtype=cp.uint8))
    with cp.cuda.Device(0), defaults.set("compat_mode", mode), gpufile.CuFile(path) as f:
        futs = [f.pread(b, file_offset=d * part) for d, b in enumerate(bufs)]  # device 0 current
        assert sum(x.get() for x in futs) == data.size
    for d, b in enumerate(bufs):
        with cp.cuda.Device(d):
            np.testing.assert_array_equal(cp.asnumpy(b), data[d * part:d * part + b.size])


def test_n_files_to_n_gpus_and_back_concurrently(tmp_path):
    import cupy as cp
    datas = [pattern((16 << 20) + d, 10 + d) for d in range(N)]
    errors = []

    def work(d):
        try:
            src = tmp_path / f"in{d}.bin"
            datas[d].tofile(src)
            with cp.cuda.Device(d):
                buf = cp.zeros(datas[d].size, dtype=cp.uint8)
            with gpufile.CuFile(src) as f:  # whatever device is current on this thread
                f.read(buf)
            with gpufile.CuFile(tmp_path / f"out{d}.bin", "w") as f:
                f.write(buf)
            with cp.cuda.Device(d):
                assert np.array_equal(cp.asnumpy(buf), datas[d])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((d, e))

    with defaults.set("compat_mode", "on"):
        ts = [threading.Thread(target=work, args=(d,)) for d in range(N)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors
    for d in range(N):
        np.testing.assert_array_equal(np.fromfile(tmp_path / f"out{d}.bin", dtype=np.uint8),
                                      datas[d])


def test_cai_stream_of_another_device_is_waited_for(tmp_path):
    """A producer may name the stream of its current device for an array on another one (CuPy
    does when another device is current): gpufile cannot mark that stream in the array's
    context, so it waits for it on the caller's thread, and the data is the file's."""
    import cupy as cp
    data = pattern(32 << 20, 17)
    path = tmp_path / "x.bin"
    data.tofile(path)
    with cp.cuda.Device(0):
        dev = cp.empty(data.size, dtype=cp.uint8)
    with cp.cuda.Device(1):
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            if dev.__cuda_array_interface__.get("stream") != stream.ptr:
                pytest.skip("this CuPy names another stream for a device-0 array here")
            with defaults.set("compat_mode", "on"), gpufile.CuFile(path) as f:
                assert f.pread(dev).get() == data.size
        stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(dev), data)
