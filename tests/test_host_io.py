import asyncio
import threading

import numpy as np
import pytest

import gpufile
from gpufile import defaults
from conftest import pattern


# Every size with every task size, but 10 MiB in tasks of 199 bytes: 50k tasks test nothing
# that 1 MiB does not.
@pytest.mark.parametrize("task_size,nbytes", [
    (t, n) for t in [199, 1024, 4 * 1024**2] for n in [0, 1, 4095, 4096, 4097, 10 * 1024**2 + 3]
    if not (n > 1 << 20 and t == 199)
])
def test_round_trip_sizes_and_task_sizes(tmp_path, nbytes, task_size):
    data = pattern(nbytes, nbytes)
    path = tmp_path / "f.bin"
    with gpufile.CuFile(path, "w") as f:
        assert f.write(data, task_size=task_size) == nbytes
    assert path.read_bytes() == data.tobytes()
    out = np.empty_like(data)
    with gpufile.CuFile(path, "r") as f:
        assert f.read(out, task_size=task_size) == nbytes
    np.testing.assert_array_equal(out, data)


@pytest.mark.parametrize("threads", [1, 3, 4, 16])
def test_thread_counts(data_file, threads):
    path, data = data_file(3 * 1024**2 + 5)
    out = np.zeros_like(data)
    with defaults.set("num_threads", threads), gpufile.CuFile(path) as f:
        assert f.read(out, task_size=65536) == data.nbytes
    np.testing.assert_array_equal(out, data)


def test_spec_step3_with_numpy(data_file):
    """The spec's Step 3 with a NumPy buffer in place of CuPy."""
    import gpufile as kvikio
    file_path, data = data_file(4 * 1024**2 + 1)
    buf = np.empty(file_path.stat().st_size, dtype=np.uint8)
    with kvikio.CuFile(file_path, "r") as file:
        bytes_read = file.read(buf)
    assert bytes_read == buf.nbytes
    np.testing.assert_array_equal(buf, data)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64, np.uint16])
def test_any_dtype(tmp_path, dtype):
    a = (np.arange(12345) * 3).astype(dtype)
    path = tmp_path / "a.bin"
    with gpufile.CuFile(path, "w") as f:
        assert f.write(a) == a.nbytes
    b = np.empty_like(a)
    with gpufile.CuFile(path, "r") as f:
        f.read(b)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.fromfile(path, dtype=dtype), a)


def test_bytearray_memoryview_and_2d(data_file):
    path, data = data_file(8192)
    ba = bytearray(8192)
    with gpufile.CuFile(path) as f:
        assert f.read(ba) == 8192
        assert bytes(ba) == data.tobytes()
        mv = memoryview(bytearray(100))
        assert f.read(mv, file_offset=50) == 100
        assert mv.tobytes() == data[50:150].tobytes()
        two_d = np.empty((64, 128), dtype=np.uint8)
        f.read(two_d)
        np.testing.assert_array_equal(two_d.ravel(), data)


def test_size_and_unaligned_offsets(data_file):
    path, data = data_file(100_000)
    with gpufile.CuFile(path) as f:
        for off, size in [(1, 4095), (4097, 10_000), (99_999, 1), (12_345, 87_655)]:
            out = np.zeros(size + 10, dtype=np.uint8)
            assert f.read(out, size=size, file_offset=off, task_size=1000) == size
            np.testing.assert_array_equal(out[:size], data[off:off + size])
            assert not out[size:].any(), "bytes past size untouched"


def test_contiguous_slices(data_file):
    path, data = data_file(50_000)
    big = np.zeros(60_000, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        f.read(big[1000:11000], file_offset=333)
    np.testing.assert_array_equal(big[1000:11000], data[333:10333])
    assert not big[:1000].any() and not big[11000:].any()


def test_write_at_offset_and_r_plus(data_file):
    path, data = data_file(10_000)
    patch = pattern(333, 9)
    with gpufile.CuFile(path, "r+") as f:
        assert f.write(patch, file_offset=4321, task_size=100) == 333
        back = np.empty(333, dtype=np.uint8)
        f.read(back, file_offset=4321)
    np.testing.assert_array_equal(back, patch)
    expect = data.copy()
    expect[4321:4654] = patch
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.uint8), expect)


def test_w_plus_reads_back(tmp_path):
    data = pattern(5000, 4)
    with gpufile.CuFile(tmp_path / "wp.bin", "w+") as f:
        f.write(data)
        out = np.empty_like(data)
        f.read(out)
    np.testing.assert_array_equal(out, data)


def test_pread_pwrite_futures(tmp_path):
    data = pattern(2 * 1024**2, 1)
    path = tmp_path / "p.bin"
    with gpufile.CuFile(path, "w") as f:
        fut = f.pwrite(data, task_size=100_000)
        assert fut.get() == data.nbytes
        assert fut.done()
    out = np.empty_like(data)
    with gpufile.CuFile(path, "r") as f:
        futs = [f.pread(out[i:i + 1024**2], file_offset=i) for i in (0, 1024**2)]
        assert [x.get() for x in futs] == [1024**2, 1024**2]
        assert futs[0].get() == 1024**2, "get() twice gives the same answer"
    np.testing.assert_array_equal(out, data)


def test_future_keeps_buffer_and_file_alive(data_file):
    path, data = data_file(4 * 1024**2)
    f = gpufile.CuFile(path)
    out = np.empty_like(data)
    fut = f.pread(out, task_size=4096)
    f.close()  # closing while the request runs is safe; the request still completes
    assert f.closed
    assert fut.get() == data.nbytes
    np.testing.assert_array_equal(out, data)
    fut = gpufile.CuFile(path).pread(np.empty_like(data))  # nothing else holds file or buffer
    assert fut.get() == data.nbytes


def test_dropping_a_pending_future_is_safe(data_file):
    path, data = data_file(8 * 1024**2)
    with gpufile.CuFile(path) as f:
        for _ in range(5):
            f.pread(np.empty_like(data), task_size=8192)  # dropped at once


def test_awaitable(data_file):
    path, data = data_file(1 << 20)
    out = np.empty_like(data)

    async def main():
        with gpufile.CuFile(path) as f:
            return await f.pread(out)

    assert asyncio.run(main()) == data.nbytes
    np.testing.assert_array_equal(out, data)


def test_concurrent_preads_from_many_threads(data_file):
    path, data = data_file(8 * 1024**2, 3)
    out = np.zeros_like(data)
    errors = []
    with gpufile.CuFile(path) as f:
        def worker(i):
            try:
                lo, hi = i * 512 * 1024, (i + 1) * 512 * 1024
                f.pread(out[lo:hi], file_offset=lo, task_size=65_537).get()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    np.testing.assert_array_equal(out, data)


def test_file_metadata(data_file, tmp_path):
    path, _ = data_file(10)
    import os
    with gpufile.CuFile(str(path)) as f:
        assert f.fileno() >= 0
        assert f.open_flags() & os.O_ACCMODE == os.O_RDONLY
        assert isinstance(f.is_direct_io_supported(), bool)
        assert f.io_path_for(np.empty(10, np.uint8)) == (
            "gpufile-posix", "host buffer: cuFile gains nothing for host memory")
        assert "flags='r'" in repr(f)
    with gpufile.CuFile(tmp_path / "w.bin", "w") as f:
        assert f.open_flags() & os.O_ACCMODE == os.O_WRONLY


def test_host_io_loads_no_cuda(data_file):
    """Host-only work must run where no CUDA library exists (CI is such a machine)."""
    from conftest import run_python
    path, _ = data_file(4096)
    code = (
        "import numpy as np, gpufile\n"
        f"b = np.empty(4096, np.uint8)\n"
        f"gpufile.CuFile({str(path)!r}).read(b)\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('libcuda' in maps, 'libcufile' in maps)\n"
    )
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


class DlpackOnly:
    """An array seen only through DLPack, as a PyTorch CPU tensor is (no buffer protocol):
    NumPy's own `__dlpack__` exports kDLCPU memory, read-only arrays flagged so (DLPack 1.0)."""

    def __init__(self, arr):
        self.arr = arr
        self.calls = []

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_cpu_memory_is_host_memory(tmp_path):
    data = pattern(3 << 20, 7)
    path = tmp_path / "d.bin"
    with gpufile.CuFile(path, "w") as f:
        assert f.write(DlpackOnly(data)) == data.nbytes
    assert path.read_bytes() == data.tobytes()
    out = np.zeros(data.size + 8, dtype=np.uint8)
    dst = DlpackOnly(out[8:])
    with gpufile.CuFile(path) as f:
        assert f.io_path_for(dst)[0] == "gpufile-posix"
        assert f.pread(dst, size=1 << 20, file_offset=5).get() == 1 << 20
        assert f.read(dst) == data.nbytes
    np.testing.assert_array_equal(out[8:], data)
    assert out[:8].tobytes() == bytes(8)
    assert all(kw["stream"] is None for kw in dst.calls)  # the protocol's value for CPU memory


def test_dlpack_cpu_export_read_only_or_strided_is_refused(tmp_path):
    path = tmp_path / "d.bin"
    path.write_bytes(bytes(range(256)) * 4)
    ro = np.zeros(1024, dtype=np.uint8)
    ro.flags.writeable = False
    strided = np.zeros(2048, dtype=np.uint8)
    with gpufile.CuFile(path) as f:
        with pytest.raises(TypeError, match="DlpackOnly is read-only"):
            f.read(DlpackOnly(ro))
        with pytest.raises(ValueError, match="C-contiguous"):
            f.read(DlpackOnly(strided[::2]))
    assert not ro.any() and not strided.any()
    with gpufile.CuFile(tmp_path / "w.bin", "w") as f:  # a read-only source is fine
        assert f.write(DlpackOnly(ro)) == 1024


def test_torch_cpu_tensors_are_host_memory(tmp_path):
    """A CPU tensor has no buffer protocol: it comes through DLPack as kDLCPU memory (no GPU
    needed: torch's CPU tensors, beside the kDLCPU tests with NumPy here)."""
    torch = pytest.importorskip("torch")
    data = pattern((1 << 20) + 7, 12)
    path = tmp_path / "c.bin"
    data.tofile(path)
    t = torch.empty(data.size, dtype=torch.uint8)
    with gpufile.CuFile(path) as f:
        assert f.io_path_for(t)[0] == "gpufile-posix"
        assert f.read(t) == data.size
    np.testing.assert_array_equal(t.numpy(), data)
    with gpufile.CuFile(tmp_path / "w.bin", "w") as f:
        assert f.write(t[1:]) == data.size - 1
    assert (tmp_path / "w.bin").read_bytes() == data[1:].tobytes()
