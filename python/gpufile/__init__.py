"""gpufile: move file data into and out of GPU and host memory, fast, and say which path ran.

KvikIO's Python API names (``import gpufile as kvikio``; the compatibility page lists what
matches and what does not)::

    import cupy
    import gpufile as kvikio

    buf = cupy.empty(1 << 20, dtype=cupy.uint8)   # or NumPy, PyTorch, bytearray, ...
    with kvikio.CuFile("data.bin", "r") as f:
        n = f.read(buf)
        print(f.io_path)      # (backend, reason)
"""

from __future__ import annotations

import atexit as _atexit
import importlib.resources as _resources
import os as _os
import sys as _sys
import warnings as _warnings

from . import _native, buffer, cufile_driver, defaults, statistics, utils
from ._native import CudaError, CufileError, EndOfFileError, GpufileError, OutOfRangeError
from .buffer import bounce_buffer_free, dma_cache_clear, dma_cache_registered
from .batch import BatchHandle, BatchOp
from .cufile import (
    CuFile,
    IOFuture,
    IOFutureStream,
    memory_deregister,
    memory_register,
    read_batch,
    stream_deregister,
    stream_register,
    write_batch,
)
from .defaults import CompatMode, RemoteIOBackend, RemoteReactorDispatch
from .mmap import Mmap
from .nsys import nsys_plugin_search_dir
from .observe import Report, check, explain, observe, stats
from .pagecache import (
    clear_page_cache,
    drop_file_page_cache,
    drop_system_page_cache,
    get_page_cache_info,
)
from .statistics import Summary, SummaryMonitor
from .utils import kvikio_deprecation_notice
from .remote_file import (
    RemoteEndpointType,
    RemoteFile,
    infer_remote_endpoint_type,
    is_remote_file_available,
)

__version__: str = _native.__version__


def _git_commit() -> str:
    # As KvikIO: a GIT_COMMIT file written into the package when a distribution is built;
    # empty in a source checkout.
    try:
        return (_resources.files(__name__) / "GIT_COMMIT").read_text().strip()
    except (FileNotFoundError, OSError):
        return ""


__git_commit__: str = _git_commit()

__all__ = [
    "CompatMode",
    "CuFile",
    "CudaError",
    "CufileError",
    "EndOfFileError",
    "GpufileError",
    "OutOfRangeError",
    "IOFutureStream",
    "Mmap",
    "RemoteEndpointType",
    "RemoteFile",
    "RemoteIOBackend",
    "RemoteReactorDispatch",
    "Report",
    "bounce_buffer_free",
    "check",
    "dma_cache_clear",
    "dma_cache_registered",
    "clear_page_cache",
    "explain",
    "cufile_driver",
    "drop_file_page_cache",
    "drop_system_page_cache",
    "get_page_cache_info",
    "kvikio_deprecation_notice",
    "infer_remote_endpoint_type",
    "is_remote_file_available",
    "memory_deregister",
    "memory_register",
    "nsys_plugin_search_dir",
    "read_batch",
    "write_batch",
    "observe",
    "stats",
    "stream_deregister",
    "stream_register",
    "IOFuture",
    "__git_commit__",
    "__version__",
    "defaults",
    "utils",
    "BatchHandle",
    "BatchOp",
    "Summary",
    "SummaryMonitor",
    "statistics",
]


def _cufile_dirs() -> list[str]:
    """The nvidia/cu13/lib and nvidia/cufile/lib folders of the importable site-packages."""
    found = []
    for entry in _sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cufile/lib"):
            d = _os.path.join(entry or ".", sub)
            if _os.path.isfile(_os.path.join(d, "libcufile.so.0")) and d not in found:
                found.append(d)
    return found


_native.cufile_set_search_dirs(_cufile_dirs())


def _imported_by_the_command() -> bool:
    """Whether this import is the ``gpufile`` command's own (``python -m gpufile``, or the script
    pip writes, which does ``from gpufile.__main__ import main``): the command then prints the
    warnings below as ``gpufile: warning: ...`` lines, as the Rust binary does."""
    argv = getattr(_sys, "orig_argv", [])
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-m"):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            return module in ("gpufile", "gpufile.__main__")
        if arg in ("-X", "-W"):
            i += 1  # an option with its value (-X dev, -W error)
        elif arg == "-c" or arg == "-" or not arg.startswith("-"):
            break  # a command, stdin or a script: not -m gpufile
        i += 1
    main = _sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if not script or _os.path.basename(script) != "gpufile":
        return False
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            return "from gpufile.__main__ import main" in f.read(4096)
    except OSError:
        return False


# A misspelt variable (KVIKIO_NTHREAD) would otherwise leave its setting at the default without a
# word; stacklevel 2 names the importing line (the import machinery's frames are skipped). The
# command leaves them to its own front end, which prints each as one line.
if not _imported_by_the_command():
    for _text in _native.take_env_warnings():
        _warnings.warn(_text, stacklevel=2)


def _at_exit() -> None:
    # Requests still in flight write into memory the interpreter is about to free: stop taking
    # new ones (daemon threads get an error), wait a bounded time for those in flight, then close
    # the cuFile driver if gpufile opened it and nothing uses it any more.
    done = _native.shutdown()
    # The callbacks due run now, then none: no thread may enter Python once it finalizes.
    _native.callbacks_close()
    if not done:
        return
    try:
        _native.cufile_driver_close()
    except Exception:  # noqa: BLE001 - nothing to report to at exit
        pass


_atexit.register(_at_exit)
