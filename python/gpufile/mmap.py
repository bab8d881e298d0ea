"""``Mmap``: a file region mapped read-only, read into host or device buffers (KvikIO's ``Mmap``)."""

from __future__ import annotations

import os
from typing import Any

from . import _native
from ._future import IOFuture


class Mmap:
    """Handle of a memory-mapped file (KvikIO's ``kvikio.Mmap``).

    The region ``[initial_map_offset, initial_map_offset + initial_map_size)`` of the file is
    mapped read-only; ``read()`` and ``pread()`` copy any range of it into host memory (NumPy,
    bytearray, memoryview) or device memory (CuPy, PyTorch, Numba: through pinned bounce
    buffers, the copy to the GPU overlapped with the next copy from the mapping). Each request
    is split into ``task_size`` tasks run by ``num_threads`` workers. Use it as a context manager,
    or call ``close()``.

    Unlike KvikIO's, a future from ``pread()`` keeps the mapping alive until its read is done
    (closing the handle meanwhile is safe), and a file that shrinks under the mapping, before or
    during a read, makes the read fail with ``gpufile.EndOfFileError`` rather than kill the
    process with ``SIGBUS``: the bytes are read with ``pread`` from the mapped file (the same
    bytes the read-only mapping shows), not copied out of the mapping.

    Parameters
    ----------
    file_path : str, bytes or os.PathLike
        Path of the file.
    flags : str, optional
        ``"r"`` (read, the default) or ``"r+"`` (opened for reading and writing, mapped
        read-only). Writing through a mapping is not supported (KvikIO neither).
    initial_map_size : int, optional
        Bytes to map; by default from ``initial_map_offset`` to the end of the file.
    initial_map_offset : int, optional
        File offset of the mapped region (default 0); must be less than the file size.
    mode : int, optional
        Permissions of a file the open would create (default ``0o644``; a read-only open never
        creates one).
    map_flags : int, optional
        Flags for ``mmap(2)`` (default ``mmap.MAP_PRIVATE``; ``MAP_SHARED``,
        ``MAP_POPULATE``, ... from Python's ``mmap`` module). ``MAP_FIXED`` and
        ``MAP_ANONYMOUS`` are refused.

    Raises
    ------
    FileNotFoundError, PermissionError, IsADirectoryError
        The file does not open ("Unable to open file"); also a ``RuntimeError``, as KvikIO's.
    ValueError
        Unknown ``flags`` ("Unknown file open flag"), a writing flag, ``initial_map_size`` 0
        ("Mapped region should not be zero byte"), bad ``map_flags`` or ``mode``.
    IndexError
        ``initial_map_offset`` at or past the end of the file ("Offset must be less than the
        file size"), or a region past it ("Mapped region is past the end of file").
    TypeError
        An argument of the wrong type.

    Examples
    --------
    >>> with gpufile.Mmap("data.bin", "r") as m:            # doctest: +SKIP
    ...     buf = cupy.empty(m.initial_map_size(), dtype=cupy.uint8)
    ...     n = m.pread(buf).get()
    """

    __slots__ = ("_handle",)

    def __init__(
        self,
        file_path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
        flags: str = "r",
        initial_map_size: int | None = None,
        initial_map_offset: int = 0,
        mode: int = 0o644,
        map_flags: int | None = None,
    ) -> None:
        self._handle = _native.NativeMmap(
            file_path, flags, initial_map_size, initial_map_offset, mode, map_flags
        )


    def initial_map_size(self) -> int:
        """Size in bytes of the region mapped when the handle was made.

        Returns
        -------
        int
            The mapped size (0 for an empty file, and once closed, as KvikIO).
        """
        return self._handle.initial_map_size()

    def initial_map_offset(self) -> int:
        """File offset of the region mapped when the handle was made.

        Returns
        -------
        int
            The mapped region's offset (0 once closed, as KvikIO).
        """
        return self._handle.initial_map_offset()

    def file_size(self) -> int:
        """The file's size now.

        Returns
        -------
        int
            Size in bytes; 0 once the handle is closed.
        """
        return self._handle.file_size()

    def close(self) -> None:
        """Unmap the region and close the file; do nothing if already closed.

        Reads in flight finish first (they hold the mapping).
        """
        self._handle.close()

    def closed(self) -> bool:
        """Whether the handle is closed (a method, as in KvikIO).

        Returns
        -------
        bool
        """
        return self._handle.closed()

    def read(self, buf: Any, size: int | None = None, offset: int = 0) -> int:
        """Read ``size`` bytes at file offset ``offset`` into ``buf``, and wait.

        Parameters
        ----------
        buf : buffer or device array
            Destination: host memory (buffer protocol) or device memory
            (``__cuda_array_interface__``, ``__dlpack__``), C-contiguous and writable.
        size : int, optional
            Bytes to read; by default from ``offset`` to the end of the file.
        offset : int, optional
            File offset (default 0).

        Returns
        -------
        int
            The bytes read.

        Raises
        ------
        IndexError
            ``offset`` is past the end of the file ("Offset is past the end of file"), or the
            range is outside the mapped region ("Read is out of bound").
        RuntimeError
            The handle is closed ("Cannot read from a closed MmapHandle"; also a ``ValueError``).
        ValueError
            The read does not fit in ``buf``, or a negative argument.
        gpufile.EndOfFileError
            The file shrank below the range since it was mapped.
        TypeError
            ``buf`` is not a buffer, is read-only, or an argument is not an int.
        """
        return self._handle.read(buf, size, offset)

    def pread(
        self,
        buf: Any,
        size: int | None = None,
        offset: int = 0,
        task_size: int | None = None,
    ) -> IOFuture:
        """Start reading ``size`` bytes at file offset ``offset`` into ``buf``, in parallel.

        Parameters
        ----------
        buf : buffer or device array
            Destination, as for ``read()``.
        size : int, optional
            Bytes to read; by default from ``offset`` to the end of the file.
        offset : int, optional
            File offset (default 0).
        task_size : int, optional
            Largest piece handed to one worker; by default ``defaults.get("task_size")``. Any
            size works (KvikIO requires it not to exceed ``bounce_buffer_size``).

        Returns
        -------
        IOFuture
            ``get()`` waits and returns the bytes read. It keeps ``buf`` and the mapping alive
            until the read is done.

        Raises
        ------
        IndexError, RuntimeError, ValueError, TypeError
            As for ``read()``, at the call (before any byte moves).
        """
        return IOFuture(self._handle.pread(buf, size, offset, task_size))

    def __enter__(self) -> Mmap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._handle.closed():
            return "<gpufile.Mmap (closed)>"
        return (
            f"<gpufile.Mmap {str(self._handle.path)!r} offset={self.initial_map_offset()} "
            f"size={self.initial_map_size()}>"
        )
