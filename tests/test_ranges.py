"""CuFile.read_ranges / write_ranges / read_rows and BatchHandle: many ranges as one request
(host memory; the device variants are in test_ranges_gpu.py)."""

import array

import numpy as np
import pytest

import gpufile
from conftest import pattern, run_python
from gpufile.batch import IOStatus, OpCode


@pytest.fixture
def table(tmp_path):
    data = pattern(4 << 20, 3)
    path = tmp_path / "table.bin"
    data.tofile(path)
    return path, data


@pytest.fixture(params=[True, False], ids=["io_uring", "pread"])
def io_uring(request):
    gpufile.defaults.set("io_uring", request.param)
    return request.param


def check_report(report, io_uring, ranges):
    assert report["backend"] == "gpufile-posix"
    assert report["ranges"] == ranges
    assert report["gathered"] is True
    assert 1 <= report["tasks"] < ranges
    if io_uring:
        # This kernel has io_uring (the Rust tests say why if not).
        assert report["host_io"] == "io_uring", report
        assert report["host_io_reason"].startswith("io_uring available"), report
    else:
        assert report["host_io"] == "pread"
        assert report["host_io_reason"] == "io_uring is off (setting io_uring)"
    assert report["copies"] is None  # host memory: nothing copied to a GPU
    assert report["gpu_gather"] is None and report["gpu_gather_reason"] is None


def test_read_ranges_is_byte_exact_from_numpy_lists_and_array_array(table, io_uring):
    path, data = table
    rng = np.random.default_rng(1)
    n = 5000
    offsets = rng.integers(0, data.nbytes - 4096, n)
    sizes = rng.integers(0, 4097, n)
    with gpufile.CuFile(path) as f:
        for offs, szs in [
            (offsets, sizes),                                   # int64 arrays
            (offsets.astype(np.uint64), sizes.astype(np.uint32)),
            (offsets.tolist(), sizes.tolist()),                 # lists
            (array.array("q", offsets.tolist()), array.array("I", sizes.tolist())),
        ]:
            out = np.full(int(sizes.sum()), 0xEE, dtype=np.uint8)
            fut = f.read_ranges(out, offs, szs)
            assert fut.get() == int(sizes.sum())
            at = 0
            for o, s in zip(offsets, sizes):
                np.testing.assert_array_equal(out[at:at + s], data[o:o + s])
                at += s
            check_report(fut.report(), io_uring, n)


def test_read_ranges_with_buffer_offsets_leaves_the_gaps_alone(table, io_uring):
    path, data = table
    out = np.full(100, 7, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.read_ranges(out, [1000, 0, 4_000_000], [10, 5, 20], buf_offsets=[50, 0, 70])
        assert fut.get() == 35
    np.testing.assert_array_equal(out[50:60], data[1000:1010])
    np.testing.assert_array_equal(out[0:5], data[0:5])
    np.testing.assert_array_equal(out[70:90], data[4_000_000:4_000_020])
    assert (out[5:50] == 7).all() and (out[60:70] == 7).all() and (out[90:] == 7).all()


def test_read_rows_gathers_a_table_in_the_order_asked(table, io_uring):
    path, data = table
    row_bytes, stride, base = 96, 128, 64
    n_rows = (data.nbytes - base) // stride
    rows = np.random.default_rng(5).integers(0, n_rows, 20_000)
    out = np.zeros((rows.size, row_bytes), dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.read_rows(out, rows, row_bytes, row_stride=stride, base_offset=base)
        assert fut.get() == out.nbytes
    want = np.stack([data[base + r * stride: base + r * stride + row_bytes] for r in rows])
    np.testing.assert_array_equal(out, want)
    check_report(fut.report(), io_uring, rows.size)


@pytest.mark.parametrize("dtype", ["u1", "i1", "<u2", ">i2", "<i4", ">u4", "<i8", ">u8", "<u8"])
def test_row_indices_of_every_width_sign_and_byte_order_read_the_same_rows(table, dtype):
    path, data = table
    rows = np.array([3, 0, 120, 7, 7, 99], dtype=dtype)
    out = np.zeros((rows.size, 16), dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        assert f.read_rows(out, rows, 16).get() == out.nbytes
    want = np.stack([data[int(r) * 16: int(r) * 16 + 16] for r in rows.astype(np.int64)])
    np.testing.assert_array_equal(out, want)
    if dtype.lstrip("<>").startswith("i"):
        bad = rows.copy()
        bad[4] = -3
        out[:] = 0x5A
        with gpufile.CuFile(path) as f:
            with pytest.raises(ValueError, match=r"rows\[4\] must not be negative, got -3$"):
                f.read_rows(out, bad, 16)
        assert (out == 0x5A).all()


def test_row_indices_read_in_place_or_copied_give_the_same_rows(table):
    """Native 8-byte indices are read in the caller's array itself; an unaligned or read-only
    array of them reads the same rows, and a negative one is refused the same way."""
    path, data = table
    rows = np.array([5, 1, 200, 5], dtype=np.int64)
    unaligned = np.frombuffer(b"\0" + rows.tobytes(), dtype=np.int64, offset=1)
    assert unaligned.ctypes.data % 8 != 0
    readonly = rows.copy()
    readonly.setflags(write=False)
    want = np.stack([data[r * 32: r * 32 + 32] for r in rows])
    with gpufile.CuFile(path) as f:
        for given in (rows, unaligned, readonly, rows.astype(np.uint64)):
            out = np.zeros((4, 32), dtype=np.uint8)
            assert f.read_rows(out, given, 32).get() == out.nbytes
            np.testing.assert_array_equal(out, want)
        for bad in (np.array([1, -7], dtype=np.int64),
                    np.frombuffer(b"\0" + np.array([1, -7]).tobytes(), dtype=np.int64, offset=1)):
            with pytest.raises(ValueError, match=r"rows\[1\] must not be negative, got -7$"):
                f.read_rows(np.zeros((2, 32), dtype=np.uint8), bad, 32)


def test_write_ranges_scatters_byte_exact(tmp_path, io_uring):
    path = tmp_path / "out.bin"
    np.zeros(1 << 20, dtype=np.uint8).tofile(path)
    src = pattern(30_000, 9)
    offsets = np.arange(300) * 3000 + 17           # disjoint in the file
    with gpufile.CuFile(path, "r+") as f:
        fut = f.write_ranges(src, offsets, 100)
        assert fut.get() == 30_000
        check_report(fut.report(), io_uring, 300)
    back = np.fromfile(path, dtype=np.uint8)
    for i, o in enumerate(offsets):
        np.testing.assert_array_equal(back[o:o + 100], src[i * 100:(i + 1) * 100])
    assert back[:17].sum() == 0 and back[117:3017].sum() == 0


def test_io_uring_forced_off_by_environment_variable(table):
    path, _ = table
    code = f"""
import numpy as np, gpufile
with gpufile.CuFile({str(path)!r}) as f:
    out = np.zeros(8192, dtype=np.uint8)
    fut = f.read_ranges(out, [0, 8192], 4096)
    fut.get()
    r = fut.report()
    print(r["host_io"], "|", r["host_io_reason"], "|", gpufile.defaults.get("io_uring"))
"""
    r = run_python(code, {"GPUFILE_IO_URING": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "pread | io_uring is off (setting io_uring) | False"


def test_one_range_keeps_the_single_request_path(table):
    path, data = table
    out = np.zeros(4096, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        fut = f.read_ranges(out, [4096], [4096])
        assert fut.get() == 4096
        r = fut.report()
    assert r["gathered"] is False and r["host_io"] is None and r["tasks"] == 1
    np.testing.assert_array_equal(out, data[4096:8192])


# Bad input: a typed error, and not one byte moved.

BAD = [
    # (file_offsets, sizes, buf_offsets, error, message part)
    ([0, 10], [5], None, ValueError, "file_offsets has 2 entries but sizes has 1"),
    ([0, 10], [5, 5], [0], ValueError, "file_offsets has 2 entries but buf_offsets has 1"),
    ([0, -10], [5, 5], None, ValueError, "file_offsets[1] must not be negative"),
    (np.array([0, -10]), [5, 5], None, ValueError, "file_offsets[1] must not be negative, got -10"),
    ([0, 10], np.array([5, -1], dtype=np.int8), None, ValueError, "sizes[1] must not be negative"),
    ([0, 1.5], [5, 5], None, TypeError, "file_offsets[1] must be an int, not float"),
    (np.array([0.0, 1.0]), [5, 5], None, TypeError, "file_offsets must hold integers, got items"),
    ([0, None], [5, 5], None, TypeError, "file_offsets[1] must be an int, not NoneType"),
    ("0,10", [5, 5], None, TypeError, "file_offsets must be integers"),
    (b"\x00\x01", [5, 5], None, TypeError, "file_offsets must be integers"),
    ([0, True], [5, 5], None, TypeError, "file_offsets[1] must be an int, not bool"),
    ([0, 10], [5, 5], [0, 3], ValueError, "ranges overlap in the buffer"),
    ([0, 10], [50, 60], None, ValueError, "runs past the buffer"),
    ([0, (4 << 20) - 2], [5, 5], None, gpufile.EndOfFileError, None),
    ([0, 2**64 - 8], [5, 5], None, ValueError, "past the largest file offset"),
]


@pytest.mark.parametrize("offsets,sizes,bufs,error,text", BAD)
def test_bad_ranges_are_refused_before_any_byte_moves(table, offsets, sizes, bufs, error, text):
    path, _ = table
    out = np.full(100, 0x5A, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(error) as e:
            f.read_ranges(out, offsets, sizes, bufs)
    if text:
        assert text in str(e.value)
    assert (out == 0x5A).all()


def test_offset_arrays_of_more_than_one_dimension_are_refused_naming_the_shape(table):
    path, _ = table
    out = np.full(100, 0x5A, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(ValueError, match=r"file_offsets must be one-dimensional, got an "
                                             r"array of shape \(2, 2\)"):
            f.read_ranges(out, np.array([[0, 10], [20, 30]]), 10)
        with pytest.raises(ValueError, match=r"sizes must be one-dimensional, got an array of "
                                             r"shape \(2, 1\)"):
            f.read_ranges(out, [0, 50], np.array([[10], [10]]))
        with pytest.raises(ValueError, match=r"buf_offsets .* shape \(1, 2\)"):
            f.read_ranges(out, [0, 50], 10, np.array([[0, 10]]))
        with pytest.raises(ValueError, match=r"file_offsets .* shape \(3, 2\)"):
            f.read_ranges(out, np.zeros((2, 3), np.int64).T, 10)  # not contiguous either
        with pytest.raises(ValueError, match=r"rows .* shape \(2, 1\)"):
            f.read_rows(out, np.array([[0], [1]]), 10)
    assert (out == 0x5A).all()
    with gpufile.CuFile(path) as f:  # one dimension, any integer type, still taken
        offsets, sizes = np.array([0, 10], np.int32), np.array([5, 5], np.uint16)
        assert f.read_ranges(out, offsets, sizes).get() == 10


def test_bad_rows_are_refused_before_any_byte_moves(table):
    path, _ = table
    out = np.full(1000, 0x5A, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(ValueError, match="row_bytes must be at least 1"):
            f.read_rows(out, [0, 1], 0)
        with pytest.raises(ValueError, match=r"rows\[1\] must not be negative"):
            f.read_rows(out, np.array([0, -1]), 10)
        with pytest.raises(ValueError, match="runs past the buffer"):
            f.read_rows(out, [0, 1], 600)                       # 1200 bytes into 1000
        with pytest.raises(gpufile.EndOfFileError):
            f.read_rows(out, [0, 1 << 20], 10, row_stride=100)  # row past the end
        with pytest.raises(ValueError, match="past the largest file offset"):
            f.read_rows(out, [2**62], 10, row_stride=1 << 10)
    assert (out == 0x5A).all()


def test_overlapping_file_ranges_of_a_write_are_refused(tmp_path):
    path = tmp_path / "w.bin"
    np.zeros(100, dtype=np.uint8).tofile(path)
    with gpufile.CuFile(path, "r+") as f:
        with pytest.raises(ValueError, match="ranges overlap in the file"):
            f.write_ranges(np.ones(20, dtype=np.uint8), [0, 5], [10, 10])
    assert (np.fromfile(path, dtype=np.uint8) == 0).all()


def test_read_ranges_into_a_read_only_buffer_is_refused(table):
    path, _ = table
    ro = np.zeros(10, dtype=np.uint8)
    ro.flags.writeable = False
    with gpufile.CuFile(path) as f, pytest.raises((TypeError, ValueError)):
        f.read_ranges(ro, [0, 5], [5, 5])


# BatchHandle / BatchOp: KvikIO C++'s names.

def test_batch_handle_submit_status_byte_exact(table, tmp_path):
    path, data = table
    out_a = np.zeros(64 * 100, dtype=np.uint8)
    out_b = np.zeros(1000, dtype=np.uint8)
    wpath = tmp_path / "w.bin"
    np.zeros(10_000, dtype=np.uint8).tofile(wpath)
    src = pattern(500, 4)
    with gpufile.CuFile(path) as f, gpufile.CuFile(wpath, "r+") as w, \
            gpufile.BatchHandle(200) as batch:
        ops = [gpufile.BatchOp(f, out_a, i * 4096, i * 100, 100) for i in range(64)]
        ops.append(gpufile.BatchOp(f, out_b, 12345, 0, 1000, OpCode.READ))
        ops.append(gpufile.BatchOp(w, src, 9000, 0, 500, OpCode.WRITE))
        batch.submit(ops)
        events = batch.status(len(ops), len(ops), timeout=30)
        assert sorted(e.cookie for e in events) == list(range(len(ops)))
        assert all(e.status == IOStatus.COMPLETE for e in events)
        assert {e.cookie: e.ret for e in events}[64] == 1000
        # Every event was returned: the handle takes a new submission.
        assert batch.status(0, 10) == []
        batch.submit(ops[:3])
        assert len(batch.status(3, 3)) == 3
    for i in range(64):
        np.testing.assert_array_equal(out_a[i * 100:(i + 1) * 100], data[i * 4096:i * 4096 + 100])
    np.testing.assert_array_equal(out_b, data[12345:13345])
    np.testing.assert_array_equal(np.fromfile(wpath, dtype=np.uint8)[9000:9500], src)


def test_batch_ops_on_one_memory_through_two_objects_are_one_request(table):
    """The core groups by memory, not by Python object: a bytearray and a memoryview of all of
    it are one buffer, so eight reads through either are one request (they were two)."""
    path, data = table
    out = bytearray(8 * 4096)
    view = memoryview(out)
    ops = [gpufile.BatchOp(f, out if i % 2 else view, i * 8192, i * 4096, 4096)
           for f in [gpufile.CuFile(path)] for i in range(8)]
    with gpufile.BatchHandle(8) as batch, gpufile.observe() as obs:
        batch.submit(ops)
        events = batch.status(8, 8, timeout=30)
    assert obs.report["gpufile-posix"]["ops"] == 1
    assert sorted((e.cookie, e.status, e.ret) for e in events) == \
        [(i, IOStatus.COMPLETE, 4096) for i in range(8)]
    for i in range(8):
        assert out[i * 4096:(i + 1) * 4096] == data[i * 8192:i * 8192 + 4096].tobytes()
    ops[0].file_handle.close()


def test_batch_status_returns_at_most_max_nr(table):
    path, _ = table
    out = np.zeros(4096 * 10, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        batch = gpufile.BatchHandle(10)
        batch.submit([gpufile.BatchOp(f, out, i * 4096, i * 4096, 4096) for i in range(10)])
        first = batch.status(4, 4)
        assert len(first) == 4
        rest = batch.status(6, 10)
        assert len(rest) == 6 and not {e.cookie for e in first} & {e.cookie for e in rest}
        batch.close()
        assert batch.closed()


def test_a_batch_larger_than_its_capacity_and_other_bad_batches_move_nothing(table):
    path, _ = table
    out = np.full(4096 * 4, 0x5A, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        batch = gpufile.BatchHandle(3)
        ops = [gpufile.BatchOp(f, out, i * 4096, i * 4096, 4096) for i in range(4)]
        with pytest.raises(ValueError, match=r"Cannot submit more than max_num_events \(3\): got 4"):
            batch.submit(ops)
        with pytest.raises(gpufile.EndOfFileError, match="operations\\[1\\]"):
            batch.submit([ops[0], gpufile.BatchOp(f, out, 4 << 20, 0, 1)])
        with pytest.raises(ValueError, match="operations\\[0\\].size must not be negative"):
            batch.submit([gpufile.BatchOp(f, out, 0, 0, -1)])
        with pytest.raises(TypeError, match="operations\\[0\\] must be a BatchOp"):
            batch.submit([(f, out, 0, 0, 1)])
        with pytest.raises(ValueError, match="runs past the buffer"):
            batch.submit([ops[0], gpufile.BatchOp(f, out, 0, 4096 * 4 - 10, 4096)])
        with pytest.raises(ValueError, match="overlap in the buffer"):
            batch.submit([ops[0], gpufile.BatchOp(f, out, 8192, 100, 4096)])
        assert (out == 0x5A).all()
        # A submission in flight refuses another until its events are returned.
        batch.submit(ops[:2])
        with pytest.raises(RuntimeError, match="a submission is in flight"):
            batch.submit(ops[:1])
        batch.status(2, 2)
        batch.close()
        with pytest.raises(ValueError, match="closed"):
            batch.submit(ops[:1])
    with pytest.raises(ValueError, match="at least 1"):
        gpufile.BatchHandle(0)
    with pytest.raises(ValueError, match="opcode"):
        gpufile.BatchOp(f, out, 0, 0, 1, 7)


def test_batch_cancel_reports_every_operation_once(table):
    path, _ = table
    out = np.zeros(4096 * 2000, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        batch = gpufile.BatchHandle(2000)
        batch.submit([gpufile.BatchOp(f, out, (i * 4096) % (4 << 20), i * 4096, 4096)
                      for i in range(2000)])
        batch.cancel()
        events = batch.status(2000, 2000, timeout=30)
        assert sorted(e.cookie for e in events) == list(range(2000))
        assert {e.status for e in events} <= {IOStatus.COMPLETE, IOStatus.CANCELED}
        batch.close()


class HostDlpackProducer:
    """A DLPack producer of host memory that follows the protocol's rule for it as PyTorch
    does: ``__dlpack__`` refuses any ``stream`` but None, with PyTorch's own assertion. Its
    ``device`` is what ``__dlpack_device__`` says: ``(1, 0)`` (kDLCPU) for a CPU tensor,
    ``(3, 0)`` (kDLCUDAHost) for a ``pin_memory=True`` one. The memory is a NumPy array's,
    exported by NumPy's own ``__dlpack__`` (host memory either way: pinning changes nothing for
    the CPU that reads and writes it)."""

    def __init__(self, array, device):
        self.array = array
        self.device = device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        assert stream is None, "stream should be None on cpu."
        return self.array.__dlpack__(max_version=max_version)


@pytest.mark.parametrize("device", [(1, 0), (3, 0)], ids=["kDLCPU", "kDLCUDAHost"])
def test_read_rows_into_a_host_dlpack_tensor_passes_no_stream(table, device):
    """A pinned PyTorch CPU tensor as read_rows' destination (kDLCUDAHost) is host memory, and
    gets no stream: it used to get stream=1 and raise PyTorch's AssertionError."""
    path, data = table
    n, row_bytes = 300, 4096
    rows = np.random.default_rng(8).integers(0, data.nbytes // row_bytes, n)
    out = np.zeros((n, row_bytes), dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        assert f.read_rows(HostDlpackProducer(out, device), rows, row_bytes).get() == out.nbytes
    np.testing.assert_array_equal(out, np.stack([data[r * row_bytes:(r + 1) * row_bytes]
                                                 for r in rows]))
    # The same memory as a write's source.
    back = path.with_name("back.bin")
    back.write_bytes(b"\0" * out.nbytes)
    with gpufile.CuFile(back, "r+") as f:
        assert f.write(HostDlpackProducer(out, device)) == out.nbytes
    assert back.read_bytes() == out.tobytes()
