"""The cuFile driver, as ``kvikio.cufile_driver``.

Nothing here loads ``libcufile.so.0`` until called. ``libcufile_version()`` answers ``(0, 0)``
where cuFile cannot be loaded (as KvikIO does); ``properties`` opens the driver on first read.
"""

from __future__ import annotations

import json
from typing import Any

from . import _native

__all__ = ["libcufile_version", "library", "properties", "parameters", "config",
           "driver_open", "driver_close", "initialize"]


def libcufile_version() -> tuple[int, int]:
    """``(major, minor)`` of libcufile (``cuFileGetVersion``), ``(0, 0)`` where unknown."""
    return tuple(_native.cufile_version())  # type: ignore[return-value]


def library() -> tuple[bool, str]:
    """``(True, path it loaded from)`` or ``(False, why it did not load)`` (a gpufile addition)."""
    return _native.cufile_library()


class DriverProperties:
    """``cuFileDriverGetProperties``, read live on each attribute access (opens the driver).

    Attributes: is_gds_available, major_version, minor_version, allow_compat_mode, poll_mode,
    poll_thresh_size_kb, max_direct_io_size_kb, max_device_cache_size_kb,
    per_buffer_cache_size_kb, max_device_pinned_mem_size_kb, max_batch_io_size,
    max_batch_io_timeout_msecs, p2p_supported, streams_supported.
    """

    def _all(self) -> dict[str, Any]:
        return dict(_native.cufile_properties())

    def __getattr__(self, name: str) -> Any:
        props = self._all()
        if name not in props:
            raise AttributeError(name)
        return props[name]

    def as_dict(self) -> dict[str, Any]:
        return self._all()

    def __repr__(self) -> str:
        try:
            return f"DriverProperties({self._all()})"
        except Exception as e:  # noqa: BLE001 - repr must not raise
            return f"DriverProperties(<unavailable: {e}>)"


properties = DriverProperties()


def parameters() -> dict[str, str]:
    """Effective settings as cuFile reports them (``cuFileGetParameter*``, cuFile 1.15+)."""
    return dict(_native.cufile_parameters())


def config(path: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(path, {"execution.max_io_threads": 4, ...})`` from cufile.json
    (``CUFILE_ENV_PATH_JSON``, else ``/etc/cufile.json``; ``//`` comments allowed)."""
    where, values = _native.cufile_config(path)
    return str(where), {k: json.loads(v) for k, v in values}


def driver_open() -> None:
    """Opens the cuFile driver (``cuFileDriverOpen``); raises ``gpufile.CufileError``."""
    _native.cufile_driver_open()


def driver_close() -> None:
    """Closes the driver if gpufile opened it (``cuFileDriverClose_v2``)."""
    _native.cufile_driver_close()


def initialize() -> None:
    """Opens the driver now rather than at the first cuFile request (KvikIO's ``initialize``)."""
    driver_open()
