"""``safe_open``: a checkpoint opened for reading tensors one by one, and slices of them, with
``safetensors``' signature, errors and messages."""

from __future__ import annotations

import contextlib
import operator
import os
from typing import Any, Iterator

from .. import _native
from ..cufile import CuFile
from ._checkpoint import Checkpoint, PathArg, Tensor
from ._frameworks import BITS, DeviceLike, Framework, device_number
from ._jax import read_groups
from ._load import shaped

SafetensorError = _native.SafetensorError


class SliceError(SafetensorError, IndexError):
    """An index out of a tensor's range: ``safetensors``' ``SafetensorError`` (its message), also
    the ``IndexError`` NumPy raises for it."""

    def __str__(self) -> str:
        return Exception.__str__(self)


class Slice:
    """``safe_open(...).get_slice(name)``: shape and dtype without reading, and ``[...]`` to
    read part of the tensor."""

    def __init__(self, handle: "safe_open", ck: Checkpoint, t: Tensor) -> None:
        self._h = handle
        self._ck = ck  # read from after the handle's close too, as safetensors' slices are
        self._t = t

    def get_shape(self) -> list[int]:
        """The full tensor's shape."""
        return list(self._t.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype name ("BF16")."""
        return self._t.dtype

    def __getitem__(self, key: Any) -> Any:
        """Indexes as ``safetensors`` does (ints, slices, ``...``, ``[]``; out-of-range bounds
        are a ``SafetensorError``, not clipped), and with NumPy's steps (negative ones too).
        Only the bytes the index touches in every dimension are read (a block of columns: one
        range per row, one request), straight into the result's memory; a step in the last
        dimension reads the run that covers it. Sub-byte dtypes and ``framework="flax"`` read
        the rows of the first dimension the index touches. The result owns its memory."""
        t = self._t
        key = _checked(t, key)
        if self._h._fw.name == "flax" or t.dtype in BITS or not t.shape:
            rows, key = _row_range(t, key)
            return self._h._read(t, rows, key, self._ck)
        spans, dims = _spans(t, key)
        return self._h._read_block(t, spans, dims, self._ck)


def _spans(t: Tensor, key: tuple) -> tuple[list[tuple[int, int, int]], list[Any]]:
    """The block ``key`` (checked) touches as the core takes it, (start, count, step) per
    dimension with steps positive, and per dimension what is left to do in memory: None (an
    int: the dimension goes), else (step, reversed) of the slice."""
    spans: list[tuple[int, int, int]] = []
    dims: list[Any] = []
    for d, n in enumerate(t.shape):
        k = key[d] if d < len(key) else slice(None)
        if not isinstance(k, slice):
            spans.append((k, 1, 1))
            dims.append(None)
            continue
        r = range(*k.indices(n))
        if not r:
            spans.append((0, 0, 1))
            dims.append((1, False))
        elif r.step > 0:
            spans.append((r.start, len(r), r.step))
            dims.append((r.step, False))
        else:
            spans.append((r[-1], len(r), -r.step))
            dims.append((-r.step, True))
    return spans, dims


def _shown(key: tuple) -> str:
    """An index as ``safetensors`` shows it in its errors: ``[2:, 20]``."""
    def one(k: Any) -> str:
        if not isinstance(k, slice):
            return str(k)
        text = f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
        return text if k.step in (None, 1) else f"{text}:{k.step}"
    return "[" + ", ".join(one(k) for k in key) + "]"


def _checked(t: Tensor, key: Any) -> tuple:
    """``key`` as a tuple of slices and non-negative ints, one per dimension at most, checked
    against ``t``'s shape with ``safetensors``' errors and messages."""
    shape = list(t.shape)
    if isinstance(key, list):
        if key:
            raise SafetensorError("Non empty lists are not implemented")
        key = (slice(0, 0),)
    elif not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise SafetensorError("an index can only have a single ellipsis ('...')")
    if Ellipsis in key:
        i = next(n for n, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * max(len(shape) - len(key) + 1, 0) + key[i + 1:]
    out: list[Any] = []
    for pos, k in enumerate(key):
        if isinstance(k, slice):
            out.append(k)
            continue
        try:
            i = operator.index(k) if not isinstance(k, bool) else None
        except TypeError:
            i = None
        if i is None:
            raise SafetensorError(f"Unsupported slice index at position {pos}: expected slice, "
                                  f"int, or ellipsis")
        if pos < len(shape) and i < 0:
            if i + shape[pos] < 0:
                raise SliceError(f"Invalid index {i} for dimension {pos} of size {shape[pos]}")
            i += shape[pos]
        out.append(i)
    key = tuple(out)
    if len(key) > len(shape):
        raise SliceError(f"Error during slicing {_shown(key)} with shape {shape}: more slicing "
                         f"indexes than dimensions in tensor")
    for dim in reversed(range(len(key))):  # safetensors checks the last dimension first
        k, n = key[dim], shape[dim]
        if isinstance(k, slice):
            if k.step is not None and k.step < 0:
                continue  # NumPy's reversed slices: clipped, as NumPy does
            start, stop = (k.start or 0), (n if k.stop is None else k.stop)
            start, stop = (start + n if start < 0 else start), (stop + n if stop < 0 else stop)
            bad = stop - 1 if stop > n else start if n and start >= n else None
        else:
            bad = k if k >= n else None
        if bad is not None:
            raise SliceError(f"Error during slicing {_shown(key)} with shape {shape}: index {bad} "
                             f"out of bounds for tensor dimension #{dim} of size {n}")
    return key


def _row_range(t: Tensor, key: tuple) -> tuple[tuple[int, int] | None, tuple]:
    """The first-dimension rows ``[lo, hi)`` that ``key`` touches, and ``key`` re-based on
    them; None: read everything (scalars, sub-byte types, negative steps, fancy indexing)."""
    if not t.shape or t.dtype in BITS or not key:
        return None, key
    k0, n = key[0], t.shape[0]
    if isinstance(k0, slice):
        start, stop, step = k0.indices(n)
        if step < 0:
            return None, key
        count = len(range(start, stop, step))
        if count == 0:
            return (0, 0), (slice(0, 0),) + key[1:]
        hi = start + (count - 1) * step + 1
        return (start, hi), (slice(0, hi - start, step),) + key[1:]
    try:
        i = operator.index(k0)
    except TypeError:
        return None, key
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for dimension 0 of tensor {t.name!r} "
                         f"with size {n}")
    i %= n
    return (i, i + 1), (0,) + key[1:]


class _NoSuchFile(_native.FileNotFoundError):
    """The file to open does not exist: ``FileNotFoundError`` (errno, ``filename``) with
    ``safetensors``' message."""

    def __str__(self) -> str:
        return f"No such file or directory: {self.filename}"


_BACKENDS = ("mmap", "pread")


class safe_open:  # noqa: N801 - safetensors' name
    """A checkpoint opened for reading tensors one by one (``safetensors.safe_open``: its
    signature, methods, errors and messages).

    Works on one file, an index or a directory (``metadata()`` is the first file's), by path or
    URL. Every read goes through gpufile's engine straight into the device's memory.

    Parameters
    ----------
    filename
        The file (or index, or directory).
    framework
        ``"pt"``, ``"numpy"`` (``"np"``), ``"cupy"`` or ``"flax"`` (``"jax"``).
    device
        ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``N``, a ``torch.device`` or a ``jax.Device``.
    backend
        ``"mmap"`` or ``"pread"``: accepted for ``safetensors``' signature; gpufile reads with
        its engine either way (no memory map).

    Raises
    ------
    FileNotFoundError
        ``"No such file or directory: FILENAME"``.
    SafetensorError
        A file that breaks the format; a framework, device or backend that is not one of the
        above (``SafetensorError`` is a ``ValueError``).
    OSError, ImportError
        As :func:`load_checkpoint`; the headers are read and validated here.
    """

    def __init__(self, filename: PathArg, framework: str = "pt",
                 device: DeviceLike = "cpu", *, backend: str = "mmap") -> None:
        self._ck: Checkpoint | None = None
        self._handles: list[CuFile | None] = []
        if backend not in _BACKENDS:
            raise SafetensorError(f'backend "{backend}" is invalid (expected one of: "mmap", '
                                  f'"pread")')
        try:
            self._fw = Framework(framework)
            self._dev = device_number(device)
            self._fw.check_device(self._dev)
        except ValueError as e:
            raise SafetensorError(str(e)) from None
        try:
            ck = Checkpoint(filename)
        except FileNotFoundError as e:
            if _native.is_url(filename) or e.filename != os.fsdecode(filename):
                raise
            raise _NoSuchFile(e.errno, e.strerror, e.filename) from None
        self._ck = ck
        self._handles = [None] * len(ck.files)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the files; every later call raises ``SafetensorError("File is closed")`` (as
        after ``safetensors``' ``with`` block)."""
        for h in self._handles:
            if h is not None:
                h.close()
        self._handles = [None] * len(self._handles)
        self._ck = None

    def _open(self) -> Checkpoint:
        if self._ck is None:
            raise SafetensorError("File is closed")
        return self._ck

    def keys(self) -> list[str]:
        """Tensor names, sorted (as ``safetensors`` does)."""
        return sorted(self._open().by_name)

    def offset_keys(self) -> list[str]:
        """Tensor names in file order, then offset order."""
        return [t.name for t in self._open().tensors]

    def metadata(self) -> dict[str, str] | None:
        """The file's ``__metadata__`` (the first file's for a checkpoint of several)."""
        ck = self._open()
        return ck.native.metadata(0) if ck.files else None

    def get_tensor(self, name: str) -> Any:
        """The tensor ``name``, read now into memory of its own.

        Raises
        ------
        SafetensorError
            ``"File does not contain tensor NAME"`` (also a ``KeyError``).
        """
        return self._read(self._open().get(name), None, None)

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, in offset order, each in memory of its own: one plan, every range read
        as one stream of requests (``load_file``'s path)."""
        from ._load import tensors_of
        return tensors_of(self._open(), self._dev, self._fw.name)

    def get_slice(self, name: str) -> Slice:
        """A lazily read view of tensor ``name``: ``get_shape()``, ``get_dtype()``, ``[...]``."""
        ck = self._open()
        return Slice(self, ck, ck.get(name))

    @contextlib.contextmanager
    def _file(self, ck: Checkpoint, i: int) -> Iterator[CuFile]:
        """File ``i`` of ``ck``: the handle kept open while this is; after ``close()`` (a
        slice read later, as ``safetensors`` allows) one opened for this read only."""
        if self._ck is not ck:
            h = ck.open_file(i)
            try:
                yield h
            finally:
                h.close()
            return
        h = self._handles[i]
        if h is None:
            h = self._handles[i] = ck.open_file(i)
        yield h

    def _read_block(self, t: Tensor, spans: list[tuple[int, int, int]], dims: list[Any],
                    ck: Checkpoint) -> Any:
        """The block ``spans`` of ``t`` read by the core (one request of its ranges) into memory
        of its own, then what ``dims`` leave to do: ints dropped (a view), a covered step kept,
        reversed slices flipped (a copy)."""
        fw = self._fw
        dtype = fw.dtype(t, ck.files[t.file])
        total, _, shapes = ck.native.plan_parts([t.index], [spans])
        part = shaped(t, shapes[0], dtype.itemsize)
        fw.check_shape(part, dtype, ck.files[t.file])
        buf = fw.empty(total, self._dev)
        if total:
            ck.native.load([([t.index], fw.io_target(buf))], [[spans]])
        out = fw.view(buf, 0, part, dtype)
        key: list[Any] = []
        flip: list[int] = []
        for d, (want, how) in enumerate(zip(spans, dims)):
            if how is None:
                key.append(0)
                continue
            step = how[0] if part.shape[d] != want[1] else 1  # a step the read covered
            if how[1]:
                flip.append(sum(h is not None for h in dims[:d]))
            key.append(slice(None, None, step))
        out = out[tuple(key)]
        if not flip and all(k == 0 or k.step == 1 for k in key):
            return out
        if fw.name == "pt":
            return (out.flip(flip) if flip else out).clone(
                memory_format=fw.mod.contiguous_format)
        for d in flip:
            out = fw.mod.flip(out, d)
        return fw.mod.array(out, order="C")

    def _read(self, t: Tensor, rows: tuple[int, int] | None, key: tuple | None,
              ck: Checkpoint | None = None) -> Any:
        fw = self._fw
        ck = self._open() if ck is None else ck
        dtype = fw.dtype(t, ck.files[t.file])
        if rows is None:
            part, offset, nbytes = t, t.offset, t.nbytes
        else:
            row_bytes = t.nbytes // t.shape[0] if t.shape[0] else 0
            lo, hi = rows
            offset, nbytes = t.offset + lo * row_bytes, (hi - lo) * row_bytes
            part = Tensor((t.name, t.file, t.dtype, (hi - lo,) + t.shape[1:], offset, nbytes),
                           t.index)
        fw.check_shape(part, dtype, ck.files[t.file])
        if fw.name == "flax":
            # A JAX array of its own; indexing it makes another (JAX has no views).
            with self._file(ck, t.file) as f:
                out = read_groups(fw.mod, {self._dev: [(part, f, dtype)]})
            return out[self._dev][0] if key is None else out[self._dev][0][key]
        buf = fw.empty(nbytes, self._dev)
        if nbytes:
            with self._file(ck, t.file) as f:
                f.read(fw.io_target(buf), nbytes, offset)
        out = fw.view(buf, 0, part, dtype)
        if key is None:
            return out
        # A copy of its own, C-ordered (a 0-d array for an index of every dimension), that does
        # not keep the rows read for it alive.
        out = out[key]
        if fw.name == "pt":
            return out.clone(memory_format=fw.mod.contiguous_format)
        return fw.mod.array(out, order="C")
