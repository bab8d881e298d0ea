"""gpufile.SummaryMonitor around reads of CuPy arrays (GPU machine): the summary names the path
that carried the bytes and why, and a gathered read is one operation."""

from __future__ import annotations

import numpy as np
import pytest

import gpufile
from conftest import gpu_reason, pattern

REASON = gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

if REASON is None:
    import cupy as cp


@pytest.fixture
def data_path(tmp_path):
    data = pattern(8 << 20, 21)
    path = tmp_path / "d.bin"
    data.tofile(path)
    return path, data


def test_a_read_into_a_cupy_array_names_its_path_and_reason(data_path):
    path, data = data_path
    buf = cp.empty(data.nbytes, dtype=cp.uint8)
    with gpufile.SummaryMonitor() as monitor, gpufile.CuFile(path) as f:
        assert f.read(buf) == data.nbytes
        backend, reason = f.io_path_for(buf)
    s = monitor.get()
    np.testing.assert_array_equal(cp.asnumpy(buf), data.view(np.uint8))
    assert s.num_ops == 1 and s.bytes_read == data.nbytes
    (name, row), = ((k, v) for k, v in s.by_backend.items() if v["num_ops"])
    assert name == ("GDS" if backend == "cufile" else "POSIX")
    assert row["path"] in ("gpufile-posix", "page-cache-dma", "cufile-nvfs", "cufile-compat")
    assert row["reason"] == str(reason)
    (path_row,) = s.by_path.values()
    assert path_row["reasons"] == {str(reason): 1}


def test_read_rows_into_a_cupy_array_is_one_operation(data_path):
    path, data = data_path
    rows = np.random.default_rng(2).integers(0, data.nbytes // 64, 10_000)
    out = cp.empty(10_000 * 64, dtype=cp.uint8)
    with gpufile.SummaryMonitor() as monitor, gpufile.CuFile(path) as f:
        assert f.read_rows(out, rows, 64).get() == out.nbytes
    s = monitor.get()
    expect = data.view(np.uint8).reshape(-1, 64)[rows]
    np.testing.assert_array_equal(cp.asnumpy(out).reshape(-1, 64), expect)
    assert s.num_ops == 1 and s.bytes_read == out.nbytes
    assert s.by_backend["POSIX"]["path"] in ("gpufile-posix", "gpu-gather", "page-cache-dma")
