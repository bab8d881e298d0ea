"""Page-cache DMA (``dma_cache_size``): hot file data copied to the GPU straight from registered
page cache. Needs a GPU; every read is checked byte for byte against the file."""

from __future__ import annotations

import os
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


@pytest.fixture(autouse=True)
def _fresh_cache():
    """gpufile's own device path, a 1 GiB budget, one worker (the one worker registers every
    granule it reads, so what a read does is deterministic), and an empty cache around each
    test."""
    gpufile.dma_cache_clear()
    with defaults.set({"compat_mode": "on", "dma_cache_size": 1 << 30, "num_threads": 1}):
        yield
    gpufile.dma_cache_clear()
    assert gpufile.dma_cache_registered() == 0


def _settle():
    """Lets the files just written age past a timestamp tick: gpufile registers a file only once
    its last change is older than that (20 ms), so that any later change shows in its ctime."""
    time.sleep(0.05)


def _read(path, nbytes, file_offset=0, dev_offset=0):
    """Reads into a device buffer at dev_offset; (bytes on the host, observed report)."""
    dev = cp.zeros(nbytes + dev_offset, dtype=cp.uint8)
    with gpufile.observe() as obs, gpufile.CuFile(path, "r") as f:
        assert f.read(dev[dev_offset:], file_offset=file_offset) == nbytes
    return cp.asnumpy(dev[dev_offset:]), obs.report["gpufile-posix"]


def test_hot_file_goes_by_dma_and_stays_registered(tmp_path):
    data = pattern(200 * MiB + 12345, 1)
    path = tmp_path / "hot.bin"
    data.tofile(path)
    _settle()
    got, first = _read(path, data.size)
    np.testing.assert_array_equal(got, data)
    assert first["dma_bytes"] == 0, "a first read bounces (registering would slow it)"
    assert gpufile.dma_cache_registered() == 0
    got, second = _read(path, data.size)
    np.testing.assert_array_equal(got, data)
    assert second["dma_bytes"] == data.size, second
    registered = gpufile.dma_cache_registered()
    assert data.size <= registered < data.size + 4096
    got, again = _read(path, data.size)
    np.testing.assert_array_equal(got, data)
    assert again["dma_bytes"] == data.size
    assert gpufile.dma_cache_registered() == registered  # reused, not registered twice


def test_a_closed_file_keeps_no_descriptor_open_while_its_pages_stay_registered(tmp_path):
    data = pattern(64 * MiB, 7)
    path = tmp_path / "closed.bin"
    data.tofile(path)
    _settle()
    before = len(os.listdir("/proc/self/fd"))
    _read(path, data.size)
    got, second = _read(path, data.size)
    np.testing.assert_array_equal(got, data)
    assert second["dma_bytes"] == data.size, second
    assert gpufile.dma_cache_registered() >= data.size, "the granules stay for the next open"
    assert len(os.listdir("/proc/self/fd")) == before, "every descriptor of the closed file is closed"
    got, third = _read(path, data.size)  # a new open of the same file reuses them
    np.testing.assert_array_equal(got, data)
    assert third["dma_bytes"] == data.size


@pytest.mark.parametrize("file_offset,dev_offset,nbytes", [
    (1, 0, 3 * MiB), (64 * MiB - 5, 3, 2 * MiB), (7 * MiB + 1, 1, 130 * MiB - 7),
])
def test_unaligned_ranges_across_granules(tmp_path, file_offset, dev_offset, nbytes):
    data = pattern(200 * MiB, 2)
    path = tmp_path / "u.bin"
    data.tofile(path)
    _settle()
    _read(path, 150 * MiB)
    _read(path, 150 * MiB)  # the second read registers the first granules
    got, report = _read(path, nbytes, file_offset, dev_offset)
    np.testing.assert_array_equal(got, data[file_offset:file_offset + nbytes])
    assert report["dma_bytes"] == nbytes


def test_a_changed_file_is_read_anew(tmp_path):
    data = pattern(80 * MiB, 3)
    path = tmp_path / "c.bin"
    data.tofile(path)
    _settle()
    _read(path, data.size)
    _read(path, data.size)
    assert gpufile.dma_cache_registered() >= data.size
    # Rewritten in place (same size), then replaced by truncation and a rewrite.
    new = pattern(80 * MiB, 4)
    with open(path, "r+b") as f:
        f.write(new.tobytes())
    got, _ = _read(path, new.size)
    np.testing.assert_array_equal(got, new)
    newer = pattern(80 * MiB, 5)
    newer.tofile(path)
    got, _ = _read(path, newer.size)
    np.testing.assert_array_equal(got, newer)


def test_writes_through_gpufile_are_seen(tmp_path):
    data = pattern(70 * MiB, 6)
    path = tmp_path / "w.bin"
    data.tofile(path)
    _settle()
    _read(path, data.size)
    _read(path, data.size)
    assert gpufile.dma_cache_registered() >= data.size
    patch = cp.asarray(pattern(5 * MiB, 7))
    with gpufile.CuFile(path, "r+") as f:
        f.write(patch, file_offset=10 * MiB)
    # gpufile unpins a file before it writes to it (an O_DIRECT write could not invalidate
    # pinned pages, and the page cache would keep the old bytes).
    assert gpufile.dma_cache_registered() == 0
    want = data.copy()
    want[10 * MiB:15 * MiB] = cp.asnumpy(patch)
    got, _ = _read(path, data.size)
    np.testing.assert_array_equal(got, want)


def test_the_budget_bounds_what_stays_pinned(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / f"b{i}.bin"
        pattern(100 * MiB, 10 + i).tofile(p)
        paths.append(p)
    _settle()
    with defaults.set("dma_cache_size", 128 * MiB):
        for p in paths:
            _read(p, 100 * MiB)
            got, _ = _read(p, 100 * MiB)
            np.testing.assert_array_equal(got, np.fromfile(p, dtype=np.uint8))
            assert gpufile.dma_cache_registered() <= 128 * MiB
    # A budget put back smaller (the end of a `with defaults.set(...)`) unpins what no longer
    # fits, at once.
    with defaults.set("dma_cache_size", 128 * MiB):
        with defaults.set("dma_cache_size", 1 << 30):
            for p in paths:
                _read(p, 100 * MiB)
                _read(p, 100 * MiB)
            assert gpufile.dma_cache_registered() >= 300 * MiB
        assert gpufile.dma_cache_registered() <= 128 * MiB
    # A smaller budget unpins at once; 0 turns the cache off.
    with defaults.set("dma_cache_size", 0):
        assert gpufile.dma_cache_registered() == 0
        got, report = _read(paths[0], 100 * MiB)
        np.testing.assert_array_equal(got, np.fromfile(paths[0], dtype=np.uint8))
        assert report["dma_bytes"] == 0


def test_cold_ranges_are_not_registered(tmp_path):
    data = pattern(64 * MiB, 8)
    path = tmp_path / "cold.bin"
    data.tofile(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    _settle()
    resident, total = gpufile.get_page_cache_info(str(path))
    if resident == total:
        pytest.skip("this file system keeps the file in memory (tmpfs?): nothing is cold")
    _read(path, data.size)  # the first read of a version never registers
    drop = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(drop, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(drop)
    got, report = _read(path, data.size)
    np.testing.assert_array_equal(got, data)
    # Registering would have read it page by page: cold granules bounce (a granule whose pages
    # readahead brought in before its last chunks may be registered then).
    assert report["dma_bytes"] < data.size // 2
    got, report = _read(path, data.size)  # hot now
    np.testing.assert_array_equal(got, data)
    assert report["dma_bytes"] == data.size


def test_small_reads_and_host_reads_do_not_register(tmp_path):
    data = pattern(8 * MiB, 9)
    path = tmp_path / "s.bin"
    data.tofile(path)
    for _ in range(2):  # below 64 KiB: never, even on a second read
        got, report = _read(path, 32 * 1024)
        np.testing.assert_array_equal(got, data[:32 * 1024])
        assert report["dma_bytes"] == 0
    host = np.empty(data.size, dtype=np.uint8)
    with gpufile.CuFile(path, "r") as f:
        f.read(host)
    np.testing.assert_array_equal(host, data)
    assert gpufile.dma_cache_registered() == 0


def test_deleted_file_is_let_go_under_pressure(tmp_path):
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    pattern(100 * MiB, 20).tofile(a)
    pattern(100 * MiB, 21).tofile(b)
    _settle()
    with defaults.set("dma_cache_size", 128 * MiB):
        _read(a, 100 * MiB)
        _read(a, 100 * MiB)
        a.unlink()  # its registered granules are all that keeps its pages
        _read(b, 100 * MiB)
        got, report = _read(b, 100 * MiB)
        np.testing.assert_array_equal(got, np.fromfile(b, dtype=np.uint8))
        assert report["dma_bytes"] == 100 * MiB
        assert gpufile.dma_cache_registered() <= 128 * MiB


def test_a_write_during_reads_never_leaves_stale_bytes_for_a_later_read(tmp_path):
    """A read already registering a granule when a gpufile write forgets the file used to publish
    it into the entry just dropped: its pages, pinned across the write, could keep the old bytes,
    and that entry was never evicted. Reads in a loop (registering: the file is read again and
    settled) race whole-file writes (O_DIRECT bounce chunks); every read that ran wholly between
    two writes, and every read after the last, holds what the last write before it wrote."""
    import threading
    n, rounds = 130 * MiB, 8  # three granules
    gens = [cp.asarray(pattern(n, 20 + k)) for k in range(rounds + 1)]
    path = tmp_path / "race.bin"
    cp.asnumpy(gens[0]).tofile(path)
    _settle()
    state = {"seq": 0, "writing": False}
    guard = threading.Lock()
    stop = threading.Event()
    failures, checked = [], [0]

    def reader():
        dev = cp.empty(n, dtype=cp.uint8)
        with gpufile.CuFile(path, "r") as f:
            while not stop.is_set():
                with guard:
                    before = (state["seq"], state["writing"])
                f.read(dev)
                with guard:
                    after = (state["seq"], state["writing"])
                if before == after and not before[1]:  # no write overlapped this read
                    checked[0] += 1
                    if not bool(cp.array_equal(dev, gens[before[0]])):
                        failures.append(before[0])

    with defaults.set({"num_threads": 4, "auto_direct_io_write": True}):
        t = threading.Thread(target=reader)
        t.start()
        try:
            with gpufile.CuFile(path, "r+") as w:
                for k in range(1, rounds + 1):
                    time.sleep(0.15)  # reads again, settled: granules get registered
                    with guard:
                        state["writing"] = True
                    w.write(gens[k])
                    with guard:
                        state["seq"], state["writing"] = k, False
            time.sleep(0.15)
        finally:
            stop.set()
            t.join()
        assert not failures, f"stale bytes after writes {sorted(set(failures))}"
        assert checked[0] > 0
        _settle()
        for _ in range(2):  # the second one by DMA
            got, _ = _read(path, n)
            assert (got == cp.asnumpy(gens[rounds])).all()
    assert np.fromfile(path, dtype=np.uint8).tobytes() == cp.asnumpy(gens[rounds]).tobytes()
