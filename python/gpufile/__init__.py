"""gpufile: move file data into and out of GPU and host memory, fast, and say which path ran.

KvikIO's Python API, so that ``import gpufile as kvikio`` runs KvikIO code unchanged::

    import cupy
    import gpufile as kvikio

    buf = cupy.empty(1 << 20, dtype=cupy.uint8)   # or NumPy, PyTorch, bytearray, ...
    with kvikio.CuFile("data.bin", "r") as f:
        n = f.read(buf)
        print(f.io_path)      # (backend, reason)
"""

from __future__ import annotations

import atexit as _atexit

from . import _native, buffer, defaults
from ._native import CudaError, CufileError, EndOfFileError, GpufileError
from .buffer import bounce_buffer_free
from .cufile import CuFile, IOFuture
from .defaults import CompatMode

__version__: str = _native.__version__

__all__ = [
    "CompatMode",
    "CuFile",
    "CudaError",
    "CufileError",
    "EndOfFileError",
    "GpufileError",
    "bounce_buffer_free",
    "IOFuture",
    "__version__",
    "defaults",
]

# Requests still in flight at exit write into memory the interpreter is about to free: wait.
_atexit.register(_native.wait_idle)
