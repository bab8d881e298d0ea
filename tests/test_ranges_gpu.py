"""read_ranges / read_rows / BatchHandle into GPU memory: ranges staged in pinned memory, one
copy per contiguous run of the destination (host variants: test_ranges.py).

Run on a machine with an NVIDIA GPU and CuPy (`pytest -m gpu`); elsewhere every test here skips
with the reason.
"""

import numpy as np
import pytest

import gpufile
from conftest import gpu_reason, pattern

REASON = gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

if REASON is None:
    import cupy as cp


@pytest.fixture
def table(tmp_path):
    data = pattern(8 << 20, 11)
    path = tmp_path / "table.bin"
    data.tofile(path)
    return path, data


@pytest.fixture(params=[True, False], ids=["io_uring", "pread"])
def io_uring(request):
    gpufile.defaults.set("io_uring", request.param)
    return request.param


def test_read_rows_into_cupy_is_byte_exact_with_one_copy_per_group(table, io_uring):
    path, data = table
    row_bytes = 4096
    rows = np.random.default_rng(2).integers(0, data.nbytes // row_bytes, 20_000)
    out = cp.zeros((rows.size, row_bytes), dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.read_rows(out, rows, row_bytes)
        assert fut.get() == out.nbytes
    want = np.stack([data[r * row_bytes:(r + 1) * row_bytes] for r in rows])
    np.testing.assert_array_equal(out.get(), want)
    r = fut.report()
    assert r["gathered"] and r["backend"] == "gpufile-posix"
    # gds_threshold is a range's: a 4 KiB range is below it (or compat_mode is ON here).
    assert r["reason"] in ("request smaller than gds_threshold", "compat_mode is ON")
    assert r["host_io"] == ("io_uring" if io_uring else "pread")
    assert r["copies"] == r["tasks"]  # a packed output: one copy per group


def test_read_ranges_into_cupy_with_gaps_and_a_permuted_layout(table, io_uring):
    path, data = table
    out = cp.full(10_000, 7, dtype=cp.uint8)
    offsets = cp.asarray([100, 5000, 9999, 4_000_000])  # offsets in device memory too
    with gpufile.CuFile(path) as f:
        fut = f.read_ranges(out, offsets, [10, 20, 30, 40], buf_offsets=[500, 0, 20, 9000])
        assert fut.get() == 100
    host = out.get()
    np.testing.assert_array_equal(host[500:510], data[100:110])
    np.testing.assert_array_equal(host[0:20], data[5000:5020])
    np.testing.assert_array_equal(host[20:50], data[9999:10029])
    np.testing.assert_array_equal(host[9000:9040], data[4_000_000:4_000_040])
    assert (host[50:500] == 7).all() and (host[510:9000] == 7).all()


@pytest.mark.parametrize("gap,copies", [(0, 4), (10, 400)])
def test_a_reversed_layout_is_one_copy_per_contiguous_run(table, gap, copies):
    path, data = table
    gpufile.defaults.set("num_threads", 1)  # 400 ranges: 4 groups of 100
    n, size = 400, 10
    offsets = np.arange(n) * 997
    bufs = (n - 1 - np.arange(n)) * (size + gap)    # given in reverse order of destination
    out = cp.zeros(n * (size + gap), dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.read_ranges(out, offsets, size, buf_offsets=bufs)
        assert fut.get() == n * size
    host = out.get()
    for o, b in zip(offsets, bufs):
        np.testing.assert_array_equal(host[b:b + size], data[o:o + size])
    r = fut.report()
    assert r["tasks"] == 4 and r["copies"] == copies


def test_bad_ranges_into_cupy_move_nothing(table):
    path, _ = table
    out = cp.full(100, 0x5A, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(ValueError, match="runs past the buffer"):
            f.read_ranges(out, [0, 10], [50, 60])
        with pytest.raises(ValueError, match="overlap in the buffer"):
            f.read_ranges(out, [0, 10], [5, 5], [0, 3])
        with pytest.raises(gpufile.EndOfFileError):
            f.read_ranges(out, [0, (8 << 20) - 2], [5, 5])
    assert (out.get() == 0x5A).all()


def test_batch_handle_into_device_memory(table):
    path, data = table
    out = cp.zeros(64 * 4096, dtype=cp.uint8)
    with gpufile.CuFile(path) as f, gpufile.BatchHandle(64) as batch:
        batch.submit([gpufile.BatchOp(f, out, i * 8192, i * 4096, 4096) for i in range(64)])
        events = batch.status(64, 64, timeout=60)
    assert len(events) == 64 and all(e.ret == 4096 for e in events)
    want = np.concatenate([data[i * 8192:i * 8192 + 4096] for i in range(64)])
    np.testing.assert_array_equal(out.get(), want)


def test_write_ranges_from_cupy_keeps_a_task_per_range(tmp_path):
    path = tmp_path / "w.bin"
    np.zeros(1 << 20, dtype=np.uint8).tofile(path)
    src = cp.asarray(pattern(4000, 5))
    with gpufile.CuFile(path, "r+") as f:
        fut = f.write_ranges(src, np.arange(40) * 10_000, 100)
        assert fut.get() == 4000
        assert fut.report()["gathered"] is False
    back = np.fromfile(path, dtype=np.uint8)
    host = src.get()
    for i in range(40):
        np.testing.assert_array_equal(back[i * 10_000:i * 10_000 + 100], host[i * 100:(i + 1) * 100])


def test_read_rows_into_a_pinned_torch_cpu_tensor_is_byte_exact(table):
    """A pinned PyTorch CPU tensor (``pin_memory=True``, viewed as rows) is host memory as
    read_rows' destination: its DLPack export is asked for with no stream (PyTorch asserts
    ``stream should be None on cpu.`` otherwise), and the rows land byte for byte."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device (pinned memory needs one)")
    path, data = table
    n, row_bytes = 2000, 4096
    rows = np.random.default_rng(13).integers(0, data.nbytes // row_bytes, n)
    out = torch.empty(n * row_bytes, dtype=torch.uint8, pin_memory=True).view(n, row_bytes)
    assert out.is_pinned() and out.__dlpack_device__()[0] == 3  # kDLCUDAHost
    with gpufile.CuFile(path) as f:
        assert f.read_rows(out, rows, row_bytes).get() == n * row_bytes
        want = np.stack([data[r * row_bytes:(r + 1) * row_bytes] for r in rows])
        np.testing.assert_array_equal(out.numpy(), want)
        # A plain read and a write from the same pinned memory.
        flat = out.view(-1)
        assert f.read(flat, row_bytes * 3, 12345) == row_bytes * 3
        np.testing.assert_array_equal(flat[:row_bytes * 3].numpy(),
                                      data[12345:12345 + row_bytes * 3])
    back = path.with_name("back.bin")
    back.write_bytes(b"\0" * (n * row_bytes))
    with gpufile.CuFile(back, "r+") as f:
        assert f.write(out) == n * row_bytes
    assert back.read_bytes() == out.numpy().tobytes()
