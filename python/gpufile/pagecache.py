"""Page-cache residency and eviction (KvikIO's ``get_page_cache_info``, ``drop_file_page_cache``,
``drop_system_page_cache``): what makes a read hot or cold."""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Iterator

from . import _native
from .utils import kvikio_deprecation_notice


@contextlib.contextmanager
def _descriptor(file: Any) -> Iterator[tuple[int, str]]:
    """(fd, name) for a path, a descriptor or a file object; paths are opened and closed here."""
    if isinstance(file, bool):
        raise TypeError("expected a path, a file descriptor or a file object, not bool")
    if isinstance(file, int):
        yield file, f"<fd {file}>"
    elif isinstance(file, (str, os.PathLike)):
        fd = os.open(os.fspath(file), os.O_RDONLY)
        try:
            yield fd, os.fspath(file)
        finally:
            os.close(fd)
    elif isinstance(file, io.IOBase) or hasattr(file, "fileno"):
        yield file.fileno(), str(getattr(file, "name", "<file>"))
    else:
        raise TypeError(f"expected a path, a file descriptor or a file object, not "
                        f"{type(file).__name__}")


def _range(offset: int, length: int) -> tuple[int, int]:
    for name, v in (("offset", offset), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int")
        if v < 0:
            raise ValueError(f"{name} must not be negative")
    return offset, length


def get_page_cache_info(file: Any, offset: int = 0, length: int = 0) -> tuple[int, int]:
    """``(pages in the page cache, pages)`` for ``[offset, offset + length)`` of ``file``
    (``length`` 0: to the end; beyond the end: ``(0, 0)``)."""
    offset, length = _range(offset, length)
    with _descriptor(file) as (fd, name):
        return _native.page_cache_info(fd, name, offset, length)


def drop_file_page_cache(file: Any, offset: int = 0, length: int = 0,
                         sync_first: bool = True) -> None:
    """Evicts the range from the page cache (``posix_fadvise`` DONTNEED, after ``fdatasync`` if
    ``sync_first``). Needs no privileges: the way to make a benchmark's file cold."""
    offset, length = _range(offset, length)
    with _descriptor(file) as (fd, name):
        _native.drop_file_page_cache(fd, name, offset, length, bool(sync_first))


def drop_system_page_cache(reclaim_dentries_and_inodes: bool = True,
                           sync_first: bool = True) -> bool:
    """Drops the whole system's page cache (``vm.drop_caches``); needs root. Whether it worked."""
    return _native.drop_system_page_cache(bool(reclaim_dentries_and_inodes), bool(sync_first))


@kvikio_deprecation_notice("Use :func:`drop_system_page_cache` instead.", since="26.04")
def clear_page_cache(reclaim_dentries_and_inodes: bool = True,
                     clear_dirty_pages: bool = True) -> bool:
    """Drops the system page cache; KvikIO's older name for :func:`drop_system_page_cache`
    (``clear_dirty_pages`` is its ``sync_first``). Whether it worked."""
    return drop_system_page_cache(reclaim_dentries_and_inodes, clear_dirty_pages)
