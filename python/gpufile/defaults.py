"""Process-wide settings, as ``kvikio.defaults``.

``get(name)`` reads one; ``set({...})`` or ``set(name, value)`` changes them (all or nothing) and
can be used as a context manager that restores the previous values on exit::

    with gpufile.defaults.set({"task_size": 1 << 20, "num_threads": 8}):
        f.read(buf)

Settings read ``KVIKIO_*`` environment variables at first use (``GPUFILE_*`` of the same suffix
wins); a variable that does not parse is a ``ValueError`` naming it. Names: ``compat_mode``,
``num_threads``, ``task_size``, ``gds_threshold``, ``bounce_buffer_size``,
``auto_direct_io_read``, ``auto_direct_io_write``, ``require_gds`` (gpufile's),
``http_max_attempts``, ``http_status_codes``, ``http_timeout``, ``remote_io_backend``,
``remote_io_num_reactors``, ``remote_io_reactor_dispatch``, ``remote_io_max_concurrent_requests``.

The last three are KvikIO's settings of its ``MULTI_POLL`` reactor pool, which gpufile does not
have: they are kept with KvikIO's rules and change nothing. As in KvikIO they are fixed for the
rest of the process once a remote read has run under ``remote_io_backend`` ``MULTI_POLL``, so
``set`` takes them one at a time (``set(name, value)``, which returns ``None``), never in a dict
or a ``with`` block.
"""

from __future__ import annotations

import enum
from typing import Any

from . import _arguments, _native

__all__ = ["CompatMode", "RemoteIOBackend", "RemoteReactorDispatch", "ConfigContextManager",
           "get", "set", "report", "is_compat_mode_preferred"]


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


class RemoteReactorDispatch(enum.IntEnum):
    """How KvikIO's ``MULTI_POLL`` backend spreads one read over its reactor threads
    (``remote_io_reactor_dispatch``; same names and values).

    gpufile has no reactor threads (its remote ranges run on its worker threads, as KvikIO's
    ``EASY_THREADPOOL`` runs them), so both values are accepted and read the same way.
    ``defaults.set`` also accepts the names as strings, in any case, and 0/1.
    """

    PER_CHUNK = 0
    PER_PREAD = 1


#: Settings whose native int value is shown as an enum.
_ENUMS: dict[str, type[enum.IntEnum]] = {
    "compat_mode": CompatMode,
    "remote_io_backend": RemoteIOBackend,
    "remote_io_reactor_dispatch": RemoteReactorDispatch,
}

#: KvikIO's settings that its reactor pool fixes for the rest of the process once the first
#: remote read under MULTI_POLL has run: they have no value to restore, so they are set one at a
#: time and never in a dict (KvikIO's rule).
_PROCESS_LIFETIME = frozenset({
    "remote_io_num_reactors",
    "remote_io_reactor_dispatch",
    "remote_io_max_concurrent_requests",
})


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
        ``RemoteReactorDispatch`` for ``remote_io_reactor_dispatch``, ``int`` for sizes and
        counts, ``bool`` for the
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


def set(*args: Any) -> _Restore | None:  # noqa: A001 - KvikIO's name
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
        its name in any case (gpufile has one remote path, so the value changes nothing);
        ``remote_io_reactor_dispatch`` a ``RemoteReactorDispatch``, 0/1 or its name;
        ``remote_io_num_reactors`` (1 or more) and ``remote_io_max_concurrent_requests`` (0: no
        limit) ints. These three are KvikIO's reactor settings, kept and without effect in
        gpufile, and only ``set(name, value)`` takes them.

    Returns
    -------
    _Restore or None
        A context manager that restores the previous values on exit; ``None`` for one of the
        three reactor settings, which cannot be restored (KvikIO's rule).

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
    RuntimeError
        (``gpufile.GpufileError``) One of the three reactor settings after a remote read has
        run under ``remote_io_backend`` ``MULTI_POLL`` ("cannot be changed after the
        MULTI_POLL reactor pool has already started", as KvikIO); in a dict, a ``ValueError``.

    Examples
    --------
    >>> with gpufile.defaults.set({"task_size": "1MiB", "num_threads": 8}):
    ...     gpufile.defaults.get("task_size")
    1048576
    >>> gpufile.defaults.set("compat_mode", "on")                 # doctest: +SKIP
    """
    if len(args) == 1 and isinstance(args[0], dict):
        updates = args[0]
        fixed = _PROCESS_LIFETIME.intersection(k for k in updates if isinstance(k, str))
        if fixed:
            raise ValueError(
                f"{sorted(fixed)} are fixed for the rest of the process once the first remote "
                "read has run under remote_io_backend MULTI_POLL, so they cannot be restored: "
                "set each with gpufile.defaults.set(name, value), not in a dict")
    elif len(args) == 2 and isinstance(args[0], str):
        if args[0] in _PROCESS_LIFETIME:
            _native.settings_set({args[0]: args[1]})
            return None
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
