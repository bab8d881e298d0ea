"""read_batch / write_batch: many files as one stream of requests."""

import numpy as np
import pytest

import gpufile
from conftest import pattern


def test_read_batch_of_many_files_byte_for_byte(tmp_path):
    files = []
    for i in range(40):
        data = pattern(100_000 + 4099 * i, i)
        p = tmp_path / f"f{i}.bin"
        data.tofile(p)
        files.append((p, data))
    bufs = [np.zeros(d.nbytes, dtype=np.uint8) for _, d in files]
    opened = gpufile.CuFile(files[0][0])
    entries = [(opened if i == 0 else p, b, None, 0) for i, ((p, _), b) in enumerate(zip(files, bufs))]
    with gpufile.observe() as obs:
        fut = gpufile.read_batch(entries)
        total = fut.get()
    assert total == sum(d.nbytes for _, d in files)
    for (_, d), b in zip(files, bufs):
        np.testing.assert_array_equal(b, d)
    assert obs.report["gpufile-posix"]["ops"] == len(files)


def test_read_batch_ranges_and_sizes(tmp_path):
    data = pattern(1 << 20, 7)
    p = tmp_path / "one.bin"
    data.tofile(p)
    out = np.zeros(3 * 1000, dtype=np.uint8)
    views = [out[0:1000], out[1000:2000], out[2000:3000]]
    fut = gpufile.read_batch([(p, v, 1000, off) for v, off in zip(views, (0, 5000, 999_000))])
    assert fut.get() == 3000
    np.testing.assert_array_equal(out[:1000], data[:1000])
    np.testing.assert_array_equal(out[1000:2000], data[5000:6000])
    np.testing.assert_array_equal(out[2000:], data[999_000:1_000_000])


def test_write_batch_round_trip(tmp_path):
    paths = [tmp_path / f"w{i}.bin" for i in range(5)]
    for p in paths:
        p.write_bytes(b"\0" * 10_000)
    datas = [pattern(10_000, 100 + i) for i in range(5)]
    assert gpufile.write_batch([(p, d, None, 0) for p, d in zip(paths, datas)]).get() == 50_000
    for p, d in zip(paths, datas):
        assert p.read_bytes() == d.tobytes()


def test_a_bad_entry_fails_before_any_request_starts(tmp_path):
    good = tmp_path / "g.bin"
    pattern(1000, 1).tofile(good)
    buf = np.zeros(1000, dtype=np.uint8)
    with pytest.raises(FileNotFoundError):
        gpufile.read_batch([(good, buf, None, 0), (tmp_path / "missing.bin", buf, None, 0)])
    with pytest.raises(TypeError, match="file, buf, size, file_offset"):
        gpufile.read_batch([(good, buf)])
    with pytest.raises(gpufile.EndOfFileError):
        gpufile.read_batch([(good, np.zeros(2000, dtype=np.uint8), None, 0)])
    assert (buf == 0).all()
    assert gpufile.read_batch([]).get() == 0


def test_small_reads_are_split_over_the_workers(tmp_path):
    """A 4 MiB read with the default task size is several tasks when workers would idle."""
    data = pattern(4 << 20, 3)
    p = tmp_path / "s.bin"
    data.tofile(p)
    out = np.zeros_like(data)
    with gpufile.defaults.set("num_threads", 4), gpufile.observe() as obs:
        gpufile.CuFile(p).read(out)
    np.testing.assert_array_equal(out, data)
    assert obs.report["gpufile-posix"]["tasks"] == 4
    with gpufile.defaults.set("num_threads", 4), gpufile.observe() as obs:
        gpufile.CuFile(p).read(out, task_size=4 << 20)  # a size given by the caller is kept
    assert obs.report["gpufile-posix"]["tasks"] == 1
