"""Stream-ordered raw_read_async / raw_write_async where no GPU is needed: argument checks,
errors on the future, the order chosen as a value. The GPU behaviour is in test_stream_gpu.py."""

import asyncio

import numpy as np
import pytest

import gpufile
from conftest import gpu_reason

NO_GPU = gpu_reason() is not None


@pytest.fixture
def data_path(tmp_path):
    data = np.random.default_rng(3).integers(0, 256, 1 << 16, dtype=np.uint8)
    path = tmp_path / "s.bin"
    data.tofile(path)
    return path, data


def test_bad_arguments_raise_at_the_call_and_queue_nothing(data_path):
    path, _ = data_path
    buf = np.zeros(4096, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(ValueError, match="dev_offset 4097 is past the end"):
            f.raw_read_async(buf, 0, dev_offset=4097)
        with pytest.raises(ValueError, match="size 5000 at dev_offset 0 is larger"):
            f.raw_read_async(buf, 0, size=5000)
        with pytest.raises(TypeError, match="expected a CUDA stream"):
            f.raw_read_async(buf, "stream")
        with pytest.raises(ValueError, match="order must be"):
            f._file.raw_read_async(buf, 0, order="soon")
        with pytest.raises(TypeError, match="read-only"):
            f.raw_read_async(bytes(16), 0)
    with pytest.raises(ValueError):
        f.raw_read_async(buf, 0)  # closed
    assert not buf.any()


@pytest.mark.skipif(not NO_GPU, reason="the no-driver order is asked for on a machine without a GPU")
def test_without_a_gpu_the_caller_waits_and_says_why(data_path):
    path, data = data_path
    buf = np.zeros(4096, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.raw_read_async(buf, 0, file_offset=100)
        assert isinstance(fut, gpufile.IOFutureStream) and isinstance(fut, gpufile.IOFuture)
        assert fut.done()
        how, why = fut.stream_order
        assert how == "caller-waits" and why.startswith("no CUDA driver"), why
        assert fut.check_bytes_done() == 4096
        assert np.array_equal(buf, data[100:4196])
        assert asyncio.run(_await(fut)) == 4096
        # An order that needs a driver is refused, before anything runs.
        with pytest.raises(ValueError, match="stream order wait-value cannot be used here"):
            f._file.raw_read_async(buf, 0, order="wait-value")
    with gpufile.CuFile(path, "r+") as f:
        src = np.full(512, 9, dtype=np.uint8)
        assert f.raw_write_async(src, 0, file_offset=8).check_bytes_done() == 512
    assert (np.fromfile(path, dtype=np.uint8)[8:520] == 9).all()


async def _await(fut):
    return await fut


def test_what_is_known_at_the_call_fails_the_call(data_path):
    """Past the end of the file as it is at the call, a file opened "w": the call raises, with
    nothing queued and the buffer untouched (KvikIO's test_async_io.py::test_read_write
    expects the error at the call)."""
    path, _ = data_path
    buf = np.full(4096, 7, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(gpufile.EndOfFileError):
            f.raw_read_async(buf, 0, file_offset=(1 << 16) - 10)
    with gpufile.CuFile(path, "w") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.raw_read_async(buf, 0)
    assert (buf == 7).all()


def test_a_dropped_stream_future_keeps_its_buffer_and_calls_back(data_path):
    path, data = data_path
    buf = np.zeros(4096, dtype=np.uint8)
    seen = []
    with gpufile.CuFile(path) as f:
        fut = f.raw_read_async(buf, 0)
        fut.add_done_callback(lambda g: seen.append(g.check_bytes_done()))
        del fut
    import time

    for _ in range(100):
        if seen:
            break
        time.sleep(0.05)
    assert seen == [4096]
    assert np.array_equal(buf, data[:4096])
