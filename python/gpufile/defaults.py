"""Process-wide settings, as ``kvikio.defaults``.

``get(name)`` reads one; ``set({...})`` or ``set(name, value)`` changes them (all or nothing) and
can be used as a context manager that restores the previous values on exit::

    with gpufile.defaults.set({"task_size": 1 << 20, "num_threads": 8}):
        f.read(buf)

Settings read ``KVIKIO_*`` environment variables (``GPUFILE_*`` of the same suffix wins).
"""

from __future__ import annotations

import enum
from typing import Any

from . import _native

__all__ = ["CompatMode", "get", "set", "report", "is_compat_mode_preferred"]


class CompatMode(enum.IntEnum):
    """Whether gpufile may use cuFile: OFF (use it or fail), ON (never), AUTO (where it pays)."""

    OFF = 0
    ON = 1
    AUTO = 2


class _Restore:
    """Returned by :func:`set`; as a context manager it restores the previous values on exit."""

    __slots__ = ("_snapshot",)

    def __init__(self, snapshot: Any) -> None:
        self._snapshot = snapshot

    def __enter__(self) -> "_Restore":
        return self

    def __exit__(self, *exc: object) -> None:
        self._snapshot.restore()


def get(name: str) -> Any:
    """The current value of setting ``name`` (KeyError if there is no such setting)."""
    value = _native.settings_get(name)
    return CompatMode(value) if name == "compat_mode" else value


def set(*args: Any) -> _Restore:  # noqa: A001 - KvikIO's name
    """``set({name: value, ...})`` or ``set(name, value)``; bad values raise before any change."""
    if len(args) == 1 and isinstance(args[0], dict):
        updates = args[0]
    elif len(args) == 2 and isinstance(args[0], str):
        updates = {args[0]: args[1]}
    else:
        raise TypeError("defaults.set takes a dict, or a name and a value")
    return _Restore(_native.settings_set(updates))


def report() -> list[tuple[str, Any, str]]:
    """``[(name, value, source)]`` for every setting; source is default, env VAR or set."""
    return [
        (name, CompatMode(value) if name == "compat_mode" else value, source)
        for name, value, source in _native.settings_report()
    ]


def is_compat_mode_preferred() -> bool:
    """Whether device I/O (of gds_threshold or more) would use gpufile's POSIX path rather than
    cuFile under the current settings: True for ON, and for AUTO where cuFile's accelerated path
    does not exist (probes cuFile once); False for OFF."""
    return _native.compat_mode_preferred()
