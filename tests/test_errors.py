import io

import numpy as np
import pytest

import gpufile
from conftest import without_root


def test_missing_file_is_filenotfounderror(tmp_path):
    missing = tmp_path / "nope.bin"
    with pytest.raises(FileNotFoundError) as e:
        gpufile.CuFile(missing)
    assert e.value.errno == 2
    assert e.value.filename == str(missing)


def test_directory_is_isadirectoryerror(tmp_path):
    with pytest.raises(IsADirectoryError):
        gpufile.CuFile(tmp_path)


def test_no_permission_is_permissionerror(open_tmp_path):
    p = open_tmp_path / "locked.bin"
    p.write_bytes(b"x")
    p.chmod(0)

    def check():  # not as root, which ignores permission bits
        with pytest.raises(PermissionError) as e:
            gpufile.CuFile(p)
        assert e.value.errno == 13 and e.value.filename == str(p)

    without_root(check)


@pytest.mark.parametrize("flags", ["rw", "a", "x", "", "r++", "R"])
def test_bad_flags(tmp_path, flags):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    with pytest.raises(ValueError, match="flags"):
        gpufile.CuFile(p, flags)


def test_flags_must_be_str(tmp_path):
    with pytest.raises(TypeError):
        gpufile.CuFile(tmp_path / "x", 1)


def test_closed_handle(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    f = gpufile.CuFile(p)
    f.close()
    f.close()  # twice is fine, as for Python files
    with pytest.raises(ValueError, match="closed file"):
        f.read(bytearray(3))
    with pytest.raises(ValueError, match="closed file"):
        f.fileno()


def test_buffer_smaller_than_size(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"a" * 100)
    with gpufile.CuFile(p) as f:
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.read(bytearray(10), size=20)


def test_read_only_destination(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    ro = np.zeros(3, dtype=np.uint8)
    ro.flags.writeable = False
    with gpufile.CuFile(p) as f:
        with pytest.raises(TypeError, match="read-only"):
            f.read(ro)
        with pytest.raises(TypeError, match="read-only"):
            f.read(b"xyz")
    assert not ro.any()


def test_bytes_is_fine_as_a_write_source(tmp_path):
    with gpufile.CuFile(tmp_path / "w.bin", "w") as f:
        assert f.write(b"hello") == 5
    assert (tmp_path / "w.bin").read_bytes() == b"hello"


def test_non_contiguous_array(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"a" * 100)
    a = np.zeros(100, dtype=np.uint8)
    with gpufile.CuFile(p) as f:
        with pytest.raises(ValueError, match="contiguous"):
            f.read(a[::2])
        with pytest.raises(ValueError, match="contiguous"):
            f.read(np.zeros((10, 10), dtype=np.uint8).T)
    assert not a.any()


@pytest.mark.parametrize("obj", [[1, 2, 3], "text", 42, None, object()])
def test_not_a_buffer(tmp_path, obj):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    with gpufile.CuFile(p) as f:
        with pytest.raises(TypeError, match="buffer"):
            f.read(obj)


@pytest.mark.parametrize("kw,exc", [
    ({"file_offset": -1}, ValueError),
    ({"file_offset": 2**70}, ValueError),
    ({"file_offset": 2**63}, ValueError),
    ({"size": -5}, ValueError),
    ({"task_size": 0}, ValueError),
    ({"file_offset": 1.0}, TypeError),
    ({"size": "3"}, TypeError),
])
def test_bad_numbers(tmp_path, kw, exc):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    buf = bytearray(3)
    with gpufile.CuFile(p, "r+") as f:
        with pytest.raises(exc):
            f.read(buf, **kw)
        with pytest.raises(exc):
            f.write(b"abc", **kw)
    assert p.read_bytes() == b"abc" and buf == bytearray(3)


def test_out_of_range_error_is_exported_and_is_what_a_negative_offset_raises(tmp_path):
    """docs/errors.md names `OutOfRangeError` for negative offsets and settings: a user catches it
    as `gpufile.OutOfRangeError`, a `ValueError` and KvikIO's `OverflowError`."""
    assert "OutOfRangeError" in gpufile.__all__
    assert issubclass(gpufile.OutOfRangeError, ValueError)
    assert issubclass(gpufile.OutOfRangeError, OverflowError)
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    buf = bytearray(3)
    with gpufile.CuFile(p, "r") as f:
        with pytest.raises(gpufile.OutOfRangeError, match="negative value"):
            f.read(buf, file_offset=-1)
    assert buf == bytearray(3)
    before = gpufile.defaults.get("task_size")
    with pytest.raises(gpufile.OutOfRangeError, match="negative value"):
        gpufile.defaults.set("task_size", -1)
    assert gpufile.defaults.get("task_size") == before


def test_read_past_end_raises_and_leaves_buffer(tmp_path):
    """KvikIO raises on reads past EOF too; gpufile checks first so nothing is copied."""
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 1000)
    buf = np.full(1001, 7, dtype=np.uint8)
    with gpufile.CuFile(p) as f:
        with pytest.raises(gpufile.EndOfFileError, match="past the end") as e:
            f.read(buf)
        assert isinstance(e.value, gpufile.GpufileError)
        with pytest.raises(gpufile.EndOfFileError):
            f.pread(buf[:1], file_offset=1000)
        assert f.read(buf, size=0, file_offset=5000) == 0
    assert (buf == 7).all()


def test_wrong_direction(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    with gpufile.CuFile(p, "r") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for writing"):
            f.write(b"x")
    with gpufile.CuFile(p, "w") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for reading"):
            f.read(bytearray(1))
    # io.UnsupportedOperation is both an OSError and a ValueError
    assert issubclass(io.UnsupportedOperation, ValueError)


def _libcuda_loads():
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


class _FakeDeviceArray:
    __cuda_array_interface__ = {"shape": (16,), "typestr": "|u1", "data": (0x10000, False),
                                "version": 3, "strides": None}


@pytest.mark.skipif(_libcuda_loads(), reason="this machine has a CUDA driver")
def test_device_array_without_cuda_is_a_cuda_error(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 16)
    with gpufile.CuFile(p) as f:
        with pytest.raises(gpufile.CudaError, match="libcuda.so.1"):
            f.read(_FakeDeviceArray())


@pytest.mark.parametrize("cai,match", [
    ({"shape": (16,), "typestr": "|u1", "data": (1, False), "strides": (2,)}, "contiguous"),
    ({"shape": (16,), "typestr": "?", "data": (1, False)}, "typestr"),
    ({"shape": (16,), "typestr": "|u1"}, "data"),
])
def test_malformed_cuda_array_interface(tmp_path, cai, match):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 16)
    obj = type("Arr", (), {"__cuda_array_interface__": cai})()
    with gpufile.CuFile(p) as f:
        with pytest.raises(ValueError, match=match):
            f.read(obj)


def test_read_only_cuda_array(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 16)
    obj = type("Arr", (), {"__cuda_array_interface__": {
        "shape": (16,), "typestr": "|u1", "data": (1, True)}})()
    with gpufile.CuFile(p) as f:
        with pytest.raises(TypeError, match="read-only"):
            f.read(obj)


class _RocmDlpack:
    def __dlpack__(self, stream=None):
        raise AssertionError("must not be called for a device gpufile does not read")

    def __dlpack_device__(self):
        return (10, 0)  # kDLROCM


def test_dlpack_of_memory_neither_cpu_nor_cuda(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 16)
    with gpufile.CuFile(p) as f:
        with pytest.raises(TypeError, match="DLPack device type 10 is neither CPU nor CUDA"):
            f.read(_RocmDlpack())
