"""``CuFile``: an open file, with KvikIO's methods."""

from __future__ import annotations

import logging
import os
from typing import Any

from . import _native
from .pagecache import (  # noqa: F401 - KvikIO's kvikio.cufile exports them
    clear_page_cache,
    drop_file_page_cache,
    drop_system_page_cache,
    get_page_cache_info,
)

_log = logging.getLogger("gpufile")


def _log_notices() -> None:
    """Path decisions worth knowing (a fallback, say) are logged once each."""
    for text in _native.take_notices():
        _log.info(text)


def memory_register(buf: Any) -> None:
    """Registers the device allocation holding ``buf`` with cuFile (``cuFileBufRegister``)."""
    _native.memory_register(buf)


def memory_deregister(buf: Any) -> None:
    """Deregisters the device allocation holding ``buf`` (``cuFileBufDeregister``)."""
    _native.memory_deregister(buf)


def stream_register(stream: Any, flags: int = 0) -> None:
    """Registers a CUDA stream with cuFile (``cuFileStreamRegister``)."""
    _native.stream_register(_stream_handle(stream), flags)


def stream_deregister(stream: Any) -> None:
    """Deregisters a CUDA stream from cuFile (``cuFileStreamDeregister``)."""
    _native.stream_deregister(_stream_handle(stream))


def _stream_handle(stream: Any) -> int:
    """A CUDA stream handle from an int, a CuPy/Numba stream (``.ptr``) or a PyTorch stream
    (``.cuda_stream``)."""
    for attr in ("ptr", "cuda_stream", "handle"):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if not isinstance(stream, int):
        raise TypeError(f"expected a CUDA stream or its handle, got {type(stream).__name__}")
    return stream


class IOFutureStream:
    """The result of ``raw_read_async``/``raw_write_async``: ``check_bytes_done()``.

    gpufile orders the transfer after the work already queued on the stream (it waits for the
    stream, then transfers), so the bytes are in place when the call returns.
    """

    __slots__ = ("_n",)

    def __init__(self, n: int) -> None:
        self._n = n

    def check_bytes_done(self) -> int:
        return self._n


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
        try:
            return self._file.read(buf, size, file_offset, task_size)
        finally:
            _log_notices()

    def write(self, buf: Any, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> int:
        """Writes ``size`` bytes (default: all of ``buf``) of ``buf`` at ``file_offset``."""
        try:
            return self._file.write(buf, size, file_offset, task_size)
        finally:
            _log_notices()

    def pread(self, buf: Any, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> IOFuture:
        """Starts a read and returns at once; ``.get()`` waits for it."""
        try:
            return IOFuture(self._file.pread(buf, size, file_offset, task_size))
        finally:
            _log_notices()

    def pwrite(self, buf: Any, size: int | None = None, file_offset: int = 0,
               task_size: int | None = None) -> IOFuture:
        """Starts a write and returns at once; ``.get()`` waits for it."""
        try:
            return IOFuture(self._file.pwrite(buf, size, file_offset, task_size))
        finally:
            _log_notices()

    def raw_read(self, buf: Any, size: int | None = None, file_offset: int = 0,
                 dev_offset: int = 0) -> int:
        """One request, not split into tasks: ``size`` bytes at ``file_offset`` into ``buf`` at
        ``dev_offset`` (one ``cuFileRead`` on the cuFile path)."""
        try:
            return self._file.raw_read(buf, size, file_offset, dev_offset)
        finally:
            _log_notices()

    def raw_write(self, buf: Any, size: int | None = None, file_offset: int = 0,
                  dev_offset: int = 0) -> int:
        """One request, not split into tasks (one ``cuFileWrite`` on the cuFile path)."""
        try:
            return self._file.raw_write(buf, size, file_offset, dev_offset)
        finally:
            _log_notices()

    def raw_read_async(self, buf: Any, stream: Any, size: int | None = None,
                       file_offset: int = 0, dev_offset: int = 0) -> IOFutureStream:
        """Stream-ordered ``raw_read``: runs after the work queued on ``stream``."""
        _native.stream_synchronize(_stream_handle(stream), buf)
        return IOFutureStream(self.raw_read(buf, size, file_offset, dev_offset))

    def raw_write_async(self, buf: Any, stream: Any, size: int | None = None,
                        file_offset: int = 0, dev_offset: int = 0) -> IOFutureStream:
        """Stream-ordered ``raw_write``: writes what the work queued on ``stream`` produced."""
        _native.stream_synchronize(_stream_handle(stream), buf)
        return IOFutureStream(self.raw_write(buf, size, file_offset, dev_offset))
