"""Code written for KvikIO keeps working: its error types and messages, its settings' checks,
its open flags, NumPy integers wherever an int goes, ``cufile_driver.get/set``.

gpufile's own, more precise error types stay (``FileNotFoundError``, ``io.UnsupportedOperation``,
``ValueError``); each is *also* what KvikIO raises (``RuntimeError``, ``OverflowError``). The
tests at the end need a GPU and skip elsewhere with the reason.
"""

import ctypes
import io
import os
import pickle

import numpy as np
import pytest

import gpufile
from gpufile import cufile_driver, defaults
from conftest import gpu_reason, without_root  # noqa: E402


def _cuda_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


# --- settings -------------------------------------------------------------------------------

POSITIVE = ["num_threads", "task_size", "bounce_buffer_size", "http_max_attempts",
            "http_timeout"]
UNSIGNED = POSITIVE + ["gds_threshold"]


@pytest.mark.parametrize("name", POSITIVE)
def test_zero_is_valueerror_saying_positive_integer(name):
    before = defaults.get(name)
    with pytest.raises(ValueError, match="positive integer"):
        defaults.set(name, 0)
    assert defaults.get(name) == before


@pytest.mark.parametrize("name", UNSIGNED)
def test_negative_is_overflowerror_and_valueerror(name):
    before = defaults.get(name)
    with pytest.raises(OverflowError, match="negative value") as e:
        defaults.set(name, -1)
    assert isinstance(e.value, ValueError)  # what gpufile raised before, still caught
    with pytest.raises(OverflowError, match="negative value"):
        defaults.set(name, np.int64(-5))
    assert defaults.get(name) == before


@pytest.mark.parametrize("name", UNSIGNED)
@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.int8])
def test_numpy_integers_set_int_settings(name, dtype):
    with defaults.set(name, dtype(3)):
        value = defaults.get(name)
        assert value == 3 and type(value) is int
    with defaults.set({name: dtype(4)}):
        assert defaults.get(name) == 4


def test_http_status_codes_types():
    before = defaults.get("http_status_codes")
    with defaults.set("http_status_codes", [np.int64(429), 500]):
        assert defaults.get("http_status_codes") == [429, 500]
    with defaults.set("http_status_codes", (503,)):
        assert defaults.get("http_status_codes") == [503]
    for bad in (0, 500, np.int64(500), ["a"], [1.5], None, {500}):
        with pytest.raises(TypeError, match="list of ints"):
            defaults.set("http_status_codes", bad)
    with pytest.raises(ValueError, match="not an HTTP status code"):
        defaults.set("http_status_codes", [42])
    assert defaults.get("http_status_codes") == before


def test_wrong_types_are_typeerror_and_change_nothing():
    before = defaults.get("task_size")
    for bad in (1.5, [1024], None, b"1024"):
        with pytest.raises(TypeError):
            defaults.set({"num_threads": 2, "task_size": bad})
    assert defaults.get("task_size") == before


def test_set_arguments_error_is_kvikios_valueerror_too():
    for args in [(), (1,), ("task_size",), ({"task_size": 1}, 2), (1, 2)]:
        with pytest.raises(ValueError) as e:
            defaults.set(*args)
        assert isinstance(e.value, TypeError)
    with pytest.raises(KeyError):
        defaults.set("set_task_size", 123)
    assert defaults.ConfigContextManager is type(defaults.set("task_size", 1024))


def test_nested_settings_restore():
    before = defaults.get("task_size")
    with defaults.set("task_size", np.int64(1024)):
        with defaults.set({"task_size": 2048, "num_threads": np.uint8(3)}):
            assert (defaults.get("task_size"), defaults.get("num_threads")) == (2048, 3)
        assert defaults.get("task_size") == 1024
    assert defaults.get("task_size") == before


# --- errors ---------------------------------------------------------------------------------

def test_missing_file_is_filenotfounderror_and_runtimeerror(tmp_path):
    missing = tmp_path / "nope.bin"
    with pytest.raises(RuntimeError, match="Unable to open file.*No such file or directory"):
        gpufile.CuFile(missing, "r")
    with pytest.raises(FileNotFoundError) as e:
        gpufile.CuFile(missing)
    assert (e.value.errno, e.value.filename) == (2, str(missing))
    # Pickles by name (dask ships exceptions between processes) and keeps both types.
    again = pickle.loads(pickle.dumps(e.value))
    assert isinstance(again, FileNotFoundError) and isinstance(again, RuntimeError)
    assert (again.errno, again.filename) == (2, str(missing))


def test_directory_is_isadirectoryerror_and_runtimeerror(tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        gpufile.CuFile(tmp_path)
    assert isinstance(e.value, RuntimeError)


def test_no_permission_is_permissionerror_and_runtimeerror(open_tmp_path):
    p = open_tmp_path / "locked.bin"
    p.write_bytes(b"x")
    p.chmod(0)

    def check():  # not as root, which ignores permission bits
        with pytest.raises(PermissionError, match="Unable to open file") as e:
            gpufile.CuFile(p)
        assert isinstance(e.value, RuntimeError) and e.value.errno == 13

    without_root(check)


def test_wrong_mode_is_unsupportedoperation_and_runtimeerror(tmp_path):
    p = tmp_path / "f.bin"
    np.arange(10).tofile(p)
    with gpufile.CuFile(p, "r") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted") as e:
            f.write(np.arange(10))
        assert isinstance(e.value, io.UnsupportedOperation)
        assert "not open for writing" in str(e.value)
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.pwrite(np.arange(10)).get()
    with gpufile.CuFile(p, "w") as f:
        for call in (lambda b: f.read(b), lambda b: f.pread(b).get(), lambda b: f.raw_read(b)):
            with pytest.raises(RuntimeError, match="Operation not permitted") as e:
                call(np.empty(10, dtype=np.int64))
            assert isinstance(e.value, io.UnsupportedOperation)
            assert isinstance(e.value, ValueError)


def test_gpufile_errors_are_runtimeerrors(tmp_path):
    assert issubclass(gpufile.GpufileError, RuntimeError)
    for cls in (gpufile.CudaError, gpufile.CufileError, gpufile.EndOfFileError):
        assert issubclass(cls, gpufile.GpufileError)
    p = tmp_path / "short.bin"
    p.write_bytes(b"abc")
    with gpufile.CuFile(p) as f, pytest.raises(RuntimeError, match="past the end"):
        f.read(bytearray(4))


# --- open flags -----------------------------------------------------------------------------

@pytest.mark.parametrize("flags,readable,writable,truncates", [
    ("rb", True, False, False),
    ("r+b", True, True, False),
    ("rb+", True, True, False),   # as Python's open: "+" anywhere (KvikIO: read-only)
    ("wb", False, True, True),
    ("w+b", True, True, True),
])
def test_binary_flags(tmp_path, flags, readable, writable, truncates):
    p = tmp_path / "f.bin"
    p.write_bytes(b"0123456789")
    with gpufile.CuFile(p, flags) as f:
        access = f.open_flags() & os.O_ACCMODE
        assert access == {(True, False): os.O_RDONLY, (False, True): os.O_WRONLY,
                          (True, True): os.O_RDWR}[(readable, writable)]
        if writable:
            assert f.write(b"ab", file_offset=2) == 2
        if readable:
            buf = bytearray(2)
            assert f.read(buf, file_offset=2) == 2
            assert bytes(buf) == (b"ab" if writable else b"23")
    expected = b"\0\0ab" if truncates else (b"01ab456789" if writable else b"0123456789")
    assert p.read_bytes() == expected


@pytest.mark.parametrize("flags,fragment", [
    ("a", "Open flag 'a' isn't supported"),
    ("ab", "Open flag 'a' isn't supported"),
    ("", "Unknown file open flag"),
    ("x", "Unknown file open flag"),
    ("rt", "Unknown file open flag"),
    ("rbb", "Unknown file open flag"),
    ("r++", "Unknown file open flag"),
])
def test_bad_flags_say_what_kvikio_says(tmp_path, flags, fragment):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    with pytest.raises(ValueError, match=fragment):
        gpufile.CuFile(p, flags)
    assert p.read_bytes() == b"abc"


# --- NumPy integers as offsets and sizes ----------------------------------------------------

def test_numpy_integers_as_offsets_and_sizes(tmp_path):
    p = tmp_path / "f.bin"
    data = np.arange(1000, dtype=np.uint8)
    offsets = np.array([0, 100, 900], dtype=np.int64)
    with gpufile.CuFile(p, "w+") as f:
        assert f.write(data, size=np.int64(1000), file_offset=np.uint32(0),
                       task_size=np.int16(199)) == 1000
        for off in offsets:
            buf = np.zeros(100, dtype=np.uint8)
            assert f.read(buf, size=np.int32(100), file_offset=off) == 100
            assert (buf == data[off:off + 100]).all()
            buf[:] = 0
            assert f.pread(buf, np.uint64(100), off, np.int64(7)).get() == 100
            assert (buf == data[off:off + 100]).all()
        buf = np.zeros(50, dtype=np.uint8)
        # raw_read into host memory: gpufile serves it (KvikIO refuses host buffers there).
        assert f.raw_read(buf, np.int64(10), np.int64(5), dev_offset=np.int64(3)) == 10
        assert (buf[3:13] == data[5:15]).all()


def test_bad_offsets_keep_their_types(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 16)
    with gpufile.CuFile(p) as f:
        with pytest.raises(OverflowError, match="negative value") as e:
            f.read(bytearray(4), file_offset=np.int64(-1))
        assert isinstance(e.value, ValueError) and "file_offset" in str(e.value)
        for bad in (1.0, np.float64(1), True, np.bool_(True), "1"):
            with pytest.raises(TypeError, match="file_offset must be an int"):
                f.read(bytearray(4), file_offset=bad)
        with pytest.raises(OverflowError, match="out of range"):
            f.read(bytearray(4), file_offset=1 << 64)


# --- cufile_driver, version -----------------------------------------------------------------

def test_cufile_driver_names_without_touching_cufile():
    with pytest.raises(KeyError, match="read-only"):
        cufile_driver.set("major_version", 2077)
    with pytest.raises(KeyError, match="read-only"):
        cufile_driver.set({"poll_mode": True, "per_buffer_cache_size": 1})
    with pytest.raises(KeyError):
        cufile_driver.set("nonexistent_property", 123)
    with pytest.raises(KeyError):
        cufile_driver.get("nonexistent_property")
    with pytest.raises(KeyError):
        cufile_driver.get("poll_thresh_size_kb")  # gpufile's properties name, not KvikIO's
    for args in [(), (1,), ("poll_mode",), (1, 2)]:
        with pytest.raises(ValueError) as e:
            cufile_driver.set(*args)
        assert isinstance(e.value, TypeError)
    assert not hasattr(cufile_driver.properties, "nonexistent_property")


def _libcufile_loads() -> bool:
    """Whether a libcufile.so.0 loads from where gpufile looks: the NVIDIA wheels' folders of
    sys.path (gpufile._cufile_dirs: site-packages, and those a .pth file or PYTHONPATH adds),
    then the system loader."""
    dirs = gpufile._cufile_dirs()
    for name in [os.path.join(d, "libcufile.so.0") for d in dirs] + ["libcufile.so.0"]:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


@pytest.mark.skipif(_cuda_loads(), reason="this machine has a CUDA driver")
def test_no_cuda_means_no_gds_not_an_exception():
    assert cufile_driver.properties.is_gds_available is False
    assert cufile_driver.get("is_gds_available") is False
    # libcufile needs no driver to say its version: (0, 0) only where there is none to load
    # (a CUDA wheel such as torch's dependencies may bring one).
    if _libcufile_loads():
        assert cufile_driver.libcufile_version() >= (1, 0)
    else:
        assert cufile_driver.libcufile_version() == (0, 0)
    # The other properties say why (a RuntimeError, as KvikIO's).
    with pytest.raises(RuntimeError, match="CUDA"):
        cufile_driver.get("poll_mode")
    with pytest.raises(RuntimeError, match="CUDA"):
        cufile_driver.properties.major_version


def test_version_constants():
    assert isinstance(gpufile.__git_commit__, str)
    assert isinstance(gpufile.__version__, str) and gpufile.__version__
    assert gpufile.__version__ == gpufile._native.__version__


def test_bounce_buffer_free_returns_bytes_freed():
    gpufile.bounce_buffer_free()
    assert gpufile.bounce_buffer_free() == 0  # nothing pooled any more
    assert gpufile.buffer.bounce_buffer_pooled() == 0


# --- on a GPU -------------------------------------------------------------------------------

GPU_REASON = gpu_reason()


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_gpu_wrong_mode_and_numpy_offsets(tmp_path):
    import cupy as cp

    p = tmp_path / "f.bin"
    a = cp.arange(1000, dtype=cp.uint8)
    stream = cp.cuda.Stream()
    with gpufile.CuFile(p, "wb") as f:
        assert f.open_flags() & os.O_ACCMODE == os.O_WRONLY
        assert f.raw_write_async(a, stream.ptr).check_bytes_done() == 1000
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.raw_read_async(a, stream.ptr).check_bytes_done()
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.read(a)
    b = cp.zeros(100, dtype=cp.uint8)
    with gpufile.CuFile(p, "r+b") as f:
        assert f.read(b, np.int64(100), np.int64(500), np.int64(33)) == 100
        assert f.raw_read(b, np.int64(10), np.uint16(7), np.int32(90)) == 10
    expected = cp.asnumpy(a[500:600]).copy()
    expected[90:] = np.arange(7, 17, dtype=np.uint8)
    assert (cp.asnumpy(b) == expected).all()


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_gpu_cufile_driver_get_set():
    ok, why = cufile_driver.library()
    if not ok:
        pytest.skip(f"libcufile does not load: {why}")
    try:
        cufile_driver.driver_open()
    except gpufile.GpufileError as e:
        pytest.skip(f"the cuFile driver does not open here: {e}")
    gds = cufile_driver.properties.is_gds_available
    assert gds is cufile_driver.get("is_gds_available") and isinstance(gds, bool)
    for name in ("major_version", "minor_version", "per_buffer_cache_size"):
        assert isinstance(cufile_driver.get(name), int) and cufile_driver.get(name) >= 0
    assert isinstance(cufile_driver.get("allow_compat_mode"), bool)
    before = cufile_driver.get("poll_thresh_size")
    with cufile_driver.set("poll_thresh_size", np.int64(1024)):
        assert cufile_driver.get("poll_thresh_size") == 1024
        with cufile_driver.set({"poll_thresh_size": 2048, "poll_mode": True}):
            assert cufile_driver.properties.poll_thresh_size == 2048
            assert cufile_driver.get("poll_mode") is True
        assert cufile_driver.get("poll_thresh_size") == 1024
    assert cufile_driver.get("poll_thresh_size") == before
    with pytest.raises(OverflowError, match="negative value"):
        cufile_driver.set("max_pinned_memory_size", -1)
    with pytest.raises(TypeError, match="bool"):
        cufile_driver.set("poll_mode", "yes")
    before = cufile_driver.get("max_device_cache_size")
    cufile_driver.properties.max_device_cache_size = 2048
    try:
        assert cufile_driver.get("max_device_cache_size") == 2048
    finally:
        cufile_driver.properties.max_device_cache_size = before
