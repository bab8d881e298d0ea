"""``CuFile``: an open file, with KvikIO's methods."""

from __future__ import annotations

import os
from typing import Any

from . import _native


class IOFuture:
    """A request in flight. Keeps its buffer and file alive until it is done."""

    __slots__ = ("_fut",)

    def __init__(self, fut: Any) -> None:
        self._fut = fut

    def get(self) -> int:
        """Waits for the request; returns the bytes transferred or raises its error."""
        return self._fut.get()

    def done(self) -> bool:
        """Whether the request has finished."""
        return self._fut.done()

    def __await__(self):
        if not self._fut.done():
            import asyncio

            yield from asyncio.get_running_loop().run_in_executor(None, self._fut.get).__await__()
        return self._fut.get()


class CuFile:
    """A file opened for reads and writes of device (CuPy, PyTorch, Numba) and host buffers.

    ``flags``: ``"r"`` (read), ``"r+"`` (read and write), ``"w"`` (create or truncate, write),
    ``"w+"`` (create or truncate, read and write).
    """

    def __init__(self, file: str | os.PathLike[str], flags: str = "r") -> None:
        if not isinstance(flags, str):
            raise TypeError(f"flags must be a str, not {type(flags).__name__}")
        self._file = _native.NativeFile(os.fspath(file), flags)

    def close(self) -> None:
        """Closes the file; requests still in flight finish first."""
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def fileno(self) -> int:
        return self._file.fileno()

    def open_flags(self) -> int:
        """The descriptor's ``fcntl(F_GETFL)`` flags."""
        return self._file.open_flags()

    def is_direct_io_supported(self) -> bool:
        """Whether the file system accepts O_DIRECT for this file."""
        return self._file.is_direct_io_supported()

    @property
    def io_path(self) -> tuple[str, str]:
        """``(backend, reason)``: the path a large device read or write on this file takes under
        the current settings, and why. :meth:`io_path_for` answers for a given buffer."""
        return self._file.io_path()

    def io_path_for(self, buf: Any, size: int | None = None) -> tuple[str, str]:
        """``(backend, reason)`` of a request of ``size`` bytes (default: all) into ``buf``."""
        return self._file.io_path(buf, size)

    def __enter__(self) -> "CuFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<gpufile.CuFile closed>"
        return f"<gpufile.CuFile {os.fspath(self._file.path)!r} flags={self._file.flags!r}>"

    def read(self, buf: Any, size: int | None = None, file_offset: int = 0,
             task_size: int | None = None) -> int:
        """Reads ``size`` bytes (default: all of ``buf``) at ``file_offset`` into ``buf``.

        Reading past the end of the file raises :class:`gpufile.EndOfFileError` before any
        byte is copied (KvikIO raises too, after a partial read).
        """
        return self._file.read(buf, size, file_offset, task_size)

    def write(self, buf: Any, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> int:
        """Writes ``size`` bytes (default: all of ``buf``) of ``buf`` at ``file_offset``."""
        return self._file.write(buf, size, file_offset, task_size)

    def pread(self, buf: Any, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> IOFuture:
        """Starts a read and returns at once; ``.get()`` waits for it."""
        return IOFuture(self._file.pread(buf, size, file_offset, task_size))

    def pwrite(self, buf: Any, size: int | None = None, file_offset: int = 0,
               task_size: int | None = None) -> IOFuture:
        """Starts a write and returns at once; ``.get()`` waits for it."""
        return IOFuture(self._file.pwrite(buf, size, file_offset, task_size))
