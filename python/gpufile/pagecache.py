"""Page-cache residency and eviction (KvikIO's ``get_page_cache_info``, ``drop_file_page_cache``,
``drop_system_page_cache``): what makes a read hot or cold."""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Iterator

from . import _native
from .utils import kvikio_deprecation_notice


class _FileArgumentError(TypeError, ValueError):
    """Not a path, a descriptor or a file object: a TypeError, and KvikIO's ValueError."""


@contextlib.contextmanager
def _descriptor(file: Any) -> Iterator[tuple[int | None, Any]]:
    """(fd, name) for a descriptor or a file object; (None, path) for a path, which the native
    call opens as every path is opened (a FIFO refused at once, never waited on)."""
    if isinstance(file, bool):
        raise _FileArgumentError("expected a path, a file descriptor or a file object, not bool")
    if isinstance(file, int):
        yield file, f"<fd {file}>"
    elif isinstance(file, (str, bytes, os.PathLike)):
        yield None, os.fspath(file)
    elif isinstance(file, io.IOBase) or hasattr(file, "fileno"):
        yield file.fileno(), str(getattr(file, "name", "<file>"))
    else:
        raise _FileArgumentError(f"expected a path, a file descriptor or a file object, not "
                                 f"{type(file).__name__}")


def _range(offset: int, length: int) -> tuple[int, int]:
    for name, v in (("offset", offset), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int")
        if v < 0:
            raise ValueError(f"{name} must not be negative")
    return offset, length


def get_page_cache_info(file: Any, offset: int = 0, length: int = 0) -> tuple[int, int]:
    """How much of a file range is in the page cache (KvikIO's ``get_page_cache_info``).

    Parameters
    ----------
    file : str, os.PathLike, int or file object
        A path, a file descriptor or an open file.
    offset : int, optional
        Start of the range, 0 by default.
    length : int, optional
        Length of the range; 0 (the default) means to the end of the file.

    Returns
    -------
    tuple of (int, int)
        ``(pages in the page cache, pages in the range)``; ``(0, 0)`` beyond the end.

    Raises
    ------
    TypeError
        ``file`` is of another type, or ``offset``/``length`` are not ints.
    ValueError
        A negative ``offset`` or ``length``.
    OSError
        The file cannot be opened (a FIFO or a socket: ``ESPIPE``, at once) or mapped.

    Examples
    --------
    >>> cached, total = gpufile.get_page_cache_info("data.bin")     # doctest: +SKIP
    """
    offset, length = _range(offset, length)
    with _descriptor(file) as (fd, name):
        return _native.page_cache_info(fd, name, offset, length)


def drop_file_page_cache(file: Any, offset: int = 0, length: int = 0,
                         sync_first: bool = True) -> None:
    """Evict a file range from the page cache; needs no privileges.

    ``posix_fadvise(POSIX_FADV_DONTNEED)``, after ``fdatasync`` if ``sync_first`` (dirty pages
    are not evicted). The way ``gpufile bench --cache cold`` makes a file cold.

    Parameters
    ----------
    file : str, os.PathLike, int or file object
        A path, a file descriptor or an open file.
    offset, length : int, optional
        The range; ``length`` 0 (the default) means to the end.
    sync_first : bool, optional
        Write dirty pages back first (True by default).

    Raises
    ------
    TypeError, ValueError, OSError
        As ``get_page_cache_info()``; an ``offset`` or ``length`` past the largest file offset
        (2**63 - 1) is a ``ValueError``.
    """
    offset, length = _range(offset, length)
    with _descriptor(file) as (fd, name):
        _native.drop_file_page_cache(fd, name, offset, length, bool(sync_first))


def drop_system_page_cache(reclaim_dentries_and_inodes: bool = True,
                           sync_first: bool = True) -> bool:
    """Drop the whole system's page cache (``/proc/sys/vm/drop_caches``); needs root.

    Parameters
    ----------
    reclaim_dentries_and_inodes : bool, optional
        Also reclaim dentries and inodes (writes 3 rather than 1), True by default.
    sync_first : bool, optional
        ``sync`` first, True by default.

    Returns
    -------
    bool
        Whether it worked (False without the privilege; never raises for that).
    """
    return _native.drop_system_page_cache(bool(reclaim_dentries_and_inodes), bool(sync_first))


@kvikio_deprecation_notice("Use :func:`drop_system_page_cache` instead.", since="26.04")
def clear_page_cache(reclaim_dentries_and_inodes: bool = True,
                     clear_dirty_pages: bool = True) -> bool:
    """Drops the system page cache; KvikIO's older name for :func:`drop_system_page_cache`
    (``clear_dirty_pages`` is its ``sync_first``). Whether it worked."""
    return drop_system_page_cache(reclaim_dentries_and_inodes, clear_dirty_pages)
