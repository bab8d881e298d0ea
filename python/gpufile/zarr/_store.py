"""``GDSStore``: zarr's ``LocalStore`` with every chunk read and written through gpufile.

1. ``store = GDSStore("data.zarr")`` (or ``await GDSStore.open(...)``), then use it as any zarr
   v3 store: ``zarr.create_array(store, ...)``, ``zarr.open_array(store, ...)``.
2. With ``zarr.config.enable_gpu()``, zarr asks for GPU buffers and chunks are read from the file
   straight into CuPy memory (cuFile, or gpufile's pinned bounce path); otherwise NumPy.

What gpufile's store does that KvikIO 26.10's does not: ``get_partial_values`` and zarr's
synchronous ``get_sync``/``set_sync`` (zarr 3.1+) also go through gpufile (KvikIO's inherit
``LocalStore``'s Python file reads); a byte range past the end of the file is cut at the end
(KvikIO can read past it and fail); writes are atomic (a temporary file renamed into place, as
zarr's ``LocalStore`` does), and ``set_if_not_exists`` cannot overwrite a key created at the same
moment by another writer; ``get_partial_values`` answers None for a missing key.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import zarr


def _version_tuple(text: str) -> tuple[int, ...]:
    """(3, 1, 6) from "3.1.6", "3.2.0rc1" or "3.1.1.dev5+g123"."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


_ZARR_VERSION = _version_tuple(zarr.__version__)
if _ZARR_VERSION < (3,):
    raise ImportError(f"'zarr>=3' is required, but 'zarr=={zarr.__version__}' is installed")

import zarr.storage  # noqa: E402
from zarr.abc.store import (  # noqa: E402
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer  # noqa: E402
from zarr.core.buffer.core import default_buffer_prototype  # noqa: E402

from ..cufile import CuFile  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterable

    from zarr.core.buffer import BufferPrototype

__all__ = ["GDSStore"]

# zarr < 3.0.7 holds bytes as int8, later versions as uint8.
_BYTE_DTYPE = "B" if _ZARR_VERSION >= (3, 0, 7) else "b"


def _byte_span(byte_range: ByteRequest | None, size: int) -> tuple[int, int]:
    """``[start, stop)`` of ``byte_range`` within a file of ``size`` bytes, cut at its end (the
    bytes Python's ``f.seek(start); f.read(...)`` would return, as zarr's LocalStore reads)."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        start = min(byte_range.start, size)
        return start, max(start, min(byte_range.end, size))
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, size), size
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, size - byte_range.suffix), size
    raise TypeError(f"Unexpected byte_range, got {byte_range}.")


def _get(path: Path, prototype: BufferPrototype, byte_range: ByteRequest | None) -> Buffer:
    """Reads ``byte_range`` of ``path`` into a new buffer of ``prototype`` (host or device)."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{path} is a directory")
    start, stop = _byte_span(byte_range, st.st_size)
    nbytes = stop - start
    raw = prototype.nd_buffer.create(shape=(nbytes,), dtype=_BYTE_DTYPE).as_ndarray_like()
    if nbytes:
        with CuFile(path, "r") as f:
            f.read(raw, size=nbytes, file_offset=start)
    return prototype.buffer.from_array_like(raw)


def _put(path: Path, value: Buffer, exclusive: bool = False) -> int:
    """Writes ``value`` to ``path`` atomically: into a temporary file in the same folder, then
    renamed over ``path`` (or linked to it where ``exclusive``: FileExistsError if it exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = value.as_array_like()
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        with CuFile(tmp, "w") as f:
            written = f.write(data) if len(value) else 0
        if exclusive:
            os.link(tmp, path)  # fails with FileExistsError rather than replacing
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return written


class GDSStore(zarr.storage.LocalStore):
    """A zarr v3 store on the local file system whose reads and writes go through gpufile.

    Parameters
    ----------
    root : str or pathlib.Path
        The store's folder.
    read_only : bool
        Whether writes are refused.

    Examples
    --------
    >>> store = GDSStore("/tmp/a.zarr")
    >>> a = zarr.create_array(store, shape=(1000,), chunks=(100,), dtype="f4")
    >>> a[:] = 1.0
    >>> with zarr.config.enable_gpu():
    ...     b = zarr.open_array(store)[:]   # a CuPy array, read through gpufile
    """

    # LocalStore's own signature, spelled out so that the parameters documented above are in
    # the signature the reference shows (griffe reads this file without importing zarr).
    def __init__(self, root: Path | str, *, read_only: bool = False) -> None:
        super().__init__(root, read_only=read_only)

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self}')"

    def _open_sync(self) -> None:
        """The synchronous twin of ``_open`` (zarr's sync methods call it before any access)."""
        if not self._is_open:
            if not self.read_only:
                self.root.mkdir(parents=True, exist_ok=True)
            if not self.root.exists():
                raise FileNotFoundError(f"{self.root} does not exist")
            self._is_open = True

    async def _open_lazily(self) -> None:
        """Opens the store on its first use. Concurrent first uses (every ``set`` of a
        ``set_many``) may all get here before one finishes: opening is idempotent, so none
        fails (``Store._open`` raises on a store already open, which zarr 3.4 checks)."""
        if not self._is_open:
            await asyncio.to_thread(self._open_sync)

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """The bytes of ``key`` (or of ``byte_range`` of it), or None where there is no key.

        Parameters
        ----------
        key : str
            The key, relative to the store's root.
        prototype : BufferPrototype, optional
            Which buffer to return (zarr's default: host memory; GPU under
            ``zarr.config.enable_gpu()``).
        byte_range : ByteRequest, optional
            A part of the value; cut at its end.

        Returns
        -------
        Buffer or None

        Raises
        ------
        TypeError
            ``byte_range`` is not a zarr ``ByteRequest``.
        """
        if prototype is None:
            prototype = default_buffer_prototype()
        await self._open_lazily()
        try:
            return await asyncio.to_thread(_get, self.root / key, prototype, byte_range)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """Several ``(key, byte_range)`` reads at once, in order; None for a missing key."""
        await self._open_lazily()
        return list(await asyncio.gather(
            *(self.get(key, prototype, byte_range) for key, byte_range in key_ranges)))

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """:meth:`get` without an event loop (zarr's synchronous code path)."""
        if prototype is None:
            prototype = default_buffer_prototype()
        self._open_sync()
        try:
            return _get(self.root / key, prototype, byte_range)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def set(self, key: str, value: Buffer) -> None:
        """Stores ``value`` at ``key`` (atomically; parent folders are created).

        Raises
        ------
        ValueError
            The store is read-only.
        TypeError
            ``value`` is not a zarr ``Buffer``.
        """
        return await self._set(key, value)

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        await self._open_lazily()
        self._check_writable()
        self._check_value(value)
        await asyncio.to_thread(_put, self.root / key, value, exclusive)

    def set_sync(self, key: str, value: Buffer) -> None:
        """:meth:`set` without an event loop (zarr's synchronous code path)."""
        self._open_sync()
        self._check_writable()
        self._check_value(value)
        _put(self.root / key, value)

    @staticmethod
    def _check_value(value: object) -> None:
        if not isinstance(value, Buffer):
            raise TypeError(f"GDSStore.set(): `value` must be a Buffer instance. Got an instance "
                            f"of {type(value)} instead.")
