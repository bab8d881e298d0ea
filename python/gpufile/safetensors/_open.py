"""``safe_open``: a checkpoint opened for reading tensors one by one, and slices of them."""

from __future__ import annotations

import operator
from typing import Any

from ..cufile import CuFile
from ._checkpoint import Checkpoint, PathArg, Tensor
from ._frameworks import BITS, DeviceLike, Framework, device_number
from ._jax import read_groups


class Slice:
    """``safe_open(...).get_slice(name)``: shape and dtype without reading, and ``[...]`` to
    read part of the tensor."""

    def __init__(self, handle: "safe_open", t: Tensor) -> None:
        self._h = handle
        self._t = t

    def get_shape(self) -> list[int]:
        """The full tensor's shape."""
        return list(self._t.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype name ("BF16")."""
        return self._t.dtype

    def __getitem__(self, key: Any) -> Any:
        """Indexes like NumPy (ints, slices with steps, ``...``). Only the rows of the first
        dimension that the index touches are read; the result owns its memory."""
        t = self._t
        key = key if isinstance(key, tuple) else (key,)
        rows, key = _row_range(t, key)
        return self._h._read(t, rows, key)


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


class safe_open:  # noqa: N801 - safetensors' name
    """A checkpoint opened for reading tensors one by one (``safetensors.safe_open``).

    Works on one file, an index or a directory (``metadata()`` is the first file's).

    Parameters
    ----------
    filename
        The file (or index, or directory).
    framework
        ``"pt"``, ``"numpy"``, ``"cupy"`` or ``"flax"`` (``"jax"``).
    device
        ``"cpu"``, ``"cuda:N"``, ``N``, a ``torch.device`` or a ``jax.Device``.

    Raises
    ------
    SafetensorError, OSError, ValueError, ImportError
        As :func:`load_checkpoint`; the headers are read and validated here.
    """

    def __init__(self, filename: PathArg, framework: str = "pt",
                 device: DeviceLike = "cpu") -> None:
        self._fw = Framework(framework)
        self._dev = device_number(device)
        self._fw.check_device(self._dev)
        self._ck = Checkpoint(filename)
        self._handles: list[CuFile | None] = [None] * len(self._ck.files)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the files (a closed handle reopens them on the next read)."""
        for i, h in enumerate(self._handles):
            if h is not None:
                h.close()
                self._handles[i] = None

    def keys(self) -> list[str]:
        """Tensor names, sorted (as ``safetensors`` does)."""
        return sorted(self._ck.by_name)

    def offset_keys(self) -> list[str]:
        """Tensor names in file order, then offset order."""
        return [t.name for t in self._ck.tensors]

    def metadata(self) -> dict[str, str] | None:
        """The file's ``__metadata__`` (the first file's for a checkpoint of several)."""
        return self._ck.native.metadata(0) if self._ck.files else None

    def get_tensor(self, name: str) -> Any:
        """The tensor ``name``, read now into memory of its own.

        Raises
        ------
        KeyError
            No tensor of that name.
        """
        return self._read(self._ck.get(name), None, None)

    def get_slice(self, name: str) -> Slice:
        """A lazily read view of tensor ``name``: ``get_shape()``, ``get_dtype()``, ``[...]``."""
        return Slice(self, self._ck.get(name))

    def _file(self, i: int) -> CuFile:
        h = self._handles[i]
        if h is None:
            h = self._handles[i] = self._ck.open_file(i)
        return h

    def _read(self, t: Tensor, rows: tuple[int, int] | None, key: tuple | None) -> Any:
        fw = self._fw
        dtype = fw.dtype(t, self._ck.files[t.file])
        if rows is None:
            part, offset, nbytes = t, t.offset, t.nbytes
        else:
            row_bytes = t.nbytes // t.shape[0] if t.shape[0] else 0
            lo, hi = rows
            offset, nbytes = t.offset + lo * row_bytes, (hi - lo) * row_bytes
            part = Tensor((t.name, t.file, t.dtype, (hi - lo,) + t.shape[1:], offset, nbytes),
                           t.index)
        fw.check_shape(part, dtype, self._ck.files[t.file])
        if fw.name == "flax":
            # A JAX array of its own; indexing it makes another (JAX has no views).
            out = read_groups(fw.mod, {self._dev: [(part, self._file(t.file), dtype)]})
            return out[self._dev][0] if key is None else out[self._dev][0][key]
        buf = fw.empty(nbytes, self._dev)
        if nbytes:
            self._file(t.file).read(fw.io_target(buf), nbytes, offset)
        out = fw.view(buf, 0, part, dtype)
        if key is None:
            return out
        # A copy of its own, C-ordered (a 0-d array for an index of every dimension), that does
        # not keep the rows read for it alive.
        out = out[key]
        if fw.name == "pt":
            return out.clone(memory_format=fw.mod.contiguous_format)
        return fw.mod.array(out, order="C")
