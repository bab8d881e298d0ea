"""gpufile.numpy: fromfile / tofile / LikeWrapper, with NumPy arrays (and CuPy arrays where CuPy
and a GPU are present; those cases skip with the reason elsewhere)."""

import io
import os

import numpy as np
import pytest

import gpufile
from gpufile.numpy import LikeWrapper, fromfile, tofile
from conftest import gpu_reason  # noqa: E402


GPU_REASON = gpu_reason()


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "cupy" and GPU_REASON is not None:
        pytest.skip(GPU_REASON)
    return pytest.importorskip(request.param)


DTYPES = ["u1", "i2", "int64", "float32", "float64", "c16"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_tofile_then_numpy_reads_the_same_bytes(tmp_path, xp, dtype):
    path = tmp_path / "a.bin"
    src = xp.arange(101, dtype=dtype)
    with gpufile.observe() as obs:
        tofile(src, path)
    assert path.read_bytes() == (src.get() if xp.__name__ == "cupy" else src).tobytes()
    assert sum(p["bytes"] for p in obs.report.paths.values()) == src.nbytes
    # Strided source: written in C order, the file is truncated to the new content.
    tofile(src[::3], str(path))
    np.testing.assert_array_equal(np.fromfile(path, dtype=dtype),
                                  np.arange(101, dtype=dtype)[::3])


def test_tofile_fortran_order_is_written_in_c_order(tmp_path):
    a = np.asfortranarray(np.arange(12, dtype="i4").reshape(3, 4))
    tofile(a, tmp_path / "f.bin")
    assert (tmp_path / "f.bin").read_bytes() == np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_fromfile_matches_numpy(tmp_path, xp, dtype):
    path = tmp_path / "a.bin"
    ref = np.arange(100, dtype=dtype)
    ref.tofile(path)
    like = xp.empty(())
    for kwargs in [{}, {"count": 58}, {"offset": ref.itemsize}, {"offset": 1, "count": 10},
                   {"count": 1000}, {"count": 0}, {"offset": ref.nbytes}]:
        got = fromfile(path, dtype=dtype, like=like, **kwargs)
        assert type(got) is type(like), kwargs
        expected = np.fromfile(path, dtype=dtype, **kwargs)
        assert got.shape == expected.shape, kwargs
        np.testing.assert_array_equal(xp.asnumpy(got) if xp.__name__ == "cupy" else got,
                                      expected)


def test_fromfile_non_divisible_offset_and_default_dtype(tmp_path):
    path = tmp_path / "a.bin"
    src = np.arange(50, dtype="f8")
    src.tofile(path)
    np.testing.assert_array_equal(fromfile(path, dtype="u1", offset=7),
                                  src.view("u1")[7:])
    got = fromfile(str(path))  # dtype float, as NumPy
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, src)
    # A file that is not a whole number of items: the tail is left out, as NumPy does.
    np.testing.assert_array_equal(fromfile(path, dtype="f8", offset=3), np.fromfile(
        path, dtype="f8", offset=3))


def test_fromfile_numpy_integer_arguments(tmp_path):
    path = tmp_path / "a.bin"
    np.arange(10, dtype="u1").tofile(path)
    got = fromfile(path, dtype="u1", count=np.int64(3), offset=np.uint32(4))
    np.testing.assert_array_equal(got, [4, 5, 6])


def test_like_wrapper_routes_numpy_fromfile(tmp_path, xp):
    path = tmp_path / "a.bin"
    src = np.arange(100, dtype="i4")
    src.tofile(path)
    like = LikeWrapper(xp.empty(()))
    with gpufile.observe() as obs:
        got = np.fromfile(path, "i4", like=like)
        got2 = np.fromfile(file=path, dtype="i4", count=42, offset=8, like=like)
    assert sum(p["bytes"] for p in obs.report.paths.values()) == src.nbytes + 42 * 4
    host = (lambda a: xp.asnumpy(a)) if xp.__name__ == "cupy" else (lambda a: a)
    np.testing.assert_array_equal(host(got), src)
    np.testing.assert_array_equal(host(got2), src[2:44])
    # gpufile's own fromfile takes a LikeWrapper too (KvikIO's recurses forever).
    np.testing.assert_array_equal(host(fromfile(path, "i4", count=3, like=like)), src[:3])
    # Other functions called with like=LikeWrapper(...) run as NumPy's own.
    np.testing.assert_array_equal(np.arange(3, like=LikeWrapper(np.empty(()))), [0, 1, 2])


def test_file_objects_read_and_write_at_their_position(tmp_path):
    """NumPy's semantics (KvikIO ignores the position): offset counts from the current position,
    which moves past what was read or written."""
    path = tmp_path / "a.bin"
    src = np.arange(20, dtype="f4")
    src.tofile(path)
    with open(path, "rb") as f:
        f.read(8)
        np.testing.assert_array_equal(fromfile(f, dtype="f4", count=3), src[2:5])
        assert f.tell() == 20
        np.testing.assert_array_equal(fromfile(f, dtype="f4", count=2, offset=4), src[6:8])
        assert f.tell() == 32
    with open(path, "r+b") as f:
        f.seek(4)
        tofile(np.array([100, 101], dtype="f4"), f)
        assert f.tell() == 12
        f.write(np.array([102], dtype="f4").tobytes())  # Python's own writes continue after ours
    expected = src.copy()
    expected[1:4] = [100, 101, 102]
    np.testing.assert_array_equal(np.fromfile(path, dtype="f4"), expected)
    with open(path, "rb") as f, pytest.raises(io.UnsupportedOperation, match="not open for writ"):
        tofile(src, f)


def test_file_object_opened_from_a_descriptor(tmp_path):
    """open(fd) has no path (its name is the descriptor): gpufile opens the descriptor's file."""
    path = tmp_path / "a.bin"
    np.arange(10, dtype="u1").tofile(path)
    with open(os.open(path, os.O_RDWR), "r+b") as f:
        f.seek(2)
        np.testing.assert_array_equal(fromfile(f, dtype="u1", count=3), [2, 3, 4])
        tofile(np.array([90, 91], dtype="u1"), f)
        assert f.tell() == 7
    np.testing.assert_array_equal(np.fromfile(path, dtype="u1"), [0, 1, 2, 3, 4, 90, 91, 7, 8, 9])


class _BareFile:
    """A file object with a descriptor and a name but no tell()/seek(): NumPy then goes by the
    descriptor's own offset."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd, self.name = fd, name

    def fileno(self) -> int:
        return self._fd


def test_a_file_object_without_tell_is_read_and_written_at_its_descriptors_offset(tmp_path):
    path = tmp_path / "bare.bin"
    np.arange(16, dtype="u1").tofile(path)
    fd = os.open(path, os.O_RDWR)
    try:
        bare = _BareFile(fd, str(path))
        os.lseek(fd, 4, os.SEEK_SET)
        tofile(np.array([200, 201], dtype="u1"), bare)  # at 4, not at 0; nothing truncated
        assert os.lseek(fd, 0, os.SEEK_CUR) == 6
        np.testing.assert_array_equal(fromfile(bare, dtype="u1", count=3), [6, 7, 8])
        assert os.lseek(fd, 0, os.SEEK_CUR) == 9
    finally:
        os.close(fd)
    want = np.arange(16, dtype="u1")
    want[4:6] = [200, 201]
    np.testing.assert_array_equal(np.fromfile(path, dtype="u1"), want)


def test_errors(tmp_path):
    path = tmp_path / "a.bin"
    np.arange(4, dtype="u1").tofile(path)
    like = LikeWrapper(np.empty(()))
    with pytest.raises(FileNotFoundError, match="no file"):
        np.fromfile(str(tmp_path / "no file"), like=like)
    with pytest.raises(NotImplementedError, match="Non-default value of the `sep`"):
        np.fromfile(path, sep=",", like=like)
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        np.fromfile(path, count=-42, like=like)
    with pytest.raises(ValueError, match="past the end.*negative dimensions are not allowed"):
        fromfile(path, dtype="u1", offset=5)
    with pytest.raises(ValueError, match="offset must not be negative"):
        fromfile(path, offset=-1)
    with pytest.raises(ValueError, match="object"):
        fromfile(path, dtype=object)
    with pytest.raises(ValueError, match="0-sized"):
        fromfile(path, dtype="V0")
    with pytest.raises(TypeError, match="count must be an int, not float"):
        fromfile(path, count=1.5)
    with pytest.raises(TypeError, match="not BytesIO"):
        fromfile(io.BytesIO(b"1234"))
    with pytest.raises(TypeError, match="not BytesIO"):
        tofile(np.arange(3), io.BytesIO())
