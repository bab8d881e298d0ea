"""The cuFile driver, as ``kvikio.cufile_driver``.

Nothing here loads ``libcufile.so.0`` until called. ``libcufile_version()`` answers ``(0, 0)``
where cuFile cannot be loaded, and ``properties.is_gds_available`` ``False`` (as KvikIO does);
``get``, ``set`` and the other ``properties`` open the driver.

``get(name)`` / ``set(name, value)`` (or ``set({...})``, also a context manager that restores)
take KvikIO's names: settable ``poll_mode`` (bool), ``poll_thresh_size``,
``max_device_cache_size``, ``max_pinned_memory_size`` (KiB); read-only ``is_gds_available``,
``major_version``, ``minor_version``, ``allow_compat_mode``, ``per_buffer_cache_size`` (KiB).
cuFile's documentation says its ``cuFileDriverSet*`` calls take effect when the driver opens;
like KvikIO, ``get`` answers the value last set.
"""

from __future__ import annotations

import json
from typing import Any, overload

from . import _arguments, _native

__all__ = ["libcufile_version", "library", "properties", "parameters", "config",
           "CUFILE_EXECUTION_DEFAULTS", "driver_open", "driver_close", "initialize", "get", "set",
           "ConfigContextManager", "DriverProperties"]

#: Properties ``set`` can change (KvikIO's).
SETTABLE = ("poll_mode", "poll_thresh_size", "max_device_cache_size", "max_pinned_memory_size")
#: Properties ``get`` reads but ``set`` refuses (KvikIO's).
READ_ONLY = ("is_gds_available", "major_version", "minor_version", "allow_compat_mode",
             "per_buffer_cache_size")


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


def _is_gds_available() -> bool:
    # KvikIO answers False, not an exception, where cuFile or CUDA cannot be used.
    try:
        return bool(_native.cufile_driver_get("is_gds_available"))
    except (_native.GpufileError, OSError):
        return False


def _driver_property(name: str, doc: str, settable: bool) -> property:
    def fget(self: "DriverProperties") -> Any:
        return get(name)

    def fset(self: "DriverProperties", value: Any) -> None:
        _native.cufile_driver_set(name, value)

    return property(fget, fset if settable else None, doc=doc)


class DriverProperties:
    """cuFile's driver properties (``cuFileDriverGetProperties``), as KvikIO's ``properties``.

    Read on each attribute access, which opens the driver. KvikIO's attributes:
    ``is_gds_available`` (``False`` where cuFile or CUDA is unavailable, never an exception),
    ``major_version``, ``minor_version``, ``allow_compat_mode``, ``per_buffer_cache_size``
    (KiB), and the settable ``poll_mode``, ``poll_thresh_size``, ``max_device_cache_size``,
    ``max_pinned_memory_size`` (KiB; assign to change, as ``set()``). gpufile adds every field
    cuFile reports, by their ``_kb`` names (``as_dict()``): ``max_direct_io_size_kb``,
    ``max_batch_io_size``, ``max_batch_io_timeout_msecs``, ``p2p_supported``,
    ``streams_supported``, ...

    Raises
    ------
    gpufile.CudaError, gpufile.CufileError
        On access to any attribute but ``is_gds_available``, where CUDA or cuFile is not
        available.
    AttributeError
        An unknown attribute.

    Examples
    --------
    >>> gpufile.cufile_driver.properties.is_gds_available       # doctest: +SKIP
    False
    """

    is_gds_available = property(lambda self: _is_gds_available(),
                                doc="nvidia-fs is loaded (False where cuFile is unavailable).")
    major_version = _driver_property("major_version", "nvidia-fs major version.", False)
    minor_version = _driver_property("minor_version", "nvidia-fs minor version.", False)
    allow_compat_mode = _driver_property(
        "allow_compat_mode", "cuFile may run its compat (POSIX) path.", False)
    per_buffer_cache_size = _driver_property(
        "per_buffer_cache_size", "Per-buffer cache, KiB.", False)
    poll_mode = _driver_property("poll_mode", "Poll for completion of small I/O.", True)
    poll_thresh_size = _driver_property(
        "poll_thresh_size", "Largest I/O polled, KiB.", True)
    max_device_cache_size = _driver_property(
        "max_device_cache_size", "GPU memory cuFile reserves per device, KiB.", True)
    max_pinned_memory_size = _driver_property(
        "max_pinned_memory_size", "Pinned device memory limit, KiB.", True)

    def _all(self) -> dict[str, Any]:
        return dict(_native.cufile_properties())

    # The fields of ``as_dict()``; any other name is an AttributeError without opening the
    # driver (so ``hasattr`` works on a machine without CUDA).
    _FIELDS = frozenset((
        "poll_thresh_size_kb", "max_direct_io_size_kb", "max_device_cache_size_kb",
        "per_buffer_cache_size_kb", "max_device_pinned_mem_size_kb", "max_batch_io_size",
        "max_batch_io_timeout_msecs", "p2p_supported", "streams_supported"))

    def __getattr__(self, name: str) -> Any:
        if name not in DriverProperties._FIELDS:
            raise AttributeError(name)
        props = self._all()
        if name not in props:
            raise AttributeError(name)
        return props[name]

    def as_dict(self) -> dict[str, Any]:
        """All properties at once, as cuFile reports them (sizes by their ``_kb`` names).

        Returns
        -------
        dict
            Property name to value.

        Raises
        ------
        gpufile.CudaError, gpufile.CufileError
            CUDA or cuFile is not available.
        """
        return self._all()

    def __repr__(self) -> str:
        try:
            return f"DriverProperties({self._all()})"
        except Exception as e:  # noqa: BLE001 - repr must not raise
            return f"DriverProperties(<unavailable: {e}>)"


properties = DriverProperties()


class ConfigContextManager:
    """Returned by ``set()``: the changes are made; as a context manager it restores the
    previous values on exit (KvikIO's class of the same name). Without ``with``, they stay.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        for name in config:
            if not isinstance(name, str):
                raise _arguments.SetArgumentsError(
                    f"property names are str, not {type(name).__name__}")
            if name in READ_ONLY:
                raise KeyError(f"{name} is read-only. Settable: {', '.join(SETTABLE)}")
            if name not in SETTABLE:
                raise KeyError(f"unknown cuFile driver property {name!r}; settable: "
                               f"{', '.join(SETTABLE)}; read-only: {', '.join(READ_ONLY)}")
        self._old: dict[str, Any] = {}
        try:
            for name, value in config.items():
                old = get(name)
                _native.cufile_driver_set(name, value)
                self._old[name] = old
        except BaseException:
            self._restore()  # all or nothing
            raise

    def _restore(self) -> None:
        for name, value in reversed(list(self._old.items())):
            _native.cufile_driver_set(name, value)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._restore()


@overload
def set(config: dict[str, Any], /) -> ConfigContextManager: ...
@overload
def set(key: str, value: Any, /) -> ConfigContextManager: ...
def set(*config: Any) -> ConfigContextManager:  # noqa: A001 - KvikIO's name
    """Change cuFile driver properties (KvikIO's ``cufile_driver.set``).

    Call it as ``set({name: value, ...})`` or ``set(name, value)``; the names are checked
    before anything changes, and a value cuFile refuses undoes the ones set before it. The
    result is a context manager that restores the previous values on exit.

    Parameters
    ----------
    *config : dict, or str and value
        Settable: ``"poll_mode"`` (bool), ``"poll_thresh_size"``,
        ``"max_device_cache_size"``, ``"max_pinned_memory_size"`` (KiB, int or NumPy
        integer).

    Returns
    -------
    ConfigContextManager
        Restores the previous values when used in a ``with`` block.

    Raises
    ------
    KeyError
        An unknown name, or a read-only one (the message says "read-only").
    TypeError
        A value of the wrong type; arguments other than a dict or a name and a value (also a
        ``ValueError``, as KvikIO raises).
    ValueError
        A negative size (also an ``OverflowError``, as KvikIO raises).
    gpufile.CudaError, gpufile.CufileError
        CUDA or cuFile is not available, or cuFile refuses the value.

    Examples
    --------
    >>> with gpufile.cufile_driver.set("poll_mode", True):        # doctest: +SKIP
    ...     gpufile.cufile_driver.get("poll_mode")
    True
    """
    if len(config) == 1 and isinstance(config[0], dict):
        return ConfigContextManager(config[0])
    if len(config) == 2 and isinstance(config[0], str):
        return ConfigContextManager({config[0]: config[1]})
    raise _arguments.SetArgumentsError(
        "cufile_driver.set takes a dict, or a name and a value: set({'poll_mode': True}) "
        "or set('poll_mode', True)")


def get(config_name: str) -> Any:
    """One cuFile driver property (KvikIO's ``cufile_driver.get``; opens the driver).

    Parameters
    ----------
    config_name : str
        A settable name (``poll_mode``, ``poll_thresh_size``, ``max_device_cache_size``,
        ``max_pinned_memory_size``) or a read-only one (``is_gds_available``,
        ``major_version``, ``minor_version``, ``allow_compat_mode``,
        ``per_buffer_cache_size``). Sizes are in KiB.

    Returns
    -------
    bool or int
        The value last ``set``, else what ``cuFileDriverGetProperties`` reports.
        ``is_gds_available`` is ``False`` where cuFile or CUDA cannot be used.

    Raises
    ------
    KeyError
        An unknown name.
    gpufile.CudaError, gpufile.CufileError
        CUDA or cuFile is not available (for any name but ``is_gds_available``).
    """
    if config_name == "is_gds_available":
        return _is_gds_available()
    return _native.cufile_driver_get(config_name)


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

    Files registered with cuFile (open files that used it, and the requests in flight on them)
    keep the driver open: closing it under them would leave their handles used after the close,
    so this refuses instead (KvikIO closes regardless). Close those files first. Buffers and
    streams registered with ``memory_register``/``stream_register`` are not counted: deregister
    them before closing.

    Raises
    ------
    gpufile.CufileError
        Files are still registered with the driver (the message says how many), or cuFile
        refuses to close.
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
