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


def test_a_refused_batch_handle_submit_writes_nothing(tmp_path):
    """A write op first, then reads that overlap in their destination: the submit raises and
    the 16 MiB write never reaches the file (every op is checked before any moves)."""
    from gpufile.batch import OpCode
    src_path, dst_path = tmp_path / "src.bin", tmp_path / "dst.bin"
    pattern(8192, 1).tofile(src_path)
    np.zeros(16 << 20, dtype=np.uint8).tofile(dst_path)
    data = pattern(16 << 20, 2)
    # Many small reads: the later group takes a while to be looked at.
    n = 50_000
    out = np.full(n, 0x5A, dtype=np.uint8)
    with gpufile.CuFile(src_path) as r, gpufile.CuFile(dst_path, "r+") as w, \
            gpufile.BatchHandle(n + 2) as batch:
        ops = [gpufile.BatchOp(w, data, 0, 0, data.nbytes, OpCode.WRITE)]
        ops += [gpufile.BatchOp(r, out, i % 8192, i, 1) for i in range(n)]
        ops.append(gpufile.BatchOp(r, out, 0, 10, 1))
        for _ in range(3):
            with pytest.raises(ValueError, match="overlap in the buffer"):
                batch.submit(ops)
    assert not np.fromfile(dst_path, dtype=np.uint8).any()
    assert (out == 0x5A).all()


def test_read_batch_refuses_destinations_that_overlap_across_entries(tmp_path):
    p = tmp_path / "d.bin"
    data = pattern(1 << 20, 5)
    data.tofile(p)
    out = np.full(3000, 0x5A, dtype=np.uint8)
    with pytest.raises(ValueError, match="overlap in the buffer") as e:
        gpufile.read_batch([(p, out[0:1000], None, 0), (p, out[2000:3000], None, 0),
                            (p, out[500:1500], None, 4096)])
    assert "requests 0 and 2 of the batch" in str(e.value)  # entry i is request i
    assert (out == 0x5A).all()
    # The same buffer twice, and a bytearray and a memoryview of it.
    whole = bytearray(1000)
    with pytest.raises(ValueError, match="overlap in the buffer"):
        gpufile.read_batch([(p, whole, None, 0), (p, memoryview(whole)[10:20], None, 0)])
    assert whole == bytearray(1000)
    # Adjacent destinations and several sources into one are fine; writes may share a source.
    assert gpufile.read_batch([(p, out[0:1000], None, 0), (p, out[1000:3000], None, 8)]).get() \
        == 3000
    np.testing.assert_array_equal(out[1000:], data[8:2008])
    q = tmp_path / "w.bin"
    q.write_bytes(b"\0" * 4000)
    assert gpufile.write_batch([(q, out[:1000], None, 0), (q, out[:1000], None, 2000)]).get() \
        == 2000


def test_a_batch_of_1100_entries_on_one_file_opens_it_once(tmp_path):
    """Under a 1,024-descriptor limit, 1,100 entries naming one path read (and write) byte for
    byte: the path is opened once, not once per entry."""
    import subprocess
    import sys
    import textwrap
    p = tmp_path / "one.bin"
    pattern(1100 * 512, 9).tofile(p)
    script = textwrap.dedent(f"""
        import resource
        import numpy as np
        import gpufile
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        path = {str(p)!r}
        data = np.fromfile(path, dtype=np.uint8)
        out = np.zeros_like(data)
        n = gpufile.read_batch([(path, out[i * 512:(i + 1) * 512], None, i * 512)
                                for i in range(1100)]).get()
        assert n == data.nbytes, n
        assert (out == data).all()
        back = data[::-1].copy()
        n = gpufile.write_batch([(path, back[i * 512:(i + 1) * 512], None, i * 512)
                                 for i in range(1100)]).get()
        assert n == data.nbytes, n
        assert (np.fromfile(path, dtype=np.uint8) == back).all()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
