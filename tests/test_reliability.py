"""Reliability, round two (issue 15, items 6, 7, 8 and the device-path intake of 14), on the CPU:
buffers the buffer protocol allows are taken and the rest refused with the real reason; a read
cut short by a shrinking file names where it stopped and the size now; environment values that
are not UTF-8 are errors naming the variable; a DLPack export marked read-only is never a read's
destination.

The GPU halves (driver_close with registered handles, pinned host ranges) are in
test_reliability_gpu.py.
"""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from conftest import pattern


@pytest.fixture
def src(tmp_path):
    data = pattern(4096, 15)
    path = tmp_path / "src.bin"
    data.tofile(path)
    return path, data


# ---- item 6: what the buffer protocol allows is taken -------------------------------------------

def _ctypes_struct():
    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int32), ("b", ctypes.c_double)]
    return Pair()


ACCEPTED = {
    # A field name holding the letter O is a name, not an object code.
    "struct-field-Offset": lambda: np.zeros(4, dtype=[("Offset", "<u4"), ("Origin", "<f4")]),
    "struct-nested-O-names": lambda: np.zeros(3, dtype=[("O", [("OO", "<u2")]), ("x", "u1")]),
    "struct-subarray": lambda: np.zeros(2, dtype=[("Oarr", "<i2", (3,))]),
    "0-d-array": lambda: np.array(0, dtype=np.int64),
    "0-d-memoryview": lambda: memoryview(np.array(0, dtype=np.float32)),
    "ctypes-array": lambda: (ctypes.c_int32 * 5)(),
    "ctypes-structure": _ctypes_struct,
    "bool": lambda: np.zeros(5, dtype=bool),
    "complex": lambda: np.zeros(2, dtype=np.complex64),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_contiguous_writable_buffers_are_read_into(src, name):
    path, data = src
    buf = ACCEPTED[name]()
    nbytes = memoryview(buf).nbytes
    with gpufile.CuFile(path) as f:
        assert f.read(buf) == nbytes
    assert bytes(memoryview(buf).cast("B")) == data[:nbytes].tobytes()


@pytest.mark.parametrize("name", ["struct-field-Offset", "0-d-array", "ctypes-array"])
def test_the_same_buffers_are_written_from(tmp_path, name):
    buf = ACCEPTED[name]()
    raw = pattern(memoryview(buf).nbytes, 3).tobytes()
    memoryview(buf).cast("B")[:] = raw
    out = tmp_path / "out.bin"
    with gpufile.CuFile(out, "w") as f:
        assert f.write(buf) == len(raw)
    assert out.read_bytes() == raw


REFUSED = {
    # (make, exception, words the message must hold)
    "object": (lambda: np.empty(2, dtype=object), TypeError, ["object pointers", '"O"']),
    "struct-with-object-field": (lambda: np.zeros(2, dtype=[("a", "<u4"), ("o", "O")]),
                                 TypeError, ["object pointers", "T{"]),
    "ctypes-py_object": (lambda: (ctypes.py_object * 2)(), TypeError, ["object pointers"]),
    # NumPy refuses to export these; its reason is the message, and the cause.
    "datetime": (lambda: np.zeros(2, dtype="M8[s]"), TypeError,
                 ["ndarray cannot be used as a buffer", "dtype 'M'"]),
    "released-memoryview": (lambda: _released(), TypeError, ["released memoryview"]),
    "strided": (lambda: np.zeros(8, dtype=np.uint8)[::2], ValueError, ["C-contiguous"]),
    "fortran": (lambda: np.zeros((3, 4), dtype=np.uint8, order="F"), ValueError,
                ["C-contiguous"]),
    "read-only-0-d": (lambda: _readonly(np.array(0, dtype=np.int64)), TypeError, ["read-only"]),
    "bytes": (lambda: b"abcd", TypeError, ["read-only"]),
    "no-buffer": (lambda: object(), TypeError, ["expected a buffer", "object"]),
}


def _released():
    m = memoryview(bytearray(8))
    m.release()
    return m


def _readonly(a):
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_other_buffers_are_refused_with_the_real_reason(src, name):
    path, data = src
    make, exc, words = REFUSED[name]
    buf = make()
    with gpufile.CuFile(path) as f:
        with pytest.raises(exc) as e:
            f.read(buf)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_the_exporters_error_is_the_cause(src):
    path, _ = src
    with gpufile.CuFile(path) as f, pytest.raises(TypeError) as e:
        f.read(np.zeros(2, dtype="m8[s]"))
    assert isinstance(e.value.__cause__, ValueError)
    assert "dtype 'm'" in str(e.value.__cause__)


def test_a_refused_buffer_is_released(src):
    """The export made before a refusal is given back: the bytearray can grow again."""
    path, _ = src
    ba = bytearray(16)
    strided = memoryview(ba)[::2]
    with gpufile.CuFile(path) as f, pytest.raises(ValueError):
        f.read(strided)
    strided.release()
    ba.extend(b"x")  # BufferError if an export were still held
    assert len(ba) == 17


# ---- item 14 (intake): DLPack 1.0 flags; JAX arrays are immutable ------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

READ_ONLY, IS_COPIED = 1, 2


class FakeCudaTensor:
    """A DLPack producer of a CUDA tensor (device type 2) whose bytes live in host memory that
    nothing may write: the flags decide; `versioned=False` is a producer older than DLPack 1.0
    (no max_version keyword)."""

    def __init__(self, flags=0, versioned=True):
        self.backing = (ctypes.c_uint8 * 64)()
        self.shape = (ctypes.c_int64 * 1)(64)
        self.flags, self.versioned = flags, versioned
        self.calls = []

    def __dlpack_device__(self):
        return (2, 0)

    def _tensor(self):
        t = _DLTensor()
        t.data = ctypes.addressof(self.backing)
        t.device = _DLDevice(2, 0)
        t.ndim = 1
        t.dtype = _DLDataType(1, 8, 1)
        t.shape = self.shape
        return t

    def __dlpack__(self, *, stream=None, **kw):
        self.calls.append(dict(kw, stream=stream))
        if not self.versioned and kw:
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {next(iter(kw))!r}")
        if self.versioned and kw.get("max_version", (0, 0)) >= (1, 0):
            self.managed = _DLManagedTensorVersioned(1, 0, None, None, self.flags, self._tensor())
            return _capsule_new(ctypes.addressof(self.managed), b"dltensor_versioned", None)
        self.managed = _DLManagedTensor(self._tensor(), None, None)
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)


@pytest.mark.parametrize("flags", [READ_ONLY, IS_COPIED, READ_ONLY | IS_COPIED])
def test_a_dlpack_export_marked_read_only_or_copied_is_no_read_destination(src, flags):
    path, _ = src
    t = FakeCudaTensor(flags)
    with gpufile.CuFile(path) as f, pytest.raises(TypeError) as e:
        f.read(t)
    assert "FakeCudaTensor" in str(e.value)
    assert ("read-only" if flags & READ_ONLY else "IS_COPIED") in str(e.value)
    assert t.calls[0]["max_version"] == (1, 0)
    assert bytes(t.backing) == bytes(64)  # never touched


def test_a_read_only_dlpack_export_may_still_be_written_from(src, tmp_path):
    """Read-only refuses a read into it, not a write from it: the write gets past intake (and,
    with these fake host bytes, fails later for a reason that is not mutability)."""
    t = FakeCudaTensor(READ_ONLY)
    with gpufile.CuFile(tmp_path / "w.bin", "w") as f, pytest.raises(Exception) as e:
        f.write(t)
    assert "read-only" not in str(e.value)


def test_a_producer_older_than_dlpack_1_gets_the_legacy_call(src):
    path, _ = src
    t = FakeCudaTensor(READ_ONLY, versioned=False)
    with gpufile.CuFile(path) as f, pytest.raises(Exception) as e:
        f.read(t)
    assert "read-only" not in str(e.value)  # legacy capsules carry no flags
    assert [sorted(c) for c in t.calls] == [["max_version", "stream"], ["stream"]]
    assert bytes(t.backing) == bytes(64)


class _FakeJaxArray:
    """Stands for a jax.Array (its type lives in a jax module): a CUDA Array Interface that
    says nothing about mutability."""

    def __init__(self):
        self.backing = (ctypes.c_uint8 * 16)()

    @property
    def __cuda_array_interface__(self):
        return {"data": (ctypes.addressof(self.backing), False), "shape": (16,),
                "typestr": "|u1", "strides": None, "version": 3}


_FakeJaxArray.__module__ = "jax._src.array"


def test_a_jax_array_is_never_a_read_destination(src):
    path, _ = src
    a = _FakeJaxArray()
    with gpufile.CuFile(path) as f, pytest.raises(TypeError, match="JAX arrays are immutable"):
        f.read(a)
    assert bytes(a.backing) == bytes(16)


# ---- item 8: environment values that are not UTF-8 ----------------------------------------------

def _run_with_env_bytes(code, extra):
    env = {k.encode(): v.encode() for k, v in os.environ.items()
           if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    env.update(extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          timeout=120)


def test_a_non_utf8_env_value_is_an_error_naming_the_variable():
    """It used to be skipped silently, so the lower-priority KVIKIO_ value won."""
    r = _run_with_env_bytes("import gpufile.defaults as d; print(d.get('task_size'))",
                            {b"GPUFILE_TASK_SIZE": b"4\xffMiB", b"KVIKIO_TASK_SIZE": b"1MiB"})
    err = r.stderr.decode(errors="replace")
    assert r.returncode != 0, r.stdout
    assert "ValueError" in err and "GPUFILE_TASK_SIZE" in err and "not valid UTF-8" in err, err
    assert r"4\xffMiB" in err, err


def test_the_same_variable_in_utf8_is_honoured():
    r = _run_with_env_bytes("import gpufile.defaults as d; print(d.get('task_size'))",
                            {b"GPUFILE_TASK_SIZE": b"4MiB", b"KVIKIO_TASK_SIZE": b"1MiB"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split() == [str(4 << 20)]


def test_many_threads_read_into_the_newly_accepted_buffers(tmp_path):
    """32 threads, each with its own pread futures into 0-d arrays, ctypes arrays and structured
    arrays of one shared handle: every byte lands where it belongs and every export is released
    (the exports are made and given back off the main thread)."""
    import threading

    data = pattern(1 << 20, 21)
    path = tmp_path / "shared.bin"
    data.tofile(path)
    errors = []

    def worker(i, f):
        try:
            for j in range(8):
                off = ((i * 8 + j) * 4093) % ((1 << 20) - 64)
                bufs = [np.array(0, dtype=np.int64), (ctypes.c_uint16 * 7)(),
                        np.zeros(3, dtype=[("Offset", "<u4"), ("Other", "u1")])]
                futs = [f.pread(b, file_offset=off) for b in bufs]
                for b, fut in zip(bufs, futs):
                    n = memoryview(b).nbytes
                    assert fut.get() == n
                    assert bytes(memoryview(b).cast("B")) == data[off:off + n].tobytes()
                ba = bytearray(32)
                fut = f.pread(ba, file_offset=off)
                fut.get()
                ba.extend(b"!")  # released at get()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    with gpufile.CuFile(path) as f:
        threads = [threading.Thread(target=worker, args=(i, f)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
    assert errors == []
