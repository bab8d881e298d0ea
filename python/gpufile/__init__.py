"""gpufile: move file data into and out of GPU and host memory, fast, and say which path ran.

KvikIO's Python API, so that ``import gpufile as kvikio`` runs KvikIO code unchanged::

    import numpy as np
    import gpufile as kvikio

    buf = np.empty(1 << 20, dtype=np.uint8)
    with kvikio.CuFile("data.bin", "r") as f:
        n = f.read(buf)
"""

from __future__ import annotations

import atexit as _atexit

from . import _native, defaults
from ._native import EndOfFileError, GpufileError
from .cufile import CuFile, IOFuture
from .defaults import CompatMode

__version__: str = _native.__version__

__all__ = [
    "CompatMode",
    "CuFile",
    "EndOfFileError",
    "GpufileError",
    "IOFuture",
    "__version__",
    "defaults",
]

# Requests still in flight at exit write into memory the interpreter is about to free: wait.
_atexit.register(_native.wait_idle)
