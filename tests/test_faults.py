"""Injected faults (the core's syscall seam) and a real full device: errors reach the caller with
path, offset and errno; retries hide what should be hidden; nothing leaks; the next I/O works."""

import errno
import os
import time

import numpy as np
import pytest

import gpufile
from gpufile import _native, defaults
from conftest import pattern


@pytest.fixture(autouse=True)
def _no_faults_after():
    yield
    _native._inject_faults([])


def fds():
    return len(os.listdir("/proc/self/fd"))


def fds_back_to(before: int, timeout: float = 5.0) -> int:
    """The open descriptors once they are back to ``before`` (or after ``timeout``): a worker lets
    its hold on a file go as it leaves a request's last task, microseconds after the future
    ended, so a closed file's descriptor goes then, not necessarily before ``get()`` returns."""
    deadline = time.monotonic() + timeout
    while fds() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    return fds()


def threads():
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def data_path(tmp_path):
    data = pattern(4 << 20, 77)
    path = tmp_path / "f.bin"
    data.tofile(path)
    return path, data


@pytest.mark.parametrize("fault", ["eintr", "eagain", "short"])
@pytest.mark.parametrize("call", ["read", "write"])
def test_retried_faults_are_invisible(tmp_path, data_path, fault, call):
    path, data = data_path
    _native._inject_faults([(call, 2, fault, 50)])
    if call == "read":
        out = np.zeros_like(data)
        with gpufile.CuFile(path) as f:
            assert f.read(out, task_size=256 << 10) == data.size
        np.testing.assert_array_equal(out, data)
    else:
        target = tmp_path / "w.bin"
        with gpufile.CuFile(target, "w") as f:
            assert f.write(data, task_size=256 << 10) == data.size
        np.testing.assert_array_equal(np.fromfile(target, dtype=np.uint8), data)


def test_eio_mid_read_reaches_the_caller_and_the_next_read_works(data_path):
    path, data = data_path
    before_fds, before_threads = fds(), threads()
    out = np.zeros_like(data)
    with defaults.set("num_threads", 1), gpufile.CuFile(path) as f:
        _native._inject_faults([("read", 3, "eio", 1)])
        with pytest.raises(OSError) as e:
            f.read(out, task_size=1 << 20)
        assert e.value.errno == errno.EIO
        assert e.value.filename == str(path)
        assert "offset 3145728" in str(e.value) and "pread" in str(e.value)
        assert _native.in_flight() == 0
        assert f.read(out) == data.size  # the seam fired once; the handle still works
    np.testing.assert_array_equal(out, data)
    assert fds_back_to(before_fds) == before_fds
    assert threads() <= before_threads + 1  # the pool of 1 thread was (re)built, nothing more


def test_enospc_mid_write_stops_the_request(tmp_path, data_path):
    _, data = data_path
    target = tmp_path / "w.bin"
    with defaults.set("num_threads", 1), gpufile.CuFile(target, "w") as f:
        _native._inject_faults([("write", 2, "enospc", 1)])
        with pytest.raises(OSError) as e:
            f.write(data, task_size=1 << 20)
        assert e.value.errno == errno.ENOSPC
    # two tasks were written, the third failed, the fourth was never started
    assert target.stat().st_size == 2 << 20
    np.testing.assert_array_equal(np.fromfile(target, dtype=np.uint8), data[: 2 << 20])


def test_a_real_full_device():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with gpufile.CuFile("/dev/full", "w") as f:
        with pytest.raises(OSError) as e:
            f.write(b"x" * 8192)
    assert e.value.errno == errno.ENOSPC and e.value.filename == "/dev/full"


def test_many_failing_requests_leak_nothing(data_path):
    path, data = data_path
    before = fds()
    out = np.zeros_like(data)
    _native._inject_faults([("read", 0, "eio", 10_000)])
    for _ in range(50):
        f = gpufile.CuFile(path)
        with pytest.raises(OSError):
            f.pread(out, task_size=1 << 20).get()
        f.close()
    _native._inject_faults([])
    assert _native.in_flight() == 0
    assert fds_back_to(before) == before
    with gpufile.CuFile(path) as f:
        assert f.read(out) == data.size


def test_object_arrays_are_refused(tmp_path):
    path = tmp_path / "o.bin"
    path.write_bytes(b"x" * 64)
    with gpufile.CuFile(path) as f:
        with pytest.raises(TypeError, match="object"):
            f.read(np.empty(8, dtype=object))


@pytest.mark.gpu
def test_device_path_faults(data_path):
    from test_gpu import REASON
    if REASON:
        pytest.skip(REASON)
    import cupy as cp
    path, data = data_path
    dev = cp.zeros(data.size, dtype=cp.uint8)
    # The bounce path's reads (page-cache DMA would copy a file read before without any read).
    settings = {"compat_mode": "on", "num_threads": 2, "dma_cache_size": 0}
    with defaults.set(settings), gpufile.CuFile(path) as f:
        _native._inject_faults([("read", 1, "short", 20), ("read", 30, "eintr", 5)])
        assert f.read(dev, task_size=1 << 20) == data.size
        np.testing.assert_array_equal(cp.asnumpy(dev), data)
        _native._inject_faults([("read", 2, "eio", 1)])
        with pytest.raises(OSError) as e:
            f.read(dev, task_size=1 << 20)
        assert e.value.errno == errno.EIO
        _native._inject_faults([])
        assert _native.in_flight() == 0
        dev.fill(0)
        assert f.read(dev) == data.size
        np.testing.assert_array_equal(cp.asnumpy(dev), data)
        out = path.parent / "dw.bin"
        with gpufile.CuFile(out, "w") as w:
            _native._inject_faults([("write", 1, "enospc", 1)])
            with pytest.raises(OSError) as e:
                w.write(dev, task_size=1 << 20)
            assert e.value.errno == errno.ENOSPC
    gpufile.bounce_buffer_free()
    assert gpufile.buffer.bounce_buffer_pooled() == 0
