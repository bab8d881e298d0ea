"""``CuFile``: an open file, with KvikIO's methods, and the cuFile registration helpers.

``IOFuture`` and ``IOFutureStream`` live in ``_future`` and are exported here too, where KvikIO
has them (``kvikio.cufile.IOFuture``).
"""

from __future__ import annotations

import operator
import os
from typing import Any

from . import _native
from ._future import IOFuture, IOFutureStream
from .pagecache import (  # noqa: F401 - KvikIO's kvikio.cufile exports them
    clear_page_cache,
    drop_file_page_cache,
    drop_system_page_cache,
    get_page_cache_info,
)

def memory_register(buf: Any) -> None:
    """Register the device allocation holding ``buf`` with cuFile (``cuFileBufRegister``).

    The whole allocation is registered (from its base address), so later reads and writes into
    any part of it skip cuFile's own staging buffers. Only useful on the cuFile path
    (``compat_mode`` OFF, or AUTO where nvidia-fs is loaded).

    Parameters
    ----------
    buf : device array
        Any object with ``__cuda_array_interface__`` or ``__dlpack__`` (CuPy, PyTorch, Numba).

    Raises
    ------
    TypeError
        ``buf`` is not a device buffer.
    gpufile.CudaError
        CUDA is not available.
    gpufile.CufileError
        cuFile cannot be loaded or refuses the registration (its code and name in the message).

    Examples
    --------
    >>> buf = cupy.empty(1 << 30, dtype=cupy.uint8)        # doctest: +SKIP
    >>> gpufile.memory_register(buf)                       # doctest: +SKIP
    >>> gpufile.memory_deregister(buf)                     # doctest: +SKIP
    """
    _native.memory_register(buf)


def memory_deregister(buf: Any) -> None:
    """Deregister the device allocation holding ``buf`` (``cuFileBufDeregister``).

    Parameters
    ----------
    buf : device array
        The buffer given to ``memory_register()`` (or any array in the same allocation).

    Raises
    ------
    TypeError
        ``buf`` is not a device buffer.
    gpufile.CufileError
        cuFile refuses (for example, the allocation was not registered).
    """
    _native.memory_deregister(buf)


def stream_register(stream: Any, flags: int = 0) -> None:
    """Register a CUDA stream with cuFile (``cuFileStreamRegister``).

    Parameters
    ----------
    stream : int or stream object
        A raw ``CUstream`` handle, a CuPy or Numba stream (``.ptr``) or a PyTorch stream
        (``.cuda_stream``).
    flags : int, optional
        cuFile's stream flags (``CU_FILE_STREAM_*``), 0 by default.

    Raises
    ------
    TypeError
        ``stream`` is neither a handle nor a stream object.
    gpufile.CufileError
        cuFile cannot be loaded or refuses the stream.
    """
    _native.stream_register(_stream_handle(stream), flags)


def stream_deregister(stream: Any) -> None:
    """Deregister a CUDA stream from cuFile (``cuFileStreamDeregister``).

    Parameters
    ----------
    stream : int or stream object
        The stream given to ``stream_register()``.

    Raises
    ------
    TypeError
        ``stream`` is neither a handle nor a stream object.
    gpufile.CufileError
        cuFile cannot be loaded or refuses.
    """
    _native.stream_deregister(_stream_handle(stream))


def _stream_handle(stream: Any) -> int:
    """A CUDA stream handle from an int, a CuPy/Numba stream (``.ptr``) or a PyTorch stream
    (``.cuda_stream``)."""
    for attr in ("ptr", "cuda_stream", "handle"):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not hasattr(stream, "__index__"):
        raise TypeError(f"expected a CUDA stream or its handle, got {type(stream).__name__}")
    return operator.index(stream)  # an int, or a NumPy integer holding the handle


class CuFile:
    """A file opened for reads and writes of device (CuPy, PyTorch, Numba) and host buffers.

    KvikIO's ``CuFile``: each request is split into ``task_size`` tasks run by ``num_threads``
    workers, through cuFile or gpufile's own POSIX path (see ``io_path``). Use it as a
    context manager, or call ``close()``.

    Parameters
    ----------
    file : str or os.PathLike
        Path of the file.
    flags : str, optional
        ``"r"`` (read, the default), ``"r+"`` (read and write), ``"w"`` (create or truncate,
        write), ``"w+"`` (create or truncate, read and write); a ``"b"`` may follow or be
        mixed in, as Python's ``open`` takes it (``"rb"``, ``"r+b"``, ``"rb+"``, ``"wb"``).

    Raises
    ------
    FileNotFoundError, PermissionError, IsADirectoryError
        The file cannot be opened (``errno`` and ``filename`` set; the message says "Unable to
        open file"). Each is also a ``RuntimeError``, what KvikIO raises.
    ValueError
        ``flags`` is not one of those above ("Unknown file open flag"; ``"a"``: "Open flag 'a'
        isn't supported").
    TypeError
        ``flags`` is not a str.

    Notes
    -----
    Reading a file opened ``"w"``, or writing one opened ``"r"``, raises
    ``io.UnsupportedOperation`` ("... Operation not permitted"), which is also a
    ``RuntimeError`` as KvikIO's error is. Offsets and sizes take ints or NumPy integers.

    Examples
    --------
    >>> import numpy as np
    >>> import gpufile
    >>> with gpufile.CuFile("data.bin", "w") as f:            # doctest: +SKIP
    ...     f.write(np.arange(256, dtype=np.uint8))
    256
    >>> buf = np.empty(256, dtype=np.uint8)
    >>> with gpufile.CuFile("data.bin", "r") as f:            # doctest: +SKIP
    ...     f.read(buf)
    256
    """

    def __init__(self, file: str | bytes | os.PathLike[str] | os.PathLike[bytes],
                 flags: str = "r") -> None:
        if not isinstance(flags, str):
            raise TypeError(f"flags must be a str, not {type(flags).__name__}")
        self._file = _native.NativeFile(os.fspath(file), flags)

    @classmethod
    def _of_descriptor(cls, fd: int, name: str) -> "CuFile":
        """A CuFile on the file the open descriptor ``fd`` refers to (not on what a path names
        now), with ``fd``'s access mode; ``fd``'s position is left alone."""
        f = cls.__new__(cls)
        f._file = _native.NativeFile.from_fd(fd, name)
        return f


    def close(self) -> None:
        """Close the file; requests still in flight finish first. Closing twice is harmless."""
        self._file.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._file.closed

    def fileno(self) -> int:
        """The file descriptor.

        Returns
        -------
        int

        Raises
        ------
        ValueError
            The file is closed.
        """
        return self._file.fileno()

    def open_flags(self) -> int:
        """The descriptor's ``fcntl(F_GETFL)`` flags (``os.O_RDONLY``, ``os.O_RDWR``, ...).

        Returns
        -------
        int

        Raises
        ------
        ValueError
            The file is closed.
        """
        return self._file.open_flags()

    def is_direct_io_supported(self) -> bool:
        """Whether the file system accepts ``O_DIRECT`` for this file (tmpfs, for one, does not).

        Returns
        -------
        bool
        """
        return self._file.is_direct_io_supported()

    @property
    def io_path(self) -> tuple[str, str]:
        """``(backend, reason)``: the path a large device read or write on this file takes.

        Answered under the current settings, without transferring anything; the backend is
        ``"gpufile-posix"`` or ``"cufile"``, the reason says why (for example ``("gpufile-posix",
        "nvidia-fs not loaded")``). On a machine without a CUDA device, where every read goes
        to host memory, it describes a large host read, and the reason starts with ``"no GPU"``
        and why. Host buffers and device requests below ``gds_threshold`` always take
        ``"gpufile-posix"``: ``io_path_for()`` answers for a given buffer and size. What really
        ran, including which of cuFile's own paths, is in ``gpufile.observe()``.

        Raises
        ------
        gpufile.CufileError
            ``compat_mode`` is OFF and cuFile cannot be used on a machine with a GPU (the
            message says why).
        """
        return self._file.io_path()

    def io_path_for(self, buf: Any, size: int | None = None) -> tuple[str, str]:
        """``(backend, reason)`` of a request of ``size`` bytes into (or from) ``buf``.

        Parameters
        ----------
        buf : buffer
            A host buffer (buffer protocol) or a device array.
        size : int, optional
            Bytes of the request; all of ``buf`` by default.

        Returns
        -------
        tuple of (str, str)
            The backend (``"gpufile-posix"`` or ``"cufile"``) and the reason.

        Raises
        ------
        TypeError, ValueError
            ``buf`` is not a usable buffer, or ``size`` is bad.
        gpufile.CufileError
            ``compat_mode`` is OFF and cuFile cannot be used.
        """
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
        """Read ``size`` bytes at ``file_offset`` into ``buf``, in parallel; block until done.

        The GIL is released while the workers run.

        Parameters
        ----------
        buf : buffer
            A C-contiguous host buffer (NumPy array, bytearray, memoryview) or device array
            (``__cuda_array_interface__``: CuPy, PyTorch, Numba; or ``__dlpack__``).
        size : int, optional
            Bytes to read; all of ``buf`` by default.
        file_offset : int, optional
            Where in the file to start, 0 by default.
        task_size : int, optional
            Largest piece handed to one worker; the ``task_size`` setting by default.

        Returns
        -------
        int
            The bytes read (``size``).

        Raises
        ------
        gpufile.EndOfFileError
            The range runs past the end of the file; raised before any byte is copied (KvikIO
            raises too, after a partial read).
        ValueError
            Closed file, ``buf`` smaller than ``size``, non-contiguous ``buf``, negative sizes
            or offsets, ``task_size`` 0.
        TypeError
            ``buf`` is not a buffer, or is read-only.
        io.UnsupportedOperation
            The file was opened ``"w"``.
        OSError
            The read itself failed (errno and file name set).
        gpufile.CudaError, gpufile.CufileError
            A device transfer failed.

        Examples
        --------
        >>> buf = np.empty(1 << 20, dtype=np.uint8)
        >>> with gpufile.CuFile("data.bin") as f:                   # doctest: +SKIP
        ...     n = f.read(buf, size=4096, file_offset=8192)
        """
        return self._file.read(buf, size, file_offset, task_size)

    def write(self, buf: Any, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> int:
        """Write ``size`` bytes of ``buf`` at ``file_offset``, in parallel; block until done.

        Parameters
        ----------
        buf : buffer
            A C-contiguous host buffer (NumPy array, bytearray, memoryview, bytes) or device array
            (``__cuda_array_interface__``: CuPy, PyTorch, Numba; or ``__dlpack__``).
        size : int, optional
            Bytes to write; all of ``buf`` by default.
        file_offset : int, optional
            Where in the file to start, 0 by default.
        task_size : int, optional
            Largest piece handed to one worker; the ``task_size`` setting by default.

        Returns
        -------
        int
            The bytes written.

        Raises
        ------
        ValueError
            Closed file, ``buf`` smaller than ``size``, non-contiguous ``buf``, bad numbers.
        TypeError
            ``buf`` is not a buffer.
        io.UnsupportedOperation
            The file was opened ``"r"``.
        OSError
            The write itself failed (``ENOSPC``, ``EIO``, ...; errno and file name set).
        gpufile.CudaError, gpufile.CufileError
            A device transfer failed.
        """
        return self._file.write(buf, size, file_offset, task_size)

    def pread(self, buf: Any, size: int | None = None, file_offset: int = 0,
              task_size: int | None = None) -> IOFuture:
        """Start a read and return at once; the arguments are ``read()``'s.

        Bad arguments raise here; errors of the transfer itself are raised by
        ``IOFuture.get()``.

        Returns
        -------
        IOFuture
            ``.get()`` waits and returns the bytes read; ``await`` works too.

        Examples
        --------
        >>> fut = f.pread(buf)                                      # doctest: +SKIP
        >>> ...                                                     # other work meanwhile
        >>> n = fut.get()                                           # doctest: +SKIP
        """
        return IOFuture(self._file.pread(buf, size, file_offset, task_size))

    def pwrite(self, buf: Any, size: int | None = None, file_offset: int = 0,
               task_size: int | None = None) -> IOFuture:
        """Start a write and return at once; the arguments are ``write()``'s.

        Returns
        -------
        IOFuture
            ``.get()`` waits and returns the bytes written.
        """
        return IOFuture(self._file.pwrite(buf, size, file_offset, task_size))

    def read_ranges(self, buf: Any, file_offsets: Any, sizes: Any,
                    buf_offsets: Any = None) -> IOFuture:
        """Read many ranges of the file into one buffer as one request (gpufile's addition).

        Range ``i`` is ``sizes[i]`` bytes at ``file_offsets[i]`` in the file, landing at
        ``buf_offsets[i]`` in ``buf``. The ranges run as a few groups per worker, through
        io_uring where the kernel allows it (see ``IOFuture.report()``); a device buffer is
        filled from pinned memory with one copy per contiguous run of it.

        Parameters
        ----------
        buf : host or device buffer
            The destination (NumPy, bytearray, CuPy, PyTorch, ...), C-contiguous, writable.
        file_offsets : array or sequence of int
            A NumPy (or any buffer-protocol) integer array is read without a Python object per
            range; a device array (CuPy) is copied to the host first; a list works too.
        sizes : array or sequence of int, or int
            Bytes of each range; one int for all.
        buf_offsets : array or sequence of int, optional
            Where each range lands; by default the ranges are packed one after the other from
            the buffer's start, in the order given.

        Returns
        -------
        IOFuture
            ``get()`` returns the bytes read; ``report()`` says how they move.

        Raises
        ------
        ValueError
            Arrays of different lengths; a negative entry (``OutOfRangeError``); a range past
            the buffer; two ranges overlapping in the buffer. Nothing is read.
        TypeError
            Entries that are not integers (floats, strings, None).
        gpufile.EndOfFileError
            A range past the end of the file. Nothing is read.

        Examples
        --------
        >>> offsets = np.array([0, 8192, 4096])                      # doctest: +SKIP
        >>> f.read_ranges(buf, offsets, 4096).get()                  # doctest: +SKIP
        12288
        """
        return IOFuture(self._file.read_ranges(
            buf, _host_ints(file_offsets), _host_ints(sizes), _host_ints(buf_offsets)))

    def write_ranges(self, buf: Any, file_offsets: Any, sizes: Any,
                     buf_offsets: Any = None) -> IOFuture:
        """Write many ranges of one buffer to the file as one request (gpufile's addition).

        Range ``i`` is ``sizes[i]`` bytes of ``buf`` at ``buf_offsets[i]`` (packed by
        default), written at ``file_offsets[i]``. Arguments, report and errors as for
        ``read_ranges``, except that ranges may share buffer bytes and must not overlap in
        the file (which write lands last would not be defined).

        Returns
        -------
        IOFuture
            ``get()`` returns the bytes written.
        """
        return IOFuture(self._file.write_ranges(
            buf, _host_ints(file_offsets), _host_ints(sizes), _host_ints(buf_offsets)))

    def read_rows(self, out: Any, rows: Any, row_bytes: int, row_stride: int | None = None,
                  base_offset: int = 0) -> IOFuture:
        """Gather rows of a fixed-size table into ``out`` (gpufile's addition).

        Row ``rows[i]`` is the ``row_bytes`` bytes at ``base_offset + rows[i] * row_stride``
        in the file; it lands at ``i * row_bytes`` in ``out``, so ``out`` holds the rows in
        the order asked, packed (an embedding lookup: ``out`` of shape ``(len(rows), dim)``).

        Parameters
        ----------
        out : host or device buffer
            At least ``len(rows) * row_bytes`` bytes.
        rows : array or sequence of int
            Row indices (any order; repeats allowed).
        row_bytes : int
            Bytes of one row.
        row_stride : int, optional
            Bytes from one row's start to the next in the file (default ``row_bytes``).
        base_offset : int, optional
            Where row 0 starts in the file (a header before the table).

        Returns
        -------
        IOFuture
            ``get()`` returns the bytes read; ``report()`` as for ``read_ranges``.

        Raises
        ------
        ValueError, TypeError, gpufile.EndOfFileError
            As for ``read_ranges`` (a row past the end of the file, ``out`` too small,
            ``row_bytes`` 0); nothing is read.
        """
        return IOFuture(
            self._file.read_rows(out, _host_ints(rows), row_bytes, row_stride, base_offset))

    def raw_read(self, buf: Any, size: int | None = None, file_offset: int = 0,
                 dev_offset: int = 0) -> int:
        """Read in one request, not split into tasks (one ``cuFileRead`` on the cuFile path).

        Parameters
        ----------
        buf : buffer
            A host buffer or a device array.
        size : int, optional
            Bytes to transfer; the rest of ``buf`` after ``dev_offset`` by default.
        file_offset : int, optional
            Where in the file, 0 by default.
        dev_offset : int, optional
            Where in ``buf``, in bytes, 0 by default.

        Returns
        -------
        int
            The bytes read.

        Raises
        ------
        gpufile.EndOfFileError, ValueError, TypeError, OSError, gpufile.CufileError
            As ``read()``.
        """
        return self._file.raw_read(buf, size, file_offset, dev_offset)

    def raw_write(self, buf: Any, size: int | None = None, file_offset: int = 0,
                  dev_offset: int = 0) -> int:
        """Write in one request, not split into tasks (one ``cuFileWrite`` on the cuFile path).

        Parameters
        ----------
        buf : buffer
            A host buffer or a device array.
        size : int, optional
            Bytes to transfer; the rest of ``buf`` after ``dev_offset`` by default.
        file_offset : int, optional
            Where in the file, 0 by default.
        dev_offset : int, optional
            Where in ``buf``, in bytes, 0 by default.

        Returns
        -------
        int
            The bytes written.

        Raises
        ------
        ValueError, TypeError, OSError, gpufile.CufileError
            As ``write()``.
        """
        return self._file.raw_write(buf, size, file_offset, dev_offset)

    def raw_read_async(self, buf: Any, stream: Any, size: int | None = None,
                       file_offset: int = 0, dev_offset: int = 0) -> IOFutureStream:
        """Stream-ordered ``raw_read()``, queued on ``stream``; returns at once.

        The read starts once the work queued on ``stream`` before the call has finished, and
        the work queued on ``stream`` after the call waits for the read's end (a kernel queued
        next sees the bytes). The calling thread does not wait for either.

        Parameters
        ----------
        buf : buffer
            The destination: a device array (or host memory).
        stream : int or stream object
            A ``CUstream`` handle, a CuPy/Numba stream or a PyTorch stream. The stream given
            orders the read; the array's own ``__cuda_array_interface__`` stream is not waited
            for.
        size, file_offset, dev_offset : int, optional
            As ``raw_read()``.

        Returns
        -------
        IOFutureStream
            ``check_bytes_done()`` (or ``get()``, ``await``) waits for the read and gives the
            bytes read; ``stream_order`` says how the stream waits for it.

        Raises
        ------
        ValueError, TypeError
            Bad arguments (as ``raw_read()``), a closed file: raised here, nothing queued.
        gpufile.CudaError
            The stream cannot take the work (an invalid handle): nothing queued.

        Notes
        -----
        Errors of the read itself (past the end of the file as it is when the stream gets to
        the read, a failed ``pread``) are raised by ``check_bytes_done()``; the stream's later
        work is let go all the same, and finds the buffer as the failed read left it. The buffer
        and the file are held until the read has ended, even if the future is dropped.
        """
        return IOFutureStream(self._file.raw_read_async(
            buf, _stream_handle(stream), size, file_offset, dev_offset))

    def raw_write_async(self, buf: Any, stream: Any, size: int | None = None,
                        file_offset: int = 0, dev_offset: int = 0) -> IOFutureStream:
        """Stream-ordered ``raw_write()``, queued on ``stream``; returns at once.

        The stream copies ``buf`` into pinned memory once the work queued on it before the
        call (the kernel producing the data) has finished, and goes on: the work queued after
        the call may overwrite ``buf`` at once. The file write follows the copy; the stream's
        next stream-ordered transfer starts after it. The arguments, result and errors are
        ``raw_read_async()``'s.

        Returns
        -------
        IOFutureStream
            ``check_bytes_done()`` gives the bytes written.
        """
        return IOFutureStream(self._file.raw_write_async(
            buf, _stream_handle(stream), size, file_offset, dev_offset))


def _host_ints(values: Any) -> Any:
    """A device array of offsets or sizes (CuPy, or anything CuPy takes) as a host array, in
    one copy; anything else as it is."""
    if values is None or not hasattr(values, "__cuda_array_interface__"):
        return values
    try:
        import cupy
    except ImportError:
        raise TypeError("offsets and sizes in device memory need CuPy to be copied to the host; "
                        "pass a NumPy array or a list") from None
    return cupy.asnumpy(cupy.asarray(values))


def _batch_entries(entries: Any) -> list:
    out = []
    for e in entries:
        try:
            file, buf, size, file_offset = e
        except (TypeError, ValueError):
            raise TypeError(
                f"batch entries are (file, buf, size, file_offset), got {e!r}") from None
        if isinstance(file, CuFile):
            file = file._file
        elif not isinstance(file, _native.NativeFile):
            file = os.fspath(file)
        out.append((file, buf, size, file_offset))
    return out


def _submit_batch(entries: Any, write: bool) -> IOFuture:
    """The batch's requests queued (the notices their planning made are logged as the call
    returns)."""
    return IOFuture(_native.submit_batch(_batch_entries(entries), write))


def read_batch(entries: Any) -> IOFuture:
    """Reads many files (or ranges) as one stream of requests (gpufile's addition).

    Every request is checked and planned before any starts, then all are queued back to back,
    so the workers go from one file to the next with no gap; paths are opened for you, each
    path once however many entries name it.

    Parameters
    ----------
    entries : iterable of (file, buf, size, file_offset)
        ``file`` is a ``CuFile`` or a path; ``buf`` host or device memory; ``size`` bytes
        (``None``: the whole buffer); ``file_offset`` where to start in the file.

    Returns
    -------
    IOFuture
        ``get()`` returns the total bytes read, or raises the first error once every request
        has ended (no worker touches any buffer afterwards).

    Raises
    ------
    TypeError, ValueError, OSError
        A malformed entry, a bad buffer or range, a file that does not open, two entries
        whose destinations overlap (``ValueError`` "requests i and j of the batch overlap in
        the buffer": entry ``i`` is request ``i``): before any request starts.

    Examples
    --------
    >>> bufs = [cupy.empty(4 << 20, dtype=cupy.uint8) for _ in paths]   # doctest: +SKIP
    >>> gpufile.read_batch([(p, b, None, 0) for p, b in zip(paths, bufs)]).get()  # doctest: +SKIP
    """
    return _submit_batch(entries, False)


def write_batch(entries: Any) -> IOFuture:
    """Writes many buffers to existing files as one stream of requests (the twin of
    ``read_batch``; paths are opened with ``"r+"``).

    Parameters
    ----------
    entries : iterable of (file, buf, size, file_offset)
        As for ``read_batch``; ``file`` must exist (or be a ``CuFile`` opened for writing).

    Returns
    -------
    IOFuture
        ``get()`` returns the total bytes written, or raises the first error.

    Raises
    ------
    ValueError
        Two entries that write the same bytes of one file (whatever their buffers; two handles
        of one file are one file): "requests i and j of the batch write the same bytes of
        PATH (bytes a..b)", before any request starts.
    """
    return _submit_batch(entries, True)
