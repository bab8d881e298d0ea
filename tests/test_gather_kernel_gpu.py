"""Gathers the GPU does itself: with page-cache DMA allowed (``dma_cache_size``), the rows of a
``read_rows``/``read_ranges`` into GPU memory that lie in registered page cache are copied by
gpufile's gather kernel, the others staged through bounce buffers in the same request. Every
read is checked byte for byte against the file and against the staged gather.

Needs a GPU; elsewhere every test here skips with the reason.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from conftest import gpu_reason, pattern

REASON = gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

if REASON is None:
    import cupy as cp

MiB = 1 << 20
GRANULE = 64 * MiB


@pytest.fixture(autouse=True)
def _fresh_cache():
    """gpufile's own device path, page-cache DMA allowed, one worker (which registers every
    granule it needs, so what a read does is deterministic), an empty cache around each test."""
    gpufile.dma_cache_clear()
    with defaults.set({"compat_mode": "on", "dma_cache_size": 1 << 30, "num_threads": 1}):
        yield
    gpufile.dma_cache_clear()
    assert gpufile.dma_cache_registered() == 0


@pytest.fixture
def hot(tmp_path):
    """A 150 MiB file (three granules, the last partial), read twice so that its granules are
    registered, then let age past a timestamp tick."""
    data = pattern(150 * MiB + 4321, 5)
    path = tmp_path / "hot.bin"
    data.tofile(path)
    time.sleep(0.05)  # gpufile registers a file only once its last change is 20 ms old
    buf = cp.empty(data.size, dtype=cp.uint8)
    with gpufile.CuFile(path) as f:
        for _ in range(2):  # a first read never registers; the second does
            f.read(buf)
    assert gpufile.dma_cache_registered() >= data.size
    return path, data


def gather(path, offsets, sizes, buf_offsets=None, nbytes=None):
    """read_ranges into a fresh CuPy buffer: (bytes on the host, report, dma_bytes)."""
    nbytes = int(np.sum(sizes)) if nbytes is None else nbytes
    out = cp.full(nbytes, 0xEE, dtype=cp.uint8)
    with gpufile.observe() as obs, gpufile.CuFile(path) as f:
        fut = f.read_ranges(out, offsets, sizes, buf_offsets=buf_offsets)
        assert fut.get() == int(np.sum(sizes))
    return out.get(), fut.report(), obs.report["gpufile-posix"]["dma_bytes"]


def want(data, offsets, sizes, buf_offsets, nbytes):
    w = np.full(nbytes, 0xEE, dtype=np.uint8)
    for o, s, b in zip(offsets, sizes, buf_offsets):
        w[b:b + s] = data[o:o + s]
    return w


def packed(sizes):
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


@pytest.mark.parametrize("kind", ["random", "sorted", "repeated", "unaligned"])
def test_the_kernel_gathers_what_bounce_buffers_gather(hot, kind):
    path, data = hot
    rng = np.random.default_rng(3)
    n = 20_000
    if kind == "unaligned":
        sizes = rng.integers(32, 5000, n)
        offsets = rng.integers(0, data.size - 5000, n)
    else:
        sizes = np.full(n, 4096)
        offsets = rng.integers(0, data.size // 4096, n) * 4096
        if kind == "sorted":
            offsets.sort()
        if kind == "repeated":
            offsets = np.repeat(offsets[: n // 4], 4)
    # Cross no granule boundary, so every range is the kernel's.
    cross = (offsets // GRANULE) != ((offsets + sizes - 1) // GRANULE)
    offsets[cross] -= sizes[cross]
    bufs = packed(sizes)
    if kind == "unaligned":
        bufs = bufs + np.arange(n) * 3 + 1  # odd destinations, gaps left alone
    nbytes = int(bufs[-1] + sizes[-1] + 7)
    got, report, dma = gather(path, offsets, sizes, bufs, nbytes)
    np.testing.assert_array_equal(got, want(data, offsets, sizes, bufs, nbytes))
    assert report["gathered"] and report["gpu_gather"] is True, report
    assert report["gpu_gather_reason"].startswith("on, up to dma_cache_size"), report
    assert dma == int(sizes.sum()), "every range went by the kernel"
    with defaults.set("dma_cache_size", 0):  # the same gather through bounce buffers
        staged, report0, dma0 = gather(path, offsets, sizes, bufs, nbytes)
    np.testing.assert_array_equal(staged, got)
    assert report0["gpu_gather"] is False
    assert report0["gpu_gather_reason"] == "off: dma_cache_size is 0"
    assert dma0 == 0


def test_ranges_the_kernel_cannot_take_are_staged_in_the_same_request(hot):
    path, data = hot
    offsets = np.array([
        GRANULE - 100,      # runs into the next granule: staged
        5, 1000,            # under 32 bytes: staged
        4096 * 7,           # the kernel's
        data.size - 3000,   # the file's last, partial granule: the kernel's
        2 * GRANULE + 1,    # the kernel's, odd offset
    ])
    sizes = np.array([4096, 10, 31, 4096, 3000, 999])
    # Twenty more of the kernel's: a request under 64 KiB does not use page-cache DMA at all.
    offsets = np.concatenate([offsets, np.arange(20) * 1_000_003 + 7])
    sizes = np.concatenate([sizes, np.full(20, 4096)])
    bufs = packed(sizes)
    got, report, dma = gather(path, offsets, sizes, bufs)
    np.testing.assert_array_equal(got, want(data, offsets, sizes, bufs, int(sizes.sum())))
    assert report["gpu_gather"] is True, report
    assert dma == 4096 + 3000 + 999 + 20 * 4096, "the staged ranges are not counted as DMA"


def test_a_request_under_64_kib_stages_every_range(hot):
    path, data = hot
    offsets, sizes = np.array([0, 8192]), np.array([4096, 4096])
    got, report, dma = gather(path, offsets, sizes)
    np.testing.assert_array_equal(got, want(data, offsets, sizes, packed(sizes), 8192))
    assert report["gpu_gather"] is False
    assert report["gpu_gather_reason"] == "off: the request is under 65536 bytes"
    assert dma == 0


def test_a_first_read_of_a_file_stages_then_the_kernel_takes_over(tmp_path):
    data = pattern(8 * MiB, 9)
    path = tmp_path / "cold.bin"
    data.tofile(path)
    time.sleep(0.05)
    rows = np.random.default_rng(4).integers(0, data.size // 4096, 2000)
    out = cp.zeros((rows.size, 4096), dtype=cp.uint8)
    expected = np.stack([data[r * 4096:(r + 1) * 4096] for r in rows])
    dmas = []
    for _ in range(3):
        out.fill(0)
        with gpufile.observe() as obs, gpufile.CuFile(path) as f:
            fut = f.read_rows(out, rows, 4096)
            assert fut.get() == out.nbytes
        np.testing.assert_array_equal(out.get(), expected)
        assert fut.report()["gpu_gather"] is True
        dmas.append(obs.report["gpufile-posix"]["dma_bytes"])
    assert dmas == [0, out.nbytes, out.nbytes], "registered on the second read, reused after"


def test_a_file_changed_after_its_granules_were_registered_is_gathered_anew(hot):
    path, data = hot
    offsets = np.arange(100) * 4096 * 5
    sizes = np.full(100, 4096)
    got, _, dma = gather(path, offsets, sizes)
    assert dma == sizes.sum()
    new = pattern(data.size, 77)
    with gpufile.CuFile(path, "r+") as f:  # a gpufile write lets the file's granules go
        f.write(new)
    got, report, dma = gather(path, offsets, sizes)
    np.testing.assert_array_equal(got, want(new, offsets, sizes, packed(sizes), int(sizes.sum())))
    assert dma == 0, "a new version is not registered on its first read"
