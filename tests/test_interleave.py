"""Several files' writes go into one batch in one order, the core's (``gpufile::batch::
interleave``): a checkpoint's shards and the PyTorch writer's data files alike, the Python
package asking the binding rather than restating the rule."""

from types import SimpleNamespace

import numpy as np
import pytest

import gpufile
from gpufile import _native


def test_the_binding_gives_the_core_s_order_under_the_task_size_setting():
    # The case of the core's `batch::interleave::tests`: the same pieces, in the same order.
    with gpufile.defaults.set("task_size", 4):
        assert _native.interleave([[10], [3, 4], []]) == [
            (0, 0, 0, 4), (1, 0, 0, 3), (0, 0, 4, 4), (1, 1, 0, 4), (0, 0, 8, 2)]
        # One file's writes whole, in order (an empty write is none).
        assert _native.interleave([[10, 0, 25]]) == [(0, 0, 0, 10), (0, 2, 0, 25)]
    with gpufile.defaults.set("task_size", 8):
        assert _native.interleave([[10], [3]]) == [(0, 0, 0, 8), (1, 0, 0, 3), (0, 0, 8, 2)]


def test_the_torch_writer_s_batch_is_the_core_s_pieces_of_its_data_files():
    gt = pytest.importorskip("gpufile.torch")
    rng = np.random.default_rng(5)
    files, want = [], []
    for i, sizes in enumerate([[10_000, 3], [5000], [7000, 1]]):
        f = gt._DataFile(SimpleNamespace(file=f"file{i}"))
        f.add_bytes(b"header%d" % i)
        content = bytearray(b"header%d" % i)
        for n in sizes:
            data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            f.add_tensor(memoryview(data), 0, n)
            content += data
        f.flush()
        files.append(f)
        want.append(bytes(content))
    with gpufile.defaults.set("task_size", 4096):
        batch = gt._batch(files)
        pieces = _native.interleave([[n for _, n, _ in f.writes] for f in files])
    assert [(file, n) for file, _, n, _ in batch] == [(f"file{i}", k) for i, _, _, k in pieces]
    assert [file for file, *_ in batch[:3]] == ["file0", "file1", "file2"], "a piece of each"
    assert max(n for _, _, n, _ in batch) == 4096
    # Every byte of every file written once, where it belongs.
    written = [bytearray(len(w)) for w in want]
    for file, b, n, off in batch:
        i = int(file[4:])
        assert bytes(memoryview(b)[:n]) == want[i][off:off + n]
        written[i][off:off + n] = bytes(memoryview(b)[:n])
    assert [bytes(w) for w in written] == want
