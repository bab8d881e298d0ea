"""Dask arrays read from and written to raw binary files by gpufile.

How to use:

1. ``x = gpufile.dask.read_array("data.bin", shape, dtype, chunks)`` — a lazy ``dask.array`` over
   the C-order array stored at ``offset`` in the file; ``like=cupy.empty(())`` gives CuPy blocks.
2. ``s = gpufile.dask.read_stack(paths, shape, dtype)`` — one such array per file, stacked on a
   new axis 0 (one block per file unless ``chunks`` says otherwise).
3. ``gpufile.dask.to_file(x, "out.bin")`` — writes each block at its byte offset, in parallel;
   ``compute=False`` returns the lazy store instead, as ``dask.array.store``/``to_zarr`` do.

Each block is read by the worker that computes it, with :class:`gpufile.CuFile`: the task graph
holds only the path, offsets, shape and dtype (a few hundred bytes, picklable), never data, so
the arrays work with the threaded scheduler and with ``dask.distributed`` worker processes alike
(``dask_cuda.LocalCUDACluster``: one worker per GPU, each block lands on its worker's GPU).

A block that is not contiguous in the file (a C-order file chunked along a trailing axis) is read
as its contiguous byte runs — each maximal, adjacent runs merged — all submitted before any is
waited for. Where runs are short (a column block: one run per row), reading whole rows and
cutting the block out of them is cheaper than one request per run; the reader then does so,
through a scratch array of at most 64 MiB (or the block's size). Writes are always exact runs
(other blocks' bytes are never rewritten), so column-chunked writes make one request per run:
choose chunks that span the trailing axes where you can.

Zarr: ``dask.array.from_zarr`` over a ``gpufile.zarr.GDSStore`` will read zarr arrays through
gpufile once that store (a separate module) lands; nothing here is needed for it.

Requires ``dask[array]`` (and ``distributed`` for clusters); CuPy for device blocks. The arrays
are built with ``dask.array.from_array`` and written with ``dask.array.store``, so they follow
dask's conventions (names, ``meta``, ``compute=False``); dask's experimental array query planning
(``array.query-planning: True``) reads them but does not implement ``store`` yet.
"""

from __future__ import annotations

import math
import operator
import os
import stat
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks
from dask.base import tokenize

from .cufile import CuFile

__all__ = ["read_array", "read_stack", "to_file"]

PathLike = str | os.PathLike[str]


# --- arguments --------------------------------------------------------------------------------


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(n < 0 for n in dims):
        raise ValueError(f"shape must not have negative dimensions, got {dims}")
    return dims


def _dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype {dt} holds Python objects (pointers), which cannot be read from "
                        "or written to a file as raw bytes")
    if dt.itemsize == 0:
        raise ValueError(f"dtype {dt} has no size")
    return dt


def _offset(offset: Any) -> int:
    try:
        off = operator.index(offset)
    except TypeError:
        raise TypeError(f"offset must be an int, got {type(offset).__name__}") from None
    if off < 0:
        raise ValueError(f"offset must be >= 0, got {off}")
    return off


def _kind(like: Any) -> str:
    """``"numpy"`` or ``"cupy"``: the array type of the blocks."""
    if like is None:
        return "numpy"
    if isinstance(like, da.Array):
        like = like._meta
    module = type(like).__module__.split(".")[0]
    if module in ("numpy", "cupy"):
        return module
    raise TypeError(f"like must be a NumPy or CuPy array (or a dask array of one), "
                    f"got {type(like).__module__}.{type(like).__name__}")


def _module(kind: str) -> Any:
    if kind == "cupy":
        import cupy

        return cupy
    return np


# --- byte ranges ------------------------------------------------------------------------------


def _runs(shape: tuple[int, ...], itemsize: int, lo: Sequence[int],
          hi: Sequence[int]) -> tuple[np.ndarray, int]:
    """The contiguous byte runs of the box ``[lo, hi)`` of a C-order array of ``shape``.

    Returns ``(offsets, run_bytes)``: each run's byte offset from the array's start, ascending,
    and the length of every run. The box's C-order bytes are the runs, one after another. Each run
    is maximal: the trailing axes the box spans whole belong to it, and so does the last axis it
    does not span whole. ``offsets`` has one entry per index of the axes before that one.
    """
    ext = [h - l for l, h in zip(lo, hi)]
    if any(e == 0 for e in ext):
        return np.zeros(0, dtype=np.int64), 0
    # Strides in elements of the file's C order.
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    j = len(shape) - 1
    while j >= 0 and ext[j] == shape[j]:
        j -= 1
    if j < 0:  # the whole array: one run
        return np.zeros(1, dtype=np.int64), math.prod(shape) * itemsize
    run = ext[j] * strides[j] * itemsize
    offsets = np.array([lo[j] * strides[j]], dtype=np.int64)
    # Outer axes, last first, so that the result comes out in C (ascending) order.
    for d in range(j - 1, -1, -1):
        idx = np.arange(lo[d], hi[d], dtype=np.int64) * strides[d]
        offsets = (idx[:, None] + offsets[None, :]).reshape(-1)
    return offsets * itemsize, run


# One more request costs about as much as reading this many more bytes from the page cache
# (docs/performance.md, "Dask reads: a request against bytes").
_REQUEST_COST_BYTES = 256 << 10
# A widened box is read into a scratch array of its size: never more than this (or the block).
_MAX_SCRATCH_BYTES = 64 << 20


def _read_plan(shape: tuple[int, ...], itemsize: int, lo: Sequence[int],
               hi: Sequence[int]) -> tuple[list[int], list[int]]:
    """The box to read for ``[lo, hi)``: itself, or widened to whole trailing axes.

    A box that cuts the last axes is many short runs (a column block: one run per row). Reading
    whole rows instead costs bytes but saves requests; the cheaper plan wins, counting a request
    as ``_REQUEST_COST_BYTES``, and the widened box never exceeds ``_MAX_SCRATCH_BYTES`` or the
    block's own size, whichever is larger.
    """
    n = len(shape)
    ext = [h - l for l, h in zip(lo, hi)]
    j = n - 1
    while j >= 0 and ext[j] == shape[j]:
        j -= 1
    if j <= 0 or 0 in ext:
        return list(lo), list(hi)  # one run already
    block = math.prod(ext) * itemsize
    best, best_cost = (list(lo), list(hi)), math.prod(ext[:j]) * _REQUEST_COST_BYTES + block
    for a in range(j - 1, -1, -1):  # whole axes after a
        lo2, hi2 = list(lo[:a + 1]) + [0] * (n - a - 1), list(hi[:a + 1]) + list(shape[a + 1:])
        nbytes = math.prod(h - l for l, h in zip(lo2, hi2)) * itemsize
        if nbytes > max(block, _MAX_SCRATCH_BYTES):
            break  # widening further only grows it
        cost = math.prod(ext[:a]) * _REQUEST_COST_BYTES + nbytes
        if cost < best_cost:
            best, best_cost = (lo2, hi2), cost
    return best


def _read_exact(f: CuFile, base: int, shape: tuple[int, ...], dtype: np.dtype, xp: Any,
                lo: Sequence[int], hi: Sequence[int]) -> Any:
    """The box ``[lo, hi)`` read as its runs, all in flight at once, into a new array."""
    out = xp.empty(tuple(h - l for l, h in zip(lo, hi)), dtype=dtype)
    offsets, run = _runs(shape, dtype.itemsize, lo, hi)
    if run == 0:
        return out
    flat = out.reshape(-1).view(xp.uint8)
    if len(offsets) == 1:
        f.read(flat, file_offset=base + int(offsets[0]))
        return out
    futures = [f.pread(flat[i * run:(i + 1) * run], file_offset=base + o)
               for i, o in enumerate(offsets.tolist())]
    for fut in futures:
        fut.get()
    return out


def _read_box(path: str, base: int, shape: tuple[int, ...], dtype: np.dtype, kind: str,
              lo: Sequence[int], hi: Sequence[int]) -> Any:
    """The box ``[lo, hi)`` of the array at byte ``base`` of ``path``, as a new C-order array."""
    xp = _module(kind)
    lo2, hi2 = _read_plan(shape, dtype.itemsize, lo, hi)
    with CuFile(path, "r") as f:
        box = _read_exact(f, base, shape, dtype, xp, lo2, hi2)
    if (lo2, hi2) == (list(lo), list(hi)):
        return box
    return box[tuple(slice(l - l2, h - l2) for l, h, l2 in zip(lo, hi, lo2))].copy(order="C")


def _write_box(path: str, base: int, shape: tuple[int, ...], dtype: np.dtype,
               lo: Sequence[int], hi: Sequence[int], block: Any) -> None:
    """Writes ``block`` (the box ``[lo, hi)``) into the array at byte ``base`` of ``path``."""
    xp = _module(_kind(block))
    block = xp.asarray(block, dtype=dtype)
    if not block.flags.c_contiguous:
        block = block.copy(order="C")
    offsets, run = _runs(shape, dtype.itemsize, lo, hi)
    if run == 0:
        return
    flat = block.reshape(-1).view(xp.uint8)
    with CuFile(path, "r+") as f:
        futures = [f.pwrite(flat[i * run:(i + 1) * run], file_offset=base + int(o))
                   for i, o in enumerate(offsets.tolist())]
        for fut in futures:
            fut.get()


def _expand(key: Any, ndim: int) -> tuple:
    """``key`` as a tuple, its Ellipsis (if any) replaced by whole-axis slices."""
    if not isinstance(key, tuple):
        key = (key,)
    for i, k in enumerate(key):
        if k is Ellipsis:
            return key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
    return key


def _selected_shape(lo: Sequence[int], hi: Sequence[int], post: tuple) -> tuple[int, ...]:
    """Shape of ``box[post]`` for the box ``[lo, hi)``."""
    return tuple(len(range(0, h - l, abs(p.step or 1))) for l, h, p in zip(lo, hi, post)
                 if isinstance(p, slice))


def _basic_index(key: Any, shape: tuple[int, ...]) -> tuple[list[int], list[int], tuple]:
    """``key`` (ints, slices, one Ellipsis) → the box to read and the index that takes the
    selection out of it: ``(lo, hi, post)``."""
    key = _expand(key, len(shape))
    if len(key) > len(shape):
        raise IndexError(f"too many indices for an array of {len(shape)} dimensions")
    key = key + (slice(None),) * (len(shape) - len(key))
    lo, hi, post = [], [], []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            r = range(*k.indices(n))
            if len(r) == 0:
                lo.append(0), hi.append(0), post.append(slice(None))
            else:
                first, last = min(r[0], r[-1]), max(r[0], r[-1])
                lo.append(first), hi.append(last + 1)
                post.append(slice(None) if r.step == 1 else slice(None, None, r.step))
            continue
        try:
            i = operator.index(k)
        except TypeError:
            raise TypeError(f"gpufile.dask arrays take ints and slices as indices, got "
                            f"{type(k).__name__}") from None
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for an axis of size {n}")
        i %= n
        lo.append(i), hi.append(i + 1), post.append(0)
    return lo, hi, tuple(post)


# --- array-likes that dask slices ---------------------------------------------------------------


class _RawArray:
    """The C-order array at byte ``base`` of ``path``: what ``dask.array.from_array`` slices.

    Small and picklable (path, offset, shape, dtype); each ``__getitem__`` reads exactly the
    bytes of its box with gpufile, on the process that calls it.
    """

    def __init__(self, path: str, base: int, shape: tuple[int, ...], dtype: np.dtype, kind: str,
                 stamp: tuple[int, int]) -> None:
        self.path, self.base, self.shape, self.dtype, self.kind = path, base, shape, dtype, kind
        self.stamp = stamp  # (size, mtime_ns) when opened: a rewritten file gets a new dask name

    @classmethod
    def open(cls, path: PathLike, base: int, shape: tuple[int, ...], dtype: np.dtype,
             kind: str) -> "_RawArray":
        path = os.path.abspath(os.fspath(path))
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", path)
        need = math.prod(shape) * dtype.itemsize
        if base + need > st.st_size:
            raise ValueError(f"{path}: an array of shape {shape} and dtype {dtype} at offset "
                             f"{base} needs bytes {base}..{base + need} ({need} bytes), but the "
                             f"file has {st.st_size} bytes")
        return cls(path, base, shape, dtype, kind, (st.st_size, st.st_mtime_ns))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __dask_tokenize__(self) -> tuple:
        return ("gpufile.dask._RawArray", self.path, self.base, self.shape, self.dtype.str,
                self.kind, self.stamp)

    def __getitem__(self, key: Any) -> Any:
        lo, hi, post = _basic_index(key, self.shape)
        box = _read_box(self.path, self.base, self.shape, self.dtype, self.kind, lo, hi)
        if all(p == slice(None) for p in post):
            return box
        return box[post + (Ellipsis,)].copy(order="C")

    def __repr__(self) -> str:
        return (f"<gpufile.dask raw array {self.path!r} offset={self.base} shape={self.shape} "
                f"dtype={self.dtype}>")


class _RawStack:
    """Several :class:`_RawArray` of one shape and dtype, stacked on a new axis 0."""

    def __init__(self, parts: list[_RawArray]) -> None:
        self.parts = parts
        self.shape = (len(parts),) + parts[0].shape
        self.dtype = parts[0].dtype
        self.kind = parts[0].kind

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __dask_tokenize__(self) -> tuple:
        return ("gpufile.dask._RawStack", [p.__dask_tokenize__() for p in self.parts])

    def __getitem__(self, key: Any) -> Any:
        key = _expand(key, self.ndim)
        head, rest = (key[0], key[1:]) if key else (slice(None), ())
        if isinstance(head, slice):
            picked = [self.parts[i][rest] for i in range(*head.indices(len(self.parts)))]
            if picked:
                return _module(self.kind).stack(picked)
            lo, hi, post = _basic_index(rest, self.parts[0].shape)
            return _meta(self.kind, 1, self.dtype).reshape((0,) + _selected_shape(lo, hi, post))
        i = operator.index(head)
        if not -len(self.parts) <= i < len(self.parts):
            raise IndexError(f"index {i} is out of bounds for an axis of size {len(self.parts)}")
        return self.parts[i][rest]

    def __repr__(self) -> str:
        return f"<gpufile.dask stack of {len(self.parts)} raw arrays shape={self.shape}>"


def _meta(kind: str, ndim: int, dtype: np.dtype) -> Any:
    return _module(kind).empty((0,) * ndim, dtype=dtype)


# --- public -----------------------------------------------------------------------------------


def read_array(path: PathLike, shape: Any, dtype: Any, chunks: Any, offset: int = 0,
               like: Any = None) -> da.Array:
    """A dask array over the C-order array of ``shape`` and ``dtype`` at ``offset`` in ``path``.

    Each block is read with :class:`gpufile.CuFile` by the worker that computes it: exactly its
    byte ranges, as one request when it is contiguous in the file, else as its contiguous runs.
    The graph holds the absolute path, offset, shape and dtype only.

    Parameters
    ----------
    path : str or os.PathLike
        The file. Made absolute here, so workers need the same file system view.
    shape : int or tuple of int
        Shape of the array stored in the file (C order, no padding).
    dtype : numpy dtype-like
        Element type, byte order included (``">f4"`` reads big-endian floats into NumPy blocks).
    chunks : int, tuple, dict or "auto"
        Block sizes, as :func:`dask.array.from_array` takes them.
    offset : int, default 0
        Byte offset of the array's first element (a header's length, say).
    like : numpy.ndarray, cupy.ndarray or dask array of one, optional
        The block type: CuPy blocks (on each worker's current GPU) when ``like`` is a CuPy
        array, NumPy blocks otherwise. Sets the dask array's ``meta``.

    Returns
    -------
    dask.array.Array
        Lazy; its name changes when the file's size or modification time does.

    Raises
    ------
    FileNotFoundError, IsADirectoryError, PermissionError
        ``path`` is not a readable file (checked here, not at compute time).
    ValueError
        The array does not fit in the file (the message names the file, the bytes needed and the
        file's size); ``offset`` or a dimension is negative; ``chunks`` do not tile ``shape``.
    TypeError
        ``shape`` or ``offset`` is not integral; an object dtype; ``like`` is neither NumPy nor
        CuPy.
    """
    shape, dt, base, kind = _shape(shape), _dtype(dtype), _offset(offset), _kind(like)
    src = _RawArray.open(path, base, shape, dt, kind)
    return _from_source(src, chunks)


def read_stack(paths: Sequence[PathLike], shape: Any, dtype: Any, chunks: Any = None,
               offset: int | Sequence[int] = 0, like: Any = None) -> da.Array:
    """One array of ``shape`` and ``dtype`` per file, stacked on a new axis 0.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        The files, in stacking order; at least one.
    shape : int or tuple of int
        Shape of the array in each file.
    dtype : numpy dtype-like
        Element type of every file.
    chunks : int, tuple, dict or "auto", optional
        Block sizes within one file (axis 0 of the result has one block per file). Default: one
        block per file, as :func:`dask.array.from_npy_stack` makes.
    offset : int or sequence of int, default 0
        Byte offset of the array in every file, or one offset per file.
    like : numpy.ndarray, cupy.ndarray or dask array of one, optional
        The block type, as in :func:`read_array`.

    Returns
    -------
    dask.array.Array
        Of shape ``(len(paths),) + shape``.

    Raises
    ------
    ValueError
        No paths; ``offset`` has a length other than ``len(paths)``; and as :func:`read_array`
        for every file (checked here, every file).
    FileNotFoundError, IsADirectoryError, PermissionError, TypeError
        As :func:`read_array`.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError("paths must be a sequence of paths; use read_array for one file")
    paths = list(paths)
    if not paths:
        raise ValueError("read_stack needs at least one path")
    shape, dt, kind = _shape(shape), _dtype(dtype), _kind(like)
    if isinstance(offset, Sequence):
        bases = [_offset(o) for o in offset]
        if len(bases) != len(paths):
            raise ValueError(f"offset has {len(bases)} entries for {len(paths)} paths")
    else:
        bases = [_offset(offset)] * len(paths)
    parts = [_RawArray.open(p, b, shape, dt, kind) for p, b in zip(paths, bases)]
    per_file = normalize_chunks(shape if chunks is None else chunks, shape, dtype=dt)
    return _from_source(_RawStack(parts), ((1,) * len(parts),) + per_file)


def _from_source(src: _RawArray | _RawStack, chunks: Any) -> da.Array:
    chunks = normalize_chunks(chunks, src.shape, dtype=src.dtype)
    return da.from_array(src, chunks=chunks, name="gpufile-read-" + tokenize(src, chunks),
                         lock=False, asarray=False, fancy=False,
                         meta=_meta(src.kind, len(src.shape), src.dtype))


class _FileTarget:
    """What ``dask.array.store`` writes into: ``target[region] = block`` writes the block's bytes
    at their offsets. Small and picklable."""

    def __init__(self, path: str, base: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.path, self.base, self.shape, self.dtype = path, base, shape, dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __setitem__(self, key: Any, block: Any) -> None:
        lo, hi, post = _basic_index(key, self.shape)
        if any(p != slice(None) for p in post):
            raise IndexError("gpufile.dask writes whole boxes (slices of step 1) only")
        if tuple(block.shape) != tuple(h - l for l, h in zip(lo, hi)):
            raise ValueError(f"block of shape {tuple(block.shape)} for region {key}")
        _write_box(self.path, self.base, self.shape, self.dtype, lo, hi, block)


def to_file(array: da.Array, path: PathLike, offset: int = 0, compute: bool = True,
            **kwargs: Any) -> Any:
    """Writes ``array`` to ``path`` in C order at ``offset``, each block by the worker holding it.

    The file is created if missing and sized once, here, to end at ``offset + array.nbytes``
    (longer files are cut there; bytes before ``offset`` are kept, zeros where there were
    none); then every block is written at its byte offset, in parallel, each through its own
    ``CuFile(path, "r+")``. NumPy and CuPy blocks alike.

    Parameters
    ----------
    array : dask.array.Array
        What to write; its chunk sizes must be known.
    path : str or os.PathLike
        The file. Made absolute here, so workers need the same file system view.
    offset : int, default 0
        Byte offset of the array's first element.
    compute : bool, default True
        ``True``: write now and return ``None``. ``False``: size the file now and return the lazy
        store (what :func:`dask.array.store` returns with ``compute=False``, as ``to_zarr``
        does); ``dask.compute(result)`` writes the blocks.
    **kwargs
        Passed to ``dask.compute`` when ``compute`` is true (``scheduler=...``), as
        :func:`dask.array.store` passes them.

    Returns
    -------
    None or dask.array.Array
        ``None`` once written; the lazy store when ``compute=False``.

    Raises
    ------
    TypeError
        ``array`` is not a dask array; an object dtype; ``offset`` not integral.
    ValueError
        Negative ``offset``; unknown chunk sizes (``compute_chunk_sizes()`` first).
    OSError
        The file cannot be created or sized (its subclasses: ``PermissionError``, ...).
    """
    if not isinstance(array, da.Array):
        raise TypeError(f"to_file writes a dask array, got {type(array).__name__}; "
                        "wrap it with dask.array.from_array")
    dt, base = _dtype(array.dtype), _offset(offset)
    if any(math.isnan(n) for n in array.shape):
        raise ValueError(f"array has unknown chunk sizes (shape {array.shape}); call "
                         "array.compute_chunk_sizes() before to_file")
    shape = tuple(int(n) for n in array.shape)
    path = os.path.abspath(os.fspath(path))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        os.ftruncate(fd, base + math.prod(shape) * dt.itemsize)
    finally:
        os.close(fd)
    return da.store(array, _FileTarget(path, base, shape, dt), lock=False, compute=compute,
                    **kwargs)
