"""Helpers for benchmark scripts, with KvikIO's names (``kvikio.benchmarks.utils``):
``drop_vm_cache``, ``pprint_sys_info``, ``parse_directory``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
from typing import Any

from .. import cufile_driver, defaults
from ..pagecache import drop_system_page_cache

__all__ = ["drop_vm_cache", "pprint_sys_info", "parse_directory"]


def drop_vm_cache() -> None:
    """Drop the system's page, dentry and inode caches before a cold run.

    Raises
    ------
    PermissionError
        Where this process may not write ``/proc/sys/vm/drop_caches`` (it needs root). KvikIO
        runs ``sudo sysctl`` through a shell instead; gpufile writes the file itself and says
        when it could not.
    """
    if not drop_system_page_cache(reclaim_dentries_and_inodes=True, sync_first=True):
        raise PermissionError("cannot drop the system page cache: writing "
                              "/proc/sys/vm/drop_caches needs root")


def _gpu() -> tuple[str, str]:
    """Name and memory of GPU 0, through CuPy where it is installed."""
    try:
        import cupy
        props: Any = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception as e:  # no CuPy, no driver, no GPU: say which
        why = f"unknown ({type(e).__name__}: {e})"
        return why, why
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return f"{name} (dev #0)", f"{props['totalGlobalMem'] / 2**30:.1f} GiB"


def pprint_sys_info() -> None:
    """Print what a benchmark's figures depend on: GPU 0, libcufile's version, whether GDS (the
    nvidia-fs driver) is there, cuFile's configuration file and gpufile's ``compat_mode``."""
    major, minor = cufile_driver.libcufile_version()
    if (major, minor) == (0, 0):
        libcufile = "not loaded (no libcufile.so.0, or older than cuFile 1.8)"
    else:
        libcufile = f"{major}.{minor}"
    gds = cufile_driver.properties.is_gds_available
    compat = defaults.get("compat_mode")
    name, memory = _gpu()
    print(f"GPU               | {name}")
    print(f"GPU Memory Total  | {memory}")
    print(f"libcufile version | {libcufile}")
    print(f"GDS driver        | {'available' if gds else 'N/A (cuFile compat mode)'}")
    print(f"GDS config.json   | "
          f"{os.path.realpath(os.getenv('CUFILE_ENV_PATH_JSON', '/etc/cufile.json'))}")
    print(f"compat_mode       | {getattr(compat, 'name', compat)}")


def parse_directory(x: str | None) -> pathlib.Path | None:
    """An ``argparse`` type for a directory argument.

    Parameters
    ----------
    x : str or None
        The argument; None is passed through.

    Returns
    -------
    pathlib.Path or None

    Raises
    ------
    argparse.ArgumentTypeError
        ``x`` is not an existing directory ("Must be a directory", as KvikIO).
    """
    if x is None:
        return None
    path = pathlib.Path(x)
    if not path.is_dir():
        raise argparse.ArgumentTypeError("Must be a directory")
    return path
