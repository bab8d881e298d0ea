"""The cuFile driver, as ``kvikio.cufile_driver``.

Nothing here loads ``libcufile.so.0`` until called. ``libcufile_version()`` answers ``(0, 0)``
where cuFile cannot be loaded (as KvikIO does); ``properties`` opens the driver on first read.
"""

from __future__ import annotations

import json
from typing import Any

from . import _native

__all__ = ["libcufile_version", "library", "properties", "parameters", "config",
           "CUFILE_EXECUTION_DEFAULTS", "driver_open", "driver_close", "initialize"]


def libcufile_version() -> tuple[int, int]:
    """The version of libcufile (``cuFileGetVersion``).

    Returns
    -------
    tuple of (int, int)
        ``(major, minor)``, for example ``(1, 15)``; ``(0, 0)`` where cuFile cannot be loaded
        (as KvikIO answers). Never raises.
    """
    return tuple(_native.cufile_version())  # type: ignore[return-value]


def library() -> tuple[bool, str]:
    """Where libcufile was loaded from, or why it was not (a gpufile addition).

    libcufile is searched in ``GPUFILE_CUFILE_PATH``, the ``nvidia/cu13/lib`` and
    ``nvidia/cufile/lib`` folders of site-packages, the system loader, ``$CUDA_HOME/lib64`` and
    ``/usr/local/cuda/lib64``.

    Returns
    -------
    tuple of (bool, str)
        ``(True, path)`` or ``(False, reason)``; never raises.
    """
    return _native.cufile_library()


class DriverProperties:
    """cuFile's driver properties (``cuFileDriverGetProperties``), as KvikIO's ``properties``.

    Read live on each attribute access, which opens the driver. Attributes:
    ``is_gds_available``, ``major_version``, ``minor_version``, ``allow_compat_mode``,
    ``poll_mode``, ``poll_thresh_size_kb``, ``max_direct_io_size_kb``,
    ``max_device_cache_size_kb``, ``per_buffer_cache_size_kb``,
    ``max_device_pinned_mem_size_kb``, ``max_batch_io_size``, ``max_batch_io_timeout_msecs``,
    ``p2p_supported``, ``streams_supported``.

    Raises
    ------
    gpufile.CudaError, gpufile.CufileError
        On attribute access, where CUDA or cuFile is not available.
    AttributeError
        An unknown attribute.

    Examples
    --------
    >>> gpufile.cufile_driver.properties.is_gds_available       # doctest: +SKIP
    False
    """

    def _all(self) -> dict[str, Any]:
        return dict(_native.cufile_properties())

    def __getattr__(self, name: str) -> Any:
        props = self._all()
        if name not in props:
            raise AttributeError(name)
        return props[name]

    def as_dict(self) -> dict[str, Any]:
        """All properties at once.

        Returns
        -------
        dict
            Property name to value.
        """
        return self._all()

    def __repr__(self) -> str:
        try:
            return f"DriverProperties({self._all()})"
        except Exception as e:  # noqa: BLE001 - repr must not raise
            return f"DriverProperties(<unavailable: {e}>)"


properties = DriverProperties()


def parameters() -> dict[str, str]:
    """The settings cuFile reports it uses (``cuFileGetParameter*``, cuFile 1.15 and later).

    Returns
    -------
    dict of str to str
        Parameter name to value, as cuFile reports them after reading cufile.json and the
        ``CUFILE_*`` environment.

    Raises
    ------
    gpufile.CufileError
        cuFile cannot be loaded, or is older than 1.15.
    """
    return dict(_native.cufile_parameters())


#: cuFile's documented defaults for the ``execution.*`` keys gpufile predicts with; cuFile uses
#: them where cufile.json (or a key of it) is missing. ``gpufile check`` shows the same.
CUFILE_EXECUTION_DEFAULTS: dict[str, Any] = {
    "execution.parallel_io": True,
    "execution.max_io_threads": 4,
    "execution.min_io_threshold_size_kb": 8192,
    "execution.max_request_parallelism": 4,
}


def config(path: str | None = None) -> tuple[str, dict[str, Any]]:
    """The values of cufile.json, flattened to dotted keys.

    Parameters
    ----------
    path : str, optional
        The file to read; by default ``CUFILE_ENV_PATH_JSON``, else ``/etc/cufile.json``.
        ``//`` comments are allowed, as cuFile allows them.

    Returns
    -------
    tuple of (str, dict)
        The path read and its values, e.g. ``{"execution.max_io_threads": 4, ...}``. Where
        the default file does not exist, cuFile uses its built-in defaults, and so does this:
        the path and ``CUFILE_EXECUTION_DEFAULTS`` (as ``gpufile check`` and ``explain`` do).

    Raises
    ------
    FileNotFoundError
        ``path`` was given and does not exist.
    ValueError
        The file is not valid JSON.
    """
    try:
        where, values = _native.cufile_config(path)
    except FileNotFoundError as e:
        if path is not None:
            raise
        return str(e.filename), dict(CUFILE_EXECUTION_DEFAULTS)
    return str(where), {k: json.loads(v) for k, v in values}


def driver_open() -> None:
    """Open the cuFile driver (``cuFileDriverOpen``); gpufile otherwise opens it on first use.

    Raises
    ------
    gpufile.CudaError
        CUDA is not available.
    gpufile.CufileError
        cuFile cannot be loaded or its driver does not open (cuFile's code and name in the
        message).
    """
    _native.cufile_driver_open()


def driver_close() -> None:
    """Close the driver if gpufile opened it (``cuFileDriverClose_v2``); else do nothing.

    Raises
    ------
    gpufile.CufileError
        cuFile refuses to close.
    """
    _native.cufile_driver_close()


def initialize() -> None:
    """Open the driver now rather than at the first cuFile request (KvikIO's ``initialize``).

    Raises
    ------
    gpufile.CudaError, gpufile.CufileError
        As ``driver_open()``.
    """
    driver_open()
