"""64 threads on one handle: readers at random offsets and writers on disjoint ranges, host
memory everywhere and device memory where a GPU is; every byte checked."""

import random
import threading

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from conftest import pattern
from test_gpu import REASON as GPU_REASON

THREADS = 64
SLOT = 64 << 10


def hammer(tmp_path, make_buf, to_host):
    read_part = pattern(THREADS * SLOT, 5)
    path = tmp_path / "shared.bin"
    (np.concatenate([read_part, np.zeros(THREADS * SLOT, np.uint8)])).tofile(path)
    errors = []
    f = gpufile.CuFile(path, "r+")

    def worker(i):
        try:
            rng = random.Random(i)
            for _ in range(8):
                off = rng.randrange(0, THREADS * SLOT - 4096)
                n = rng.randrange(1, min(4096 * 8, THREADS * SLOT - off))
                buf = make_buf(n)
                assert f.pread(buf, n, off, task_size=rng.choice([199, 4096, 65536])).get() == n
                assert np.array_equal(to_host(buf), read_part[off:off + n]), (i, off, n)
            mine = pattern(SLOT, 1000 + i)
            src = make_buf(SLOT)
            if hasattr(src, "set"):
                src.set(mine)
            else:
                src[:] = mine
            assert f.write(src, file_offset=THREADS * SLOT + i * SLOT, task_size=8192) == SLOT
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(e)

    with defaults.set("num_threads", 8):
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    f.close()
    assert not errors, errors[:3]
    back = np.fromfile(path, dtype=np.uint8)
    np.testing.assert_array_equal(back[: THREADS * SLOT], read_part)
    for i in range(THREADS):
        lo = THREADS * SLOT + i * SLOT
        np.testing.assert_array_equal(back[lo:lo + SLOT], pattern(SLOT, 1000 + i))


def test_64_threads_host(tmp_path):
    hammer(tmp_path, lambda n: np.zeros(n, np.uint8), lambda b: b)


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_64_threads_device(tmp_path):
    import cupy as cp
    with defaults.set("compat_mode", "on"):
        hammer(tmp_path, lambda n: cp.zeros(n, cp.uint8), cp.asnumpy)
