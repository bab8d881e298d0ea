"""Files saved through the C API (libgpufile's gpufile_save_file, called with ctypes) load with
Python's loader and are the bytes the ``safetensors`` package writes. The library is the one
``cargo test`` builds (target/debug/deps, or ``$CARGO_TARGET_DIR``)."""

import ctypes
import os
import pathlib

import numpy as np
import pytest

from gpufile.safetensors import load_file

stn = pytest.importorskip("safetensors.numpy")

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _library():
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for p in (target / "debug" / "deps" / "libgpufile.so", target / "debug" / "libgpufile.so"):
        if p.exists():
            return ctypes.CDLL(str(p))
    pytest.skip(f"no libgpufile.so under {target}/debug: `cargo test -p gpufile-capi` builds it")


class Tensor(ctypes.Structure):
    """gpufile_tensor."""

    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_uint64)), ("ndim", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


def save_from_c(lib, path, arrays, codes, metadata):
    """gpufile_save_file of ``arrays`` (name → C-contiguous array) with safetensors dtype
    ``codes``: its status and last error message."""
    rows = (Tensor * len(arrays))()
    shapes = []
    for row, (name, a) in zip(rows, arrays.items()):
        shape = (ctypes.c_uint64 * max(a.ndim, 1))(*a.shape)
        shapes.append(shape)
        row.name, row.dtype = name.encode(), codes[name].encode()
        row.shape, row.ndim = shape, a.ndim
        row.data, row.size = a.ctypes.data, a.nbytes
    pairs = [s.encode() for kv in metadata.items() for s in kv]
    meta = (ctypes.c_char_p * (len(pairs) + 1))(*pairs, None)
    lib.gpufile_save_file.argtypes = [ctypes.c_char_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                      ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]
    status = lib.gpufile_save_file(os.fsencode(path), rows, len(arrays), meta, 1)
    message = ctypes.create_string_buffer(1024)
    lib.gpufile_last_error_message(message, len(message))
    return status, message.value.decode()


def test_a_file_saved_from_c_loads_in_python_and_is_what_safetensors_writes(tmp_path):
    lib = _library()
    rng = np.random.default_rng(3)
    arrays = {
        "model.embed": rng.standard_normal((16, 8)).astype(np.float32),
        "model.norm": rng.standard_normal(8).astype(np.float16),
        "step": np.array(12345, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 4), dtype=np.float64),
    }
    codes = {"model.embed": "F32", "model.norm": "F16", "step": "I64", "mask": "BOOL",
             "empty": "F64"}
    path = tmp_path / "from_c.safetensors"
    status, message = save_from_c(lib, path, arrays, codes, {"format": "np"})
    assert status == 0, message
    got = load_file(path, framework="numpy")
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v), k
    assert path.read_bytes() == stn.save(arrays, metadata={"format": "np"})
    assert os.listdir(tmp_path) == ["from_c.safetensors"]
    # A refused tensor (a dtype safetensors has not): GPUFILE_BAD_ARGUMENT, the file as it was.
    before = path.read_bytes()
    codes["mask"] = "B00L"
    status, message = save_from_c(lib, path, arrays, codes, {})
    assert status == 5 and 'unknown dtype "B00L"' in message, (status, message)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["from_c.safetensors"]
