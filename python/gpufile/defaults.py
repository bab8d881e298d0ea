"""Process-wide settings, as ``kvikio.defaults``.

``get(name)`` reads one; ``set({...})`` or ``set(name, value)`` changes them (all or nothing) and
can be used as a context manager that restores the previous values on exit::

    with gpufile.defaults.set({"task_size": 1 << 20, "num_threads": 8}):
        f.read(buf)

Settings read ``KVIKIO_*`` environment variables at first use (``GPUFILE_*`` of the same suffix
wins); a variable that does not parse is a ``ValueError`` naming it. Names: ``compat_mode``,
``num_threads``, ``task_size``, ``gds_threshold``, ``bounce_buffer_size``,
``auto_direct_io_read``, ``auto_direct_io_write``, ``require_gds`` (gpufile's),
``http_max_attempts``, ``http_status_codes``, ``http_timeout``, ``remote_io_backend``.
"""

from __future__ import annotations

import enum
from typing import Any

from . import _arguments, _native

__all__ = ["CompatMode", "RemoteIOBackend", "ConfigContextManager", "get", "set", "report",
           "is_compat_mode_preferred"]


class CompatMode(enum.IntEnum):
    """Whether gpufile may use cuFile for device I/O (KvikIO's values and meaning).

    ``ON`` means *compatibility mode on*: cuFile is never used, every request takes gpufile's
    POSIX path. ``OFF`` means cuFile is always used for device requests of ``gds_threshold`` or
    more, or a ``gpufile.CufileError`` says why it cannot be. ``AUTO`` (the default) uses
    cuFile only where its accelerated path exists (nvidia-fs loaded, or P2PDMA) and the file
    registers; elsewhere gpufile's POSIX path, which is much faster than cuFile's own compat
    path. ``defaults.set`` also accepts ``"on"``, ``"off"``, ``"auto"``, booleans and 0/1/2.
    """

    OFF = 0
    ON = 1
    AUTO = 2


class RemoteIOBackend(enum.IntEnum):
    """KvikIO's remote-I/O backend choice (``remote_io_backend``; same names and values).

    gpufile has one remote path (blocking HTTP requests, split by ``task_size`` over the
    worker threads), so both values are accepted and read the same way; the setting exists so
    that KvikIO programs and ``KVIKIO_REMOTE_IO_BACKEND`` keep working. ``defaults.set`` also
    accepts the names as strings, in any case (``"multi_poll"``), and 0/1.
    """

    EASY_THREADPOOL = 0
    MULTI_POLL = 1


#: Settings whose native int value is shown as an enum.
_ENUMS: dict[str, type[enum.IntEnum]] = {
    "compat_mode": CompatMode,
    "remote_io_backend": RemoteIOBackend,
}


def _typed(name: str, value: Any) -> Any:
    kind = _ENUMS.get(name)
    return kind(value) if kind is not None else value


class _Restore:
    """Returned by ``set()``; as a context manager it restores the previous values on exit.

    Used without ``with``, the change simply stays.
    """

    __slots__ = ("_snapshot",)

    def __init__(self, snapshot: Any) -> None:
        self._snapshot = snapshot

    def __enter__(self) -> "_Restore":
        return self

    def __exit__(self, *exc: object) -> None:
        self._snapshot.restore()


#: KvikIO's name for what ``set()`` returns.
ConfigContextManager = _Restore


def get(name: str) -> Any:
    """The current value of one setting.

    Parameters
    ----------
    name : str
        A setting name, such as ``"compat_mode"`` or ``"task_size"``.

    Returns
    -------
    Any
        ``CompatMode`` for ``compat_mode``, ``RemoteIOBackend`` for ``remote_io_backend``,
        ``int`` for sizes and counts, ``bool`` for the
        ``auto_direct_io_*`` flags, a list of ints for ``http_status_codes``.

    Raises
    ------
    KeyError
        There is no such setting (the message lists the known ones).

    Examples
    --------
    >>> gpufile.defaults.get("gds_threshold")
    16384
    """
    value = _native.settings_get(name)
    return _typed(name, value)


def set(*args: Any) -> _Restore:  # noqa: A001 - KvikIO's name
    """Change one or several settings, all or nothing.

    Call it as ``set({name: value, ...})`` or ``set(name, value)``. Every value is checked
    before any is changed. The result is a context manager that restores the previous values
    on exit; without ``with``, the change stays.

    Parameters
    ----------
    *args : dict, or str and value
        The settings to change. Sizes and counts accept ints, NumPy integers (anything with
        ``__index__``) or strings with suffixes (``"4MiB"``, ``"16k"``); ``compat_mode``
        accepts ``CompatMode``, ``"on"``/``"off"``/``"auto"``; ``http_status_codes`` a list or
        tuple of ints, or ``"429,503"``; ``remote_io_backend`` a ``RemoteIOBackend``, 0/1 or
        its name in any case (unlike KvikIO, where it is read-only after start-up, it can be
        set: gpufile has one remote path, so the value changes nothing).

    Returns
    -------
    _Restore
        A context manager that restores the previous values on exit.

    Raises
    ------
    KeyError
        An unknown setting name.
    ValueError
        A value out of range or that does not parse: 0 where a positive integer is needed
        ("positive integer", as KvikIO says); a negative integer raises
        ``gpufile.OutOfRangeError``, both a ``ValueError`` and the ``OverflowError``
        KvikIO raises ("negative value").
    TypeError
        A value of the wrong type (``http_status_codes`` that is not a list of ints, a float
        for a size, ...), or arguments other than a dict or a name and a value (then also a
        ``ValueError``, as KvikIO raises).

    Examples
    --------
    >>> with gpufile.defaults.set({"task_size": "1MiB", "num_threads": 8}):
    ...     gpufile.defaults.get("task_size")
    1048576
    >>> gpufile.defaults.set("compat_mode", "on")                 # doctest: +SKIP
    """
    if len(args) == 1 and isinstance(args[0], dict):
        updates = args[0]
    elif len(args) == 2 and isinstance(args[0], str):
        updates = {args[0]: args[1]}
    else:
        raise _arguments.SetArgumentsError("defaults.set takes a dict, or a name and a value")
    return _Restore(_native.settings_set(updates))


def report() -> list[tuple[str, Any, str]]:
    """Every setting with its value and where the value came from (as ``gpufile config``).

    Returns
    -------
    list of (str, Any, str)
        ``(name, value, source)``; source is ``"default"`` (with how it was chosen, e.g.
        ``"default: min(cores=16, 16)"``), ``"env KVIKIO_TASK_SIZE"`` or ``"set"``.
    """
    return [
        (name, _typed(name, value), source)
        for name, value, source in _native.settings_report()
    ]


def is_compat_mode_preferred() -> bool:
    """Whether device I/O of ``gds_threshold`` or more would avoid cuFile under the settings.

    Returns
    -------
    bool
        True for ``compat_mode`` ON, and for AUTO where cuFile's accelerated path does not
        exist (cuFile is probed once per process); False for OFF.
    """
    return _native.compat_mode_preferred()
