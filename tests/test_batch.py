"""read_batch / write_batch: many files as one stream of requests."""

import numpy as np
import pytest

import gpufile
from conftest import pattern
from gpufile.batch import IOStatus


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


def test_batch_handle_status_after_close_raises_at_once(tmp_path):
    """status() on a closed handle raises ValueError at once, whether its submission's events
    were returned or not (it used to wait forever for events close() had dropped). Run in a
    subprocess with a deadline, so that a wait that never ends fails the test."""
    import subprocess
    import sys
    import textwrap
    p = tmp_path / "s.bin"
    pattern(1 << 16, 4).tofile(p)
    script = textwrap.dedent(f"""
        import numpy as np
        import gpufile
        out = np.zeros(8 * 4096, dtype=np.uint8)
        with gpufile.CuFile({str(p)!r}) as f:
            batch = gpufile.BatchHandle(8)
            batch.submit([gpufile.BatchOp(f, out, i * 4096, i * 4096, 4096) for i in range(8)])
            batch.close()  # no event returned
        unused = gpufile.BatchHandle(2)
        unused.close()
        for b, args in ((batch, (8, 8)), (batch, (1, 1, None)), (batch, (0, 8, 5.0)),
                        (unused, (1, 1))):
            try:
                b.status(*args)
            except ValueError as e:
                print(type(e).__name__, e)
            else:
                print("returned")
        batch.cancel()  # harmless on a closed handle
        print(batch.closed())
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["ValueError the batch handle is closed"] * 4 + ["True"]


def test_writes_to_the_same_bytes_of_one_file_are_refused_whatever_the_buffers(tmp_path):
    """Two writes of one batch to the same bytes of one file (two buffers; two handles of the
    file too) are refused naming both and the shared bytes; the file is left as it was."""
    from gpufile.batch import OpCode
    p, other = tmp_path / "f.bin", tmp_path / "other.bin"
    before = pattern(1 << 16, 6)
    before.tofile(p)
    before.tofile(other)
    a = np.full(8192, 0xAA, dtype=np.uint8)
    b = np.full(8192, 0xBB, dtype=np.uint8)
    # write_batch: entry i is request i.
    with pytest.raises(ValueError, match=r"requests 0 and 1 of the batch write the same bytes "
                                         r"of .*f\.bin \(bytes 4096\.\.8192\)"):
        gpufile.write_batch([(p, a, None, 0), (p, b, None, 4096)])
    with gpufile.CuFile(p, "r+") as w, gpufile.CuFile(p, "r+") as again, \
            gpufile.CuFile(other, "r+") as o:
        with pytest.raises(ValueError, match=r"requests 0 and 2 of the batch write the same "
                                             r"bytes .* \(bytes 100\.\.200\)"):
            gpufile.write_batch([(w, a[:100], None, 100), (o, b, None, 0),
                                 (again, b[:1000], None, 0)])
        # BatchHandle: operation i is BatchOp i, whatever their buffers and handles.
        with gpufile.BatchHandle(4) as batch:
            cases = [
                ([gpufile.BatchOp(w, a, 0, 0, 8192, OpCode.WRITE),
                  gpufile.BatchOp(o, b, 0, 0, 8192, OpCode.WRITE),
                  gpufile.BatchOp(again, b, 4096, 0, 8192, OpCode.WRITE)],
                 r"operations 0 and 2 of the batch write the same bytes of .*f\.bin "
                 r"\(bytes 4096\.\.8192\)"),
                ([gpufile.BatchOp(w, a, 1000, 0, 100, OpCode.WRITE),
                  gpufile.BatchOp(w, b, 1050, 0, 100, OpCode.WRITE)],
                 r"operations 0 and 1 of the batch write the same bytes .*\(bytes 1050\.\.1100\)"),
                ([gpufile.BatchOp(w, a, 9000, 0, 100, OpCode.WRITE),
                  gpufile.BatchOp(w, a, 9050, 0, 1, OpCode.WRITE)],
                 r"operations 0 and 1 of the batch write the same bytes .*\(bytes 9050\.\.9051\)"),
            ]
            for ops, says in cases:
                with pytest.raises(ValueError, match=says):
                    batch.submit(ops)
            assert p.read_bytes() == before.tobytes()
            assert other.read_bytes() == before.tobytes()
            # Adjacent bytes through the two handles, from two buffers, are written.
            batch.submit([gpufile.BatchOp(w, a, 0, 0, 4096, OpCode.WRITE),
                          gpufile.BatchOp(again, b, 4096, 0, 4096, OpCode.WRITE)])
            events = batch.status(2, 2, timeout=30)
            assert [(e.status, e.ret) for e in events] == [(IOStatus.COMPLETE, 4096)] * 2
    now = np.fromfile(p, dtype=np.uint8)
    assert (now[:4096] == 0xAA).all() and (now[4096:8192] == 0xBB).all()
    np.testing.assert_array_equal(now[8192:], before[8192:])
