"""``numpy.fromfile`` and ``ndarray.tofile`` through gpufile, as ``kvikio.numpy``.

1. ``fromfile(path, dtype)`` reads a raw binary file into a new array: a NumPy array, or, with
   ``like=cupy.empty(())``, a CuPy array filled straight from the file (cuFile or gpufile's
   pinned bounce path; no NumPy copy on the way).
2. ``tofile(array, path)`` writes an array's bytes (C order) to a file.
3. ``LikeWrapper(like)`` routes NumPy's own ``np.fromfile(..., like=LikeWrapper(x))`` here, so
   code that calls ``numpy.fromfile`` (or ``cupy.fromfile``) reads through gpufile unchanged::

       import cupy, numpy as np
       from gpufile.numpy import LikeWrapper

       a = np.fromfile("data.bin", dtype="f4", like=LikeWrapper(cupy.empty(())))  # a CuPy array

Where gpufile differs from KvikIO 26.10 (and follows NumPy instead): with an open file object,
``offset`` counts from the file's current position and the position moves past the bytes read or
written (KvikIO ignores the position and, in ``tofile``, truncates the file); the bytes go to the
file the object has open, through its descriptor, even where its ``name`` now names another file
(KvikIO opens ``name`` again); ``tofile`` refuses a
file object not open for writing; a negative ``offset`` or a 0-sized / object dtype is a
``ValueError`` naming it. Text files (``sep != ""``) raise ``NotImplementedError``, as in KvikIO.
"""

from __future__ import annotations

import io
import operator
import os
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .cufile import CuFile

__all__ = ["FileLike", "LikeWrapper", "fromfile", "tofile"]


@runtime_checkable
class FileLike(Protocol):
    """An open file object backed by an OS-level file (it has ``fileno()`` and ``name``)."""

    def fileno(self) -> int: ...

    @property
    def name(self) -> Any: ...


class LikeWrapper:
    """Wraps an array so that NumPy's ``like=`` argument sends ``np.fromfile`` to gpufile.

    Every other NumPy function called with ``like=LikeWrapper(...)`` runs unchanged.

    Parameters
    ----------
    like : array_like
        The array whose type the result of ``np.fromfile`` takes (``cupy.empty(())`` for CuPy).

    Examples
    --------
    >>> np.arange(10).tofile("/tmp/myfile")
    >>> np.fromfile("/tmp/myfile", dtype=int, like=LikeWrapper(cupy.empty(())))
    array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """

    def __init__(self, like: ArrayLike) -> None:
        self._like = like

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func is not np.fromfile:
            return func(*args, **kwargs)
        return fromfile(*args, like=self._like, **kwargs)


def _index(name: str, value: Any) -> int:
    """``value`` as a Python int (NumPy integer scalars accepted); TypeError otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None


def _name_of(file: Any) -> str:
    """What messages call a path, a path-like or an open file object."""
    if isinstance(file, FileLike):
        name = file.name
        if isinstance(name, int):  # os.fdopen / open(fd): no path
            return f"<file descriptor {name}>"
        return os.fsdecode(name)
    if isinstance(file, (str, bytes, os.PathLike)):
        return os.fsdecode(file)
    raise TypeError(f"file must be a path or an open file object, not {type(file).__name__}")


def _open(file: Any, flags: str) -> CuFile:
    """A CuFile on ``file``: a path opened with ``flags``, or the very file an open file object
    has open, through its descriptor (its name may by now be another file, or none)."""
    name = _name_of(file)
    if isinstance(file, FileLike):
        return CuFile._of_descriptor(file.fileno(), name)
    return CuFile(name, flags)


def _position(file: Any) -> int | None:
    """The current position of an open file object (None for a path): its own ``tell()``, or
    for an object without one its descriptor's offset, which is what NumPy uses."""
    if not isinstance(file, FileLike):
        return None
    if hasattr(file, "flush"):
        file.flush()
    if hasattr(file, "tell"):
        return int(file.tell())
    return os.lseek(file.fileno(), 0, os.SEEK_CUR)


def _move_to(file: Any, position: int) -> None:
    """Moves an open file object past what was read or written, as NumPy does."""
    if hasattr(file, "seek"):
        file.seek(position)
    else:
        os.lseek(file.fileno(), position, os.SEEK_SET)


def fromfile(
    file: str | os.PathLike[str] | io.IOBase,
    dtype: DTypeLike = float,
    count: int = -1,
    sep: str = "",
    offset: int = 0,
    *,
    like: ArrayLike | None = None,
) -> Any:
    """Reads a binary file into a new array through gpufile (``numpy.fromfile``'s signature).

    Parameters
    ----------
    file : str, os.PathLike or file object
        The file; an open file object is read from its current position, which then moves past
        the bytes read.
    dtype : data-type
        Type of the items (their size and byte order); float64 by default.
    count : int
        Items to read; -1 (default) reads to the end of the file. Fewer are read where the file
        is shorter, as NumPy does.
    sep : str
        Only ``""`` (binary) is supported.
    offset : int
        Bytes to skip (from the file's current position for a file object).
    like : array_like, optional
        An array whose type the result takes (``cupy.empty(())`` reads into GPU memory);
        NumPy by default.

    Returns
    -------
    ndarray
        A 1-D array of ``count`` items (of ``like``'s array type).

    Raises
    ------
    NotImplementedError
        ``sep`` is not ``""`` (text files).
    FileNotFoundError
        The file does not exist.
    ValueError
        ``count`` below -1 or ``offset`` past the end of the file ("negative dimensions are not
        allowed", as NumPy and KvikIO say), a negative ``offset``, or a 0-sized or object dtype.
    TypeError
        ``count`` or ``offset`` is not an integer, or ``file`` is neither a path nor a file.
    """
    if sep != "":
        raise NotImplementedError("Non-default value of the `sep` argument is not supported")
    count = _index("count", count)
    offset = _index("offset", offset)
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise ValueError(f"cannot read into an array of dtype {dt} (object items are pointers)")
    if dt.itemsize == 0:
        raise ValueError(f"cannot read items of dtype {dt}: the items are 0-sized")
    if count < -1:
        raise ValueError(f"count={count}: negative dimensions are not allowed "
                         "(count is -1 for the whole file, or a number of items)")
    if offset < 0:
        raise ValueError(f"offset must not be negative, got {offset}")

    name = _name_of(file)
    position = _position(file)
    start = offset + (position or 0)
    with _open(file, "r") as f:
        nbytes = f._file.nbytes()
        if start > nbytes:
            raise ValueError(f"offset {start} is past the end of {name} ({nbytes} bytes): "
                             "negative dimensions are not allowed")
        available = (nbytes - start) // dt.itemsize
        count = available if count == -1 else min(count, available)

        if isinstance(like, LikeWrapper):  # its __array_function__ would send empty_like back
            like = like._like
        if like is None:
            out = np.empty(count, dtype=dt)
        else:
            out = np.empty_like(like, shape=(count,), dtype=dt)
        size = count * dt.itemsize
        if size:
            f.read(out, size=size, file_offset=start)
    if position is not None:
        _move_to(file, start + size)
    return out


def _contiguous(ary: Any) -> Any:
    """``ary`` as one C-contiguous block, of its own array type (CuPy stays on the GPU)."""
    if hasattr(ary, "__array_function__"):
        return np.ascontiguousarray(ary, like=ary)
    if hasattr(ary, "__cuda_array_interface__"):
        return ary  # a device array without NumPy dispatch: CuFile checks it is contiguous
    return np.ascontiguousarray(ary)


def tofile(ary: ArrayLike, file: str | os.PathLike[str] | io.IOBase) -> None:
    """Writes an array's bytes, in C order, to a file through gpufile (``ndarray.tofile``).

    A path is created or truncated. An open file object is written at its current position,
    which then moves past the bytes written (NumPy's behaviour; KvikIO truncates the file).
    Item sizes and byte order are not recorded: read the file back with :func:`fromfile` and
    the same dtype.

    Parameters
    ----------
    ary : array_like
        The data: a NumPy or CuPy array (any layout; non-contiguous arrays are copied first), or
        anything ``numpy.ascontiguousarray`` accepts.
    file : str, os.PathLike or file object
        Where to write.

    Raises
    ------
    io.UnsupportedOperation
        ``file`` is a file object not open for writing.
    TypeError
        ``file`` is neither a path nor a file object.
    """
    name = _name_of(file)
    if isinstance(file, FileLike) and hasattr(file, "writable") and not file.writable():
        raise io.UnsupportedOperation(f"{name} is not open for writing")
    data = _contiguous(ary)
    position = _position(file)
    with _open(file, "w") as f:
        written = f.write(data, file_offset=position or 0)
    if position is not None:
        _move_to(file, position + written)
